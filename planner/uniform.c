/* planner/uniform.c — placement for uniform shares (plan.h "Shares").
 *
 * vLLM, SGLang and DeepSeek's arrays split an expert's tokens evenly over its
 * c replicas, so a slot carries w/c whatever shares the planner computed. A
 * placement tuned for exact shares and then served evenly loses what the
 * exact split bought (measured: worse than DeepSeek EPLB), so this objective
 * chooses counts and placement for per-replica load w/c directly.
 *
 * Per layer: start placements (min-max counts packed heaviest first, each
 * replica to the least-loaded GPU with a free slot and no copy of it;
 * DeepSeek EPLB's own placement when its algorithm applies), then a descent
 * on the busiest GPU with two moves: swap two replicas between GPUs, or take
 * a slot from an expert with several replicas and give it to another expert
 * (re-counting: every replica of both experts changes weight, which is what
 * a pure packing search cannot do). The best result after descent wins;
 * because DeepSeek's placement is one start and the descent only accepts
 * improvements, the layer is never worse than DeepSeek's. With groups kept
 * on nodes, moves stay within a node so no group leaves its node.
 *
 * A layer still more than GAP above the exact-share bound gets the
 * uniform-share bound (bounds_uniform.c: what even splits force, which the
 * certificate then reports) and, in global plans, a third start: counts
 * aimed at loads from that bound up, packed heaviest first; then an
 * iterated local search (kick_search) that moves a few slots between
 * experts and descends again, which is what finds the counts on layers where
 * replicas near a GPU's load must share it with S - 1 others. */
#include "planner/planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const eplb__layer_ctx_t *ctx;
  uint32_t E, G, R;
  uint32_t gpn;       /* GPUs per node when moves must stay on a node, else G */
  int32_t *p2l;       /* [R] */
  uint32_t *cnt;      /* [E] replicas of each expert */
  double *load;       /* [G] */
  uint32_t *slot_gpu; /* [R] */
  uint32_t *first;    /* [E+1] CSR of slots by expert */
  uint32_t *slots;    /* [R] */
  uint32_t *stamp;    /* [G] scratch for deltas */
  double *delta;      /* [G] */
  uint32_t *touched;  /* [G] */
  uint32_t *in_g;     /* [E] replicas of each expert on the busiest GPU */
  double *iw;         /* [R] per-replica weight of each slot's expert */
  double *nw;         /* [E] per-replica weight with one replica more */
  uint32_t clock;
} ls_t;

static double rep_w(const ls_t *s, uint32_t e) { return s->ctx->w[e] / s->cnt[e]; }

/* Rebuilds cnt, load and the slots-by-expert index from p2l. */
static void rebuild(ls_t *s) {
  memset(s->cnt, 0, s->E * sizeof *s->cnt);
  for (uint32_t r = 0; r < s->R; r++)
    s->cnt[s->p2l[r]]++;
  s->first[0] = 0;
  for (uint32_t e = 0; e < s->E; e++)
    s->first[e + 1] = s->first[e] + s->cnt[e];
  for (uint32_t g = 0; g < s->G; g++)
    s->load[g] = 0;
  /* in_g (zero between descent steps) is the fill cursor here. */
  for (uint32_t e = 0; e < s->E; e++)
    s->nw[e] = s->ctx->w[e] / (s->cnt[e] + 1);
  for (uint32_t r = 0; r < s->R; r++) {
    uint32_t e = (uint32_t)s->p2l[r];
    s->slots[s->first[e] + s->in_g[e]++] = r;
    s->iw[r] = rep_w(s, e);
    s->load[s->slot_gpu[r]] += s->iw[r];
  }
  memset(s->in_g, 0, s->E * sizeof *s->in_g);
}

static void add_delta(ls_t *s, uint32_t g, double d, uint32_t *nt) {
  if (s->stamp[g] != s->clock) {
    s->stamp[g] = s->clock;
    s->delta[g] = 0;
    s->touched[(*nt)++] = g;
  }
  s->delta[g] += d;
}

