/* kernels/split.cu — eplb__cuda_split(_layers) and eplb__cuda_table_build: the
 * shared math (kernels/split_math.h, kernels/alias_math.h) in one device
 * thread per layer (the split: one block per layer, so layers run side by
 * side). Both are sequential by nature (a max-flow's augmenting paths, the
 * running column offsets of a table); one thread keeps them simple and
 * bit-identical to the CPU references. The scratch lives in shared memory
 * when it fits the default 48 KiB (DeepSeek-V3's 256 experts on 32 GPUs of
 * 9 slots need 32 KiB), since a lone thread waits on every access to global
 * memory; else in the caller's workspace. */
#include "kernels/alias_math.h"
#include "kernels/kernels.h"
#include "kernels/split_math.h"

#include <cuda_runtime.h>

namespace {

/* Dynamic shared memory a block may use without opting in. */
constexpr size_t SHARED_MAX = 48 * 1024;

/* Block l solves layer l with scratch in shared memory (shared set) or at
 * workspace + l * ws_bytes. */
__global__ void split_kernel(const int32_t *phy2log, uint32_t E, uint32_t G, uint32_t S,
                             const uint32_t *counts, double *share, double *t_star,
                             uint32_t *status, unsigned char *workspace, size_t ws_bytes,
                             bool shared, uint32_t max_iterations, const uint32_t *tail,
                             uint32_t word, uint32_t ranks) {
  extern __shared__ unsigned long long smem[]; /* 8-byte aligned */
  size_t l = blockIdx.x, R = (size_t)G * S;
  if (threadIdx.x != 0)
    return;
  uint32_t guard = tail ? eplb__quota_guard(tail, word, ranks) : 0u;
  if (guard) { /* a rank's bad ids or mismatched calls: every rank keeps its shares */
    status[l] = guard;
    return;
  }
  unsigned char *ws = shared ? (unsigned char *)smem : workspace + l * ws_bytes;
  status[l] = eplb__split_solve_math(E, G, S, phy2log + l * R, counts + l * E, max_iterations, ws,
                                     share + l * R, t_star + l, nullptr);
}

__global__ void table_kernel(eplb_cuda_table_t t, uint32_t E, uint32_t R, const int32_t *phy2log,
                             const double *share, unsigned char *workspace, bool shared) {
  extern __shared__ unsigned long long smem[];
  for (uint32_t r = 0; r < R; r++) /* a bad placement changes nothing */
    if ((uint32_t)phy2log[r] >= E)
      return;
  uint32_t *start = nullptr, *list = nullptr, *work = nullptr;
  double *weight = nullptr, *q = nullptr;
  eplb__alias_ws_layout(E, R, shared ? (unsigned char *)smem : workspace, &start, &list, &weight,
                        &q, &work);
  eplb__alias_table(E, R, phy2log, share, t.off, t.slot, t.alias, t.prob, start, list, weight, q,
                    work);
}

} // namespace

extern "C" int eplb__cuda_split_launch(const int32_t *phy2log, uint32_t num_layers,
                                       uint32_t num_experts, uint32_t num_gpus,
                                       uint32_t slots_per_gpu, const uint32_t *counts,
                                       double *share, double *t_star, uint32_t *status,
                                       void *workspace, uint32_t max_iterations,
                                       const uint32_t *tail, uint32_t word, uint32_t ranks,
                                       void *stream) {
  size_t ws_bytes = eplb__split_ws_layout(num_experts, num_gpus, slots_per_gpu, nullptr, nullptr);
  bool shared = ws_bytes <= SHARED_MAX;
  split_kernel<<<num_layers, 1, shared ? ws_bytes : 0, (cudaStream_t)stream>>>(
      phy2log, num_experts, num_gpus, slots_per_gpu, counts, share, t_star, status,
      (unsigned char *)workspace, ws_bytes, shared, max_iterations, tail, word, ranks);
  return (int)cudaGetLastError();
}

extern "C" int eplb__cuda_table_build_launch(const eplb_cuda_dispatch_t *d, uint32_t which,
                                             const int32_t *phy2log, const double *share,
                                             void *workspace, void *stream) {
  size_t ws_bytes = eplb__alias_ws_layout(d->num_experts, d->num_slots, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, nullptr);
  bool shared = ws_bytes <= SHARED_MAX;
  table_kernel<<<1, 1, shared ? ws_bytes : 0, (cudaStream_t)stream>>>(
      d->buf[which], d->num_experts, d->num_slots, phy2log, share, (unsigned char *)workspace,
      shared);
  return (int)cudaGetLastError();
}
