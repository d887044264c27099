/* tests/planner/test_locality.c — the locality policy: co-activation
 * counting, the transportation LP, plan validity and tolerance, the traffic
 * it saves in the simulator, node_share in plan files, and the CLI's bad
 * input. argv[1]: the eplb binary. */
#include "eplb/plan.h"
#include "eplb/sim.h"
#include "lp/lp.h"
#include "tests/reference/reference.h"
#include "tests/support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static const char *eplb_bin;

/* A one-layer, 4-expert, top-2 trace: step 0 has rows {0,1} and {2,3}
 * without sources; step 1 has {0,1} from rank 1 and {0,2} from rank 0. */
static const char *tiny_trace(int with_rows) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), with_rows ? "tiny.eplbt" : "norows.eplbt");
  eplb_trace_meta_t m;
  eplb_trace_meta_default(&m);
  m.num_layers = 1;
  m.num_experts = 4;
  m.topk = with_rows ? 2 : 0;
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(path, &m, NULL, &w), EPLB_OK);
  uint32_t c0[4] = {1, 1, 1, 1}, c1[4] = {2, 1, 1, 0};
  uint16_t t0[4] = {0, 1, 2, 3}, t1[4] = {0, 1, 0, 2};
  int32_t s0[2] = {-1, -1}, s1[2] = {1, 0};
  eplb_trace_step_t st = {
      0, 2, c0, with_rows ? 2 : 0, with_rows ? t0 : NULL, with_rows ? s0 : NULL};
  ck_assert_int_eq(eplb_trace_writer_append(w, &st), EPLB_OK);
  st = (eplb_trace_step_t){
      0, 2, c1, with_rows ? 2 : 0, with_rows ? t1 : NULL, with_rows ? s1 : NULL};
  ck_assert_int_eq(eplb_trace_writer_append(w, &st), EPLB_OK);
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  return path;
}

START_TEST(coact_counts) {
  const char *path = tiny_trace(1);
  eplb_trace_t *tr = NULL;
  eplb_cluster_t *cl = NULL;
  eplb_coact_t *co = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 1, &cl), EPLB_OK);
  ck_assert_int_eq(eplb_coact_from_trace(tr, 0, UINT64_MAX, cl, &co), EPLB_OK);
  ck_assert_uint_eq(eplb_coact_num_rows(co), 4);
  ck_assert_uint_eq(eplb_coact_num_nodes(co), 2);
  const double *p = eplb_coact_pairs(co, 0), *nt = eplb_coact_node_tokens(co, 0);
  ck_assert(eplb_coact_pairs(co, 1) == NULL);
  /* Pairs {0,1} twice, {2,3} once, {0,2} once; symmetric, zero diagonal. */
  ck_assert_double_eq(p[0 * 4 + 1], 2);
  ck_assert_double_eq(p[1 * 4 + 0], 2);
  ck_assert_double_eq(p[2 * 4 + 3], 1);
  ck_assert_double_eq(p[0 * 4 + 2], 1);
  ck_assert_double_eq(p[1 * 4 + 2], 0);
  ck_assert_double_eq(p[0], 0);
  /* Step 0: row 0 -> GPU 0 (node 0), row 1 -> GPU 1 (node 1) round-robin;
   * step 1: recorded ranks 1 and 0. */
  ck_assert_double_eq(nt[0 * 4 + 0], 2); /* {0,1} step 0 and {0,2} step 1 */
  ck_assert_double_eq(nt[0 * 4 + 1], 1);
  ck_assert_double_eq(nt[0 * 4 + 2], 1);
  ck_assert_double_eq(nt[0 * 4 + 3], 0);
  ck_assert_double_eq(nt[1 * 4 + 0], 1);
  ck_assert_double_eq(nt[1 * 4 + 1], 1);
  ck_assert_double_eq(nt[1 * 4 + 2], 1);
  ck_assert_double_eq(nt[1 * 4 + 3], 1);
  eplb_coact_destroy(co);
  /* A trace without rows has nothing to count. */
  eplb_trace_close(tr);
  ck_assert_int_eq(eplb_trace_open(tiny_trace(0), NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_coact_from_trace(tr, 0, UINT64_MAX, cl, &co), EPLB_EINVAL);
  ck_assert(co == NULL);
  eplb_trace_close(tr);
  eplb_cluster_destroy(cl);
}
END_TEST

