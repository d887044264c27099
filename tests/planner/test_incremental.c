/* Incremental suite: the incremental policy (guard, budget, gain on drifting
 * synthetic loads and on the ESFT trace's task switches), the migration diff
 * and schedule, and the CLI (plan --policy incremental, plan diff).
 * argv[1] = eplb binary. */
#include "planner/planner.h"
#include "tests/planner/fixtures.h"
#include "tests/support.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *eplb_bin;

static eplb_plan_t *make_plan(const eplb_loads_t *ld, eplb_plan_policy_t policy, uint32_t G,
                              uint32_t N, uint32_t R, const eplb_plan_t *from, uint32_t budget,
                              double weight) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = policy;
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  o.from = from;
  o.move_budget = budget;
  o.move_weight = weight;
  eplb_plan_t *p = NULL;
  eplb_status_t st = eplb_plan_create(ld, &o, &p);
  ck_assert_msg(st == EPLB_OK, "plan: %s", eplb_error_detail());
  return p;
}

/* Max GPU load of plan's layer l placement with shares re-split for w. */
static double resplit_max(const eplb_plan_t *p, uint32_t l, const double *w) {
  uint32_t R = eplb_plan_num_slots(p), G = eplb_plan_num_gpus(p);
  eplb_split_t *sp = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &sp), EPLB_OK);
  double *sh = malloc(R * sizeof *sh), *gl = malloc(G * sizeof *gl);
  eplb_split_problem_t pb = {.num_experts = eplb_plan_num_experts(p),
                             .num_gpus = G,
                             .num_slots = R,
                             .phy2log = (const uint32_t *)(const void *)eplb_plan_phy2log(p, l),
                             .slots_per_gpu = eplb_plan_slots_per_gpu(p)};
  eplb_split_result_t res = {.share = sh, .gpu_load = gl};
  ck_assert_int_eq(eplb_split_solve(sp, &pb, w, &res), EPLB_OK);
  double mx = res.max_load;
  free(sh);
  free(gl);
  eplb_split_destroy(sp);
  return mx;
}

static uint32_t count_moved(const eplb_plan_t *a, const eplb_plan_t *b, uint32_t l) {
  uint32_t m = 0;
  for (uint32_t r = 0; r < eplb_plan_num_slots(a); r++)
    m += eplb_plan_phy2log(a, l)[r] != eplb_plan_phy2log(b, l)[r];
  return m;
}

typedef struct {
  double cur, incr, bal; /* sums over layers of max loads */
  uint64_t moved, slots;
  uint32_t worse; /* layers where incremental > current re-split */
} gain_t;

/* Plans balanced on `before`, then incremental and balanced on `after`;
 * checks the invariants and accumulates the figures into *g. */
static void replan(const eplb_loads_t *before, const eplb_loads_t *after, uint32_t G, uint32_t N,
                   uint32_t R, uint32_t budget, double weight, gain_t *g) {
  eplb_plan_t *cur = make_plan(before, EPLB_POLICY_BALANCED, G, N, R, NULL, 0, 0);
  eplb_plan_t *inc = make_plan(after, EPLB_POLICY_INCREMENTAL, G, N, R, cur, budget, weight);
  eplb_plan_t *bal = make_plan(after, EPLB_POLICY_BALANCED, G, N, R, NULL, 0, 0);
  fx_check_plan(inc, after, 0);
  uint32_t E = after->num_experts;
  uint64_t total = 0;
  for (uint32_t l = 0; l < after->num_layers; l++) {
    const double *w = after->values + (size_t)l * E;
    eplb_plan_layer_metrics_t mi, mb;
    eplb_plan_layer_metrics(inc, l, &mi);
    eplb_plan_layer_metrics(bal, l, &mb);
    double c = resplit_max(cur, l, w);
    ck_assert_msg(mi.max_load <= c * (1 + 1e-9), "layer %u: incremental %g > current %g", l,
                  mi.max_load, c);
    uint32_t m = count_moved(cur, inc, l);
    ck_assert_uint_eq(m, mi.slots_moved);
    if (budget)
      ck_assert_uint_le(m, budget);
    g->cur += c;
    g->incr += mi.max_load;
    g->bal += mb.max_load < c ? mb.max_load : c;
    g->moved += m;
    g->slots += R;
    g->worse += mi.max_load > c * (1 + 1e-9);
    total += m;
  }
  eplb_plan_summary_t s;
  eplb_plan_summary(inc, &s);
  ck_assert_uint_eq(s.slots_moved, total);
  ck_assert_int_eq(eplb_plan_policy(inc), EPLB_POLICY_INCREMENTAL);
  eplb_plan_destroy(cur);
  eplb_plan_destroy(inc);
  eplb_plan_destroy(bal);
}

static double gain_fraction(const gain_t *g) {
  return g->cur > g->bal ? (g->cur - g->incr) / (g->cur - g->bal) : 1.0;
}

static double moved_fraction(const gain_t *g) {
  return g->slots ? (double)g->moved / (double)g->slots : 0;
}

/* Random loads, then a drifted copy: multiplicative noise and a few swaps of
 * popularity. */
