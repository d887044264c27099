/* planner/step_moves.c — continuous re-placement: the few slots that change
 * at one step (eplb_plan_step_moves), written once for the runtime and the
 * simulator so that a simulation moves what the runtime would. */
#include "planner/planner.h"

#include "eplb/split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void plan_step_options_defaults(eplb_plan_step_options_t *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->slots_per_gpu = 16;
  o->max_per_layer = 8;
  o->move_weight = 0.0005;
}

eplb_status_t eplb_plan_step_options_init(eplb_plan_step_options_t *o, size_t size) {
  eplb_plan_step_options_t d;
  plan_step_options_defaults(&d);
  return eplb__opts_init(o, size, &d, sizeof d, "eplb_plan_step_options_t");
}

/* A layer whose incremental plan changes slots, and what that gains. */
typedef struct cand {
  uint32_t layer;
  double gain; /* relative fall of the exact-split max load, per moved slot */
} cand_t;

static int by_gain(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  if (x->gain != y->gain)
    return x->gain > y->gain ? -1 : 1;
  return x->layer < y->layer ? -1 : x->layer > y->layer;
}

/* Working state of one call. */
typedef struct ctx {
  const eplb_plan_t *cur, *next;
  const uint8_t *busy;
  const eplb_loads_t *loads;
  const eplb_plan_step_options_t *o;
  uint32_t L, E, G, R, per_node;
  uint32_t *gpu_of;  /* [R] */
  uint32_t *recv;    /* [G] slots each GPU receives in the moves taken */
  uint32_t *recv_l;  /* [G] the candidate layer's */
  uint32_t *serving; /* [E] replicas in service that stay */
  uint32_t *used;    /* [R] copies sourced from each slot (this layer) */
  uint8_t *moving;   /* [R] slots the candidate layer changes */
  eplb_split_t *split;
  double *share, *gload; /* [R], [G] */
} ctx_t;

/* The exact-split max load of placement p2l on layer l's loads. */
static eplb_status_t exact_max(ctx_t *c, uint32_t l, const int32_t *p2l, double *out) {
  eplb_split_problem_t pb = {c->E, c->G, c->R, (const uint32_t *)p2l,
                             eplb_plan_slots_per_gpu(c->cur)};
  eplb_split_result_t res = {.share = c->share, .gpu_load = c->gload};
  eplb_status_t st = eplb_split_solve(c->split, &pb, c->loads->values + (size_t)l * c->E, &res);
  *out = res.max_load;
  return st;
}

/* Marks layer l's moving slots and receives; false when a moving slot is
 * busy, or a new expert has no slot to be copied from, or (in place) an
 * expert would keep no replica in service. */
static bool mark(ctx_t *c, uint32_t l) {
  const int32_t *a = eplb_plan_phy2log(c->cur, l), *b = eplb_plan_phy2log(c->next, l);
  const uint8_t *busy = c->busy ? c->busy + (size_t)l * c->R : NULL;
  memset(c->recv_l, 0, c->G * sizeof *c->recv_l);
  memset(c->serving, 0, c->E * sizeof *c->serving);
  bool in_place = c->o->in_place;
  for (uint32_t r = 0; r < c->R; r++) {
    c->moving[r] = a[r] != b[r];
    if (c->moving[r] && busy && busy[r])
      return false;
    if (c->moving[r])
      c->recv_l[c->gpu_of[r]]++;
    /* Staged, a moving slot serves (and can be read for) its old expert
     * until its layer lands; in place it stops at once. */
    if ((!c->moving[r] || !in_place) && (!busy || !busy[r]))
      c->serving[a[r]]++;
  }
  for (uint32_t r = 0; r < c->R; r++)
    if (c->moving[r] && ((in_place && !c->serving[a[r]]) || !c->serving[b[r]]))
      return false;
  return true;
}

/* Whether layer l's moves can run now: mark(), and no GPU passes its
 * budget with them. */
