/* tests/sim/test_sim_setup.c — what `eplb sim` prepares and reports around a
 * run, as library jobs (issue 19): the slots of a policy-mode run on a
 * cluster, the held-out plan window of --compare, one run's summary and a
 * report of runs as JSON, and the per-step CSV. */
#include "eplb/sim.h"
#include "eplb/sim_tooling.h"
#include "tests/support.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* eplb_sim_options_check: its own values and the plan options', each
 * detail naming the field and value first. */
START_TEST(options_check_names_the_field) {
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  ck_assert_int_eq(eplb_sim_options_check(&o), EPLB_OK);
  ck_assert_int_eq(eplb_sim_options_check(NULL), EPLB_EINVAL);
  o.split_tolerance = 1.5;
  ck_assert_int_eq(eplb_sim_options_check(&o), EPLB_EINVAL);
  ck_assert_str_eq(eplb_error_detail(), "split_tolerance 1.5: must be in [0, 1]");
  eplb_sim_options_default(&o);
  o.gain_threshold = NAN;
  ck_assert_int_eq(eplb_sim_options_check(&o), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "gain_threshold"));
  eplb_sim_options_default(&o);
  o.plan.robust_steps = 0;
  ck_assert_int_eq(eplb_sim_options_check(&o), EPLB_EINVAL);
  ck_assert_str_eq(eplb_error_detail(), "robust_steps 0: must be in 1..65536");
}
END_TEST

START_TEST(slots_from_options_or_the_cluster_file) {
  eplb_cluster_t *cl = NULL;
  eplb_sim_options_t o;
  uint32_t slots[8];
  ck_assert_int_eq(eplb_cluster_open("2x4", &cl), EPLB_OK);
  eplb_sim_options_default(&o);
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 9, 0, slots), EPLB_OK);
  ck_assert_uint_eq(o.plan.num_replicas, 72);
  ck_assert_ptr_null(o.plan.slots_per_gpu);
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 0, 70, slots), EPLB_OK);
  ck_assert_uint_eq(o.plan.num_replicas, 70);
  ck_assert_ptr_null(o.plan.slots_per_gpu);
  /* "2x4" gives no slots: the caller has to. */
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 0, 0, slots), EPLB_EINVAL);
  ck_assert_str_eq(eplb_error_detail(), "the cluster does not set slots_per_gpu");
  ck_assert_uint_eq(o.plan.num_replicas, 70); /* unchanged on error */
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 9, 72, slots), EPLB_EINVAL);
  /* 9000 x 8 slots: over EPLB_MAX_SLOTS, named without any option. */
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 9000, 0, slots), EPLB_EINVAL);
  ck_assert_str_eq(eplb_error_detail(),
                   "9000 x 8 GPUs = 72000 slots per layer: over the limit of 65536");
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 0, 65537, slots), EPLB_ERANGE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "65537 slots per layer on 8 GPUs"));
  eplb_cluster_destroy(cl);

  /* Uneven nodes from a cluster file: each GPU its node's slots. */
  const char *p = eplb_test_tmp("slots.json");
  const char *text = "{\"format\": \"eplb-cluster\", \"version\": 1, \"nodes\": ["
                     "{\"gpus\": 2, \"slots_per_gpu\": 3}, {\"gpus\": 2, \"slots_per_gpu\": 5}]}";
  eplb_test_write_file(p, text, strlen(text));
  ck_assert_int_eq(eplb_cluster_open(p, &cl), EPLB_OK);
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 0, 0, slots), EPLB_OK);
  ck_assert_uint_eq(o.plan.num_replicas, 16);
  ck_assert_ptr_eq(o.plan.slots_per_gpu, slots);
  const uint32_t want[4] = {3, 3, 5, 5};
  ck_assert_mem_eq(slots, want, sizeof want);
  eplb_cluster_destroy(cl);
}
END_TEST

