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

/* Loads counted from a sampled trace, as a serving window gives them (what
 * `trace gen --skew zipf:1.0 --steps 20 --tokens-per-step 4096` writes):
 * integer counts with a long tail of small ones and many ties, on which the
 * planner works harder than on the smooth zipf loads above. */
static eplb_status_t sampled_loads(eplb_loads_t *ld, uint32_t topk) {
  char path[256];
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/eplb-bench-plan-%ld.eplbt", dir && *dir ? dir : "/tmp",
           (long)getpid());
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = ld->num_layers;
  so.num_experts = ld->num_experts;
  so.topk = topk < ld->num_experts ? topk : ld->num_experts;
  so.num_steps = 20;
  so.tokens_per_step = 4096;
  so.seed = 1;
  eplb_trace_t *tr = NULL;
  eplb_status_t st = eplb_synth_generate(path, &so);
  if (!st)
    st = eplb_trace_open(path, NULL, &tr);
  if (!st)
    st = eplb_trace_window_sum(tr, 0, so.num_steps, ld->values);
  eplb_trace_close(tr);
  remove(path);
  return st;
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
                             eplb_plan_shares_t shares, int json) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.threads = threads;
  o.policy = EPLB_POLICY_BALANCED;
  /* Uniform: what the vLLM plugin plans from vLLM's map (online effort). */
  int even = shares == EPLB_SHARES_UNIFORM;
  o.shares = shares;
  o.effort = even ? EPLB_EFFORT_ONLINE : EPLB_EFFORT_FULL;
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
  /* The map kept: its placement re-split, or served evenly as the plugin
   * serves it (the plan's own 1/c shares on the drifted loads). */
  if (even && (st = eplb_plan_evaluate(from, ld))) {
    rc = cli_status_error(st, "bench plan: evaluate");
    goto done;
  }
  if (even)
    cur = sum_max_load(from);
  else if ((rc = resplit_sum(from, ld, &cur)))
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
    json_object_set_new(root, "shares", json_string(eplb_plan_shares_str(shares)));
    json_object_set_new(root, "repeat", json_integer(repeat));
    json_object_set_new(root, "threads", json_integer(threads));
    json_object_set_new(root, "median_seconds", json_real(t[repeat / 2]));
    json_object_set_new(root, "balanced_seconds", json_real(bal_ms / 1e3));
    json_object_set_new(root, "gain_fraction", json_real(gain));
    json_object_set_new(root, "moved_fraction", json_real(moved));
    json_object_set_new(root, "mean_balancedness", json_real(s.mean_balancedness));
    rc = cli_print_json(root);
  } else {
    printf("incremental (%s shares) %ux%u, %u GPUs, %u slots, budget %u, weight %g, %u "
           "thread(s): %.4f s "
           "per plan (median of %u; balanced %.4f s), gain fraction %.4f, slots moved fraction "
           "%.4f (sum of max loads: current %.0f, incremental %.0f, balanced %.0f)\n",
           eplb_plan_shares_str(shares), ld->num_layers, ld->num_experts, G, R, budget, weight,
           threads, t[repeat / 2], repeat, bal_ms / 1e3, gain, moved, cur, inc_sum, bal_sum);
  }
done:
  free(t);
  eplb_plan_destroy(from);
  eplb_plan_destroy(inc);
  eplb_plan_destroy(bal);
  return rc;
}

static const char bench_plan_usage[] =
    "usage: eplb bench plan [--layers 58] [--experts 256] [--gpus 32] [--nodes 4]\n"
    "                       [--groups 8] [--replicas 288] [--repeat 5]\n"
    "                       [--samples DIR] [--threads 1] [--shares exact|uniform]\n"
    "                       [--json]\n"
    "Median time per call (all layers, --threads) and quality of deepseek and\n"
    "balanced on synthetic zipf loads, loads counted from a sampled trace (20 steps of\n"
    "4,096 tokens, top-8) and the bundled DeepSeek EPLB reference cases;\n"
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
    "                       [--move-weight W] [--drift ROUNDS] [--shares exact|uniform]\n"
    "                       [--repeat 5] [--json]\n"
    "Median time of an incremental replan from the balanced plan of the zipf loads\n"
    "to those loads drifted ROUNDS times (default 1), its fraction of a full\n"
    "replan's gain and the fraction of slots it moves; --shares uniform plans and\n"
    "scores as the vLLM plugin does from vLLM's map (even shares, online effort).\n";

