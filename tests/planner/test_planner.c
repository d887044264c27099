/* Planner suite: DeepSeek conformance, policy properties, bounds. */
#include "lp/lp.h"
#include "planner/planner.h"
#include "tests/planner/fixtures.h"
#include "tests/support.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Per-GPU loads of a DeepSeek plan in DeepSeek's model (uniform shares), in
 * float32, sorted. */
static void gpu_loads_sorted(const double *w, const int32_t *p2l, const uint32_t *logcnt,
                             uint32_t R, uint32_t G, float *out) {
  uint32_t S = R / G;
  for (uint32_t g = 0; g < G; g++) {
    float s = 0;
    for (uint32_t r = g * S; r < (g + 1) * S; r++)
      s += (float)w[p2l[r]] / (float)logcnt[p2l[r]];
    out[g] = s;
  }
  qsort(out, G, sizeof *out, cmp_float);
}

/* Checks one case; returns the number of layers whose phy2log matched exactly. */
static uint32_t check_case(const char *name, const double *w, uint32_t L, uint32_t E,
                           const int32_t *ref_p2l, const uint32_t *ref_cnt, uint32_t R, uint32_t K,
                           uint32_t N, uint32_t G) {
  eplb_loads_t loads = {L, E, (double *)w};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_DEEPSEEK;
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  o.num_groups = K;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_OK);
  uint32_t *cnt = malloc(E * sizeof *cnt);
  float *a = malloc(G * sizeof *a), *b = malloc(G * sizeof *b);
  uint32_t exact = 0;
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *p2l = eplb_plan_phy2log(p, l);
    eplb_plan_logcnt(p, l, cnt);
    for (uint32_t e = 0; e < E; e++)
      ck_assert_msg(cnt[e] == ref_cnt[(size_t)l * E + e], "%s layer %u expert %u: logcnt %u != %u",
                    name, l, e, cnt[e], ref_cnt[(size_t)l * E + e]);
    gpu_loads_sorted(w + (size_t)l * E, p2l, cnt, R, G, a);
    gpu_loads_sorted(w + (size_t)l * E, ref_p2l + (size_t)l * R, cnt, R, G, b);
    for (uint32_t g = 0; g < G; g++)
      ck_assert_msg(fabsf(a[g] - b[g]) <= 1e-5f * (1 + fabsf(b[g])),
                    "%s layer %u: GPU load #%u %g != %g", name, l, g, a[g], b[g]);
    exact += !memcmp(p2l, ref_p2l + (size_t)l * R, R * sizeof *p2l);
  }
  fx_check_plan(p, &loads, 0);
  eplb_plan_destroy(p);
  free(cnt);
  free(a);
  free(b);
  return exact;
}

static void json_matrix(json_t *m, double *dv, int32_t *iv, uint32_t *uv) {
  size_t k = 0;
  for (size_t i = 0; i < json_array_size(m); i++)
    for (size_t j = 0; j < json_array_size(json_array_get(m, i)); j++, k++) {
      json_int_t x = json_integer_value(json_array_get(json_array_get(m, i), j));
      if (dv)
        dv[k] = (double)x;
      if (iv)
        iv[k] = (int32_t)x;
      if (uv)
        uv[k] = (uint32_t)x;
    }
}

