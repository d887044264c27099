/* sim/continuous.c — the runtime's continuous re-placement in the simulator:
 * after each step the moves eplb_plan_step_moves chooses on the recent
 * counts start, their slots carry nothing for a step and then serve their
 * new expert (eplb/sim.h, continuous_window). */
#include "sim/sim.h"

#include <math.h>
#include <string.h>

struct eplb__sim_cont {
  uint32_t L, E, R, G, N, W, lag;
  int in_place;   /* 1: a slot in flight carries nothing; 0: it serves its old expert */
  int copy_steps; /* 0: a move serves in the next step already; 1: the step after */
  eplb_plan_step_options_t opts;
  uint32_t *ring;         /* [W][L][E] the last W steps' counts */
  uint64_t pushed;        /* steps pushed */
  eplb_loads_t *loads;    /* their sum */
  int32_t *p2l;           /* [L][R] the target placement (moves in flight at their new expert) */
  double *share;          /* [L][R] shares in service (uniform; busy slots 0) */
  uint8_t *busy;          /* [L][R] slots in flight */
  uint32_t *nbusy;        /* [L] */
  eplb_plan_move_t *pend; /* moves chosen, not started (lag 1) */
  size_t npend, cap;
  eplb_plan_move_t *fly; /* moves in flight */
  size_t nfly;
  eplb_plan_move_t *started; /* moves the last step started (their bytes) */
  size_t nstarted;
  uint32_t *slots_per_gpu;
  eplb_plan_policy_t policy;
};

void eplb__sim_cont_destroy(eplb__sim_cont_t *c) {
  if (!c)
    return;
  eplb_loads_destroy(c->loads);
  void *p[] = {c->ring, c->p2l, c->share,         c->busy,    c->nbusy,
               c->pend, c->fly, c->slots_per_gpu, c->started, c};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++)
    eplb__free(p[i]);
}

eplb_status_t eplb__sim_cont_create(const eplb_sim_options_t *o, const eplb_plan_t *plan,
                                    eplb__sim_cont_t **out) {
  eplb__sim_cont_t *c = eplb__calloc(1, sizeof *c);
  *out = c;
  if (!c)
    return eplb__error(EPLB_ENOMEM, "sim", "continuous re-placement");
  c->L = eplb_plan_num_layers(plan), c->E = eplb_plan_num_experts(plan);
  c->R = eplb_plan_num_slots(plan), c->G = eplb_plan_num_gpus(plan);
  c->N = eplb_plan_num_nodes(plan), c->W = o->continuous_window, c->lag = o->continuous_lag;
  c->in_place = o->continuous_in_place;
  c->copy_steps = o->continuous_copy_steps;
  c->opts = o->step_moves;
  c->opts.in_place = c->copy_steps && c->in_place; /* else staged: layers land whole */
  c->policy = eplb_plan_policy(plan);
  size_t LR = (size_t)c->L * c->R, LE = (size_t)c->L * c->E;
  c->cap = (size_t)c->G * (c->opts.slots_per_gpu ? c->opts.slots_per_gpu : 1);
  c->ring = eplb__calloc((size_t)c->W * LE, sizeof *c->ring);
  c->p2l = eplb__malloc_array(LR, sizeof *c->p2l);
  c->share = eplb__malloc_array(LR, sizeof *c->share);
  c->busy = eplb__calloc(LR, 1);
  c->nbusy = eplb__calloc(c->L, sizeof *c->nbusy);
  c->pend = eplb__malloc_array(c->cap, sizeof *c->pend);
  c->fly = eplb__malloc_array(c->cap, sizeof *c->fly);
  c->started = eplb__malloc_array(c->cap, sizeof *c->started);
  c->slots_per_gpu = eplb__malloc_array(c->G, sizeof *c->slots_per_gpu);
  if (!c->ring || !c->p2l || !c->share || !c->busy || !c->nbusy || !c->pend || !c->fly ||
      !c->started || !c->slots_per_gpu)
    return eplb__error(EPLB_ENOMEM, "sim", "continuous re-placement of %u x %u slots", c->L, c->R);
  memcpy(c->slots_per_gpu, eplb_plan_slots_per_gpu(plan), c->G * sizeof *c->slots_per_gpu);
  for (uint32_t l = 0; l < c->L; l++) {
    memcpy(c->p2l + (size_t)l * c->R, eplb_plan_phy2log(plan, l), c->R * sizeof *c->p2l);
    memcpy(c->share + (size_t)l * c->R, eplb_plan_share(plan, l), c->R * sizeof *c->share);
  }
  return eplb_loads_create(c->L, c->E, &c->loads);
}

