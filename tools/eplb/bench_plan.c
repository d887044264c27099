/* eplb bench plan: planning time and quality of every policy on synthetic
 * DeepSeek-V3-shaped loads and the bundled reference cases. */
#include "bench.h"
#include "cli.h"

#include <eplb/plan.h>
#include <eplb/split.h>

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Zipf(1)-like popularity, a random permutation of ranks per layer, 131072
 * tokens per layer with multiplicative noise (deterministic). */
static void synth_loads(eplb_loads_t *ld, uint64_t seed) {
  uint32_t E = ld->num_experts;
  uint32_t *perm = malloc(E * sizeof *perm);
  double h = 0;
  for (uint32_t e = 0; e < E; e++)
    h += 1.0 / (e + 1);
  for (uint32_t l = 0; l < ld->num_layers; l++) {
    for (uint32_t e = 0; e < E; e++)
      perm[e] = e;
    for (uint32_t e = E; e-- > 1;) {
      uint32_t j = (uint32_t)(bench_rand(&seed) % (e + 1)), t = perm[e];
      perm[e] = perm[j];
      perm[j] = t;
    }
    for (uint32_t e = 0; e < E; e++) {
      double noise = 0.8 + 0.4 * (double)(bench_rand(&seed) >> 11) / 9007199254740992.0;
      ld->values[(size_t)l * E + perm[e]] = floor(131072.0 * noise / (h * (e + 1)));
    }
  }
  free(perm);
}

typedef struct {
  const char *name;
  eplb_plan_policy_t policy;
  int keep;
  uint32_t groups;
} variant_t;

/* What every variant of the default benchmark shares. */
typedef struct {
  uint32_t threads;
  eplb_plan_shares_t shares; /* balanced's (--shares): exact or uniform */
} knobs_t;

/* Runs one variant `repeat` times; *ms gets the median, *plan the last plan. */
static int bench_variant(const eplb_loads_t *ld, const variant_t *v, uint32_t G, uint32_t N,
                         uint32_t R, uint32_t repeat, const knobs_t *k, double *ms,
                         eplb_plan_t **plan) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.threads = k->threads;
  o.policy = v->policy;
  if (v->policy == EPLB_POLICY_BALANCED)
    o.shares = k->shares;
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  o.num_groups = v->groups;
  o.keep_groups_on_nodes = v->keep;
  double *t = calloc(repeat, sizeof *t);
  if (!t)
    return CLI_FAIL;
  *plan = NULL;
  for (uint32_t i = 0; i < repeat; i++) {
    eplb_plan_destroy(*plan);
    *plan = NULL;
    double t0 = bench_now();
    eplb_status_t st = eplb_plan_create(ld, &o, plan);
    t[i] = (bench_now() - t0) * 1e3;
    if (st) {
      free(t);
      return cli_status_error(st, v->name);
    }
  }
  qsort(t, repeat, sizeof *t, bench_cmp_double);
  *ms = t[repeat / 2];
  free(t);
  return CLI_OK;
}