START_TEST(deepseek_matches_every_reference_case) {
  const char *dir = eplb_test_path(eplb_test_samples(), "eplb-reference");
  char dirbuf[1024];
  snprintf(dirbuf, sizeof dirbuf, "%s", dir);
  json_error_t err;
  json_t *cases = json_load_file(eplb_test_path(dirbuf, "cases.json"), 0, &err);
  ck_assert_ptr_nonnull(cases);
  ck_assert_uint_ge(json_array_size(cases), 5);
  uint32_t ncases = 0;
  for (size_t i = 0; i < json_array_size(cases); i++) {
    json_t *c = json_array_get(cases, i);
    const char *name = json_string_value(json_object_get(c, "case"));
    uint32_t R = (uint32_t)json_integer_value(json_object_get(c, "num_replicas"));
    uint32_t K = (uint32_t)json_integer_value(json_object_get(c, "num_groups"));
    uint32_t N = (uint32_t)json_integer_value(json_object_get(c, "num_nodes"));
    uint32_t G = (uint32_t)json_integer_value(json_object_get(c, "num_gpus"));
    double *w;
    int32_t *rp;
    uint32_t *rc, L, E;
    if (json_is_null(json_object_get(c, "loads"))) {
      json_t *wm = json_object_get(c, "weight");
      L = (uint32_t)json_array_size(wm);
      E = (uint32_t)json_array_size(json_array_get(wm, 0));
      w = malloc((size_t)L * E * sizeof *w);
      rp = malloc((size_t)L * R * sizeof *rp);
      rc = malloc((size_t)L * E * sizeof *rc);
      json_matrix(wm, w, NULL, NULL);
      json_matrix(json_object_get(c, "eplb_phy2log"), NULL, rp, NULL);
      json_matrix(json_object_get(c, "eplb_logcnt"), NULL, NULL, rc);
    } else {
      char f[256];
      uint32_t r2, c2;
      w = fx_read_matrix(eplb_test_path(dirbuf, json_string_value(json_object_get(c, "loads"))), &L,
                         &E);
      ck_assert_ptr_nonnull(w);
      snprintf(f, sizeof f, "%s_eplb_phy2log.csv", name);
      double *pd = fx_read_matrix(eplb_test_path(dirbuf, f), &r2, &c2);
      ck_assert_ptr_nonnull(pd);
      ck_assert_uint_eq(r2, L);
      ck_assert_uint_eq(c2, R);
      snprintf(f, sizeof f, "%s_eplb_logcnt.csv", name);
      double *cd = fx_read_matrix(eplb_test_path(dirbuf, f), &r2, &c2);
      ck_assert_ptr_nonnull(cd);
      ck_assert_uint_eq(c2, E);
      rp = malloc((size_t)L * R * sizeof *rp);
      rc = malloc((size_t)L * E * sizeof *rc);
      for (size_t k = 0; k < (size_t)L * R; k++)
        rp[k] = (int32_t)pd[k];
      for (size_t k = 0; k < (size_t)L * E; k++)
        rc[k] = (uint32_t)cd[k];
      free(pd);
      free(cd);
    }
    /* The required conformance is logcnt and the per-GPU load multiset;
     * because the port replays std::sort exactly, phy2log itself matches
     * too, ties included. */
    uint32_t exact = check_case(name, w, L, E, rp, rc, R, K, N, G);
    ck_assert_msg(exact == L, "%s: phy2log identical on %u of %u layers", name, exact, L);
    ncases++;
    free(w);
    free(rp);
    free(rc);
  }
  ck_assert_uint_eq(ncases, json_array_size(cases));
  json_decref(cases);
}
END_TEST

static eplb_plan_t *make(const eplb_loads_t *loads, eplb_plan_policy_t pol, uint32_t G, uint32_t N,
                         uint32_t R, uint32_t K, int keep, const uint32_t *slots) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = pol;
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  o.num_groups = K;
  o.keep_groups_on_nodes = keep;
  o.slots_per_gpu = slots;
  o.time_limit = 2;
  eplb_plan_t *p = NULL;
  eplb_status_t st = eplb_plan_create(loads, &o, &p);
  ck_assert_msg(st == EPLB_OK, "plan: %s", eplb_error_detail());
  return p;
}

