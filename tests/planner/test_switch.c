/* tests/planner/test_switch.c — the plan lifecycle's shared steps: which
 * layers switch (gain threshold, move budget, identical layers), applying
 * a selection, and planning from a trace window with its side inputs. */
#include "tests/support.h"

#include <eplb/model.h>
#include <eplb/plan.h>
#include <eplb/trace.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 3, E = 8, G = 4, R = 12 };

static eplb_loads_t *loads_of(const double *w) {
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E, &ld), EPLB_OK);
  memcpy(ld->values, w, sizeof(double) * L * E);
  return ld;
}

static eplb_plan_t *plan(const eplb_loads_t *ld, eplb_plan_policy_t pol) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = pol;
  o.num_gpus = G;
  o.num_replicas = R;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_OK);
  return p;
}

static double bal(const eplb_plan_t *p, uint32_t l) {
  eplb_plan_layer_metrics_t m;
  ck_assert_int_eq(eplb_plan_layer_metrics(p, l, &m), EPLB_OK);
  return m.balancedness;
}

/* cur is planned for old loads (layer 0 skewed the other way), next for
 * the new ones: layer 0 gains a lot, layer 1 little, layer 2 nothing. */
START_TEST(select_by_gain_and_budget) {
  double old[L * E], nw[L * E];
  for (uint32_t e = 0; e < E; e++) {
    old[e] = e == 0 ? 800 : 10;
    nw[e] = e == E - 1 ? 800 : 10;
    old[E + e] = 100 + e;
    nw[E + e] = 100 + (e == 3 ? 12 : e);
    old[2 * E + e] = nw[2 * E + e] = 50;
  }
  eplb_loads_t *lo = loads_of(old), *ln = loads_of(nw);
  eplb_plan_t *cur = plan(lo, EPLB_POLICY_BALANCED), *next = plan(ln, EPLB_POLICY_BALANCED);
  ck_assert_int_eq(eplb_plan_evaluate(cur, ln), EPLB_OK); /* metrics on the new loads */
  uint8_t take[L];
  eplb_plan_switch_summary_t s;
  eplb_plan_switch_options_t o;
  eplb_plan_switch_options_default(&o);
  ck_assert_double_eq(o.gain_threshold, 0.01);
  ck_assert_int_eq(eplb_plan_switch_select(cur, next, ln, &o, take, &s), EPLB_OK);
  ck_assert_uint_eq(take[0], 1);
  ck_assert_uint_eq(take[2], 0); /* identical: never */
  ck_assert(bal(next, 0) - bal(cur, 0) >= 0.01);
  ck_assert_uint_eq(take[1], bal(next, 1) - bal(cur, 1) >= 0.01);
  ck_assert_uint_eq(s.layers_switched, take[0] + take[1] + take[2]);
  double after = 0;
  for (uint32_t l = 0; l < L; l++)
    after += (take[l] ? bal(next, l) : bal(cur, l)) / L;
  ck_assert_double_eq_tol(s.mean_balancedness_after, after, 1e-12);
  ck_assert(s.mean_balancedness_after >= s.mean_balancedness_cur);
  uint64_t moved0 = 0;
  for (uint32_t r = 0; r < R; r++)
    moved0 += eplb_plan_phy2log(cur, 0)[r] != eplb_plan_phy2log(next, 0)[r];
  ck_assert_uint_gt(moved0, 0);
  /* A budget below layer 0's moves skips it. */
  o.move_budget = moved0 - 1;
  ck_assert_int_eq(eplb_plan_switch_select(cur, next, ln, &o, take, &s), EPLB_OK);
  ck_assert_uint_eq(take[0], 0);
  ck_assert_uint_le(s.slots_moved, moved0 - 1);
  /* A threshold above any gain: nothing; <= -1: every layer that differs. */
  o.move_budget = 0;
  o.gain_threshold = 2;
  ck_assert_int_eq(eplb_plan_switch_select(cur, next, ln, &o, take, &s), EPLB_OK);
  ck_assert_uint_eq(s.layers_switched, 0);
  o.gain_threshold = -1;
  ck_assert_int_eq(eplb_plan_switch_select(cur, next, ln, &o, take, &s), EPLB_OK);
  ck_assert_uint_eq(take[0] + take[1], 2);
  ck_assert_uint_eq(take[2], 0);
  /* Apply: untaken layers come back from cur. */
  take[0] = 1;
  take[1] = 0;
  ck_assert_int_eq(eplb_plan_switch_apply(next, cur, take), EPLB_OK);
  ck_assert_mem_eq(eplb_plan_phy2log(next, 1), eplb_plan_phy2log(cur, 1), R * sizeof(int32_t));
  ck_assert_mem_eq(eplb_plan_share(next, 1), eplb_plan_share(cur, 1), R * sizeof(double));
  ck_assert_double_eq(bal(next, 1), bal(cur, 1));
  /* Bad input. */
  o.gain_threshold = NAN;
  ck_assert_int_eq(eplb_plan_switch_select(cur, next, ln, &o, take, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_switch_select(cur, NULL, ln, NULL, take, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_switch_apply(next, cur, NULL), EPLB_EINVAL);
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.num_gpus = G;
  po.num_replicas = R + G;
  eplb_plan_t *big = NULL;
  ck_assert_int_eq(eplb_plan_create(ln, &po, &big), EPLB_OK);
  ck_assert_int_eq(eplb_plan_switch_select(cur, big, ln, NULL, take, &s), EPLB_ESHAPE);
  ck_assert_int_eq(eplb_plan_switch_apply(big, cur, take), EPLB_ESHAPE);
  eplb_plan_destroy(big);
  eplb_plan_destroy(cur);
  eplb_plan_destroy(next);
  eplb_loads_destroy(lo);
  eplb_loads_destroy(ln);
}
END_TEST

/* A trace of 10 steps whose hot expert moves at step 5. */
static const char *make_trace(void) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), "switch.eplbt");
  eplb_trace_meta_t m;
  eplb_trace_meta_default(&m);
  m.num_layers = L;
  m.num_experts = E;
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(path, &m, NULL, &w), EPLB_OK);
  for (uint32_t t = 0; t < 10; t++) {
    uint32_t c[L * E], tot = 0;
    for (uint32_t i = 0; i < L * E; i++) {
      c[i] = 10 + (i % E == (t < 5 ? 1u : 6u) ? 200 : 0) + i % 3;
      tot += c[i];
    }
    eplb_trace_step_t st = {0, tot / L, c, 0, NULL, NULL};
    ck_assert_int_eq(eplb_trace_writer_append(w, &st), EPLB_OK);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  return path;
}

