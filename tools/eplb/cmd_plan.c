/* eplb plan / plan eval / bench plan. */
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
    "                 [--slots-per-gpu S0,S1,...] [--steps A:B] [--time-limit S]\n"
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
    "                 [--staging-bytes S] [--json]   (B default 44040192; S 0 = unlimited)\n"
    "\n"
    "FILE is a trace (.eplbt, counts summed over --steps), a CSV matrix (rows = layers,\n"
    "columns = experts), a long-form CSV or an NPY counts array.\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int dump_json(json_t *j) {
  int rc = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) ? CLI_FAIL : CLI_OK;
  fputc('\n', stdout);
  json_decref(j);
  return rc;
}

static json_t *summary_json(const eplb_plan_t *plan, double seconds) {
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  json_t *j = json_object();
  json_object_set_new(j, "policy", json_string(eplb_plan_policy_str(eplb_plan_policy(plan))));
  json_object_set_new(j, "seconds", json_real(seconds));
  json_object_set_new(j, "layers", json_integer(eplb_plan_num_layers(plan)));
  json_object_set_new(j, "mean_balancedness", json_real(s.mean_balancedness));
  json_object_set_new(j, "min_balancedness", json_real(s.min_balancedness));
  json_object_set_new(j, "mean_max_over_lower_bound", json_real(s.mean_ratio));
  json_object_set_new(j, "max_max_over_lower_bound", json_real(s.max_ratio));
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
    json_object_set_new(j, "mip_max_gap", json_real(gap));
  }
  return j;
}

static void summary_text(const eplb_plan_t *plan, double seconds) {
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  printf("%s: %u layers, %.3f s; balancedness mean %.4f min %.4f; max_load/lower_bound mean "
         "%.5f max %.5f\n",
         eplb_plan_policy_str(eplb_plan_policy(plan)), eplb_plan_num_layers(plan), seconds,
         s.mean_balancedness, s.min_balancedness, s.mean_ratio, s.max_ratio);
  if (eplb_plan_policy(plan) == EPLB_POLICY_INCREMENTAL)
    printf("slots moved: %llu of %llu\n", (unsigned long long)s.slots_moved,
           (unsigned long long)eplb_plan_num_layers(plan) * eplb_plan_num_slots(plan));
}

static int read_loads(const char *path, uint64_t b, uint64_t e, eplb_loads_t **out) {
  eplb_status_t st = eplb_loads_read(path, b, e, out);
  return st ? cli_status_error(st, path) : CLI_OK;
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
  int rc = read_loads(loads_path, sb, se, &loads);
  if (rc)
    goto done;
  if ((st = eplb_plan_evaluate(plan, loads))) {
    rc = cli_status_error(st, "plan eval");
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
        json_array_append_new(gl, json_real(eplb_plan_gpu_load(plan, l)[g]));
      json_object_set_new(lo, "gpu_load", gl);
      json_object_set_new(lo, "max_load", json_real(m.max_load));
      json_object_set_new(lo, "mean_load", json_real(m.mean_load));
      json_object_set_new(lo, "lower_bound", json_real(m.lower_bound));
      json_object_set_new(lo, "balancedness", json_real(m.balancedness));
      json_array_append_new(layers, lo);
    }
    json_object_set_new(root, "layers", layers);
    json_t *s = summary_json(plan, 0);
    json_object_del(s, "seconds");
    json_object_set_new(root, "summary", s);
    rc = dump_json(root);
  } else {
    printf("layer  max_load  lower_bound  balancedness  max/lb\n");
    for (uint32_t l = 0; l < L; l++) {
      eplb_plan_layer_metrics_t m;
      eplb_plan_layer_metrics(plan, l, &m);
      printf("%5u  %.6g  %.6g  %.5f  %.5f\n", l, m.max_load, m.lower_bound, m.balancedness,
             m.lower_bound > 0 ? m.max_load / m.lower_bound : 1.0);
    }
    summary_text(plan, 0);
  }
done:
  eplb_plan_destroy(plan);
  eplb_loads_destroy(loads);
  return rc;
}

/* locality: the cluster (its GPUs must be --gpus) and the co-activation of
 * the trace's top-k rows over the planned steps. */
