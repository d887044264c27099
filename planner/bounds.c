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

int eplb__ranked_desc(const void *a, const void *b) {
  const eplb__ranked_t *x = a, *y = b;
  if (x->v != y->v)
    return x->v > y->v ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
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

typedef struct {
  const eplb__layer_ctx_t *ctx;
  uint32_t K, N, gs, gpn;
  double *gload;              /* [K] */
  uint32_t *order;            /* [K] groups by load, descending */
  uint32_t *node_of, *best;   /* [K] */
  uint32_t *ngroups, *cap;    /* [N] */
  double *cost;               /* [N] f of each node as assigned so far */
  uint32_t *ids, *cnt, *work; /* [E] scratch */
  double best_val;
  long budget;
  bool found;
} search_t;

static uint32_t node_slot_count(const search_t *s, uint32_t n) {
  return s->ctx->gpu_first[(n + 1) * s->gpn] - s->ctx->gpu_first[n * s->gpn];
}

/* f(n): no plan's busiest GPU of node n is below its mean load nor below
 * the min-max per-replica load of its experts over its slots. */
static double node_bound(search_t *s, uint32_t n) {
  uint32_t ne = 0;
  double load = 0;
  for (uint32_t k = 0; k < s->K; k++)
    if (s->node_of[k] == n) {
      load += s->gload[k];
      for (uint32_t j = 0; j < s->gs; j++)
        s->ids[ne++] = k * s->gs + j;
    }
  if (!ne)
    return 0;
  s->budget--;
  double rep = eplb__replicate(s->ctx->w, s->ids, ne, node_slot_count(s, n), s->cnt, s->work);
  load /= s->gpn;
  return rep > load ? rep : load;
}

static void dfs(search_t *s, uint32_t i, uint32_t empty, double curmax) {
  if (s->budget <= 0)
    return;
  if (i == s->K) {
    if (!empty && curmax < s->best_val) {
      s->best_val = curmax;
      memcpy(s->best, s->node_of, s->K * sizeof *s->best);
      s->found = true;
    }
    return;
  }
  uint32_t k = s->order[i];
  for (uint32_t n = 0; n < s->N; n++) {
    if (s->ngroups[n] >= s->cap[n])
      continue;
    if (!s->ngroups[n]) {
      /* Empty nodes with the same slots are interchangeable: try the first. */
      bool dup = false;
      for (uint32_t m = 0; m < n && !dup; m++)
        dup = !s->ngroups[m] && node_slot_count(s, m) == node_slot_count(s, n);
      if (dup)
        continue;
    }
    uint32_t e2 = empty - (s->ngroups[n] == 0);
    if (s->K - i - 1 < e2)
      continue; /* not enough groups left for the empty nodes */
    s->node_of[k] = n;
    double old = s->cost[n], c = node_bound(s, n);
    double m = c > curmax ? c : curmax;
    if (m < s->best_val) {
      s->ngroups[n]++;
      s->cost[n] = c;
      dfs(s, i + 1, e2, m);
      s->ngroups[n]--;
      s->cost[n] = old;
    }
    s->node_of[k] = UINT32_MAX;
  }
}

double eplb__group_search(const eplb__layer_ctx_t *ctx, const uint32_t *seed, uint32_t *out,
                          bool *exact) {
  uint32_t E = ctx->num_experts, K = ctx->num_groups, N = ctx->num_nodes;
  search_t s = {.ctx = ctx, .K = K, .N = N, .gs = E / K, .gpn = ctx->num_gpus / N};
  double result = -1;
  *exact = false;
  s.gload = eplb__calloc(K, sizeof *s.gload);
  s.cost = eplb__calloc(N, sizeof *s.cost);
  s.order = eplb__malloc_array((size_t)K * 3, sizeof *s.order);
  s.ngroups = eplb__calloc((size_t)N * 2, sizeof *s.ngroups);
  s.ids = eplb__malloc_array((size_t)E * 3, sizeof *s.ids);
  if (!s.gload || !s.cost || !s.order || !s.ngroups || !s.ids || K < N)
    goto done;
  s.node_of = s.order + K;
  s.best = s.node_of + K;
  s.cap = s.ngroups + N;
  s.cnt = s.ids + E;
  s.work = s.cnt + E;
  for (uint32_t k = 0; k < K; k++) {
    for (uint32_t j = 0; j < s.gs; j++)
      s.gload[k] += ctx->w[k * s.gs + j];
    s.order[k] = k;
    s.node_of[k] = UINT32_MAX;
  }
  for (uint32_t i = 1; i < K; i++) /* insertion sort, heaviest first */
    for (uint32_t j = i; j > 0 && s.gload[s.order[j - 1]] < s.gload[s.order[j]]; j--) {
      uint32_t t = s.order[j];
      s.order[j] = s.order[j - 1];
      s.order[j - 1] = t;
    }
  for (uint32_t n = 0; n < N; n++)
    s.cap[n] = node_slot_count(&s, n) / s.gs;
  s.best_val = INFINITY;
  if (seed) {
    /* The seed's value prunes the search; it stays the answer if nothing
     * beats it. */
    memcpy(s.node_of, seed, K * sizeof *seed);
    double v = 0;
    for (uint32_t n = 0; n < N; n++) {
      double c = node_bound(&s, n);
      v = c > v ? c : v;
    }
    s.best_val = v;
    memcpy(s.best, seed, K * sizeof *seed);
    s.found = true;
    for (uint32_t k = 0; k < K; k++)
      s.node_of[k] = UINT32_MAX;
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
  eplb__free(s.gload);
  eplb__free(s.cost);
  eplb__free(s.order);
  eplb__free(s.ngroups);
  eplb__free(s.ids);
  return result;
}