START_TEST(plan_from_trace_window) {
  const char *path = make_trace();
  eplb_trace_t *tr = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E, &ld), EPLB_OK);
  ck_assert_int_eq(eplb_trace_window_sum(tr, 5, 10, ld->values), EPLB_OK);
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = G;
  o.num_replicas = R;
  eplb_plan_t *a = NULL, *b = NULL, *c = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &a), EPLB_OK);
  eplb_loads_t *win = NULL, *wrong = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E, &win), EPLB_OK);
  ck_assert_int_eq(eplb_plan_create_from_trace(tr, 5, 10, &o, NULL, win, &b), EPLB_OK);
  for (uint32_t l = 0; l < L; l++)
    ck_assert_mem_eq(eplb_plan_phy2log(a, l), eplb_plan_phy2log(b, l), R * sizeof(int32_t));
  /* The window the plan was made from comes back to the caller. */
  ck_assert_mem_eq(win->values, ld->values, sizeof(double) * L * E);
  ck_assert_int_eq(eplb_loads_create(L, E + 1, &wrong), EPLB_OK);
  ck_assert_int_eq(eplb_plan_create_from_trace(tr, 5, 10, &o, NULL, wrong, &c), EPLB_ESHAPE);
  eplb_loads_destroy(win);
  eplb_loads_destroy(wrong);
  /* incremental without a plan to change from is a first (balanced) plan;
   * with `current` it changes at most move_budget slots from it. */
  o.policy = EPLB_POLICY_INCREMENTAL;
  ck_assert_int_eq(eplb_plan_create_from_trace(tr, 5, 10, &o, NULL, NULL, &c), EPLB_OK);
  ck_assert_int_eq(eplb_plan_policy(c), EPLB_POLICY_BALANCED);
  eplb_plan_destroy(c);
  eplb_plan_t *first = NULL;
  o.policy = EPLB_POLICY_BALANCED;
  ck_assert_int_eq(eplb_plan_create_from_trace(tr, 0, 5, &o, NULL, NULL, &first), EPLB_OK);
  o.policy = EPLB_POLICY_INCREMENTAL;
  o.move_budget = 1;
  ck_assert_int_eq(eplb_plan_create_from_trace(tr, 5, 10, &o, first, NULL, &c), EPLB_OK);
  for (uint32_t l = 0; l < L; l++) {
    uint32_t moved = 0;
    for (uint32_t r = 0; r < R; r++)
      moved += eplb_plan_phy2log(c, l)[r] != eplb_plan_phy2log(first, l)[r];
    ck_assert_uint_le(moved, 1);
  }
  eplb_plan_destroy(c);
  /* Robust shares sample the window's own steps. */
  o.policy = EPLB_POLICY_BALANCED;
  o.move_budget = 0;
  o.shares = EPLB_SHARES_ROBUST;
  ck_assert_int_eq(eplb_plan_create_from_trace(tr, 5, 10, &o, NULL, NULL, &c), EPLB_OK);
  eplb_plan_destroy(c);
  /* Bad input. */
  ck_assert_int_eq(eplb_plan_create_from_trace(NULL, 0, 5, &o, NULL, NULL, &c), EPLB_EINVAL);
  o.shares = EPLB_SHARES_EXACT;
  o.policy = EPLB_POLICY_LOCALITY; /* no cluster */
  ck_assert_int_ne(eplb_plan_create_from_trace(tr, 0, 5, &o, NULL, NULL, &c), EPLB_OK);
  ck_assert_ptr_null(c);
  eplb_plan_destroy(first);
  eplb_plan_destroy(a);
  eplb_plan_destroy(b);
  eplb_loads_destroy(ld);
  eplb_trace_close(tr);
}
END_TEST

