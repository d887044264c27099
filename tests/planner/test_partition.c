/* Partition suite: the exact search of planner/partition.c against brute
 * force, and the mip policy without spare slots proving its optimum. */
#include "planner/planner.h"
#include "tests/planner/fixtures.h"
#include "tests/support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Max bin sum of an assignment; fails the test unless every item is used
 * once. */
static double check_assign(const double *w, uint32_t E, uint32_t G, const uint32_t *card,
                           const int32_t *assign) {
  uint8_t seen[64] = {0};
  double mx = 0;
  for (uint32_t g = 0, r = 0; g < G; g++) {
    double sum = 0;
    for (uint32_t k = 0; k < card[g]; k++, r++) {
      ck_assert(assign[r] >= 0 && (uint32_t)assign[r] < E);
      ck_assert_msg(!seen[assign[r]], "expert %d twice", assign[r]);
      seen[assign[r]] = 1;
      sum += w[assign[r]];
    }
    mx = sum > mx ? sum : mx;
  }
  return mx;
}

/* Optimum by enumerating every bin for every item (G^E), keeping those
 * with the right counts. */
static double brute_force(const double *w, uint32_t E, uint32_t G, const uint32_t *card) {
  uint32_t bin[16] = {0};
  double best = INFINITY;
  for (;;) {
    uint32_t cnt[4] = {0};
    double sum[4] = {0};
    for (uint32_t e = 0; e < E; e++)
      cnt[bin[e]]++, sum[bin[e]] += w[e];
    bool ok = true;
    double mx = 0;
    for (uint32_t g = 0; g < G; g++) {
      ok &= cnt[g] == card[g];
      mx = sum[g] > mx ? sum[g] : mx;
    }
    if (ok && mx < best)
      best = mx;
    uint32_t e = 0;
    while (e < E && ++bin[e] == G)
      bin[e++] = 0;
    if (e == E)
      return best;
  }
}

START_TEST(exact_matches_brute_force) {
  uint64_t seed = 5;
  int unequal = 0, fractional = 0;
  for (int t = 0; t < 400; t++) {
    uint32_t G = 2 + (uint32_t)(fx_rand(&seed) % 3), E = G + 2 + (uint32_t)(fx_rand(&seed) % 7);
    if (E > 10)
      E = 10;
    uint32_t card[4];
    bool equal = t % 2 == 0 && E % G == 0;
    /* Unequal counts: a random composition of E (a bin may be empty). */
    for (uint32_t g = 0, left = E; g < G; g++) {
      card[g] = equal ? E / G : g + 1 == G ? left : (uint32_t)(fx_rand(&seed) % (left + 1));
      left -= card[g];
    }
    double w[16];
    bool frac = t % 3 == 0;
    for (uint32_t e = 0; e < E; e++)
      w[e] = frac ? 100 * fx_uniform(&seed) : (double)(1 + fx_rand(&seed) % (t % 4 ? 40 : 6));
    /* A random valid incumbent. */
    int32_t assign[16];
    for (uint32_t e = 0; e < E; e++)
      assign[e] = (int32_t)e;
    for (uint32_t e = E; e > 1; e--) {
      uint32_t j = (uint32_t)(fx_rand(&seed) % e);
      int32_t x = assign[e - 1];
      assign[e - 1] = assign[j], assign[j] = x;
    }
    double start = check_assign(w, E, G, card, assign), best = -1;
    bool proven = false;
    ck_assert_int_eq(eplb__partition_exact(w, E, G, card, t % 5 ? 10 : 0, assign, &best, &proven),
                     EPLB_OK);
    double opt = brute_force(w, E, G, card), got = check_assign(w, E, G, card, assign);
    ck_assert(proven);
    ck_assert_double_eq(got, best);
    ck_assert(best <= start);
    ck_assert_msg(frac ? fabs(best - opt) <= 1e-8 * opt : best == opt,
                  "case %d: E %u G %u cards %u,%u,%u: got %.17g, optimum %.17g", t, E, G, card[0],
                  card[1], G > 2 ? card[2] : 0, best, opt);
    unequal += !equal, fractional += frac;
  }
  ck_assert_int_gt(unequal, 100);
  ck_assert_int_gt(fractional, 100);
}
END_TEST

