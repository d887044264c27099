/* lp/split_local.c — the per-batch split with locality: the exact split's T*
 * first, then, among splits whose busiest GPU stays within T* (1 + tolerance),
 * the one with the fewest token copies leaving their source node.
 *
 * The second stage is a min-cost flow on the exact solver's contracted graph
 * with one source per (node, replicated expert): source -> (n, e) (cap: the
 * node's tokens of e) -> each GPU holding e (cost 1 when the GPU is on another
 * node, else 0) -> sink (cap: T* (1 + tolerance) less the GPU's fixed load).
 * That pair graph has N P arcs (P: the (expert, GPU) pairs), which grows as
 * G^2 at a fixed number of slots per GPU; from HUB_NODES nodes on, the hub
 * graph (build_hub) gives the same min cost with O(P + G) arcs and
 * sources only where an expert has a replica on the node.
 * Experts on one GPU have no choice and stay out of the graph, as in
 * split_flow.c. The flow is the primal-dual method: shortest distances on the
 * residual graph, then a maximum flow (the shared Dinic kernel) on the arcs
 * that lie on shortest paths, until the sink is unreachable. Costs are 0/1,
 * so there are only a handful of distinct path lengths, hence a handful of
 * rounds, and the distances are small integers. The first round's follow
 * from the pair graph's structure (distances_first; on the hub graph,
 * Dial's pass from potentials 0, where every cost is >= 0); after it, with the last
 * round's distances as potentials (Johnson) every residual arc has a reduced
 * cost >= 0, and Dial's buckets find the distances in one pass over the arcs
 * (Bellman-Ford stays as the fallback should that ever fail). */
#include "lp/lp.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define LOCAL_SLACK 1e-13
#define NONE UINT32_MAX
#define FAR INT32_MAX
/* The hub graph (build_hub) from HUB_NODES nodes on, where the pair graph
 * has HUB_ARCS or more node-to-pair arcs (N P): there the planner's layers took two thirds
 * of the pair graph's instructions at 8 nodes, a third at 16. Below, the
 * pair graph: the runtime's per-batch split on 4 nodes took 13% more with
 * the hub, and a locality plan's node shares from the hub's flow served
 * worse held out (an optimum all the same, but held out on the ESFT trace,
 * 10 slots a GPU, planned on steps 0-64, mean balancedness 0.5001 against
 * 0.4302 on 16 x 2 GPUs, 0.4255 against 0.3036 on 32 x 2; its node shares
 * handed out in proportion to the hub's flow instead of in runs: the same).
 * So the hub trades that for speed only where the pair graph is large. */
#define HUB_NODES 8
#define HUB_ARCS (1u << 16)

struct eplb__split_local {
  /* The graph's key: placement hash, node count and GPU nodes. */
  uint64_t hash;
  uint32_t N, G, Q, nodes, edges;
  uint32_t *gpu_node; /* [G] copy */
  eplb__flow_t flow;
  double *rres;     /* [2 * edges] true residuals */
  int8_t *cost;     /* [2 * edges] */
  int32_t *dist;    /* [nodes] */
  int32_t *pot;     /* [nodes] the last round's distances (FAR: unreachable) */
  int32_t *bhead;   /* [2 * nodes] Dial's buckets: first entry or -1 */
  uint32_t *ent;    /* [2 * edges + 1] bucket entries: node, then next entry */
  int32_t *enext;   /* [2 * edges + 1] */
  uint32_t *queue;  /* [nodes] ring */
  uint8_t *inq;     /* [nodes] */
  uint32_t *pfirst; /* [pairs] the pair's first replica in the view's rep_list */
  uint32_t *sone;   /* [E] the experts on one GPU, ascending (S1 of them) */
  uint32_t *snode;  /* [E] the node of sone[j]'s GPU */
  uint32_t S1;
  double *loads;  /* [E] summed over nodes */
  double *gshare; /* [R] the global split's shares */
  /* The hub graph (build_hub), else the pair graph (build). */
  bool hub;
  bool hub_arcs_set; /* eplb__split_local_hub_arcs: hub_arcs replaces HUB_ARCS */
  uint64_t hub_arcs;
  uint32_t L;     /* hub graph: (node, expert) sources with a local replica */
  uint32_t S;     /* source arcs, the first of the edges */
  uint32_t *uof;  /* [N][M] hub graph: the source of (n, k), or NONE */
  double *hrem;   /* [M] hub graph: tokens of k from nodes without a replica */
  double *hsum;   /* [M] hub graph: flow left in the pair write_hub is at */
  uint32_t *hcur; /* [M] hub graph: that pair */
  size_t cap_e, cap_r, cap_g, cap_n, cap_m, cap_p, cap_s, cap_u, cap_h;
};

void eplb__split_local_free(struct eplb__split_local *w) {
  if (!w)
    return;
  eplb__flow_free(&w->flow);
  void *arrays[] = {w->gpu_node, w->rres,  w->cost, w->dist,  w->pot,    w->bhead,  w->ent,
                    w->enext,    w->queue, w->inq,  w->loads, w->gshare, w->pfirst, w->sone,
                    w->snode,    w->uof,   w->hrem, w->hsum,  w->hcur};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
    eplb__free(arrays[i]);
  eplb__free(w);
}

/* The structure of the locality input; the loads are checked as they are
 * summed (eplb_split_solve_local). */
