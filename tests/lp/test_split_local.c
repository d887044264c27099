/* tests/lp/test_split_local.c — the locality stage at production-like sizes
 * (up to 8 nodes, 64 GPUs, 256 experts): T* is the plain split's (also on
 * a second solve with the warm handle), every GPU stays within
 * T* (1 + tolerance), and the cross-node volume of both solves equals the
 * optimum of the GLPK transportation LP at the same capacity (1e-9
 * relative of the tokens); the node shares route exactly that split. Up
 * to 32 nodes and 128 GPUs for the many-node graph. */
#include "lp/lp.h"
#include "tests/reference/reference.h"
#include "tests/support.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t rnd(void) { return eplb_test_xorshift(&rng_state); }

static uint32_t rndn(uint32_t n) { return (uint32_t)(rnd() % n); }

enum { MAXE = 256, MAXG = 64, MAXR = 640, MAXN = 8 };
/* The many-node instances (the hub graph, from 8 nodes on). */
enum { BIGG = 128, BIGR = 1024, BIGN = 32 };

typedef struct inst {
  uint32_t E, G, R, N;
  uint32_t phy2log[BIGR], slots[BIGG], gnode[BIGG], rep_gpu[BIGR], rep_node[BIGR];
  double nl[BIGN * MAXE];
} inst_t;

/* Uniform slots per GPU, every expert once, extra replicas of the heaviest
 * ones (the planners' shape) or anywhere; slot order shuffled per GPU. */
static void gen(inst_t *in, int integer, bool many) {
  uint32_t maxg = many ? BIGG : MAXG, maxr = many ? BIGR : MAXR;
  in->G = many ? 16 + rndn(maxg - 15) : 2 + rndn(maxg - 1);
  uint32_t S = 1 + rndn(maxr / in->G < 10 ? maxr / in->G : 10);
  in->R = in->G * S;
  in->E = 1 + rndn(in->R < MAXE ? in->R : MAXE);
  uint32_t nn = in->G / (1 + rndn(4)); /* many: 8 to 32 nodes of 1 to 4 GPUs */
  if (many)
    in->N = nn < 8 ? 8 : nn > BIGN ? BIGN : nn;
  else
    in->N = 2 + rndn(in->G < MAXN ? in->G - 1 : MAXN - 1);
  for (uint32_t g = 0; g < in->G; g++)
    in->slots[g] = S, in->gnode[g] = g * in->N / in->G;
  for (uint32_t r = 0; r < in->R; r++)
    in->phy2log[r] = r < in->E ? r : rndn(rndn(2) ? in->E : 1 + in->E / 8);
  for (uint32_t r = in->R - 1; r > 0; r--) {
    uint32_t j = rndn(r + 1), t = in->phy2log[r];
    in->phy2log[r] = in->phy2log[j], in->phy2log[j] = t;
  }
  for (uint32_t r = 0; r < in->R; r++)
    in->rep_gpu[r] = r / S, in->rep_node[r] = in->gnode[r / S];
  for (uint32_t i = 0; i < in->N * in->E; i++) {
    uint32_t e = i % in->E;
    double w = rndn(5) ? (double)rndn(200 / (1 + e % 16) + 1) : 0;
    in->nl[i] = integer ? w : w * 0.37;
  }
}

/* The node shares describe the split returned: per node and expert with
 * tokens they sum to 1, and the tokens they route give the GPU loads and
 * the cross-node volume reported. */
