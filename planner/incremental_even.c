/* planner/incremental_even.c — the incremental policy served by even shares
 * (shares = UNIFORM: vLLM, SGLang and DeepSeek's arrays give each replica 1/c
 * of its expert's tokens). incremental.c's walk chases the exact split's
 * bottleneck, which an even split does not have, so here every candidate is
 * scored as it will be served: J = busiest GPU under 1/c shares + price x
 * slots moved (price = move_weight x mean GPU load), within the budget:
 *  - the current placement (0 moves);
 *  - incremental.c's plan;
 *  - the even-share plan for the new loads relabelled onto the current
 *    placement (incremental.c's assignment; up to RELABEL_GPUS GPUs, its
 *    cost growing with the cube of the GPUs);
 *  - a walk from the current placement (toward): one slot changed, or two
 *    swapped, at a time, each step the change that lowers the busiest GPU
 *    (or the number of GPUs at it) most, while a step can still pay.
 * In every candidate an expert that stays on a GPU keeps its slot (vLLM's
 * preserve_intragpu_slots), so only changed slots are copied. This is what
 * the vLLM plugin calls with vLLM's current map (tools/python/eplb/vllm.py);
 * sequential, so every rank gets the same bytes. */
#include "planner/planner.h"

#include <stdlib.h>
#include <string.h>

/* Experts of largest load per replica a walk step may give a slot to. */
#define HOT_EXPERTS 8
/* Above this many GPUs the relabelled fresh plan is not a candidate. */
#define RELABEL_GPUS 256
/* GPU loads a layer's walk may evaluate (a fixed count, so the plan never
 * depends on the machine): at 1,024 GPUs x 2 slots a plateau of GPUs at
 * the maximum is worked down one GPU a step, ~2 M evaluations each; this
 * bounds a layer to ~0.1 s there while smaller walks run to their end. */
#define WALK_WORK (UINT64_C(1) << 24)

/* Busiest GPU of p2l under even shares (share [R] scratch). */
static double even_max(const eplb__layer_ctx_t *c, const int32_t *p2l, double *share) {
  eplb__uniform_shares(c->num_experts, c->num_slots, p2l, share);
  return eplb__layer_max_load(c, p2l, share, NULL);
}

/* Per GPU, an expert it held in cur stays in its slot there; the GPU's other
 * experts fill its other slots in order. used [max slots a GPU] scratch. */
static void keep_slots(const eplb__layer_ctx_t *c, const int32_t *cur, int32_t *p2l, int32_t *seg,
                       uint8_t *used) {
  for (uint32_t g = 0; g < c->num_gpus; g++) {
    uint32_t f = c->gpu_first[g], S = c->gpu_first[g + 1] - f;
    memcpy(seg, p2l + f, S * sizeof *seg);
    memset(used, 0, S);
    for (uint32_t s = 0; s < S; s++)
      p2l[f + s] = -1;
    for (uint32_t s = 0; s < S; s++)
      for (uint32_t j = 0; j < S; j++)
        if (!used[j] && seg[j] == cur[f + s]) {
          used[j] = 1, p2l[f + s] = seg[j];
          break;
        }
    for (uint32_t s = 0, j = 0; s < S; s++) {
      while (p2l[f + s] < 0 && used[j])
        j++;
      if (p2l[f + s] < 0)
        used[j] = 1, p2l[f + s] = seg[j];
    }
  }
}

/* The walk's state: placement row, replicas per (GPU, expert) n [G][E] and
 * per expert cnt [E], each expert's slots (eslot from eoff [E + 1]), GPU
 * loads, GPUs by load (desc), a stamp per GPU and the GPUs a tried change
 * touches (aff). */
typedef struct walk {
  const eplb__layer_ctx_t *c;
  int32_t *row;
  uint32_t *gpu, *n, *cnt, *order, *stamp, tick, *eoff, *eslot, *aff, naff;
  uint64_t work;
  double *load;
  uint32_t *emark, nstep; /* [E] == nstep: on a GPU at the busiest load */
  eplb__ranked_t *rk;
} walk_t;

