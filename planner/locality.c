/* planner/locality.c — the locality policy on one layer (see eplb/plan.h
 * "Locality"): node assignment by co-activation and node demand, placement
 * within nodes by balanced's machinery, node shares by the split's locality stage,
 * and balanced's placement (with such node shares) as the guard. */
#include "lp/lp.h"
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Swap passes of the refinement (each O(E^2)). */
#define REFINE_PASSES 4
/* Node load may exceed its share of the total by this much during the
 * partition (the LP and the placement inside nodes absorb the rest). */
#define NODE_SLACK 0.002

typedef struct {
  const eplb__layer_ctx_t *ctx;
  const double *pairs; /* [E][E] */
  uint32_t E, G, R, N;
  const uint32_t *gnode; /* [G] */
  uint32_t *node_gpu0;   /* [N+1] first GPU of each node */
  uint32_t *node_slots;  /* [N] */
  double *demand;        /* [N][E] */
  double *cap;           /* [N] target node load */
  double *nl;            /* [N] node load estimate */
  uint32_t *free_slots;  /* [N] */
  uint32_t *cnt;         /* [E] replica counts */
  uint32_t *on;          /* [N][E] replicas of e on node n */
  int32_t *home;         /* [E] node of a single-replica expert, -1 otherwise */
  double *conn;          /* [E][N] co-activation of e with the experts on n */
  double *remote;        /* [E] demand of the nodes without a replica (after assign_nodes) */
  struct node_key *rank; /* [2N] place_multi's scratch */
  double beta;           /* tokens per co-activation count, for the dedup term */
} loc_t;

/* Load of a single-replica expert e on node n's side of the score: local
 * tokens (saved copies) plus co-activation with n's experts. */
static double affinity(const loc_t *s, uint32_t e, uint32_t n) {
  return s->demand[(size_t)n * s->E + e] + s->beta * s->conn[(size_t)e * s->N + n];
}

static void put_single(loc_t *s, uint32_t e, uint32_t n, int sign) {
  const double *pe = s->pairs + (size_t)e * s->E;
  for (uint32_t f = 0; f < s->E; f++)
    if (pe[f] > 0)
      s->conn[(size_t)f * s->N + n] += sign * pe[f];
  s->nl[n] += sign * s->ctx->w[e];
  if (sign > 0) {
    s->home[e] = (int32_t)n;
    s->on[(size_t)n * s->E + e] = 1;
    s->free_slots[n]--;
  } else {
    s->home[e] = -1;
    s->on[(size_t)n * s->E + e] = 0;
    s->free_slots[n]++;
  }
}

/* Orders experts by replica count then load, heaviest first (insertion
 * sort: E is small, and qsort has no context argument in C17). */
static void order_experts(const loc_t *s, uint32_t *ord) {
  const double *w = s->ctx->w;
  for (uint32_t i = 0; i < s->E; i++) {
    uint32_t e = i, j = i;
    for (; j > 0; j--) {
      uint32_t p = ord[j - 1];
      bool before = s->cnt[e] != s->cnt[p] ? s->cnt[e] > s->cnt[p] : w[e] > w[p];
      if (!before)
        break;
      ord[j] = p;
    }
    ord[j] = e;
  }
}

/* A node and its rank in place_multi's order. */
typedef struct node_key {
  double key;
  uint32_t n;
} node_key_t;

/* Larger keys first, then lower nodes. */
static int by_key_desc(const void *a, const void *b) {
  const node_key_t *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? 1 : -1;
  return (x->n > y->n) - (x->n < y->n);
}

/* Whether node n takes e's replica j: a free slot and, for the first N
 * replicas, no replica of e yet. */
static bool takes(const loc_t *s, uint32_t n, uint32_t e, uint32_t j) {
  return s->free_slots[n] && (j >= s->N || !s->on[(size_t)n * s->E + e]);
}

/* Replicas of experts with several copies: distinct nodes first (a local
 * copy on as many nodes as the count allows), each to the node whose
 * sources want e most among those with room for a replica's load (when
 * sources differ by node, as tenants' requests do, that is where a copy
 * saves the most), else to the node with the most room; then load
 * estimates (local demand, remote demand spread over the hosting nodes by
 * replica count). */
