/* planner/incremental.c — the incremental policy: re-plan from the current
 * placement while moving few expert weights.
 *
 * Per layer three candidates compete on J = max_load + price * slots_moved
 * (price = move_weight * mean GPU load), subject to the move budget:
 *  - the current placement with shares re-split for the new loads (the
 *    guard, 0 moves);
 *  - a greedy walk from the current placement: the exact split's bottleneck
 *    set A (experts whose GPUs N(A) are full at T*) can only shrink by giving
 *    an A expert a GPU outside N(A), so each step (one exact split) collects
 *    changes that add a replica of an A expert there (replacing a redundant
 *    replica: 1 slot) or move one there (a swap or a chain: 2 slots), ranks
 *    them with a cheap model (A's load spread over N(A) and the new GPU, see
 *    pool_add), checks them exactly in that order (a probe, one max-flow;
 *    a solve only for those the probe cannot rule out) and applies the
 *    first whose T drops by more than MOVE_HURDLE times its price; a fixed
 *    number of exact evaluations per layer bounds its time;
 *  - the balanced plan for the new loads, relabelled so that it keeps as
 *    many experts where they are as possible: target GPUs are matched to
 *    physical GPUs with the same slot count by a max-overlap assignment
 *    (Hungarian; nodes first under keep_groups), then each GPU keeps its
 *    experts in the slots they already occupy. Tried only when the walk
 *    ended more than a quarter of the slots' price above the lower bound
 *    (one slot's with free moves): it costs more than the walk and, on
 *    drifted loads, moves most slots.
 * The greedy targets the bottleneck directly, so a handful of changes
 * usually recovers most of a full replan's gain; the relabelled target
 * covers the rest when moves are cheap.
 * Profile (58 x 256, 64 GPUs x 5 slots, issue #16): the walk used to solve
 * every candidate in the order of a bound on its gain (~200 exact splits a
 * layer, each rebuilding the split's graph) and always ran the relabelled
 * replan; the model's order finds the change that pays within a few
 * probes, so a layer now costs ~60 of them and the plan ~10x fewer
 * instructions, below one balanced plan. */
#include "planner/planner.h"
#include "lp/lp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

eplb_status_t eplb__incremental_check(const eplb_loads_t *loads, const eplb_plan_options_t *opts) {
  const eplb_plan_t *f = opts->from;
  if (!f)
    return eplb__error(EPLB_EINVAL, "planner",
                       "incremental policy needs the current plan (options.from / --from)");
  if (f->num_layers != loads->num_layers || f->num_experts != loads->num_experts)
    return eplb__error(EPLB_EINVAL, "planner",
                       "incremental: current plan has %u layers x %u experts, loads %u x %u",
                       f->num_layers, f->num_experts, loads->num_layers, loads->num_experts);
  if (f->num_gpus != opts->num_gpus || f->num_nodes != opts->num_nodes ||
      f->num_slots != opts->num_replicas)
    return eplb__error(EPLB_EINVAL, "planner",
                       "incremental: current plan has %u GPUs, %u nodes, %u slots; options "
                       "%u, %u, %u",
                       f->num_gpus, f->num_nodes, f->num_slots, opts->num_gpus, opts->num_nodes,
                       opts->num_replicas);
  for (uint32_t g = 0; g < f->num_gpus; g++) {
    uint32_t s = opts->slots_per_gpu ? opts->slots_per_gpu[g] : opts->num_replicas / opts->num_gpus;
    if (f->slots_per_gpu[g] != s)
      return eplb__error(EPLB_EINVAL, "planner",
                         "incremental: GPU %u has %u slots in the current plan, %u in the options",
                         g, f->slots_per_gpu[g], s);
  }
  if (!(opts->move_weight >= 0) || !isfinite(opts->move_weight))
    return eplb__error(EPLB_EINVAL, "planner", "incremental: move_weight %g must be >= 0",
                       opts->move_weight);
  return EPLB_OK;
}

/* ---- assignment --------------------------------------------------------- */

/* Min-cost perfect assignment of rows to columns of the n x n matrix c
 * (Hungarian method with potentials, O(n^3)); col_of[i] receives row i's
 * column. work: 4(n+1) doubles and 2(n+1) uint32. */
