/* planner/uniform_pack.c — the start placements of uniform shares
 * (uniform.c): min-max counts or counts aimed at a load, packed heaviest
 * replica first onto the least-loaded GPU, and the grouped packing that
 * keeps groups on nodes. Apart from uniform.c so that both stay within the
 * size limit. */
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Min-max counts of experts ids[0..n) over GPUs [g0, g0+ng), packed
 * heaviest replica first onto the least-loaded GPU with a free slot,
 * preferring one without a copy of the expert. */
eplb_status_t eplb__uniform_pack(const eplb__layer_ctx_t *ctx, const uint32_t *ids, uint32_t n,
                                 uint32_t g0, uint32_t ng, const uint32_t *counts, int32_t *p2l,
                                 double *max_load) {
  const uint32_t *gf = ctx->gpu_first;
  uint32_t nslots = gf[g0 + ng] - gf[g0];
  eplb_status_t st = EPLB_OK;
  uint32_t *cnt = eplb__malloc_array(n, sizeof *cnt);
  uint32_t *work = eplb__malloc_array((size_t)n + 5 * (size_t)ng, sizeof *work);
  uint32_t *put = work + n + 2 * (size_t)ng;
  eplb__ranked_t *reps = eplb__malloc_array(nslots, sizeof *reps);
  double *load = eplb__calloc(ng, sizeof *load);
  if (!cnt || !work || !reps || !load) {
    st = eplb__error(EPLB_ENOMEM, "planner", "uniform: out of memory");
    goto done;
  }
  if (counts)
    memcpy(cnt, counts, n * sizeof *cnt);
  else
    eplb__replicate(ctx->w, ids, n, nslots, cnt, work);
  uint32_t k = eplb__ranked_replicas(ctx->w, ids, n, cnt, reps);
  uint32_t *used = work + n, *mark = used + ng, nput = 0;
  eplb__gpu_heap_t hp;
  eplb__gpu_heap_init(&hp, load, put + ng, put + 2 * (size_t)ng, ng);
  for (uint32_t h = 0; h < ng; h++) {
    used[h] = mark[h] = 0;
    if (ctx->slots_per_gpu[g0 + h])
      eplb__gpu_heap_push(&hp, h);
  }
  for (uint32_t j = 0; j < k; j++) {
    /* The least-loaded GPU with a free slot (ties: lowest index) that has
     * no replica of e yet; replicas of e are consecutive, so the GPUs set
     * aside go back once it is placed. */
    uint32_t e = reps[j].i, best = UINT32_MAX;
    while (hp.n && best == UINT32_MAX) {
      uint32_t h = eplb__gpu_heap_pop(&hp);
      if (mark[h] == e + 1)
        put[nput++] = h;
      else
        best = h;
    }
    if (best == UINT32_MAX) { /* more replicas than GPUs: the descent separates them */
      uint32_t b = 0;
      for (uint32_t i = 1; i < nput; i++)
        b = eplb__gpu_heap_less(load, put[i], put[b]) ? i : b;
      best = put[b];
      put[b] = put[--nput];
    }
    mark[best] = e + 1;
    p2l[gf[g0 + best] + used[best]++] = (int32_t)e;
    load[best] += reps[j].v;
    if (used[best] < ctx->slots_per_gpu[g0 + best])
      eplb__gpu_heap_push(&hp, best);
    if (j + 1 == k || reps[j + 1].i != e)
      while (nput)
        eplb__gpu_heap_push(&hp, put[--nput]);
  }
  *max_load = 0;
  for (uint32_t h = 0; h < ng; h++)
    *max_load = load[h] > *max_load ? load[h] : *max_load;
done:
  eplb__free(cnt);
  eplb__free(work);
  eplb__free(reps);
  eplb__free(load);
  return st;
}

/* Counts aimed at max load L: every replica within L (c >= ceil(w/L)),
 * then spare slots first to split replicas above L/2 while they outnumber
 * the GPUs (two on one GPU exceed L; min-max counts alone leave too many of
 * them on skewed loads), most of them per slot first; with how & 2 next to
 * replicas too large to leave room for their GPU's other replicas; the rest
 * each to the heaviest replica (how & 1: the lightest, where spreading the
 * heavy ones further would only take GPUs the large replicas need: a
 * lognormal layer min-max counts put at 1.41 x its bound plans at 1.007
 * this way). false:
 * L is below what the slots allow, or the spare slots are too many for a
 * linear scan each (counts are no issue there). */