/* Benchmarks one instance; appends a JSON object to out. */
static int bench_instance(const char *name, const eplb_loads_t *ld, uint32_t G, uint32_t N,
                          uint32_t R, uint32_t K, uint32_t repeat, const knobs_t *k, json_t *out,
                          int json) {
  variant_t vs[] = {{"deepseek", EPLB_POLICY_DEEPSEEK, 0, K},
                    {"balanced", EPLB_POLICY_BALANCED, 0, K},
                    {"deepseek-global", EPLB_POLICY_DEEPSEEK, 0, 1},
                    {"balanced-keep-groups", EPLB_POLICY_BALANCED, 1, K}};
  size_t nv = sizeof vs / sizeof vs[0];
  eplb_plan_t *plans[4] = {0};
  double ms[4] = {0};
  int rc = CLI_OK;
  json_t *inst = json_object(), *pol = json_object();
  json_object_set_new(inst, "instance", json_string(name));
  json_object_set_new(inst, "layers", json_integer(ld->num_layers));
  json_object_set_new(inst, "experts", json_integer(ld->num_experts));
  json_object_set_new(inst, "gpus", json_integer(G));
  json_object_set_new(inst, "nodes", json_integer(N));
  json_object_set_new(inst, "replicas", json_integer(R));
  json_object_set_new(inst, "groups", json_integer(K));
  for (size_t i = 0; i < nv && !rc; i++) {
    if (vs[i].keep && (K % N || K < N))
      continue; /* DeepSeek's hierarchical comparison needs groups % nodes == 0 */
    rc = bench_variant(ld, &vs[i], G, N, R, repeat, k, &ms[i], &plans[i]);
    if (rc)
      break;
    eplb_plan_summary_t s;
    eplb_plan_summary(plans[i], &s);
    json_t *p = json_object();
    json_object_set_new(p, "median_ms", json_real(ms[i]));
    json_object_set_new(p, "mean_balancedness", json_real(s.mean_balancedness));
    json_object_set_new(p, "min_balancedness", json_real(s.min_balancedness));
    json_object_set_new(p, "mean_max_over_lower_bound", json_real(s.mean_ratio));
    json_object_set_new(p, "max_max_over_lower_bound", json_real(s.max_ratio));
    json_object_set_new(p, "fallback_layers", json_integer(s.fallback_layers));
    json_object_set_new(pol, vs[i].name, p);
    if (!json)
      printf("%-22s %-22s %9.2f ms  balancedness mean %.4f min %.4f  max/lb mean %.5f max "
             "%.5f\n",
             name, vs[i].name, ms[i], s.mean_balancedness, s.min_balancedness, s.mean_ratio,
             s.max_ratio);
  }
  if (!rc) {
    /* Balanced vs DeepSeek on the same inputs, per layer (max GPU load). */
    uint32_t worse = 0, worse_keep = 0;
    double ratio_sum = 0, ratio_keep = 0;
    for (uint32_t l = 0; l < ld->num_layers; l++) {
      eplb_plan_layer_metrics_t d, b;
      eplb_plan_layer_metrics(plans[0], l, &d);
      eplb_plan_layer_metrics(plans[1], l, &b);
      worse += b.max_load > d.max_load * (1 + 1e-9);
      ratio_sum += d.max_load > 0 ? b.max_load / d.max_load : 1;
      if (plans[3]) {
        eplb_plan_layer_metrics(plans[3], l, &b);
        worse_keep += b.max_load > d.max_load * (1 + 1e-9);
        ratio_keep += d.max_load > 0 ? b.max_load / d.max_load : 1;
      }
    }
    json_object_set_new(inst, "policies", pol);
    pol = NULL;
    json_object_set_new(inst, "balanced_worse_layers", json_integer(worse));
    json_object_set_new(inst, "mean_balanced_over_deepseek", json_real(ratio_sum / ld->num_layers));
    if (plans[3]) {
      json_object_set_new(inst, "keep_groups_worse_layers", json_integer(worse_keep));
      json_object_set_new(inst, "mean_keep_groups_over_deepseek",
                          json_real(ratio_keep / ld->num_layers));
    }
    if (!json)
      printf("%-22s balanced/deepseek max load: mean %.5f, worse on %u layers; keep-groups/"
             "deepseek: mean %.5f, worse on %u layers\n",
             name, ratio_sum / ld->num_layers, worse, plans[3] ? ratio_keep / ld->num_layers : NAN,
             worse_keep);
    json_array_append_new(out, inst);
    inst = NULL;
  }
  json_decref(inst);
  json_decref(pol);
  for (size_t i = 0; i < nv; i++)
    eplb_plan_destroy(plans[i]);
  return rc;
}

/* The bundled DeepSeek EPLB reference cases (cases.json under dir). */
static int bench_reference(const char *dir, uint32_t repeat, const knobs_t *k, json_t *out,
                           int json) {
  char path[4096];
  snprintf(path, sizeof path, "%s/eplb-reference/cases.json", dir);
  json_error_t err;
  json_t *cases = json_load_file(path, 0, &err);
  if (!cases) {
    fprintf(stderr, "eplb: bench plan: %s: not found, reference cases skipped\n", path);
    return CLI_OK;
  }
  int rc = CLI_OK;
  for (size_t i = 0; i < json_array_size(cases) && !rc; i++) {
    json_t *c = json_array_get(cases, i);
    const char *file = json_string_value(json_object_get(c, "loads"));
    if (!file)
      continue; /* the inline README example */
    snprintf(path, sizeof path, "%s/eplb-reference/%s", dir, file);
    eplb_loads_t *ld = NULL;
    if ((rc = cli_read_loads(path, 0, UINT64_MAX, &ld)))
      break;
    rc = bench_instance(json_string_value(json_object_get(c, "case")), ld,
                        (uint32_t)json_integer_value(json_object_get(c, "num_gpus")),
                        (uint32_t)json_integer_value(json_object_get(c, "num_nodes")),
                        (uint32_t)json_integer_value(json_object_get(c, "num_replicas")),
                        (uint32_t)json_integer_value(json_object_get(c, "num_groups")), repeat, k,
                        out, json);
    eplb_loads_destroy(ld);
  }
  json_decref(cases);
  return rc;
}

/* ---- bench plan --policy incremental ------------------------------------ */

/* Drifts loads in place like a serving window that moved on: multiplicative
 * noise in [0.7, 1.3) and three popularity swaps per layer. */
