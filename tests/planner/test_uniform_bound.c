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

int main(void) {
  Suite *s = suite_create("uniform-bound");
  TCase *tc = tcase_create("uniform-bound");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, bound_below_every_uniform_plan);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
