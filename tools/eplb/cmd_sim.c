/* eplb sim — replay a trace against a plan or rebalancing policies. */
#include "cli.h"
#include "sim_plot.h"

#include <eplb/plan.h>
#include <eplb/sim.h>

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char sim_usage[] =
    "usage: eplb sim --trace T (--plan PLAN.json | --policy P [--plan-steps A:B |\n"
    "                --rebalance-every K [--window W]]) --cluster C [--replicas R |\n"
    "                --slots-per-gpu S] [--groups K] [--cost FILE] [--steps A:B]\n"
    "                [--split-per-batch [--split-tolerance T]] [--no-local-first] [--json]\n"
    "                [--csv STEPS.csv] [--plot OUT.png] [--threads N] [--time-limit S]\n"
    "                [--gain-threshold G] [--move-budget K] [--model M] [--gpu G]\n"
    "       eplb sim --compare P1,P2[,...] --trace T --cluster C --slots-per-gpu S [same options]\n"
    "\n"
    "  Replays the trace step by step and estimates per-GPU tokens, balancedness (mean/max GPU\n"
    "  tokens), cross-node token copies and bytes (also de-duplicated per node, as DeepEP's\n"
    "  normal kernels do) and the step time (slowest GPU's expert compute + all-to-all by link\n"
    "  class). Policies: deepseek, balanced, mip, locality, decode (with :exact, :uniform or\n"
    "  :robust shares, e.g. balanced:robust).\n"
    "\n"
    "  Token sources: a top-k row comes from its recorded source rank when that is < GPUs;\n"
    "  otherwise rows are spread round-robin within each step (row i from GPU i mod G). Steps\n"
    "  without rows assume sources uniform over the GPUs. Every plan is routed as the runtime\n"
    "  routes it: by its node shares (locality), else local-first (a token goes to its\n"
    "  expert's replicas on its own node when there are any, their shares renormalised).\n"
    "\n"
    "  --policy P          plan with P instead of a fixed plan: every K steps from the previous\n"
    "                      W steps (--rebalance-every K, --window W, default W = K; the first\n"
    "                      plan from the first W steps). Otherwise one plan: from --plan-steps,\n"
    "                      else from the whole replayed range (an oracle static plan). The same\n"
    "                      for --compare, except its default (see --plan-steps).\n"
    "  --plan-steps A:B    plan on trace steps [A, B) and score on the other replayed steps\n"
    "                      (with --rebalance-every: A:B before them, the first plan)\n"
    "                      (held out; they must be one range: A:B at either end of or outside\n"
    "                      --steps). --compare's default without --rebalance-every: plan on the\n"
    "                      first half of the replayed steps, score on the second half\n"
    "  --replicas R        slots per layer; or --slots-per-gpu S (default: the cluster file's)\n"
    "  --groups K          expert groups (default 1)\n"
    "  --cost FILE         cost model (JSON; see eplb/sim.h); default: from --model and --gpu\n"
    "  --model M           model preset (deepseek-v2-lite, deepseek-v3, qwen3-235b-a22b,\n"
    "                      kimi-k2, mixtral-8x7b) or model file (eplb/model.h); default: the\n"
    "                      trace's model when it has a preset, else DeepSeek-V3's table\n"
    "  --gpu G             GPU preset (h100, h200, h800, h20) or GPU file (default h800)\n"
    "  --steps A:B         replay steps [A, B)\n"
    "  --split-per-batch   re-solve the token shares for every step (LPLB-style)\n"
    "  --split-tolerance T the per-batch split's locality slack: the busiest GPU may exceed\n"
    "                      the optimum by T in [0, 1] to keep tokens on their node (0.01)\n"
    "  --no-local-first    route plans without node shares by their global shares\n"
    "  --gain-threshold G  with --rebalance-every: a layer of a new plan switches when it\n"
    "                      raises the layer's balancedness on the window by G (the runtime's\n"
    "                      rule and default, 0.01; -1: every layer that differs)\n"
    "  --move-budget K     with --rebalance-every: slots that may change per replan (0 = any)\n"
    "  --threads N         planner threads (0, the default: the online cores)\n"
    "  --time-limit S      mip: seconds per layer (default 10)\n";
