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

/* The plan in force re-split exactly on the window by the library
 * (set_shares: the plan takes the new shares and its metrics follow);
 * y [L] receives each layer's figures. Returns 0 or -1. */
static int resplit(eplbd_source_t *s, const eplbd_config_t *g, int set_shares,
                   eplb_plan_resplit_layer_t *y) {
  eplb_plan_resplit_options_t ro;
  eplb_plan_resplit_options_default(&ro);
  ro.threads = g->threads;
  return eplb_plan_resplit(s->current, s->loads, &ro, set_shares, y) ? -1 : 0;
}

/* What the plan in force is worth on the latest window, per layer mean:
 * served (its published shares), resplit (its placement with shares
 * re-split exactly: microseconds per layer) and best (mean / lower bound,
 * capped at 1: no plan beats the bound). Returns 0, or -1 when the current
 * plan cannot be evaluated (then the caller plans). */
typedef struct {
  double served, resplit, best;
} worth_t;

static int evaluate_current(eplbd_source_t *s, const eplbd_config_t *g, uint32_t R, worth_t *out) {
  if (!fits(s, s->current, R))
    return -1;
  uint32_t L = s->num_layers;
  eplb_plan_resplit_layer_t *y = malloc((L ? L : 1) * sizeof *y);
  int rc = -1;
  if (!y || resplit(s, g, 0, y))
    goto done;
  *out = (worth_t){0, 0, 0};
  for (uint32_t l = 0; l < L; l++) {
    eplb_plan_layer_metrics_t m;
    if (eplb_plan_layer_metrics(s->current, l, &m))
      goto done;
    double best = m.lower_bound > 0 ? m.mean_load / m.lower_bound : 1;
    out->served += y[l].balancedness_before;
    out->resplit += y[l].balancedness_after;
    out->best += best < 1 ? best : 1;
  }
  out->served /= L;
  out->resplit /= L;
  out->best /= L;
  rc = 0;
done:
  free(y);
  return rc;
}

/* Publishes the plan in force with the re-split shares (no slot moves);
 * on failure it keeps the shares it serves. */
static int publish_resplit(eplbd_source_t *s, const eplbd_config_t *g, uint32_t R,
                           const worth_t *w) {
  uint32_t L = s->num_layers;
  double *old = malloc((size_t)L * R * sizeof *old);
  eplb_plan_resplit_layer_t *y = malloc((L ? L : 1) * sizeof *y);
  if (!old || !y) {
    free(old);
    free(y);
    return -1;
  }
  for (uint32_t l = 0; l < L; l++)
    memcpy(old + (size_t)l * R, eplb_plan_share(s->current, l), R * sizeof *old);
  int rc = resplit(s, g, 1, y);
  if (!rc)
    rc = eplbd_publish(s, s->current);
  if (rc) {
    for (uint32_t l = 0; l < L; l++)
      eplb_plan_set_shares(s->current, l, old + (size_t)l * R);
    eplb_plan_evaluate(s->current, s->loads);
    pthread_mutex_lock(&eplbd_lock);
    s->errors++;
    pthread_mutex_unlock(&eplbd_lock);
    eplbd_log(EPLB_LOG_ERROR, "source %s: publishing the re-split plan failed", s->cfg.name);
  } else {
    pthread_mutex_lock(&eplbd_lock);
    s->publishes++;
    pthread_mutex_unlock(&eplbd_lock);
    eplbd_log(EPLB_LOG_INFO,
              "source %s: published epoch %llu: shares re-split, balancedness %.4f (was "
              "%.4f), no slot moves",
              s->cfg.name, (unsigned long long)s->epoch, w->resplit, w->served);
  }
  record_gauges(s, s->current);
  free(old);
  free(y);
  return rc;
}

/* Decides before planning (the daemon's only real cost), from the plan in
 * force on the new window: returns 1 to plan, 0 when the step is done
 * (nothing to gain, or the re-split alone was published), -1 on error.
 * *evaluated is set when it returns 1 with the plan in force evaluated on
 * the window (the step need not evaluate it again).
 * No plan beats the lower bound, so when the bound cannot lift the
 * re-split placement by the threshold, no replan could either: the step
 * either publishes the re-split shares (when they beat the served ones by
 * the threshold) or does nothing. */
static int pre_check(eplbd_source_t *s, const eplbd_config_t *g, uint32_t R, int *evaluated) {
  *evaluated = 0;
  if (g->threshold <= -1 || !s->current)
    return 1;
  worth_t w;
  if (evaluate_current(s, g, R, &w))
    return 1;
  int rc = 0;
  if (w.best - w.resplit >= g->threshold) {
    *evaluated = 1;
    rc = 1;
  } else if (w.resplit - w.served >= g->threshold) {
    s->planned = s->seen;
    pthread_mutex_lock(&eplbd_lock);
    s->last_gain = w.resplit - w.served;
    s->candidate_balancedness = w.resplit;
    pthread_mutex_unlock(&eplbd_lock);
    rc = publish_resplit(s, g, R, &w);
  } else {
    s->planned = s->seen;
    pthread_mutex_lock(&eplbd_lock);
    s->skipped_gain++;
    s->skipped_bound++;
    s->last_gain = w.best - w.served;
    pthread_mutex_unlock(&eplbd_lock);
    record_gauges(s, s->current);
    eplbd_log(EPLB_LOG_DEBUG,
              "source %s: gain at most %.4f over the re-split plan (served %.4f, re-split "
              "%.4f, bound %.4f) < threshold %.4f: not planning",
              s->cfg.name, w.best - w.resplit, w.served, w.resplit, w.best, g->threshold);
  }
  return rc;
}

