/* tests/planner/test_line.c — balanced with exact shares on GPUs of two
 * slots (planner/balanced_line.c): at the mean GPU load, the bound of every
 * plan, where the experts fit on the line (the min-max start and its refine
 * reached 1.001 x at 1,024 GPUs); every expert with a second replica where
 * slots are spare, so a batch's split can spread it; valid, never worse than
 * DeepSeek and the same bytes on 1 and 2 threads on random shapes. */
#include "tests/support.h"
#include "fixtures.h"

#include <eplb/plan.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static eplb_plan_t *make(const eplb_loads_t *ld, eplb_plan_policy_t pol, uint32_t G,
                         uint32_t threads) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = pol;
  o.num_gpus = G;
  o.num_replicas = 2 * G;
  o.threads = threads;
  eplb_plan_t *p = NULL;
  ck_assert_msg(eplb_plan_create(ld, &o, &p) == EPLB_OK, "G=%u: %s", G, eplb_error_detail());
  return p;
}

static double max_load(const eplb_plan_t *p, uint32_t l) {
  eplb_plan_layer_metrics_t m;
  ck_assert_int_eq(eplb_plan_layer_metrics(p, l, &m), EPLB_OK);
  return m.max_load;
}

/* Zipf 1 or lognormal (sigma 1.5) expected loads, shuffled, as counts of
 * 4,096 tokens x 8 a step over 20 steps would give them (rounded down). */
static eplb_loads_t *skewed(uint64_t seed, int zipf, uint32_t L, uint32_t E) {
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E, &ld), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    double *row = ld->values + (size_t)l * E, tot = 0;
    for (uint32_t e = 0; e < E; e++) {
      double u1 = fx_uniform(&seed), u2 = fx_uniform(&seed);
      double z = sqrt(-2 * log(u1 > 0 ? u1 : 1e-300)) * cos(6.283185307179586 * u2);
      row[e] = zipf ? 1.0 / (double)(1 + fx_rand(&seed) % E) : exp(1.5 * z);
      tot += row[e];
    }
    for (uint32_t e = 0; e < E; e++)
      row[e] = floor(row[e] / tot * 655360.0);
  }
  return ld;
}

START_TEST(at_the_mean_with_two_slots) {
  const uint32_t gpus[] = {512, 1024};
  for (int zipf = 0; zipf < 2; zipf++)
    for (size_t k = 0; k < 2; k++) {
      uint32_t G = gpus[k], E = 384, L = 4;
      eplb_loads_t *ld = skewed(20261205 + (uint64_t)zipf, zipf, L, E);
      eplb_plan_t *p = make(ld, EPLB_POLICY_BALANCED, G, 1);
      fx_check_plan(p, ld, 1); /* no expert twice on a GPU */
      uint32_t *cnt = malloc(E * sizeof *cnt);
      for (uint32_t l = 0; l < L; l++) {
        double tot = 0;
        for (uint32_t e = 0; e < E; e++)
          tot += ld->values[(size_t)l * E + e];
        double r = max_load(p, l) / (tot / G);
        ck_assert_msg(r <= 1 + 1e-9, "%s, %u GPUs, layer %u: max / mean %.12f",
                      zipf ? "zipf" : "lognormal", G, l, r);
        /* 2G slots, about G + E pieces on the line: the spare ones give
         * every expert a second replica, for a batch's split to spread. */
        ck_assert_int_eq(eplb_plan_logcnt(p, l, cnt), EPLB_OK);
        for (uint32_t e = 0; e < E && G == 1024; e++)
          ck_assert_msg(cnt[e] >= 2, "1,024 GPUs, layer %u: expert %u has one replica", l, e);
      }
      free(cnt);
      eplb_plan_destroy(p);
      eplb_loads_destroy(ld);
    }
}
END_TEST

/* From 2 experts to as many as slots, zeros, one expert above all others,
 * all equal: the line when the experts fit, else the search, never worse
 * than DeepSeek; deterministic across threads. */
START_TEST(two_slots_exact_on_random_shapes) {
  uint64_t s = 20261208;
  uint32_t at_mean = 0;
  for (int t = 0; t < 80; t++) {
    uint32_t G = 1 + (uint32_t)(fx_rand(&s) % 40), E = 2 + (uint32_t)(fx_rand(&s) % (2 * G - 1));
    if (G == 1)
      E = 2;
    if (t % 4 == 0)
      E = 2 + (uint32_t)(fx_rand(&s) % (G / 2 + 1)); /* room to spare */
    double *w = fx_random_loads(&s, 2, E, t % 2);
    if (t % 5 == 0)
      w[fx_rand(&s) % E] = 1e6;
    if (t % 7 == 0)
      for (uint32_t i = 0; i < 2 * E; i++)
        w[i] = 5;
    eplb_loads_t *ld = NULL;
    ck_assert_int_eq(eplb_loads_create(2, E, &ld), EPLB_OK);
    for (uint32_t i = 0; i < 2 * E; i++)
      ld->values[i] = w[i];
    eplb_plan_t *d = make(ld, EPLB_POLICY_DEEPSEEK, G, 1);
    eplb_plan_t *p[2] = {make(ld, EPLB_POLICY_BALANCED, G, 1),
                         make(ld, EPLB_POLICY_BALANCED, G, 2)};
    fx_check_plan(p[0], ld, 1);
    for (uint32_t l = 0; l < 2; l++) {
      ck_assert_msg(max_load(p[0], l) <= max_load(d, l) * (1 + 1e-12),
                    "shape %d (%u experts, %u GPUs) layer %u: %.17g above DeepSeek's %.17g", t, E,
                    G, l, max_load(p[0], l), max_load(d, l));
      ck_assert_mem_eq(eplb_plan_phy2log(p[0], l), eplb_plan_phy2log(p[1], l),
                       2 * G * sizeof(int32_t));
      ck_assert_mem_eq(eplb_plan_share(p[0], l), eplb_plan_share(p[1], l), 2 * G * sizeof(double));
      double tot = 0;
      for (uint32_t e = 0; e < E; e++)
        tot += w[(size_t)l * E + e];
      at_mean += max_load(p[0], l) <= tot / G * (1 + 1e-9);
    }
    eplb_plan_destroy(p[0]);
    eplb_plan_destroy(p[1]);
    eplb_plan_destroy(d);
    eplb_loads_destroy(ld);
    free(w);
  }
  printf("# two slots, 160 random layers: %u at the mean load\n", at_mean);
  ck_assert_uint_gt(at_mean, 40);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-line");
  TCase *tc = tcase_create("line");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, at_the_mean_with_two_slots);
  tcase_add_test(tc, two_slots_exact_on_random_shapes);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