/* C17 promises string literals of 4095 characters: the rest of the help. */
static const char sim_usage_more[] =
    "  --json              print JSON: {\"plan_steps\": [A, B], \"scored_steps\": [C, D],\n"
    "                      \"policies\": [{\"policy\", \"mean_balancedness\", ...}]} (ranges\n"
    "                      half-open; plan_steps: the first plan's, null for --plan)\n"
    "  --csv FILE          one row per step (a 'policy' column first with --compare)\n"
    "  --plot OUT.png      balancedness and step time over steps, per-GPU token heatmaps\n"
    "                      (needs gnuplot, Debian package gnuplot-nox)\n"
    "  --shares MODE       static shares of the planned policies: exact (the policy's own,\n"
    "                      default), uniform (1/c per replica) or robust (hedged over the\n"
    "                      per-step loads of the plan's window); per policy as P:MODE, e.g.\n"
    "                      --compare deepseek,balanced,balanced:uniform,balanced:robust\n"
    "  --robust-steps N    steps of the window sampled for robust shares (default 32)\n"
    "  --continuous W      continuous re-placement, the runtime's (needs --split-per-batch):\n"
    "                      after every step a few slots move towards the last W steps' counts\n"
    "                      (eplb_plan_step_moves) and serve from the next step (their copies\n"
    "                      land before their layer runs). With --plan-steps the planned steps\n"
    "                      before the scored ones run the moves too\n"
    "  --continuous-slots N  slots each GPU may receive per step (default 2)\n"
    "  --continuous-lag L  0 (default): moves from the counts up to the step just served;\n"
    "                      1: up to the step before (the runtime chooses on a thread)\n"
    "  --continuous-copy-steps C  1: a move serves only from the step after the next; in\n"
    "                      the next its slot serves its old expert (staged copy), or nothing\n"
    "                      with --continuous-in-place (default 0)\n"
    "  --moves-per-layer N slots one layer may change per step (default 8)\n"
    "  --move-weight X     a move must lower its layer's max load by X x the mean load\n"
    "                      (default 0.0005)\n"
    "  --no-oracle         skip the per-step oracle: each scored step planned on itself\n"
    "                      (balanced, exact shares) and its certified ceiling, printed beside\n"
    "                      the step time bound (it costs one plan per scored step)\n";

#define MAX_POLICIES 16
#define HEAT_BINS 600

typedef struct ctx {
  run_t *run;
  uint64_t begin;
  eplb_sim_csv_t *csv; /* its failures are eplb_sim_csv_finish's to report */
} ctx_t;

static void on_step(const eplb_sim_step_t *s, void *user) {
  ctx_t *c = user;
  run_t *r = c->run;
  uint64_t i = s->step - c->begin;
  if (i < r->n) {
    r->bal[i] = s->balancedness;
    r->time[i] = s->step_time_us;
    uint64_t b = i * r->bins / r->n;
    for (uint32_t g = 0; g < r->G; g++)
      r->heat[b * r->G + g] += s->gpu_tokens[g];
    r->heat_n[b] += 1;
  }
  if (c->csv)
    (void)eplb_sim_csv_append(c->csv, r->name, s);
}

static void run_free(run_t *r) {
  free(r->bal);
  free(r->time);
  free(r->heat);
  free(r->heat_n);
}

static int run_alloc(run_t *r, uint64_t n, uint32_t G) {
  r->n = n;
  r->G = G;
  r->bins = n < HEAT_BINS ? (uint32_t)n : HEAT_BINS;
  r->bal = calloc(n, sizeof(double));
  r->time = calloc(n, sizeof(double));
  r->heat = calloc((size_t)r->bins * G, sizeof(double));
  r->heat_n = calloc(r->bins, sizeof(double));
  return r->bal && r->time && r->heat && r->heat_n ? 0 : -1;
}

