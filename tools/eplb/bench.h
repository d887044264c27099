/* tools/eplb/bench.h — what the benchmarks share: a monotonic clock, a small
 * deterministic PRNG for their synthetic inputs, and order statistics. */
#ifndef EPLB_CLI_BENCH_H
#define EPLB_CLI_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC. */
double bench_now(void);

/* splitmix64: small, fast, and the same sequence on every platform. */
uint64_t bench_rand(uint64_t *state);
/* Uniform in [0, 1) with 53 random bits. */
double bench_unit(uint64_t *state);
/* Standard normal (Box-Muller). */
double bench_normal(uint64_t *state);

/* qsort comparator for doubles, ascending. */
int bench_cmp_double(const void *a, const void *b);
/* Nearest-rank quantile q in [0, 1] of v[n] (n >= 1); sorts v in place. */
double bench_quantile(double *v, size_t n, double q);

#endif
