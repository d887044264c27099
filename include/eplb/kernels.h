/* eplb/kernels.h — the runtime's GPU side: recording counts, mapping expert
 * ids to slots and sampling rows on the device, inside the serving stack's
 * CUDA stream, with no host synchronisation.
 *
 * Every function takes device pointers (plain structs of them below, owned
 * by the caller: allocate with cudaMalloc, zero-initialise) and a CUDA
 * stream as `void *` (the address of nothing: the cudaStream_t value itself,
 * NULL = the legacy default stream). Calls only enqueue work: they return
 * before the kernels run and never call cudaStreamSynchronize or a blocking
 * cudaMemcpy, so they add no host synchronisation to a decode step.
 * Results are read by the caller (cudaMemcpyAsync) when it wishes.
 *
 * Returns, for every function: EPLB_OK (enqueued), EPLB_EINVAL (NULL
 * pointer, zero size; the detail names it), EPLB_EUNSUPPORTED (built without
 * CUDA), EPLB_ENODEVICE (no device or no driver), EPLB_EDEVICE (another CUDA
 * launch error; the detail gives CUDA's text). Errors of kernels that
 * already ran surface at the caller's next synchronisation, as with any
 * CUDA work.
 *
 * Thread rules: like CUDA streams. The structs are read at the call (they
 * are passed by value to the kernels); the device memory they point to is
 * read and written in stream order.
 */
#ifndef EPLB_KERNELS_H_PUBLIC
#define EPLB_KERNELS_H_PUBLIC

#include "eplb/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices visible to this process.
 * Returns EPLB_OK (*count >= 1), EPLB_ENODEVICE (no device or no driver,
 * *count = 0), or EPLB_EUNSUPPORTED (built without CUDA, *count = 0). */
EPLB_API eplb_status_t eplb_cuda_device_count(int *count);

/* ---- count: the device-side window ring -------------------------------- */

/* Counters of the last `window` steps: counts [window][num_layers]
 * [num_experts] uint32, of which row (*step % window) is the current step.
 * eplb_cuda_count adds to the current row; eplb_cuda_step advances *step
 * and zeroes the row it enters, both on the stream. */
typedef struct eplb_cuda_ring {
  uint32_t *counts;  /* device [window][num_layers][num_experts] */
  uint32_t *step;    /* device, one uint32: the current step number */
  uint32_t *dropped; /* device, one uint32: ids outside [0, num_experts) seen (not counted) */
  uint32_t window, num_layers, num_experts;
} eplb_cuda_ring_t;

/* Counts one layer's top-k ids [num_tokens][topk] (device int32) into the
 * ring's current row: counts[row][layer][e] += occurrences of e. Ids out of
 * range go to *dropped. A shared-memory histogram with warp-aggregated
 * atomics; num_experts <= 8192. EPLB_ERANGE for layer >= num_layers or
 * num_experts above the limit. */
EPLB_API eplb_status_t eplb_cuda_count(const eplb_cuda_ring_t *ring, uint32_t layer,
                                       const int32_t *topk_ids, uint32_t num_tokens, uint32_t topk,
                                       void *stream);

/* Step boundary: *step += 1 and the row it enters is zeroed (on the stream). */
EPLB_API eplb_status_t eplb_cuda_step(const eplb_cuda_ring_t *ring, void *stream);

/* ---- map: logical expert ids to physical slots ------------------------- */

/* One dispatch table (the runtime's alias table, eplb_runtime_map): expert
 * e's candidate columns are off[e] .. off[e+1]; a column keeps slot[] when
 * the coin word of the hash is below prob[] (2^-32 units) rounded to 2^-16
 * units, else takes alias[] (kernels/dispatch_math.h). */
typedef struct eplb_cuda_table {
  uint32_t *off;  /* device [num_experts + 1] */
  int32_t *slot;  /* device [num_slots] */
  int32_t *alias; /* device [num_slots] */
  uint32_t *prob; /* device [num_slots] */
} eplb_cuda_table_t;

/* A layer's tables, double-buffered: the kernels use buf[*epoch & 1], read
 * on the device, so a switch (eplb_cuda_table_upload into the other buffer,
 * then eplb_cuda_switch) is stream-ordered and needs no host sync.
 * eplb_cuda_table_upload is in eplb/runtime.h: it reads a runtime. */
typedef struct eplb_cuda_dispatch {
  eplb_cuda_table_t buf[2];
  uint32_t *epoch; /* device, one uint32 */
  uint32_t num_experts, num_slots;
} eplb_cuda_dispatch_t;

/* Maps top-k ids [num_tokens][topk] (device) of `layer` to global slots
 * out_slots [num_tokens][topk] (device), bit-identical to eplb_runtime_map
 * with the same table: the choice depends only on (token_base + i, layer,
 * expert). An id outside [0, num_experts) gives slot -1 and increments
 * *bad when bad (device, one uint32) is not NULL. */
EPLB_API eplb_status_t eplb_cuda_map(const eplb_cuda_dispatch_t *d, uint32_t layer,
                                     const int32_t *topk_ids, uint32_t num_tokens, uint32_t topk,
                                     uint64_t token_base, int32_t *out_slots, uint32_t *bad,
                                     void *stream);

/* *d->epoch += 1 on the stream: later maps use the other buffer. */
EPLB_API eplb_status_t eplb_cuda_switch(const eplb_cuda_dispatch_t *d, void *stream);

/* ---- co-activation sample ---------------------------------------------- */

/* Whole top-k rows of every `every`-th global token (token index % every ==
 * 0) with this rank: the row of global token g lands in entry
 * (g / every) % capacity: ids[entry][layer][topk], src[entry] = rank,
 * token[entry] = g. A row is complete once every layer was sampled for it
 * (compare token[] across reads). Deterministic, no atomics. */
typedef struct eplb_cuda_sample_ring {
  int32_t *ids;    /* device [capacity][num_layers][topk] */
  int32_t *src;    /* device [capacity] */
  uint64_t *token; /* device [capacity] */
  uint32_t capacity, num_layers, topk, every;
  int32_t rank;
} eplb_cuda_sample_ring_t;

/* Samples one layer's ids [num_tokens][s->topk] of global tokens token_base
 * .. token_base + num_tokens - 1. EPLB_ERANGE for layer >= num_layers. */
EPLB_API eplb_status_t eplb_cuda_sample(const eplb_cuda_sample_ring_t *s, uint32_t layer,
                                        const int32_t *topk_ids, uint32_t num_tokens,
                                        uint64_t token_base, void *stream);

#ifdef __cplusplus
}
#endif
#endif