static void drift_loads(eplb_loads_t *ld, uint64_t seed) {
  uint32_t E = ld->num_experts;
  for (uint32_t l = 0; l < ld->num_layers; l++) {
    double *v = ld->values + (size_t)l * E;
    for (uint32_t e = 0; e < E; e++)
      v[e] = floor(v[e] * (0.7 + 0.6 * (double)(bench_rand(&seed) >> 11) / 9007199254740992.0));
    for (int k = 0; k < 3; k++) {
      uint32_t x = (uint32_t)(bench_rand(&seed) % E), y = (uint32_t)(bench_rand(&seed) % E);
      double t = v[x];
      v[x] = v[y];
      v[y] = t;
    }
  }
}

/* Sum over layers of the max GPU load of p's placements re-split for ld. */
static int resplit_sum(const eplb_plan_t *p, const eplb_loads_t *ld, double *out) {
  uint32_t R = eplb_plan_num_slots(p), G = eplb_plan_num_gpus(p);
  eplb_split_t *sp = NULL;
  double *sh = malloc(R * sizeof *sh), *gl = malloc(G * sizeof *gl);
  eplb_status_t st = sh && gl ? eplb_split_create(NULL, &sp) : EPLB_ENOMEM;
  *out = 0;
  for (uint32_t l = 0; l < ld->num_layers && !st; l++) {
    eplb_split_problem_t pb = {.num_experts = ld->num_experts,
                               .num_gpus = G,
                               .num_slots = R,
                               .phy2log = (const uint32_t *)(const void *)eplb_plan_phy2log(p, l),
                               .slots_per_gpu = eplb_plan_slots_per_gpu(p)};
    eplb_split_result_t res = {.share = sh, .gpu_load = gl};
    st = eplb_split_solve(sp, &pb, ld->values + (size_t)l * ld->num_experts, &res);
    *out += res.max_load;
  }
  eplb_split_destroy(sp);
  free(sh);
  free(gl);
  return st ? cli_status_error(st, "bench plan: re-split") : CLI_OK;
}

static double sum_max_load(const eplb_plan_t *p) {
  double s = 0;
  for (uint32_t l = 0; l < eplb_plan_num_layers(p); l++) {
    eplb_plan_layer_metrics_t m;
    eplb_plan_layer_metrics(p, l, &m);
    s += m.max_load;
  }
  return s;
}

/* Balanced plan on ld (the plan in force), then ld drifted `rounds` times;
 * times incremental from that plan on the drifted loads and compares it
 * with the current placement re-split and a full balanced replan. */
static int bench_incremental(eplb_loads_t *ld, uint32_t G, uint32_t N, uint32_t R, uint32_t repeat,
                             uint32_t threads, uint32_t budget, double weight, uint32_t rounds,
                             int json) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.threads = threads;
  o.policy = EPLB_POLICY_BALANCED;
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  eplb_plan_t *from = NULL, *inc = NULL, *bal = NULL;
  double *t = calloc(repeat, sizeof *t), cur = 0, bal_ms = 0;
  int rc = CLI_OK;
  eplb_status_t st = t ? eplb_plan_create(ld, &o, &from) : EPLB_ENOMEM;
  if (st) {
    rc = cli_status_error(st, "bench plan: balanced");
    goto done;
  }
  for (uint32_t k = 0; k < rounds; k++)
    drift_loads(ld, 77 + k);
  double t0 = bench_now();
  if ((st = eplb_plan_create(ld, &o, &bal))) {
    rc = cli_status_error(st, "bench plan: balanced");
    goto done;
  }
  bal_ms = (bench_now() - t0) * 1e3;
  o.policy = EPLB_POLICY_INCREMENTAL;
  o.from = from;
  o.move_budget = budget;
  o.move_weight = weight;
  for (uint32_t i = 0; i < repeat; i++) {
    eplb_plan_destroy(inc);
    inc = NULL;
    t0 = bench_now();
    st = eplb_plan_create(ld, &o, &inc);
    t[i] = bench_now() - t0;
    if (st) {
      rc = cli_status_error(st, "bench plan: incremental");
      goto done;
    }
  }
  qsort(t, repeat, sizeof *t, bench_cmp_double);
  if ((rc = resplit_sum(from, ld, &cur)))
    goto done;
  double inc_sum = sum_max_load(inc), bal_sum = sum_max_load(bal);
  double best = bal_sum < cur ? bal_sum : cur;
  double gain = cur > best ? (cur - inc_sum) / (cur - best) : 1.0;
  eplb_plan_summary_t s;
  eplb_plan_summary(inc, &s);
  double moved = (double)s.slots_moved / ((double)ld->num_layers * R);
  if (json) {
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string("plan-incremental"));
    json_object_set_new(root, "layers", json_integer(ld->num_layers));
    json_object_set_new(root, "experts", json_integer(ld->num_experts));
    json_object_set_new(root, "gpus", json_integer(G));
    json_object_set_new(root, "nodes", json_integer(N));
    json_object_set_new(root, "replicas", json_integer(R));
    json_object_set_new(root, "move_budget", json_integer(budget));
    json_object_set_new(root, "move_weight", json_real(weight));
    json_object_set_new(root, "repeat", json_integer(repeat));
    json_object_set_new(root, "threads", json_integer(threads));
    json_object_set_new(root, "median_seconds", json_real(t[repeat / 2]));
    json_object_set_new(root, "balanced_seconds", json_real(bal_ms / 1e3));
    json_object_set_new(root, "gain_fraction", json_real(gain));
    json_object_set_new(root, "moved_fraction", json_real(moved));
    json_object_set_new(root, "mean_balancedness", json_real(s.mean_balancedness));
    rc = cli_print_json(root);
  } else {
    printf("incremental %ux%u, %u GPUs, %u slots, budget %u, weight %g, %u thread(s): %.4f s "
           "per plan (median of %u; balanced %.4f s), gain fraction %.4f, slots moved fraction "
           "%.4f (sum of max loads: current %.0f, incremental %.0f, balanced %.0f)\n",
           ld->num_layers, ld->num_experts, G, R, budget, weight, threads, t[repeat / 2], repeat,
           bal_ms / 1e3, gain, moved, cur, inc_sum, bal_sum);
  }
