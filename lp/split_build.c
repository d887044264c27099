/* lp/split_build.c — the exact split handle's flow graph: built for a
 * placement (whole, or in place for a local search's swap), its hashes, a
 * from-zero max-flow on it and its minimum cut, and what the other solvers
 * read of the handle. The lowest file of the handle: the solve
 * (split_flow.c), the probes (split_probe.c) and the locality and in-service
 * stages (split_local.c, split_mask.c) all build on it, and it calls none of
 * them. */
#include "lp/lp.h"

#include <math.h>
#include <string.h>

#define NONE UINT32_MAX

const eplb_split_options_t *eplb__split_options(const eplb_split_t *s) { return &s->opt; }

struct eplb__split_local **eplb__split_local_ws(eplb_split_t *s) {
  return &s->local;
}

struct eplb__split_mask **eplb__split_mask_ws(eplb_split_t *s) {
  return &s->mask;
}

void eplb__split_view(const eplb_split_t *s, eplb__split_view_t *v) {
  *v = (eplb__split_view_t){.E = s->E,
                            .G = s->G,
                            .R = s->R,
                            .M = s->M,
                            .P = s->P,
                            .hash = s->hash,
                            .multi = s->multi,
                            .pair_start = s->pair_start,
                            .pair_gpu = s->pair_gpu,
                            .pair_cnt = s->pair_cnt,
                            .rep_start = s->rep_start,
                            .rep_list = s->rep_list,
                            .rep_pair = s->rep_pair,
                            .sgpu = s->sgpu,
                            .gpu_of = s->gpu_of,
                            .base = s->base,
                            .wmax = s->wmax};
}

/* Grows every array to the problem's sizes; all-or-nothing per dimension so
 * a failure leaves a consistent (if unbuilt) handle. */
static eplb_status_t reserve(eplb_split_t *s, uint32_t E, uint32_t G, uint32_t R) {
  const eplb__array_ref_t by_r[] = {{(void **)&s->c_phy2log, 4}, {(void **)&s->rep_list, 4},
                                    {(void **)&s->gpu_of, 4},    {(void **)&s->pair_gpu, 4},
                                    {(void **)&s->pair_cnt, 4},  {(void **)&s->rep_pair, 4},
                                    {(void **)&s->pamt, 8}};
  const eplb__array_ref_t by_e[] = {{(void **)&s->count, 4}, {(void **)&s->rep_start, 4},
                                    {(void **)&s->ndist, 4}, {(void **)&s->sgpu, 4},
                                    {(void **)&s->multi, 4}, {(void **)&s->pair_start, 4},
                                    {(void **)&s->set, 1},   {(void **)&s->memo_loads, 8}};
  const eplb__array_ref_t by_g[] = {{(void **)&s->c_slots, 4},
                                    {(void **)&s->base, 8},
                                    {(void **)&s->gin, 8},
                                    {(void **)&s->gmark, 1}};
  if (s->cap_r < R || s->cap_e < (size_t)E + 1 || s->cap_g < G)
    s->built = s->memo_ok = s->fresh = false;
  s->base_ok = false;
  if (eplb__grow_all(&s->cap_r, R, by_r, 7) || eplb__grow_all(&s->cap_e, (size_t)E + 1, by_e, 8) ||
      eplb__grow_all(&s->cap_g, G, by_g, 4))
    return EPLB_ENOMEM;
  return EPLB_OK;
}

/* The hash only keys the warm-start memory in this process. A sum of one
 * mixed term per slot (and per GPU) rather than a chain over the words: the
 * planner's local search changes two slots at a time, and its update is
 * then two terms (eplb__split_swap_update) instead of a pass over R. */
static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t eplb__split_slot_hash(uint32_t r, uint32_t e) {
  return mix64(((uint64_t)r << 32 | e) ^ 0x9e3779b97f4a7c15ull);
}

uint64_t eplb__split_placement_hash(const eplb_split_problem_t *p) {
  uint64_t h =
      mix64(EPLB__FNV1A_BASIS ^ p->num_experts) + mix64((uint64_t)p->num_gpus << 32 | p->num_slots);
  for (uint32_t r = 0; r < p->num_slots; r++)
    h += eplb__split_slot_hash(r, p->phy2log[r]);
  for (uint32_t g = 0; g < p->num_gpus; g++)
    h += mix64(((uint64_t)g << 32 | p->slots_per_gpu[g]) ^ 0x6a09e667f3bcc909ull);
  return h;
}

bool eplb__split_same_placement(const eplb_split_t *s, const eplb_split_problem_t *p) {
  return s->built && s->E == p->num_experts && s->G == p->num_gpus && s->R == p->num_slots &&
         !memcmp(s->c_phy2log, p->phy2log, (size_t)s->R * 4) &&
         !memcmp(s->c_slots, p->slots_per_gpu, (size_t)s->G * 4);
}

