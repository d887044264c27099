#include "tests/planner/fixtures.h"

#include "tests/support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double *fx_read_matrix(const char *path, uint32_t *rows, uint32_t *cols) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  size_t cap = 1024, n = 0;
  double *v = malloc(cap * sizeof *v);
  char *line = NULL;
  size_t lcap = 0;
  uint32_t r = 0, c = 0;
  while (v && getline(&line, &lcap, f) > 0) {
    if (line[0] == '\n')
      continue;
    uint32_t k = 0;
    for (char *p = line; *p && *p != '\n';) {
      char *end;
      double x = strtod(p, &end);
      if (end == p)
        break;
      if (n == cap)
        v = realloc(v, (cap *= 2) * sizeof *v);
      v[n++] = x;
      k++;
      p = *end == ',' ? end + 1 : end;
    }
    if (r == 0)
      c = k;
    ck_assert_uint_eq(k, c);
    r++;
  }
  free(line);
  fclose(f);
  *rows = r;
  *cols = c;
  return v;
}

uint64_t fx_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double fx_uniform(uint64_t *s) { return (double)(fx_rand(s) >> 11) / 9007199254740992.0; }

double *fx_random_loads(uint64_t *s, uint32_t L, uint32_t E, int zeros) {
  double *w = malloc((size_t)L * E * sizeof *w);
  double skew = 0.5 + fx_uniform(s);
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t e = 0; e < E; e++) {
      double x = 1000.0 / pow(1 + fx_rand(s) % E, skew);
      if (fx_rand(s) % 2)
        x = floor(x);
      if (zeros && fx_rand(s) % 5 == 0)
        x = 0;
      w[(size_t)l * E + e] = x;
    }
  return w;
}

/* A GPU can avoid duplicates when its node (the whole cluster for scope 1)
 * holds at least as many distinct experts as the GPU has slots and no
 * expert has more replicas there than the node has GPUs. */
static int dup_avoidable(const int32_t *p2l, const uint32_t *slots, uint32_t G, uint32_t N,
                         uint32_t g, uint32_t E) {
  uint32_t gpn = G / N, n = g / gpn, first = 0, last, distinct = 0, maxc = 0;
  for (uint32_t h = 0; h < n * gpn; h++)
    first += slots[h];
  last = first;
  for (uint32_t h = n * gpn; h < (n + 1) * gpn; h++)
    last += slots[h];
  uint32_t *c = calloc(E, sizeof *c);
  for (uint32_t r = first; r < last; r++)
    if (c[p2l[r]]++ == 0)
      distinct++;
  for (uint32_t e = 0; e < E; e++)
    maxc = c[e] > maxc ? c[e] : maxc;
  free(c);
  return slots[g] <= distinct && maxc <= gpn;
}

void fx_check_plan(const eplb_plan_t *plan, const eplb_loads_t *loads, int no_dup) {
  uint32_t L = eplb_plan_num_layers(plan), E = eplb_plan_num_experts(plan);
  uint32_t G = eplb_plan_num_gpus(plan), R = eplb_plan_num_slots(plan);
  uint32_t N = eplb_plan_num_nodes(plan);
  const uint32_t *slots = eplb_plan_slots_per_gpu(plan);
  ck_assert_uint_eq(L, loads->num_layers);
  ck_assert_uint_eq(E, loads->num_experts);
  double *sum = calloc(E, sizeof *sum);
  uint32_t *cnt = calloc(E, sizeof *cnt);
  uint32_t *lc = calloc(E, sizeof *lc);
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *p2l = eplb_plan_phy2log(plan, l);
    const double *sh = eplb_plan_share(plan, l);
    const double *w = loads->values + (size_t)l * E;
    memset(sum, 0, E * sizeof *sum);
    memset(cnt, 0, E * sizeof *cnt);
    for (uint32_t r = 0; r < R; r++) {
      ck_assert_int_ge(p2l[r], 0);
      ck_assert_int_lt(p2l[r], (int)E);
      ck_assert(sh[r] >= -1e-12);
      sum[p2l[r]] += sh[r];
      cnt[p2l[r]]++;
    }
    ck_assert_int_eq(eplb_plan_logcnt(plan, l, lc), EPLB_OK);
    for (uint32_t e = 0; e < E; e++) {
      ck_assert_uint_ge(cnt[e], 1);
      ck_assert_uint_eq(cnt[e], lc[e]);
      ck_assert_double_eq_tol(sum[e], 1.0, 1e-9);
    }
    eplb_plan_layer_metrics_t m;
    ck_assert_int_eq(eplb_plan_layer_metrics(plan, l, &m), EPLB_OK);
    double mx = 0, total = 0;
    uint32_t first = 0;
    for (uint32_t g = 0; g < G; g++) {
      double gl = 0;
      for (uint32_t r = first; r < first + slots[g]; r++) {
        gl += sh[r] * w[p2l[r]];
        if (no_dup && !m.fallback && dup_avoidable(p2l, slots, G, no_dup == 2 ? N : 1, g, E))
          for (uint32_t q = first; q < r; q++)
            ck_assert_msg(p2l[q] != p2l[r], "layer %u GPU %u holds expert %d twice", l, g, p2l[r]);
      }
      first += slots[g];
      ck_assert_double_eq_tol(gl, eplb_plan_gpu_load(plan, l)[g], 1e-9 * (1 + gl));
      mx = gl > mx ? gl : mx;
    }
    for (uint32_t e = 0; e < E; e++)
      total += w[e];
    ck_assert_double_eq_tol(m.max_load, mx, 1e-9 * (1 + mx));
    ck_assert(m.max_load >= m.lower_bound * (1 - 1e-9));
    ck_assert(m.lower_bound >= total / G * (1 - 1e-12));
    ck_assert(m.balancedness > 0 && m.balancedness <= 1 + 1e-12);
  }
  free(sum);
  free(cnt);
  free(lc);
}