/* What `eplb bench plan` was asked. */
typedef struct bp_args {
  uint32_t L, E, G, N, K, R, repeat, budget, rounds, threads;
  double weight, scale_budget;
  int incremental, scale, layers_given, repeat_given, json;
  uint32_t *lists[3], nlist[3]; /* --scale-experts, --scale-gpus, --scale-slots */
  unsigned policies;
  eplb_plan_shares_t shares;
  const char *samples;
} bp_args_t;

/* The --scale options (codes 1..5). Returns CLI_OK or an exit code. */
static int bp_scale_option(int c, bp_args_t *a) {
  static const char *const list_opt[3] = {"--scale-experts", "--scale-gpus", "--scale-slots"};
  if (c >= 1 && c <= 3) {
    free(a->lists[c - 1]);
    a->lists[c - 1] = NULL;
    if (cli_parse_u32_list(list_opt[c - 1], optarg, &a->lists[c - 1], &a->nlist[c - 1]))
      return CLI_BADINPUT;
    for (uint32_t i = 0; i < a->nlist[c - 1]; i++)
      if (!a->lists[c - 1][i])
        return cli_usage_error("bench plan: %s: sizes must be >= 1", list_opt[c - 1]);
    return CLI_OK;
  }
  if (c == 4) {
    a->policies = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", optarg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
      int k = 0;
      while (k < SP_COUNT && strcmp(tok, scale_policy_names[k]))
        k++;
      if (k == SP_COUNT)
        return cli_usage_error("bench plan: --scale-policies: unknown '%s' (deepseek, balanced, "
                               "uniform, incremental, locality)",
                               tok);
      a->policies |= 1u << k;
    }
    if (!a->policies)
      return cli_usage_error("bench plan: --scale-policies: none given");
    return CLI_OK;
  }
  if (cli_parse_double("--budget", optarg, &a->scale_budget))
    return CLI_BADINPUT;
  if (!(a->scale_budget >= 0))
    return cli_usage_error("bench plan: --budget %g must be >= 0 seconds", a->scale_budget);
  return CLI_OK;
}

/* Parses the options into *a: CLI_OK, an exit code, or -1 after --help. */
static int bp_parse(int argc, char **argv, bp_args_t *a) {
  const cli_opt_t opts[] = {{"layers", CLI_U32, .field = &a->L, .given = &a->layers_given},
                            {"experts", CLI_U32, .field = &a->E},
                            {"gpus", CLI_U32, .field = &a->G},
                            {"nodes", CLI_U32, .field = &a->N},
                            {"groups", CLI_U32, .field = &a->K},
                            {"replicas", CLI_U32, .field = &a->R},
                            {"repeat", CLI_U32, .field = &a->repeat, .given = &a->repeat_given},
                            {"samples", CLI_STR, .field = &a->samples},
                            {"json", CLI_FLAG, .field = &a->json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {"policy", CLI_ARG, .val = 'p'},
                            {"move-budget", CLI_U32, .field = &a->budget},
                            {"move-weight", CLI_DOUBLE, .field = &a->weight},
                            {"drift", CLI_U32, .field = &a->rounds},
                            {"threads", CLI_U32, .field = &a->threads},
                            {"scale", CLI_FLAG, .field = &a->scale},
                            {"scale-experts", CLI_ARG, .val = 1},
                            {"scale-gpus", CLI_ARG, .val = 2},
                            {"scale-slots", CLI_ARG, .val = 3},
                            {"scale-policies", CLI_ARG, .val = 4},
                            {"budget", CLI_ARG, .val = 5},
                            {"shares", CLI_ARG, .val = 6},
                            {NULL}};
  int c, rc;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "", opts)) != -1) {
    switch (c) {
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
      if ((rc = bp_scale_option(c, a)))
        return rc;
      break;
    case 6:
      if (eplb_plan_shares_parse(optarg, &a->shares) || a->shares == EPLB_SHARES_ROBUST)
        return cli_usage_error("bench plan: --shares %s: exact or uniform", optarg);
      break;
    case 'p':
      if (strcmp(optarg, "incremental"))
        return cli_usage_error("bench plan: --policy '%s': only incremental (the default "
                               "benchmark covers deepseek and balanced)",
                               optarg);
      a->incremental = 1;
      break;
    case 'h': fputs(bench_plan_usage, stdout); return -1;
    default: return CLI_BADINPUT;
    }
  }
  if (a->threads > EPLB_PLAN_MAX_THREADS)
    return cli_usage_error("bench plan: --threads %u: at most %u (0 = online cores)", a->threads,
                           EPLB_PLAN_MAX_THREADS);
  if (!(a->weight >= 0))
    return cli_usage_error("bench plan: --move-weight %g must be >= 0", a->weight);
  if (optind != argc)
    return cli_usage_error("bench plan: unexpected argument '%s'", argv[optind]);
  if (!a->L || !a->E || !a->G || !a->N || !a->K || !a->R || !a->repeat || a->L > 4096 ||
      a->E > 65535)
    return cli_usage_error("bench plan: sizes must be >= 1 (layers <= 4096, experts <= 65535)");
  return CLI_OK;
}