static eplb_status_t check_local(const eplb_split_problem_t *p, const eplb_split_local_t *loc) {
  if (!loc || !loc->gpu_node || !loc->node_loads)
    return eplb__error(EPLB_EINVAL, "lp", "split_local: NULL %s",
                       !loc             ? "locality"
                       : !loc->gpu_node ? "gpu_node"
                                        : "node_loads");
  if (!loc->num_nodes || loc->num_nodes > p->num_gpus)
    return eplb__error(EPLB_EINVAL, "lp", "split_local: num_nodes %u not in [1, %u GPUs]",
                       loc->num_nodes, p->num_gpus);
  if (!(loc->tolerance >= 0 && loc->tolerance <= 1))
    return eplb__error(EPLB_EINVAL, "lp", "split_local: tolerance %g not in [0, 1]",
                       loc->tolerance);
  for (uint32_t g = 0; g < p->num_gpus; g++)
    if (loc->gpu_node[g] >= loc->num_nodes)
      return eplb__error(EPLB_ERANGE, "lp", "split_local: GPU %u on node %u >= %u nodes", g,
                         loc->gpu_node[g], loc->num_nodes);
  return EPLB_OK;
}

static eplb_status_t reserve(struct eplb__split_local *w, uint32_t E, uint32_t R, uint32_t G,
                             uint32_t nodes, uint32_t edges, uint32_t pairs) {
  const eplb__array_ref_t by_e[] = {{(void **)&w->loads, 8}};
  const eplb__array_ref_t by_r[] = {{(void **)&w->gshare, 8}};
  const eplb__array_ref_t by_g[] = {{(void **)&w->gpu_node, 4}};
  const eplb__array_ref_t by_n[] = {{(void **)&w->dist, 4},
                                    {(void **)&w->pot, 4},
                                    {(void **)&w->queue, 4},
                                    {(void **)&w->inq, 1}};
  const eplb__array_ref_t by_m[] = {{(void **)&w->rres, 8},
                                    {(void **)&w->cost, 1},
                                    {(void **)&w->ent, 4},
                                    {(void **)&w->enext, 4},
                                    {(void **)&w->bhead, 4}};
  const eplb__array_ref_t by_p[] = {{(void **)&w->pfirst, 4}};
  const eplb__array_ref_t by_s[] = {{(void **)&w->sone, 4}, {(void **)&w->snode, 4}};
  /* Sized 2 (edges + nodes): Dial's entries need 2 edges + 1, its buckets
   * 2 nodes. */
  if (eplb__grow_all(&w->cap_e, E, by_e, 1) || eplb__grow_all(&w->cap_r, R, by_r, 1) ||
      eplb__grow_all(&w->cap_g, G, by_g, 1) || eplb__grow_all(&w->cap_n, nodes, by_n, 4) ||
      eplb__grow_all(&w->cap_m, 2 * (size_t)edges + 2 * (size_t)nodes, by_m, 5) ||
      eplb__grow_all(&w->cap_p, pairs + 1, by_p, 1) || eplb__grow_all(&w->cap_s, E, by_s, 2) ||
      eplb__flow_reserve(&w->flow, nodes, edges))
    return EPLB_ENOMEM;
  return EPLB_OK;
}

/* What both graphs share: the adjacency, pfirst, the one-GPU experts and
 * the key. */
static void finish_build(struct eplb__split_local *w, const eplb__split_view_t *v,
                         const eplb_split_local_t *loc, uint32_t nodes, uint32_t edges) {
  eplb__flow_build(&w->flow, nodes, edges);
  /* A pair's replicas are consecutive in its expert's rep_list (slot order
   * is GPU-major), so the share extraction reads them by range. */
  for (uint32_t k = 0; k < v->M; k++) {
    uint32_t i = v->rep_start[v->multi[k]];
    for (uint32_t q = v->pair_start[k]; q < v->pair_start[k + 1]; q++)
      w->pfirst[q] = i, i += v->pair_cnt[q];
  }
  w->S1 = 0;
  for (uint32_t e = 0; e < v->E; e++)
    if (v->sgpu[e] != NONE)
      w->sone[w->S1] = e, w->snode[w->S1++] = loc->gpu_node[v->sgpu[e]];
  memcpy(w->gpu_node, loc->gpu_node, (size_t)v->G * sizeof *w->gpu_node);
  w->hash = v->hash, w->N = loc->num_nodes, w->G = v->G, w->nodes = nodes, w->edges = edges;
}

/* Nodes: source 0, (n, k) -> 1 + n * M + k, GPU g -> 1 + Q + g, sink last.
 * Edges: (n, k) source arcs first [0, Q), then its pairs, then GPU -> sink. */
static eplb_status_t build(struct eplb__split_local *w, const eplb__split_view_t *v,
                           const eplb_split_local_t *loc) {
  uint32_t N = loc->num_nodes, M = v->M, G = v->G, Q = N * M;
  uint32_t nodes = Q + G + 2, edges = Q + N * v->P + G;
  if (reserve(w, v->E, v->R, G, nodes, edges, v->P))
    return eplb__error(EPLB_ENOMEM, "lp", "split_local: out of memory for %u nodes", nodes);
  uint32_t k2 = Q;
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t k = 0; k < M; k++) {
      uint32_t src = 1 + n * M + k;
      eplb__flow_edge(&w->flow, n * M + k, 0, src);
      w->cost[2 * (n * M + k)] = w->cost[2 * (n * M + k) + 1] = 0;
      for (uint32_t q = v->pair_start[k]; q < v->pair_start[k + 1]; q++, k2++) {
        uint32_t g = v->pair_gpu[q];
        int8_t c = loc->gpu_node[g] != n;
        eplb__flow_edge(&w->flow, k2, src, 1 + Q + g);
        w->cost[2 * k2] = c;
        w->cost[2 * k2 + 1] = (int8_t)-c;
      }
    }
  for (uint32_t g = 0; g < G; g++, k2++) {
    eplb__flow_edge(&w->flow, k2, 1 + Q + g, nodes - 1);
    w->cost[2 * k2] = w->cost[2 * k2 + 1] = 0;
  }
  w->hub = false, w->S = Q;
  finish_build(w, v, loc, nodes, edges);
  w->Q = Q;
  return EPLB_OK;
}

