/* planner/bounds_uniform.c — the lower bound of plans with uniform shares.
 *
 * With uniform shares expert e's c_e replicas each carry w_e / c_e, so a plan
 * is a choice of counts (c_e >= 1, sum R) and a packing of those items into G
 * GPUs. The exact-share bound (eplb__lower_bound) lets a split be uneven and
 * is not tight when even splits force two large items onto one GPU (e.g.
 * more items above half the bound than GPUs). This bound is the least L for
 * which a relaxation of "some uniform plan has max GPU load <= L" holds:
 *
 *   every count c_e >= ceil(w_e / L), and for each dual feasible function f
 *   of a family (f: [0, 1] -> [0, 1] with sum f(x_i) <= 1 whenever
 *   sum x_i <= 1, so one GPU's items of sizes x_i L count <= 1), some count
 *   vector with sum c_e = R has sum_e c_e f(y_e) <= G (GPUs with a slot),
 *   y_e = (w_e / (c_e L) + d) / (1 + S d) for the test's d >= 0 and the
 *   most slots of a GPU S (a GPU holds exactly its S_g <= S replicas, so
 *   its y sum to <= 1; d > 0 makes the replicas that fill slots count).
 *
 * If no count vector passes one test, no plan reaches L. The minimum over
 * counts of the separable sum is taken over the lower convex hull of each
 * expert's cost h_e(c) = c f(w_e / (c L)) (the LP relaxation of the
 * multiple-choice knapsack: a lower value than the integer one, so still
 * valid), the R - sum ceil(w_e / L) spare slots spent greedily on the
 * cheapest hull segments. The family is
 * nondecreasing, so the relaxation is monotone in L and a bisection finds
 * the least L. Every rounding is taken on the side that keeps the test a
 * relaxation (sizes shrunk by 1e-9, the count floor lowered), and anything
 * that cannot be evaluated counts as feasible (no bound gained). Where the
 * LP relaxation passes, the tests without shift are rerun over integer
 * counts (int_refutes: a multiple-choice knapsack over the spare slots),
 * which can only refute more (#15: 55, 51, 1 on 4 GPUs x 2 slots, 26.83 ->
 * 27.5, the optimum). The loads where the planner stayed far above this
 * bound were the planner's doing: with more, aimed search rounds
 * (uniform.c) they reach 1.003 of it on average. */
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Relative slack on sizes: far above double rounding, far below the
 * bisection's resolution. */
#define SHRINK 1e-9
/* Most hull points taken per expert; past them its cost is taken as 0
 * (below the true cost, so still a relaxation). */
#define MAX_POINTS 1024

/* A test: a dual feasible function f, applied to sizes shifted by d. Every
 * GPU holds exactly S_g <= S items, so sum (x_i + d) <= 1 + S d: the sizes
 * y = (x + d) / (1 + S d) of one GPU sum to <= 1 (d > 0 makes the slots that
 * light items take count). kind 0 is Fekete and Schepers' U^(eps) with
 * eps = p (y > 1 - p counts 1, y < p counts 0, else y): an item too large
 * to share its GPU with one of size p costs the whole GPU; kind 1 is their
 * u^(k) with k = p (floor((k+1) y) / k, y where (k+1) y is integral): at
 * most k items above 1/(k+1) share a GPU. Both are nondecreasing. */
typedef struct {
  int kind;
  double p, d;
} dff_t;

static const dff_t FAMILY[] = {
    {0, 0.50, 0}, {0, 0.40, 0}, {0, 0.30, 0}, {0, 0.20, 0},   {0, 0.10, 0},   {1, 1, 0},
    {1, 2, 0},    {1, 3, 0},    {1, 4, 0},    {0, 0.50, 0.1}, {0, 0.30, 0.1},
};
#define NFAM (sizeof FAMILY / sizeof FAMILY[0])

/* f at size y shrunk by SHRINK: f is nondecreasing, so this is <= f at the
 * true size whatever the rounding of y; floor of a product lowered the same
 * way cannot round up across an integer. */
static double dff(const dff_t *d, double y) {
  y *= 1 - SHRINK;
  if (d->kind == 0)
    return y > 1 - d->p ? 1 : y >= d->p ? y : 0;
  double n = floor((d->p + 1) * y);
  return n > 0 ? n / d->p : 0;
}

