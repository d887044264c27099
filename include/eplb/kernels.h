/* eplb/kernels.h — the layout of the runtime's device memory: the per-step
 * counter ring, the double-buffered dispatch tables and the co-activation
 * sample ring that the device backend (eplb/runtime_device.h) allocates and
 * fills, as eplb_runtime_device_tables hands them out, so that a stack can
 * read them (cudaMemcpyAsync) or capture them in its own graphs. The kernels
 * that count, map, sample, split and build tables on them are the runtime's
 * own (kernels/kernels.h): a stack reaches them through
 * eplb_runtime_device_record / _map / _route, never directly (issue #34: no
 * kernel primitives in the public API).
 *
 * Device pointers only; the structs are plain, owned by the runtime that
 * filled them, valid until it is destroyed. Read them in stream order on the
 * runtime's stream.
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
 * Recording adds to the current row; the step boundary advances *step and
 * zeroes the row it enters, both on the stream. */
typedef struct eplb_cuda_ring {
  uint32_t *counts;  /* device [window][num_layers][num_experts] */
  uint32_t *step;    /* device, one uint32: the current step number */
  uint32_t *dropped; /* device, one uint32: ids outside [0, num_experts) seen (not counted) */
  uint32_t window, num_layers, num_experts;
} eplb_cuda_ring_t;

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
 * then the epoch's increment on the stream) needs no host sync.
 * eplb_cuda_table_upload is in eplb/runtime_device.h: it reads a runtime. */
typedef struct eplb_cuda_dispatch {
  eplb_cuda_table_t buf[2];
  uint32_t *epoch; /* device, one uint32 */
  uint32_t num_experts, num_slots;
} eplb_cuda_dispatch_t;

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

#ifdef __cplusplus
}
#endif
#endif
