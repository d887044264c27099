/* tests/sim/test_sim.c — the simulator: cost model, hand-computed replays
 * (global and local-first routing), rows vs uniform consistency, per-batch
 * split, rebalancing, held-out plans. */
#include "eplb/sim.h"
#include "tests/support.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define EPS 1e-9

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* A trace of steps with L layers, E experts, top-k k; counts [steps][L][E];
 * rows [steps] (0 = none), topk [steps][rows][L][k], src [steps][rows]. */
typedef struct tstep {
  uint32_t num_tokens;
  const uint32_t *counts;
  uint32_t num_rows;
  const uint16_t *topk;
  const int32_t *src;
} tstep_t;

static void write_trace(const char *path, uint32_t L, uint32_t E, uint32_t k, const tstep_t *steps,
                        uint32_t n) {
  eplb_trace_meta_t meta;
  eplb_trace_meta_default(&meta);
  meta.num_layers = L;
  meta.num_experts = E;
  meta.topk = k;
  meta.num_ranks = 4;
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(path, &meta, NULL, &w), EPLB_OK);
  for (uint32_t i = 0; i < n; i++) {
    eplb_trace_step_t st = {
        0, steps[i].num_tokens, steps[i].counts, steps[i].num_rows, steps[i].topk, steps[i].src};
    ck_assert_int_eq(eplb_trace_writer_append(w, &st), EPLB_OK);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
}

typedef struct recs {
  int n;
  eplb_sim_step_t r[64];
  double gpu_tokens[64][8];
} recs_t;

static void collect(const eplb_sim_step_t *st, void *user) {
  recs_t *c = user;
  if (c->n < 64) {
    c->r[c->n] = *st;
    for (uint32_t g = 0; g < st->num_gpus && g < 8; g++)
      c->gpu_tokens[c->n][g] = st->gpu_tokens[g];
    c->r[c->n].gpu_tokens = c->r[c->n].gpu_active = NULL;
    c->n++;
  }
}

/* ---- cost model ---------------------------------------------------------- */

START_TEST(expert_time_interpolates) {
  eplb_cost_model_t m;
  eplb_cost_model_default(&m);
  ck_assert_int_eq(eplb_cost_model_check(&m), EPLB_OK);
  ck_assert_double_eq(eplb_cost_model_expert_time(&m, 0), 0);
  ck_assert_double_eq_tol(eplb_cost_model_expert_time(&m, 0.3), 19.5, EPS);
  ck_assert_double_eq_tol(eplb_cost_model_expert_time(&m, 64), 19.5, EPS);
  ck_assert_double_eq_tol(eplb_cost_model_expert_time(&m, 96), 20.5, EPS);
  ck_assert_double_eq_tol(eplb_cost_model_expert_time(&m, 750), 45.3 + 36.0 * 238 / 512, EPS);
  ck_assert_double_eq_tol(eplb_cost_model_expert_time(&m, 4096), 278, EPS);
  /* Beyond the last point: the last segment extended. */
  ck_assert_double_eq_tol(eplb_cost_model_expert_time(&m, 5120), 278 + (278 - 81.3) * 1024 / 3072,
                          EPS);
  ck_assert_double_eq(m.dispatch_bytes_per_copy, 7392);
  ck_assert_double_eq(m.combine_bytes_per_copy, 14336);
  ck_assert_double_eq(m.bytes_per_expert, 44e6);
}
END_TEST

