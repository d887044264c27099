/* lp/split_flow.c — exact split solver: Newton (Dinkelbach) iterations on T,
 * one max-flow each.
 *
 * Experts whose replicas all sit on one GPU have no choice: their load is a
 * fixed base b_g of that GPU. Only the other experts ("multi") enter the flow
 * graph: source -> expert (cap w_e) -> each distinct GPU of the expert (inf)
 * -> sink (cap T - b_g). T starts at a lower bound that is the ratio of a known
 * set (all experts, one GPU's fixed experts, one expert, or the previous
 * batch's bottleneck). If the flow does not saturate the sources, the source
 * side of the minimum cut is a set A' with w(A') + b(N(A')) > T |N(A')|; its
 * ratio is the next T. Each T is the ratio of an actual set, so the last one is
 * T* and its set is the certificate. At DeepSeek-V3 sizes only the few
 * replicated experts are in the graph, hence microseconds. */
#include "lp/lp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Relative slack on GPU capacities in fractional mode: lets rounding in the
 * flow's sums not masquerade as infeasibility; stays far below the 1e-12
 * relative accuracy promised for gpu_load. */
#define SPLIT_SLACK 1e-13
#define SPLIT_MAX_ITER 1000
#define NONE UINT32_MAX

enum cert_kind { CERT_ALL, CERT_GPU, CERT_EXPERT, CERT_SET };

void eplb_split_options_default(eplb_split_options_t *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->mode = EPLB_SPLIT_FRACTIONAL;
  o->warm_start = 1;
  o->glpk_time_limit_s = 0.0;
  o->threads = 1;
}

const eplb_split_options_t *eplb__split_options(const eplb_split_t *s) { return &s->opt; }

eplb_status_t eplb_split_create(const eplb_split_options_t *options, eplb_split_t **out) {
  eplb_split_options_t o;
  if (!out)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: out is NULL");
  *out = NULL;
  if (options)
    o = *options;
  else
    eplb_split_options_default(&o);
  if (o.mode != EPLB_SPLIT_FRACTIONAL && o.mode != EPLB_SPLIT_INTEGER)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: mode %d is not a split mode", (int)o.mode);
  if (o.warm_start != 0 && o.warm_start != 1)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: warm_start = %d: must be 0 or 1",
                       o.warm_start);
  if (!(o.glpk_time_limit_s >= 0))
    return eplb__error(EPLB_EINVAL, "lp", "split_create: glpk_time_limit_s = %g: must be >= 0",
                       o.glpk_time_limit_s);
  if (o.threads > EPLB_SPLIT_MAX_THREADS)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: threads = %u: must be 0..%u", o.threads,
                       EPLB_SPLIT_MAX_THREADS);
  eplb_split_t *s = eplb__calloc(1, sizeof *s);
  if (!s)
    return eplb__error(EPLB_ENOMEM, "lp", "split_create: out of memory");
  s->opt = o;
  *out = s;
  return EPLB_OK;
}

static void free_arrays(eplb_split_t *s) {
  void *arrays[] = {s->c_phy2log, s->c_slots,  s->count,    s->rep_start, s->rep_list,
                    s->gpu_of,    s->ndist,    s->sgpu,     s->multi,     s->pair_start,
                    s->pair_gpu,  s->pair_cnt, s->rep_pair, s->base,      s->gin,
                    s->pamt,      s->gmark,    s->set,      s->memo_loads};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
    eplb__free(arrays[i]);
}

void eplb_split_destroy(eplb_split_t *s) {
  if (!s)
    return;
  free_arrays(s);
  eplb__flow_free(&s->flow);
  eplb__split_snap_free(&s->snap);
  eplb__split_snap_free(&s->low);
  eplb__split_sub_free(&s->sub);
  for (size_t i = 0; i < s->num_warm; i++)
    eplb__free(s->warm[i].mask);
  eplb__free(s->warm);
  eplb__split_local_free(s->local);
  eplb__split_mask_free(s->mask);
  for (uint32_t i = 0; i < s->num_kids; i++)
    eplb_split_destroy(s->kids[i]);
  eplb__free(s->kids);
  eplb__free(s);
}

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