static void place_multi(loc_t *s, uint32_t e) {
  uint32_t N = s->N, E = s->E, nf = 0, nr = 0;
  double part = s->ctx->w[e] / s->cnt[e];
  /* A scan of the nodes per replica costs N R in all. The loads do not
   * change while e is placed, so the choice is an order: the nodes where a
   * replica fits by demand, then the others by room (first node on ties,
   * as a scan's strict compare), each taken while it has a slot and, for
   * the first N replicas, lacks e. */
  node_key_t *fit = s->rank, *rest = s->rank + N;
  for (uint32_t n = 0; n < N; n++) {
    if (!s->free_slots[n])
      continue;
    if ((s->nl[n] + part) / s->cap[n] <= 1 + NODE_SLACK)
      fit[nf++] = (node_key_t){s->demand[(size_t)n * E + e], n};
    else
      rest[nr++] = (node_key_t){(s->cap[n] - s->nl[n]) / s->cap[n], n};
  }
  qsort(fit, nf, sizeof *fit, by_key_desc);
  qsort(rest, nr, sizeof *rest, by_key_desc);
  for (uint32_t j = 0, fi = 0, ri = 0, ai = 0; j < s->cnt[e]; j++) {
    if (j == N) /* from here a node may take a second replica */
      fi = ri = 0;
    while (fi < nf && !takes(s, fit[fi].n, e, j))
      fi++;
    while (fi == nf && ri < nr && !takes(s, rest[ri].n, e, j))
      ri++;
    while (fi == nf && ri == nr && ai < N && !s->free_slots[ai])
      ai++;
    /* Every free node already has it: any node with a slot. */
    uint32_t best = fi < nf ? fit[fi].n : ri < nr ? rest[ri].n : ai;
    s->on[(size_t)best * E + e]++;
    s->free_slots[best]--;
  }
  double remote = 0;
  for (uint32_t n = 0; n < N; n++)
    if (!s->on[(size_t)n * E + e])
      remote += s->demand[(size_t)n * E + e];
  for (uint32_t n = 0; n < N; n++)
    if (s->on[(size_t)n * E + e])
      s->nl[n] += s->demand[(size_t)n * E + e] + remote * s->on[(size_t)n * E + e] / s->cnt[e];
}

static void place_single(loc_t *s, uint32_t e) {
  double w = s->ctx->w[e];
  int32_t best = -1, spare = -1;
  double bv = -HUGE_VAL, sv = HUGE_VAL;
  for (uint32_t n = 0; n < s->N; n++) {
    if (!s->free_slots[n])
      continue;
    double after = (s->nl[n] + w) / s->cap[n];
    if (after < sv) {
      sv = after;
      spare = (int32_t)n;
    }
    if (after <= 1 + NODE_SLACK && affinity(s, e, n) > bv) {
      bv = affinity(s, e, n);
      best = (int32_t)n;
    }
  }
  put_single(s, e, (uint32_t)(best >= 0 ? best : spare), 1);
}

/* Pairwise swaps of single-replica experts between nodes (Kernighan-Lin
 * style, greedy): a swap is kept when it raises the total affinity and
 * leaves both nodes within their load targets (or closer to them). */
