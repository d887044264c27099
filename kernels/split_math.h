/* kernels/split_math.h — the exact per-batch token split of one layer
 * (eplb__cuda_split), written once for the CPU reference (kernels/split.c)
 * and the device kernel (kernels/split.cu). C and CUDA; no allocation, no
 * recursion, no libc: every array lives in a caller-given workspace.
 *
 * The problem is eplb_split_solve's (eplb/split.h) on integer token counts:
 * T* = max over expert sets A of w(A) / |N(A)|. The solver is the same
 * Newton (Dinkelbach) iteration on T with one max-flow each, but in exact
 * 64-bit integers instead of doubles, for two reasons: the result is then
 * bit-identical on the host and the device (no rounding, no FMA
 * contraction, no order-dependent sums), and no tolerance decides
 * feasibility. With T = p/q every capacity is scaled by q: source -> expert
 * w_e q, expert -> GPU unbounded, GPU -> sink p - b_g q (b_g: the load of
 * experts whose replicas all sit on GPU g, contracted out of the graph as
 * in lp/split_flow.c). A saturating flow proves T* <= p/q; otherwise the
 * source side of the minimum cut is a set A' with ratio
 * (w(A') + b(N(A'))) / |N(A')| > p/q, the next T. Each T is the ratio of an
 * actual set, so the first feasible one is T*, reported as the double p / q
 * (correctly rounded, the same double as eplb_split_solve's w(A) / |N(A)|).
 *
 * The split itself is the integer one (EPLB_SPLIT_INTEGER): one more flow
 * with GPU capacity ceil(T*) gives whole-token amounts x_r (an expert's
 * amount on a GPU is spread over its replicas there, remainder first), so
 * the busiest GPU carries exactly ceil(T*) tokens. share_r = x_r / w_e;
 * an expert without tokens gets 1/c on each of its c replicas.
 *
 * The max flow is Dinic's with an explicit path stack. Sizes: the graph
 * has at most E + G + 2 nodes and E + R + G edges; every capacity is at
 * most W G (W the total count), required <= 2^62. */
#ifndef EPLB_SPLIT_MATH_H
#define EPLB_SPLIT_MATH_H

#include "kernels/alias_math.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define EPLB__SPLIT_NONE 0xFFFFFFFFu
/* The capacity of expert -> GPU arcs: above any flow (<= 2^62). */
#define EPLB__SPLIT_INF ((uint64_t)1 << 62)

/* Status words (the public values are EPLB__CUDA_SPLIT_* in eplb/kernels.h). */
#define EPLB__SPLIT_CONVERGED 0u
#define EPLB__SPLIT_NOT_CONVERGED 1u
#define EPLB__SPLIT_BAD_INPUT 2u
#define EPLB__SPLIT_INTERNAL 3u

/* The workspace's arrays (N = E + G + 2 nodes, A = E + R + G edges, arc a
 * and a ^ 1 being an edge and its reverse). */
typedef struct eplb__split_ws {
  uint64_t *base;                /* [G] load of the GPU's one-GPU experts */
  uint64_t *res;                 /* [2A] residual capacities */
  uint32_t *start;               /* [E+1] expert e's slots are list[start[e] .. start[e+1]) */
  uint32_t *list;                /* [R] in slot order (so by GPU) */
  uint32_t *sgpu;                /* [E] the GPU of an expert whose replicas share one, else NONE */
  uint32_t *multi;               /* [E] experts on several GPUs: the first M */
  uint32_t *pair_start;          /* [E+1] multi expert k's (expert, GPU) pairs */
  uint32_t *pair_gpu, *pair_cnt; /* [R] a pair's GPU and its replicas there */
  uint32_t *adj_start;           /* [N+1] node v's arcs: adj[adj_start[v] .. [v+1]) */
  uint32_t *adj;                 /* [2A] */
  uint32_t *head;                /* [2A] the node an arc enters */
  uint32_t *cur;                 /* [N] Dinic's current arc */
  uint32_t *queue;               /* [N] the BFS queue */
  uint32_t *path;                /* [N] the DFS path (arcs) */
  int32_t *level;                /* [N] BFS levels; >= 0 after the last flow: source side */
  uint32_t E, G, S, M, P;        /* sizes; M multi experts, P pairs */
  uint64_t W, Wm;                /* total count, count of the multi experts */
} eplb__split_ws_t;

