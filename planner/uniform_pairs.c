/* planner/uniform_pairs.c — a start placement for uniform shares on GPUs of
 * two slots (uniform.c).
 *
 * With two slots a GPU carries the sum of two per-replica loads w/c, and for
 * given counts the best pairing is the sorted one (the k-th largest replica
 * with the k-th smallest), so the layer's max load is a function of the
 * counts alone. Min-max counts make every replica about as heavy as the
 * heaviest one, so two of them meet on a GPU: at 61 x 384 experts on 512 GPUs
 * x 2 slots min-max counts paired this way sit near 1.13 x the mean GPU
 * load, and the descent of uniform.c, which moves one slot at a time on the
 * busiest GPU, only reached 1.08. Here counts grow from one replica each,
 * every spare slot going to one of the two experts of the worst pair (the
 * one whose gain leaves the better sorted pairing), then single slots move
 * from cheap experts to those of the worst pair while that helps: about
 * 1.02 x the mean at 512 GPUs and 1.007 at 1,024 in a model of it (numpy,
 * zipf loads), where the mean is a lower bound of every plan. The polish
 * first tries the 16 experts whose replica grows least and, stuck there,
 * the 384 least (every expert of most models; an anneal of the counts in numpy found 0.6% more at
 * 512 GPUs; the wide tries gave 1.0158 -> 1.0139 in the bench, at 1.2 x the time).
 *
 * The count search evaluates a pairing in O(E): experts are kept in order of
 * per-replica load, and pairs are runs of two experts' replicas. No random
 * draws and no threads: the same loads give the same bytes. */
#include "planner/planner.h"

#include <string.h>

/* Levels of the pairing's key: the largest pair loads with their counts. */
#define LEVELS 4
/* Slots moved by the polish, and the cheapest experts it takes one from,
 * first and once stuck. */
#define POLISH_STEPS 192
#define POLISH_FROM 16
#define POLISH_WIDE 384

typedef struct {
  double v[LEVELS];
  uint32_t n[LEVELS];
  int32_t a, b; /* the experts of a heaviest pair (b = -1: an empty slot) */
} pair_key_t;

typedef struct {
  const double *w;
  uint32_t E, G, R;
  uint32_t *c;   /* [E] replicas */
  double *v;     /* [E] w / c */
  uint32_t used; /* sum of c */
  uint32_t *ord; /* [E] experts by w/c descending, ties by id */
  uint32_t *tmp; /* [E] */
  /* A walk that meets a pair above cut (> 0) stops there: its key is worse
   * than one whose heaviest pair is cut, whatever the rest. */
  double cut;
} pairs_t;

/* c[e] += d, keeping v and used. */
static void recount(pairs_t *p, uint32_t e, int d) {
  p->c[e] = (uint32_t)((int)p->c[e] + d);
  p->v[e] = p->w[e] / p->c[e];
  p->used = (uint32_t)((int)p->used + d);
}

static bool before(const pairs_t *p, uint32_t x, uint32_t y) {
  double vx = p->v[x], vy = p->v[y];
  return vx > vy || (vx == vy && x < y);
}

/* Moves expert e (whose count just changed) to its place in ord. */
static void settle(pairs_t *p, uint32_t e) {
  uint32_t i = 0;
  while (p->ord[i] != e)
    i++;
  while (i > 0 && before(p, e, p->ord[i - 1])) {
    p->ord[i] = p->ord[i - 1];
    i--;
  }
  while (i + 1 < p->E && before(p, p->ord[i + 1], e)) {
    p->ord[i] = p->ord[i + 1];
    i++;
  }
  p->ord[i] = e;
}

static void key_add(pair_key_t *k, double v, uint32_t n, int32_t a, int32_t b) {
  if (k->n[LEVELS - 1] && v < k->v[LEVELS - 1]) /* most pairs: below every level */
    return;
  for (int i = 0; i < LEVELS; i++) {
    if (k->n[i] && v == k->v[i]) {
      k->n[i] += n;
      return;
    }
    if (!k->n[i] || v > k->v[i]) {
      memmove(&k->v[i + 1], &k->v[i], (LEVELS - 1 - i) * sizeof k->v[0]);
      memmove(&k->n[i + 1], &k->n[i], (LEVELS - 1 - i) * sizeof k->n[0]);
      k->v[i] = v;
      k->n[i] = n;
      if (i == 0)
        k->a = a, k->b = b;
      return;
    }
  }
}

/* Lower pair loads first, then fewer GPUs at them. */
static bool key_less(const pair_key_t *x, const pair_key_t *y) {
  for (int i = 0; i < LEVELS; i++) {
    if (x->v[i] != y->v[i])
      return x->v[i] < y->v[i];
    if (x->n[i] != y->n[i])
      return x->n[i] < y->n[i];
  }
  return false;
}

