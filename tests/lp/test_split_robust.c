/* tests/lp/test_split_robust.c — robust static shares: one step reproduces
 * the exact split, shares are valid, a hand-made fragile case where exact
 * aggregate shares lose, weights, bad input and allocation failures. */
#include "eplb/split.h"
#include "tests/support.h"

#include <math.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t rnd(void) { return eplb_test_xorshift(&rng_state); }

static uint32_t rndn(uint32_t n) { return (uint32_t)(rnd() % n); }
static double rndu(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

enum { MAXE = 40, MAXG = 12, MAXR = 80, MAXS = 8 };

typedef struct inst {
  uint32_t E, G, R, S;
  uint32_t phy2log[MAXR], slots[MAXG];
  double w[MAXS * MAXE];
} inst_t;

/* Random GPU-major placement: every expert once, extra replicas anywhere;
 * S random step load vectors (some experts idle in some steps). */
static void gen(inst_t *in) {
  uint32_t gpu[MAXR], ex[MAXR];
  in->E = 2 + rndn(MAXE - 1);
  in->G = 1 + rndn(MAXG);
  in->R = in->E + rndn(MAXR - in->E + 1);
  in->S = 1 + rndn(MAXS);
  for (uint32_t r = 0; r < in->R; r++) {
    ex[r] = r < in->E ? r : rndn(in->E);
    gpu[r] = rndn(in->G);
  }
  uint32_t k = 0;
  memset(in->slots, 0, sizeof in->slots);
  for (uint32_t g = 0; g < in->G; g++)
    for (uint32_t r = 0; r < in->R; r++)
      if (gpu[r] == g) {
        in->phy2log[k++] = ex[r];
        in->slots[g]++;
      }
  for (uint32_t i = 0; i < in->S * in->E; i++)
    in->w[i] = rndn(4) ? floor(rndu() * 100) : 0.0;
}

static eplb_split_problem_t problem_of(const inst_t *in) {
  return (eplb_split_problem_t){in->E, in->G, in->R, in->phy2log, in->slots};
}

/* sum_s T_s / m_s of the shares (steps without load skipped). */
static double objective(const eplb_split_problem_t *p, const double *w, uint32_t S,
                        const double *share) {
  double obj = 0;
  for (uint32_t s = 0; s < S; s++) {
    const double *ws = w + (size_t)s * p->num_experts;
    double tot = 0, t = 0;
    for (uint32_t e = 0; e < p->num_experts; e++)
      tot += ws[e];
    for (uint32_t g = 0, r = 0; g < p->num_gpus; g++) {
      double l = 0;
      for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++)
        l += share[r] * ws[p->phy2log[r]];
      t = l > t ? l : t;
    }
    if (tot > 0)
      obj += t / (tot / p->num_gpus);
  }
  return obj;
}

static void check_shares(const eplb_split_problem_t *p, const double *share) {
  double sum[MAXE] = {0};
  for (uint32_t r = 0; r < p->num_slots; r++) {
    ck_assert(share[r] >= 0 && share[r] <= 1 + 1e-12);
    sum[p->phy2log[r]] += share[r];
  }
  for (uint32_t e = 0; e < p->num_experts; e++)
    ck_assert_msg(fabs(sum[e] - 1) < 1e-9, "expert %u shares sum to %g", e, sum[e]);
}

START_TEST(one_step_equals_exact) {
  static inst_t in;
  rng_state = 0x1234 + (uint64_t)_i;
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  for (int it = 0; it < 60; it++) {
    gen(&in);
    eplb_split_problem_t p = problem_of(&in);
    double sh_e[MAXR], sh_r[MAXR], gl[MAXG];
    eplb_split_result_t ex = {.share = sh_e, .gpu_load = gl};
    eplb_split_result_t ro = {.share = sh_r, .gpu_load = gl};
    ck_assert_int_eq(eplb_split_solve(s, &p, in.w, &ex), EPLB_OK);
    ck_assert_int_eq(eplb_split_solve_robust(s, &p, in.w, 1, &ro), EPLB_OK);
    check_shares(&p, sh_r);
    ck_assert_msg(fabs(ro.t_star - ex.t_star) <= 1e-7 * fmax(ex.t_star, 1),
                  "robust %.12g exact %.12g", ro.t_star, ex.t_star);
    /* One step: gpu_load is that step's, its max is T*. */
    ck_assert(fabs(ro.max_load - ex.t_star) <= 1e-7 * fmax(ex.t_star, 1));
  }
  eplb_split_destroy(s);
}
END_TEST