START_TEST(unequal_counts_put_the_heavy_item_alone) {
  /* The heaviest item fits only in the one-item bin; the other bin's five
   * lightest-possible items decide the optimum. */
  double w[8] = {50, 9, 8, 7, 6, 5, 4, 3};
  uint32_t card[3] = {5, 1, 2};
  int32_t assign[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  double best = 0;
  bool proven = false;
  ck_assert_int_eq(eplb__partition_exact(w, 8, 3, card, 10, assign, &best, &proven), EPLB_OK);
  ck_assert(proven);
  ck_assert_int_eq(assign[5], 0);
  ck_assert_double_eq(best, 50);
  ck_assert_double_eq(best, brute_force(w, 8, 3, card));
  /* Same loads, the one-item bin gone: 50 must share. */
  uint32_t card2[2] = {4, 4};
  int32_t a2[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  ck_assert_int_eq(eplb__partition_exact(w, 8, 2, card2, 10, a2, &best, &proven), EPLB_OK);
  ck_assert(proven);
  ck_assert_double_eq(best, brute_force(w, 8, 2, card2));
  ck_assert_double_eq(check_assign(w, 8, 2, card2, a2), best);
}
END_TEST

START_TEST(proves_one_above_the_bound) {
  /* 32 items, 8 bins of 4: total 17182, so the bound is ceil(2147.75) =
   * 2148, yet no partition reaches it (checked independently by an exact
   * cover over all 4-subsets): the optimum 2149 needs the search's proof. */
  double w[32] = {765, 542, 772, 606, 659, 954, 502, 618, 415, 804, 320, 335, 450, 303, 952, 823,
                  846, 751, 243, 514, 455, 155, 957, 232, 114, 172, 740, 858, 361, 541, 267, 156};
  uint32_t card[8] = {4, 4, 4, 4, 4, 4, 4, 4};
  int32_t assign[32];
  for (int32_t e = 0; e < 32; e++)
    assign[e] = e;
  double best = 0;
  bool proven = false;
  ck_assert_int_eq(eplb__partition_exact(w, 32, 8, card, 10, assign, &best, &proven), EPLB_OK);
  ck_assert(proven);
  ck_assert_double_eq(best, 2149);
  ck_assert_double_eq(check_assign(w, 32, 8, card, assign), 2149);
  /* Through the mip policy: proven, so gap 0, and above the bound. */
  eplb_loads_t loads = {1, 32, w};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_MIP;
  o.num_gpus = 8;
  o.num_replicas = 32;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_OK);
  eplb_plan_layer_metrics_t m;
  eplb_plan_layer_metrics(p, 0, &m);
  ck_assert_int_eq(m.mip_status, EPLB_OK);
  ck_assert_double_eq(m.mip_gap, 0);
  ck_assert_double_eq(m.max_load, 2149);
  ck_assert(ceil(m.lower_bound) < m.max_load);
  eplb_plan_destroy(p);
}
END_TEST

START_TEST(bad_input_and_out_of_memory) {
  double w[4] = {4, 3, 2, 1}, best = -1;
  uint32_t card[2] = {2, 1};
  int32_t assign[4] = {0, 1, 2, 3};
  bool proven = true;
  ck_assert_int_eq(eplb__partition_exact(w, 4, 2, card, 1, assign, &best, &proven), EPLB_EINVAL);
  ck_assert(!proven);
  uint32_t card2[2] = {2, 2};
  int32_t dup[4] = {0, 1, 1, 3};
  ck_assert_int_eq(eplb__partition_exact(w, 4, 2, card2, 1, dup, &best, &proven), EPLB_EINVAL);
  int32_t out[4] = {0, 1, 2, 4};
  ck_assert_int_eq(eplb__partition_exact(w, 4, 2, card2, 1, out, &best, &proven), EPLB_EINVAL);
  ck_assert_double_eq(best, -1);
  /* Every failing allocation gives ENOMEM and leaves the incumbent. */
  eplb_test_alloc_install();
  eplb_status_t st = EPLB_ENOMEM;
  for (long n = 0; st == EPLB_ENOMEM; n++) {
    int32_t a[4] = {0, 1, 2, 3};
    eplb_test_alloc_fail_after(n);
    st = eplb__partition_exact(w, 4, 2, card2, 1, a, &best, &proven);
    eplb_test_alloc_reset();
    if (st == EPLB_ENOMEM)
      ck_assert(a[0] == 0 && a[1] == 1 && a[2] == 2 && a[3] == 3);
    ck_assert_int_lt(n, 100);
  }
  ck_assert_int_eq(st, EPLB_OK);
  ck_assert(proven);
  ck_assert_double_eq(best, 5);
}
END_TEST

START_TEST(time_limit_keeps_a_valid_incumbent) {
  /* 64 fractional loads in 8 bins with a limit far too short to prove
   * anything: the result is still a valid assignment, never worse. */
  uint64_t seed = 9;
  double *w = fx_random_loads(&seed, 1, 64, 0);
  uint32_t card[8] = {8, 8, 8, 8, 8, 8, 8, 8};
  int32_t assign[64];
  for (int32_t e = 0; e < 64; e++)
    assign[e] = e;
  double start = check_assign(w, 64, 8, card, assign), best = -1;
  bool proven = true;
  ck_assert_int_eq(eplb__partition_exact(w, 64, 8, card, 1e-4, assign, &best, &proven), EPLB_OK);
  ck_assert_double_eq(check_assign(w, 64, 8, card, assign), best);
  ck_assert(best <= start);
  free(w);
}
END_TEST

static eplb_plan_t *make(const eplb_loads_t *loads, eplb_plan_policy_t pol, uint32_t G,
                         const uint32_t *slots) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = pol;
  o.num_gpus = G;
  o.num_replicas = loads->num_experts;
  o.slots_per_gpu = slots;
  o.time_limit = 10;
  eplb_plan_t *p = NULL;
  eplb_status_t st = eplb_plan_create(loads, &o, &p);
  ck_assert_msg(st == EPLB_OK, "plan: %s", eplb_error_detail());
  return p;
}

