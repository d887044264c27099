/* kernels/map.cu — eplb__cuda_map / eplb__cuda_switch: the runtime's map
 * (kernels/dispatch_math.h) with the table chosen by a device-side epoch. */
#include "kernels/dispatch_math.h"
#include "kernels/kernels.h"

#include <cuda_runtime.h>

namespace {

__global__ void map_kernel(eplb_cuda_dispatch_t d, uint32_t layer, const int32_t *ids,
                           uint32_t topk, size_t n, uint64_t token_base, int32_t *out,
                           uint32_t *bad) {
  size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= n)
    return;
  const eplb_cuda_table_t &t = d.buf[*d.epoch & 1u];
  uint32_t e = (uint32_t)ids[x];
  if (e >= d.num_experts) {
    out[x] = -1;
    if (bad)
      atomicAdd(bad, 1u);
    return;
  }
  uint64_t th = eplb__dispatch_token_hash(token_base + x / topk, layer);
  out[x] = eplb__dispatch_pick(th, e, t.off, t.slot, t.alias, t.prob);
}

__global__ void switch_kernel(uint32_t *epoch) { ++*epoch; }

} // namespace

extern "C" int eplb__cuda_map_launch(const eplb_cuda_dispatch_t *d, uint32_t layer,
                                     const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                                     uint64_t token_base, int32_t *out, uint32_t *bad,
                                     void *stream) {
  size_t n = (size_t)num_tokens * topk;
  if (n == 0)
    return 0;
  map_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(*d, layer, ids, topk, n,
                                                                            token_base, out, bad);
  return (int)cudaGetLastError();
}

extern "C" int eplb__cuda_switch_launch(const eplb_cuda_dispatch_t *d, void *stream) {
  switch_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(d->epoch);
  return (int)cudaGetLastError();
}