static bool counts_for(const eplb__layer_ctx_t *ctx, double L, unsigned how, uint32_t *cnt) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  const double *w = ctx->w;
  uint64_t used = 0, big = 0;
  for (uint32_t e = 0; e < E; e++) {
    double q = ceil(w[e] / L);
    cnt[e] = q > 1 ? (q < (double)R ? (uint32_t)q : R) : 1;
    used += cnt[e];
    big += w[e] / cnt[e] > L / 2 ? cnt[e] : 0;
  }
  /* Each spare slot below scans the experts: past 2^24 steps in all the
   * aim is dropped (such layers have spare slots to spare). */
  if (used > R || (R - used) * (uint64_t)E > (1u << 24))
    return false;
  uint32_t left = (uint32_t)(R - used);
  while (big > G && left > 0) {
    uint32_t best = UINT32_MAX, need = 0;
    for (uint32_t e = 0; e < E; e++) {
      if (!(w[e] / cnt[e] > L / 2))
        continue;
      double c2 = floor(2 * w[e] / L) + 1; /* at least cnt + 1 but for rounding */
      c2 = c2 > cnt[e] ? c2 : cnt[e] + 1.0;
      if (c2 - cnt[e] > left)
        continue;
      uint32_t n = (uint32_t)c2 - cnt[e];
      /* most big replicas removed per slot: cnt / n */
      if (best == UINT32_MAX || (uint64_t)cnt[e] * need > (uint64_t)cnt[best] * n) {
        best = e;
        need = n;
      }
    }
    if (best == UINT32_MAX)
      break;
    big -= cnt[best];
    cnt[best] += need;
    left -= need;
  }
  /* A GPU holds R/G replicas on average, so a replica within (R/G - 1) x
   * the mean small replica of L leaves no room for its GPU's others: split
   * the largest such further while slots last. */
  double small = 0, room;
  uint64_t nsmall = 0;
  for (uint32_t e = 0; e < E; e++)
    if (!(w[e] / cnt[e] > L / 2)) {
      small += w[e];
      nsmall += cnt[e];
    }
  room = how & 2 && nsmall ? ((double)R / G - 1) * small / (double)nsmall : 0;
  for (; left > 0 && room > 0; left--) {
    uint32_t top = 0;
    for (uint32_t e = 1; e < E; e++)
      if (w[e] * cnt[top] > w[top] * cnt[e])
        top = e;
    if (!(w[top] / cnt[top] > L - room))
      break;
    cnt[top]++;
  }
  for (; left > 0; left--) {
    uint32_t top = 0;
    for (uint32_t e = 1; e < E; e++)
      if (how & 1 ? w[e] * cnt[top] < w[top] * cnt[e] : w[e] * cnt[top] > w[top] * cnt[e])
        top = e;
    cnt[top]++;
  }
  return true;
}

/* Global plans: counts aimed at a few loads from the bound up, each packed
 * heaviest first; the best packing is a start of its own. ids [E] and
 * cnt [E], tmp [R] are scratch. *ok: some aim fitted the slots. */
eplb_status_t eplb__uniform_count_start(const eplb__layer_ctx_t *ctx, uint32_t *ids, uint32_t *cnt,
                                        int32_t *tmp, int32_t *p2l, bool *ok) {
  /* Measured on skewed layers: the winning packings come from these aims
   * and rules (room then heavy never won). */
  static const double aim[] = {1, 1.005, 1.01, 1.02, 1.035, 1.1, 1.15, 1.2, 1.3, 1.5};
  static const unsigned how[] = {0, 1, 3};
  uint32_t E = ctx->num_experts, R = ctx->num_slots;
  double best = -1;
  *ok = false;
  /* A packing costs slots x GPUs: 30 of them stay within tens of ms. */
  if ((uint64_t)R * ctx->num_gpus > (1u << 20))
    return EPLB_OK;
  for (uint32_t e = 0; e < E; e++)
    ids[e] = e;
  for (size_t i = 0; i < 3 * (sizeof aim / sizeof aim[0]); i++) {
    if (!counts_for(ctx, ctx->lower_bound * aim[i / 3], how[i % 3], cnt))
      continue;
    double mx;
    eplb_status_t st = eplb__uniform_pack(ctx, ids, E, 0, ctx->num_gpus, cnt, tmp, &mx);
    if (st)
      return st;
    if (best < 0 || mx < best) {
      best = mx;
      memcpy(p2l, tmp, R * sizeof *p2l);
    }
  }
  *ok = best >= 0;
  return EPLB_OK;
}

/* Groups kept on nodes: the group-to-node assignment of the bound's search
 * (within its budget), then each node packed on its own. */
eplb_status_t eplb__uniform_pack_grouped(const eplb__layer_ctx_t *ctx, int32_t *p2l, bool *ok) {
  uint32_t K = ctx->num_groups, N = ctx->num_nodes, E = ctx->num_experts;
  uint32_t gs = E / K, gpn = ctx->num_gpus / N;
  eplb_status_t st = EPLB_OK;
  uint32_t *node_of = eplb__malloc_array(K, sizeof *node_of);
  uint32_t *ids = eplb__malloc_array(E, sizeof *ids);
  *ok = false;
  if (!node_of || !ids) {
    st = eplb__error(EPLB_ENOMEM, "planner", "uniform: out of memory");
    goto done;
  }
  bool exact;
  if (eplb__group_search(ctx, NULL, node_of, &exact) < 0)
    goto done;
  for (uint32_t n = 0; n < N && !st; n++) {
    uint32_t ne = 0, slots = ctx->gpu_first[(n + 1) * gpn] - ctx->gpu_first[n * gpn];
    for (uint32_t k = 0; k < K; k++)
      if (node_of[k] == n)
        for (uint32_t j = 0; j < gs; j++)
          ids[ne++] = k * gs + j;
    if (ne == 0 || ne > slots)
      goto done;
    double mx;
    st = eplb__uniform_pack(ctx, ids, ne, n * gpn, gpn, NULL, p2l, &mx);
  }
  *ok = !st;
done:
  eplb__free(node_of);
  eplb__free(ids);
  return st;
}
