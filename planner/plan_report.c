/* planner/plan_report.c — the JSON reports of what the planner computes
 * about a plan (its evaluation, a migration, a re-split): built here as
 * trees (plan_tooling.h), next to the data, so that `eplb plan eval|diff --json`, `eplb split
 * --json` and a library user get the same document. */
#include "planner/planner.h"
#include "traces/traces.h"

#include "eplb/plan_tooling.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every value set is checked: jansson drops a key whose value is NULL (no
 * memory, or json_real of NaN/infinity) without a word. A non-finite
 * figure is told apart from a failed allocation by *bad = 2. */
static json_t *real(double v, int *bad) {
  if (!isfinite(v)) {
    *bad = 2;
    return NULL;
  }
  return json_real(v);
}

#define SET(o, k, v) (bad |= json_object_set_new((o), (k), (v)) != 0)
#define REAL(o, k, v) SET(o, k, real((v), &bad))

/* A builder's tree, or its failure (bad: bit 2 a figure was not finite,
 * bit 1 a value was not set); releases j on failure. */
static eplb_status_t tree_out(json_t *j, int bad, const char *what, json_t **out) {
  if (j && !bad) {
    *out = j;
    return EPLB_OK;
  }
  json_decref(j);
  if (bad & 2)
    return eplb__error(EPLB_ERANGE, "planner", "%s: a figure is not a finite number", what);
  return eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", what);
}

static eplb_status_t check_args(json_t **out, int ok, const char *what) {
  if (out)
    *out = NULL;
  return ok && out ? EPLB_OK : eplb__error(EPLB_EINVAL, "planner", "%s: NULL argument", what);
}

/* The plan's summary object without its planning time (an evaluation
 * reports the loads, not how long planning took). */
static json_t *summary_without_seconds(const eplb_plan_t *plan, int *bad) {
  json_t *s;
  eplb_status_t st = eplb_plan_summary_tree(plan, &s);
  if (st)
    *bad = st == EPLB_ERANGE ? 2 : 1;
  json_object_del(s, "seconds");
  return s;
}

eplb_status_t eplb_plan_eval_tree(const eplb_plan_t *plan, json_t **out) {
  eplb_status_t st = check_args(out, plan != NULL, "plan eval json");
  if (st)
    return st;
  int bad = 0;
  json_t *root = json_object(), *layers = json_array();
  bad |= !root || !layers;
  size_t G = plan->num_gpus;
  for (uint32_t l = 0; !bad && l < plan->num_layers; l++) {
    const eplb_plan_layer_metrics_t *m = &plan->metrics[l];
    json_t *lo = json_object(), *gl = json_array();
    if (!lo || !gl || json_array_append_new(layers, lo)) { /* append released lo */
      json_decref(gl);
      if (!lo || !gl)
        json_decref(lo);
      bad |= 1;
      break;
    }
    for (size_t g = 0; !bad && g < G; g++)
      bad |= json_array_append_new(gl, real(plan->gpu_load[l * G + g], &bad)) != 0;
    SET(lo, "gpu_load", gl);
    REAL(lo, "max_load", m->max_load);
    REAL(lo, "mean_load", m->mean_load);
    REAL(lo, "lower_bound", m->lower_bound);
    REAL(lo, "balancedness", m->balancedness);
  }
  SET(root, "layers", layers);
  if (!bad)
    SET(root, "summary", summary_without_seconds(plan, &bad));
  return tree_out(root, bad, "plan eval json", out);
}

eplb_status_t eplb_plan_eval_json(const eplb_plan_t *plan, char *buf, size_t size, size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_plan_eval_tree(plan, &j);
  return eplb__json_text(st, j, "planner", "plan eval json", buf, size, len);
}

eplb_status_t eplb_plan_diff_tree(const eplb_plan_t *from, const eplb_plan_diff_options_t *opts,
                                  const eplb_plan_diff_stats_t *d, json_t **out) {
  eplb_status_t st = check_args(out, from && opts && d, "plan diff json");
  if (st)
    return st;
  eplb_plan_diff_options_t own;
  if ((st = EPLB__OPTS_TAKE(own, opts, eplb_plan_diff_options_default, "eplb_plan_diff_options_t",
                            "planner")))
    return st;
  opts = &own;
  static const char *const link[3] = {"same_gpu", "intra_node", "inter_node"};
  int bad = 0;
  json_t *root = json_object(), *mv = json_object(), *by = json_object();
  bad |= !root || !mv || !by;
  SET(root, "slots", json_integer((json_int_t)from->num_layers * from->num_slots));
  SET(root, "slots_moved", json_integer((json_int_t)d->slots_moved));
  SET(root, "layers_changed", json_integer(d->layers_changed));
  SET(root, "max_layer_moved", json_integer(d->max_layer_moved));
  for (int k = 0; k < 3; k++) {
    SET(mv, link[k], json_integer((json_int_t)d->moves[k]));
    SET(by, link[k], json_integer((json_int_t)d->bytes[k]));
  }
  SET(root, "moves", mv);
  SET(root, "bytes", by);
  SET(root, "expert_bytes", json_integer((json_int_t)opts->expert_bytes));
  SET(root, "staging_bytes", json_integer((json_int_t)opts->staging_bytes));
  SET(root, "layers_per_step", json_integer(opts->layers_per_round));
  SET(root, "rounds", json_integer(d->rounds));
  SET(root, "max_bytes_in_round", json_integer((json_int_t)d->max_bytes_in_round));
  return tree_out(root, bad, "plan diff json", out);
}