static void drifted(uint64_t *st, const double *a, double *b, uint32_t L, uint32_t E) {
  for (uint32_t l = 0; l < L; l++) {
    for (uint32_t e = 0; e < E; e++)
      b[(size_t)l * E + e] = floor(a[(size_t)l * E + e] * (0.7 + 0.6 * fx_uniform(st)));
    for (int k = 0; k < 3; k++) {
      uint32_t x = (uint32_t)(fx_rand(st) % E), y = (uint32_t)(fx_rand(st) % E);
      double t = b[(size_t)l * E + x];
      b[(size_t)l * E + x] = b[(size_t)l * E + y];
      b[(size_t)l * E + y] = t;
    }
  }
}

START_TEST(guard_budget_and_unlimited) {
  uint64_t seed = 11;
  uint32_t L = 6, E = 32, G = 8, R = 48;
  double *a = fx_random_loads(&seed, L, E, 1);
  double *b = malloc((size_t)L * E * sizeof *b);
  drifted(&seed, a, b, L, E);
  eplb_loads_t la = {L, E, a}, lb = {L, E, b};
  static const uint32_t budgets[] = {1, 2, 3, 5, 8, 0};
  for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
    gain_t g = {0};
    replan(&la, &lb, G, 2, R, budgets[i], budgets[i] ? 0.005 : 0, &g);
    ck_assert_uint_eq(g.worse, 0);
    if (!budgets[i]) {
      /* Unlimited budget, free moves: at least the balanced replan. */
      ck_assert_msg(g.incr <= g.bal * (1 + 1e-9), "unlimited: %g > balanced %g", g.incr, g.bal);
    }
  }
  /* Same loads: nothing to gain, nothing moves. */
  eplb_plan_t *cur = make_plan(&la, EPLB_POLICY_BALANCED, G, 2, R, NULL, 0, 0);
  eplb_plan_t *inc = make_plan(&la, EPLB_POLICY_INCREMENTAL, G, 2, R, cur, 0, 0.005);
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t mc, mi;
    eplb_plan_layer_metrics(cur, l, &mc);
    eplb_plan_layer_metrics(inc, l, &mi);
    ck_assert(mi.max_load <= mc.max_load * (1 + 1e-9));
  }
  eplb_plan_destroy(cur);
  eplb_plan_destroy(inc);
  free(a);
  free(b);
}
END_TEST

START_TEST(bad_options) {
  uint64_t seed = 3;
  double *a = fx_random_loads(&seed, 2, 16, 0);
  eplb_loads_t la = {2, 16, a};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  ck_assert_double_eq(o.move_weight, 0.005);
  ck_assert_uint_eq(o.move_budget, 0);
  ck_assert_ptr_null(o.from);
  o.policy = EPLB_POLICY_INCREMENTAL;
  o.num_gpus = 4;
  o.num_replicas = 20;
  eplb_plan_t *p = (eplb_plan_t *)1;
  ck_assert_int_eq(eplb_plan_create(&la, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "current plan"));
  eplb_plan_t *cur = make_plan(&la, EPLB_POLICY_BALANCED, 4, 1, 20, NULL, 0, 0);
  o.from = cur;
  o.num_replicas = 24;
  ck_assert_int_eq(eplb_plan_create(&la, &o, &p), EPLB_EINVAL);
  o.num_replicas = 20;
  o.num_nodes = 2;
  ck_assert_int_eq(eplb_plan_create(&la, &o, &p), EPLB_EINVAL);
  o.num_nodes = 1;
  o.move_weight = -1;
  ck_assert_int_eq(eplb_plan_create(&la, &o, &p), EPLB_EINVAL);
  o.move_weight = 0;
  eplb_loads_t one = {1, 16, a};
  ck_assert_int_eq(eplb_plan_create(&one, &o, &p), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_create(&la, &o, &p), EPLB_OK);
  eplb_plan_destroy(p);
  eplb_plan_policy_t pol;
  ck_assert_int_eq(eplb_plan_policy_parse("incremental", &pol), EPLB_OK);
  ck_assert_int_eq(pol, EPLB_POLICY_INCREMENTAL);
  ck_assert_str_eq(eplb_plan_policy_str(EPLB_POLICY_INCREMENTAL), "incremental");
  /* Allocation failures: an error, never a crash or a leak. */
  for (long n = 0;; n++) {
    eplb_test_alloc_fail_after(n);
    eplb_status_t st = eplb_plan_create(&la, &o, &p);
    eplb_test_alloc_reset();
    if (st == EPLB_OK) {
      eplb_plan_destroy(p);
      break;
    }
    ck_assert_int_eq(st, EPLB_ENOMEM);
  }
  eplb_plan_destroy(cur);
  free(a);
}
END_TEST

/* The objective the policy minimises, J = max load + price x slots moved
 * (price = move_weight x mean GPU load), never exceeds the current
 * placement re-split (the guard, 0 moves), layer by layer; at the bench's
 * shape (256 experts, 64 GPUs x 5 slots) the walk keeps most of a full
 * replan's gain while moving few slots, with and without a move budget. */
