/* kernels/kernels.h — internal header of the kernels module: CUDA entry
 * points (defined in *.cu, compiled only when CUDA is enabled) and their CPU
 * references (*.c, always compiled) with the same contract. */
#ifndef EPLB_KERNELS_H
#define EPLB_KERNELS_H

#include "eplb/common.h"
#include "eplb/kernels.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest num_experts of eplb_cuda_count (its shared-memory histogram). */
#define EPLB__COUNT_MAX_EXPERTS 8192u

/* ---- CPU references: the public contracts on host memory --------------- */

void eplb__count_ref(const eplb_cuda_ring_t *ring, uint32_t layer, const int32_t *ids,
                     uint32_t num_tokens, uint32_t topk);
void eplb__step_ref(const eplb_cuda_ring_t *ring);
void eplb__map_ref(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *ids,
                   uint32_t num_tokens, uint32_t topk, uint64_t token_base, int32_t *out,
                   uint32_t *bad);
void eplb__sample_ref(const eplb_cuda_sample_ring_t *s, uint32_t layer, const int32_t *ids,
                      uint32_t num_tokens, uint64_t token_base);

/* ---- CUDA launchers: enqueue only; return the cudaError_t (0 = ok) ------ */

/* Raw cudaGetDeviceCount: returns the cudaError_t value (0 = success) and
 * writes *count only on success. Defined in device.cu. */
int eplb__cuda_device_count_raw(int *count);
/* CUDA's text for an error; 1 when the error means "no device/driver". */
const char *eplb__cuda_error_string(int err);
int eplb__cuda_error_is_nodevice(int err);
int eplb__cuda_h2d_async(void *dst, const void *src, size_t bytes, void *stream);
int eplb__cuda_d2h_async(void *dst, const void *src, size_t bytes, void *stream);
/* Device memory for other modules (the NCCL communicator), so that CUDA
 * runtime calls stay in this module. */
int eplb__cuda_malloc(void **ptr, size_t bytes);
void eplb__cuda_free(void *ptr);
/* 0 when the stream's work is done, EPLB__CUDA_NOT_READY while it runs,
 * else the cudaError_t. */
#define EPLB__CUDA_NOT_READY (-1)
int eplb__cuda_stream_query(void *stream);
/* 1 for device or managed memory, 0 for host memory. */
int eplb__cuda_is_device_ptr(const void *ptr);

int eplb__cuda_count_launch(const eplb_cuda_ring_t *ring, uint32_t layer, const int32_t *ids,
                            uint32_t num_tokens, uint32_t topk, void *stream);
int eplb__cuda_step_launch(const eplb_cuda_ring_t *ring, void *stream);
int eplb__cuda_map_launch(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *ids,
                          uint32_t num_tokens, uint32_t topk, uint64_t token_base, int32_t *out,
                          uint32_t *bad, void *stream);
int eplb__cuda_switch_launch(const eplb_cuda_dispatch_t *d, void *stream);
int eplb__cuda_sample_launch(const eplb_cuda_sample_ring_t *s, uint32_t layer, const int32_t *ids,
                             uint32_t num_tokens, uint64_t token_base, void *stream);

/* Maps a launcher's cudaError_t to a status with a detail naming `what`. */
eplb_status_t eplb__cuda_status(int err, const char *what);
/* The argument check of every call taking a dispatch (kernels/api.c). */
eplb_status_t eplb__cuda_check_dispatch(const eplb_cuda_dispatch_t *d, const char *what);

/* ---- the per-batch split on the device (split.c / split.cu, #17) ------ */

/* CPU references of eplb_cuda_split and eplb_cuda_table_build on host
 * memory (same contracts; kernels/split_math.h, kernels/alias_math.h).
 * split_ref also reports the Newton max-flows made in *iterations (NULL:
 * not reported; unchanged unless converged). */
void eplb__split_ref(const int32_t *phy2log, uint32_t num_experts, uint32_t num_gpus,
                     uint32_t slots_per_gpu, const uint32_t *counts, double *share, double *t_star,
                     uint32_t *status, void *workspace, uint32_t max_iterations,
                     uint32_t *iterations);
/* eplb_cuda_split_layers' reference: eplb__split_ref on each layer. */
void eplb__split_layers_ref(const int32_t *phy2log, uint32_t num_layers, uint32_t num_experts,
                            uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                            double *share, double *t_star, uint32_t *status, void *workspace,
                            uint32_t max_iterations);