/* Every layer of the mip plan is proven optimal and no worse than balanced. */
static void check_proven(const eplb_loads_t *loads, uint32_t G, const uint32_t *slots) {
  eplb_plan_t *bal = make(loads, EPLB_POLICY_BALANCED, G, slots);
  eplb_plan_t *mip = make(loads, EPLB_POLICY_MIP, G, slots);
  fx_check_plan(mip, loads, 1);
  for (uint32_t l = 0; l < loads->num_layers; l++) {
    eplb_plan_layer_metrics_t b, m;
    eplb_plan_layer_metrics(bal, l, &b);
    eplb_plan_layer_metrics(mip, l, &m);
    ck_assert_msg(m.mip_status == EPLB_OK, "layer %u: %s", l, eplb_status_str(m.mip_status));
    ck_assert_msg(m.mip_gap == 0, "layer %u: gap %g", l, m.mip_gap);
    ck_assert(m.max_load <= b.max_load * (1 + 1e-12));
    ck_assert(m.max_load >= m.lower_bound * (1 - 1e-12));
  }
  eplb_plan_destroy(bal);
  eplb_plan_destroy(mip);
}

START_TEST(mip_proves_without_spare_slots) {
  uint64_t seed = 23;
  uint32_t L = 4, E = 32, G = 8;
  double *w = malloc(sizeof *w * L * E);
  /* Uniform integers 100..999: the swaps often end one above the bound. */
  for (uint32_t i = 0; i < L * E; i++)
    w[i] = (double)(100 + fx_rand(&seed) % 900);
  eplb_loads_t loads = {L, E, w};
  check_proven(&loads, G, NULL);
  free(w);
  /* Zipf-ish fractional loads. */
  w = fx_random_loads(&seed, 3, E, 0);
  loads = (eplb_loads_t){3, E, w};
  check_proven(&loads, G, NULL);
  free(w);
}
END_TEST

START_TEST(mip_proves_with_unequal_slots) {
  uint64_t seed = 31;
  uint32_t L = 2, E = 32, G = 8, slots[8] = {3, 3, 4, 4, 4, 4, 5, 5};
  double *w = malloc(sizeof *w * L * E);
  for (uint32_t i = 0; i < E; i++)
    w[i] = (double)(100 + fx_rand(&seed) % 900);
  double *z = fx_random_loads(&seed, 1, E, 0);
  memcpy(w + E, z, E * sizeof *w);
  free(z);
  eplb_loads_t loads = {L, E, w};
  check_proven(&loads, G, slots);
  free(w);
}
END_TEST

int main(void) {
  Suite *s = suite_create("partition");
  TCase *tc = tcase_create("partition");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, exact_matches_brute_force);
  tcase_add_test(tc, unequal_counts_put_the_heavy_item_alone);
  tcase_add_test(tc, proves_one_above_the_bound);
  tcase_add_test(tc, bad_input_and_out_of_memory);
  tcase_add_test(tc, time_limit_keeps_a_valid_incumbent);
  tcase_add_test(tc, mip_proves_without_spare_slots);
  tcase_add_test(tc, mip_proves_with_unequal_slots);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