done:
  free(t);
  eplb_plan_destroy(from);
  eplb_plan_destroy(inc);
  eplb_plan_destroy(bal);
  return rc;
}

/* ---- bench plan --scale ------------------------------------------------- */

enum { SP_DEEPSEEK, SP_BALANCED, SP_UNIFORM, SP_INCREMENTAL, SP_LOCALITY, SP_COUNT };
static const char *const scale_policy_names[SP_COUNT] = {"deepseek", "balanced", "uniform",
                                                         "incremental", "locality"};

typedef struct {
  uint32_t layers, repeat, threads; /* threads: the threaded column (0 = online cores) */
  uint32_t *experts, *gpus, *slots; /* slots per GPU */
  uint32_t n_experts, n_gpus, n_slots;
  unsigned policies; /* bit i: scale_policy_names[i] */
  double budget_s;   /* rows not started within it are skipped */
  int json;
} scale_cfg_t;

typedef struct {
  uint32_t E, G, S;
} scale_row_t;

static int scale_row_cmp(const void *a, const void *b) {
  const scale_row_t *x = a, *y = b;
  uint64_t wx = (uint64_t)x->G * x->G * x->S, wy = (uint64_t)y->G * y->G * y->S;
  if (wx != wy)
    return wx < wy ? -1 : 1;
  return (x->E > y->E) - (x->E < y->E);
}

/* Median wall ms of `repeat` plans; *plan keeps the last one. */
static eplb_status_t scale_time(const eplb_loads_t *ld, const eplb_plan_options_t *o,
                                uint32_t repeat, double *ms, eplb_plan_t **plan) {
  double *t = calloc(repeat, sizeof *t);
  if (!t)
    return EPLB_ENOMEM;
  eplb_status_t st = EPLB_OK;
  for (uint32_t i = 0; i < repeat && !st; i++) {
    eplb_plan_destroy(*plan);
    *plan = NULL;
    double t0 = bench_now();
    st = eplb_plan_create(ld, o, plan);
    t[i] = (bench_now() - t0) * 1e3;
  }
  *ms = st ? NAN : bench_quantile(t, repeat, 0.5);
  free(t);
  return st;
}

/* One synthetic trace per expert count (with top-k rows, for locality's
 * co-activation): loads of steps [0, 4) make the plan in force for
 * incremental, every policy plans steps [4, 8). */
typedef struct {
  uint32_t E;
  char path[4096];
  eplb_trace_t *tr;
  eplb_loads_t *old_loads, *loads;
} scale_input_t;

static eplb_status_t scale_input(scale_input_t *in, uint32_t L, uint32_t E) {
  const char *dir = getenv("TMPDIR");
  snprintf(in->path, sizeof in->path, "%s/eplb-bench-scale-%ld-%u.eplbt",
           dir && *dir ? dir : "/tmp", (long)getpid(), E);
  in->E = E;
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = L;
  so.num_experts = E;
  so.topk = E >= 16 ? 8 : E / 2;
  so.num_steps = 8;
  so.tokens_per_step = 2048;
  so.num_ranks = 0; /* rows spread round-robin over whatever cluster */
  so.seed = 16 + E;
  eplb_status_t st = eplb_synth_generate(in->path, &so);
  if (!st)
    st = eplb_trace_open(in->path, NULL, &in->tr);
  if (!st)
    st = eplb_loads_create(L, E, &in->old_loads);
  if (!st)
    st = eplb_loads_create(L, E, &in->loads);
  if (!st)
    st = eplb_trace_window_sum(in->tr, 0, 4, in->old_loads->values);
  if (!st)
    st = eplb_trace_window_sum(in->tr, 4, 8, in->loads->values);
  return st;
}

