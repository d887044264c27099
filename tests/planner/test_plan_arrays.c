/* tests/planner/test_plan_arrays.c — plans from a serving stack's arrays
 * (eplb_plan_from_arrays): the same plan as the file that says the same,
 * uniform shares by default, incremental from a stack's map moving at most
 * its budget, and every bad array refused with its status. */
#include "tests/support.h"

#include <eplb/plan.h>

#include <math.h>
#include <string.h>

enum { L = 3, E = 8, G = 4, S = 3, R = G * S };

static int32_t p2l[L * R];

static eplb_plan_arrays_t arrays(void) {
  eplb_plan_arrays_t a = eplb_plan_arrays_default();
  a.num_layers = L, a.num_experts = E, a.num_gpus = G, a.num_nodes = 2, a.num_slots = R;
  for (uint32_t i = 0; i < L * R; i++)
    p2l[i] = (int32_t)((i % R) % E); /* experts 0-3 twice, 4-7 once */
  a.phy2log = p2l;
  return a;
}

START_TEST(uniform_shares_and_round_trip) {
  eplb_plan_arrays_t a = arrays();
  eplb_plan_t *p = NULL, *q = NULL;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_OK);
  ck_assert_uint_eq(eplb_plan_num_slots(p), R);
  for (uint32_t l = 0; l < L; l++) {
    const double *sh = eplb_plan_share(p, l);
    for (uint32_t r = 0; r < R; r++)
      ck_assert_double_eq_tol(sh[r], p2l[r] < 4 ? 0.5 : 1.0, 1e-15);
    ck_assert_int_eq(memcmp(eplb_plan_phy2log(p, l), p2l + l * R, R * sizeof *p2l), 0);
  }
  const char *path = eplb_test_path(eplb_test_tmpdir(), "arrays.json");
  ck_assert_int_eq(eplb_plan_write(p, path), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(path, &q), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    ck_assert_int_eq(memcmp(eplb_plan_phy2log(p, l), eplb_plan_phy2log(q, l), R * 4), 0);
    ck_assert_int_eq(memcmp(eplb_plan_share(p, l), eplb_plan_share(q, l), R * 8), 0);
  }
  /* Given shares are kept as given. */
  double sh[L * R];
  for (uint32_t i = 0; i < L * R; i++)
    sh[i] = p2l[i] < 4 ? (i % R < E ? 0.75 : 0.25) : 1.0;
  a.shares = sh;
  eplb_plan_destroy(p);
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_OK);
  ck_assert_double_eq(eplb_plan_share(p, 1)[0], 0.75);
  eplb_plan_destroy(p);
  eplb_plan_destroy(q);
}
END_TEST

/* A stack's map is where incremental starts: hot loads on the experts
 * with one replica move at most move_budget slots per layer. */
START_TEST(incremental_from_a_stack_map) {
  eplb_plan_arrays_t a = arrays();
  eplb_plan_t *cur = NULL, *next = NULL;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &cur), EPLB_OK);
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E, &ld), EPLB_OK);
  for (uint32_t i = 0; i < L * E; i++)
    ld->values[i] = i % E >= 4 ? 100.0 : 10.0;
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_INCREMENTAL;
  o.num_gpus = G, o.num_nodes = 2, o.num_replicas = R;
  o.from = cur;
  o.move_budget = 2;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &next), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *x = eplb_plan_phy2log(next, l);
    uint32_t moved = 0;
    for (uint32_t r = 0; r < R; r++)
      moved += x[r] != p2l[l * R + r];
    ck_assert_uint_le(moved, 2);
    ck_assert_uint_ge(moved, 1); /* the hot experts gain a replica */
  }
  eplb_plan_destroy(next);
  eplb_plan_destroy(cur);
  eplb_loads_destroy(ld);
}
END_TEST

START_TEST(bad_arrays) {
  eplb_plan_arrays_t a = arrays();
  eplb_plan_t *p = (eplb_plan_t *)&a; /* must be reset to NULL on error */
  ck_assert_int_eq(eplb_plan_from_arrays(NULL, &p), EPLB_EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_int_eq(eplb_plan_from_arrays(&a, NULL), EPLB_EINVAL);
  a.phy2log = NULL;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_EINVAL);
  a = arrays();
  p2l[R + 5] = E; /* out of range */
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_ERANGE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "layer 1 slot 5"));
  p2l[R + 5] = -1;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_ERANGE);
  a = arrays();
  p2l[7] = 0; /* expert 7 loses its only replica */
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_EFORMAT);
  a = arrays();
  double sh[L * R];
  for (uint32_t i = 0; i < L * R; i++)
    sh[i] = p2l[i] < 4 ? 0.5 : 1.0;
  a.shares = sh;
  sh[2] = 0.6; /* expert 2's shares sum to 1.1 */
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_EFORMAT);
  sh[2] = NAN;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_EFORMAT);
  sh[2] = 0.5;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_OK);
  eplb_plan_destroy(p);
  a = arrays();
  a.num_slots = R + 1; /* not a multiple of the GPUs */
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_ESHAPE);
  a = arrays();
  a.num_nodes = 3;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_ESHAPE);
  a = arrays();
  a.num_experts = R + 1; /* fewer slots than experts */
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_ESHAPE);
  a = arrays();
  const uint32_t spg[G] = {4, 2, 3, 2}; /* sums to 11, not 12 */
  a.slots_per_gpu = spg;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_ESHAPE);
  const uint32_t spg2[G] = {4, 2, 3, 3};
  a.slots_per_gpu = spg2;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_OK);
  ck_assert_uint_eq(eplb_plan_slots_per_gpu(p)[0], 4);
  eplb_plan_destroy(p);
  a = arrays();
  a.num_layers = EPLB_MAX_LAYERS + 1;
  ck_assert_int_eq(eplb_plan_from_arrays(&a, &p), EPLB_ESHAPE);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-arrays");
  TCase *tc = tcase_create("arrays");
  tcase_add_test(tc, uniform_shares_and_round_trip);
  tcase_add_test(tc, incremental_from_a_stack_map);
  tcase_add_test(tc, bad_arrays);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
