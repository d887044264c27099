/* runtime/live.c — the live plan and its dispatch tables, double-buffered
 * by layer: the dispatch part's state, opaque so that only this file writes
 * it; the other parts (batch, rebalance, dispatch, device) and the tests go
 * through the functions in runtime/runtime.h. */
#include "runtime/runtime.h"

#include <string.h>

struct eplb__live {
  eplb__geom_t g;
  int local_first;  /* cfg.local_first: a table build's rule */
  int32_t *phy2log; /* [L][R] */
  double *share;    /* [L][R] */
  /* This node's row of the live plan's per-source-node shares, for layers
   * with has_ns set (plans of the locality policy); the runtime's own plans
   * and eplbd's mailbox plans carry none, so installing one clears the flag. */
  double *node_share; /* [L][R] */
  uint8_t *has_ns;    /* [L] */
  uint64_t ns_hash;   /* fnv of the initial plan's node shares (all nodes), 0 if none */
  eplb__dtab_t (*tab)[2];
  uint8_t *active; /* [L] which of the layer's two tables map reads */
  /* Slots out of service (continuous re-placement in place: weights being
   * copied into them); the per-batch split routes around them. */
  uint8_t *oos;   /* [L][R] */
  uint32_t *noos; /* [L] */
};

eplb_status_t eplb__live_create(const eplb__geom_t *g, int local_first, eplb__live_t **out) {
  eplb_status_t st = EPLB_OK;
  size_t LR = (size_t)g->L * g->R;
  eplb__live_t *lv = eplb__calloc(1, sizeof *lv);
  if (!lv)
    return eplb__error(EPLB_ENOMEM, "runtime", "live plan");
  lv->g = *g;
  lv->local_first = local_first;
  lv->phy2log = eplb__malloc_array(LR, sizeof *lv->phy2log);
  lv->share = eplb__malloc_array(LR, sizeof *lv->share);
  lv->node_share = eplb__malloc_array(LR, sizeof *lv->node_share);
  lv->has_ns = eplb__calloc(g->L, 1);
  lv->tab = eplb__calloc(g->L, sizeof *lv->tab);
  lv->active = eplb__calloc(g->L, 1);
  lv->oos = eplb__calloc(LR, 1);
  lv->noos = eplb__calloc(g->L, sizeof *lv->noos);
  if (!lv->phy2log || !lv->share || !lv->node_share || !lv->has_ns || !lv->tab || !lv->active ||
      !lv->oos || !lv->noos) {
    st = eplb__error(EPLB_ENOMEM, "runtime", "runtime of %u layers x %u slots", g->L, g->R);
    goto done;
  }
  for (uint32_t l = 0; l < g->L && st == EPLB_OK; l++)
    for (int b = 0; b < 2 && st == EPLB_OK; b++)
      st = eplb__dtab_alloc(&lv->tab[l][b], g->E, g->R);
done:
  if (st != EPLB_OK) {
    eplb__live_destroy(lv);
    lv = NULL;
  }
  *out = lv;
  return st;
}

void eplb__live_destroy(eplb__live_t *lv) {
  if (!lv)
    return;
  if (lv->tab)
    for (uint32_t l = 0; l < lv->g.L; l++) {
      eplb__dtab_free(&lv->tab[l][0]);
      eplb__dtab_free(&lv->tab[l][1]);
    }
  void *ptrs[] = {lv->phy2log,    lv->share, lv->tab,  lv->active, lv->has_ns,
                  lv->node_share, lv->oos,   lv->noos, lv};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    eplb__free(ptrs[i]);
}

/* Keeps this node's row of the plan's per-source-node shares. A plan made
 * for another node count (a heterogeneous cluster model) cannot say which
 * row is ours: its node shares are ignored, on every rank alike. */
static eplb_status_t load_node_shares(eplb__live_t *lv, const eplb_plan_t *plan) {
  uint32_t N = eplb_plan_node_share_nodes(plan), R = lv->g.R;
  if (!N)
    return EPLB_OK;
  if (N != lv->g.N) {
    eplb__log(EPLB_LOG_WARN, "runtime",
              "initial plan: node shares for %u nodes, the runtime has %u; using global shares", N,
              lv->g.N);
    return EPLB_OK;
  }
  uint64_t h = EPLB__FNV1A_BASIS;
  for (uint32_t l = 0; l < lv->g.L; l++) {
    const double *ns = eplb_plan_node_share(plan, l);
    for (size_t i = 0; i < (size_t)N * R; i++)
      if (!(ns[i] >= 0 && ns[i] <= 1 + 1e-9))
        return eplb__error(EPLB_EINVAL, "runtime",
                           "initial plan: layer %u node %zu slot %zu: node share %g not in [0, 1]",
                           l, i / R, i % R, ns[i]);
    h = eplb__fnv1a(h, ns, (size_t)N * R * sizeof *ns);
    memcpy(lv->node_share + (size_t)l * R, ns + (size_t)lv->g.node * R, R * sizeof *ns);
    lv->has_ns[l] = 1;
  }
  lv->ns_hash = h;
  return EPLB_OK;
}