START_TEST(cost_file_parses_and_rejects_bad_keys) {
  const char *dir = eplb_test_tmpdir();
  const char *good = eplb_test_path(dir, "good.json");
  write_text(good, "{\"format\": \"eplb-cost\", \"version\": 1,\n"
                   " \"expert_time_us\": [[32, 10], [64, 12.5]],\n"
                   " \"dispatch_bytes_per_copy\": 100, \"inter_node_gbps\": 20}\n");
  eplb_cost_model_t m;
  eplb_cost_model_default(&m);
  ck_assert_int_eq(eplb_cost_model_read(good, &m), EPLB_OK);
  ck_assert_uint_eq(m.num_points, 2);
  ck_assert_double_eq(m.tokens[1], 64);
  ck_assert_double_eq(m.time_us[1], 12.5);
  ck_assert_double_eq(m.dispatch_bytes_per_copy, 100);
  ck_assert_double_eq(m.combine_bytes_per_copy, 14336); /* default kept */
  ck_assert_double_eq(m.inter_node_gbps, 20);
  ck_assert_double_eq(m.intra_node_gbps, 0); /* from the cluster */

  static const struct {
    const char *text, *needle;
  } bad[] = {{"{\"dispatch_bytes\": 1}", "dispatch_bytes"},
             {"{\"expert_time_us\": [[64, 1], [32, 2]]}", "expert_time_us[1]"},
             {"{\"expert_time_us\": [[0, 1]]}", "expert_time_us[0]"},
             {"{\"expert_time_us\": []}", "expert_time_us"},
             {"{\"combine_bytes_per_copy\": -5}", "combine_bytes_per_copy"},
             {"{\"inter_node_gbps\": 0}", "inter_node_gbps"},
             {"{\"format\": \"eplb-plan\"}", "format"},
             {"[1, 2]", "object"},
             {"{\"bytes_per_expert\": ", "bad.json"}};
  const char *bp = eplb_test_path(dir, "bad.json");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_text(bp, bad[i].text);
    ck_assert_int_eq(eplb_cost_model_read(bp, &m), EPLB_EFORMAT);
    ck_assert_msg(strstr(eplb_error_detail(), bad[i].needle), "case %zu: '%s'", i,
                  eplb_error_detail());
  }
  ck_assert_int_eq(eplb_cost_model_read(eplb_test_path(dir, "missing.json"), &m), EPLB_EIO);
}
END_TEST

/* ---- hand-computed replay -------------------------------------------------- */

/* 2 nodes x 2 GPUs; 4 experts, 2 slots per GPU: phy2log [0 1 | 2 3 | 0 1 | 2 3],
 * expert 0 split 0.75 (GPU 0) / 0.25 (GPU 2), the others half and half. */
static const char tiny_plan[] =
    "{\"num_layers\": 1, \"num_logical_experts\": 4, \"num_gpus\": 4, \"num_nodes\": 2,\n"
    " \"slots_per_gpu\": 2, \"layers\": [{\"phy2log\": [0, 1, 2, 3, 0, 1, 2, 3],\n"
    " \"share\": [0.75, 0.5, 0.5, 0.5, 0.25, 0.5, 0.5, 0.5]}]}\n";

/* Rows (k = 2): source 0 {0,1}, 3 {0,2}, unknown (row 2 -> GPU 2) {1,3}, 1 {2,3}. */
static const uint32_t tiny_counts[] = {2, 2, 2, 2};
static const uint16_t tiny_topk[] = {0, 1, 0, 2, 1, 3, 2, 3};
static const int32_t tiny_src[] = {0, 3, -1, 1};

static void tiny_files(const char **trace, const char **plan) {
  const char *dir = eplb_test_tmpdir();
  *trace = eplb_test_path(dir, "tiny.eplbt");
  *plan = eplb_test_path(dir, "tiny_plan.json");
  tstep_t st = {4, tiny_counts, 4, tiny_topk, tiny_src};
  write_trace(*trace, 1, 4, 2, &st, 1);
  write_text(*plan, tiny_plan);
}

