/* lp/maxflow.c — Dinic's max-flow on a compact, reusable arena. The split
 * graphs are tiny (tens to hundreds of nodes) and solved thousands of times a
 * second, so everything lives in arrays sized once and the DFS is iterative
 * (no recursion depth tied to the input). */
#include "lp/lp.h"

#include <math.h>
#include <string.h>

eplb_status_t eplb__flow_reserve(eplb__flow_t *f, uint32_t n, uint32_t edges) {
  const eplb__array_ref_t by_n[] = {{(void **)&f->adj_start, sizeof *f->adj_start},
                                    {(void **)&f->cur, sizeof *f->cur},
                                    {(void **)&f->queue, sizeof *f->queue},
                                    {(void **)&f->stack, sizeof *f->stack},
                                    {(void **)&f->level, sizeof *f->level}};
  const eplb__array_ref_t by_m[] = {{(void **)&f->to, sizeof *f->to},
                                    {(void **)&f->adj, sizeof *f->adj},
                                    {(void **)&f->adj_to, sizeof *f->adj_to},
                                    {(void **)&f->res, sizeof *f->res},
                                    {(void **)&f->tmp, 2 * sizeof *f->tmp}};
  if (eplb__grow_all(&f->cap_n, (size_t)n + 1, by_n, 5) ||
      eplb__grow_all(&f->cap_m, 2 * (size_t)edges, by_m, 5))
    return EPLB_ENOMEM;
  return EPLB_OK;
}

void eplb__flow_edge(eplb__flow_t *f, uint32_t k, uint32_t u, uint32_t v) {
  f->to[2 * k] = v;
  f->to[2 * k + 1] = u;
}

void eplb__flow_build(eplb__flow_t *f, uint32_t n, uint32_t edges) {
  uint32_t m = 2 * edges;
  f->n = n;
  f->m = m;
  memset(f->adj_start, 0, ((size_t)n + 1) * sizeof *f->adj_start);
  /* The tail of arc a is the head of its twin a ^ 1. */
  for (uint32_t a = 0; a < m; a++)
    f->adj_start[f->to[a ^ 1u] + 1]++;
  for (uint32_t v = 0; v < n; v++)
    f->adj_start[v + 1] += f->adj_start[v];
  memcpy(f->cur, f->adj_start, (size_t)n * sizeof *f->cur);
  for (uint32_t a = 0; a < m; a++)
    f->adj[f->cur[f->to[a ^ 1u]]++] = a;
  for (uint32_t i = 0; i < m; i++)
    f->adj_to[i] = f->to[f->adj[i]];
}

/* Whether every node keeps the number of arcs in its list once the edges
 * moved from old_head to their heads: each node appears as many times
 * among the old heads as among the new. */
static bool same_sizes(const eplb__flow_t *f, const uint32_t *edges, const uint32_t *old_head,
                       uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    uint32_t v = old_head[i];
    int d = 0;
    for (uint32_t j = 0; j < n; j++)
      d += (f->to[2 * edges[j]] == v) - (old_head[j] == v);
    if (d)
      return false;
  }
  return true;
}

/* Node v's list laid out again in place (its length unchanged): the arcs
 * that still leave v, merged by index with in [nin] from the first one
 * whose tail is v (in is sorted by (tail, arc)). */
static void relay(eplb__flow_t *f, uint32_t v, const uint32_t *in, uint32_t nin) {
  uint32_t *adj = f->adj, *adj_to = f->adj_to;
  const uint32_t *to = f->to;
  uint32_t b = f->adj_start[v], len = f->adj_start[v + 1] - b, w = b, o = 0, p = 0;
  memcpy(f->tmp, adj + b, (size_t)len * sizeof *adj);
  for (;;) {
    while (o < len && to[f->tmp[o] ^ 1u] != v)
      o++; /* moved away */
    bool old_next = o < len, new_next = p < nin && to[in[p] ^ 1u] == v;
    if (!old_next && !new_next)
      break;
    uint32_t a = !new_next || (old_next && f->tmp[o] < in[p]) ? f->tmp[o++] : in[p++];
    adj[w] = a;
    adj_to[w++] = to[a];
  }
}