/* Max load over the GPUs touched by the pending deltas. */
static double touched_max(const ls_t *s, uint32_t nt) {
  double v = 0;
  for (uint32_t i = 0; i < nt; i++) {
    uint32_t g = s->touched[i];
    double x = s->load[g] + s->delta[g];
    v = x > v ? x : v;
  }
  return v;
}

/* The max load after giving slot a (expert ea, on GPU g) to expert eb. */
static double recount_value(ls_t *s, uint32_t a, uint32_t eb) {
  uint32_t ea = (uint32_t)s->p2l[a], g = s->slot_gpu[a], nt = 0;
  const double *w = s->ctx->w;
  double oa = rep_w(s, ea), na = w[ea] / (s->cnt[ea] - 1);
  double ob = rep_w(s, eb), nb = w[eb] / (s->cnt[eb] + 1);
  s->clock++;
  add_delta(s, g, nb - oa, &nt);
  for (uint32_t i = s->first[ea]; i < s->first[ea + 1]; i++)
    if (s->slots[i] != a)
      add_delta(s, s->slot_gpu[s->slots[i]], na - oa, &nt);
  for (uint32_t i = s->first[eb]; i < s->first[eb + 1]; i++)
    add_delta(s, s->slot_gpu[s->slots[i]], nb - ob, &nt);
  return touched_max(s, nt);
}

/* One descent step on the busiest GPU; false when no move lowers it. */
static bool step(ls_t *s) {
  const eplb__layer_ctx_t *ctx = s->ctx;
  const uint32_t *gf = ctx->gpu_first;
  uint32_t g = 0;
  for (uint32_t h = 1; h < s->G; h++)
    if (s->load[h] > s->load[g])
      g = h;
  double top = s->load[g], best = top * (1 - 1e-12);
  if (top <= 0)
    return false;
  uint32_t n0 = g / s->gpn * s->gpn, n1 = n0 + s->gpn;
  for (uint32_t r = gf[g]; r < gf[g + 1]; r++)
    s->in_g[s->p2l[r]]++;
  int kind = 0; /* 1 swap, 2 recount */
  uint32_t ba = 0, bb = 0;
  for (uint32_t a = gf[g]; a < gf[g + 1]; a++) {
    uint32_t ea = (uint32_t)s->p2l[a];
    double wa = s->iw[a];
    s->clock++; /* stamp marks the GPUs holding ea */
    for (uint32_t i = s->first[ea]; i < s->first[ea + 1]; i++)
      s->stamp[s->slot_gpu[s->slots[i]]] = s->clock;
    for (uint32_t h = n0; h < n1; h++) {
      if (s->stamp[h] == s->clock)
        continue;
      for (uint32_t b = gf[h]; b < gf[h + 1]; b++) {
        double d = wa - s->iw[b];
        if (d <= 0 || s->in_g[s->p2l[b]])
          continue;
        double v = top - d > s->load[h] + d ? top - d : s->load[h] + d;
        if (v < best) {
          best = v;
          kind = 1;
          ba = a;
          bb = b;
        }
      }
    }
    if (s->cnt[ea] < 2)
      continue;
    /* Re-counting raises ea's other replicas. A GPU of theirs that would
     * reach best (g aside: it also loses slot a) can only be saved by a
     * recipient with a replica there, so
     * then only that GPU's experts are tried (else every expert; with groups
     * kept, those of g's node). */
    double na = ctx->w[ea] / (s->cnt[ea] - 1);
    uint32_t bad = UINT32_MAX, nt = 0;
    s->clock++;
    for (uint32_t i = s->first[ea]; i < s->first[ea + 1]; i++)
      if (s->slots[i] != a)
        add_delta(s, s->slot_gpu[s->slots[i]], na - wa, &nt);
    for (uint32_t i = 0; i < nt && bad == UINT32_MAX; i++)
      if (s->touched[i] != g && s->load[s->touched[i]] + s->delta[s->touched[i]] >= best)
        bad = s->touched[i];
    uint32_t lo = bad == UINT32_MAX ? 0 : gf[bad], hi = bad == UINT32_MAX ? s->E : gf[bad + 1];
    for (uint32_t k = lo; k < hi; k++) {
      uint32_t eb = bad == UINT32_MAX ? k : (uint32_t)s->p2l[k];
      uint32_t r = s->slots[s->first[eb]];
      if (eb == ea || s->slot_gpu[r] < n0 || s->slot_gpu[r] >= n1)
        continue;
      /* g itself must drop below best */
      if (top - wa + s->nw[eb] >= best)
        continue;
      double v = recount_value(s, a, eb);
      if (v < best) {
        best = v;
        kind = 2;
        ba = a;
        bb = eb;
      }
    }
  }
  for (uint32_t r = gf[g]; r < gf[g + 1]; r++)
    s->in_g[s->p2l[r]] = 0;
  if (kind == 1) {
    int32_t t = s->p2l[ba];
    s->p2l[ba] = s->p2l[bb];
    s->p2l[bb] = t;
  } else if (kind == 2) {
    s->p2l[ba] = (int32_t)bb;
  } else {
    return false;
  }
  rebuild(s);
  return true;
}