START_TEST(tiny_case_matches_hand_computation) {
  const char *tp, *pp;
  tiny_files(&tp, &pp);
  eplb_trace_t *tr = NULL;
  eplb_plan_t *plan = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(pp, &plan), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);

  /* 1 µs per intra-node copy, 2 µs per inter-node copy, 10 µs per active replica. */
  eplb_cost_model_t cm;
  eplb_cost_model_default(&cm);
  cm.num_points = 1;
  cm.tokens[0] = 64;
  cm.time_us[0] = 10;
  cm.dispatch_bytes_per_copy = 1000;
  cm.combine_bytes_per_copy = 0;
  cm.intra_node_gbps = 1;
  cm.inter_node_gbps = 0.5;
  recs_t rec = {0};
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  ck_assert_int_eq(o.local_first, 1);
  o.local_first = 0; /* global shares: every expert's mix crosses nodes */
  o.cost = &cm;
  o.on_step = collect;
  o.user = &rec;
  eplb_sim_summary_t s;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_int_eq(rec.n, 1);
  const eplb_sim_step_t *r = &rec.r[0];
  ck_assert_int_eq(r->used_rows, 1);
  /* Cross copies: sum over (row, e) of 1 - p_e(source node). */
  ck_assert_double_eq_tol(r->cross_node_copies, 0.75 + 1.25 + 1.0 + 1.0, EPS);
  /* Dedup: per row 1 - prod(1 - p_e(remote node)). */
  ck_assert_double_eq_tol(r->dedup_copies, 0.625 + 0.875 + 0.75 + 0.75, EPS);
  ck_assert_double_eq_tol(r->cross_node_bytes, 4.0 * 1000, EPS);
  /* GPU tokens 2.5, 2, 1.5, 2: balancedness 2 / 2.5. */
  ck_assert_double_eq_tol(rec.gpu_tokens[0][0], 2.5, EPS);
  ck_assert_double_eq_tol(rec.gpu_tokens[0][2], 1.5, EPS);
  ck_assert_double_eq_tol(r->balancedness, 0.8, EPS);
  ck_assert_double_eq_tol(r->plan_balancedness, 0.8, EPS);
  /* Compute 2 x 10 µs on every GPU; GPU 3 sends 1.25 inter + 0.25 intra copies
   * (2.75 µs), the largest all-to-all. */
  ck_assert_double_eq_tol(r->compute_us, 20, EPS);
  ck_assert_double_eq_tol(r->a2a_us, 2.75, EPS);
  ck_assert_double_eq_tol(r->step_time_us, 22.75, EPS);
  ck_assert_double_eq_tol(s.mean_balancedness, 0.8, EPS);
  ck_assert_double_eq_tol(s.p5_balancedness, 0.8, EPS);
  ck_assert_double_eq_tol(s.cross_node_copies, 4.0, EPS);
  ck_assert_double_eq(s.migrated_bytes, 0);
  ck_assert_uint_eq(s.num_plans, 1);

  /* Local-first: every expert has a replica on each node, so every token
   * stays on its node. Node 0 sends each expert one token (rows 0, 3), node
   * 1 one (rows 1, 2): 2 tokens a GPU. Only rows 1 (GPU 3 -> expert 0 on
   * GPU 2) and 2 (GPU 2 -> expert 3 on GPU 3) leave their GPU: 1 µs. */
  o.local_first = 1;
  rec.n = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  r = &rec.r[0];
  ck_assert_double_eq_tol(r->cross_node_copies, 0, EPS);
  ck_assert_double_eq_tol(r->dedup_copies, 0, EPS);
  for (int g = 0; g < 4; g++)
    ck_assert_double_eq_tol(rec.gpu_tokens[0][g], 2, EPS);
  ck_assert_double_eq_tol(r->balancedness, 1, EPS);
  ck_assert_double_eq_tol(r->plan_balancedness, 1, EPS);
  ck_assert_double_eq_tol(r->a2a_us, 1, EPS);
  ck_assert_double_eq_tol(r->step_time_us, 21, EPS);

  /* Default cost model: compute time from the table for bigger loads. */
  eplb_sim_options_default(&o);
  o.local_first = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_double_eq_tol(s.cross_node_copies, 4.0, EPS);

  eplb_trace_close(tr);
  eplb_plan_destroy(plan);
  eplb_cluster_destroy(cl);
}
END_TEST

/* Local-first falls back to the global shares for an expert without a
 * replica on the token's node. 2 nodes x 2 GPUs, phy2log
 * [0 1 | 0 2 | 3 1 | 3 2]: expert 0 only on node 0, expert 3 only on node 1,
 * experts 1 (0.3 on GPU 0, 0.7 on GPU 2) and 2 (half and half) on both.
 * Rows (k = 1): GPU 2 -> 0, GPU 0 -> 3, GPU 1 -> 1, GPU 3 -> 2. */