void eplb__flow_move_heads(eplb__flow_t *f, const uint32_t *edges, const uint32_t *old_head,
                           uint32_t n, uint32_t *scratch) {
  uint32_t *adj = f->adj, *adj_to = f->adj_to, *adj_start = f->adj_start, *in = scratch;
  const uint32_t *to = f->to;
  uint32_t lo = UINT32_MAX, hi = 0, nin = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t a = 2 * edges[i], u = old_head[i], v = to[a], t = to[a + 1];
    /* The forward arc stays in its tail's list, with its new head; a list
     * is sorted by arc (an expert with a hundred replicas has its hundred
     * pairs there, and a scan per moved pair was half of an update). */
    uint32_t lo_j = adj_start[t], hi_j = adj_start[t + 1];
    while (lo_j < hi_j) {
      uint32_t mid = lo_j + (hi_j - lo_j) / 2;
      if (adj[mid] < a)
        lo_j = mid + 1;
      else
        hi_j = mid;
    }
    if (lo_j < adj_start[t + 1] && adj[lo_j] == a)
      adj_to[lo_j] = v;
    if (u == v)
      continue;
    lo = u < lo ? u : lo;
    lo = v < lo ? v : lo;
    hi = u > hi ? u : hi;
    hi = v > hi ? v : hi;
    /* The reverse arc moves from u's list to v's: kept by (new tail, arc)
     * (insertion sort: a swap moves a few). */
    uint32_t k = nin++;
    for (; k > 0 && (to[in[k - 1] ^ 1u] > v || (to[in[k - 1] ^ 1u] == v && in[k - 1] > a + 1)); k--)
      in[k] = in[k - 1];
    in[k] = a + 1;
  }
  if (lo > hi)
    return;
  if (same_sizes(f, edges, old_head, n)) {
    /* A swap: every list keeps its length, so each node that lost or
     * gained an arc is laid out again in its own place, instead of every
     * list between the lowest and highest such node (at 1,024 GPUs, most
     * of the graph for two GPUs far apart). */
    for (uint32_t i = 0; i < 2 * n; i++) {
      uint32_t e = edges[i / 2], v = i % 2 ? to[2 * e] : old_head[i / 2];
      bool seen = old_head[i / 2] == to[2 * e]; /* not moved */
      for (uint32_t j = 0; j < i && !seen; j++)
        seen = old_head[j / 2] != to[2 * edges[j / 2]] &&
               v == (j % 2 ? to[2 * edges[j / 2]] : old_head[j / 2]);
      if (seen)
        continue;
      uint32_t p = 0;
      while (p < nin && to[in[p] ^ 1u] < v)
        p++;
      relay(f, v, in + p, nin - p);
    }
    return;
  }
  /* The lists of nodes lo..hi span the same arcs before and after. Each
   * node that lost or gained an arc is its old arcs that stayed, merged by
   * index with those moved in; the lists between them only shift, as
   * blocks (arc by arc they were most of a swap's update at 1,024 GPUs). */
  uint32_t aff[128], naff = 0;
  for (uint32_t i = 0; i < 2 * n && 2 * n <= 128; i++) {
    uint32_t e = edges[i / 2], v = i % 2 ? to[2 * e] : old_head[i / 2];
    if (old_head[i / 2] == to[2 * e])
      continue;
    uint32_t k = naff;
    for (; k > 0 && aff[k - 1] > v; k--)
      ;
    if (k > 0 && aff[k - 1] == v)
      continue;
    memmove(aff + k + 1, aff + k, (naff - k) * sizeof *aff);
    aff[k] = v;
    naff++;
  }
  uint32_t b = adj_start[lo], len = adj_start[hi + 1] - b, w = b, p = 0;
  uint32_t *old = f->tmp, *old_to = f->tmp + len;
  memcpy(old, adj + b, (size_t)len * sizeof *adj);
  memcpy(old_to, adj_to + b, (size_t)len * sizeof *adj_to);
  /* Past 64 edges every node of the span is merged as one that changed. */
  for (uint32_t k = 0, v = lo; v <= hi; k++) {
    uint32_t x = 2 * n <= 128 ? aff[k] : v;
    if (v < x) { /* v .. x-1 unchanged: shifted as a block */
      uint32_t os = adj_start[v] - b, oe = adj_start[x] - b, shift = w - adj_start[v];
      memcpy(adj + w, old + os, (size_t)(oe - os) * sizeof *adj);
      memcpy(adj_to + w, old_to + os, (size_t)(oe - os) * sizeof *adj_to);
      for (uint32_t u = v; u < x; u++)
        adj_start[u] += shift;
      w += oe - os;
    }
    uint32_t o = adj_start[x] - b, oe = adj_start[x + 1] - b;
    adj_start[x] = w;
    for (;;) {
      while (o < oe && to[old[o] ^ 1u] != x)
        o++; /* moved away */
      bool old_next = o < oe, new_next = p < nin && to[in[p] ^ 1u] == x;
      if (!old_next && !new_next)
        break;
      uint32_t a = !new_next || (old_next && old[o] < in[p]) ? old[o++] : in[p++];
      adj[w] = a;
      adj_to[w++] = to[a];
    }
    v = x + 1;
  }
}

