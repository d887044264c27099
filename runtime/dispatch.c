/* runtime/dispatch.c — per-layer dispatch tables and eplb_runtime_map. */
#include "runtime/runtime.h"
#include "kernels/dispatch_math.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define EPLB__HAVE_AVX512_MAP 1
#endif

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
  t->cell8 = eplb__malloc_array(R, sizeof *t->cell8);
  if (!t->off || !t->slot || !t->alias || !t->prob || !t->weight || !t->work || !t->q || !t->col ||
      !t->cell || !t->direct || !t->cell8) {
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
  eplb__free(t->cell8);
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
  eplb__dtab_build_node(t, E, R, phy2log, share, NULL, slots_per_rank, ranks_per_node, node,
                        local_first);
}

void eplb__dtab_build_node(eplb__dtab_t *t, uint32_t E, uint32_t R, const int32_t *phy2log,
                           const double *share, const double *node_share, uint32_t slots_per_rank,
                           uint32_t ranks_per_node, uint32_t node, int local_first) {
  uint32_t per_node = slots_per_rank * ranks_per_node;
  uint32_t pos = 0;
  /* O(E * R) is fine: tables are rebuilt only when a layer switches. */
  for (uint32_t e = 0; e < E; e++) {
    t->off[e] = pos;
    uint32_t end = pos;
    if (node_share)
      end = add_candidates(t, pos, e, R, phy2log, node_share, per_node, node, false);
    if (local_first && !node_share)
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
  if (R <= 65536)
    for (uint32_t j = 0; j < pos; j++)
      t->cell8[j] =
          t->prob[j] | (uint64_t)(uint32_t)t->slot[j] << 32 | (uint64_t)(uint32_t)t->alias[j] << 48;
}

/* ---- the kernel choice ----------------------------------------------------- */

static bool cpu_has(eplb__map_isa_t isa) {
  switch (isa) {
  case EPLB__MAP_SCALAR: return true;
#ifdef EPLB__HAVE_AVX512_MAP
  case EPLB__MAP_AVX512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
#endif
  default: return false;
  }
}

static eplb__map_isa_t detect(void) {
  const char *env = getenv("EPLB_MAP_ISA");
  if (env && strcmp(env, "scalar") == 0)
    return EPLB__MAP_SCALAR;
  return cpu_has(EPLB__MAP_AVX512) ? EPLB__MAP_AVX512 : EPLB__MAP_SCALAR;
}

/* Atomic so that concurrent first calls of map (each detecting the same
 * answer) are well defined. */
static _Atomic int map_isa = EPLB__MAP_AUTO;

eplb__map_isa_t eplb__map_isa(void) {
  int isa = atomic_load_explicit(&map_isa, memory_order_relaxed);
  if (isa == EPLB__MAP_AUTO) {
    isa = (int)detect();
    atomic_store_explicit(&map_isa, isa, memory_order_relaxed);
  }
  return (eplb__map_isa_t)isa;
}

bool eplb__map_force_isa(eplb__map_isa_t isa) {
  if (isa == EPLB__MAP_AUTO) {
    atomic_store_explicit(&map_isa, (int)detect(), memory_order_relaxed);
    return true;
  }
  if (!cpu_has(isa))
    return false;
  atomic_store_explicit(&map_isa, (int)isa, memory_order_relaxed);
  return true;
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

#ifdef EPLB__HAVE_AVX512_MAP
/* The whole map in 64-bit lanes, 8 ids per step, without the direct/queue
 * split: pick_packed is exact for single-column experts too, and its two
 * gathers (column, 8-byte cell) cost less than the split's scattered
 * stores. The token hash is recomputed per lane (two multiplies are cheaper
 * than a gather). Lane by lane the arithmetic is eplb__dispatch_token_hash,
 * eplb__dispatch_column_hash and pick_packed: the same slots. */
__attribute__((target("avx512f,avx512dq,avx512vl"))) static void
map_avx512(const int32_t *ids, uint32_t num_tokens, uint32_t k, uint64_t token_base, uint32_t layer,
           const uint64_t *col, const uint64_t *cell8, int32_t *out) {
  const __m512i lkey =
      _mm512_set1_epi64((long long)(0x9E3779B97F4A7C15ull * ((uint64_t)layer + 1)));
  const __m512i m1 = _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ull);
  const __m512i m2 = _mm512_set1_epi64((long long)0x94D049BB133111EBull);
  const __m512i c1 = _mm512_set1_epi64((long long)0xD1B54A32D192ED03ull);
  const __m512i c2 = _mm512_set1_epi64((long long)0xD6E8FEB86659FD93ull);
  const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFFll), lo16 = _mm512_set1_epi64(0xFFFF);
  const __m512i sh_slot = _mm512_set1_epi64(32), sh_alias = _mm512_set1_epi64(48);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm256_set1_epi32(8);
  enum { CHUNK = 512 };         /* ids, as in the scalar map */
  uint32_t inv = 65536 / k + 1; /* x / k == x * inv >> 16 for x < CHUNK, k <= 64 */
  const __m256i vinv = _mm256_set1_epi32((int)inv);
  uint32_t per = CHUNK / k;
  /* Token hashes of a chunk, 8 tokens per step; 8 ids span at most 8
   * tokens, so each step of ids permutes one unaligned load of them. */
  uint64_t th[CHUNK + 16];
  const __m512i lane64 = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), eight64 = _mm512_set1_epi64(8);
  for (uint32_t i0 = 0; i0 < num_tokens; i0 += per) {
    uint32_t nt = num_tokens - i0 < per ? num_tokens - i0 : per, cnt = nt * k;
    const int32_t *cid = ids + (size_t)i0 * k;
    int32_t *cout = out + (size_t)i0 * k;
    __m512i tok = _mm512_add_epi64(_mm512_set1_epi64((long long)(token_base + i0)), lane64);
    /* One step past nt: the last unaligned load reads only computed hashes. */
    for (uint32_t i = 0; i < nt + 8; i += 8, tok = _mm512_add_epi64(tok, eight64)) {
      __m512i v = _mm512_xor_si512(tok, lkey);
      v = _mm512_mullo_epi64(_mm512_xor_si512(v, _mm512_srli_epi64(v, 30)), m1);
      v = _mm512_mullo_epi64(_mm512_xor_si512(v, _mm512_srli_epi64(v, 27)), m2);
      _mm512_storeu_si512(th + i, _mm512_xor_si512(v, _mm512_srli_epi64(v, 31)));
    }
    __m256i xl = lane;
    for (uint32_t x = 0; x < cnt; x += 8, xl = _mm256_add_epi32(xl, eight)) {
      __mmask8 live = cnt - x >= 8 ? 0xFF : (__mmask8)((1u << (cnt - x)) - 1);
      __m256i e = _mm256_maskz_loadu_epi32(live, cid + x);
      __m512i ce = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), live, e, col, 8);
      uint32_t t0 = (x * inv) >> 16;
      __m256i ti = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_mullo_epi32(xl, vinv), 16),
                                    _mm256_set1_epi32((int)t0));
      __m512i thv =
          _mm512_permutexvar_epi64(_mm512_cvtepu32_epi64(ti), _mm512_loadu_si512(th + t0));
      __m512i h = _mm512_mullo_epi64(_mm512_cvtepu32_epi64(e), c1);
      h = _mm512_mullo_epi64(_mm512_xor_si512(thv, h), c2);
      h = _mm512_xor_si512(h, _mm512_srli_epi64(h, 32));
      __m512i c = _mm512_mul_epu32(_mm512_srli_epi64(h, 32), _mm512_srli_epi64(ce, 32));
      /* off + column < 2^32: the low halves of the sum are the index. */
      __m256i j = _mm512_cvtepi64_epi32(_mm512_add_epi64(_mm512_srli_epi64(c, 32), ce));
      __m512i cell = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), live, j, cell8, 8);
      __mmask8 keep =
          _mm512_cmplt_epu64_mask(_mm512_and_si512(h, lo32), _mm512_and_si512(cell, lo32));
      __m512i s = _mm512_and_si512(
          _mm512_srlv_epi64(cell, _mm512_mask_blend_epi64(keep, sh_alias, sh_slot)), lo16);
      _mm256_mask_storeu_epi32(cout + x, live, _mm512_cvtepi64_epi32(s));
    }
  }
}
#endif

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
#ifdef EPLB__HAVE_AVX512_MAP
  /* The 8-byte cells hold 16-bit slots. */
  if (t->multi && rt->R <= 65536 && eplb__map_isa() == EPLB__MAP_AVX512) {
    map_avx512(topk_ids, num_tokens, k, token_base, layer, t->col, t->cell8, out_slots);
    return EPLB_OK;
  }
#endif
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
  const uint64_t *col = t->col;
  const eplb__cell_t *cell = t->cell;
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
      out[y] = pick_packed(th[(y * inv) >> 16], (uint32_t)ids[y], col, cell);
    }
  }
  return EPLB_OK;
}
