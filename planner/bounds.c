/* planner/bounds.c — min-max replication and the per-layer lower bound. */
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Max-heap of positions by w/cnt; ties go to the fewer replicas, then the
 * lower position, so that the result is deterministic. */
static bool heap_above(const double *w, const uint32_t *ids, const uint32_t *cnt, uint32_t a,
                       uint32_t b) {
  double wa = w[ids ? ids[a] : a], wb = w[ids ? ids[b] : b];
  /* Compare wa/ca > wb/cb without division rounding. */
  double lhs = wa * cnt[b], rhs = wb * cnt[a];
  if (lhs != rhs)
    return lhs > rhs;
  if (cnt[a] != cnt[b]) /* spreads replicas of zero-load experts */
    return cnt[a] < cnt[b];
  return a < b;
}

static void sift_down(const double *w, const uint32_t *ids, const uint32_t *cnt, uint32_t *heap,
                      uint32_t n, uint32_t i) {
  for (;;) {
    uint32_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_above(w, ids, cnt, heap[l], heap[m]))
      m = l;
    if (r < n && heap_above(w, ids, cnt, heap[r], heap[m]))
      m = r;
    if (m == i)
      return;
    uint32_t t = heap[i];
    heap[i] = heap[m];
    heap[m] = t;
    i = m;
  }
}

double eplb__replicate(const double *w, const uint32_t *ids, uint32_t n, uint32_t slots,
                       uint32_t *cnt, uint32_t *work) {
  if (n == 0)
    return 0;
  for (uint32_t i = 0; i < n; i++) {
    cnt[i] = 1;
    work[i] = i;
  }
  for (uint32_t i = n / 2; i-- > 0;)
    sift_down(w, ids, cnt, work, n, i);
  /* Giving the next replica to the expert with the largest per-replica load
   * is optimal for min-max: the top of the heap is the only way to lower the
   * maximum. */
  for (uint32_t k = n; k < slots; k++) {
    cnt[work[0]]++;
    sift_down(w, ids, cnt, work, n, 0);
  }
  uint32_t top = work[0];
  return w[ids ? ids[top] : top] / cnt[top];
}

int eplb__load_scale(const double *w, uint32_t n) {
  double top = 0;
  for (uint32_t i = 0; i < n; i++)
    top = w[i] > top ? w[i] : top;
  /* Below 2^-900 a product with a share or a replica count can leave the
   * normal range; scaled, the largest load is about 1 and every product of
   * the planner's is exact to an ulp. */
  return top > 0 && top < 0x1p-900 ? -ilogb(top) : 0;
}

eplb_status_t eplb__check_layer_sums(const eplb_loads_t *loads, const char *what) {
  for (uint32_t l = 0; l < loads->num_layers; l++) {
    double total = 0;
    for (uint32_t e = 0; e < loads->num_experts; e++)
      total += loads->values[(size_t)l * loads->num_experts + e];
    if (!(total <= EPLB__MAX_LAYER_LOAD))
      return eplb__error(EPLB_EFORMAT, "planner",
                         "%s: layer %u: the loads sum to %g, over the limit of %g per layer", what,
                         l, total, EPLB__MAX_LAYER_LOAD);
  }
  return EPLB_OK;
}

int eplb__ranked_desc(const void *a, const void *b) {
  const eplb__ranked_t *x = a, *y = b;
  if (x->v != y->v)
    return x->v > y->v ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

uint32_t eplb__ranked_replicas(const double *w, const uint32_t *ids, uint32_t n,
                               const uint32_t *cnt, eplb__ranked_t *reps) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t c = 0; c < cnt[i]; c++)
      reps[k++] = (eplb__ranked_t){w[ids[i]] / cnt[i], ids[i]};
  qsort(reps, k, sizeof *reps, eplb__ranked_desc);
  return k;
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

