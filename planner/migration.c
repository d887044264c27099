/* planner/migration.c — the transfers that turn one plan into another: for
 * every slot whose expert changes, the cheapest source holding that expert
 * in the old plan (same GPU, same node, any), and rounds that fit each
 * receiving GPU's staging memory. The runtime executes them; eplb_plan_diff
 * summarises them for the CLI. */
#include "planner/planner.h"

#include <string.h>

static eplb_status_t same_shape(const eplb_plan_t *a, const eplb_plan_t *b) {
  bool same = a->num_layers == b->num_layers && a->num_experts == b->num_experts &&
              a->num_gpus == b->num_gpus && a->num_nodes == b->num_nodes &&
              a->num_slots == b->num_slots;
  for (uint32_t g = 0; same && g < a->num_gpus; g++)
    same = a->slots_per_gpu[g] == b->slots_per_gpu[g];
  if (!same)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "migration: plans differ in shape: %u layers x %u experts, %u GPUs, %u "
                       "nodes, %u slots vs %u x %u, %u, %u, %u (or slots per GPU)",
                       a->num_layers, a->num_experts, a->num_gpus, a->num_nodes, a->num_slots,
                       b->num_layers, b->num_experts, b->num_gpus, b->num_nodes, b->num_slots);
  return EPLB_OK;
}

eplb_status_t eplb__migration_plan(const eplb_plan_t *from, const eplb_plan_t *to,
                                   uint32_t layer_begin, uint32_t layer_end, uint64_t expert_bytes,
                                   uint64_t staging_bytes, eplb__migration_t **out, size_t *count,
                                   uint32_t *rounds) {
  if (!from || !to || !out || !count || !rounds)
    return eplb__error(EPLB_EINVAL, "planner", "migration: NULL argument");
  *out = NULL;
  *count = 0;
  *rounds = 0;
  eplb_status_t st = same_shape(from, to);
  if (st)
    return st;
  if (layer_begin > layer_end || layer_end > from->num_layers)
    return eplb__error(EPLB_EINVAL, "planner", "migration: layers %u..%u out of 0..%u", layer_begin,
                       layer_end, from->num_layers);
  if (!expert_bytes)
    return eplb__error(EPLB_EINVAL, "planner", "migration: expert_bytes must be >= 1");
  if (staging_bytes && staging_bytes < expert_bytes)
    return eplb__error(EPLB_EINVAL, "planner",
                       "migration: staging budget %llu bytes is below one expert (%llu bytes)",
                       (unsigned long long)staging_bytes, (unsigned long long)expert_bytes);
  uint64_t per_round = staging_bytes ? staging_bytes / expert_bytes : UINT64_MAX;
  uint32_t G = from->num_gpus, R = from->num_slots;
  uint32_t gpn = G / (from->num_nodes ? from->num_nodes : 1);
  size_t n = 0;
  for (uint32_t l = layer_begin; l < layer_end; l++)
    for (uint32_t r = 0; r < R; r++)
      n += from->phy2log[(size_t)l * R + r] != to->phy2log[(size_t)l * R + r];
  if (!n)
    return EPLB_OK;
  eplb__migration_t *mv = eplb__malloc_array(n, sizeof *mv);
  uint32_t *gpu = eplb__malloc_array(R, sizeof *gpu);
  uint64_t *sends = eplb__calloc(G, sizeof *sends);
  uint64_t *recv = eplb__calloc(G, sizeof *recv);
  if (!mv || !gpu || !sends || !recv) {
    st = eplb__error(EPLB_ENOMEM, "planner", "migration: out of memory");
    goto fail;
  }
  for (uint32_t g = 0; g < G; g++)
    for (uint32_t r = from->gpu_first[g]; r < from->gpu_first[g + 1]; r++)
      gpu[r] = g;
  size_t k = 0;
  for (uint32_t l = layer_begin; l < layer_end; l++) {
    const int32_t *old = from->phy2log + (size_t)l * R, *nw = to->phy2log + (size_t)l * R;
    for (uint32_t s = 0; s < R; s++) {
      if (old[s] == nw[s])
        continue;
      uint32_t g = gpu[s], best = UINT32_MAX, best_link = 3;
      for (uint32_t r = 0; r < R; r++) {
        if (old[r] != nw[s])
          continue;
        uint32_t link = gpu[r] == g               ? EPLB_LINK_SAME_GPU
                        : gpu[r] / gpn == g / gpn ? EPLB_LINK_INTRA_NODE
                                                  : EPLB_LINK_INTER_NODE;
        /* Cheapest link first, then the least busy sender. */
        if (link < best_link || (link == best_link && sends[gpu[r]] < sends[gpu[best]])) {
          best = r;
          best_link = link;
        }
      }
      if (best == UINT32_MAX) {
        st = eplb__error(EPLB_EFORMAT, "planner",
                         "migration: layer %u: expert %d of slot %u has no replica in the old plan",
                         l, nw[s], s);
        goto fail;
      }
      sends[gpu[best]]++;
      uint64_t round = recv[g]++ / per_round;
      mv[k++] = (eplb__migration_t){.layer = l,
                                    .dst_slot = s,
                                    .dst_gpu = g,
                                    .src_slot = best,
                                    .src_gpu = gpu[best],
                                    .expert = (uint32_t)nw[s],
                                    .link = (uint8_t)best_link,
                                    .round = (uint32_t)round};
      if (round + 1 > *rounds)
        *rounds = (uint32_t)(round + 1);
    }
  }
  *out = mv;
  *count = n;
  mv = NULL;
fail:
  eplb__free(mv);
  eplb__free(gpu);
  eplb__free(sends);
  eplb__free(recv);
  if (st)
    *rounds = 0;
  return st;
}

