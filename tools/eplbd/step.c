/* tools/eplbd/step.c — one planning step of a source: plan from the window,
 * compare with the plan in force on the same window, publish when the
 * predicted gain clears the threshold. */
#include "eplbd.h"

#include <stdlib.h>
#include <string.h>

/* Slots per layer: the configured count, or one spare slot per GPU above
 * the experts, rounded up to a multiple of the GPU count. */
static uint32_t replicas_for(const eplbd_source_t *s) {
  uint32_t G = s->cfg.gpus, E = s->num_experts;
  if (s->cfg.replicas)
    return s->cfg.replicas;
  if (s->cfg.slots_per_gpu)
    return s->cfg.slots_per_gpu * G;
  return ((E + G - 1) / G + 1) * G;
}

/* The incremental policy needs the current plan to have the new plan's shape. */
static int fits(const eplbd_source_t *s, const eplb_plan_t *p, uint32_t R) {
  if (!p || eplb_plan_num_layers(p) != s->num_layers ||
      eplb_plan_num_experts(p) != s->num_experts || eplb_plan_num_gpus(p) != s->cfg.gpus ||
      eplb_plan_num_nodes(p) != s->cfg.nodes || eplb_plan_num_slots(p) != R)
    return 0;
  const uint32_t *spg = eplb_plan_slots_per_gpu(p);
  for (uint32_t g = 0; g < s->cfg.gpus; g++)
    if (spg[g] != R / s->cfg.gpus)
      return 0;
  return 1;
}

static uint64_t slots_changed(const eplb_plan_t *a, const eplb_plan_t *b) {
  if (!a || eplb_plan_num_layers(a) != eplb_plan_num_layers(b) ||
      eplb_plan_num_slots(a) != eplb_plan_num_slots(b))
    return (uint64_t)eplb_plan_num_layers(b) * eplb_plan_num_slots(b);
  uint32_t L = eplb_plan_num_layers(a), R = eplb_plan_num_slots(a);
  uint64_t n = 0;
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *pa = eplb_plan_phy2log(a, l), *pb = eplb_plan_phy2log(b, l);
    for (uint32_t r = 0; r < R; r++)
      n += pa[r] != pb[r];
  }
  return n;
}

/* Gauges of the plan in force, evaluated on the latest window. */
static void record_gauges(eplbd_source_t *s, const eplb_plan_t *plan) {
  uint32_t L = eplb_plan_num_layers(plan);
  uint32_t n = L < EPLBD_MAX_LAYER_LABELS ? L : EPLBD_MAX_LAYER_LABELS;
  eplb_plan_summary_t sum;
  eplb_plan_summary(plan, &sum);
  pthread_mutex_lock(&eplbd_lock);
  if (n != s->layer_labels) {
    double *b = realloc(s->layer_balancedness, (n ? n : 1) * sizeof *b);
    if (b) {
      s->layer_balancedness = b;
      s->layer_labels = n;
    }
  }
  for (uint32_t l = 0; l < s->layer_labels; l++) {
    eplb_plan_layer_metrics_t m;
    if (!eplb_plan_layer_metrics(plan, l, &m))
      s->layer_balancedness[l] = m.balancedness;
  }
  s->mean_balancedness = sum.mean_balancedness;
  s->min_balancedness = sum.min_balancedness;
  pthread_mutex_unlock(&eplbd_lock);
}

/* No plan can beat a layer's lower bound, so mean_load / lower_bound caps
 * its balancedness: when even that cannot lift the current plan by the
 * threshold, planning (the daemon's only real cost) is skipped. Returns the
 * bound on the gain, or 1 when the current plan cannot be evaluated. */
static double gain_bound(eplbd_source_t *s, uint32_t R) {
  if (!fits(s, s->current, R) || eplb_plan_evaluate(s->current, s->loads))
    return 1;
  double sum = 0;
  for (uint32_t l = 0; l < s->num_layers; l++) {
    eplb_plan_layer_metrics_t m;
    if (eplb_plan_layer_metrics(s->current, l, &m))
      return 1;
    double best = m.lower_bound > 0 ? m.mean_load / m.lower_bound : 1;
    sum += (best < 1 ? best : 1) - m.balancedness;
  }
  return sum / s->num_layers;
}

