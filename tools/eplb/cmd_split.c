/* tools/eplb/cmd_split.c — `eplb split`: re-split a plan's token shares
 * for new loads with the exact split solver, keeping its placement.
 *
 * "Before" is the plan's own shares evaluated on the loads (eplb_plan_evaluate),
 * "after" the optimal shares over the same replicas; the gap is what an online
 * re-split (LPLB-style) recovers without moving any expert weights. With a
 * cluster the split is the runtime's per-batch split with locality
 * (eplb_split_solve_local: T*, then the fewest tokens off their node), fed
 * with the per-node loads of the trace's top-k rows. */
#include "cli.h"

#include <eplb/plan.h>
#include <eplb/split.h>

#include <getopt.h>
#include <stdbool.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char split_usage[] =
    "usage: eplb split --plan PLAN.json --loads FILE [--steps A:B] [--integer]\n"
    "                  [--threads N] [-o NEW_PLAN.json] [--json]\n"
    "\n"
    "Re-solves every layer's token shares over the plan's placement for these loads\n"
    "(exact: the largest GPU load is the optimum T*) and compares with the plan's own\n"
    "shares. FILE is a trace (.eplbt, counts summed over --steps), a CSV matrix (rows =\n"
    "layers, columns = experts), a long-form CSV or an NPY counts array; its shape must\n"
    "match the plan. --integer splits whole tokens (loads must be integers; the largest\n"
    "GPU load is then ceil(T*)). -o writes the plan with the new shares (same placement).\n"
    "--threads N solves layers on N threads (default 0: the online cores; same result).\n"
    "\n"
    "  --cluster C    (a trace with top-k rows as --loads) split as the runtime does per\n"
    "                 batch with locality: the optimum T* first, then the fewest tokens\n"
    "                 sent off their source node with every GPU within T* (1 + T)\n"
    "                 (eplb_split_solve_local); tokens' nodes from the rows' source ranks,\n"
    "                 else round-robin (the simulator's rule). Cross-node copies are\n"
    "                 reported before (the plan's node shares, else local-first) and after.\n"
    "                 C: a cluster file or NxG with the plan's GPUs. -o writes the global mix.\n"
    "  --tolerance T  the locality slack, in [0, 1] (default 0.01)\n";

/* What `eplb split` reports: the library's per-layer figures
 * (eplb_plan_resplit) and the shape they were made for. */
typedef struct split_run {
  uint32_t L, E, G, N; /* N: the cluster's nodes, 0 without --cluster */
  eplb_plan_resplit_options_t o;
  eplb_plan_resplit_layer_t *layers; /* [L] */
} split_run_t;

/* Loads must fit the plan and, for whole-token splits, be integers; the
 * reader has already rejected negative and non-finite values. */
static int check_loads(const split_run_t *r, const eplb_loads_t *loads, const char *plan_path,
                       const char *loads_path) {
  if (loads->num_layers != r->L || loads->num_experts != r->E)
    return cli_usage_error("split: %s has %u layers x %u experts, plan %s has %u x %u", loads_path,
                           loads->num_layers, loads->num_experts, plan_path, r->L, r->E);
  for (size_t i = 0; i < (size_t)r->L * r->E; i++) {
    double v = loads->values[i];
    if (r->o.integer && (v != floor(v) || v > 9007199254740992.0))
      return cli_usage_error("split: %s: layer %zu expert %zu: --integer needs whole tokens of at "
                             "most 2^53 (9007199254740992, exact in a double), got %.17g",
                             loads_path, i / r->E, i % r->E, v);
  }
  return CLI_OK;
}

static void print_text(const split_run_t *r) {
  eplb_plan_resplit_summary_t y;
  eplb_plan_resplit_summarize(r->layers, r->L, &y);
  printf("layer  t_star  max_before  max_after  bal_before  bal_after\n");
  for (uint32_t l = 0; l < r->L; l++) {
    const eplb_plan_resplit_layer_t *x = &r->layers[l];
    printf("%5u  %.6g  %.6g  %.6g  %.5f  %.5f\n", l, x->t_star, x->max_load_before,
           x->max_load_after, x->balancedness_before, x->balancedness_after);
  }
  printf("%u layers: balancedness mean %.5f -> %.5f (%+.5f); summed max load %.6g -> %.6g "
         "(-%.2f%%)\n",
         r->L, y.mean_balancedness_before, y.mean_balancedness_after, y.balancedness_gain,
         y.max_load_before, y.max_load_after, 100.0 * y.max_load_reduction);
  if (r->N)
    printf("cross-node token copies (%u nodes, tolerance %g): %.6g -> %.6g\n", r->N, r->o.tolerance,
           y.cross_node_before, y.cross_node_after);
}

/* --cluster: the cluster (its GPUs are the plan's) and the node picks over
 * the same steps of the trace the loads were read from (*tr). */
