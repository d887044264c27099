/* kernels/count.cu — eplb__cuda_count / eplb__cuda_step on the device ring. */
#include "kernels/kernels.h"

#include <cuda_runtime.h>

namespace {

constexpr unsigned kThreads = 256, kPerBlock = 1024;

/* Each block histograms its ids in shared memory (a warp's equal ids merge
 * into one atomic: __match_any_sync), then adds its non-zero bins to the
 * ring row chosen by the device-side step, so no host value is needed. */
__global__ void count_kernel(eplb_cuda_ring_t ring, uint32_t layer, const int32_t *ids, size_t n) {
  extern __shared__ uint32_t hist[];
  const uint32_t E = ring.num_experts, lane = threadIdx.x & 31u;
  for (uint32_t e = threadIdx.x; e < E; e += blockDim.x)
    hist[e] = 0;
  __syncthreads();
  uint32_t dropped = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  /* Warp-uniform loop bounds: every lane reaches the warp intrinsics. */
  for (size_t base = (size_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31u); base < n;
       base += stride) {
    size_t i = base + lane;
    int32_t id = i < n ? ids[i] : -1;
    bool ok = i < n && (uint32_t)id < E;
    dropped += i < n && !ok;
    unsigned active = __ballot_sync(0xFFFFFFFFu, ok);
    if (ok) {
      unsigned peers = __match_any_sync(active, id);
      if (lane == (uint32_t)(__ffs(peers) - 1))
        atomicAdd(&hist[id], (uint32_t)__popc(peers));
    }
  }
  for (int o = 16; o > 0; o >>= 1)
    dropped += __shfl_down_sync(0xFFFFFFFFu, dropped, o);
  if (lane == 0 && dropped)
    atomicAdd(ring.dropped, dropped);
  __syncthreads();
  size_t LE = (size_t)ring.num_layers * E;
  uint32_t *row = ring.counts + (size_t)(*ring.step % ring.window) * LE + (size_t)layer * E;
  for (uint32_t e = threadIdx.x; e < E; e += blockDim.x)
    if (hist[e])
      atomicAdd(&row[e], hist[e]);
}

/* One block: every thread reads the step before thread 0 advances it. */
__global__ void step_kernel(eplb_cuda_ring_t ring) {
  size_t LE = (size_t)ring.num_layers * ring.num_experts;
  uint32_t next = *ring.step + 1;
  uint32_t *row = ring.counts + (size_t)(next % ring.window) * LE;
  for (size_t i = threadIdx.x; i < LE; i += blockDim.x)
    row[i] = 0;
  __syncthreads();
  if (threadIdx.x == 0)
    *ring.step = next;
}

} // namespace

extern "C" int eplb__cuda_count_launch(const eplb_cuda_ring_t *ring, uint32_t layer,
                                       const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                                       void *stream) {
  size_t n = (size_t)num_tokens * topk;
  if (n == 0)
    return 0;
  size_t blocks = (n + kPerBlock - 1) / kPerBlock;
  if (blocks > 256)
    blocks = 256;
  count_kernel<<<(unsigned)blocks, kThreads, ring->num_experts * sizeof(uint32_t),
                 (cudaStream_t)stream>>>(*ring, layer, ids, n);
  return (int)cudaGetLastError();
}

extern "C" int eplb__cuda_step_launch(const eplb_cuda_ring_t *ring, void *stream) {
  step_kernel<<<1, 1024, 0, (cudaStream_t)stream>>>(*ring);
  return (int)cudaGetLastError();
}