/* ---- output -------------------------------------------------------------- */

static void print_table(const run_t *runs, int n) {
  printf("%-18s %17s %15s %17s %16s %16s %15s %10s %14s\n", "policy", "mean_balancedness",
         "p5_balancedness", "cross_node_copies", "cross_node_bytes", "est_step_time_us",
         "p99_step_time_us", "max_active", "migrated_bytes");
  for (int i = 0; i < n; i++) {
    const eplb_sim_summary_t *s = &runs[i].sum;
    printf("%-18s %17.4f %15.4f %17.0f %16.4g %16.1f %15.1f %10.2f %14.4g\n", runs[i].name,
           s->mean_balancedness, s->p5_balancedness, s->cross_node_copies, s->cross_node_bytes,
           s->mean_step_time_us, s->p99_step_time_us, s->mean_max_active, s->migrated_bytes);
  }
  if (n > 0)
    printf("step time bound    %.1f us: no placement or split of these GPUs models faster "
           "(each expert with tokens reads its weights once)\n",
           runs[0].sum.bound_step_time_us);
}

static void print_summary(const run_t *r, int split, const char *steps, int local_first,
                          const char *priced) {
  const eplb_sim_summary_t *s = &r->sum;
  double n = (double)s->num_steps;
  printf("plan/policy           %s\n", r->name);
  printf("cost model            %s\n", priced);
  printf("steps                 %" PRIu64 " (traffic from top-k rows in %" PRIu64 ")\n",
         s->num_steps, s->used_rows_steps);
  printf("step ranges           %s\n", steps);
  printf("routing               %s\n", local_first ? "local-first" : "global shares");
  printf("mean balancedness     %.4f", s->mean_balancedness);
  if (split)
    printf(" (plan shares %.4f, split gain %+.4f)", s->mean_plan_balancedness,
           s->mean_balancedness - s->mean_plan_balancedness);
  printf("\np5 balancedness       %.4f\n", s->p5_balancedness);
  printf("min balancedness      %.4f (any layer)\n", s->min_balancedness);
  printf("cross-node copies     %.0f (%.1f per step)\n", s->cross_node_copies,
         s->cross_node_copies / n);
  printf("  de-duplicated       %.0f (%.1f per step)\n", s->dedup_copies, s->dedup_copies / n);
  printf("cross-node bytes      %.4g (de-duplicated %.4g)\n", s->cross_node_bytes, s->dedup_bytes);
  printf("est step time         %.1f us (mean), %.1f us (p99)\n", s->mean_step_time_us,
         s->p99_step_time_us);
  printf("max active replicas   %.2f (busiest GPU, mean over layers and steps)\n",
         s->mean_max_active);
  printf("step time bound       %.1f us (no placement or split of these GPUs models faster)\n",
         s->bound_step_time_us);
  printf("plans                 %" PRIu32 "\n", s->num_plans);
  printf("migrated bytes        %.4g (%.4g a step; copies %.1f us, of which %.1f us not hidden "
         "by the step: in the step time)\n",
         s->migrated_bytes, s->migrated_bytes / n, s->migration_us, s->migration_exposed_us);
}

/* ---- command ------------------------------------------------------------- */

typedef struct args {
  const char *trace, *plan, *cluster, *cost, *csv, *plot, *model, *gpu;
  char *policies[MAX_POLICIES];             /* the specs, for names */
  eplb_plan_policy_t policy[MAX_POLICIES];  /* parsed from policies[i] */
  eplb_plan_shares_t pshares[MAX_POLICIES]; /* its :MODE, else --shares */
  int npolicies, compare, json;
  uint32_t replicas, slots, groups;
  int have_rebalance, have_window;
  eplb_plan_shares_t shares; /* --shares: for policies without a :MODE suffix */
  int have_shares, have_robust_steps;
  int no_local_first;
  int no_oracle; /* --no-oracle: skip the per-step oracle (a plan per scored step) */
  /* --steps, --plan-steps (given: o.plan_step_end > 0), --split-per-batch, --rebalance-every,
   * --window, --threads,
   * --time-limit, --robust-steps, --split-tolerance, --gain-threshold and
   * --move-budget over the defaults. */
  eplb_sim_options_t o;
} args_t;