START_TEST(objective_never_above_guard) {
  uint64_t seed = 29;
  uint32_t L = 6, E = 256, G = 64, R = 320;
  double weight = 0.005;
  double *a = fx_random_loads(&seed, L, E, 0);
  double *b = malloc((size_t)L * E * sizeof *b);
  drifted(&seed, a, b, L, E);
  eplb_loads_t la = {L, E, a}, lb = {L, E, b};
  eplb_plan_t *cur = make_plan(&la, EPLB_POLICY_BALANCED, G, 1, R, NULL, 0, 0);
  eplb_plan_t *bal = make_plan(&lb, EPLB_POLICY_BALANCED, G, 1, R, NULL, 0, 0);
  static const uint32_t budgets[] = {0, 2};
  for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
    eplb_plan_t *inc = make_plan(&lb, EPLB_POLICY_INCREMENTAL, G, 1, R, cur, budgets[i], weight);
    fx_check_plan(inc, &lb, 0);
    gain_t g = {0};
    for (uint32_t l = 0; l < L; l++) {
      const double *w = b + (size_t)l * E;
      double total = 0;
      for (uint32_t e = 0; e < E; e++)
        total += w[e];
      double price = weight * total / G, guard = resplit_max(cur, l, w);
      eplb_plan_layer_metrics_t mi, mb;
      eplb_plan_layer_metrics(inc, l, &mi);
      eplb_plan_layer_metrics(bal, l, &mb);
      uint32_t m = count_moved(cur, inc, l);
      ck_assert_uint_eq(m, mi.slots_moved);
      double J = mi.max_load + price * m;
      ck_assert_msg(J <= guard * (1 + 1e-9), "budget %u layer %u: J %g above the guard's %g",
                    budgets[i], l, J, guard);
      if (budgets[i])
        ck_assert_uint_le(m, budgets[i]);
      g.cur += guard;
      g.incr += mi.max_load;
      g.bal += mb.max_load < guard ? mb.max_load : guard;
      g.moved += m;
      g.slots += R;
    }
    fprintf(stderr, "# bench shape, budget %u: gain fraction %.4f, moved fraction %.4f\n",
            budgets[i], gain_fraction(&g), moved_fraction(&g));
    /* The drift swaps hot and cold experts: re-replicating the few that
     * became hot recovers most of the gain (0.94 and 0.93 when written).
     * Since balanced also tries the even-share placement re-split (#35),
     * the full replan gains 1.6 times as much here (balanced alone left
     * some layers over 1% above the bound), which under 1% of the slots
     * moved cannot reach: 0.58 and 0.53 of it. */
    ck_assert_double_ge(gain_fraction(&g), 0.5);
    ck_assert_double_le(moved_fraction(&g), 0.02);
    eplb_plan_destroy(inc);
  }
  eplb_plan_destroy(cur);
  eplb_plan_destroy(bal);
  free(a);
  free(b);
}
END_TEST

/* Busiest GPU of layer l of p when every replica gets 1/c (what vLLM,
 * SGLang and DeepSeek's arrays serve). */
static double even_max(const eplb_plan_t *p, uint32_t l, const double *w) {
  uint32_t R = eplb_plan_num_slots(p), E = eplb_plan_num_experts(p), G = eplb_plan_num_gpus(p);
  const int32_t *x = eplb_plan_phy2log(p, l);
  uint32_t *c = calloc(E, sizeof *c), S = R / G;
  for (uint32_t r = 0; r < R; r++)
    c[x[r]]++;
  double mx = 0;
  for (uint32_t g = 0; g < G; g++) {
    double t = 0;
    for (uint32_t r = g * S; r < (g + 1) * S; r++)
      t += w[x[r]] / c[x[r]];
    mx = t > mx ? t : mx;
  }
  free(c);
  return mx;
}

/* Served by even shares (the vLLM plugin with vLLM's current map), the
 * incremental policy scores its candidates as served: never above keeping
 * the map, within the budget, 1/c shares, an expert that stays on a GPU in
 * its slot (a changed slot is one the GPU really lost), the same bytes for
 * any thread count, and most of a fresh plan's gain within 16 slots. */
START_TEST(even_shares_as_served) {
  uint64_t seed = 31;
  uint32_t L = 4, E = 64, G = 16, R = 96, S = R / G;
  double weight = 0.005;
  double *a = fx_random_loads(&seed, L, E, 0);
  double *b = malloc((size_t)L * E * sizeof *b);
  drifted(&seed, a, b, L, E);
  eplb_loads_t la = {L, E, a}, lb = {L, E, b};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = G, o.num_replicas = R, o.shares = EPLB_SHARES_UNIFORM;
  eplb_plan_t *cur = NULL, *fresh = NULL;
  ck_assert_int_eq(eplb_plan_create(&la, &o, &cur), EPLB_OK);
  ck_assert_int_eq(eplb_plan_create(&lb, &o, &fresh), EPLB_OK);
  o.policy = EPLB_POLICY_INCREMENTAL, o.from = cur, o.move_weight = weight;
  static const uint32_t budgets[] = {1, 2, 4, 16, 0};
  double keep = 0, got16 = 0, best = 0;
  for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
    eplb_plan_t *inc = NULL, *inc2 = NULL;
    o.move_budget = budgets[i], o.threads = 1;
    ck_assert_int_eq(eplb_plan_create(&lb, &o, &inc), EPLB_OK);
    o.threads = 2;
    ck_assert_int_eq(eplb_plan_create(&lb, &o, &inc2), EPLB_OK);
    for (uint32_t l = 0; l < L; l++) {
      const double *w = b + (size_t)l * E, *sh = eplb_plan_share(inc, l);
      const int32_t *x = eplb_plan_phy2log(inc, l), *y = eplb_plan_phy2log(cur, l);
      ck_assert_mem_eq(x, eplb_plan_phy2log(inc2, l), R * sizeof *x);
      double total = 0;
      for (uint32_t e = 0; e < E; e++)
        total += w[e];
      uint32_t m = count_moved(cur, inc, l), lost = 0;
      double J = even_max(inc, l, w) + weight * total / G * m, k = even_max(cur, l, w);
      ck_assert_msg(J <= k * (1 + 1e-12), "budget %u layer %u: J %g above keeping %g", budgets[i],
                    l, J, k);
      if (budgets[i])
        ck_assert_uint_le(m, budgets[i]);
      for (uint32_t r = 0; r < R; r++) {
        uint32_t c = 0;
        for (uint32_t q = 0; q < R; q++)
          c += x[q] == x[r];
        ck_assert_double_eq_tol(sh[r], 1.0 / c, 1e-15);
      }
      for (uint32_t g = 0; g < G; g++) { /* slots a GPU lost: cur's replicas it no longer holds */
        bool taken[16] = {false};
        for (uint32_t s = g * S; s < (g + 1) * S; s++) {
          uint32_t q = g * S;
          while (q < (g + 1) * S && (taken[q - g * S] || x[q] != y[s]))
            q++;
          if (q < (g + 1) * S)
            taken[q - g * S] = true;
          else
            lost++;
        }
      }
      ck_assert_uint_eq(m, lost);
      if (budgets[i] == 16)
        got16 += even_max(inc, l, w), keep += k, best += even_max(fresh, l, w);
    }
    eplb_plan_destroy(inc);
    eplb_plan_destroy(inc2);
  }
  /* 16 of 96 slots take more than half of the way to the fresh plan. */
  ck_assert_msg(keep - got16 > 0.5 * (keep - best), "keep %g, 16 slots %g, fresh %g", keep, got16,
                best);
  eplb_plan_destroy(cur);
  eplb_plan_destroy(fresh);
  free(a);
  free(b);
}
END_TEST

