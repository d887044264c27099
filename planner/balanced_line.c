/* planner/balanced_line.c — balanced's start under exact shares on GPUs of
 * two slots: experts laid end to end on a line cut into GPUs.
 *
 * With exact shares an expert may be split over GPUs in any proportion, so
 * experts laid end to end on a line of length W (their total load) cut
 * every T = W / G gives each GPU exactly T, the mean load and so a lower
 * bound of every plan. A GPU of two slots can hold two pieces: a cut
 * inside an expert is fine, but an expert lighter than T can lie wholly
 * inside one GPU between two others, a third piece. So the line holds only
 * the heavy experts (w >= T, each crosses a cut), and every light one is a
 * leaf set on a GPU that lies wholly inside one heavy expert's stretch: that
 * GPU carries the leaf and T minus it of the heavy expert, still T. A heavy
 * expert whose stretch (its load plus its leaves') is X long has at least
 * floor(X / T) - 1 such GPUs. Light experts no stretch can take are paired
 * two to a GPU past the line, at the cost of the room they leave.
 *
 * Min-max counts, LPT and the refine's swaps reached 1.001 x the bound on
 * average at 61 x 384 experts on 1,024 GPUs x 2 slots in 0.9 - 1.7 s; the
 * line reaches the bound whenever the leaves fit, in O(E log E + G) a
 * layer (the split of the result is the layer's one flow solve). Its free
 * slots (GPUs with one piece) give every expert a second replica, so that a
 * batch's split can spread it, then replicas by the min-max rule. The line
 * is for a split per batch: served by static shares a GPU carrying one
 * expert has no second one to average with, and held out it lost to the
 * old start (eplb__layer_ctx_t.static_shares). With more than two slots
 * min-max counts and LPT already reach the bound at these sizes.
 *
 * No random draws and no threads: the same loads give the same bytes. */
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Max loads tried, as factors of the mean: the first at which every expert
 * fits is laid out (the split of the result may end lower). */
static const double TRY[] = {1 + 1e-9, 1 + 2.5e-4, 1 + 1e-3, 1 + 4e-3, 1 + 1.6e-2, 1 + 6.4e-2};

typedef struct {
  const eplb__layer_ctx_t *ctx;
  uint32_t E, G;
  eplb__ranked_t *ord;  /* [E] experts by load descending */
  double *span;         /* [E] a heavy expert's stretch: its load and its leaves' */
  double *key;          /* [E] a heavy expert's leaves less its places for them */
  uint32_t *host;       /* [E] by rank: the heavy rank hosting a leaf, or PAIRED */
  uint32_t *head;       /* [E] a heavy rank's first leaf (NONE: none) */
  uint32_t *next;       /* [E] a leaf's next leaf on the same host */
  uint32_t *nleaf;      /* [E] leaves of each heavy rank */
  uint32_t *heap, *pos; /* [E] */
  uint32_t *fill;       /* [G] pieces on each GPU */
} line_t;

#define NONE UINT32_MAX
#define PAIRED UINT32_MAX

/* GPUs wholly inside a stretch of length span: where its leaves go. */
static double places(double span, double T) { return floor(span / T) - 1; }

/* The next GPU past the line: of the unhosted leaves among ranks [*a, *b),
 * the heaviest (*x) with the lightest (*y) when the two fit in T, else
 * alone (*y = NONE); false when none is left. */
static bool next_pair(const line_t *l, double T, uint32_t *a, uint32_t *b, uint32_t *x,
                      uint32_t *y) {
  while (*a < *b && l->host[*a] != PAIRED)
    (*a)++;
  while (*b > *a + 1 && l->host[*b - 1] != PAIRED)
    (*b)--;
  if (*a >= *b)
    return false;
  *x = (*a)++;
  *y = *b - 1 > *x && l->ord[*x].v + l->ord[*b - 1].v <= T ? --(*b) : NONE;
  return true;
}

/* Leaves (ranks k.. of ord), heaviest first, each to the heavy expert with
 * the most places left (a heap on leaves less places); those no stretch
 * takes are paired past the line. Returns the GPUs the pairs need. */
