/* planner/switch.c — which layers of a new plan are worth switching to
 * (plan.h "Switching"). The runtime, the simulator and eplbd each had their
 * own rule; one function keeps what a simulation predicts equal to what
 * the runtime does. */
#include "planner/planner.h"
#include "eplb/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void plan_switch_options_defaults(eplb_plan_switch_options_t *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->gain_threshold = 0.01;
  opts->decode_steps = 1;
}

eplb_status_t eplb_plan_switch_options_init(eplb_plan_switch_options_t *opts, size_t size) {
  eplb_plan_switch_options_t d;
  plan_switch_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_plan_switch_options_t");
}

/* Balancedness (mean / max GPU load) of one layer of p on loads w. */
static double balancedness(const eplb_plan_t *p, uint32_t l, const double *w, double *gpu) {
  const int32_t *p2l = p->phy2log + (size_t)l * p->num_slots;
  const double *sh = p->share + (size_t)l * p->num_slots;
  for (uint32_t g = 0; g < p->num_gpus; g++) {
    double x = 0;
    for (uint32_t r = p->gpu_first[g]; r < p->gpu_first[g + 1]; r++)
      x += sh[r] * w[p2l[r]];
    gpu[g] = x;
  }
  return eplb__balancedness_of(gpu, p->num_gpus);
}

typedef struct {
  uint32_t layer, changed;
  double gain;
} gain_t;

/* The decode objective's scratch: the mean step's loads, a placement as the
 * split problem takes it. */
typedef struct {
  const eplb_plan_switch_options_t *o;
  eplb_decode_split_options_t dopts;
  double *w;     /* [E] */
  uint32_t *p2l; /* [R] */
} dtime_t;

/* Modelled step time of layer l of p (its own shares) on the mean step. */
static eplb_status_t decode_time(dtime_t *d, const eplb_plan_t *p, uint32_t l, const double *w,
                                 double *t) {
  double steps = d->o->decode_steps > 0 ? d->o->decode_steps : 1;
  for (uint32_t e = 0; e < p->num_experts; e++)
    d->w[e] = w[e] / steps;
  const int32_t *p2l = p->phy2log + (size_t)l * p->num_slots;
  for (uint32_t r = 0; r < p->num_slots; r++)
    d->p2l[r] = (uint32_t)p2l[r];
  eplb_split_problem_t pb = {p->num_experts, p->num_gpus, p->num_slots, d->p2l, p->slots_per_gpu};
  return eplb_decode_split_time(&pb, d->w, d->o->model, d->o->gpu, &d->dopts,
                                p->share + (size_t)l * p->num_slots, NULL, t);
}

/* Layer l's gain under the decode objective: the relative fall of its
 * modelled step time. */
static eplb_status_t decode_gain(dtime_t *d, const eplb_plan_t *cur, const eplb_plan_t *next,
                                 uint32_t l, const double *w, double *gain) {
  double tc = 0, tn = 0;
  eplb_status_t st = decode_time(d, cur, l, w, &tc);
  if (!st)
    st = decode_time(d, next, l, w, &tn);
  *gain = tc > 0 ? (tc - tn) / tc : 0;
  return st;
}

static int by_gain(const void *a, const void *b) {
  const gain_t *x = a, *y = b;
  if (x->gain != y->gain)
    return x->gain > y->gain ? -1 : 1;
  return (x->layer > y->layer) - (x->layer < y->layer);
}

static eplb_status_t check(const eplb_plan_t *cur, const eplb_plan_t *next,
                           const eplb_loads_t *loads, const eplb_plan_switch_options_t *o,
                           const uint8_t *take) {
  if (!cur || !next || !loads || !take)
    return eplb__error(EPLB_EINVAL, "planner", "switch_select: NULL argument");
  if (isnan(o->gain_threshold))
    return eplb__error(EPLB_EINVAL, "planner", "switch_select: gain_threshold is NaN");
  if (!o->model != !o->gpu)
    return eplb__error(EPLB_EINVAL, "planner", "switch_select: model and gpu go together");
  eplb_status_t st = o->model ? eplb_model_check(o->model) : EPLB_OK;
  if (st == EPLB_OK && o->gpu)
    st = eplb_gpu_check(o->gpu);
  if (st != EPLB_OK)
    return st;
  if (isnan(o->decode_steps))
    return eplb__error(EPLB_EINVAL, "planner", "switch_select: decode_steps is NaN");
  bool same = cur->num_layers == next->num_layers && cur->num_experts == next->num_experts &&
              cur->num_gpus == next->num_gpus && cur->num_slots == next->num_slots;
  for (uint32_t g = 0; same && g < cur->num_gpus; g++)
    same = cur->slots_per_gpu[g] == next->slots_per_gpu[g];
  if (!same)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "switch_select: current plan %u layers x %u experts x %u slots on %u GPUs, "
                       "new plan %u x %u x %u on %u (or other slots per GPU)",
                       cur->num_layers, cur->num_experts, cur->num_slots, cur->num_gpus,
                       next->num_layers, next->num_experts, next->num_slots, next->num_gpus);
  if (loads->num_layers != cur->num_layers || loads->num_experts != cur->num_experts)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "switch_select: loads %u layers x %u experts, plans %u x %u",
                       loads->num_layers, loads->num_experts, cur->num_layers, cur->num_experts);
  return EPLB_OK;
}