START_TEST(many_steps_valid_and_no_worse) {
  static inst_t in;
  rng_state = 0x9876 + (uint64_t)_i;
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  for (int it = 0; it < 60; it++) {
    gen(&in);
    eplb_split_problem_t p = problem_of(&in);
    double sh_e[MAXR], sh_r[MAXR], gl[MAXG], am[MAXR], agg[MAXE] = {0};
    uint8_t be[MAXE], bg[MAXG];
    memset(be, 7, sizeof be);
    memset(bg, 7, sizeof bg);
    for (uint32_t k = 0; k < in.S; k++)
      for (uint32_t e = 0; e < in.E; e++)
        agg[e] += in.w[k * in.E + e];
    eplb_split_result_t ex = {.share = sh_e, .gpu_load = gl};
    eplb_split_result_t ro = {.share = sh_r,
                              .gpu_load = gl,
                              .amount = am,
                              .bottleneck_experts = be,
                              .bottleneck_gpus = bg};
    ck_assert_int_eq(eplb_split_solve(s, &p, agg, &ex), EPLB_OK);
    ck_assert_int_eq(eplb_split_solve_robust(s, &p, in.w, in.S, &ro), EPLB_OK);
    check_shares(&p, sh_r);
    ck_assert(ro.num_bottleneck_experts == 0 && ro.num_bottleneck_gpus == 0);
    for (uint32_t e = 0; e < in.E; e++)
      ck_assert(be[e] == 0);
    double tot = 0;
    for (uint32_t r = 0; r < in.R; r++)
      tot += am[r];
    for (uint32_t e = 0; e < in.E; e++)
      tot -= agg[e] / in.S;
    ck_assert(fabs(tot) < 1e-6 * (1 + ro.max_load * in.G));
    /* The LP's optimum is no worse than any other shares: exact, uniform. */
    double o_r = objective(&p, in.w, in.S, sh_r);
    ck_assert(o_r <= objective(&p, in.w, in.S, sh_e) * (1 + 1e-7) + 1e-9);
    double un[MAXR];
    uint32_t cnt[MAXE] = {0};
    for (uint32_t r = 0; r < in.R; r++)
      cnt[in.phy2log[r]]++;
    for (uint32_t r = 0; r < in.R; r++)
      un[r] = 1.0 / cnt[in.phy2log[r]];
    ck_assert(o_r <= objective(&p, in.w, in.S, un) * (1 + 1e-7) + 1e-9);
  }
  eplb_split_destroy(s);
}
END_TEST

/* GPU 0 holds A and B, GPU 1 holds A and C. Step 1: only A (2 tokens);
 * step 2: B = 1, C = 3. The aggregate (A 2, B 1, C 3) has a unique exact
 * split: all of A on GPU 0 (loads 3, 3). Step 1 then puts everything on
 * GPU 0 (T/m = 2) while the robust split halves A (T/m = 1); step 2 does
 * not depend on A (T/m = 1.5). */
START_TEST(fragile_exact_shares) {
  uint32_t p2l[4] = {0, 1, 0, 2}, slots[2] = {2, 2};
  eplb_split_problem_t p = {3, 2, 4, p2l, slots};
  double w[6] = {2, 0, 0, 0, 1, 3}, agg[3] = {2, 1, 3};
  double sh_e[4], sh_r[4], gl[2];
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  eplb_split_result_t ex = {.share = sh_e, .gpu_load = gl};
  ck_assert_int_eq(eplb_split_solve(s, &p, agg, &ex), EPLB_OK);
  ck_assert(fabs(ex.t_star - 3) < 1e-12 && fabs(sh_e[0] - 1) < 1e-12);
  eplb_split_result_t ro = {.share = sh_r, .gpu_load = gl};
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, &ro), EPLB_OK);
  double oe = objective(&p, w, 2, sh_e), orb = objective(&p, w, 2, sh_r);
  ck_assert(fabs(oe - 3.5) < 1e-9);
  ck_assert_msg(fabs(orb - 2.5) < 1e-9, "robust objective %g", orb);
  ck_assert(fabs(sh_r[0] - 0.5) < 1e-9 && fabs(sh_r[2] - 0.5) < 1e-9);
  ck_assert(ro.iterations == 1);
  /* t_star: mean of the steps' T: (1 + 3) / 2. */
  ck_assert(fabs(ro.t_star - 2) < 1e-9);
  /* Weights: the aggregate as the only counted step (weight 1, the two
   * steps 0) gives the exact split again. */
  double w3[9] = {2, 0, 0, 0, 1, 3, 2, 1, 3}, v[3] = {0, 0, 1};
  ck_assert_int_eq(eplb_split_solve_robust_weighted(s, &p, w3, v, 3, &ro), EPLB_OK);
  ck_assert(fabs(sh_r[0] - 1) < 1e-9);
  eplb_split_destroy(s);
}
END_TEST