START_TEST(transport_known_optimum) {
  /* Expert 0 on GPU 0 (node 0) and GPU 1 (node 1); 10 tokens from node 0
   * and 2 from node 1; GPUs hold at most 8: node 0 must send 2 across. */
  uint32_t re[2] = {0, 0}, rg[2] = {0, 1}, rn[2] = {0, 1};
  double dem[2] = {10, 2}, x[4], cross = -1;
  eplb_test_transport_problem_t pb = {2, 1, 2, 2, re, rg, rn, dem, 8};
  ck_assert_int_eq(eplb_test_transport_solve(&pb, x, &cross), EPLB_OK);
  ck_assert_double_eq_tol(cross, 2, 1e-9);
  ck_assert_double_eq_tol(x[0], 8, 1e-9); /* node 0 -> replica 0 */
  ck_assert_double_eq_tol(x[1], 2, 1e-9);
  ck_assert_double_eq_tol(x[2], 0, 1e-9);
  ck_assert_double_eq_tol(x[3], 2, 1e-9);
  pb.cap = 20; /* room: nothing crosses */
  ck_assert_int_eq(eplb_test_transport_solve(&pb, x, &cross), EPLB_OK);
  ck_assert_double_eq_tol(cross, 0, 1e-9);
  pb.cap = 5; /* 12 tokens cannot fit two GPUs of 5 */
  ck_assert_int_eq(eplb_test_transport_solve(&pb, x, &cross), EPLB_EINFEASIBLE);
}
END_TEST

/* The ESFT sample as a trace with rows (first steps only: fast). */
static const char *esft_trace(void) {
  static char path[4096];
  if (path[0])
    return path;
  snprintf(path, sizeof path, "%s", eplb_test_path(eplb_test_tmpdir(), "esft.eplbt"));
  eplb_trace_convert_options_t o;
  eplb_trace_convert_options_default(&o);
  o.from = EPLB_TRACE_FORMAT_NPY_TOPK;
  o.num_experts = 64;
  o.tokens_per_step = 256;
  ck_assert_int_eq(eplb_trace_convert(
                       eplb_test_path(eplb_test_samples(), "esft-dsv2lite/topk_ids.npy"), path, &o),
                   EPLB_OK);
  return path;
}

typedef struct {
  eplb_trace_t *tr;
  eplb_cluster_t *cl;
  eplb_coact_t *co;
  eplb_loads_t *loads;
  eplb_plan_t *bal, *loc;
} fixture_t;

static void make_plans(fixture_t *f, uint64_t steps) {
  ck_assert_int_eq(eplb_trace_open(esft_trace(), NULL, &f->tr), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 4, &f->cl), EPLB_OK);
  ck_assert_int_eq(eplb_coact_from_trace(f->tr, 0, steps, f->cl, &f->co), EPLB_OK);
  const eplb_trace_meta_t *m = eplb_trace_meta(f->tr);
  ck_assert_int_eq(eplb_loads_create(m->num_layers, m->num_experts, &f->loads), EPLB_OK);
  ck_assert_int_eq(eplb_trace_window_sum(f->tr, 0, steps, f->loads->values), EPLB_OK);
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.num_gpus = 8;
  po.num_nodes = 2;
  po.num_replicas = 80;
  ck_assert_int_eq(eplb_plan_create(f->loads, &po, &f->bal), EPLB_OK);
  po.policy = EPLB_POLICY_LOCALITY;
  ck_assert_int_eq(eplb_plan_create(f->loads, &po, &f->loc), EPLB_EINVAL); /* no cluster */
  po.cluster = f->cl;
  po.coact = f->co;
  ck_assert_int_eq(eplb_plan_create(f->loads, &po, &f->loc), EPLB_OK);
}

static void free_plans(fixture_t *f) {
  eplb_plan_destroy(f->bal);
  eplb_plan_destroy(f->loc);
  eplb_loads_destroy(f->loads);
  eplb_coact_destroy(f->co);
  eplb_cluster_destroy(f->cl);
  eplb_trace_close(f->tr);
}

START_TEST(plan_valid_within_tolerance) {
  fixture_t f = {0};
  make_plans(&f, 40);
  uint32_t L = eplb_plan_num_layers(f.loc), E = 64, R = 80;
  ck_assert_uint_eq(eplb_plan_node_share_nodes(f.loc), 2);
  ck_assert(eplb_plan_node_share(f.bal, 0) == NULL);
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *p2l = eplb_plan_phy2log(f.loc, l);
    const double *sh = eplb_plan_share(f.loc, l), *ns = eplb_plan_node_share(f.loc, l);
    ck_assert_ptr_nonnull(ns);
    double sum[3][64] = {{0}};
    uint32_t cnt[64] = {0};
    for (uint32_t r = 0; r < R; r++) {
      ck_assert(p2l[r] >= 0 && p2l[r] < (int32_t)E);
      cnt[p2l[r]]++;
      sum[0][p2l[r]] += sh[r];
      sum[1][p2l[r]] += ns[r];
      sum[2][p2l[r]] += ns[R + r];
    }
    for (uint32_t e = 0; e < E; e++) {
      ck_assert_uint_ge(cnt[e], 1);
      for (int i = 0; i < 3; i++)
        ck_assert_double_eq_tol(sum[i][e], 1, 1e-6);
    }
    eplb_plan_layer_metrics_t mb, ml;
    eplb_plan_layer_metrics(f.bal, l, &mb);
    eplb_plan_layer_metrics(f.loc, l, &ml);
    ck_assert_double_le(ml.max_load, mb.max_load * 1.01 * (1 + 1e-9));
  }
  free_plans(&f);
}
END_TEST