static inline EPLB__HD size_t eplb__split_take(size_t *off, size_t n, size_t size) {
  size_t at = *off;
  *off += (n * size + 7) & ~(size_t)7; /* 8-byte aligned */
  return at;
}

/* Bytes of the workspace of E experts, G GPUs, S slots per GPU; with mem
 * (8-byte aligned) not NULL, also points w's arrays into it. */
static inline EPLB__HD size_t eplb__split_ws_layout(uint32_t E, uint32_t G, uint32_t S,
                                                    unsigned char *mem, eplb__split_ws_t *w) {
  size_t R = (size_t)G * S, N = (size_t)E + G + 2, A = (size_t)E + R + G, off = 0;
  size_t o_base = eplb__split_take(&off, G, 8), o_res = eplb__split_take(&off, 2 * A, 8);
  size_t o_start = eplb__split_take(&off, (size_t)E + 1, 4), o_list = eplb__split_take(&off, R, 4);
  size_t o_sgpu = eplb__split_take(&off, E, 4), o_multi = eplb__split_take(&off, E, 4);
  size_t o_ps = eplb__split_take(&off, (size_t)E + 1, 4);
  size_t o_pg = eplb__split_take(&off, R, 4), o_pc = eplb__split_take(&off, R, 4);
  size_t o_as = eplb__split_take(&off, N + 1, 4), o_adj = eplb__split_take(&off, 2 * A, 4);
  size_t o_head = eplb__split_take(&off, 2 * A, 4), o_cur = eplb__split_take(&off, N, 4);
  size_t o_queue = eplb__split_take(&off, N, 4), o_path = eplb__split_take(&off, N, 4);
  size_t o_level = eplb__split_take(&off, N, 4);
  if (mem) {
    w->base = (uint64_t *)(void *)(mem + o_base);
    w->res = (uint64_t *)(void *)(mem + o_res);
    w->start = (uint32_t *)(void *)(mem + o_start);
    w->list = (uint32_t *)(void *)(mem + o_list);
    w->sgpu = (uint32_t *)(void *)(mem + o_sgpu);
    w->multi = (uint32_t *)(void *)(mem + o_multi);
    w->pair_start = (uint32_t *)(void *)(mem + o_ps);
    w->pair_gpu = (uint32_t *)(void *)(mem + o_pg);
    w->pair_cnt = (uint32_t *)(void *)(mem + o_pc);
    w->adj_start = (uint32_t *)(void *)(mem + o_as);
    w->adj = (uint32_t *)(void *)(mem + o_adj);
    w->head = (uint32_t *)(void *)(mem + o_head);
    w->cur = (uint32_t *)(void *)(mem + o_cur);
    w->queue = (uint32_t *)(void *)(mem + o_queue);
    w->path = (uint32_t *)(void *)(mem + o_path);
    w->level = (int32_t *)(void *)(mem + o_level);
  }
  return off;
}

/* Dinic's max flow from s to t over w's arcs (n nodes); adds to the flow
 * already in res and returns the amount added. On return level[v] >= 0
 * exactly for the nodes the residual graph reaches from s. */
