/* planner/rank.c — which copy of its expert each slot is (eplb/plan.h).
 * Serving stacks index an expert's replicas 0..c-1 (DeepSeek's log2phy); a
 * deepseek plan keeps the order in which the reference made them, so that
 * log2phy built from these ranks equals the reference's exactly. Every other
 * plan numbers an expert's replicas in slot order. */
#include "planner/planner.h"

#include <string.h>

eplb_status_t eplb_plan_replica_rank(const eplb_plan_t *plan, uint32_t layer, uint32_t *out) {
  if (!plan || !out || layer >= plan->num_layers)
    return eplb__error(EPLB_EINVAL, "planner", "replica_rank: bad plan, layer %u or NULL output",
                       layer);
  size_t R = plan->num_slots;
  if (plan->replica_rank) {
    memcpy(out, plan->replica_rank + (size_t)layer * R, R * sizeof *out);
    return EPLB_OK;
  }
  uint32_t *seen = eplb__calloc(plan->num_experts, sizeof *seen);
  if (!seen)
    return eplb__error(EPLB_ENOMEM, "planner", "replica_rank: out of memory");
  const int32_t *p2l = plan->phy2log + (size_t)layer * R;
  for (size_t r = 0; r < R; r++)
    out[r] = seen[p2l[r]]++;
  eplb__free(seen);
  return EPLB_OK;
}