static void check_groups_on_nodes(const eplb_plan_t *p, uint32_t K) {
  uint32_t L = eplb_plan_num_layers(p), E = eplb_plan_num_experts(p), G = eplb_plan_num_gpus(p);
  uint32_t N = eplb_plan_num_nodes(p), gs = E / K;
  const uint32_t *slots = eplb_plan_slots_per_gpu(p);
  uint32_t *node_of = malloc(K * sizeof *node_of);
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *p2l = eplb_plan_phy2log(p, l);
    for (uint32_t k = 0; k < K; k++)
      node_of[k] = UINT32_MAX;
    uint32_t r = 0;
    for (uint32_t g = 0; g < G; g++)
      for (uint32_t s = 0; s < slots[g]; s++, r++) {
        uint32_t k = (uint32_t)p2l[r] / gs, n = g / (G / N);
        if (node_of[k] == UINT32_MAX)
          node_of[k] = n;
        ck_assert_msg(node_of[k] == n, "layer %u: group %u on nodes %u and %u", l, k, node_of[k],
                      n);
      }
  }
  free(node_of);
}

START_TEST(balanced_properties_on_random_instances) {
  uint64_t seed = 42;
  for (int trial = 0; trial < 40; trial++) {
    uint32_t N = 1 + fx_rand(&seed) % 3, gpn = 1 + fx_rand(&seed) % 4, G = N * gpn;
    uint32_t K = N * (1 + fx_rand(&seed) % 3), gs = 1 + fx_rand(&seed) % 6, E = K * gs;
    uint32_t S = (E + G - 1) / G + fx_rand(&seed) % 3, R = S * G, L = 3;
    double *w = fx_random_loads(&seed, L, E, trial % 4 == 0);
    if (trial == 7)
      memset(w, 0, (size_t)E * sizeof *w); /* an all-zero layer */
    eplb_loads_t loads = {L, E, w};
    for (int keep = 0; keep < 2; keep++) {
      eplb_plan_t *ds = make(&loads, EPLB_POLICY_DEEPSEEK, G, N, R, K, 0, NULL);
      eplb_plan_t *bal = make(&loads, EPLB_POLICY_BALANCED, G, N, R, K, keep, NULL);
      fx_check_plan(ds, &loads, 0);
      fx_check_plan(bal, &loads, keep ? 2 : 1);
      if (keep)
        check_groups_on_nodes(bal, K);
      for (uint32_t l = 0; l < L; l++) {
        eplb_plan_layer_metrics_t md, mb;
        eplb_plan_layer_metrics(ds, l, &md);
        eplb_plan_layer_metrics(bal, l, &mb);
        ck_assert_msg(mb.max_load <= md.max_load * (1 + 1e-9),
                      "trial %d keep %d layer %u: balanced %g > deepseek %g", trial, keep, l,
                      mb.max_load, md.max_load);
      }
      eplb_plan_destroy(ds);
      eplb_plan_destroy(bal);
    }
    free(w);
  }
}
END_TEST

START_TEST(uneven_slots_and_zero_layers) {
  uint64_t seed = 7;
  uint32_t E = 20, G = 4, slots[4] = {6, 6, 7, 9}, R = 28;
  double *w = fx_random_loads(&seed, 2, E, 1);
  memset(w + E, 0, E * sizeof *w);
  eplb_loads_t loads = {2, E, w};
  eplb_plan_t *p = make(&loads, EPLB_POLICY_BALANCED, G, 2, R, 4, 0, slots);
  fx_check_plan(p, &loads, 1);
  eplb_plan_layer_metrics_t m;
  eplb_plan_layer_metrics(p, 1, &m);
  ck_assert_double_eq(m.max_load, 0);
  ck_assert_double_eq(m.balancedness, 1);
  eplb_plan_destroy(p);
  p = make(&loads, EPLB_POLICY_BALANCED, G, 2, R, 4, 1, slots);
  fx_check_plan(p, &loads, 2);
  check_groups_on_nodes(p, 4);
  eplb_plan_destroy(p);
  /* A node whose slots cannot hold one group cannot keep groups. */
  uint32_t tight[4] = {1, 1, 13, 13};
  eplb_plan_options_t ko;
  eplb_plan_options_default(&ko);
  ko.num_gpus = G;
  ko.num_nodes = 2;
  ko.num_replicas = R;
  ko.num_groups = 4;
  ko.keep_groups_on_nodes = 1;
  ko.slots_per_gpu = tight;
  ck_assert_int_eq(eplb_plan_create(&loads, &ko, &p), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "cannot keep"));
  /* deepseek refuses uneven slots with a clear detail. */
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_DEEPSEEK;
  o.num_gpus = G;
  o.num_replicas = R;
  o.slots_per_gpu = slots;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "deepseek"));
  ck_assert_ptr_null(p);
  free(w);
}
END_TEST