static void descend(ls_t *s, uint32_t budget) {
  rebuild(s);
  for (uint32_t it = 0; it < budget && step(s); it++)
    ;
}

/* Min-heap of GPUs by (load, index): the order of a scan for the least
 * load, in O(log G) a replica. */
static bool heap_less(const double *load, uint32_t a, uint32_t b) {
  return load[a] < load[b] || (load[a] == load[b] && a < b);
}

static void heap_push(uint32_t *heap, uint32_t *n, const double *load, uint32_t h) {
  uint32_t i = (*n)++;
  for (; i > 0 && heap_less(load, h, heap[(i - 1) / 2]); i = (i - 1) / 2)
    heap[i] = heap[(i - 1) / 2];
  heap[i] = h;
}

static uint32_t heap_pop(uint32_t *heap, uint32_t *n, const double *load) {
  uint32_t top = heap[0], last = heap[--(*n)], i = 0;
  for (;;) {
    uint32_t c = 2 * i + 1;
    if (c >= *n)
      break;
    if (c + 1 < *n && heap_less(load, heap[c + 1], heap[c]))
      c++;
    if (!heap_less(load, heap[c], last))
      break;
    heap[i] = heap[c];
    i = c;
  }
  if (*n)
    heap[i] = last;
  return top;
}

/* Min-max counts of experts ids[0..n) over GPUs [g0, g0+ng), packed
 * heaviest replica first onto the least-loaded GPU with a free slot,
 * preferring one without a copy of the expert. */
