/* tests/planner/test_report.c — the JSON reports the CLI prints for plan
 * eval, plan diff and split, written by the planner (issue 19). */
#include "eplb/plan.h"
#include "eplb/plan_tooling.h"
#include "tests/support.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The document a *_json writer returns, parsed; fails the test otherwise. */
#define PARSED(out, fn, ...)                                                                       \
  do {                                                                                             \
    size_t n_ = 0;                                                                                 \
    ck_assert_int_eq(fn(__VA_ARGS__, NULL, 0, &n_), EPLB_OK);                                      \
    char *b_ = malloc(n_ + 1);                                                                     \
    ck_assert_int_eq(fn(__VA_ARGS__, b_, n_ + 1, NULL), EPLB_OK);                                  \
    ck_assert_uint_eq(strlen(b_), n_);                                                             \
    (out) = json_loads(b_, 0, NULL);                                                               \
    free(b_);                                                                                      \
    ck_assert_ptr_nonnull(out);                                                                    \
  } while (0)

static eplb_plan_t *small_plan(eplb_loads_t **loads) {
  ck_assert_int_eq(eplb_loads_create(2, 4, loads), EPLB_OK);
  const double v[8] = {10, 20, 30, 40, 5, 5, 5, 85};
  memcpy((*loads)->values, v, sizeof v);
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = 2;
  o.num_replicas = 6;
  o.threads = 1;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(*loads, &o, &p), EPLB_OK);
  return p;
}

START_TEST(eval_json_reports_every_layer_and_the_summary) {
  eplb_loads_t *loads = NULL;
  eplb_plan_t *p = small_plan(&loads);
  json_t *j;
  PARSED(j, eplb_plan_eval_json, p);
  json_t *layers = json_object_get(j, "layers");
  ck_assert_uint_eq(json_array_size(layers), 2);
  for (uint32_t l = 0; l < 2; l++) {
    json_t *lo = json_array_get(layers, l);
    json_t *gl = json_object_get(lo, "gpu_load");
    ck_assert_uint_eq(json_array_size(gl), 2);
    double sum = json_real_value(json_array_get(gl, 0)) + json_real_value(json_array_get(gl, 1));
    ck_assert_double_eq_tol(sum, 100, 1e-9);
    eplb_plan_layer_metrics_t m;
    eplb_plan_layer_metrics(p, l, &m);
    ck_assert_double_eq(json_real_value(json_object_get(lo, "max_load")), m.max_load);
    ck_assert_double_eq(json_real_value(json_object_get(lo, "balancedness")), m.balancedness);
  }
  json_t *s = json_object_get(j, "summary");
  ck_assert_str_eq(json_string_value(json_object_get(s, "policy")), "balanced");
  ck_assert_ptr_null(json_object_get(s, "seconds")); /* an evaluation, not a planning run */
  json_decref(j);
  ck_assert_int_eq(eplb_plan_eval_json(NULL, NULL, 0, NULL), EPLB_EINVAL);
  eplb_plan_destroy(p);
  eplb_loads_destroy(loads);
}
END_TEST

START_TEST(diff_json_counts_slots_and_options) {
  eplb_loads_t *loads = NULL;
  eplb_plan_t *p = small_plan(&loads);
  eplb_plan_diff_options_t o;
  eplb_plan_diff_options_default(&o);
  o.layers_per_round = 3;
  eplb_plan_diff_stats_t d;
  ck_assert_int_eq(eplb_plan_diff_schedule(p, p, &o, &d), EPLB_OK);
  json_t *j;
  PARSED(j, eplb_plan_diff_json, p, &o, &d);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "slots")), 12);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "slots_moved")), 0);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "layers_per_step")), 3);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "expert_bytes")), 44040192);
  ck_assert_uint_eq(json_object_size(json_object_get(j, "bytes")), 3);
  ck_assert(json_is_integer(json_object_get(json_object_get(j, "moves"), "inter_node")));
  json_decref(j);
  ck_assert_int_eq(eplb_plan_diff_json(p, NULL, &d, NULL, 0, NULL), EPLB_EINVAL);
  eplb_plan_destroy(p);
  eplb_loads_destroy(loads);
}
END_TEST