eplb_status_t eplb__live_load(eplb__live_t *lv, const eplb_plan_t *initial) {
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *own = NULL;
  eplb_loads_t *uniform = NULL;
  const eplb__geom_t *g = &lv->g;
  uint32_t R = g->R;
  if (!initial) {
    eplb_plan_options_t o;
    eplb_plan_options_default(&o);
    o.num_gpus = g->P;
    o.num_nodes = g->N;
    o.num_replicas = R;
    if ((st = eplb_loads_create(g->L, g->E, &uniform)) != EPLB_OK)
      goto done;
    for (size_t i = 0; i < g->LE; i++)
      uniform->values[i] = 1.0;
    if ((st = eplb_plan_create(uniform, &o, &own)) != EPLB_OK)
      goto done;
    initial = own;
  }
  if ((st = eplb__live_plan_fits(g, initial, "initial plan")) != EPLB_OK)
    goto done;
  for (uint32_t l = 0; l < g->L; l++) {
    memcpy(lv->phy2log + (size_t)l * R, eplb_plan_phy2log(initial, l), R * sizeof *lv->phy2log);
    memcpy(lv->share + (size_t)l * R, eplb_plan_share(initial, l), R * sizeof *lv->share);
  }
  if ((st = load_node_shares(lv, initial)) != EPLB_OK)
    goto done;
  for (uint32_t l = 0; l < g->L; l++)
    eplb__dtab_build_node(&lv->tab[l][0], g->E, R, eplb__live_p2l(lv, l), eplb__live_share(lv, l),
                          eplb__live_node_share(lv, l), g->S, g->K, g->node, lv->local_first);
done:
  eplb_plan_destroy(own);
  eplb_loads_destroy(uniform);
  return st;
}

uint64_t eplb__live_hash(const eplb__live_t *lv, uint64_t h) {
  if (!lv) /* create failed before the live plan existed */
    return h;
  h = eplb__fnv1a(h, lv->phy2log, (size_t)lv->g.L * lv->g.R * sizeof *lv->phy2log);
  h = eplb__fnv1a(h, lv->share, (size_t)lv->g.L * lv->g.R * sizeof *lv->share);
  return eplb__fnv1a(h, &lv->ns_hash, sizeof lv->ns_hash);
}

const int32_t *eplb__live_p2l(const eplb__live_t *lv, uint32_t layer) {
  return lv->phy2log + (size_t)layer * lv->g.R;
}

const double *eplb__live_share(const eplb__live_t *lv, uint32_t layer) {
  return lv->share + (size_t)layer * lv->g.R;
}

const double *eplb__live_node_share(const eplb__live_t *lv, uint32_t layer) {
  return lv->has_ns[layer] ? lv->node_share + (size_t)layer * lv->g.R : NULL;
}

const eplb__dtab_t *eplb__live_table(const eplb__live_t *lv, uint32_t layer) {
  return &lv->tab[layer][lv->active[layer]];
}

uint32_t eplb__live_active(const eplb__live_t *lv, uint32_t layer) { return lv->active[layer]; }

const eplb__dtab_t *eplb__live_buffer(const eplb__live_t *lv, uint32_t layer, uint32_t which) {
  return &lv->tab[layer][which];
}

eplb__dtab_t *eplb__live_table_rw(eplb__live_t *lv, uint32_t layer) {
  return &lv->tab[layer][lv->active[layer]];
}

eplb__dtab_t *eplb__live_build_idle(eplb__live_t *lv, uint32_t layer, const int32_t *p2l,
                                    const double *share, const double *node_share) {
  eplb__dtab_t *t = &lv->tab[layer][!lv->active[layer]];
  eplb__dtab_build_node(t, lv->g.E, lv->g.R, p2l, share, node_share, lv->g.S, lv->g.K, lv->g.node,
                        lv->local_first);
  return t;
}

void eplb__live_flip(eplb__live_t *lv, uint32_t layer) {
  lv->active[layer] = (uint8_t)!lv->active[layer];
}

void eplb__live_switch(eplb__live_t *lv, uint32_t layer, const int32_t *p2l, const double *share) {
  size_t o = (size_t)layer * lv->g.R;
  memcpy(lv->phy2log + o, p2l, lv->g.R * sizeof *lv->phy2log);
  memcpy(lv->share + o, share, lv->g.R * sizeof *lv->share);
  lv->has_ns[layer] = 0; /* the runtime's plans and eplbd's carry no node shares */
  eplb__live_flip(lv, layer);
}

const uint8_t *eplb__live_oos(const eplb__live_t *lv, uint32_t layer) {
  return lv->noos[layer] ? lv->oos + (size_t)layer * lv->g.R : NULL;
}

void eplb__live_set_oos(eplb__live_t *lv, uint32_t layer, uint32_t slot, bool out) {
  uint8_t *o = lv->oos + (size_t)layer * lv->g.R + slot;
  lv->noos[layer] += (uint32_t)out - (uint32_t)*o;
  *o = out;
}

eplb_status_t eplb__live_plan_fits(const eplb__geom_t *g, const eplb_plan_t *p, const char *what) {
  if (eplb_plan_num_layers(p) != g->L || eplb_plan_num_experts(p) != g->E ||
      eplb_plan_num_gpus(p) != g->P || eplb_plan_num_nodes(p) != g->N ||
      eplb_plan_num_slots(p) != g->R)
    return eplb__error(EPLB_ESHAPE, "runtime",
                       "%s: %u layers, %u experts, %u GPUs, %u nodes, %u slots; the runtime has "
                       "%u, %u, %u, %u, %u",
                       what, eplb_plan_num_layers(p), eplb_plan_num_experts(p),
                       eplb_plan_num_gpus(p), eplb_plan_num_nodes(p), eplb_plan_num_slots(p), g->L,
                       g->E, g->P, g->N, g->R);
  const uint32_t *spg = eplb_plan_slots_per_gpu(p);
  for (uint32_t q = 0; q < g->P; q++)
    if (spg[q] != g->S)
      return eplb__error(EPLB_ESHAPE, "runtime", "%s: GPU %u has %u slots, not %u", what, q, spg[q],
                         g->S);
  return EPLB_OK;
}
