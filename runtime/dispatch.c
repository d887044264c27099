/* runtime/dispatch.c — per-layer dispatch tables and eplb_runtime_map. */
#include "runtime/runtime.h"
#include "kernels/dispatch_math.h"

#include <math.h>

eplb_status_t eplb__dtab_alloc(eplb__dtab_t *t, uint32_t E, uint32_t R) {
  t->off = eplb__malloc_array((size_t)E + 1, sizeof *t->off);
  t->slot = eplb__malloc_array(R, sizeof *t->slot);
  t->alias = eplb__malloc_array(R, sizeof *t->alias);
  t->prob = eplb__malloc_array(R, sizeof *t->prob);
  t->weight = eplb__malloc_array(R, sizeof *t->weight);
  t->work = eplb__malloc_array(2 * (size_t)R, sizeof *t->work);
  t->q = eplb__malloc_array(R, sizeof *t->q);
  if (!t->off || !t->slot || !t->alias || !t->prob || !t->weight || !t->work || !t->q) {
    eplb__dtab_free(t);
    return eplb__error(EPLB_ENOMEM, "runtime", "dispatch table for %u experts", E);
  }
  return EPLB_OK;
}

void eplb__dtab_free(eplb__dtab_t *t) {
  eplb__free(t->off);
  eplb__free(t->slot);
  eplb__free(t->alias);
  eplb__free(t->prob);
  eplb__free(t->weight);
  eplb__free(t->work);
  eplb__free(t->q);
  *t = (eplb__dtab_t){0};
}

/* Appends expert e's candidates (slots with share > 0, on `node` when
 * node_only) with their renormalised shares. */
static uint32_t add_candidates(eplb__dtab_t *t, uint32_t pos, uint32_t e, uint32_t R,
                               const int32_t *phy2log, const double *share, uint32_t per_node,
                               uint32_t node, bool node_only) {
  double total = 0;
  for (uint32_t r = 0; r < R; r++)
    if ((uint32_t)phy2log[r] == e && share[r] > 0 && (!node_only || r / per_node == node))
      total += share[r];
  if (!(total > 0))
    return pos;
  for (uint32_t r = 0; r < R; r++) {
    if ((uint32_t)phy2log[r] != e || !(share[r] > 0) || (node_only && r / per_node != node))
      continue;
    t->slot[pos] = (int32_t)r;
    t->weight[pos] = share[r] / total;
    pos++;
  }
  return pos;
}

static uint32_t to_prob(double q) { return q >= 1 ? UINT32_MAX : (uint32_t)ldexp(q, 32); }

/* Vose's construction of the alias columns [a, b). */
static void build_alias(eplb__dtab_t *t, uint32_t a, uint32_t b) {
  uint32_t n = b - a, ns = 0, nl = 0;
  uint32_t *small = t->work, *large = t->work + n;
  double *q = t->q;
  for (uint32_t j = a; j < b; j++) {
    q[j] = t->weight[j] * n;
    if (q[j] < 1)
      small[ns++] = j;
    else
      large[nl++] = j;
  }
  while (ns && nl) {
    uint32_t s = small[--ns], l = large[nl - 1];
    t->prob[s] = to_prob(q[s]);
    t->alias[s] = t->slot[l];
    q[l] -= 1 - q[s];
    if (q[l] < 1) {
      nl--;
      small[ns++] = l;
    }
  }
  /* What is left has (up to rounding) probability 1. */
  while (nl) {
    uint32_t l = large[--nl];
    t->prob[l] = UINT32_MAX, t->alias[l] = t->slot[l];
  }
  while (ns) {
    uint32_t s = small[--ns];
    t->prob[s] = UINT32_MAX, t->alias[s] = t->slot[s];
  }
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
    build_alias(t, pos, end);
    pos = end;
  }
  t->off[E] = pos;
}

eplb_status_t eplb_runtime_map(const eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                               uint32_t num_tokens, uint64_t token_base, int32_t *out_slots) {
  if (!rt || (num_tokens > 0 && (!topk_ids || !out_slots)))
    return eplb__error(EPLB_EINVAL, "runtime", "map: NULL argument");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "map: layer %u >= %u", layer, rt->L);
  const eplb__dtab_t *t = &rt->tab[layer][rt->active[layer]];
  const uint32_t *off = t->off, *prob = t->prob;
  const int32_t *slot = t->slot, *alias = t->alias;
  uint32_t k = rt->k, E = rt->E;
  for (uint32_t i = 0; i < num_tokens; i++) {
    const int32_t *ids = topk_ids + (size_t)i * k;
    int32_t *out = out_slots + (size_t)i * k;
    uint64_t th = eplb__dispatch_token_hash(token_base + i, layer);
    for (uint32_t j = 0; j < k; j++) {
      uint32_t e = (uint32_t)ids[j];
      if (e >= E)
        return eplb__error(EPLB_ERANGE, "runtime", "map: layer %u token %u position %u: id %d",
                           layer, i, j, ids[j]);
      out[j] = eplb__dispatch_pick(th, e, off, slot, alias, prob);
    }
  }
  return EPLB_OK;
}
