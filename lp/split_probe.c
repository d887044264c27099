/* lp/split_probe.c — one max-flow instead of a solve: "is T* of this
 * placement above cap?", cold (eplb__split_above) or warm-started from the
 * flow of the last solved placement (eplb__split_above_warm).
 *
 * The planner's local searches probe placements one swap away from the one
 * they just solved. From zero, a probe's flow redoes what the solved
 * placement's flow already routed: at hundreds of GPUs that was half of the
 * balanced policy's instructions. Mapped onto the probed graph by (expert,
 * GPU), the solved flow stays a flow once it is cut back to the new loads
 * and capacities; only the two changed replicas' tokens and the cuts are left
 * for Dinic, whose searches then stay near them. */
#include "lp/lp.h"

#include <math.h>
#include <string.h>

#define NONE UINT32_MAX

/* What both probes do first: the graph built for p, the fixed loads set.
 * *go false when the answer is already known: no load (not above), or one
 * GPU's fixed experts alone above cap (*above). eps: the solver's own
 * tolerance (a deficit it would take for rounding is not a violated set
 * here either); wm: the load to route. */
static eplb_status_t probe_start(eplb_split_t *s, const eplb_split_problem_t *p,
                                 const double *loads, double cap, bool *above, bool *go,
                                 double *eps, double *wm) {
  *go = false;
  eplb_status_t st = EPLB_OK;
  if (!eplb__split_same_placement(s, p) && (st = eplb__split_build(s, p)))
    return st;
  double total, wmax;
  eplb__split_set_base(s, loads, &total, &wmax, wm);
  if (!(total > 0))
    return EPLB_OK;
  *eps = 1e-15 * wmax;
  for (uint32_t g = 0; g < s->G; g++)
    if (s->base[g] > cap) {
      *above = true;
      return EPLB_OK;
    }
  *go = true;
  return EPLB_OK;
}

eplb_status_t eplb__split_above(eplb_split_t *s, const eplb_split_problem_t *p, const double *loads,
                                double cap, bool *above) {
  *above = false;
  /* No eplb__split_check (a fifth of a probe at 288 slots): the caller's
   * problem is valid (see lp.h); build still rejects an expert without a
   * replica. */
  double eps, wm;
  bool go;
  eplb_status_t st = probe_start(s, p, loads, cap, above, &go, &eps, &wm);
  if (st || !go)
    return st;
  uint32_t M = s->M, G = s->G;
  double flow = eplb__split_run_flow(s, loads, cap, eps);
  if (wm - flow <= (double)(M + G + 1) * eps)
    return EPLB_OK;
  *above = eplb__split_cut_ratio(s, loads) > cap;
  return EPLB_OK;
}

bool eplb__split_snap_take(eplb_split_t *s, eplb__flow_snap_t *snap, const double *loads,
                           double cap) {
  uint32_t E = s->E, M = s->M, P = s->P;
  const eplb__array_ref_t by_e[] = {
      {(void **)&snap->k, 4}, {(void **)&snap->pstart, 4}, {(void **)&snap->loads, 8}};
  const eplb__array_ref_t by_r[] = {{(void **)&snap->pgpu, 4}, {(void **)&snap->pflow, 8}};
  const eplb__array_ref_t by_g[] = {{(void **)&snap->base, 8}};
  snap->ok = false;
  if (eplb__grow_all(&snap->cap_e, (size_t)E + 1, by_e, 3) ||
      eplb__grow_all(&snap->cap_r, P ? P : 1, by_r, 2) ||
      eplb__grow_all(&snap->cap_g, s->G ? s->G : 1, by_g, 1))
    return false;
  memcpy(snap->base, s->base, (size_t)s->G * sizeof *snap->base);
  memcpy(snap->loads, loads, (size_t)E * sizeof *loads);
  for (uint32_t e = 0; e < E; e++)
    snap->k[e] = NONE;
  for (uint32_t k = 0; k < M; k++) {
    snap->k[s->multi[k]] = k;
    snap->pstart[k] = s->pair_start[k];
  }
  snap->pstart[M] = P;
  const double *res = s->flow.res;
  for (uint32_t q = 0; q < P; q++) {
    snap->pgpu[q] = s->pair_gpu[q];
    snap->pflow[q] = res[2 * (M + q) + 1];
  }
  snap->e = E;
  snap->cap = cap;
  snap->ok = true;
  return true;
}

void eplb__split_snap_free(eplb__flow_snap_t *snap) {
  eplb__free(snap->k);
  eplb__free(snap->pstart);
  eplb__free(snap->pgpu);
  eplb__free(snap->pflow);
  eplb__free(snap->base);
  eplb__free(snap->loads);
  memset(snap, 0, sizeof *snap);
}

/* Sets residual a to v, first recording it in the arena's undo log when
 * log. */
static inline void set_res(eplb__flow_t *f, uint32_t a, double v, bool log) {
  if (log)
    eplb__flow_log(f, a);
  f->res[a] = v;
}

