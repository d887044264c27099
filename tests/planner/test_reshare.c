/* tests/planner/test_reshare.c — a plan under other shares than its own:
 * eplb_plan_evaluate_uniform (what an export without shares serves) and
 * eplb_plan_resplit (the optimal shares re-solved for new loads). */
#include "tests/support.h"

#include <eplb/plan.h>
#include <eplb/trace.h>

#include <math.h>
#include <string.h>

enum { L = 3, E = 8, G = 4, R = 12 };

static eplb_loads_t *skewed_loads(void) {
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E, &ld), EPLB_OK);
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t e = 0; e < E; e++)
      ld->values[l * E + e] = e == l ? 900 : 10 + 7 * e + l; /* one hot expert per layer */
  return ld;
}

static eplb_plan_t *make_plan(const eplb_loads_t *ld, eplb_plan_policy_t pol) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = pol;
  o.num_gpus = G;
  o.num_replicas = R;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_OK);
  return p;
}

/* Balancedness of layer l of p on w with shares 1/c, computed here. */
static double uniform_balancedness(const eplb_plan_t *p, uint32_t l, const double *w) {
  const int32_t *p2l = eplb_plan_phy2log(p, l);
  const uint32_t *slots = eplb_plan_slots_per_gpu(p);
  uint32_t cnt[E] = {0};
  double gpu[G] = {0}, total = 0, max = 0;
  for (uint32_t r = 0; r < R; r++)
    cnt[p2l[r]]++;
  for (uint32_t g = 0, r = 0; g < G; g++)
    for (uint32_t k = 0; k < slots[g]; k++, r++)
      gpu[g] += w[p2l[r]] / cnt[p2l[r]];
  for (uint32_t g = 0; g < G; g++) {
    total += gpu[g];
    max = fmax(max, gpu[g]);
  }
  return max > 0 ? total / G / max : 1.0;
}

START_TEST(uniform_serves_even_split) {
  eplb_loads_t *ld = skewed_loads();
  eplb_plan_t *bal = make_plan(ld, EPLB_POLICY_BALANCED), *ds = make_plan(ld, EPLB_POLICY_DEEPSEEK);
  eplb_plan_served_t s;
  eplb_plan_summary_t sum;
  /* Exact shares differ from 1/c on these loads: the even split is evaluated. */
  ck_assert_int_eq(eplb_plan_evaluate_uniform(bal, ld, &s), EPLB_OK);
  ck_assert_int_eq(s.shares_dropped, 1);
  double mean = 0, min = 1;
  for (uint32_t l = 0; l < L; l++) {
    double b = uniform_balancedness(bal, l, ld->values + l * E);
    mean += b / L;
    min = fmin(min, b);
  }
  ck_assert_double_eq_tol(s.mean_balancedness, mean, 1e-12);
  ck_assert_double_eq_tol(s.min_balancedness, min, 1e-12);
  eplb_plan_summary(bal, &sum);
  ck_assert(s.mean_balancedness < sum.mean_balancedness); /* exact shares serve better */
  /* The plan itself is untouched. */
  eplb_plan_summary_t after;
  eplb_plan_summary(bal, &after);
  ck_assert_double_eq(after.mean_balancedness, sum.mean_balancedness);
  /* DeepSeek's shares are uniform: its own figures, nothing dropped. */
  ck_assert_int_eq(eplb_plan_evaluate_uniform(ds, ld, &s), EPLB_OK);
  ck_assert_int_eq(s.shares_dropped, 0);
  eplb_plan_summary(ds, &sum);
  ck_assert_double_eq(s.mean_balancedness, sum.mean_balancedness);
  ck_assert_double_eq(s.min_balancedness, sum.min_balancedness);
  /* Bad input. */
  eplb_loads_t *small = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E - 1, &small), EPLB_OK);
  ck_assert_int_eq(eplb_plan_evaluate_uniform(ds, small, &s), EPLB_ESHAPE);
  ck_assert_int_eq(eplb_plan_evaluate_uniform(NULL, ld, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_evaluate_uniform(ds, ld, NULL), EPLB_EINVAL);
  eplb_loads_destroy(small);
  eplb_plan_destroy(bal);
  eplb_plan_destroy(ds);
  eplb_loads_destroy(ld);
}
END_TEST

