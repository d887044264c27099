#include "core/core.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

void eplb__rng_seed(eplb__rng_t *rng, uint64_t seed) {
  /* splitmix64 never yields four zero words, the one state xoshiro cannot leave. */
  for (int i = 0; i < 4; i++)
    rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t eplb__rng_next(eplb__rng_t *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double eplb__rng_uniform(eplb__rng_t *rng) {
  return (double)(eplb__rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t eplb__rng_below(eplb__rng_t *rng, uint64_t n) {
  /* Rejection of the short top range removes modulo bias. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do
    x = eplb__rng_next(rng);
  while (x >= limit);
  return x % n;
}

double eplb__rng_normal(eplb__rng_t *rng) {
  double u, v, s;
  do {
    u = 2.0 * eplb__rng_uniform(rng) - 1.0;
    v = 2.0 * eplb__rng_uniform(rng) - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  /* The second variate is dropped so the stream never depends on hidden state. */
  return u * sqrt(-2.0 * log(s) / s);
}
