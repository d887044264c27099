/* eplb/runtime_device.h — the runtime's device backend (cfg.device): the
 * decode step's counts, maps and per-batch split on the GPU (or the
 * emulated device), next to the host calls of eplb/runtime.h. A serving
 * loop on the host needs only eplb/runtime.h. */
#ifndef EPLB_RUNTIME_DEVICE_H
#define EPLB_RUNTIME_DEVICE_H

#include "eplb/kernels.h"
#include "eplb/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Device backend (cfg.device) ----------------------------------------
 *
 * With cfg.device.kind CUDA (or EMULATED) the runtime owns the device side
 * of the decode step: a ring of per-step counters [window][L][E]
 * (eplb_cuda_ring_t) and every layer's double-buffered dispatch tables
 * (eplb_cuda_dispatch_t), allocated at create. Per step the application
 *   1. calls eplb_runtime_device_record (or _route) with each layer's top-k
 *      ids in device memory: a count kernel on cfg.device.stream;
 *   2. calls eplb_runtime_device_map (or _route): slots in device memory,
 *      bit-identical to eplb_runtime_map of the same ids on the same table;
 *   3. calls eplb_runtime_step_end, which, before the host statistics close:
 *      enqueues an asynchronous copy of the step's ring row into pinned host
 *      memory with an event after it, advances the ring (a kernel zeroes the
 *      next row), and feeds into the statistics every earlier row whose event
 *      has completed, oldest first (never waiting, except when `window`
 *      copies are in flight: then it waits for the oldest). A row is fed into
 *      the step that is open when its event is seen complete: the same step
 *      on the emulated device (its copies complete at once), usually the
 *      next one on a GPU (the copy was enqueued microseconds before).
 *      eplb_runtime_device_flush waits for every copy.
 *   At a plan switch (inside step_end, eplbd's plans too) each switching
 *   layer's new table is staged in pinned memory and uploaded into the
 *   layer's idle device buffer before the ranks agree on the round; a failed
 *   upload fails the layer on every rank like a failed transfer (it keeps its
 *   plan, host and device; step_end returns EPLB_EDEVICE naming the layers).
 *   After the switch the epoch flips on the stream (eplb__cuda_switch), so
 *   maps enqueued after step_end use the new table, those before it the old.
 *   eplb_runtime_split (application counts) uploads and flips the same way.
 *   Per-batch split (cfg.split_per_batch on): device_record and _route are
 *   then collective like the host calls (every rank, same layers, same
 *   order) and, all on the stream, count the call's ids, all-reduce them
 *   with a bad-id count and a check word (cuda: ncclAllReduce on the
 *   stream through the runtime's NCCL communicator; emulated: the host
 *   communicator at that point of the stream order; none without one),
 *   split the layer from the sums on the device (eplb__cuda_split in whole
 *   tokens, warm from the layer's last shares: the same shares bit for bit
 *   on every rank; the host path splits fractionally, so T* agrees but the
 *   shares may differ); then device_route maps the call by exact quotas of
 *   those shares, the host route's rule (same shares, same slots), and
 *   device_record builds the idle table from them (eplb__cuda_table_build)
 *   and flips. A split that does not converge, or that the all-reduce
 *   stops (an id out of range or a failed call on some rank, ranks calling
 *   different layers), keeps every rank's previous shares and route maps
 *   by the live table; a call that fails its checks on one rank still joins
 *   the all-reduce, so no rank hangs. Not with more than one node and
 *   local_first (the device split has no locality stage), nor on a cuda
 *   device with an MPI communicator: EPLB_EUNSUPPORTED at create. Waits on
 *   a stream holding the NCCL all-reduce (full ring, flush, staging,
 *   destroy) poll under the NCCL watchdog (EPLB_ETIMEOUT / EPLB_ECOMM,
 *   communicator aborted); set_stream and counters synchronise directly.
 * The host calls record/map/route keep working on the host tables, which
 * the device mirrors. Nothing here synchronises the host with the device
 * except a full ring, flush, counters, set_stream, create and destroy, and
 * a table upload whose layer's previous upload has not completed (each
 * layer has its own upload event; one layer's switches are steps apart) or
 * that failed (its queued copies are waited for).
 * Ids outside [0, E) are not counted (the ring's dropped counter) and map to
 * slot -1 (a bad counter); num_tokens still counts them as tokens.
 * Errors: EPLB_EINVAL (NULL runtime, NULL device pointer with num_tokens >
 * 0), EPLB_ERANGE (layer), EPLB_ESTATE (the runtime has no device),
 * EPLB_EDEVICE (a launch or copy failed; CUDA's text in the detail), and
 * EPLB_ENODEVICE. A record that fails before counting counts nothing of
 * the call; one whose per-batch split fails afterwards has counted the ids
 * (its detail says so), the layer keeps its table, and device_route still
 * maps the call by that table and returns the split's status; a failed
 * step-end copy or ring step leaves the step's counts in the ring row, where
 * the next step's join them (late, never lost or doubled); a failed flip is
 * retried at the next step_end. The runtime keeps its tables and serves on:
 * no call aborts, none waits without bound on the emulated device.
 * Thread rules as the host calls: device_map may run concurrently with
 * other maps, not with record, step_end or destroy. */

/* Gives a runtime created without a device (cfg.device.kind NONE) the
 * device `device`, as create would have: for bindings that learn the
 * device from the first tensor they see. Call it between steps (the host
 * calls keep working, before and after). Not collective. Returns create's
 * device statuses, EPLB_ESTATE when the runtime has a device already,
 * EPLB_EINVAL for NULL. On failure the runtime stays without a device. */
EPLB_API eplb_status_t eplb_runtime_device_attach(eplb_runtime_t *rt,
                                                  const eplb_runtime_device_t *device);

/* Reads the device's counters (waits for the stream; not for the decode
 * step): out[0] the ring's step, out[1] ids dropped by the count, out[2]
 * ids mapped to -1. EPLB_EINVAL, EPLB_ESTATE, EPLB_EDEVICE. */
EPLB_API eplb_status_t eplb_runtime_device_counters(const eplb_runtime_t *rt, uint32_t out[3]);

/* Counts a layer's top-k ids [num_tokens][topk] (device memory) into the
 * current ring row (eplb__cuda_count on the runtime's ring). */
EPLB_API eplb_status_t eplb_runtime_device_record(eplb_runtime_t *rt, uint32_t layer,
                                                  const int32_t *topk_ids, uint32_t num_tokens);

/* Maps ids [num_tokens][topk] (device) to slots out_slots (device) with the
 * layer's device table, on the stream (eplb__cuda_map). */
EPLB_API eplb_status_t eplb_runtime_device_map(const eplb_runtime_t *rt, uint32_t layer,
                                               const int32_t *topk_ids, uint32_t num_tokens,
                                               uint64_t token_base, int32_t *out_slots);

/* device_record then device_map of the same ids; with the per-batch split,
 * the record's split then the call's exact quotas instead of the map (see
 * above; the live table's map when the split gave no fresh shares). */
EPLB_API eplb_status_t eplb_runtime_device_route(eplb_runtime_t *rt, uint32_t layer,
                                                 const int32_t *topk_ids, uint32_t num_tokens,
                                                 uint64_t token_base, int32_t *out_slots);

/* Waits for every copy in flight and feeds it into the open step (not for
 * the decode step: it synchronises). EPLB_ESTATE without a device. */
EPLB_API eplb_status_t eplb_runtime_device_flush(eplb_runtime_t *rt);

/* Moves later device work to another stream (same device): waits for the
 * old stream's work first (a switch point, not for the decode step). */
EPLB_API eplb_status_t eplb_runtime_device_set_stream(eplb_runtime_t *rt, void *stream);

/* The device tables of a layer (what device_map reads; valid until destroy)
 * and the ring, for kernels of the application's own (e.g. a fused MoE layer
 * calling eplb__cuda_map). Either pointer may be NULL. EPLB_ESTATE without a
 * device, EPLB_ERANGE for layer >= L. */
EPLB_API eplb_status_t eplb_runtime_device_tables(const eplb_runtime_t *rt, uint32_t layer,
                                                  const eplb_cuda_dispatch_t **dispatch,
                                                  const eplb_cuda_ring_t **ring);

typedef struct eplb_runtime_device_stats {
  uint64_t steps;          /* ring rows closed by step_end (copies enqueued) */
  uint64_t steps_fed;      /* rows fed into the statistics */
  uint64_t steps_late;     /* of which fed at a later step_end than their own */
  uint64_t ring_waits;     /* step_end waited for the oldest copy (ring full) */
  uint64_t uploads;        /* layer tables uploaded */
  uint64_t uploads_failed; /* of which failed (the layer kept its plan) */
  uint64_t flips;          /* epoch flips enqueued */
  uint64_t errors;         /* failed launches, copies, event queries */
} eplb_runtime_device_stats_t;

/* Host-side counters of the device path (no device access). EPLB_EINVAL
 * for NULL, EPLB_ESTATE without a device. */
EPLB_API eplb_status_t eplb_runtime_device_stats(const eplb_runtime_t *rt,
                                                 eplb_runtime_device_stats_t *out);

/* ---- the GPU path's table (eplb/kernels.h) ----------------------------- */

/* Copies the runtime's current table of `layer` (what eplb_runtime_map
 * uses) into d->buf[which] (0 or 1; upload into the buffer that is not in
 * use, then eplb__cuda_switch). The host source is staged by CUDA before the
 * call returns (cudaMemcpyAsync from pageable memory), so the runtime may
 * change afterwards. d's sizes must equal the runtime's experts and
 * world_size * slots_per_rank (EPLB_ESHAPE). Not for the decode step: it
 * may wait for the staging copy. Declared here, not in eplb/kernels.h,
 * because it reads the runtime: kernels/ may not depend on runtime/. */
EPLB_API eplb_status_t eplb_cuda_table_upload(const eplb_runtime_t *rt, uint32_t layer,
                                              const eplb_cuda_dispatch_t *d, uint32_t which,
                                              void *stream);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_RUNTIME_DEVICE_H */
