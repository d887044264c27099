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

/* Largest num_experts of eplb__cuda_count (its shared-memory histogram). */
#define EPLB__COUNT_MAX_EXPERTS 8192u

/* ---- the kernels on the runtime's device memory (eplb/kernels.h) ------ *
 * Every function takes device pointers and a CUDA stream as `void *` (the
 * cudaStream_t value itself, NULL = the legacy default stream) and only
 * enqueues work: no cudaStreamSynchronize, no blocking copy. Returns
 * EPLB_OK (enqueued), EPLB_EINVAL (NULL pointer, zero size; the detail
 * names it), EPLB_EUNSUPPORTED (built without CUDA), EPLB_ENODEVICE (no
 * device or no driver), EPLB_EDEVICE (another CUDA launch error). */

/* Counts one layer's top-k ids [num_tokens][topk] (device int32) into the
 * ring's current row: counts[row][layer][e] += occurrences of e. Ids out of
 * range go to *dropped. A shared-memory histogram with warp-aggregated
 * atomics; num_experts <= 8192. EPLB_ERANGE for layer >= num_layers or
 * num_experts above the limit. */
eplb_status_t eplb__cuda_count(const eplb_cuda_ring_t *ring, uint32_t layer,
                               const int32_t *topk_ids, uint32_t num_tokens, uint32_t topk,
                               void *stream);

/* Step boundary: *step += 1 and the row it enters is zeroed (on the stream). */
eplb_status_t eplb__cuda_step(const eplb_cuda_ring_t *ring, void *stream);

/* Maps top-k ids [num_tokens][topk] (device) of `layer` to global slots
 * out_slots [num_tokens][topk] (device), bit-identical to eplb_runtime_map
 * with the same table: the choice depends only on (token_base + i, layer,
 * expert). An id outside [0, num_experts) gives slot -1 and increments
 * *bad when bad (device, one uint32) is not NULL. */
eplb_status_t eplb__cuda_map(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *topk_ids,
                             uint32_t num_tokens, uint32_t topk, uint64_t token_base,
                             int32_t *out_slots, uint32_t *bad, void *stream);

/* *d->epoch += 1 on the stream: later maps use the other buffer. */
eplb_status_t eplb__cuda_switch(const eplb_cuda_dispatch_t *d, void *stream);

/* Samples one layer's ids [num_tokens][s->topk] of global tokens token_base
 * .. token_base + num_tokens - 1. EPLB_ERANGE for layer >= num_layers. */
eplb_status_t eplb__cuda_sample(const eplb_cuda_sample_ring_t *s, uint32_t layer,
                                const int32_t *topk_ids, uint32_t num_tokens, uint64_t token_base,
                                void *stream);

/* Status words of eplb__cuda_split. Every one but CONVERGED keeps share and
 * *t_star untouched. BAD_INPUT: a phy2log entry >= num_experts, an expert
 * without a replica, or total tokens x num_gpus > 2^62. INTERNAL: a bug,
 * never expected. */
#define EPLB__CUDA_SPLIT_CONVERGED 0u
#define EPLB__CUDA_SPLIT_NOT_CONVERGED 1u /* max_iterations spent */
#define EPLB__CUDA_SPLIT_BAD_INPUT 2u
#define EPLB__CUDA_SPLIT_INTERNAL 3u

/* The exact token split of one layer computed on the device from device
 * counts, so that a serving stack re-splits every batch with no host round
 * trip: eplb_split_solve's problem (eplb/split.h) in its integer mode, on a
 * placement of num_gpus GPUs with slots_per_gpu slots each (slot r on GPU
 * r / slots_per_gpu). *t_star is the same T* (max over expert sets A of
 * w(A) / |N(A)|, the double nearest that ratio); share[r] = x_r / w_e for
 * whole-token amounts x_r whose busiest GPU carries ceil(T*) tokens (an
 * expert without tokens: 1/c on each of its c replicas). The solver is
 * Newton's iteration on T with one max-flow each, in exact integers
 * (kernels/split_math.h), so the device and the CPU give bit-identical
 * results. One thread runs the solve (a max-flow is sequential work):
 * launch it early, e.g. right after the layer's counts are recorded.
 *
 * phy2log [num_gpus * slots_per_gpu] (device int32, each < num_experts,
 * every expert with a replica); counts [num_experts] (device uint32:
 * tokens, e.g. a row of eplb_cuda_ring_t); share [R] (device double, in:
 * the previous shares, out: the new ones); t_star (device, one double:
 * tokens); status (device, one uint32): EPLB__CUDA_SPLIT_CONVERGED, or a
 * reason the previous share and *t_star were kept untouched (above).
 * workspace: device memory (8-byte aligned, as cudaMalloc's is) of
 * eplb__cuda_split_workspace_bytes, used by one call at a time in stream
 * order. max_iterations >= 1 bounds the Newton
 * max-flows (each is bounded by the graph's size); typical layers take 1
 * to 4. No host synchronisation: read status (cudaMemcpyAsync) when you
 * wish, or simply build the table from share, which holds the previous
 * shares when the split kept them.
 * Returns the statuses of the file comment; EPLB_EINVAL also for a size 0
 * or max_iterations 0, EPLB_ERANGE for num_experts > EPLB_MAX_EXPERTS or
 * num_gpus * slots_per_gpu > EPLB_MAX_SLOTS. */
