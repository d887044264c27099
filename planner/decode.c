/* planner/decode.c — the decode-aware per-batch split (eplb_decode_split)
 * and the decode policy on one layer (eplb/model.h, eplb/plan.h "Decode").
 *
 * In memory-bound decode a replica that gets one token costs a full read of
 * its weights, so the token-balanced split (every replica of an expert gets
 * a slice) can make each GPU read more weights than it needs. The split
 * below starts from the token-balanced one and moves tokens between replicas
 * of one expert while the modelled time of the GPUs a move touches drops. */
#include "planner/planner.h"

#include "lp/lp.h"

#include "eplb/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ds {
  uint32_t E, G, R;
  const uint32_t *p2l;
  uint32_t *slot_gpu; /* [R] */
  uint32_t *rep_beg;  /* [E+1] replicas of e: rep_slot[rep_beg[e] .. rep_beg[e+1]) */
  uint32_t *rep_slot; /* [R] */
  double *x;          /* [R] tokens of each replica */
  double *f;          /* [G] modelled time */
  uint32_t *nact;     /* [G] active replicas */
  double mem, cpt, beta, launch;
  uint32_t max_moves;
} ds_t;

static double t_of(const ds_t *d, double x) {
  if (!(x > 0))
    return 0;
  double c = d->cpt * x;
  return sqrt(d->mem * d->mem + c * c);
}

/* GPU g's time when replica r (on g) holds nx tokens instead of x[r]. */
static double f_with(const ds_t *d, uint32_t r, double nx) {
  uint32_t g = d->slot_gpu[r];
  double ox = d->x[r], v = d->f[g] - t_of(d, ox) + t_of(d, nx) + d->beta * (nx - ox);
  uint32_t act = d->nact[g] - (ox > 0) + (nx > 0);
  if (d->nact[g] && !act)
    v -= d->launch;
  if (!d->nact[g] && act)
    v += d->launch;
  return v;
}

static void set_x(ds_t *d, uint32_t r, double nx) {
  uint32_t g = d->slot_gpu[r];
  d->f[g] = f_with(d, r, nx);
  d->nact[g] = d->nact[g] - (d->x[r] > 0) + (nx > 0);
  d->x[r] = nx;
}

static void recompute(ds_t *d) {
  memset(d->f, 0, d->G * sizeof *d->f);
  memset(d->nact, 0, d->G * sizeof *d->nact);
  for (uint32_t r = 0; r < d->R; r++)
    if (d->x[r] > 0) {
      uint32_t g = d->slot_gpu[r];
      d->f[g] += t_of(d, d->x[r]) + d->beta * d->x[r];
      d->nact[g]++;
    }
  for (uint32_t g = 0; g < d->G; g++)
    if (d->nact[g])
      d->f[g] += d->launch;
}

/* The best move of tokens from replica r to replica q (same expert, other
 * GPU): all of them, or the part that evens the two GPUs' times. Returns the
 * larger of the two times after it (*amount: tokens moved). */
static double best_move(const ds_t *d, uint32_t r, uint32_t q, double *amount) {
  double xr = d->x[r], xq = d->x[q];
  double full = fmax(f_with(d, r, 0), f_with(d, q, xq + xr));
  *amount = xr;
  double eps = xr * 1e-9;
  /* h(δ) = f_r(xr - δ) - f_q(xq + δ) falls with δ; a root inside (0, xr)
   * evens the two GPUs. */
  if (f_with(d, r, xr - eps) - f_with(d, q, xq + eps) <= 0 ||
      f_with(d, r, eps) - f_with(d, q, xq + xr - eps) >= 0)
    return full;
  double lo = eps, hi = xr - eps;
  for (int it = 0; it < 40; it++) {
    double mid = 0.5 * (lo + hi);
    if (f_with(d, r, xr - mid) - f_with(d, q, xq + mid) > 0)
      lo = mid;
    else
      hi = mid;
  }
  double part = fmax(f_with(d, r, xr - hi), f_with(d, q, xq + hi));
  if (part < full) {
    *amount = hi;
    return part;
  }
  return full;
}