static inline EPLB__HD uint64_t eplb__split_maxflow(const eplb__split_ws_t *w, uint32_t n,
                                                    uint32_t s, uint32_t t) {
  uint64_t total = 0;
  uint64_t *res = w->res;
  const uint32_t *adj = w->adj, *as = w->adj_start, *head = w->head;
  int32_t *level = w->level;
  uint32_t *cur = w->cur, *path = w->path;
  for (;;) {
    for (uint32_t v = 0; v < n; v++)
      level[v] = -1;
    uint32_t qh = 0, qt = 0;
    level[s] = 0;
    w->queue[qt++] = s;
    while (qh < qt) {
      uint32_t v = w->queue[qh++];
      for (uint32_t i = as[v]; i < as[v + 1]; i++) {
        uint32_t a = adj[i], u = head[a];
        if (res[a] && level[u] < 0) {
          level[u] = level[v] + 1;
          w->queue[qt++] = u;
        }
      }
    }
    if (level[t] < 0)
      return total;
    for (uint32_t v = 0; v < n; v++)
      cur[v] = as[v];
    /* Blocking flow: advance along level-increasing arcs with room; at t
     * augment and go back to the tail of the first saturated arc; at a dead
     * end retreat one arc and skip it. */
    uint32_t depth = 0, v = s;
    for (;;) {
      if (v == t) {
        uint64_t f = res[path[0]];
        for (uint32_t i = 1; i < depth; i++)
          if (res[path[i]] < f)
            f = res[path[i]];
        uint32_t back = depth;
        for (uint32_t i = 0; i < depth; i++) {
          res[path[i]] -= f;
          res[path[i] ^ 1u] += f;
          if (back == depth && res[path[i]] == 0)
            back = i;
        }
        total += f;
        depth = back;
        v = depth ? head[path[depth - 1]] : s;
        continue;
      }
      uint32_t end = as[v + 1];
      while (cur[v] < end) {
        uint32_t a = adj[cur[v]];
        if (res[a] && level[head[a]] == level[v] + 1)
          break;
        cur[v]++;
      }
      if (cur[v] < end) {
        uint32_t a = adj[cur[v]];
        path[depth++] = a;
        v = head[a];
        continue;
      }
      if (depth == 0)
        break;
      depth--;
      v = depth ? head[path[depth - 1]] : s;
      cur[v]++;
    }
  }
}

/* Sets the capacities for T = p / q (q >= 1, p >= b_g q for every g) with
 * no flow: source -> expert w_e q, expert -> GPU unbounded, GPU -> sink
 * p - b_g q. */
static inline EPLB__HD void eplb__split_caps(const eplb__split_ws_t *w, uint32_t M, uint32_t P,
                                             uint32_t G, const uint32_t *counts, uint64_t p,
                                             uint64_t q) {
  for (uint32_t k = 0; k < M; k++) {
    w->res[2 * k] = (uint64_t)counts[w->multi[k]] * q;
    w->res[2 * k + 1] = 0;
  }
  for (uint32_t x = 0; x < P; x++) {
    w->res[2 * (M + x)] = EPLB__SPLIT_INF;
    w->res[2 * (M + x) + 1] = 0;
  }
  for (uint32_t g = 0; g < G; g++) {
    w->res[2 * (M + P + g)] = p - w->base[g] * q;
    w->res[2 * (M + P + g) + 1] = 0;
  }
}

/* amount split over c replicas: j-th part, the remainder on the first ones
 * (lp/split_flow.c's integer rule). */
static inline EPLB__HD uint64_t eplb__split_part(uint64_t amount, uint32_t c, uint32_t j) {
  return amount / c + (j < amount % c ? 1u : 0u);
}

/* Buckets the slots, checks the placement, totals the counts, and sorts the
 * experts into one-GPU ones (into the bases) and multi-GPU ones with their
 * (expert, GPU) pairs. Returns EPLB__SPLIT_CONVERGED or BAD_INPUT. */
static inline EPLB__HD uint32_t eplb__split_prepare(eplb__split_ws_t *w, const int32_t *phy2log,
                                                    const uint32_t *counts) {
  uint32_t E = w->E, G = w->G, S = w->S, R = G * S, M = 0, P = 0;
  for (uint32_t r = 0; r < R; r++)
    if ((uint32_t)phy2log[r] >= E)
      return EPLB__SPLIT_BAD_INPUT;
  eplb__alias_bucket(E, R, phy2log, w->start, w->list);
  uint64_t W = 0, Wm = 0;
  for (uint32_t e = 0; e < E; e++) {
    if (w->start[e + 1] == w->start[e])
      return EPLB__SPLIT_BAD_INPUT;
    W += counts[e];
  }
  if (W > EPLB__SPLIT_INF / G)
    return EPLB__SPLIT_BAD_INPUT;
  for (uint32_t g = 0; g < G; g++)
    w->base[g] = 0;
  for (uint32_t e = 0; e < E; e++) {
    uint32_t b = w->start[e], end = w->start[e + 1];
    uint32_t g0 = w->list[b] / S;
    if (g0 == w->list[end - 1] / S) { /* slots are in order: one GPU iff first == last */
      w->sgpu[e] = g0;
      w->base[g0] += counts[e];
      continue;
    }
    w->sgpu[e] = EPLB__SPLIT_NONE;
    w->pair_start[M] = P;
    w->multi[M++] = e;
    Wm += counts[e];
    for (uint32_t i = b; i < end; i++) {
      uint32_t g = w->list[i] / S;
      if (i == b || g != w->list[i - 1] / S) {
        w->pair_gpu[P] = g;
        w->pair_cnt[P++] = 0;
      }
      w->pair_cnt[P - 1]++;
    }
  }
  w->pair_start[M] = P;
  w->M = M, w->P = P, w->W = W, w->Wm = Wm;
  return EPLB__SPLIT_CONVERGED;
}