typedef struct {
  double dc, slope; /* slots taken, cost per slot */
} seg_t;

typedef struct {
  double *w;       /* [n] loads with load, heaviest first */
  double *suffix;  /* [n + 1] sums of w[i..n) */
  uint32_t n, E;   /* experts with load, all experts */
  uint32_t R, G;   /* slots, GPUs with a slot */
  uint32_t S;      /* most slots of a GPU */
  uint32_t *m;     /* [n] least counts at the L under test */
  double *pc, *ph; /* [MAX_POINTS + 2] one expert's hull */
  seg_t *seg;
  size_t nseg, cap;
  bool integral; /* also the integer knapsack (int_refutes) */
  double *dp;    /* [DP_SLOTS + 1] least cost with at most b spare slots */
  uint32_t *oj;  /* [MAX_OPTS] one expert's options: spare slots taken */
  double *oh;    /* [MAX_OPTS] and the cost there */
} ub_t;

static int seg_asc(const void *a, const void *b) {
  const seg_t *x = a, *y = b;
  return (x->slope > y->slope) - (x->slope < y->slope);
}

/* Where an expert's cost stops changing shape as c grows (sizes fall
 * toward y_inf = d / (1 + S d)): 0 once it is 0 (f nondecreasing); for
 * kind 0 with f(y_inf) = y_inf, linear once y <= 1 - p. */
static bool stable(const dff_t *d, double y, double h, double yinf) {
  if (h == 0)
    return true;
  return d->kind == 0 && d->d > 0 && dff(d, yinf) > 0 && y * (1 - SHRINK) <= 1 - d->p;
}

static void hull_push(ub_t *u, uint32_t *np, double c, double h) {
  while (*np >= 2) {
    double ax = u->pc[*np - 2], ay = u->ph[*np - 2], bx = u->pc[*np - 1], by = u->ph[*np - 1];
    if ((by - ay) * (c - ax) < (h - ay) * (bx - ax))
      break;
    (*np)--;
  }
  u->pc[*np] = c;
  u->ph[(*np)++] = h;
}

/* Expert i's cost c f(y(c)) from its least count m: adds h(m) to *base and
 * the lower hull's segments up to where it is stable (beyond, every
 * expert's cost grows by the common tail slope, which the caller adds).
 * false: no room for the segments (the test then proves nothing). */
static bool expert_segments(ub_t *u, const dff_t *d, uint32_t i, double L, uint32_t B,
                            double *base) {
  double w = u->w[i] / L, scale = 1 + u->S * d->d, yinf = d->d / scale;
  uint32_t m = u->m[i], np = 0;
  for (uint32_t c = m; c <= m + B; c++) {
    double y = (w / c + d->d) / scale, h = c * dff(d, y);
    hull_push(u, &np, c, h);
    if (stable(d, y, h, yinf))
      break;
    if (np == MAX_POINTS) { /* cost 0 from c + 1 on: below the true one */
      hull_push(u, &np, c + 1, 0);
      break;
    }
  }
  *base += u->ph[0];
  if (u->nseg + np > u->cap)
    return false;
  for (uint32_t j = 1; j < np; j++) {
    double dc = u->pc[j] - u->pc[j - 1];
    u->seg[u->nseg++] = (seg_t){dc, (u->ph[j] - u->ph[j - 1]) / dc};
  }
  return true;
}

/* min over counts (sum = R) of sum_e c_e f(y_e) (LP relaxation) > G? */
static bool dff_refutes(ub_t *u, const dff_t *d, double L, uint32_t B) {
  double scale = 1 + u->S * d->d, yinf = d->d / scale, base = 0;
  /* The tail: once stable, one more replica adds d / scale (f linear there)
   * or 0. */
  double tail = dff(d, yinf) > 0 ? d->d / scale * (1 - SHRINK) : 0;
  u->nseg = 0;
  uint32_t i = 0;
  for (; i < u->n; i++) {
    if (u->m[i] == 1) {
      double y = (u->w[i] / L + d->d) / scale, h = dff(d, y);
      if (stable(d, y, h, yinf))
        break; /* so is every lighter expert at count 1 */
    }
    if (!expert_segments(u, d, i, L, B, &base))
      return false;
  }
  /* Stable at one replica: 0, or y each (linear); the experts without load
   * have size y_inf. */
  if (tail > 0)
    base += (u->suffix[i] / L + (double)(u->E - i) * d->d) / scale * (1 - 2 * SHRINK);
  qsort(u->seg, u->nseg, sizeof *u->seg, seg_asc);
  double left = B;
  for (size_t j = 0; j < u->nseg && left > 0 && u->seg[j].slope < tail; j++) {
    double t = u->seg[j].dc < left ? u->seg[j].dc : left;
    base += u->seg[j].slope * t;
    left -= t;
  }
  base += left * tail;
  return base > u->G * (1 + 1e-9) + 1e-9;
}