/* Once the BFS has reached t: the nodes one level short of t without an
 * arc to it with room, and those it labelled at t's level (nothing lies
 * beyond them), lose their level. The DFS entered each such node only to
 * scan its arcs and retreat (at 1,024 GPUs eleven dead ends per augmenting
 * path, most of them GPUs without room), so skipping them from the start
 * leaves the same paths in the same order. queue [tail] holds every
 * labelled node but s, in level order (t itself when an arc of s reached
 * it: t keeps its level). */
static inline __attribute__((always_inline)) void prune(eplb__flow_t *f, uint32_t t, uint32_t tail,
                                                        double eps, const int8_t *cost,
                                                        const int32_t *dist) {
  int32_t *level = f->level, lt = level[t];
  const uint32_t *adj = f->adj, *adj_to = f->adj_to, *adj_start = f->adj_start;
  const double *res = f->res;
  for (uint32_t j = tail; j-- > 0;) {
    uint32_t v = f->queue[j];
    if (level[v] < lt - 1)
      break;
    if (v == t)
      continue;
    bool to_t = false;
    for (uint32_t i = adj_start[v]; level[v] == lt - 1 && !to_t && i < adj_start[v + 1]; i++) {
      uint32_t a = adj[i];
      to_t = adj_to[i] == t && res[a] > eps && (!cost || dist[v] + cost[a] == dist[t]);
    }
    if (!to_t)
      level[v] = -1;
  }
}

/* With cost (else NULL: every arc) only the tight arcs take part: those with
 * dist[tail] + cost[a] == dist[head]; inlined into both entry points so the
 * plain one pays nothing.
 *
 * The source's arcs are read from act [*nact] (their adjacency positions,
 * in order) instead of its whole list: a split graph's source has an arc per
 * expert, and after the first phase nearly all are saturated, yet every
 * phase's search and every augmentation's scan passed over all of them (at
 * 512 GPUs, most of the arcs a flow read). Within a run a source arc's
 * residual only falls (no path enters the source), so each phase drops
 * those that ran out and visits the rest in the same order as before: the
 * same labels, paths and flow. */
static inline __attribute__((always_inline)) bool bfs(eplb__flow_t *f, uint32_t s, uint32_t t,
                                                      double eps, const int8_t *cost,
                                                      const int32_t *dist, uint32_t *act,
                                                      uint32_t *nact) {
  int32_t *level = f->level;
  const uint32_t *adj = f->adj, *adj_to = f->adj_to, *adj_start = f->adj_start;
  const double *res = f->res;
  uint32_t *queue = f->queue;
  memset(level, 0xff, (size_t)f->n * sizeof *level); /* every level -1 */
  uint32_t head = 0, tail = 0, kept = 0, n = *nact;
  bool reached = false;
  level[s] = 0;
  for (uint32_t j = 0; j < n; j++) {
    uint32_t i = act[j], a = adj[i];
    if (!(res[a] > eps))
      continue;
    act[kept++] = i;
    uint32_t w = adj_to[i];
    if (reached || level[w] >= 0 || (cost && dist[s] + cost[a] != dist[w]))
      continue;
    level[w] = 1;
    reached = w == t;
    queue[tail++] = w;
  }
  *nact = kept;
  if (reached) {
    prune(f, t, tail, eps, cost, dist);
    return true;
  }
  while (head < tail) {
    uint32_t v = queue[head++];
    for (uint32_t i = adj_start[v], end = adj_start[v + 1]; i < end; i++) {
      uint32_t w = adj_to[i];
      if (level[w] >= 0)
        continue;
      uint32_t a = adj[i];
      if (res[a] > eps && (!cost || dist[v] + cost[a] == dist[w])) {
        level[w] = level[v] + 1;
        /* Nodes not yet labelled when t is reached lie at t's level or
         * beyond: no shortest path to t uses them, so the phase makes the
         * same augmentations without them (the DFS only left them as dead
         * ends). A BFS that misses t still labels all of the source side,
         * which the callers read as the minimum cut. */
        if (w == t) {
          prune(f, t, tail, eps, cost, dist);
          return true;
        }
        queue[tail++] = w;
      }
    }
  }
  return level[t] >= 0;
}