static eplb_status_t pack(const eplb__layer_ctx_t *ctx, const uint32_t *ids, uint32_t n,
                          uint32_t g0, uint32_t ng, const uint32_t *counts, int32_t *p2l,
                          double *max_load) {
  const uint32_t *gf = ctx->gpu_first;
  uint32_t nslots = gf[g0 + ng] - gf[g0];
  eplb_status_t st = EPLB_OK;
  uint32_t *cnt = eplb__malloc_array(n, sizeof *cnt);
  uint32_t *work = eplb__malloc_array((size_t)n + 4 * ng, sizeof *work);
  uint32_t *heap = work + n + 2 * ng, *put = heap + ng;
  eplb__ranked_t *reps = eplb__malloc_array(nslots, sizeof *reps);
  double *load = eplb__calloc(ng, sizeof *load);
  if (!cnt || !work || !reps || !load) {
    st = eplb__error(EPLB_ENOMEM, "planner", "uniform: out of memory");
    goto done;
  }
  if (counts)
    memcpy(cnt, counts, n * sizeof *cnt);
  else
    eplb__replicate(ctx->w, ids, n, nslots, cnt, work);
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t c = 0; c < cnt[i]; c++)
      reps[k++] = (eplb__ranked_t){ctx->w[ids[i]] / cnt[i], ids[i]};
  qsort(reps, k, sizeof *reps, eplb__ranked_desc);
  uint32_t *used = work + n, *mark = used + ng, nh = 0, nput = 0;
  for (uint32_t h = 0; h < ng; h++) {
    used[h] = mark[h] = 0;
    if (ctx->slots_per_gpu[g0 + h])
      heap_push(heap, &nh, load, h);
  }
  for (uint32_t j = 0; j < k; j++) {
    /* The least-loaded GPU with a free slot (ties: lowest index) that has
     * no replica of e yet; replicas of e are consecutive, so the GPUs set
     * aside go back once it is placed. */
    uint32_t e = reps[j].i, best = UINT32_MAX;
    while (nh && best == UINT32_MAX) {
      uint32_t h = heap_pop(heap, &nh, load);
      if (mark[h] == e + 1)
        put[nput++] = h;
      else
        best = h;
    }
    if (best == UINT32_MAX) { /* more replicas than GPUs: the descent separates them */
      uint32_t b = 0;
      for (uint32_t i = 1; i < nput; i++)
        b = heap_less(load, put[i], put[b]) ? i : b;
      best = put[b];
      put[b] = put[--nput];
    }
    mark[best] = e + 1;
    p2l[gf[g0 + best] + used[best]++] = (int32_t)e;
    load[best] += reps[j].v;
    if (used[best] < ctx->slots_per_gpu[g0 + best])
      heap_push(heap, &nh, load, best);
    if (j + 1 == k || reps[j + 1].i != e)
      while (nput)
        heap_push(heap, &nh, load, put[--nput]);
  }
  *max_load = 0;
  for (uint32_t h = 0; h < ng; h++)
    *max_load = load[h] > *max_load ? load[h] : *max_load;
done:
  eplb__free(cnt);
  eplb__free(work);
  eplb__free(reps);
  eplb__free(load);
  return st;
}

/* Layers within this of their bound skip the uniform-share bound and the
 * count start: below the planner's target (0.5% on average), not worth
 * their time. */
#define GAP 1e-3

/* Counts aimed at max load L: every replica within L (c >= ceil(w/L)),
 * then spare slots first to split replicas above L/2 while they outnumber
 * the GPUs (two on one GPU exceed L; min-max counts alone leave too many of
 * them on skewed loads), most of them per slot first; with how & 2 next to
 * replicas too large to leave room for their GPU's other replicas; the rest
 * each to the heaviest replica (how & 1: the lightest, where spreading the
 * heavy ones further would only take GPUs the large replicas need: a
 * lognormal layer min-max counts put at 1.41 x its bound plans at 1.007
 * this way). false:
 * L is below what the slots allow, or the spare slots are too many for a
 * linear scan each (counts are no issue there). */
static bool counts_for(const eplb__layer_ctx_t *ctx, double L, unsigned how, uint32_t *cnt) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  const double *w = ctx->w;
  uint64_t used = 0, big = 0;
  for (uint32_t e = 0; e < E; e++) {
    double q = ceil(w[e] / L);
    cnt[e] = q > 1 ? (q < (double)R ? (uint32_t)q : R) : 1;
    used += cnt[e];
    big += w[e] / cnt[e] > L / 2 ? cnt[e] : 0;
  }
  /* Each spare slot below scans the experts: past 2^24 steps in all the
   * aim is dropped (such layers have spare slots to spare). */
  if (used > R || (R - used) * (uint64_t)E > (1u << 24))
    return false;
  uint32_t left = (uint32_t)(R - used);
  while (big > G && left > 0) {
    uint32_t best = UINT32_MAX, need = 0;
    for (uint32_t e = 0; e < E; e++) {
      if (!(w[e] / cnt[e] > L / 2))
        continue;
      double c2 = floor(2 * w[e] / L) + 1; /* at least cnt + 1 but for rounding */
      c2 = c2 > cnt[e] ? c2 : cnt[e] + 1.0;
      if (c2 - cnt[e] > left)
        continue;
      uint32_t n = (uint32_t)c2 - cnt[e];
      /* most big replicas removed per slot: cnt / n */
      if (best == UINT32_MAX || (uint64_t)cnt[e] * need > (uint64_t)cnt[best] * n) {
        best = e;
        need = n;
      }
    }
    if (best == UINT32_MAX)
      break;
    big -= cnt[best];
    cnt[best] += need;
    left -= need;
  }
  /* A GPU holds R/G replicas on average, so a replica within (R/G - 1) x
   * the mean small replica of L leaves no room for its GPU's others: split
   * the largest such further while slots last. */
  double small = 0, room;
  uint64_t nsmall = 0;
  for (uint32_t e = 0; e < E; e++)
    if (!(w[e] / cnt[e] > L / 2)) {
      small += w[e];
      nsmall += cnt[e];
    }
  room = how & 2 && nsmall ? ((double)R / G - 1) * small / (double)nsmall : 0;
  for (; left > 0 && room > 0; left--) {
    uint32_t top = 0;
    for (uint32_t e = 1; e < E; e++)
      if (w[e] * cnt[top] > w[top] * cnt[e])
        top = e;
    if (!(w[top] / cnt[top] > L - room))
      break;
    cnt[top]++;
  }
  for (; left > 0; left--) {
    uint32_t top = 0;
    for (uint32_t e = 1; e < E; e++)
      if (how & 1 ? w[e] * cnt[top] < w[top] * cnt[e] : w[e] * cnt[top] > w[top] * cnt[e])
        top = e;
    cnt[top]++;
  }
  return true;
}