static void measure(walk_t *w) {
  const eplb__layer_ctx_t *c = w->c;
  uint32_t G = c->num_gpus, E = c->num_experts;
  memset(w->cnt, 0, E * sizeof *w->cnt);
  for (uint32_t r = 0; r < c->num_slots; r++)
    w->cnt[w->row[r]]++;
  w->eoff[0] = 0;
  for (uint32_t e = 0; e < E; e++)
    w->eoff[e + 1] = w->eoff[e] + w->cnt[e];
  for (uint32_t r = c->num_slots; r-- > 0;) /* from the end: each expert's slots ascending */
    w->eslot[--w->eoff[w->row[r] + 1]] = r;
  for (uint32_t e = 0; e < E; e++) /* eoff[e + 1] fell to eoff[e]'s end: restore */
    w->eoff[e + 1] = w->eoff[e] + w->cnt[e];
  for (uint32_t g = 0; g < G; g++) {
    double t = 0;
    for (uint32_t r = c->gpu_first[g]; r < c->gpu_first[g + 1]; r++)
      t += c->w[w->row[r]] / w->cnt[w->row[r]];
    w->load[g] = t;
    w->rk[g] = (eplb__ranked_t){t, g};
  }
  qsort(w->rk, G, sizeof *w->rk, eplb__ranked_desc);
  for (uint32_t g = 0; g < G; g++)
    w->order[g] = w->rk[g].i;
}

/* The GPU loads a change leaves, sorted from the busiest, as their first
 * LEVELS distinct values with how many GPUs carry each: changes compare
 * lexicographically on them (the busiest GPU first, then how many are at
 * it, then the next load: a plateau of GPUs near the maximum is worked
 * down one by one). */
#define LEVELS 4
typedef struct levels {
  double v[LEVELS];
  uint32_t k[LEVELS], n;
} levels_t;

static int lev_cmp(const levels_t *a, const levels_t *b) {
  for (uint32_t i = 0; i < a->n && i < b->n; i++) {
    if (a->v[i] != b->v[i])
      return a->v[i] < b->v[i] ? -1 : 1;
    if (a->k[i] != b->k[i])
      return a->k[i] < b->k[i] ? -1 : 1;
  }
  return 0;
}

static void lev_add(levels_t *L, double v) {
  if (L->n && L->v[L->n - 1] == v)
    L->k[L->n - 1]++;
  else if (L->n < LEVELS)
    L->v[L->n] = v, L->k[L->n++] = 1;
}

/* v into the levels L (a value not among the first LEVELS distinct ones is
 * dropped): the changed GPUs arrive in any order. */
static void lev_insert(levels_t *L, double v) {
  uint32_t i = 0;
  while (i < L->n && L->v[i] > v)
    i++;
  if (i < L->n && L->v[i] == v) {
    L->k[i]++;
    return;
  }
  if (i == LEVELS)
    return;
  uint32_t n = L->n < LEVELS ? L->n : LEVELS - 1;
  memmove(L->v + i + 1, L->v + i, (n - i) * sizeof *L->v);
  memmove(L->k + i + 1, L->k + i, (n - i) * sizeof *L->k);
  L->v[i] = v, L->k[i] = 1, L->n = n + 1;
}

/* The levels when the GPUs aff (stamped with the current tick) carry nl
 * [G] instead of their loads: those of the unchanged GPUs (in order, the
 * last level counted whole) merged with those of the changed ones. Each
 * list's first LEVELS values hold every GPU at them, so the merge's do. */
static void top_of(walk_t *w, const double *nl, levels_t *L) {
  const eplb__layer_ctx_t *c = w->c;
  levels_t u = {.n = 0}, a = {.n = 0};
  w->work += w->naff + 1;
  for (uint32_t i = 0; i < c->num_gpus; i++) {
    uint32_t g = w->order[i];
    if (w->stamp[g] == w->tick)
      continue;
    if (u.n == LEVELS && w->load[g] != u.v[LEVELS - 1])
      break;
    lev_add(&u, w->load[g]);
  }
  for (uint32_t i = 0; i < w->naff; i++)
    lev_insert(&a, nl[w->aff[i]]);
  L->n = 0;
  for (uint32_t i = 0, j = 0; L->n < LEVELS && (i < u.n || j < a.n);) {
    double v = j >= a.n || (i < u.n && u.v[i] >= a.v[j]) ? u.v[i] : a.v[j];
    uint32_t k = 0;
    if (i < u.n && u.v[i] == v)
      k += u.k[i++];
    if (j < a.n && a.v[j] == v)
      k += a.k[j++];
    L->v[L->n] = v, L->k[L->n++] = k;
  }
}

static void touch(walk_t *w, uint32_t g) {
  if (w->stamp[g] != w->tick)
    w->stamp[g] = w->tick, w->aff[w->naff++] = g;
}

/* Slot s from its expert a to b: the loads of the GPUs holding a or b
 * change (their shares change) into nl. */
