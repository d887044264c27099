/* kernels/count.c — CPU reference of eplb__cuda_count / eplb__cuda_step:
 * the same ring, in host memory. */
#include "kernels/kernels.h"

#include <string.h>

void eplb__count_ref(const eplb_cuda_ring_t *ring, uint32_t layer, const int32_t *ids,
                     uint32_t num_tokens, uint32_t topk) {
  size_t LE = (size_t)ring->num_layers * ring->num_experts;
  uint32_t *row =
      ring->counts + (size_t)(*ring->step % ring->window) * LE + (size_t)layer * ring->num_experts;
  size_t n = (size_t)num_tokens * topk;
  for (size_t i = 0; i < n; i++) {
    if ((uint32_t)ids[i] < ring->num_experts)
      row[ids[i]]++;
    else
      ++*ring->dropped;
  }
}

void eplb__step_ref(const eplb_cuda_ring_t *ring) {
  size_t LE = (size_t)ring->num_layers * ring->num_experts;
  uint32_t next = *ring->step + 1;
  memset(ring->counts + (size_t)(next % ring->window) * LE, 0, LE * sizeof *ring->counts);
  *ring->step = next;
}