eplb_status_t eplb_plan_diff_json(const eplb_plan_t *from, const eplb_plan_diff_options_t *opts,
                                  const eplb_plan_diff_stats_t *d, char *buf, size_t size,
                                  size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_plan_diff_tree(from, opts, d, &j);
  return eplb__json_text(st, j, "planner", "plan diff json", buf, size, len);
}

/* One layer of the re-split report; nodes: the cluster's (0: none). */
static json_t *resplit_layer(const eplb_plan_resplit_layer_t *y, uint32_t l, uint32_t nodes,
                             int *badp) {
  int bad = 0;
  json_t *o = json_object();
  bad |= !o;
  SET(o, "layer", json_integer(l));
  REAL(o, "t_star", y->t_star);
  REAL(o, "max_load_before", y->max_load_before);
  REAL(o, "max_load_after", y->max_load_after);
  REAL(o, "balancedness_before", y->balancedness_before);
  REAL(o, "balancedness_after", y->balancedness_after);
  REAL(o, "lower_bound", y->lower_bound);
  if (nodes) {
    REAL(o, "cross_node_copies_before", y->cross_node_before);
    REAL(o, "cross_node_copies_after", y->cross_node_after);
  }
  *badp |= bad;
  return o;
}

eplb_status_t eplb_plan_resplit_summarize(const eplb_plan_resplit_layer_t *layers,
                                          uint32_t num_layers, eplb_plan_resplit_summary_t *out) {
  if (!layers || !num_layers || !out)
    return eplb__error(EPLB_EINVAL, "planner", "plan resplit summary: NULL argument or no layer");
  double mb = 0, ma = 0, sb = 0, sa = 0, minb = INFINITY, mina = INFINITY, xb = 0, xa = 0;
  uint32_t L = num_layers;
  for (uint32_t l = 0; l < L; l++) {
    const eplb_plan_resplit_layer_t *y = &layers[l];
    xb += y->cross_node_before;
    xa += y->cross_node_after;
    mb += y->balancedness_before;
    ma += y->balancedness_after;
    sb += y->max_load_before;
    sa += y->max_load_after;
    minb = fmin(minb, y->balancedness_before);
    mina = fmin(mina, y->balancedness_after);
  }
  *out = (eplb_plan_resplit_summary_t){
      mb / L, ma / L, minb, mina, (ma - mb) / L, sb, sa, sb > 0 ? 1.0 - sa / sb : 0.0, xb, xa};
  return EPLB_OK;
}

eplb_status_t eplb_plan_resplit_tree(const eplb_plan_resplit_options_t *opts,
                                     const eplb_plan_resplit_layer_t *layers, uint32_t num_layers,
                                     json_t **out) {
  eplb_status_t st = check_args(out, opts && layers && num_layers, "plan resplit json");
  if (st)
    return st;
  eplb_plan_resplit_options_t own;
  if ((st = EPLB__OPTS_TAKE(own, opts, eplb_plan_resplit_options_default,
                            "eplb_plan_resplit_options_t", "planner")))
    return st;
  opts = &own;
  uint32_t N = opts->cluster ? eplb_cluster_num_nodes(opts->cluster) : 0, L = num_layers;
  eplb_plan_resplit_summary_t y;
  eplb_plan_resplit_summarize(layers, L, &y);
  int bad = 0;
  json_t *root = json_object(), *arr = json_array(), *sum = json_object();
  bad |= !root || !arr || !sum;
  for (uint32_t l = 0; !bad && l < L; l++)
    bad |= json_array_append_new(arr, resplit_layer(&layers[l], l, N, &bad)) != 0;
  SET(root, "layers", arr);
  SET(sum, "layers", json_integer(L));
  SET(sum, "integer", json_boolean(opts->integer));
  REAL(sum, "mean_balancedness_before", y.mean_balancedness_before);
  REAL(sum, "mean_balancedness_after", y.mean_balancedness_after);
  REAL(sum, "min_balancedness_before", y.min_balancedness_before);
  REAL(sum, "min_balancedness_after", y.min_balancedness_after);
  REAL(sum, "balancedness_gain", y.balancedness_gain);
  REAL(sum, "mean_max_load_before", y.max_load_before / L);
  REAL(sum, "mean_max_load_after", y.max_load_after / L);
  REAL(sum, "max_load_reduction", y.max_load_reduction);
  if (N) {
    SET(sum, "nodes", json_integer(N));
    REAL(sum, "tolerance", opts->tolerance);
    REAL(sum, "cross_node_copies_before", y.cross_node_before);
    REAL(sum, "cross_node_copies_after", y.cross_node_after);
  }
  SET(root, "summary", sum);
  return tree_out(root, bad, "plan resplit json", out);
}

eplb_status_t eplb_plan_resplit_json(const eplb_plan_resplit_options_t *opts,
                                     const eplb_plan_resplit_layer_t *layers, uint32_t num_layers,
                                     char *buf, size_t size, size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_plan_resplit_tree(opts, layers, num_layers, &j);
  return eplb__json_text(st, j, "planner", "plan resplit json", buf, size, len);
}