eplb_status_t eplb__split_build(eplb_split_t *s, const eplb_split_problem_t *p) {
  if (eplb__split_swap_update(s, p))
    return EPLB_OK;
  uint32_t E = p->num_experts, G = p->num_gpus, R = p->num_slots;
  eplb_status_t st = reserve(s, E, G, R);
  if (st)
    return eplb__error(st, "lp", "split: out of memory for %u experts, %u GPUs, %u slots", E, G, R);
  s->built = s->memo_ok = s->fresh = false;
  s->base_ok = false;
  if ((st = eplb__split_count_replicas(p, s->count)))
    return st;
  s->rep_start[0] = 0;
  for (uint32_t e = 0; e < E; e++)
    s->rep_start[e + 1] = s->rep_start[e] + s->count[e];
  s->Gs = 0;
  for (uint32_t g = 0, r = 0; g < G; g++) {
    s->Gs += p->slots_per_gpu[g] > 0;
    for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++)
      s->gpu_of[r] = g;
  }
  /* Slot order is GPU-major, so each expert's list is sorted by GPU and its
   * replicas on one GPU are consecutive. */
  memcpy(s->ndist, s->rep_start, (size_t)E * 4);
  for (uint32_t r = 0; r < R; r++)
    s->rep_list[s->ndist[p->phy2log[r]]++] = r;
  uint32_t M = 0, P = 0;
  for (uint32_t e = 0; e < E; e++) {
    uint32_t b = s->rep_start[e], end = s->rep_start[e + 1], nd = 1;
    for (uint32_t i = b + 1; i < end; i++)
      nd += s->gpu_of[s->rep_list[i]] != s->gpu_of[s->rep_list[i - 1]];
    s->ndist[e] = nd;
    if (nd == 1) {
      s->sgpu[e] = s->gpu_of[s->rep_list[b]];
      for (uint32_t i = b; i < end; i++)
        s->rep_pair[s->rep_list[i]] = NONE;
      continue;
    }
    s->sgpu[e] = NONE;
    s->pair_start[M] = P;
    s->multi[M++] = e;
    for (uint32_t i = b; i < end; i++) {
      uint32_t g = s->gpu_of[s->rep_list[i]];
      if (i == b || g != s->gpu_of[s->rep_list[i - 1]]) {
        s->pair_gpu[P] = g;
        s->pair_cnt[P++] = 0;
      }
      s->pair_cnt[P - 1]++;
      s->rep_pair[s->rep_list[i]] = P - 1;
    }
  }
  s->pair_start[M] = P;
  /* Nodes: source 0, multi expert k -> 1 + k, GPU g -> 1 + M + g, sink last.
   * Edges: k (source -> expert), M + p (pair p), M + P + g (GPU -> sink). */
  uint32_t n = M + G + 2, edges = M + P + G;
  if ((st = eplb__flow_reserve(&s->flow, n, edges)))
    return eplb__error(st, "lp", "split: out of memory for a flow graph of %u nodes", n);
  for (uint32_t k = 0; k < M; k++) {
    eplb__flow_edge(&s->flow, k, 0, 1 + k);
    for (uint32_t q = s->pair_start[k]; q < s->pair_start[k + 1]; q++)
      eplb__flow_edge(&s->flow, M + q, 1 + k, 1 + M + s->pair_gpu[q]);
  }
  for (uint32_t g = 0; g < G; g++)
    eplb__flow_edge(&s->flow, M + P + g, 1 + M + g, n - 1);
  eplb__flow_build(&s->flow, n, edges);
  s->M = M;
  s->P = P;
  s->E = E;
  s->G = G;
  s->R = R;
  memcpy(s->c_phy2log, p->phy2log, (size_t)R * 4);
  memcpy(s->c_slots, p->slots_per_gpu, (size_t)G * 4);
  s->hash_raw = eplb__split_placement_hash(p);
  s->hash = s->hash_raw ? s->hash_raw : 1; /* 0 means none */
  s->built = true;
  return EPLB_OK;
}

/* A greedy preflow along the two-arc paths source -> expert -> GPU -> sink
 * with room: it carries most of the flow in one pass, leaving Dinic a few
 * phases instead of dozens (its phases dominated planning time at hundreds
 * of GPUs). Returns the flow pushed. */