static void check_rows(const inst_t *in, const double *ns, const double *gl, double cross,
                       double tot, int i) {
  static double load[BIGG];
  double xc = 0, tol = 1e-9 * fmax(tot, 1);
  memset(load, 0, sizeof load);
  for (uint32_t v = 0; v < in->N; v++)
    for (uint32_t e = 0; e < in->E; e++) {
      double d = in->nl[v * in->E + e], sum = 0;
      if (!(d > 0))
        continue;
      for (uint32_t r = 0; r < in->R; r++) {
        if (in->phy2log[r] != e)
          continue;
        double x = ns[(size_t)v * in->R + r];
        ck_assert_msg(x >= -1e-12, "instance %d: node %u replica %u share %g", i, v, r, x);
        sum += x, load[in->rep_gpu[r]] += x * d;
        xc += in->rep_node[r] != v ? x * d : 0;
      }
      ck_assert_msg(fabs(sum - 1) <= 1e-9, "instance %d: node %u expert %u shares sum %.17g", i, v,
                    e, sum);
    }
  for (uint32_t g = 0; g < in->G; g++)
    ck_assert_msg(fabs(load[g] - gl[g]) <= tol, "instance %d GPU %u: rows %.17g, load %.17g", i, g,
                  load[g], gl[g]);
  ck_assert_msg(fabs(xc - cross) <= tol, "instance %d: rows cross %.17g, %.17g", i, xc, cross);
}

static void run(uint64_t seed, int n, int integer, bool many, uint64_t hub_arcs) {
  eplb_split_options_t o;
  eplb_split_options_default(&o);
  o.mode = integer ? EPLB_SPLIT_INTEGER : EPLB_SPLIT_FRACTIONAL;
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(&o, &s), EPLB_OK);
  ck_assert_int_eq(eplb__split_local_hub_arcs(s, hub_arcs), EPLB_OK);
  static inst_t in;
  static double share[2][BIGR], gl[2][BIGG], ns[2][BIGN * BIGR], x[BIGN * BIGR], w[MAXE];
  static double share0[BIGR], gl0[BIGG];
  rng_state = seed;
  for (int i = 0; i < n; i++) {
    gen(&in, integer, many);
    eplb_split_problem_t p = {in.E, in.G, in.R, in.phy2log, in.slots};
    double tol = (double)rndn(3) * 0.05;
    eplb_split_local_t loc = {in.N, in.gnode, in.nl, tol};
    double cross[2], tstar[2];
    for (int rep = 0; rep < 2; rep++) {
      eplb_split_result_t r = {.share = share[rep], .gpu_load = gl[rep]};
      eplb_status_t st = eplb_split_solve_local(s, &p, &loc, &r, ns[rep], &cross[rep]);
      ck_assert_msg(st == EPLB_OK, "instance %d: %s", i, eplb_error_detail());
      tstar[rep] = r.t_star;
    }
    ck_assert(tstar[0] == tstar[1]);
    double tot = 0;
    for (uint32_t e = 0; e < in.E; e++) {
      w[e] = 0;
      for (uint32_t v = 0; v < in.N; v++)
        w[e] += in.nl[v * in.E + e];
      tot += w[e];
    }
    eplb_split_result_t r0 = {.share = share0, .gpu_load = gl0};
    ck_assert_int_eq(eplb_split_solve(s, &p, w, &r0), EPLB_OK);
    ck_assert_msg(r0.t_star == tstar[0], "instance %d: T* %.17g vs %.17g", i, tstar[0], r0.t_star);
    double t = tstar[0];
    double cap = integer ? fmax(ceil(t), floor(t * (1 + tol))) : t * (1 + tol);
    for (uint32_t g = 0; g < in.G; g++)
      ck_assert_msg(gl[0][g] <= cap * (1 + 1e-9) + 1e-9, "instance %d GPU %u: %.17g > %.17g", i, g,
                    gl[0][g], cap);
    eplb_test_transport_problem_t tp = {in.N,        in.E,       in.R,
                                        in.G,        in.phy2log, in.rep_gpu,
                                        in.rep_node, in.nl,      integer ? cap : cap * (1 + 1e-13)};
    double ref = -1;
    eplb_status_t st = eplb_test_transport_solve(&tp, x, &ref);
    ck_assert_msg(st == EPLB_OK, "instance %d: transport %s", i, eplb_error_detail());
    for (int rep = 0; rep < 2; rep++) {
      ck_assert_msg(fabs(cross[rep] - ref) <= 1e-9 * fmax(tot, 1),
                    "instance %d: cross %.17g LP %.17g", i, cross[rep], ref);
      check_rows(&in, ns[rep], gl[rep], cross[rep], tot, i);
    }
  }
  eplb_split_destroy(s);
}

