/* planner/balanced_refine.c — the balanced policy's local search under
 * exact shares. Each pass swaps a replica of a bottleneck expert (the set A
 * whose load fills its GPUs N(A) to T*) on an N(A) GPU with one on the
 * least-loaded GPU outside N(A), keeps the first swap that lowers T*, and
 * solves the kept placement again to read its new bottleneck. At hundreds
 * of GPUs this search is nearly all of balanced's time, so a tried swap is
 * rejected by a recent bottleneck still at T when there is one, else
 * probed with one warm-started max-flow when probing pays, then decided by
 * a T*-only solve that stops at the test; only a kept swap gets the
 * canonical solve. */
#include "planner/planner.h"
#include "lp/lp.h"

#include <string.h>

static bool gpu_holds(const eplb__layer_ctx_t *ctx, const int32_t *p2l, uint32_t g, int32_t e) {
  for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
    if (p2l[r] == e)
      return true;
  return false;
}

/* Whether GPU g still holds an expert of the bottleneck set A (mask be)
 * once slot a is swapped away. If not, the swap trades g for the receiving
 * GPU in N(A), so w(A) / |N(A)| and with it T* cannot drop: the split
 * solve, which dominates balanced's time at hundreds of GPUs, is skipped. */
static bool keeps_set(const eplb__layer_ctx_t *ctx, const int32_t *p2l, const uint8_t *be,
                      uint32_t g, uint32_t a) {
  for (uint32_t q = ctx->gpu_first[g]; q < ctx->gpu_first[g + 1]; q++)
    if (q != a && be[p2l[q]])
      return true;
  return false;
}

/* Bottleneck sets a swap's solve starts from (refine). */
#define HINTS 16

static uint32_t uf_find(uint32_t *parent, uint32_t g) {
  while (parent[g] != g)
    g = parent[g] = parent[parent[g]];
  return g;
}

/* Whether the bottleneck set A (experts be on GPUs bg) is two or more sets
 * on disjoint GPUs with ratios >= T (1 - 4e-13) each. A swap gives one GPU
 * of one of them an expert from outside N(A): the others keep their
 * experts, GPUs and loads, so T* stays at T to rounding (below the
 * 1e-12 the search asks for) and every swap's solve would be rejected. At
 * 1,024 GPUs such ties ended most layers' searches with ~100 rejected
 * solves. It ends the whole search, not one pass. Asked only where the
 * probe's rounding argument holds (sums within (E + R) ulps, E + R <= 4096:
 * so not at 1,024 GPUs x 9 slots): at worst a swap gaining about 1e-12 of T
 * is skipped. parent [G], first [E], cw [G] and cn [G] are scratch. */
static bool tied_parts(const eplb__layer_ctx_t *ctx, const int32_t *p2l, const uint8_t *be,
                       const uint8_t *bg, double T, uint32_t *parent, uint32_t *first, double *cw,
                       uint32_t *cn) {
  uint32_t E = ctx->num_experts, G = ctx->num_gpus;
  for (uint32_t e = 0; e < E; e++)
    first[e] = UINT32_MAX;
  for (uint32_t g = 0; g < G; g++) {
    parent[g] = g;
    cw[g] = 0.0;
    cn[g] = 0;
  }
  for (uint32_t g = 0; g < G; g++)
    for (uint32_t r = ctx->gpu_first[g]; bg[g] && r < ctx->gpu_first[g + 1]; r++) {
      uint32_t e = (uint32_t)p2l[r];
      if (!be[e])
        continue;
      if (first[e] == UINT32_MAX)
        first[e] = g;
      else
        parent[uf_find(parent, g)] = uf_find(parent, first[e]);
    }
  for (uint32_t e = 0; e < E; e++)
    if (be[e] && first[e] != UINT32_MAX)
      cw[uf_find(parent, first[e])] += ctx->w[e];
  for (uint32_t g = 0; g < G; g++)
    if (bg[g])
      cn[uf_find(parent, g)]++;
  uint32_t tight = 0;
  for (uint32_t g = 0; g < G; g++)
    tight += cn[g] && cw[g] / cn[g] >= T * (1 - 4e-13);
  return tight >= 2;
}

void eplb__set_sums(const eplb__layer_ctx_t *ctx, const int32_t *p2l, const uint8_t *set, double *w,
                    uint32_t *ng) {
  double sum = 0.0;
  uint32_t n = 0;
  for (uint32_t e = 0; e < ctx->num_experts; e++)
    if (set[e])
      sum += ctx->w[e];
  for (uint32_t g = 0; g < ctx->num_gpus; g++) {
    uint8_t hit = 0;
    for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
      hit |= set[p2l[r]];
    n += hit;
  }
  *w = sum;
  *ng = n;
}

static bool gpu_hits(const eplb__layer_ctx_t *ctx, const int32_t *p2l, const uint8_t *set,
                     uint32_t g) {
  for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
    if (set[p2l[r]])
      return true;
  return false;
}

