/* tests/planner/test_threads.c — layers planned in parallel: the plan is the
 * same byte for byte whatever opts.threads, for every policy and shares
 * mode; bad thread counts and time limits are refused; allocation failures
 * under threads are clean. */
#include <eplb/plan.h>
#include <eplb/abi.h>
#include <eplb/trace.h>
#include "tests/support.h"

#include <check.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define L 58

typedef struct {
  eplb_trace_t *tr;
  eplb_cluster_t *cl;
  eplb_coact_t *co;
  eplb_loads_t *loads, *loads2; /* two windows: incremental replans the second */
} fixture_t;

static void fixture(fixture_t *f) {
  static char path[4096];
  snprintf(path, sizeof path, "%s", eplb_test_path(eplb_test_tmpdir(), "threads.eplbt"));
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = L;
  so.num_experts = 64;
  so.topk = 6;
  so.num_steps = 16;
  so.tokens_per_step = 128;
  so.seed = 16;
  ck_assert_int_eq(eplb_synth_generate(path, &so), EPLB_OK);
  ck_assert_int_eq(eplb_trace_open(path, NULL, &f->tr), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read(path, 0, 8, &f->loads), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read(path, 8, 16, &f->loads2), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_create_uniform(2, 4, &f->cl), EPLB_OK);
  ck_assert_int_eq(eplb_coact_from_trace(f->tr, 0, 8, f->cl, &f->co), EPLB_OK);
}

static void fixture_free(fixture_t *f) {
  eplb_coact_destroy(f->co);
  eplb_cluster_destroy(f->cl);
  eplb_loads_destroy(f->loads);
  eplb_loads_destroy(f->loads2);
  eplb_trace_close(f->tr);
}

static eplb_plan_options_t options(eplb_plan_policy_t policy) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = policy;
  o.num_gpus = 8;
  o.num_nodes = 2;
  o.num_replicas = 80;
  return o;
}

#define SAME(a, b, n, what)                                                                        \
  ck_assert_msg(!memcmp((a), (b), (n) * sizeof *(a)), "%s: layer %u differs (%s)", name, l, what)

/* Every array and metric of a and b, compared as bytes. */
static void same_plan(const char *name, const eplb_plan_t *a, const eplb_plan_t *b) {
  uint32_t R = eplb_plan_num_slots(a), G = eplb_plan_num_gpus(a);
  ck_assert_uint_eq(eplb_plan_num_layers(a), eplb_plan_num_layers(b));
  ck_assert_uint_eq(eplb_plan_node_share_nodes(a), eplb_plan_node_share_nodes(b));
  uint32_t NS = eplb_plan_node_share_nodes(a);
  for (uint32_t l = 0; l < eplb_plan_num_layers(a); l++) {
    SAME(eplb_plan_phy2log(a, l), eplb_plan_phy2log(b, l), R, "phy2log");
    SAME(eplb_plan_share(a, l), eplb_plan_share(b, l), R, "share");
    SAME(eplb_plan_gpu_load(a, l), eplb_plan_gpu_load(b, l), G, "gpu_load");
    if (NS)
      SAME(eplb_plan_node_share(a, l), eplb_plan_node_share(b, l), (size_t)NS * R, "node_share");
    eplb_plan_layer_metrics_t ma, mb;
    ck_assert_int_eq(eplb_plan_layer_metrics(a, l, &ma), EPLB_OK);
    ck_assert_int_eq(eplb_plan_layer_metrics(b, l, &mb), EPLB_OK);
    /* Field by field: the struct's padding is not compared. */
    double da[] = {ma.total_load,  ma.mean_load,    ma.max_load,
                   ma.lower_bound, ma.balancedness, ma.mip_gap};
    double db[] = {mb.total_load,  mb.mean_load,    mb.max_load,
                   mb.lower_bound, mb.balancedness, mb.mip_gap};
    SAME(da, db, 6, "metrics");
    ck_assert_int_eq(ma.mip_status, mb.mip_status);
    ck_assert_int_eq(ma.fallback, mb.fallback);
    ck_assert_uint_eq(ma.slots_moved, mb.slots_moved);
  }
}

