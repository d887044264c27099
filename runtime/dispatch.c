/* runtime/dispatch.c — per-layer dispatch tables and eplb_runtime_map. */
#include "runtime/runtime.h"
#include "kernels/alias_math.h"
#include "kernels/dispatch_math.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define EPLB__HAVE_AVX512_MAP 1
#endif

/* Cells of multi-column experts the SIMD map holds in registers (two
 * register pairs per table). */
enum { SIMD_CELLS = 128, SIMD_EXPERTS = 512 };

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
  t->ent = eplb__malloc_array(SIMD_EXPERTS, sizeof *t->ent);
  t->cslot = eplb__malloc_array(3 * (size_t)SIMD_CELLS, sizeof *t->cslot);
  t->rstart = eplb__malloc_array((size_t)E + 1, sizeof *t->rstart);
  t->rlist = eplb__malloc_array(R, sizeof *t->rlist);
  t->p2l = eplb__malloc_array(R, sizeof *t->p2l);
  t->p2l_ok = false;
  if (!t->p2l || !t->rstart || !t->rlist || !t->off || !t->slot || !t->alias || !t->prob ||
      !t->weight || !t->work || !t->q || !t->col || !t->cell || !t->direct || !t->ent ||
      !t->cslot) {
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
  eplb__free(t->ent);
  eplb__free(t->cslot);
  eplb__free(t->rstart);
  eplb__free(t->rlist);
  eplb__free(t->p2l);
  *t = (eplb__dtab_t){0};
}

/* Appends expert e's candidates (slots with share > 0, on `node` when
 * node_only) with their renormalised shares, in slot order. The arithmetic
 * is kernels/alias_math.h's, which the device's table build shares. */
static uint32_t add_candidates(eplb__dtab_t *t, uint32_t pos, uint32_t e, const double *share,
                               uint32_t per_node, uint32_t node, bool node_only) {
  const uint32_t *list = t->rlist + t->rstart[e], n = t->rstart[e + 1] - t->rstart[e];
  return pos + eplb__alias_candidates(list, n, share, per_node, node, node_only, t->slot + pos,
                                      t->weight + pos);
}

/* Vose's construction of the alias columns [a, b) (kernels/alias_math.h). */
static void build_alias(eplb__dtab_t *t, uint32_t a, uint32_t b) {
  eplb__alias_build(a, b, t->slot, t->weight, t->q, t->work, t->prob, t->alias);
}

static void build_simd(eplb__dtab_t *t, uint32_t E, uint32_t R, uint32_t cells);

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
  uint32_t pos = 0, multi = 0, cells = 0;
  /* O(E + R) in one pass over the experts (each expert's columns, packed
   * cells and entries at once): the per-batch split rebuilds a table for
   * every batch. */
  if (!t->p2l_ok || memcmp(t->p2l, phy2log, (size_t)R * sizeof *phy2log)) {
    eplb__alias_bucket(E, R, phy2log, t->rstart, t->rlist);
    memcpy(t->p2l, phy2log, (size_t)R * sizeof *phy2log);
    t->p2l_ok = true;
  }
  for (uint32_t e = 0; e < E; e++) {
    t->off[e] = pos;
    uint32_t end = pos, r = t->rlist[t->rstart[e]];
    /* Most experts have one slot: it is their only candidate (when it has a
     * share at all), with no alias column to build. */
    if (t->rstart[e + 1] - t->rstart[e] == 1 && (node_share ? node_share[r] : share[r]) > 0) {
      t->slot[pos] = t->alias[pos] = (int32_t)r;
      t->weight[pos] = 1.0;
      t->prob[pos] = UINT32_MAX;
      t->cell[pos] =
          (eplb__cell_t){(int32_t)r, (int32_t)r, eplb__dispatch_keep_below(UINT32_MAX), 0};
      t->col[e] = pos | (uint64_t)1 << 32;
      t->direct[e] = (int32_t)r;
      pos++;
      continue;
    }
    if (node_share)
      end = add_candidates(t, pos, e, node_share, per_node, node, false);
    if (local_first && !node_share)
      end = add_candidates(t, pos, e, share, per_node, node, true);
    if (end == pos)
      end = add_candidates(t, pos, e, share, per_node, node, false);
    build_alias(t, pos, end);
    for (uint32_t j = pos; j < end; j++)
      t->cell[j] =
          (eplb__cell_t){t->slot[j], t->alias[j], eplb__dispatch_keep_below(t->prob[j]), 0};
    t->col[e] = pos | (uint64_t)(end - pos) << 32;
    t->direct[e] = end - pos == 1 ? t->slot[pos] : -1;
    multi += end - pos != 1;
    cells += end - pos != 1 ? end - pos : 0;
    pos = end;
  }
  t->off[E] = pos;
  t->multi = multi;
  build_simd(t, E, R, cells);
}

