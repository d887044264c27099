/* planner/deepseek.c — a faithful port of DeepSeek EPLB's rebalance_experts
 * (github.com/deepseek-ai/EPLB, eplb.py). Arithmetic is float32 as in the
 * reference (weight.float()), so that ties and near-ties resolve the same
 * way: torch.max returns the first maximal index, Python's min() the first
 * minimal pack; sorts follow std::sort exactly (below). Were the order of
 * equal weights ever to differ, only slot order would change, never a
 * pack's weight: equal items are interchangeable. */
#include "planner/planner.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  float v;
  uint32_t i;
} keyed_t;

static int keyed_desc(const void *a, const void *b) {
  const keyed_t *x = a, *y = b;
  if (x->v != y->v)
    return x->v > y->v ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* The reference sorts with torch.sort(descending=True) on CPU, which runs
 * libstdc++'s std::sort (introsort: median-of-three quicksort down to runs
 * of 16, then insertion sort) on (value, index) pairs compared by value
 * only. Reproducing its exact steps reproduces the order of equal weights,
 * hence the reference's phy2log itself, not only its loads. */
static bool desc(const keyed_t *a, const keyed_t *b) { return a->v > b->v; }

static void swap_k(keyed_t *a, keyed_t *b) {
  keyed_t t = *a;
  *a = *b;
  *b = t;
}

static void median_to_first(keyed_t *result, keyed_t *a, keyed_t *b, keyed_t *c) {
  if (desc(a, b)) {
    if (desc(b, c))
      swap_k(result, b);
    else if (desc(a, c))
      swap_k(result, c);
    else
      swap_k(result, a);
  } else if (desc(a, c)) {
    swap_k(result, a);
  } else if (desc(b, c)) {
    swap_k(result, c);
  } else {
    swap_k(result, b);
  }
}

static keyed_t *unguarded_partition(keyed_t *first, keyed_t *last, const keyed_t *pivot) {
  for (;;) {
    while (desc(first, pivot))
      ++first;
    --last;
    while (desc(pivot, last))
      --last;
    if (!(first < last))
      return first;
    swap_k(first, last);
    ++first;
  }
}

static void unguarded_linear_insert(keyed_t *last) {
  keyed_t val = *last, *next = last - 1;
  while (desc(&val, next)) {
    *last = *next;
    last = next--;
  }
  *last = val;
}

static void insertion_sort(keyed_t *first, keyed_t *last) {
  if (first == last)
    return;
  for (keyed_t *i = first + 1; i != last; ++i) {
    if (desc(i, first)) {
      keyed_t val = *i;
      memmove(first + 1, first, (size_t)(i - first) * sizeof *first);
      *first = val;
    } else {
      unguarded_linear_insert(i);
    }
  }
}

static void introsort_loop(keyed_t *first, keyed_t *last, int depth) {
  while (last - first > 16) {
    if (depth == 0) {
      /* libstdc++ switches to heapsort here; only the order of equal
       * weights could differ from it, never the packing's loads. */
      qsort(first, (size_t)(last - first), sizeof *first, keyed_desc);
      return;
    }
    --depth;
    keyed_t *mid = first + (last - first) / 2;
    median_to_first(first, first + 1, mid, last - 1);
    keyed_t *cut = unguarded_partition(first + 1, last, first);
    introsort_loop(cut, last, depth);
    last = cut;
  }
}

static void std_sort(keyed_t *first, size_t n) {
  if (n < 2)
    return;
  int lg = 0;
  while ((n >> (lg + 1)) != 0)
    lg++;
  introsort_loop(first, first + n, 2 * lg);
  if (n > 16) {
    insertion_sort(first, first + 16);
    for (keyed_t *i = first + 16; i != first + n; ++i)
      unguarded_linear_insert(i);
  } else {
    insertion_sort(first, first + n);
  }
}

/* A min-heap of indices on (key, index): the reference's choices, the
 * smallest key and the first of equal ones, in O(log n) rather than a scan
 * of all n per pick (the scans were O(R G) packing and O(R E) replicating,
 * most of the balanced policy's guard at 1,024 GPUs). */
static bool key_less(const float *key, uint32_t a, uint32_t b) {
  return key[a] < key[b] || (key[a] == key[b] && a < b);
}

static void key_down(const float *key, uint32_t *heap, uint32_t n, uint32_t i) {
  uint32_t p = heap[i];
  for (;;) {
    uint32_t c = 2 * i + 1;
    if (c >= n)
      break;
    if (c + 1 < n && key_less(key, heap[c + 1], heap[c]))
      c++;
    if (!key_less(key, heap[c], p))
      break;
    heap[i] = heap[c];
    i = c;
  }
  heap[i] = p;
}

/* balanced_packing: n items of weight wt into n/per packs of `per` items;
 * pack[i], rank[i]. heap [packs] is scratch. */
static void balanced_packing(const float *wt, uint32_t n, uint32_t packs, uint32_t *pack,
                             uint32_t *rank, keyed_t *order, float *pw, uint32_t *pn,
                             uint32_t *heap) {
  uint32_t per = n / packs;
  if (per == 1) {
    for (uint32_t i = 0; i < n; i++) {
      pack[i] = i;
      rank[i] = 0;
    }
    return;
  }
  for (uint32_t i = 0; i < n; i++)
    order[i] = (keyed_t){wt[i], i};
  std_sort(order, n);
  for (uint32_t p = 0; p < packs; p++) {
    pw[p] = 0.0f;
    pn[p] = 0;
    heap[p] = p; /* all equal: index order is a heap */
  }
  uint32_t nh = packs;
  for (uint32_t k = 0; k < n && nh; k++) {
    uint32_t best = heap[0];
    uint32_t it = order[k].i;
    pack[it] = best;
    rank[it] = pn[best]++;
    pw[best] += wt[it];
    if (pn[best] >= per)
      heap[0] = heap[--nh];
    key_down(pw, heap, nh, 0);
  }
}

