/* planner/bounds.c — min-max replication and the per-layer lower bound. */
#include "planner/planner.h"

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
  }
  return lb;
}