/* The 16-bit register tables of the SIMD map (see eplb__dtab_t). */
/* cells: the columns of the experts without a direct slot. */
static void build_simd(eplb__dtab_t *t, uint32_t E, uint32_t R, uint32_t cells) {
  t->simd_pe = t->simd_pc = 0;
  t->calias = t->cslot + SIMD_CELLS;
  t->ckeep = t->cslot + 2 * SIMD_CELLS;
  if (E > SIMD_EXPERTS || R > 32768 || cells > SIMD_CELLS)
    return;
  uint32_t pe = 1, loc = 0;
  while (pe * 64 < E) /* a power of two: lookup's blend tree */
    pe *= 2;
  memset(t->ent, 0, (size_t)pe * 64 * sizeof *t->ent);
  memset(t->cslot, 0, 3 * (size_t)SIMD_CELLS * sizeof *t->cslot);
  for (uint32_t e = 0; e < E; e++) {
    if (t->direct[e] >= 0) {
      t->ent[e] = (uint16_t)t->direct[e];
      continue;
    }
    uint32_t n = t->off[e + 1] - t->off[e];
    t->ent[e] = (uint16_t)(0x8000u | loc | n << 7);
    for (uint32_t j = t->off[e]; j < t->off[e + 1]; j++, loc++) {
      uint32_t keep = t->cell[j].keep; /* 0 .. 65536 */
      /* v <= keep - 1 is v < keep; a column that never keeps gets its
       * alias in both places, so the comparison does not matter. */
      t->cslot[loc] = (uint16_t)(keep ? t->slot[j] : t->alias[j]);
      t->calias[loc] = (uint16_t)t->alias[j];
      t->ckeep[loc] = (uint16_t)(keep ? keep - 1 : 0);
    }
  }
  t->simd_pe = pe;
  t->simd_pc = loc > 64 ? 2 : 1;
}

/* ---- the kernel choice ----------------------------------------------------- */

