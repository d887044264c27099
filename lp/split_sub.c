/* lp/split_sub.c — a T*-only solve's Newton steps after the first, on the
 * first cut's part of the graph.
 *
 * Newton's caps rise, and the source sides of the minimal minimum cuts of a
 * parametric flow whose sink capacities rise with the cap are nested: every
 * later set lies inside the first cut's experts A and GPUs N(A). A step
 * solved on that part (A's multi experts, their pairs, N(A) with its fixed
 * loads) has the same minimal cut in exact arithmetic as one on the whole
 * graph. On the whole graph a step raised every GPU's cap and routed the
 * difference through the flow of the step before: slivers for every GPU of
 * the cut along long paths, 0.43 M instructions a step at 1,024 GPUs. A
 * flow from zero on the cut's part, a fifth to a third of the graph that
 * shrinks with every step, costs about 0.3 M. The sets' ratios are summed in
 * the order eplb__split_cut_ratio sums them, so the same sets give the same
 * T to the bit.
 *
 * A step also looks at the cut's connected parts: each is a set, so the
 * best part's ratio is a lower bound on T* too, often above the cut's (a
 * weighted mean of its parts), and Newton jumps to it. At 512 GPUs most
 * first cuts are a few dense regions apart, and Newton from the mean took a
 * step per region. */
#include "lp/lp.h"

#include <math.h>
#include <string.h>

/* How far below the best part's ratio b a step jumps to: at b itself the
 * part would fit its cap and the step would end the search with a set
 * below T*. Far above the rounding of a cut's deficit. Where another set's
 * ratio lies within it below b, the step's cut takes that set in too and
 * Newton goes on from the cut's ratio: the answer does not depend on it. */
#define JUMP 1e-9

/* The lists grown to M multi experts and G GPUs (G + 1: pn also counts
 * GPU counts 0..G). */
static eplb_status_t reserve(eplb__split_sub_t *sub, uint32_t M, uint32_t G) {
  const eplb__array_ref_t by_k[] = {{(void **)&sub->k, sizeof *sub->k},
                                    {(void **)&sub->order, sizeof *sub->order}};
  const eplb__array_ref_t by_g[] = {{(void **)&sub->g, sizeof *sub->g},
                                    {(void **)&sub->part, sizeof *sub->part},
                                    {(void **)&sub->pn, sizeof *sub->pn},
                                    {(void **)&sub->pw, sizeof *sub->pw}};
  if (eplb__grow_all(&sub->cap_k, M ? M : 1, by_k, 2) ||
      eplb__grow_all(&sub->cap_g, (size_t)G + 1, by_g, 4))
    return EPLB_ENOMEM;
  return EPLB_OK;
}

static uint32_t find(uint32_t *part, uint32_t j) {
  while (part[j] != j)
    j = part[j] = part[part[j]];
  return j;
}

/* The largest ratio among the connected parts of the kept experts and
 * GPUs (experts joined through the GPUs they share), by union-find over
 * the GPUs. */
static double best_part(const eplb_split_t *s, eplb__split_sub_t *sub, const double *loads) {
  uint32_t *part = sub->part, *pn = sub->pn;
  double *pw = sub->pw, best = 0.0;
  for (uint32_t x = 0; x < sub->nga; x++) {
    uint32_t g = sub->g[x];
    part[g] = g;
    pn[g] = 0;
    pw[g] = s->base[g];
  }
  for (uint32_t y = 0; y < sub->na; y++) {
    uint32_t k = sub->k[y], q0 = s->pair_start[k], root = find(part, s->pair_gpu[q0]);
    for (uint32_t q = q0 + 1; q < s->pair_start[k + 1]; q++) {
      uint32_t r = find(part, s->pair_gpu[q]);
      if (r != root) {
        part[r] = root;
        pw[root] += pw[r];
      }
    }
    pw[root] += loads[s->multi[k]];
  }
  for (uint32_t x = 0; x < sub->nga; x++)
    pn[find(part, sub->g[x])]++;
  for (uint32_t x = 0; x < sub->nga; x++) {
    uint32_t g = sub->g[x];
    if (part[g] == g && pw[g] / pn[g] > best)
      best = pw[g] / pn[g];
  }
  return best;
}

