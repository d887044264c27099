/* sim/setup.c — what a caller of eplb_sim_run prepares and reports around
 * it: the slots of a policy-mode run on a cluster, the held-out plan window,
 * a summary and a report of several runs as JSON, and the steps as CSV
 * rows. `eplb sim` and a library
 * user share them. */
#include "sim/sim.h"
#include "traces/traces.h"

#include "eplb/sim_tooling.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sim_options_defaults(eplb_sim_options_t *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->step_end = UINT64_MAX;
  eplb_plan_options_default(&o->plan);
  o->local_first = 1;
  o->split_tolerance = 0.01;
  o->gain_threshold = 0.01;
  eplb_plan_step_options_default(&o->step_moves);
}

eplb_status_t eplb_sim_options_init(eplb_sim_options_t *o, size_t size) {
  eplb_sim_options_t d;
  sim_options_defaults(&d);
  return eplb__opts_init(o, size, &d, sizeof d, "eplb_sim_options_t");
}

eplb_status_t eplb__sim_options_take(eplb_sim_options_t *dst, eplb_cost_model_t *cost,
                                     const eplb_sim_options_t *src) {
  eplb_status_t st =
      EPLB__OPTS_TAKE(*dst, src, eplb_sim_options_default, "eplb_sim_options_t", "sim");
  if (st != EPLB_OK)
    return st;
  /* Embedded structs are covered by the outer size; the functions they go
   * to read their own, so it becomes this library's. */
  dst->plan.struct_size = sizeof dst->plan;
  dst->step_moves.struct_size = sizeof dst->step_moves;
  if (cost && dst->cost) {
    st = EPLB__OPTS_TAKE(*cost, dst->cost, eplb_cost_model_default, "eplb_cost_model_t", "sim");
    dst->cost = cost;
  }
  return st;
}

/* The in/out options of eplb_sim_options_slots and _hold_out: what the
 * callee changed goes back within the caller's size. */
static eplb_status_t give_back(eplb_sim_options_t *opts, const eplb_sim_options_t *o,
                               eplb_status_t st) {
  return st == EPLB_OK ? eplb__opts_give(opts, o, sizeof *o, "eplb_sim_options_t", "sim") : st;
}

static eplb_status_t options_slots(eplb_sim_options_t *opts, const eplb_cluster_t *cluster,
                                   uint32_t slots_per_gpu, uint32_t replicas, uint32_t *slots);

eplb_status_t eplb_sim_options_slots(eplb_sim_options_t *opts, const eplb_cluster_t *cluster,
                                     uint32_t slots_per_gpu, uint32_t replicas, uint32_t *slots) {
  eplb_sim_options_t o;
  eplb_status_t st = opts ? eplb__sim_options_take(&o, NULL, opts) : EPLB_OK;
  if (st != EPLB_OK)
    return st;
  st = options_slots(opts ? &o : NULL, cluster, slots_per_gpu, replicas, slots);
  return opts ? give_back(opts, &o, st) : st;
}

