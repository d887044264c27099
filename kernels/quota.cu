/* kernels/quota.cu — the device route's exact-quota map
 * (kernels/split_math.h) in one block: a thread buckets the placement, the
 * block counts the call's ids (atomics), then one thread per expert
 * computes its quotas and hands its tokens out in call order, reading the
 * ids in tiles of shared memory that every expert thread scans (O(n) per
 * thread, no atomics): the host route's order of tokens, bit for bit.
 * Without fresh shares (the split's status word) it maps by the live alias
 * table, as eplb__cuda_map does. */
#include "kernels/kernels.h"
#include "kernels/split_math.h"

#include <cuda_runtime.h>

namespace {

constexpr unsigned THREADS = 256;
constexpr unsigned TILE = 2048; /* ids per shared-memory tile (8 KiB) */

__global__ void quota_kernel(eplb_cuda_dispatch_t d, uint32_t layer, const int32_t *phy2log,
                             const double *share, const uint32_t *status, const int32_t *ids,
                             size_t n, uint32_t topk, uint64_t token_base, int32_t *out,
                             uint32_t *bad, unsigned char *workspace) {
  __shared__ int32_t tile[TILE];
  __shared__ int fresh;
  uint32_t E = d.num_experts, R = d.num_slots;
  uint32_t *start = nullptr, *list = nullptr, *quota = nullptr, *count = nullptr;
  eplb__quota_ws_layout(E, R, workspace, &start, &list, &quota, &count);
  if (threadIdx.x == 0) {
    fresh = *status == EPLB__SPLIT_CONVERGED;
    for (uint32_t r = 0; fresh && r < R; r++)
      fresh = (uint32_t)phy2log[r] < E;
    if (fresh)
      eplb__alias_bucket(E, R, phy2log, start, list);
  }
  __syncthreads();
  for (size_t x = threadIdx.x; x < n; x += blockDim.x) {
    uint32_t e = (uint32_t)ids[x];
    if (e >= E) {
      out[x] = -1;
      if (bad)
        atomicAdd(bad, 1u);
    } else if (!fresh) {
      const eplb_cuda_table_t &t = d.buf[*d.epoch & 1u];
      uint64_t th = eplb__dispatch_token_hash(token_base + x / topk, layer);
      out[x] = eplb__dispatch_pick(th, e, t.off, t.slot, t.alias, t.prob);
    }
  }
  if (!fresh)
    return;
  for (uint32_t e = threadIdx.x; e < E; e += blockDim.x)
    count[e] = 0;
  __syncthreads();
  /* The counts in parallel (their order does not matter); then each
   * expert's thread computes its quotas, and its count word becomes its
   * cursor (eplb__quota_assign). */
  for (size_t x = threadIdx.x; x < n; x += blockDim.x)
    if ((uint32_t)ids[x] < E)
      atomicAdd(&count[(uint32_t)ids[x]], 1u);
  __syncthreads();
  for (uint32_t e = threadIdx.x; e < E; e += blockDim.x) {
    if (count[e])
      eplb__quota_expert(count[e], eplb__quota_phase(token_base, layer, e), list, start[e],
                         start[e + 1], share, quota);
    count[e] = start[e];
  }
  /* The hand-out follows call order: every expert's thread walks every tile. */
  for (size_t base = 0; base < n; base += TILE) {
    size_t m = n - base < TILE ? n - base : TILE;
    __syncthreads();
    for (size_t x = threadIdx.x; x < m; x += blockDim.x)
      tile[x] = ids[base + x];
    __syncthreads();
    for (uint32_t e = threadIdx.x; e < E; e += blockDim.x)
      eplb__quota_assign(e, tile, m, list, start[e + 1], quota, &count[e], out + base);
  }
}

} // namespace

extern "C" int eplb__cuda_quota_launch(const eplb_cuda_dispatch_t *d, uint32_t layer,
                                       const int32_t *phy2log, const double *share,
                                       const uint32_t *status, const int32_t *ids,
                                       uint32_t num_tokens, uint32_t topk, uint64_t token_base,
                                       int32_t *out, uint32_t *bad, void *workspace, void *stream) {
  size_t n = (size_t)num_tokens * topk;
  if (n == 0)
    return 0;
  quota_kernel<<<1, THREADS, 0, (cudaStream_t)stream>>>(*d, layer, phy2log, share, status, ids, n,
                                                        topk, token_base, out, bad,
                                                        (unsigned char *)workspace);
  return (int)cudaGetLastError();
}
