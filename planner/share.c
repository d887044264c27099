/* planner/share.c — token shares over a fixed placement.
 *
 * The split LP (min T: each expert's load spread over its replicas, each
 * GPU receives <= T) is a parametric max-flow: source -> expert (cap load),
 * expert -> GPU holding it (unbounded), GPU -> sink (cap T). Newton's method
 * on T (Dinkelbach): start from total/G; while the flow cannot carry every
 * token, the min cut's source side is an expert set A with load(A) >
 * T * |N(A)|, and T = load(A) / |N(A)| is the next (larger) candidate. The
 * optimum max_A load(A)/|N(A)| is reached in a few max-flows. */
#include "planner/planner.h"

#include <math.h>
#include <string.h>

typedef struct {
  uint32_t to, next;
  double cap;
} edge_t;

typedef struct {
  uint32_t n, m;
  uint32_t *head, *level, *it, *queue;
  edge_t *e;
  double eps;
} graph_t;

static void add_edge(graph_t *g, uint32_t a, uint32_t b, double cap) {
  g->e[g->m] = (edge_t){b, g->head[a], cap};
  g->head[a] = g->m++;
  g->e[g->m] = (edge_t){a, g->head[b], 0};
  g->head[b] = g->m++;
}

static bool bfs(graph_t *g, uint32_t s, uint32_t t) {
  for (uint32_t i = 0; i < g->n; i++)
    g->level[i] = UINT32_MAX;
  uint32_t qh = 0, qt = 0;
  g->level[s] = 0;
  g->queue[qt++] = s;
  while (qh < qt) {
    uint32_t v = g->queue[qh++];
    for (uint32_t k = g->head[v]; k != UINT32_MAX; k = g->e[k].next)
      if (g->e[k].cap > g->eps && g->level[g->e[k].to] == UINT32_MAX) {
        g->level[g->e[k].to] = g->level[v] + 1;
        g->queue[qt++] = g->e[k].to;
      }
  }
  return g->level[t] != UINT32_MAX;
}

static double dfs(graph_t *g, uint32_t v, uint32_t t, double f) {
  if (v == t)
    return f;
  for (; g->it[v] != UINT32_MAX; g->it[v] = g->e[g->it[v]].next) {
    edge_t *ed = &g->e[g->it[v]];
    if (ed->cap > g->eps && g->level[ed->to] == g->level[v] + 1) {
      double d = dfs(g, ed->to, t, f < ed->cap ? f : ed->cap);
      if (d > 0) {
        ed->cap -= d;
        g->e[g->it[v] ^ 1u].cap += d;
        return d;
      }
    }
  }
  return 0;
}

static double maxflow(graph_t *g, uint32_t s, uint32_t t) {
  double flow = 0;
  while (bfs(g, s, t)) {
    memcpy(g->it, g->head, g->n * sizeof *g->it);
    double f;
    while ((f = dfs(g, s, t, INFINITY)) > 0)
      flow += f;
  }
  return flow;
}

void eplb__uniform_shares(uint32_t E, uint32_t R, const int32_t *phy2log, double *share) {
  uint32_t *cnt = eplb__calloc(E, sizeof *cnt);
  for (uint32_t r = 0; r < R; r++) {
    uint32_t c = 0;
    if (cnt) {
      if (r == 0)
        for (uint32_t q = 0; q < R; q++)
          cnt[phy2log[q]]++;
      c = cnt[phy2log[r]];
    } else {
      for (uint32_t q = 0; q < R; q++) /* no memory: quadratic but still correct */
        c += phy2log[q] == phy2log[r];
    }
    share[r] = 1.0 / c;
  }
  eplb__free(cnt);
}

static eplb_status_t split_solver(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                                  double *share, double *max_load) {
  double *gl = eplb__malloc_array(ctx->num_gpus, sizeof *gl);
  if (!gl)
    return eplb__error(EPLB_ENOMEM, "planner", "split: out of memory");
  eplb_split_problem_t pb = {.num_experts = ctx->num_experts,
                             .num_gpus = ctx->num_gpus,
                             .num_slots = ctx->num_slots,
                             .phy2log = (const uint32_t *)(const void *)phy2log,
                             .slots_per_gpu = ctx->slots_per_gpu};
  eplb_split_result_t res = {.share = share, .gpu_load = gl};
  eplb_status_t st = eplb_split_solve(ctx->split, &pb, ctx->w, &res);
  if (!st)
    *max_load = eplb__layer_max_load(ctx, phy2log, share, NULL);
  eplb__free(gl);
  return st;
}

eplb_status_t eplb__split_bottleneck(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                                     double *share, double *max_load, double *gpu_load,
                                     uint8_t *gpus, uint8_t *experts) {
  eplb_split_problem_t pb = {.num_experts = ctx->num_experts,
                             .num_gpus = ctx->num_gpus,
                             .num_slots = ctx->num_slots,
                             .phy2log = (const uint32_t *)(const void *)phy2log,
                             .slots_per_gpu = ctx->slots_per_gpu};
  eplb_split_result_t res = {
      .share = share, .gpu_load = gpu_load, .bottleneck_experts = experts, .bottleneck_gpus = gpus};
  eplb_status_t st = eplb_split_solve(ctx->split, &pb, ctx->w, &res);
  if (!st)
    *max_load = res.max_load;
  return st;
}

