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
    "                  [-o NEW_PLAN.json] [--json]\n"
    "\n"
    "Re-solves every layer's token shares over the plan's placement for these loads\n"
    "(exact: the largest GPU load is the optimum T*) and compares with the plan's own\n"
    "shares. FILE is a trace (.eplbt, counts summed over --steps), a CSV matrix (rows =\n"
    "layers, columns = experts), a long-form CSV or an NPY counts array; its shape must\n"
    "match the plan. --integer splits whole tokens (loads must be integers; the largest\n"
    "GPU load is then ceil(T*)). -o writes the plan with the new shares (same placement).\n"
    "\n"
    "  --cluster C    (a trace with top-k rows as --loads) split as the runtime does per\n"
    "                 batch with locality: the optimum T* first, then the fewest tokens\n"
    "                 sent off their source node with every GPU within T* (1 + T)\n"
    "                 (eplb_split_solve_local); tokens' nodes from the rows' source ranks,\n"
    "                 else round-robin (the simulator's rule). Cross-node copies are\n"
    "                 reported before (the plan's node shares, else local-first) and after.\n"
    "                 C: a cluster file or NxG with the plan's GPUs. -o writes the global mix.\n"
    "  --tolerance T  the locality slack, in [0, 1] (default 0.01)\n";

typedef struct split_layer {
  double t_star, before, after, bal_before, bal_after, lower_bound;
  double cross_before, cross_after; /* with a cluster: tokens routed off their node */
} split_layer_t;

typedef struct split_run {
  uint32_t L, E, G, R;
  uint32_t *phy2log, *slots; /* [R], [G] */
  double *share, *gpu_load;  /* [R], [G]: the current layer's result */
  split_layer_t *layers;     /* [L] */
  eplb_plan_t *out;          /* receives the new shares (-o), or NULL */
  /* Locality (--cluster), else N = 0. */
  uint32_t N;
  uint32_t *gpu_node;            /* [G] */
  const eplb_coact_t *coact;     /* node picks of the trace's rows */
  const eplb_cluster_t *cluster; /* their nodes' GPUs */
  double tolerance;
  double *node_loads, *node_share; /* [N][E], [N][R] */
} split_run_t;

static double balancedness(double mean, double max) { return max > 0 ? mean / max : 1.0; }

/* Loads must fit the plan and, for whole-token splits, be integers; the
 * reader has already rejected negative and non-finite values. */
static int check_loads(const split_run_t *r, const eplb_loads_t *loads, const char *plan_path,
                       const char *loads_path, int integer) {
  if (loads->num_layers != r->L || loads->num_experts != r->E)
    return cli_usage_error("split: %s has %u layers x %u experts, plan %s has %u x %u", loads_path,
                           loads->num_layers, loads->num_experts, plan_path, r->L, r->E);
  for (size_t i = 0; i < (size_t)r->L * r->E; i++) {
    double v = loads->values[i];
    if (integer && (v != floor(v) || v > 9007199254740992.0))
      return cli_usage_error("split: %s: layer %zu expert %zu: --integer needs whole tokens, got "
                             "%.17g",
                             loads_path, i / r->E, i % r->E, v);
  }
  return CLI_OK;
}

/* Tokens the plan sends off their node: by its node shares, else
 * local-first (a node's tokens stay on its replicas when it has any), as
 * the runtime routes. */
static double plan_cross(const split_run_t *r, const eplb_plan_t *plan, uint32_t l) {
  const double *ns = eplb_plan_node_share(plan, l);
  bool by_node = ns && eplb_plan_node_share_nodes(plan) == r->N;
  const int32_t *p2l = eplb_plan_phy2log(plan, l);
  const double *sh = eplb_plan_share(plan, l);
  double x = 0;
  for (uint32_t n = 0; n < r->N; n++)
    for (uint32_t e = 0; e < r->E; e++) {
      double d = r->node_loads[(size_t)n * r->E + e], off = 0, on = 0;
      if (d <= 0)
        continue;
      for (uint32_t g = 0, s = 0; g < r->G; g++)
        for (uint32_t k = 0; k < r->slots[g]; k++, s++)
          if ((uint32_t)p2l[s] == e)
            *(r->gpu_node[g] == n ? &on : &off) += by_node ? ns[(size_t)n * r->R + s] : sh[s];
      x += by_node ? d * off : on > 0 ? 0 : d;
    }
  return x;
}