static eplb_status_t options_slots(eplb_sim_options_t *opts, const eplb_cluster_t *cluster,
                                   uint32_t slots_per_gpu, uint32_t replicas, uint32_t *slots) {
  if (!opts || !cluster || !slots || (slots_per_gpu && replicas))
    return eplb__error(EPLB_EINVAL, "sim",
                       "sim slots: NULL argument, or both slots per GPU "
                       "and replicas");
  uint32_t G = eplb_cluster_num_gpus(cluster), N = eplb_cluster_num_nodes(cluster);
  uint64_t R = replicas;
  if (slots_per_gpu) {
    R = (uint64_t)slots_per_gpu * G;
    if (R > EPLB_MAX_SLOTS)
      return eplb__error(EPLB_EINVAL, "sim",
                         "%" PRIu32 " x %" PRIu32 " GPUs = %" PRIu64
                         " slots per layer: over the limit of %u",
                         slots_per_gpu, G, R, EPLB_MAX_SLOTS);
  } else if (!replicas) {
    /* The cluster file's slots, when it gives them for every node. */
    R = 0;
    memset(slots, 0, (size_t)G * sizeof *slots);
    for (uint32_t n = 0; n < N; n++) {
      eplb_node_info_t ni;
      if (eplb_cluster_node(cluster, n, &ni) != EPLB_OK || ni.slots_per_gpu == 0)
        return eplb__error(EPLB_EINVAL, "sim", "the cluster does not set slots_per_gpu");
      for (uint32_t i = 0; i < ni.num_gpus && ni.first_gpu + i < G; i++) {
        slots[ni.first_gpu + i] = ni.slots_per_gpu;
        R += ni.slots_per_gpu;
      }
    }
  }
  if (R > EPLB_MAX_SLOTS || R * G > EPLB_MAX_PLAN_WORK)
    return eplb__error(EPLB_ERANGE, "sim",
                       "%" PRIu64 " slots per layer on %" PRIu32
                       " GPUs: over the limits of %u slots and %" PRIu64 " slots x GPUs per layer",
                       R, G, EPLB_MAX_SLOTS, (uint64_t)EPLB_MAX_PLAN_WORK);
  opts->plan.num_replicas = (uint32_t)R;
  opts->plan.slots_per_gpu = slots_per_gpu || replicas ? NULL : slots;
  return EPLB_OK;
}

/* Names the pricing for a reader: a user must see when a trace's model has
 * no preset and the default table (DeepSeek-V3's experts) stood in. */
static void price_phrase(eplb_sim_pricing_t *p, const eplb_deployment_request_t *req,
                         const char *cost_name) {
  const char *label = req->model_label ? req->model_label : "model";
  const char *def = "the default table (DeepSeek-V3's experts on H800)";
  if (cost_name)
    snprintf(p->phrase, sizeof p->phrase, "cost file %s", cost_name);
  else if (p->have_model)
    snprintf(p->phrase, sizeof p->phrase, "%s on %s%s", p->model.name, p->gpu.name,
             req->model ? "" : " (the trace's model)");
  else if (req->data_model && req->data_model[0])
    snprintf(p->phrase, sizeof p->phrase, "%s: the trace's model '%.100s' has no preset; give %s",
             def, req->data_model, label);
  else
    snprintf(p->phrase, sizeof p->phrase, "%s: the trace names no model; give %s", def, label);
}

eplb_status_t eplb_sim_options_price(eplb_sim_options_t *opts, const eplb_deployment_request_t *req,
                                     const eplb_cost_model_t *cost_file, const char *cost_name,
                                     eplb_sim_pricing_t *p) {
  if (!opts || !req || !p)
    return eplb__error(EPLB_EINVAL, "sim", "sim options price: NULL argument");
  memset(p, 0, sizeof *p);
  if (cost_file)
    p->cost = *cost_file;
  else
    eplb_cost_model_default(&p->cost);
  eplb_status_t st = eplb_deployment_resolve(req, &p->model, &p->gpu, &p->have_model);
  if (st != EPLB_OK)
    return st;
  if (p->have_model && !cost_file &&
      (st = eplb_cost_model_from_desc(&p->model, &p->gpu, &p->cost)) != EPLB_OK)
    return eplb__error_wrap(st, "sim", "%s", req->model_label ? req->model_label : "model");
  /* A cost file, or no deployment, is the table's additive rule; a
   * deployment is costed from its descriptions (overlapping links, the
   * all-to-all kernels' latency), which a table cannot carry. */
  opts->cost = cost_file || !p->have_model ? &p->cost : NULL;
  if (p->have_model) {
    opts->model = &p->model;
    opts->gpu = &p->gpu;
  }
  price_phrase(p, req, cost_file ? cost_name : NULL);
  return EPLB_OK;
}

/* One run's summary object, for eplb_sim_summary_json and, as a tree (never
 * through its text), for each run of eplb_sim_report_json; NULL with the
 * status in *st. */
