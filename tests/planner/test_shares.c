/* tests/planner/test_shares.c — the plan's shares mode: uniform gives 1/c,
 * robust keeps the placement and does no worse than exact on its own
 * objective over the trace's steps, bad options, and the CLI.
 * argv[1] = eplb binary. */
#include "tests/support.h"

#include <eplb/plan.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *eplb_bin;

enum { L = 2, E = 8, STEPS = 20, G = 4, R = 12 };

/* A trace whose hot experts move between steps (no top-k rows). */
static const char *make_trace(void) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), "shares.eplbt");
  eplb_trace_meta_t m;
  eplb_trace_meta_default(&m);
  m.num_layers = L;
  m.num_experts = E;
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(path, &m, NULL, &w), EPLB_OK);
  uint64_t x = 5;
  for (uint32_t s = 0; s < STEPS; s++) {
    uint32_t c[L * E], tot = 0;
    for (uint32_t i = 0; i < L * E; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      c[i] = (uint32_t)(x >> 58) + ((i % E) == s % E ? 60 : 0) + ((i % E) < 2 ? 30 : 0);
      tot += c[i];
    }
    eplb_trace_step_t st = {0, tot / L, c, 0, NULL, NULL};
    ck_assert_int_eq(eplb_trace_writer_append(w, &st), EPLB_OK);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  return path;
}

static eplb_plan_options_t options(void) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = G;
  o.num_replicas = R;
  return o;
}

/* Mean over steps and layers of 1 / balancedness of the plan's shares. */
static double inv_bal(eplb_trace_t *tr, const eplb_plan_t *p) {
  double sum = 0;
  for (uint64_t s = 0; s < STEPS; s++) {
    eplb_trace_step_t st;
    ck_assert_int_eq(eplb_trace_read_step(tr, s, &st), EPLB_OK);
    for (uint32_t l = 0; l < L; l++) {
      const int32_t *p2l = eplb_plan_phy2log(p, l);
      const double *sh = eplb_plan_share(p, l);
      double gl[G] = {0}, tot = 0, mx = 0;
      for (uint32_t r = 0; r < R; r++)
        gl[r / (R / G)] += sh[r] * st.counts[l * E + (uint32_t)p2l[r]];
      for (uint32_t g = 0; g < G; g++) {
        tot += gl[g];
        mx = gl[g] > mx ? gl[g] : mx;
      }
      sum += mx / (tot / G);
    }
  }
  return sum / (STEPS * L);
}

/* The same placement served with 1/c per replica (through a plan file). */
static eplb_plan_t *uniform_copy(const eplb_plan_t *p) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), "shares-uniform.json");
  eplb_plan_t *q = NULL;
  ck_assert_int_eq(eplb_plan_write(p, path), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(path, &q), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    uint32_t cnt[E];
    double sh[R];
    ck_assert_int_eq(eplb_plan_logcnt(q, l, cnt), EPLB_OK);
    for (uint32_t r = 0; r < R; r++)
      sh[r] = 1.0 / cnt[eplb_plan_phy2log(q, l)[r]];
    ck_assert_int_eq(eplb_plan_set_shares(q, l, sh), EPLB_OK);
  }
  return q;
}