void eplb__table_build_ref(const eplb_cuda_dispatch_t *d, uint32_t which, const int32_t *phy2log,
                           const double *share, void *workspace);
/* eplb_cuda_split_layers (eplb_cuda_split: num_layers 1). With tail (one
 * layer only: the runtime's multi-rank call), the kernel first checks the
 * all-reduced message's tail (kernels/split_math.h, eplb__quota_guard with
 * word and ranks) and, when it fails, writes its status and keeps the
 * shares; NULL: no check. */
int eplb__cuda_split_launch(const int32_t *phy2log, uint32_t num_layers, uint32_t num_experts,
                            uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                            double *share, double *t_star, uint32_t *status, void *workspace,
                            uint32_t max_iterations, const uint32_t *tail, uint32_t word,
                            uint32_t ranks, void *stream);
/* The runtime's device split of one layer (runtime/device_cuda.c): the
 * argument checks of eplb_cuda_split, then the launch with the guard above. */
eplb_status_t eplb__cuda_split_guarded(const int32_t *phy2log, uint32_t num_experts,
                                       uint32_t num_gpus, uint32_t slots_per_gpu,
                                       const uint32_t *counts, double *share, double *t_star,
                                       uint32_t *status, void *workspace, uint32_t max_iterations,
                                       const uint32_t *tail, uint32_t word, uint32_t ranks,
                                       void *stream);

/* ---- the device route's exact quotas (quota.c / quota.cu, #17) --------- */

/* Maps ids [num_tokens][topk] of `layer` to out [n] by exact quotas of
 * share [R] over placement phy2log [R] (kernels/split_math.h: the host
 * route's rule, bit for bit), when *status (the split's word) is
 * EPLB__SPLIT_CONVERGED and the placement is valid; else by d's live alias
 * table (eplb_cuda_map's slots). Ids outside [0, E) map to -1 and count in
 * *bad (bad may be NULL). workspace: eplb__quota_ws_layout(E, R) bytes,
 * 4-byte aligned. All pointers device memory (host memory for the ref). */
void eplb__quota_ref(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *phy2log,
                     const double *share, const uint32_t *status, const int32_t *ids,
                     uint32_t num_tokens, uint32_t topk, uint64_t token_base, int32_t *out,
                     uint32_t *bad, void *workspace);
/* eplb__quota_ws_layout's bytes; eplb__quota_guard (the split's guard of
 * a multi-rank call: 0 or EPLB__SPLIT_BAD_IDS / _MISMATCH, 4 and 5), for
 * code that cannot include kernels/split_math.h. */
size_t eplb__quota_workspace_bytes(uint32_t num_experts, uint32_t num_slots);
uint32_t eplb__split_guard(const uint32_t *tail, uint32_t word, uint32_t ranks);
int eplb__cuda_quota_launch(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *phy2log,
                            const double *share, const uint32_t *status, const int32_t *ids,
                            uint32_t num_tokens, uint32_t topk, uint64_t token_base, int32_t *out,
                            uint32_t *bad, void *workspace, void *stream);
int eplb__cuda_table_build_launch(const eplb_cuda_dispatch_t *d, uint32_t which,
                                  const int32_t *phy2log, const double *share, void *workspace,
                                  void *stream);

/* ---- the runtime's device backend (runtime/device_cuda.c, #17) --------- */

/* What the CUDA backend of the runtime needs beyond the kernels, so that
 * every CUDA runtime call stays in this module. Each returns the
 * cudaError_t (0 = ok) unless said otherwise; none synchronises except
 * event_sync and stream_sync. Defined in device.cu. */
int eplb__cuda_get_device(int *ordinal);
int eplb__cuda_set_device(int ordinal);
/* Pinned host memory (cudaMallocHost), so that device-to-host copies are
 * truly asynchronous. */
int eplb__cuda_host_alloc(void **ptr, size_t bytes);
void eplb__cuda_host_free(void *ptr);
int eplb__cuda_memset_async(void *dst, int value, size_t bytes, void *stream);
/* Events without timing (cudaEventDisableTiming): cheaper to record. */
int eplb__cuda_event_create(void **event);
void eplb__cuda_event_destroy(void *event);
int eplb__cuda_event_record(void *event, void *stream);
/* 0 when the event's work is done, EPLB__CUDA_NOT_READY while it runs,
 * else the cudaError_t. */
int eplb__cuda_event_query(void *event);
int eplb__cuda_event_sync(void *event);
int eplb__cuda_stream_sync(void *stream);

#ifdef __cplusplus
}
#endif
#endif