/* The hub graph, for many nodes: the pair graph has an arc per (node,
 * expert, GPU) triple, N P arcs, while few of them are local. Here a
 * source exists only per (n, k) with a replica of k on node n: source ->
 * (n, k) (cost 0, cap: n's tokens of k) -> k's GPUs on n (cost 0), and
 * (n, k) -> hub k (cost 1) -> every GPU of k (cost 0); the tokens of the
 * nodes without a replica of k enter hub k directly (source -> hub, cost
 * 1). Going through the hub costs 1 even to a GPU on n, so the min costs
 * agree with the pair graph's (a local GPU is reached for 0 directly), and
 * an optimum never sends (n, k) to the hub while the hub feeds a GPU on n
 * (that cycle costs -1). Nodes: source 0, hub k -> 1 + k, (n, k) -> 1 + M +
 * j, GPU g -> 1 + M + L + g, sink last. Edges: source -> hub [0, M),
 * source -> (n, k) [M, M + L), (n, k) -> hub [M + L, M + 2 L), local pair
 * arcs by pair [M + 2 L, + P), hub arcs by pair [M + 2 L + P, + P), GPU ->
 * sink. */
static eplb_status_t build_hub(struct eplb__split_local *w, const eplb__split_view_t *v,
                               const eplb_split_local_t *loc) {
  uint32_t N = loc->num_nodes, M = v->M, G = v->G, P = v->P, L = 0;
  const eplb__array_ref_t by_u[] = {{(void **)&w->uof, 4}};
  const eplb__array_ref_t by_h[] = {
      {(void **)&w->hrem, 8}, {(void **)&w->hsum, 8}, {(void **)&w->hcur, 4}};
  if (eplb__grow_all(&w->cap_u, (size_t)N * M + 1, by_u, 1) ||
      eplb__grow_all(&w->cap_h, (size_t)M + 1, by_h, 3))
    return eplb__error(EPLB_ENOMEM, "lp", "split_local: out of memory for %u nodes", N);
  uint32_t *uof = w->uof;
  memset(uof, 0xff, (size_t)N * M * sizeof *uof); /* every entry NONE */
  for (uint32_t k = 0; k < M; k++)
    for (uint32_t q = v->pair_start[k]; q < v->pair_start[k + 1]; q++) {
      uint32_t *u = &uof[(size_t)loc->gpu_node[v->pair_gpu[q]] * M + k];
      *u = *u == NONE ? L++ : *u;
    }
  uint32_t nodes = M + L + G + 2, edges = M + 2 * L + 2 * P + G;
  uint32_t AL = M + 2 * L, AH = AL + P, AG = AH + P;
  if (reserve(w, v->E, v->R, G, nodes, edges, P))
    return eplb__error(EPLB_ENOMEM, "lp", "split_local: out of memory for %u nodes", nodes);
  int8_t *cost = w->cost;
  /* The sources numbered in this order above, so a source's arcs are
   * emitted the first time one of its pairs is met. */
  for (uint32_t k = 0, next = 0; k < M; k++) {
    eplb__flow_edge(&w->flow, k, 0, 1 + k);
    cost[2 * k] = 1, cost[2 * k + 1] = -1;
    for (uint32_t q = v->pair_start[k]; q < v->pair_start[k + 1]; q++) {
      uint32_t g = v->pair_gpu[q], j = uof[(size_t)loc->gpu_node[g] * M + k];
      if (j == next) {
        eplb__flow_edge(&w->flow, M + j, 0, 1 + M + j);
        cost[2 * (M + j)] = cost[2 * (M + j) + 1] = 0;
        eplb__flow_edge(&w->flow, M + L + j, 1 + M + j, 1 + k);
        cost[2 * (M + L + j)] = 1, cost[2 * (M + L + j) + 1] = -1;
        next++;
      }
      eplb__flow_edge(&w->flow, AL + q, 1 + M + j, 1 + M + L + g);
      cost[2 * (AL + q)] = cost[2 * (AL + q) + 1] = 0;
      eplb__flow_edge(&w->flow, AH + q, 1 + k, 1 + M + L + g);
      cost[2 * (AH + q)] = cost[2 * (AH + q) + 1] = 0;
    }
  }
  for (uint32_t g = 0; g < G; g++) {
    eplb__flow_edge(&w->flow, AG + g, 1 + M + L + g, nodes - 1);
    cost[2 * (AG + g)] = cost[2 * (AG + g) + 1] = 0;
  }
  w->hub = true, w->L = L, w->S = M + L;
  finish_build(w, v, loc, nodes, edges);
  w->Q = 0;
  return EPLB_OK;
}

/* Shortest distances from the source over arcs with residual > eps
 * (Bellman-Ford with a FIFO queue). The residual graph of a min-cost flow
 * built by shortest augmentations has no negative cycle; the pass bound only
 * guards against a bug. */
