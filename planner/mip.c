/* planner/mip.c — the mip policy on one layer: the placement MIP of
 * lp/mip_place.c, warm-started from the balanced plan. Under keep_groups the
 * MIP keeps balanced's group-to-node assignment (it optimises placement and
 * replication within nodes). */
#include "lp/lp.h"
#include "planner/planner.h"

#include <string.h>

eplb_status_t eplb__mip_layer(const eplb__layer_ctx_t *ctx, double time_limit, int32_t *phy2log,
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
                                  .lower_bound = eplb__lower_bound(ctx),
                                  .time_limit = time_limit};
  memcpy(p2l, phy2log, R * sizeof *p2l);
  memcpy(sh, share, R * sizeof *sh);
  double before = eplb__layer_max_load(ctx, phy2log, share, NULL), after = before;
  st = eplb__mip_place(&pb, p2l, sh, &after, gap);
  if ((st == EPLB_OK || st == EPLB_ETIMEOUT) && after < before) {
    memcpy(phy2log, p2l, R * sizeof *p2l);
    memcpy(share, sh, R * sizeof *sh);
  }
  if (st == EPLB_ETIMEOUT && *gap == 0)
    *gap = 1; /* timed out without a bound: nothing proven */
done:
  eplb__free(allowed);
  eplb__free(cls);
  eplb__free(p2l);
  eplb__free(sh);
  return st;
}