/* Global plans: counts aimed at a few loads from the bound up, each packed
 * heaviest first; the best packing is a start of its own. ids [E] and
 * cnt [E], tmp [R] are scratch. *ok: some aim fitted the slots. */
static eplb_status_t count_start(const eplb__layer_ctx_t *ctx, uint32_t *ids, uint32_t *cnt,
                                 int32_t *tmp, int32_t *p2l, bool *ok) {
  /* Measured on skewed layers: the winning packings come from these aims
   * and rules (room then heavy never won). */
  static const double aim[] = {1, 1.005, 1.01, 1.02, 1.035, 1.1, 1.15, 1.2, 1.3, 1.5};
  static const unsigned how[] = {0, 1, 3};
  uint32_t E = ctx->num_experts, R = ctx->num_slots;
  double best = -1;
  *ok = false;
  /* A packing costs slots x GPUs: 30 of them stay within tens of ms. */
  if ((uint64_t)R * ctx->num_gpus > (1u << 20))
    return EPLB_OK;
  for (uint32_t e = 0; e < E; e++)
    ids[e] = e;
  for (size_t i = 0; i < 3 * (sizeof aim / sizeof aim[0]); i++) {
    if (!counts_for(ctx, ctx->lower_bound * aim[i / 3], how[i % 3], cnt))
      continue;
    double mx;
    eplb_status_t st = pack(ctx, ids, E, 0, ctx->num_gpus, cnt, tmp, &mx);
    if (st)
      return st;
    if (best < 0 || mx < best) {
      best = mx;
      memcpy(p2l, tmp, R * sizeof *p2l);
    }
  }
  *ok = best >= 0;
  return EPLB_OK;
}

/* Groups kept on nodes: the group-to-node assignment of the bound's search
 * (within its budget), then each node packed on its own. */
static eplb_status_t pack_grouped(const eplb__layer_ctx_t *ctx, int32_t *p2l, bool *ok) {
  uint32_t K = ctx->num_groups, N = ctx->num_nodes, E = ctx->num_experts;
  uint32_t gs = E / K, gpn = ctx->num_gpus / N;
  eplb_status_t st = EPLB_OK;
  uint32_t *node_of = eplb__malloc_array(K, sizeof *node_of);
  uint32_t *ids = eplb__malloc_array(E, sizeof *ids);
  *ok = false;
  if (!node_of || !ids) {
    st = eplb__error(EPLB_ENOMEM, "planner", "uniform: out of memory");
    goto done;
  }
  bool exact;
  if (eplb__group_search(ctx, NULL, node_of, &exact) < 0)
    goto done;
  for (uint32_t n = 0; n < N && !st; n++) {
    uint32_t ne = 0, slots = ctx->gpu_first[(n + 1) * gpn] - ctx->gpu_first[n * gpn];
    for (uint32_t k = 0; k < K; k++)
      if (node_of[k] == n)
        for (uint32_t j = 0; j < gs; j++)
          ids[ne++] = k * gs + j;
    if (ne == 0 || ne > slots)
      goto done;
    double mx;
    st = pack(ctx, ids, ne, n * gpn, gpn, NULL, p2l, &mx);
  }
  *ok = !st;
done:
  eplb__free(node_of);
  eplb__free(ids);
  return st;
}

