/* planner/plan_window.c — plan the steps of a trace window (plan.h
 * "Planning from a trace window"): the loads and every side input a policy
 * takes come from the same steps, so the simulator, the replay and the CLI
 * cannot plan one window with another's co-activation. */
#include "planner/planner.h"

eplb_status_t eplb_plan_create_from_trace(eplb_trace_t *trace, uint64_t step_begin,
                                          uint64_t step_end, const eplb_plan_options_t *opts,
                                          const eplb_plan_t *current, eplb_loads_t *window,
                                          eplb_plan_t **out) {
  if (!trace || !opts || !out)
    return eplb__error(EPLB_EINVAL, "planner", "plan_create_from_trace: NULL argument");
  *out = NULL;
  eplb_plan_options_t taken;
  eplb_status_t take =
      EPLB__OPTS_TAKE(taken, opts, eplb_plan_options_default, "eplb_plan_options_t", "planner");
  if (take != EPLB_OK)
    return take;
  opts = &taken;
  const eplb_trace_meta_t *m = eplb_trace_meta(trace);
  eplb_loads_t *own = NULL, *loads = window;
  eplb_coact_t *co = NULL;
  eplb_status_t st = EPLB_OK;
  if (window && (window->num_layers != m->num_layers || window->num_experts != m->num_experts))
    return eplb__error(EPLB_ESHAPE, "planner",
                       "plan_create_from_trace: window of %u layers x %u experts, trace %u x %u",
                       window->num_layers, window->num_experts, m->num_layers, m->num_experts);
  if (!loads && (st = eplb_loads_create(m->num_layers, m->num_experts, &own)))
    return st;
  if (!loads)
    loads = own;
  if ((st = eplb_trace_window_sum(trace, step_begin, step_end, loads->values)))
    goto done;
  eplb_plan_options_t o = *opts;
  if (o.policy == EPLB_POLICY_INCREMENTAL && !o.from) {
    if (current)
      o.from = current;
    else
      o.policy = EPLB_POLICY_BALANCED;
  }
  if (o.shares == EPLB_SHARES_ROBUST && !o.shares_trace) {
    /* Robust shares hedge over the per-step loads of the same window. */
    o.shares_trace = trace;
    o.shares_step_begin = step_begin;
    o.shares_step_end = step_end;
  }
  if (o.policy == EPLB_POLICY_DECODE && !(o.decode_steps > 0)) {
    /* The decode policy plans for the mean step: the window's steps. */
    uint64_t n = eplb_trace_num_steps(trace), e = step_end < n ? step_end : n;
    o.decode_steps = e > step_begin ? (double)(e - step_begin) : 1;
  }
  if (o.policy == EPLB_POLICY_LOCALITY && !o.coact) {
    if ((st = eplb_coact_from_trace(trace, step_begin, step_end, o.cluster, &co)))
      goto done;
    o.coact = co;
  }
  uint64_t n = eplb_trace_num_steps(trace), end = step_end < n ? step_end : n;
  if (eplb__window_loads_apply(&o, step_begin, end))
    st = eplb__plan_window_chosen(trace, step_begin, end, &o, loads, out);
  else
    st = eplb_plan_create(loads, &o, out);
done:
  eplb_coact_destroy(co);
  eplb_loads_destroy(own);
  return st;
}