static double greedy(eplb_split_t *s, double eps) {
  eplb__flow_t *f = &s->flow;
  uint32_t M = s->M, P = s->P;
  double total = 0.0;
  for (uint32_t k = 0; k < M; k++)
    for (uint32_t q = s->pair_start[k]; q < s->pair_start[k + 1] && f->res[2 * k] > eps; q++) {
      uint32_t sink_arc = 2 * (M + P + s->pair_gpu[q]);
      double d = f->res[2 * k] < f->res[sink_arc] ? f->res[2 * k] : f->res[sink_arc];
      if (!(d > eps))
        continue;
      f->res[2 * k] -= d;
      f->res[2 * k + 1] += d;
      f->res[2 * (M + q)] -= d;
      f->res[2 * (M + q) + 1] += d;
      f->res[sink_arc] -= d;
      f->res[sink_arc + 1] += d;
      total += d;
    }
  return total;
}

/* Sets the GPU->sink capacities for T and runs the flow; returns the flow.
 * The same run as the last one (same graph, loads, cap and eps, nothing
 * else run since) is deterministic: its flow is still in the arena. */
double eplb__split_run_flow(eplb_split_t *s, const double *loads, double cap_t, double eps) {
  eplb__flow_t *f = &s->flow;
  uint32_t M = s->M, P = s->P;
  size_t nl = (size_t)s->E * sizeof *loads;
  s->fresh = false;
  s->base_ok = false;
  if (s->memo_ok && !memcmp(&cap_t, &s->memo_cap, sizeof cap_t) &&
      !memcmp(&eps, &s->memo_eps, sizeof eps) && !memcmp(loads, s->memo_loads, nl))
    return s->memo_total;
  for (uint32_t k = 0; k < M; k++) {
    f->res[2 * k] = loads[s->multi[k]];
    f->res[2 * k + 1] = 0.0;
  }
  for (uint32_t q = 0; q < P; q++) {
    f->res[2 * (M + q)] = HUGE_VAL;
    f->res[2 * (M + q) + 1] = 0.0;
  }
  for (uint32_t g = 0; g < s->G; g++) {
    double c = cap_t - s->base[g];
    f->res[2 * (M + P + g)] = c > 0 ? c : 0.0;
    f->res[2 * (M + P + g) + 1] = 0.0;
  }
  double total = greedy(s, eps);
  total += eplb__flow_run(f, 0, M + s->G + 1, eps);
  s->memo_ok = true;
  s->memo_cap = cap_t;
  s->memo_eps = eps;
  s->memo_total = total;
  memcpy(s->memo_loads, loads, nl);
  return total;
}

/* The source side of the last flow's minimum cut, experts A' and GPUs
 * N(A'): its ratio (w(A') + fixed loads of N(A')) / |N(A')|, 0 for an empty
 * N(A'). Above the flow's cap it is a violated set. */
double eplb__split_cut_ratio(const eplb_split_t *s, const double *loads) {
  const int32_t *level = s->flow.level;
  uint32_t M = s->M, ng = 0;
  double w = 0.0;
  for (uint32_t k = 0; k < M; k++)
    if (level[1 + k] >= 0)
      w += loads[s->multi[k]];
  for (uint32_t g = 0; g < s->G; g++)
    if (level[1 + M + g] >= 0) {
      w += s->base[g];
      ng++;
    }
  return ng ? w / ng : 0.0;
}

/* The fixed load base [G] of one-GPU experts; *total, *wmax and *wm (the
 * load in the flow graph) of loads. */
void eplb__split_set_base(eplb_split_t *s, const double *loads, double *total, double *wmax,
                          double *wm) {
  double t = 0.0, mx = 0.0, m = 0.0;
  for (uint32_t g = 0; g < s->G; g++)
    s->base[g] = 0.0;
  for (uint32_t e = 0; e < s->E; e++) {
    double w = loads[e];
    t += w;
    if (w > mx)
      mx = w;
    if (s->sgpu[e] != NONE)
      s->base[s->sgpu[e]] += w;
    else
      m += w;
  }
  *total = t;
  *wmax = mx;
  *wm = m;
}

/* ---- in-place graph update for a two-slot swap ---------------------------- */

/* Index of expert e in multi [M], which build fills in expert order. */
static uint32_t multi_index(const eplb_split_t *s, uint32_t e) {
  uint32_t lo = 0, hi = s->M;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (s->multi[mid] < e)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Expert e's replicas after slots d [nd] changed from c to n (e's replica
 * count unchanged): its list stays sorted, then its GPU (one-GPU expert) or
 * its pairs, their replica counts and edges are laid out as build does.
 * False when e's number of GPUs changes (the caller then builds). */
/* Edges whose heads a swap update changed, with their old heads: up to
 * MOVED_MAX, past which the adjacency is built again. */
#define MOVED_MAX 64
typedef struct {
  uint32_t n, edge[MOVED_MAX], old[MOVED_MAX];
  bool over;
} moved_t;