static double max_f(const ds_t *d) {
  double m = 0;
  for (uint32_t g = 0; g < d->G; g++)
    m = d->f[g] > m ? d->f[g] : m;
  return m;
}

/* The replica of expert e that holds its tokens on the GPU of rep_slot[j]:
 * the first of e's replicas there. A GPU reads an expert's weights once, and
 * t(a) + t(b) >= t(a + b), so its other replicas there stay idle. */
static uint32_t on_gpu(const ds_t *d, uint32_t e, uint32_t j) {
  uint32_t g = d->slot_gpu[d->rep_slot[j]];
  for (uint32_t k = d->rep_beg[e]; k < j; k++)
    if (d->slot_gpu[d->rep_slot[k]] == g)
      return d->rep_slot[k];
  return d->rep_slot[j];
}

/* Phase 1: an expert's tokens gathered on fewer replicas wherever the two
 * GPUs involved stay below the slowest GPU and their total time drops: the
 * max never rises, and the weight reads saved are slack for phase 2. */
static uint32_t consolidate_pass(ds_t *d) {
  double top = max_f(d);
  uint32_t moves = 0;
  for (uint32_t e = 0; e < d->E; e++) {
    if (d->rep_beg[e + 1] - d->rep_beg[e] < 2)
      continue;
    for (uint32_t i = d->rep_beg[e]; i < d->rep_beg[e + 1]; i++) {
      uint32_t r = d->rep_slot[i];
      if (!(d->x[r] > 0))
        continue;
      uint32_t best = UINT32_MAX;
      double best_v = INFINITY;
      for (uint32_t j = d->rep_beg[e]; j < d->rep_beg[e + 1]; j++) {
        uint32_t q = d->rep_slot[j];
        if (q == r || !(d->x[q] > 0) || d->slot_gpu[q] == d->slot_gpu[r] || on_gpu(d, e, j) != q)
          continue;
        double fr = f_with(d, r, 0), fq = f_with(d, q, d->x[q] + d->x[r]);
        double gain = d->f[d->slot_gpu[r]] + d->f[d->slot_gpu[q]] - fr - fq;
        double after = fmax(fr, fq);
        if (after <= top && gain > 1e-9 * top && after < best_v) {
          best_v = after;
          best = q;
        }
      }
      if (best != UINT32_MAX) {
        double moved = d->x[r];
        set_x(d, best, d->x[best] + moved);
        set_x(d, r, 0);
        moves++;
      }
    }
  }
  return moves;
}

/* Phase 0: an expert's replicas on one GPU (more slots than the GPU has
 * experts to fill) hand their tokens to the one that holds them there; the
 * later phases move tokens only to such replicas, so no GPU's time rises
 * and none reads a weight twice. */
static void gather_on_gpu(ds_t *d) {
  for (uint32_t e = 0; e < d->E; e++)
    for (uint32_t i = d->rep_beg[e] + 1; i < d->rep_beg[e + 1]; i++) {
      uint32_t r = d->rep_slot[i], q = on_gpu(d, e, i);
      if (q == r || !(d->x[r] > 0))
        continue;
      double moved = d->x[r];
      set_x(d, r, 0);
      set_x(d, q, d->x[q] + moved);
    }
}

/* A move frees a weight read on one GPU, which may let a later expert's
 * tokens land there: passes repeat while they move anything (each move
 * lowers the total time, so this ends). */
static void consolidate(ds_t *d) {
  for (int pass = 0; pass < 8 && consolidate_pass(d); pass++)
    ;
}

