/* kernels/dispatch_math.h — the pure functions of the dispatch map, shared by
 * the CPU map (runtime/dispatch.c, kernels/map.c) and the CUDA map
 * (kernels/map.cu) so that both choose bit-identical slots. C and CUDA. */
#ifndef EPLB_DISPATCH_MATH_H
#define EPLB_DISPATCH_MATH_H

#include <stdint.h>

#ifdef __CUDACC__
#define EPLB__HD __host__ __device__
#else
#define EPLB__HD
#endif

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

/* The per-(token, expert) hash that picks an alias column and its coin:
 * one multiply and a fold on the token hash th. */
static inline EPLB__HD uint64_t eplb__dispatch_column_hash(uint64_t th, uint32_t e) {
  uint64_t h = (th ^ ((uint64_t)e * 0xD1B54A32D192ED03ull)) * 0xD6E8FEB86659FD93ull;
  return h ^ h >> 32;
}

/* The slot of expert e for a token of hash th: columns off[e] .. off[e+1]
 * of an alias table (see runtime/runtime.h, eplb__dtab_t). Per expert one
 * multiply and a fold, which keeps the choice of every (token, layer,
 * expert) independent enough for the shares to hold (tested) at a third of
 * the cost of a full mix. The caller checks e < E. */
static inline EPLB__HD int32_t eplb__dispatch_pick(uint64_t th, uint32_t e, const uint32_t *off,
                                                   const int32_t *slot, const int32_t *alias,
                                                   const uint32_t *prob) {
  uint32_t c = off[e], n = off[e + 1] - c;
  if (n == 1) /* most experts in most plans: no hash needed */
    return slot[c];
  uint64_t h = eplb__dispatch_column_hash(th, e);
  c += (uint32_t)(((h >> 32) * n) >> 32);
  /* A mask, not a branch: the comparison is a coin flip. */
  uint32_t keep = 0u - (uint32_t)((uint32_t)h < prob[c]);
  return (int32_t)(((uint32_t)slot[c] & keep) | ((uint32_t)alias[c] & ~keep));
}

#endif