static void try_single(walk_t *w, uint32_t s, int32_t b, double *nl, levels_t *L) {
  const eplb__layer_ctx_t *c = w->c;
  uint32_t E = c->num_experts;
  int32_t a = w->row[s];
  double ca = w->cnt[a], cb = w->cnt[b], wa = c->w[a], wb = c->w[b];
  w->tick++, w->naff = 0;
  for (uint32_t i = w->eoff[a]; i < w->eoff[a + 1]; i++)
    touch(w, w->gpu[w->eslot[i]]);
  for (uint32_t i = w->eoff[b]; i < w->eoff[b + 1]; i++)
    touch(w, w->gpu[w->eslot[i]]);
  for (uint32_t i = 0; i < w->naff; i++) {
    uint32_t g = w->aff[i];
    uint32_t na = w->n[(size_t)g * E + a], nb = w->n[(size_t)g * E + b], on = w->gpu[s] == g;
    nl[g] = w->load[g] - na * wa / ca - nb * wb / cb + (na - on) * wa / (ca - 1) +
            (nb + on) * wb / (cb + 1);
  }
  top_of(w, nl, L);
}

/* Slots x (on GPU gx) and y swap experts. */
static void try_swap(walk_t *w, uint32_t x, uint32_t y, double *nl, levels_t *L) {
  const eplb__layer_ctx_t *c = w->c;
  int32_t a = w->row[x], b = w->row[y];
  double d = c->w[b] / w->cnt[b] - c->w[a] / w->cnt[a];
  uint32_t gx = w->gpu[x], gy = w->gpu[y];
  w->tick++, w->naff = 0;
  touch(w, gx);
  touch(w, gy);
  nl[gx] = w->load[gx] + d, nl[gy] = w->load[gy] - d;
  top_of(w, nl, L);
}

static void set_slot(walk_t *w, uint32_t s, int32_t e) {
  size_t g = w->gpu[s], E = w->c->num_experts;
  w->n[g * E + (uint32_t)w->row[s]]--;
  w->n[g * E + (uint32_t)e]++;
  w->row[s] = e;
}

/* The hot experts: largest load per replica, ties to the lower id. */
static uint32_t hot(walk_t *w, uint32_t *out) {
  const eplb__layer_ctx_t *c = w->c;
  uint32_t E = c->num_experts, n = 0;
  for (uint32_t e = 0; e < E; e++) {
    double v = c->w[e] / (w->cnt[e] ? w->cnt[e] : 1);
    uint32_t i = n < HOT_EXPERTS ? n++ : HOT_EXPERTS;
    while (i > 0 && c->w[out[i - 1]] / (w->cnt[out[i - 1]] ? w->cnt[out[i - 1]] : 1) < v) {
      if (i < HOT_EXPERTS)
        out[i] = out[i - 1];
      i--;
    }
    if (i < HOT_EXPERTS)
      out[i] = e;
  }
  return n;
}

/* One step: the change with the least levels (single changes first, then
 * swaps of a slot of the busiest GPU; ties to the first), applied when it
 * lowers the busiest load (by more than rounding) or the number of GPUs
 * at it. */
static bool step(walk_t *w, const int32_t *target, uint32_t room, double *nl) {
  const eplb__layer_ctx_t *c = w->c;
  uint32_t R = c->num_slots, hx[HOT_EXPERTS], nh = hot(w, hx);
  levels_t now, best, L;
  w->tick++, w->naff = 0;
  top_of(w, nl, &now);
  best = now;
  uint32_t bs = UINT32_MAX, by = UINT32_MAX;
  int32_t be = -1;
  /* A step must lower a GPU at the busiest load: a change of slot s from a
   * to b lowers only s's GPU and those holding b, so one where neither is
   * at it (a GPU holding a only gets heavier) is not tried; the first of
   * the least levels is the same (one lowering the busiest is below every
   * one that does not), at a third of the tries at 256 GPUs x 2 slots. */
  double busiest = w->load[w->order[0]];
  w->nstep++;
  for (uint32_t i = 0; i < c->num_gpus && w->load[w->order[i]] == busiest; i++) {
    uint32_t g = w->order[i];
    for (uint32_t r = c->gpu_first[g]; r < c->gpu_first[g + 1]; r++)
      w->emark[w->row[r]] = w->nstep;
  }
  for (uint32_t s = 0; s < R; s++)
    for (uint32_t j = 0; j <= nh; j++) {
      int32_t b = j < nh ? (int32_t)hx[j] : target ? target[s] : -1;
      int32_t a = w->row[s];
      if (b < 0 || a == b || w->cnt[a] < 2 ||
          (w->load[w->gpu[s]] != busiest && w->emark[b] != w->nstep))
        continue;
      try_single(w, s, b, nl, &L);
      if (lev_cmp(&L, &best) < 0)
        best = L, bs = s, be = b, by = UINT32_MAX;
    }
  uint32_t top = w->order[0];
  for (uint32_t x = c->gpu_first[top]; room >= 2 && x < c->gpu_first[top + 1]; x++)
    for (uint32_t y = 0; y < R; y++) {
      if (w->gpu[y] == top || w->row[x] == w->row[y])
        continue;
      try_swap(w, x, y, nl, &L);
      if (lev_cmp(&L, &best) < 0)
        best = L, bs = x, by = y, be = -1;
    }
  /* What is left only evens out lighter GPUs: not worth a copy. */
  if (bs == UINT32_MAX ||
      !(best.v[0] < now.v[0] * (1 - 1e-12) || (best.v[0] <= now.v[0] && best.k[0] < now.k[0])))
    return false;
  if (by == UINT32_MAX) {
    set_slot(w, bs, be);
  } else {
    int32_t a = w->row[bs];
    set_slot(w, bs, w->row[by]);
    set_slot(w, by, a);
  }
  measure(w);
  return true;
}

