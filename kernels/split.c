/* kernels/split.c — CPU references of eplb__cuda_split and
 * eplb__cuda_table_build: the shared math (kernels/split_math.h,
 * kernels/alias_math.h) on host memory, so that CI, which has no GPU, tests
 * exactly the code the device runs. */
#include "kernels/alias_math.h"
#include "kernels/kernels.h"
#include "kernels/split_math.h"

void eplb__split_ref(const int32_t *phy2log, uint32_t num_experts, uint32_t num_gpus,
                     uint32_t slots_per_gpu, const uint32_t *counts, double *share, double *t_star,
                     uint32_t *status, void *workspace, uint32_t max_iterations,
                     uint32_t *iterations) {
  *status = eplb__split_solve_math(num_experts, num_gpus, slots_per_gpu, phy2log, counts,
                                   max_iterations, workspace, share, t_star, iterations);
}

void eplb__split_layers_ref(const int32_t *phy2log, uint32_t num_layers, uint32_t num_experts,
                            uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                            double *share, double *t_star, uint32_t *status, void *workspace,
                            uint32_t max_iterations) {
  size_t R = (size_t)num_gpus * slots_per_gpu;
  size_t wsb = eplb__split_ws_layout(num_experts, num_gpus, slots_per_gpu, NULL, NULL);
  for (uint32_t l = 0; l < num_layers; l++)
    eplb__split_ref(phy2log + l * R, num_experts, num_gpus, slots_per_gpu,
                    counts + (size_t)l * num_experts, share + l * R, t_star + l, status + l,
                    (unsigned char *)workspace + l * wsb, max_iterations, NULL);
}

void eplb__table_build_ref(const eplb_cuda_dispatch_t *d, uint32_t which, const int32_t *phy2log,
                           const double *share, void *workspace) {
  uint32_t E = d->num_experts, R = d->num_slots, *start = NULL, *list = NULL, *work = NULL;
  double *weight = NULL, *q = NULL;
  for (uint32_t r = 0; r < R; r++) /* the device's rule: a bad placement changes nothing */
    if ((uint32_t)phy2log[r] >= E)
      return;
  eplb__alias_ws_layout(E, R, workspace, &start, &list, &weight, &q, &work);
  const eplb_cuda_table_t *t = &d->buf[which];
  eplb__alias_table(E, R, phy2log, share, t->off, t->slot, t->alias, t->prob, start, list, weight,
                    q, work);
}
