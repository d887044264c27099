/* kernels/quota.c — CPU reference of the device route's exact-quota map
 * (kernels/split_math.h), the emulated device's kernel. */
#include "kernels/kernels.h"
#include "kernels/split_math.h"

#include <stdbool.h>

void eplb__quota_ref(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *phy2log,
                     const double *share, const uint32_t *status, const int32_t *ids,
                     uint32_t num_tokens, uint32_t topk, uint64_t token_base, int32_t *out,
                     uint32_t *bad, void *workspace) {
  uint32_t E = d->num_experts, R = d->num_slots;
  uint32_t *start = NULL, *list = NULL, *quota = NULL, *count = NULL;
  size_t n = (size_t)num_tokens * topk;
  bool ok = *status == EPLB__SPLIT_CONVERGED;
  for (uint32_t r = 0; ok && r < R; r++)
    ok = (uint32_t)phy2log[r] < E;
  if (!ok) { /* no fresh shares: the live table, as the host route's scalar map */
    eplb__map_ref(d, layer, ids, num_tokens, topk, token_base, out, bad);
    return;
  }
  eplb__quota_ws_layout(E, R, workspace, &start, &list, &quota, &count);
  eplb__alias_bucket(E, R, phy2log, start, list);
  /* The kernel counts in each expert's thread; here one pass counts all. */
  for (uint32_t e = 0; e < E; e++)
    count[e] = 0;
  for (size_t x = 0; x < n; x++) {
    uint32_t e = (uint32_t)ids[x];
    if (e < E) {
      count[e]++;
    } else {
      out[x] = -1;
      if (bad)
        ++*bad;
    }
  }
  for (uint32_t e = 0; e < E; e++) {
    uint32_t a = start[e], z = start[e + 1];
    if (!count[e])
      continue;
    eplb__quota_expert(count[e], eplb__quota_phase(token_base, layer, e), list, a, z, share, quota);
    eplb__quota_assign(e, ids, n, list, z, quota, &a, out);
  }
}

size_t eplb__quota_workspace_bytes(uint32_t num_experts, uint32_t num_slots) {
  return eplb__quota_ws_layout(num_experts, num_slots, NULL, NULL, NULL, NULL, NULL);
}

uint32_t eplb__split_guard(const uint32_t *tail, uint32_t word, uint32_t ranks) {
  return eplb__quota_guard(tail, word, ranks);
}