static void scale_input_free(scale_input_t *in) {
  eplb_trace_close(in->tr);
  eplb_loads_destroy(in->old_loads);
  eplb_loads_destroy(in->loads);
  if (in->path[0])
    remove(in->path);
}

/* Times every selected policy on one row; appends JSON rows to out. */
static int scale_row(const scale_cfg_t *cfg, scale_input_t *in, const scale_row_t *row,
                     double deadline, json_t *out, json_t *skipped) {
  uint32_t E = row->E, G = row->G, R = G * row->S, N = G >= 8 ? G / 8 : 1;
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  eplb_plan_t *from = NULL, *plan = NULL;
  eplb_cluster_t *cl = NULL;
  eplb_coact_t *co = NULL;
  eplb_status_t st = EPLB_OK;
  const char *what = "balanced";
  if (cfg->policies & (1u << SP_INCREMENTAL)) {
    o.threads = cfg->threads;
    st = eplb_plan_create(in->old_loads, &o, &from);
  }
  if (!st && (cfg->policies & (1u << SP_LOCALITY))) {
    what = "locality inputs";
    st = eplb_cluster_create_uniform(N, G / N, &cl);
    if (!st)
      st = eplb_coact_from_trace(in->tr, 4, 8, cl, &co);
  }
  for (int p = 0; p < SP_COUNT && !st; p++) {
    if (!(cfg->policies & (1u << p)))
      continue;
    what = scale_policy_names[p];
    /* Checked per policy: one policy of one row can take minutes (locality's
     * transport LP at 128 GPUs x 16 slots: seconds per layer). */
    if (bench_now() > deadline) {
      json_array_append_new(skipped, json_pack("{s:i,s:i,s:i,s:s}", "experts", E, "gpus", G,
                                               "slots_per_gpu", row->S, "policy", what));
      if (!cfg->json)
        printf("%7u %5u %9u %6u  %-11s skipped: over the --budget of %g s\n", E, G, row->S, R, what,
               cfg->budget_s);
      continue;
    }
    eplb_plan_options_t q = o;
    q.policy = p == SP_DEEPSEEK      ? EPLB_POLICY_DEEPSEEK
               : p == SP_INCREMENTAL ? EPLB_POLICY_INCREMENTAL
               : p == SP_LOCALITY    ? EPLB_POLICY_LOCALITY
                                     : EPLB_POLICY_BALANCED;
    q.shares = p == SP_UNIFORM ? EPLB_SHARES_UNIFORM : EPLB_SHARES_EXACT;
    q.from = from;
    q.cluster = cl;
    q.coact = co;
    double ms1 = 0, msn = 0;
    q.threads = 1;
    if ((st = scale_time(in->loads, &q, cfg->repeat, &ms1, &plan)))
      break;
    eplb_plan_summary_t sum;
    eplb_plan_summary(plan, &sum);
    q.threads = cfg->threads;
    if ((st = scale_time(in->loads, &q, cfg->repeat, &msn, &plan)))
      break;
    double L = cfg->layers;
    if (cfg->json) {
      json_t *j = json_object();
      json_object_set_new(j, "experts", json_integer(E));
      json_object_set_new(j, "gpus", json_integer(G));
      json_object_set_new(j, "slots_per_gpu", json_integer(row->S));
      json_object_set_new(j, "replicas", json_integer(R));
      json_object_set_new(j, "policy", json_string(scale_policy_names[p]));
      json_object_set_new(j, "ms_per_layer_1_thread", cli_real(ms1 / L));
      json_object_set_new(j, "ms_per_layer_threaded", cli_real(msn / L));
      json_object_set_new(j, "mean_max_over_lower_bound", cli_real(sum.mean_ratio));
      json_object_set_new(j, "max_max_over_lower_bound", cli_real(sum.max_ratio));
      json_array_append_new(out, j);
    } else {
      printf("%7u %5u %9u %6u  %-11s %11.3f %11.3f %7.2fx %11.6f %11.6f\n", E, G, row->S, R,
             scale_policy_names[p], ms1 / L, msn / L, msn > 0 ? ms1 / msn : 0.0, sum.mean_ratio,
             sum.max_ratio);
      fflush(stdout);
    }
  }
  eplb_plan_destroy(plan);
  eplb_plan_destroy(from);
  eplb_coact_destroy(co);
  eplb_cluster_destroy(cl);
  if (st) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "bench plan --scale: %s, %u experts, %u GPUs, %u slots", what, E, G,
             R);
    return cli_status_error(st, ctx);
  }
  return CLI_OK;
}