START_TEST(summary_json_has_every_figure_or_fails) {
  eplb_sim_summary_t s = {.num_steps = 12,
                          .mean_balancedness = 0.75,
                          .p99_step_time_us = 1234.5,
                          .num_plans = 3,
                          .used_rows_steps = 7,
                          .bound_step_time_us = 987.25};
  size_t n = 0;
  ck_assert_int_eq(eplb_sim_summary_json(&s, "balanced:uniform", NULL, 0, &n), EPLB_OK);
  char *buf = malloc(n + 1);
  ck_assert_int_eq(eplb_sim_summary_json(&s, "balanced:uniform", buf, n + 1, NULL), EPLB_OK);
  ck_assert_uint_eq(strlen(buf), n);
  json_t *j = json_loads(buf, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert_uint_eq(json_object_size(j), 20);
  ck_assert_str_eq(json_string_value(json_object_get(j, "policy")), "balanced:uniform");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "steps")), 12);
  ck_assert_double_eq(json_real_value(json_object_get(j, "mean_balancedness")), 0.75);
  ck_assert_double_eq(json_real_value(json_object_get(j, "p99_step_time_us")), 1234.5);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "rows_steps")), 7);
  ck_assert_double_eq(json_real_value(json_object_get(j, "bound_step_time_us")), 987.25);
  json_decref(j);
  /* Cut like snprintf. */
  char small[8];
  ck_assert_int_eq(eplb_sim_summary_json(&s, "x", small, sizeof small, NULL), EPLB_OK);
  ck_assert_str_eq(small, "{\"polic");
  free(buf);
  /* jansson would drop a NaN silently: refused instead. */
  s.migration_us = NAN;
  ck_assert_int_eq(eplb_sim_summary_json(&s, "x", NULL, 0, &n), EPLB_ERANGE);
  ck_assert_int_eq(eplb_sim_summary_json(NULL, "x", NULL, 0, &n), EPLB_EINVAL);
}
END_TEST

START_TEST(held_out_window_is_the_first_half) {
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  /* The whole trace of 10 steps: plan on [0, 5), score [5, 10). */
  ck_assert_int_eq(eplb_sim_options_hold_out(&o, 10), EPLB_OK);
  ck_assert_uint_eq(o.plan_step_begin, 0);
  ck_assert_uint_eq(o.plan_step_end, 5);
  uint64_t ps[2], sc[2];
  ck_assert_int_eq(eplb_sim_steps(&o, 10, 0, ps, sc), EPLB_OK);
  ck_assert_uint_eq(sc[0], 5);
  ck_assert_uint_eq(sc[1], 10);
  /* Steps [3, 8) of 40, and a step_end past the trace: odd counts plan on fewer. */
  o.step_begin = 3, o.step_end = 8;
  ck_assert_int_eq(eplb_sim_options_hold_out(&o, 40), EPLB_OK);
  ck_assert_uint_eq(o.plan_step_begin, 3);
  ck_assert_uint_eq(o.plan_step_end, 5);
  o.step_begin = 36, o.step_end = UINT64_MAX;
  ck_assert_int_eq(eplb_sim_options_hold_out(&o, 40), EPLB_OK);
  ck_assert_uint_eq(o.plan_step_end, 38);
  /* One step cannot be split; the window is left alone. */
  o.step_begin = 39;
  ck_assert_int_eq(eplb_sim_options_hold_out(&o, 40), EPLB_EINVAL);
  ck_assert_str_eq(eplb_error_detail(), "1 step to replay; holding out half needs 2 or more");
  ck_assert_uint_eq(o.plan_step_end, 38);
  o.step_begin = 50;
  ck_assert_int_eq(eplb_sim_options_hold_out(&o, 40), EPLB_EINVAL);
  ck_assert_int_eq(eplb_sim_options_hold_out(NULL, 40), EPLB_EINVAL);
}
END_TEST