START_TEST(uniform_and_robust) {
  const char *path = make_trace();
  eplb_trace_t *tr = NULL;
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read(path, 0, UINT64_MAX, &ld), EPLB_OK);
  eplb_plan_options_t o = options();
  eplb_plan_t *pe = NULL, *pu = NULL, *pr = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &pe), EPLB_OK);
  o.shares = EPLB_SHARES_UNIFORM;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &pu), EPLB_OK);
  o.shares = EPLB_SHARES_ROBUST;
  o.shares_trace = tr;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &pr), EPLB_OK);
  int differs = 0;
  for (uint32_t l = 0; l < L; l++) {
    uint32_t cnt[E];
    ck_assert_int_eq(eplb_plan_logcnt(pu, l, cnt), EPLB_OK);
    const int32_t *p2l = eplb_plan_phy2log(pu, l);
    double sum[E] = {0};
    for (uint32_t r = 0; r < R; r++) {
      /* Robust keeps the policy's placement; balanced plans its own for
       * uniform shares (test_uniform.c). */
      ck_assert_int_eq(eplb_plan_phy2log(pr, l)[r], eplb_plan_phy2log(pe, l)[r]);
      ck_assert(eplb_plan_share(pu, l)[r] == 1.0 / cnt[p2l[r]]);
      double s = eplb_plan_share(pr, l)[r];
      ck_assert(s >= 0 && s <= 1 + 1e-12);
      sum[eplb_plan_phy2log(pr, l)[r]] += s;
      differs |= fabs(s - eplb_plan_share(pe, l)[r]) > 1e-6;
    }
    for (uint32_t e = 0; e < E; e++)
      ck_assert(fabs(sum[e] - 1) < 1e-9);
    /* Metrics are the final shares' on the planned loads. */
    eplb_plan_layer_metrics_t m;
    ck_assert_int_eq(eplb_plan_layer_metrics(pr, l, &m), EPLB_OK);
    ck_assert(m.max_load >= m.lower_bound * (1 - 1e-9) && m.balancedness > 0);
  }
  /* All 20 steps are sampled (robust_steps 32): robust minimises exactly
   * this, so it is no worse than exact or uniform shares. */
  eplb_plan_t *peu = uniform_copy(pe);
  double ie = inv_bal(tr, pe), iu = inv_bal(tr, peu), ir = inv_bal(tr, pr);
  ck_assert_msg(ir <= ie + 1e-9 && ir <= iu + 1e-9, "robust %g exact %g uniform %g", ir, ie, iu);
  eplb_plan_destroy(peu);
  ck_assert(differs);
  eplb_plan_destroy(pe);
  eplb_plan_destroy(pu);
  eplb_plan_destroy(pr);
  /* Aggregate weight 1: the steps count for nothing, the exact split's
   * max load on the aggregate is reached again. */
  o.robust_aggregate_weight = 1;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &pr), EPLB_OK);
  o.shares = EPLB_SHARES_EXACT;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &pe), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t a, b;
    eplb_plan_layer_metrics(pr, l, &a);
    eplb_plan_layer_metrics(pe, l, &b);
    ck_assert(fabs(a.max_load - b.max_load) <= 1e-7 * b.max_load);
  }
  eplb_plan_destroy(pe);
  eplb_plan_destroy(pr);
  eplb_loads_destroy(ld);
  eplb_trace_close(tr);
}
END_TEST

START_TEST(bad_options) {
  const char *path = make_trace();
  eplb_trace_t *tr = NULL;
  eplb_loads_t *ld = NULL, *other = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read(path, 0, UINT64_MAX, &ld), EPLB_OK);
  eplb_plan_t *p = NULL;
  eplb_plan_options_t o = options();
  o.shares = EPLB_SHARES_ROBUST;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "robust shares need a trace"));
  o.shares_trace = tr;
  o.shares_step_begin = STEPS;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_EINVAL);
  o.shares_step_begin = 0;
  o.robust_aggregate_weight = 2;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_EINVAL);
  o.robust_aggregate_weight = 0;
  o.robust_steps = 0;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_EINVAL);
  o.robust_steps = 32;
  ck_assert_int_eq(eplb_loads_create(L, E + 4, &other), EPLB_OK);
  for (uint32_t i = 0; i < L * (E + 4); i++)
    other->values[i] = 1;
  ck_assert_int_eq(eplb_plan_create(other, &o, &p), EPLB_EINVAL); /* trace shape differs */
  o.shares = (eplb_plan_shares_t)7;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_null(p);
  eplb_plan_shares_t sh;
  ck_assert_int_eq(eplb_plan_shares_parse("uniform", &sh), EPLB_OK);
  ck_assert_int_eq(sh, EPLB_SHARES_UNIFORM);
  ck_assert_int_eq(eplb_plan_shares_parse("robustly", &sh), EPLB_EINVAL);
  ck_assert_str_eq(eplb_plan_shares_str(EPLB_SHARES_ROBUST), "robust");
  ck_assert_ptr_null(eplb_plan_shares_str((eplb_plan_shares_t)9));
  /* "POLICY[:SHARES]" specs (eplb sim --compare): shares untouched without a suffix. */
  eplb_plan_policy_t pol;
  sh = EPLB_SHARES_EXACT;
  ck_assert_int_eq(eplb_plan_policy_spec_parse("mip", &pol, &sh), EPLB_OK);
  ck_assert_int_eq(pol, EPLB_POLICY_MIP);
  ck_assert_int_eq(sh, EPLB_SHARES_EXACT);
  ck_assert_int_eq(eplb_plan_policy_spec_parse("balanced:robust", &pol, &sh), EPLB_OK);
  ck_assert_int_eq(pol, EPLB_POLICY_BALANCED);
  ck_assert_int_eq(sh, EPLB_SHARES_ROBUST);
  ck_assert_int_eq(eplb_plan_policy_spec_parse("balanced:robustly", &pol, &sh), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "robustly"));
  ck_assert_int_eq(eplb_plan_policy_spec_parse("nope:uniform", &pol, &sh), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "unknown policy 'nope'"));
  ck_assert_int_eq(eplb_plan_policy_spec_parse(NULL, &pol, &sh), EPLB_EINVAL);
  ck_assert_int_eq(sh, EPLB_SHARES_ROBUST);
  eplb_loads_destroy(other);
  eplb_loads_destroy(ld);
  eplb_trace_close(tr);
}
END_TEST

