/* tests/planner/test_even_placement.c — balanced with exact shares is never
 * worse than balanced with even shares, layer by layer (beyond 0.1% of the
 * layer's bound, where the even-share search is skipped): an even-share
 * placement is also one the exact split can serve (#35). */
#include "tests/support.h"

#include <eplb/plan.h>

#include <math.h>

enum { L = 24 };

static eplb_plan_t *plan(const eplb_loads_t *ld, uint32_t G, uint32_t N, uint32_t R,
                         eplb_plan_shares_t shares) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_BALANCED;
  o.shares = shares;
  o.num_gpus = G, o.num_nodes = N, o.num_replicas = R;
  o.threads = 1;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_OK);
  return p;
}

/* Skewed loads of every kind the planner meets: a few hot experts, heavy
 * tails, near-ties; few spare slots, where placements differ most. */
START_TEST(exact_never_worse_than_even) {
  const uint32_t shapes[][4] = {{64, 8, 2, 72}, {128, 16, 2, 144}, {32, 8, 1, 40}, {60, 12, 3, 72}};
  uint64_t seed = 0x5eed;
  uint32_t worse = 0, gained = 0, layers = 0;
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
    uint32_t E = shapes[k][0], G = shapes[k][1], N = shapes[k][2], R = shapes[k][3];
    eplb_loads_t *ld = NULL;
    ck_assert_int_eq(eplb_loads_create(L, E, &ld), EPLB_OK);
    for (uint32_t i = 0; i < L * E; i++) {
      double u = (double)(eplb_test_xorshift(&seed) % 1000000 + 1) / 1e6;
      uint32_t kind = i / E % 3;
      ld->values[i] = kind == 0   ? floor(1000.0 / pow((double)(i % E + 1), 1.1) * (0.5 + u))
                      : kind == 1 ? floor(exp(4.0 * u) * 10)
                                  : 100 + (i % 7 == 0 ? 300 : 0) + floor(u * 3);
    }
    eplb_plan_t *ex = plan(ld, G, N, R, EPLB_SHARES_EXACT);
    eplb_plan_t *ev = plan(ld, G, N, R, EPLB_SHARES_UNIFORM);
    for (uint32_t l = 0; l < L; l++, layers++) {
      eplb_plan_layer_metrics_t a, b;
      ck_assert_int_eq(eplb_plan_layer_metrics(ex, l, &a), EPLB_OK);
      ck_assert_int_eq(eplb_plan_layer_metrics(ev, l, &b), EPLB_OK);
      worse += a.max_load > b.max_load + 1e-3 * a.lower_bound;
      gained += a.max_load < b.max_load;
    }
    eplb_plan_destroy(ex);
    eplb_plan_destroy(ev);
    eplb_loads_destroy(ld);
  }
  ck_assert_msg(worse == 0, "%u of %u layers: exact shares worse than even shares", worse, layers);
  ck_assert_uint_gt(gained, layers / 2); /* and mostly better */
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-even-placement");
  TCase *tc = tcase_create("even");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, exact_never_worse_than_even);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
