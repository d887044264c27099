/* traces/report.c — the JSON reports of `eplb trace info|stats --json`,
 * built next to the data as trees (trace_tooling.h) so that a library user
 * gets the same document as text. */
#include "traces/traces.h"

#include "eplb/trace_tooling.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every value set is checked: jansson drops a key whose value is NULL (no
 * memory, or json_real of NaN/infinity) without a word. */
#define SET(o, k, v) (bad |= json_object_set_new((o), (k), (v)) != 0)

/* A builder's failure: bad bit 2 a figure was not finite, else a value
 * could not be made. Releases j. */
static eplb_status_t tree_out(json_t *j, int bad, const char *what, json_t **out) {
  if (!bad && j) {
    *out = j;
    return EPLB_OK;
  }
  json_decref(j);
  if (bad & 2)
    return eplb__error(EPLB_ERANGE, "traces", "%s: a figure is not a finite number", what);
  return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory (or a name is not UTF-8)", what);
}

static eplb_status_t check_args(json_t **out, int ok, const char *what) {
  if (out)
    *out = NULL;
  return ok && out ? EPLB_OK : eplb__error(EPLB_EINVAL, "traces", "%s: NULL argument", what);
}

eplb_status_t eplb_trace_info_tree(eplb_trace_t *trace, const char *file, json_t **out) {
  eplb_status_t st = check_args(out, trace && file, "trace info json");
  if (st)
    return st;
  const eplb_trace_meta_t *m = eplb_trace_meta(trace);
  const char *phase = eplb_trace_phase_str(m->phase);
  json_t *j = json_pack(
      "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:s, s:s, s:s}", "file", file, "layers",
      (json_int_t)m->num_layers, "experts", (json_int_t)m->num_experts, "topk", (json_int_t)m->topk,
      "ranks", (json_int_t)m->num_ranks, "steps", (json_int_t)eplb_trace_num_steps(trace), "tokens",
      (json_int_t)eplb_trace_num_tokens(trace), "has_topk", eplb_trace_has_topk(trace), "phase",
      phase ? phase : "unknown", "model", m->model, "origin", m->origin);
  return tree_out(j, !j, "trace info json", out);
}

eplb_status_t eplb_trace_info_json(eplb_trace_t *trace, const char *file, char *buf, size_t size,
                                   size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_trace_info_tree(trace, file, &j);
  return eplb__json_text(st, j, "traces", "trace info json", buf, size, len);
}

/* A finite figure, or NULL and bit 2 of *bad. */
static json_t *real(double v, int *bad) {
  if (isfinite(v))
    return json_real(v);
  *bad |= 2;
  return NULL;
}

/* {"<ep>": v[k], ...} over the EP sizes scored. */
static json_t *ep_object(const eplb_trace_stats_t *s, const double *v, int *badp) {
  int bad = 0;
  json_t *o = json_object();
  for (uint32_t k = 0; k < s->num_ep; k++) {
    char key[16];
    snprintf(key, sizeof key, "%" PRIu32, s->ep[k]);
    SET(o, key, real(v[k], &bad));
  }
  *badp |= bad | !o;
  return o;
}

/* A correlation is NaN when no pair of steps varies: null, not an error. */
static json_t *correlation(double v, int *bad) { return isnan(v) ? json_null() : real(v, bad); }

static json_t *stats_layers(const eplb_trace_stats_t *s, int *badp) {
  int bad = 0;
  json_t *layers = json_array();
  for (uint32_t l = 0; layers && l < s->num_layers; l++) {
    json_t *jl = json_object();
    SET(jl, "layer", json_integer(l));
    SET(jl, "busiest_expert_over_mean", real(s->expert_over_mean[l], &bad));
    SET(jl, "busiest_gpu_over_mean", ep_object(s, s->gpu_over_mean + l * s->num_ep, &bad));
    SET(jl, "busiest_gpu_over_mean_per_step",
        ep_object(s, s->gpu_over_mean_per_step + l * s->num_ep, &bad));
    SET(jl, "step_correlation", correlation(s->step_correlation[l], &bad));
    bad |= json_array_append_new(layers, jl) != 0;
  }
  *badp |= bad | !layers;
  return layers;
}

eplb_status_t eplb_trace_stats_tree(const eplb_trace_stats_t *s, const char *file, json_t **out) {
  eplb_status_t st = check_args(out, s && file, "trace stats json");
  if (st)
    return st;
  int bad = 0;
  json_t *root = json_object(), *ep = json_array(), *sum = json_object(), *sg = json_object();
  SET(root, "file", json_string(file));
  SET(root, "steps", json_integer((json_int_t)(s->step_end - s->step_begin)));
  for (uint32_t k = 0; ep && k < s->num_ep; k++)
    bad |= json_array_append_new(ep, json_integer(s->ep[k])) != 0;
  SET(root, "ep", ep);
  SET(root, "layers", stats_layers(s, &bad));
  SET(sum, "busiest_expert_over_mean", real(s->mean_expert_over_mean, &bad));
  for (uint32_t k = 0; k < s->num_ep; k++) {
    char key[16];
    snprintf(key, sizeof key, "%" PRIu32, s->ep[k]);
    json_t *w = json_object();
    SET(w, "window", real(s->mean_gpu_over_mean[k], &bad));
    SET(w, "per_step", real(s->mean_gpu_over_mean_per_step[k], &bad));
    SET(sg, key, w);
  }
  SET(sum, "busiest_gpu_over_mean", sg);
  SET(sum, "step_correlation", correlation(s->mean_step_correlation, &bad));
  SET(root, "summary", sum);
  return tree_out(root, bad, "trace stats json", out);
}

eplb_status_t eplb_trace_stats_json(const eplb_trace_stats_t *s, const char *file, char *buf,
                                    size_t size, size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_trace_stats_tree(s, file, &j);
  return eplb__json_text(st, j, "traces", "trace stats json", buf, size, len);
}