static bool relist(eplb_split_t *s, uint32_t e, const uint32_t *n, const uint32_t *d, uint32_t nd,
                   moved_t *mv) {
  uint32_t b = s->rep_start[e], end = s->rep_start[e + 1], w = b;
  uint32_t *list = s->rep_list;
  const uint32_t *gpu_of = s->gpu_of;
  for (uint32_t i = b; i < end; i++) {
    bool gone = false; /* a changed slot in e's list held e */
    for (uint32_t j = 0; j < nd; j++)
      gone |= d[j] == list[i];
    if (!gone)
      list[w++] = list[i];
  }
  for (uint32_t j = 0; j < nd; j++) {
    if (n[d[j]] != e)
      continue;
    uint32_t i = w++;
    for (; i > b && list[i - 1] > d[j]; i--)
      list[i] = list[i - 1];
    list[i] = d[j];
  }
  uint32_t ng = 1;
  for (uint32_t j = b + 1; j < end; j++)
    ng += gpu_of[list[j]] != gpu_of[list[j - 1]];
  if (ng != s->ndist[e])
    return false;
  if (ng == 1) {
    s->sgpu[e] = gpu_of[list[b]];
    for (uint32_t j = b; j < end; j++)
      s->rep_pair[list[j]] = NONE;
    return true;
  }
  uint32_t k = multi_index(s, e), q0 = s->pair_start[k], q = q0;
  for (uint32_t j = b; j < end; j++) {
    uint32_t g = gpu_of[list[j]];
    if (j == b || g != gpu_of[list[j - 1]]) {
      s->pair_gpu[q] = g;
      s->pair_cnt[q++] = 0;
    }
    s->pair_cnt[q - 1]++;
    s->rep_pair[list[j]] = q - 1;
  }
  for (uint32_t r = q0; r < q; r++) {
    uint32_t k2 = s->M + r, head = 1 + s->M + s->pair_gpu[r];
    if (s->flow.to[2 * k2] == head)
      continue;
    if (mv->n < MOVED_MAX) {
      mv->edge[mv->n] = k2;
      mv->old[mv->n++] = s->flow.to[2 * k2];
    } else {
      mv->over = true;
    }
    eplb__flow_edge(&s->flow, k2, 1 + k, head);
  }
  return true;
}

/* Up to this many changed slots are updated in place: a search tries a
 * swap after undoing the last one, four slots from the built graph. */
#define UPDATE_MAX 8

bool eplb__split_swap_update(eplb_split_t *s, const eplb_split_problem_t *p) {
  uint32_t E = p->num_experts, G = p->num_gpus, R = p->num_slots;
  if (!s->built || s->E != E || s->G != G || s->R != R ||
      memcmp(s->c_slots, p->slots_per_gpu, (size_t)G * 4))
    return false;
  const uint32_t *c = s->c_phy2log, *n = p->phy2log;
  uint32_t d[UPDATE_MAX], nd = 0;
  for (uint32_t r = 0; r < R; r++)
    if (c[r] != n[r]) {
      if (nd == UPDATE_MAX)
        return false;
      d[nd++] = r;
    }
  /* The experts leaving the changed slots are those arriving: every
   * expert keeps its replica count (and n its valid ids). */
  bool used[UPDATE_MAX] = {false};
  for (uint32_t i = 0; i < nd; i++) {
    uint32_t j = 0;
    while (j < nd && (used[j] || n[d[j]] != c[d[i]]))
      j++;
    if (j == nd)
      return false;
    used[j] = true;
  }
  if (!nd)
    return false;
  s->memo_ok = s->fresh = false;
  moved_t mv = {.n = 0, .over = false};
  for (uint32_t i = 0; i < nd; i++) {
    bool seen = false;
    for (uint32_t j = 0; j < i; j++)
      seen |= c[d[j]] == c[d[i]];
    if (!seen && !relist(s, c[d[i]], n, d, nd, &mv)) {
      s->built = false;
      return false;
    }
  }
  if (mv.over) {
    eplb__flow_build(&s->flow, s->M + G + 2, s->M + s->P + G);
  } else {
    uint32_t scratch[MOVED_MAX];
    eplb__flow_move_heads(&s->flow, mv.edge, mv.old, mv.n, scratch);
  }
  for (uint32_t i = 0; i < nd; i++) {
    s->hash_raw += eplb__split_slot_hash(d[i], n[d[i]]) - eplb__split_slot_hash(d[i], c[d[i]]);
    s->c_phy2log[d[i]] = n[d[i]];
  }
  s->hash = s->hash_raw ? s->hash_raw : 1;
  return true;
}