/* Expert k's pairs get the flows of the snapshot's pairs o .. oe (both
 * lists sorted by GPU; a pair the snapshot lacks carries 0), cut back to
 * its load w, and its source arcs the rest; returns what it sends. The
 * forward pair arcs are set unlogged: they are infinite before and after
 * any run. */
static inline __attribute__((always_inline)) double map_expert(eplb_split_t *s,
                                                               const eplb__flow_snap_t *snap,
                                                               uint32_t k, uint32_t o, uint32_t oe,
                                                               double w, bool log) {
  eplb__flow_t *f = &s->flow;
  uint32_t M = s->M, q0 = s->pair_start[k], q1 = s->pair_start[k + 1];
  double sx = 0.0;
  /* An expert the swaps left alone has the same GPUs in both: its flows
   * are copied in order, without the merge's searches. */
  bool same = oe - o == q1 - q0;
  for (uint32_t j = 0; same && j < q1 - q0; j++)
    same = snap->pgpu[o + j] == s->pair_gpu[q0 + j];
  for (uint32_t q = q0; same && q < q1; q++) {
    double x = snap->pflow[o + (q - q0)];
    f->res[2 * (M + q)] = HUGE_VAL;
    set_res(f, 2 * (M + q) + 1, x, log);
    sx += x;
  }
  for (uint32_t q = q0; !same && q < q1; q++) {
    uint32_t g = s->pair_gpu[q];
    while (o < oe && snap->pgpu[o] < g)
      o++;
    double x = o < oe && snap->pgpu[o] == g ? snap->pflow[o] : 0.0;
    f->res[2 * (M + q)] = HUGE_VAL;
    set_res(f, 2 * (M + q) + 1, x, log);
    sx += x;
  }
  if (sx > w) {
    double over = sx - w;
    sx = 0.0;
    for (uint32_t q = q1; q-- > q0;) {
      double x = f->res[2 * (M + q) + 1], d = x < over ? x : over;
      set_res(f, 2 * (M + q) + 1, x - d, log);
      over -= d;
      sx += x - d;
    }
  }
  set_res(f, 2 * k, w - sx > 0 ? w - sx : 0.0, log);
  set_res(f, 2 * k + 1, sx, log);
  return sx;
}

/* GPU g, receiving in from its pairs, fitted to its room c: over it, its
 * pairs (the reverse arcs in its list) give tokens back to their experts,
 * each taken off *total. Then its sink arcs. */
static inline __attribute__((always_inline)) void fit_gpu(eplb_split_t *s, uint32_t g, double c,
                                                          double in, double *total, bool log) {
  eplb__flow_t *f = &s->flow;
  const double *res = f->res;
  uint32_t M = s->M, P = s->P, v = 1 + M + g;
  for (uint32_t i = f->adj_start[v]; in > c && i < f->adj_start[v + 1]; i++) {
    uint32_t a = f->adj[i];
    if (!(a & 1u) || a / 2 < M || a / 2 >= M + P)
      continue;
    double over = in - c, d = res[a] < over ? res[a] : over;
    uint32_t k = f->to[a] - 1;
    set_res(f, a, res[a] - d, log);
    set_res(f, 2 * k, res[2 * k] + d, log);
    set_res(f, 2 * k + 1, res[2 * k + 1] - d, log);
    in -= d;
    *total -= d;
  }
  set_res(f, 2 * (M + P + g), c - in > 0 ? c - in : 0.0, log);
  set_res(f, 2 * (M + P + g) + 1, in, log);
}

/* The snapshot's flow is put on the built graph as a feasible flow for
 * loads and GPU capacity cap (pairs the snapshot lacks carry 0; an
 * expert's pairs are cut back to its load, a GPU's to its room), then
 * augmented to a maximum flow. */
double eplb__split_warm_flow(eplb_split_t *s, const eplb__flow_snap_t *snap, const double *loads,
                             double cap, double eps) {
  eplb__flow_t *f = &s->flow;
  uint32_t M = s->M, P = s->P, G = s->G;
  double total = 0.0, *in = s->gin;
  s->memo_ok = s->fresh = s->base_ok = false;
  for (uint32_t k = 0; k < M; k++) {
    uint32_t e = s->multi[k], ok = snap->k[e];
    uint32_t o = ok == NONE ? 0 : snap->pstart[ok], oe = ok == NONE ? 0 : snap->pstart[ok + 1];
    total += map_expert(s, snap, k, o, oe, loads[e], false);
  }
  for (uint32_t g = 0; g < G; g++)
    in[g] = 0.0;
  for (uint32_t q = 0; q < P; q++)
    in[s->pair_gpu[q]] += f->res[2 * (M + q) + 1];
  for (uint32_t g = 0; g < G; g++) {
    double c = cap - s->base[g];
    fit_gpu(s, g, c > 0 ? c : 0.0, in[g], &total, false);
  }
  return total + eplb__flow_run(f, 0, M + G + 1, eps);
}

