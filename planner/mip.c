/* planner/mip.c — the mip policy on one layer: the placement MIP of
 * lp/mip_place.c, warm-started from the balanced plan. Under keep_groups the
 * MIP keeps balanced's group-to-node assignment (it optimises placement and
 * replication within nodes). Without spare slots (R == E, groups free) an
 * exact partition search (planner/partition.c) runs first, and a proven
 * optimum skips the MIP. */
#include "lp/lp.h"
#include "planner/planner.h"

#include <math.h>
#include <string.h>

/* With one slot per expert the layer is a pure makespan problem (S_g experts
 * per GPU) whose LP relaxation is too weak for the MIP: the exact search of
 * planner/partition.c proves it instead. Should that run out of time, its
 * incumbent is improved by swaps of one or two experts between two GPUs that
 * even out their loads (each strictly lowers the sum of squared GPU loads,
 * so this ends), which for realistic loads reach ceil(total / G) or the
 * max-expert bound, where the integral T of lp/mip_place.c proves it. */
typedef struct {
  double d;            /* load moved from g to h */
  uint32_t a[2], b[2]; /* slots swapped (a[1]/b[1] = UINT32_MAX when one) */
} swap_t;

/* Best swap of up to two experts each way between GPUs g and h (gap =
 * load g - load h > 0): the one whose d is nearest gap / 2 with 0 < d < gap. */
static int best_swap(const eplb__layer_ctx_t *ctx, const int32_t *p2l, uint32_t g, uint32_t h,
                     double gap, swap_t *out) {
  const double *w = ctx->w;
  uint32_t g0 = ctx->gpu_first[g], g1 = ctx->gpu_first[g + 1];
  uint32_t h0 = ctx->gpu_first[h], h1 = ctx->gpu_first[h + 1];
  double best = gap / 2;
  int found = 0;
  for (uint32_t a = g0; a < g1; a++)
    for (uint32_t a2 = a; a2 < g1; a2++)
      for (uint32_t b = h0; b < h1; b++)
        for (uint32_t b2 = b; b2 < h1; b2++) {
          int pair = a2 > a;
          if (pair != (b2 > b))
            continue; /* same count each way keeps every GPU's slot count */
          double d = w[p2l[a]] - w[p2l[b]] + (pair ? w[p2l[a2]] - w[p2l[b2]] : 0);
          if (d > 0 && d < gap && fabs(d - gap / 2) < best) {
            best = fabs(d - gap / 2);
            *out = (swap_t){d, {a, pair ? a2 : UINT32_MAX}, {b, pair ? b2 : UINT32_MAX}};
            found = 1;
          }
        }
  return found;
}

/* Swaps until no pair of GPUs can be evened out or the deadline (0: none)
 * passes; returns the max GPU load. */
static double descend(const eplb__layer_ctx_t *ctx, int32_t *p2l, double *load, double deadline) {
  uint32_t G = ctx->num_gpus;
  for (int improved = 1, rounds = 0; improved && rounds < 1000; rounds++) {
    /* A round is O(G^2 S^4): at hundreds of GPUs it is the unit to check. */
    if (deadline > 0 && rounds > 0 && eplb__now() > deadline)
      break;
    improved = 0;
    for (uint32_t g = 0; g < G; g++)
      for (uint32_t h = 0; h < G; h++) {
        swap_t sw;
        if (!(load[g] > load[h]) || !best_swap(ctx, p2l, g, h, load[g] - load[h], &sw))
          continue;
        for (int i = 0; i < 2 && sw.a[i] != UINT32_MAX; i++) {
          int32_t t = p2l[sw.a[i]];
          p2l[sw.a[i]] = p2l[sw.b[i]], p2l[sw.b[i]] = t;
        }
        load[g] -= sw.d, load[h] += sw.d;
        improved = 1;
      }
  }
  double mx = 0;
  for (uint32_t g = 0; g < G; g++)
    mx = load[g] > mx ? load[g] : mx;
  return mx;
}

/* Iterated local search: descend, then kick the best placement with a few
 * random swaps and descend again, until the max reaches `target` (a lower
 * bound), the kicks run out or the deadline (eplb__now(); 0: none) passes.
 * Deterministic (fixed seed) but for the deadline. */
static void even_out_by_swaps(const eplb__layer_ctx_t *ctx, int32_t *p2l, double target,
                              double deadline) {
  uint32_t G = ctx->num_gpus, R = ctx->num_slots;
  double *load = eplb__calloc(G, sizeof *load);
  int32_t *cur = eplb__malloc_array(R, sizeof *cur);
  if (!load || !cur)
    goto done; /* only a warm start: the MIP still runs */
  for (uint32_t g = 0; g < G; g++)
    for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
      load[g] += ctx->w[p2l[r]];
  double best = descend(ctx, p2l, load, deadline);
  eplb__rng_t rng;
  eplb__rng_seed(&rng, 0x5eed);
  for (int kick = 0; kick < 4000 && best > target; kick++) {
    if (deadline > 0 && eplb__now() > deadline)
      break;
    memcpy(cur, p2l, R * sizeof *cur);
    for (int j = 0; j < 3; j++) {
      uint32_t a = (uint32_t)eplb__rng_below(&rng, R), b = (uint32_t)eplb__rng_below(&rng, R);
      int32_t t = cur[a];
      cur[a] = cur[b], cur[b] = t;
    }
    memset(load, 0, G * sizeof *load);
    for (uint32_t g = 0; g < G; g++)
      for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
        load[g] += ctx->w[cur[r]];
    double mx = descend(ctx, cur, load, deadline);
    if (mx < best) {
      best = mx;
      memcpy(p2l, cur, R * sizeof *cur);
    }
  }
done:
  eplb__free(load);
  eplb__free(cur);
}

