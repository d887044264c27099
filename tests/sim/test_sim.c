/* tests/sim/test_sim.c — the simulator: cost model, hand-computed replays,
 * rows vs uniform consistency, per-batch split, rebalancing. */
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

  /* Default cost model: compute time from the table for bigger loads. */
  eplb_sim_options_default(&o);
  ck_assert_int_eq(eplb_sim_run(tr, cl, plan, &o, &s), EPLB_OK);
  ck_assert_double_eq_tol(s.cross_node_copies, 4.0, EPS);

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
    if (i % 4)
      ck_assert_double_eq(rec.r[i].migrated_bytes, 0);
    moved += rec.r[i].migrated_bytes;
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
  /* Whole slots of 44 MB each, spread over 4 GPUs at 160 GB/s. */
  ck_assert_double_eq_tol(fmod(s.migrated_bytes, 44e6), 0, 1e-3);
  ck_assert_double_eq_tol(s.migration_us, s.migrated_bytes / (4 * 160e3), 1e-6);
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
  tcase_add_test(tc, compute_time_uses_the_table);
  tcase_add_test(tc, rows_and_uniform_agree_on_a_uniform_case);
  tcase_add_test(tc, split_per_batch_never_lowers_balancedness);
  tcase_add_test(tc, rebalancing_reports_migration);
  tcase_add_test(tc, shape_mismatches_are_errors);
  tcase_add_test(tc, allocation_failures_are_reported);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