const uint8_t *eplb__sim_cont_busy(const eplb__sim_cont_t *c, uint32_t layer) {
  return c && c->in_place && c->nbusy[layer] ? c->busy + (size_t)layer * c->R : NULL;
}

/* The shares a layer's plan carries after its slots changed: uniform over
 * each expert's replicas in service (what a failed split falls back to;
 * with staged copies a slot in flight serves its old expert, which the
 * replay's plan holds, so the target's shares only need to be valid). */
static void uniform_in_service(eplb__sim_cont_t *c, uint32_t l, uint32_t *cnt) {
  const int32_t *p = c->p2l + (size_t)l * c->R;
  const uint8_t *b = c->busy + (size_t)l * c->R;
  double *s = c->share + (size_t)l * c->R;
  memset(cnt, 0, c->E * sizeof *cnt);
  for (uint32_t r = 0; r < c->R; r++)
    cnt[p[r]] += !b[r];
  for (uint32_t r = 0; r < c->R; r++)
    s[r] = b[r] ? 0.0 : 1.0 / cnt[p[r]];
}

/* The target placement as a plan (the planner's input and the replay's). */
static eplb_status_t as_plan(const eplb__sim_cont_t *c, eplb_plan_t **out) {
  eplb__plan_shape_t shape = {c->L, c->E, c->G, c->N, c->R, c->slots_per_gpu};
  return eplb__plan_from_arrays(&shape, c->policy, c->p2l, c->share, NULL, out);
}

/* The moves in flight land; the chosen ones start (their slots go busy). */
static void land_and_start(eplb__sim_cont_t *c, uint32_t *cnt) {
  for (size_t i = 0; i < c->nfly; i++) {
    const eplb_plan_move_t *m = &c->fly[i];
    c->busy[(size_t)m->layer * c->R + m->slot] = 0;
    c->nbusy[m->layer]--;
  }
  for (size_t i = 0; i < c->npend; i++) {
    const eplb_plan_move_t *m = &c->pend[i];
    c->p2l[(size_t)m->layer * c->R + m->slot] = m->to_expert;
    c->busy[(size_t)m->layer * c->R + m->slot] = 1;
    c->nbusy[m->layer]++;
  }
  for (uint32_t l = 0; l < c->L; l++) {
    bool touched = false;
    for (size_t i = 0; i < c->nfly + c->npend && !touched; i++)
      touched = (i < c->nfly ? c->fly[i].layer : c->pend[i - c->nfly].layer) == l;
    if (touched)
      uniform_in_service(c, l, cnt);
  }
  memcpy(c->fly, c->pend, c->npend * sizeof *c->fly);
  memcpy(c->started, c->pend, c->npend * sizeof *c->started);
  c->nfly = c->nstarted = c->npend;
  c->npend = 0;
  if (c->copy_steps == 0) { /* landed before their layer is reached in the next step */
    for (size_t i = 0; i < c->nfly; i++)
      c->busy[(size_t)c->fly[i].layer * c->R + c->fly[i].slot] = 0;
    for (size_t i = 0; i < c->nfly; i++)
      c->nbusy[c->fly[i].layer] = 0;
    for (size_t i = 0; i < c->nfly; i++)
      uniform_in_service(c, c->fly[i].layer, cnt);
    c->nfly = 0;
  }
}

/* The next moves, from the window's counts, into pend. */
static eplb_status_t choose(eplb__sim_cont_t *c) {
  size_t LE = (size_t)c->L * c->E;
  uint64_t n = c->pushed < c->W ? c->pushed : c->W;
  memset(c->loads->values, 0, LE * sizeof *c->loads->values);
  for (uint64_t i = 0; i < n; i++) {
    const uint32_t *row = c->ring + (size_t)((c->pushed - 1 - i) % c->W) * LE;
    for (size_t j = 0; j < LE; j++)
      c->loads->values[j] += row[j];
  }
  eplb_plan_t *cur = NULL;
  eplb_status_t st = as_plan(c, &cur);
  if (st == EPLB_OK)
    st = eplb_plan_step_moves(cur, c->busy, c->loads, &c->opts, c->pend, c->cap, &c->npend);
  eplb_plan_destroy(cur);
  return st;
}