START_TEST(fixed_shares_skip_the_lp) {
  /* No expert is replicated: shares are 1, no LP; an idle replicated expert
   * gets uniform shares. */
  uint32_t p2l[4] = {0, 1, 2, 2}, slots[2] = {2, 2};
  eplb_split_problem_t p = {3, 2, 4, p2l, slots};
  double w[6] = {1, 2, 0, 3, 1, 0}, sh[4], gl[2];
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  eplb_split_result_t ro = {.share = sh, .gpu_load = gl};
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, &ro), EPLB_OK);
  ck_assert(ro.iterations == 0);
  ck_assert(sh[0] == 1 && sh[1] == 1 && sh[2] == 0.5 && sh[3] == 0.5);
  ck_assert(fabs(ro.t_star - 3.5) < 1e-12); /* steps' T: 3 and 4 (all on GPU 0) */
  eplb_split_destroy(s);
}
END_TEST

START_TEST(bad_input) {
  uint32_t p2l[3] = {0, 1, 0}, slots[2] = {2, 1};
  eplb_split_problem_t p = {2, 2, 3, p2l, slots};
  double w[4] = {1, 2, 3, 4}, sh[3], gl[2];
  eplb_split_result_t r = {.share = sh, .gpu_load = gl};
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  ck_assert_int_eq(eplb_split_solve_robust(NULL, &p, w, 2, &r), EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_solve_robust(s, NULL, w, 2, &r), EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, NULL, 2, &r), EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 0, &r), EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, NULL), EPLB_EINVAL);
  w[3] = -1;
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, &r), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "step 1 expert 1"));
  w[3] = NAN;
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, &r), EPLB_EINVAL);
  w[3] = 4;
  double v[2] = {1, -1};
  ck_assert_int_eq(eplb_split_solve_robust_weighted(s, &p, w, v, 2, &r), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "step_weights[1]"));
  p2l[2] = 5;
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, &r), EPLB_ERANGE);
  p2l[2] = 0;
  slots[1] = 2;
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, &r), EPLB_ESHAPE);
  slots[1] = 1;
  p2l[1] = 0; /* expert 1 has no replica */
  ck_assert_int_eq(eplb_split_solve_robust(s, &p, w, 2, &r), EPLB_EINVAL);
  eplb_split_destroy(s);
}
END_TEST

START_TEST(allocation_failures) {
  static inst_t in;
  rng_state = 77;
  do
    gen(&in);
  while (in.R == in.E);
  eplb_split_problem_t p = problem_of(&in);
  double sh[MAXR], gl[MAXG];
  eplb_split_result_t r = {.share = sh, .gpu_load = gl};
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  eplb_test_alloc_install();
  int ok = 0;
  for (long n = 0; n < 100 && !ok; n++) {
    eplb_test_alloc_reset();
    eplb_test_alloc_fail_after(n);
    eplb_status_t st = eplb_split_solve_robust(s, &p, in.w, in.S, &r);
    eplb_test_alloc_reset();
    ck_assert(st == EPLB_OK || st == EPLB_ENOMEM);
    ok = st == EPLB_OK;
  }
  ck_assert(ok);
  check_shares(&p, sh);
  eplb_split_destroy(s);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("lp-robust");
  TCase *t = tcase_create("robust");
  tcase_add_loop_test(t, one_step_equals_exact, 0, 2);
  tcase_add_loop_test(t, many_steps_valid_and_no_worse, 0, 2);
  tcase_add_test(t, fragile_exact_shares);
  tcase_add_test(t, fixed_shares_skip_the_lp);
  tcase_add_test(t, bad_input);
  tcase_add_test(t, allocation_failures);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