START_TEST(bad_options_and_loads_are_rejected) {
  double w[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  eplb_loads_t loads = {1, 8, w};
  eplb_plan_options_t o;
  eplb_plan_t *p = (eplb_plan_t *)1;
  struct {
    uint32_t G, N, R, K;
    const char *needle;
  } bad[] = {{4, 1, 6, 1, "fewer"},
             {4, 1, 10, 1, "multiple of 4 GPUs"},
             {4, 3, 8, 1, "nodes"},
             {4, 1, 8, 3, "groups"},
             {0, 1, 8, 1, "GPUs"},
             /* the limits of common.h: what the plan reader would refuse, and
              * work out of proportion, are refused before any work */
             {70000, 1, 70000, 1, "70000 GPUs: over the limit of 65536"},
             {16777216, 1, 16777216, 1, "over the limit of 65536"},
             {8, 1, 1000000, 1, "1000000 replicas: over the limit of 65536"},
             {65536, 1, 65536, 1, "4294967296: over the limit of 268435456"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    eplb_plan_options_default(&o);
    o.num_gpus = bad[i].G;
    o.num_nodes = bad[i].N;
    o.num_replicas = bad[i].R;
    o.num_groups = bad[i].K;
    o.keep_groups_on_nodes = bad[i].K > 1; /* groups are only checked where they are used */
    ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(eplb_error_detail(), bad[i].needle), "%s", eplb_error_detail());
  }
  eplb_plan_options_default(&o);
  o.num_gpus = 4;
  o.num_replicas = 8;
  w[3] = -1;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_EFORMAT);
  w[3] = NAN;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "expert 3"));
  w[3] = 4;
  uint32_t slots[4] = {2, 2, 2, 3};
  o.slots_per_gpu = slots;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_EINVAL);
  slots[3] = 2;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_OK);
  eplb_plan_destroy(p);
  eplb_plan_destroy(NULL);
}
END_TEST

/* A one-node layer context over loads w [E]: G GPUs of S slots each
 * (slots [G] and first [G + 1], the caller's, filled here). */
static eplb__layer_ctx_t equal_slots_ctx(const double *w, uint32_t E, uint32_t G, uint32_t S,
                                         uint32_t *slots, uint32_t *first) {
  first[0] = 0;
  for (uint32_t g = 0; g < G; g++) {
    slots[g] = S;
    first[g + 1] = first[g] + S;
  }
  return (eplb__layer_ctx_t){.w = w,
                             .num_experts = E,
                             .num_gpus = G,
                             .num_nodes = 1,
                             .num_slots = G * S,
                             .num_groups = 1,
                             .slots_per_gpu = slots,
                             .gpu_first = first};
}