static inline __attribute__((always_inline)) double
run(eplb__flow_t *f, uint32_t s, uint32_t t, double eps, const int8_t *cost, const int32_t *dist) {
  double total = 0.0;
  uint32_t *stack = f->stack, *cur = f->cur, *act = f->tmp, nact = 0;
  const uint32_t *adj = f->adj, *adj_to = f->adj_to, *to = f->to;
  int32_t *level = f->level;
  double *res = f->res;
  for (uint32_t i = f->adj_start[s]; i < f->adj_start[s + 1]; i++)
    act[nact++] = i;
  while (bfs(f, s, t, eps, cost, dist, act, &nact)) {
    memcpy(cur, f->adj_start, (size_t)f->n * sizeof *cur);
    uint32_t top = 0, v = s, cs = 0; /* cs: the source's place in act */
    for (;;) {
      if (v == t) {
        double d = HUGE_VAL;
        for (uint32_t i = 0; i < top; i++)
          if (res[stack[i]] < d)
            d = res[stack[i]];
        uint32_t cut = top;
        for (uint32_t i = 0; i < top; i++) {
          uint32_t a = stack[i];
          if (f->log)
            eplb__flow_log(f, a);
          res[a] -= d;
          res[a ^ 1u] += d;
          if (cut == top && !(res[a] > eps))
            cut = i;
        }
        total += d;
        /* Resume from the tail of the first saturated arc. */
        top = cut;
        v = to[stack[top] ^ 1u];
        continue;
      }
      if (v == s) {
        for (; cs < nact; cs++) {
          uint32_t i = act[cs], w = adj_to[i], a = adj[i];
          if (level[w] == 1 && res[a] > eps && (!cost || dist[s] + cost[a] == dist[w]))
            break;
        }
        if (cs == nact)
          break;
        stack[top++] = adj[act[cs]];
        v = adj_to[act[cs]];
        continue;
      }
      /* The head's level first: an int compare through adj_to (the heads
       * in adjacency order) rules out most arcs without loading res. */
      uint32_t end = f->adj_start[v + 1], i = cur[v];
      int32_t next = level[v] + 1;
      for (; i < end; i++) {
        uint32_t w = adj_to[i];
        if (level[w] != next)
          continue;
        uint32_t a = adj[i];
        if (res[a] > eps && (!cost || dist[v] + cost[a] == dist[w]))
          break;
      }
      cur[v] = i;
      if (i < end) {
        uint32_t a = adj[i];
        stack[top++] = a;
        v = adj_to[i];
        continue;
      }
      /* Dead end: retreat and skip the arc that led here. No path of this
       * phase leads on from v, so it leaves the level graph (the last
       * search, which finds no path, labels afresh the cut callers read). */
      level[v] = -1;
      top--;
      v = to[stack[top] ^ 1u];
      if (v == s)
        cs++;
      else
        cur[v]++;
    }
  }
  return total;
}

void eplb__flow_log(eplb__flow_t *f, uint32_t a) {
  if (f->log_n + 2 > f->log_cap) {
    f->log_over = true;
    return;
  }
  f->log[f->log_n].arc = a;
  f->log[f->log_n++].res = f->res[a];
  f->log[f->log_n].arc = a ^ 1u;
  f->log[f->log_n++].res = f->res[a ^ 1u];
}

void eplb__flow_undo(eplb__flow_t *f) {
  while (f->log_n > 0) {
    f->log_n--;
    f->res[f->log[f->log_n].arc] = f->log[f->log_n].res;
  }
}

double eplb__flow_run(eplb__flow_t *f, uint32_t s, uint32_t t, double eps) {
  return run(f, s, t, eps, NULL, NULL);
}

double eplb__flow_run_tight(eplb__flow_t *f, uint32_t s, uint32_t t, double eps, const int8_t *cost,
                            const int32_t *dist) {
  return run(f, s, t, eps, cost, dist);
}

void eplb__flow_free(eplb__flow_t *f) {
  if (!f)
    return;
  eplb__free(f->to);
  eplb__free(f->res);
  eplb__free(f->adj_start);
  eplb__free(f->adj);
  eplb__free(f->adj_to);
  eplb__free(f->level);
  eplb__free(f->cur);
  eplb__free(f->queue);
  eplb__free(f->stack);
  eplb__free(f->tmp);
  eplb__free(f->log_mem);
  memset(f, 0, sizeof *f);
}
