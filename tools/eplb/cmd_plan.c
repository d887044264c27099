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
    "                 [--policy deepseek|balanced|mip|incremental|locality|decode] "
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
    "       eplb plan ... --shares uniform [--effort full|online]   (online: the search\n"
    "                 eplb.compat, eplb.vllm and eplb.sglang run; default full)\n"
    "       eplb plan --policy decode ... [--model M] [--gpu G]   (least modelled decode\n"
    "                 step time, eplb/model.h: M a preset or model file, default the\n"
    "                 trace's model; G a preset or GPU file, default h800)\n"
    "       eplb plan eval --plan PLAN.json --loads FILE [--steps A:B] [--json]\n"
    "       eplb plan diff --from OLD.json --plan NEW.json [--expert-bytes B]\n"
    "                 [--staging-bytes S] [--layers-per-step N] [--json]\n"
    "                 the migration as the runtime runs it: B default 44040192, S per GPU\n"
    "                 and round (default 1 GiB; 0 = unlimited), N layers per round (4)\n"
    "\n"
    "FILE is a trace (.eplbt, counts summed over --steps), a CSV matrix (rows = layers,\n"
    "columns = experts), a long-form CSV or an NPY counts array.\n";

static void summary_text(const eplb_plan_t *plan) {
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  printf("%s: %u layers, %.3f s; balancedness mean %.4f min %.4f; max_load/lower_bound mean "
         "%.5f max %.5f%s\n",
         eplb_plan_policy_str(eplb_plan_policy(plan)), eplb_plan_num_layers(plan), s.seconds,
         s.mean_balancedness, s.min_balancedness, s.mean_ratio, s.max_ratio,
         strcmp(eplb_plan_lower_bound_kind(plan), "uniform-share") ? "" : " (uniform-share bound)");
  if (eplb_plan_policy(plan) == EPLB_POLICY_INCREMENTAL)
    printf("slots moved: %llu of %llu\n", (unsigned long long)s.slots_moved,
           (unsigned long long)eplb_plan_num_layers(plan) * eplb_plan_num_slots(plan));
}

/* The planner names bad loads "loads: layer L ...": name the file instead;
 * so too what planning from a trace reads of it (the trace's own errors
 * name it already; the co-activation's are "coact: ..." or "locality needs
 * ..."), as they read when the CLI read the window itself. */
static int loads_error(eplb_status_t st, const char *what, const char *loads_path) {
  const char *d = eplb_error_detail();
  size_t n = strlen(loads_path);
  if (d && ((!strncmp(d, loads_path, n) && d[n] == ':') || !strncmp(d, "coact: ", 7) ||
            !strncmp(d, "locality needs ", 15)))
    return cli_status_error(st, loads_path);
  if (!d || strncmp(d, "loads: ", 7))
    return cli_status_error(st, what);
  cli_message("%s: %s", loads_path, d + 7);
  return cli_exit_code(st);
}