eplb_status_t eplb__cuda_split(const int32_t *phy2log, uint32_t num_experts, uint32_t num_gpus,
                               uint32_t slots_per_gpu, const uint32_t *counts, double *share,
                               double *t_star, uint32_t *status, void *workspace,
                               uint32_t max_iterations, void *stream);

/* eplb__cuda_split of num_layers layers in one launch, one device block per
 * layer, so the layers' solves run side by side: phy2log [num_layers][R],
 * counts [num_layers][num_experts] (a row of eplb_cuda_ring_t), share
 * [num_layers][R], t_star and status [num_layers], workspace num_layers x
 * eplb__cuda_split_workspace_bytes (layer l's at l times that). Each layer
 * converges or keeps its previous shares on its own. EPLB_EINVAL also for
 * num_layers 0, EPLB_ERANGE above EPLB_MAX_LAYERS. */
eplb_status_t eplb__cuda_split_layers(const int32_t *phy2log, uint32_t num_layers,
                                      uint32_t num_experts, uint32_t num_gpus,
                                      uint32_t slots_per_gpu, const uint32_t *counts, double *share,
                                      double *t_star, uint32_t *status, void *workspace,
                                      uint32_t max_iterations, void *stream);

/* Bytes of one layer's workspace of eplb__cuda_split (about 68 E + 44 R +
 * 60 G bytes: 32,064 for 256 experts on 32 GPUs x 9 slots; a multiple of
 * 8); 0 for a size 0 or beyond the limits of eplb__cuda_split. */
size_t eplb__cuda_split_workspace_bytes(uint32_t num_experts, uint32_t num_gpus,
                                        uint32_t slots_per_gpu);

/* Rebuilds table buffer d->buf[which] (which 0 or 1) from shares on the
 * device: bit-identical to the runtime's table for those shares with no
 * node shares and no local-first (an expert's candidates are its slots with
 * share > 0, weighted by share; Vose's alias columns, kernels/alias_math.h).
 * Build into the buffer the maps do not use, then eplb__cuda_switch.
 * phy2log [d->num_slots] and share [d->num_slots] (device; shares finite);
 * workspace: device memory (8-byte aligned) of
 * eplb__cuda_table_workspace_bytes. A phy2log
 * entry outside [0, num_experts) leaves the buffer untouched. Statuses of
 * the file comment (EPLB_EINVAL also for which > 1). */
eplb_status_t eplb__cuda_table_build(const eplb_cuda_dispatch_t *d, uint32_t which,
                                     const int32_t *phy2log, const double *share, void *workspace,
                                     void *stream);

/* Bytes of eplb__cuda_table_build's workspace (about 28 R + 4 E bytes); 0 for
 * a size 0. */
size_t eplb__cuda_table_workspace_bytes(uint32_t num_experts, uint32_t num_slots);

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

/* CPU references of eplb__cuda_split and eplb__cuda_table_build on host
 * memory (same contracts; kernels/split_math.h, kernels/alias_math.h).
 * split_ref also reports the Newton max-flows made in *iterations (NULL:
 * not reported; unchanged unless converged). */
void eplb__split_ref(const int32_t *phy2log, uint32_t num_experts, uint32_t num_gpus,
                     uint32_t slots_per_gpu, const uint32_t *counts, double *share, double *t_star,
                     uint32_t *status, void *workspace, uint32_t max_iterations,
                     uint32_t *iterations);
/* eplb__cuda_split_layers' reference: eplb__split_ref on each layer. */
void eplb__split_layers_ref(const int32_t *phy2log, uint32_t num_layers, uint32_t num_experts,
                            uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                            double *share, double *t_star, uint32_t *status, void *workspace,
                            uint32_t max_iterations);
void eplb__table_build_ref(const eplb_cuda_dispatch_t *d, uint32_t which, const int32_t *phy2log,
                           const double *share, void *workspace);
/* eplb__cuda_split_layers (eplb__cuda_split: num_layers 1). With tail (one
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
 * argument checks of eplb__cuda_split, then the launch with the guard above. */
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
 * table (eplb__cuda_map's slots). Ids outside [0, E) map to -1 and count in
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
