/* tests/planner/test_uniform_bound.c — the uniform-share certificate is a
 * lower bound. On small random instances the optimum over every uniform
 * plan (every count vector, every placement filling the slots) is found by
 * exhaustive search here, and
 *   exact-share bound <= uniform bound <= optimum <= planner's max load,
 * with the uniform bound strictly above the exact-share one on some of them
 * (so the test would catch a bound that is merely the old one again, and an
 * invalid one above an optimum). */
#include "tests/support.h"
#include "fixtures.h"
#include "planner/planner.h"

#include <eplb/plan.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXE 6
#define MAXG 4

typedef struct {
  uint32_t E, G, S;
  const double *w;
  uint32_t c[MAXE];    /* counts of the vector under search */
  uint32_t left[MAXE]; /* replicas not yet placed */
  double best;         /* least max load found (starts at the planner's) */
} ex_t;

/* Fills GPU g with k more replicas from experts e.. (cur: its load so far,
 * mx: max of the GPUs before it), then the next GPU. */
static void fill(ex_t *x, uint32_t g, uint32_t e, uint32_t k, double cur, double mx) {
  if (k == 0) {
    double m = cur > mx ? cur : mx;
    if (m >= x->best)
      return;
    if (g + 1 == x->G)
      x->best = m;
    else
      fill(x, g + 1, 0, x->S, 0, m);
    return;
  }
  if (e == x->E)
    return;
  uint32_t most = k < x->left[e] ? k : x->left[e];
  for (uint32_t n = most + 1; n-- > 0;) {
    double v = cur + n * (x->w[e] / x->c[e]);
    if (v >= x->best)
      continue;
    x->left[e] -= n;
    fill(x, g, e + 1, k - n, v, mx);
    x->left[e] += n;
  }
}

/* Every count vector with c_e >= 1 summing to `left` over experts e.. . */
static void counts(ex_t *x, uint32_t e, uint32_t left) {
  if (e + 1 == x->E) {
    x->c[e] = left;
  } else {
    for (uint32_t c = 1; c + (x->E - e - 1) <= left; c++) {
      x->c[e] = c;
      counts(x, e + 1, left - c);
    }
    return;
  }
  for (uint32_t i = 0; i < x->E; i++)
    if (x->w[i] / x->c[i] >= x->best)
      return; /* one replica alone reaches the best */
  memcpy(x->left, x->c, x->E * sizeof *x->c);
  fill(x, 0, 0, x->S, 0, 0);
}

static eplb_plan_t *plan_of(const eplb_loads_t *ld, eplb_plan_shares_t sh, uint32_t G, uint32_t R) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_BALANCED;
  o.shares = sh;
  o.num_gpus = G;
  o.num_replicas = R;
  o.threads = 1;
  eplb_plan_t *p = NULL;
  ck_assert_msg(eplb_plan_create(ld, &o, &p) == EPLB_OK, "%s", eplb_error_detail());
  return p;
}