static bool distances_bf(struct eplb__split_local *w, double eps) {
  const eplb__flow_t *f = &w->flow;
  uint32_t n = w->nodes, head = 0, len = 0;
  uint64_t budget = (uint64_t)n * f->m + n;
  for (uint32_t v = 0; v < n; v++)
    w->dist[v] = FAR, w->inq[v] = 0;
  w->dist[0] = 0;
  w->queue[0] = 0, w->inq[0] = 1, len = 1;
  while (len) {
    uint32_t u = w->queue[head];
    head = head + 1 == n ? 0 : head + 1;
    len--;
    w->inq[u] = 0;
    for (uint32_t i = f->adj_start[u]; i < f->adj_start[u + 1]; i++) {
      uint32_t a = f->adj[i], t = f->to[a];
      int32_t d = w->dist[u] + w->cost[a];
      if (!(w->rres[a] > eps) || d >= w->dist[t])
        continue;
      if (!budget--)
        return false;
      w->dist[t] = d;
      if (!w->inq[t]) {
        uint32_t tail = head + len;
        w->queue[tail >= n ? tail - n : tail] = t;
        w->inq[t] = 1, len++;
      }
    }
  }
  return true;
}

/* The same distances by Dial's buckets on the reduced costs cost(a) +
 * pot(u) - pot(v), where pot holds the last round's distances (0 before the
 * first round: every residual arc then is a forward one, cost 0 or 1). An
 * augmentation on shortest paths only adds twins of tight arcs, whose reduced
 * cost is 0, so every residual arc keeps a reduced cost >= 0 and the nodes
 * unreachable last round stay so. Reduced distances are below 2 nodes (true
 * ones lie in (-nodes, nodes)). Returns false, for Bellman-Ford to take over,
 * should any of this fail (it would be a bug, not an input). Any exact method
 * gives the same distances, hence the same tight arcs and the same flow. */
static bool distances_dial(struct eplb__split_local *w, double eps) {
  const eplb__flow_t *f = &w->flow;
  const uint32_t *adj_start = f->adj_start, *adj = f->adj, *to = f->to;
  const int8_t *cost = w->cost;
  const double *rres = w->rres;
  const int32_t *pot = w->pot;
  int32_t *rd = w->dist, *bhead = w->bhead, *enext = w->enext;
  uint32_t *ent = w->ent;
  uint32_t n = w->nodes, nb = 2 * n, used = 0, pending = 1, top = 1;
  for (uint32_t v = 0; v < n; v++)
    rd[v] = FAR;
  rd[0] = 0;
  bhead[0] = 0, ent[0] = 0, enext[0] = -1;
  for (uint32_t b = 0; pending; b++) {
    if (b >= nb)
      return false;
    if (b >= top) /* first visit of the bucket: it was never cleared */
      continue;
    /* Popped from the head: arcs of reduced cost 0 push into this very
     * bucket while it is being emptied. */
    while (bhead[b] >= 0) {
      int32_t x = bhead[b];
      bhead[b] = enext[x], pending--;
      uint32_t u = ent[x];
      if (rd[u] != (int32_t)b) /* a stale entry: u was reached cheaper */
        continue;
      int32_t pu = pot[u];
      for (uint32_t i = adj_start[u]; i < adj_start[u + 1]; i++) {
        uint32_t a = adj[i], t = to[a];
        if (!(rres[a] > eps))
          continue;
        int32_t pt = pot[t];
        if (pt == FAR)
          return false;
        int32_t d = (int32_t)b + cost[a] + pu - pt;
        if (d >= rd[t])
          continue;
        if (d < (int32_t)b || (uint32_t)d >= nb || used >= f->m)
          return false;
        rd[t] = d;
        /* Buckets above top were never written this call: clear them on
         * the way up. */
        for (; top <= (uint32_t)d; top++)
          bhead[top] = -1;
        ent[++used] = t, enext[used] = bhead[d], bhead[d] = (int32_t)used;
        pending++;
      }
    }
  }
  for (uint32_t v = 0; v < n; v++)
    rd[v] = rd[v] == FAR ? FAR : rd[v] + pot[v];
  return true;
}

static bool distances(struct eplb__split_local *w, double eps) {
  bool ok = distances_dial(w, eps) || distances_bf(w, eps);
  if (ok)
    memcpy(w->pot, w->dist, (size_t)w->nodes * sizeof *w->pot);
  return ok;
}

/* The first round's distances without a search. Before any flow the
 * residual arcs are the forward ones (every twin's residual is 0): a source
 * (n, e) is at 0 when it has tokens, a GPU at the cheapest arc from such a
 * source, the sink at its nearest GPU with room, and nothing else is
 * reached. These are the distances Dial's pass from potentials 0 finds (any
 * exact method gives the same), at a fraction of its cost: the pass paid for
 * buckets and reduced costs on arcs whose costs are known. */
