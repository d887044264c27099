/* eplb plan / plan eval / plan diff. */
#include "cli.h"

#include <eplb/plan.h>
#include <eplb/split.h>

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char plan_usage[] =
    "usage: eplb plan --loads FILE --gpus G [--nodes N] --replicas R [--groups K]\n"
    "                 [--policy deepseek|balanced|mip|incremental|locality] "
    "[--keep-groups-on-nodes]\n"
    "                 [--slots-per-gpu S0,S1,...] [--steps A:B] [--time-limit S] [--threads N]\n"
    "                 -o PLAN.json [--export deepseek-csv|sglang|trtllm DIR] [--json]\n"
    "       eplb plan --policy locality --loads TRACE.eplbt --cluster C [--tolerance T] ...\n"
    "                 (top-k rows give the co-activation; C: cluster file or NxG, its GPUs = G;\n"
    "                 max GPU load within (1 + T) x balanced's, default T = 0.01)\n"
    "       eplb plan --policy incremental --from PLAN.json [--move-budget K]\n"
    "                 [--move-weight W] ... (re-plans from PLAN.json changing at most K\n"
    "                 slots per layer, each change worth >= W x mean GPU load; 0, 0.005)\n"
    "       eplb plan ... [--shares exact|uniform|robust] [--robust-steps N]\n"
    "                 [--robust-aggregate A]   (static shares: the policy's own (exact),\n"
    "                 1/c per replica (uniform: what exported plans are served with), or\n"
    "                 robust over N steps of the --loads trace (default 32) sampled evenly\n"
    "                 from --steps, blended with weight A in [0, 1] with the aggregate)\n"
    "       eplb plan eval --plan PLAN.json --loads FILE [--steps A:B] [--json]\n"
    "       eplb plan diff --from OLD.json --plan NEW.json [--expert-bytes B]\n"
    "                 [--staging-bytes S] [--layers-per-step N] [--json]\n"
    "                 the migration as the runtime runs it: B default 44040192, S per GPU\n"
    "                 and round (default 1 GiB; 0 = unlimited), N layers per round (4)\n"
    "\n"
    "FILE is a trace (.eplbt, counts summed over --steps), a CSV matrix (rows = layers,\n"
    "columns = experts), a long-form CSV or an NPY counts array.\n";

/* "seconds" is the planning time (0 for a plan read from a file). */
static json_t *summary_json(const eplb_plan_t *plan) {
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  json_t *j = json_object();
  json_object_set_new(j, "policy", json_string(eplb_plan_policy_str(eplb_plan_policy(plan))));
  json_object_set_new(j, "seconds", cli_real(s.seconds));
  json_object_set_new(j, "layers", json_integer(eplb_plan_num_layers(plan)));
  json_object_set_new(j, "mean_balancedness", cli_real(s.mean_balancedness));
  json_object_set_new(j, "min_balancedness", cli_real(s.min_balancedness));
  json_object_set_new(j, "mean_max_over_lower_bound", cli_real(s.mean_ratio));
  json_object_set_new(j, "max_max_over_lower_bound", cli_real(s.max_ratio));
  json_object_set_new(j, "fallback_layers", json_integer(s.fallback_layers));
  if (eplb_plan_policy(plan) == EPLB_POLICY_INCREMENTAL)
    json_object_set_new(j, "slots_moved", json_integer((json_int_t)s.slots_moved));
  if (eplb_plan_policy(plan) == EPLB_POLICY_MIP) {
    uint32_t optimal = 0;
    double gap = 0;
    for (uint32_t l = 0; l < eplb_plan_num_layers(plan); l++) {
      eplb_plan_layer_metrics_t m;
      eplb_plan_layer_metrics(plan, l, &m);
      optimal += m.mip_status == EPLB_OK;
      gap = m.mip_gap > gap ? m.mip_gap : gap;
    }
    json_object_set_new(j, "mip_layers_optimal", json_integer(optimal));
    json_object_set_new(j, "mip_max_gap", cli_real(gap));
  }
  return j;
}