/* The integer knapsack runs while (experts with a cost) x (spare slots + 1)
 * stays within DP_WORK; spare slots above DP_SLOTS skip it. */
#define DP_WORK (1u << 16)
#define DP_SLOTS 4096u
/* Options kept per expert; the last one kept is followed by cost 0. */
#define MAX_OPTS 32

/* Expert i's options for int_refutes: the counts m + j (j <= B) at which its
 * cost c f(y) drops below every cost at a smaller count (a count whose cost
 * is no lower is never needed: with at most B spare slots in total, the
 * slots it would take can stay unused). Returns how many; past MAX_OPTS the
 * next option is cost 0 (below the true cost, so the test stays a
 * relaxation). */
static uint32_t expert_options(ub_t *u, const dff_t *d, uint32_t i, double L, uint32_t B) {
  double w = u->w[i] / L, low = INFINITY;
  uint32_t m = u->m[i], n = 0;
  for (uint32_t j = 0; j <= B; j++) {
    double h = (m + j) * dff(d, w / (m + j));
    if (!(h < low))
      continue;
    if (n == MAX_OPTS - 1)
      h = 0;
    u->oj[n] = j;
    u->oh[n++] = low = h;
    if (h == 0)
      break;
  }
  return n;
}

/* The integer version of dff_refutes for a test without shift (d = 0: every
 * cost >= 0): min over integer counts c_e >= m_e with sum_e (c_e - m_e) <=
 * B of sum_e c_e f(w_e / (c_e L)) > G? A plan with every GPU <= L has such
 * counts (sum exactly B, which "at most" contains) and, f being a dual
 * feasible function of each GPU's sizes as fractions of L, sum <= G. So the
 * minimum above G refutes L, and it is at least the LP relaxation's, which
 * splits one expert's count fractionally (e.g. "half the slots an expert
 * needs to drop its replicas below L/2 remove half of its replicas above
 * L/2"); with f = u^(1) the test is exactly "more than G replicas above L/2
 * whatever whole experts the spare slots split". A 0/1-knapsack-like
 * dynamic program over spare slots (multiple choice: one count per expert);
 * an expert whose cost is 0 at m costs 0 at every count (f nondecreasing)
 * and drops out. Larger L lowers every m and cost, so the test is monotone
 * and the bisection stays valid. Too large to run: nothing refuted. */
static bool int_refutes(ub_t *u, const dff_t *d, double L, uint32_t B) {
  if (d->d != 0 || B > DP_SLOTS)
    return false;
  uint32_t active = 0;
  for (uint32_t i = 0; i < u->n; i++)
    active += dff(d, u->w[i] / (u->m[i] * L)) > 0;
  if ((uint64_t)active * (B + 1) > DP_WORK)
    return false;
  double thr = u->G * (1 + 1e-9) + 1e-9;
  for (uint32_t b = 0; b <= B; b++)
    u->dp[b] = 0;
  for (uint32_t i = 0; i < u->n; i++) {
    if (!(dff(d, u->w[i] / (u->m[i] * L)) > 0))
      continue;
    uint32_t no = expert_options(u, d, i, L, B);
    /* Downward in b: dp[b - j], j > 0, is still the previous expert's. */
    for (uint32_t b = B + 1; b-- > 0;) {
      double best = INFINITY;
      for (uint32_t k = 0; k < no && u->oj[k] <= b; k++) {
        double v = u->dp[b - u->oj[k]] + u->oh[k];
        best = v < best ? v : best;
      }
      u->dp[b] = best;
    }
    if (u->dp[B] > thr) /* costs only grow with more experts */
      return true;
  }
  return false;
}