START_TEST(bound_below_every_uniform_plan) {
  uint64_t s = 15015;
  uint32_t above = 0, n = 0, at_opt = 0;
  for (int t = 0; t < 400; t++) {
    uint32_t G = 1 + (uint32_t)(fx_rand(&s) % MAXG), S = 1 + (uint32_t)(fx_rand(&s) % 4);
    while (G * S > 12)
      S--;
    uint32_t R = G * S, E = 2 + (uint32_t)(fx_rand(&s) % (MAXE - 1));
    if (E > R)
      E = R;
    if (E < 2)
      continue;
    eplb_loads_t *ld = NULL;
    ck_assert_int_eq(eplb_loads_create(1, E, &ld), EPLB_OK);
    for (uint32_t e = 0; e < E; e++) { /* skewed integers, a few zeros */
      double u = fx_uniform(&s);
      ld->values[e] = t % 7 == 0 && e == E - 1 ? 0 : floor(1 + 200 * u * u * u);
    }
    eplb_plan_t *pu = plan_of(ld, EPLB_SHARES_UNIFORM, G, R);
    eplb_plan_t *px = plan_of(ld, EPLB_SHARES_EXACT, G, R);
    eplb_plan_layer_metrics_t mu, mx;
    ck_assert_int_eq(eplb_plan_layer_metrics(pu, 0, &mu), EPLB_OK);
    ck_assert_int_eq(eplb_plan_layer_metrics(px, 0, &mx), EPLB_OK);
    ex_t x = {.E = E, .G = G, .S = S, .w = ld->values, .best = mu.max_load * (1 + 1e-12)};
    counts(&x, 0, R);
    double opt = x.best < mu.max_load ? x.best : mu.max_load;
    ck_assert_msg(mu.lower_bound <= opt * (1 + 1e-9),
                  "case %d (E=%u G=%u S=%u): uniform bound %.17g above the optimum %.17g", t, E, G,
                  S, mu.lower_bound, opt);
    ck_assert_msg(mu.lower_bound >= mx.lower_bound * (1 - 1e-12),
                  "case %d: uniform bound %.17g below the exact-share one %.17g", t, mu.lower_bound,
                  mx.lower_bound);
    above += mu.lower_bound > mx.lower_bound * (1 + 1e-6);
    at_opt += mu.max_load <= opt * (1 + 1e-9);
    n++;
    eplb_plan_destroy(pu);
    eplb_plan_destroy(px);
    eplb_loads_destroy(ld);
  }
  printf("# %u instances: uniform bound above the exact-share one on %u, planner optimal on %u\n",
         n, above, at_opt);
  ck_assert_uint_gt(above, 0);
}
END_TEST

/* The bound of the layer w[E] on G GPUs of S slots each, with the integer
 * knapsack over counts (#15) or with the LP relaxation alone (the bound
 * before it), from the mean GPU load up to sum w (a load every plan is
 * within). */
static double bound_of(const double *w, uint32_t E, uint32_t G, uint32_t S, bool integral) {
  uint32_t slots[MAXG], first[MAXG + 1] = {0};
  double sum = 0;
  for (uint32_t g = 0; g < G; g++) {
    slots[g] = S;
    first[g + 1] = first[g] + S;
  }
  for (uint32_t e = 0; e < E; e++)
    sum += w[e];
  eplb__layer_ctx_t c = {.w = w,
                         .num_experts = E,
                         .num_gpus = G,
                         .num_nodes = 1,
                         .num_slots = G * S,
                         .slots_per_gpu = slots,
                         .gpu_first = first};
  return eplb__uniform_bound_ex(&c, sum / G, 2 * sum + 1, integral);
}

/* The integer knapsack against exhaustive optima (every count vector, every
 * placement) of tiny instances (E <= 5, G <= 4, S <= 3, G S <= 9), called directly so
 * that the planner's shortcut (no uniform bound within 0.1% of the
 * exact-share one) hides nothing: never above an optimum, never below the
 * LP-only bound, strictly above it on some. */
START_TEST(integer_bound_below_exhaustive_optimum) {
  uint64_t s = 1515;
  uint32_t above = 0, n = 0;
  for (int t = 0; t < 3000; t++) {
    uint32_t G = 1 + (uint32_t)(fx_rand(&s) % MAXG), S = 1 + (uint32_t)(fx_rand(&s) % 3);
    uint32_t E = 1 + (uint32_t)(fx_rand(&s) % 5);
    while (G * S > 9) /* 4 x 2 is where the knapsack's integrality showed */
      S--;
    if (E > G * S)
      E = G * S;
    double w[MAXE];
    for (uint32_t e = 0; e < E; e++) { /* skewed integers, a few zeros */
      double u = fx_uniform(&s);
      w[e] = t % 5 == 0 && e == E - 1 ? 0 : floor(1 + 60 * u * u * u);
    }
    double sum = 0;
    for (uint32_t e = 0; e < E; e++)
      sum += w[e];
    ex_t x = {.E = E, .G = G, .S = S, .w = w, .best = 2 * sum + 1};
    counts(&x, 0, G * S);
    double lp = bound_of(w, E, G, S, false), in = bound_of(w, E, G, S, true);
    ck_assert_msg(in <= x.best * (1 + 1e-9),
                  "case %d (E=%u G=%u S=%u): integer bound %.17g above the optimum %.17g", t, E, G,
                  S, in, x.best);
    ck_assert_msg(in >= lp * (1 - 1e-12), "case %d: integer bound %.17g below the LP one %.17g", t,
                  in, lp);
    if (in > lp * (1 + 1e-4) && above++ < 3) {
      printf("# tighter: G=%u S=%u w=", G, S);
      for (uint32_t e = 0; e < E; e++)
        printf("%s%g", e ? "," : "", w[e]);
      printf(": LP %.6g integer %.6g optimum %.6g\n", lp, in, x.best);
    }
    n++;
  }
  printf("# %u tiny instances: integer bound above the LP one on %u\n", n, above);
  ck_assert_uint_gt(above, 0);
}
END_TEST

