/* runtime/live.c — the live plan and its dispatch tables, double-buffered
 * by layer. The fields are the runtime's (tests/ read tab, active and
 * has_ns there); this file alone writes them, and the other parts (batch,
 * rebalance, dispatch, device) go through the functions below. */
#include "runtime/runtime.h"

#include <string.h>

eplb_status_t eplb__live_alloc(eplb_runtime_t *rt) {
  const eplb__geom_t *g = &rt->g;
  size_t LR = (size_t)g->L * g->R;
  rt->phy2log = eplb__malloc_array(LR, sizeof *rt->phy2log);
  rt->share = eplb__malloc_array(LR, sizeof *rt->share);
  rt->node_share = eplb__malloc_array(LR, sizeof *rt->node_share);
  rt->has_ns = eplb__calloc(g->L, 1);
  rt->tab = eplb__calloc(g->L, sizeof *rt->tab);
  rt->active = eplb__calloc(g->L, 1);
  if (!rt->phy2log || !rt->share || !rt->node_share || !rt->has_ns || !rt->tab || !rt->active)
    return eplb__error(EPLB_ENOMEM, "runtime", "runtime of %u layers x %u slots", g->L, g->R);
  eplb_status_t st = EPLB_OK;
  for (uint32_t l = 0; l < g->L && st == EPLB_OK; l++)
    for (int b = 0; b < 2 && st == EPLB_OK; b++)
      st = eplb__dtab_alloc(&rt->tab[l][b], g->E, g->R);
  return st;
}

void eplb__live_free(eplb_runtime_t *rt) {
  if (rt->tab)
    for (uint32_t l = 0; l < rt->g.L; l++) {
      eplb__dtab_free(&rt->tab[l][0]);
      eplb__dtab_free(&rt->tab[l][1]);
    }
  void *ptrs[] = {rt->phy2log, rt->share, rt->tab, rt->active, rt->has_ns, rt->node_share};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    eplb__free(ptrs[i]);
}

/* Keeps this node's row of the plan's per-source-node shares. A plan made
 * for another node count (a heterogeneous cluster model) cannot say which
 * row is ours: its node shares are ignored, on every rank alike. */
static eplb_status_t load_node_shares(eplb_runtime_t *rt, const eplb_plan_t *plan) {
  uint32_t N = eplb_plan_node_share_nodes(plan), R = rt->g.R;
  if (!N)
    return EPLB_OK;
  if (N != rt->g.N) {
    eplb__log(EPLB_LOG_WARN, "runtime",
              "initial plan: node shares for %u nodes, the runtime has %u; using global shares", N,
              rt->g.N);
    return EPLB_OK;
  }
  uint64_t h = EPLB__FNV1A_BASIS;
  for (uint32_t l = 0; l < rt->g.L; l++) {
    const double *ns = eplb_plan_node_share(plan, l);
    for (size_t i = 0; i < (size_t)N * R; i++)
      if (!(ns[i] >= 0 && ns[i] <= 1 + 1e-9))
        return eplb__error(EPLB_EINVAL, "runtime",
                           "initial plan: layer %u node %zu slot %zu: node share %g not in [0, 1]",
                           l, i / R, i % R, ns[i]);
    h = eplb__fnv1a(h, ns, (size_t)N * R * sizeof *ns);
    memcpy(rt->node_share + (size_t)l * R, ns + (size_t)rt->g.node * R, R * sizeof *ns);
    rt->has_ns[l] = 1;
  }
  rt->ns_hash = h;
  return EPLB_OK;
}

eplb_status_t eplb__live_load(eplb_runtime_t *rt, const eplb_plan_t *initial) {
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *own = NULL;
  eplb_loads_t *uniform = NULL;
  uint32_t R = rt->g.R;
  if (!initial) {
    eplb_plan_options_t o;
    eplb_plan_options_default(&o);
    o.num_gpus = rt->g.P;
    o.num_nodes = rt->g.N;
    o.num_replicas = R;
    if ((st = eplb_loads_create(rt->g.L, rt->g.E, &uniform)) != EPLB_OK)
      goto done;
    for (size_t i = 0; i < rt->g.LE; i++)
      uniform->values[i] = 1.0;
    if ((st = eplb_plan_create(uniform, &o, &own)) != EPLB_OK)
      goto done;
    initial = own;
  }
  if ((st = eplb__runtime_plan_fits(&rt->g, initial, "initial plan")) != EPLB_OK)
    goto done;
  for (uint32_t l = 0; l < rt->g.L; l++) {
    memcpy(rt->phy2log + (size_t)l * R, eplb_plan_phy2log(initial, l), R * sizeof *rt->phy2log);
    memcpy(rt->share + (size_t)l * R, eplb_plan_share(initial, l), R * sizeof *rt->share);
  }
  if ((st = load_node_shares(rt, initial)) != EPLB_OK)
    goto done;
  for (uint32_t l = 0; l < rt->g.L; l++)
    eplb__dtab_build_node(&rt->tab[l][0], rt->g.E, R, eplb__live_p2l(rt, l),
                          eplb__live_share(rt, l), eplb__live_node_share(rt, l), rt->g.S, rt->g.K,
                          rt->g.node, rt->cfg.local_first);
done:
  eplb_plan_destroy(own);
  eplb_loads_destroy(uniform);
  return st;
}

uint64_t eplb__live_hash(const eplb_runtime_t *rt, uint64_t h) {
  if (!rt->phy2log) /* create failed before the live plan existed */
    return h;
  h = eplb__fnv1a(h, rt->phy2log, (size_t)rt->g.L * rt->g.R * sizeof *rt->phy2log);
  h = eplb__fnv1a(h, rt->share, (size_t)rt->g.L * rt->g.R * sizeof *rt->share);
  return eplb__fnv1a(h, &rt->ns_hash, sizeof rt->ns_hash);
}

const int32_t *eplb__live_p2l(const eplb_runtime_t *rt, uint32_t layer) {
  return rt->phy2log + (size_t)layer * rt->g.R;
}

const double *eplb__live_share(const eplb_runtime_t *rt, uint32_t layer) {
  return rt->share + (size_t)layer * rt->g.R;
}

const double *eplb__live_node_share(const eplb_runtime_t *rt, uint32_t layer) {
  return rt->has_ns[layer] ? rt->node_share + (size_t)layer * rt->g.R : NULL;
}

const eplb__dtab_t *eplb__live_table(const eplb_runtime_t *rt, uint32_t layer) {
  return &rt->tab[layer][rt->active[layer]];
}

eplb__dtab_t *eplb__live_build_idle(eplb_runtime_t *rt, uint32_t layer, const int32_t *p2l,
                                    const double *share, const double *node_share) {
  eplb__dtab_t *t = &rt->tab[layer][!rt->active[layer]];
  eplb__dtab_build_node(t, rt->g.E, rt->g.R, p2l, share, node_share, rt->g.S, rt->g.K, rt->g.node,
                        rt->cfg.local_first);
  return t;
}

void eplb__live_flip(eplb_runtime_t *rt, uint32_t layer) {
  rt->active[layer] = (uint8_t)!rt->active[layer];
}

void eplb__live_switch(eplb_runtime_t *rt, uint32_t layer, const int32_t *p2l,
                       const double *share) {
  size_t o = (size_t)layer * rt->g.R;
  memcpy(rt->phy2log + o, p2l, rt->g.R * sizeof *rt->phy2log);
  memcpy(rt->share + o, share, rt->g.R * sizeof *rt->share);
  rt->has_ns[layer] = 0; /* the runtime's plans and eplbd's carry no node shares */
  eplb__live_flip(rt, layer);
}
