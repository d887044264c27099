/* kernels/dispatch_math.h — the pure functions of the dispatch map, shared by
 * the CPU map (runtime/dispatch.c, kernels/map.c) and the CUDA map
 * (kernels/map.cu) so that both choose bit-identical slots. C and CUDA.
 *
 * The per-(token, expert) part works on 16-bit words on purpose: the CPU
 * map runs it in 32 lanes of an AVX-512 register (multiplies, shifts and
 * register-table lookups of 16-bit words), which is what makes the map
 * cost about a cycle per id. The token hash is a full 64-bit mix; two of
 * its 16-bit words drive the column (u) and the coin (v). For a fixed
 * expert the steps from a word to u or v are bijections of 16-bit words,
 * so over uniformly hashed tokens the column is uniform to 2^-16 and the
 * coin is independent of it: the shares hold to about 2^-16. */
#ifndef EPLB_DISPATCH_MATH_H
#define EPLB_DISPATCH_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define EPLB__HD __host__ __device__
#else
#define EPLB__HD
#endif

/* The constants of the 16-bit steps (the SIMD map uses the same). */
#define EPLB__DISPATCH_KE 0x9E37u /* expert key: e * KE (mod 2^16) */
#define EPLB__DISPATCH_MU 0xA965u /* column word multiplier (odd) */
#define EPLB__DISPATCH_MV 0xC2B3u /* coin word multiplier (odd) */

/* splitmix64's finaliser: a well-mixed 64-bit value per (token, layer). */
static inline EPLB__HD uint64_t eplb__mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ x >> 31;
}

/* The per-token hash of global token `token` in `layer`. */
static inline EPLB__HD uint64_t eplb__dispatch_token_hash(uint64_t token, uint32_t layer) {
  return eplb__mix64(token ^ (0x9E3779B97F4A7C15ull * ((uint64_t)layer + 1)));
}

/* The column word u of expert e for a token of hash th (16 bits). The
 * multiply spreads the expert's key over the high bits, which pick the
 * column, so that the experts of one token choose independently-looking
 * columns; no further mixing step: each step is on the SIMD map's critical
 * path (measured: two xor-shifts cost 7% of the map). */
static inline EPLB__HD uint32_t eplb__dispatch_u(uint64_t th, uint32_t e) {
  uint32_t ke = (e * EPLB__DISPATCH_KE) & 0xFFFFu;
  return (((uint32_t)th & 0xFFFFu) ^ ke) * EPLB__DISPATCH_MU & 0xFFFFu;
}

/* The coin word v of expert e for a token of hash th (16 bits). */
static inline EPLB__HD uint32_t eplb__dispatch_v(uint64_t th, uint32_t e) {
  uint32_t ke = (e * EPLB__DISPATCH_KE) & 0xFFFFu;
  return (((uint32_t)(th >> 16) & 0xFFFFu) ^ ke) * EPLB__DISPATCH_MV & 0xFFFFu;
}

/* A column keeps its own slot when v < this (0 .. 65536): its alias
 * probability prob (2^-32 units) rounded to 2^-16 units. */
static inline EPLB__HD uint32_t eplb__dispatch_keep_below(uint32_t prob) {
  return (uint32_t)(((uint64_t)prob + 32768u) >> 16);
}

/* The slot of expert e for a token of hash th: columns off[e] .. off[e+1]
 * of an alias table (see runtime/runtime.h, eplb__dtab_t). The caller
 * checks e < E. */
static inline EPLB__HD int32_t eplb__dispatch_pick(uint64_t th, uint32_t e, const uint32_t *off,
                                                   const int32_t *slot, const int32_t *alias,
                                                   const uint32_t *prob) {
  uint32_t c = off[e], n = off[e + 1] - c;
  if (n == 1) /* most experts in most plans: no hash needed */
    return slot[c];
  c += (uint32_t)(((uint64_t)eplb__dispatch_u(th, e) * n) >> 16);
  return eplb__dispatch_v(th, e) < eplb__dispatch_keep_below(prob[c]) ? slot[c] : alias[c];
}

#endif
