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

eplb_status_t eplb__migration_layer(const eplb__mig_geom_t *g, uint32_t layer, const int32_t *old,
                                    const int32_t *nw, eplb__migration_t **mv, size_t *n,
                                    size_t *cap, uint32_t *used) {
  uint32_t R = g->R;
  memset(used, 0, R * sizeof *used);
  for (uint32_t s = 0; s < R; s++) {
    if (old[s] == nw[s])
      continue;
    uint32_t dg = g->slot_gpu[s], best = UINT32_MAX, best_link = 3;
    for (uint32_t r = 0; r < R; r++) {
      if (old[r] != nw[s])
        continue;
      uint32_t sg = g->slot_gpu[r];
      uint32_t link = sg == dg                             ? EPLB_LINK_SAME_GPU
                      : g->gpu_node[sg] == g->gpu_node[dg] ? EPLB_LINK_INTRA_NODE
                                                           : EPLB_LINK_INTER_NODE;
      if (link < best_link || (link == best_link && used[r] < used[best])) {
        best = r;
        best_link = link;
      }
    }
    if (best == UINT32_MAX)
      return eplb__error(EPLB_EFORMAT, "planner",
                         "migration: layer %u: expert %d of slot %u is in no slot of the old plan",
                         layer, nw[s], s);
    eplb__migration_t *grown = eplb__room_for_one(*mv, cap, *n, sizeof *grown, 64);
    if (!grown)
      return eplb__error(EPLB_ENOMEM, "planner", "migration: %zu transfers", *n + 1);
    *mv = grown;
    used[best]++;
    (*mv)[(*n)++] = (eplb__migration_t){.layer = layer,
                                        .dst_slot = s,
                                        .dst_gpu = dg,
                                        .src_slot = best,
                                        .src_gpu = g->slot_gpu[best],
                                        .expert = (uint32_t)nw[s],
                                        .link = (uint8_t)best_link,
                                        .round = 0};
  }
  return EPLB_OK;
}

uint32_t eplb__migration_rounds(const eplb__mig_geom_t *g, uint32_t nlayers, const size_t *off,
                                eplb__migration_t *mv, uint32_t layers_per_round,
                                uint64_t max_per_gpu, uint32_t *round_of, uint64_t *work) {
  uint32_t G = g->G, round = 0, layers_in_round = 0;
  uint64_t *in_round = work, *in_layer = work + G;
  memset(in_round, 0, G * sizeof *in_round);
  for (uint32_t i = 0; i < nlayers; i++) {
    memset(in_layer, 0, G * sizeof *in_layer);
    /* Same-GPU copies go through staging too: their source may be
     * overwritten by the same switch. */
    for (size_t m = off[i]; m < off[i + 1]; m++)
      in_layer[mv[m].dst_gpu]++;
    bool fits = layers_in_round < layers_per_round;
    for (uint32_t q = 0; fits && q < G; q++)
      fits = in_round[q] + in_layer[q] <= max_per_gpu;
    if (!fits && layers_in_round > 0) {
      round++;
      layers_in_round = 0;
      memset(in_round, 0, G * sizeof *in_round);
    }
    for (uint32_t q = 0; q < G; q++)
      in_round[q] += in_layer[q];
    round_of[i] = round;
    for (size_t m = off[i]; m < off[i + 1]; m++)
      mv[m].round = round;
    layers_in_round++;
  }
  return nlayers ? round + 1 : 0;
}