/* true: no uniform plan has every GPU load <= L. */
static bool refuted(ub_t *u, double L) {
  uint64_t need = u->E;
  for (uint32_t i = 0; i < u->n; i++) {
    /* ceil of a lowered quotient: never above the true least count */
    double q = ceil(u->w[i] / L * (1 - SHRINK));
    u->m[i] = q > 1 ? (q < (double)UINT32_MAX ? (uint32_t)q : UINT32_MAX) : 1;
    need += u->m[i] - 1;
  }
  if (need > u->R)
    return true;
  uint32_t B = (uint32_t)(u->R - need);
  for (size_t k = 0; k < NFAM; k++)
    if (dff_refutes(u, &FAMILY[k], L, B))
      return true;
  for (size_t k = 0; u->integral && k < NFAM; k++)
    if (int_refutes(u, &FAMILY[k], L, B))
      return true;
  return false;
}

static int w_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

double eplb__uniform_bound(const eplb__layer_ctx_t *ctx, double lo, double hi) {
  return eplb__uniform_bound_ex(ctx, lo, hi, true);
}

double eplb__uniform_bound_ex(const eplb__layer_ctx_t *ctx, double lo, double hi, bool integral) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = 0;
  ub_t u = {.E = E, .R = R, .integral = integral};
  double result = lo;
  for (uint32_t g = 0; g < ctx->num_gpus; g++)
    G += ctx->slots_per_gpu[g] > 0;
  /* Subnormal loads are left to the exact-share bound: sizes over L would
   * lose their precision. */
  if (!(lo > 0) || !(hi > lo * (1 + 1e-6)) || eplb__load_scale(ctx->w, E) || G == 0)
    return result;
  u.G = G;
  u.w = eplb__malloc_array(E, sizeof *u.w);
  u.m = eplb__malloc_array(E, sizeof *u.m);
  u.suffix = eplb__malloc_array((size_t)E + 1, sizeof *u.suffix);
  u.pc = eplb__malloc_array(MAX_POINTS + 2, sizeof *u.pc);
  u.ph = eplb__malloc_array(MAX_POINTS + 2, sizeof *u.ph);
  /* An expert's points up to where its cost is 0 number at most
   * w / (0.1 L) + 2 (every f of the family is 0 below 0.1), and L is at
   * least the mean GPU load: 10 G + 2 E in all. Past the room a test proves
   * nothing (never wrong, only weaker). */
  u.cap = 10 * (size_t)ctx->num_gpus + 3 * (size_t)E + 64;
  u.seg = eplb__malloc_array(u.cap, sizeof *u.seg);
  u.dp = eplb__malloc_array(DP_SLOTS + 1, sizeof *u.dp);
  u.oj = eplb__malloc_array(MAX_OPTS, sizeof *u.oj);
  u.oh = eplb__malloc_array(MAX_OPTS, sizeof *u.oh);
  if (!u.w || !u.suffix || !u.m || !u.pc || !u.ph || !u.seg || !u.dp || !u.oj || !u.oh)
    goto done;
  for (uint32_t e = 0; e < E; e++)
    if (ctx->w[e] > 0)
      u.w[u.n++] = ctx->w[e];
  qsort(u.w, u.n, sizeof *u.w, w_desc);
  u.suffix[u.n] = 0;
  for (uint32_t i = u.n; i-- > 0;)
    u.suffix[i] = u.suffix[i + 1] + u.w[i];
  for (uint32_t g = 0; g < ctx->num_gpus; g++)
    u.S = ctx->slots_per_gpu[g] > u.S ? ctx->slots_per_gpu[g] : u.S;
  /* lo refuted (or known), hi reached by a plan: halve the gap to 1e-6. */
  while (hi > lo * (1 + 1e-6)) {
    double mid = 0.5 * (lo + hi);
    if (refuted(&u, mid))
      lo = mid;
    else
      hi = mid;
  }
  result = lo;
done:
  eplb__free(u.w);
  eplb__free(u.suffix);
  eplb__free(u.m);
  eplb__free(u.pc);
  eplb__free(u.ph);
  eplb__free(u.seg);
  eplb__free(u.dp);
  eplb__free(u.oj);
  eplb__free(u.oh);
  return result;
}