void eplb__split_sub_free(eplb__split_sub_t *sub) {
  void *arrays[] = {sub->k, sub->order, sub->g, sub->part, sub->pn, sub->pw};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
    eplb__free(arrays[i]);
  memset(sub, 0, sizeof *sub);
}

/* The flow from zero on the kept experts and GPUs, each GPU capped at cap;
 * returns it. Greedy two-arc paths first, as eplb__split_run_flow, but the
 * experts on fewer GPUs first (the order of the first cut's experts by GPU
 * count): they have the fewest ways around a full GPU, and Dinic then had
 * less to reroute (1.5% of balanced's instructions at 512 and 1,024 GPUs).
 * Any maximum flow will do here: only the cut is read. */
static double sub_flow(eplb_split_t *s, eplb__split_sub_t *sub, const double *loads, double cap,
                       double eps) {
  uint32_t M = s->M, P = s->P;
  double *res = s->flow.res, total = 0.0;
  for (uint32_t y = 0; y < sub->na; y++) {
    uint32_t k = sub->k[y];
    res[2 * k] = loads[s->multi[k]];
    res[2 * k + 1] = 0.0;
    for (uint32_t q = s->pair_start[k]; q < s->pair_start[k + 1]; q++) {
      res[2 * (M + q)] = HUGE_VAL;
      res[2 * (M + q) + 1] = 0.0;
    }
  }
  for (uint32_t x = 0; x < sub->nga; x++) {
    uint32_t g = sub->g[x];
    double c = cap - s->base[g];
    res[2 * (M + P + g)] = c > 0 ? c : 0.0;
    res[2 * (M + P + g) + 1] = 0.0;
  }
  for (uint32_t y = 0; y < sub->norder; y++) {
    uint32_t k = sub->order[y]; /* a dropped expert has no load left */
    for (uint32_t q = s->pair_start[k]; q < s->pair_start[k + 1] && res[2 * k] > eps; q++) {
      uint32_t sa = 2 * (M + P + s->pair_gpu[q]);
      double d = res[2 * k] < res[sa] ? res[2 * k] : res[sa];
      if (!(d > eps))
        continue;
      res[2 * k] -= d;
      res[2 * k + 1] += d;
      res[2 * (M + q) + 1] += d;
      res[sa] -= d;
      res[sa + 1] += d;
      total += d;
    }
  }
  return total + eplb__flow_run(&s->flow, 0, M + s->G + 1, eps);
}

/* The cut of the last flow within the kept nodes: its ratio, summed as
 * eplb__split_cut_ratio sums it (experts, then the GPUs' fixed loads, each
 * ascending). With keep the kept lists become the cut's, and the experts
 * it leaves out lose their source arcs. Then no later search reaches them
 * or their GPUs: a kept expert's GPUs are all kept, and a kept GPU has no
 * arc back to a dropped expert (the cut left none with residual), so the
 * steps run on the handle's graph as it is, without building a subgraph.
 * The flows left on the dropped part are never read. */
static double sub_cut(eplb_split_t *s, eplb__split_sub_t *sub, const double *loads, bool keep) {
  const int32_t *level = s->flow.level;
  double *res = s->flow.res, w = 0.0;
  uint32_t M = s->M, na = 0, nga = 0;
  for (uint32_t y = 0; y < sub->na; y++) {
    uint32_t k = sub->k[y];
    if (level[1 + k] >= 0) {
      w += loads[s->multi[k]];
      if (keep)
        sub->k[na] = k;
      na++;
    } else if (keep) {
      res[2 * k] = 0.0;
    }
  }
  for (uint32_t x = 0; x < sub->nga; x++) {
    uint32_t g = sub->g[x];
    if (level[1 + M + g] >= 0) {
      w += s->base[g];
      if (keep)
        sub->g[nga] = g;
      nga++;
    }
  }
  if (keep) {
    sub->na = na;
    sub->nga = nga;
  }
  return nga ? w / nga : 0.0;
}