/* Phase 2: lower the slowest GPU by one move at a time. Returns moves made. */
static uint32_t descend(ds_t *d, uint32_t max_moves) {
  uint32_t moves = 0;
  while (moves < max_moves) {
    uint32_t gs = 0;
    for (uint32_t g = 1; g < d->G; g++)
      if (d->f[g] > d->f[gs])
        gs = g;
    double top = d->f[gs], best_v = top * (1 - 1e-9);
    uint32_t br = UINT32_MAX, bq = 0;
    double bamt = 0;
    for (uint32_t r = 0; r < d->R; r++) {
      if (d->slot_gpu[r] != gs || !(d->x[r] > 0))
        continue;
      uint32_t e = d->p2l[r];
      for (uint32_t j = d->rep_beg[e]; j < d->rep_beg[e + 1]; j++) {
        uint32_t q = d->rep_slot[j];
        if (d->slot_gpu[q] == gs || on_gpu(d, e, j) != q)
          continue;
        double amt, v = best_move(d, r, q, &amt);
        if (v < best_v) {
          best_v = v;
          br = r;
          bq = q;
          bamt = amt;
        }
      }
    }
    if (br == UINT32_MAX)
      break;
    double xr = d->x[br];
    set_x(d, bq, d->x[bq] + bamt);
    set_x(d, br, bamt >= xr ? 0 : xr - bamt);
    moves++;
  }
  return moves;
}

static void decode_split_options_defaults(eplb_decode_split_options_t *o) {
  if (o)
    memset(o, 0, sizeof *o);
}

eplb_status_t eplb_decode_split_options_init(eplb_decode_split_options_t *o, size_t size) {
  eplb_decode_split_options_t d;
  decode_split_options_defaults(&d);
  return eplb__opts_init(o, size, &d, sizeof d, "eplb_decode_split_options_t");
}

eplb_status_t eplb_decode_split_options_for(const eplb_model_desc_t *model,
                                            const eplb_gpu_desc_t *gpu, uint32_t num_gpus,
                                            uint32_t gpus_per_node,
                                            eplb_decode_split_options_t *out) {
  eplb_decode_split_options_t o;
  eplb_decode_split_options_default(&o);
  if (model && gpu) {
    uint32_t gpn = gpus_per_node && gpus_per_node <= num_gpus ? gpus_per_node : num_gpus;
    o.a2a_us_per_token = eplb_model_a2a_us_per_token(model, gpu, num_gpus, gpn ? gpn : 1);
    o.launch_us = gpu->launch_us;
  }
  return eplb__opts_give(out, &o, sizeof o, "eplb_decode_split_options_t", "planner");
}

static eplb_status_t ds_alloc(ds_t *d) {
  d->slot_gpu = eplb__malloc_array(d->R, sizeof *d->slot_gpu);
  d->rep_beg = eplb__calloc((size_t)d->E + 1, sizeof *d->rep_beg);
  d->rep_slot = eplb__malloc_array(d->R, sizeof *d->rep_slot);
  d->x = eplb__malloc_array(d->R, sizeof *d->x);
  d->f = eplb__malloc_array(d->G, sizeof *d->f);
  d->nact = eplb__malloc_array(d->G, sizeof *d->nact);
  if (!d->slot_gpu || !d->rep_beg || !d->rep_slot || !d->x || !d->f || !d->nact)
    return eplb__error(EPLB_ENOMEM, "planner", "decode split: out of memory");
  return EPLB_OK;
}

static void ds_free(ds_t *d) {
  eplb__free(d->slot_gpu);
  eplb__free(d->rep_beg);
  eplb__free(d->rep_slot);
  eplb__free(d->x);
  eplb__free(d->f);
  eplb__free(d->nact);
}

/* Replica lists and slot GPUs of the problem (checked by eplb_split_solve). */
static void ds_index(ds_t *d, const eplb_split_problem_t *pb) {
  uint32_t r = 0;
  for (uint32_t g = 0; g < d->G; g++)
    for (uint32_t i = 0; i < pb->slots_per_gpu[g] && r < d->R; i++)
      d->slot_gpu[r++] = g;
  for (r = 0; r < d->R; r++)
    d->rep_beg[d->p2l[r] + 1]++;
  for (uint32_t e = 0; e < d->E; e++)
    d->rep_beg[e + 1] += d->rep_beg[e];
  /* Counting sort in slot order, rep_beg as the cursor, then shifted back. */
  for (r = 0; r < d->R; r++)
    d->rep_slot[d->rep_beg[d->p2l[r]]++] = r;
  for (uint32_t e = d->E; e > 0; e--)
    d->rep_beg[e] = d->rep_beg[e - 1];
  d->rep_beg[0] = 0;
}