uint32_t eplb__set_gpus_after_swap(const eplb__layer_ctx_t *ctx, int32_t *p2l, const uint8_t *set,
                                   uint32_t ng, uint32_t g, uint32_t h, uint32_t a, uint32_t b) {
  if (!set[p2l[a]] && !set[p2l[b]])
    return ng;
  int32_t ea = p2l[b], eb = p2l[a];
  int d = gpu_hits(ctx, p2l, set, g) + gpu_hits(ctx, p2l, set, h);
  p2l[a] = ea;
  p2l[b] = eb;
  d -= gpu_hits(ctx, p2l, set, g) + gpu_hits(ctx, p2l, set, h);
  p2l[a] = eb;
  p2l[b] = ea;
  return (uint32_t)((int)ng + d);
}

/* What refine carries between passes: the current placement's max load T,
 * its bottleneck set (experts be, GPUs bg) and GPU loads gl, the recent
 * sets (hints, kept in ring) and the scratch of tied_parts (uf, and gl
 * past G). */
typedef struct {
  const eplb__layer_ctx_t *ctx;
  eplb_split_problem_t pb;
  double T, *gl;
  uint8_t *bg, *be, *ring;
  uint32_t *uf;
  const uint8_t *hints[HINTS];
  /* Each hint's load w and GPU count ng on the current placement, and its
   * ratio on the tried swap: a swap moves two replicas, so only a set
   * holding one of their experts changes, and only in whether GPUs g and h
   * are among its GPUs (the ratios were computed afresh for every swap's
   * solve: 3% of the time at 1,024 GPUs). */
  double hw[HINTS], tried[HINTS];
  uint32_t hng[HINTS];
  uint32_t nh;
  int budget;
  bool probe, solved, skipped;
} refine_t;

/* One pass: swaps of a replica of an A expert on an N(A) GPU g with one on
 * the least-loaded GPU h outside N(A) (same node under keep_groups), the
 * first that lowers T* kept (*improved). A tried swap may first be probed
 * with one max-flow at T (1 - 1e-13): when that leaves a set above it, the
 * swap's T* is at least T (1 - 1e-13) less the rounding of its ratio and of
 * the split's loads, each below (E + R) ulps (<= 4.6e-13 up to E + R =
 * 4096), so its solve would not pass the 1e-12 test and is skipped (its
 * budget still spent). Past that size no swap is probed. */
static eplb_status_t refine_pass(refine_t *rf, int32_t *p2l, bool *improved) {
  const eplb__layer_ctx_t *ctx = rf->ctx;
  uint32_t G = ctx->num_gpus, gpn = G / (ctx->num_nodes ? ctx->num_nodes : 1);
  bool grouped = ctx->keep_groups && ctx->num_groups > 1;
  const uint8_t *bg = rf->bg, *be = rf->be;
  const double *gl = rf->gl;
  double T = rf->T;
  eplb_status_t st = EPLB_OK;
  for (uint32_t g = 0; g < G && rf->budget > 0; g++) {
    if (!bg[g])
      continue;
    for (uint32_t a = ctx->gpu_first[g]; a < ctx->gpu_first[g + 1]; a++) {
      int32_t ea = p2l[a];
      if (!be[ea] || !keeps_set(ctx, p2l, be, g, a))
        continue;
      uint32_t h = UINT32_MAX;
      for (uint32_t q = 0; q < G; q++)
        if (!bg[q] && (!grouped || q / gpn == g / gpn) && (h == UINT32_MAX || gl[q] < gl[h]) &&
            !gpu_holds(ctx, p2l, q, ea))
          h = q;
      if (h == UINT32_MAX)
        continue;
      for (uint32_t b = ctx->gpu_first[h]; b < ctx->gpu_first[h + 1] && rf->budget > 0; b++) {
        int32_t eb = p2l[b];
        if (eb == ea || gpu_holds(ctx, p2l, g, eb))
          continue;
        p2l[a] = eb;
        p2l[b] = ea;
        rf->budget--;
        /* The hints' ratios on the swap: a set at the test already (the
         * swap left a tight part of the bottleneck) rejects it with no
         * max-flow at all. */
        uint32_t nh = rf->nh < HINTS ? rf->nh : HINTS, ng[HINTS];
        double t0 = 0.0, stop = T * (1 - 1e-12);
        for (uint32_t i = 0; i < nh; i++) {
          ng[i] = eplb__set_gpus_after_swap(ctx, p2l, rf->hints[i], rf->hng[i], g, h, a, b);
          rf->tried[i] = ng[i] ? rf->hw[i] / (double)ng[i] : 0.0;
          t0 = rf->tried[i] > t0 ? rf->tried[i] : t0;
        }
        if (t0 >= stop * (1 + 1e-12)) {
          rf->skipped = true;
          p2l[a] = ea;
          p2l[b] = eb;
          continue;
        }
        /* A probe costs about a third of the T*-only solve it saves on a
         * rejected swap (whose first flow starts farther away): it pays
         * while two swaps in five or more are rejected, as at 512 GPUs in
         * the bench (48%) and not at 1,024 (35%). The rate is the split
         * handle's, over the layers it planned (one layer's search is too
         * short to learn from). The plan is the same either way: a probe
         * only skips a solve that would reject. */
        eplb_split_t *sp = ctx->split;
        bool above = false;
        bool probe = rf->probe && (sp->swaps < 16 || 5 * sp->rejected >= 2 * sp->swaps);
        if (probe && (st = eplb__split_above_warm(sp, &rf->pb, ctx->w, T * (1 - 1e-13), &above)))
          return st;
        sp->swaps++;
        sp->rejected++; /* until kept */
        if (above) {
          rf->skipped = true;
        } else {
          /* Only T* decides: the canonical flow is solved for the swap
           * kept only. */
          double t2;
          if ((st = eplb__split_tstar(sp, &rf->pb, ctx->w, rf->hints, rf->tried, nh, stop, &t2,
                                      NULL, NULL, NULL)))
            return st;
          rf->solved = true;
          if (t2 < stop) {
            sp->rejected--;
            memcpy(rf->hng, ng, nh * sizeof *ng);
            *improved = true;
            return EPLB_OK;
          }
        }
        p2l[a] = ea;
        p2l[b] = eb;
      }
    }
  }
  return EPLB_OK;
}

