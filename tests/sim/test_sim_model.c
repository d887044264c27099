/* tests/sim/test_sim_model.c — the simulator with a deployment (eplb/model.h):
 * the cost model a model and GPU produce, the decode policy with and without
 * the per-batch split, and the step-time percentile. */
#include "eplb/sim.h"
#include "tests/support.h"

#include <math.h>
#include <string.h>

START_TEST(cost_model_from_desc_follows_the_formula) {
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  eplb_cost_model_t c;
  eplb_cost_model_default(&c);
  ck_assert_int_eq(eplb_model_preset("deepseek-v2-lite", &m), EPLB_OK);
  ck_assert_int_eq(eplb_gpu_preset("h20", &g), EPLB_OK);
  ck_assert_int_eq(eplb_cost_model_from_desc(&m, &g, &c), EPLB_OK);
  ck_assert_int_eq(eplb_cost_model_check(&c), EPLB_OK);
  ck_assert_double_eq(eplb_cost_model_expert_time(&c, 0), 0);
  for (double x = 0.25; x < 1e6; x *= 1.37) {
    double want = eplb_model_expert_time(&m, &g, x > 1 ? x : 1);
    ck_assert_msg(fabs(eplb_cost_model_expert_time(&c, x) / want - 1) < 0.005, "%g tokens", x);
  }
  ck_assert_double_eq(c.dispatch_bytes_per_copy, 2048 + 16 * 4);
  ck_assert_double_eq(c.combine_bytes_per_copy, 4096);
  ck_assert_double_eq(c.bytes_per_expert, 3.0 * 2048 * 1408 * 2);
  ck_assert_double_eq(c.intra_node_gbps, g.nvlink_gbps);
  ck_assert_double_eq(c.inter_node_gbps, g.rdma_gbps);
  ck_assert_double_eq(c.launch_us, g.launch_us);
  m.weight_bytes = -1;
  ck_assert_int_eq(eplb_cost_model_from_desc(&m, &g, &c), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "weight_bytes"));
  /* The cost file takes launch_us. */
  const char *p = eplb_test_tmp("cost.json");
  const char *text = "{\"launch_us\": 3}";
  eplb_test_write_file(p, text, strlen(text));
  ck_assert_int_eq(eplb_cost_model_read(p, &c), EPLB_OK);
  ck_assert_double_eq(c.launch_us, 3);
}
END_TEST

/* One policy's summary on the trace at path (8 GPUs on one node, 5 slots
 * each for 32 experts), planned on the first half, scored on the second. */
static eplb_status_t run(const char *path, eplb_plan_policy_t pol, int split,
                         const eplb_model_desc_t *m, const eplb_gpu_desc_t *g,
                         eplb_sim_summary_t *out) {
  eplb_trace_t *tr = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(1, 8, &cl), EPLB_OK);
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.plan.policy = pol;
  o.plan.num_replicas = 40;
  o.plan.threads = 1;
  o.plan_step_begin = 0;
  o.plan_step_end = 16;
  o.split_per_batch = split;
  o.model = m;
  o.gpu = g;
  eplb_status_t st = eplb_sim_run(tr, cl, NULL, &o, out);
  eplb_cluster_destroy(cl);
  eplb_trace_close(tr);
  return st;
}