/* Drifting synthetic traces: plan on one window, re-plan on the next. */
START_TEST(synthetic_drift) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), "drift.eplbt");
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = 8;
  so.num_experts = 64;
  so.topk = 6;
  so.num_steps = 64;
  so.tokens_per_step = 256;
  so.drift = 0.9;
  so.seed = 7;
  ck_assert_int_eq(eplb_synth_generate(path, &so), EPLB_OK);
  gain_t g = {0};
  for (uint64_t w = 0; w + 32 <= 64; w += 16) {
    eplb_loads_t *a = NULL, *b = NULL;
    ck_assert_int_eq(eplb_loads_read(path, w, w + 16, &a), EPLB_OK);
    ck_assert_int_eq(eplb_loads_read(path, w + 16, w + 32, &b), EPLB_OK);
    replan(a, b, 8, 2, 80, 0, 0.005, &g);
    eplb_loads_destroy(a);
    eplb_loads_destroy(b);
  }
  fprintf(stderr,
          "# synthetic drift: gain fraction %.4f, moved fraction %.4f (cur %.0f incr %.0f "
          "balanced %.0f)\n",
          gain_fraction(&g), moved_fraction(&g), g.cur, g.incr, g.bal);
  ck_assert_double_ge(gain_fraction(&g), 0.9);
  ck_assert_double_le(moved_fraction(&g), 0.25);
}
END_TEST

/* ESFT trace: balanced plan on one task's window, incremental on the next. */
START_TEST(esft_task_switches) {
  char npy[1024], csv[1024];
  snprintf(npy, sizeof npy, "%s/esft-dsv2lite/topk_ids.npy", eplb_test_samples());
  snprintf(csv, sizeof csv, "%s/esft-dsv2lite/samples.csv", eplb_test_samples());
  const char *trace = eplb_test_path(eplb_test_tmpdir(), "esft.eplbt");
  eplb_trace_convert_options_t co;
  eplb_trace_convert_options_default(&co);
  co.from = EPLB_TRACE_FORMAT_NPY_TOPK;
  co.num_experts = 64;
  co.tokens_per_step = 256;
  ck_assert_int_eq(eplb_trace_convert(npy, trace, &co), EPLB_OK);
  /* Task boundaries (first token of each task) from samples.csv. */
  FILE *f = fopen(csv, "r");
  ck_assert_ptr_nonnull(f);
  char line[256], task[64], prev[64] = "";
  uint64_t first[16], nt = 0, end = 0;
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  while (fgets(line, sizeof line, f)) {
    unsigned long long sample, tok, n;
    ck_assert_int_eq(sscanf(line, "%llu,%63[^,],%llu,%llu", &sample, task, &tok, &n), 4);
    if (strcmp(task, prev) && nt < 16) {
      first[nt++] = tok;
      snprintf(prev, sizeof prev, "%s", task);
    }
    end = tok + n;
  }
  fclose(f);
  ck_assert_uint_ge(nt, 2);
  first[nt] = end;
  gain_t g = {0};
  for (uint64_t t = 0; t + 1 < nt; t++) {
    /* Whole steps inside each task. */
    uint64_t a0 = (first[t] + 255) / 256, a1 = first[t + 1] / 256;
    uint64_t b0 = (first[t + 1] + 255) / 256, b1 = first[t + 2] / 256;
    eplb_loads_t *a = NULL, *b = NULL;
    ck_assert_int_eq(eplb_loads_read(trace, a0, a1, &a), EPLB_OK);
    ck_assert_int_eq(eplb_loads_read(trace, b0, b1, &b), EPLB_OK);
    gain_t one = {0};
    replan(a, b, 8, 2, 80, 0, 0.005, &one);
    fprintf(stderr, "# esft switch %llu: gain fraction %.4f moved fraction %.4f\n",
            (unsigned long long)t, gain_fraction(&one), moved_fraction(&one));
    g.cur += one.cur;
    g.incr += one.incr;
    g.bal += one.bal;
    g.moved += one.moved;
    g.slots += one.slots;
    eplb_loads_destroy(a);
    eplb_loads_destroy(b);
  }
  fprintf(stderr, "# esft task switches: gain fraction %.4f, moved fraction %.4f\n",
          gain_fraction(&g), moved_fraction(&g));
  ck_assert_double_ge(gain_fraction(&g), 0.9);
  ck_assert_double_le(moved_fraction(&g), 0.25);
}
END_TEST