/* Options, model and GPU of a decode split call into d's scalars. */
static eplb_status_t ds_setup(ds_t *d, const eplb_split_problem_t *pb,
                              const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu,
                              const eplb_decode_split_options_t *opts) {
  eplb_decode_split_options_t own;
  eplb_status_t st = EPLB__OPTS_TAKE(own, opts, eplb_decode_split_options_default,
                                     "eplb_decode_split_options_t", "planner");
  if (st != EPLB_OK)
    return st;
  const eplb_decode_split_options_t *o = &own;
  if (!(o->a2a_us_per_token >= 0 && isfinite(o->a2a_us_per_token)) ||
      !(o->launch_us >= 0 && isfinite(o->launch_us)))
    return eplb__error(EPLB_EINVAL, "planner",
                       "decode split: a2a_us_per_token %g and launch_us %g must be >= 0",
                       o->a2a_us_per_token, o->launch_us);
  if ((st = eplb_model_check(model)) != EPLB_OK || (st = eplb_gpu_check(gpu)) != EPLB_OK)
    return st;
  memset(d, 0, sizeof *d);
  d->E = pb->num_experts;
  d->G = pb->num_gpus;
  d->R = pb->num_slots;
  d->p2l = pb->phy2log;
  d->mem = eplb_model_memory_us(model, gpu);
  d->cpt = eplb_model_us_per_token(model, gpu);
  d->beta = o->a2a_us_per_token;
  d->launch = o->launch_us;
  d->max_moves = o->max_moves;
  return EPLB_OK;
}

/* The GPUs' times of shares `in` (a checked problem), then with `out` the
 * two stages from them (out may be in): the search of eplb_decode_split. */
static eplb_status_t ds_run(ds_t *d, const eplb_split_problem_t *pb, const double *loads,
                            uint32_t max_moves, const double *in, double *out, double *start_time,
                            double *gpu_time, double *max_time) {
  eplb_status_t st = ds_alloc(d);
  if (st == EPLB_OK) {
    ds_index(d, pb);
    for (uint32_t r = 0; r < d->R; r++)
      d->x[r] = in[r] * loads[d->p2l[r]];
    recompute(d);
    if (start_time)
      *start_time = max_f(d);
    if (out) {
      gather_on_gpu(d);
      consolidate(d);
      descend(d, max_moves ? max_moves : 4 * d->G + 16);
      for (uint32_t r = 0; r < d->R; r++) {
        double w = loads[d->p2l[r]];
        /* Moved amounts add up to a load that can round above it. */
        out[r] = w > 0 ? fmin(d->x[r] / w, 1.0) : in[r];
      }
    }
    double mx = 0;
    for (uint32_t g = 0; g < d->G; g++) {
      if (gpu_time)
        gpu_time[g] = d->f[g];
      mx = d->f[g] > mx ? d->f[g] : mx;
    }
    if (max_time)
      *max_time = mx;
  }
  ds_free(d);
  return st;
}

eplb_status_t eplb_decode_split(eplb_split_t *split, const eplb_split_problem_t *pb,
                                const double *loads, const eplb_model_desc_t *model,
                                const eplb_gpu_desc_t *gpu, const eplb_decode_split_options_t *o,
                                double *share, double *gpu_time, double *max_time) {
  eplb_decode_split_options_t dflt;
  eplb_decode_split_options_default(&dflt);
  if (!o)
    o = &dflt;
  if (!split || !pb || !loads || !share || !model || !gpu)
    return eplb__error(EPLB_EINVAL, "planner", "decode split: NULL argument");
  ds_t d;
  eplb_status_t st = ds_setup(&d, pb, model, gpu, o);
  if (st != EPLB_OK)
    return st;
  double *gl = NULL;
  /* The token-balanced start also validates the problem and the loads. */
  if (d.G && !(gl = eplb__malloc_array(d.G, sizeof *gl)))
    return eplb__error(EPLB_ENOMEM, "planner", "decode split: out of memory");
  eplb_split_result_t res;
  memset(&res, 0, sizeof res);
  res.share = share;
  res.gpu_load = gl;
  if ((st = eplb_split_solve(split, pb, loads, &res)) == EPLB_OK)
    st = ds_run(&d, pb, loads, d.max_moves, share, share, NULL, gpu_time, max_time);
  eplb__free(gl);
  return st;
}