static uint32_t count_moved(const int32_t *a, const int32_t *b, uint32_t R) {
  uint32_t m = 0;
  for (uint32_t r = 0; r < R; r++)
    m += a[r] != b[r];
  return m;
}

/* The walk from cur (toward target where it differs, when given): the
 * prefix of its steps with the least busiest GPU + price x moved. */
static eplb_status_t toward(const eplb__layer_ctx_t *c, const int32_t *cur, const int32_t *target,
                            uint32_t budget, double price, int32_t *out) {
  uint32_t G = c->num_gpus, E = c->num_experts, R = c->num_slots;
  walk_t w = {.c = c};
  w.row = eplb__malloc_array(R, sizeof *w.row);
  w.gpu = eplb__malloc_array(R, sizeof *w.gpu);
  w.n = eplb__calloc((size_t)G * E, sizeof *w.n);
  w.cnt = eplb__malloc_array(E, sizeof *w.cnt);
  w.order = eplb__malloc_array(G, sizeof *w.order);
  w.stamp = eplb__calloc(G, sizeof *w.stamp);
  w.load = eplb__malloc_array(2 * (size_t)G, sizeof *w.load);
  w.rk = eplb__malloc_array(G, sizeof *w.rk);
  w.eoff = eplb__malloc_array((size_t)E + 1, sizeof *w.eoff);
  w.eslot = eplb__malloc_array(R, sizeof *w.eslot);
  w.aff = eplb__malloc_array(G, sizeof *w.aff);
  w.emark = eplb__calloc(E, sizeof *w.emark);
  eplb_status_t st = EPLB_OK;
  if (!w.row || !w.gpu || !w.n || !w.cnt || !w.order || !w.stamp || !w.load || !w.rk || !w.eoff ||
      !w.eslot || !w.aff || !w.emark) {
    st = eplb__error(EPLB_ENOMEM, "planner", "incremental: %u GPUs x %u experts", G, E);
    goto done;
  }
  memcpy(w.row, cur, R * sizeof *w.row);
  memcpy(out, cur, R * sizeof *out);
  for (uint32_t g = 0; g < G; g++)
    for (uint32_t r = c->gpu_first[g]; r < c->gpu_first[g + 1]; r++)
      w.gpu[r] = g, w.n[(size_t)g * E + (uint32_t)cur[r]]++;
  measure(&w);
  double total = 0;
  for (uint32_t e = 0; e < E; e++)
    total += c->w[e];
  double mean = total / G, best = w.load[w.order[0]];
  /* A change is predicted from the loads it alters, which differ from the
   * re-summed ones by rounding: the margin above and the cap on steps keep
   * two changes from undoing each other for ever. */
  for (uint32_t moved = 0, steps = 0; moved < budget && steps < 2 * R && w.work < WALK_WORK;
       steps++) {
    if (mean + price * (moved + 1) >= best)
      break; /* even a perfect balance would not pay for one more slot */
    if (!step(&w, target, budget - moved, w.load + G))
      break;
    moved = count_moved(w.row, cur, R);
    if (moved > budget)
      break;
    double cost = w.load[w.order[0]] + price * moved;
    if (cost < best)
      best = cost, memcpy(out, w.row, R * sizeof *out);
  }
done:
  eplb__free(w.row);
  eplb__free(w.gpu);
  eplb__free(w.n);
  eplb__free(w.cnt);
  eplb__free(w.order);
  eplb__free(w.stamp);
  eplb__free(w.load);
  eplb__free(w.rk);
  eplb__free(w.eoff);
  eplb__free(w.eslot);
  eplb__free(w.aff);
  eplb__free(w.emark);
  return st;
}

