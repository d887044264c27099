/* tests/planner/test_step_moves.c — continuous re-placement's choice of a
 * step's moves (eplb_plan_step_moves): budgets, slots in flight, the replica
 * every expert keeps in service, the copy sources, gain, determinism. */
#include "tests/support.h"

#include <eplb/plan.h>
#include <eplb/split.h>
#include <eplb/trace.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { L = 6, E = 16, G = 4, S = 6, R = G * S, N = 2 };

/* Random skewed loads: a few hot experts per layer, by seed. */
static eplb_loads_t *skewed(uint64_t seed) {
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(L, E, &ld), EPLB_OK);
  uint64_t st = seed;
  for (size_t i = 0; i < (size_t)L * E; i++) {
    uint64_t x = eplb_test_xorshift(&st);
    ld->values[i] = (double)(x % 50) + (x % 7 == 0 ? 400.0 : 0.0);
  }
  return ld;
}

static eplb_plan_t *plan_for(const eplb_loads_t *ld) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_OK);
  return p;
}

static double exact_max(const int32_t *p2l, const double *w) {
  uint32_t spg[G], q[R];
  double share[R], gl[G];
  for (uint32_t g = 0; g < G; g++)
    spg[g] = S;
  for (uint32_t r = 0; r < R; r++)
    q[r] = (uint32_t)p2l[r];
  eplb_split_t *sp = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &sp), EPLB_OK);
  eplb_split_problem_t pb = {E, G, R, q, spg};
  eplb_split_result_t res = {.share = share, .gpu_load = gl};
  ck_assert_int_eq(eplb_split_solve(sp, &pb, w, &res), EPLB_OK);
  eplb_split_destroy(sp);
  return res.max_load;
}

/* Every rule a set of moves must keep, checked from the outside. */
static void check_moves(const eplb_plan_t *cur, const uint8_t *busy, const eplb_loads_t *ld,
                        const eplb_plan_step_options_t *o, const eplb_plan_move_t *m, size_t n) {
  uint32_t recv[G] = {0}, per_layer[L] = {0};
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_lt(m[i].layer, L);
    ck_assert_uint_lt(m[i].slot, R);
    ck_assert_uint_lt(m[i].src_slot, R);
    ck_assert(i == 0 || m[i - 1].layer < m[i].layer ||
              (m[i - 1].layer == m[i].layer && m[i - 1].slot < m[i].slot));
    const int32_t *p = eplb_plan_phy2log(cur, m[i].layer);
    const uint8_t *b = busy ? busy + (size_t)m[i].layer * R : NULL;
    ck_assert_int_eq(p[m[i].slot], m[i].from_expert);
    ck_assert_int_ne(m[i].from_expert, m[i].to_expert);
    ck_assert_int_eq(p[m[i].src_slot], m[i].to_expert); /* the source holds the expert */
    ck_assert(!b || (!b[m[i].slot] && !b[m[i].src_slot]));
    for (size_t j = 0; o->in_place && j < n; j++) /* in place no source is rewritten */
      ck_assert(m[j].layer != m[i].layer || m[j].slot != m[i].src_slot);
    recv[m[i].slot / S]++;
    per_layer[m[i].layer]++;
  }
  for (uint32_t g = 0; g < G; g++)
    ck_assert_uint_le(recv[g], o->slots_per_gpu);
  for (uint32_t l = 0; l < L; l++) {
    ck_assert_uint_le(per_layer[l], o->max_per_layer);
    if (!per_layer[l])
      continue;
    /* After the layer's moves every expert keeps a replica in service, and
     * the exact-split max load on the loads falls by more than the price. */
    int32_t after[R];
    memcpy(after, eplb_plan_phy2log(cur, l), sizeof after);
    for (size_t i = 0; i < n; i++)
      if (m[i].layer == l)
        after[m[i].slot] = m[i].to_expert;
    uint32_t serving[E] = {0}, after_all[E] = {0};
    for (uint32_t r = 0; r < R; r++) {
      serving[after[r]] += !(busy && busy[(size_t)l * R + r]);
      after_all[after[r]]++;
    }
    for (size_t i = 0; i < n; i++) /* an expert that gives a slot up keeps one */
      if (m[i].layer == l)
        ck_assert_uint_ge(o->in_place ? serving[m[i].from_expert] : after_all[m[i].from_expert], 1);
    const double *w = ld->values + (size_t)l * E;
    double total = 0;
    for (uint32_t e = 0; e < E; e++)
      total += w[e];
    double gain = (exact_max(eplb_plan_phy2log(cur, l), w) - exact_max(after, w)) / (total / G);
    ck_assert(gain > o->move_weight * per_layer[l]);
  }
}