START_TEST(step_csv_row_and_header) {
  size_t n = 0;
  char buf[512];
  ck_assert_int_eq(eplb_sim_csv_header(2, buf, sizeof buf, &n), EPLB_OK);
  ck_assert_str_eq(buf, "step,num_tokens,balancedness,min_balancedness,plan_balancedness,"
                        "cross_node_copies,dedup_copies,cross_node_bytes,est_step_time_us,"
                        "compute_us,a2a_us,migrated_bytes,gpu0,gpu1");
  ck_assert_uint_eq(n, strlen(buf));
  const double tokens[3] = {1.5, 2.25, 1e6};
  eplb_sim_step_t st = {.step = 7,
                        .num_tokens = 128,
                        .balancedness = 0.5,
                        .min_balancedness = 0.25,
                        .plan_balancedness = 1.0 / 3,
                        .cross_node_copies = 10,
                        .dedup_copies = 9.5,
                        .cross_node_bytes = 1e9,
                        .step_time_us = 123.4567,
                        .compute_us = 100,
                        .a2a_us = 23.4567,
                        .migrated_bytes = 44e6,
                        .num_gpus = 3,
                        .gpu_tokens = tokens};
  const char *want = "7,128,0.500000,0.250000,0.333333,10.000,9.500,1000000000,123.457,100.000,"
                     "23.457,44000000,1.500,2.250,1000000.000";
  ck_assert_int_eq(eplb_sim_step_csv(&st, NULL, 0, &n), EPLB_OK);
  ck_assert_uint_eq(n, strlen(want));
  ck_assert_int_eq(eplb_sim_step_csv(&st, buf, sizeof buf, NULL), EPLB_OK);
  ck_assert_str_eq(buf, want);
  /* Cut like snprintf, the length still the whole row's. */
  char small[6];
  ck_assert_int_eq(eplb_sim_step_csv(&st, small, sizeof small, &n), EPLB_OK);
  ck_assert_str_eq(small, "7,128");
  ck_assert_uint_eq(n, strlen(want));
  st.gpu_tokens = NULL;
  ck_assert_int_eq(eplb_sim_step_csv(&st, buf, sizeof buf, &n), EPLB_EINVAL);
  ck_assert_int_eq(eplb_sim_step_csv(NULL, buf, sizeof buf, &n), EPLB_EINVAL);
  ck_assert_int_eq(eplb_sim_csv_header(2, NULL, 4, &n), EPLB_EINVAL);
}
END_TEST

START_TEST(report_json_lists_the_runs) {
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.split_per_batch = 1;
  eplb_sim_summary_t sums[2] = {{.num_steps = 4, .mean_balancedness = 0.5},
                                {.num_steps = 4, .mean_balancedness = 0.875}};
  const char *names[2] = {"deepseek", "balanced:uniform"};
  eplb_sim_report_t r = {"t.eplbt", "2x8", &o, 0, {0, 4}, {4, 8}, 2, sums, names};
  size_t n = 0;
  ck_assert_int_eq(eplb_sim_report_json(&r, NULL, 0, &n), EPLB_OK);
  char *buf = malloc(n + 1);
  ck_assert_int_eq(eplb_sim_report_json(&r, buf, n + 1, NULL), EPLB_OK);
  json_t *j = json_loads(buf, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert_uint_eq(json_object_size(j), 7); /* no model and GPU */
  ck_assert_str_eq(json_string_value(json_object_get(j, "cluster")), "2x8");
  ck_assert(json_is_true(json_object_get(j, "split_per_batch")));
  ck_assert(json_is_true(json_object_get(j, "local_first")));
  ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(j, "plan_steps"), 1)), 4);
  ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(j, "scored_steps"), 0)), 4);
  json_t *runs = json_object_get(j, "policies");
  ck_assert_uint_eq(json_array_size(runs), 2);
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(runs, 1), "policy")),
                   "balanced:uniform");
  ck_assert_double_eq(
      json_real_value(json_object_get(json_array_get(runs, 1), "mean_balancedness")), 0.875);
  json_decref(j);
  free(buf);
  /* A fixed plan has no plan steps; a deployment is named. */
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  ck_assert_int_eq(eplb_model_preset("kimi-k2", &m), EPLB_OK);
  ck_assert_int_eq(eplb_gpu_preset("h20", &g), EPLB_OK);
  o.model = &m, o.gpu = &g, r.fixed_plan = 1;
  ck_assert_int_eq(eplb_sim_report_json(&r, NULL, 0, &n), EPLB_OK);
  buf = malloc(n + 1);
  ck_assert_int_eq(eplb_sim_report_json(&r, buf, n + 1, NULL), EPLB_OK);
  j = json_loads(buf, 0, NULL);
  ck_assert(json_is_null(json_object_get(j, "plan_steps")));
  ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "kimi-k2");
  ck_assert_str_eq(json_string_value(json_object_get(j, "gpu")), "h20");
  json_decref(j);
  free(buf);
  /* A figure that is not finite fails the whole report. */
  sums[1].p99_step_time_us = INFINITY;
  ck_assert_int_eq(eplb_sim_report_json(&r, NULL, 0, &n), EPLB_ERANGE);
  r.cluster = NULL;
  ck_assert_int_eq(eplb_sim_report_json(&r, NULL, 0, &n), EPLB_EINVAL);
}
END_TEST