/* Solves every layer and fills r->layers. */
static int split_layers(split_run_t *r, eplb_plan_t *plan, const eplb_loads_t *loads, int integer) {
  eplb_status_t st;
  eplb_split_t *solver = NULL;
  eplb_split_options_t o;
  int rc = CLI_FAIL;
  eplb_split_options_default(&o);
  o.mode = integer ? EPLB_SPLIT_INTEGER : EPLB_SPLIT_FRACTIONAL;
  if ((st = eplb_plan_evaluate(plan, loads))) {
    rc = cli_status_error(st, "split");
    goto done;
  }
  if ((st = eplb_split_create(&o, &solver))) {
    rc = cli_status_error(st, "split");
    goto done;
  }
  memcpy(r->slots, eplb_plan_slots_per_gpu(plan), (size_t)r->G * sizeof *r->slots);
  for (uint32_t l = 0; l < r->L; l++) {
    const int32_t *p2l = eplb_plan_phy2log(plan, l);
    for (uint32_t s = 0; s < r->R; s++)
      r->phy2log[s] = (uint32_t)p2l[s];
    eplb_split_problem_t p = {r->E, r->G, r->R, r->phy2log, r->slots};
    eplb_split_result_t res = {.share = r->share, .gpu_load = r->gpu_load};
    double cross = 0;
    if (r->N) {
      if ((st = eplb_coact_node_loads(r->coact, r->cluster, l, loads->values + (size_t)l * r->E,
                                      r->node_loads))) {
        rc = cli_status_error(st, "split");
        goto done;
      }
      r->layers[l].cross_before = plan_cross(r, plan, l);
      eplb_split_local_t loc = {r->N, r->gpu_node, r->node_loads, r->tolerance};
      st = eplb_split_solve_local(solver, &p, &loc, &res, r->node_share, &cross);
    } else {
      st = eplb_split_solve(solver, &p, loads->values + (size_t)l * r->E, &res);
    }
    if (st) {
      char what[64];
      snprintf(what, sizeof what, "split: layer %u", l);
      rc = cli_status_error(st, what);
      goto done;
    }
    eplb_plan_layer_metrics_t m;
    eplb_plan_layer_metrics(plan, l, &m);
    if (r->out && (st = eplb_plan_set_shares(r->out, l, r->share))) {
      rc = cli_status_error(st, "split");
      goto done;
    }
    split_layer_t *y = &r->layers[l];
    y->t_star = res.t_star;
    y->before = m.max_load;
    y->after = res.max_load;
    y->bal_before = m.balancedness;
    y->bal_after = balancedness(m.mean_load, res.max_load);
    y->lower_bound = m.lower_bound;
    y->cross_after = cross;
  }
  rc = CLI_OK;
done:
  eplb_split_destroy(solver);
  return rc;
}

/* The JSON report, or NULL when out of memory. */
static json_t *split_json(const split_run_t *r, int integer) {
  json_t *root = json_object(), *layers = json_array(), *sum = json_object();
  double mb = 0, ma = 0, sb = 0, sa = 0, minb = INFINITY, mina = INFINITY, xb = 0, xa = 0;
  if (!root || !layers || !sum)
    goto fail;
  for (uint32_t l = 0; l < r->L; l++) {
    const split_layer_t *y = &r->layers[l];
    json_t *o = json_object();
    if (!o)
      goto fail;
    json_object_set_new(o, "layer", json_integer(l));
    json_object_set_new(o, "t_star", cli_real(y->t_star));
    json_object_set_new(o, "max_load_before", cli_real(y->before));
    json_object_set_new(o, "max_load_after", cli_real(y->after));
    json_object_set_new(o, "balancedness_before", cli_real(y->bal_before));
    json_object_set_new(o, "balancedness_after", cli_real(y->bal_after));
    json_object_set_new(o, "lower_bound", cli_real(y->lower_bound));
    if (r->N) {
      json_object_set_new(o, "cross_node_copies_before", cli_real(y->cross_before));
      json_object_set_new(o, "cross_node_copies_after", cli_real(y->cross_after));
    }
    json_array_append_new(layers, o);
    xb += y->cross_before;
    xa += y->cross_after;
    mb += y->bal_before;
    ma += y->bal_after;
    sb += y->before;
    sa += y->after;
    minb = fmin(minb, y->bal_before);
    mina = fmin(mina, y->bal_after);
  }
  json_object_set_new(root, "layers", layers);
  layers = NULL;
  json_object_set_new(sum, "layers", json_integer(r->L));
  json_object_set_new(sum, "integer", json_boolean(integer));
  json_object_set_new(sum, "mean_balancedness_before", cli_real(mb / r->L));
  json_object_set_new(sum, "mean_balancedness_after", cli_real(ma / r->L));
  json_object_set_new(sum, "min_balancedness_before", cli_real(minb));
  json_object_set_new(sum, "min_balancedness_after", cli_real(mina));
  json_object_set_new(sum, "balancedness_gain", cli_real((ma - mb) / r->L));
  json_object_set_new(sum, "mean_max_load_before", cli_real(sb / r->L));
  json_object_set_new(sum, "mean_max_load_after", cli_real(sa / r->L));
  /* Summed over layers, max loads are the per-step MoE critical path. */
  json_object_set_new(sum, "max_load_reduction", cli_real(sb > 0 ? 1.0 - sa / sb : 0.0));
  if (r->N) {
    json_object_set_new(sum, "nodes", json_integer(r->N));
    json_object_set_new(sum, "tolerance", cli_real(r->tolerance));
    json_object_set_new(sum, "cross_node_copies_before", cli_real(xb));
    json_object_set_new(sum, "cross_node_copies_after", cli_real(xa));
  }
  json_object_set_new(root, "summary", sum);
  return root;
fail:
  json_decref(layers);
  json_decref(sum);
  json_decref(root);
  return NULL;
}

