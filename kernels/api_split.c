/* kernels/api_split.c — the public entry points of the per-batch split
 * (eplb/kernels.h): argument checks, then the CUDA launchers (or
 * EPLB_EUNSUPPORTED without CUDA). Pointers are device memory, so only
 * their presence is checked here; the placement is checked by the kernel,
 * which reports it in the status word. */
#include "core/core.h"
#include "eplb_config.h"
#include "kernels/alias_math.h"
#include "kernels/kernels.h"
#include "kernels/split_math.h"

static eplb_status_t check_shape(uint32_t E, uint32_t G, uint32_t S, const char *what) {
  if (!E || !G || !S)
    return eplb__error(EPLB_EINVAL, "kernels", "%s: %u experts, %u GPUs, %u slots per GPU", what, E,
                       G, S);
  if (E > EPLB_MAX_EXPERTS)
    return eplb__error(EPLB_ERANGE, "kernels", "%s: %u experts > %u", what, E, EPLB_MAX_EXPERTS);
  if ((uint64_t)G * S > EPLB_MAX_SLOTS)
    return eplb__error(EPLB_ERANGE, "kernels", "%s: %u GPUs x %u slots > %u slots", what, G, S,
                       EPLB_MAX_SLOTS);
  return EPLB_OK;
}

size_t eplb__cuda_split_workspace_bytes(uint32_t num_experts, uint32_t num_gpus,
                                        uint32_t slots_per_gpu) {
  if (check_shape(num_experts, num_gpus, slots_per_gpu, "cuda_split_workspace_bytes"))
    return 0;
  return eplb__split_ws_layout(num_experts, num_gpus, slots_per_gpu, NULL, NULL);
}

/* eplb__cuda_split_layers with the runtime's guard (tail, word, ranks). */
static eplb_status_t split_layers(const int32_t *phy2log, uint32_t num_layers, uint32_t num_experts,
                                  uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                                  double *share, double *t_star, uint32_t *status, void *workspace,
                                  uint32_t max_iterations, const uint32_t *tail, uint32_t word,
                                  uint32_t ranks, void *stream) {
  eplb_status_t st = check_shape(num_experts, num_gpus, slots_per_gpu, "cuda_split");
  if (st != EPLB_OK)
    return st;
  if (!num_layers)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_split: 0 layers");
  if (num_layers > EPLB_MAX_LAYERS)
    return eplb__error(EPLB_ERANGE, "kernels", "cuda_split: %u layers > %u", num_layers,
                       EPLB_MAX_LAYERS);
  if (!phy2log || !counts || !share || !t_star || !status || !workspace)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_split: NULL %s",
                       !phy2log  ? "phy2log"
                       : !counts ? "counts"
                       : !share  ? "share"
                       : !t_star ? "t_star"
                       : !status ? "status"
                                 : "workspace");
  if (!max_iterations)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_split: max_iterations is 0");
#if EPLB_HAVE_CUDA
  return eplb__cuda_status(eplb__cuda_split_launch(phy2log, num_layers, num_experts, num_gpus,
                                                   slots_per_gpu, counts, share, t_star, status,
                                                   workspace, max_iterations, tail, word, ranks,
                                                   stream),
                           "cuda_split");
#else
  (void)stream, (void)tail, (void)word, (void)ranks;
  return eplb__error(EPLB_EUNSUPPORTED, "kernels", "cuda_split: built without CUDA");
#endif
}

eplb_status_t eplb__cuda_split_layers(const int32_t *phy2log, uint32_t num_layers,
                                      uint32_t num_experts, uint32_t num_gpus,
                                      uint32_t slots_per_gpu, const uint32_t *counts, double *share,
                                      double *t_star, uint32_t *status, void *workspace,
                                      uint32_t max_iterations, void *stream) {
  return split_layers(phy2log, num_layers, num_experts, num_gpus, slots_per_gpu, counts, share,
                      t_star, status, workspace, max_iterations, NULL, 0, 0, stream);
}

eplb_status_t eplb__cuda_split_guarded(const int32_t *phy2log, uint32_t num_experts,
                                       uint32_t num_gpus, uint32_t slots_per_gpu,
                                       const uint32_t *counts, double *share, double *t_star,
                                       uint32_t *status, void *workspace, uint32_t max_iterations,
                                       const uint32_t *tail, uint32_t word, uint32_t ranks,
                                       void *stream) {
  return split_layers(phy2log, 1, num_experts, num_gpus, slots_per_gpu, counts, share, t_star,
                      status, workspace, max_iterations, tail, word, ranks, stream);
}

eplb_status_t eplb__cuda_split(const int32_t *phy2log, uint32_t num_experts, uint32_t num_gpus,
                               uint32_t slots_per_gpu, const uint32_t *counts, double *share,
                               double *t_star, uint32_t *status, void *workspace,
                               uint32_t max_iterations, void *stream) {
  return eplb__cuda_split_layers(phy2log, 1, num_experts, num_gpus, slots_per_gpu, counts, share,
                                 t_star, status, workspace, max_iterations, stream);
}

size_t eplb__cuda_table_workspace_bytes(uint32_t num_experts, uint32_t num_slots) {
  if (!num_experts || !num_slots)
    return 0;
  return eplb__alias_ws_layout(num_experts, num_slots, NULL, NULL, NULL, NULL, NULL, NULL);
}

eplb_status_t eplb__cuda_table_build(const eplb_cuda_dispatch_t *d, uint32_t which,
                                     const int32_t *phy2log, const double *share, void *workspace,
                                     void *stream) {
  eplb_status_t st = eplb__cuda_check_dispatch(d, "cuda_table_build");
  if (st != EPLB_OK)
    return st;
  if (which > 1)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_table_build: buffer %u (0 or 1)", which);
  if (!phy2log || !share || !workspace)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_table_build: NULL %s",
                       !phy2log ? "phy2log"
                       : !share ? "share"
                                : "workspace");
#if EPLB_HAVE_CUDA
  return eplb__cuda_status(
      eplb__cuda_table_build_launch(d, which, phy2log, share, workspace, stream),
      "cuda_table_build");
#else
  (void)stream;
  return eplb__error(EPLB_EUNSUPPORTED, "kernels", "cuda_table_build: built without CUDA");
#endif
}
