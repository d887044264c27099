/* tests/lp/test_split_probe.c — the planner's fast paths of the exact split:
 * a graph updated in place for a few changed slots solves bit for bit like a
 * fresh build, a repeated solve (memoised flow) returns the same bits, and
 * a warm-started probe answers "above" exactly when a solve's T* says so
 * (sound always, complete away from the cap), and a T*-only solve
 * (eplb__split_tstar) finds a solve's T* and a certificate of it. */
#include "lp/lp.h"
#include "tests/support.h"

#include <math.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t rnd(void) { return eplb_test_xorshift(&rng_state); }

static uint32_t rndn(uint32_t n) { return (uint32_t)(rnd() % n); }
static double rndu(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

typedef struct inst {
  uint32_t E, G, R;
  uint32_t phy2log[768], slots[96];
  double loads[256];
} inst_t;

/* Random placement, slots GPU-major: every expert once, the rest anywhere
 * (a GPU may hold an expert twice), loads zipf-like, with ties sometimes. */
static void gen(inst_t *in) {
  uint32_t gpu[768], ex[768];
  in->E = 2 + rndn(200);
  in->G = 2 + rndn(90);
  in->R = in->E + rndn(in->E + 1);
  for (uint32_t r = 0; r < in->R; r++) {
    ex[r] = r < in->E ? r : rndn(in->E);
    gpu[r] = rndn(in->G);
  }
  memset(in->slots, 0, sizeof in->slots);
  uint32_t k = 0;
  for (uint32_t g = 0; g < in->G; g++)
    for (uint32_t r = 0; r < in->R; r++)
      if (gpu[r] == g) {
        in->phy2log[k++] = ex[r];
        in->slots[g]++;
      }
  bool ties = rndn(4) == 0;
  for (uint32_t e = 0; e < in->E; e++)
    in->loads[e] = ties ? (double)rndn(5) : 1000.0 / (1.0 + rndn(in->E)) * (0.5 + rndu());
}

typedef struct out {
  double share[768], amount[768], gpu_load[96];
  uint8_t be[256], bg[96];
  eplb_split_result_t r;
} out_t;

static void solve(eplb_split_t *s, const inst_t *in, out_t *o) {
  memset(o, 0, sizeof *o);
  o->r = (eplb_split_result_t){.share = o->share,
                               .amount = o->amount,
                               .gpu_load = o->gpu_load,
                               .bottleneck_experts = o->be,
                               .bottleneck_gpus = o->bg};
  eplb_split_problem_t p = {in->E, in->G, in->R, in->phy2log, in->slots};
  ck_assert_int_eq(eplb_split_solve(s, &p, in->loads, &o->r), EPLB_OK);
}

/* Every output bit equal (iterations aside: a memoised run is not redone). */
static void same(const inst_t *in, const out_t *a, const out_t *b) {
  ck_assert(!memcmp(a->share, b->share, in->R * sizeof *a->share));
  ck_assert(!memcmp(a->amount, b->amount, in->R * sizeof *a->amount));
  ck_assert(!memcmp(a->gpu_load, b->gpu_load, in->G * sizeof *a->gpu_load));
  ck_assert(!memcmp(a->be, b->be, in->E));
  ck_assert(!memcmp(a->bg, b->bg, in->G));
  ck_assert(!memcmp(&a->r.t_star, &b->r.t_star, sizeof a->r.t_star));
  ck_assert(!memcmp(&a->r.max_load, &b->r.max_load, sizeof a->r.max_load));
}

/* Swaps the experts of two random slots (the same expert: nothing). */
static void swap_slots(inst_t *in) {
  uint32_t a = rndn(in->R), b = rndn(in->R), t = in->phy2log[a];
  in->phy2log[a] = in->phy2log[b];
  in->phy2log[b] = t;
}

START_TEST(update_in_place_matches_build) {
  rng_state = 0x5eed1234ull + (uint64_t)_i * 7919;
  eplb_split_options_t o;
  eplb_split_options_default(&o);
  o.warm_start = 0; /* results then depend on placement and loads only */
  static inst_t in;
  static out_t a, b;
  for (int it = 0; it < 60; it++) {
    gen(&in);
    eplb_split_t *inc = NULL, *fresh = NULL;
    ck_assert_int_eq(eplb_split_create(&o, &inc), EPLB_OK);
    solve(inc, &in, &a);
    for (int step = 0; step < 40; step++) {
      /* One swap (a search's try), two (the undo of the last and a new
       * one), or many (a rebuild). */
      uint32_t n = rndn(6) == 0 ? 1 + rndn(8) : 1 + rndn(2);
      for (uint32_t k = 0; k < n; k++)
        swap_slots(&in);
      if (rndn(3) == 0) { /* the planner probes before it solves */
        eplb_split_problem_t p = {in.E, in.G, in.R, in.phy2log, in.slots};
        bool above;
        ck_assert_int_eq(eplb__split_above_warm(inc, &p, in.loads, a.r.t_star, &above), EPLB_OK);
      }
      solve(inc, &in, &a);
      ck_assert_int_eq(eplb_split_create(&o, &fresh), EPLB_OK);
      solve(fresh, &in, &b);
      /* The adjacency itself as a build lays it out (Dinic's order). */
      const eplb__flow_t *fi = &inc->flow, *ff = &fresh->flow;
      ck_assert_uint_eq(fi->n, ff->n);
      ck_assert_uint_eq(fi->m, ff->m);
      ck_assert(!memcmp(fi->adj_start, ff->adj_start, ((size_t)ff->n + 1) * 4));
      ck_assert(!memcmp(fi->adj, ff->adj, (size_t)ff->m * 4));
      ck_assert(!memcmp(fi->adj_to, ff->adj_to, (size_t)ff->m * 4));
      ck_assert(!memcmp(fi->to, ff->to, (size_t)ff->m * 4));
      eplb_split_destroy(fresh);
      same(&in, &a, &b);
      solve(inc, &in, &b); /* memoised: the same bits again */
      same(&in, &a, &b);
    }
    eplb_split_destroy(inc);
  }
}
END_TEST

START_TEST(warm_probe_answers_like_a_solve) {
  rng_state = 0xfeedbeefull + (uint64_t)_i * 104729;
  static inst_t in;
  static out_t a, b;
  int above_n = 0, below_n = 0;
  for (int it = 0; it < 60; it++) {
    gen(&in);
    eplb_split_t *s = NULL, *ref = NULL;
    ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
    ck_assert_int_eq(eplb_split_create(NULL, &ref), EPLB_OK);
    solve(s, &in, &a);
    double T = a.r.t_star;
    /* The snapshot is taken at the first probe; later ones reuse it. */
    for (int step = 0; step < 30; step++) {
      static inst_t in2;
      in2 = in;
      swap_slots(&in2);
      if (rndn(2))
        swap_slots(&in2);
      double cap = T * (0.9 + 0.2 * rndu());
      eplb_split_problem_t p = {in2.E, in2.G, in2.R, in2.phy2log, in2.slots};
      bool above;
      ck_assert_int_eq(eplb__split_above_warm(s, &p, in2.loads, cap, &above), EPLB_OK);
      eplb_split_reset(ref);
      solve(ref, &in2, &b);
      double t2 = b.r.t_star, hi = cap > T * (1 + 1e-13) ? cap : T * (1 + 1e-13);
      if (above) /* sound: a set above cap exists */
        ck_assert(t2 > cap * (1 - 1e-12));
      if (t2 > hi * (1 + 1e-9)) /* complete away from the (raised) cap */
        ck_assert(above);
      if (t2 < cap * (1 - 1e-9))
        ck_assert(!above);
      above_n += above;
      below_n += !above;
    }
    eplb_split_destroy(s);
    eplb_split_destroy(ref);
  }
  ck_assert_int_gt(above_n, 100);
  ck_assert_int_gt(below_n, 100);
}
END_TEST

/* eplb__split_tstar on swapped placements, started from hints (the last
 * bottleneck, random sets, none) after probes, as the planner calls it:
 * T* as a canonical solve's to 1e-12, its set a certificate (ratio = T*,
 * GPUs = N(set)), the flow's loads within T* and summing to the total, and
 * a solve of the same placement then starts at that set (one max-flow);
 * a fresh handle given the hints' ratios finds the same T* and set. */
START_TEST(tstar_matches_a_solve) {
  rng_state = 0xabcdef01ull + (uint64_t)_i * 15485863;
  uint32_t sub_runs = 0;
  static inst_t in;
  static out_t a, b;
  static uint8_t hint[3][256], set[256], cset[256], gset[96], mark[96];
  static double gl[96];
  for (int it = 0; it < 60; it++) {
    gen(&in);
    eplb_split_t *s = NULL, *ref = NULL;
    ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
    ck_assert_int_eq(eplb_split_create(NULL, &ref), EPLB_OK);
    solve(s, &in, &a);
    memcpy(hint[0], a.be, in.E);
    for (int step = 0; step < 30; step++) {
      uint32_t n = 1 + rndn(2);
      for (uint32_t k = 0; k < n; k++)
        swap_slots(&in);
      eplb_split_problem_t p = {in.E, in.G, in.R, in.phy2log, in.slots};
      if (rndn(2)) {
        bool above;
        ck_assert_int_eq(eplb__split_above_warm(s, &p, in.loads, a.r.t_star, &above), EPLB_OK);
      }
      for (int h = 1; h < 3; h++)
        for (uint32_t e = 0; e < in.E; e++)
          hint[h][e] = rndn(h == 1 ? 2 : 8) == 0;
      const uint8_t *hints[3] = {hint[0], hint[1], hint[2]};
      double t;
      uint32_t nhint = rndn(4);
      ck_assert_int_eq(
          eplb__split_tstar(s, &p, in.loads, hints, NULL, nhint, HUGE_VAL, &t, set, gset, gl),
          EPLB_OK);
      sub_runs += s->sub_used;
      /* Warm-started or not, given the hints' ratios or not: the same
       * T* to the bit and the same set (the planner's plans rest on it). */
      double hr[3], tc;
      uint32_t nh_ = 0, ng_ = 0;
      for (int h = 0; h < 3; h++)
        hr[h] = eplb__split_ratio(&p, in.loads, hints[h], mark, &nh_, &ng_);
      eplb_split_reset(ref);
      ck_assert_int_eq(
          eplb__split_tstar(ref, &p, in.loads, hints, hr, nhint, HUGE_VAL, &tc, cset, NULL, NULL),
          EPLB_OK);
      ck_assert(!memcmp(&tc, &t, sizeof t));
      ck_assert(!memcmp(cset, set, in.E));
      eplb_split_reset(ref);
      solve(ref, &in, &b);
      double T = b.r.t_star, total = 0, sum = 0;
      ck_assert(fabs(t - T) <= 1e-12 * T);
      /* Newton's steps after the first run on the first cut's part of the
       * graph and jump to its best connected part: the same set as the
       * solve's steps on the whole graph (the largest with ratio T*). */
      ck_assert(!memcmp(set, b.be, in.E));
      uint32_t na, ng;
      double r = eplb__split_ratio(&p, in.loads, set, mark, &na, &ng);
      ck_assert(fabs(r - t) <= 1e-15 * t);
      ck_assert(!memcmp(mark, gset, in.G));
      for (uint32_t e = 0; e < in.E; e++)
        total += in.loads[e];
      for (uint32_t g = 0; g < in.G; g++) {
        ck_assert(gl[g] <= T * (1 + 1e-12) + 1e-12);
        sum += gl[g];
      }
      ck_assert(fabs(sum - total) <= 1e-9 * (total + 1));
      solve(s, &in, &a);
      ck_assert(fabs(a.r.t_star - T) <= 1e-12 * T);
      if (total > 0)
        ck_assert_int_le(a.r.iterations, 2);
      memcpy(hint[0], a.be, in.E);
    }
    eplb_split_destroy(s);
    eplb_split_destroy(ref);
  }
  ck_assert_uint_gt(sub_runs, 30); /* the steps on a cut's part ran */
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("lp-probe");
  TCase *t = tcase_create("probe");
  tcase_set_timeout(t, 120);
  tcase_add_loop_test(t, update_in_place_matches_build, 0, 2);
  tcase_add_loop_test(t, warm_probe_answers_like_a_solve, 0, 2);
  tcase_add_loop_test(t, tstar_matches_a_solve, 0, 2);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