static void print_text(const split_run_t *r) {
  double mb = 0, ma = 0, sb = 0, sa = 0;
  printf("layer  t_star  max_before  max_after  bal_before  bal_after\n");
  for (uint32_t l = 0; l < r->L; l++) {
    const split_layer_t *y = &r->layers[l];
    printf("%5u  %.6g  %.6g  %.6g  %.5f  %.5f\n", l, y->t_star, y->before, y->after, y->bal_before,
           y->bal_after);
    mb += y->bal_before;
    ma += y->bal_after;
    sb += y->before;
    sa += y->after;
  }
  printf("%u layers: balancedness mean %.5f -> %.5f (%+.5f); summed max load %.6g -> %.6g "
         "(-%.2f%%)\n",
         r->L, mb / r->L, ma / r->L, (ma - mb) / r->L, sb, sa,
         sb > 0 ? 100.0 * (1.0 - sa / sb) : 0);
  if (r->N) {
    double xb = 0, xa = 0;
    for (uint32_t l = 0; l < r->L; l++)
      xb += r->layers[l].cross_before, xa += r->layers[l].cross_after;
    printf("cross-node token copies (%u nodes, tolerance %g): %.6g -> %.6g\n", r->N, r->tolerance,
           xb, xa);
  }
}

/* --cluster: the cluster (its GPUs are the plan's), the trace's node picks
 * over the same steps, and the buffers of the locality split. */
static int locality_inputs(split_run_t *r, const char *spec, const char *trace_path, uint64_t sb,
                           uint64_t se, eplb_cluster_t **cl, eplb_trace_t **tr, eplb_coact_t **co) {
  eplb_status_t st = eplb_cluster_open(spec, cl);
  if (st)
    return cli_status_error(st, spec);
  if (eplb_cluster_num_gpus(*cl) != r->G)
    return cli_usage_error("--cluster %s: %u GPUs, but the plan has %u", spec,
                           eplb_cluster_num_gpus(*cl), r->G);
  if ((st = eplb_trace_open(trace_path, NULL, tr)))
    return cli_usage_error("%s: --cluster needs a trace (.eplbt) with top-k rows as --loads: %s",
                           trace_path, eplb_error_detail());
  if (!eplb_trace_has_topk(*tr))
    return cli_usage_error("%s: --cluster needs top-k rows (the trace has none)", trace_path);
  if ((st = eplb_coact_from_trace(*tr, sb, se, *cl, co)))
    return cli_status_error(st, trace_path);
  r->N = eplb_cluster_num_nodes(*cl);
  r->coact = *co;
  r->cluster = *cl;
  r->gpu_node = malloc((size_t)r->G * sizeof *r->gpu_node);
  r->node_loads = malloc((size_t)r->N * r->E * sizeof *r->node_loads);
  r->node_share = malloc((size_t)r->N * r->R * sizeof *r->node_share);
  if (!r->gpu_node || !r->node_loads || !r->node_share)
    return cli_out_of_memory("split");
  for (uint32_t g = 0; g < r->G; g++)
    r->gpu_node[g] = eplb_cluster_node_of(*cl, g);
  return CLI_OK;
}

