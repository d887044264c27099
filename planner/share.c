/* planner/share.c — token shares over a fixed placement. The split LP itself
 * is solved by lp/ (the exact max-flow solver of include/eplb/split.h); this
 * file adapts a planner layer to it and provides the uniform split that
 * DeepSeek's model uses. */
#include "planner/planner.h"
#include "lp/lp.h"

#include <math.h>
#include <string.h>

void eplb__uniform_shares(uint32_t E, uint32_t R, const int32_t *phy2log, double *share) {
  uint32_t *cnt = eplb__calloc(E, sizeof *cnt);
  for (uint32_t r = 0; r < R; r++) {
    uint32_t c = 0;
    if (cnt) {
      if (r == 0)
        for (uint32_t q = 0; q < R; q++)
          cnt[phy2log[q]]++;
      c = cnt[phy2log[r]];
    } else {
      for (uint32_t q = 0; q < R; q++) /* no memory: quadratic but still correct */
        c += phy2log[q] == phy2log[r];
    }
    share[r] = 1.0 / c;
  }
  eplb__free(cnt);
}

eplb_status_t eplb__split_bottleneck(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                                     double *share, double *max_load, double *gpu_load,
                                     uint8_t *gpus, uint8_t *experts) {
  if (!ctx->split)
    return eplb__error(EPLB_EINVAL, "planner", "split: no solver in the layer context");
  eplb_split_problem_t pb = {.num_experts = ctx->num_experts,
                             .num_gpus = ctx->num_gpus,
                             .num_slots = ctx->num_slots,
                             .phy2log = (const uint32_t *)(const void *)phy2log,
                             .slots_per_gpu = ctx->slots_per_gpu};
  eplb_split_result_t res = {
      .share = share, .gpu_load = gpu_load, .bottleneck_experts = experts, .bottleneck_gpus = gpus};
  eplb_status_t st = eplb__split_solve_unchecked(ctx->split, &pb, ctx->w, &res);
  if (!st)
    *max_load = res.max_load;
  return st;
}

eplb_status_t eplb__split_shares(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                                 double *share, double *max_load) {
  if (!ctx->split)
    return eplb__error(EPLB_EINVAL, "planner", "split: no solver in the layer context");
  double *gl = eplb__malloc_array(ctx->num_gpus, sizeof *gl);
  if (!gl)
    return eplb__error(EPLB_ENOMEM, "planner", "split: out of memory");
  double t;
  eplb_status_t st = eplb__split_bottleneck(ctx, phy2log, share, &t, gl, NULL, NULL);
  /* Recomputed from the shares (the solver sums amounts, not share * w), so
   * every policy compares max loads the way the metrics compute them. */
  if (!st)
    *max_load = eplb__layer_max_load(ctx, phy2log, share, NULL);
  eplb__free(gl);
  return st;
}
