/* planner/shares.c — the plan's shares mode (plan.h "Shares"): uniform or
 * robust shares over the policy's placement, replacing its own shares. The
 * placement is never touched here, so a robust plan differs from the exact
 * one only in how an expert's tokens are spread over its replicas (balanced
 * with uniform shares plans its placement for them: planner/uniform.c). */
#include "planner/planner.h"

#include <stdio.h>
#include <string.h>

const char *eplb_plan_shares_str(eplb_plan_shares_t shares) {
  switch (shares) {
  case EPLB_SHARES_EXACT: return "exact";
  case EPLB_SHARES_UNIFORM: return "uniform";
  case EPLB_SHARES_ROBUST: return "robust";
  }
  return NULL;
}

eplb_status_t eplb_plan_shares_parse(const char *name, eplb_plan_shares_t *out) {
  for (int m = EPLB_SHARES_EXACT; m <= EPLB_SHARES_ROBUST; m++)
    if (name && out && !strcmp(name, eplb_plan_shares_str((eplb_plan_shares_t)m))) {
      *out = (eplb_plan_shares_t)m;
      return EPLB_OK;
    }
  return eplb__error(EPLB_EINVAL, "planner", "unknown shares '%s' (exact, uniform, robust)",
                     name ? name : "");
}

const char *eplb_plan_effort_str(eplb_plan_effort_t effort) {
  switch (effort) {
  case EPLB_EFFORT_FULL: return "full";
  case EPLB_EFFORT_ONLINE: return "online";
  }
  return NULL;
}

eplb_status_t eplb_plan_effort_parse(const char *name, eplb_plan_effort_t *out) {
  for (int m = EPLB_EFFORT_FULL; m <= EPLB_EFFORT_ONLINE; m++)
    if (name && out && !strcmp(name, eplb_plan_effort_str((eplb_plan_effort_t)m))) {
      *out = (eplb_plan_effort_t)m;
      return EPLB_OK;
    }
  return eplb__error(EPLB_EINVAL, "planner", "unknown effort '%s' (full, online)",
                     name ? name : "");
}

eplb_status_t eplb__shares_check(const eplb_loads_t *loads, const eplb_plan_options_t *o) {
  if (!eplb_plan_shares_str(o->shares))
    return eplb__error(EPLB_EINVAL, "planner", "unknown shares mode %d", (int)o->shares);
  if (o->shares == EPLB_SHARES_EXACT)
    return EPLB_OK;
  if (o->policy == EPLB_POLICY_LOCALITY)
    return eplb__error(EPLB_EINVAL, "planner",
                       "shares %s: not for the locality policy (its node shares are the policy)",
                       eplb_plan_shares_str(o->shares));
  if (o->shares != EPLB_SHARES_ROBUST)
    return EPLB_OK;
  if (!o->shares_trace)
    return eplb__error(EPLB_EINVAL, "planner", "robust shares need a trace (shares_trace)");
  const eplb_trace_meta_t *m = eplb_trace_meta(o->shares_trace);
  if (m->num_layers != loads->num_layers || m->num_experts != loads->num_experts)
    return eplb__error(EPLB_EINVAL, "planner",
                       "robust shares: trace has %u layers x %u experts, loads %u x %u",
                       m->num_layers, m->num_experts, loads->num_layers, loads->num_experts);
  uint64_t n = eplb_trace_num_steps(o->shares_trace);
  uint64_t e = o->shares_step_end < n ? o->shares_step_end : n;
  if (o->shares_step_begin >= e)
    return eplb__error(EPLB_EINVAL, "planner",
                       "robust shares: empty step range [%llu, %llu) (trace has %llu steps)",
                       (unsigned long long)o->shares_step_begin,
                       (unsigned long long)o->shares_step_end, (unsigned long long)n);
  if (o->robust_steps == 0 || o->robust_steps > 65536)
    return eplb__error(EPLB_EINVAL, "planner", "robust_steps %u: must be in 1..65536",
                       o->robust_steps);
  double a = o->robust_aggregate_weight;
  if (!(a >= 0 && a <= 1))
    return eplb__error(EPLB_EINVAL, "planner", "robust_aggregate_weight %g: must be in [0, 1]", a);
  return EPLB_OK;
}

/* Reads the sampled steps into w[L][S'][E] (S' = S + 1 with the aggregate
 * as the last row of each layer) and their weights v[S']. */