/* What a target that splits evenly serves (issue 15): the plan's own loads
 * under uniform shares. */
typedef struct served {
  int dropped; /* the plan's shares are not uniform: the export drops them */
  double mean, min;
} served_t;

/* Uniform shares of a layer from its replica counts. */
static int uniform_shares(const eplb_plan_t *plan, uint32_t l, uint32_t *cnt, double *sh) {
  if (eplb_plan_logcnt(plan, l, cnt))
    return -1;
  const int32_t *p2l = eplb_plan_phy2log(plan, l);
  for (uint32_t r = 0; r < eplb_plan_num_slots(plan); r++)
    sh[r] = 1.0 / cnt[p2l[r]];
  return 0;
}

/* Evaluates a copy of the plan (read back from what was written) with
 * uniform shares on the planned loads. Returns an exit code. */
static int served_figures(const eplb_plan_t *plan, const char *written, const eplb_loads_t *loads,
                          served_t *out) {
  uint32_t L = eplb_plan_num_layers(plan), R = eplb_plan_num_slots(plan);
  uint32_t *cnt = calloc(eplb_plan_num_experts(plan), sizeof *cnt);
  double *sh = calloc(R, sizeof *sh);
  eplb_plan_t *copy = NULL;
  eplb_status_t st = EPLB_OK;
  int rc = CLI_OK;
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  out->dropped = 0;
  out->mean = s.mean_balancedness;
  out->min = s.min_balancedness;
  if (!cnt || !sh) {
    rc = cli_out_of_memory("plan --export");
    goto done;
  }
  for (uint32_t l = 0; l < L && !out->dropped; l++) {
    if (uniform_shares(plan, l, cnt, sh)) {
      rc = cli_status_error(EPLB_EINVAL, "plan --export");
      goto done;
    }
    const double *own = eplb_plan_share(plan, l);
    for (uint32_t r = 0; r < R; r++)
      out->dropped |= fabs(own[r] - sh[r]) > 1e-12;
  }
  if (!out->dropped)
    goto done;
  if ((st = eplb_plan_read(written, &copy))) {
    rc = cli_status_error(st, written);
    goto done;
  }
  for (uint32_t l = 0; l < L && !st; l++)
    st = uniform_shares(copy, l, cnt, sh) ? EPLB_EINVAL : eplb_plan_set_shares(copy, l, sh);
  if (!st)
    st = eplb_plan_evaluate(copy, loads);
  if (st) {
    rc = cli_status_error(st, "plan --export");
    goto done;
  }
  eplb_plan_summary(copy, &s);
  out->mean = s.mean_balancedness;
  out->min = s.min_balancedness;
done:
  eplb_plan_destroy(copy);
  free(cnt);
  free(sh);
  return rc;
}

static double planned_mean(const eplb_plan_t *plan) {
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  return s.mean_balancedness;
}

/* The files eplb_plan_export writes for a format, so that an interrupted
 * export can be removed without listing its directory. */
static const char *const *export_files(eplb_plan_export_format_t f) {
  static const char *const deepseek[] = {"phy2log.csv", "log2phy.csv", "logcnt.csv", NULL};
  static const char *const sglang[] = {"expert_location.json", NULL};
  static const char *const trtllm[] = {"moe_load_balancer.yaml", NULL};
  static const char *const none[] = {NULL};
  switch (f) {
  case EPLB_EXPORT_DEEPSEEK_CSV: return deepseek;
  case EPLB_EXPORT_SGLANG: return sglang;
  case EPLB_EXPORT_TRTLLM: return trtllm;
  }
  return none;
}