START_TEST(moves_follow_the_rules) {
  for (uint64_t seed = 1; seed <= 12; seed++) {
    eplb_loads_t *old = skewed(seed), *now = skewed(seed + 100);
    eplb_plan_t *cur = plan_for(old);
    uint8_t busy[L * R];
    uint64_t st = seed * 7919;
    for (size_t i = 0; i < sizeof busy; i++)
      busy[i] = eplb_test_xorshift(&st) % 9 == 0;
    for (int with_busy = 0; with_busy < 4; with_busy++) {
      eplb_plan_step_options_t o;
      eplb_plan_step_options_default(&o);
      o.in_place = with_busy >= 2; /* staged copies, then in place */
      o.slots_per_gpu = 1 + (uint32_t)(seed % 3);
      o.max_per_layer = 1 + (uint32_t)(seed % 4);
      eplb_plan_move_t m[64];
      size_t n = 99;
      const uint8_t *b = with_busy % 2 ? busy : NULL;
      ck_assert_int_eq(eplb_plan_step_moves(cur, b, now, &o, m, 64, &n), EPLB_OK);
      check_moves(cur, b, now, &o, m, n);
      if (!b) /* the new mix is far from the plan's: something moves */
        ck_assert_uint_gt(n, 0);
      /* Deterministic: the same call, the same moves. */
      eplb_plan_move_t m2[64];
      size_t n2 = 0;
      ck_assert_int_eq(eplb_plan_step_moves(cur, b, now, &o, m2, 64, &n2), EPLB_OK);
      ck_assert_uint_eq(n, n2);
      ck_assert(n == 0 || !memcmp(m, m2, n * sizeof *m));
    }
    eplb_plan_destroy(cur);
    eplb_loads_destroy(old);
    eplb_loads_destroy(now);
  }
}
END_TEST

START_TEST(budgets_and_byte_limits) {
  eplb_loads_t *old = skewed(3), *now = skewed(77);
  eplb_plan_t *cur = plan_for(old);
  eplb_plan_step_options_t o;
  eplb_plan_step_options_default(&o);
  eplb_plan_move_t m[64];
  size_t n = 5;
  o.slots_per_gpu = 0; /* a budget of 0 moves nothing */
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, now, &o, m, 64, &n), EPLB_OK);
  ck_assert_uint_eq(n, 0);
  eplb_plan_step_options_default(&o);
  o.expert_bytes = 1000;
  o.bytes_per_gpu = 1999; /* one slot a GPU */
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, now, &o, m, 64, &n), EPLB_OK);
  ck_assert_uint_gt(n, 0);
  uint32_t recv[G] = {0};
  for (size_t i = 0; i < n; i++)
    ck_assert_uint_le(++recv[m[i].slot / S], 1);
  size_t all = n;
  eplb_plan_step_options_default(&o);
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, now, &o, m, 2, &n), EPLB_OK);
  ck_assert_uint_le(n, 2); /* cap */
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, now, &o, m, 64, &n), EPLB_OK);
  ck_assert_uint_ge(n, all);
  /* The plan's own loads: nothing gains enough to move. */
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, old, &o, m, 64, &n), EPLB_OK);
  ck_assert_uint_eq(n, 0);
  /* Every slot busy: nothing can move. */
  uint8_t busy[L * R];
  memset(busy, 1, sizeof busy);
  ck_assert_int_eq(eplb_plan_step_moves(cur, busy, now, &o, m, 64, &n), EPLB_OK);
  ck_assert_uint_eq(n, 0);
  eplb_plan_destroy(cur);
  eplb_loads_destroy(old);
  eplb_loads_destroy(now);
}
END_TEST

START_TEST(bad_arguments) {
  eplb_loads_t *ld = skewed(5), *wrong = NULL;
  eplb_plan_t *cur = plan_for(ld);
  eplb_plan_step_options_t o;
  eplb_plan_step_options_default(&o);
  eplb_plan_move_t m[8];
  size_t n = 0;
  ck_assert_int_eq(eplb_plan_step_moves(NULL, NULL, ld, &o, m, 8, &n), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, NULL, &o, m, 8, &n), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, ld, &o, m, 8, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, ld, &o, NULL, 8, &n), EPLB_EINVAL);
  o.move_weight = NAN;
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, ld, &o, m, 8, &n), EPLB_EINVAL);
  o.move_weight = -1;
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, ld, &o, m, 8, &n), EPLB_EINVAL);
  ck_assert_int_eq(eplb_loads_create(L, E + 1, &wrong), EPLB_OK);
  ck_assert_int_eq(eplb_plan_step_moves(cur, NULL, wrong, NULL, m, 8, &n), EPLB_ESHAPE);
  ld->values[3] = NAN; /* the planner's own check */
  ck_assert_int_ne(eplb_plan_step_moves(cur, NULL, ld, NULL, m, 8, &n), EPLB_OK);
  eplb_loads_destroy(wrong);
  eplb_plan_destroy(cur);
  eplb_loads_destroy(ld);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-step-moves");
  TCase *tc = tcase_create("step_moves");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, moves_follow_the_rules);
  tcase_add_test(tc, budgets_and_byte_limits);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