/* After every option: a spec without :MODE takes --shares. */
static int parse_policies(args_t *a, const char *list, char *buf, size_t bufsize) {
  snprintf(buf, bufsize, "%s", list);
  a->npolicies = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int i = a->npolicies;
    if (i == MAX_POLICIES)
      return cli_usage_error("--compare: at most %d policies", MAX_POLICIES), -1;
    a->pshares[i] = a->shares;
    if (eplb_plan_policy_spec_parse(t, &a->policy[i], &a->pshares[i]) != EPLB_OK)
      return cli_usage_error("policy: %s", eplb_error_detail()), -1;
    a->policies[a->npolicies++] = t;
  }
  if (!a->npolicies)
    return cli_usage_error("--compare: expected a comma-separated list of policies"), -1;
  return 0;
}

/* The combinations parse_args refuses once every option is read. */
static int check_args(const args_t *a, const char *policy, const char *compare) {
  if (!a->trace || !a->cluster)
    return cli_usage_error("sim: --trace and --cluster are required"), -1;
  if (!!a->plan + !!policy + !!compare != 1)
    return cli_usage_error("sim: give exactly one of --plan, --policy, --compare"), -1;
  if (a->plan && (a->have_rebalance || a->have_window || a->replicas || a->slots || a->groups))
    return cli_usage_error("sim: --rebalance-every, --window, --replicas, --slots-per-gpu and "
                           "--groups need --policy or --compare, not --plan"),
           -1;
  if (a->plan && a->o.plan_step_end)
    return cli_usage_error("sim: --plan-steps needs --policy or --compare (a plan file is "
                           "already made)"),
           -1;
  if (a->replicas && a->slots)
    return cli_usage_error("sim: give --replicas or --slots-per-gpu, not both"), -1;
  if (a->plan && (a->have_shares || a->have_robust_steps))
    return cli_usage_error("sim: --shares and --robust-steps need --policy or --compare (a "
                           "plan file carries its shares)"),
           -1;
  if (a->have_rebalance && a->o.rebalance_every == 0)
    return cli_usage_error("--rebalance-every: must be >= 1"), -1;
  if (a->have_window && (a->o.window == 0 || !a->have_rebalance))
    return cli_usage_error("--window: must be >= 1 and needs --rebalance-every"), -1;
  if (compare && !a->slots && !a->replicas)
    return cli_usage_error("sim --compare: --slots-per-gpu is required"), -1;
  /* The values, before the inputs are opened: the library names the field. */
  eplb_status_t st = eplb_sim_options_check(&a->o);
  return st ? (cli_option_error(st, NULL), -1) : 0;
}