static uint32_t assign(line_t *l, uint32_t k, double T) {
  uint32_t E = l->E;
  eplb__gpu_heap_t hp;
  eplb__gpu_heap_init(&hp, l->key, l->heap, l->pos, k);
  for (uint32_t i = 0; i < k; i++) {
    l->span[i] = l->ord[i].v;
    l->nleaf[i] = 0;
    l->head[i] = NONE;
    l->key[i] = -places(l->span[i], T);
    eplb__gpu_heap_push(&hp, i);
  }
  uint32_t *tail = l->pos; /* free once the heap is done: reused below */
  for (uint32_t j = k; j < E; j++) {
    uint32_t i = k ? hp.heap[0] : 0;
    l->host[j] = PAIRED;
    if (!k || l->key[i] > -1)
      continue;
    l->host[j] = i;
    l->nleaf[i]++;
    l->span[i] += l->ord[j].v;
    l->key[i] = (double)l->nleaf[i] - places(l->span[i], T);
    eplb__gpu_heap_raised(&hp, i);
  }
  /* Each host's leaves as a list in rank order. */
  for (uint32_t i = 0; i < k; i++)
    tail[i] = NONE;
  for (uint32_t j = k; j < E; j++) {
    uint32_t i = l->host[j];
    if (i == PAIRED)
      continue;
    l->next[j] = NONE;
    if (tail[i] == NONE)
      l->head[i] = j;
    else
      l->next[tail[i]] = j;
    tail[i] = j;
  }
  uint32_t gpus = 0, x, y;
  for (uint32_t a = k, b = E; next_pair(l, T, &a, &b, &x, &y);)
    gpus++;
  return gpus;
}

static void put(line_t *l, int32_t *p2l, uint32_t g, uint32_t e) {
  p2l[l->ctx->gpu_first[g] + l->fill[g]++] = (int32_t)e;
}

/* Lays the heavy experts out along the line, their leaves on the GPUs
 * wholly inside their stretches, then the pairs; false when that takes
 * more than G GPUs or the cuts' rounding left a stretch fewer inside GPUs
 * than leaves. */
static bool lay_out(line_t *l, uint32_t k, double T, uint32_t pair_gpus, int32_t *p2l) {
  uint32_t E = l->E, G = l->G;
  memset(l->fill, 0, G * sizeof *l->fill);
  double at = 0;
  uint32_t prev_b = NONE, g = 0;
  for (uint32_t i = 0; i < k; i++) {
    double q0 = at / T, q1 = (at + l->span[i]) / T;
    uint32_t a = (uint32_t)floor(q0), b = (uint32_t)ceil(q1) - 1;
    b = b < a ? a : b;
    if (b >= G)
      return false;
    /* The first GPU is the previous stretch's last unless a cut fell on
     * the boundary; the last is the next one's unless one falls there. */
    bool shared_a = prev_b == a, shared_b = i + 1 < k && (double)b == floor(q1);
    uint32_t leaf = l->head[i];
    for (uint32_t h = a; h <= b; h++) {
      put(l, p2l, h, l->ord[i].i);
      if (leaf != NONE && !(h == a && shared_a) && !(h == b && shared_b)) {
        put(l, p2l, h, l->ord[leaf].i);
        leaf = l->next[leaf];
      }
    }
    if (leaf != NONE)
      return false;
    prev_b = b;
    g = b + 1;
    at += l->span[i];
  }
  if (g + pair_gpus > G)
    return false;
  uint32_t x, y;
  for (uint32_t a = k, b = E; next_pair(l, T, &a, &b, &x, &y); g++) {
    put(l, p2l, g, l->ord[x].i);
    if (y != NONE)
      put(l, p2l, g, l->ord[y].i);
  }
  return true;
}

