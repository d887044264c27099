/* lp/split_graph.c — LPLB-like placements: redundant replicas of each GPU's
 * home experts laid on its neighbours in a fixed graph inside a GPU group,
 * so the exact split can be compared with LPLB on the same structure. The
 * rule is documented in include/eplb/split.h. */
#include "lp/lp.h"

/* Local index of the k-th neighbour of local GPU i in a group of size n. */
static uint32_t neighbour(eplb_split_graph_t kind, uint32_t n, uint32_t i, uint32_t k) {
  if (kind != EPLB_SPLIT_GRAPH_RING)
    return i ^ (1u << k);
  /* +1, -1, +2, -2, ...: offsets 1, n-1, 2, n-2, ... (n/2 appears once). */
  uint32_t step = k / 2 + 1;
  return (k % 2 == 0 ? i + step : i + n - step) % n;
}

static uint32_t degree(eplb_split_graph_t kind, uint32_t n) {
  if (kind == EPLB_SPLIT_GRAPH_RING)
    return n - 1;
  uint32_t d = 0;
  while ((1u << d) < n)
    d++;
  return d;
}

eplb_status_t eplb_split_graph_place(eplb_split_graph_t kind, uint32_t group_size,
                                     uint32_t num_gpus, uint32_t experts_per_gpu,
                                     uint32_t redundant_per_gpu, uint32_t *phy2log,
                                     uint32_t *slots_per_gpu) {
  if (!phy2log || !slots_per_gpu)
    return eplb__error(EPLB_EINVAL, "lp", "split_graph_place: NULL %s",
                       !phy2log ? "phy2log" : "slots_per_gpu");
  if (kind != EPLB_SPLIT_GRAPH_RING && kind != EPLB_SPLIT_GRAPH_CUBE &&
      kind != EPLB_SPLIT_GRAPH_HYPERCUBE)
    return eplb__error(EPLB_EINVAL, "lp", "split_graph_place: unknown graph kind %d", (int)kind);
  if ((group_size != 8 && group_size != 16) || (kind == EPLB_SPLIT_GRAPH_CUBE && group_size != 8))
    return eplb__error(EPLB_EINVAL, "lp", "split_graph_place: group size %u (8 or 16; cube: 8)",
                       group_size);
  if (!num_gpus || num_gpus % group_size)
    return eplb__error(EPLB_EINVAL, "lp",
                       "split_graph_place: %u GPUs is not a positive multiple of the group size %u",
                       num_gpus, group_size);
  uint32_t d = degree(kind, group_size);
  uint64_t per = (uint64_t)experts_per_gpu + redundant_per_gpu;
  if (!experts_per_gpu || (uint64_t)num_gpus * per > UINT32_MAX)
    return eplb__error(EPLB_EINVAL, "lp", "split_graph_place: %u experts per GPU on %u GPUs",
                       experts_per_gpu, num_gpus);
  if ((uint64_t)redundant_per_gpu > (uint64_t)d * experts_per_gpu)
    return eplb__error(EPLB_EINVAL, "lp",
                       "split_graph_place: %u redundant slots per GPU exceed %u neighbours x %u "
                       "experts (a GPU would hold an expert twice)",
                       redundant_per_gpu, d, experts_per_gpu);
  uint32_t r = 0;
  for (uint32_t g = 0; g < num_gpus; g++) {
    uint32_t base = g - g % group_size, local = g % group_size;
    slots_per_gpu[g] = (uint32_t)per;
    for (uint32_t k = 0; k < experts_per_gpu; k++)
      phy2log[r++] = g * experts_per_gpu + k;
    for (uint32_t j = 0; j < redundant_per_gpu; j++) {
      uint32_t nb = base + neighbour(kind, group_size, local, j % d);
      phy2log[r++] = nb * experts_per_gpu + (j / d) % experts_per_gpu;
    }
  }
  return EPLB_OK;
}