/* Run i of the sorted replicas: expert ord[i], or for i == E the empty
 * slots (weight 0, while counts sum below R). */
static uint32_t run_len(const pairs_t *p, uint32_t i, uint32_t empty) {
  return i < p->E ? p->c[p->ord[i]] : empty;
}

static int32_t run_id(const pairs_t *p, uint32_t i) { return i < p->E ? (int32_t)p->ord[i] : -1; }

/* Walks the sorted pairing: pair k (GPU k) takes the k-th heaviest replica
 * and the k-th lightest. With out, writes the pairs' experts (-1: empty) to
 * out[2k], out[2k + 1]. */
static void walk(const pairs_t *p, pair_key_t *k, int32_t *out) {
  uint32_t empty = p->R - p->used;
  if (k) {
    memset(k, 0, sizeof *k);
    k->a = k->b = -1;
  }
  uint32_t i = 0, j = p->E, fi = run_len(p, 0, empty), bj = empty;
  while (fi == 0 && i < p->E)
    fi = run_len(p, ++i, empty);
  while (bj == 0 && j > 0)
    bj = run_len(p, --j, empty);
  for (uint32_t g = 0; g < p->G;) {
    uint32_t m = fi < bj ? fi : bj;
    m = m < p->G - g ? m : p->G - g;
    int32_t a = run_id(p, i), b = run_id(p, j);
    double s = (a >= 0 ? p->v[a] : 0.0) + (b >= 0 ? p->v[b] : 0.0);
    if (k && p->cut > 0 && s > p->cut) {
      k->v[0] = s, k->n[0] = UINT32_MAX;
      return;
    }
    if (k)
      key_add(k, s, m, a, b);
    for (uint32_t q = 0; out && q < m; q++) {
      out[2 * (size_t)(g + q)] = a;
      out[2 * (size_t)(g + q) + 1] = b;
    }
    g += m;
    fi -= m;
    bj -= m;
    while (fi == 0 && i < p->E)
      fi = run_len(p, ++i, empty);
    while (bj == 0 && j > 0)
      bj = run_len(p, --j, empty);
  }
}

/* c[up] + 1 and c[down] - 1 (either may be -1), ord kept sorted. */
static void apply_move(pairs_t *p, int32_t up, int32_t down) {
  if (up >= 0)
    recount(p, (uint32_t)up, 1), settle(p, (uint32_t)up);
  if (down >= 0)
    recount(p, (uint32_t)down, -1), settle(p, (uint32_t)down);
}

/* The pairing's key after apply_move(up, down), which is then undone. */
static void try_move(pairs_t *p, int32_t up, int32_t down, pair_key_t *k) {
  memcpy(p->tmp, p->ord, p->E * sizeof *p->ord);
  apply_move(p, up, down);
  walk(p, k, NULL);
  if (up >= 0)
    recount(p, (uint32_t)up, -1);
  if (down >= 0)
    recount(p, (uint32_t)down, 1);
  memcpy(p->ord, p->tmp, p->E * sizeof *p->ord);
}

/* Spare slots, one at a time, to an expert of the worst pair. */
static void grow(pairs_t *p) {
  uint32_t spare = p->R - p->E;
  /* While half the slots or more are empty every replica pairs with an
   * empty one: the worst pair is the heaviest replica's, and the step is
   * the min-max rule's, with no pairing to walk. */
  for (; spare > 0 && p->used < p->G && p->c[p->ord[0]] < p->G; spare--)
    apply_move(p, (int32_t)p->ord[0], -1);
  for (; spare > 0; spare--) {
    pair_key_t cur, k, best;
    walk(p, &cur, NULL);
    int32_t pick = -1, cand[2] = {cur.a, cur.b};
    bool two = cand[0] >= 0 && cand[1] >= 0 && p->c[cand[0]] < p->G && p->c[cand[1]] < p->G;
    for (int i = 0; i < 2; i++) {
      if (cand[i] < 0 || p->c[cand[i]] >= p->G)
        continue;
      if (!two) { /* one candidate: nothing to compare */
        pick = cand[i];
        break;
      }
      p->cut = pick < 0 ? 0.0 : best.v[0];
      try_move(p, cand[i], -1, &k);
      p->cut = 0.0;
      if (pick < 0 || key_less(&k, &best))
        pick = cand[i], best = k;
    }
    if (pick < 0) /* both at G copies (or no load at all): the first that fits */
      for (uint32_t e = 0; pick < 0 && e < p->E; e++)
        pick = p->c[e] < p->G ? (int32_t)e : -1;
    apply_move(p, pick, -1);
  }
}

/* What expert e's replica weighs once it gives up a slot. */
static double cost(const pairs_t *p, uint32_t e) { return p->w[e] / (p->c[e] - 1); }

/* The `width` experts (c >= 2, not `keep`) whose replica grows least
 * when they give up a slot, cheapest first, into from[]; returns how many. */