START_TEST(split_solvers_agree) {
  /* The planner's shares (lp/'s exact solver) reach GLPK's optimum. */
  uint64_t seed = 99;
  for (int t = 0; t < 30; t++) {
    uint32_t G = 2 + fx_rand(&seed) % 6, S = 1 + fx_rand(&seed) % 4, R = G * S;
    uint32_t E = 1 + fx_rand(&seed) % R;
    double *w = fx_random_loads(&seed, 1, E, 1);
    int32_t *p2l = malloc(R * sizeof *p2l);
    uint32_t *slots = malloc(G * sizeof *slots), *first = malloc((G + 1) * sizeof *first);
    for (uint32_t r = 0; r < R; r++)
      p2l[r] = (int32_t)(r < E ? r : fx_rand(&seed) % E);
    for (uint32_t r = R; r-- > 1;) {
      uint32_t j = fx_rand(&seed) % (r + 1);
      int32_t x = p2l[r];
      p2l[r] = p2l[j];
      p2l[j] = x;
    }
    eplb__layer_ctx_t c = equal_slots_ctx(w, E, G, S, slots, first);
    double *s1 = malloc(R * sizeof *s1), *s2 = malloc(R * sizeof *s2), m1, m2;
    ck_assert_int_eq(eplb__split_shares(&c, p2l, s1, &m1), EPLB_EINVAL); /* no solver */
    ck_assert_int_eq(eplb_split_create(NULL, &c.split), EPLB_OK);
    ck_assert_int_eq(eplb__split_shares(&c, p2l, s2, &m2), EPLB_OK);
    double *gl = malloc(G * sizeof *gl);
    eplb_split_problem_t pb = {.num_experts = E,
                               .num_gpus = G,
                               .num_slots = R,
                               .phy2log = (const uint32_t *)(const void *)p2l,
                               .slots_per_gpu = slots};
    eplb_split_result_t res = {.share = s1, .gpu_load = gl};
    ck_assert_int_eq(eplb_split_solve_glpk(c.split, &pb, w, &res), EPLB_OK);
    m1 = res.t_star;
    free(gl);
    eplb_split_destroy(c.split);
    ck_assert_double_eq_tol(m1, m2, 1e-9 * (1 + m2));
    free(w);
    free(p2l);
    free(slots);
    free(first);
    free(s1);
    free(s2);
  }
}
END_TEST

/* The balanced search corrects a set's GPU count for a swap instead of
 * recounting it: every corrected count is the recount. */
START_TEST(set_gpu_count_follows_a_swap) {
  srand(11);
  for (int iter = 0; iter < 400; iter++) {
    uint32_t E = 3 + (uint32_t)(rand() % 12), G = 2 + (uint32_t)(rand() % 8);
    uint32_t S = 1 + (uint32_t)(rand() % 4), R = G * S;
    double *w = malloc(E * sizeof *w);
    int32_t *p2l = malloc(R * sizeof *p2l);
    uint32_t *slots = malloc(G * sizeof *slots), *first = malloc((G + 1) * sizeof *first);
    uint8_t *set = malloc(E);
    for (uint32_t e = 0; e < E; e++) {
      w[e] = rand() % 100;
      set[e] = rand() % 3 == 0;
    }
    for (uint32_t r = 0; r < R; r++)
      p2l[r] = (int32_t)(rand() % E);
    eplb__layer_ctx_t c = equal_slots_ctx(w, E, G, S, slots, first);
    double w0, w1;
    uint32_t ng0, ng1;
    eplb__set_sums(&c, p2l, set, &w0, &ng0);
    uint32_t g = (uint32_t)rand() % G, h = (g + 1 + (uint32_t)rand() % (G - 1)) % G;
    uint32_t a = first[g] + (uint32_t)rand() % S, b = first[h] + (uint32_t)rand() % S;
    int32_t t = p2l[a];
    p2l[a] = p2l[b];
    p2l[b] = t;
    int32_t pa = p2l[a], pb = p2l[b];
    uint32_t got = eplb__set_gpus_after_swap(&c, p2l, set, ng0, g, h, a, b);
    ck_assert(p2l[a] == pa && p2l[b] == pb); /* restored */
    eplb__set_sums(&c, p2l, set, &w1, &ng1);
    ck_assert_uint_eq(got, ng1);
    ck_assert(w0 == w1);
    free(w);
    free(p2l);
    free(slots);
    free(first);
    free(set);
  }
}
END_TEST

/* Whether balanced's search probes a swap (decided by the split handle's
 * record of rejected swaps) changes its speed, never its plan: the same
 * placements and shares to the bit with probing forced on and off. */