static bool feasible(ctx_t *c, uint32_t l) {
  if (!mark(c, l))
    return false;
  uint64_t B = c->o->expert_bytes, cap = c->o->bytes_per_gpu;
  for (uint32_t g = 0; g < c->G; g++) {
    uint32_t n = c->recv[g] + c->recv_l[g];
    if (n > c->o->slots_per_gpu || (cap && B && (uint64_t)n * B > cap))
      return false;
  }
  return true;
}

/* The source of every moving slot of layer l: a slot in service holding the
 * new expert, same node first, then the least used, then the lowest. */
static size_t write_moves(ctx_t *c, uint32_t l, eplb_plan_move_t *moves, size_t at, size_t cap) {
  const int32_t *a = eplb_plan_phy2log(c->cur, l), *b = eplb_plan_phy2log(c->next, l);
  const uint8_t *busy = c->busy ? c->busy + (size_t)l * c->R : NULL;
  memset(c->used, 0, c->R * sizeof *c->used);
  for (uint32_t r = 0; r < c->R && at < cap; r++) {
    if (!c->moving[r])
      continue;
    uint32_t node = c->gpu_of[r] / c->per_node, best = UINT32_MAX;
    for (uint32_t s = 0; s < c->R; s++) {
      if (a[s] != b[r] || (c->o->in_place && c->moving[s]) || (busy && busy[s]))
        continue;
      if (best == UINT32_MAX) {
        best = s;
        continue;
      }
      bool near = c->gpu_of[s] / c->per_node == node, bnear = c->gpu_of[best] / c->per_node == node;
      if (near != bnear ? near : c->used[s] < c->used[best])
        best = s;
    }
    c->used[best]++; /* feasible() saw a source for every new expert */
    moves[at++] = (eplb_plan_move_t){l, r, best, a[r], b[r]};
  }
  return at;
}

static eplb_status_t check_args(const eplb_plan_t *cur, const eplb_loads_t *loads,
                                const eplb_plan_step_options_t *o, const eplb_plan_move_t *moves,
                                size_t cap, const size_t *n) {
  if (!cur || !loads || !n || (!moves && cap) || !loads->values)
    return eplb__error(EPLB_EINVAL, "planner", "step_moves: NULL %s",
                       !cur                       ? "plan"
                       : !loads || !loads->values ? "loads"
                       : !n                       ? "n"
                                                  : "moves");
  if (!(o->move_weight >= 0) || isinf(o->move_weight))
    return eplb__error(EPLB_EINVAL, "planner", "step_moves: move_weight %g: must be >= 0",
                       o->move_weight);
  if (loads->num_layers != eplb_plan_num_layers(cur) ||
      loads->num_experts != eplb_plan_num_experts(cur))
    return eplb__error(EPLB_ESHAPE, "planner",
                       "step_moves: loads of %u x %u experts, plan of %u x %u", loads->num_layers,
                       loads->num_experts, eplb_plan_num_layers(cur), eplb_plan_num_experts(cur));
  return EPLB_OK;
}

/* The incremental plan from cur, at most max_per_layer slots a layer. */
static eplb_status_t plan_next(const eplb_plan_t *cur, const eplb_loads_t *loads,
                               const eplb_plan_step_options_t *o, eplb_plan_t **next) {
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.policy = EPLB_POLICY_INCREMENTAL;
  po.num_gpus = eplb_plan_num_gpus(cur);
  po.num_nodes = eplb_plan_num_nodes(cur);
  po.num_replicas = eplb_plan_num_slots(cur);
  po.slots_per_gpu = eplb_plan_slots_per_gpu(cur);
  po.from = cur;
  po.move_budget = o->max_per_layer;
  po.move_weight = o->move_weight;
  po.threads = 1;
  return eplb_plan_create(loads, &po, next);
}