eplb_status_t eplb__sim_cont_step(eplb__sim_cont_t *c, const uint32_t *counts, uint32_t *cnt,
                                  eplb_plan_t **plan, uint32_t *moved) {
  size_t LE = (size_t)c->L * c->E;
  eplb_status_t st = EPLB_OK;
  *moved = 0;
  /* Lag 0: the moves see this step's counts; lag 1: they were chosen a step
   * ago (the runtime's planning thread) and start now. */
  if (c->lag == 0) {
    memcpy(c->ring + (size_t)(c->pushed++ % c->W) * LE, counts, LE * sizeof *counts);
    if ((st = choose(c)) != EPLB_OK)
      return st;
  }
  *moved = (uint32_t)c->npend;
  bool change = c->nfly + c->npend > 0;
  land_and_start(c, cnt);
  if (c->lag > 0) {
    memcpy(c->ring + (size_t)(c->pushed++ % c->W) * LE, counts, LE * sizeof *counts);
    if ((st = choose(c)) != EPLB_OK)
      return st;
  }
  if (!change)
    return EPLB_OK;
  eplb_plan_t *np = NULL;
  /* Staged copies: a slot in flight still serves its old expert. */
  if (!c->in_place)
    for (size_t i = 0; i < c->nfly; i++)
      c->p2l[(size_t)c->fly[i].layer * c->R + c->fly[i].slot] = c->fly[i].from_expert;
  st = as_plan(c, &np);
  if (!c->in_place)
    for (size_t i = 0; i < c->nfly; i++)
      c->p2l[(size_t)c->fly[i].layer * c->R + c->fly[i].slot] = c->fly[i].to_expert;
  if (st != EPLB_OK)
    return st;
  eplb_plan_destroy(*plan);
  *plan = np;
  return EPLB_OK;
}

void eplb__sim_migration(sim_t *s, eplb_sim_step_t *rec) {
  double bytes = 0, us = 0;
  for (uint32_t g = 0; g < s->G; g++) {
    double a = s->rx_intra[g] / s->bw_intra[g], b = s->rx_inter[g] / s->bw_inter[g];
    bytes += s->rx_intra[g] + s->rx_inter[g];
    us = fmax(us, fmax(a, b)); /* NVLink and RDMA at once */
    s->rx_intra[g] = s->rx_inter[g] = 0;
  }
  double idle = fmax(0, rec->step_time_us - rec->a2a_us);
  rec->migrated_bytes = bytes;
  rec->migration_us = us;
  rec->migration_exposed_us = fmax(0, us - idle);
  rec->step_time_us += rec->migration_exposed_us;
}

void eplb__sim_cont_rx(const eplb__sim_cont_t *c, const uint32_t *slot_gpu,
                       const uint32_t *gpu_node, double bytes, double *intra, double *inter) {
  for (size_t i = 0; i < c->nstarted; i++) {
    const eplb_plan_move_t *m = &c->started[i];
    uint32_t dst = slot_gpu[m->slot], src = slot_gpu[m->src_slot];
    if (dst == src)
      continue;
    (gpu_node[dst] == gpu_node[src] ? intra : inter)[dst] += bytes;
  }
}

/* After a step: continuous re-placement's moves land and start; the next
 * step receives their bytes. */
eplb_status_t eplb__sim_cont_after(sim_t *s, const uint32_t *counts, eplb_plan_t **own) {
  uint32_t moved = 0;
  const eplb_plan_t *before = *own;
  eplb_status_t st = eplb__sim_cont_step(s->cont, counts, s->ecount, own, &moved);
  if (st == EPLB_OK)
    eplb__sim_cont_rx(s->cont, s->slot_gpu, s->gpu_node, s->cost->bytes_per_expert, s->rx_intra,
                      s->rx_inter);
  if (st == EPLB_OK && *own != before)
    st = eplb__sim_layout_build(s, *own);
  return st;
}

/* Continuous re-placement from the plan in force: the plan steps before the
 * first replayed one (b) run its moves too, as the runtime serving them
 * would (they are not replayed: moves depend on counts only). */
eplb_status_t eplb__sim_cont_setup(sim_t *s, eplb_trace_t *trace, const uint64_t prange[2],
                                   uint64_t b, eplb_plan_t **own) {
  eplb_status_t st;
  if (!*own)
    return eplb__error(EPLB_EINVAL, "sim", "continuous re-placement needs policy mode");
  if (!(s->ecount = eplb__malloc_array(s->E, sizeof *s->ecount)))
    return eplb__error(EPLB_ENOMEM, "sim", "out of memory");
  if ((st = eplb__sim_cont_create(s->opts, *own, &s->cont)) != EPLB_OK)
    return st;
  for (uint64_t t = prange[0]; t < prange[1] && t < b; t++) {
    memset(s->rx_intra, 0, s->G * sizeof *s->rx_intra); /* unscored: their bytes go */
    memset(s->rx_inter, 0, s->G * sizeof *s->rx_inter);
    eplb_trace_step_t ts;
    if ((st = eplb_trace_read_step(trace, t, &ts)) != EPLB_OK ||
        (st = eplb__sim_cont_after(s, ts.counts, own)) != EPLB_OK)
      return st;
  }
  return EPLB_OK;
}