static bool cpu_has(eplb__map_isa_t isa) {
  switch (isa) {
  case EPLB__MAP_SCALAR: return true;
#ifdef EPLB__HAVE_AVX512_MAP
  case EPLB__MAP_AVX512:
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
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

/* eplb__dispatch_pick (kernels/dispatch_math.h) on the packed table, for
 * an expert with several columns. */
static inline int32_t pick_packed(uint64_t th, uint32_t e, const uint64_t *col,
                                  const eplb__cell_t *cell) {
  uint64_t ce = col[e];
  const eplb__cell_t *x =
      cell + (uint32_t)ce + (uint32_t)(((uint64_t)eplb__dispatch_u(th, e) * (ce >> 32)) >> 16);
  return eplb__dispatch_v(th, e) < x->keep ? x->slot : x->alias;
}

#ifdef EPLB__HAVE_AVX512_MAP
#define SIMD_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

/* Word idx of a table of 64 * P words held in P register pairs (P a power
 * of two): one two-register permute per pair, then a tree of blends by the
 * index's bits above 6 (parallel, not a chain of compares). */
SIMD_TARGET static inline __attribute__((always_inline)) __m512i lookup(const __m512i *tab,
                                                                        uint32_t P, __m512i idx) {
#define PERM(p) _mm512_permutex2var_epi16(tab[2 * (p)], idx, tab[2 * (p) + 1])
#define BIT(w) _mm512_test_epi16_mask(idx, _mm512_set1_epi16((short)(64 * (w))))
  if (P == 1)
    return PERM(0);
  __mmask32 b1 = BIT(1);
  if (P == 2)
    return _mm512_mask_blend_epi16(b1, PERM(0), PERM(1));
  __mmask32 b2 = BIT(2);
  __m512i r0 = _mm512_mask_blend_epi16(b2, _mm512_mask_blend_epi16(b1, PERM(0), PERM(1)),
                                       _mm512_mask_blend_epi16(b1, PERM(2), PERM(3)));
  if (P == 4)
    return r0;
  __m512i r1 = _mm512_mask_blend_epi16(b2, _mm512_mask_blend_epi16(b1, PERM(4), PERM(5)),
                                       _mm512_mask_blend_epi16(b1, PERM(6), PERM(7)));
  return _mm512_mask_blend_epi16(BIT(4), r0, r1);
#undef PERM
#undef BIT
}

/* The map in 32 lanes of 16-bit words: the expert's entry, and for the
 * lanes of multi-column experts the words u and v, the column and its cell,
 * all from register tables. Lane by lane the arithmetic is that of
 * eplb__dispatch_pick: the same slots (tests/runtime). An id out of range
 * reads nothing outside the registers, so the batch is checked on the way
 * (returns the largest id as unsigned) instead of by a pass before. */
SIMD_TARGET static inline __attribute__((always_inline)) uint32_t
map_body(const eplb__dtab_t *t, const int32_t *ids, uint32_t num_tokens, uint32_t k,
         uint64_t token_base, uint32_t layer, int32_t *out, uint8_t *pack, uint32_t width,
         const uint32_t pe, const uint32_t pc) {
  enum { CT = 256 }; /* tokens whose hashes are computed at a time */
  /* The cell tables use at most 4 registers (pc <= 2); sized as ent only so
   * that lookup's deeper branches, dead for them, stay within bounds. */
  __m512i ent[2 * SIMD_EXPERTS / 64], cs[2 * SIMD_EXPERTS / 64], ca[2 * SIMD_EXPERTS / 64],
      ck[2 * SIMD_EXPERTS / 64];
  for (uint32_t p = 0; p < 2 * pe; p++)
    ent[p] = _mm512_loadu_si512(t->ent + 32 * p);
  for (uint32_t p = 0; p < 2 * pc; p++) {
    cs[p] = _mm512_loadu_si512(t->cslot + 32 * p);
    ca[p] = _mm512_loadu_si512(t->calias + 32 * p);
    ck[p] = _mm512_loadu_si512(t->ckeep + 32 * p);
  }
  const __m512i lkey =
      _mm512_set1_epi64((long long)(0x9E3779B97F4A7C15ull * ((uint64_t)layer + 1)));
  const __m512i m1 = _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ull);
  const __m512i m2 = _mm512_set1_epi64((long long)0x94D049BB133111EBull);
  const __m512i lane64 = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm512_set1_epi64(8);
  const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                        16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i ke = _mm512_set1_epi16((short)EPLB__DISPATCH_KE);
  const __m512i mu = _mm512_set1_epi16((short)EPLB__DISPATCH_MU);
  const __m512i mv = _mm512_set1_epi16((short)EPLB__DISPATCH_MV);
  const __m512i low7 = _mm512_set1_epi16(0x7F), low8 = _mm512_set1_epi16(0xFF);
  const __m512i even = _mm512_add_epi16(lane, lane);
  /* A lane's token within its block of 32 ids: (phase + lane) / k by a
   * multiply-high, exact for phase + lane < 96 (k >= 2). */
  const __m512i kinv = _mm512_set1_epi16((short)(k > 1 ? 65536 / k + 1 : 0));
  uint32_t q32 = 32 / k, r32 = 32 % k;
  /* k divides 32 (k = 1, 2, 4, 8, 16, 32): every block starts a token, so
   * the lanes' tokens are the same in every block. */
  const __m512i ti0 = k > 1 ? _mm512_mulhi_epu16(lane, kinv) : lane;
  /* Words 0-15 (u) and 16-31 (v) of each token hash, 32 past the chunk
   * for the last block's unaligned load. */
  uint16_t ta[CT + 40], tb[CT + 40];
  __m512i top = _mm512_setzero_si512();
  for (uint32_t i0 = 0; i0 < num_tokens; i0 += CT) {
    uint32_t nt = num_tokens - i0 < CT ? num_tokens - i0 : CT;
    size_t cnt = (size_t)nt * k;
    const int32_t *cid = ids + (size_t)i0 * k;
    int32_t *cout = out + (size_t)i0 * k;
    uint8_t *cpack = pack ? pack + (size_t)i0 * k * width : NULL;
    __m512i tok = _mm512_add_epi64(_mm512_set1_epi64((long long)(token_base + i0)), lane64);
    for (uint32_t i = 0; i < nt + 32; i += 8, tok = _mm512_add_epi64(tok, eight)) {
      __m512i v = _mm512_xor_si512(tok, lkey);
      v = _mm512_mullo_epi64(_mm512_xor_si512(v, _mm512_srli_epi64(v, 30)), m1);
      v = _mm512_mullo_epi64(_mm512_xor_si512(v, _mm512_srli_epi64(v, 27)), m2);
      v = _mm512_xor_si512(v, _mm512_srli_epi64(v, 31));
      _mm_storeu_si128((__m128i *)(ta + i), _mm512_cvtepi64_epi16(v));
      _mm_storeu_si128((__m128i *)(tb + i), _mm512_cvtepi64_epi16(_mm512_srli_epi64(v, 16)));
    }
    uint32_t t0 = 0, phase = 0;
    for (size_t x = 0; x < cnt; x += 32) {
      size_t rem = cnt - x;
      __mmask32 live = rem >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << rem) - 1);
      __mmask16 l0 = (__mmask16)live, l1 = (__mmask16)(live >> 16);
      /* Masked loads and stores only in a batch's last block: they cost
       * more than plain ones on some CPUs. */
      bool full = rem >= 32;
      __m512i x0 = full ? _mm512_loadu_si512(cid + x) : _mm512_maskz_loadu_epi32(l0, cid + x);
      __m512i x1 =
          full ? _mm512_loadu_si512(cid + x + 16) : _mm512_maskz_loadu_epi32(l1, cid + x + 16);
      top = _mm512_max_epu32(top, _mm512_max_epu32(x0, x1));
      __m512i e = _mm512_permutex2var_epi16(x0, even, x1); /* the ids' low words */
      if (cpack && width == 1) {
        __m256i b8 = _mm512_cvtepi16_epi8(e);
        if (full)
          _mm256_storeu_si256((__m256i *)(cpack + x), b8);
        else
          _mm256_mask_storeu_epi8(cpack + x, live, b8);
      } else if (cpack) {
        if (full)
          _mm512_storeu_si512(cpack + 2 * x, e);
        else
          _mm512_mask_storeu_epi16(cpack + 2 * x, live, e);
      }
      __m512i en = lookup(ent, pe, e), r = en;
      __mmask32 multi = _mm512_movepi16_mask(en) & live;
      if (multi) {
        __m512i ti =
            r32 == 0
                ? ti0
                : _mm512_mulhi_epu16(_mm512_add_epi16(_mm512_set1_epi16((short)phase), lane), kinv);
        __m512i a = _mm512_permutexvar_epi16(ti, _mm512_loadu_si512(ta + t0));
        __m512i b = _mm512_permutexvar_epi16(ti, _mm512_loadu_si512(tb + t0));
        __m512i kx = _mm512_mullo_epi16(e, ke);
        __m512i u = _mm512_mullo_epi16(_mm512_xor_si512(a, kx), mu);
        __m512i v = _mm512_mullo_epi16(_mm512_xor_si512(b, kx), mv);
        __m512i n = _mm512_and_si512(_mm512_srli_epi16(en, 7), low8);
        __m512i j = _mm512_add_epi16(_mm512_and_si512(en, low7), _mm512_mulhi_epu16(u, n));
        __mmask32 keep = _mm512_cmple_epu16_mask(v, lookup(ck, pc, j));
        r = _mm512_mask_blend_epi16(
            multi, en, _mm512_mask_blend_epi16(keep, lookup(ca, pc, j), lookup(cs, pc, j)));
      }
      __m512i r0 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(r));
      __m512i r1 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(r, 1));
      if (full) {
        _mm512_storeu_si512(cout + x, r0);
        _mm512_storeu_si512(cout + x + 16, r1);
      } else {
        _mm512_mask_storeu_epi32(cout + x, l0, r0);
        _mm512_mask_storeu_epi32(cout + x + 16, l1, r1);
      }
      t0 += q32, phase += r32;
      if (phase >= k)
        phase -= k, t0++;
    }
  }
  return (uint32_t)_mm512_reduce_max_epu32(top);
}