START_TEST(local_first_falls_back_to_global_shares) {
  static const uint32_t counts[] = {1, 1, 1, 1};
  static const uint16_t topk[] = {0, 3, 1, 2};
  static const int32_t src[] = {2, 0, 1, 3};
  const char *dir = eplb_test_tmpdir();
  const char *tp = eplb_test_path(dir, "lf.eplbt"), *pp = eplb_test_path(dir, "lf.json");
  tstep_t st = {4, counts, 4, topk, src};
  write_trace(tp, 1, 4, 1, &st, 1);
  write_text(pp,
             "{\"num_layers\": 1, \"num_logical_experts\": 4, \"num_gpus\": 4,\n"
             " \"num_nodes\": 2, \"slots_per_gpu\": 2, \"layers\": [{\"phy2log\":\n"
             " [0, 1, 0, 2, 3, 1, 3, 2], \"share\": [0.5, 0.3, 0.5, 0.5, 0.5, 0.7, 0.5, 0.5]}]}");
  eplb_trace_t *tr = NULL;
  eplb_plan_t *plan = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(pp, &plan), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  recs_t rec = {0};
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.on_step = collect;
  o.user = &rec;
  eplb_sim_summary_t s;
  /* Global: experts 0 and 3 cross whole, expert 1 from node 0 crosses 0.7,
   * expert 2 from node 1 crosses 0.5. */
  o.local_first = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_double_eq_tol(s.cross_node_copies, 3.2, EPS);
  ck_assert_double_eq_tol(rec.gpu_tokens[0][2], 1.2, EPS);
  ck_assert_double_eq_tol(s.mean_balancedness, 1 / 1.2, EPS);
  /* Local-first: experts 0 and 3 still cross (no replica on the node; global
   * shares), experts 1 and 2 stay. GPUs: 0.5 + 1, 0.5, 0.5, 0.5 + 1. */
  o.local_first = 1;
  rec.n = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_double_eq_tol(s.cross_node_copies, 2, EPS);
  ck_assert_double_eq_tol(s.dedup_copies, 2, EPS);
  static const double want[] = {1.5, 0.5, 0.5, 1.5};
  double total = 0;
  for (int g = 0; g < 4; g++) {
    ck_assert_double_eq_tol(rec.gpu_tokens[0][g], want[g], EPS);
    total += rec.gpu_tokens[0][g];
  }
  ck_assert_double_eq_tol(total, 4, EPS);
  ck_assert_double_eq_tol(s.mean_balancedness, 1 / 1.5, EPS);
  /* The per-batch split's global shares are routed local-first too: a token
   * either stays on its node or goes by those shares, so never more copies
   * cross than with them, and no token is lost. */
  o.split_per_batch = 1;
  rec.n = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  double lf_cross = s.cross_node_copies;
  total = 0;
  for (int g = 0; g < 4; g++)
    total += rec.gpu_tokens[0][g];
  ck_assert_double_eq_tol(total, 4, EPS);
  o.local_first = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_double_le(lf_cross, s.cross_node_copies + EPS);
  eplb_trace_close(tr);
  eplb_plan_destroy(plan);
  eplb_cluster_destroy(cl);
}
END_TEST

START_TEST(compute_time_uses_the_table) {
  const char *dir = eplb_test_tmpdir();
  const char *tp = eplb_test_path(dir, "big.eplbt"), *pp = eplb_test_path(dir, "big_plan.json");
  static const uint32_t counts[] = {1000, 0, 100, 10};
  tstep_t st = {1110, counts, 0, NULL, NULL};
  write_trace(tp, 1, 4, 2, &st, 1);
  write_text(pp, tiny_plan);
  eplb_trace_t *tr = NULL;
  eplb_plan_t *plan = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(pp, &plan), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  eplb_cost_model_t cm;
  eplb_cost_model_default(&cm);
  recs_t rec = {0};
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.local_first = 0;
  o.on_step = collect;
  o.user = &rec;
  eplb_sim_summary_t s;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  /* GPU 0: expert 0 x 750 tokens, expert 1 inactive. GPU 1: 50 + 5 tokens.
   * GPU 2: 250 (expert 0). GPU 3: 50 + 5. The slowest compute is GPU 0. */
  ck_assert_double_eq_tol(rec.r[0].compute_us, eplb_cost_model_expert_time(&cm, 750), EPS);
  ck_assert_int_eq(rec.r[0].used_rows, 0);
  ck_assert_double_eq_tol(rec.gpu_tokens[0][0], 750, EPS);
  /* Uniform sources: cross = sum over nodes of node tokens x (1 - 2/4). */
  ck_assert_double_eq_tol(rec.r[0].cross_node_copies, 1110 * 0.5, EPS);
  ck_assert_double_eq_tol(rec.r[0].dedup_copies, rec.r[0].cross_node_copies, EPS);
  ck_assert_double_eq_tol(rec.r[0].balancedness, (1110.0 / 4) / 750, EPS);

  /* Local-first without rows: each node sends half of every expert's tokens
   * (2 of 4 GPUs), all to its own replica. GPU 0 and GPU 2: 500 of expert 0;
   * GPUs 1 and 3: 50 + 5. Nothing crosses nodes. */
  o.local_first = 1;
  rec.n = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_double_eq_tol(rec.gpu_tokens[0][0], 500, EPS);
  ck_assert_double_eq_tol(rec.gpu_tokens[0][2], 500, EPS);
  ck_assert_double_eq_tol(rec.gpu_tokens[0][1], 55, EPS);
  ck_assert_double_eq_tol(rec.r[0].cross_node_copies, 0, EPS);
  ck_assert_double_eq_tol(rec.r[0].balancedness, (1110.0 / 4) / 500, EPS);
  ck_assert_double_eq_tol(rec.r[0].compute_us, eplb_cost_model_expert_time(&cm, 500), EPS);
  eplb_trace_close(tr);
  eplb_plan_destroy(plan);
  eplb_cluster_destroy(cl);
}
END_TEST