double eplb__lower_bound(const eplb__layer_ctx_t *ctx) {
  uint32_t E = ctx->num_experts, G = ctx->num_gpus;
  double total = 0;
  for (uint32_t e = 0; e < E; e++)
    total += ctx->w[e];
  double lb = total / G;
  uint32_t *cnt = eplb__malloc_array(E, sizeof *cnt);
  uint32_t *work = eplb__malloc_array(E, sizeof *work);
  if (cnt && work) {
    double rep = eplb__replicate(ctx->w, NULL, E, ctx->num_slots, cnt, work);
    if (rep > lb)
      lb = rep;
  }
  eplb__free(cnt);
  eplb__free(work);
  if (ctx->num_slots == E && E > 1) {
    /* No spare slot: every expert has exactly one replica, every slot holds
     * a distinct expert with all its tokens, so the GPU of the heaviest
     * expert also carries its other S_g - 1 experts, at least the lightest. */
    double *sorted = eplb__malloc_array(E, sizeof *sorted);
    if (sorted) {
      memcpy(sorted, ctx->w, E * sizeof *sorted);
      qsort(sorted, E, sizeof *sorted, cmp_desc);
      double best = -1;
      for (uint32_t g = 0; g < G; g++) {
        uint32_t s = ctx->slots_per_gpu[g];
        double v = sorted[0];
        for (uint32_t k = 0; k + 1 < s && k + 1 < E; k++)
          v += sorted[E - 1 - k];
        if (best < 0 || v < best)
          best = v;
      }
      if (best > lb)
        lb = best;
      eplb__free(sorted);
    }
  }
  uint32_t K = ctx->num_groups, N = ctx->num_nodes;
  if (ctx->keep_groups && K > 1 && N >= 1) {
    double *g = eplb__malloc_array(K, sizeof *g);
    if (g) {
      uint32_t gs = E / K;
      for (uint32_t k = 0; k < K; k++) {
        g[k] = 0;
        for (uint32_t j = 0; j < gs; j++)
          g[k] += ctx->w[k * gs + j];
      }
      qsort(g, K, sizeof *g, cmp_desc);
      /* A node's GPUs serve all of every group on it; of the N+1 heaviest
       * groups two share a node. */
      double node = g[0];
      if (K > N && g[N - 1] + g[N] > node)
        node = g[N - 1] + g[N];
      double gb = node / (G / N);
      if (gb > lb)
        lb = gb;
      eplb__free(g);
    }
    bool exact = false;
    double sb = eplb__group_search(ctx, NULL, NULL, &exact);
    if (exact && sb > lb)
      lb = sb;
  }
  return lb;
}

/* ---- groups to nodes ----------------------------------------------------- */

bool eplb__groups_init(eplb__groups_t *g, const eplb__layer_ctx_t *ctx) {
  uint32_t E = ctx->num_experts, K = ctx->num_groups, N = ctx->num_nodes;
  *g = (eplb__groups_t){.ctx = ctx, .K = K, .N = N, .gs = E / K, .gpn = ctx->num_gpus / N};
  g->gload = eplb__calloc(K, sizeof *g->gload);
  g->order = eplb__malloc_array((size_t)K * 2, sizeof *g->order);
  g->ids = eplb__malloc_array((size_t)E * 3, sizeof *g->ids);
  if (!g->gload || !g->order || !g->ids) {
    eplb__groups_free(g);
    return false;
  }
  g->node_of = g->order + K;
  g->cnt = g->ids + E;
  g->work = g->cnt + E;
  for (uint32_t k = 0; k < K; k++) {
    for (uint32_t j = 0; j < g->gs; j++)
      g->gload[k] += ctx->w[k * g->gs + j];
    g->order[k] = k;
    g->node_of[k] = UINT32_MAX;
  }
  for (uint32_t i = 1; i < K; i++) /* insertion sort, heaviest first (stable: ties by index) */
    for (uint32_t j = i; j > 0 && g->gload[g->order[j - 1]] < g->gload[g->order[j]]; j--) {
      uint32_t t = g->order[j];
      g->order[j] = g->order[j - 1];
      g->order[j - 1] = t;
    }
  return true;
}

void eplb__groups_free(eplb__groups_t *g) {
  eplb__free(g->gload);
  eplb__free(g->order);
  eplb__free(g->ids);
  g->gload = NULL;
  g->order = g->node_of = NULL;
  g->ids = g->cnt = g->work = NULL;
}

uint32_t eplb__groups_node_slots(const eplb__groups_t *g, uint32_t n) {
  return g->ctx->gpu_first[(n + 1) * g->gpn] - g->ctx->gpu_first[n * g->gpn];
}

/* eplb__replicate's value for n items and n + k slots, k <= 30 and
 * k + 2 < n: an extra replica goes to the top of the heap, and while fewer
 * than k have been given, one of the k + 1 heaviest items (ties: lower
 * position) still has one replica and sits above every lighter one; the
 * (k + 2)-th heaviest stands for the rest at the end. So the heap of those
 * k + 2 items (positions in the same order) gives the same maximum, in
 * O(n k) instead of a heap of all n: the group searches evaluate node
 * bounds millions of times with a few spare slots each. */
static double replicate_top(const double *w, const uint32_t *ids, uint32_t n, uint32_t k,
                            uint32_t *cnt, uint32_t *work) {
  uint32_t sel[32], m = k + 2, ns = 0;
  for (uint32_t i = 0; i < n; i++) {
    double wi = w[ids[i]];
    if (ns == m && !(wi > w[sel[m - 1]]))
      continue;
    uint32_t j = ns < m ? ns++ : m - 1;
    for (; j > 0 && wi > w[sel[j - 1]]; j--)
      sel[j] = sel[j - 1];
    sel[j] = ids[i];
  }
  return eplb__replicate(w, sel, m, m + k, cnt, work);
}