static int bench_scale(const scale_cfg_t *cfg) {
  size_t nrows = 0, cap = (size_t)cfg->n_experts * cfg->n_gpus * cfg->n_slots;
  scale_row_t *rows = calloc(cap ? cap : 1, sizeof *rows);
  scale_input_t *ins = calloc(cfg->n_experts, sizeof *ins);
  json_t *out = json_array(), *skipped = json_array();
  int rc = CLI_OK;
  if (!rows || !ins || !out || !skipped) {
    rc = cli_status_error(EPLB_ENOMEM, "bench plan --scale");
    goto done;
  }
  /* Rows the planner accepts, smallest work (G^2 S) first: the budget cuts
   * the largest ones. */
  for (uint32_t i = 0; i < cfg->n_experts; i++)
    for (uint32_t j = 0; j < cfg->n_gpus; j++)
      for (uint32_t k = 0; k < cfg->n_slots; k++) {
        uint64_t R = (uint64_t)cfg->gpus[j] * cfg->slots[k];
        if (R >= cfg->experts[i] && R <= EPLB_MAX_SLOTS && R * cfg->gpus[j] <= EPLB_MAX_PLAN_WORK)
          rows[nrows++] = (scale_row_t){cfg->experts[i], cfg->gpus[j], cfg->slots[k]};
      }
  qsort(rows, nrows, sizeof *rows, scale_row_cmp);
  if (!cfg->json) {
    printf("plan scale: %u layers per instance, median of %u, threaded column: %u threads "
           "(0 = online cores: %ld); synthetic zipf-like trace, top-8\n",
           cfg->layers, cfg->repeat, cfg->threads, sysconf(_SC_NPROCESSORS_ONLN));
    printf("%7s %5s %9s %6s  %-11s %11s %11s %8s %11s %11s\n", "experts", "gpus", "slots/gpu",
           "slots", "policy", "ms/layer 1t", "ms/layer Nt", "speedup", "max/LB mean", "max/LB max");
  }
  double t0 = bench_now();
  for (size_t r = 0; r < nrows && !rc; r++) {
    if (bench_now() - t0 > cfg->budget_s) {
      json_array_append_new(skipped,
                            json_pack("{s:i,s:i,s:i,s:s}", "experts", rows[r].E, "gpus", rows[r].G,
                                      "slots_per_gpu", rows[r].S, "policy", "all"));
      if (!cfg->json)
        printf("%7u %5u %9u %6u  skipped: over the --budget of %g s\n", rows[r].E, rows[r].G,
               rows[r].S, rows[r].G * rows[r].S, cfg->budget_s);
      continue;
    }
    uint32_t i = 0;
    while (cfg->experts[i] != rows[r].E)
      i++;
    if (!ins[i].tr) {
      eplb_status_t st = scale_input(&ins[i], cfg->layers, rows[r].E);
      if (st) {
        rc = cli_status_error(st, "bench plan --scale: synthetic trace");
        break;
      }
    }
    rc = scale_row(cfg, &ins[i], &rows[r], t0 + cfg->budget_s, out, skipped);
  }
  if (!rc && cfg->json) {
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string("plan-scale"));
    json_object_set_new(root, "layers", json_integer(cfg->layers));
    json_object_set_new(root, "repeat", json_integer(cfg->repeat));
    json_object_set_new(root, "threads", json_integer(cfg->threads));
    json_object_set_new(root, "budget_seconds", cli_real(cfg->budget_s));
    json_object_set_new(root, "rows", out);
    json_object_set_new(root, "skipped", skipped);
    out = skipped = NULL;
    rc = cli_print_json(root);
  }
done:
  for (uint32_t i = 0; ins && i < cfg->n_experts; i++)
    scale_input_free(&ins[i]);
  free(ins);
  free(rows);
  json_decref(out);
  json_decref(skipped);
  return rc;
}