/* ---- rows vs no rows ------------------------------------------------------ */

START_TEST(rows_and_uniform_agree_on_a_uniform_case) {
  /* 16 tokens, k = 1; row i comes from GPU i mod 4 (no source recorded) and
   * picks expert (i / 4) mod 4: every source sends each expert one token,
   * exactly the uniform-source expectation. One expert per GPU. */
  static uint32_t counts[] = {4, 4, 4, 4};
  static uint16_t topk[16];
  static int32_t src[16];
  for (int i = 0; i < 16; i++) {
    topk[i] = (uint16_t)((i / 4) % 4);
    src[i] = -1;
  }
  tstep_t steps[2] = {{16, counts, 16, topk, src}, {16, counts, 0, NULL, NULL}};
  const char *dir = eplb_test_tmpdir();
  const char *tp = eplb_test_path(dir, "uni.eplbt"), *pp = eplb_test_path(dir, "uni.json");
  write_trace(tp, 1, 4, 1, steps, 2);
  write_text(pp,
             "{\"num_layers\": 1, \"num_logical_experts\": 4, \"num_gpus\": 4,"
             " \"num_nodes\": 2, \"slots_per_gpu\": 1, \"layers\": [{\"phy2log\": [0,1,2,3]}]}");
  eplb_trace_t *tr = NULL;
  eplb_plan_t *plan = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(pp, &plan), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  recs_t rec = {0};
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.on_step = collect;
  o.user = &rec;
  eplb_sim_summary_t s;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_int_eq(rec.n, 2);
  ck_assert_int_eq(rec.r[0].used_rows, 1);
  ck_assert_int_eq(rec.r[1].used_rows, 0);
  ck_assert_uint_eq(s.used_rows_steps, 1);
  ck_assert_double_eq_tol(rec.r[0].cross_node_copies, 8, EPS);
  ck_assert_double_eq_tol(rec.r[1].cross_node_copies, 8, EPS);
  /* k = 1: nothing to de-duplicate. */
  ck_assert_double_eq_tol(rec.r[0].dedup_copies, 8, EPS);
  ck_assert_double_eq_tol(rec.r[0].a2a_us, rec.r[1].a2a_us, 1e-6);
  ck_assert_double_eq_tol(rec.r[0].step_time_us, rec.r[1].step_time_us, 1e-6);
  ck_assert_double_eq_tol(rec.r[0].balancedness, 1, EPS);

  /* Sampled rows stand for num_tokens / num_rows tokens each. */
  tstep_t half = {32, counts, 16, topk, src};
  write_trace(tp, 1, 4, 1, &half, 1);
  eplb_trace_close(tr);
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  rec.n = 0;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_double_eq_tol(rec.r[0].cross_node_copies, 16, EPS);
  eplb_trace_close(tr);
  eplb_plan_destroy(plan);
  eplb_cluster_destroy(cl);
}
END_TEST

/* ---- per-batch split, rebalancing, shapes --------------------------------- */

static uint64_t lcg(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return *x >> 33;
}

/* Random skewed counts: 2 layers x 8 experts, `n` steps; phase switches the
 * hot expert halfway when `shift` is set. */
static void random_trace(const char *path, uint32_t n, int shift, int stationary) {
  static uint32_t counts[32][16];
  tstep_t steps[32];
  uint64_t x = 7;
  for (uint32_t t = 0; t < n; t++) {
    for (uint32_t i = 0; i < 16; i++) {
      uint32_t e = i % 8, hot = shift && t >= n / 2 ? 7 : 0;
      counts[t][i] = stationary ? (e == hot ? 80 : 10 + e) : (uint32_t)(lcg(&x) % 40);
      if (!stationary && e == hot)
        counts[t][i] += 100;
    }
    uint32_t tot = 0;
    for (uint32_t i = 0; i < 8; i++)
      tot += counts[t][i];
    steps[t] = (tstep_t){tot, counts[t], 0, NULL, NULL};
  }
  write_trace(path, 2, 8, 1, steps, n);
}