static void summary_text(const eplb_plan_t *plan) {
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  printf("%s: %u layers, %.3f s; balancedness mean %.4f min %.4f; max_load/lower_bound mean "
         "%.5f max %.5f\n",
         eplb_plan_policy_str(eplb_plan_policy(plan)), eplb_plan_num_layers(plan), s.seconds,
         s.mean_balancedness, s.min_balancedness, s.mean_ratio, s.max_ratio);
  if (eplb_plan_policy(plan) == EPLB_POLICY_INCREMENTAL)
    printf("slots moved: %llu of %llu\n", (unsigned long long)s.slots_moved,
           (unsigned long long)eplb_plan_num_layers(plan) * eplb_plan_num_slots(plan));
}

/* The planner names bad loads "loads: layer L ...": name the file instead. */
static int loads_error(eplb_status_t st, const char *what, const char *loads_path) {
  const char *d = eplb_error_detail();
  if (!d || strncmp(d, "loads: ", 7))
    return cli_status_error(st, what);
  cli_message("%s: %s", loads_path, d + 7);
  return cli_exit_code(st);
}

static int shape_mismatch(const eplb_plan_t *plan, const eplb_loads_t *loads) {
  return loads->num_layers != eplb_plan_num_layers(plan) ||
         loads->num_experts != eplb_plan_num_experts(plan);
}

static int plan_eval(int argc, char **argv) {
  static const struct option opts[] = {
      {"plan", required_argument, NULL, 'p'},  {"loads", required_argument, NULL, 'l'},
      {"steps", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0}};
  const char *plan_path = NULL, *loads_path = NULL;
  uint64_t sb = 0, se = UINT64_MAX;
  int json = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'p': plan_path = optarg; break;
    case 'l': loads_path = optarg; break;
    case 's':
      if (cli_parse_range("--steps", optarg, &sb, &se))
        return CLI_BADINPUT;
      break;
    case 'j': json = 1; break;
    case 'h': fputs(plan_usage, stdout); return CLI_OK;
    default: return CLI_BADINPUT;
    }
  }
  if (!plan_path || !loads_path || optind != argc)
    return cli_usage_error("plan eval: needs --plan PLAN.json and --loads FILE (see --help)");
  eplb_plan_t *plan = NULL;
  eplb_loads_t *loads = NULL;
  eplb_status_t st = eplb_plan_read(plan_path, &plan);
  if (st)
    return cli_status_error(st, plan_path);
  int rc = cli_read_loads(loads_path, sb, se, &loads);
  if (rc)
    goto done;
  if (shape_mismatch(plan, loads)) {
    rc = cli_usage_error("%s: %u layers x %u experts, but the plan %s has %u x %u", loads_path,
                         loads->num_layers, loads->num_experts, plan_path,
                         eplb_plan_num_layers(plan), eplb_plan_num_experts(plan));
    goto done;
  }
  if ((st = eplb_plan_evaluate(plan, loads))) {
    rc = loads_error(st, "plan eval", loads_path);
    goto done;
  }
  uint32_t L = eplb_plan_num_layers(plan), G = eplb_plan_num_gpus(plan);
  if (json) {
    json_t *root = json_object(), *layers = json_array();
    for (uint32_t l = 0; l < L; l++) {
      eplb_plan_layer_metrics_t m;
      eplb_plan_layer_metrics(plan, l, &m);
      json_t *lo = json_object(), *gl = json_array();
      for (uint32_t g = 0; g < G; g++)
        json_array_append_new(gl, cli_real(eplb_plan_gpu_load(plan, l)[g]));
      json_object_set_new(lo, "gpu_load", gl);
      json_object_set_new(lo, "max_load", cli_real(m.max_load));
      json_object_set_new(lo, "mean_load", cli_real(m.mean_load));
      json_object_set_new(lo, "lower_bound", cli_real(m.lower_bound));
      json_object_set_new(lo, "balancedness", cli_real(m.balancedness));
      json_array_append_new(layers, lo);
    }
    json_object_set_new(root, "layers", layers);
    json_t *s = summary_json(plan);
    json_object_del(s, "seconds");
    json_object_set_new(root, "summary", s);
    rc = cli_print_json(root);
  } else {
    printf("layer  max_load  lower_bound  balancedness  max/lb\n");
    for (uint32_t l = 0; l < L; l++) {
      eplb_plan_layer_metrics_t m;
      eplb_plan_layer_metrics(plan, l, &m);
      printf("%5u  %.6g  %.6g  %.5f  %.5f\n", l, m.max_load, m.lower_bound, m.balancedness,
             m.lower_bound > 0 ? m.max_load / m.lower_bound : 1.0);
    }
    summary_text(plan);
  }