/* Checks of eplb_decode_split_time and eplb_decode_split_refine, then ds_setup. */
static eplb_status_t check_given(ds_t *d, const eplb_split_problem_t *pb, const double *loads,
                                 const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu,
                                 const eplb_decode_split_options_t *o, const double *share) {
  if (!pb || !loads || !share || !model || !gpu || !o)
    return eplb__error(EPLB_EINVAL, "planner", "decode split: NULL argument");
  double one = 1;
  eplb_split_result_t chk = {.share = &one, .gpu_load = &one};
  eplb_status_t st = eplb__split_check(pb, loads, &chk, false);
  if (st != EPLB_OK)
    return st;
  for (uint32_t r = 0; r < pb->num_slots; r++)
    if (!(share[r] >= 0 && share[r] <= 1))
      return eplb__error(EPLB_EINVAL, "planner", "decode split: share[%u] = %g not in [0, 1]", r,
                         share[r]);
  return ds_setup(d, pb, model, gpu, o);
}

eplb_status_t eplb_decode_split_time(const eplb_split_problem_t *pb, const double *loads,
                                     const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu,
                                     const eplb_decode_split_options_t *o, const double *share,
                                     double *gpu_time, double *max_time) {
  eplb_decode_split_options_t dflt;
  eplb_decode_split_options_default(&dflt);
  ds_t d;
  eplb_status_t st = check_given(&d, pb, loads, model, gpu, o ? o : &dflt, share);
  return st ? st : ds_run(&d, pb, loads, 0, share, NULL, NULL, gpu_time, max_time);
}

eplb_status_t eplb_decode_split_refine(const eplb_split_problem_t *pb, const double *loads,
                                       const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu,
                                       const eplb_decode_split_options_t *o, const double *start,
                                       double *share, double *start_time, double *max_time) {
  eplb_decode_split_options_t dflt;
  eplb_decode_split_options_default(&dflt);
  o = o ? o : &dflt;
  ds_t d;
  eplb_status_t st = check_given(&d, pb, loads, model, gpu, o, start);
  if (st == EPLB_OK && !share)
    st = eplb__error(EPLB_EINVAL, "planner", "decode split: NULL argument");
  return st ? st : ds_run(&d, pb, loads, d.max_moves, start, share, start_time, NULL, max_time);
}

/* ---- the decode policy ----------------------------------------------------
 * Two placements, each with the shares eplb_decode_split gives it on the plan's
 * step loads (plan_step_loads: the mean step, loads / decode_steps, shrunk
 * halfway to the mean expert when decode-shaped), and the one whose slowest
 * GPU models faster on them is kept:
 *  - balanced's (min-max replication, token-balanced placement);
 *  - a decode placement, built on the same step loads (shrunk, its replica
 *    counts and packing lean less on the window's ranking): min-max
 *    replica counts of those loads, one "primary" replica of
 *    every expert packed heaviest first onto the least loaded GPU (each GPU
 *    keeps its share of the R - E spare slots free), then the spare replicas
 *    of the replicated experts, heaviest first, one per GPU where possible and
 *    never beside another replica of their expert. Every GPU thus holds a
 *    replica the split can leave idle, so that a light batch reads one weight
 *    set fewer on every GPU, not only on some (balanced may put several
 *    replicated experts' copies on one GPU and none on another).
 * A plan served without a per-batch split keeps the static shares, which
 * already gather a light expert's tokens on one replica. */

typedef struct dplace {
  uint32_t *cnt, *work, *order; /* [E] */
  uint32_t *pcap, *scap, *fill; /* [G] */
  double *load;                 /* [G] */
  uint32_t *nodes;              /* [G] (nodes <= GPUs) */
} dplace_t;

static int by_load_desc(const void *a, const void *b) { return eplb__ranked_desc(a, b); }