/* A constructed instance: 4 GPUs x 2 slots, loads 55, 51, 1. The LP
 * relaxation may give an expert a fraction of the slots that would halve its
 * replicas; whole counts cannot, and the bound rises (26.83 -> 27.5, the
 * optimum is at or above it). */
START_TEST(integer_bound_tighter_than_lp) {
  const double w[] = {55, 51, 1};
  double lp = bound_of(w, 3, 4, 2, false), in = bound_of(w, 3, 4, 2, true);
  ex_t x = {.E = 3, .G = 4, .S = 2, .w = w, .best = 1e9};
  counts(&x, 0, 8);
  printf("# 55, 51, 1 on 4 x 2: LP bound %.6g, integer %.6g, optimum %.6g\n", lp, in, x.best);
  ck_assert_double_gt(in, lp * (1 + 1e-3));
  ck_assert_double_le(in, x.best * (1 + 1e-9));
}
END_TEST

/* A lognormal (sigma 2) layer of the #15 harness, 128 experts on 64 GPUs x
 * 4 slots, where the search once stopped at 1.059 x the bound: a one-replica
 * expert alone on the busiest GPU, a load-0 expert holding 38 slots, and no
 * random kick handing the former a slot. Aimed kicks reach 1.014; the test
 * leaves room for other search changes but not for that plateau. */
START_TEST(search_leaves_the_lognormal_plateau) {
  static const double w[128] = {
      2713, 402,  635,   93,    12,  960,  77,  8,    23,   350,  9,    1133, 188,  143,  5,    16,
      5,    26,   24,    92,    40,  322,  258, 32,   24,   30,   694,  105,  1297, 4883, 43,   4,
      6,    4904, 85,    4,     48,  60,   3,   391,  32,   140,  5042, 618,  819,  109,  58,   6,
      4,    6504, 11628, 426,   528, 128,  10,  40,   15,   71,   3140, 785,  15,   2,    27,   987,
      24,   8,    49,    812,   51,  8002, 768, 24,   364,  2232, 160,  139,  24,   527,  491,  7,
      88,   14,   13,    29009, 34,  13,   5,   301,  40,   2168, 724,  12,   25,   5384, 59,   15,
      50,   103,  4,     8,     18,  7,    11,  9809, 9117, 1229, 86,   3,    26,   132,  4744, 166,
      12,   26,   284,   10,    214, 2,    129, 574,  13,   54,   48,   23,   966,  330,  7,    0};
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(1, 128, &ld), EPLB_OK);
  memcpy(ld->values, w, sizeof w);
  eplb_plan_t *p = plan_of(ld, EPLB_SHARES_UNIFORM, 64, 256);
  eplb_plan_layer_metrics_t m;
  ck_assert_int_eq(eplb_plan_layer_metrics(p, 0, &m), EPLB_OK);
  printf("# lognormal layer 128 x 64 x 4: max / bound %.5f\n", m.max_load / m.lower_bound);
  ck_assert_double_le(m.max_load, m.lower_bound * 1.03);
  eplb_plan_destroy(p);
  eplb_loads_destroy(ld);
}
END_TEST

int main(void) {
  Suite *s = suite_create("uniform-bound");
  TCase *tc = tcase_create("uniform-bound");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, bound_below_every_uniform_plan);
  tcase_add_test(tc, integer_bound_below_exhaustive_optimum);
  tcase_add_test(tc, integer_bound_tighter_than_lp);
  tcase_add_test(tc, search_leaves_the_lognormal_plateau);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