START_TEST(split_per_batch_never_lowers_balancedness) {
  const char *tp = eplb_test_path(eplb_test_tmpdir(), "rand.eplbt");
  random_trace(tp, 16, 0, 0);
  eplb_trace_t *tr = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  recs_t rec = {0};
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.plan.policy = EPLB_POLICY_DEEPSEEK;
  o.plan.num_replicas = 12;
  o.split_per_batch = 1;
  o.on_step = collect;
  o.user = &rec;
  eplb_sim_summary_t s;
  ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, &o, &s), EPLB_OK);
  ck_assert_int_eq(rec.n, 16);
  int gained = 0;
  for (int i = 0; i < rec.n; i++) {
    ck_assert_double_ge(rec.r[i].balancedness, rec.r[i].plan_balancedness - 1e-9);
    gained |= rec.r[i].balancedness > rec.r[i].plan_balancedness + 1e-6;
  }
  ck_assert_double_ge(s.mean_balancedness, s.mean_plan_balancedness - 1e-9);
  ck_assert_msg(gained, "the split should improve some step of a random trace");
  eplb_trace_close(tr);
  eplb_cluster_destroy(cl);
}
END_TEST

static eplb_sim_summary_t rebalance_run(const char *tp) {
  eplb_trace_t *tr = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  recs_t rec = {0};
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.plan.policy = EPLB_POLICY_BALANCED;
  o.plan.num_replicas = 12;
  o.rebalance_every = 4;
  o.on_step = collect;
  o.user = &rec;
  eplb_sim_summary_t s;
  ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, &o, &s), EPLB_OK);
  ck_assert_uint_eq(s.num_plans, 4);
  double moved = 0;
  for (int i = 0; i < rec.n; i++) {
    const eplb_sim_step_t *r = &rec.r[i];
    if (i % 4)
      ck_assert_double_eq(r->migrated_bytes, 0);
    moved += r->migrated_bytes;
    /* The copies run on links the all-to-all leaves idle; the rest is in
     * the step time. */
    double idle = r->step_time_us - r->migration_exposed_us - r->a2a_us;
    ck_assert_double_eq_tol(r->migration_exposed_us, fmax(0, r->migration_us - fmax(0, idle)),
                            1e-9);
  }
  ck_assert_double_eq_tol(moved, s.migrated_bytes, 1);
  eplb_trace_close(tr);
  eplb_cluster_destroy(cl);
  return s;
}

START_TEST(rebalancing_reports_migration) {
  const char *dir = eplb_test_tmpdir();
  const char *still = eplb_test_path(dir, "still.eplbt"), *moving = eplb_test_path(dir, "mv.eplbt");
  random_trace(still, 16, 0, 1);
  random_trace(moving, 16, 1, 1);
  eplb_sim_summary_t s = rebalance_run(still);
  ck_assert_double_eq(s.migrated_bytes, 0);
  s = rebalance_run(moving);
  ck_assert_double_gt(s.migrated_bytes, 0);
  /* Whole slots of 44 MB each, spread over 4 GPUs, at 160 GB/s within a node
   * and at most that across (the slower link of each GPU sets its time). */
  ck_assert_double_eq_tol(fmod(s.migrated_bytes, 44e6), 0, 1e-3);
  ck_assert_double_ge(s.migration_us, s.migrated_bytes / (2 * 4 * 160e3) * (1 - 1e-12));
  ck_assert(s.migration_exposed_us >= 0 && s.migration_exposed_us <= s.migration_us);
}
END_TEST

/* Held out: the plan of steps [0, 8) of a trace whose hot expert moves at
 * step 8 is scored on steps [8, 16) only, exactly as that plan made by hand
 * and replayed there, and worse than the oracle plan of those steps. */
