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
  t->col = eplb__malloc_array(E, sizeof *t->col);
  t->cell = eplb__malloc_array(R, sizeof *t->cell);
  t->direct = eplb__malloc_array(E, sizeof *t->direct);
  if (!t->off || !t->slot || !t->alias || !t->prob || !t->weight || !t->work || !t->q || !t->col ||
      !t->cell || !t->direct) {
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
  eplb__free(t->col);
  eplb__free(t->cell);
  eplb__free(t->direct);
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
  t->multi = 0;
  for (uint32_t e = 0; e < E; e++) {
    t->col[e] = t->off[e] | (uint64_t)(t->off[e + 1] - t->off[e]) << 32;
    t->direct[e] = t->off[e + 1] - t->off[e] == 1 ? t->slot[t->off[e]] : -1;
    t->multi += t->direct[e] < 0;
  }
  for (uint32_t j = 0; j < pos; j++)
    t->cell[j] = (eplb__cell_t){t->slot[j], t->alias[j], t->prob[j], 0};
}

/* eplb__dispatch_pick (kernels/dispatch_math.h) without its branch, on the
 * packed table: an expert with one column has prob UINT32_MAX and alias =
 * slot (build_alias), and its column offset ((h >> 32) * 1) >> 32 is 0, so
 * the general path returns slot[c] as the shortcut does; the choice stays
 * bit-identical to the CUDA map (tests/runtime: map_matches_dispatch_math).
 * The shortcut's branch is a coin flip wherever hot experts are
 * replicated; this path costs the same for every id. */
static inline int32_t pick_packed(uint64_t th, uint32_t e, const uint64_t *col,
                                  const eplb__cell_t *cell) {
  uint64_t ce = col[e];
  uint64_t h = eplb__dispatch_column_hash(th, e);
  const eplb__cell_t *x = cell + (uint32_t)ce + (uint32_t)(((h >> 32) * (ce >> 32)) >> 32);
  return (uint32_t)h < x->prob ? x->slot : x->alias;
}

/* Writes id x's direct slot and queues x (kept only if it has none). */
static inline uint32_t queue_direct(const int32_t *direct, const int32_t *ids, int32_t *out,
                                    uint32_t *queue, uint32_t x, uint32_t m) {
  int32_t d = direct[(uint32_t)ids[x]];
  out[x] = d;
  queue[m] = x;
  return m + ((uint32_t)d >> 31);
}

eplb_status_t eplb_runtime_map(const eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                               uint32_t num_tokens, uint64_t token_base, int32_t *out_slots) {
  if (!rt || (num_tokens > 0 && (!topk_ids || !out_slots)))
    return eplb__error(EPLB_EINVAL, "runtime", "map: NULL argument");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "map: layer %u >= %u", layer, rt->L);
  uint32_t k = rt->k, E = rt->E;
  size_t n = (size_t)num_tokens * k;
  /* One vectorised check of the batch keeps the loop below free of it. */
  if (!eplb__ids_below(topk_ids, n, E))
    for (size_t x = 0; x < n; x++)
      if ((uint32_t)topk_ids[x] >= E)
        return eplb__error(EPLB_ERANGE, "runtime", "map: layer %u token %zu position %zu: id %d",
                           layer, x / k, x % k, topk_ids[x]);
  const eplb__dtab_t *t = &rt->tab[layer][rt->active[layer]];
  const int32_t *direct = t->direct;
  if (!t->multi) { /* every expert has one candidate: no hash at all */
    for (size_t x = 0; x < n; x++)
      out_slots[x] = direct[(uint32_t)topk_ids[x]];
    return EPLB_OK;
  }
  /* Two passes per chunk of tokens: every id takes its expert's direct
   * slot (a load and a store), queuing the ids of experts with several
   * columns without a branch; only those pay for the hash and the alias
   * column. Most ids in most plans have a single candidate. */
  enum { CHUNK = 512 };         /* ids; >= 8 tokens since k <= 64 */
  uint32_t queue[CHUNK];        /* local ids of experts with several columns */
  uint64_t th[CHUNK];           /* per local token */
  uint32_t inv = 65536 / k + 1; /* x / k == x * inv >> 16 for x < CHUNK, k <= 64 */
  uint32_t per = CHUNK / k;
  for (uint32_t i0 = 0; i0 < num_tokens; i0 += per) {
    uint32_t nt = num_tokens - i0 < per ? num_tokens - i0 : per, cnt = nt * k, m = 0, x = 0;
    const int32_t *restrict ids = topk_ids + (size_t)i0 * k;
    int32_t *restrict out = out_slots + (size_t)i0 * k;
    for (; x + 4 <= cnt; x += 4) {
      m = queue_direct(direct, ids, out, queue, x, m);
      m = queue_direct(direct, ids, out, queue, x + 1, m);
      m = queue_direct(direct, ids, out, queue, x + 2, m);
      m = queue_direct(direct, ids, out, queue, x + 3, m);
    }
    for (; x < cnt; x++)
      m = queue_direct(direct, ids, out, queue, x, m);
    if (!m)
      continue;
    for (uint32_t i = 0; i < nt; i++)
      th[i] = eplb__dispatch_token_hash(token_base + i0 + i, layer);
    for (uint32_t q = 0; q < m; q++) {
      uint32_t y = queue[q];
      out[y] = pick_packed(th[(y * inv) >> 16], (uint32_t)ids[y], t->col, t->cell);
    }
  }
  return EPLB_OK;
}
