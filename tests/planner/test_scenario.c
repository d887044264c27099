/* Placements for the window's steps (planner/scenario.c): experts that peak
 * in the same steps end up on different GPUs, replica counts and shares are
 * kept, the result is the same bytes every time, and the steps held out of
 * a fold are never looked at. */
#include "tests/support.h"
#include "planner/planner.h"

#include <eplb/plan.h>
#include <eplb/trace.h>

#include <check.h>
#include <string.h>

enum { L = 2, E = 8, G = 4, R = 8, STEPS = 20 };

/* Every expert has the same sum, but 0 and 1 peak together in even steps,
 * 2 and 3 in odd steps (layer 1: 4/5 and 6/7): on the sum every placement
 * looks balanced. */
static eplb_trace_t *paired_peaks(void) {
  const char *path = eplb_test_tmp("scenario.eplbt");
  eplb_trace_meta_t meta;
  eplb_trace_meta_default(&meta);
  meta.num_layers = L, meta.num_experts = E;
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(path, &meta, NULL, &w), EPLB_OK);
  for (uint32_t t = 0; t < STEPS; t++) {
    uint32_t counts[L * E];
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t e = 0; e < E; e++) {
        uint32_t pair = (e - 4 * l) & 7; /* layer 1 peaks 4..7 as layer 0 peaks 0..3 */
        bool peak = pair < 4 && (pair / 2 == t % 2);
        counts[l * E + e] = peak ? 40 : pair < 4 ? 0 : 20;
      }
    eplb_trace_step_t s = {.num_tokens = 100, .counts = counts};
    ck_assert_int_eq(eplb_trace_writer_append(w, &s), EPLB_OK);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  eplb_trace_t *tr = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &tr), EPLB_OK);
  return tr;
}

/* Pairs side by side: the worst placement for the steps. */
static eplb_plan_t *side_by_side(void) {
  int32_t p2l[L * R];
  double share[L * R];
  for (uint32_t i = 0; i < L * R; i++)
    p2l[i] = (int32_t)(i % R), share[i] = 1.0;
  eplb__plan_shape_t shape = {L, E, G, 1, R, NULL};
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb__plan_from_arrays(&shape, EPLB_POLICY_BALANCED, p2l, share, "test", &p),
                   EPLB_OK);
  return p;
}

/* Mean over steps and layers of balancedness with the plan's shares. */
static double served(eplb_trace_t *tr, const eplb_plan_t *p, uint64_t b, uint64_t e) {
  double sum = 0;
  for (uint64_t t = b; t < e; t++) {
    eplb_trace_step_t s;
    ck_assert_int_eq(eplb_trace_read_step(tr, t, &s), EPLB_OK);
    for (uint32_t l = 0; l < L; l++) {
      double gpu[G] = {0}, tot = 0, max = 0;
      for (uint32_t r = 0; r < R; r++)
        gpu[r / 2] += eplb_plan_share(p, l)[r] * s.counts[l * E + eplb_plan_phy2log(p, l)[r]];
      for (uint32_t g = 0; g < G; g++)
        tot += gpu[g], max = gpu[g] > max ? gpu[g] : max;
      sum += tot / G / max;
    }
  }
  return sum / (double)((e - b) * L);
}

static uint32_t gpu_of_expert(const eplb_plan_t *p, uint32_t l, int32_t e) {
  for (uint32_t r = 0; r < R; r++)
    if (eplb_plan_phy2log(p, l)[r] == e)
      return r / 2;
  return UINT32_MAX;
}

START_TEST(peaks_that_coincide_are_split_up) {
  eplb_trace_t *tr = paired_peaks();
  eplb_plan_t *p = side_by_side(), *again = side_by_side();
  eplb__scenarios_t *s = NULL;
  ck_assert_int_eq(eplb__scenarios_read(tr, 0, STEPS, &s), EPLB_OK);
  double before = served(tr, p, 0, STEPS);
  ck_assert_int_eq(eplb__plan_refine_scenarios(p, s, 0, 0, UINT64_C(1) << 20), EPLB_OK);
  double after = served(tr, p, 0, STEPS);
  ck_assert_msg(before < 0.6 && after > 0.99, "balancedness %.4f -> %.4f", before, after);
  for (uint32_t l = 0; l < L; l++) {
    int32_t a = (int32_t)(4 * l);
    ck_assert_uint_ne(gpu_of_expert(p, l, a), gpu_of_expert(p, l, a + 1));
    ck_assert_uint_ne(gpu_of_expert(p, l, a + 2), gpu_of_expert(p, l, a + 3));
    ck_assert_int_eq(eplb__plan_check_layer(p, l, "refined"), EPLB_OK); /* every expert once */
  }
  /* Same input, same bytes. */
  ck_assert_int_eq(eplb__plan_refine_scenarios(again, s, 0, 0, UINT64_C(1) << 20), EPLB_OK);
  ck_assert_mem_eq(eplb_plan_phy2log(again, 0), eplb_plan_phy2log(p, 0), L * R * sizeof(int32_t));
  eplb_plan_destroy(again);
  eplb_plan_destroy(p);
  eplb__scenarios_destroy(s);
  eplb_trace_close(tr);
}
END_TEST

START_TEST(held_out_steps_and_budget_are_respected) {
  eplb_trace_t *tr = paired_peaks();
  eplb__scenarios_t *s = NULL;
  ck_assert_int_eq(eplb__scenarios_read(tr, 0, STEPS, &s), EPLB_OK);
  eplb_plan_t *p = side_by_side(), *ref = side_by_side();
  /* All but step 0 held out: one scenario is the sum, nothing to learn. */
  ck_assert_int_eq(eplb__plan_refine_scenarios(p, s, 1, STEPS, UINT64_C(1) << 20), EPLB_OK);
  ck_assert_mem_eq(eplb_plan_phy2log(p, 0), eplb_plan_phy2log(ref, 0), L * R * sizeof(int32_t));
  /* No budget: nothing moves. */
  ck_assert_int_eq(eplb__plan_refine_scenarios(p, s, 0, 0, 0), EPLB_OK);
  ck_assert_mem_eq(eplb_plan_phy2log(p, 0), eplb_plan_phy2log(ref, 0), L * R * sizeof(int32_t));
  /* The even steps held out: the odd ones still separate 2 and 3. */
  eplb__scenarios_destroy(s);
  ck_assert_int_eq(eplb__scenarios_read(tr, 1, 4, &s), EPLB_OK); /* steps 1, 2, 3 */
  ck_assert_int_eq(eplb__plan_refine_scenarios(p, s, 2, 3, UINT64_C(1) << 20), EPLB_OK);
  ck_assert_uint_ne(gpu_of_expert(p, 0, 2), gpu_of_expert(p, 0, 3));
  eplb_plan_destroy(p);
  eplb_plan_destroy(ref);
  eplb__scenarios_destroy(s);
  eplb_trace_close(tr);
}
END_TEST

int main(void) {
  Suite *s = suite_create("scenario");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, peaks_that_coincide_are_split_up);
  tcase_add_test(tc, held_out_steps_and_budget_are_respected);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