static void refine(loc_t *s) {
  const double *w = s->ctx->w;
  uint32_t E = s->E;
  for (int pass = 0; pass < REFINE_PASSES; pass++) {
    uint32_t swaps = 0;
    for (uint32_t a = 0; a < E; a++) {
      if (s->home[a] < 0)
        continue;
      for (uint32_t b = a + 1; b < E; b++) {
        if (s->home[b] < 0 || s->home[b] == s->home[a])
          continue;
        uint32_t na = (uint32_t)s->home[a], nb = (uint32_t)s->home[b];
        double pab = s->pairs[(size_t)a * E + b] * s->beta;
        double gain = affinity(s, a, nb) - pab + affinity(s, b, na) - pab - affinity(s, a, na) -
                      affinity(s, b, nb);
        if (gain <= 1e-9 * (w[a] + w[b] + 1))
          continue;
        double la = s->nl[na] - w[a] + w[b], lb = s->nl[nb] - w[b] + w[a];
        double worst_after = fmax(la / s->cap[na], lb / s->cap[nb]);
        double worst_now = fmax(s->nl[na] / s->cap[na], s->nl[nb] / s->cap[nb]);
        if (worst_after > 1 + NODE_SLACK && worst_after > worst_now)
          continue;
        put_single(s, a, na, -1);
        put_single(s, b, nb, -1);
        put_single(s, a, nb, 1);
        put_single(s, b, na, 1);
        swaps++;
      }
    }
    if (!swaps)
      break;
  }
}

/* Places node n's experts on its GPUs with balanced's machinery; writes
 * the node's slot range of phy2log. */
static eplb_status_t place_node(loc_t *s, uint32_t n, int32_t *phy2log, uint32_t *ids, double *lw,
                                int32_t *sub_p2l, double *sub_share, uint32_t *sub_first) {
  const eplb__layer_ctx_t *ctx = s->ctx;
  uint32_t E = s->E, ne = 0, g0 = s->node_gpu0[n], ng = s->node_gpu0[n + 1] - g0;
  for (uint32_t e = 0; e < E; e++)
    if (s->on[(size_t)n * E + e]) {
      ids[ne] = e;
      lw[ne++] = s->demand[(size_t)n * E + e] +
                 s->remote[e] * s->on[(size_t)n * E + e] / (double)s->cnt[e];
    }
  uint32_t base = ctx->gpu_first[g0], S = ctx->gpu_first[g0 + ng] - base;
  for (uint32_t h = 0; h <= ng; h++)
    sub_first[h] = ctx->gpu_first[g0 + h] - base;
  eplb__layer_ctx_t sub = {.w = lw,
                           .num_experts = ne,
                           .num_gpus = ng,
                           .num_nodes = 1,
                           .num_slots = S,
                           .num_groups = 1,
                           .slots_per_gpu = ctx->slots_per_gpu + g0,
                           .gpu_first = sub_first,
                           .static_shares = ctx->static_shares,
                           .improve_iterations = ctx->improve_iterations,
                           .split = ctx->split};
  sub.lower_bound = eplb__lower_bound(&sub);
  int fb = 0;
  eplb_status_t st = eplb__balanced_layer(&sub, sub_p2l, sub_share, &fb);
  if (st)
    return st;
  for (uint32_t i = 0; i < S; i++)
    phy2log[base + i] = (int32_t)ids[sub_p2l[i]];
  return EPLB_OK;
}

/* Node shares and global shares of a placement at max GPU load <= cap, with
 * the fewest tokens off their node; *cross gets that volume. The split's
 * locality stage (eplb_split_solve_local, a min-cost flow) solves this
 * transportation problem, as the runtime's per-batch split does: its cap is
 * T* (1 + tolerance), so the tolerance is cap over the placement's own T*
 * (stage 1 first). EPLB_EINFEASIBLE when T* > cap. */