int eplbd_step(eplbd_source_t *s, const eplbd_config_t *g, int force) {
  (void)force;
  uint32_t R = replicas_for(s);
  double bound = g->threshold > -1 ? gain_bound(s, R) : 1;
  if (bound < g->threshold) {
    s->planned = s->seen;
    s->skipped_gain++;
    s->skipped_bound++;
    s->last_gain = bound;
    record_gauges(s, s->current);
    eplbd_log(EPLB_LOG_DEBUG, "source %s: gain at most %.4f < threshold %.4f: not planning",
              s->cfg.name, bound, g->threshold);
    return 0;
  }
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_BALANCED;
  o.num_gpus = s->cfg.gpus;
  o.num_nodes = s->cfg.nodes;
  o.num_replicas = R;
  o.move_budget = g->move_budget;
  o.move_weight = g->move_weight;
  eplb_plan_t *plan = NULL;
  double t0 = eplbd_now();
  eplb_status_t st = EPLB_EINVAL;
  if (!g->full_replans && fits(s, s->current, o.num_replicas)) {
    o.policy = EPLB_POLICY_INCREMENTAL;
    o.from = s->current;
    st = eplb_plan_create(s->loads, &o, &plan);
    if (st)
      eplbd_log(EPLB_LOG_WARN, "source %s: incremental planning failed (%s): full replan",
                s->cfg.name, eplb_error_detail());
  }
  if (st) {
    o.policy = EPLB_POLICY_BALANCED;
    o.from = NULL;
    st = eplb_plan_create(s->loads, &o, &plan);
  }
  double dt = eplbd_now() - t0;
  s->replans++;
  s->planning_seconds_last = dt;
  s->planning_seconds_total += dt;
  s->planned = s->seen;
  if (st) {
    s->errors++;
    s->bad_input = 1;
    eplbd_log(EPLB_LOG_ERROR, "source %s: planning failed: %s", s->cfg.name, eplb_error_detail());
    return -1;
  }
  eplb_plan_summary_t ns;
  eplb_plan_summary(plan, &ns);
  double cur = -1;
  if (s->current) {
    if (eplb_plan_evaluate(s->current, s->loads)) {
      eplbd_log(EPLB_LOG_WARN,
                "source %s: the current plan does not fit the source (%s): replacing it",
                s->cfg.name, eplb_error_detail());
      eplb_plan_destroy(s->current);
      s->current = NULL;
    } else {
      eplb_plan_summary_t cs;
      eplb_plan_summary(s->current, &cs);
      cur = cs.mean_balancedness;
    }
  }
  double gain = s->current ? ns.mean_balancedness - cur : 1;
  s->candidate_balancedness = ns.mean_balancedness;
  s->last_gain = gain;
  if (s->current && gain < g->threshold) {
    s->skipped_gain++;
    eplbd_log(EPLB_LOG_DEBUG, "source %s: gain %.4f below threshold %.4f (current %.4f)",
              s->cfg.name, gain, g->threshold, cur);
    record_gauges(s, s->current);
    eplb_plan_destroy(plan);
    return 0;
  }
  uint64_t moved = slots_changed(s->current, plan);
  if (eplbd_publish(s, plan)) {
    s->errors++;
    record_gauges(s, s->current ? s->current : plan);
    eplb_plan_destroy(plan);
    return -1;
  }
  s->publishes++;
  s->slots_moved += moved;
  s->bytes_moved += (uint64_t)((double)moved * g->expert_bytes);
  eplbd_log(EPLB_LOG_INFO,
            "source %s: published epoch %llu: balancedness %.4f (was %.4f), %llu slots move, "
            "planned in %.3f s",
            s->cfg.name, (unsigned long long)s->epoch, ns.mean_balancedness, cur,
            (unsigned long long)moved, dt);
  eplb_plan_destroy(s->current);
  s->current = plan;
  record_gauges(s, plan);
  return 0;
}