/* Plans with 1, 2 and 4 threads and compares the plans. */
static void check_threads(const char *name, const eplb_loads_t *loads, eplb_plan_options_t o) {
  eplb_plan_t *ref = NULL;
  o.threads = 1;
  ck_assert_msg(eplb_plan_create(loads, &o, &ref) == EPLB_OK, "%s: %s", name, eplb_error_detail());
  static const uint32_t counts[] = {2, 4, 0};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    eplb_plan_t *p = NULL;
    o.threads = counts[i];
    ck_assert_msg(eplb_plan_create(loads, &o, &p) == EPLB_OK, "%s threads %u: %s", name, counts[i],
                  eplb_error_detail());
    same_plan(name, ref, p);
    eplb_plan_destroy(p);
  }
  eplb_plan_destroy(ref);
}

START_TEST(same_plan_whatever_the_threads) {
  fixture_t f = {0};
  fixture(&f);
  eplb_plan_options_t o = options(EPLB_POLICY_DEEPSEEK);
  o.num_groups = 8;
  check_threads("deepseek", f.loads, o);
  o = options(EPLB_POLICY_BALANCED);
  check_threads("balanced", f.loads, o);
  o.num_groups = 8;
  o.keep_groups_on_nodes = 1;
  check_threads("balanced keep groups", f.loads, o);
  o = options(EPLB_POLICY_BALANCED);
  o.shares = EPLB_SHARES_UNIFORM;
  check_threads("balanced uniform shares", f.loads, o);
  o.shares = EPLB_SHARES_ROBUST;
  o.shares_trace = f.tr;
  o.robust_steps = 4;
  check_threads("balanced robust shares", f.loads, o);
  o = options(EPLB_POLICY_LOCALITY);
  o.cluster = f.cl;
  o.coact = f.co;
  check_threads("locality", f.loads, o);
  /* incremental from the balanced plan of the first window */
  eplb_plan_t *from = NULL;
  o = options(EPLB_POLICY_BALANCED);
  ck_assert_int_eq(eplb_plan_create(f.loads, &o, &from), EPLB_OK);
  o.policy = EPLB_POLICY_INCREMENTAL;
  o.from = from;
  check_threads("incremental", f.loads2, o);
  eplb_plan_destroy(from);
  fixture_free(&f);
}
END_TEST

/* eplb_plan_resplit on layers in parallel: the same figures (the "before"
 * ones included: every layer's is the plan's own shares', not a re-split
 * one's) and the same plan as one thread, with and without locality; more
 * than 1,024 threads refused. */
START_TEST(same_resplit_whatever_the_threads) {
  fixture_t f = {0};
  fixture(&f);
  eplb_plan_options_t o = options(EPLB_POLICY_BALANCED);
  for (int local = 0; local < 2; local++) {
    eplb_plan_t *ref = NULL;
    ck_assert_int_eq(eplb_plan_create(f.loads, &o, &ref), EPLB_OK);
    eplb_plan_resplit_options_t ro;
    eplb_plan_resplit_options_default(&ro);
    ck_assert_uint_eq(ro.threads, 0);
    ro.cluster = local ? f.cl : NULL;
    ro.coact = local ? f.co : NULL;
    ro.threads = 1;
    eplb_plan_resplit_layer_t a[L], b[L];
    ck_assert_int_eq(eplb_plan_resplit(ref, f.loads2, &ro, 1, a), EPLB_OK);
    static const uint32_t counts[] = {2, 3, 0};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
      eplb_plan_t *p = NULL;
      ck_assert_int_eq(eplb_plan_create(f.loads, &o, &p), EPLB_OK);
      ro.threads = counts[i];
      memset(b, 0xa5, sizeof b);
      ck_assert_int_eq(eplb_plan_resplit(p, f.loads2, &ro, 1, b), EPLB_OK);
      const char *name = local ? "resplit with locality" : "resplit";
      for (uint32_t l = 0; l < L; l++) {
        double da[] = {a[l].t_star,
                       a[l].max_load_before,
                       a[l].max_load_after,
                       a[l].balancedness_before,
                       a[l].cross_node_before,
                       a[l].cross_node_after};
        double db[] = {b[l].t_star,
                       b[l].max_load_before,
                       b[l].max_load_after,
                       b[l].balancedness_before,
                       b[l].cross_node_before,
                       b[l].cross_node_after};
        SAME(da, db, 6, "resplit figures");
      }
      same_plan(local ? "resplit plan with locality" : "resplit plan", ref, p);
      eplb_plan_destroy(p);
    }
    ro.threads = 1025;
    ck_assert_int_eq(eplb_plan_resplit(ref, f.loads2, &ro, 1, a), EPLB_EINVAL);
    eplb_plan_destroy(ref);
  }
  fixture_free(&f);
}
END_TEST