/* ---- migration ------------------------------------------------------------ */

/* A plan of the given shape with the given phy2log (one layer), via a file. */
static eplb_plan_t *plan_of(uint32_t G, uint32_t N, uint32_t S, uint32_t E, const int *p2l,
                            const char *name) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "{\"format\":\"eplb-plan\",\"version\":1,\"num_layers\":1,\"num_logical_experts\":%u,"
          "\"num_gpus\":%u,\"num_nodes\":%u,\"slots_per_gpu\":%u,\"layers\":[{\"phy2log\":[",
          E, G, N, S);
  for (uint32_t r = 0; r < G * S; r++)
    fprintf(f, "%s%d", r ? "," : "", p2l[r]);
  fprintf(f, "]}]}\n");
  fclose(f);
  eplb_plan_t *p = NULL;
  eplb_status_t st = eplb_plan_read(path, &p);
  ck_assert_msg(st == EPLB_OK, "%s", eplb_error_detail());
  return p;
}

/* Checks every move of from -> to: one per changed slot, a source holding
 * the expert in from, the cheapest link available, and rounds of whole
 * layers in order that respect the budgets and are greedy (a round closes
 * only when the next layer does not fit). */
static void check_moves_lpr(const eplb_plan_t *from, const eplb_plan_t *to, uint64_t eb,
                            uint64_t staging, uint32_t lpr) {
  eplb__migration_t *mv = NULL;
  size_t n = 0;
  uint32_t rounds = 0, L = eplb_plan_num_layers(from), R = eplb_plan_num_slots(from);
  uint32_t G = eplb_plan_num_gpus(from), gpn = G / eplb_plan_num_nodes(from);
  ck_assert_int_eq(eplb__migration_plan(from, to, 0, L, eb, staging, lpr, &mv, &n, &rounds),
                   EPLB_OK);
  uint32_t *gpu = malloc(R * sizeof *gpu);
  const uint32_t *spg = eplb_plan_slots_per_gpu(from);
  for (uint32_t g = 0, r = 0; g < G; g++)
    for (uint32_t k = 0; k < spg[g]; k++)
      gpu[r++] = g;
  uint64_t per_round = staging ? staging / eb : UINT64_MAX;
  uint32_t *recv = calloc((size_t)G * (rounds + 1), sizeof *recv);
  uint32_t *layer_recv = calloc((size_t)G * L, sizeof *layer_recv);
  uint32_t *layers_in = calloc(rounds + 1, sizeof *layers_in);
  uint32_t *first_layer = calloc(rounds + 1, sizeof *first_layer);
  int32_t *round_of = malloc(L * sizeof *round_of);
  size_t k = 0, changed = 0;
  uint32_t last_round = 0;
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *o = eplb_plan_phy2log(from, l), *t = eplb_plan_phy2log(to, l);
    round_of[l] = -1;
    for (uint32_t s = 0; s < R; s++) {
      if (o[s] == t[s])
        continue;
      changed++;
      ck_assert_uint_lt(k, n);
      const eplb__migration_t *m = &mv[k++];
      ck_assert_uint_eq(m->layer, l);
      ck_assert_uint_eq(m->dst_slot, s);
      ck_assert_uint_eq(m->dst_gpu, gpu[s]);
      ck_assert_uint_eq(m->expert, (uint32_t)t[s]);
      ck_assert_int_eq(o[m->src_slot], t[s]);
      ck_assert_uint_eq(m->src_gpu, gpu[m->src_slot]);
      uint32_t best = 2;
      for (uint32_t r = 0; r < R; r++)
        if (o[r] == t[s]) {
          uint32_t c = gpu[r] == gpu[s] ? 0 : gpu[r] / gpn == gpu[s] / gpn ? 1 : 2;
          best = c < best ? c : best;
        }
      ck_assert_uint_eq(m->link, best);
      ck_assert_uint_lt(m->round, rounds);
      if (round_of[l] < 0) { /* the layer's first move: the layer joins its round */
        ck_assert_uint_ge(m->round, last_round);
        if (!layers_in[m->round])
          first_layer[m->round] = l;
        layers_in[m->round]++;
        round_of[l] = (int32_t)m->round;
        last_round = m->round;
      }
      ck_assert_int_eq((int32_t)m->round, round_of[l]); /* whole layers */
      recv[(size_t)m->dst_gpu * (rounds + 1) + m->round]++;
      layer_recv[(size_t)l * G + m->dst_gpu]++;
    }
  }
  ck_assert_uint_eq(k, n);
  ck_assert_uint_eq(changed, n);
  for (uint32_t q = 0; q < rounds; q++) {
    ck_assert_uint_ge(layers_in[q], 1);
    ck_assert_uint_le(layers_in[q], lpr);
    for (uint32_t g = 0; layers_in[q] > 1 && g < G; g++)
      ck_assert_uint_le(recv[(size_t)g * (rounds + 1) + q], per_round);
    if (q + 1 < rounds && layers_in[q] < lpr) {
      /* Greedy: the next round's first layer did not fit in this one. */
      int over = 0;
      for (uint32_t g = 0; g < G; g++)
        over |=
            recv[(size_t)g * (rounds + 1) + q] + layer_recv[(size_t)first_layer[q + 1] * G + g] >
            per_round;
      ck_assert(over);
    }
  }
  eplb_plan_diff_stats_t ds;
  eplb_plan_diff_options_t dopt;
  eplb_plan_diff_options_default(&dopt);
  dopt.expert_bytes = eb;
  dopt.staging_bytes = staging;
  dopt.layers_per_round = lpr;
  ck_assert_int_eq(eplb_plan_diff_schedule(from, to, &dopt, &ds), EPLB_OK);
  ck_assert_uint_eq(ds.slots_moved, n);
  ck_assert_uint_eq(ds.moves[0] + ds.moves[1] + ds.moves[2], n);
  ck_assert_uint_eq(ds.bytes[2], ds.moves[2] * eb);
  ck_assert_uint_eq(ds.rounds, rounds);
  free(gpu);
  free(recv);
  free(layer_recv);
  free(layers_in);
  free(first_layer);
  free(round_of);
  eplb__free(mv);
}