void eplb_split_reset(eplb_split_t *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->num_warm; i++)
    s->warm[i].hash = 0;
  /* Probes then start from this call's solves only: no snapshot of the
   * last one's flow either (it depends on which layer the handle solved). */
  s->snap.ok = s->low.ok = false;
  s->fresh = false;
  s->base_ok = false;
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

eplb_status_t eplb__split_warm_slot(eplb_split_t *s, size_t index, uint32_t E,
                                    eplb__warm_state_t **out) {
  *out = NULL;
  if (index >= s->num_warm) {
    eplb__warm_state_t *w = eplb__realloc_array(s->warm, index + 1, sizeof *w);
    if (!w)
      return EPLB_ENOMEM;
    memset(w + s->num_warm, 0, (index + 1 - s->num_warm) * sizeof *w);
    s->warm = w;
    s->num_warm = index + 1;
  }
  eplb__warm_state_t *w = &s->warm[index];
  if (eplb__grow((void **)&w->mask, &w->cap, E, 1)) {
    w->hash = 0;
    return EPLB_ENOMEM;
  }
  *out = w;
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

/* Raises the GPU->sink capacities of the flow in the arena from cap_t to
 * cap_t2 (>= cap_t) and augments: the flow at cap_t stays feasible, so only
 * what the extra capacity lets through is searched for. Returns the flow
 * added. */
static double raise_flow(eplb_split_t *s, double cap_t, double cap_t2, double eps) {
  eplb__flow_t *f = &s->flow;
  uint32_t M = s->M, P = s->P;
  s->memo_ok = s->fresh = false;
  s->base_ok = false;
  for (uint32_t g = 0; g < s->G; g++) {
    double c = cap_t - s->base[g], c2 = cap_t2 - s->base[g];
    f->res[2 * (M + P + g)] += (c2 > 0 ? c2 : 0.0) - (c > 0 ? c : 0.0);
  }
  return eplb__flow_run(f, 0, M + s->G + 1, eps);
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

/* eplb__split_ratio on the handle's graph, the same value and marks: the
 * set's GPUs come from its experts' replica lists rather than a pass over
 * every slot, and eight experts at a time are skipped where the mask is 0
 * (a set is usually a few experts). w sums in expert order, as there. */
static double set_ratio(const eplb_split_t *s, const double *loads, const uint8_t *set,
                        uint8_t *gmark, uint32_t *na, uint32_t *ng) {
  const uint32_t *rep_start = s->rep_start, *rep_list = s->rep_list, *gpu_of = s->gpu_of;
  uint32_t E = s->E, a = 0, b = 0;
  double w = 0.0;
  memset(gmark, 0, s->G);
  for (uint32_t e0 = 0; e0 < E; e0 += 8) {
    uint32_t end = E - e0 < 8 ? E : e0 + 8;
    uint64_t chunk = 1;
    if (end - e0 == 8)
      memcpy(&chunk, set + e0, 8);
    for (uint32_t e = e0; chunk && e < end; e++) {
      if (!set[e])
        continue;
      w += loads[e];
      a++;
      for (uint32_t i = rep_start[e]; i < rep_start[e + 1]; i++) {
        uint32_t g = gpu_of[rep_list[i]];
        b += !gmark[g];
        gmark[g] = 1;
      }
    }
  }
  *na = a;
  *ng = b;
  return b ? w / (double)b : 0.0;
}

/* eplb__split_certificate for s->set, by set_ratio. */
static void certify(eplb_split_t *s, const double *loads, eplb_split_result_t *out) {
  uint32_t na, ng;
  out->t_star = set_ratio(s, loads, s->set, s->gmark, &na, &ng);
  out->num_bottleneck_experts = na;
  out->num_bottleneck_gpus = ng;
  if (out->bottleneck_experts)
    memcpy(out->bottleneck_experts, s->set, s->E);
  if (out->bottleneck_gpus)
    memcpy(out->bottleneck_gpus, s->gmark, s->G);
}

/* Lower bound: the best ratio among cheap known sets (all GPUs, one GPU's
 * fixed experts, one expert over its GPUs, the warm-start set); *kind and
 * *which name the set attaining it. */
static double start_bound(eplb_split_t *s, const double *loads, const eplb__warm_state_t *warm,
                          double total, enum cert_kind *kind, uint32_t *which) {
  uint32_t E = s->E, G = s->G, M = s->M;
  double t = total / s->Gs;
  for (uint32_t g = 0; g < G; g++)
    if (s->base[g] > t) {
      t = s->base[g];
      *kind = CERT_GPU;
      *which = g;
    }
  for (uint32_t k = 0; k < M; k++) {
    uint32_t e = s->multi[k];
    double r = loads[e] / s->ndist[e];
    if (r > t) {
      t = r;
      *kind = CERT_EXPERT;
      *which = e;
    }
  }
  if (warm && warm->hash == s->hash && warm->num_experts == E) {
    uint32_t na, ng; /* gmark is scratch until the certificate */
    double r = set_ratio(s, loads, warm->mask, s->gmark, &na, &ng);
    if (r > t) {
      t = r;
      *kind = CERT_SET;
      memcpy(s->set, warm->mask, E);
    }
  }
  return t;
}

/* Newton's iterations from the bound *t up to T*: one max-flow per T, the
 * next T the ratio of the minimum cut's set (s->set, *kind = CERT_SET).
 * Runs in real arithmetic in both modes; integer mode adds one integral
 * flow at ceil(T*) afterwards. */
static eplb_status_t newton(eplb_split_t *s, const double *loads, double wm, double wmax,
                            eplb_split_result_t *out, double *t, enum cert_kind *kind,
                            bool canonical) {
  uint32_t E = s->E, G = s->G, M = s->M;
  double eps = 1e-15 * wmax, slack = SPLIT_SLACK;
  double dtol = (double)(M + G + 1) * eps;
  /* Only the last T's flow is written out, and it must be the flow of a
   * run from zero (the shares do not depend on how T was reached). The
   * earlier T's only need the minimum cut, and the source side of the
   * minimal minimum cut (what the residual reaches) is the same for every
   * maximum flow: so after the first run each T raises the sink capacities
   * of the previous flow and augments (a few paths instead of a flow from
   * zero), and a T that ends the loop is run again from zero, whose result
   * decides as before (unless !canonical: then any maximum flow's cut
   * decides, which only T* and the set need). */
  double flow = 0.0, cap_prev = 0.0;
  bool fresh = false;
  for (;;) {
    if (++out->iterations > SPLIT_MAX_ITER)
      return eplb__error(EPLB_ESOLVER, "lp", "split: no convergence after %d max-flows (T = %.17g)",
                         SPLIT_MAX_ITER, *t);
    double cap = *t * (1.0 + slack);
    if (out->iterations == 1 && !canonical) {
      /* The last T*-only solve's first flow, at a cap at most this one's,
       * on a placement a swap or two away: mapped here, it keeps nearly
       * all of its routing (the cap does not fall, so only the swapped
       * replicas' GPUs can be over their room), where a run from zero
       * redoes it; a flow from above the cap (a solve's at T*) had every
       * full GPU give back a part. In exact arithmetic the cut does not
       * depend on the flow it is read from. */
      if (s->low.ok && s->low.e == E && s->low.cap <= cap)
        flow = eplb__split_warm_flow(s, &s->low, loads, cap, eps);
      else
        flow = eplb__split_run_flow(s, loads, cap, eps);
      eplb__split_snap_take(s, &s->low, loads, cap);
    } else if (out->iterations == 1) {
      flow = eplb__split_run_flow(s, loads, cap, eps);
      fresh = true;
    } else {
      flow += raise_flow(s, cap_prev, cap, eps);
      fresh = false;
    }
    cap_prev = cap;
    double r = 0.0;
    for (int pass = 0; pass < 2; pass++) {
      r = wm - flow <= dtol ? -1.0 : eplb__split_cut_ratio(s, loads);
      if (r > cap || fresh || !canonical)
        break;
      out->iterations++;
      flow = eplb__split_run_flow(s, loads, cap, eps);
      fresh = true;
    }
    if (!(r > cap))
      return EPLB_OK; /* saturated, or rounding rather than a violated set */
    *t = r;
    *kind = CERT_SET;
    if (!canonical && r >= s->stop) {
      s->stopped = true;
      return EPLB_OK;
    }
    if (!canonical) {
      s->sub_used = true;
      return eplb__split_newton_sub(s, loads, eps, dtol, slack, &out->iterations, SPLIT_MAX_ITER,
                                    t);
    }
    /* Through locals: a byte stored through s->set may alias s itself. */
    const int32_t *level = s->flow.level;
    const uint32_t *sgpu = s->sgpu;
    uint8_t *set = s->set;
    memset(set, 0, E);
    for (uint32_t k = 0; k < M; k++)
      if (level[1 + k] >= 0)
        set[s->multi[k]] = 1;
    for (uint32_t e = 0; e < E; e++)
      if (sgpu[e] != NONE)
        set[e] = level[1 + M + sgpu[e]] >= 0;
  }
}

/* The certificate s->set of the set `kind` names (CERT_SET: already
 * there), T* recomputed from it in a canonical order, and the warm-start
 * state (or NULL) set to it. */
static void finish_set(eplb_split_t *s, const double *loads, double total, enum cert_kind kind,
                       uint32_t which, eplb_split_result_t *out, eplb__warm_state_t *warm) {
  uint32_t E = s->E;
  if (total <= 0)
    memset(s->set, 0, E);
  else if (kind == CERT_ALL)
    memset(s->set, 1, E);
  else if (kind == CERT_GPU) {
    const uint32_t *sgpu = s->sgpu; /* locals: see newton */
    uint8_t *set = s->set;
    for (uint32_t e = 0; e < E; e++)
      set[e] = sgpu[e] == which;
  } else if (kind == CERT_EXPERT) {
    memset(s->set, 0, E);
    s->set[which] = 1;
  }
  certify(s, loads, out);
  if (warm) {
    memcpy(warm->mask, s->set, E);
    warm->hash = total > 0 ? s->hash : 0;
    warm->num_experts = E;
  }
}

/* A solve of a checked problem; out->share may be NULL (loads only). */
static eplb_status_t solve(eplb_split_t *s, const eplb_split_problem_t *p, const double *loads,
                           eplb_split_result_t *out, size_t warm_index) {
  bool integer = s->opt.mode == EPLB_SPLIT_INTEGER;
  eplb_status_t st = EPLB_OK;
  if (!eplb__split_same_placement(s, p) && (st = eplb__split_build(s, p)))
    return st;
  eplb__warm_state_t *warm = NULL;
  if (s->opt.warm_start && eplb__split_warm_slot(s, warm_index, s->E, &warm))
    return eplb__error(EPLB_ENOMEM, "lp", "split: out of memory for warm-start state");

  double total, wmax, wm;
  eplb__split_set_base(s, loads, &total, &wmax, &wm);
  s->wmax = wmax;
  out->iterations = 0;

  enum cert_kind kind = CERT_ALL;
  uint32_t which = 0;
  double t = start_bound(s, loads, warm, total, &kind, &which);
  if (total > 0 && (st = newton(s, loads, wm, wmax, out, &t, &kind, true)))
    return st;
  finish_set(s, loads, total, kind, which, out, warm);

  if (integer && total > 0) {
    double cap_t = ceil(out->t_star);
    out->iterations++;
    double flow = eplb__split_run_flow(s, loads, cap_t, 0.5);
    if (flow != wm)
      return eplb__error(EPLB_ESOLVER, "lp", "split: integer flow %.17g of %.17g at T = %.17g",
                         flow, wm, cap_t);
  } else if (total <= 0) {
    for (uint32_t a = 0; a < s->flow.m; a++)
      s->flow.res[a] = 0.0;
    s->memo_ok = false;
  }
  eplb__split_write(s, loads, integer, out);
  s->fresh = total > 0;
  s->base_ok = false;
  s->fresh_cap = s->memo_ok ? s->memo_cap : 0.0;
  return EPLB_OK;
}

eplb_status_t eplb__split_solve_one(eplb_split_t *s, const eplb_split_problem_t *p,
                                    const double *loads, eplb_split_result_t *out,
                                    size_t warm_index) {
  eplb_status_t st = eplb__split_check(p, loads, out, s->opt.mode == EPLB_SPLIT_INTEGER);
  return st ? st : solve(s, p, loads, out, warm_index);
}

eplb_status_t eplb__split_solve_unchecked(eplb_split_t *s, const eplb_split_problem_t *p,
                                          const double *loads, eplb_split_result_t *out) {
  return solve(s, p, loads, out, 0);
}

eplb_status_t eplb__split_tstar(eplb_split_t *s, const eplb_split_problem_t *p, const double *loads,
                                const uint8_t *const *hints, const double *hint_ratio,
                                uint32_t nhints, double stop, double *t_star, uint8_t *experts,
                                uint8_t *gpus, double *gpu_load) {
  eplb_status_t st = EPLB_OK;
  if (!eplb__split_same_placement(s, p) && (st = eplb__split_build(s, p)))
    return st;
  eplb__warm_state_t *warm = NULL;
  if (s->opt.warm_start && eplb__split_warm_slot(s, 0, s->E, &warm))
    return eplb__error(EPLB_ENOMEM, "lp", "split: out of memory for warm-start state");
  uint32_t E = s->E, M = s->M, P = s->P;
  double total, wmax, wm;
  eplb__split_set_base(s, loads, &total, &wmax, &wm);
  s->wmax = wmax;
  eplb_split_result_t out = {.bottleneck_experts = experts, .bottleneck_gpus = gpus};
  enum cert_kind kind = CERT_ALL;
  uint32_t which = 0;
  double t = start_bound(s, loads, warm, total, &kind, &which);
  for (uint32_t i = 0; i < nhints; i++) {
    uint32_t na, ng;
    const uint8_t *h = hints[i];
    double r = hint_ratio ? hint_ratio[i] : set_ratio(s, loads, h, s->gmark, &na, &ng);
    if (r > t) {
      t = r;
      kind = CERT_SET;
      memcpy(s->set, h, E);
    }
  }
  /* A set found at or above stop ends the search: its ratio, a lower
   * bound on T*, is the answer. The margin keeps the answer's side of stop
   * that of T* (the set's ratio summed in another order, or T* itself,
   * differ from it by rounding only). */
  s->sub_used = s->stopped = false;
  s->stop = stop * (1 + 1e-12);
  if (total > 0 && t >= s->stop)
    s->stopped = true;
  else if (total > 0 && (st = newton(s, loads, wm, wmax, &out, &t, &kind, false)))
    return st;
  if (s->stopped) {
    *t_star = t;
    if (warm)
      warm->hash = 0; /* no certificate for p */
    s->fresh = false;
    return EPLB_OK;
  }
  finish_set(s, loads, total, kind, which, &out, warm);
  *t_star = out.t_star;
  /* After steps on a cut's part the arena holds a partial flow: a flow at
   * T* only when its loads are asked for, and no snapshot of it (the
   * probes keep the last solve's). */
  if (gpu_load && s->sub_used)
    eplb__split_run_flow(s, loads, t * (1.0 + SPLIT_SLACK), 1e-15 * wmax);
  if (gpu_load)
    for (uint32_t g = 0; g < s->G; g++)
      gpu_load[g] = s->base[g] + (total > 0 ? s->flow.res[2 * (M + P + g) + 1] : 0.0);
  s->fresh = total > 0 && (!s->sub_used || gpu_load);
  s->base_ok = false;
  s->fresh_cap = t * (1.0 + SPLIT_SLACK);
  return EPLB_OK;
}

eplb_status_t eplb_split_solve(eplb_split_t *s, const eplb_split_problem_t *p, const double *loads,
                               eplb_split_result_t *out) {
  if (!s)
    return eplb__error(EPLB_EINVAL, "lp", "split_solve: handle is NULL");
  return eplb__split_solve_one(s, p, loads, out, 0);
}