/* The graph: source 0, multi expert k -> 1 + k, GPU g -> 1 + M + g, sink
 * M + G + 1. Edge k: source -> k; M + x: pair x; M + P + g: g -> sink.
 * Arc heads, then the adjacency (CSR by the arc's tail). */
static inline EPLB__HD void eplb__split_graph(eplb__split_ws_t *w) {
  uint32_t M = w->M, P = w->P, G = w->G, n = M + G + 2, A = M + P + G;
  for (uint32_t k = 0; k < M; k++) {
    w->head[2 * k] = 1 + k;
    w->head[2 * k + 1] = 0;
    for (uint32_t x = w->pair_start[k]; x < w->pair_start[k + 1]; x++) {
      w->head[2 * (M + x)] = 1 + M + w->pair_gpu[x];
      w->head[2 * (M + x) + 1] = 1 + k;
    }
  }
  for (uint32_t g = 0; g < G; g++) {
    w->head[2 * (M + P + g)] = M + G + 1;
    w->head[2 * (M + P + g) + 1] = 1 + M + g;
  }
  for (uint32_t v = 0; v <= n; v++)
    w->adj_start[v] = 0;
  for (uint32_t a = 0; a < 2 * A; a++) /* an arc leaves the head of its reverse */
    w->adj_start[w->head[a ^ 1u] + 1]++;
  for (uint32_t v = 0; v < n; v++)
    w->adj_start[v + 1] += w->adj_start[v];
  for (uint32_t v = 0; v < n; v++)
    w->cur[v] = w->adj_start[v];
  for (uint32_t a = 0; a < 2 * A; a++)
    w->adj[w->cur[w->head[a ^ 1u]]++] = a;
}

/* Newton's iterations from the best ratio of the cheap sets (all experts:
 * every GPU holds a replica, so they reach all G; one GPU's fixed experts;
 * one expert over its GPUs) to T* = *p / *q. Returns CONVERGED, or
 * NOT_CONVERGED after max_iterations max-flows, or INTERNAL. */
static inline EPLB__HD uint32_t eplb__split_newton(eplb__split_ws_t *w, const uint32_t *counts,
                                                   uint32_t max_iterations, uint64_t *p_out,
                                                   uint64_t *q_out, uint32_t *iterations) {
  uint32_t M = w->M, G = w->G, n = M + G + 2;
  uint64_t p = w->W, q = G;
  for (uint32_t g = 0; g < G; g++)
    if (w->base[g] * q > p) {
      p = w->base[g];
      q = 1;
    }
  for (uint32_t k = 0; k < M; k++) {
    uint32_t e = w->multi[k];
    uint64_t nd = w->pair_start[k + 1] - w->pair_start[k];
    if ((uint64_t)counts[e] * q > p * nd) {
      p = counts[e];
      q = nd;
    }
  }
  /* Each short flow's cut is a set of a larger ratio: the next T. */
  for (uint32_t it = 1;; it++) {
    if (it > max_iterations)
      return EPLB__SPLIT_NOT_CONVERGED;
    eplb__split_caps(w, M, w->P, G, counts, p, q);
    if (eplb__split_maxflow(w, n, 0, n - 1) == w->Wm * q) {
      *p_out = p, *q_out = q, *iterations = it;
      return EPLB__SPLIT_CONVERGED;
    }
    uint64_t num = 0, den = 0;
    for (uint32_t k = 0; k < M; k++)
      if (w->level[1 + k] >= 0)
        num += counts[w->multi[k]];
    for (uint32_t g = 0; g < G; g++)
      if (w->level[1 + M + g] >= 0) {
        num += w->base[g];
        den++;
      }
    /* The cut proves num / den > p / q; anything else is a bug. */
    if (!den || num * q <= p * den)
      return EPLB__SPLIT_INTERNAL;
    p = num;
    q = den;
  }
}