/* replicate_experts over n logical experts into m physical ones; prk[k] is
 * the reference's `rank`: how many replicas of its expert existed before
 * physical expert k was made (0 = the original). Each of the m - n extra
 * replicas goes to the expert with the largest wt / cnt (as float, the
 * reference's arithmetic), the first on a tie: the heap's least negated
 * load (negation is exact, so the order is the same). v [n] and heap [n]
 * are scratch. */
static void replicate(const float *wt, uint32_t n, uint32_t m, uint32_t *phy, uint32_t *cnt,
                      uint32_t *prk, float *v, uint32_t *heap) {
  for (uint32_t i = 0; i < n; i++) {
    phy[i] = i;
    cnt[i] = 1;
    prk[i] = 0;
    v[i] = -wt[i];
    heap[i] = i;
  }
  for (uint32_t i = n / 2; i-- > 0;)
    key_down(v, heap, n, i);
  for (uint32_t k = n; k < m; k++) {
    uint32_t best = heap[0];
    phy[k] = best;
    prk[k] = cnt[best]++;
    v[best] = -(wt[best] / (float)cnt[best]);
    key_down(v, heap, n, 0);
  }
}

eplb_status_t eplb__deepseek_layer(const eplb__layer_ctx_t *ctx, int32_t *phy2log) {
  return eplb__deepseek_layer_rank(ctx, phy2log, NULL);
}

eplb_status_t eplb__deepseek_layer_rank(const eplb__layer_ctx_t *ctx, int32_t *phy2log,
                                        uint32_t *replica_rank) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  uint32_t K = ctx->num_groups ? ctx->num_groups : 1, N = ctx->num_nodes ? ctx->num_nodes : 1;
  if (K % N != 0) { /* global policy: one group, one pseudo-node */
    K = 1;
    N = 1;
  }
  if (E % K || G % N || R % G || R < E)
    return eplb__error(EPLB_EINVAL, "planner", "deepseek: inconsistent shape E=%u R=%u G=%u", E, R,
                       G);
  uint32_t gs = E / K, gpn_groups = K / N, mpn = E / N, ppn = R / N, gpus_pn = G / N;
  uint32_t S = R / G;
  size_t big = (size_t)R + E + K;
  float *wf = eplb__malloc_array(E, sizeof *wf);
  float *tmpf = eplb__malloc_array(big, sizeof *tmpf);
  float *pw = eplb__malloc_array(big, sizeof *pw);
  keyed_t *order = eplb__malloc_array(big, sizeof *order);
  uint32_t *u = eplb__malloc_array(big * 8, sizeof *u); /* 3K + 4E + 7R words used below */
  eplb_status_t st = EPLB_OK;
  if (!wf || !tmpf || !pw || !order || !u) {
    st = eplb__error(EPLB_ENOMEM, "planner", "deepseek: out of memory");
    goto done;
  }
  uint32_t *gpack = u, *grank = gpack + K, *log2mlog = grank + K, *mlog2log = log2mlog + E;
  uint32_t *phy2mlog = mlog2log + E, *mlogcnt = phy2mlog + R, *pack = mlogcnt + E;
  uint32_t *rank = pack + R, *pn = rank + R, *pphy2phy = pn + big, *prk = pphy2phy + R;
  for (uint32_t e = 0; e < E; e++)
    wf[e] = (float)ctx->w[e];
  /* Step 1: pack groups to nodes. */
  for (uint32_t k = 0; k < K; k++) {
    double s = 0;
    for (uint32_t j = 0; j < gs; j++)
      s += wf[k * gs + j];
    tmpf[k] = (float)s;
  }
  balanced_packing(tmpf, K, N, gpack, grank, order, pw, pn, prk + R);
  for (uint32_t e = 0; e < E; e++) {
    uint32_t k = e / gs;
    log2mlog[e] = (gpack[k] * gpn_groups + grank[k]) * gs + e % gs;
    mlog2log[log2mlog[e]] = e;
  }
  for (uint32_t n = 0; n < N; n++) {
    /* Step 2: replicate within the node. */
    float *tw = tmpf;
    for (uint32_t j = 0; j < mpn; j++)
      tw[j] = wf[mlog2log[n * mpn + j]];
    uint32_t *p2m = phy2mlog + (size_t)n * ppn, *mc = mlogcnt + (size_t)n * mpn;
    replicate(tw, mpn, ppn, p2m, mc, prk, pw, pn); /* pw, pn: the packing's, free here */
    /* Step 3: pack the node's physical experts to its GPUs. */
    float *tp = tmpf + mpn;
    for (uint32_t i = 0; i < ppn; i++)
      tp[i] = tw[p2m[i]] / (float)mc[p2m[i]];
    balanced_packing(tp, ppn, gpus_pn, pack, rank, order, pw, pn, prk + R);
    for (uint32_t i = 0; i < ppn; i++)
      pphy2phy[pack[i] * S + rank[i]] = i;
    for (uint32_t p = 0; p < ppn; p++) {
      phy2log[(size_t)n * ppn + p] = (int32_t)mlog2log[p2m[pphy2phy[p]] + n * mpn];
      if (replica_rank) /* pphyrank: the rank travels with its physical expert */
        replica_rank[(size_t)n * ppn + p] = prk[pphy2phy[p]];
    }
  }
done:
  eplb__free(wf);
  eplb__free(tmpf);
  eplb__free(pw);
  eplb__free(order);
  eplb__free(u);
  return st;
}