int cli_bench_plan(int argc, char **argv) {
  static const struct option opts[] = {{"layers", required_argument, NULL, 'L'},
                                       {"experts", required_argument, NULL, 'E'},
                                       {"gpus", required_argument, NULL, 'G'},
                                       {"nodes", required_argument, NULL, 'N'},
                                       {"groups", required_argument, NULL, 'K'},
                                       {"replicas", required_argument, NULL, 'R'},
                                       {"repeat", required_argument, NULL, 'r'},
                                       {"samples", required_argument, NULL, 's'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"policy", required_argument, NULL, 'p'},
                                       {"move-budget", required_argument, NULL, 'b'},
                                       {"move-weight", required_argument, NULL, 'w'},
                                       {"drift", required_argument, NULL, 'd'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"scale", no_argument, NULL, 'S'},
                                       {"scale-experts", required_argument, NULL, 1},
                                       {"scale-gpus", required_argument, NULL, 2},
                                       {"scale-slots", required_argument, NULL, 3},
                                       {"scale-policies", required_argument, NULL, 4},
                                       {"budget", required_argument, NULL, 5},
                                       {"shares", required_argument, NULL, 6},
                                       {NULL, 0, NULL, 0}};
  uint32_t L = 58, E = 256, G = 32, N = 4, K = 8, R = 288, repeat = 5;
  uint32_t budget = 0, rounds = 1;
  double weight = 0.005;
  int incremental = 0, scale = 0, layers_given = 0, repeat_given = 0;
  uint32_t threads = 1, *lists[3] = {NULL, NULL, NULL}, nlist[3] = {0, 0, 0};
  static const char *const list_opt[3] = {"--scale-experts", "--scale-gpus", "--scale-slots"};
  unsigned policies = (1u << SP_COUNT) - 1;
  double scale_budget = 120;
  eplb_plan_shares_t shares = EPLB_SHARES_EXACT;
  const char *samples = getenv("EPLB_SAMPLES");
  int json = 0, c, rc = CLI_OK;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 't':
      if (cli_parse_u32("--threads", optarg, &threads))
        return CLI_BADINPUT;
      if (threads > EPLB_PLAN_MAX_THREADS)
        return cli_usage_error("bench plan: --threads %u: at most %u (0 = online cores)", threads,
                               EPLB_PLAN_MAX_THREADS);
      break;
    case 'S': scale = 1; break;
    case 1:
    case 2:
    case 3:
      free(lists[c - 1]);
      lists[c - 1] = NULL;
      if (cli_parse_u32_list(list_opt[c - 1], optarg, &lists[c - 1], &nlist[c - 1])) {
        rc = CLI_BADINPUT;
        goto out;
      }
      for (uint32_t i = 0; i < nlist[c - 1]; i++)
        if (!lists[c - 1][i]) {
          rc = cli_usage_error("bench plan: %s: sizes must be >= 1", list_opt[c - 1]);
          goto out;
        }
      break;
    case 4: {
      policies = 0;
      char buf[256];
      snprintf(buf, sizeof buf, "%s", optarg);
      for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
           tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < SP_COUNT && strcmp(tok, scale_policy_names[k]))
          k++;
        if (k == SP_COUNT) {
          rc = cli_usage_error("bench plan: --scale-policies: unknown '%s' (deepseek, balanced, "
                               "uniform, incremental, locality)",
                               tok);
          goto out;
        }
        policies |= 1u << k;
      }
      if (!policies) {
        rc = cli_usage_error("bench plan: --scale-policies: none given");
        goto out;
      }
      break;
    }
    case 5:
      if (cli_parse_double("--budget", optarg, &scale_budget)) {
        rc = CLI_BADINPUT;
        goto out;
      }
      if (!(scale_budget >= 0)) {
        rc = cli_usage_error("bench plan: --budget %g must be >= 0 seconds", scale_budget);
        goto out;
      }
      break;
    case 6:
      if (eplb_plan_shares_parse(optarg, &shares) || shares == EPLB_SHARES_ROBUST) {
        rc = cli_usage_error("bench plan: --shares %s: exact or uniform", optarg);
        goto out;
      }
      break;
    case 'L':
      if (cli_parse_u32("--layers", optarg, &L))
        return CLI_BADINPUT;
      layers_given = 1;
      break;
    case 'E':
      if (cli_parse_u32("--experts", optarg, &E))
        return CLI_BADINPUT;
      break;
    case 'G':
      if (cli_parse_u32("--gpus", optarg, &G))
        return CLI_BADINPUT;
      break;
    case 'N':
      if (cli_parse_u32("--nodes", optarg, &N))
        return CLI_BADINPUT;
      break;
    case 'K':
      if (cli_parse_u32("--groups", optarg, &K))
        return CLI_BADINPUT;
      break;
    case 'R':
      if (cli_parse_u32("--replicas", optarg, &R))
        return CLI_BADINPUT;
      break;
    case 'r':
      if (cli_parse_u32("--repeat", optarg, &repeat))
        return CLI_BADINPUT;
      repeat_given = 1;
      break;
    case 's': samples = optarg; break;
    case 'j': json = 1; break;
    case 'p':
      if (strcmp(optarg, "incremental"))
        return cli_usage_error("bench plan: --policy '%s': only incremental (the default "
                               "benchmark covers deepseek and balanced)",
                               optarg);
      incremental = 1;
      break;
    case 'b':
      if (cli_parse_u32("--move-budget", optarg, &budget))
        return CLI_BADINPUT;
      break;
    case 'w':
      if (cli_parse_double("--move-weight", optarg, &weight))
        return CLI_BADINPUT;
      if (!(weight >= 0))
        return cli_usage_error("bench plan: --move-weight %g must be >= 0", weight);
      break;
    case 'd':
      if (cli_parse_u32("--drift", optarg, &rounds))
        return CLI_BADINPUT;
      break;
    case 'h':
      fputs("usage: eplb bench plan [--layers 58] [--experts 256] [--gpus 32] [--nodes 4]\n"
            "                       [--groups 8] [--replicas 288] [--repeat 5]\n"
            "                       [--samples DIR] [--threads 1] [--shares exact|uniform]\n"
            "                       [--json]\n"
            "Median time per call (all layers, --threads) and quality of deepseek and\n"
            "balanced on synthetic zipf loads and the bundled DeepSeek EPLB reference cases;\n"
            "--shares uniform plans balanced for the even split vLLM, SGLang and DeepSeek's\n"
            "arrays serve (the per-layer comparison with deepseek is then like for like).\n"
            "       eplb bench plan --scale [--scale-experts 64,256,512]\n"
            "                       [--scale-gpus 8,32,128,512,1024] [--scale-slots 2,8,16]\n"
            "                       [--scale-policies deepseek,balanced,uniform,incremental,\n"
            "                       locality] [--layers 4] [--repeat 3] [--threads 0]\n"
            "                       [--budget 120] [--json]\n"
            "Growth table: per instance that fits (slots >= experts) and policy, median ms\n"
            "per layer with one thread and with --threads (0 = online cores), and max/LB;\n"
            "instances run smallest first; a policy not started within --budget seconds\n"
            "is skipped (listed), so a run takes about the budget plus one measurement.\n"
            "--threads N (default 1; 0 = online cores) sets the planner's threads of the\n"
            "other benchmarks.\n"
            "       eplb bench plan --policy incremental [sizes] [--move-budget N]\n"
            "                       [--move-weight W] [--drift ROUNDS] [--repeat 5] [--json]\n"
            "Median time of an incremental replan from the balanced plan of the zipf loads\n"
            "to those loads drifted ROUNDS times (default 1), its fraction of a full\n"
            "replan's gain and the fraction of slots it moves.\n",
            stdout);
      return CLI_OK;
    default: return CLI_BADINPUT;
    }
  }
  if (optind != argc) {
    rc = cli_usage_error("bench plan: unexpected argument '%s'", argv[optind]);
    goto out;
  }
  if (!L || !E || !G || !N || !K || !R || !repeat || L > 4096 || E > 65535) {
    rc = cli_usage_error("bench plan: sizes must be >= 1 (layers <= 4096, experts <= 65535)");
    goto out;
  }
  if (scale) {
    static uint32_t dexp[] = {64, 256, 512}, dgpu[] = {8, 32, 128, 512, 1024}, dslot[] = {2, 8, 16};
    scale_cfg_t cfg = {.layers = layers_given ? L : 4,
                       .repeat = repeat_given ? repeat : 3,
                       .threads = threads == 1 ? 0 : threads,
                       .experts = lists[0] ? lists[0] : dexp,
                       .gpus = lists[1] ? lists[1] : dgpu,
                       .slots = lists[2] ? lists[2] : dslot,
                       .n_experts = lists[0] ? nlist[0] : 3,
                       .n_gpus = lists[1] ? nlist[1] : 5,
                       .n_slots = lists[2] ? nlist[2] : 3,
                       .policies = policies,
                       .budget_s = scale_budget,
                       .json = json};
    for (uint32_t i = 0; i < cfg.n_experts && !rc; i++)
      if (cfg.experts[i] > EPLB_MAX_EXPERTS)
        rc = cli_usage_error("bench plan: --scale-experts %u: at most %u", cfg.experts[i],
                             EPLB_MAX_EXPERTS);
    if (!rc)
      rc = bench_scale(&cfg);
    goto out;
  }
  eplb_loads_t *ld = NULL;
  eplb_status_t st = eplb_loads_create(L, E, &ld);
  if (st) {
    rc = cli_status_error(st, "bench plan");
    goto out;
  }
  synth_loads(ld, 2024);
  if (incremental) {
    rc = bench_incremental(ld, G, N, R, repeat, threads, budget, weight, rounds, json);
    eplb_loads_destroy(ld);
    goto out;
  }
  json_t *insts = json_array();
  char name[64];
  snprintf(name, sizeof name, "zipf1-%ux%u", L, E);
  knobs_t knobs = {threads, shares};
  rc = bench_instance(name, ld, G, N, R, K, repeat, &knobs, insts, json);
  eplb_loads_destroy(ld);
  if (!rc)
    rc = bench_reference(samples ? samples : "traces/samples", repeat, &knobs, insts, json);
  if (!rc && json) {
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string("plan"));
    json_object_set_new(root, "repeat", json_integer(repeat));
    json_object_set_new(root, "threads", json_integer(threads));
    json_object_set_new(root, "shares", json_string(eplb_plan_shares_str(shares)));
    json_object_set_new(root, "instances", insts);
    insts = NULL;
    rc = cli_print_json(root);
  }
  json_decref(insts);
out:
  for (int i = 0; i < 3; i++)
    free(lists[i]);
  return rc;
}