/* Descends from p2l; the result replaces phy2log when it beats *best
 * (< 0: nothing yet). Returns whether it did; *mx (may be NULL): the max
 * load the descent reached. */
static bool try_start(ls_t *s, int32_t *p2l, double *sh, int32_t *phy2log, double *best,
                      double *mx) {
  /* A start that gets stuck costs one pass over the busiest GPU, so the
   * budget only bounds pathological plateaus. */
  s->p2l = p2l;
  descend(s, 8 * s->G + 64);
  eplb__uniform_shares(s->E, s->R, p2l, sh);
  double v = eplb__layer_max_load(s->ctx, p2l, sh, NULL);
  if (mx)
    *mx = v;
  if (*best >= 0 && v >= *best)
    return false;
  *best = v;
  memcpy(phy2log, p2l, s->R * sizeof *phy2log);
  return true;
}

/* Perturbation of the search below: KICK slots each handed from an expert
 * with a small replica (of two drawn, the smaller w/c, with c >= 2) to one
 * with a large replica (of two drawn, the larger w/c), in place; in half the
 * rounds the first slot goes to the expert of the heaviest replica on the
 * busiest GPU instead. Random draws rarely hit that expert when it holds
 * one slot of many (a lognormal layer, 128 x 64 x 4, sat at 1.059 x the
 * bound with a one-replica expert alone on the busiest GPU and a load-0
 * expert holding 38 slots; aimed, it reaches 1.012). The descent then
 * repacks around the new counts. */
#define KICK 4

/* The heaviest replica's slot on the busiest GPU of plan t (counts in
 * s->cnt): the expert that sets the max load. */
static uint32_t busiest_heaviest(ls_t *s, const int32_t *t) {
  const uint32_t *gf = s->ctx->gpu_first;
  const double *w = s->ctx->w;
  double top = -1;
  uint32_t g = 0;
  for (uint32_t h = 0; h < s->G; h++) {
    double v = 0;
    for (uint32_t r = gf[h]; r < gf[h + 1]; r++)
      v += w[t[r]] / s->cnt[t[r]];
    if (v > top) {
      top = v;
      g = h;
    }
  }
  uint32_t b = gf[g];
  for (uint32_t r = gf[g]; r < gf[g + 1]; r++)
    if (w[t[r]] / s->cnt[t[r]] > w[t[b]] / s->cnt[t[b]])
      b = r;
  return b;
}

static void kick(ls_t *s, int32_t *t, eplb__rng_t *rs) {
  const double *w = s->ctx->w;
  uint32_t R = s->R, *cnt = s->cnt;
  memset(cnt, 0, s->E * sizeof *cnt);
  for (uint32_t r = 0; r < R; r++)
    cnt[t[r]]++;
  uint32_t top = busiest_heaviest(s, t);
  for (int j = 0; j < KICK; j++) {
    uint64_t x = eplb__rng_next(rs), y = eplb__rng_next(rs);
    uint32_t a = (uint32_t)(x % R), a2 = (uint32_t)((x >> 32) % R);
    uint32_t b = (uint32_t)(y % R), b2 = (uint32_t)((y >> 32) % R);
    if (cnt[t[a]] < 2 || (cnt[t[a2]] >= 2 && w[t[a2]] / cnt[t[a2]] < w[t[a]] / cnt[t[a]]))
      a = a2;
    if (w[t[b2]] / cnt[t[b2]] > w[t[b]] / cnt[t[b]])
      b = b2;
    if (j == 0 && (x >> 63))
      b = top;
    if (cnt[t[a]] < 2 || t[a] == t[b])
      continue;
    cnt[t[a]]--;
    cnt[t[b]]++;
    t[a] = t[b];
  }
}