/* Local search under exact shares, guided by the split's bottleneck set
 * (experts A whose load fills the GPUs N(A) exactly to T*), by passes of
 * refine_pass while one keeps a swap. A budget of split solves bounds the
 * time. */
eplb_status_t eplb__balanced_refine(const eplb__layer_ctx_t *ctx, int32_t *p2l, double *share,
                                    double *mx) {
  uint32_t E = ctx->num_experts, G = ctx->num_gpus;
  if (!ctx->split || !ctx->improve_iterations || *mx <= 0)
    return EPLB_OK;
  double lb = ctx->lower_bound;
  if (*mx <= lb * (1 + 1e-9))
    return EPLB_OK;
  eplb_status_t st = EPLB_OK;
  refine_t rf = {.ctx = ctx,
                 .pb = {.num_experts = E,
                        .num_gpus = G,
                        .num_slots = ctx->num_slots,
                        .phy2log = (const uint32_t *)(const void *)p2l,
                        .slots_per_gpu = ctx->slots_per_gpu},
                 .budget = (int)(ctx->improve_iterations / 2 + 1),
                 .probe = (uint64_t)E + ctx->num_slots <= 4096};
  rf.gl = eplb__malloc_array(2 * (size_t)G, sizeof *rf.gl);
  rf.bg = eplb__malloc_array((size_t)G + E, 1);
  rf.uf = eplb__malloc_array(2 * (size_t)G + E, sizeof *rf.uf);
  rf.ring = eplb__malloc_array((size_t)HINTS * E, 1);
  if (!rf.gl || !rf.bg || !rf.uf || !rf.ring) {
    st = eplb__error(EPLB_ENOMEM, "planner", "balanced: out of memory");
    goto done;
  }
  rf.be = rf.bg + G;
  if ((st = eplb__split_bottleneck(ctx, p2l, NULL, &rf.T, rf.gl, rf.bg, rf.be)))
    goto done;
  for (bool improved = true; improved && rf.budget > 0;) {
    improved = false;
    rf.solved = rf.skipped = false;
    if (rf.T <= lb * (1 + 1e-9) ||
        (rf.probe && tied_parts(ctx, p2l, rf.be, rf.bg, rf.T, rf.uf, rf.uf + 2 * (size_t)G,
                                rf.gl + G, rf.uf + G)))
      break;
    /* The last HINTS bottleneck sets: a swap's T* starts from the best of
     * their ratios on it. Each kept swap moves the bottleneck a little, and
     * sets it left behind come back near the top, so Newton starts close. */
    uint32_t slot = rf.nh % HINTS;
    memcpy(rf.ring + (size_t)slot * E, rf.be, E);
    eplb__set_sums(ctx, p2l, rf.be, &rf.hw[slot], &rf.hng[slot]);
    rf.nh++;
    for (uint32_t i = 0; i < HINTS && i < rf.nh; i++)
      rf.hints[i] = rf.ring + (size_t)i * E;
    if ((st = refine_pass(&rf, p2l, &improved)))
      goto done;
    /* The kept swap's canonical flow: its loads gl choose the GPUs h of
     * the next pass (a tstar flow's loads, as free off N(A) as any maximum
     * flow's, led the search elsewhere: better on some layers, worse on
     * others). It starts at the set tstar left in the warm-start state. */
    if (improved && (st = eplb__split_bottleneck(ctx, p2l, NULL, &rf.T, rf.gl, rf.bg, rf.be)))
      goto done;
  }
  /* The split handle remembers the bottleneck set of the last placement it
   * solved and starts from it on the same placement, which can change the
   * last bits of the flow. A solved swap leaves the set of another
   * placement; when every swap of the last pass was skipped the handle
   * still holds this placement's, so it forgets it: the final split is the
   * one an unskipped search gets. */
  if (rf.skipped && !rf.solved)
    eplb_split_reset(ctx->split);
  st = eplb__split_shares(ctx, p2l, share, mx);
done:
  eplb__free(rf.gl);
  eplb__free(rf.bg);
  eplb__free(rf.uf);
  eplb__free(rf.ring);
  return st;
}