static eplb_status_t node_shares(loc_t *s, const int32_t *p2l, double cap, double *share,
                                 double *node_share, double *cross) {
  const eplb__layer_ctx_t *ctx = s->ctx;
  uint32_t E = s->E, R = s->R, N = s->N;
  double *w = eplb__malloc_array((size_t)E + s->G, sizeof *w), *gl = w + E;
  uint32_t *rstart = eplb__malloc_array((size_t)E + 1, sizeof *rstart);
  uint32_t *rlist = eplb__malloc_array((size_t)R * 2, sizeof *rlist), *slot_node = rlist + R;
  eplb_status_t st = EPLB_OK;
  if (!w || !rstart || !rlist) {
    st = eplb__error(EPLB_ENOMEM, "planner", "locality: out of memory");
    goto done;
  }
  for (uint32_t e = 0; e < E; e++) {
    w[e] = 0;
    for (uint32_t n = 0; n < N; n++)
      w[e] += s->demand[(size_t)n * E + e];
  }
  eplb_split_problem_t pb = {E, s->G, R, (const uint32_t *)(const void *)p2l, ctx->slots_per_gpu};
  eplb_split_result_t res = {.share = share, .gpu_load = gl};
  if ((st = eplb_split_solve(ctx->split, &pb, w, &res)))
    goto done;
  if (res.t_star > cap * (1 + 1e-12)) {
    st = EPLB_EINFEASIBLE;
    goto done;
  }
  /* The stage's tolerance is at most 1: a cap above 2 T* (not met in
   * practice: cap is within the policy's tolerance of balanced's T*) is
   * served at 2 T*, still feasible. */
  double tol = res.t_star > 0 ? cap / res.t_star - 1 : 0;
  eplb_split_local_t loc = {N, s->gnode, s->demand, tol < 0 ? 0 : tol > 1 ? 1 : tol};
  if ((st = eplb_split_solve_local(ctx->split, &pb, &loc, &res, node_share, cross)))
    goto done;
  /* A node without tokens of an expert in the window gets the global share
   * from the solver; its (rare) later tokens are better kept on a local
   * replica where it has one. */
  for (uint32_t g = 0; g < s->G; g++)
    for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
      slot_node[r] = s->gnode[g];
  memset(rstart, 0, (E + 1) * sizeof *rstart);
  for (uint32_t r = 0; r < R; r++)
    rstart[p2l[r] + 1]++;
  for (uint32_t e = 0; e < E; e++)
    rstart[e + 1] += rstart[e];
  for (uint32_t r = 0; r < R; r++)
    rlist[rstart[p2l[r]]++] = r;
  for (uint32_t e = E; e > 0; e--)
    rstart[e] = rstart[e - 1];
  rstart[0] = 0;
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t e = 0; e < E; e++) {
      uint32_t a = rstart[e], z = rstart[e + 1], local = 0;
      if (s->demand[(size_t)n * E + e] > 0 || z - a < 2)
        continue;
      for (uint32_t i = a; i < z; i++)
        local += slot_node[rlist[i]] == n;
      for (uint32_t i = a; local && i < z; i++)
        node_share[(size_t)n * R + rlist[i]] = slot_node[rlist[i]] == n ? 1.0 / local : 0;
    }
done:
  eplb__free(w);
  eplb__free(rstart);
  eplb__free(rlist);
  return st;
}

eplb_status_t eplb__locality_check(const eplb_loads_t *loads, const eplb_plan_options_t *o) {
  if (!o->cluster || !o->coact)
    return eplb__error(EPLB_EINVAL, "planner",
                       "locality needs the cluster and the trace's co-activation (top-k rows)");
  if (eplb_cluster_num_gpus(o->cluster) != o->num_gpus)
    return eplb__error(EPLB_EINVAL, "planner", "locality: the cluster has %u GPUs, not %u",
                       eplb_cluster_num_gpus(o->cluster), o->num_gpus);
  const eplb_coact_t *c = o->coact;
  if (c->num_layers != loads->num_layers || c->num_experts != loads->num_experts ||
      c->num_nodes != eplb_cluster_num_nodes(o->cluster))
    return eplb__error(EPLB_EINVAL, "planner",
                       "locality: co-activation of %u layers x %u experts on %u nodes does not "
                       "match %u x %u on %u nodes",
                       c->num_layers, c->num_experts, c->num_nodes, loads->num_layers,
                       loads->num_experts, eplb_cluster_num_nodes(o->cluster));
  if (!(o->locality_tolerance >= 0) || !isfinite(o->locality_tolerance))
    return eplb__error(EPLB_EINVAL, "planner", "locality: tolerance %g is not >= 0",
                       o->locality_tolerance);
  return EPLB_OK;
}

/* Steps 1-2: replica counts by balanced's min-max rule, then each
 * replica's node (ord: the experts in placement order, work: [E] scratch). */