START_TEST(held_out_plans_on_some_steps_and_scores_the_others) {
  const char *tp = eplb_test_path(eplb_test_tmpdir(), "shift.eplbt");
  random_trace(tp, 16, 1, 0);
  eplb_trace_t *tr = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  recs_t rec = {0};
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  ck_assert_uint_eq(o.plan_step_begin, 0);
  ck_assert_uint_eq(o.plan_step_end, 0);
  o.plan.policy = EPLB_POLICY_BALANCED;
  o.plan.num_replicas = 12;
  o.plan.window_loads = EPLB_WINDOW_LOADS_RAW; /* compared with a plan of the raw window */
  o.plan_step_end = 8;
  o.on_step = collect;
  o.user = &rec;
  eplb_sim_summary_t held, fixed, oracle;
  ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, &o, &held), EPLB_OK);
  ck_assert_int_eq(rec.n, 8);
  for (int i = 0; i < rec.n; i++)
    ck_assert_uint_eq(rec.r[i].step, 8 + (uint64_t)i);
  ck_assert_uint_eq(held.num_steps, 8);
  ck_assert_uint_eq(held.num_plans, 1);

  eplb_loads_t *loads = NULL;
  eplb_plan_t *plan = NULL;
  ck_assert_int_eq(eplb_loads_read(tp, 0, 8, &loads), EPLB_OK);
  eplb_plan_options_t po = o.plan;
  po.num_gpus = 4;
  po.num_nodes = 2;
  po.cluster = cl;
  ck_assert_int_eq(eplb_plan_create(loads, &po, &plan), EPLB_OK);
  eplb_sim_options_t f;
  eplb_sim_options_default(&f);
  f.step_begin = 8;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &f, &fixed), EPLB_OK);
  ck_assert_uint_eq(fixed.num_steps, 8);
  ck_assert_double_eq_tol(held.mean_balancedness, fixed.mean_balancedness, 1e-12);
  ck_assert_double_eq_tol(held.cross_node_copies, fixed.cross_node_copies, 1e-9);
  ck_assert_double_eq_tol(held.total_step_time_us, fixed.total_step_time_us, 1e-9);

  eplb_sim_options_t w = o;
  w.plan_step_end = 0;
  w.step_begin = 8;
  w.on_step = NULL;
  ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, &w, &oracle), EPLB_OK);
  ck_assert_msg(oracle.mean_balancedness > held.mean_balancedness + 0.05,
                "oracle %.4f should beat the held-out plan %.4f after the shift",
                oracle.mean_balancedness, held.mean_balancedness);

  /* Plan steps inside the replayed range would leave two scored ranges. */
  o.plan_step_begin = 4;
  o.plan_step_end = 12;
  ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, &o, &held), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "in two"));
  eplb_plan_destroy(plan);
  eplb_loads_destroy(loads);
  eplb_trace_close(tr);
  eplb_cluster_destroy(cl);
}
END_TEST