static int locality_inputs(split_run_t *r, const char *spec, const char *trace_path, uint64_t sb,
                           uint64_t se, eplb_cluster_t **cl, eplb_trace_t **tr, eplb_coact_t **co) {
  eplb_status_t st = eplb_cluster_open(spec, cl);
  if (st)
    return cli_status_error(st, spec);
  if (eplb_cluster_num_gpus(*cl) != r->G)
    return cli_usage_error("--cluster %s: %u GPUs, but the plan has %u", spec,
                           eplb_cluster_num_gpus(*cl), r->G);
  if (!*tr && (st = eplb_trace_open(trace_path, NULL, tr))) /* the error: not a trace */
    return cli_usage_error("%s: --cluster needs a trace (.eplbt) with top-k rows as --loads: %s",
                           trace_path, eplb_error_detail());
  if (!eplb_trace_has_topk(*tr))
    return cli_usage_error("%s: --cluster needs top-k rows (the trace has none)", trace_path);
  if ((st = eplb_coact_from_trace(*tr, sb, se, *cl, co)))
    return cli_status_error(st, trace_path);
  r->N = eplb_cluster_num_nodes(*cl);
  r->o.coact = *co;
  r->o.cluster = *cl;
  return CLI_OK;
}

/* With -o, the new plan (same placement, the re-split shares, metrics on
 * these loads) to its temporary; the summary; then the commit, so that the
 * plan is renamed into place only once the summary is out. */
static int split_outputs(const split_run_t *r, const eplb_plan_t *plan, const char *out_path,
                         int json) {
  eplb_status_t st;
  int rc;
  if (out_path) {
    const char *tmp = cli_output_stage("-o", out_path, 0);
    if (!tmp)
      return CLI_BADINPUT;
    if ((st = eplb_plan_write(plan, tmp)))
      return cli_status_error(st, out_path);
  }
  if (json) {
    json_t *j;
    eplb_plan_resplit_tree(&r->o, r->layers, r->L, &j);
    rc = cli_print_json_flags(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  } else {
    print_text(r);
    rc = CLI_OK;
  }
  return cli_summary_commit(rc);
}

int cli_split(int argc, char **argv) {
  const char *plan_path = NULL, *loads_path = NULL, *out_path = NULL, *cluster_spec = NULL;
  eplb_cluster_t *cluster = NULL;
  eplb_trace_t *trace = NULL;
  eplb_coact_t *coact = NULL;
  uint64_t sb = 0, se = UINT64_MAX;
  int json = 0, c, rc = CLI_BADINPUT;
  eplb_plan_t *plan = NULL;
  eplb_loads_t *loads = NULL;
  eplb_status_t st;
  split_run_t r = {0};
  eplb_plan_resplit_options_default(&r.o);
  const cli_opt_t opts[] = {{"plan", CLI_STR, .field = &plan_path},
                            {"loads", CLI_STR, .field = &loads_path},
                            {"steps", CLI_RANGE, .field = &sb, .given = &se},
                            {"integer", CLI_FLAG, .field = &r.o.integer},
                            {"cluster", CLI_STR, .field = &cluster_spec},
                            {"tolerance", CLI_DOUBLE, .field = &r.o.tolerance},
                            {"threads", CLI_U32, .field = &r.o.threads},
                            {"output", CLI_STR, .field = &out_path, .val = 'o'},
                            {"json", CLI_FLAG, .field = &json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  optind = 1;
  if ((c = cli_getopt(argc, argv, "o:", opts)) != -1) { /* the table takes all but --help */
    rc = c == 'h' ? (fputs(split_usage, stdout), CLI_OK) : CLI_BADINPUT;
    goto done;
  }
  if (!(r.o.tolerance >= 0 && r.o.tolerance <= 1)) {
    rc = cli_usage_error("--tolerance %g: must be in [0, 1]", r.o.tolerance);
    goto done;
  }
  if (!plan_path || !loads_path || optind != argc) {
    rc = cli_usage_error("split: needs --plan PLAN.json and --loads FILE (see --help)");
    goto done;
  }
  if (out_path && (rc = cli_check_output("-o", out_path, 0)))
    goto done;
  if ((st = eplb_plan_read(plan_path, &plan))) {
    rc = cli_status_error(st, plan_path);
    goto done;
  }
  /* With --cluster, a trace is read once: its handle gives the node picks too. */
  if ((st = eplb_loads_read_trace(loads_path, sb, se, &loads, cluster_spec ? &trace : NULL))) {
    rc = cli_status_error(st, loads_path);
    goto done;
  }
  r.L = eplb_plan_num_layers(plan);
  r.E = eplb_plan_num_experts(plan);
  r.G = eplb_plan_num_gpus(plan);
  if ((rc = check_loads(&r, loads, plan_path, loads_path)))
    goto done;
  if (!(r.layers = calloc(r.L ? r.L : 1, sizeof *r.layers))) {
    rc = cli_out_of_memory("split");
    goto done;
  }
  if (cluster_spec &&
      (rc = locality_inputs(&r, cluster_spec, loads_path, sb, se, &cluster, &trace, &coact)))
    goto done;
  if ((st = eplb_plan_resplit(plan, loads, &r.o, out_path != NULL, r.layers))) {
    rc = cli_status_error(st, "split");
    goto done;
  }
  rc = split_outputs(&r, plan, out_path, json);
done:
  cli_outputs_remove();
  free(r.layers);
  eplb_coact_destroy(coact);
  eplb_trace_close(trace);
  eplb_cluster_destroy(cluster);
  eplb_loads_destroy(loads);
  eplb_plan_destroy(plan);
  return rc;
}
