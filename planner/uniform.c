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
 * on nodes, moves stay within a node so no group leaves its node. */
#include "planner/planner.h"

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

/* Min-max counts of experts ids[0..n) over GPUs [g0, g0+ng), packed
 * heaviest replica first onto the least-loaded GPU with a free slot,
 * preferring one without a copy of the expert. */
static eplb_status_t pack(const eplb__layer_ctx_t *ctx, const uint32_t *ids, uint32_t n,
                          uint32_t g0, uint32_t ng, int32_t *p2l) {
  const uint32_t *gf = ctx->gpu_first;
  uint32_t nslots = gf[g0 + ng] - gf[g0];
  eplb_status_t st = EPLB_OK;
  uint32_t *cnt = eplb__malloc_array(n, sizeof *cnt);
  uint32_t *work = eplb__malloc_array((size_t)n + 2 * ng, sizeof *work);
  eplb__ranked_t *reps = eplb__malloc_array(nslots, sizeof *reps);
  double *load = eplb__calloc(ng, sizeof *load);
  if (!cnt || !work || !reps || !load) {
    st = eplb__error(EPLB_ENOMEM, "planner", "uniform: out of memory");
    goto done;
  }
  eplb__replicate(ctx->w, ids, n, nslots, cnt, work);
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t c = 0; c < cnt[i]; c++)
      reps[k++] = (eplb__ranked_t){ctx->w[ids[i]] / cnt[i], ids[i]};
  qsort(reps, k, sizeof *reps, eplb__ranked_desc);
  uint32_t *used = work + n, *mark = used + ng;
  for (uint32_t h = 0; h < ng; h++)
    used[h] = mark[h] = 0;
  for (uint32_t j = 0; j < k; j++) {
    uint32_t e = reps[j].i, best = UINT32_MAX, any = UINT32_MAX;
    for (uint32_t h = 0; h < ng; h++) {
      if (used[h] >= ctx->slots_per_gpu[g0 + h])
        continue;
      if (any == UINT32_MAX || load[h] < load[any])
        any = h;
      if (mark[h] != e + 1 && (best == UINT32_MAX || load[h] < load[best]))
        best = h;
    }
    if (best == UINT32_MAX)
      best = any; /* more replicas than GPUs: the descent separates them */
    mark[best] = e + 1;
    p2l[gf[g0 + best] + used[best]++] = (int32_t)e;
    load[best] += reps[j].v;
  }
done:
  eplb__free(cnt);
  eplb__free(work);
  eplb__free(reps);
  eplb__free(load);
  return st;
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
    st = pack(ctx, ids, ne, n * gpn, gpn, p2l);
  }
  *ok = !st;
done:
  eplb__free(node_of);
  eplb__free(ids);
  return st;
}

eplb_status_t eplb__uniform_layer(const eplb__layer_ctx_t *ctx, int32_t *phy2log, double *share,
                                  int *fallback) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  uint32_t K = ctx->num_groups ? ctx->num_groups : 1, N = ctx->num_nodes ? ctx->num_nodes : 1;
  bool grouped = ctx->keep_groups && K > 1;
  eplb_status_t st = EPLB_OK;
  ls_t s = {.ctx = ctx, .E = E, .G = G, .R = R, .gpn = grouped ? G / N : G};
  int32_t *cand = eplb__malloc_array((size_t)2 * R, sizeof *cand);
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
  bool own_ok = true;
  if (grouped) {
    if ((st = pack_grouped(ctx, cand, &own_ok)))
      goto done;
  } else {
    uint32_t *ids = (uint32_t *)s.slots; /* R >= E: scratch until the descent */
    for (uint32_t e = 0; e < E; e++)
      ids[e] = e;
    if ((st = pack(ctx, ids, E, 0, G, cand)))
      goto done;
  }
  if (ds_ok && (st = eplb__deepseek_layer(ctx, cand + R)))
    goto done;
  if (!own_ok && !ds_ok) {
    st = eplb__error(EPLB_EINVAL, "planner",
                     "uniform shares: cannot keep %u groups on %u nodes with these slots", K, N);
    goto done;
  }
  /* Each start descends; a start that gets stuck costs one pass over the
   * busiest GPU, so the budget only bounds pathological plateaus. */
  uint32_t budget = 8 * G + 64;
  double best = -1;
  for (int i = 0; i < 2; i++) {
    if ((i == 0 && !own_ok) || (i == 1 && !ds_ok))
      continue;
    s.p2l = cand + (size_t)i * R;
    descend(&s, budget);
    eplb__uniform_shares(E, R, s.p2l, sh);
    double mx = eplb__layer_max_load(ctx, s.p2l, sh, NULL);
    if (best < 0 || mx < best) {
      best = mx;
      memcpy(phy2log, s.p2l, R * sizeof *phy2log);
      *fallback = i == 1;
    }
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