static uint32_t cheapest(const pairs_t *p, int32_t keep, uint32_t *from, uint32_t width) {
  uint32_t n = 0;
  for (uint32_t e = 0; e < p->E; e++) {
    if (p->c[e] < 2 || (int32_t)e == keep)
      continue;
    double v = cost(p, e);
    if (n == width && !(v < cost(p, from[n - 1])))
      continue;
    uint32_t i = n < width ? n++ : n - 1;
    for (; i > 0 && cost(p, from[i - 1]) > v; i--)
      from[i] = from[i - 1];
    from[i] = e;
  }
  return n;
}

static void polish(pairs_t *p) {
  uint32_t from[POLISH_WIDE];
  uint32_t width = POLISH_FROM;
  for (int step = 0; step < POLISH_STEPS;) {
    pair_key_t cur, k, best;
    walk(p, &cur, NULL);
    best = cur;
    int32_t up = -1, down = -1, cand[2] = {cur.a, cur.b};
    for (int i = 0; i < 2; i++) {
      if (cand[i] < 0 || p->c[cand[i]] >= p->G)
        continue;
      uint32_t n = cheapest(p, cand[i], from, width);
      for (uint32_t q = 0; q < n; q++) {
        p->cut = best.v[0];
        try_move(p, cand[i], (int32_t)from[q], &k);
        p->cut = 0.0;
        if (key_less(&k, &best))
          best = k, up = cand[i], down = (int32_t)from[q];
      }
    }
    if (up < 0 && width == POLISH_WIDE)
      return;
    if (up < 0) { /* stuck among the cheapest: look wider once */
      width = POLISH_WIDE;
      continue;
    }
    apply_move(p, up, down);
    width = POLISH_FROM;
    step++;
  }
}

/* A pair holding one expert twice (its run crosses the middle) trades its
 * second replica with another pair's, the trade that keeps both pairs'
 * larger load least. false when no pair can take it. */
static bool split_twins(const pairs_t *p, int32_t *out) {
  for (uint32_t g = 0; g < p->G; g++) {
    int32_t a = out[2 * g], b = out[2 * g + 1];
    if (a != b)
      continue;
    uint32_t h = UINT32_MAX;
    double hv = 0;
    for (uint32_t q = 0; q < p->G; q++) {
      int32_t qa = out[2 * q], qb = out[2 * q + 1];
      if (qa == a || qb == a || qb == b)
        continue;
      double s1 = p->v[a] + (qb >= 0 ? p->v[qb] : 0.0);
      double s2 = p->v[qa] + p->v[b];
      double v = s1 > s2 ? s1 : s2;
      if (h == UINT32_MAX || v < hv)
        h = q, hv = v;
    }
    if (h == UINT32_MAX)
      return false;
    out[2 * g + 1] = out[2 * h + 1];
    out[2 * h + 1] = b;
  }
  return true;
}

bool eplb__uniform_pairs_apply(const eplb__layer_ctx_t *ctx) {
  uint32_t G = ctx->num_gpus;
  if (ctx->num_slots != 2 * G || ctx->num_experts > ctx->num_slots || ctx->num_experts < 2)
    return false;
  for (uint32_t g = 0; g < G; g++) /* gpu_first[g] is then 2 g */
    if (ctx->slots_per_gpu[g] != 2)
      return false;
  return true;
}

eplb_status_t eplb__uniform_pairs_start(const eplb__layer_ctx_t *ctx, int32_t *p2l, bool *ok) {
  uint32_t E = ctx->num_experts;
  pairs_t p = {.w = ctx->w, .E = E, .G = ctx->num_gpus, .R = ctx->num_slots, .used = E};
  *ok = false;
  p.c = eplb__malloc_array(E, sizeof *p.c);
  p.v = eplb__malloc_array(E, sizeof *p.v);
  p.ord = eplb__malloc_array(E, sizeof *p.ord);
  p.tmp = eplb__malloc_array(E, sizeof *p.tmp);
  eplb_status_t st = EPLB_OK;
  if (!p.c || !p.v || !p.ord || !p.tmp) {
    st = eplb__error(EPLB_ENOMEM, "planner", "uniform pairs: %u experts", E);
    goto done;
  }
  for (uint32_t e = 0; e < E; e++) { /* insertion sort: E is small */
    uint32_t i = e;
    p.c[e] = 1;
    p.v[e] = p.w[e];
    for (; i > 0 && before(&p, e, p.ord[i - 1]); i--)
      p.ord[i] = p.ord[i - 1];
    p.ord[i] = e;
  }
  grow(&p);
  polish(&p);
  walk(&p, NULL, p2l);
  *ok = split_twins(&p, p2l);
done:
  eplb__free(p.c);
  eplb__free(p.v);
  eplb__free(p.ord);
  eplb__free(p.tmp);
  return st;
}
