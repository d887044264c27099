/* kernels/sample.c — CPU reference of eplb__cuda_sample. */
#include "kernels/kernels.h"

void eplb__sample_ref(const eplb_cuda_sample_ring_t *s, uint32_t layer, const int32_t *ids,
                      uint32_t num_tokens, uint64_t token_base) {
  for (uint32_t t = 0; t < num_tokens; t++) {
    uint64_t g = token_base + t;
    if (g % s->every)
      continue;
    size_t entry = (size_t)((g / s->every) % s->capacity);
    for (uint32_t j = 0; j < s->topk; j++)
      s->ids[(entry * s->num_layers + layer) * s->topk + j] = ids[(size_t)t * s->topk + j];
    s->src[entry] = s->rank;
    s->token[entry] = g;
  }
}