eplb_status_t eplb_plan_switch_select(const eplb_plan_t *cur, const eplb_plan_t *next,
                                      const eplb_loads_t *loads,
                                      const eplb_plan_switch_options_t *opts, uint8_t *take,
                                      eplb_plan_switch_summary_t *out) {
  eplb_plan_switch_options_t o;
  eplb_status_t st = EPLB__OPTS_TAKE(o, opts, eplb_plan_switch_options_default,
                                     "eplb_plan_switch_options_t", "planner");
  if (st)
    return st;
  st = check(cur, next, loads, &o, take);
  if (st)
    return st;
  uint32_t L = cur->num_layers, R = cur->num_slots, E = cur->num_experts;
  gain_t *gains = eplb__malloc_array(L, sizeof *gains);
  double *gpu = eplb__malloc_array(cur->num_gpus, sizeof *gpu);
  double *bal = eplb__malloc_array((size_t)L * 2, sizeof *bal);
  dtime_t d = {.o = &o};
  if (o.model) {
    d.w = eplb__malloc_array(E, sizeof *d.w);
    d.p2l = eplb__malloc_array(R, sizeof *d.p2l);
    eplb_decode_split_options_default(&d.dopts);
    eplb_decode_split_options_for(o.model, o.gpu, cur->num_gpus, o.gpus_per_node, &d.dopts);
  }
  eplb_plan_switch_summary_t sum = {0};
  if (!gains || !gpu || !bal || (o.model && (!d.w || !d.p2l))) {
    st = eplb__error(EPLB_ENOMEM, "planner", "switch_select: out of memory");
    goto done;
  }
  for (uint32_t l = 0; l < L; l++) {
    const double *w = loads->values + (size_t)l * E;
    const int32_t *a = cur->phy2log + (size_t)l * R, *b = next->phy2log + (size_t)l * R;
    const double *sa = cur->share + (size_t)l * R, *sb = next->share + (size_t)l * R;
    uint32_t changed = 0;
    bool differs = false;
    for (uint32_t r = 0; r < R; r++) {
      changed += a[r] != b[r];
      differs |= fabs(sa[r] - sb[r]) > 1e-12;
    }
    bal[2 * l] = balancedness(cur, l, w, gpu);
    bal[2 * l + 1] = balancedness(next, l, w, gpu);
    sum.mean_balancedness_cur += bal[2 * l] / L;
    sum.mean_balancedness_next += bal[2 * l + 1] / L;
    double gain = bal[2 * l + 1] - bal[2 * l];
    if (o.model && (changed || differs) && (st = decode_gain(&d, cur, next, l, w, &gain)))
      goto done;
    /* -INFINITY sorts last and clears no threshold. */
    gains[l] = (gain_t){l, changed, changed || differs ? gain : -INFINITY};
    take[l] = 0;
  }
  qsort(gains, L, sizeof *gains, by_gain);
  uint64_t budget = o.move_budget ? o.move_budget : UINT64_MAX;
  for (uint32_t i = 0; i < L; i++) {
    if (!(gains[i].gain >= o.gain_threshold) || gains[i].gain == -INFINITY)
      break;
    if (gains[i].changed > budget)
      continue;
    budget -= gains[i].changed;
    take[gains[i].layer] = 1;
    sum.layers_switched++;
    sum.slots_moved += gains[i].changed;
  }
  for (uint32_t l = 0; l < L; l++)
    sum.mean_balancedness_after += bal[2 * l + !!take[l]] / L;
  if (out)
    *out = sum;
done:
  eplb__free(gains);
  eplb__free(gpu);
  eplb__free(bal);
  eplb__free(d.w);
  eplb__free(d.p2l);
  return st;
}

eplb_status_t eplb_plan_switch_apply(eplb_plan_t *next, const eplb_plan_t *cur,
                                     const uint8_t *take) {
  if (!next || !cur || !take)
    return eplb__error(EPLB_EINVAL, "planner", "switch_apply: NULL argument");
  eplb_plan_switch_options_t o;
  eplb_plan_switch_options_default(&o);
  eplb_loads_t shape = {cur->num_layers, cur->num_experts, NULL};
  eplb_status_t st = check(cur, next, &shape, &o, take);
  if (st)
    return st;
  if (!cur->node_share != !next->node_share || cur->ns_nodes != next->ns_nodes)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "switch_apply: node shares of %u nodes in the current plan, %u in the new",
                       cur->node_share ? cur->ns_nodes : 0, next->node_share ? next->ns_nodes : 0);
  size_t R = cur->num_slots, G = cur->num_gpus, NR = (size_t)cur->ns_nodes * R;
  for (uint32_t l = 0; l < cur->num_layers; l++) {
    if (take[l])
      continue;
    memcpy(next->phy2log + l * R, cur->phy2log + l * R, R * sizeof *next->phy2log);
    memcpy(next->share + l * R, cur->share + l * R, R * sizeof *next->share);
    memcpy(next->gpu_load + l * G, cur->gpu_load + l * G, G * sizeof *next->gpu_load);
    if (next->node_share)
      memcpy(next->node_share + l * NR, cur->node_share + l * NR, NR * sizeof *next->node_share);
    next->metrics[l] = cur->metrics[l];
    if (next->replica_rank && (st = eplb_plan_replica_rank(cur, l, next->replica_rank + l * R)))
      return st;
  }
  return EPLB_OK;
}
