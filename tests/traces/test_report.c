/* tests/traces/test_report.c — the JSON of `eplb trace info|stats --json`,
 * written by the traces module (issue 19). */
#include "eplb/trace.h"
#include "eplb/trace_tooling.h"
#include "tests/support.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static json_t *stats_doc(const eplb_trace_stats_t *s, eplb_status_t want) {
  size_t n = 0;
  ck_assert_int_eq(eplb_trace_stats_json(s, "t.eplbt", NULL, 0, &n), want);
  if (want != EPLB_OK)
    return NULL;
  char *buf = malloc(n + 1);
  ck_assert_int_eq(eplb_trace_stats_json(s, "t.eplbt", buf, n + 1, NULL), EPLB_OK);
  json_t *j = json_loads(buf, 0, NULL);
  free(buf);
  ck_assert_ptr_nonnull(j);
  return j;
}

START_TEST(stats_json_keys_by_ep_and_null_correlation) {
  uint32_t ep[2] = {8, 16};
  double eom[2] = {3.5, 1.25}, gom[4] = {2, 3, 1.5, 1.75}, gps[4] = {2.5, 3.5, 1.5, 2};
  double corr[2] = {0.5, NAN}, mg[2] = {1.75, 2.375}, mps[2] = {2, 2.75};
  eplb_trace_stats_t s = {.step_begin = 4,
                          .step_end = 10,
                          .num_layers = 2,
                          .num_experts = 16,
                          .num_ep = 2,
                          .ep = ep,
                          .expert_over_mean = eom,
                          .gpu_over_mean = gom,
                          .gpu_over_mean_per_step = gps,
                          .step_correlation = corr,
                          .mean_expert_over_mean = 2.375,
                          .mean_gpu_over_mean = mg,
                          .mean_gpu_over_mean_per_step = mps,
                          .mean_step_correlation = 0.5};
  json_t *j = stats_doc(&s, EPLB_OK);
  ck_assert_str_eq(json_string_value(json_object_get(j, "file")), "t.eplbt");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "steps")), 6);
  ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(j, "ep"), 1)), 16);
  json_t *l1 = json_array_get(json_object_get(j, "layers"), 1);
  ck_assert(json_is_null(json_object_get(l1, "step_correlation")));
  ck_assert_double_eq(
      json_real_value(json_object_get(json_object_get(l1, "busiest_gpu_over_mean"), "16")), 1.75);
  json_t *sg = json_object_get(json_object_get(j, "summary"), "busiest_gpu_over_mean");
  ck_assert_double_eq(json_real_value(json_object_get(json_object_get(sg, "16"), "per_step")),
                      2.75);
  json_decref(j);
  /* A ratio that is not finite is refused, not dropped. */
  gom[3] = INFINITY;
  stats_doc(&s, EPLB_ERANGE);
  ck_assert_int_eq(eplb_trace_stats_json(&s, NULL, NULL, 0, NULL), EPLB_EINVAL);
}
END_TEST

START_TEST(info_json_of_a_synthetic_trace) {
  eplb_synth_options_t o;
  eplb_synth_options_default(&o);
  o.num_layers = 3;
  o.num_experts = 8;
  o.topk = 2;
  o.num_steps = 4;
  o.tokens_per_step = 16;
  const char *path = eplb_test_tmp("info.eplbt");
  ck_assert_int_eq(eplb_synth_generate(path, &o), EPLB_OK);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &t), EPLB_OK);
  size_t n = 0;
  ck_assert_int_eq(eplb_trace_info_json(t, "x", NULL, 0, &n), EPLB_OK);
  char *buf = malloc(n + 1);
  ck_assert_int_eq(eplb_trace_info_json(t, "x", buf, n + 1, NULL), EPLB_OK);
  json_t *j = json_loads(buf, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert_uint_eq(json_object_size(j), 11);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "layers")), 3);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "steps")), 4);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "tokens")), 64);
  json_decref(j);
  /* The tree the tools take is that text's document. */
  ck_assert_int_eq(eplb_trace_info_tree(t, "x", &j), EPLB_OK);
  char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  ck_assert_str_eq(text, buf);
  free(text);
  json_decref(j);
  ck_assert_int_eq(eplb_trace_info_tree(t, NULL, &j), EPLB_EINVAL);
  ck_assert_ptr_null(j);
  free(buf);
  eplb_trace_close(t);
  /* Loads read from a trace keep its handle: the same sums, one open. */
  eplb_loads_t *a = NULL, *b = NULL;
  ck_assert_int_eq(eplb_loads_read(path, 1, 3, &a), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read_trace(path, 1, 3, &b, &t), EPLB_OK);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(memcmp(a->values, b->values, 3 * 8 * sizeof(double)), 0);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 4);
  eplb_trace_close(t);
  eplb_loads_destroy(b);
  ck_assert_int_eq(eplb_loads_read_trace(path, 9, 12, &b, &t), EPLB_ERANGE);
  ck_assert_ptr_null(t);
  ck_assert_ptr_null(b);
  const char *csv = eplb_test_tmp("m.csv");
  ck_assert_int_eq(eplb_loads_write_csv(a, csv), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read_trace(csv, 0, UINT64_MAX, &b, &t), EPLB_OK);
  ck_assert_ptr_null(t); /* not a trace */
  eplb_loads_destroy(b);
  eplb_loads_destroy(a);
}
END_TEST

int main(void) {
  Suite *s = suite_create("traces-report");
  TCase *tc = tcase_create("traces-report");
  tcase_add_test(tc, stats_json_keys_by_ep_and_null_correlation);
  tcase_add_test(tc, info_json_of_a_synthetic_trace);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