done:
  eplb_plan_destroy(plan);
  eplb_loads_destroy(loads);
  return rc;
}

/* locality: the cluster (its GPUs must be --gpus) and the co-activation of
 * the trace's top-k rows over the planned steps. */
static int locality_inputs(eplb_plan_options_t *po, const char *spec, eplb_trace_t *tr,
                           const char *trace_path, uint64_t sb, uint64_t se, eplb_cluster_t **cl,
                           eplb_coact_t **co) {
  if (!spec)
    return cli_usage_error("plan --policy locality: needs --cluster FILE|NxG");
  eplb_status_t st = eplb_cluster_open(spec, cl);
  if (st)
    return cli_status_error(st, spec);
  if (eplb_cluster_num_gpus(*cl) != po->num_gpus)
    return cli_usage_error("--cluster %s: %u GPUs, but --gpus is %u", spec,
                           eplb_cluster_num_gpus(*cl), po->num_gpus);
  int rc = CLI_OK;
  if (!eplb_trace_has_topk(tr))
    rc = cli_usage_error("%s: locality needs top-k rows (the trace has none)", trace_path);
  else if ((st = eplb_coact_from_trace(tr, sb, se, *cl, co)))
    rc = cli_status_error(st, trace_path);
  po->cluster = *cl;
  po->coact = *co;
  return rc;
}

/* plan diff: the migration from one plan to another (slots, bytes by link
 * class, rounds under a staging budget). */