eplb_status_t eplb__migration_plan(const eplb_plan_t *from, const eplb_plan_t *to,
                                   uint32_t layer_begin, uint32_t layer_end, uint64_t expert_bytes,
                                   uint64_t staging_bytes, uint32_t layers_per_round,
                                   eplb__migration_t **out, size_t *count, uint32_t *rounds) {
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
  if (!expert_bytes || !layers_per_round)
    return eplb__error(EPLB_EINVAL, "planner",
                       "migration: expert_bytes and layers_per_round must be >= 1");
  if (staging_bytes && staging_bytes < expert_bytes)
    return eplb__error(EPLB_EINVAL, "planner",
                       "migration: staging budget %llu bytes is below one expert (%llu bytes)",
                       (unsigned long long)staging_bytes, (unsigned long long)expert_bytes);
  uint64_t per_round = staging_bytes ? staging_bytes / expert_bytes : UINT64_MAX;
  uint32_t G = from->num_gpus, R = from->num_slots, L = layer_end - layer_begin;
  uint32_t gpn = G / (from->num_nodes ? from->num_nodes : 1);
  eplb__migration_t *mv = NULL;
  size_t n = 0, cap = 0, nl = 0;
  uint32_t *slot_gpu = eplb__malloc_array(R, sizeof *slot_gpu);
  uint32_t *gpu_node = eplb__malloc_array(G, sizeof *gpu_node);
  uint32_t *used = eplb__malloc_array(R, sizeof *used);
  uint32_t *round_of = eplb__malloc_array((size_t)L + 1, sizeof *round_of);
  size_t *off = eplb__malloc_array((size_t)L + 1, sizeof *off);
  uint64_t *work = eplb__malloc_array(2 * (size_t)G, sizeof *work);
  if (!slot_gpu || !gpu_node || !used || !round_of || !off || !work) {
    st = eplb__error(EPLB_ENOMEM, "planner", "migration: out of memory");
    goto done;
  }
  for (uint32_t g = 0; g < G; g++) {
    gpu_node[g] = g / (gpn ? gpn : 1);
    for (uint32_t r = from->gpu_first[g]; r < from->gpu_first[g + 1]; r++)
      slot_gpu[r] = g;
  }
  eplb__mig_geom_t geom = {R, G, slot_gpu, gpu_node};
  for (uint32_t l = layer_begin; l < layer_end && st == EPLB_OK; l++) {
    size_t before = n;
    off[nl] = n;
    st = eplb__migration_layer(&geom, l, from->phy2log + (size_t)l * R, to->phy2log + (size_t)l * R,
                               &mv, &n, &cap, used);
    nl += n > before; /* layers without a change do not switch */
  }
  off[nl] = n;
  if (st == EPLB_OK && n)
    *rounds = eplb__migration_rounds(&geom, (uint32_t)nl, off, mv, layers_per_round, per_round,
                                     round_of, work);
  if (st == EPLB_OK && n) {
    *out = mv;
    *count = n;
    mv = NULL;
  }
done:
  eplb__free(mv);
  eplb__free(slot_gpu);
  eplb__free(gpu_node);
  eplb__free(used);
  eplb__free(round_of);
  eplb__free(off);
  eplb__free(work);
  if (st)
    *rounds = 0;
  return st;
}

static void plan_diff_options_defaults(eplb_plan_diff_options_t *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->expert_bytes = 44040192; /* one DeepSeek-V3 routed expert: 3 x 7168 x 2048 FP8 */
  o->staging_bytes = (uint64_t)1 << 30;
  o->layers_per_round = 4;
}

eplb_status_t eplb_plan_diff_options_init(eplb_plan_diff_options_t *o, size_t size) {
  eplb_plan_diff_options_t d;
  plan_diff_options_defaults(&d);
  return eplb__opts_init(o, size, &d, sizeof d, "eplb_plan_diff_options_t");
}

eplb_status_t eplb_plan_diff(const eplb_plan_t *from, const eplb_plan_t *to, uint64_t expert_bytes,
                             uint64_t staging_bytes, eplb_plan_diff_stats_t *out) {
  eplb_plan_diff_options_t o;
  eplb_plan_diff_options_default(&o);
  o.expert_bytes = expert_bytes;
  o.staging_bytes = staging_bytes;
  o.layers_per_round = UINT32_MAX;
  return eplb_plan_diff_schedule(from, to, &o, out);
}

eplb_status_t eplb_plan_diff_schedule(const eplb_plan_t *from, const eplb_plan_t *to,
                                      const eplb_plan_diff_options_t *opts,
                                      eplb_plan_diff_stats_t *out) {
  if (!from || !to || !out || !opts)
    return eplb__error(EPLB_EINVAL, "planner", "plan diff: NULL argument");
  memset(out, 0, sizeof *out);
  eplb_plan_diff_options_t own;
  eplb_status_t take = EPLB__OPTS_TAKE(own, opts, eplb_plan_diff_options_default,
                                       "eplb_plan_diff_options_t", "planner");
  if (take != EPLB_OK)
    return take;
  opts = &own;
  eplb__migration_t *mv = NULL;
  size_t n = 0;
  uint32_t rounds = 0;
  uint64_t expert_bytes = opts->expert_bytes;
  eplb_status_t st =
      eplb__migration_plan(from, to, 0, from->num_layers, expert_bytes, opts->staging_bytes,
                           opts->layers_per_round, &mv, &n, &rounds);
  if (st)
    return st;
  uint32_t *per_layer = eplb__calloc(from->num_layers, sizeof *per_layer);
  uint64_t *in_round =
      eplb__calloc((size_t)from->num_gpus * (rounds ? rounds : 1), sizeof *in_round);
  if (!per_layer || !in_round) {
    st = eplb__error(EPLB_ENOMEM, "planner", "plan diff: out of memory");
    goto done;
  }
  uint64_t most = 0; /* the most one GPU receives in one round */
  for (size_t i = 0; i < n; i++) {
    per_layer[mv[i].layer]++;
    out->moves[mv[i].link]++;
    uint64_t c = ++in_round[(size_t)mv[i].round * from->num_gpus + mv[i].dst_gpu];
    most = c > most ? c : most;
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