/* The decode placement described above into phy2log. */
static void decode_place(const eplb__layer_ctx_t *ctx, const double *w, dplace_t *b,
                         eplb__ranked_t *rk, int32_t *phy2log) {
  uint32_t E = ctx->num_experts, G = ctx->num_gpus, R = ctx->num_slots;
  eplb__replicate(w, NULL, E, R, b->cnt, b->work);
  /* Primary slots of GPU g in proportion to its slots, summing to E. */
  uint32_t given = 0;
  for (uint32_t g = 0; g < G; g++) {
    b->pcap[g] = (uint32_t)((uint64_t)E * ctx->slots_per_gpu[g] / R);
    given += b->pcap[g];
  }
  for (uint32_t g = 0; given < E; g = (g + 1) % G)
    if (b->pcap[g] < ctx->slots_per_gpu[g]) {
      b->pcap[g]++;
      given++;
    }
  for (uint32_t g = 0; g < G; g++) {
    b->scap[g] = ctx->slots_per_gpu[g] - b->pcap[g];
    b->fill[g] = 0;
    b->load[g] = 0;
  }
  for (uint32_t e = 0; e < E; e++)
    rk[e] = (eplb__ranked_t){w[e] / b->cnt[e], e};
  qsort(rk, E, sizeof *rk, by_load_desc);
  for (uint32_t i = 0; i < E; i++) {
    uint32_t e = rk[i].i, best = UINT32_MAX;
    for (uint32_t g = 0; g < G; g++)
      if (b->fill[g] < b->pcap[g] && (best == UINT32_MAX || b->load[g] < b->load[best]))
        best = g;
    phy2log[ctx->gpu_first[best] + b->fill[best]++] = (int32_t)e;
    b->load[best] += rk[i].v;
  }
  /* Spare replicas: heaviest first, on a node without a replica of the
   * expert where one has room (local-first routing then serves that node's
   * tokens of it on the node), else on a GPU without one; a GPU already
   * holding the expert only when no other has room. */
  uint32_t N = ctx->num_nodes && G % ctx->num_nodes == 0 ? ctx->num_nodes : 1, gpn = G / N;
  uint32_t *node_has = b->nodes; /* [N] replicas of the expert being placed */
  for (uint32_t i = 0; i < E; i++) {
    uint32_t e = rk[i].i;
    if (N > 1 && b->cnt[e] > 1) {
      memset(node_has, 0, N * sizeof *node_has);
      for (uint32_t g = 0; g < G; g++)
        for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g] + b->fill[g]; r++)
          node_has[g / gpn] += phy2log[r] == (int32_t)e;
    }
    for (uint32_t c = 1; c < b->cnt[e]; c++) {
      uint32_t best = UINT32_MAX, any = UINT32_MAX, far = UINT32_MAX;
      for (uint32_t g = 0; g < G; g++) {
        if (b->fill[g] >= b->pcap[g] + b->scap[g])
          continue;
        if (any == UINT32_MAX || b->load[g] < b->load[any])
          any = g;
        bool holds = false;
        for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g] + b->fill[g] && !holds; r++)
          holds = phy2log[r] == (int32_t)e;
        if (!holds && (best == UINT32_MAX || b->load[g] < b->load[best]))
          best = g;
        if (N > 1 && !node_has[g / gpn] && (far == UINT32_MAX || b->load[g] < b->load[far]))
          far = g;
      }
      best = far != UINT32_MAX ? far : best != UINT32_MAX ? best : any;
      phy2log[ctx->gpu_first[best] + b->fill[best]++] = (int32_t)e;
      b->load[best] += rk[i].v;
      if (N > 1)
        node_has[best / gpn]++;
    }
  }
}

/* Shares of placement phy2log by eplb_decode_split on the step loads w;
 * returns the slowest GPU's modelled time in *t. */
static eplb_status_t decode_shares(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                                   const double *w, const int32_t *phy2log, uint32_t *p2l,
                                   double *share, double *t) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  for (uint32_t r = 0; r < R; r++)
    p2l[r] = (uint32_t)phy2log[r];
  eplb_split_problem_t pb = {E, G, R, p2l, ctx->slots_per_gpu};
  eplb_decode_split_options_t o;
  eplb_decode_split_options_default(&o);
  eplb_decode_split_options_for(opts->model, opts->gpu, G, ctx->num_nodes ? G / ctx->num_nodes : G,
                                &o);
  return eplb_decode_split(ctx->split, &pb, w, opts->model, opts->gpu, &o, share, NULL, t);
}