START_TEST(local_large_matches_transport_lp) {
  run(0x5eed1234abcdull + (uint64_t)_i, 150, _i, false, 1u << 16);
}
END_TEST

/* 8 to 32 nodes: the hub graph, whose node shares split each hub's flow
 * over the nodes that fed it. */
START_TEST(local_many_nodes_matches_transport_lp) {
  /* The hub graph forced (these instances are below its size rule), then
   * the pair graph on the same instances. */
  run(0x40b5eedull + (uint64_t)(_i & 1), 30, _i & 1, true, _i < 2 ? 0 : UINT64_MAX);
}
END_TEST

/* The load checks are a branch-free pass that lets -0.0 and every other
 * valid load through, then an exact pass when a bit looks wrong: -0.0 must
 * give the bytes +0.0 gives, and each bad load is named, first one first. */
START_TEST(local_load_checks) {
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  static inst_t in;
  static double share[2][MAXR], gl[2][MAXG], ns[2][MAXN * MAXR];
  rng_state = 0x10adc4ec5ull;
  for (int i = 0; i < 40; i++) {
    gen(&in, 0, false);
    eplb_split_problem_t p = {in.E, in.G, in.R, in.phy2log, in.slots};
    double cross[2];
    for (int neg = 0; neg < 2; neg++) {
      for (uint32_t k = 0; neg && k < in.N * in.E; k++)
        in.nl[k] = in.nl[k] == 0 ? -0.0 : in.nl[k];
      eplb_split_local_t loc = {in.N, in.gnode, in.nl, 0.01};
      eplb_split_result_t r = {.share = share[neg], .gpu_load = gl[neg]};
      eplb_split_reset(s); /* a warm start may move T* by an ulp, hence the shares */
      ck_assert_msg(eplb_split_solve_local(s, &p, &loc, &r, ns[neg], &cross[neg]) == EPLB_OK,
                    "instance %d: %s", i, eplb_error_detail());
    }
    ck_assert(!memcmp(share[0], share[1], in.R * sizeof share[0][0]));
    ck_assert(!memcmp(gl[0], gl[1], in.G * sizeof gl[0][0]));
    ck_assert(!memcmp(ns[0], ns[1], (size_t)in.N * in.R * sizeof ns[0][0]));
    ck_assert(!memcmp(&cross[0], &cross[1], sizeof cross[0]));
  }
  static const double bad[] = {-1.0, -DBL_MIN / 4, -INFINITY, INFINITY, NAN, -NAN};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    gen(&in, 0, false);
    uint32_t at = rndn(in.N * in.E), late = in.N * in.E - 1;
    in.nl[late] = -2.0; /* a later bad load: the first is named */
    in.nl[at < late ? at : 0] = bad[b];
    eplb_split_problem_t p = {in.E, in.G, in.R, in.phy2log, in.slots};
    eplb_split_local_t loc = {in.N, in.gnode, in.nl, 0.01};
    eplb_split_result_t r = {.share = share[0], .gpu_load = gl[0]};
    ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &r, ns[0], NULL), EPLB_EINVAL);
    char want[64];
    uint32_t k = at < late ? at : 0;
    snprintf(want, sizeof want, "node %u expert %u:", k / in.E, k % in.E);
    ck_assert_msg(strstr(eplb_error_detail(), want), "%s: %s", want, eplb_error_detail());
  }
  eplb_split_destroy(s);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("lp_local");
  TCase *t = tcase_create("split_local");
  tcase_set_timeout(t, 120);
  tcase_add_loop_test(t, local_large_matches_transport_lp, 0, 2);
  tcase_add_loop_test(t, local_many_nodes_matches_transport_lp, 0, 4);
  tcase_add_test(t, local_load_checks);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