static void assign_nodes(loc_t *s, double total, uint32_t *work, uint32_t *ord) {
  uint32_t E = s->E, N = s->N;
  size_t NE = (size_t)N * E;
  eplb__replicate(s->ctx->w, NULL, E, s->R, s->cnt, work);
  memset(s->on, 0, NE * sizeof *s->on);
  memset(s->conn, 0, NE * sizeof *s->conn);
  for (uint32_t n = 0; n < N; n++) {
    double gn = s->node_gpu0[n + 1] - s->node_gpu0[n];
    s->cap[n] = total > 0 ? total * gn / s->G : 1;
    s->free_slots[n] = s->node_slots[n];
    s->nl[n] = 0;
  }
  for (uint32_t e = 0; e < E; e++)
    s->home[e] = -1;
  order_experts(s, ord);
  for (uint32_t i = 0; i < E; i++)
    if (s->cnt[ord[i]] > 1)
      place_multi(s, ord[i]);
  for (uint32_t i = 0; i < E; i++)
    if (s->cnt[ord[i]] == 1)
      place_single(s, ord[i]);
  refine(s);
  /* Summed once here, not per node that hosts e (N x R in all). */
  memset(s->remote, 0, E * sizeof *s->remote);
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t e = 0; e < E; e++)
      s->remote[e] += s->on[(size_t)n * E + e] ? 0 : s->demand[(size_t)n * E + e];
}