START_TEST(probing_does_not_change_plans) {
  uint64_t seed = 11;
  uint32_t L = 6, E = 64, G = 48, R = 96;
  double *w = fx_random_loads(&seed, L, E, 0);
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb__plan_alloc(1, E, G, 4, R, NULL, &p), EPLB_OK);
  int32_t p2l[2][96];
  double sh[2][96];
  uint64_t swaps = 0, forced = UINT64_C(1) << 40;
  uint32_t probed = 0;
  for (uint32_t l = 0; l < L; l++) {
    eplb__layer_ctx_t c;
    eplb__plan_layer_ctx(p, w + (size_t)l * E, &c);
    c.lower_bound = eplb__lower_bound(&c);
    c.improve_iterations = 256;
    for (int on = 0; on < 2; on++) {
      eplb_split_t *sp = NULL;
      ck_assert_int_eq(eplb_split_create(NULL, &sp), EPLB_OK);
      sp->swaps = forced;
      sp->rejected = on ? forced : 0;
      c.split = sp;
      int fallback = 0;
      ck_assert_int_eq(eplb__balanced_layer(&c, p2l[on], sh[on], &fallback), EPLB_OK);
      swaps += sp->swaps - forced;
      if (on)
        probed += sp->snap.e == E; /* a probe took a snapshot */
      else
        ck_assert_uint_eq(sp->snap.e, 0); /* no probe ran */
      eplb_split_destroy(sp);
    }
    ck_assert(!memcmp(p2l[0], p2l[1], sizeof p2l[0]));
    ck_assert(!memcmp(sh[0], sh[1], sizeof sh[0]));
  }
  ck_assert_uint_gt(swaps, 50); /* the searches tried swaps */
  ck_assert_uint_gt(probed, 0);
  eplb_plan_destroy(p);
  free(w);
}
END_TEST

START_TEST(global_balanced_is_near_the_bound) {
  /* Zipf-ish layers, 8 GPUs x 6 slots for 32 experts. */
  uint64_t seed = 5;
  uint32_t L = 16, E = 32, G = 8, R = 48;
  double *w = fx_random_loads(&seed, L, E, 0);
  eplb_loads_t loads = {L, E, w};
  eplb_plan_t *p = make(&loads, EPLB_POLICY_BALANCED, G, 1, R, 1, 0, NULL);
  eplb_plan_summary_t s;
  eplb_plan_summary(p, &s);
  ck_assert_msg(s.mean_ratio <= 1.002, "mean max/lb %g", s.mean_ratio);
  eplb_plan_destroy(p);
  free(w);
}
END_TEST

START_TEST(lower_bound_group_term) {
  /* 4 groups of 2 experts (loads 10, 10, 2, 4), 2 nodes x 2 GPUs: of the 3
   * heaviest groups two share a node, so some node holds >= 10 + 4 over 2
   * GPUs (bound 7) while total/G is 6.5. */
  double w[8] = {5, 5, 5, 5, 1, 1, 2, 2};
  uint32_t slots[4] = {3, 3, 3, 3}, first[5] = {0, 3, 6, 9, 12};
  eplb__layer_ctx_t c = {.w = w,
                         .num_experts = 8,
                         .num_gpus = 4,
                         .num_nodes = 2,
                         .num_slots = 12,
                         .num_groups = 4,
                         .slots_per_gpu = slots,
                         .gpu_first = first,
                         .keep_groups = 1};
  ck_assert_double_eq_tol(eplb__lower_bound(&c), 7.0, 1e-12);
  c.num_nodes = 4;
  c.num_groups = 4;
  ck_assert_double_eq_tol(eplb__lower_bound(&c), 10.0, 1e-12);
  c.keep_groups = 0;
  ck_assert_double_eq_tol(eplb__lower_bound(&c), 26.0 / 4, 1e-12);
}
END_TEST