int cli_split(int argc, char **argv) {
  static const struct option opts[] = {{"plan", required_argument, NULL, 'p'},
                                       {"loads", required_argument, NULL, 'l'},
                                       {"steps", required_argument, NULL, 's'},
                                       {"integer", no_argument, NULL, 'i'},
                                       {"cluster", required_argument, NULL, 'c'},
                                       {"tolerance", required_argument, NULL, 't'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *plan_path = NULL, *loads_path = NULL, *out_path = NULL, *cluster_spec = NULL;
  eplb_cluster_t *cluster = NULL;
  eplb_trace_t *trace = NULL;
  eplb_coact_t *coact = NULL;
  uint64_t sb = 0, se = UINT64_MAX;
  int json = 0, integer = 0, c, rc = CLI_BADINPUT;
  eplb_plan_t *plan = NULL;
  eplb_loads_t *loads = NULL;
  eplb_status_t st;
  split_run_t r;
  memset(&r, 0, sizeof r);
  r.tolerance = 0.01;
  optind = 1;
  while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
    switch (c) {
    case 'p': plan_path = optarg; break;
    case 'l': loads_path = optarg; break;
    case 'o': out_path = optarg; break;
    case 's':
      if (cli_parse_range("--steps", optarg, &sb, &se))
        goto done;
      break;
    case 'i': integer = 1; break;
    case 'c': cluster_spec = optarg; break;
    case 't':
      if (cli_parse_double("--tolerance", optarg, &r.tolerance))
        goto done;
      if (!(r.tolerance >= 0 && r.tolerance <= 1)) {
        rc = cli_usage_error("--tolerance %s: must be in [0, 1]", optarg);
        goto done;
      }
      break;
    case 'j': json = 1; break;
    case 'h':
      fputs(split_usage, stdout);
      rc = CLI_OK;
      goto done;
    default: goto done;
    }
  }
  if (!plan_path || !loads_path || optind != argc) {
    rc = cli_usage_error("split: needs --plan PLAN.json and --loads FILE (see --help)");
    goto done;
  }
  if ((st = eplb_plan_read(plan_path, &plan))) {
    rc = cli_status_error(st, plan_path);
    goto done;
  }
  if ((rc = cli_read_loads(loads_path, sb, se, &loads)))
    goto done;
  r.L = eplb_plan_num_layers(plan);
  r.E = eplb_plan_num_experts(plan);
  r.G = eplb_plan_num_gpus(plan);
  r.R = eplb_plan_num_slots(plan);
  if ((rc = check_loads(&r, loads, plan_path, loads_path, integer)))
    goto done;
  r.phy2log = malloc((size_t)r.R * sizeof *r.phy2log);
  r.slots = malloc((size_t)r.G * sizeof *r.slots);
  r.share = malloc((size_t)r.R * sizeof *r.share);
  r.gpu_load = malloc((size_t)r.G * sizeof *r.gpu_load);
  r.layers = calloc(r.L ? r.L : 1, sizeof *r.layers);
  if (!r.phy2log || !r.slots || !r.share || !r.gpu_load || !r.layers) {
    rc = cli_out_of_memory("split");
    goto done;
  }
  if (cluster_spec &&
      (rc = locality_inputs(&r, cluster_spec, loads_path, sb, se, &cluster, &trace, &coact)))
    goto done;
  r.out = out_path ? plan : NULL;
  if ((rc = split_layers(&r, plan, loads, integer)))
    goto done;
  if (out_path) {
    /* The new plan: same placement, the re-split shares, metrics on these
     * loads; renamed into place only once the summary is out. */
    const char *tmp = cli_output_stage("-o", out_path, 0);
    if (!tmp) {
      rc = CLI_BADINPUT;
      goto done;
    }
    if ((st = eplb_plan_evaluate(plan, loads)) || (st = eplb_plan_write(plan, tmp))) {
      rc = cli_status_error(st, out_path);
      goto done;
    }
  }
  if (json)
    rc = cli_print_json_flags(split_json(&r, integer), JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  else
    print_text(&r);
  if (rc == CLI_OK && fflush(stdout)) {
    cli_message("cannot write the summary");
    rc = CLI_FAIL;
  }
  if (rc == CLI_OK)
    rc = cli_outputs_commit();
done:
  cli_outputs_remove();
  free(r.phy2log);
  free(r.slots);
  free(r.share);
  free(r.gpu_load);
  free(r.layers);
  free(r.gpu_node);
  free(r.node_loads);
  free(r.node_share);
  eplb_coact_destroy(coact);
  eplb_trace_close(trace);
  eplb_cluster_destroy(cluster);
  eplb_loads_destroy(loads);
  eplb_plan_destroy(plan);
  return rc;
}