/* A decode plan gathers light experts' tokens on few replicas: its token
 * balance is worse than balanced's and its modelled step time better. With
 * the deployment the switch follows the step time, both ways; without it the
 * balancedness (the other way). */
START_TEST(decode_plans_switch_on_step_time) {
  double w[L * E];
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t e = 0; e < E; e++)
      w[l * E + e] = 40.0 / (e + 1 + l); /* one light decode step: ~70 tokens a layer */
  eplb_loads_t *ld = loads_of(w);
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  ck_assert_int_eq(eplb_model_preset("deepseek-v3", &m), EPLB_OK);
  m.num_experts = E;
  ck_assert_int_eq(eplb_gpu_preset("h800", &g), EPLB_OK);
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.policy = EPLB_POLICY_DECODE;
  po.num_gpus = G;
  po.num_replicas = R;
  po.model = &m;
  po.gpu = &g;
  eplb_plan_t *dec = NULL, *bal_plan = plan(ld, EPLB_POLICY_BALANCED);
  ck_assert_int_eq(eplb_plan_create(ld, &po, &dec), EPLB_OK);
  uint8_t take[L];
  eplb_plan_switch_options_t o;
  eplb_plan_switch_options_default(&o);
  ck_assert_double_eq(o.decode_steps, 1);
  eplb_plan_switch_summary_t s;
  uint32_t by_bal = 0, by_time = 0, back_bal = 0, back_time = 0;
  ck_assert_int_eq(eplb_plan_switch_select(bal_plan, dec, ld, &o, take, &s), EPLB_OK);
  by_bal = s.layers_switched;
  ck_assert_int_eq(eplb_plan_switch_select(dec, bal_plan, ld, &o, take, &s), EPLB_OK);
  back_bal = s.layers_switched;
  o.model = &m;
  o.gpu = &g;
  ck_assert_int_eq(eplb_plan_switch_select(bal_plan, dec, ld, &o, take, &s), EPLB_OK);
  by_time = s.layers_switched;
  ck_assert_int_eq(eplb_plan_switch_select(dec, bal_plan, ld, &o, take, &s), EPLB_OK);
  back_time = s.layers_switched;
  ck_assert_msg(by_time == L && back_time == 0 && by_bal == 0 && back_bal == L,
                "to decode %u by time, %u by balance; back %u by time, %u by balance", by_time,
                by_bal, back_time, back_bal);
  /* Bad options. */
  o.gpu = NULL;
  ck_assert_int_eq(eplb_plan_switch_select(bal_plan, dec, ld, &o, take, &s), EPLB_EINVAL);
  o.gpu = &g;
  o.decode_steps = NAN;
  ck_assert_int_eq(eplb_plan_switch_select(bal_plan, dec, ld, &o, take, &s), EPLB_EINVAL);
  eplb_plan_destroy(dec);
  eplb_plan_destroy(bal_plan);
  eplb_loads_destroy(ld);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-switch");
  TCase *tc = tcase_create("switch");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, select_by_gain_and_budget);
  tcase_add_test(tc, plan_from_trace_window);
  tcase_add_test(tc, decode_plans_switch_on_step_time);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