START_TEST(fewer_cross_copies_in_sim) {
  fixture_t f = {0};
  make_plans(&f, 40);
  eplb_sim_options_t so;
  eplb_sim_options_default(&so);
  so.step_end = 40;
  eplb_sim_summary_t sb, sl;
  ck_assert_int_eq(eplb_sim_run(f.tr, f.cl, f.bal, &so, &sb), EPLB_OK);
  ck_assert_int_eq(eplb_sim_run(f.tr, f.cl, f.loc, &so, &sl), EPLB_OK);
  ck_assert_double_lt(sl.cross_node_copies, 0.8 * sb.cross_node_copies);
  ck_assert_double_gt(sl.mean_balancedness, 0.98 * sb.mean_balancedness);
  /* Policy mode builds the co-activation itself. */
  so.plan.policy = EPLB_POLICY_LOCALITY;
  so.plan.num_replicas = 80;
  eplb_sim_summary_t sp;
  ck_assert_int_eq(eplb_sim_run(f.tr, f.cl, NULL, &so, &sp), EPLB_OK);
  ck_assert_double_lt(sp.cross_node_copies, 0.8 * sb.cross_node_copies);
  free_plans(&f);
}
END_TEST

START_TEST(plan_file_node_share) {
  fixture_t f = {0};
  make_plans(&f, 8);
  const char *a = eplb_test_path(eplb_test_tmpdir(), "loc.json");
  const char *b = eplb_test_path(eplb_test_tmpdir(), "bal.json");
  ck_assert_int_eq(eplb_plan_write(f.loc, a), EPLB_OK);
  ck_assert_int_eq(eplb_plan_write(f.bal, b), EPLB_OK);
  eplb_plan_t *ra = NULL, *rb = NULL;
  ck_assert_int_eq(eplb_plan_read(a, &ra), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(b, &rb), EPLB_OK);
  ck_assert_int_eq(eplb_plan_policy(ra), EPLB_POLICY_LOCALITY);
  ck_assert_uint_eq(eplb_plan_node_share_nodes(ra), 2);
  for (uint32_t l = 0; l < eplb_plan_num_layers(ra); l++) {
    const double *x = eplb_plan_node_share(f.loc, l), *y = eplb_plan_node_share(ra, l);
    for (uint32_t i = 0; i < 2 * 80; i++)
      ck_assert_double_eq_tol(x[i], y[i], 1e-12);
  }
  ck_assert(eplb_plan_node_share(rb, 0) == NULL);
  ck_assert_uint_eq(eplb_plan_node_share_nodes(rb), 0);
  eplb_plan_destroy(ra);
  eplb_plan_destroy(rb);
  free_plans(&f);
}
END_TEST

static int run_cli(const char *args) {
  char cmd[16384];
  snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>&1", eplb_bin, args);
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

START_TEST(cli_bad_input) {
  char args[8192];
  const char *out = eplb_test_path(eplb_test_tmpdir(), "cli.json");
  snprintf(args, sizeof args,
           "plan --policy locality --loads '%s' --cluster 2x1 --gpus 2 --replicas 4 -o '%s'",
           tiny_trace(0), out);
  ck_assert_int_eq(run_cli(args), 2);
  snprintf(args, sizeof args,
           "plan --policy locality --loads '%s' --cluster 2x2 --gpus 2 --replicas 4 -o '%s'",
           tiny_trace(1), out);
  ck_assert_int_eq(run_cli(args), 2);
  snprintf(args, sizeof args,
           "plan --policy locality --loads '%s' --cluster 2x1 --gpus 2 --replicas 4 -o '%s'",
           tiny_trace(1), out);
  ck_assert_int_eq(run_cli(args), 0);
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_read(out, &p), EPLB_OK);
  ck_assert_ptr_nonnull(eplb_plan_node_share(p, 0));
  eplb_plan_destroy(p);
}
END_TEST

int main(int argc, char **argv) {
  eplb_bin = argc > 1 ? argv[1] : "eplb";
  Suite *s = suite_create("locality");
  TCase *tc = tcase_create("locality");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, coact_counts);
  tcase_add_test(tc, transport_known_optimum);
  tcase_add_test(tc, plan_valid_within_tolerance);
  tcase_add_test(tc, fewer_cross_copies_in_sim);
  tcase_add_test(tc, plan_file_node_share);
  tcase_add_test(tc, cli_bad_input);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