START_TEST(decode_policy_in_the_simulator) {
  const char *path = eplb_test_tmp("d.eplbt");
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = 3;
  so.num_experts = 32;
  so.topk = 4;
  so.num_steps = 32;
  so.tokens_per_step = 8 * 16; /* 16 tokens per GPU: a decode batch */
  so.skew_param = 0.5;
  ck_assert_int_eq(eplb_synth_generate(path, &so), EPLB_OK);
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  eplb_model_preset("deepseek-v3", &m);
  m.num_experts = 32;
  eplb_gpu_preset("h800", &g);
  eplb_sim_summary_t ds, bs, dd, dstat;
  ck_assert_int_eq(run(path, EPLB_POLICY_DEEPSEEK, 0, &m, &g, &ds), EPLB_OK);
  ck_assert_int_eq(run(path, EPLB_POLICY_BALANCED, 1, &m, &g, &bs), EPLB_OK);
  ck_assert_int_eq(run(path, EPLB_POLICY_DECODE, 1, &m, &g, &dd), EPLB_OK);
  ck_assert_int_eq(run(path, EPLB_POLICY_DECODE, 0, &m, &g, &dstat), EPLB_OK);
  ck_assert_uint_eq(dd.num_steps, 16);
  ck_assert_msg(dd.mean_step_time_us < 0.95 * ds.mean_step_time_us, "decode %g, deepseek %g",
                dd.mean_step_time_us, ds.mean_step_time_us);
  ck_assert_msg(dd.mean_step_time_us <= bs.mean_step_time_us, "decode %g, balanced+split %g",
                dd.mean_step_time_us, bs.mean_step_time_us);
  ck_assert(dd.mean_max_active < bs.mean_max_active);
  ck_assert(dstat.mean_step_time_us < ds.mean_step_time_us);
  ck_assert(dd.p99_step_time_us >= dd.mean_step_time_us * (1 - 1e-12) ||
            dd.num_steps < 2); /* p99 of a nearly flat series may sit at the mean */
  ck_assert(dd.p99_step_time_us > 0);
  /* The step time bound: the same for every plan of these steps and GPUs,
   * below each, and with the weight reads a layer's 512 token copies force
   * (at least 9 of 32 experts, so 2 reads on some GPU) plus the launch and the
   * two kernels' latency of each of the 3 layers. */
  const eplb_sim_summary_t *all[] = {&ds, &bs, &dd, &dstat};
  double t1 = eplb_model_expert_time(&m, &g, 1);
  for (int i = 0; i < 4; i++) {
    ck_assert_double_eq(all[i]->bound_step_time_us, ds.bound_step_time_us);
    ck_assert_msg(all[i]->bound_step_time_us <= all[i]->mean_step_time_us, "bound %g, run %d %g",
                  all[i]->bound_step_time_us, i, all[i]->mean_step_time_us);
  }
  ck_assert_msg(ds.bound_step_time_us >=
                    3 * (2 * t1 + g.launch_us + 2 * g.a2a_latency_us) * (1 - 1e-9),
                "bound %g", ds.bound_step_time_us);
  /* Rebalancing with the decode policy: its layers switch on modelled time
   * (eplb_decode_split_time of the plans' shares, which must stay in
   * [0, 1] however the split's moves round). */
  {
    eplb_trace_t *tr = NULL;
    eplb_cluster_t *cl = NULL;
    ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
    ck_assert_int_eq(eplb_cluster_create_uniform(2, 4, &cl), EPLB_OK);
    eplb_sim_options_t o;
    eplb_sim_options_default(&o);
    o.plan.policy = EPLB_POLICY_DECODE;
    o.plan.num_replicas = 40;
    o.plan.threads = 1;
    o.rebalance_every = 4;
    o.window = 4;
    o.gain_threshold = -1; /* every layer that differs */
    o.split_per_batch = 1;
    o.model = &m;
    o.gpu = &g;
    eplb_sim_summary_t rb;
    ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, &o, &rb), EPLB_OK);
    ck_assert_uint_ge(rb.num_plans, 7);
    ck_assert(rb.migrated_bytes > 0);
    eplb_cluster_destroy(cl);
    eplb_trace_close(tr);
  }
  /* The decode policy needs the deployment. */
  eplb_sim_summary_t x;
  ck_assert_int_eq(run(path, EPLB_POLICY_DECODE, 1, NULL, NULL, &x), EPLB_EINVAL);
}
END_TEST

/* A prefill trace's inter-node copies are de-duplicated per node (DeepEP's
 * normal kernels): the same steps cost no more than as decode. */
START_TEST(prefill_deduplicates_inter_node_copies) {
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = 2;
  so.num_experts = 32;
  so.topk = 8;
  so.num_steps = 8;
  so.tokens_per_step = 512;
  eplb_sim_summary_t sum[2];
  for (int i = 0; i < 2; i++) {
    const char *path = eplb_test_tmp(i ? "pre.eplbt" : "dec.eplbt");
    so.phase = i ? EPLB_PHASE_PREFILL : EPLB_PHASE_DECODE;
    ck_assert_int_eq(eplb_synth_generate(path, &so), EPLB_OK);
    eplb_trace_t *tr = NULL;
    eplb_cluster_t *cl = NULL;
    ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
    ck_assert_int_eq(eplb_cluster_create_uniform(4, 2, &cl), EPLB_OK);
    eplb_sim_options_t o;
    eplb_sim_options_default(&o);
    o.plan.num_replicas = 32;
    o.plan.threads = 1;
    ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, &o, &sum[i]), EPLB_OK);
    eplb_cluster_destroy(cl);
    eplb_trace_close(tr);
  }
  ck_assert_double_eq_tol(sum[0].cross_node_copies, sum[1].cross_node_copies, 1e-6);
  ck_assert(sum[1].dedup_copies < sum[1].cross_node_copies);
  ck_assert_msg(sum[1].mean_step_time_us < sum[0].mean_step_time_us, "prefill %g, decode %g",
                sum[1].mean_step_time_us, sum[0].mean_step_time_us);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sim-model");
  TCase *tc = tcase_create("sim-model");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, cost_model_from_desc_follows_the_formula);
  tcase_add_test(tc, decode_policy_in_the_simulator);
  tcase_add_test(tc, prefill_deduplicates_inter_node_copies);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