eplb_status_t eplb_plan_step_moves(const eplb_plan_t *cur, const uint8_t *busy,
                                   const eplb_loads_t *loads, const eplb_plan_step_options_t *opts,
                                   eplb_plan_move_t *moves, size_t cap, size_t *n) {
  eplb_plan_step_options_t dflt;
  eplb_status_t st = EPLB__OPTS_TAKE(dflt, opts, eplb_plan_step_options_default,
                                     "eplb_plan_step_options_t", "planner");
  if (st != EPLB_OK)
    return st;
  const eplb_plan_step_options_t *o = &dflt;
  st = check_args(cur, loads, o, moves, cap, n);
  if (st != EPLB_OK)
    return st;
  *n = 0;
  if (!o->slots_per_gpu || !o->max_per_layer || !cap)
    return EPLB_OK;
  ctx_t c = {.cur = cur, .busy = busy, .loads = loads, .o = o};
  c.L = eplb_plan_num_layers(cur), c.E = eplb_plan_num_experts(cur);
  c.G = eplb_plan_num_gpus(cur), c.R = eplb_plan_num_slots(cur);
  c.per_node = c.G / (eplb_plan_num_nodes(cur) ? eplb_plan_num_nodes(cur) : 1);
  eplb_plan_t *next = NULL;
  cand_t *cand = eplb__malloc_array(c.L, sizeof *cand);
  c.gpu_of = eplb__malloc_array(c.R, sizeof *c.gpu_of);
  c.used = eplb__malloc_array(c.R, sizeof *c.used);
  c.moving = eplb__malloc_array(c.R, 1);
  c.share = eplb__malloc_array(c.R, sizeof *c.share);
  c.recv = eplb__calloc(c.G, sizeof *c.recv);
  c.recv_l = eplb__malloc_array(c.G, sizeof *c.recv_l);
  c.gload = eplb__malloc_array(c.G, sizeof *c.gload);
  c.serving = eplb__malloc_array(c.E, sizeof *c.serving);
  uint8_t *take = eplb__calloc(c.L, 1);
  if (!cand || !c.gpu_of || !c.used || !c.moving || !c.share || !c.recv || !c.recv_l || !c.gload ||
      !c.serving || !take) {
    st = eplb__error(EPLB_ENOMEM, "planner", "step_moves: %u layers x %u slots", c.L, c.R);
    goto done;
  }
  if ((st = eplb_split_create(NULL, &c.split)) != EPLB_OK ||
      (st = plan_next(cur, loads, o, &next)) != EPLB_OK)
    goto done;
  c.next = next;
  const uint32_t *spg = eplb_plan_slots_per_gpu(cur);
  for (uint32_t g = 0, r = 0; g < c.G; g++)
    for (uint32_t j = 0; j < spg[g]; j++)
      c.gpu_of[r++] = g;
  uint32_t nc = 0;
  for (uint32_t l = 0; l < c.L; l++) {
    eplb_plan_layer_metrics_t m;
    if ((st = eplb_plan_layer_metrics(next, l, &m)) != EPLB_OK)
      goto done;
    if (!m.slots_moved || !(m.mean_load > 0))
      continue;
    double tcur;
    if ((st = exact_max(&c, l, eplb_plan_phy2log(cur, l), &tcur)) != EPLB_OK)
      goto done;
    double gain = (tcur - m.max_load) / m.mean_load;
    /* Gain must pay for every moved slot (the incremental planner's own rule). */
    if (gain > o->move_weight * m.slots_moved)
      cand[nc++] = (cand_t){l, gain / m.slots_moved};
  }
  qsort(cand, nc, sizeof *cand, by_gain);
  for (uint32_t i = 0; i < nc; i++) {
    if (!feasible(&c, cand[i].layer))
      continue;
    for (uint32_t g = 0; g < c.G; g++)
      c.recv[g] += c.recv_l[g];
    take[cand[i].layer] = 1;
  }
  for (uint32_t l = 0; l < c.L && *n < cap; l++)
    if (take[l] && mark(&c, l))
      *n = write_moves(&c, l, moves, *n, cap);
done:
  eplb_plan_destroy(next);
  eplb_split_destroy(c.split);
  void *ptrs[] = {cand,   c.gpu_of, c.used,  c.moving,  c.share,
                  c.recv, c.recv_l, c.gload, c.serving, take};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    eplb__free(ptrs[i]);
  return st;
}