static json_t *summary_tree(const eplb_sim_summary_t *s, const char *policy, eplb_status_t *st) {
  *st = EPLB_OK;
  if (!s || !policy) {
    *st = eplb__error(EPLB_EINVAL, "sim", "sim summary json: NULL argument");
    return NULL;
  }
  double figures[] = {s->mean_balancedness,      s->p5_balancedness,    s->min_balancedness,
                      s->mean_plan_balancedness, s->cross_node_copies,  s->dedup_copies,
                      s->cross_node_bytes,       s->dedup_bytes,        s->mean_step_time_us,
                      s->p99_step_time_us,       s->mean_max_active,    s->migrated_bytes,
                      s->migration_us,           s->bound_step_time_us, s->migration_exposed_us};
  for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
    if (!isfinite(figures[i])) {
      *st = eplb__error(EPLB_ERANGE, "sim", "sim summary of %s: a figure is not a finite number",
                        policy);
      return NULL;
    }
  json_t *j = json_pack(
      "{s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f}",
      "policy", policy, "steps", (json_int_t)s->num_steps, "mean_balancedness",
      s->mean_balancedness, "p5_balancedness", s->p5_balancedness, "min_balancedness",
      s->min_balancedness, "mean_plan_balancedness", s->mean_plan_balancedness, "cross_node_copies",
      s->cross_node_copies, "dedup_copies", s->dedup_copies, "cross_node_bytes",
      s->cross_node_bytes, "dedup_bytes", s->dedup_bytes, "est_step_time_us", s->mean_step_time_us,
      "p99_step_time_us", s->p99_step_time_us, "mean_max_active", s->mean_max_active,
      "migrated_bytes", s->migrated_bytes, "migration_us", s->migration_us, "num_plans",
      (json_int_t)s->num_plans, "rows_steps", (json_int_t)s->used_rows_steps, "bound_step_time_us",
      s->bound_step_time_us);
  json_object_set_new(j, "migration_exposed_us", json_real(s->migration_exposed_us));
  json_object_set_new(j, "migrated_bytes_per_step",
                      json_real(s->num_steps ? s->migrated_bytes / (double)s->num_steps : 0));
  if (!j)
    *st = eplb__error(EPLB_ENOMEM, "sim", "sim summary json: out of memory (or %s is not UTF-8)",
                      policy);
  return j;
}

eplb_status_t eplb_sim_summary_json(const eplb_sim_summary_t *s, const char *policy, char *buf,
                                    size_t size, size_t *len) {
  eplb_status_t st;
  json_t *j = summary_tree(s, policy, &st);
  return eplb__json_text(st, j, "sim", "sim summary json", buf, size, len);
}

static eplb_status_t hold_out(eplb_sim_options_t *opts, uint64_t num_steps);

eplb_status_t eplb_sim_options_hold_out(eplb_sim_options_t *opts, uint64_t num_steps) {
  if (!opts)
    return eplb__error(EPLB_EINVAL, "sim", "sim hold out: NULL argument");
  eplb_sim_options_t o;
  eplb_status_t st = eplb__sim_options_take(&o, NULL, opts);
  if (st != EPLB_OK)
    return st;
  return give_back(opts, &o, hold_out(&o, num_steps));
}

static eplb_status_t hold_out(eplb_sim_options_t *opts, uint64_t num_steps) {
  uint64_t b = opts->step_begin, e = opts->step_end < num_steps ? opts->step_end : num_steps;
  /* Scored on the steps it was made from, a plan is an oracle, and the
   * policies that fit their input most closely look best where they
   * generalise worst. */
  if (b >= e || e - b < 2)
    return eplb__error(EPLB_EINVAL, "sim",
                       "%" PRIu64 " step%s to replay; holding out half needs 2 or more",
                       b < e ? e - b : 0, b + 1 == e ? "" : "s");
  opts->plan_step_begin = b;
  opts->plan_step_end = b + (e - b) / 2;
  return EPLB_OK;
}

/* Appends like snprintf at *n of buf[size] (what does not fit is only
 * counted). */
static void append(char *buf, size_t size, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(*n < size ? buf + *n : NULL, *n < size ? size - *n : 0, fmt, ap);
  va_end(ap);
  *n += k > 0 ? (size_t)k : 0;
}