START_TEST(sim_steps_resolves_and_checks_ranges) {
  eplb_sim_options_t o;
  uint64_t p[2], c[2];
  eplb_sim_options_default(&o);
  /* Oracle, rebalancing, fixed plan. */
  ck_assert_int_eq(eplb_sim_steps(&o, 16, 0, p, c), EPLB_OK);
  ck_assert(p[0] == 0 && p[1] == 16 && c[0] == 0 && c[1] == 16);
  o.rebalance_every = 4;
  o.window = 2;
  ck_assert_int_eq(eplb_sim_steps(&o, 16, 0, p, c), EPLB_OK);
  ck_assert(p[0] == 0 && p[1] == 2 && c[0] == 0 && c[1] == 16);
  ck_assert_int_eq(eplb_sim_steps(&o, 16, 1, p, c), EPLB_OK);
  ck_assert(p[0] == 0 && p[1] == 0 && c[0] == 0 && c[1] == 16);
  o.rebalance_every = o.window = 0;
  /* Held out: a suffix, to the end, a window before the replayed range. */
  o.plan_step_begin = 8;
  o.plan_step_end = UINT64_MAX;
  ck_assert_int_eq(eplb_sim_steps(&o, 16, 0, p, c), EPLB_OK);
  ck_assert(p[0] == 8 && p[1] == 16 && c[0] == 0 && c[1] == 8);
  o.plan_step_begin = 0;
  o.plan_step_end = 6;
  o.step_begin = 4;
  o.step_end = 12;
  ck_assert_int_eq(eplb_sim_steps(&o, 16, 0, p, c), EPLB_OK);
  ck_assert(p[0] == 0 && p[1] == 6 && c[0] == 6 && c[1] == 12);
  o.step_begin = 10;
  ck_assert_int_eq(eplb_sim_steps(&o, 16, 0, p, c), EPLB_OK);
  ck_assert(p[0] == 0 && p[1] == 6 && c[0] == 10 && c[1] == 12);
  o.step_begin = 0;
  o.step_end = UINT64_MAX;
  /* Errors name the problem; outputs are left alone. */
  static const struct {
    uint64_t pb, pe, rebalance;
    int fixed;
    const char *needle;
  } bad[] = {{0, 16, 0, 0, "none of the replayed"},
             {0, 20, 0, 0, "16 steps"},
             {5, 5, 0, 0, "empty"},
             {4, 12, 0, 0, "in two"},
             {8, 16, 4, 0, "rebalancing"}, /* replans need the plan steps before */
             {0, 8, 0, 1, "fixed plan"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o.plan_step_begin = bad[i].pb;
    o.plan_step_end = bad[i].pe;
    o.rebalance_every = bad[i].rebalance;
    p[0] = c[0] = 99;
    ck_assert_int_eq(eplb_sim_steps(&o, 16, bad[i].fixed, p, c), EPLB_EINVAL);
    ck_assert_msg(strstr(eplb_error_detail(), bad[i].needle), "case %zu: '%s'", i,
                  eplb_error_detail());
    ck_assert(p[0] == 99 && c[0] == 99);
  }
  eplb_sim_options_default(&o);
  o.step_begin = 16;
  ck_assert_int_eq(eplb_sim_steps(&o, 16, 0, p, c), EPLB_EINVAL);
  ck_assert_int_eq(eplb_sim_steps(NULL, 16, 0, p, c), EPLB_EINVAL);
}
END_TEST

START_TEST(shape_mismatches_are_errors) {
  const char *tp, *pp;
  tiny_files(&tp, &pp);
  eplb_trace_t *tr = NULL;
  eplb_plan_t *plan = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(pp, &plan), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(3, 4, &cl), EPLB_OK);
  eplb_sim_summary_t s;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, NULL, &s), EPLB_ESHAPE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "12"));
  eplb_cluster_destroy(cl);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  eplb_sim_options_t o;
  eplb_sim_options_default(&o);
  o.step_begin = 5;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_sim_run(tr, cl, NULL, NULL, &s), EPLB_EINVAL);
  eplb_cost_model_t bad;
  eplb_cost_model_default(&bad);
  bad.tokens[1] = 1;
  o.step_begin = 0;
  o.cost = &bad;
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_EINVAL);
  eplb_trace_close(tr);
  eplb_plan_destroy(plan);
  eplb_cluster_destroy(cl);
}
END_TEST

START_TEST(allocation_failures_are_reported) {
  const char *tp, *pp;
  tiny_files(&tp, &pp);
  eplb_trace_t *tr = NULL;
  eplb_plan_t *plan = NULL;
  eplb_cluster_t *cl = NULL;
  ck_assert_int_eq(eplb_trace_open(tp, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(pp, &plan), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 2, &cl), EPLB_OK);
  eplb_sim_summary_t s;
  eplb_test_alloc_install();
  eplb_status_t st = EPLB_ENOMEM;
  for (long n = 0; st == EPLB_ENOMEM && n < 200; n++) {
    eplb_test_alloc_fail_after(n);
    st = eplb_sim_run(tr, cl, plan, NULL, &s);
  }
  eplb_test_alloc_reset();
  ck_assert_int_eq(st, EPLB_OK);
  eplb_trace_close(tr);
  eplb_plan_destroy(plan);
  eplb_cluster_destroy(cl);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sim");
  TCase *tc = tcase_create("sim");
  tcase_add_test(tc, expert_time_interpolates);
  tcase_add_test(tc, cost_file_parses_and_rejects_bad_keys);
  tcase_add_test(tc, tiny_case_matches_hand_computation);
  tcase_add_test(tc, local_first_falls_back_to_global_shares);
  tcase_add_test(tc, compute_time_uses_the_table);
  tcase_add_test(tc, rows_and_uniform_agree_on_a_uniform_case);
  tcase_add_test(tc, split_per_batch_never_lowers_balancedness);
  tcase_add_test(tc, rebalancing_reports_migration);
  tcase_add_test(tc, held_out_plans_on_some_steps_and_scores_the_others);
  tcase_add_test(tc, sim_steps_resolves_and_checks_ranges);
  tcase_add_test(tc, shape_mismatches_are_errors);
  tcase_add_test(tc, allocation_failures_are_reported);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