eplb_status_t eplb__split_newton_sub(eplb_split_t *s, const double *loads, double eps, double dtol,
                                     double slack, uint32_t *iterations, uint32_t max_iterations,
                                     double *t) {
  eplb__split_sub_t *sub = &s->sub;
  uint32_t M = s->M, G = s->G, E = s->E;
  if (reserve(sub, M, G))
    return eplb__error(EPLB_ENOMEM, "lp", "split: out of memory for %u experts", E);
  /* The arena's flow is the steps' from here on: no memo of it, and no
   * snapshot (see eplb__split_tstar). */
  s->memo_ok = s->fresh = s->base_ok = false;
  sub->na = M;
  sub->nga = G;
  for (uint32_t k = 0; k < M; k++)
    sub->k[k] = k;
  for (uint32_t g = 0; g < G; g++)
    sub->g[g] = g;
  sub_cut(s, sub, loads, true);
  /* By GPU count, then k (a counting sort: pn [G + 1] is free here). */
  uint32_t *cnt = sub->pn, maxd = 0;
  for (uint32_t y = 0; y < sub->na; y++) {
    uint32_t d = s->pair_start[sub->k[y] + 1] - s->pair_start[sub->k[y]];
    maxd = d > maxd ? d : maxd;
  }
  memset(cnt, 0, ((size_t)maxd + 1) * sizeof *cnt);
  for (uint32_t y = 0; y < sub->na; y++)
    cnt[s->pair_start[sub->k[y] + 1] - s->pair_start[sub->k[y]]]++;
  for (uint32_t d = 0, at = 0; d <= maxd; d++) {
    uint32_t c = cnt[d];
    cnt[d] = at;
    at += c;
  }
  for (uint32_t y = 0; y < sub->na; y++)
    sub->order[cnt[s->pair_start[sub->k[y] + 1] - s->pair_start[sub->k[y]]]++] = sub->k[y];
  sub->norder = sub->na;
  for (bool jump = true;;) {
    if (++*iterations > max_iterations)
      return eplb__error(EPLB_ESOLVER, "lp", "split: no convergence after %u max-flows (T = %.17g)",
                         max_iterations, *t);
    double best = jump ? best_part(s, sub, loads) : 0.0, b = best * (1 - JUMP);
    if (best >= s->stop) {
      *t = best;
      s->stopped = true;
      return EPLB_OK;
    }
    bool jumped = b > *t;
    double cap = (jumped ? b : *t) * (1.0 + slack), wm = 0.0;
    for (uint32_t y = 0; y < sub->na; y++)
      wm += loads[s->multi[sub->k[y]]];
    double flow = sub_flow(s, sub, loads, cap, eps);
    double r = wm - flow > dtol ? sub_cut(s, sub, loads, false) : -1.0;
    if (!(r > cap) && jumped) {
      jump = false; /* rounding: step again from the cut's own ratio */
      continue;
    }
    if (!(r > cap))
      break; /* saturated, or rounding rather than a violated set */
    jump = true;
    *t = r;
    if (r >= s->stop) {
      s->stopped = true;
      return EPLB_OK;
    }
    sub_cut(s, sub, loads, true);
  }
  /* The set of the last cut that was violated: its multi experts and the
   * one-GPU experts on its GPUs (as newton marks them). Locals: a byte
   * stored through s->set may alias s itself. */
  uint8_t *set = s->set, *gmark = s->gmark;
  const uint32_t *sgpu = s->sgpu, *multi = s->multi;
  memset(gmark, 0, G);
  for (uint32_t x = 0; x < sub->nga; x++)
    gmark[sub->g[x]] = 1;
  memset(set, 0, E);
  for (uint32_t y = 0; y < sub->na; y++)
    set[multi[sub->k[y]]] = 1;
  for (uint32_t e = 0; e < E; e++)
    if (sgpu[e] != UINT32_MAX)
      set[e] = gmark[sgpu[e]];
  return EPLB_OK;
}