static int parse_args(int argc, char **argv, args_t *a, char *pbuf, size_t pbufsize) {
  const char *policy = NULL, *compare = NULL;
  const cli_opt_t opts[] = {
      {"trace", CLI_STR, .field = &a->trace},
      {"plan", CLI_STR, .field = &a->plan},
      {"policy", CLI_STR, .field = &policy},
      {"rebalance-every", CLI_U64, .field = &a->o.rebalance_every, .given = &a->have_rebalance},
      {"window", CLI_U64, .field = &a->o.window, .given = &a->have_window},
      {"cluster", CLI_STR, .field = &a->cluster},
      {"replicas", CLI_U32, .field = &a->replicas},
      {"slots-per-gpu", CLI_U32, .field = &a->slots},
      {"groups", CLI_U32, .field = &a->groups},
      {"cost", CLI_STR, .field = &a->cost},
      {"steps", CLI_RANGE, .field = &a->o.step_begin, .given = &a->o.step_end},
      {"split-per-batch", CLI_FLAG, .field = &a->o.split_per_batch},
      {"json", CLI_FLAG, .field = &a->json},
      {"csv", CLI_STR, .field = &a->csv},
      {"plot", CLI_STR, .field = &a->plot},
      {"compare", CLI_STR, .field = &compare},
      {"shares", CLI_ARG, .val = 's'},
      {"robust-steps", CLI_U32, .field = &a->o.plan.robust_steps, .given = &a->have_robust_steps},
      {"plan-steps", CLI_RANGE, .field = &a->o.plan_step_begin, .given = &a->o.plan_step_end},
      {"no-local-first", CLI_FLAG, .field = &a->no_local_first},
      {"no-oracle", CLI_FLAG, .field = &a->no_oracle},
      {"threads", CLI_U32, .field = &a->o.plan.threads},
      {"time-limit", CLI_DOUBLE, .field = &a->o.plan.time_limit},
      {"split-tolerance", CLI_DOUBLE, .field = &a->o.split_tolerance},
      {"gain-threshold", CLI_DOUBLE, .field = &a->o.gain_threshold},
      {"move-budget", CLI_U64, .field = &a->o.move_budget},
      {"continuous", CLI_U32, .field = &a->o.continuous_window},
      {"continuous-slots", CLI_U32, .field = &a->o.step_moves.slots_per_gpu},
      {"continuous-lag", CLI_U32, .field = &a->o.continuous_lag},
      {"moves-per-layer", CLI_U32, .field = &a->o.step_moves.max_per_layer},
      {"move-weight", CLI_DOUBLE, .field = &a->o.step_moves.move_weight},
      {"continuous-in-place", CLI_FLAG, .field = &a->o.continuous_in_place},
      {"continuous-copy-steps", CLI_U32, .field = &a->o.continuous_copy_steps},
      {"model", CLI_STR, .field = &a->model},
      {"gpu", CLI_STR, .field = &a->gpu},
      {"help", CLI_NOARG, .val = 'h'},
      {NULL}};
  int c;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "h", opts)) != -1) {
    switch (c) {
    case 's':
      if (eplb_plan_shares_parse(optarg, &a->shares) != EPLB_OK)
        return cli_usage_error("--shares: %s", eplb_error_detail()), -1;
      a->have_shares = 1;
      break;
    case 'h':
      fputs(sim_usage, stdout);
      fputs(sim_usage_more, stdout);
      return 1;
    default: return -1;
    }
  }
  if (optind != argc)
    return cli_usage_error("sim: unexpected argument '%s'", argv[optind]), -1;
  if (check_args(a, policy, compare))
    return -1;
  if (policy)
    return parse_policies(a, policy, pbuf, pbufsize);
  if (compare) {
    a->compare = 1;
    return parse_policies(a, compare, pbuf, pbufsize);
  }
  return 0;
}

/* Which steps were planned on and scored, counted inclusively as people
 * read ranges: "planned on steps 0-64, scored on steps 65-129". */
static void steps_phrase(char *buf, size_t n, const args_t *a, const uint64_t ps[2],
                         const uint64_t sc[2]) {
  if (a->plan)
    snprintf(buf, n, "scored on steps %" PRIu64 "-%" PRIu64 " (a fixed plan)", sc[0], sc[1] - 1);
  else if (a->have_rebalance)
    snprintf(buf, n,
             "first plan on steps %" PRIu64 "-%" PRIu64 ", replanned every %" PRIu64
             " steps from the previous %" PRIu64 "; scored on steps %" PRIu64 "-%" PRIu64,
             ps[0], ps[1] - 1, a->o.rebalance_every,
             a->have_window ? a->o.window : a->o.rebalance_every, sc[0], sc[1] - 1);
  else
    snprintf(buf, n,
             "planned on steps %" PRIu64 "-%" PRIu64 ", scored on steps %" PRIu64 "-%" PRIu64 "%s",
             ps[0], ps[1] - 1, sc[0], sc[1] - 1,
             ps[0] < sc[1] && sc[0] < ps[1] ? " (the plan has seen them)" : "");
}