static void hungarian(uint32_t n, const double *c, uint32_t *col_of, double *u, uint32_t *p) {
  double *v = u + n + 1, *minv = v + n + 1;
  uint32_t *way = p + n + 1;
  bool *used = (bool *)(minv + n + 1); /* fits: n + 1 doubles hold n + 1 bools */
  for (uint32_t j = 0; j <= n; j++)
    u[j] = v[j] = 0, p[j] = 0;
  for (uint32_t i = 1; i <= n; i++) {
    p[0] = i;
    uint32_t j0 = 0;
    for (uint32_t j = 0; j <= n; j++)
      minv[j] = INFINITY, used[j] = false;
    do {
      used[j0] = true;
      uint32_t i0 = p[j0], j1 = 0;
      double delta = INFINITY;
      for (uint32_t j = 1; j <= n; j++) {
        if (used[j])
          continue;
        double cur = c[(size_t)(i0 - 1) * n + (j - 1)] - u[i0] - v[j];
        if (cur < minv[j])
          minv[j] = cur, way[j] = j0;
        if (minv[j] < delta)
          delta = minv[j], j1 = j;
      }
      for (uint32_t j = 0; j <= n; j++) {
        if (used[j])
          u[p[j]] += delta, v[j] -= delta;
        else
          minv[j] -= delta;
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      uint32_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0);
  }
  for (uint32_t j = 1; j <= n; j++)
    col_of[p[j] - 1] = j - 1;
}

/* Beyond this many GPUs the O(G^3) assignment gives way to a greedy one. */
#define HUNGARIAN_MAX 256
#define INCOMPATIBLE 1e12

/* Assigns rows to columns minimising c: Hungarian, or greedy (rows in
 * order, cheapest free column) for large n. */
static eplb_status_t assign(uint32_t n, const double *c, uint32_t *col_of) {
  if (n <= HUNGARIAN_MAX) {
    double *dw = eplb__malloc_array((size_t)4 * (n + 1), sizeof *dw);
    uint32_t *uw = eplb__malloc_array((size_t)2 * (n + 1), sizeof *uw);
    if (!dw || !uw) {
      eplb__free(dw);
      eplb__free(uw);
      return eplb__error(EPLB_ENOMEM, "planner", "incremental: out of memory");
    }
    hungarian(n, c, col_of, dw, uw);
    eplb__free(dw);
    eplb__free(uw);
    return EPLB_OK;
  }
  bool *taken = eplb__calloc(n, sizeof *taken);
  if (!taken)
    return eplb__error(EPLB_ENOMEM, "planner", "incremental: out of memory");
  for (uint32_t i = 0; i < n; i++) {
    uint32_t best = UINT32_MAX;
    for (uint32_t j = 0; j < n; j++)
      if (!taken[j] && (best == UINT32_MAX || c[(size_t)i * n + j] < c[(size_t)i * n + best]))
        best = j;
    taken[best] = true;
    col_of[i] = best;
  }
  eplb__free(taken);
  return EPLB_OK;
}

/* Multiset overlap of slot ranges [a0, a1) of x and [b0, b1) of y; mark is
 * an [E] scratch of zeros, left zeroed. */
static double overlap(const int32_t *x, uint32_t a0, uint32_t a1, const int32_t *y, uint32_t b0,
                      uint32_t b1, uint32_t *mark) {
  double o = 0;
  for (uint32_t r = a0; r < a1; r++)
    mark[x[r]]++;
  for (uint32_t r = b0; r < b1; r++)
    if (mark[y[r]]) {
      mark[y[r]]--;
      o++;
    }
  for (uint32_t r = a0; r < a1; r++)
    mark[x[r]] = 0;
  return o;
}

/* Nodes n and m can trade places when their GPUs have the same slot counts
 * in order (the common case: uniform slots). */
static bool nodes_compatible(const eplb__layer_ctx_t *ctx, uint32_t gpn, uint32_t n, uint32_t m) {
  for (uint32_t k = 0; k < gpn; k++)
    if (ctx->slots_per_gpu[n * gpn + k] != ctx->slots_per_gpu[m * gpn + k])
      return false;
  return true;
}

/* Rewrites tgt[R] as the same plan up to a relabelling of GPUs (equal slot
 * counts; same-node blocks under keep_groups) and of slots within a GPU,
 * keeping as many experts of cur in place as possible. */
eplb_status_t eplb__relabel(const eplb__layer_ctx_t *ctx, const int32_t *cur, int32_t *tgt) {
  uint32_t G = ctx->num_gpus, R = ctx->num_slots, E = ctx->num_experts;
  uint32_t N = ctx->num_nodes ? ctx->num_nodes : 1, gpn = G / N;
  const uint32_t *gf = ctx->gpu_first;
  eplb_status_t st = EPLB_OK;
  double *c = eplb__malloc_array((size_t)G * G, sizeof *c);
  uint32_t *mark = eplb__calloc(E, sizeof *mark);
  uint32_t *gpu_of = eplb__malloc_array(G, sizeof *gpu_of); /* target GPU -> physical GPU */
  uint32_t *node_of = eplb__malloc_array(N, sizeof *node_of);
  int32_t *out = eplb__malloc_array(R, sizeof *out);
  bool *fill = eplb__malloc_array(R, sizeof *fill);
  if (!c || !mark || !gpu_of || !node_of || !out || !fill) {
    st = eplb__error(EPLB_ENOMEM, "planner", "incremental: out of memory");
    goto done;
  }
  bool by_node = ctx->keep_groups && ctx->num_groups > 1 && N > 1;
  for (uint32_t n = 0; n < N; n++)
    node_of[n] = n;
  if (by_node) {
    /* Whole nodes move together so that groups stay on one node. */
    for (uint32_t n = 0; n < N; n++)
      for (uint32_t m = 0; m < N; m++)
        c[(size_t)n * N + m] = nodes_compatible(ctx, gpn, n, m)
                                   ? -overlap(tgt, gf[n * gpn], gf[(n + 1) * gpn], cur, gf[m * gpn],
                                              gf[(m + 1) * gpn], mark)
                                   : INCOMPATIBLE;
    if ((st = assign(N, c, node_of)))
      goto done;
  }
  for (uint32_t j = 0; j < G; j++)
    for (uint32_t g = 0; g < G; g++) {
      bool ok = ctx->slots_per_gpu[j] == ctx->slots_per_gpu[g] &&
                (!by_node || node_of[j / gpn] == g / gpn);
      c[(size_t)j * G + g] =
          ok ? -overlap(tgt, gf[j], gf[j + 1], cur, gf[g], gf[g + 1], mark) : INCOMPATIBLE;
    }
  if ((st = assign(G, c, gpu_of)))
    goto done;
  for (uint32_t j = 0; j < G; j++) {
    uint32_t g = gpu_of[j];
    /* Keep the experts that stay on g in their slots, fill the rest. */
    for (uint32_t r = gf[j]; r < gf[j + 1]; r++)
      mark[tgt[r]]++;
    for (uint32_t r = gf[g]; r < gf[g + 1]; r++) {
      fill[r] = !mark[cur[r]];
      if (!fill[r]) {
        out[r] = cur[r];
        mark[cur[r]]--;
      }
    }
    uint32_t r = gf[g];
    for (uint32_t q = gf[j]; q < gf[j + 1]; q++) {
      if (!mark[tgt[q]])
        continue;
      mark[tgt[q]]--;
      while (!fill[r])
        r++;
      out[r++] = tgt[q];
    }
  }
  memcpy(tgt, out, R * sizeof *tgt);
done:
  eplb__free(c);
  eplb__free(mark);
  eplb__free(gpu_of);
  eplb__free(node_of);
  eplb__free(out);
  eplb__free(fill);
  return st;
}

/* ---- greedy walk -------------------------------------------------------- */

/* Candidates kept per bottleneck expert and kind (by estimate), and
 * bottleneck experts tried per step (the heaviest per replica first). */
#define GREEDY_CANDS 3
#define GREEDY_EXPERTS 4
/* Consecutive changes that relieve a tight set without lowering T yet. */
#define PLATEAU_MOVES 2
/* Exact evaluations (probes and solves) per layer: bounds the walk's time;
 * each rebuilds the split's graph (tens of microseconds at DeepSeek-V3
 * sizes), and a balanced plan costs about a hundred of them. */
#define GREEDY_SOLVES 60
/* Changes evaluated exactly per step, and per step once a plateau change
 * is known (see pick). */
#define PICK_EVALS 24
#define PLATEAU_EVALS 4
/* A change must lower T by MOVE_HURDLE times its price per changed slot:
 * the walk's later changes each gain little more than their price, and
 * together moved more slots than they were worth to the caller (the move
 * price is a cost of the migration, not its whole cost: staging, copies,
 * a switch round per layer). */
#define MOVE_HURDLE 7

/* A change to evaluate: slot a (UINT32_MAX: none) takes ea, slot s takes
 * es; est estimates the new load of the GPUs it touches, dm the change in
 * slots moved. */
typedef struct {
  double est, score;
  double fh, dl, loc; /* model inputs, see pool_add */
  uint32_t a, s;
  int32_t ea, es;
  int dm;
} cand_t;

typedef struct {
  const eplb__layer_ctx_t *ctx;
  const int32_t *cur;
  int32_t *p;     /* [R] walking placement */
  uint32_t *cnt;  /* [E] replicas of each expert in p */
  double *share;  /* [R] shares of p (after each bottleneck solve) */
  double *cshare; /* [R] scratch shares of a candidate */
  uint32_t *gpu;  /* [R] GPU of each slot */
  uint32_t *on;   /* [G][E] replicas of each expert on each GPU in p */
  uint32_t *red;  /* [R] slots of p holding a redundant replica (this step) */
  uint32_t nred;
  cand_t *pool; /* [GREEDY_EXPERTS * 3 * GREEDY_CANDS] candidates of this step */
  uint32_t npool;
  uint32_t gpn;   /* GPUs per node */
  bool grouped;   /* keep groups on nodes */
  double T;       /* exact max load of p */
  uint32_t moved; /* slots of p differing from cur */
  double price;   /* J's price of a moved slot */
  double hurdle;  /* gain per slot a change must bring: MOVE_HURDLE x price */
  uint32_t budget;
  uint32_t solves;   /* exact evaluations so far (bounded by GREEDY_SOLVES) */
  const uint8_t *be; /* [E] bottleneck experts A of p's split */
  double na_gpus;    /* |N(A)| */
} walk_t;

static bool holds(const walk_t *w, uint32_t g, int32_t e) {
  return w->on[(size_t)g * w->ctx->num_experts + (uint32_t)e] != 0;
}

/* Under keep_groups: every replica of e's group, the slot `except` aside,
 * is on node `node`. */
static bool group_on_node(const walk_t *w, int32_t e, uint32_t node, uint32_t except) {
  uint32_t per = w->ctx->num_experts / w->ctx->num_groups, grp = (uint32_t)e / per;
  for (uint32_t r = 0; r < w->ctx->num_slots; r++)
    if (r != except && (uint32_t)w->p[r] / per == grp && w->gpu[r] / w->gpn != node)
      return false;
  return true;
}

static int slot_delta(const walk_t *w, uint32_t r, int32_t e) {
  return (e != w->cur[r]) - (w->p[r] != w->cur[r]);
}

static void set_slot(walk_t *w, uint32_t r, int32_t e) {
  uint32_t E = w->ctx->num_experts;
  w->cnt[w->p[r]]--;
  w->on[(size_t)w->gpu[r] * E + (uint32_t)w->p[r]]--;
  w->cnt[e]++;
  w->on[(size_t)w->gpu[r] * E + (uint32_t)e]++;
  w->p[r] = e;
}

/* Applies change c to p; old[] keeps what it replaced for undo_change. */
static void apply_change(walk_t *w, const cand_t *c, int32_t old[2]) {
  old[0] = c->a != UINT32_MAX ? w->p[c->a] : 0, old[1] = w->p[c->s];
  if (c->a != UINT32_MAX)
    w->p[c->a] = c->ea;
  w->p[c->s] = c->es;
}

static void undo_change(walk_t *w, const cand_t *c, const int32_t old[2]) {
  if (c->a != UINT32_MAX)
    w->p[c->a] = old[0];
  w->p[c->s] = old[1];
}

/* Solves the split with change c applied to p (then undone): *T2. */
static eplb_status_t solve_change(walk_t *w, const cand_t *c, double *T2) {
  int32_t old[2];
  apply_change(w, c, old);
  w->solves++;
  eplb_status_t st = eplb__split_shares(w->ctx, w->p, w->cshare, T2);
  undo_change(w, c, old);
  return st;
}

/* Whether a candidate of estimate est would enter c[0..n) (most are
 * rejected, and are not built then: the enumeration is a third of a step). */
static inline bool beats(const cand_t *c, uint32_t n, double est) {
  return n < GREEDY_CANDS || est < c[GREEDY_CANDS - 1].est;
}

/* Keeps the GREEDY_CANDS candidates of lowest estimate in c[0..*n). */
static void keep_best(cand_t *c, uint32_t *n, cand_t x) {
  uint32_t k;
  if (*n < GREEDY_CANDS) {
    k = (*n)++;
  } else {
    if (x.est >= c[GREEDY_CANDS - 1].est)
      return;
    k = GREEDY_CANDS - 1; /* drops the worst */
  }
  while (k > 0 && c[k - 1].est > x.est) {
    c[k] = c[k - 1];
    k--;
  }
  c[k] = x;
}

/* Adds c to the step's pool unless it breaks the move budget, scored by
 * the model's gain per changed slot. The model: A is tight, W(A) = T
 * |N(A)|; a change that gives an expert e of A a replica on h outside N(A)
 * lets A spread over N(A) and h, whose other load fh stays (dl more landing
 * on N(A) from a swap or chain), and e sheds at most its own load; loc is
 * the estimate of any other GPU the change loads. A change that gives A no
 * new GPU is predicted at T (no gain). */
static void pool_add(walk_t *w, cand_t c) {
  c.dm = slot_delta(w, c.s, c.es) + (c.a != UINT32_MAX ? slot_delta(w, c.a, c.ea) : 0);
  if (w->budget && c.dm > 0 && w->moved + (uint32_t)c.dm > w->budget)
    return;
  double pred = w->T;
  if (w->be[c.es] && w->na_gpus > 0) {
    double spread = (w->T * w->na_gpus + c.fh + c.dl) / (w->na_gpus + 1);
    pred = fmax(spread, w->T - w->ctx->w[c.es] / w->na_gpus);
  }
  pred = fmax(pred, c.loc);
  c.score = (w->T - pred - w->hurdle * c.dm) / (c.dm > 0 ? c.dm : 0.5);
  w->pool[w->npool++] = c;
}

/* Collects the changes that give bottleneck expert e a slot on a GPU outside
 * N(A) (bg[h] == 0): a new replica over a redundant one (1 slot), a swap
 * with one of e's replicas (2 slots), or a new replica that pushes h's
 * heaviest expert into a redundant slot elsewhere (2 slots). The estimate
 * is the load the touched GPUs would get under the current split. */
static void collect(walk_t *w, int32_t e, const double *gl, const uint8_t *bg) {
  const eplb__layer_ctx_t *ctx = w->ctx;
  const double *x = ctx->w;
  cand_t add[GREEDY_CANDS], swp[GREEDY_CANDS], chn[GREEDY_CANDS];
  uint32_t nadd = 0, nswp = 0, nchn = 0;
  uint32_t mine[64], nmine = 0; /* e's slots (the first 64) */
  for (uint32_t r = 0; r < ctx->num_slots && nmine < 64; r++)
    if (w->p[r] == e)
      mine[nmine++] = r;
  for (uint32_t h = 0; h < ctx->num_gpus; h++) {
    if (bg[h] || holds(w, h, e))
      continue;
    uint32_t node = h / w->gpn;
    for (uint32_t s = ctx->gpu_first[h]; s < ctx->gpu_first[h + 1]; s++) {
      int32_t b = w->p[s];
      double base = gl[h] - w->share[s] * x[b];
      double ea = base + x[e] / (w->cnt[e] + 1);
      if (w->cnt[b] >= 2 && beats(add, nadd, ea) && (!w->grouped || group_on_node(w, e, node, s)))
        keep_best(add, &nadd, (cand_t){.est = ea, .fh = base, .a = UINT32_MAX, .s = s, .es = e});
      for (uint32_t k = 0; k < nmine; k++) {
        uint32_t a = mine[k], g = w->gpu[a];
        if (holds(w, g, b))
          continue;
        if (w->grouped && g / w->gpn != node &&
            (!group_on_node(w, e, node, a) || !group_on_node(w, b, g / w->gpn, s)))
          continue;
        double ng = gl[g] - w->share[a] * x[e] + w->share[s] * x[b];
        double nh = base + w->share[a] * x[e];
        double es = nh > ng ? nh : ng;
        if (beats(swp, nswp, es))
          keep_best(swp, &nswp,
                    (cand_t){.est = es,
                             .fh = base,
                             .dl = bg[g] ? w->share[s] * x[b] : 0,
                             .a = a,
                             .s = s,
                             .ea = b,
                             .es = e});
      }
    }
    /* A chain: e takes h's heaviest slot s, whose expert b moves to a
     * redundant slot r elsewhere (when adding e would overload h). */
    uint32_t s = UINT32_MAX;
    for (uint32_t q = ctx->gpu_first[h]; q < ctx->gpu_first[h + 1]; q++)
      if (s == UINT32_MAX || w->share[q] * x[w->p[q]] > w->share[s] * x[w->p[s]])
        s = q;
    int32_t b = w->p[s];
    if (w->grouped || b == e)
      continue;
    double nh = gl[h] - w->share[s] * x[b] + x[e] / (w->cnt[e] + 1);
    /* red is sorted by the load its GPU keeps without the slot: the first
     * slot that fits gives the chain's lowest estimate for this h. */
    for (uint32_t k = 0; k < w->nred; k++) {
      uint32_t r = w->red[k], h2 = w->gpu[r];
      int32_t c = w->p[r];
      if (c == e || c == b || h2 == h || holds(w, h2, b))
        continue;
      double n2 = gl[h2] - w->share[r] * x[c] + w->share[s] * x[b];
      keep_best(chn, &nchn,
                (cand_t){.est = nh > n2 ? nh : n2,
                         .fh = gl[h] - w->share[s] * x[b],
                         .dl = bg[h2] ? w->share[s] * x[b] : 0,
                         .loc = n2,
                         .a = r,
                         .s = s,
                         .ea = b,
                         .es = e});
      break;
    }
  }
  for (uint32_t k = 0; k < nadd; k++)
    pool_add(w, add[k]);
  for (uint32_t k = 0; k < nchn; k++)
    pool_add(w, chn[k]);
  for (uint32_t k = 0; k < nswp; k++)
    pool_add(w, swp[k]);
}

/* Best model score first; among equal scores the lowest estimate. */
static int score_desc(const void *x, const void *y) {
  const cand_t *a = x, *b = y;
  if (a->score != b->score)
    return a->score > b->score ? -1 : 1;
  if (a->est != b->est)
    return a->est < b->est ? -1 : 1;
  /* Then by the slots and experts: a total order, so the same on every libc. */
  if (a->s != b->s)
    return a->s < b->s ? -1 : 1;
  if (a->a != b->a)
    return a->a < b->a ? -1 : 1;
  if (a->es != b->es)
    return a->es < b->es ? -1 : 1;
  return (a->ea > b->ea) - (a->ea < b->ea);
}

/* Whether change c applied to p has its optimum above cap: one max-flow
 * (eplb__split_above) instead of a solve's several. */
static eplb_status_t probe_change(walk_t *w, const cand_t *c, double cap, bool *above) {
  const eplb__layer_ctx_t *ctx = w->ctx;
  int32_t old[2];
  apply_change(w, c, old);
  eplb_split_problem_t pb = {.num_experts = ctx->num_experts,
                             .num_gpus = ctx->num_gpus,
                             .num_slots = ctx->num_slots,
                             .phy2log = (const uint32_t *)(const void *)w->p,
                             .slots_per_gpu = ctx->slots_per_gpu};
  eplb_status_t st = eplb__split_above(ctx->split, &pb, ctx->w, cap, above);
  undo_change(w, c, old);
  return st;
}

/* Probes answer with the solver's tolerances, so they only rule out
 * changes clearly above what would matter: the decisions stay those of
 * exact solves. */
#define PROBE_SLACK 1e-9

/* Evaluates the step's pool in the model's order: *best gets the first
 * change whose exact split lowers T by more than its hurdle (best->s ==
 * UINT32_MAX: none), with its T2; *plat the change of lowest estimate seen
 * that does not raise T. The model ranks well but predicts loosely, so
 * the exact answer decides, and the first change that pays is taken: the
 * next step's solve would see the same bottleneck again, and a probe is
 * one max-flow, a solve several, each rebuilding the graph. The walk stops
 * probing where the model predicts no gain, after PICK_EVALS changes, and
 * after PLATEAU_EVALS once a plateau change is known (most steps that find
 * nothing better are plateaus between tight sets). */
static eplb_status_t pick(walk_t *w, cand_t *best, double *best_T, cand_t *plat) {
  best->s = plat->s = UINT32_MAX;
  plat->est = INFINITY;
  qsort(w->pool, w->npool, sizeof *w->pool, score_desc);
  uint32_t evals = 0;
  for (uint32_t k = 0; k < w->npool && w->solves < GREEDY_SOLVES; k++, evals++) {
    const cand_t *c = &w->pool[k];
    if (c->score <= 0 || evals >= PICK_EVALS || (plat->s != UINT32_MAX && evals >= PLATEAU_EVALS))
      break;
    double need = w->T - w->hurdle * c->dm - w->T * 1e-9;
    bool above = false;
    eplb_status_t st = probe_change(w, c, need * (1 + PROBE_SLACK), &above);
    if (st)
      return st;
    if (above) {
      /* Not a better change; still a plateau move if T does not rise. */
      if (c->est < plat->est && (st = probe_change(w, c, w->T * (1 + PROBE_SLACK), &above)))
        return st;
      if (above) {
        w->solves++;
        continue;
      }
    }
    double T2;
    if ((st = solve_change(w, c, &T2)))
      return st;
    if (T2 <= w->T * (1 + 1e-12) && c->est < plat->est)
      *plat = *c;
    if (w->T - T2 - w->hurdle * c->dm > w->T * 1e-9) {
      *best = *c;
      *best_T = T2;
      break;
    }
  }
  return EPLB_OK;
}

/* Walks from cur (copied into w->p) while a change lowers J. */
static eplb_status_t greedy(walk_t *w, double lb) {
  const eplb__layer_ctx_t *ctx = w->ctx;
  uint32_t E = ctx->num_experts, G = ctx->num_gpus, R = ctx->num_slots;
  eplb_status_t st = EPLB_OK;
  double *gl = eplb__malloc_array(G, sizeof *gl);
  uint8_t *bg = eplb__malloc_array((size_t)G + E, 1);
  eplb__ranked_t *keys = eplb__malloc_array((size_t)(E > G ? E : G), sizeof *keys);
  int32_t *snap_p = eplb__malloc_array(R, sizeof *snap_p);
  eplb__ranked_t *rk = eplb__malloc_array(R, sizeof *rk);
  uint32_t *snap_cnt = eplb__malloc_array(E, sizeof *snap_cnt);
  double snap_J = w->T + w->price * w->moved;
  uint32_t snap_moved = w->moved, streak = 0;
  if (!gl || !bg || !keys || !snap_p || !snap_cnt || !rk) {
    st = eplb__error(EPLB_ENOMEM, "planner", "incremental: out of memory");
    goto done;
  }
  uint8_t *be = bg + G;
  memcpy(snap_p, w->p, R * sizeof *snap_p);
  memcpy(snap_cnt, w->cnt, E * sizeof *snap_cnt);
  for (uint32_t iter = 0; iter < 2 * ctx->num_slots; iter++) {
    if ((st = eplb__split_bottleneck(ctx, w->p, w->share, &w->T, gl, bg, be)))
      goto done;
    w->solves++;
    /* A change that moves a slot must gain its hurdle, so none pays once
     * the gain left (down to the bound) is below one slot's. */
    if (w->T <= lb * (1 + 1e-9) || w->T - lb <= w->hurdle || w->solves >= GREEDY_SOLVES)
      break;
    /* The heaviest bottleneck experts per replica first. */
    uint32_t na = 0;
    for (uint32_t e = 0; e < E; e++)
      if (be[e] && w->cnt[e])
        keys[na++] = (eplb__ranked_t){ctx->w[e] / w->cnt[e], e};
    qsort(keys, na, sizeof *keys, eplb__ranked_desc);
    if (na > GREEDY_EXPERTS)
      na = GREEDY_EXPERTS;
    /* Redundant slots, the lightest GPU left without the slot first
     * (collect takes the first that fits for a chain). */
    w->nred = 0;
    for (uint32_t r = 0; r < R; r++)
      if (w->cnt[w->p[r]] >= 2)
        rk[w->nred++] = (eplb__ranked_t){-(gl[w->gpu[r]] - w->share[r] * ctx->w[w->p[r]]), r};
    qsort(rk, w->nred, sizeof *rk, eplb__ranked_desc);
    for (uint32_t k = 0; k < w->nred; k++)
      w->red[k] = rk[k].i;
    w->npool = 0;
    w->be = be;
    w->na_gpus = 0;
    for (uint32_t g = 0; g < G; g++)
      w->na_gpus += bg[g] != 0;
    for (uint32_t k = 0; k < na; k++)
      collect(w, (int32_t)keys[k].i, gl, bg);
    cand_t best, plat;
    double best_T = w->T;
    if ((st = pick(w, &best, &best_T, &plat)))
      goto done;
    bool plateau = best.s == UINT32_MAX;
    if (plateau) {
      /* Several disjoint sets may be tight at T: relieve one now, the
       * next when it is the certificate; the snapshot undoes a plateau
       * walk that never pays. */
      if (plat.s == UINT32_MAX || ++streak > PLATEAU_MOVES)
        break;
      best = plat;
    } else {
      streak = 0;
    }
    if (best.a != UINT32_MAX)
      set_slot(w, best.a, best.ea);
    set_slot(w, best.s, best.es);
    w->moved = (uint32_t)((int)w->moved + best.dm);
    if (!plateau && best_T + w->price * w->moved < snap_J) {
      snap_J = best_T + w->price * w->moved;
      snap_moved = w->moved;
      memcpy(snap_p, w->p, R * sizeof *snap_p);
      memcpy(snap_cnt, w->cnt, E * sizeof *snap_cnt);
    }
  }
  if ((st = eplb__split_shares(ctx, w->p, w->share, &w->T)))
    goto done;
  if (w->T + w->price * w->moved > snap_J) {
    memcpy(w->p, snap_p, R * sizeof *snap_p);
    memcpy(w->cnt, snap_cnt, E * sizeof *snap_cnt);
    w->moved = snap_moved;
    st = eplb__split_shares(ctx, w->p, w->share, &w->T);
  }
done:
  eplb__free(snap_p);
  eplb__free(rk);
  eplb__free(snap_cnt);
  eplb__free(gl);
  eplb__free(bg);
  eplb__free(keys);
  return st;
}

/* ---- the policy --------------------------------------------------------- */

static uint32_t count_moved(const int32_t *a, const int32_t *b, uint32_t R) {
  uint32_t m = 0;
  for (uint32_t r = 0; r < R; r++)
    m += a[r] != b[r];
  return m;
}

eplb_status_t eplb__incremental_layer(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                                      const int32_t *cur, int32_t *phy2log, double *share,
                                      uint32_t *moved, int *fallback) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots;
  eplb_status_t st = EPLB_OK;
  *moved = 0;
  *fallback = 0;
  int32_t *tgt = eplb__malloc_array(R, sizeof *tgt);
  double *tsh = eplb__malloc_array(R, sizeof *tsh);
  int32_t *wp = eplb__malloc_array(R, sizeof *wp);
  double *wsh = eplb__malloc_array(R, sizeof *wsh);
  uint32_t *cnt = eplb__calloc(E, sizeof *cnt);
  uint32_t *gpu = eplb__malloc_array(R, sizeof *gpu);
  uint32_t *red = eplb__malloc_array(R, sizeof *red);
  uint32_t *on = eplb__calloc((size_t)ctx->num_gpus * E, sizeof *on);
  cand_t *pool = eplb__malloc_array((size_t)GREEDY_EXPERTS * 3 * GREEDY_CANDS, sizeof *pool);
  if (!tgt || !tsh || !wp || !wsh || !cnt || !gpu || !red || !on || !pool) {
    st = eplb__error(EPLB_ENOMEM, "planner", "incremental: out of memory");
    goto done;
  }
  double total = 0;
  for (uint32_t e = 0; e < E; e++)
    total += ctx->w[e];
  double price = opts->move_weight * total / ctx->num_gpus;
  uint32_t budget = opts->move_budget;

  /* Guard: the current placement, re-split. */
  double T0;
  memcpy(phy2log, cur, R * sizeof *phy2log);
  if ((st = eplb__split_shares(ctx, phy2log, share, &T0)))
    goto done;
  double best_J = T0;
  double lb = ctx->lower_bound;
  if (T0 <= lb * (1 + 1e-9))
    goto done; /* already optimal for these loads */

  /* The greedy walk from the current placement. */
  memcpy(wp, cur, R * sizeof *wp);
  for (uint32_t g = 0; g < ctx->num_gpus; g++)
    for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++) {
      gpu[r] = g;
      cnt[cur[r]]++;
      on[(size_t)g * E + (uint32_t)cur[r]]++;
    }
  walk_t w = {.ctx = ctx,
              .cur = cur,
              .p = wp,
              .cnt = cnt,
              .share = wsh,
              .cshare = tsh, /* scratch until the target is planned */
              .gpu = gpu,
              .on = on,
              .red = red,
              .pool = pool,
              .gpn = ctx->num_gpus / (ctx->num_nodes ? ctx->num_nodes : 1),
              .grouped = ctx->keep_groups && ctx->num_groups > 1,
              .T = T0,
              .price = price,
              .hurdle = price * MOVE_HURDLE,
              .budget = budget};
  if ((st = greedy(&w, lb)))
    goto done;
  double J2 = w.T + price * w.moved;
  if (J2 < best_J) {
    best_J = J2;
    memcpy(phy2log, wp, R * sizeof *phy2log);
    memcpy(share, wsh, R * sizeof *share);
    *moved = w.moved;
  }

  /* The balanced replan, relabelled onto the current placement: it moves
   * at least one slot, so it cannot beat a walk that ended within one
   * slot's price of the bound. It costs as much as a balanced plan, more
   * than the walk, and on drifted loads it moves most slots (a different
   * packing keeps few experts in place under any relabelling: ~70% of them
   * at 64 GPUs x 5 slots), so it is tried only when the walk ended more
   * than a quarter of the slots' price above the bound. */
  if (best_J <= lb + price * (price > 0 ? R / 4.0 : 1))
    goto done;
  int fb = 0;
  double T1;
  if ((st = eplb__balanced_layer(ctx, tgt, tsh, &fb)) || (st = eplb__relabel(ctx, cur, tgt)) ||
      (st = eplb__split_shares(ctx, tgt, tsh, &T1)))
    goto done;
  uint32_t m1 = count_moved(cur, tgt, R);
  /* The walk wins ties: it moves fewer slots for the same J. */
  if ((!budget || m1 <= budget) && T1 + price * m1 < best_J * (1 - 1e-12)) {
    best_J = T1 + price * m1;
    memcpy(phy2log, tgt, R * sizeof *phy2log);
    memcpy(share, tsh, R * sizeof *share);
    *moved = m1;
  }
  *fallback = *moved == 0 && T1 < T0 * (1 - 1e-9);
done:
  eplb__free(tgt);
  eplb__free(tsh);
  eplb__free(wp);
  eplb__free(wsh);
  eplb__free(cnt);
  eplb__free(gpu);
  eplb__free(red);
  eplb__free(on);
  eplb__free(pool);
  return st;
}