static void check_moves(const eplb_plan_t *from, const eplb_plan_t *to, uint64_t eb,
                        uint64_t staging) {
  check_moves_lpr(from, to, eb, staging, UINT32_MAX);
  check_moves_lpr(from, to, eb, staging, 1);
  check_moves_lpr(from, to, eb, staging, 3);
}

START_TEST(diff_sources_and_rounds) {
  /* 4 GPUs on 2 nodes, 3 slots each, 8 experts. */
  static const int a[] = {0, 1, 2, 3, 4, 0, 5, 6, 1, 7, 2, 3};
  /* Slot 2 takes 0 (held on its GPU), slot 4 takes 2 (on GPU 0, same node,
   * and GPU 3), slot 7 takes 4 (only on GPU 1: across nodes), slot 9 takes 6
   * (GPU 2: same node), slot 10 takes 7 (its own GPU). */
  static const int b[] = {0, 1, 0, 3, 2, 0, 5, 4, 1, 6, 7, 3};
  eplb_plan_t *pa = plan_of(4, 2, 3, 8, a, "ma.json"), *pb = plan_of(4, 2, 3, 8, b, "mb.json");
  eplb__migration_t *mv = NULL;
  size_t n = 0;
  uint32_t rounds = 0;
  ck_assert_int_eq(eplb__migration_plan(pa, pb, 0, 1, 100, 0, 4, &mv, &n, &rounds), EPLB_OK);
  ck_assert_uint_eq(n, 5);
  ck_assert_uint_eq(rounds, 1);
  ck_assert_uint_eq(mv[0].dst_slot, 2);
  ck_assert_uint_eq(mv[0].src_slot, 0);
  ck_assert_uint_eq(mv[0].link, EPLB_LINK_SAME_GPU);
  ck_assert_uint_eq(mv[1].dst_slot, 4);
  ck_assert_uint_eq(mv[1].src_slot, 2);
  ck_assert_uint_eq(mv[1].link, EPLB_LINK_INTRA_NODE);
  ck_assert_uint_eq(mv[2].dst_slot, 7);
  ck_assert_uint_eq(mv[2].src_slot, 4);
  ck_assert_uint_eq(mv[2].link, EPLB_LINK_INTER_NODE);
  ck_assert_uint_eq(mv[3].dst_slot, 9);
  ck_assert_uint_eq(mv[3].src_slot, 7);
  ck_assert_uint_eq(mv[3].link, EPLB_LINK_INTRA_NODE);
  ck_assert_uint_eq(mv[4].dst_slot, 10);
  ck_assert_uint_eq(mv[4].src_slot, 9);
  ck_assert_uint_eq(mv[4].link, EPLB_LINK_SAME_GPU);
  eplb__free(mv);
  check_moves(pa, pb, 100, 0);
  check_moves(pa, pb, 100, 100);
  check_moves(pa, pb, 100, 250);
  eplb_plan_diff_stats_t ds;
  ck_assert_int_eq(eplb_plan_diff(pa, pb, 100, 100, &ds), EPLB_OK);
  ck_assert_uint_eq(ds.slots_moved, 5);
  ck_assert_uint_eq(ds.moves[EPLB_LINK_SAME_GPU], 2);
  ck_assert_uint_eq(ds.moves[EPLB_LINK_INTRA_NODE], 2);
  ck_assert_uint_eq(ds.moves[EPLB_LINK_INTER_NODE], 1);
  ck_assert_uint_eq(ds.bytes[EPLB_LINK_INTER_NODE], 100);
  /* A round holds one layer at least: GPU 3 receives its two experts in one
   * round, above the 100-byte budget (the layer cannot switch half-moved). */
  ck_assert_uint_eq(ds.rounds, 1);
  ck_assert_uint_eq(ds.max_bytes_in_round, 200);
  ck_assert_uint_eq(ds.layers_changed, 1);
  ck_assert_uint_eq(ds.max_layer_moved, 5);
  /* Spread senders: two slots want expert 0, held on GPUs 0 and 1 (other node from 2, 3). */
  static const int c[] = {0, 1, 2, 3, 0, 4, 5, 6, 7, 5, 6, 7};
  static const int d[] = {0, 1, 2, 3, 0, 4, 0, 6, 7, 5, 0, 7};
  eplb_plan_t *pc = plan_of(4, 2, 3, 8, c, "mc.json"), *pd = plan_of(4, 2, 3, 8, d, "md.json");
  ck_assert_int_eq(eplb__migration_plan(pc, pd, 0, 1, 1, 0, 4, &mv, &n, &rounds), EPLB_OK);
  ck_assert_uint_eq(n, 2);
  ck_assert_uint_ne(mv[0].src_gpu, mv[1].src_gpu);
  eplb__free(mv);
  /* Same plan: nothing. Bad input. */
  ck_assert_int_eq(eplb_plan_diff(pa, pa, 1, 0, &ds), EPLB_OK);
  ck_assert_uint_eq(ds.slots_moved, 0);
  ck_assert_uint_eq(ds.rounds, 0);
  ck_assert_int_eq(eplb_plan_diff(pa, pb, 0, 0, &ds), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_diff(pa, pb, 100, 99, &ds), EPLB_EINVAL);
  ck_assert_int_eq(eplb_plan_diff(pa, NULL, 100, 0, &ds), EPLB_EINVAL);
  static const int e6[] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3};
  eplb_plan_t *pe = plan_of(6, 2, 2, 8, e6, "me.json");
  ck_assert_int_eq(eplb_plan_diff(pa, pe, 100, 0, &ds), EPLB_ESHAPE);
  ck_assert_int_eq(eplb_plan_diff(pa, pb, UINT64_MAX / 2 + 1, 0, &ds), EPLB_ERANGE);
  eplb_plan_destroy(pa);
  eplb_plan_destroy(pb);
  eplb_plan_destroy(pc);
  eplb_plan_destroy(pd);
  eplb_plan_destroy(pe);
}
END_TEST