START_TEST(resplit_json_summarises_the_layers) {
  eplb_plan_resplit_options_t o;
  eplb_plan_resplit_options_default(&o);
  eplb_plan_resplit_layer_t y[2] = {{.t_star = 50,
                                     .max_load_before = 60,
                                     .max_load_after = 50,
                                     .balancedness_before = 0.5,
                                     .balancedness_after = 0.75,
                                     .lower_bound = 50},
                                    {.t_star = 40,
                                     .max_load_before = 40,
                                     .max_load_after = 40,
                                     .balancedness_before = 1,
                                     .balancedness_after = 1,
                                     .lower_bound = 40}};
  json_t *j;
  PARSED(j, eplb_plan_resplit_json, &o, y, 2);
  json_t *s = json_object_get(j, "summary");
  ck_assert_double_eq(json_real_value(json_object_get(s, "mean_balancedness_before")), 0.75);
  ck_assert_double_eq(json_real_value(json_object_get(s, "min_balancedness_after")), 0.75);
  ck_assert_double_eq(json_real_value(json_object_get(s, "balancedness_gain")), 0.125);
  ck_assert_double_eq_tol(json_real_value(json_object_get(s, "max_load_reduction")), 0.1, 1e-12);
  ck_assert(json_is_false(json_object_get(s, "integer")));
  ck_assert_ptr_null(json_object_get(s, "nodes")); /* no cluster: no locality figures */
  json_t *l1 = json_array_get(json_object_get(j, "layers"), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(l1, "layer")), 1);
  ck_assert_ptr_null(json_object_get(l1, "cross_node_copies_after"));
  json_decref(j);
  y[1].t_star = INFINITY;
  ck_assert_int_eq(eplb_plan_resplit_json(&o, y, 2, NULL, 0, NULL), EPLB_ERANGE);
  ck_assert_int_eq(eplb_plan_resplit_json(&o, y, 0, NULL, 0, NULL), EPLB_EINVAL);
}
END_TEST

/* Each tree the tools take is its text writer's document, and the
 * re-split summary is the report's. */
START_TEST(trees_are_the_texts) {
  eplb_loads_t *loads = NULL;
  eplb_plan_t *p = small_plan(&loads);
  char buf[4096];
  json_t *j = NULL;
  ck_assert_int_eq(eplb_plan_eval_tree(p, &j), EPLB_OK);
  char *t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  ck_assert_int_eq(eplb_plan_eval_json(p, buf, sizeof buf, NULL), EPLB_OK);
  ck_assert_str_eq(t, buf);
  free(t);
  json_decref(j);
  ck_assert_int_eq(eplb_plan_summary_tree(p, &j), EPLB_OK);
  t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  ck_assert_int_eq(eplb_plan_summary_json(p, buf, sizeof buf, NULL), EPLB_OK);
  ck_assert_str_eq(t, buf);
  free(t);
  json_decref(j);
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_cluster_open("2x4", &cl), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_tree(cl, &j), EPLB_OK);
  t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  ck_assert_int_eq(eplb_cluster_json(cl, buf, sizeof buf, NULL), EPLB_OK);
  ck_assert_str_eq(t, buf);
  free(t);
  json_decref(j);
  eplb_cluster_destroy(cl);
  ck_assert_int_eq(eplb_plan_eval_tree(NULL, &j), EPLB_EINVAL);
  ck_assert_ptr_null(j);
  ck_assert_int_eq(eplb_plan_summary_tree(p, NULL), EPLB_EINVAL);
  eplb_plan_resplit_layer_t y[2] = {{.max_load_before = 60,
                                     .max_load_after = 50,
                                     .balancedness_before = 0.5,
                                     .balancedness_after = 0.75},
                                    {.max_load_before = 40,
                                     .max_load_after = 40,
                                     .balancedness_before = 1,
                                     .balancedness_after = 1}};
  eplb_plan_resplit_summary_t sy;
  ck_assert_int_eq(eplb_plan_resplit_summarize(y, 2, &sy), EPLB_OK);
  ck_assert_double_eq(sy.mean_balancedness_after, 0.875);
  ck_assert_double_eq(sy.min_balancedness_before, 0.5);
  ck_assert_double_eq(sy.balancedness_gain, 0.125);
  ck_assert_double_eq(sy.max_load_before, 100);
  ck_assert_double_eq_tol(sy.max_load_reduction, 0.1, 1e-12);
  ck_assert_int_eq(eplb_plan_resplit_summarize(y, 0, &sy), EPLB_EINVAL);
  eplb_plan_destroy(p);
  eplb_loads_destroy(loads);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-report");
  TCase *tc = tcase_create("planner-report");
  tcase_add_test(tc, eval_json_reports_every_layer_and_the_summary);
  tcase_add_test(tc, diff_json_counts_slots_and_options);
  tcase_add_test(tc, resplit_json_summarises_the_layers);
  tcase_add_test(tc, trees_are_the_texts);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