/* Global layers still above the bound: an iterated local search from the
 * best plan. The descent's re-count move must place the new replica where
 * the old one was and may not raise any GPU to the top, so it stalls on
 * count vectors a few slots from good ones (measured: repacking the counts
 * this search ends with, heaviest first, loses most of its gain). Each
 * round kicks a copy of the current plan, descends, and keeps it as the
 * current one unless it is more than 0.1% worse (a walk across plateaus);
 * the best ever replaces phy2log. It stops within GAP of the bound, where
 * the layer would not have been searched at all, or after STALL rounds
 * without a new best. cur, t [R] are scratch. */
/* kick_search gives up after this many rounds without a new best: layers
 * the bound keeps above GAP (ties) stop there instead of running every
 * round, and the late gains measured (a round past 600 from the best of the
 * layer before) came within it. */
#define STALL 250

static void kick_search(ls_t *s, uint32_t rounds, int32_t *cur, int32_t *t, double *sh,
                        int32_t *phy2log, double *best) {
  eplb__rng_t rs;
  eplb__rng_seed(&rs, 0x9E3779B97F4A7C15ull);
  double target = s->ctx->lower_bound * (1 + GAP), curv = *best;
  memcpy(cur, phy2log, s->R * sizeof *cur);
  for (uint32_t i = 0, last = 0; i < rounds && i - last < STALL; i++) {
    if (*best <= target)
      break;
    memcpy(t, cur, s->R * sizeof *t);
    kick(s, t, &rs);
    double v;
    if (try_start(s, t, sh, phy2log, best, &v))
      last = i;
    if (v <= curv * (1 + 1e-3)) {
      curv = v;
      memcpy(cur, t, s->R * sizeof *cur);
    }
  }
}

/* Rounds of kick_search: each costs about a descent, R x G-ish work, so
 * KICK_ROUNDS up to 128 GPUs x 4 slots (tens of ms a layer, only on layers
 * above the bound, which stop once within GAP of it), fewer as R x G grows
 * (none past 2^22). Measured (#15, seeded harness, lognormal sigma 2):
 * 200 rounds up to 2^14 left 128 x 64 x 4 at mean 1.0051 and 384 x 128 x 4
 * at 1.0055; 400 up to 2^16 with the aimed kick and STALL, 1.0026 and
 * 1.0034, at the bundled cases' former time (few of their layers search,
 * and those that stay above GAP stop at STALL). */
#define KICK_ROUNDS 400

static uint32_t kick_rounds(uint32_t R, uint32_t G) {
  uint64_t rg = (uint64_t)R * G;
  return rg <= (1u << 16)   ? KICK_ROUNDS
         : rg >= (1u << 22) ? 0
                            : (uint32_t)(KICK_ROUNDS * (1u << 16) / rg);
}