/* The tree the tools take is the report the text writer writes: one
 * builder, dumped compact with reals to 17 digits. */
START_TEST(report_tree_is_the_text) {
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  eplb_sim_summary_t sums[1] = {{.num_steps = 4, .mean_balancedness = 1.0 / 3}};
  const char *names[1] = {"balanced"};
  eplb_sim_report_t r = {"t.eplbt", "2x8", &o, 0, {0, 4}, {4, 8}, 1, sums, names};
  json_t *j = NULL;
  ck_assert_int_eq(eplb_sim_report_tree(&r, &j), EPLB_OK);
  char *want = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
  size_t n = 0;
  char buf[2048], small[8];
  ck_assert_int_eq(eplb_sim_report_json(&r, buf, sizeof buf, &n), EPLB_OK);
  ck_assert_str_eq(buf, want);
  ck_assert_uint_eq(n, strlen(want));
  ck_assert_int_eq(eplb_sim_report_json(&r, small, sizeof small, &n), EPLB_OK);
  ck_assert_int_eq(strncmp(small, want, sizeof small - 1), 0);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
  free(want);
  json_decref(j);
  sums[0].p5_balancedness = NAN;
  ck_assert_int_eq(eplb_sim_report_tree(&r, &j), EPLB_ERANGE);
  ck_assert_ptr_null(j);
  ck_assert_int_eq(eplb_sim_report_tree(&r, NULL), EPLB_EINVAL);
}
END_TEST

/* The --csv file: the header and each row (after the policy with that
 * column), in place only once finished; a bad row fails it and leaves
 * nothing. */
START_TEST(csv_file_streams_the_rows) {
  const char *path = eplb_test_tmp("steps.csv");
  const double tokens[2] = {1, 2};
  eplb_sim_step_t st = {.step = 3, .num_tokens = 8, .num_gpus = 2, .gpu_tokens = tokens};
  eplb_sim_csv_t *c = NULL;
  ck_assert_int_eq(eplb_sim_csv_create(path, 2, 1, &c), EPLB_OK);
  ck_assert_int_eq(eplb_sim_csv_append(c, "balanced", &st), EPLB_OK);
  st.step = 4;
  ck_assert_int_eq(eplb_sim_csv_append(c, "deepseek", &st), EPLB_OK);
  ck_assert(!eplb_test_exists(path));
  ck_assert_int_eq(eplb_sim_csv_finish(c), EPLB_OK);
  char header[512], row[256], *want = malloc(2048);
  eplb_sim_csv_header(2, header, sizeof header, NULL);
  eplb_sim_step_csv(&st, row, sizeof row, NULL);
  st.step = 3;
  char row3[256];
  eplb_sim_step_csv(&st, row3, sizeof row3, NULL);
  snprintf(want, 2048, "policy,%s\nbalanced,%s\ndeepseek,%s\n", header, row3, row);
  size_t len = 0;
  char *got = eplb_test_read_file(path, &len);
  ck_assert_uint_eq(len, strlen(want));
  ck_assert_int_eq(memcmp(got, want, len), 0);
  free(got);
  free(want);
  remove(path);
  ck_assert_int_eq(eplb_sim_csv_create(path, 2, 0, &c), EPLB_OK);
  st.gpu_tokens = NULL;
  ck_assert_int_eq(eplb_sim_csv_append(c, NULL, &st), EPLB_EINVAL);
  ck_assert_int_eq(eplb_sim_csv_finish(c), EPLB_EINVAL);
  ck_assert(!eplb_test_exists(path));
  ck_assert_int_eq(eplb_sim_csv_create(path, 2, 0, &c), EPLB_OK);
  eplb_sim_csv_destroy(c);
  ck_assert(!eplb_test_exists(path));
  ck_assert_int_eq(eplb_sim_csv_create(NULL, 2, 0, &c), EPLB_EINVAL);
  ck_assert_ptr_null(c);
}
END_TEST

/* How a run is priced: no deployment is the default table (said so), a
 * model is costed from its descriptions, a cost file wins over both. */