/* Stages the --csv output and starts it (a policy column first with
 * --compare). */
static int open_csv(const char *path, int compare, uint32_t G, eplb_sim_csv_t **out) {
  const char *tmp = cli_output_stage("--csv", path, 0);
  if (!tmp)
    return CLI_BADINPUT;
  eplb_status_t st = eplb_sim_csv_create(tmp, G, compare, out);
  return st ? cli_status_error(st, path) : CLI_OK;
}

/* Does any run need the deployment (the decode policy)? */
static int needs_model(const args_t *a) {
  for (int i = 0; i < a->npolicies; i++)
    if (a->policy[i] == EPLB_POLICY_DECODE)
      return 1;
  return 0;
}

/* The simulator's options from the arguments: steps, routing, the per-batch
 * split, rebalancing and the plan's slots (policy mode). Returns an exit
 * code; *slots (the cluster's per-GPU slots) is the caller's to free. */
static int sim_options(const args_t *a, const eplb_cluster_t *cl, eplb_sim_options_t *o,
                       uint32_t **slots) {
  uint32_t G = eplb_cluster_num_gpus(cl);
  *o = a->o;
  o->local_first = !a->no_local_first;
  o->plan.num_groups = a->groups ? a->groups : 1;
  if (a->plan)
    return CLI_OK;
  if (!(*slots = calloc(G ? G : 1, sizeof **slots)))
    return cli_out_of_memory("sim");
  eplb_status_t st = eplb_sim_options_slots(o, cl, a->slots, a->replicas, *slots);
  if (st == EPLB_EINVAL && !a->slots)
    return cli_usage_error("sim --policy: give --replicas or --slots-per-gpu (the cluster does "
                           "not set slots_per_gpu)");
  if (st != EPLB_OK)
    return cli_usage_error("%s: %s", st == EPLB_EINVAL ? "--slots-per-gpu" : "sim",
                           eplb_error_detail());
  return CLI_OK;
}

/* The per-step oracle beside the policies: how far planning on the future
 * would get (eplb_sim_oracle). */
static void print_oracle(const eplb_sim_oracle_t *o) {
  if (o->num_steps)
    printf("per-step oracle       %.4f balancedness, ceiling %.4f (each scored step planned on "
           "itself; no placement of these slots passes the ceiling)\n",
           o->balancedness, o->ceiling);
}

/* The figures on stdout: JSON, the --compare table or one run's summary.
 * Returns an exit code. */