/* The schedule on real re-plans: random plans of the same shape. */
START_TEST(diff_on_replans) {
  uint64_t seed = 5;
  uint32_t L = 4, E = 32, G = 8, R = 48;
  double *a = fx_random_loads(&seed, L, E, 0), *b = fx_random_loads(&seed, L, E, 0);
  eplb_loads_t la = {L, E, a}, lb = {L, E, b};
  eplb_plan_t *pa = make_plan(&la, EPLB_POLICY_BALANCED, G, 4, R, NULL, 0, 0);
  eplb_plan_t *pb = make_plan(&lb, EPLB_POLICY_BALANCED, G, 4, R, NULL, 0, 0);
  eplb_plan_t *pi = make_plan(&lb, EPLB_POLICY_INCREMENTAL, G, 4, R, pa, 4, 0.001);
  check_moves(pa, pb, 1000, 0);
  check_moves(pa, pb, 1000, 1000);
  check_moves(pa, pb, 1000, 3500);
  check_moves(pa, pi, 7, 14);
  eplb_plan_diff_stats_t ds;
  ck_assert_int_eq(eplb_plan_diff(pa, pi, 1, 0, &ds), EPLB_OK);
  ck_assert_uint_le(ds.max_layer_moved, 4);
  eplb_plan_summary_t s;
  eplb_plan_summary(pi, &s);
  ck_assert_uint_eq(ds.slots_moved, s.slots_moved);
  eplb_plan_destroy(pa);
  eplb_plan_destroy(pb);
  eplb_plan_destroy(pi);
  free(a);
  free(b);
}
END_TEST

/* ---- CLI ------------------------------------------------------------------ */

static int run_eplb(const char *const *args) { return eplb_test_run_cli(eplb_bin, args); }