/* A plan of the source's loads: incremental from the plan in force where it
 * fits (and full replans are not forced), else balanced. Counts the replan;
 * on failure logs, marks bad input and returns -1. */
static int make_plan(eplbd_source_t *s, const eplbd_config_t *g, uint32_t R, eplb_plan_t **plan,
                     double *dt) {
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_BALANCED;
  o.num_gpus = s->cfg.gpus;
  o.num_nodes = s->cfg.nodes;
  o.num_replicas = R;
  o.move_budget = g->move_budget;
  o.move_weight = g->move_weight;
  o.threads = g->threads;
  double t0 = eplbd_now();
  eplb_status_t st = EPLB_EINVAL;
  if (!g->full_replans && fits(s, s->current, o.num_replicas)) {
    o.policy = EPLB_POLICY_INCREMENTAL;
    o.from = s->current;
    st = eplb_plan_create(s->loads, &o, plan);
    if (st)
      eplbd_log(EPLB_LOG_WARN, "source %s: incremental planning failed (%s): full replan",
                s->cfg.name, eplb_error_detail());
  }
  if (st) {
    o.policy = EPLB_POLICY_BALANCED;
    o.from = NULL;
    st = eplb_plan_create(s->loads, &o, plan);
  }
  *dt = eplbd_now() - t0;
  s->planned = s->seen;
  pthread_mutex_lock(&eplbd_lock);
  s->replans++;
  s->planning_seconds_last = *dt;
  s->planning_seconds_total += *dt;
  s->errors += st != EPLB_OK;
  pthread_mutex_unlock(&eplbd_lock);
  if (st) {
    /* Options the data cannot meet (replicas < experts, GPUs that do not
     * divide the slots) are bad input; memory or a solver is not. */
    s->bad_input = st == EPLB_EINVAL || st == EPLB_EFORMAT || st == EPLB_ERANGE ||
                   st == EPLB_ESHAPE || st == EPLB_EINFEASIBLE;
    eplbd_log(EPLB_LOG_ERROR, "source %s: planning failed: %s", s->cfg.name, eplb_error_detail());
    return -1;
  }
  return 0;
}

int eplbd_step(eplbd_source_t *s, const eplbd_config_t *g) {
  uint32_t R = replicas_for(s);
  int evaluated;
  int go = pre_check(s, g, R, &evaluated);
  if (go <= 0)
    return go;
  double dt = 0;
  eplb_plan_t *plan = NULL;
  if (make_plan(s, g, R, &plan, &dt))
    return -1;
  eplb_plan_summary_t ns;
  eplb_plan_summary(plan, &ns);
  double cur = -1;
  if (s->current) {
    if (!evaluated && eplb_plan_evaluate(s->current, s->loads)) {
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
  /* Which layers switch: the runtime's and the simulator's rule
   * (eplb_plan_switch_select), so only layers that gain by the threshold
   * move weights; the others keep the plan in force. A threshold <= -1
   * publishes every period (the whole new plan). */
  int skip = 0, selected = 0;
  if (s->current && g->threshold > -1 && fits(s, s->current, R)) {
    selected = 1;
    uint8_t *take = malloc(s->num_layers ? s->num_layers : 1);
    eplb_plan_switch_options_t so;
    eplb_plan_switch_options_default(&so);
    so.gain_threshold = g->threshold;
    eplb_plan_switch_summary_t sw;
    if (!take || eplb_plan_switch_select(s->current, plan, s->loads, &so, take, &sw) ||
        (sw.layers_switched && eplb_plan_switch_apply(plan, s->current, take))) {
      eplbd_log(EPLB_LOG_ERROR, "source %s: switch selection failed: %s", s->cfg.name,
                take ? eplb_error_detail() : "out of memory");
      free(take);
      eplb_plan_destroy(plan);
      return -1;
    }
    free(take);
    skip = sw.layers_switched == 0;
    if (!skip)
      eplb_plan_summary(plan, &ns);
  }
  double gain = s->current ? ns.mean_balancedness - cur : 1;
  skip = skip || (!selected && s->current && gain < g->threshold);
  pthread_mutex_lock(&eplbd_lock);
  s->candidate_balancedness = ns.mean_balancedness;
  s->last_gain = gain;
  s->skipped_gain += skip;
  pthread_mutex_unlock(&eplbd_lock);
  if (skip) {
    eplbd_log(EPLB_LOG_DEBUG, "source %s: gain %.4f below threshold %.4f (current %.4f)",
              s->cfg.name, gain, g->threshold, cur);
    record_gauges(s, s->current);
    eplb_plan_destroy(plan);
    return 0;
  }
  uint64_t moved = slots_changed(s->current, plan);
  if (eplbd_publish(s, plan)) {
    pthread_mutex_lock(&eplbd_lock);
    s->errors++;
    pthread_mutex_unlock(&eplbd_lock);
    record_gauges(s, s->current ? s->current : plan);
    eplb_plan_destroy(plan);
    return -1;
  }
  pthread_mutex_lock(&eplbd_lock);
  s->publishes++;
  s->slots_moved += moved;
  s->bytes_moved += (uint64_t)((double)moved * g->expert_bytes);
  pthread_mutex_unlock(&eplbd_lock);
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
