/* tests/lp/test_split_mask.c — a split with slots out of service
 * (eplb_split_solve_in_service) is the split of the placement without them:
 * compared with a solve of that placement built by hand, globally and with
 * the locality stage; share 0 on the slots out of service; bad input. */
#include "tests/support.h"

#include <eplb/split.h>

#include <math.h>
#include <string.h>

enum { MAXR = 96, MAXG = 12, MAXE = 32, MAXN = 3 };

typedef struct inst {
  uint32_t E, G, R, N;
  uint32_t p2l[MAXR], spg[MAXG], gnode[MAXG];
  uint8_t oos[MAXR];
  double w[MAXE], nw[MAXN * MAXE];
} inst_t;

/* A random placement where every expert keeps a slot in service. */
static void gen(inst_t *in, uint64_t *st) {
  memset(in, 0, sizeof *in);
  in->E = 2 + (uint32_t)(eplb_test_xorshift(st) % 20);
  in->G = 2 + (uint32_t)(eplb_test_xorshift(st) % 8);
  in->N = 1 + (uint32_t)(eplb_test_xorshift(st) % MAXN);
  in->N = in->N > in->G ? in->G : in->N;
  uint32_t per = (in->E * 2 + in->G - 1) / in->G;
  in->R = per * in->G;
  for (uint32_t g = 0; g < in->G; g++) {
    in->spg[g] = per;
    in->gnode[g] = g * in->N / in->G;
  }
  for (uint32_t r = 0; r < in->R; r++) {
    in->p2l[r] = r < in->E ? r : (uint32_t)(eplb_test_xorshift(st) % in->E);
    in->oos[r] = r >= in->E && eplb_test_xorshift(st) % 4 == 0; /* the first E serve */
  }
  for (uint32_t e = 0; e < in->E; e++) {
    in->w[e] = 0;
    for (uint32_t n = 0; n < in->N; n++) {
      double v = (double)(eplb_test_xorshift(st) % 100);
      in->nw[n * in->E + e] = v;
      in->w[e] += v;
    }
  }
}

/* The placement without the slots out of service, by hand. */
static void compact(const inst_t *in, uint32_t *p2l, uint32_t *spg, uint32_t *idx, uint32_t *n) {
  uint32_t r = 0;
  *n = 0;
  for (uint32_t g = 0; g < in->G; g++) {
    spg[g] = 0;
    for (uint32_t j = 0; j < in->spg[g]; j++, r++)
      if (!in->oos[r]) {
        p2l[*n] = in->p2l[r];
        idx[(*n)++] = r;
        spg[g]++;
      }
  }
}

START_TEST(same_as_the_placement_without_them) {
  uint64_t st = 0x5eed + (uint64_t)_i;
  for (int it = 0; it < 200; it++) {
    inst_t in;
    gen(&in, &st);
    uint32_t cp[MAXR], cs[MAXG], idx[MAXR], n;
    compact(&in, cp, cs, idx, &n);
    eplb_split_t *a = NULL, *b = NULL;
    ck_assert_int_eq(eplb_split_create(NULL, &a), EPLB_OK);
    ck_assert_int_eq(eplb_split_create(NULL, &b), EPLB_OK);
    eplb_split_problem_t full = {in.E, in.G, in.R, in.p2l, in.spg};
    eplb_split_problem_t part = {in.E, in.G, n, cp, cs};
    double sh[MAXR], am[MAXR], gl[MAXG], sh2[MAXR], gl2[MAXG];
    eplb_split_result_t ra = {.share = sh, .amount = am, .gpu_load = gl};
    eplb_split_result_t rb = {.share = sh2, .gpu_load = gl2};
    int local = it % 2 && in.N > 1;
    double ns[MAXN * MAXR], ns2[MAXN * MAXR], xa = -1, xb = -1;
    if (local) {
      eplb_split_local_t loc = {in.N, in.gnode, in.nw, 0.01};
      ck_assert_int_eq(eplb_split_solve_in_service(a, &full, in.oos, &loc, NULL, &ra, ns, &xa),
                       EPLB_OK);
      ck_assert_int_eq(eplb_split_solve_local(b, &part, &loc, &rb, ns2, &xb), EPLB_OK);
      ck_assert(fabs(xa - xb) <= 1e-9 * (1 + xb));
    } else {
      ck_assert_int_eq(eplb_split_solve_in_service(a, &full, in.oos, NULL, in.w, &ra, NULL, NULL),
                       EPLB_OK);
      ck_assert_int_eq(eplb_split_solve(b, &part, in.w, &rb), EPLB_OK);
    }
    ck_assert(fabs(ra.t_star - rb.t_star) <= 1e-12 * (1 + rb.t_star));
    for (uint32_t g = 0; g < in.G; g++)
      ck_assert(fabs(gl[g] - gl2[g]) <= 1e-9 * (1 + gl2[g]));
    for (uint32_t r = 0; r < in.R; r++)
      if (in.oos[r]) {
        ck_assert(sh[r] == 0 && am[r] == 0);
        for (uint32_t v = 0; local && v < in.N; v++)
          ck_assert(ns[v * in.R + r] == 0);
      }
    for (uint32_t j = 0; j < n; j++) {
      ck_assert(sh[idx[j]] == sh2[j]);
      for (uint32_t v = 0; local && v < in.N; v++)
        ck_assert(ns[v * in.R + idx[j]] == ns2[v * n + j]);
    }
    eplb_split_destroy(a);
    eplb_split_destroy(b);
  }
}
END_TEST