START_TEST(allocation_failures_are_clean) {
  uint64_t seed = 8;
  double *w = fx_random_loads(&seed, 2, 16, 0);
  eplb_loads_t loads = {2, 16, w};
  const char *path = eplb_test_path(eplb_test_tmpdir(), "alloc.json");
  eplb_test_alloc_install();
  for (int pol = 0; pol < 2; pol++)
    for (int keep = 0; keep < 2; keep++)
      for (long n = 0;; n++) {
        eplb_plan_options_t o;
        eplb_plan_options_default(&o);
        o.policy = (eplb_plan_policy_t)pol;
        o.num_gpus = 4;
        o.num_nodes = 2;
        o.num_replicas = 24;
        o.num_groups = 4;
        o.keep_groups_on_nodes = keep;
        eplb_plan_t *p = NULL, *q = NULL;
        eplb_test_alloc_fail_after(n);
        eplb_status_t st = eplb_plan_create(&loads, &o, &p);
        if (!st)
          st = eplb_plan_write(p, path);
        if (!st)
          st = eplb_plan_read(path, &q);
        eplb_test_alloc_reset();
        ck_assert_msg(st == EPLB_OK || st == EPLB_ENOMEM || st == EPLB_EIO, "n=%ld: %s", n,
                      eplb_status_name(st));
        if (p && !st)
          fx_check_plan(p, &loads, 0);
        eplb_plan_destroy(p);
        eplb_plan_destroy(q);
        if (st == EPLB_OK)
          break;
        ck_assert_int_lt(n, 10000);
      }
  ck_assert_int_eq(eplb_allocator_set(NULL), EPLB_OK);
  free(w);
}
END_TEST

START_TEST(mip_proves_small_instances_and_never_loses) {
  uint64_t seed = 3;
  uint32_t L = 3, E = 32, G = 8, R = 40;
  double *w = fx_random_loads(&seed, L, E, 0);
  eplb_loads_t loads = {L, E, w};
  eplb_plan_t *bal = make(&loads, EPLB_POLICY_BALANCED, G, 1, R, 1, 0, NULL);
  eplb_plan_t *mip = make(&loads, EPLB_POLICY_MIP, G, 1, R, 1, 0, NULL);
  fx_check_plan(mip, &loads, 1);
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t b, m;
    eplb_plan_layer_metrics(bal, l, &b);
    eplb_plan_layer_metrics(mip, l, &m);
    ck_assert(m.max_load <= b.max_load * (1 + 1e-9));
    ck_assert_msg(m.mip_status == EPLB_OK, "layer %u: %s gap %g", l, eplb_status_name(m.mip_status),
                  m.mip_gap);
    ck_assert_double_eq(m.mip_gap, 0);
    /* Optimal means no plan beats it; the certificate still bounds it. */
    ck_assert(m.max_load >= m.lower_bound * (1 - 1e-9));
  }
  eplb_plan_destroy(bal);
  eplb_plan_destroy(mip);
  /* Groups kept on nodes: the MIP keeps them there. */
  mip = make(&loads, EPLB_POLICY_MIP, G, 2, R, 4, 1, NULL);
  fx_check_plan(mip, &loads, 2);
  check_groups_on_nodes(mip, 4);
  eplb_plan_destroy(mip);
  free(w);
}
END_TEST