START_TEST(resplit_reaches_the_optimum) {
  eplb_loads_t *ld = skewed_loads();
  eplb_plan_t *ds = make_plan(ld, EPLB_POLICY_DEEPSEEK);
  eplb_plan_resplit_layer_t out[L];
  eplb_plan_resplit_options_t o;
  eplb_plan_resplit_options_default(&o);
  ck_assert_double_eq(o.tolerance, 0.01);
  ck_assert_ptr_null(o.cluster);
  /* Without set_shares the plan keeps its shares; metrics are on the loads. */
  double share0[R];
  memcpy(share0, eplb_plan_share(ds, 0), sizeof share0);
  ck_assert_int_eq(eplb_plan_resplit(ds, ld, NULL, 0, out), EPLB_OK);
  ck_assert_mem_eq(eplb_plan_share(ds, 0), share0, sizeof share0);
  int gained = 0;
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t m;
    ck_assert_int_eq(eplb_plan_layer_metrics(ds, l, &m), EPLB_OK);
    ck_assert_double_eq(out[l].max_load_before, m.max_load);
    ck_assert_double_eq(out[l].balancedness_before, m.balancedness);
    ck_assert_double_eq(out[l].lower_bound, m.lower_bound);
    ck_assert_double_eq_tol(out[l].max_load_after, out[l].t_star, 1e-9 * out[l].t_star);
    ck_assert(out[l].max_load_after <= out[l].max_load_before * (1 + 1e-12));
    ck_assert(out[l].t_star >= m.mean_load * (1 - 1e-12));
    ck_assert_double_eq_tol(out[l].balancedness_after, m.mean_load / out[l].max_load_after, 1e-12);
    ck_assert_double_eq(out[l].cross_node_before, 0);
    gained |= out[l].balancedness_after > out[l].balancedness_before + 1e-6;
  }
  ck_assert(gained);
  /* With set_shares the plan takes them: its metrics are the "after". */
  ck_assert_int_eq(eplb_plan_resplit(ds, ld, NULL, 1, out), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t m;
    ck_assert_int_eq(eplb_plan_layer_metrics(ds, l, &m), EPLB_OK);
    ck_assert_double_eq_tol(m.max_load, out[l].max_load_after, 1e-9 * m.max_load);
  }
  /* Integer mode: whole tokens only; then the busiest GPU gets ceil(T*). */
  o.integer = 1;
  ck_assert_int_eq(eplb_plan_resplit(ds, ld, &o, 0, out), EPLB_OK);
  for (uint32_t l = 0; l < L; l++)
    ck_assert_double_eq(out[l].max_load_after, ceil(out[l].t_star - 1e-9));
  ld->values[5] = 10.5;
  ck_assert_int_eq(eplb_plan_resplit(ds, ld, &o, 0, out), EPLB_EINVAL);
  o.integer = 0;
  o.tolerance = 2;
  ck_assert_int_eq(eplb_plan_resplit(ds, ld, &o, 0, out), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_resplit(ds, ld, NULL, 0, NULL), EPLB_EINVAL);
  eplb_plan_destroy(ds);
  eplb_loads_destroy(ld);
}
END_TEST

/* With a cluster: the locality split; a looser tolerance never sends more
 * tokens off their node, and stays within T* (1 + tolerance). */
START_TEST(resplit_with_locality) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), "reshare.eplbt");
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = 2;
  so.num_experts = 8;
  so.topk = 2;
  so.num_steps = 8;
  so.num_ranks = 4;
  so.tokens_per_step = 64;
  ck_assert_int_eq(eplb_synth_generate(path, &so), EPLB_OK);
  eplb_trace_t *tr = NULL;
  eplb_cluster_t *cl = NULL;
  eplb_coact_t *co = NULL;
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
  ck_assert_int_eq(eplb_cluster_open("2x2", &cl), EPLB_OK);
  ck_assert_int_eq(eplb_coact_from_trace(tr, 0, 8, cl, &co), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read(path, 0, 8, &ld), EPLB_OK);
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.num_gpus = 4;
  po.num_nodes = 2;
  po.num_replicas = 12;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &po, &p), EPLB_OK);
  eplb_plan_resplit_layer_t tight[2], loose[2];
  eplb_plan_resplit_options_t o;
  eplb_plan_resplit_options_default(&o);
  o.cluster = cl;
  ck_assert_int_eq(eplb_plan_resplit(p, ld, &o, 0, tight), EPLB_EINVAL); /* no coact */
  o.coact = co;
  o.tolerance = 0;
  ck_assert_int_eq(eplb_plan_resplit(p, ld, &o, 0, tight), EPLB_OK);
  o.tolerance = 1;
  ck_assert_int_eq(eplb_plan_resplit(p, ld, &o, 0, loose), EPLB_OK);
  for (uint32_t l = 0; l < 2; l++) {
    ck_assert(tight[l].cross_node_before > 0);
    ck_assert_double_eq_tol(tight[l].max_load_after, tight[l].t_star, 1e-9 * tight[l].t_star);
    ck_assert(loose[l].max_load_after <= 2 * loose[l].t_star * (1 + 1e-9));
    ck_assert(loose[l].cross_node_after <= tight[l].cross_node_after + 1e-9);
  }
  eplb_cluster_t *other = NULL;
  ck_assert_int_eq(eplb_cluster_open("2x4", &other), EPLB_OK);
  o.cluster = other;
  ck_assert_int_eq(eplb_plan_resplit(p, ld, &o, 0, tight), EPLB_ESHAPE);
  eplb_cluster_destroy(other);
  eplb_plan_destroy(p);
  eplb_loads_destroy(ld);
  eplb_coact_destroy(co);
  eplb_cluster_destroy(cl);
  eplb_trace_close(tr);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-reshare");
  TCase *tc = tcase_create("reshare");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, uniform_serves_even_split);
  tcase_add_test(tc, resplit_reaches_the_optimum);
  tcase_add_test(tc, resplit_with_locality);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
