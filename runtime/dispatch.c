/* runtime/dispatch.c — per-layer dispatch tables and eplb_runtime_map. */
#include "runtime/runtime.h"

#include <math.h>

eplb_status_t eplb__dtab_alloc(eplb__dtab_t *t, uint32_t E, uint32_t R) {
  t->off = eplb__malloc_array((size_t)E + 1, sizeof *t->off);
  t->slot = eplb__malloc_array(R, sizeof *t->slot);
  t->cdf = eplb__malloc_array(R, sizeof *t->cdf);
  t->single = eplb__malloc_array(E, sizeof *t->single);
  if (!t->off || !t->slot || !t->cdf || !t->single) {
    eplb__dtab_free(t);
    return eplb__error(EPLB_ENOMEM, "runtime", "dispatch table for %u experts", E);
  }
  return EPLB_OK;
}

void eplb__dtab_free(eplb__dtab_t *t) {
  eplb__free(t->off);
  eplb__free(t->slot);
  eplb__free(t->cdf);
  eplb__free(t->single);
  t->off = NULL, t->slot = NULL, t->cdf = NULL, t->single = NULL;
}

/* Appends expert e's candidates (slots with share > 0, on `node` when
 * node_only) with thresholds of their cumulative renormalised share. */
static uint32_t add_candidates(eplb__dtab_t *t, uint32_t pos, uint32_t e, uint32_t R,
                               const int32_t *phy2log, const double *share, uint32_t per_node,
                               uint32_t node, bool node_only) {
  double total = 0;
  for (uint32_t r = 0; r < R; r++)
    if ((uint32_t)phy2log[r] == e && share[r] > 0 && (!node_only || r / per_node == node))
      total += share[r];
  if (!(total > 0))
    return pos;
  double cum = 0;
  for (uint32_t r = 0; r < R; r++) {
    if ((uint32_t)phy2log[r] != e || !(share[r] > 0) || (node_only && r / per_node != node))
      continue;
    cum += share[r] / total;
    double th = ldexp(cum, 32);
    t->slot[pos] = (int32_t)r;
    t->cdf[pos] = th >= 4294967295.0 ? UINT32_MAX : (uint32_t)th;
    pos++;
  }
  return pos;
}

void eplb__dtab_build(eplb__dtab_t *t, uint32_t E, uint32_t R, const int32_t *phy2log,
                      const double *share, uint32_t slots_per_rank, uint32_t ranks_per_node,
                      uint32_t node, int local_first) {
  uint32_t per_node = slots_per_rank * ranks_per_node;
  uint32_t pos = 0;
  /* O(E * R) is fine: tables are rebuilt only when a layer switches. */
  for (uint32_t e = 0; e < E; e++) {
    t->off[e] = pos;
    uint32_t end = pos;
    if (local_first)
      end = add_candidates(t, pos, e, R, phy2log, share, per_node, node, true);
    if (end == pos)
      end = add_candidates(t, pos, e, R, phy2log, share, per_node, node, false);
    t->single[e] = end - pos == 1 ? t->slot[pos] : -1;
    pos = end;
  }
  t->off[E] = pos;
}

/* splitmix64 finaliser over (token, layer, expert). */
static inline uint32_t token_hash(uint64_t token, uint32_t layer, uint32_t expert) {
  uint64_t x = token * 0x9E3779B97F4A7C15ull ^ ((uint64_t)layer << 32 | expert);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (uint32_t)(x >> 32);
}

eplb_status_t eplb_runtime_map(const eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                               uint32_t num_tokens, uint64_t token_base, int32_t *out_slots) {
  if (!rt || (num_tokens > 0 && (!topk_ids || !out_slots)))
    return eplb__error(EPLB_EINVAL, "runtime", "map: NULL argument");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "map: layer %u >= %u", layer, rt->L);
  const eplb__dtab_t *t = &rt->tab[layer][rt->active[layer]];
  uint32_t k = rt->k, E = rt->E;
  for (uint32_t i = 0; i < num_tokens; i++) {
    const int32_t *ids = topk_ids + (size_t)i * k;
    int32_t *out = out_slots + (size_t)i * k;
    for (uint32_t j = 0; j < k; j++) {
      uint32_t e = (uint32_t)ids[j];
      if (e >= E)
        return eplb__error(EPLB_ERANGE, "runtime", "map: layer %u token %u position %u: id %d",
                           layer, i, j, ids[j]);
      int32_t s = t->single[e];
      if (s < 0) {
        uint32_t h = token_hash(token_base + i, layer, e);
        uint32_t c = t->off[e], last = t->off[e + 1] - 1;
        while (c < last && h >= t->cdf[c])
          c++;
        s = t->slot[c];
      }
      out[j] = s;
    }
  }
  return EPLB_OK;
}