/* The probe on the arena's own flow, snap's (s->base_ok), with every change
 * logged and undone afterwards: only the experts whose GPUs differ from
 * snap's, and the GPUs they or a moved one-GPU expert touch, are set, where
 * mapping the snapshot onto the graph passed over every pair and GPU (half
 * of a probe at 1,024 GPUs). False when cap or the loads are not snap's or
 * the log has no memory (the arena untouched), or when the log ran out
 * (the arena's flow then unknown: base_ok cleared). */
static bool probe_in_place(eplb_split_t *s, const double *loads, double cap, double eps,
                           bool *above) {
  const eplb__flow_snap_t *snap = &s->snap;
  eplb__flow_t *f = &s->flow;
  uint32_t M = s->M, P = s->P, G = s->G;
  if (!s->base_ok || cap != snap->cap || memcmp(loads, snap->loads, (size_t)s->E * sizeof *loads))
    return false;
  s->memo_ok = false; /* the run below relabels the arena */
  size_t want = 4 * (size_t)f->m + 64;
  if (f->log_cap < want) {
    void *mem = eplb__realloc_array(f->log_mem, want, sizeof *f->log_mem);
    if (!mem)
      return false;
    f->log_mem = mem;
    f->log_cap = want;
  }
  f->log = f->log_mem;
  f->log_n = 0;
  f->log_over = false;
  const double *res = f->res;
  uint8_t *touched = s->gmark;
  for (uint32_t g = 0; g < G; g++)
    touched[g] = s->base[g] != snap->base[g];
  /* The graph is numbered as the snapshot's: an expert's pairs are the
   * same range in both. */
  for (uint32_t k = 0, q = 0; q < P; q++) {
    if (snap->pgpu[q] == s->pair_gpu[q])
      continue;
    while (s->pair_start[k + 1] <= q)
      k++;
    uint32_t q0 = s->pair_start[k], q1 = s->pair_start[k + 1];
    for (uint32_t j = q0; j < q1; j++)
      touched[snap->pgpu[j]] = touched[s->pair_gpu[j]] = 1;
    map_expert(s, snap, k, q0, q1, loads[s->multi[k]], true);
    q = q1 - 1;
  }
  double given = 0.0;
  for (uint32_t g = 0; g < G; g++) {
    if (!touched[g])
      continue;
    uint32_t v = 1 + M + g;
    double c = cap - s->base[g], in = 0.0;
    for (uint32_t i = f->adj_start[v]; i < f->adj_start[v + 1]; i++) {
      uint32_t a = f->adj[i];
      if ((a & 1u) && a / 2 >= M && a / 2 < M + P)
        in += res[a];
    }
    fit_gpu(s, g, c > 0 ? c : 0.0, in, &given, true);
  }
  eplb__flow_run(f, 0, M + G + 1, eps);
  double deficit = 0.0;
  for (uint32_t k = 0; k < M; k++)
    deficit += res[2 * k];
  bool ok = !f->log_over;
  if (ok)
    *above = deficit > (double)(M + G + 1) * eps && eplb__split_cut_ratio(s, loads) > cap;
  eplb__flow_undo(f);
  f->log = NULL;
  s->base_ok = ok;
  return ok;
}

eplb_status_t eplb__split_above_warm(eplb_split_t *s, const eplb_split_problem_t *p,
                                     const double *loads, double cap, bool *above) {
  *above = false;
  /* The first probe after a solve keeps its flow; later ones start from the
   * same snapshot (one swap from the solved placement each). */
  if (s->fresh)
    s->base_ok = eplb__split_snap_take(s, &s->snap, loads, s->fresh_cap);
  s->fresh = false;
  eplb_status_t st = EPLB_OK;
  if (!eplb__split_same_placement(s, p) && (st = eplb__split_build(s, p)))
    return st;
  if (!s->snap.ok || s->snap.e != s->E)
    return eplb__split_above(s, p, loads, cap, above);
  double eps, wm;
  bool go;
  if ((st = probe_start(s, p, loads, cap, above, &go, &eps, &wm)) || !go)
    return st;
  uint32_t M = s->M, G = s->G;
  /* At the snapshot's own cap when that is higher: its flow then fits as
   * it is, but for the changed replicas, so Dinic routes only their tokens
   * (cut back to a cap a little lower, every GPU of the bottleneck gives
   * back a sliver, and routing those slivers cost more than a cold flow).
   * A set above the higher cap is above cap too. */
  if (s->snap.cap > cap)
    cap = s->snap.cap;
  if (probe_in_place(s, loads, cap, eps, above))
    return EPLB_OK;
  double flow = eplb__split_warm_flow(s, &s->snap, loads, cap, eps);
  if (wm - flow <= (double)(M + G + 1) * eps)
    return EPLB_OK;
  *above = eplb__split_cut_ratio(s, loads) > cap;
  return EPLB_OK;
}