static void distances_first(struct eplb__split_local *w, const eplb__split_view_t *v, double eps) {
  uint32_t N = w->N, M = v->M, Q = w->Q, G = w->G, PE = Q + N * v->P;
  const uint32_t *pair_start = v->pair_start, *pair_gpu = v->pair_gpu;
  const double *rres = w->rres;
  const int8_t *cost = w->cost;
  int32_t *dist = w->dist, *dgpu = w->dist + 1 + Q;
  dist[0] = 0;
  for (uint32_t g = 0; g < G; g++)
    dgpu[g] = FAR;
  for (uint32_t n = 0, x = 0, a = Q; n < N; n++)
    for (uint32_t k = 0; k < M; k++, x++) {
      uint32_t q = pair_start[k], end = pair_start[k + 1];
      if (!(rres[2 * x] > eps)) {
        dist[1 + x] = FAR, a += end - q;
        continue;
      }
      dist[1 + x] = 0;
      for (; q < end; q++, a++)
        dgpu[pair_gpu[q]] = cost[2 * a] < dgpu[pair_gpu[q]] ? cost[2 * a] : dgpu[pair_gpu[q]];
    }
  int32_t ds = FAR;
  for (uint32_t g = 0; g < G; g++)
    if (rres[2 * (PE + g)] > eps && dgpu[g] < ds)
      ds = dgpu[g];
  dist[w->nodes - 1] = ds;
  memcpy(w->pot, dist, (size_t)w->nodes * sizeof *w->pot);
}

/* A greedy preflow on the tight two-arc paths source -> (n, e) -> GPU ->
 * sink: any path of tight arcs is a shortest one, so pushing along them is
 * what Dinic would do, only without its searches (most of a round's flow
 * goes this way). Returns the flow pushed. */
static double greedy_tight(struct eplb__split_local *w, const eplb__split_view_t *v, double eps) {
  uint32_t N = w->N, M = v->M, P = v->P, Q = w->Q, PE = Q + N * P;
  const int32_t *dist = w->dist;
  const int8_t *cost = w->cost;
  const uint32_t *to = w->flow.to;
  double *rres = w->rres, total = 0;
  int32_t dsink = dist[w->nodes - 1];
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t k = 0; k < M; k++) {
      uint32_t sa = 2 * (n * M + k);
      int32_t du = dist[1 + n * M + k];
      if (du != cost[sa]) /* the source's distance is 0 */
        continue;
      for (uint32_t q = v->pair_start[k]; q < v->pair_start[k + 1] && rres[sa] > eps; q++) {
        uint32_t pa = 2 * (Q + n * P + q), ga = 2 * (PE + (to[pa] - 1 - Q));
        if (du + cost[pa] != dist[to[pa]] || dist[to[pa]] != dsink) /* GPU -> sink costs 0 */
          continue;
        /* Not fmin (a libm call): residuals are never NaN nor -0. */
        double d = rres[sa] < rres[pa] ? rres[sa] : rres[pa];
        d = rres[ga] < d ? rres[ga] : d;
        if (!(d > eps))
          continue;
        rres[sa] -= d, rres[sa + 1] += d;
        rres[pa] -= d, rres[pa + 1] += d;
        rres[ga] -= d, rres[ga + 1] += d;
        total += d;
      }
    }
  return total;
}

/* Min-cost flow from the current residuals; returns the flow pushed. */
static eplb_status_t min_cost_flow(struct eplb__split_local *w, const eplb__split_view_t *v,
                                   double eps, double *pushed) {
  eplb__flow_t *f = &w->flow;
  uint32_t sink = w->nodes - 1;
  *pushed = 0;
  for (uint32_t round = 0;; round++) {
    if (!round && !w->hub)
      distances_first(w, v, eps);
    else if (!round)
      memset(w->pot, 0, (size_t)w->nodes * sizeof *w->pot);
    if ((round || w->hub) && (round > 4 * w->nodes || !distances(w, eps)))
      return eplb__error(EPLB_ESOLVER, "lp", "split_local: min-cost flow did not converge");
    if (w->dist[sink] == FAR)
      return EPLB_OK;
    /* Only arcs on shortest paths take part (an arc's twin is on one too:
     * its cost is the negation); Dinic skips the others, the same as on a
     * graph of just the tight pairs, so it pushes the same flow along the
     * same paths. */
    double *keep = f->res;
    f->res = w->rres;
    double add = w->hub ? 0 : greedy_tight(w, v, eps);
    add += eplb__flow_run_tight(f, 0, sink, eps, w->cost, w->dist);
    f->res = keep;
    if (!(add > eps))
      return EPLB_OK;
    *pushed += add;
    /* Every source arc saturated: the source reaches nothing, so the next
     * round would find the sink unreachable; spare its search. */
    uint32_t open = 0;
    for (uint32_t i = 0; i < w->S; i++)
      open |= w->rres[2 * i] > eps;
    if (!open)
      return EPLB_OK;
  }
}

/* w->loads = the node loads summed per expert; EPLB_EINVAL naming the first
 * negative, non-finite (or, integer, fractional or above 2^53) load. */
static eplb_status_t sum_loads(struct eplb__split_local *w, const eplb_split_local_t *local,
                               uint32_t E, bool integer) {
  uint32_t N = local->num_nodes;
  double *restrict sum = w->loads;
  memset(sum, 0, (size_t)E * sizeof *sum);
  /* One pass the compiler vectorises (a compare per load did not): a load
   * is valid (>= 0, finite) when its bits b are below 0x7ff0...0 (or it is
   * -0.0), so b | (b + 2^52) keeps the top bit clear for every valid load
   * but -0.0; a set bit sends the error path to look again, exactly. */
  uint64_t seen = 0;
  for (uint32_t n = 0; n < N; n++) {
    const double *restrict row = local->node_loads + (size_t)n * E;
    for (uint32_t e = 0; e < E; e++) {
      uint64_t b;
      memcpy(&b, &row[e], sizeof b);
      seen |= b | (b + (UINT64_C(1) << 52));
      sum[e] += row[e];
    }
  }
  bool bad = false;
  for (size_t i = 0; seen >> 63 && i < (size_t)N * E; i++)
    bad |= !(local->node_loads[i] >= 0 && local->node_loads[i] <= DBL_MAX);
  for (size_t i = 0; integer && !bad && i < (size_t)N * E; i++)
    bad |= local->node_loads[i] != floor(local->node_loads[i]) || local->node_loads[i] > 0x1p53;
  for (size_t i = 0; bad && i < (size_t)N * E; i++) {
    double x = local->node_loads[i];
    if (!(x >= 0 && x <= DBL_MAX) || (integer && (x != floor(x) || x > 0x1p53)))
      return eplb__error(EPLB_EINVAL, "lp", "split_local: node %zu expert %zu: load %g", i / E,
                         i % E, x);
  }
  return EPLB_OK;
}