START_TEST(price_names_what_priced_the_run) {
  eplb_sim_options_t o;
  eplb_sim_pricing_t p;
  eplb_deployment_request_t q = {NULL, NULL, "", "t.eplbt", 256, 0, "--model", "--gpu"};
  eplb_sim_options_default(&o);
  ck_assert_int_eq(eplb_sim_options_price(&o, &q, NULL, NULL, &p), EPLB_OK);
  ck_assert_ptr_eq(o.cost, &p.cost);
  ck_assert_ptr_null(o.model);
  ck_assert_str_eq(p.phrase, "the default table (DeepSeek-V3's experts on H800): the trace "
                             "names no model; give --model");
  q.data_model = "org/unknown";
  ck_assert_int_eq(eplb_sim_options_price(&o, &q, NULL, NULL, &p), EPLB_OK);
  ck_assert_ptr_nonnull(strstr(p.phrase, "the trace's model 'org/unknown' has no preset"));
  q.model = "deepseek-v3";
  eplb_sim_options_default(&o);
  ck_assert_int_eq(eplb_sim_options_price(&o, &q, NULL, NULL, &p), EPLB_OK);
  ck_assert_ptr_null(o.cost);
  ck_assert_ptr_eq(o.model, &p.model);
  ck_assert_str_eq(p.phrase, "deepseek-v3 on h800");
  eplb_cost_model_t file;
  eplb_cost_model_default(&file);
  ck_assert_int_eq(eplb_sim_options_price(&o, &q, &file, "c.json", &p), EPLB_OK);
  ck_assert_ptr_eq(o.cost, &p.cost);
  ck_assert_str_eq(p.phrase, "cost file c.json");
  q.model = "nosuch";
  ck_assert_int_eq(eplb_sim_options_price(&o, &q, NULL, NULL, &p), EPLB_EINVAL);
  ck_assert_int_eq(eplb_sim_options_price(NULL, &q, NULL, NULL, &p), EPLB_EINVAL);
}
END_TEST

/* The oracle of a run: the steps it scores, with its plans' slots. */
START_TEST(run_oracle_is_the_oracle_of_the_scored_steps) {
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = 2, so.num_experts = 8, so.topk = 2, so.num_steps = 6, so.tokens_per_step = 32;
  const char *path = eplb_test_tmp("oracle.eplbt");
  ck_assert_int_eq(eplb_synth_generate(path, &so), EPLB_OK);
  eplb_trace_t *t = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &t), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_open("1x2", &cl), EPLB_OK);
  eplb_sim_options_t o;
  uint32_t slots[2];
  eplb_sim_options_default(&o);
  o.plan.threads = 1;
  ck_assert_int_eq(eplb_sim_options_slots(&o, cl, 5, 0, slots), EPLB_OK);
  o.plan_step_begin = 0, o.plan_step_end = 3; /* held out: scored on 3..5 */
  eplb_sim_oracle_t a, b;
  ck_assert_int_eq(eplb_sim_run_oracle(t, cl, NULL, &o, &a), EPLB_OK);
  eplb_plan_options_t po = o.plan;
  po.num_gpus = 2, po.num_nodes = 1;
  ck_assert_int_eq(eplb_sim_oracle(t, 3, 6, &po, &b), EPLB_OK);
  ck_assert_uint_eq(a.num_steps, 3);
  ck_assert_double_eq(a.balancedness, b.balancedness);
  ck_assert_double_eq(a.ceiling, b.ceiling);
  ck_assert_int_eq(eplb_sim_run_oracle(t, NULL, NULL, &o, &a), EPLB_EINVAL);
  eplb_cluster_destroy(cl);
  eplb_trace_close(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sim-setup");
  TCase *tc = tcase_create("sim-setup");
  tcase_add_test(tc, slots_from_options_or_the_cluster_file);
  tcase_add_test(tc, summary_json_has_every_figure_or_fails);
  tcase_add_test(tc, held_out_window_is_the_first_half);
  tcase_add_test(tc, step_csv_row_and_header);
  tcase_add_test(tc, report_json_lists_the_runs);
  tcase_add_test(tc, options_check_names_the_field);
  tcase_add_test(tc, report_tree_is_the_text);
  tcase_add_test(tc, csv_file_streams_the_rows);
  tcase_add_test(tc, price_names_what_priced_the_run);
  tcase_add_test(tc, run_oracle_is_the_oracle_of_the_scored_steps);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