/* cand with its experts that stay on a GPU in their slots, kept in best
 * when it costs less (ties: fewer moves). seg and used: keep_slots's. */
static void consider(const eplb__layer_ctx_t *c, const int32_t *cur, int32_t *cand, uint32_t budget,
                     double price, double *sh, int32_t *best, double *bestJ, uint32_t *bestm,
                     int32_t *seg, uint8_t *used) {
  keep_slots(c, cur, cand, seg, used);
  uint32_t m = count_moved(cand, cur, c->num_slots);
  if (budget && m > budget)
    return;
  double J = even_max(c, cand, sh) + price * m;
  if (J < *bestJ || (J == *bestJ && m < *bestm)) {
    *bestJ = J, *bestm = m;
    memcpy(best, cand, c->num_slots * sizeof *best);
  }
}

eplb_status_t eplb__incremental_even_layer(const eplb__layer_ctx_t *ctx,
                                           const eplb_plan_options_t *opts, const int32_t *cur,
                                           int32_t *phy2log, double *share, uint32_t *moved,
                                           int *fallback) {
  uint32_t G = ctx->num_gpus, E = ctx->num_experts, R = ctx->num_slots, S = 0;
  for (uint32_t g = 0; g < G; g++)
    S = ctx->slots_per_gpu[g] > S ? ctx->slots_per_gpu[g] : S;
  int32_t *cand = eplb__malloc_array(R, sizeof *cand), *fresh = NULL, *seg = NULL;
  double *sh = eplb__malloc_array(R, sizeof *sh);
  uint8_t *used = eplb__malloc_array(S, 1);
  eplb_status_t st = EPLB_OK;
  if (!cand || !sh || !used || !(seg = eplb__malloc_array(S, sizeof *seg)))
    st = eplb__error(EPLB_ENOMEM, "planner", "incremental: %u slots", R);
  double total = 0;
  for (uint32_t e = 0; e < E; e++)
    total += ctx->w[e];
  double price = opts->move_weight * total / G, bestJ = 0;
  uint32_t budget = opts->move_budget, bestm = 0;
  *fallback = 0;
  memcpy(phy2log, cur, R * sizeof *phy2log);
  if (st == EPLB_OK)
    bestJ = even_max(ctx, cur, sh);
  /* incremental.c's plan, scored as served. */
  uint32_t m0 = 0;
  if (st == EPLB_OK &&
      (st = eplb__incremental_layer(ctx, opts, cur, cand, sh, &m0, fallback)) == EPLB_OK) {
    consider(ctx, cur, cand, budget, price, sh, phy2log, &bestJ, &bestm, seg, used);
  }
  /* The fresh even-share plan, relabelled onto cur. */
  if (st == EPLB_OK && G <= RELABEL_GPUS) {
    eplb__layer_ctx_t u = *ctx; /* eplb__uniform_layer may raise its bound */
    int fb = 0;
    if (!(fresh = eplb__malloc_array(R, sizeof *fresh)))
      st = eplb__error(EPLB_ENOMEM, "planner", "incremental: %u slots", R);
    if (st == EPLB_OK && (st = eplb__uniform_layer(&u, fresh, sh, &fb)) == EPLB_OK &&
        (st = eplb__relabel(ctx, cur, fresh)) == EPLB_OK)
      consider(ctx, cur, fresh, budget, price, sh, phy2log, &bestJ, &bestm, seg, used);
  }
  /* The walk (towards the fresh plan where there is one); groups kept on
   * nodes would need a walk that keeps them: not tried there. */
  for (int k = 0; k < 1 + (fresh != NULL); k++)
    if (st == EPLB_OK && !(ctx->keep_groups && ctx->num_groups > 1) &&
        (st = toward(ctx, cur, k ? NULL : fresh, budget ? budget : R, price, cand)) == EPLB_OK) {
      consider(ctx, cur, cand, budget, price, sh, phy2log, &bestJ, &bestm, seg, used);
    }
  eplb__uniform_shares(E, R, phy2log, share);
  *moved = bestm;
  *fallback = *fallback && bestm == 0;
  eplb__free(cand);
  eplb__free(fresh);
  eplb__free(seg);
  eplb__free(sh);
  eplb__free(used);
  return st;
}