static int plan_diff(int argc, char **argv) {
  static const struct option opts[] = {{"from", required_argument, NULL, 'f'},
                                       {"plan", required_argument, NULL, 'p'},
                                       {"expert-bytes", required_argument, NULL, 'b'},
                                       {"staging-bytes", required_argument, NULL, 's'},
                                       {"layers-per-step", required_argument, NULL, 'l'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *from_path = NULL, *to_path = NULL;
  eplb_plan_diff_options_t dopt; /* the runtime's defaults */
  eplb_plan_diff_options_default(&dopt);
  uint64_t eb = dopt.expert_bytes, staging = dopt.staging_bytes;
  int json = 0, c, rc = CLI_OK;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'f': from_path = optarg; break;
    case 'p': to_path = optarg; break;
    case 'b':
      if (cli_parse_u64("--expert-bytes", optarg, &eb))
        return CLI_BADINPUT;
      if (!eb)
        return cli_usage_error("--expert-bytes: must be >= 1");
      break;
    case 's':
      if (cli_parse_u64("--staging-bytes", optarg, &staging))
        return CLI_BADINPUT;
      break;
    case 'l':
      if (cli_parse_u32("--layers-per-step", optarg, &dopt.layers_per_round))
        return CLI_BADINPUT;
      if (!dopt.layers_per_round)
        return cli_usage_error("--layers-per-step: must be >= 1");
      break;
    case 'j': json = 1; break;
    case 'h': fputs(plan_usage, stdout); return CLI_OK;
    default: return CLI_BADINPUT;
    }
  }
  if (!from_path || !to_path || optind != argc)
    return cli_usage_error("plan diff: needs --from OLD.json and --plan NEW.json (see --help)");
  eplb_plan_t *a = NULL, *b = NULL;
  eplb_plan_diff_stats_t d;
  eplb_status_t st = eplb_plan_read(from_path, &a);
  if (st) {
    rc = cli_status_error(st, from_path);
    goto done;
  }
  if ((st = eplb_plan_read(to_path, &b))) {
    rc = cli_status_error(st, to_path);
    goto done;
  }
  dopt.expert_bytes = eb, dopt.staging_bytes = staging;
  if ((st = eplb_plan_diff_schedule(a, b, &dopt, &d))) {
    rc = cli_status_error(st, "plan diff");
    goto done;
  }
  static const char *const link[3] = {"same_gpu", "intra_node", "inter_node"};
  uint64_t slots = (uint64_t)eplb_plan_num_layers(a) * eplb_plan_num_slots(a);
  if (json) {
    json_t *root = json_object(), *mv = json_object(), *by = json_object();
    json_object_set_new(root, "slots", json_integer((json_int_t)slots));
    json_object_set_new(root, "slots_moved", json_integer((json_int_t)d.slots_moved));
    json_object_set_new(root, "layers_changed", json_integer(d.layers_changed));
    json_object_set_new(root, "max_layer_moved", json_integer(d.max_layer_moved));
    for (int k = 0; k < 3; k++) {
      json_object_set_new(mv, link[k], json_integer((json_int_t)d.moves[k]));
      json_object_set_new(by, link[k], json_integer((json_int_t)d.bytes[k]));
    }
    json_object_set_new(root, "moves", mv);
    json_object_set_new(root, "bytes", by);
    json_object_set_new(root, "expert_bytes", json_integer((json_int_t)eb));
    json_object_set_new(root, "staging_bytes", json_integer((json_int_t)staging));
    json_object_set_new(root, "layers_per_step", json_integer(dopt.layers_per_round));
    json_object_set_new(root, "rounds", json_integer(d.rounds));
    json_object_set_new(root, "max_bytes_in_round", json_integer((json_int_t)d.max_bytes_in_round));
    rc = cli_print_json(root);
  } else {
    printf("slots moved: %llu of %llu (%u layers changed, at most %u in one layer)\n",
           (unsigned long long)d.slots_moved, (unsigned long long)slots, d.layers_changed,
           d.max_layer_moved);
    for (int k = 0; k < 3; k++)
      printf("%-10s %8llu slots %14llu bytes\n", link[k], (unsigned long long)d.moves[k],
             (unsigned long long)d.bytes[k]);
    printf("rounds: %u (staging %llu bytes per GPU, %u layers per round; at most %llu received "
           "in a round)\n",
           d.rounds, (unsigned long long)staging, dopt.layers_per_round,
           (unsigned long long)d.max_bytes_in_round);
  }
done:
  eplb_plan_destroy(a);
  eplb_plan_destroy(b);
  return rc;
}