START_TEST(cli_incremental_and_diff) {
  if (!eplb_bin)
    return;
  const char *dir = eplb_test_tmpdir();
  char la[1024], lb[1024], pa[1024], pi[1024], bad[1024];
  snprintf(la, sizeof la, "%s", eplb_test_path(dir, "cli-a.csv"));
  snprintf(lb, sizeof lb, "%s", eplb_test_path(dir, "cli-b.csv"));
  snprintf(pa, sizeof pa, "%s", eplb_test_path(dir, "cli-a.json"));
  snprintf(pi, sizeof pi, "%s", eplb_test_path(dir, "cli-i.json"));
  snprintf(bad, sizeof bad, "%s", eplb_test_path(dir, "cli-bad.json"));
  uint64_t seed = 9;
  double *a = fx_random_loads(&seed, 3, 16, 0), *b = fx_random_loads(&seed, 3, 16, 0);
  eplb_loads_t A = {3, 16, a}, B = {3, 16, b};
  ck_assert_int_eq(eplb_loads_write_csv(&A, la), EPLB_OK);
  ck_assert_int_eq(eplb_loads_write_csv(&B, lb), EPLB_OK);
  const char *p1[] = {"plan", "--loads",    la,   "--gpus", "4", "--nodes",
                      "2",    "--replicas", "24", "-o",     pa,  NULL};
  ck_assert_int_eq(run_eplb(p1), 0);
  const char *p2[] = {
      "plan", "--policy",      "incremental", "--from",        pa,      "--loads",
      lb,     "--gpus",        "4",           "--nodes",       "2",     "--replicas",
      "24",   "--move-budget", "3",           "--move-weight", "0.001", "-o",
      pi,     "--json",        NULL};
  ck_assert_int_eq(run_eplb(p2), 0);
  json_error_t err;
  json_t *j = json_load_file(eplb_test_cli_out(), 0, &err);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(json_string_value(json_object_get(j, "policy")), "incremental");
  json_int_t moved = json_integer_value(json_object_get(j, "slots_moved"));
  ck_assert_int_le(moved, 9);
  json_decref(j);
  const char *d[] = {"plan",           "diff", "--from",          pa,     "--plan", pi,
                     "--expert-bytes", "1000", "--staging-bytes", "2000", "--json", NULL};
  ck_assert_int_eq(run_eplb(d), 0);
  j = json_load_file(eplb_test_cli_out(), 0, &err);
  ck_assert_ptr_nonnull(j);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "slots_moved")), moved);
  /* The CLI's rounds are the library's schedule with the same budgets. */
  eplb_plan_t *ppa = NULL, *ppi = NULL;
  ck_assert_int_eq(eplb_plan_read(pa, &ppa), EPLB_OK);
  ck_assert_int_eq(eplb_plan_read(pi, &ppi), EPLB_OK);
  eplb_plan_diff_options_t dopt;
  eplb_plan_diff_options_default(&dopt);
  dopt.expert_bytes = 1000, dopt.staging_bytes = 2000;
  eplb_plan_diff_stats_t ds;
  ck_assert_int_eq(eplb_plan_diff_schedule(ppa, ppi, &dopt, &ds), EPLB_OK);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "rounds")), ds.rounds);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "layers_per_step")), 4);
  json_decref(j);
  const char *d1[] = {"plan",
                      "diff",
                      "--from",
                      pa,
                      "--plan",
                      pi,
                      "--expert-bytes",
                      "1000",
                      "--staging-bytes",
                      "2000",
                      "--layers-per-step",
                      "1",
                      "--json",
                      NULL};
  ck_assert_int_eq(run_eplb(d1), 0);
  j = json_load_file(eplb_test_cli_out(), 0, &err);
  ck_assert_ptr_nonnull(j);
  dopt.layers_per_round = 1;
  ck_assert_int_eq(eplb_plan_diff_schedule(ppa, ppi, &dopt, &ds), EPLB_OK);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "rounds")), ds.rounds);
  ck_assert_int_eq(ds.rounds, ds.layers_changed); /* one layer per round */
  json_decref(j);
  eplb_plan_destroy(ppa);
  eplb_plan_destroy(ppi);
  const char *dt[] = {"plan", "diff", "--from", pa, "--plan", pi, NULL};
  ck_assert_int_eq(run_eplb(dt), 0);
  /* Bad input: exit 2, one line, no output file. */
  struct {
    const char *args[24];
  } bads[] = {
      {{"plan", "--policy", "incremental", "--loads", lb, "--gpus", "4", "--nodes", "2",
        "--replicas", "24", "-o", bad, NULL}},
      {{"plan", "--policy", "incremental", "--from", pa, "--loads", lb, "--gpus", "4", "--replicas",
        "24", "-o", bad, NULL}},
      {{"plan", "--policy", "incremental", "--from", la, "--loads", lb, "--gpus", "4", "--nodes",
        "2", "--replicas", "24", "-o", bad, NULL}},
      {{"plan", "--policy", "incremental", "--from", pa, "--loads", lb, "--gpus", "4", "--nodes",
        "2", "--replicas", "24", "--move-budget", "x", "-o", bad, NULL}},
      {{"plan", "diff", "--from", pa, NULL}},
      {{"plan", "diff", "--from", pa, "--plan", pi, "--expert-bytes", "10", "--staging-bytes", "5",
        NULL}},
      {{"plan", "diff", "--from", la, "--plan", pi, NULL}},
      {{"plan", "diff", "--from", pa, "--plan", pi, "--layers-per-step", "0", NULL}},
  };
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    ck_assert_msg(run_eplb(bads[i].args) == 2, "case %zu", i);
    struct stat sb;
    ck_assert_msg(stat(bad, &sb) != 0, "case %zu left %s", i, bad);
    FILE *f = fopen(eplb_test_cli_err(), "r");
    char line[1024] = {0}, more[8];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_msg(!strncmp(line, "eplb: ", 6), "case %zu: %s", i, line);
    ck_assert_msg(!fgets(more, sizeof more, f), "case %zu: more than one line", i);
    fclose(f);
  }
  free(a);
  free(b);
}
END_TEST

int main(int argc, char **argv) {
  eplb_bin = argc > 1 ? argv[1] : NULL;
  eplb_test_alloc_install();
  Suite *s = suite_create("planner-incremental");
  TCase *tc = tcase_create("incremental");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, guard_budget_and_unlimited);
  tcase_add_test(tc, bad_options);
  tcase_add_test(tc, objective_never_above_guard);
  tcase_add_test(tc, even_shares_as_served);
  tcase_add_test(tc, synthetic_drift);
  tcase_add_test(tc, esft_task_switches);
  tcase_add_test(tc, diff_sources_and_rounds);
  tcase_add_test(tc, diff_on_replans);
  tcase_add_test(tc, cli_incremental_and_diff);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