/* mip where it proves every layer well within its limit (so that the time
 * limit, which depends on the machine, decides nothing): no spare slot (the
 * exact partition search) and a small layer with spare slots (GLPK). */
START_TEST(mip_same_plan_whatever_the_threads) {
  uint64_t seed = 58;
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(L, 16, &ld), EPLB_OK);
  for (size_t i = 0; i < (size_t)L * 16; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    ld->values[i] = (double)(100 + (seed >> 33) % 900);
  }
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_MIP;
  o.num_gpus = 4;
  o.num_replicas = 16;
  o.time_limit = 30;
  check_threads("mip R == E", ld, o);
  eplb_loads_destroy(ld);
  ck_assert_int_eq(eplb_loads_create(L, 6, &ld), EPLB_OK);
  for (size_t i = 0; i < (size_t)L * 6; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    ld->values[i] = (double)(1 + (seed >> 33) % 99);
  }
  o.num_gpus = 2;
  o.num_replicas = 8;
  check_threads("mip spare slots", ld, o);
  eplb_plan_t *p = NULL;
  o.threads = 2;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t m;
    ck_assert_int_eq(eplb_plan_layer_metrics(p, l, &m), EPLB_OK);
    ck_assert_int_eq(m.mip_status, EPLB_OK); /* proven: the time limit decided nothing */
  }
  eplb_plan_destroy(p);
  eplb_loads_destroy(ld);
}
END_TEST

/* The mip time limit is wall time per layer, root LP included: 2 layers of
 * a 128 x 32 placement MIP (whose root LP alone outlasts the limit) with
 * 0.3 s each return within the limit + 10% per layer (plus 0.25 s for a
 * loaded machine or sanitizers), no worse than balanced, flagged not proven
 * unless the optimum was proven. */
START_TEST(mip_time_limit_is_wall_time) {
  uint64_t seed = 7;
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(2, 128, &ld), EPLB_OK);
  for (size_t i = 0; i < 2 * 128; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    ld->values[i] = floor(100000.0 / (double)(1 + i % 128) * (0.8 + (double)(seed >> 44) / 2.5e6));
  }
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = 32;
  o.num_replicas = 160;
  o.threads = 1;
  eplb_plan_t *bal = NULL, *mip = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &bal), EPLB_OK);
  o.policy = EPLB_POLICY_MIP;
  o.time_limit = 0.3;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(eplb_plan_create(ld, &o, &mip), EPLB_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  ck_assert_msg(wall <= 2 * 0.3 * 1.1 + 0.25, "2 layers took %.3f s", wall);
  for (uint32_t l = 0; l < 2; l++) {
    eplb_plan_layer_metrics_t mb, mm;
    ck_assert_int_eq(eplb_plan_layer_metrics(bal, l, &mb), EPLB_OK);
    ck_assert_int_eq(eplb_plan_layer_metrics(mip, l, &mm), EPLB_OK);
    ck_assert(mm.max_load <= mb.max_load);
    ck_assert(mm.mip_status == EPLB_OK || mm.mip_status == EPLB_ETIMEOUT);
    if (mm.mip_status == EPLB_ETIMEOUT)
      ck_assert(mm.mip_gap > 0 && mm.mip_gap < 1);
  }
  eplb_plan_destroy(bal);
  eplb_plan_destroy(mip);
  eplb_loads_destroy(ld);
}
END_TEST

