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

/* Runs one variant `repeat` times; *ms gets the median, *plan the last plan. */
static int bench_variant(const eplb_loads_t *ld, const variant_t *v, uint32_t G, uint32_t N,
                         uint32_t R, uint32_t repeat, double *ms, eplb_plan_t **plan) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = v->policy;
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
                          uint32_t R, uint32_t K, uint32_t repeat, json_t *out, int json) {
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
    rc = bench_variant(ld, &vs[i], G, N, R, repeat, &ms[i], &plans[i]);
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
static int bench_reference(const char *dir, uint32_t repeat, json_t *out, int json) {
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
                        (uint32_t)json_integer_value(json_object_get(c, "num_groups")), repeat, out,
                        json);
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
                             uint32_t budget, double weight, uint32_t rounds, int json) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
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
    json_object_set_new(root, "median_seconds", json_real(t[repeat / 2]));
    json_object_set_new(root, "balanced_seconds", json_real(bal_ms / 1e3));
    json_object_set_new(root, "gain_fraction", json_real(gain));
    json_object_set_new(root, "moved_fraction", json_real(moved));
    json_object_set_new(root, "mean_balancedness", json_real(s.mean_balancedness));
    rc = cli_print_json(root);
  } else {
    printf("incremental %ux%u, %u GPUs, %u slots, budget %u, weight %g: %.4f s per plan "
           "(median of %u; balanced %.4f s), gain fraction %.4f, slots moved fraction %.4f "
           "(sum of max loads: current %.0f, incremental %.0f, balanced %.0f)\n",
           ld->num_layers, ld->num_experts, G, R, budget, weight, t[repeat / 2], repeat,
           bal_ms / 1e3, gain, moved, cur, inc_sum, bal_sum);
  }
done:
  free(t);
  eplb_plan_destroy(from);
  eplb_plan_destroy(inc);
  eplb_plan_destroy(bal);
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
                                       {NULL, 0, NULL, 0}};
  uint32_t L = 58, E = 256, G = 32, N = 4, K = 8, R = 288, repeat = 5;
  uint32_t budget = 0, rounds = 1;
  double weight = 0.005;
  int incremental = 0;
  const char *samples = getenv("EPLB_SAMPLES");
  int json = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'L':
      if (cli_parse_u32("--layers", optarg, &L))
        return CLI_BADINPUT;
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
            "                       [--samples DIR] [--json]\n"
            "Median time per call (all layers, one thread) and quality of deepseek and\n"
            "balanced on synthetic zipf loads and the bundled DeepSeek EPLB reference cases.\n"
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
  if (optind != argc)
    return cli_usage_error("bench plan: unexpected argument '%s'", argv[optind]);
  if (!L || !E || !G || !N || !K || !R || !repeat || L > 4096 || E > 65535)
    return cli_usage_error("bench plan: sizes must be >= 1 (layers <= 4096, experts <= 65535)");
  eplb_loads_t *ld = NULL;
  eplb_status_t st = eplb_loads_create(L, E, &ld);
  if (st)
    return cli_status_error(st, "bench plan");
  synth_loads(ld, 2024);
  if (incremental) {
    int irc = bench_incremental(ld, G, N, R, repeat, budget, weight, rounds, json);
    eplb_loads_destroy(ld);
    return irc;
  }
  json_t *out = json_array();
  char name[64];
  snprintf(name, sizeof name, "zipf1-%ux%u", L, E);
  int rc = bench_instance(name, ld, G, N, R, K, repeat, out, json);
  eplb_loads_destroy(ld);
  if (!rc)
    rc = bench_reference(samples ? samples : "traces/samples", repeat, out, json);
  if (!rc && json) {
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string("plan"));
    json_object_set_new(root, "repeat", json_integer(repeat));
    json_object_set_new(root, "instances", out);
    return cli_print_json(root);
  }
  json_decref(out);
  return rc;
}