eplb_status_t eplb_plan_diff(const eplb_plan_t *from, const eplb_plan_t *to, uint64_t expert_bytes,
                             uint64_t staging_bytes, eplb_plan_diff_stats_t *out) {
  if (!from || !to || !out)
    return eplb__error(EPLB_EINVAL, "planner", "plan diff: NULL argument");
  memset(out, 0, sizeof *out);
  eplb__migration_t *mv = NULL;
  size_t n = 0;
  uint32_t rounds = 0;
  eplb_status_t st = eplb__migration_plan(from, to, 0, from->num_layers, expert_bytes,
                                          staging_bytes, &mv, &n, &rounds);
  if (st)
    return st;
  uint32_t *per_layer = eplb__calloc(from->num_layers, sizeof *per_layer);
  uint64_t *in_round = eplb__calloc(from->num_gpus, sizeof *in_round);
  if (!per_layer || !in_round) {
    st = eplb__error(EPLB_ENOMEM, "planner", "plan diff: out of memory");
    goto done;
  }
  /* Receives of a GPU fill its rounds in order, so its busiest round holds
   * min(per round, its receives) transfers. */
  uint64_t per_round = staging_bytes ? staging_bytes / expert_bytes : UINT64_MAX, most = 0;
  for (size_t i = 0; i < n; i++) {
    per_layer[mv[i].layer]++;
    out->moves[mv[i].link]++;
    uint64_t c = ++in_round[mv[i].dst_gpu];
    if (c <= per_round && c > most)
      most = c;
  }
  for (int c = 0; c < 3; c++) {
    if (out->moves[c] > UINT64_MAX / expert_bytes) {
      st = eplb__error(EPLB_ERANGE, "planner", "plan diff: %llu moves of %llu bytes overflow",
                       (unsigned long long)out->moves[c], (unsigned long long)expert_bytes);
      goto done;
    }
    out->bytes[c] = out->moves[c] * expert_bytes;
  }
  out->slots_moved = n;
  out->rounds = rounds;
  if (most > UINT64_MAX / expert_bytes) {
    st = eplb__error(EPLB_ERANGE, "planner", "plan diff: %llu receives of %llu bytes overflow",
                     (unsigned long long)most, (unsigned long long)expert_bytes);
    goto done;
  }
  out->max_bytes_in_round = most * expert_bytes;
  for (uint32_t l = 0; l < from->num_layers; l++) {
    out->layers_changed += per_layer[l] > 0;
    if (per_layer[l] > out->max_layer_moved)
      out->max_layer_moved = per_layer[l];
  }
done:
  if (st)
    memset(out, 0, sizeof *out);
  eplb__free(mv);
  eplb__free(per_layer);
  eplb__free(in_round);
  return st;
}
