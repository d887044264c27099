/* tools/eplb/bench/bench.h — what the benchmarks share: a monotonic clock, a small
 * deterministic PRNG for their synthetic inputs, order statistics and balancedness. */
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

/* Balancedness, mean GPU load over the busiest's (1 when idle): the
 * library's rule (core's eplb__balancedness, which a tool cannot call),
 * here once for the benchmarks and the replay. */
double bench_balancedness(double total, uint32_t num_gpus, double max);
/* The same of GPU loads gpu [num_gpus], summed in GPU order. */
double bench_balancedness_of(const double *gpu, uint32_t num_gpus);

/* The benchmarks, dispatched by cli_bench (cmd_bench.c). */
int cli_bench_trace(int argc, char **argv);
int cli_bench_plan(int argc, char **argv);
int cli_bench_split(int argc, char **argv);
int cli_bench_runtime(int argc, char **argv);

/* ---- eplb bench plan --scale (bench_scale.c) ---------------------------- */

/* The policies of the growth table. */
enum { SP_DEEPSEEK, SP_BALANCED, SP_UNIFORM, SP_INCREMENTAL, SP_LOCALITY, SP_COUNT };
/* Their names, indexed by the enum (bench_scale.c). */
extern const char *const scale_policy_names[SP_COUNT];

typedef struct {
  uint32_t layers, repeat, threads; /* threads: the threaded column (0 = online cores) */
  uint32_t *experts, *gpus, *slots; /* slots per GPU */
  uint32_t n_experts, n_gpus, n_slots;
  unsigned policies; /* bit i: scale_policy_names[i] */
  double budget_s;   /* rows not started within it are skipped */
  int json;
} scale_cfg_t;

/* Runs and prints the growth table; returns the exit code. */
int bench_plan_scale(const scale_cfg_t *cfg);

#endif
