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

/* ---- the per-batch split ------------------------------------------------ */

/* Status words of eplb_cuda_split. Every one but CONVERGED keeps share and
 * *t_star untouched. BAD_INPUT: a phy2log entry >= num_experts, an expert
 * without a replica, or total tokens x num_gpus > 2^62. INTERNAL: a bug,
 * never expected. */
#define EPLB_CUDA_SPLIT_CONVERGED 0u
#define EPLB_CUDA_SPLIT_NOT_CONVERGED 1u /* max_iterations spent */
#define EPLB_CUDA_SPLIT_BAD_INPUT 2u
#define EPLB_CUDA_SPLIT_INTERNAL 3u

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
 * tokens); status (device, one uint32): EPLB_CUDA_SPLIT_CONVERGED, or a
 * reason the previous share and *t_star were kept untouched (above).
 * workspace: device memory (8-byte aligned, as cudaMalloc's is) of
 * eplb_cuda_split_workspace_bytes, used by one call at a time in stream
 * order. max_iterations >= 1 bounds the Newton
 * max-flows (each is bounded by the graph's size); typical layers take 1
 * to 4. No host synchronisation: read status (cudaMemcpyAsync) when you
 * wish, or simply build the table from share, which holds the previous
 * shares when the split kept them.
 * Returns the statuses of the file comment; EPLB_EINVAL also for a size 0
 * or max_iterations 0, EPLB_ERANGE for num_experts > EPLB_MAX_EXPERTS or
 * num_gpus * slots_per_gpu > EPLB_MAX_SLOTS. */
EPLB_API eplb_status_t eplb_cuda_split(const int32_t *phy2log, uint32_t num_experts,
                                       uint32_t num_gpus, uint32_t slots_per_gpu,
                                       const uint32_t *counts, double *share, double *t_star,
                                       uint32_t *status, void *workspace, uint32_t max_iterations,
                                       void *stream);

/* eplb_cuda_split of num_layers layers in one launch, one device block per
 * layer, so the layers' solves run side by side: phy2log [num_layers][R],
 * counts [num_layers][num_experts] (a row of eplb_cuda_ring_t), share
 * [num_layers][R], t_star and status [num_layers], workspace num_layers x
 * eplb_cuda_split_workspace_bytes (layer l's at l times that). Each layer
 * converges or keeps its previous shares on its own. EPLB_EINVAL also for
 * num_layers 0, EPLB_ERANGE above EPLB_MAX_LAYERS. */
EPLB_API eplb_status_t eplb_cuda_split_layers(const int32_t *phy2log, uint32_t num_layers,
                                              uint32_t num_experts, uint32_t num_gpus,
                                              uint32_t slots_per_gpu, const uint32_t *counts,
                                              double *share, double *t_star, uint32_t *status,
                                              void *workspace, uint32_t max_iterations,
                                              void *stream);

/* Bytes of one layer's workspace of eplb_cuda_split (about 68 E + 44 R +
 * 60 G bytes: 32,064 for 256 experts on 32 GPUs x 9 slots; a multiple of
 * 8); 0 for a size 0 or beyond the limits of eplb_cuda_split. */
EPLB_API size_t eplb_cuda_split_workspace_bytes(uint32_t num_experts, uint32_t num_gpus,
                                                uint32_t slots_per_gpu);

/* Rebuilds table buffer d->buf[which] (which 0 or 1) from shares on the
 * device: bit-identical to the runtime's table for those shares with no
 * node shares and no local-first (an expert's candidates are its slots with
 * share > 0, weighted by share; Vose's alias columns, kernels/alias_math.h).
 * Build into the buffer the maps do not use, then eplb_cuda_switch.
 * phy2log [d->num_slots] and share [d->num_slots] (device; shares finite);
 * workspace: device memory (8-byte aligned) of
 * eplb_cuda_table_workspace_bytes. A phy2log
 * entry outside [0, num_experts) leaves the buffer untouched. Statuses of
 * the file comment (EPLB_EINVAL also for which > 1). */
EPLB_API eplb_status_t eplb_cuda_table_build(const eplb_cuda_dispatch_t *d, uint32_t which,
                                             const int32_t *phy2log, const double *share,
                                             void *workspace, void *stream);

/* Bytes of eplb_cuda_table_build's workspace (about 28 R + 4 E bytes); 0 for
 * a size 0. */
EPLB_API size_t eplb_cuda_table_workspace_bytes(uint32_t num_experts, uint32_t num_slots);

#ifdef __cplusplus
}
#endif
#endif