int cli_plan(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "eval"))
    return plan_eval(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "diff"))
    return plan_diff(argc - 1, argv + 1);
  enum { O_KEEP = 256, O_SLOTS, O_STEPS, O_TLIM, O_EXPORT, O_JSON, O_THREADS };
  enum { O_LOC_CLUSTER = 400, O_LOC_TOL };
  enum { O_INC_FROM = 500, O_INC_BUDGET, O_INC_WEIGHT };
  enum { O_SH_SHARES = 600, O_SH_STEPS, O_SH_AGG };
  static const struct option opts[] = {{"loads", required_argument, NULL, 'l'},
                                       {"gpus", required_argument, NULL, 'g'},
                                       {"nodes", required_argument, NULL, 'n'},
                                       {"replicas", required_argument, NULL, 'r'},
                                       {"groups", required_argument, NULL, 'k'},
                                       {"policy", required_argument, NULL, 'p'},
                                       {"keep-groups-on-nodes", no_argument, NULL, O_KEEP},
                                       {"slots-per-gpu", required_argument, NULL, O_SLOTS},
                                       {"steps", required_argument, NULL, O_STEPS},
                                       {"time-limit", required_argument, NULL, O_TLIM},
                                       {"threads", required_argument, NULL, O_THREADS},
                                       {"output", required_argument, NULL, 'o'},
                                       {"export", required_argument, NULL, O_EXPORT},
                                       {"json", no_argument, NULL, O_JSON},
                                       {"cluster", required_argument, NULL, O_LOC_CLUSTER},
                                       {"tolerance", required_argument, NULL, O_LOC_TOL},
                                       {"from", required_argument, NULL, O_INC_FROM},
                                       {"move-budget", required_argument, NULL, O_INC_BUDGET},
                                       {"move-weight", required_argument, NULL, O_INC_WEIGHT},
                                       {"shares", required_argument, NULL, O_SH_SHARES},
                                       {"robust-steps", required_argument, NULL, O_SH_STEPS},
                                       {"robust-aggregate", required_argument, NULL, O_SH_AGG},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  const char *loads_path = NULL, *out_path = NULL, *export_dir = NULL;
  const char *cluster_spec = NULL;
  eplb_cluster_t *cluster = NULL;
  eplb_coact_t *coact = NULL;
  const char *from_path = NULL;
  eplb_plan_t *from = NULL;
  eplb_trace_t *trace = NULL; /* --loads as a trace, when the policy needs its steps */
  eplb_plan_export_format_t export_fmt = EPLB_EXPORT_DEEPSEEK_CSV;
  uint64_t sb = 0, se = UINT64_MAX;
  uint32_t *slots = NULL, nslots = 0, G = 0, R = 0;
  int json = 0, c, rc = CLI_OK;
  eplb_loads_t *loads = NULL;
  eplb_plan_t *plan = NULL;
  optind = 1;
  while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
    switch (c) {
    case 'l': loads_path = optarg; break;
    case 'g':
      if (cli_parse_u32("--gpus", optarg, &G))
        goto bad;
      break;
    case 'n':
      if (cli_parse_u32("--nodes", optarg, &po.num_nodes))
        goto bad;
      break;
    case 'r':
      if (cli_parse_u32("--replicas", optarg, &R))
        goto bad;
      break;
    case 'k':
      if (cli_parse_u32("--groups", optarg, &po.num_groups))
        goto bad;
      break;
    case 'p':
      if (eplb_plan_policy_parse(optarg, &po.policy)) {
        rc = cli_usage_error("--policy: %s", eplb_error_detail());
        goto done;
      }
      break;
    case O_KEEP: po.keep_groups_on_nodes = 1; break;
    case O_SLOTS:
      free(slots);
      if (cli_parse_u32_list("--slots-per-gpu", optarg, &slots, &nslots))
        goto bad;
      break;
    case O_STEPS:
      if (cli_parse_range("--steps", optarg, &sb, &se))
        goto bad;
      break;
    case O_TLIM:
      if (cli_parse_double("--time-limit", optarg, &po.time_limit))
        goto bad;
      if (po.time_limit < 0) {
        rc = cli_usage_error("--time-limit: must be >= 0");
        goto done;
      }
      break;
    case O_THREADS:
      if (cli_parse_u32("--threads", optarg, &po.threads))
        goto bad;
      if (po.threads == 0 || po.threads > EPLB_PLAN_MAX_THREADS) {
        rc = cli_usage_error("--threads %s: must be 1..%u (omit it for the online cores)", optarg,
                             EPLB_PLAN_MAX_THREADS);
        goto done;
      }
      break;
    case 'o': out_path = optarg; break;
    case O_EXPORT:
      if (eplb_plan_export_format_parse(optarg, &export_fmt)) {
        rc = cli_usage_error("--export: %s", eplb_error_detail());
        goto done;
      }
      if (optind >= argc) {
        rc = cli_usage_error("--export %s: needs a directory", optarg);
        goto done;
      }
      export_dir = argv[optind++];
      break;
    case O_JSON: json = 1; break;
    case O_LOC_CLUSTER: cluster_spec = optarg; break;
    case O_LOC_TOL:
      if (cli_parse_double("--tolerance", optarg, &po.locality_tolerance))
        goto bad;
      if (!(po.locality_tolerance >= 0)) {
        rc = cli_usage_error("--tolerance: must be >= 0");
        goto done;
      }
      break;
    case O_INC_FROM: from_path = optarg; break;
    case O_INC_BUDGET:
      if (cli_parse_u32("--move-budget", optarg, &po.move_budget))
        goto bad;
      break;
    case O_INC_WEIGHT:
      if (cli_parse_double("--move-weight", optarg, &po.move_weight))
        goto bad;
      if (!(po.move_weight >= 0) || !isfinite(po.move_weight)) {
        rc = cli_usage_error("--move-weight: must be a finite number >= 0");
        goto done;
      }
      break;
    case O_SH_SHARES:
      if (eplb_plan_shares_parse(optarg, &po.shares)) {
        rc = cli_usage_error("--shares: %s", eplb_error_detail());
        goto done;
      }
      break;
    case O_SH_STEPS:
      if (cli_parse_u32("--robust-steps", optarg, &po.robust_steps))
        goto bad;
      if (po.robust_steps == 0 || po.robust_steps > 65536) {
        rc = cli_usage_error("--robust-steps: must be in 1..65536");
        goto done;
      }
      break;
    case O_SH_AGG:
      if (cli_parse_double("--robust-aggregate", optarg, &po.robust_aggregate_weight))
        goto bad;
      if (!(po.robust_aggregate_weight >= 0 && po.robust_aggregate_weight <= 1)) {
        rc = cli_usage_error("--robust-aggregate: must be in [0, 1]");
        goto done;
      }
      break;
    case 'h': fputs(plan_usage, stdout); goto done;
    default: goto bad;
    }
  }
  if (optind != argc) {
    rc = cli_usage_error("plan: unexpected argument '%s'", argv[optind]);
    goto done;
  }
  if (!loads_path || !out_path || !G || !R) {
    rc = cli_usage_error("plan: needs --loads FILE, --gpus G, --replicas R and -o PLAN.json "
                         "(see --help)");
    goto done;
  }
  if (slots && nslots != G) {
    rc = cli_usage_error("--slots-per-gpu: %u values for %u GPUs", nslots, G);
    goto done;
  }
  po.num_gpus = G;
  po.num_replicas = R;
  po.slots_per_gpu = slots;
  if (po.policy == EPLB_POLICY_LOCALITY || po.shares == EPLB_SHARES_ROBUST) {
    /* One handle serves the window sums, the co-activation and the
     * per-step loads of robust shares. */
    eplb_status_t tst = eplb_trace_open(loads_path, NULL, &trace);
    if (tst && po.policy == EPLB_POLICY_LOCALITY) {
      rc = cli_status_error(tst, loads_path);
      goto done;
    }
    if (tst) {
      rc = cli_usage_error("%s: robust shares need a trace (.eplbt) as --loads: %s", loads_path,
                           eplb_error_detail());
      goto done;
    }
    const eplb_trace_meta_t *m = eplb_trace_meta(trace);
    uint64_t nsteps = eplb_trace_num_steps(trace);
    if (sb >= nsteps && (sb || se != UINT64_MAX)) {
      rc = cli_usage_error("--steps: %s has %llu steps; the range selects none", loads_path,
                           (unsigned long long)nsteps);
      goto done;
    }
    eplb_status_t lst = eplb_loads_create(m->num_layers, m->num_experts, &loads);
    if (!lst)
      lst = eplb_trace_window_sum(trace, sb, se, loads->values);
    if (lst) {
      rc = cli_status_error(lst, loads_path);
      goto done;
    }
  } else if ((rc = cli_read_loads(loads_path, sb, se, &loads))) {
    goto done;
  }
  if (po.policy == EPLB_POLICY_LOCALITY &&
      (rc = locality_inputs(&po, cluster_spec, trace, loads_path, sb, se, &cluster, &coact)))
    goto done;
  if ((po.policy == EPLB_POLICY_INCREMENTAL) != (from_path != NULL)) {
    rc = cli_usage_error(from_path ? "--from: only for --policy incremental"
                                   : "plan --policy incremental: needs --from PLAN.json");
    goto done;
  }
  if (from_path) {
    eplb_status_t fst = eplb_plan_read(from_path, &from);
    if (fst) {
      rc = cli_status_error(fst, from_path);
      goto done;
    }
    if (shape_mismatch(from, loads)) {
      rc = cli_usage_error("%s: %u layers x %u experts, but the plan %s has %u x %u", loads_path,
                           loads->num_layers, loads->num_experts, from_path,
                           eplb_plan_num_layers(from), eplb_plan_num_experts(from));
      goto done;
    }
    po.from = from;
  }
  if (po.shares == EPLB_SHARES_ROBUST) {
    /* The per-step loads come from the same trace and steps as the aggregate. */
    po.shares_trace = trace;
    po.shares_step_begin = sb;
    po.shares_step_end = se;
  }
  eplb_status_t st = eplb_plan_create(loads, &po, &plan);
  if (st) {
    rc = loads_error(st, "plan", loads_path);
    goto done;
  }
  /* Every output goes to a temporary and all are renamed at the end: a
   * failure anywhere leaves none of them. */
  const char *plan_tmp = cli_output_stage("-o", out_path, 0);
  if (!plan_tmp) {
    rc = CLI_BADINPUT;
    goto done;
  }
  if ((st = eplb_plan_write(plan, plan_tmp))) {
    rc = cli_status_error(st, out_path);
    goto done;
  }
  served_t served = {0};
  if (export_dir) {
    const char *export_tmp = cli_output_stage("--export", export_dir, 1);
    if (!export_tmp) {
      rc = CLI_BADINPUT;
      goto done;
    }
    for (const char *const *f = export_files(export_fmt); *f; f++)
      cli_output_expect(export_tmp, *f);
    if ((st = eplb_plan_export(plan, export_fmt, export_tmp))) {
      rc = cli_status_error(st, export_dir);
      goto done;
    }
    if ((rc = served_figures(plan, plan_tmp, loads, &served)))
      goto done;
    /* The formats carry no shares: say what the target will serve. */
    if (served.dropped)
      cli_message("--export %s: the format carries no shares, so the target splits evenly: "
                  "it serves balancedness mean %.4f min %.4f, not the planned %.4f (plan with "
                  "--shares uniform to optimise for it)",
                  eplb_plan_export_format_str(export_fmt), served.mean, served.min,
                  planned_mean(plan));
  }
  if (json) {
    json_t *j = summary_json(plan);
    if (export_dir) {
      json_object_set_new(j, "served_shares", json_string("uniform"));
      json_object_set_new(j, "served_balancedness", cli_real(served.mean));
      json_object_set_new(j, "served_min_balancedness", cli_real(served.min));
    }
    rc = cli_print_json(j);
  } else {
    summary_text(plan);
    if (export_dir && served.dropped)
      printf("served by the %s export (uniform shares): balancedness mean %.4f min %.4f\n",
             eplb_plan_export_format_str(export_fmt), served.mean, served.min);
    if (fflush(stdout)) {
      cli_message("cannot write the summary");
      rc = CLI_FAIL;
    }
  }
  if (rc == CLI_OK)
    rc = cli_outputs_commit();
  goto done;
bad:
  rc = CLI_BADINPUT;
done:
  cli_outputs_remove();
  free(slots);
  eplb_plan_destroy(plan);
  eplb_loads_destroy(loads);
  eplb_coact_destroy(coact);
  eplb_cluster_destroy(cluster);
  eplb_plan_destroy(from);
  eplb_trace_close(trace);
  return rc;
}