/* map_body with its table sizes as constants, so that the lookups unroll
 * and the tables stay in registers. */
#define MAP_CASE(PE, PC)                                                                           \
  case (PE)*4 + (PC):                                                                              \
    return map_body(t, ids, num_tokens, k, token_base, layer, out, pack, width, PE, PC)
SIMD_TARGET static uint32_t map_avx512(const eplb__dtab_t *t, const int32_t *ids,
                                       uint32_t num_tokens, uint32_t k, uint64_t token_base,
                                       uint32_t layer, int32_t *out, uint8_t *pack,
                                       uint32_t width) {
  switch (t->simd_pe * 4 + t->simd_pc) {
    MAP_CASE(1, 1);
    MAP_CASE(2, 1);
    MAP_CASE(4, 1);
    MAP_CASE(4, 2);
  default:
    return map_body(t, ids, num_tokens, k, token_base, layer, out, pack, width, t->simd_pe,
                    t->simd_pc);
  }
}
#undef MAP_CASE
#endif

/* Writes id x's direct slot and queues x (kept only if it has none). */
static inline uint32_t queue_direct(const int32_t *direct, const int32_t *ids, int32_t *out,
                                    uint32_t *queue, uint32_t x, uint32_t m) {
  int32_t d = direct[(uint32_t)ids[x]];
  out[x] = d;
  queue[m] = x;
  return m + ((uint32_t)d >> 31);
}