/* The hub graph's source capacities; returns the tokens in the graph.
 * Summed per node in node order, as the pair graph's sources. */
static double caps_hub(struct eplb__split_local *w, const eplb__split_view_t *v,
                       const eplb_split_local_t *local) {
  uint32_t N = local->num_nodes, E = v->E, M = v->M;
  const uint32_t *multi = v->multi, *uof = w->uof;
  double *rres = w->rres, *hrem = w->hrem, wm = 0;
  memset(hrem, 0, (size_t)M * sizeof *hrem);
  for (uint32_t n = 0; n < N; n++) {
    const double *row = local->node_loads + (size_t)n * E;
    const uint32_t *urow = uof + (size_t)n * M;
    for (uint32_t k = 0; k < M; k++) {
      double d = row[multi[k]];
      wm += d;
      if (urow[k] == NONE)
        hrem[k] += d;
      else
        rres[2 * (M + urow[k])] = d, rres[2 * (M + urow[k]) + 1] = 0;
    }
  }
  for (uint32_t k = 0; k < M; k++)
    rres[2 * k] = hrem[k], rres[2 * k + 1] = 0;
  return wm;
}

/* Stage 2 on the built graph: capacities for the busiest GPU at cap, then
 * the min-cost flow. *ok: every token placed (else rounding left it short). */
static eplb_status_t cheapest_within(struct eplb__split_local *w, const eplb__split_view_t *v,
                                     const eplb_split_local_t *local, double cap, double eps,
                                     bool integer, bool *ok) {
  uint32_t N = local->num_nodes, E = v->E, M = v->M, PE = w->edges - v->G;
  double wm = 0;
  if (w->hub)
    wm = caps_hub(w, v, local);
  else
    for (uint32_t n = 0; n < N; n++)
      for (uint32_t k = 0; k < M; k++) {
        double d = local->node_loads[(size_t)n * E + v->multi[k]];
        w->rres[2 * (n * M + k)] = d, w->rres[2 * (n * M + k) + 1] = 0;
        wm += d;
      }
  for (uint32_t a = 2 * w->S; a < 2 * PE; a += 2)
    w->rres[a] = HUGE_VAL, w->rres[a + 1] = 0;
  for (uint32_t g = 0; g < v->G; g++) {
    double c = cap - v->base[g];
    w->rres[2 * (PE + g)] = c > 0 ? c : 0, w->rres[2 * (PE + g) + 1] = 0;
  }
  double pushed = 0;
  eplb_status_t st = wm > 0 ? min_cost_flow(w, v, eps, &pushed) : EPLB_OK;
  *ok = wm - pushed <= (double)(w->nodes + 1) * (integer ? 0 : fmax(eps, 1e-300));
  return st;
}

/* The replicated experts' amounts (in share) as shares, and max_load. */
static void finish_shares(const struct eplb__split_local *w, const eplb__split_view_t *v,
                          eplb_split_result_t *out) {
  const uint32_t *multi = v->multi, *rep_start = v->rep_start, *rep_list = v->rep_list;
  const double *loads = w->loads;
  double *share = out->share, *amount = out->amount, *gpu_load = out->gpu_load;
  for (uint32_t k = 0; k < v->M; k++) {
    uint32_t e = multi[k];
    for (uint32_t i = rep_start[e]; i < rep_start[e + 1]; i++) {
      uint32_t r = rep_list[i];
      if (amount)
        amount[r] = share[r];
      share[r] = loads[e] > 0 ? share[r] / loads[e] : w->gshare[r];
    }
  }
  double mx = 0;
  for (uint32_t g = 0; g < v->G; g++)
    mx = gpu_load[g] > mx ? gpu_load[g] : mx;
  out->max_load = mx;
}

/* write_flow on the hub graph. A pair's tokens are its local arc's (from
 * the pair's node) plus its hub arc's. The hub's flow goes to the nodes
 * that fed it, nodes in order, each taking the hub's pairs in order from
 * where the last node stopped: a node's remote tokens then reach few GPUs
 * (as the pair graph's augmenting paths put them), where an even spread
 * over the hub's GPUs had cost points of balancedness and de-duplication
 * in the simulator. This keeps the flow's cost: an optimum sends no node's
 * tokens through the hub while the hub feeds a GPU on that node (see
 * build_hub). A node without a replica fed the hub its tokens times the
 * fraction of them that the source -> hub arc carried. */