static int plan_eval(int argc, char **argv) {
  const char *plan_path = NULL, *loads_path = NULL;
  uint64_t sb = 0, se = UINT64_MAX;
  int json = 0, c;
  const cli_opt_t opts[] = {{"plan", CLI_STR, .field = &plan_path},
                            {"loads", CLI_STR, .field = &loads_path},
                            {"steps", CLI_RANGE, .field = &sb, .given = &se},
                            {"json", CLI_FLAG, .field = &json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  optind = 1;
  /* The table takes every option but --help. */
  if ((c = cli_getopt(argc, argv, "", opts)) != -1)
    return c == 'h' ? (fputs(plan_usage, stdout), CLI_OK) : CLI_BADINPUT;
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
  if ((rc = cli_check_plan_shape(loads_path, loads->num_layers, loads->num_experts, plan,
                                 plan_path)))
    goto done;
  if ((st = eplb_plan_evaluate(plan, loads))) {
    rc = loads_error(st, "plan eval", loads_path);
    goto done;
  }
  uint32_t L = eplb_plan_num_layers(plan);
  if (json) {
    json_t *root;
    eplb_plan_eval_tree(plan, &root);
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

/* locality: the cluster (its GPUs must be --gpus) and a trace with top-k
 * rows, whose co-activation over the planned steps the library counts. */
static int locality_inputs(eplb_plan_options_t *po, const char *spec, eplb_trace_t *tr,
                           const char *trace_path, eplb_cluster_t **cl) {
  if (!spec)
    return cli_usage_error("plan --policy locality: needs --cluster FILE|NxG");
  eplb_status_t st = eplb_cluster_open(spec, cl);
  if (st)
    return cli_status_error(st, spec);
  if (eplb_cluster_num_gpus(*cl) != po->num_gpus)
    return cli_usage_error("--cluster %s: %u GPUs, but --gpus is %u", spec,
                           eplb_cluster_num_gpus(*cl), po->num_gpus);
  po->cluster = *cl;
  if (!eplb_trace_has_topk(tr))
    return cli_usage_error("%s: locality needs top-k rows (the trace has none)", trace_path);
  return CLI_OK;
}

/* plan diff: the migration from one plan to another (slots, bytes by link
 * class, rounds under a staging budget). */
static int plan_diff(int argc, char **argv) {
  const char *from_path = NULL, *to_path = NULL;
  eplb_plan_diff_options_t dopt; /* the runtime's defaults */
  eplb_plan_diff_options_default(&dopt);
  int json = 0, c, rc = CLI_OK;
  const cli_opt_t opts[] = {{"from", CLI_STR, .field = &from_path},
                            {"plan", CLI_STR, .field = &to_path},
                            {"expert-bytes", CLI_U64, .field = &dopt.expert_bytes},
                            {"staging-bytes", CLI_U64, .field = &dopt.staging_bytes},
                            {"layers-per-step", CLI_U32, .field = &dopt.layers_per_round},
                            {"json", CLI_FLAG, .field = &json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  optind = 1;
  /* The table takes every option but --help. */
  if ((c = cli_getopt(argc, argv, "", opts)) != -1)
    return c == 'h' ? (fputs(plan_usage, stdout), CLI_OK) : CLI_BADINPUT;
  if (!dopt.expert_bytes)
    return cli_usage_error("--expert-bytes: must be >= 1");
  if (!dopt.layers_per_round)
    return cli_usage_error("--layers-per-step: must be >= 1");
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
  if ((st = eplb_plan_diff_schedule(a, b, &dopt, &d))) {
    rc = cli_status_error(st, "plan diff");
    goto done;
  }
  static const char *const link[3] = {"same_gpu", "intra_node", "inter_node"};
  uint64_t slots = (uint64_t)eplb_plan_num_layers(a) * eplb_plan_num_slots(a);
  if (json) {
    json_t *root;
    eplb_plan_diff_tree(a, &dopt, &d, &root);
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
           d.rounds, (unsigned long long)dopt.staging_bytes, dopt.layers_per_round,
           (unsigned long long)d.max_bytes_in_round);
  }
done:
  eplb_plan_destroy(a);
  eplb_plan_destroy(b);
  return rc;
}

/* What `eplb plan` was asked, and what it holds while it runs. */
typedef struct plan_args {
  eplb_plan_options_t po;
  const char *loads_path, *out_path, *export_dir, *cluster_spec, *from_path;
  const char *model_arg, *gpu_arg; /* --model, --gpu (the decode policy) */
  eplb_model_desc_t model;
  eplb_gpu_desc_t gpu;
  eplb_plan_export_format_t export_fmt;
  uint64_t sb, se;
  uint32_t *slots, nslots;
  int json;
  /* Inputs. */
  eplb_cluster_t *cluster;
  eplb_plan_t *from;
  eplb_trace_t *trace; /* --loads as a trace, when the policy needs more than its sums */
  eplb_loads_t *loads; /* with a trace, the window eplb_plan_create_from_trace sums */
} plan_args_t;

/* Parses `eplb plan`'s options into *a. Returns CLI_OK, the exit code after
 * a line, or -1 after printing the help. */
static int plan_parse(int argc, char **argv, plan_args_t *a) {
  eplb_plan_options_t *po = &a->po;
  int gpus_given = 0, replicas_given = 0;
  const cli_opt_t opts[] = {
      {"loads", CLI_STR, .field = &a->loads_path},
      {"gpus", CLI_U32, .field = &po->num_gpus, .given = &gpus_given},
      {"nodes", CLI_U32, .field = &po->num_nodes},
      {"replicas", CLI_U32, .field = &po->num_replicas, .given = &replicas_given},
      {"groups", CLI_U32, .field = &po->num_groups},
      {"policy", CLI_ARG, .val = 'p'},
      {"keep-groups-on-nodes", CLI_FLAG, .field = &po->keep_groups_on_nodes},
      {"slots-per-gpu", CLI_ARG, .val = 'S'},
      {"steps", CLI_RANGE, .field = &a->sb, .given = &a->se},
      {"time-limit", CLI_DOUBLE, .field = &po->time_limit},
      {"threads", CLI_U32, .field = &po->threads},
      {"output", CLI_STR, .field = &a->out_path, .val = 'o'},
      {"export", CLI_ARG, .val = 'e'},
      {"json", CLI_FLAG, .field = &a->json},
      {"cluster", CLI_STR, .field = &a->cluster_spec},
      {"tolerance", CLI_DOUBLE, .field = &po->locality_tolerance},
      {"from", CLI_STR, .field = &a->from_path},
      {"move-budget", CLI_U32, .field = &po->move_budget},
      {"move-weight", CLI_DOUBLE, .field = &po->move_weight},
      {"shares", CLI_ARG, .val = 's'},
      {"effort", CLI_ARG, .val = 'f'},
      {"robust-steps", CLI_U32, .field = &po->robust_steps},
      {"robust-aggregate", CLI_DOUBLE, .field = &po->robust_aggregate_weight},
      {"model", CLI_STR, .field = &a->model_arg},
      {"gpu", CLI_STR, .field = &a->gpu_arg},
      {"help", CLI_NOARG, .val = 'h'},
      {NULL}};
  int c, bad = 0;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "o:", opts)) != -1) {
    switch (c) {
    case 'p':
      if (eplb_plan_policy_parse(optarg, &po->policy))
        return cli_usage_error("--policy: %s", eplb_error_detail());
      break;
    case 'S':
      free(a->slots);
      a->slots = NULL;
      bad = cli_parse_u32_list("--slots-per-gpu", optarg, &a->slots, &a->nslots);
      break;
    case 's':
      if (eplb_plan_shares_parse(optarg, &po->shares))
        return cli_usage_error("--shares: %s", eplb_error_detail());
      break;
    case 'f':
      if (eplb_plan_effort_parse(optarg, &po->effort))
        return cli_usage_error("--effort: %s", eplb_error_detail());
      break;
    case 'e':
      if (eplb_plan_export_format_parse(optarg, &a->export_fmt))
        return cli_usage_error("--export: %s", eplb_error_detail());
      if (optind >= argc)
        return cli_usage_error("--export %s: needs a directory", optarg);
      a->export_dir = argv[optind++];
      break;
    case 'h': fputs(plan_usage, stdout); return -1;
    default: return CLI_BADINPUT;
    }
    if (bad)
      return CLI_BADINPUT;
  }
  if (optind != argc)
    return cli_usage_error("plan: unexpected argument '%s'", argv[optind]);
  /* Given as 0: the value is wrong, not the command line incomplete. */
  if (gpus_given && !po->num_gpus)
    return cli_usage_error("--gpus 0: must be at least 1");
  if (replicas_given && !po->num_replicas)
    return cli_usage_error("--replicas 0: must be at least 1 (at least the experts)");
  if (!a->loads_path || !a->out_path || !po->num_gpus || !po->num_replicas)
    return cli_usage_error("plan: needs --loads FILE, --gpus G, --replicas R and -o PLAN.json "
                           "(see --help)");
  /* Before any work: an output that cannot be written (a directory, a FIFO,
   * a device, a missing directory) is bad input, found at once. */
  if (cli_check_output("-o", a->out_path, 0) ||
      (a->export_dir && cli_check_output("--export", a->export_dir, 1)))
    return CLI_BADINPUT;
  if (a->slots && a->nslots != po->num_gpus)
    return cli_usage_error("--slots-per-gpu: %u values for %u GPUs", a->nslots, po->num_gpus);
  po->slots_per_gpu = a->slots;
  /* Before the inputs are read: the library names the field, the CLI its option. */
  eplb_status_t st = eplb_plan_options_check(po);
  return st ? cli_option_error(st, NULL) : CLI_OK;
}

/* --loads as a trace: the library plans from the window of its one handle
 * (eplb_plan_create_from_trace: the window's sums, the co-activation and
 * the per-step loads of robust shares), summing it into a->loads. */
static int plan_trace_loads(plan_args_t *a) {
  eplb_status_t tst = eplb_trace_open(a->loads_path, NULL, &a->trace);
  if (tst && a->po.policy == EPLB_POLICY_LOCALITY)
    return cli_status_error(tst, a->loads_path);
  if (tst)
    return cli_usage_error("%s: robust shares need a trace (.eplbt) as --loads: %s", a->loads_path,
                           eplb_error_detail());
  const eplb_trace_meta_t *m = eplb_trace_meta(a->trace);
  uint64_t nsteps = eplb_trace_num_steps(a->trace);
  if (a->sb >= nsteps && (a->sb || a->se != UINT64_MAX))
    return cli_usage_error("--steps: %s has %llu steps; the range selects none", a->loads_path,
                           (unsigned long long)nsteps);
  eplb_status_t lst = eplb_loads_create(m->num_layers, m->num_experts, &a->loads);
  return lst ? cli_status_error(lst, a->loads_path) : CLI_OK;
}

/* The decode policy's deployment: --model, else the model of the trace the
 * loads were read from (the one handle, a->trace); --gpu, else h800. The
 * steps the loads sum are the library's to count (eplb_plan_create_from_trace:
 * the window's; other loads files are one step). */
static int decode_inputs(plan_args_t *a) {
  int have = 0;
  const char *tm = a->trace ? eplb_trace_meta(a->trace)->model : "";
  eplb_deployment_request_t dq = {a->model_arg,          a->gpu_arg, tm,        a->loads_path,
                                  a->loads->num_experts, 1,          "--model", "--gpu"};
  eplb_status_t st = eplb_deployment_resolve(&dq, &a->model, &a->gpu, &have);
  if (st)
    return cli_status_error(st, NULL); /* the detail names --model, --gpu or the loads */
  a->po.model = &a->model;
  a->po.gpu = &a->gpu;
  return CLI_OK;
}

/* The planner's inputs: loads (or the trace), and what the policy needs
 * besides (the cluster, the plan to change, the deployment). */
static int plan_inputs(plan_args_t *a) {
  eplb_plan_options_t *po = &a->po;
  int rc = CLI_OK;
  eplb_status_t st;
  if (po->policy == EPLB_POLICY_LOCALITY || po->shares == EPLB_SHARES_ROBUST)
    rc = plan_trace_loads(a);
  else if ((st = eplb_loads_read_trace(a->loads_path, a->sb, a->se, &a->loads,
                                       po->policy == EPLB_POLICY_DECODE ? &a->trace : NULL)))
    rc = cli_status_error(st, a->loads_path); /* decode: a trace is read once, and kept */
  if (rc || (po->policy == EPLB_POLICY_DECODE && (rc = decode_inputs(a))))
    return rc;
  if (po->policy == EPLB_POLICY_LOCALITY &&
      (rc = locality_inputs(po, a->cluster_spec, a->trace, a->loads_path, &a->cluster)))
    return rc;
  if ((po->policy == EPLB_POLICY_INCREMENTAL) != (a->from_path != NULL))
    return cli_usage_error(a->from_path ? "--from: only for --policy incremental"
                                        : "plan --policy incremental: needs --from PLAN.json");
  if (a->from_path) {
    eplb_status_t fst = eplb_plan_read(a->from_path, &a->from);
    if (fst)
      return cli_status_error(fst, a->from_path);
    if ((rc = cli_check_plan_shape(a->loads_path, a->loads->num_layers, a->loads->num_experts,
                                   a->from, a->from_path)))
      return rc;
    po->from = a->from;
  }
  return CLI_OK;
}

/* Writes the plan and the export to their temporaries, prints the summary,
 * and commits them all only if everything succeeded. */
static int plan_outputs(plan_args_t *a, const eplb_plan_t *plan) {
  eplb_status_t st;
  int rc = CLI_OK;
  const char *plan_tmp = cli_output_stage("-o", a->out_path, 0);
  if (!plan_tmp)
    return CLI_BADINPUT;
  if ((st = eplb_plan_write(plan, plan_tmp)))
    return cli_status_error(st, a->out_path);
  /* What a target that splits evenly serves (issue 15): the plan's own
   * loads under uniform shares. */
  eplb_plan_served_t served = {0};
  if (a->export_dir) {
    const char *export_tmp = cli_output_stage("--export", a->export_dir, 1);
    if (!export_tmp)
      return CLI_BADINPUT;
    for (const char *const *f = eplb_plan_export_files(a->export_fmt); f && *f; f++)
      cli_output_expect(export_tmp, *f);
    if ((st = eplb_plan_export(plan, a->export_fmt, export_tmp)))
      return cli_status_error(st, a->export_dir);
    if ((st = eplb_plan_evaluate_uniform(plan, a->loads, &served)))
      return cli_status_error(st, "plan --export");
    /* The formats carry no shares: say what the target will serve. */
    eplb_plan_summary_t s;
    eplb_plan_summary(plan, &s);
    if (served.shares_dropped)
      cli_message("--export %s: the format carries no shares, so the target splits evenly: "
                  "it serves balancedness mean %.4f min %.4f, not the planned %.4f (plan with "
                  "--shares uniform to optimise for it)",
                  eplb_plan_export_format_str(a->export_fmt), served.mean_balancedness,
                  served.min_balancedness, s.mean_balancedness);
  }
  if (a->json) {
    json_t *j; /* "seconds": the planning time */
    eplb_plan_summary_tree(plan, &j);
    if (a->export_dir) {
      json_object_set_new(j, "served_shares", json_string("uniform"));
      json_object_set_new(j, "served_balancedness", cli_real(served.mean_balancedness));
      json_object_set_new(j, "served_min_balancedness", cli_real(served.min_balancedness));
    }
    rc = cli_print_json(j);
  } else {
    summary_text(plan);
    if (a->export_dir && served.shares_dropped)
      printf("served by the %s export (uniform shares): balancedness mean %.4f min %.4f\n",
             eplb_plan_export_format_str(a->export_fmt), served.mean_balancedness,
             served.min_balancedness);
  }
  return cli_summary_commit(rc);
}

int cli_plan(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "eval"))
    return plan_eval(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "diff"))
    return plan_diff(argc - 1, argv + 1);
  plan_args_t a = {.export_fmt = EPLB_EXPORT_DEEPSEEK_CSV, .se = UINT64_MAX};
  eplb_plan_options_default(&a.po);
  eplb_plan_t *plan = NULL;
  int rc = plan_parse(argc, argv, &a);
  if (rc == -1)
    rc = CLI_OK;
  else if (rc == CLI_OK && (rc = plan_inputs(&a)) == CLI_OK) {
    eplb_status_t st =
        a.trace ? eplb_plan_create_from_trace(a.trace, a.sb, a.se, &a.po, NULL, a.loads, &plan)
                : eplb_plan_create(a.loads, &a.po, &plan);
    /* Every output goes to a temporary and all are renamed at the end: a
     * failure anywhere leaves none of them. */
    rc = st ? loads_error(st, "plan", a.loads_path) : plan_outputs(&a, plan);
  }
  cli_outputs_remove();
  free(a.slots);
  eplb_plan_destroy(plan);
  eplb_loads_destroy(a.loads);
  eplb_cluster_destroy(a.cluster);
  eplb_plan_destroy(a.from);
  eplb_trace_close(a.trace);
  return rc;
}