static int locality_inputs(eplb_plan_options_t *po, const char *spec, const char *trace_path,
                           uint64_t sb, uint64_t se, eplb_cluster_t **cl, eplb_coact_t **co) {
  if (!spec)
    return cli_usage_error("plan --policy locality: needs --cluster FILE|NxG");
  eplb_status_t st = eplb_cluster_open(spec, cl);
  if (st)
    return cli_status_error(st, spec);
  if (eplb_cluster_num_gpus(*cl) != po->num_gpus)
    return cli_usage_error("--cluster %s: %u GPUs, but --gpus is %u", spec,
                           eplb_cluster_num_gpus(*cl), po->num_gpus);
  eplb_trace_t *tr = NULL;
  if ((st = eplb_trace_open(trace_path, NULL, &tr)))
    return cli_status_error(st, trace_path);
  int rc = CLI_OK;
  if (!eplb_trace_has_topk(tr))
    rc = cli_usage_error("%s: locality needs top-k rows (the trace has none)", trace_path);
  else if ((st = eplb_coact_from_trace(tr, sb, se, *cl, co)))
    rc = cli_status_error(st, trace_path);
  eplb_trace_close(tr);
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
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *from_path = NULL, *to_path = NULL;
  /* One DeepSeek-V3 routed expert: 3 x 7168 x 2048 FP8 weights. */
  uint64_t eb = 44040192, staging = 0;
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
  if ((st = eplb_plan_diff(a, b, eb, staging, &d))) {
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
    json_object_set_new(root, "rounds", json_integer(d.rounds));
    json_object_set_new(root, "max_bytes_in_round", json_integer((json_int_t)d.max_bytes_in_round));
    rc = dump_json(root);
  } else {
    printf("slots moved: %llu of %llu (%u layers changed, at most %u in one layer)\n",
           (unsigned long long)d.slots_moved, (unsigned long long)slots, d.layers_changed,
           d.max_layer_moved);
    for (int k = 0; k < 3; k++)
      printf("%-10s %8llu slots %14llu bytes\n", link[k], (unsigned long long)d.moves[k],
             (unsigned long long)d.bytes[k]);
    printf("rounds: %u (staging %llu bytes per GPU; at most %llu received in a round)\n", d.rounds,
           (unsigned long long)staging, (unsigned long long)d.max_bytes_in_round);
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
  enum { O_KEEP = 256, O_SLOTS, O_STEPS, O_TLIM, O_EXPORT, O_JSON };
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
  eplb_trace_t *shares_trace = NULL;
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
  if ((rc = read_loads(loads_path, sb, se, &loads)))
    goto done;
  if (po.policy == EPLB_POLICY_LOCALITY &&
      (rc = locality_inputs(&po, cluster_spec, loads_path, sb, se, &cluster, &coact)))
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
    po.from = from;
  }
  if (po.shares == EPLB_SHARES_ROBUST) {
    /* The per-step loads come from the same trace and steps as the aggregate. */
    if (eplb_trace_open(loads_path, NULL, &shares_trace)) {
      rc = cli_usage_error("%s: robust shares need a trace (.eplbt) as --loads: %s", loads_path,
                           eplb_error_detail());
      goto done;
    }
    po.shares_trace = shares_trace;
    po.shares_step_begin = sb;
    po.shares_step_end = se;
  }
  double t0 = now_s();
  eplb_status_t st = eplb_plan_create(loads, &po, &plan);
  double secs = now_s() - t0;
  if (st) {
    rc = cli_status_error(st, "plan");
    goto done;
  }
  if (export_dir) {
    struct stat sbuf;
    if (stat(export_dir, &sbuf) && mkdir(export_dir, 0777) && errno != EEXIST) {
      rc = cli_usage_error("%s: cannot create the export directory: %s", export_dir,
                           strerror(errno));
      goto done;
    }
    if ((st = eplb_plan_export(plan, export_fmt, export_dir))) {
      rc = cli_status_error(st, export_dir);
      goto done;
    }
  }
  if ((st = eplb_plan_write(plan, out_path))) {
    rc = cli_status_error(st, out_path);
    goto done;
  }
  if (json)
    rc = dump_json(summary_json(plan, secs));
  else
    summary_text(plan, secs);
  goto done;
bad:
  rc = CLI_BADINPUT;
done:
  free(slots);
  eplb_plan_destroy(plan);
  eplb_loads_destroy(loads);
  eplb_coact_destroy(coact);
  eplb_cluster_destroy(cluster);
  eplb_plan_destroy(from);
  eplb_trace_close(shares_trace);
  return rc;
}

/* ---- bench plan ----------------------------------------------------------- */

static uint64_t mix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

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
      uint32_t j = (uint32_t)(mix64(&seed) % (e + 1)), t = perm[e];
      perm[e] = perm[j];
      perm[j] = t;
    }
    for (uint32_t e = 0; e < E; e++) {
      double noise = 0.8 + 0.4 * (double)(mix64(&seed) >> 11) / 9007199254740992.0;
      ld->values[(size_t)l * E + perm[e]] = floor(131072.0 * noise / (h * (e + 1)));
    }
  }
  free(perm);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
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
    double t0 = now_s();
    eplb_status_t st = eplb_plan_create(ld, &o, plan);
    t[i] = (now_s() - t0) * 1e3;
    if (st) {
      free(t);
      return cli_status_error(st, v->name);
    }
  }
  qsort(t, repeat, sizeof *t, cmp_double);
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
    if ((rc = read_loads(path, 0, UINT64_MAX, &ld)))
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
      v[e] = floor(v[e] * (0.7 + 0.6 * (double)(mix64(&seed) >> 11) / 9007199254740992.0));
    for (int k = 0; k < 3; k++) {
      uint32_t x = (uint32_t)(mix64(&seed) % E), y = (uint32_t)(mix64(&seed) % E);
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
  double t0 = now_s();
  if ((st = eplb_plan_create(ld, &o, &bal))) {
    rc = cli_status_error(st, "bench plan: balanced");
    goto done;
  }
  bal_ms = (now_s() - t0) * 1e3;
  o.policy = EPLB_POLICY_INCREMENTAL;
  o.from = from;
  o.move_budget = budget;
  o.move_weight = weight;
  for (uint32_t i = 0; i < repeat; i++) {
    eplb_plan_destroy(inc);
    inc = NULL;
    t0 = now_s();
    st = eplb_plan_create(ld, &o, &inc);
    t[i] = now_s() - t0;
    if (st) {
      rc = cli_status_error(st, "bench plan: incremental");
      goto done;
    }
  }
  qsort(t, repeat, sizeof *t, cmp_double);
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
    rc = dump_json(root);
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
    return dump_json(root);
  }
  json_decref(out);
  return rc;
}
