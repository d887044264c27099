/* kernels/map.c — CPU reference of eplb__cuda_map: the runtime's map
 * (kernels/dispatch_math.h) on a double-buffered table in host memory. */
#include "kernels/dispatch_math.h"
#include "kernels/kernels.h"

void eplb__map_ref(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *ids,
                   uint32_t num_tokens, uint32_t topk, uint64_t token_base, int32_t *out,
                   uint32_t *bad) {
  const eplb_cuda_table_t *t = &d->buf[*d->epoch & 1u];
  for (uint32_t i = 0; i < num_tokens; i++) {
    uint64_t th = eplb__dispatch_token_hash(token_base + i, layer);
    for (uint32_t j = 0; j < topk; j++) {
      size_t x = (size_t)i * topk + j;
      uint32_t e = (uint32_t)ids[x];
      if (e >= d->num_experts) {
        out[x] = -1;
        if (bad)
          ++*bad;
        continue;
      }
      out[x] = eplb__dispatch_pick(th, e, t->off, t->slot, t->alias, t->prob);
    }
  }
}