double eplb__groups_node_bound(eplb__groups_t *g, uint32_t n) {
  uint32_t ne = 0;
  double load = 0;
  for (uint32_t k = 0; k < g->K; k++)
    if (g->node_of[k] == n) {
      load += g->gload[k];
      for (uint32_t j = 0; j < g->gs; j++)
        g->ids[ne++] = k * g->gs + j;
    }
  if (!ne)
    return 0;
  uint32_t slots = eplb__groups_node_slots(g, n);
  uint32_t k = slots > ne ? slots - ne : 0;
  double rep = k <= 30 && k + 2 < ne
                   ? replicate_top(g->ctx->w, g->ids, ne, k, g->cnt, g->work)
                   : eplb__replicate(g->ctx->w, g->ids, ne, slots, g->cnt, g->work);
  load /= g->gpn;
  return rep > load ? rep : load;
}

typedef struct {
  eplb__groups_t g;
  uint32_t *best;          /* [K] */
  uint32_t *ngroups, *cap; /* [N] */
  double *cost;            /* [N] f of each node as assigned so far */
  double best_val;
  long budget;
  bool found;
} search_t;

static void dfs(search_t *s, uint32_t i, uint32_t empty, double curmax) {
  eplb__groups_t *g = &s->g;
  if (s->budget <= 0)
    return;
  if (i == g->K) {
    if (!empty && curmax < s->best_val) {
      s->best_val = curmax;
      memcpy(s->best, g->node_of, g->K * sizeof *s->best);
      s->found = true;
    }
    return;
  }
  uint32_t k = g->order[i];
  for (uint32_t n = 0; n < g->N; n++) {
    if (s->ngroups[n] >= s->cap[n])
      continue;
    if (!s->ngroups[n]) {
      /* Empty nodes with the same slots are interchangeable: try the first. */
      bool dup = false;
      for (uint32_t m = 0; m < n && !dup; m++)
        dup = !s->ngroups[m] && eplb__groups_node_slots(g, m) == eplb__groups_node_slots(g, n);
      if (dup)
        continue;
    }
    uint32_t e2 = empty - (s->ngroups[n] == 0);
    if (g->K - i - 1 < e2)
      continue; /* not enough groups left for the empty nodes */
    g->node_of[k] = n;
    s->budget--; /* one bound of a node that holds group k */
    double old = s->cost[n], c = eplb__groups_node_bound(g, n);
    double m = c > curmax ? c : curmax;
    if (m < s->best_val) {
      s->ngroups[n]++;
      s->cost[n] = c;
      dfs(s, i + 1, e2, m);
      s->ngroups[n]--;
      s->cost[n] = old;
    }
    g->node_of[k] = UINT32_MAX;
  }
}

double eplb__group_search(const eplb__layer_ctx_t *ctx, const uint32_t *seed, uint32_t *out,
                          bool *exact) {
  uint32_t K = ctx->num_groups, N = ctx->num_nodes;
  search_t s = {0};
  double result = -1;
  *exact = false;
  bool have = eplb__groups_init(&s.g, ctx);
  s.cost = eplb__calloc(N, sizeof *s.cost);
  s.best = eplb__malloc_array(K, sizeof *s.best);
  s.ngroups = eplb__calloc((size_t)N * 2, sizeof *s.ngroups);
  if (!have || !s.cost || !s.best || !s.ngroups || K < N)
    goto done;
  s.cap = s.ngroups + N;
  for (uint32_t n = 0; n < N; n++)
    s.cap[n] = eplb__groups_node_slots(&s.g, n) / s.g.gs;
  s.best_val = INFINITY;
  if (seed) {
    /* The seed's value prunes the search; it stays the answer if nothing
     * beats it. */
    memcpy(s.g.node_of, seed, K * sizeof *seed);
    double v = 0;
    for (uint32_t n = 0; n < N; n++) {
      double c = eplb__groups_node_bound(&s.g, n);
      v = c > v ? c : v;
    }
    s.best_val = v;
    memcpy(s.best, seed, K * sizeof *seed);
    s.found = true;
    for (uint32_t k = 0; k < K; k++)
      s.g.node_of[k] = UINT32_MAX;
  }
  s.budget = 4000;
  dfs(&s, 0, N, 0);
  if (s.found) {
    result = s.best_val;
    *exact = s.budget > 0;
    if (out)
      memcpy(out, s.best, K * sizeof *out);
  }
done:
  eplb__groups_free(&s.g);
  eplb__free(s.cost);
  eplb__free(s.best);
  eplb__free(s.ngroups);
  return result;
}