/* The shares of the integral flow in w (see the file comment). */
static inline EPLB__HD void eplb__split_shares(const eplb__split_ws_t *w, const uint32_t *counts,
                                               double *share) {
  uint32_t M = w->M;
  for (uint32_t e = 0; e < w->E; e++) {
    uint32_t b = w->start[e], end = w->start[e + 1], c = end - b;
    uint64_t we = counts[e];
    if (we == 0 || w->sgpu[e] != EPLB__SPLIT_NONE)
      for (uint32_t i = b; i < end; i++)
        share[w->list[i]] = we ? (double)eplb__split_part(we, c, i - b) / (double)we : 1.0 / c;
  }
  for (uint32_t k = 0; k < M; k++) {
    uint32_t e = w->multi[k], i = w->start[e];
    uint64_t we = counts[e];
    if (we == 0)
      continue;
    /* A pair's replicas are consecutive in the expert's list. */
    for (uint32_t x = w->pair_start[k]; x < w->pair_start[k + 1]; x++) {
      uint64_t amount = w->res[2 * (M + x) + 1];
      for (uint32_t j = 0; j < w->pair_cnt[x]; j++, i++)
        share[w->list[i]] = (double)eplb__split_part(amount, w->pair_cnt[x], j) / (double)we;
    }
  }
}

/* Solves one layer (see the file comment): E experts, G GPUs of S slots
 * (slot r on GPU r / S), phy2log [G S], counts [E]. At most max_iterations
 * Newton max-flows. Returns EPLB__SPLIT_CONVERGED after writing share
 * [G S], *t_star and (when not NULL) *iterations; any other status leaves
 * share and *t_star untouched: NOT_CONVERGED (budget spent), BAD_INPUT (a
 * phy2log entry outside [0, E), an expert without a replica, or counts
 * whose total W has W G > 2^62), INTERNAL (a flow contradicted the theory:
 * a bug, never expected). */
static inline EPLB__HD uint32_t eplb__split_solve_math(
    uint32_t E, uint32_t G, uint32_t S, const int32_t *phy2log, const uint32_t *counts,
    uint32_t max_iterations, void *workspace, double *share, double *t_star, uint32_t *iterations) {
  eplb__split_ws_t w;
  eplb__split_ws_layout(E, G, S, (unsigned char *)workspace, &w);
  w.E = E, w.G = G, w.S = S;
  uint32_t st = eplb__split_prepare(&w, phy2log, counts);
  if (st != EPLB__SPLIT_CONVERGED)
    return st;
  eplb__split_graph(&w);
  uint64_t p = 0, q = 1;
  uint32_t it = 0;
  st = eplb__split_newton(&w, counts, max_iterations, &p, &q, &it);
  if (st != EPLB__SPLIT_CONVERGED)
    return st;
  /* The integral split at ceil(T*) (b_g <= T* <= that). */
  eplb__split_caps(&w, w.M, w.P, G, counts, (p + q - 1) / q, 1);
  if (eplb__split_maxflow(&w, w.M + G + 2, 0, w.M + G + 1) != w.Wm)
    return EPLB__SPLIT_INTERNAL;
  eplb__split_shares(&w, counts, share);
  *t_star = (double)p / (double)q;
  if (iterations)
    *iterations = it;
  return EPLB__SPLIT_CONVERGED;
}