eplb_status_t eplb__uniform_layer(eplb__layer_ctx_t *ctx, int32_t *phy2log, double *share,
                                  int *fallback) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  uint32_t K = ctx->num_groups ? ctx->num_groups : 1, N = ctx->num_nodes ? ctx->num_nodes : 1;
  bool grouped = ctx->keep_groups && K > 1;
  eplb_status_t st = EPLB_OK;
  ls_t s = {.ctx = ctx, .E = E, .G = G, .R = R, .gpn = grouped ? G / N : G};
  int32_t *cand = eplb__malloc_array((size_t)4 * R, sizeof *cand);
  double *sh = eplb__malloc_array(R, sizeof *sh);
  s.cnt = eplb__malloc_array(E, sizeof *s.cnt);
  s.in_g = eplb__calloc(E, sizeof *s.in_g);
  s.first = eplb__malloc_array((size_t)E + 1, sizeof *s.first);
  s.slots = eplb__malloc_array(R, sizeof *s.slots);
  s.slot_gpu = eplb__malloc_array(R, sizeof *s.slot_gpu);
  s.load = eplb__malloc_array(G, sizeof *s.load);
  s.delta = eplb__malloc_array(G, sizeof *s.delta);
  s.stamp = eplb__calloc(G, sizeof *s.stamp);
  s.touched = eplb__malloc_array(G, sizeof *s.touched);
  s.iw = eplb__malloc_array(R, sizeof *s.iw);
  s.nw = eplb__malloc_array(E, sizeof *s.nw);
  *fallback = 0;
  if (!cand || !sh || !s.cnt || !s.in_g || !s.first || !s.slots || !s.slot_gpu || !s.load ||
      !s.delta || !s.stamp || !s.touched || !s.iw || !s.nw) {
    st = eplb__error(EPLB_ENOMEM, "planner", "uniform: out of memory");
    goto done;
  }
  for (uint32_t g = 0; g < G; g++)
    for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
      s.slot_gpu[r] = g;
  /* DeepSeek's algorithm needs uniform slots; it is hierarchical (groups
   * on nodes) whenever groups divide over nodes, as the deepseek policy is,
   * so its placement is a valid start for a global plan too. */
  bool even = R % G == 0;
  for (uint32_t g = 0; g < G; g++)
    even = even && ctx->slots_per_gpu[g] == R / G;
  bool ds_ok = even && (!grouped || K % N == 0);
  bool own_ok = true, cnt_ok = false, kick_ok = false;
  if (grouped) {
    if ((st = pack_grouped(ctx, cand, &own_ok)))
      goto done;
  } else {
    uint32_t *ids = (uint32_t *)s.slots; /* R >= E: scratch until the descent */
    for (uint32_t e = 0; e < E; e++)
      ids[e] = e;
    double mx;
    if ((st = pack(ctx, ids, E, 0, G, NULL, cand, &mx)))
      goto done;
  }
  if (ds_ok && (st = eplb__deepseek_layer(ctx, cand + R)))
    goto done;
  if (!own_ok && !ds_ok) {
    st = eplb__error(EPLB_EINVAL, "planner",
                     "uniform shares: cannot keep %u groups on %u nodes with these slots", K, N);
    goto done;
  }
  double best = -1;
  for (int i = 0; i < 3; i++) {
    if (i == 2) {
      /* Visibly above the exact-share bound (only there, for time): even
       * splits can force two large replicas onto one GPU, which the
       * uniform-share bound sees and min-max counts do not avoid. */
      if (!(best > ctx->lower_bound * (1 + GAP)))
        break;
      ctx->lower_bound = eplb__uniform_bound(ctx, ctx->lower_bound, best);
      uint32_t *ids = (uint32_t *)s.slots; /* scratch until the descent */
      if (grouped || !(best > ctx->lower_bound * (1 + GAP)))
        break;
      if ((st = count_start(ctx, ids, s.cnt, cand + 3 * (size_t)R, cand + 2 * (size_t)R, &cnt_ok)))
        goto done;
      kick_ok = true;
    }
    if ((i == 0 && !own_ok) || (i == 1 && !ds_ok) || (i == 2 && !cnt_ok))
      continue;
    if (try_start(&s, cand + (size_t)i * R, sh, phy2log, &best, NULL))
      *fallback = i == 1;
  }
  if (kick_ok && R > E) { /* R == E: every count is 1, nothing to kick */
    double before = best;
    kick_search(&s, kick_rounds(R, G), cand, cand + R, sh, phy2log, &best);
    *fallback = best < before ? 0 : *fallback;
  }
  eplb__uniform_shares(E, R, phy2log, share);
done:
  eplb__free(cand);
  eplb__free(sh);
  eplb__free(s.cnt);
  eplb__free(s.in_g);
  eplb__free(s.first);
  eplb__free(s.slots);
  eplb__free(s.slot_gpu);
  eplb__free(s.load);
  eplb__free(s.delta);
  eplb__free(s.stamp);
  eplb__free(s.touched);
  eplb__free(s.iw);
  eplb__free(s.nw);
  return st;
}