static double write_hub(const struct eplb__split_local *w, const eplb__split_view_t *v,
                        const eplb_split_local_t *local, eplb_split_result_t *out,
                        double *node_share, double xc) {
  uint32_t N = local->num_nodes, E = v->E, G = v->G, R = v->R, M = v->M, P = v->P, L = w->L;
  uint32_t AL = M + 2 * L, AH = AL + P;
  const uint32_t *multi = v->multi, *pair_start = v->pair_start, *pair_gpu = v->pair_gpu;
  const uint32_t *pair_cnt = v->pair_cnt, *rep_list = v->rep_list, *pfirst = w->pfirst;
  const uint32_t *gpu_node = local->gpu_node, *uof = w->uof;
  const double *rres = w->rres, *node_loads = local->node_loads;
  double *share = out->share, *gpu_load = out->gpu_load, *left = w->hsum, *frac = w->hrem;
  uint32_t *cur = w->hcur;
  for (uint32_t g = 0; g < G; g++)
    gpu_load[g] = v->base[g];
  for (uint32_t k = 0; k < M; k++) {
    for (uint32_t q = pair_start[k]; q < pair_start[k + 1]; q++) {
      double xl = rres[2 * (AL + q) + 1], xh = rres[2 * (AH + q) + 1], xr = (xl + xh) / pair_cnt[q];
      gpu_load[pair_gpu[q]] += xl + xh;
      for (uint32_t i = pfirst[q]; i < pfirst[q] + pair_cnt[q]; i++)
        share[rep_list[i]] = xr;
    }
    frac[k] = frac[k] > 0 ? rres[2 * k + 1] / frac[k] : 0;
    cur[k] = pair_start[k], left[k] = rres[2 * (AH + pair_start[k]) + 1];
  }
  for (uint32_t n = 0; n < N; n++) {
    double *nrow = node_share + (size_t)n * R;
    for (uint32_t k = 0; k < M; k++) {
      double d = node_loads[(size_t)n * E + multi[k]];
      if (!(d > 0))
        continue;
      uint32_t j = uof[(size_t)n * M + k], q = cur[k], end = pair_start[k + 1];
      for (uint32_t p = pair_start[k]; p < end; p++) {
        double ns = gpu_node[pair_gpu[p]] == n ? rres[2 * (AL + p) + 1] / pair_cnt[p] / d : 0;
        for (uint32_t i = pfirst[p]; i < pfirst[p] + pair_cnt[p]; i++)
          nrow[rep_list[i]] = ns;
      }
      /* t is the smaller of y and left, so one of them drops to 0 exactly. */
      double y = j == NONE ? d * frac[k] : rres[2 * (M + L + j) + 1];
      while (y > 0 && q < end) {
        double t = y < left[k] ? y : left[k];
        y -= t, left[k] -= t;
        if (t > 0) {
          double ns = t / pair_cnt[q] / d;
          xc += gpu_node[pair_gpu[q]] != n ? t : 0;
          for (uint32_t i = pfirst[q]; i < pfirst[q] + pair_cnt[q]; i++)
            nrow[rep_list[i]] += ns;
        }
        if (!(left[k] > 0) && ++q < end)
          left[k] = rres[2 * (AH + q) + 1];
      }
      cur[k] = q;
    }
  }
  finish_shares(w, v, out);
  return xc;
}

/* The flow as shares, node shares and GPU loads; returns xc plus the
 * cross-node tokens of the replicated experts. The arrays are read through
 * locals (through `v`, `w` and `out`, every double stored would reload the
 * pointers), and only the replicated experts' replicas are visited. */
static double write_flow(const struct eplb__split_local *w, const eplb__split_view_t *v,
                         const eplb_split_local_t *local, eplb_split_result_t *out,
                         double *node_share, double xc) {
  uint32_t N = local->num_nodes, E = v->E, G = v->G, R = v->R, M = v->M;
  const uint32_t *multi = v->multi, *pair_start = v->pair_start, *pair_gpu = v->pair_gpu;
  const uint32_t *pair_cnt = v->pair_cnt, *rep_start = v->rep_start, *rep_list = v->rep_list;
  const uint32_t *pfirst = w->pfirst, *gpu_node = local->gpu_node;
  const double *rres = w->rres, *node_loads = local->node_loads;
  double *share = out->share, *gpu_load = out->gpu_load;
  for (uint32_t g = 0; g < G; g++)
    gpu_load[g] = v->base[g];
  for (uint32_t k = 0; k < M; k++)
    for (uint32_t i = rep_start[multi[k]]; i < rep_start[multi[k] + 1]; i++)
      share[rep_list[i]] = 0;
  for (uint32_t n = 0, a = w->Q; n < N; n++) {
    double *nrow = node_share + (size_t)n * R;
    for (uint32_t k = 0; k < M; k++) {
      double d = node_loads[(size_t)n * E + multi[k]];
      for (uint32_t q = pair_start[k]; q < pair_start[k + 1]; q++, a++) {
        double x = rres[2 * a + 1]; /* the flow: its twin's residual */
        gpu_load[pair_gpu[q]] += x;
        xc += gpu_node[pair_gpu[q]] != n ? x : 0;
        if (pair_cnt[q] == 1) { /* the usual case, as below with x / 1 = x */
          uint32_t r = rep_list[pfirst[q]];
          share[r] += x;
          if (d > 0)
            nrow[r] = x / d;
          continue;
        }
        double xr = x / pair_cnt[q], ns = d > 0 ? xr / d : 0;
        for (uint32_t i = pfirst[q], end = i + pair_cnt[q]; i < end; i++) {
          uint32_t r = rep_list[i];
          share[r] += xr;
          if (d > 0)
            nrow[r] = ns;
        }
      }
    }
  }
  finish_shares(w, v, out);
  return xc;
}

