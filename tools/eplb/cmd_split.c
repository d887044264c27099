/* tools/eplb/cmd_split.c — `eplb split`: re-split a plan's token shares
 * for new loads with the exact split solver, keeping its placement.
 *
 * "Before" is the plan's own shares evaluated on the loads (eplb_plan_evaluate),
 * "after" the optimal shares over the same replicas; the gap is what an online
 * re-split (LPLB-style) recovers without moving any expert weights. */
#include "cli.h"

#include <eplb/plan.h>
#include <eplb/split.h>

#include <getopt.h>
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
    "GPU load is then ceil(T*)). -o writes the plan with the new shares (same placement).\n";

typedef struct split_layer {
  double t_star, before, after, bal_before, bal_after, lower_bound;
} split_layer_t;

typedef struct split_run {
  uint32_t L, E, G, R;
  uint32_t *phy2log, *slots; /* [R], [G] */
  double *share, *gpu_load;  /* [R], [G]: the current layer's result */
  split_layer_t *layers;     /* [L] */
  eplb_plan_t *out;          /* receives the new shares (-o), or NULL */
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
    if ((st = eplb_split_solve(solver, &p, loads->values + (size_t)l * r->E, &res))) {
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
  }
  rc = CLI_OK;
done:
  eplb_split_destroy(solver);
  return rc;
}

/* The JSON report, or NULL when out of memory. */
static json_t *split_json(const split_run_t *r, int integer) {
  json_t *root = json_object(), *layers = json_array(), *sum = json_object();
  double mb = 0, ma = 0, sb = 0, sa = 0, minb = INFINITY, mina = INFINITY;
  if (!root || !layers || !sum)
    goto fail;
  for (uint32_t l = 0; l < r->L; l++) {
    const split_layer_t *y = &r->layers[l];
    json_t *o = json_object();
    if (!o)
      goto fail;
    json_object_set_new(o, "layer", json_integer(l));
    json_object_set_new(o, "t_star", json_real(y->t_star));
    json_object_set_new(o, "max_load_before", json_real(y->before));
    json_object_set_new(o, "max_load_after", json_real(y->after));
    json_object_set_new(o, "balancedness_before", json_real(y->bal_before));
    json_object_set_new(o, "balancedness_after", json_real(y->bal_after));
    json_object_set_new(o, "lower_bound", json_real(y->lower_bound));
    json_array_append_new(layers, o);
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
  json_object_set_new(sum, "mean_balancedness_before", json_real(mb / r->L));
  json_object_set_new(sum, "mean_balancedness_after", json_real(ma / r->L));
  json_object_set_new(sum, "min_balancedness_before", json_real(minb));
  json_object_set_new(sum, "min_balancedness_after", json_real(mina));
  json_object_set_new(sum, "balancedness_gain", json_real((ma - mb) / r->L));
  json_object_set_new(sum, "mean_max_load_before", json_real(sb / r->L));
  json_object_set_new(sum, "mean_max_load_after", json_real(sa / r->L));
  /* Summed over layers, max loads are the per-step MoE critical path. */
  json_object_set_new(sum, "max_load_reduction", json_real(sb > 0 ? 1.0 - sa / sb : 0.0));
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
}

int cli_split(int argc, char **argv) {
  static const struct option opts[] = {{"plan", required_argument, NULL, 'p'},
                                       {"loads", required_argument, NULL, 'l'},
                                       {"steps", required_argument, NULL, 's'},
                                       {"integer", no_argument, NULL, 'i'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *plan_path = NULL, *loads_path = NULL, *out_path = NULL;
  uint64_t sb = 0, se = UINT64_MAX;
  int json = 0, integer = 0, c, rc = CLI_BADINPUT;
  eplb_plan_t *plan = NULL;
  eplb_loads_t *loads = NULL;
  eplb_status_t st;
  split_run_t r;
  memset(&r, 0, sizeof r);
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
  r.out = out_path ? plan : NULL;
  if ((rc = split_layers(&r, plan, loads, integer)))
    goto done;
  if (out_path) {
    /* The new plan: same placement, the re-split shares, metrics on these loads. */
    if ((st = eplb_plan_evaluate(plan, loads)) || (st = eplb_plan_write(plan, out_path))) {
      rc = cli_status_error(st, out_path);
      goto done;
    }
  }
  if (json)
    rc = cli_print_json_flags(split_json(&r, integer), JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  else
    print_text(&r);
done:
  free(r.phy2log);
  free(r.slots);
  free(r.share);
  free(r.gpu_load);
  free(r.layers);
  eplb_loads_destroy(loads);
  eplb_plan_destroy(plan);
  return rc;
}