eplb_status_t eplb__locality_layer(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                                   uint32_t layer, int32_t *phy2log, double *share,
                                   double *node_share, int *fallback) {
  const eplb_coact_t *co = opts->coact;
  uint32_t E = ctx->num_experts, G = ctx->num_gpus, R = ctx->num_slots;
  uint32_t N = co->num_nodes;
  const double *nt = co->node_tokens + (size_t)layer * N * E;
  loc_t s = {
      .ctx = ctx, .pairs = co->pairs + (size_t)layer * E * E, .E = E, .G = G, .R = R, .N = N};
  eplb_status_t st = EPLB_OK;
  size_t NE = (size_t)N * E, NR = (size_t)N * R;
  uint32_t *gnode = eplb__malloc_array(G, sizeof *gnode);
  s.node_gpu0 = eplb__calloc((size_t)N + 1, sizeof *s.node_gpu0);
  s.node_slots = eplb__calloc(N, sizeof *s.node_slots);
  s.demand = eplb__calloc(NE, sizeof *s.demand);
  s.cap = eplb__calloc(N, sizeof *s.cap);
  s.nl = eplb__calloc(N, sizeof *s.nl);
  s.free_slots = eplb__calloc(N, sizeof *s.free_slots);
  s.cnt = eplb__calloc(E, sizeof *s.cnt);
  s.on = eplb__calloc(NE, sizeof *s.on);
  s.home = eplb__malloc_array(E, sizeof *s.home);
  s.conn = eplb__calloc(NE, sizeof *s.conn);
  s.remote = eplb__malloc_array(E, sizeof *s.remote);
  s.rank = eplb__malloc_array(2 * (size_t)N, sizeof *s.rank);
  uint32_t *work = eplb__malloc_array(E, sizeof *work), *ord = eplb__malloc_array(E, sizeof *ord);
  uint32_t *sub_first = eplb__malloc_array((size_t)G + 1, sizeof *sub_first);
  double *lw = eplb__malloc_array(E, sizeof *lw),
         *sub_share = eplb__malloc_array(R, sizeof(double));
  int32_t *sub_p2l = eplb__malloc_array(R, sizeof *sub_p2l),
          *lp2l = eplb__malloc_array(R, sizeof(int32_t));
  double *lsh = eplb__malloc_array(R, sizeof *lsh);
  double *lns = eplb__malloc_array(NR, sizeof *lns);
  if (!gnode || !s.node_gpu0 || !s.node_slots || !s.demand || !s.cap || !s.nl || !s.free_slots ||
      !s.cnt || !s.on || !s.home || !s.conn || !s.remote || !s.rank || !work || !ord ||
      !sub_first || !lw || !sub_share || !sub_p2l || !lp2l || !lsh || !lns) {
    st = eplb__error(EPLB_ENOMEM, "planner", "locality: out of memory");
    goto done;
  }
  s.gnode = gnode;
  *fallback = 0;
  /* Nodes: GPUs are numbered node by node. */
  for (uint32_t g = 0; g < G; g++) {
    gnode[g] = eplb_cluster_node_of(opts->cluster, g);
    s.node_gpu0[gnode[g] + 1]++;
    s.node_slots[gnode[g]] += ctx->slots_per_gpu[g];
  }
  for (uint32_t n = 0; n < N; n++)
    s.node_gpu0[n + 1] += s.node_gpu0[n];
  /* Demand per (source node, expert): the rule the per-batch split's
   * callers use too (eplb_coact_node_loads). */
  if ((st = eplb_coact_node_loads(co, opts->cluster, layer, ctx->w, s.demand)))
    goto done;
  double total = 0, picks = 0;
  for (uint32_t e = 0; e < E; e++) {
    double sum = 0;
    for (uint32_t n = 0; n < N; n++)
      sum += nt[(size_t)n * E + e];
    total += ctx->w[e];
    picks += sum;
  }
  /* A co-activation pair is worth a quarter token of local demand: at a
   * half, on traces whose sources favour their own experts (synthetic
   * tenants, rank affinity 0.5) the pairs outweighed local demand, giving
   * 30% fewer cross copies than balanced instead of 36% for 3 points more
   * de-duplication; on the ESFT trace both weights do the same. */
  s.beta = picks > 0 ? 0.25 * total / picks : 0;

  /* The guard and the target: balanced's plan of the layer. */
  if ((st = eplb__balanced_layer(ctx, phy2log, share, fallback)))
    goto done;
  *fallback = 0;
  double mb = eplb__layer_max_load(ctx, phy2log, share, NULL);
  double cap = mb * (1 + opts->locality_tolerance);

  /* The guard first: balanced's placement with the LP's node shares. */
  double best = HUGE_VAL;
  st = node_shares(&s, phy2log, cap, sub_share, node_share, &best);
  if (st && st != EPLB_EINFEASIBLE)
    goto done;
  if (st) { /* rounding at tolerance 0: balanced's shares from every node */
    best = HUGE_VAL;
    for (uint32_t n = 0; n < N; n++)
      memcpy(node_share + (size_t)n * R, share, R * sizeof *share);
  } else {
    memcpy(share, sub_share, R * sizeof *share);
  }
  *fallback = 1;
  {
    /* 1-2: replica counts by balanced's min-max rule (giving the spare slots
     * to the hottest experts by "local copies first" cut more copies but
     * left single-replica experts that made per-step balance ~2% worse on
     * the DeepSeek-V3-shaped trace), then the node assignment. */
    assign_nodes(&s, total, work, ord);
    /* 3: inside each node. */
    for (uint32_t n = 0; n < N; n++)
      if ((st = place_node(&s, n, lp2l, ord, lw, sub_p2l, sub_share, sub_first)))
        goto done;
    /* 4: node shares; the fewest cross copies win. */
    double cross = HUGE_VAL;
    st = node_shares(&s, lp2l, cap, lsh, lns, &cross);
    if (st && st != EPLB_EINFEASIBLE)
      goto done;
    st = EPLB_OK;
    if (cross < best) {
      best = cross;
      memcpy(phy2log, lp2l, R * sizeof *phy2log);
      memcpy(share, lsh, R * sizeof *share);
      memcpy(node_share, lns, NR * sizeof *node_share);
      *fallback = 0;
    }
  }
done:;
  void *bufs[] = {gnode,        s.node_gpu0, s.node_slots, s.demand,  s.cap,   s.nl,
                  s.free_slots, s.cnt,       s.on,         s.home,    s.conn,  work,
                  ord,          sub_first,   lw,           sub_share, sub_p2l, lp2l,
                  lsh,          lns,         s.remote,     s.rank};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    eplb__free(bufs[i]);
  return st;
}