START_TEST(mip_without_spare_slots_is_near_the_bound) {
  /* R == E: a pure makespan problem, whose LP relaxation is weak; the exact
   * partition search proves the optimum, on the integer bound or a hair
   * above it. */
  uint64_t seed = 17;
  uint32_t L = 2, E = 32, G = 8;
  double *w = malloc(sizeof *w * L * E);
  for (uint32_t i = 0; i < L * E; i++)
    w[i] = (double)(100 + fx_rand(&seed) % 900);
  eplb_loads_t loads = {L, E, w};
  eplb_plan_t *bal = make(&loads, EPLB_POLICY_BALANCED, G, 1, E, 1, 0, NULL);
  eplb_plan_t *mip = make(&loads, EPLB_POLICY_MIP, G, 1, E, 1, 0, NULL);
  fx_check_plan(mip, &loads, 1);
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t b, m;
    eplb_plan_layer_metrics(bal, l, &b);
    eplb_plan_layer_metrics(mip, l, &m);
    double bound = ceil(m.lower_bound - 1e-9); /* integral loads: integral GPU loads */
    ck_assert(m.max_load <= b.max_load * (1 + 1e-9));
    ck_assert_msg(m.max_load <= bound * 1.002, "layer %u: max %g, bound %g", l, m.max_load, bound);
    ck_assert(m.max_load == floor(m.max_load));
    ck_assert(m.max_load >= bound);
    ck_assert_int_eq(m.mip_status, EPLB_OK);
    ck_assert_double_eq(m.mip_gap, 0);
  }
  eplb_plan_destroy(bal);
  eplb_plan_destroy(mip);
  free(w);
}
END_TEST

START_TEST(mip_failures_become_statuses) {
  /* Fewer slots than experts: infeasible, the output is left alone. */
  double w[6] = {5, 4, 3, 2, 1, 1};
  uint32_t slots[2] = {2, 2};
  int32_t p2l[4] = {0, 1, 2, 3};
  double sh[4] = {1, 1, 1, 1}, mx = -1, gap = -1;
  eplb__mip_place_problem_t pb = {
      .num_experts = 6, .num_gpus = 2, .loads = w, .slots_per_gpu = slots, .time_limit = 5};
  ck_assert_int_eq(eplb__mip_place(&pb, p2l, sh, &mx, &gap), EPLB_EINFEASIBLE);
  ck_assert_int_eq(p2l[2], 2);
  ck_assert_double_eq(mx, -1);
  /* A near-zero time limit on a bigger instance: a status, and the layer
   * keeps the balanced plan. */
  uint64_t seed = 17;
  uint32_t L = 1, E = 96, G = 16, R = 128;
  double *lw = fx_random_loads(&seed, L, E, 0);
  eplb_loads_t loads = {L, E, lw};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_MIP;
  o.num_gpus = G;
  o.num_replicas = R;
  o.time_limit = 1e-6;
  eplb_plan_t *p = NULL, *bal = make(&loads, EPLB_POLICY_BALANCED, G, 1, R, 1, 0, NULL);
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_OK);
  fx_check_plan(p, &loads, 1);
  eplb_plan_layer_metrics_t m, b;
  eplb_plan_layer_metrics(p, 0, &m);
  eplb_plan_layer_metrics(bal, 0, &b);
  ck_assert(m.mip_status == EPLB_ETIMEOUT || m.mip_status == EPLB_OK);
  ck_assert(m.max_load <= b.max_load * (1 + 1e-9));
  if (m.mip_status == EPLB_ETIMEOUT)
    ck_assert(m.mip_gap > 0);
  eplb_plan_destroy(p);
  eplb_plan_destroy(bal);
  free(lw);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner");
  TCase *tc = tcase_create("planner");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, deepseek_matches_every_reference_case);
  tcase_add_test(tc, balanced_properties_on_random_instances);
  tcase_add_test(tc, uneven_slots_and_zero_layers);
  tcase_add_test(tc, bad_options_and_loads_are_rejected);
  tcase_add_test(tc, split_solvers_agree);
  tcase_add_test(tc, set_gpu_count_follows_a_swap);
  tcase_add_test(tc, global_balanced_is_near_the_bound);
  tcase_add_test(tc, lower_bound_group_term);
  tcase_add_test(tc, probing_does_not_change_plans);
  tcase_add_test(tc, allocation_failures_are_clean);
  tcase_add_test(tc, mip_proves_small_instances_and_never_loses);
  tcase_add_test(tc, mip_without_spare_slots_is_near_the_bound);
  tcase_add_test(tc, mip_failures_become_statuses);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