bool eplb__map_and_pack(const eplb__dtab_t *t, uint32_t k, uint32_t layer, const int32_t *topk_ids,
                        uint32_t num_tokens, uint64_t token_base, int32_t *out_slots, uint8_t *pack,
                        uint32_t width, uint32_t *top) {
#ifdef EPLB__HAVE_AVX512_MAP
  if (t->simd_pe && eplb__map_isa() == EPLB__MAP_AVX512) {
    *top = map_avx512(t, topk_ids, num_tokens, k, token_base, layer, out_slots, pack, width);
    return true;
  }
#endif
  (void)t, (void)k, (void)layer, (void)topk_ids, (void)num_tokens, (void)token_base,
      (void)out_slots;
  (void)pack, (void)width, (void)top;
  return false;
}

void eplb__map_scalar(const eplb__dtab_t *t, uint32_t k, uint32_t layer, const int32_t *topk_ids,
                      uint32_t num_tokens, uint64_t token_base, int32_t *out_slots) {
  size_t n = (size_t)num_tokens * k;
  const int32_t *direct = t->direct;
  if (!t->multi) { /* every expert has one candidate: no hash at all */
    for (size_t x = 0; x < n; x++)
      out_slots[x] = direct[(uint32_t)topk_ids[x]];
    return;
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
}