eplb_status_t eplb__split_shares(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                                 double *share, double *max_load) {
  uint32_t E = ctx->num_experts, G = ctx->num_gpus, R = ctx->num_slots;
  const double *w = ctx->w;
  if (ctx->split)
    return split_solver(ctx, phy2log, share, max_load);
  uint32_t n = E + G + 2, s = E + G, t = E + G + 1;
  size_t medges = 2 * ((size_t)R + E + G);
  graph_t g = {.n = n};
  g.head = eplb__malloc_array((size_t)n * 4, sizeof *g.head);
  g.e = eplb__malloc_array(medges, sizeof *g.e);
  uint32_t *slot_edge = eplb__malloc_array(R, sizeof *slot_edge);
  uint32_t *dup = eplb__calloc(R, sizeof *dup);
  eplb_status_t st = EPLB_OK;
  if (!g.head || !g.e || !slot_edge || !dup) {
    st = eplb__error(EPLB_ENOMEM, "planner", "split: out of memory");
    goto done;
  }
  g.level = g.head + n;
  g.it = g.level + n;
  g.queue = g.it + n;
  double total = 0;
  for (uint32_t e = 0; e < E; e++)
    total += w[e];
  if (total <= 0) {
    eplb__uniform_shares(E, R, phy2log, share);
    *max_load = 0;
    goto done;
  }
  g.eps = total * 1e-13;
  for (uint32_t i = 0; i < n; i++)
    g.head[i] = UINT32_MAX;
  /* One edge per distinct (expert, GPU) pair; dup[] counts slots sharing it. */
  for (uint32_t gpu = 0; gpu < G; gpu++) {
    for (uint32_t r = ctx->gpu_first[gpu]; r < ctx->gpu_first[gpu + 1]; r++) {
      uint32_t e = (uint32_t)phy2log[r];
      slot_edge[r] = UINT32_MAX;
      for (uint32_t q = ctx->gpu_first[gpu]; q < r; q++)
        if ((uint32_t)phy2log[q] == e) {
          slot_edge[r] = slot_edge[q];
          break;
        }
      if (slot_edge[r] == UINT32_MAX) {
        slot_edge[r] = g.m;
        add_edge(&g, e, E + gpu, INFINITY);
      }
      dup[slot_edge[r] / 2]++;
    }
  }
  uint32_t first_src = g.m;
  for (uint32_t e = 0; e < E; e++)
    add_edge(&g, s, e, w[e]);
  uint32_t first_sink = g.m;
  for (uint32_t gpu = 0; gpu < G; gpu++)
    add_edge(&g, E + gpu, t, 0);
  double T = total / G;
  for (int iter = 0; iter < 100; iter++) {
    /* Reset capacities for this T. */
    for (uint32_t k = 0; k < first_src; k += 2) {
      g.e[k].cap = INFINITY;
      g.e[k + 1].cap = 0;
    }
    for (uint32_t e = 0; e < E; e++) {
      g.e[first_src + 2 * e].cap = w[e];
      g.e[first_src + 2 * e + 1].cap = 0;
    }
    for (uint32_t gpu = 0; gpu < G; gpu++) {
      g.e[first_sink + 2 * gpu].cap = T;
      g.e[first_sink + 2 * gpu + 1].cap = 0;
    }
    double f = maxflow(&g, s, t);
    if (f >= total * (1 - 1e-11))
      break;
    /* Source side of the min cut: level set by the last (failed) BFS. */
    double wa = 0;
    uint32_t na = 0;
    for (uint32_t e = 0; e < E; e++)
      if (g.level[e] != UINT32_MAX)
        wa += w[e];
    for (uint32_t gpu = 0; gpu < G; gpu++)
      na += g.level[E + gpu] != UINT32_MAX;
    if (na == 0 || wa / na <= T * (1 + 1e-15))
      break; /* numerically optimal */
    T = wa / na;
  }
  /* Flow on expert->GPU edges gives the shares. */
  for (uint32_t r = 0; r < R; r++) {
    uint32_t e = (uint32_t)phy2log[r];
    double fl = g.e[slot_edge[r] + 1].cap; /* reverse residual = flow */
    share[r] = w[e] > 0 ? fl / w[e] / dup[slot_edge[r] / 2] : 0;
  }
  /* Normalise (rounding, and zero-load experts get uniform shares). */
  double *sum = eplb__calloc(E, sizeof *sum);
  uint32_t *cnt = eplb__calloc(E, sizeof *cnt);
  if (!sum || !cnt) {
    eplb__free(sum);
    eplb__free(cnt);
    st = eplb__error(EPLB_ENOMEM, "planner", "split: out of memory");
    goto done;
  }
  for (uint32_t r = 0; r < R; r++) {
    sum[phy2log[r]] += share[r];
    cnt[phy2log[r]]++;
  }
  for (uint32_t r = 0; r < R; r++) {
    uint32_t e = (uint32_t)phy2log[r];
    share[r] = sum[e] > 0 ? share[r] / sum[e] : 1.0 / cnt[e];
  }
  eplb__free(sum);
  eplb__free(cnt);
  double mx = 0;
  for (uint32_t gpu = 0; gpu < G; gpu++) {
    double l = 0;
    for (uint32_t r = ctx->gpu_first[gpu]; r < ctx->gpu_first[gpu + 1]; r++)
      l += share[r] * w[phy2log[r]];
    if (l > mx)
      mx = l;
  }
  *max_load = mx;
done:
  eplb__free(g.head);
  eplb__free(g.e);
  eplb__free(slot_edge);
  eplb__free(dup);
  return st;
}