/* The loads a decode plan is made for: the window's mean step and, where that
 * step is decode-shaped (memory-bound: a slot's mean tokens cost less compute
 * than its weight read), each expert's load drawn halfway to the mean over
 * experts. Decode batches are small and expert popularity drifts from step to
 * step, so a plan serves steps whose hot experts the window ranks only loosely
 * (the V3-shaped synthetic trace: correlation ~0.2 between the per-expert
 * loads of steps 0-64 and 65-129); packing and choosing placements on the raw
 * window fits its noise. The half is not fitted to scored steps: it is what a
 * held-out split inside the plan window chose (docs/costmodel.md). A
 * compute-bound step keeps its raw loads: there token balance on the loads
 * seen is what the balanced placement already gives. */
static void plan_step_loads(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                            double steps, double *w) {
  uint32_t E = ctx->num_experts;
  double mean = 0;
  for (uint32_t e = 0; e < E; e++) {
    w[e] = ctx->w[e] / steps;
    mean += w[e] / E;
  }
  double per_slot = mean * E / ctx->num_slots;
  double cpt = eplb_model_us_per_token(opts->model, opts->gpu) * per_slot;
  if (!(cpt < eplb_model_memory_us(opts->model, opts->gpu)))
    return;
  for (uint32_t e = 0; e < E; e++)
    w[e] = 0.5 * w[e] + 0.5 * mean;
}

eplb_status_t eplb__decode_layer(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                                 int32_t *phy2log, double *share, int *fallback) {
  eplb_status_t st = eplb__balanced_layer(ctx, phy2log, share, fallback);
  if (st)
    return st;
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  double steps = opts->decode_steps > 0 ? opts->decode_steps : 1, tb = 0, td = 0;
  double *w = eplb__malloc_array(E, sizeof *w), *sh2 = eplb__malloc_array(R, sizeof *sh2);
  uint32_t *p2l = eplb__malloc_array(R, sizeof *p2l);
  int32_t *ph2 = eplb__malloc_array(R, sizeof *ph2);
  eplb__ranked_t *rk = eplb__malloc_array(E, sizeof *rk);
  dplace_t b = {eplb__malloc_array(E, sizeof(uint32_t)),
                eplb__malloc_array(E, sizeof(uint32_t)),
                NULL,
                eplb__malloc_array(G, sizeof(uint32_t)),
                eplb__malloc_array(G, sizeof(uint32_t)),
                eplb__malloc_array(G, sizeof(uint32_t)),
                eplb__malloc_array(G, sizeof(double)),
                eplb__malloc_array(G, sizeof(uint32_t))};
  if (!w || !sh2 || !p2l || !ph2 || !rk || !b.cnt || !b.work || !b.pcap || !b.scap || !b.fill ||
      !b.load || !b.nodes) {
    st = eplb__error(EPLB_ENOMEM, "planner", "decode: out of memory");
    goto done;
  }
  plan_step_loads(ctx, opts, steps, w);
  if ((st = decode_shares(ctx, opts, w, phy2log, p2l, share, &tb)) != EPLB_OK)
    goto done;
  decode_place(ctx, w, &b, rk, ph2);
  if ((st = decode_shares(ctx, opts, w, ph2, p2l, sh2, &td)) != EPLB_OK)
    goto done;
  /* Ties go to the decode placement: it is the one built for light batches. */
  if (td <= tb) {
    memcpy(phy2log, ph2, R * sizeof *ph2);
    memcpy(share, sh2, R * sizeof *sh2);
    *fallback = 0;
  } else {
    *fallback = 1;
  }
done:
  eplb__free(w);
  eplb__free(sh2);
  eplb__free(p2l);
  eplb__free(ph2);
  eplb__free(rk);
  eplb__free(b.cnt);
  eplb__free(b.work);
  eplb__free(b.pcap);
  eplb__free(b.scap);
  eplb__free(b.fill);
  eplb__free(b.load);
  eplb__free(b.nodes);
  return st;
}