eplb_status_t eplb__mip_layer(const eplb__layer_ctx_t *ctx, double deadline, int32_t *phy2log,
                              double *share, double *gap) {
  uint32_t E = ctx->num_experts, G = ctx->num_gpus, R = ctx->num_slots;
  uint32_t N = ctx->num_nodes ? ctx->num_nodes : 1, gpn = G / N;
  uint32_t K = ctx->num_groups ? ctx->num_groups : 1, gs = E / K;
  *gap = 0;
  eplb_status_t st = EPLB_OK;
  uint8_t *allowed = NULL;
  uint32_t *cls = eplb__malloc_array(G, sizeof *cls);
  int32_t *p2l = eplb__malloc_array(R, sizeof *p2l);
  double *sh = eplb__malloc_array(R, sizeof *sh);
  if (!cls || !p2l || !sh) {
    st = eplb__error(EPLB_ENOMEM, "planner", "mip: out of memory");
    goto done;
  }
  bool grouped = ctx->keep_groups && K > 1;
  for (uint32_t g = 0; g < G; g++)
    cls[g] = ctx->slots_per_gpu[g] * (grouped ? N : 1) + (grouped ? g / gpn : 0);
  if (grouped) {
    allowed = eplb__calloc((size_t)E * G, 1);
    if (!allowed) {
      st = eplb__error(EPLB_ENOMEM, "planner", "mip: out of memory");
      goto done;
    }
    for (uint32_t g = 0; g < G; g++)
      for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++) {
        uint32_t k = (uint32_t)phy2log[r] / gs, n = g / gpn;
        for (uint32_t j = 0; j < gs; j++)
          for (uint32_t h = n * gpn; h < (n + 1) * gpn; h++)
            allowed[(size_t)(k * gs + j) * G + h] = 1;
      }
  }
  eplb__mip_place_problem_t pb = {.num_experts = E,
                                  .num_gpus = G,
                                  .loads = ctx->w,
                                  .slots_per_gpu = ctx->slots_per_gpu,
                                  .allowed = allowed,
                                  .gpu_class = cls,
                                  .lower_bound = ctx->lower_bound,
                                  .deadline = deadline};
  /* What is left of the layer's time (balanced ran first); a passed deadline
   * still gives each search a moment, never "no limit". */
  double time_limit = deadline > 0 ? fmax(deadline - eplb__now(), 1e-3) : 0;
  memcpy(p2l, phy2log, R * sizeof *p2l);
  memcpy(sh, share, R * sizeof *sh);
  /* Balanced already at the certificate: proven, nothing to search. */
  double lb0 = ctx->lower_bound, start = eplb__layer_max_load(ctx, phy2log, share, NULL);
  if (start <= lb0 * (1 + 1e-12))
    goto done;
  if (R == E && !grouped) {
    /* Integral loads put every GPU load on an integer: the bound rounds up. */
    bool integral = true;
    for (uint32_t e = 0; e < E; e++)
      integral &= ctx->w[e] == floor(ctx->w[e]);
    double lb = pb.lower_bound, t0 = eplb__now(), best = 0;
    bool proven = false;
    /* The exact search proves the optimum where the MIP's bound cannot:
     * first from balanced's plan; failing that, again from the swaps'
     * plan, within half the time in all; the MIP (which may still close
     * it) gets the rest. Shares stay 1. */
    st = eplb__partition_exact(ctx->w, E, G, ctx->slots_per_gpu, time_limit / 4, p2l, &best,
                               &proven);
    if (!st && !proven) {
      even_out_by_swaps(ctx, p2l, integral ? ceil(lb - 1e-9) : lb,
                        time_limit > 0 ? t0 + time_limit / 2 : 0);
      double left = time_limit / 2 - (eplb__now() - t0);
      if (time_limit <= 0 || left > 0)
        st = eplb__partition_exact(ctx->w, E, G, ctx->slots_per_gpu, time_limit > 0 ? left : 0, p2l,
                                   &best, &proven);
    }
    if (st)
      goto done;
    if (proven) {
      for (uint32_t r = 0; r < R; r++)
        sh[r] = 1;
      if (eplb__layer_max_load(ctx, p2l, sh, NULL) <
          eplb__layer_max_load(ctx, phy2log, share, NULL)) {
        memcpy(phy2log, p2l, R * sizeof *p2l);
        memcpy(share, sh, R * sizeof *sh);
      }
      goto done; /* *gap = 0 */
    }
  }
  double before = eplb__layer_max_load(ctx, phy2log, share, NULL), after = before;
  st = eplb__mip_place(&pb, p2l, sh, &after, gap);
  if ((st == EPLB_OK || st == EPLB_ETIMEOUT) && after < before) {
    memcpy(phy2log, p2l, R * sizeof *p2l);
    memcpy(share, sh, R * sizeof *sh);
  }
  if (st == EPLB_ETIMEOUT && *gap == 0) {
    /* Timed out before GLPK had a bound (e.g. in the root LP): the
     * certificate still bounds the gap, and may prove the plan. */
    double mx = after < before ? after : before;
    *gap = mx > 0 ? fmax(0, (mx - lb0) / mx) : 0;
    if (*gap == 0)
      st = EPLB_OK;
  }
done:
  eplb__free(allowed);
  eplb__free(cls);
  eplb__free(p2l);
  eplb__free(sh);
  return st;
}