START_TEST(bad_input) {
  uint32_t p2l[4] = {0, 1, 1, 0}, spg[2] = {2, 2}, gnode[2] = {0, 1};
  uint8_t oos[4] = {0, 0, 1, 1};
  double w[2] = {5, 7}, nw[4] = {1, 2, 3, 4}, sh[4], gl[2], ns[8];
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  eplb_split_problem_t pb = {2, 2, 4, p2l, spg};
  eplb_split_result_t res = {.share = sh, .gpu_load = gl};
  ck_assert_int_eq(eplb_split_solve_in_service(s, &pb, oos, NULL, w, &res, NULL, NULL), EPLB_OK);
  ck_assert(sh[2] == 0 && sh[3] == 0 && sh[0] == 1 && sh[1] == 1);
  ck_assert_int_eq(eplb_split_solve_in_service(NULL, &pb, oos, NULL, w, &res, NULL, NULL),
                   EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_solve_in_service(s, &pb, NULL, NULL, w, &res, NULL, NULL),
                   EPLB_EINVAL);
  eplb_split_local_t loc = {2, gnode, nw, 0.0};
  ck_assert_int_eq(eplb_split_solve_in_service(s, &pb, oos, &loc, NULL, &res, NULL, NULL),
                   EPLB_EINVAL); /* node_share required */
  ck_assert_int_eq(eplb_split_solve_in_service(s, &pb, oos, &loc, NULL, &res, ns, NULL), EPLB_OK);
  uint8_t lose[4] = {1, 0, 0, 1}; /* expert 0 has no slot in service */
  ck_assert_int_eq(eplb_split_solve_in_service(s, &pb, lose, NULL, w, &res, NULL, NULL),
                   EPLB_EINVAL);
  uint8_t all[4] = {1, 1, 1, 1};
  ck_assert_int_eq(eplb_split_solve_in_service(s, &pb, all, NULL, w, &res, NULL, NULL),
                   EPLB_EINVAL);
  uint32_t bad_spg[2] = {2, 3};
  eplb_split_problem_t bad = {2, 2, 4, p2l, bad_spg};
  ck_assert_int_eq(eplb_split_solve_in_service(s, &bad, oos, NULL, w, &res, NULL, NULL),
                   EPLB_ESHAPE);
  p2l[1] = 9; /* out of range: the solver's own check */
  ck_assert_int_eq(eplb_split_solve_in_service(s, &pb, oos, NULL, w, &res, NULL, NULL),
                   EPLB_ERANGE);
  eplb_split_destroy(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("lp-split-mask");
  TCase *t = tcase_create("in_service");
  tcase_add_loop_test(t, same_as_the_placement_without_them, 0, 3);
  tcase_add_test(t, bad_input);
  suite_add_tcase(s, t);
  return eplb_test_run(s);
}
