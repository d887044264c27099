/* sim/oracle.c — the per-step oracle: how balanced any plan could be on the
 * traffic it serves if it were planned on that very step (the ceiling a
 * user compares a policy with, eplb_sim_oracle). */
#include "sim/sim.h"

#include <string.h>

eplb_status_t eplb_sim_oracle(eplb_trace_t *trace, uint64_t step_begin, uint64_t step_end,
                              const eplb_plan_options_t *opts, eplb_sim_oracle_t *out) {
  if (!trace || !opts || !out)
    return eplb__error(EPLB_EINVAL, "sim", "oracle: NULL argument");
  eplb_plan_options_t o;
  eplb_status_t take =
      EPLB__OPTS_TAKE(o, opts, eplb_plan_options_default, "eplb_plan_options_t", "sim");
  if (take != EPLB_OK)
    return take;
  opts = &o;
  memset(out, 0, sizeof *out);
  uint64_t n = eplb_trace_num_steps(trace);
  step_end = step_end < n ? step_end : n;
  if (step_begin >= step_end)
    return eplb__error(EPLB_EINVAL, "sim", "oracle: steps %llu:%llu of a trace of %llu",
                       (unsigned long long)step_begin, (unsigned long long)step_end,
                       (unsigned long long)n);
  eplb_plan_options_t po = *opts;
  po.policy = EPLB_POLICY_BALANCED; /* exact shares, certified by its bound */
  po.shares = EPLB_SHARES_EXACT;
  eplb_status_t st = EPLB_OK;
  for (uint64_t t = step_begin; t < step_end && st == EPLB_OK; t++) {
    eplb_plan_t *p = NULL;
    if ((st = eplb_plan_create_from_trace(trace, t, t + 1, &po, NULL, NULL, &p)) != EPLB_OK)
      break;
    uint32_t L = eplb_plan_num_layers(p);
    double bal = 0, ceil = 0;
    for (uint32_t l = 0; l < L && st == EPLB_OK; l++) {
      eplb_plan_layer_metrics_t m;
      st = eplb_plan_layer_metrics(p, l, &m);
      bal += m.balancedness;
      ceil += m.lower_bound > 0 ? m.mean_load / m.lower_bound : 1.0;
    }
    out->balancedness += bal / L;
    out->ceiling += ceil / L;
    eplb_plan_destroy(p);
  }
  if (st != EPLB_OK)
    return st;
  out->num_steps = step_end - step_begin;
  out->balancedness /= (double)out->num_steps;
  out->ceiling /= (double)out->num_steps;
  return EPLB_OK;
}

eplb_status_t eplb_sim_run_oracle(eplb_trace_t *trace, const eplb_cluster_t *cluster,
                                  const eplb_plan_t *plan, const eplb_sim_options_t *opts,
                                  eplb_sim_oracle_t *out) {
  if (!trace || !cluster || !opts || !out)
    return eplb__error(EPLB_EINVAL, "sim", "oracle: NULL argument");
  uint64_t ps[2], sc[2];
  eplb_status_t st = eplb_sim_steps(opts, eplb_trace_num_steps(trace), plan != NULL, ps, sc);
  if (st != EPLB_OK)
    return st;
  /* The slots the run's plans have: the plan file's shape, else the
   * policies' on the cluster's GPUs. */
  eplb_plan_options_t po = opts->plan;
  uint32_t G = eplb_cluster_num_gpus(cluster), N = eplb_cluster_num_nodes(cluster);
  po.num_gpus = G;
  po.num_nodes = N && G % N == 0 ? N : 1;
  if (plan) {
    eplb_plan_options_default(&po);
    po.num_gpus = eplb_plan_num_gpus(plan);
    po.num_nodes = eplb_plan_num_nodes(plan);
    po.num_replicas = eplb_plan_num_slots(plan);
    po.slots_per_gpu = eplb_plan_slots_per_gpu(plan);
    po.threads = opts->plan.threads;
  }
  return eplb_sim_oracle(trace, sc[0], sc[1], &po, out);
}
