#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t bench_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double bench_unit(uint64_t *s) { return (double)(bench_rand(s) >> 11) * 0x1.0p-53; }

double bench_normal(uint64_t *s) {
  double u = bench_unit(s), v = bench_unit(s);
  return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_quantile(double *v, size_t n, double q) {
  qsort(v, n, sizeof *v, bench_cmp_double);
  size_t i = (size_t)ceil(q * (double)n);
  i = i > 0 ? i - 1 : 0;
  return v[i < n ? i : n - 1];
}

double bench_balancedness(double total, uint32_t num_gpus, double max) {
  return max > 0 ? total / num_gpus / max : 1.0;
}

double bench_balancedness_of(const double *gpu, uint32_t num_gpus) {
  double total = 0, max = 0;
  for (uint32_t g = 0; g < num_gpus; g++) {
    total += gpu[g];
    max = gpu[g] > max ? gpu[g] : max;
  }
  return bench_balancedness(total, num_gpus, max);
}