static int print_results(const args_t *a, const eplb_sim_options_t *o, const run_t *runs, int nruns,
                         const uint64_t ps[2], const uint64_t sc[2], const char *steps,
                         const char *priced, const eplb_sim_oracle_t *oracle) {
  if (a->json) {
    eplb_sim_summary_t sums[MAX_POLICIES];
    const char *names[MAX_POLICIES];
    for (int i = 0; i < nruns; i++)
      sums[i] = runs[i].sum, names[i] = runs[i].name;
    eplb_sim_report_t rep = {a->trace,        a->cluster,     o,
                             a->plan != NULL, {ps[0], ps[1]}, {sc[0], sc[1]},
                             (uint32_t)nruns, sums,           names};
    json_t *root;
    eplb_sim_report_tree(&rep, &root);
    json_object_set_new(root, "cost_model", cli_json_checked(json_string(priced)));
    json_object_set_new(root, "oracle",
                        oracle->num_steps
                            ? cli_json_checked(json_pack(
                                  "{sI sf sf}", "steps", (json_int_t)oracle->num_steps,
                                  "balancedness", oracle->balancedness, "ceiling", oracle->ceiling))
                            : json_null());
    return cli_print_json_flags(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  } else if (a->compare) {
    printf("%s; %s routing; cost model %s\n", steps,
           a->no_local_first ? "global-share" : "local-first", priced);
    print_table(runs, nruns);
    print_oracle(oracle);
  } else {
    print_summary(&runs[0], a->o.split_per_batch, steps, !a->no_local_first, priced);
    print_oracle(oracle);
  }
  return CLI_OK;
}

/* Replays the trace once per policy (or once with the plan file), each run
 * keeping its series in runs[i] and writing its rows to csv. */
static int run_all(const args_t *a, eplb_trace_t *tr, const eplb_cluster_t *cl,
                   const eplb_plan_t *plan, eplb_sim_options_t *o, run_t *runs, int nruns,
                   const uint64_t sc[2], eplb_sim_csv_t *csv) {
  uint32_t G = eplb_cluster_num_gpus(cl);
  eplb_status_t st;
  for (int i = 0; i < nruns; i++) {
    run_t *r = &runs[i];
    r->name = a->plan ? a->plan : a->policies[i];
    if (run_alloc(r, sc[1] - sc[0], G)) {
      return cli_out_of_memory("sim");
    }
    if (!a->plan) {
      o->plan.policy = a->policy[i];
      o->plan.shares = a->pshares[i];
    }
    ctx_t c = {r, sc[0], csv};
    o->on_step = on_step;
    o->user = &c;
    if ((st = eplb_sim_run(tr, cl, plan, o, &r->sum)) != EPLB_OK) {
      char what[300];
      snprintf(what, sizeof what, "sim %s", r->name);
      return cli_status_error(st, what);
    }
  }
  return CLI_OK;
}

/* The steps planned on and scored: --plan-steps, else --compare's held-out
 * default (plan on the first half, score the second). Returns an exit code. */
static int plan_and_score_steps(const args_t *a, eplb_trace_t *tr, eplb_sim_options_t *o,
                                uint64_t ps[2], uint64_t sc[2]) {
  eplb_status_t st;
  uint64_t nsteps = eplb_trace_num_steps(tr);
  uint64_t end = a->o.step_end < nsteps ? a->o.step_end : nsteps;
  if (a->o.step_begin >= end)
    return cli_usage_error("--steps: %s has %" PRIu64 " steps; nothing to replay", a->trace,
                           nsteps);
  if (!o->plan_step_end && a->compare && !a->have_rebalance && eplb_sim_options_hold_out(o, nsteps))
    return cli_usage_error("sim --compare: %s (give --plan-steps or --rebalance-every)",
                           eplb_error_detail());
  if ((st = eplb_sim_steps(o, nsteps, a->plan != NULL, ps, sc)) != EPLB_OK)
    return cli_status_error(st, "sim");
  return CLI_OK;
}

int cli_sim(int argc, char **argv) {
  args_t a = {0};
  eplb_sim_options_default(&a.o);
  char pbuf[1024];
  int rc = parse_args(argc, argv, &a, pbuf, sizeof pbuf);
  if (rc)
    return rc > 0 ? CLI_OK : CLI_BADINPUT;
  eplb_trace_t *tr = NULL;
  eplb_cluster_t *cl = NULL;
  eplb_plan_t *plan = NULL;
  uint32_t *slots = NULL;
  eplb_sim_csv_t *csv = NULL;
  eplb_cost_model_t cost;
  eplb_sim_pricing_t price;
  run_t runs[MAX_POLICIES] = {0};
  int nruns = a.plan ? 1 : a.npolicies;
  eplb_status_t st;
  const char *plot_tmp = NULL;
  /* Unwritable outputs are bad input, found before any work. */
  if ((a.csv && (rc = cli_check_output("--csv", a.csv, 0))) ||
      (a.plot && (rc = cli_check_output("--plot", a.plot, 0))))
    goto done;
  if (a.cost && (st = eplb_cost_model_read(a.cost, &cost)) != EPLB_OK) {
    rc = cli_status_error(st, "--cost");
    goto done;
  }
  if ((st = eplb_trace_open(a.trace, NULL, &tr)) != EPLB_OK) {
    rc = cli_status_error(st, "--trace");
    goto done;
  }
  if ((st = eplb_cluster_open(a.cluster, &cl)) != EPLB_OK) {
    rc = cli_status_error(st, "--cluster");
    goto done;
  }
  if (a.plan && (st = eplb_plan_read(a.plan, &plan)) != EPLB_OK) {
    rc = cli_status_error(st, "--plan");
    goto done;
  }
  const eplb_trace_meta_t *tm = eplb_trace_meta(tr);
  eplb_deployment_request_t dq = {a.model,         a.gpu,           tm->model, a.trace,
                                  tm->num_experts, needs_model(&a), "--model", "--gpu"};
  /* Into the options sim_options copies: the runs point into price. */
  if ((st = eplb_sim_options_price(&a.o, &dq, a.cost ? &cost : NULL, a.cost, &price)) != EPLB_OK) {
    rc = cli_status_error(st, NULL); /* the detail names --model, --gpu or the trace */
    goto done;
  }
  if (plan && (rc = cli_check_plan_shape(a.trace, tm->num_layers, tm->num_experts, plan, a.plan)))
    goto done;
  uint32_t G = eplb_cluster_num_gpus(cl);
  if (eplb_cluster_num_nodes(cl) > EPLB_MAX_SIM_NODES) {
    rc = cli_usage_error("--cluster %s: %" PRIu32 " nodes: over the simulator's limit of %u",
                         a.cluster, eplb_cluster_num_nodes(cl), EPLB_MAX_SIM_NODES);
    goto done;
  }
  eplb_sim_options_t o;
  if ((rc = sim_options(&a, cl, &o, &slots)) != CLI_OK)
    goto done;
  uint64_t ps[2], sc[2];
  if ((rc = plan_and_score_steps(&a, tr, &o, ps, sc)))
    goto done;
  char steps[256];
  steps_phrase(steps, sizeof steps, &a, ps, sc);
  if (a.csv && (rc = open_csv(a.csv, a.compare, G, &csv)) != CLI_OK)
    goto done;
  if ((rc = run_all(&a, tr, cl, plan, &o, runs, nruns, sc, csv)))
    goto done;
  if (csv && (st = eplb_sim_csv_finish(csv))) {
    csv = NULL; /* a row or the file could not be written */
    rc = st == EPLB_ENOMEM ? cli_out_of_memory("sim") : cli_status_error(st, a.csv);
    goto done;
  }
  csv = NULL;
  eplb_sim_oracle_t oracle = {0};
  if (!a.no_oracle && (st = eplb_sim_run_oracle(tr, cl, plan, &o, &oracle))) {
    rc = cli_status_error(st, "per-step oracle");
    goto done;
  }
  if ((rc = print_results(&a, &o, runs, nruns, ps, sc, steps, price.phrase, &oracle)))
    goto done;
  if ((rc = cli_flush_summary()))
    goto done;
  /* Last: a plot that fails still leaves the figures on stdout, and no file. */
  if (a.plot) {
    if (!(plot_tmp = cli_output_stage("--plot", a.plot, 0))) {
      rc = CLI_BADINPUT;
      goto done;
    }
    if ((rc = sim_plot(plot_tmp, runs, nruns, sc[0])))
      goto done;
  }
  rc = cli_outputs_commit();
done:
  eplb_sim_csv_destroy(csv);
  cli_outputs_remove();
  for (int i = 0; i < nruns; i++)
    run_free(&runs[i]);
  free(slots);
  eplb_plan_destroy(plan);
  eplb_cluster_destroy(cl);
  eplb_trace_close(tr);
  return rc;
}