/* xc plus the cross-node tokens of the replicated experts under the global
 * split. */
static double global_cross(const struct eplb__split_local *w, const eplb__split_view_t *v,
                           const eplb_split_local_t *local, double xc) {
  for (uint32_t e = 0; e < v->E; e++) {
    if (v->sgpu[e] != NONE)
      continue;
    for (uint32_t i = v->rep_start[e]; i < v->rep_start[e + 1]; i++) {
      uint32_t r = v->rep_list[i];
      for (uint32_t n = 0; n < local->num_nodes; n++)
        if (local->gpu_node[v->gpu_of[r]] != n)
          xc += local->node_loads[(size_t)n * v->E + e] * w->gshare[r];
    }
  }
  return xc;
}

eplb_status_t eplb_split_solve_local(eplb_split_t *split, const eplb_split_problem_t *problem,
                                     const eplb_split_local_t *local, eplb_split_result_t *out,
                                     double *node_share, double *cross) {
  if (!split || !problem || !out || !node_share)
    return eplb__error(EPLB_EINVAL, "lp", "split_local: NULL %s",
                       !split     ? "handle"
                       : !problem ? "problem"
                       : !out     ? "result"
                                  : "node_share");
  bool integer = eplb__split_options(split)->mode == EPLB_SPLIT_INTEGER;
  eplb_status_t st = problem->num_experts && problem->num_gpus
                         ? check_local(problem, local)
                         : eplb__error(EPLB_EINVAL, "lp", "split_local: empty problem");
  if (st)
    return st;
  struct eplb__split_local **slot = eplb__split_local_ws(split);
  if (!*slot && !(*slot = eplb__calloc(1, sizeof **slot)))
    return eplb__error(EPLB_ENOMEM, "lp", "split_local: workspace");
  struct eplb__split_local *w = *slot;
  uint32_t E = problem->num_experts, G = problem->num_gpus, R = problem->num_slots;
  uint32_t N = local->num_nodes;
  if (eplb__grow_all(&w->cap_e, E, (const eplb__array_ref_t[]){{(void **)&w->loads, 8}}, 1))
    return eplb__error(EPLB_ENOMEM, "lp", "split_local: %u loads", E);
  if ((st = sum_loads(w, local, E, integer)))
    return st;
  /* Stage 1: T* and a split reaching it (also builds the contracted graph). */
  if ((st = eplb_split_solve(split, problem, w->loads, out)))
    return st;
  eplb__split_view_t v;
  eplb__split_view(split, &v);
  bool hub = N >= HUB_NODES && (uint64_t)N * v.P >= (w->hub_arcs_set ? w->hub_arcs : HUB_ARCS);
  if ((w->hash != v.hash || w->N != N || w->G != G || w->hub != hub ||
       memcmp(w->gpu_node, local->gpu_node, (size_t)G * sizeof *w->gpu_node)) &&
      (st = hub ? build_hub(w, &v, local) : build(w, &v, local)))
    return st;
  if (eplb__grow_all(&w->cap_r, R, (const eplb__array_ref_t[]){{(void **)&w->gshare, 8}}, 1))
    return eplb__error(EPLB_ENOMEM, "lp", "split_local: %u shares", R);
  memcpy(w->gshare, out->share, (size_t)R * sizeof *w->gshare);

  /* Stage 2: the cheapest split within the tolerance. */
  double t = out->t_star, wmax = v.wmax; /* the largest of w->loads */
  double cap = integer ? fmax(ceil(t), floor(t * (1 + local->tolerance)))
                       : t * (1 + local->tolerance) * (1 + LOCAL_SLACK);
  bool ok = false;
  if ((st = cheapest_within(w, &v, local, cap, integer ? 0.5 : 1e-15 * wmax, integer, &ok)))
    return st;

  /* Node shares: a replicated expert's flow per GPU, spread evenly over its
   * replicas there; experts on one GPU (and nodes without tokens of an
   * expert, or a flow that rounding left short) keep the global shares. */
  double xc = 0;
  for (uint32_t n = 0; n < N; n++)
    memcpy(node_share + (size_t)n * R, w->gshare, (size_t)R * sizeof *node_share);
  for (uint32_t j = 0; j < w->S1; j++) /* one-GPU experts: all but their node's tokens */
    xc += w->loads[w->sone[j]] - local->node_loads[(size_t)w->snode[j] * E + w->sone[j]];
  /* Rounding left the capped flow short: the global split (busiest GPU at
   * T*) is a valid answer; its cross-node copies count by proportion. */
  xc = !ok      ? global_cross(w, &v, local, xc)
       : w->hub ? write_hub(w, &v, local, out, node_share, xc)
                : write_flow(w, &v, local, out, node_share, xc);
  if (cross)
    *cross = xc;
  return EPLB_OK;
}

eplb_status_t eplb__split_local_hub_arcs(eplb_split_t *split, uint64_t arcs) {
  struct eplb__split_local **slot = split ? eplb__split_local_ws(split) : NULL;
  if (!slot)
    return eplb__error(EPLB_EINVAL, "lp", "split_local: NULL handle");
  if (!*slot && !(*slot = eplb__calloc(1, sizeof **slot)))
    return eplb__error(EPLB_ENOMEM, "lp", "split_local: workspace");
  (*slot)->hub_arcs = arcs;
  (*slot)->hub_arcs_set = true;
  return EPLB_OK;
}