static eplb_status_t read_steps(const eplb_plan_t *p, const eplb_loads_t *loads,
                                const eplb_plan_options_t *o, uint32_t S, uint32_t rows, double *w,
                                double *v) {
  uint32_t L = p->num_layers, E = p->num_experts;
  uint64_t n = eplb_trace_num_steps(o->shares_trace);
  uint64_t b = o->shares_step_begin, e = o->shares_step_end < n ? o->shares_step_end : n;
  n = e - b;
  for (uint32_t i = 0; i < S; i++) {
    /* Midpoints of S equal parts of the range: the sample spans all of it. */
    uint64_t t = b + (uint64_t)(((double)i + 0.5) * (double)n / S);
    if (t >= e)
      t = e - 1;
    eplb_trace_step_t ts;
    eplb_status_t st = eplb_trace_read_step(o->shares_trace, t, &ts);
    if (st)
      return st;
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t x = 0; x < E; x++)
        w[((size_t)l * rows + i) * E + x] = ts.counts[(size_t)l * E + x];
  }
  double a = o->robust_aggregate_weight;
  for (uint32_t i = 0; i < S; i++)
    v[i] = (1 - a) / S;
  if (rows > S) {
    v[S] = a;
    for (uint32_t l = 0; l < L; l++)
      memcpy(w + ((size_t)l * rows + S) * E, loads->values + (size_t)l * E, E * sizeof *w);
  }
  return EPLB_OK;
}

eplb_status_t eplb__shares_apply(eplb_plan_t *p, const eplb_loads_t *loads,
                                 const eplb_plan_options_t *o) {
  uint32_t L = p->num_layers, E = p->num_experts, R = p->num_slots, G = p->num_gpus;
  eplb_status_t st = EPLB_OK;
  eplb_split_t *split = NULL;
  double *w = NULL, *v = NULL, *gl = NULL;
  if (o->shares == EPLB_SHARES_UNIFORM) {
    for (uint32_t l = 0; l < L; l++) {
      eplb__uniform_shares(E, R, p->phy2log + (size_t)l * R, p->share + (size_t)l * R);
      eplb__plan_layer_metrics(p, l, loads->values + (size_t)l * E, p->metrics[l].lower_bound);
    }
    return EPLB_OK;
  }
  uint64_t n = eplb_trace_num_steps(o->shares_trace);
  uint64_t e = o->shares_step_end < n ? o->shares_step_end : n;
  uint32_t S = e - o->shares_step_begin < o->robust_steps ? (uint32_t)(e - o->shares_step_begin)
                                                          : o->robust_steps;
  uint32_t rows = S + (o->robust_aggregate_weight > 0);
  size_t per_layer = (size_t)rows * E;
  if (per_layer / rows != E || (size_t)L > SIZE_MAX / sizeof *w / per_layer)
    return eplb__error(EPLB_ERANGE, "planner", "robust shares: %u layers x %u steps x %u experts",
                       L, rows, E);
  w = eplb__malloc_array((size_t)L * per_layer, sizeof *w);
  v = eplb__malloc_array(rows, sizeof *v);
  gl = eplb__malloc_array(G, sizeof *gl);
  if (!w || !v || !gl) {
    st = eplb__error(EPLB_ENOMEM, "planner", "robust shares: out of memory");
    goto done;
  }
  if ((st = read_steps(p, loads, o, S, rows, w, v)))
    goto done;
  if ((st = eplb_split_create(NULL, &split)))
    goto done;
  for (uint32_t l = 0; l < L; l++) {
    /* The policies' ids are in [0, E): the int32 placement reads as uint32. */
    const uint32_t *p2l = (const uint32_t *)(const void *)(p->phy2log + (size_t)l * R);
    eplb_split_problem_t pb = {E, G, R, p2l, p->slots_per_gpu};
    eplb_split_result_t res = {.share = p->share + (size_t)l * R, .gpu_load = gl};
    if ((st = eplb_split_solve_robust_weighted(split, &pb, w + (size_t)l * per_layer, v, rows,
                                               &res))) {
      char why[512]; /* the detail is about to be overwritten */
      snprintf(why, sizeof why, "%s", eplb_error_detail());
      st = eplb__error(st, "planner", "robust shares: layer %u: %s", l, why);
      goto done;
    }
    eplb__plan_layer_metrics(p, l, loads->values + (size_t)l * E, p->metrics[l].lower_bound);
  }
done:
  eplb_split_destroy(split);
  eplb__free(w);
  eplb__free(v);
  eplb__free(gl);
  return st;
}