/* ---- the exact-quota map of the device route (#17) ------------------------
 *
 * Written once for the CPU reference (kernels/quota.c, the emulated
 * device) and the kernel (kernels/quota.cu).
 *
 * The rule is the host route's (runtime/batch.c, quota_map): this call's c
 * tokens of expert e give its j-th candidate (its slots in slot order, those
 * with a positive share) floor(C_j + phi) - floor(C_{j-1} + phi) tokens,
 * C_j = c (s_1 + ... + s_j) summed in that order, phi = u / 2^16 with u the
 * dispatch hash's column word of (token_base, layer, e); a token over from
 * rounding goes to the last candidate with a share. The tokens of e take the
 * quotas in call order (the first q_1 to candidate 1, ...). Each step is one
 * IEEE double operation (the product through eplb__alias_mul, never an
 * FMA), so the device and the host give the same slots from the same shares.
 *
 * Also the guard of a multi-rank call: the all-reduced message ends with
 * the bad-id count, the check word and its square (runtime/device.c); the
 * split is skipped unless no rank dropped an id and every rank sent the
 * same word. */

/* Status words the split leaves when the guard stops it (beyond the
 * EPLB__SPLIT_* above): the previous shares stay. */
#define EPLB__SPLIT_BAD_IDS 4u  /* some rank's call had ids outside [0, E) */
#define EPLB__SPLIT_MISMATCH 5u /* the ranks called different layers or shapes */

/* The guard: tail = {bad ids summed, word summed, word * word summed} over
 * `ranks` ranks that each sent {its bad ids, word, word * word}. */
static inline EPLB__HD uint32_t eplb__quota_guard(const uint32_t *tail, uint32_t word,
                                                  uint32_t ranks) {
  if (tail[1] != word * ranks || tail[2] != word * word * ranks)
    return EPLB__SPLIT_MISMATCH;
  return tail[0] ? EPLB__SPLIT_BAD_IDS : 0u;
}

/* Workspace of the quota map: start [E+1], list [R], quota [R], count [E]
 * (uint32). */
static inline EPLB__HD size_t eplb__quota_ws_layout(uint32_t E, uint32_t R, unsigned char *mem,
                                                    uint32_t **start, uint32_t **list,
                                                    uint32_t **quota, uint32_t **count) {
  size_t words = 2 * (size_t)E + 1 + 2 * (size_t)R;
  if (mem) {
    uint32_t *w = (uint32_t *)mem;
    *start = w, *list = w + E + 1, *quota = w + E + 1 + R, *count = w + E + 1 + 2 * (size_t)R;
  }
  return words * sizeof(uint32_t);
}

/* Quotas quota[a .. z) of expert e's candidates list[a .. z) for its c
 * tokens of this call, by shares share [R]. */
static inline EPLB__HD void eplb__quota_expert(uint32_t c, double phi, const uint32_t *list,
                                               uint32_t a, uint32_t z, const double *share,
                                               uint32_t *quota) {
  double cum = 0, below = 0;
  uint32_t given = 0, last = a;
  for (uint32_t i = a; i < z; i++) {
    double sh = share[list[i]];
    quota[i] = 0;
    if (!(sh > 0))
      continue;
    cum += eplb__alias_mul(sh, (double)c);
    double next = floor(cum + phi);
    uint32_t q = next > below ? (uint32_t)(next - below) : 0;
    q = q > c - given ? c - given : q;
    quota[i] = q, given += q, last = i, below = next;
  }
  if (a < z)
    quota[last] += c - given;
}

/* Hands expert e's tokens among ids [m] (call order) to its candidates by
 * the quotas left in quota [.. z), writing out [m]: the first candidate's
 * quota first. *cur (start: e's first candidate) is where the next call
 * resumes, so that ids may come in tiles. The quotas sum to e's count, so
 * the cursor never runs past z while e's tokens remain. */
static inline EPLB__HD void eplb__quota_assign(uint32_t e, const int32_t *ids, size_t m,
                                               const uint32_t *list, uint32_t z, uint32_t *quota,
                                               uint32_t *cur, int32_t *out) {
  uint32_t i = *cur;
  for (size_t x = 0; x < m; x++) {
    if ((uint32_t)ids[x] != e)
      continue;
    while (i < z && !quota[i])
      i++;
    if (i == z)
      break;
    out[x] = (int32_t)list[i];
    quota[i]--;
  }
  *cur = i;
}

/* The phase of expert e of a call at token_base in `layer` (as the host). */
static inline EPLB__HD double eplb__quota_phase(uint64_t token_base, uint32_t layer, uint32_t e) {
  return eplb__dispatch_u(eplb__dispatch_token_hash(token_base, layer), e) / 65536.0;
}

#endif