START_TEST(bad_threads_and_time_limits) {
  double w[16];
  for (int i = 0; i < 16; i++)
    w[i] = i + 1;
  eplb_loads_t ld = {1, 16, w};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  ck_assert_uint_eq(o.threads, 0);
  o.num_gpus = 4;
  o.num_replicas = 16;
  eplb_plan_t *p = NULL;
  o.threads = EPLB_PLAN_MAX_THREADS + 1;
  ck_assert_int_eq(eplb_plan_create(&ld, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "threads 1025"));
  o.threads = EPLB_PLAN_MAX_THREADS; /* capped at the layers */
  ck_assert_int_eq(eplb_plan_create(&ld, &o, &p), EPLB_OK);
  eplb_plan_destroy(p);
  p = NULL;
  o.threads = 0;
  o.time_limit = -1;
  ck_assert_int_eq(eplb_plan_create(&ld, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "time_limit -1: must be >= 0"));
  o.time_limit = NAN;
  ck_assert_int_eq(eplb_plan_create(&ld, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_uint_eq(eplb_abi_struct_size("eplb_plan_options"), sizeof(eplb_plan_options_t));
}
END_TEST

/* Every allocation failing in turn, with 3 threads on 5 layers: an error
 * (ENOMEM), never a crash, a leak or a partial plan. */
/* eplb_plan_options_check: every value it checks, its detail naming the
 * field and value first (the CLI maps the field to its option). */
START_TEST(options_check_names_the_field) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  ck_assert_int_eq(eplb_plan_options_check(&o), EPLB_OK);
  ck_assert_int_eq(eplb_plan_options_check(NULL), EPLB_EINVAL);
  o.threads = EPLB_PLAN_MAX_THREADS; /* the limit itself is fine */
  ck_assert_int_eq(eplb_plan_options_check(&o), EPLB_OK);
  static const char *const bad[] = {
      "threads 1025: must be 0..1024",
      "time_limit -1: must be >= 0",
      "locality_tolerance -0.5: must be >= 0",
      "move_weight inf: must be a finite number >= 0",
      "robust_steps 0: must be in 1..65536",
      "robust_steps 65537: must be in 1..65536",
      "robust_aggregate_weight 1.5: must be in [0, 1]",
      "robust_aggregate_weight nan: must be in [0, 1]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    eplb_plan_options_default(&o);
    switch (i) {
    case 0: o.threads = EPLB_PLAN_MAX_THREADS + 1; break;
    case 1: o.time_limit = -1; break;
    case 2: o.locality_tolerance = -0.5; break;
    case 3: o.move_weight = INFINITY; break;
    case 4: o.robust_steps = 0; break;
    case 5: o.robust_steps = 65537; break;
    case 6: o.robust_aggregate_weight = 1.5; break;
    default: o.robust_aggregate_weight = NAN; break;
    }
    ck_assert_int_eq(eplb_plan_options_check(&o), EPLB_EINVAL);
    ck_assert_msg(!strncmp(eplb_error_detail(), bad[i], strlen(bad[i])), "case %zu: %s", i,
                  eplb_error_detail());
  }
}
END_TEST

START_TEST(allocation_failures_under_threads) {
  double w[5 * 16];
  for (int i = 0; i < 5 * 16; i++)
    w[i] = (i * 37) % 101 + 1;
  eplb_loads_t ld = {5, 16, w};
  eplb_test_alloc_install();
  for (int pol = EPLB_POLICY_DEEPSEEK; pol <= EPLB_POLICY_BALANCED; pol++)
    for (long n = 0;; n++) {
      eplb_plan_options_t o;
      eplb_plan_options_default(&o);
      o.policy = (eplb_plan_policy_t)pol;
      o.num_gpus = 4;
      o.num_replicas = 24;
      o.threads = 3;
      eplb_plan_t *p = NULL;
      eplb_test_alloc_fail_after(n);
      eplb_status_t st = eplb_plan_create(&ld, &o, &p);
      eplb_test_alloc_reset();
      if (st == EPLB_OK) {
        eplb_plan_destroy(p);
        break;
      }
      ck_assert_msg(st == EPLB_ENOMEM, "n=%ld: %s", n, eplb_status_name(st));
      ck_assert_ptr_null(p);
      ck_assert_int_lt(n, 100000);
    }
  ck_assert_int_eq(eplb_allocator_set(NULL), EPLB_OK);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-threads");
  TCase *tc = tcase_create("threads");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, same_plan_whatever_the_threads);
  tcase_add_test(tc, same_resplit_whatever_the_threads);
  tcase_add_test(tc, mip_same_plan_whatever_the_threads);
  tcase_add_test(tc, mip_time_limit_is_wall_time);
  tcase_add_test(tc, bad_threads_and_time_limits);
  tcase_add_test(tc, options_check_names_the_field);
  tcase_add_test(tc, allocation_failures_under_threads);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