eplb_status_t eplb_sim_csv_header(uint32_t num_gpus, char *buf, size_t size, size_t *len) {
  if (len)
    *len = 0;
  if (!buf && size)
    return eplb__error(EPLB_EINVAL, "sim", "sim csv header: NULL buffer");
  size_t n = 0;
  append(buf, size, &n, "%s",
         "step,num_tokens,balancedness,min_balancedness,plan_balancedness,cross_node_copies,"
         "dedup_copies,cross_node_bytes,est_step_time_us,compute_us,a2a_us,migrated_bytes");
  for (uint32_t g = 0; g < num_gpus; g++)
    append(buf, size, &n, ",gpu%" PRIu32, g);
  if (len)
    *len = n;
  return EPLB_OK;
}

eplb_status_t eplb_sim_step_csv(const eplb_sim_step_t *s, char *buf, size_t size, size_t *len) {
  if (len)
    *len = 0;
  if (!s || (!buf && size) || (s->num_gpus && !s->gpu_tokens))
    return eplb__error(EPLB_EINVAL, "sim", "sim step csv: NULL argument");
  size_t n = 0;
  append(buf, size, &n, "%" PRIu64 ",%" PRIu32 ",%.6f,%.6f,%.6f,%.3f,%.3f,%.0f,%.3f,%.3f,%.3f,%.0f",
         s->step, s->num_tokens, s->balancedness, s->min_balancedness, s->plan_balancedness,
         s->cross_node_copies, s->dedup_copies, s->cross_node_bytes, s->step_time_us, s->compute_us,
         s->a2a_us, s->migrated_bytes);
  for (uint32_t g = 0; g < s->num_gpus; g++)
    append(buf, size, &n, ",%.3f", s->gpu_tokens[g]);
  if (len)
    *len = n;
  return EPLB_OK;
}

eplb_status_t eplb_sim_report_tree(const eplb_sim_report_t *r, json_t **out) {
  if (out)
    *out = NULL;
  if (!r || !r->trace || !r->cluster || !r->opts || (r->num_runs && (!r->summaries || !r->names)) ||
      !out)
    return eplb__error(EPLB_EINVAL, "sim", "sim report json: NULL argument");
  eplb_status_t st = EPLB_OK;
  json_t *list = json_array();
  for (uint32_t i = 0; list && st == EPLB_OK && i < r->num_runs; i++) {
    json_t *j = summary_tree(&r->summaries[i], r->names[i], &st);
    if (j && json_array_append_new(list, j))
      st = EPLB_ENOMEM;
  }
  const uint64_t *ps = r->plan_steps, *sc = r->scored_steps;
  json_t *pj =
      r->fixed_plan ? json_null() : json_pack("[I, I]", (json_int_t)ps[0], (json_int_t)ps[1]);
  json_t *root =
      list && st == EPLB_OK
          ? json_pack("{s:s, s:s, s:b, s:b, s:O, s:[I, I], s:O}", "trace", r->trace, "cluster",
                      r->cluster, "split_per_batch", r->opts->split_per_batch, "local_first",
                      r->opts->local_first, "plan_steps", pj, "scored_steps", (json_int_t)sc[0],
                      (json_int_t)sc[1], "policies", list)
          : NULL;
  json_decref(pj);
  json_decref(list);
  if (root && r->opts->model && r->opts->gpu &&
      (json_object_set_new(root, "model", json_string(r->opts->model->name)) ||
       json_object_set_new(root, "gpu", json_string(r->opts->gpu->name)))) {
    json_decref(root);
    root = NULL;
  }
  if (st != EPLB_OK) {
    json_decref(root);
    return st; /* the summary's detail stands */
  }
  if (!(*out = root))
    return eplb__error(EPLB_ENOMEM, "sim",
                       "sim report json: out of memory (or a name is not UTF-8)");
  return EPLB_OK;
}

eplb_status_t eplb_sim_report_json(const eplb_sim_report_t *r, char *buf, size_t size,
                                   size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_sim_report_tree(r, &j);
  return eplb__json_text(st, j, "sim", "sim report json", buf, size, len);
}