static int run_eplb(const char *const *args) { return eplb_test_run_cli(eplb_bin, args); }

static int err_has(const char *what) {
  char buf[4096] = "";
  FILE *f = fopen(eplb_test_cli_err(), "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return strstr(buf, what) != NULL;
}

START_TEST(cli) {
  if (!eplb_bin)
    return;
  const char *dir = eplb_test_tmpdir();
  char trace[1024], csv[1024], out[1024];
  snprintf(trace, sizeof trace, "%s", make_trace());
  snprintf(csv, sizeof csv, "%s", eplb_test_path(dir, "shares.csv"));
  snprintf(out, sizeof out, "%s", eplb_test_path(dir, "shares-plan.json"));
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_read(trace, 0, UINT64_MAX, &ld), EPLB_OK);
  ck_assert_int_eq(eplb_loads_write_csv(ld, csv), EPLB_OK);
  eplb_loads_destroy(ld);
  const char *a1[] = {"plan", "--loads",  csv,      "--gpus", "4", "--replicas",
                      "12",   "--shares", "robust", "-o",     out, NULL};
  ck_assert_int_eq(run_eplb(a1), 2);
  ck_assert(err_has("robust shares need a trace"));
  ck_assert_int_ne(access(out, F_OK), 0);
  const char *a2[] = {"plan",       "--loads", trace,      "--gpus", "4",
                      "--replicas", "12",      "--shares", "robust", "--robust-steps",
                      "8",          "-o",      out,        NULL};
  ck_assert_int_eq(run_eplb(a2), 0);
  ck_assert_int_eq(access(out, F_OK), 0);
  const char *a3[] = {"plan", "--loads",  csv,         "--gpus", "4", "--replicas",
                      "12",   "--shares", "sometimes", "-o",     out, NULL};
  ck_assert_int_eq(run_eplb(a3), 2);
  const char *a4[] = {"sim",
                      "--compare",
                      "deepseek,balanced,balanced:uniform,balanced:robust",
                      "--trace",
                      trace,
                      "--cluster",
                      "1x4",
                      "--slots-per-gpu",
                      "3",
                      NULL};
  ck_assert_int_eq(run_eplb(a4), 0);
  const char *a5[] = {"sim",       "--compare", "balanced:often",  "--trace", trace,
                      "--cluster", "1x4",       "--slots-per-gpu", "3",       NULL};
  ck_assert_int_eq(run_eplb(a5), 2);
  const char *a6[] = {"sim", "--policy",  "balanced", "--shares",        "robust", "--trace",
                      trace, "--cluster", "1x4",      "--slots-per-gpu", "3",      NULL};
  ck_assert_int_eq(run_eplb(a6), 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("planner-shares");
  TCase *t = tcase_create("shares");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, uniform_and_robust);
  tcase_add_test(t, bad_options);
  tcase_add_test(t, cli);
  suite_add_tcase(s, t);
  return s;
}

int main(int argc, char **argv) {
  eplb_bin = argc > 1 ? argv[1] : NULL;
  return eplb_test_run(suite());
}
