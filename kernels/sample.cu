/* kernels/sample.cu — eplb__cuda_sample: every M-th token's row into a ring. */
#include "kernels/kernels.h"

#include <cuda_runtime.h>

namespace {

__global__ void sample_kernel(eplb_cuda_sample_ring_t s, uint32_t layer, const int32_t *ids,
                              size_t n, uint64_t token_base) {
  size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= n)
    return;
  uint32_t j = (uint32_t)(x % s.topk);
  uint64_t g = token_base + x / s.topk;
  if (g % s.every)
    return;
  size_t entry = (size_t)((g / s.every) % s.capacity);
  s.ids[(entry * s.num_layers + layer) * s.topk + j] = ids[x];
  if (j == 0) {
    s.src[entry] = s.rank;
    s.token[entry] = g;
  }
}

} // namespace

extern "C" int eplb__cuda_sample_launch(const eplb_cuda_sample_ring_t *s, uint32_t layer,
                                        const int32_t *ids, uint32_t num_tokens,
                                        uint64_t token_base, void *stream) {
  size_t n = (size_t)num_tokens * s->topk;
  if (n == 0)
    return 0;
  sample_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(*s, layer, ids, n,
                                                                               token_base);
  return (int)cudaGetLastError();
}