static int bp_scale(const bp_args_t *a) {
  static uint32_t dexp[] = {64, 256, 512}, dgpu[] = {8, 32, 128, 512, 1024}, dslot[] = {2, 8, 16};
  scale_cfg_t cfg = {.layers = a->layers_given ? a->L : 4,
                     .repeat = a->repeat_given ? a->repeat : 3,
                     .threads = a->threads == 1 ? 0 : a->threads,
                     .experts = a->lists[0] ? a->lists[0] : dexp,
                     .gpus = a->lists[1] ? a->lists[1] : dgpu,
                     .slots = a->lists[2] ? a->lists[2] : dslot,
                     .n_experts = a->lists[0] ? a->nlist[0] : 3,
                     .n_gpus = a->lists[1] ? a->nlist[1] : 5,
                     .n_slots = a->lists[2] ? a->nlist[2] : 3,
                     .policies = a->policies,
                     .budget_s = a->scale_budget,
                     .json = a->json};
  for (uint32_t i = 0; i < cfg.n_experts; i++)
    if (cfg.experts[i] > EPLB_MAX_EXPERTS)
      return cli_usage_error("bench plan: --scale-experts %u: at most %u", cfg.experts[i],
                             EPLB_MAX_EXPERTS);
  return bench_plan_scale(&cfg);
}

/* The default benchmark (zipf loads, then the reference cases) or the
 * incremental one. */
static int bp_run(const bp_args_t *a) {
  eplb_loads_t *ld = NULL;
  eplb_status_t st = eplb_loads_create(a->L, a->E, &ld);
  if (st)
    return cli_status_error(st, "bench plan");
  synth_loads(ld, 2024);
  int rc;
  if (a->incremental) {
    rc = bench_incremental(ld, a->G, a->N, a->R, a->repeat, a->threads, a->budget, a->weight,
                           a->rounds, a->shares, a->json);
    eplb_loads_destroy(ld);
    return rc;
  }
  json_t *insts = json_array();
  char name[64];
  snprintf(name, sizeof name, "zipf1-%ux%u", a->L, a->E);
  knobs_t knobs = {a->threads, a->shares};
  rc = bench_instance(name, ld, a->G, a->N, a->R, a->K, a->repeat, &knobs, insts, a->json);
  if (!rc && (st = sampled_loads(ld, 8)) != EPLB_OK)
    rc = cli_status_error(st, "bench plan: sampled loads");
  snprintf(name, sizeof name, "sampled-%ux%u", a->L, a->E);
  if (!rc)
    rc = bench_instance(name, ld, a->G, a->N, a->R, a->K, a->repeat, &knobs, insts, a->json);
  eplb_loads_destroy(ld);
  if (!rc)
    rc = bench_reference(a->samples ? a->samples : "traces/samples", a->repeat, &knobs, insts,
                         a->json);
  if (!rc && a->json) {
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string("plan"));
    json_object_set_new(root, "repeat", json_integer(a->repeat));
    json_object_set_new(root, "threads", json_integer(a->threads));
    json_object_set_new(root, "shares", json_string(eplb_plan_shares_str(a->shares)));
    json_object_set_new(root, "instances", insts);
    insts = NULL;
    rc = cli_print_json(root);
  }
  json_decref(insts);
  return rc;
}

int cli_bench_plan(int argc, char **argv) {
  bp_args_t a = {.L = 58,
                 .E = 256,
                 .G = 32,
                 .N = 4,
                 .K = 8,
                 .R = 288,
                 .repeat = 5,
                 .rounds = 1,
                 .threads = 1,
                 .weight = 0.005,
                 .scale_budget = 120,
                 .policies = (1u << SP_COUNT) - 1,
                 .shares = EPLB_SHARES_EXACT,
                 .samples = getenv("EPLB_SAMPLES")};
  int rc = bp_parse(argc, argv, &a);
  if (rc == -1)
    rc = CLI_OK;
  else if (rc == CLI_OK)
    rc = a.scale ? bp_scale(&a) : bp_run(&a);
  for (int i = 0; i < 3; i++)
    free(a.lists[i]);
  return rc;
}