/* Free slots (GPUs with one piece) take a second replica of every expert
 * with one, heaviest first, then replicas by the min-max rule (most load
 * per replica first), each on a GPU that lacks it. A light expert has one
 * replica on the line and a batch's split can only spread one that has
 * more: held out on the ESFT trace with the split per batch, the line with
 * min-max fillers alone was 0.01 below the old start on 2 of 4 cases, with
 * second replicas first 0.02 - 0.09 above it on all 4. The heap's key is
 * -w/c, and below every such key for one replica. */
static void fill_free(line_t *l, int32_t *p2l) {
  const uint32_t *first = l->ctx->gpu_first;
  const double *w = l->ctx->w;
  uint32_t E = l->E, *cnt = l->nleaf;
  double one = 2 * l->ord[0].v + 1; /* above every w/c */
  memset(cnt, 0, E * sizeof *cnt);
  for (uint32_t g = 0; g < l->G; g++)
    for (uint32_t j = 0; j < l->fill[g]; j++)
      cnt[p2l[first[g] + j]]++;
  eplb__gpu_heap_t hp;
  eplb__gpu_heap_init(&hp, l->key, l->heap, l->pos, E);
  for (uint32_t e = 0; e < E; e++) {
    l->key[e] = cnt[e] == 1 ? -(w[e] + one) : -w[e] / cnt[e];
    eplb__gpu_heap_push(&hp, e);
  }
  for (uint32_t g = 0; g < l->G; g++)
    while (l->fill[g] < 2) {
      uint32_t e = eplb__gpu_heap_pop(&hp), skip = NONE;
      if (l->fill[g] && p2l[first[g]] == (int32_t)e) {
        skip = e; /* two to choose from at least (E >= 2) */
        e = eplb__gpu_heap_pop(&hp);
      }
      put(l, p2l, g, e);
      l->key[e] = -w[e] / ++cnt[e];
      eplb__gpu_heap_push(&hp, e);
      if (skip != NONE)
        eplb__gpu_heap_push(&hp, skip);
    }
}

bool eplb__balanced_line_apply(const eplb__layer_ctx_t *ctx) {
  /* The shapes the uniform-share pairing plans (two slots a GPU). */
  return eplb__uniform_pairs_apply(ctx) && !(ctx->keep_groups && ctx->num_groups > 1) &&
         !ctx->static_shares;
}

eplb_status_t eplb__balanced_line(const eplb__layer_ctx_t *ctx, int32_t *p2l, bool *ok) {
  uint32_t E = ctx->num_experts, G = ctx->num_gpus;
  eplb_status_t st = EPLB_OK;
  *ok = false;
  line_t l = {.ctx = ctx, .E = E, .G = G};
  l.ord = eplb__malloc_array(E, sizeof *l.ord);
  l.span = eplb__malloc_array(2 * (size_t)E, sizeof *l.span);
  l.host = eplb__malloc_array(6 * (size_t)E + G, sizeof *l.host);
  if (!l.ord || !l.span || !l.host) {
    st = eplb__error(EPLB_ENOMEM, "planner", "balanced: out of memory for %u experts", E);
    goto done;
  }
  l.key = l.span + E;
  l.head = l.host + E;
  l.next = l.head + E;
  l.nleaf = l.next + E;
  l.heap = l.nleaf + E;
  l.pos = l.heap + E;
  l.fill = l.pos + E;
  double W = 0;
  for (uint32_t e = 0; e < E; e++) {
    l.ord[e] = (eplb__ranked_t){ctx->w[e], e};
    W += ctx->w[e];
  }
  if (!(W > 0))
    goto done;
  qsort(l.ord, E, sizeof *l.ord, eplb__ranked_desc);
  for (size_t t = 0; t < sizeof TRY / sizeof *TRY && !*ok; t++) {
    double T = W / G * TRY[t];
    uint32_t k = 0;
    while (k < E && l.ord[k].v >= T)
      k++;
    uint32_t pair_gpus = assign(&l, k, T);
    *ok = lay_out(&l, k, T, pair_gpus, p2l);
    if (*ok)
      fill_free(&l, p2l);
  }
done:
  eplb__free(l.ord);
  eplb__free(l.span);
  eplb__free(l.host);
  return st;
}
