/* runtime/tally.c — what a recorded call adds to the open step: its counts,
 * the layer's tokens, the metrics and the row sample. Below every path that
 * records (record.c, batch.c, device.c), so that none of them calls back
 * into another. */
#include "runtime/runtime.h"

void eplb__runtime_recorded(eplb_runtime_t *rt, uint32_t layer, const int32_t *ids,
                            uint32_t num_tokens) {
  eplb__stats_add_tokens(rt->stats, layer, num_tokens);
  rt->m.tokens_recorded += num_tokens;
  if (rt->sample && ids)
    eplb__sample_record(rt->sample, eplb__stats_open_step(rt->stats), layer, ids, num_tokens);
}

void eplb__runtime_add_counts(eplb_runtime_t *rt, uint32_t layer, const uint32_t *add,
                              const int32_t *ids, uint32_t num_tokens) {
  eplb__stats_add(rt->stats, layer, add);
  eplb__runtime_recorded(rt, layer, ids, num_tokens);
}
