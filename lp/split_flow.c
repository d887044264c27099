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
