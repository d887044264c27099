/* planner/balanced.c — the near-optimal policy.
 *
 * Per layer: replica counts by the min-max rule (optimal for max per-replica
 * load), LPT placement of replicas (heaviest first, each to the least-loaded
 * GPU with a free slot and no copy of that expert), local search on the
 * busiest GPU (moves and swaps that lower it, under uniform shares), then
 * exact shares from the split LP and a local search under them
 * (balanced_refine.c). On GPUs of two slots split per batch the line start
 * (balanced_line.c) comes first: at the mean load the search is skipped,
 * short of it the better of the two is kept. With keep_groups, groups are first assigned
 * to nodes (node slots spent on redundancy follow the node's load), then each
 * node is placed on its own. A guard keeps the result no worse than DeepSeek
 * EPLB on the same inputs: if it were, DeepSeek's placement with exact shares
 * (never worse than DeepSeek's uniform shares) is used instead. */
#include "planner/planner.h"

#include <string.h>

typedef struct {
  const eplb__layer_ctx_t *ctx;
  uint32_t g0, ng; /* GPUs g0 .. g0+ng-1 */
  double *load;    /* [ng] */
  uint32_t *used;  /* [ng] */
  uint32_t *item;  /* [nslots] expert of each occupied slot, GPU-major by slot range */
  double *iw;      /* [nslots] per-replica weight of each slot */
  uint32_t base;   /* first slot of GPU g0 */
} sub_t;

static uint32_t cap_of(const sub_t *s, uint32_t h) { return s->ctx->slots_per_gpu[s->g0 + h]; }
static uint32_t off_of(const sub_t *s, uint32_t h) {
  return s->ctx->gpu_first[s->g0 + h] - s->base;
}

static bool holds(const sub_t *s, uint32_t h, uint32_t e) {
  uint32_t o = off_of(s, h);
  for (uint32_t k = 0; k < s->used[h]; k++)
    if (s->item[o + k] == e)
      return true;
  return false;
}

/* Whether GPU h holds expert e: from has [E][ng] (replicas of e on each
 * GPU) when there is one, else by scanning h's slots. */
static bool has_on(const sub_t *s, const uint32_t *has, uint32_t h, uint32_t e) {
  return has ? has[(size_t)e * s->ng + h] != 0 : holds(s, h, e);
}

/* Moves and swaps between the busiest GPU and the others while one lowers
 * the busiest GPU's load. has [E][ng] (or NULL) counts each expert's
 * replicas on each GPU: the searches ask "does h hold e" for every GPU and
 * slot pair, and a scan of h's slots each time was a third of placement. */
static void improve(sub_t *s, uint32_t iterations, uint32_t *has) {
  if (has)
    for (uint32_t h = 0; h < s->ng; h++)
      for (uint32_t k = 0; k < s->used[h]; k++)
        has[(size_t)s->item[off_of(s, h) + k] * s->ng + h]++;
  for (uint32_t it = 0; it < iterations; it++) {
    uint32_t g = 0;
    for (uint32_t h = 1; h < s->ng; h++)
      if (s->load[h] > s->load[g])
        g = h;
    double top = s->load[g], best = top - top * 1e-12;
    int kind = 0; /* 1 move, 2 swap */
    uint32_t ba = 0, bh = 0, bb = 0;
    uint32_t og = off_of(s, g);
    for (uint32_t a = 0; a < s->used[g]; a++) {
      uint32_t ea = s->item[og + a];
      double wa = s->iw[og + a];
      for (uint32_t h = 0; h < s->ng; h++) {
        /* Every move or swap to h ends above load[h] (d > 0): none can beat
         * best there, so the O(slots) scans of h are skipped. */
        if (h == g || s->load[h] >= best || has_on(s, has, h, ea))
          continue;
        /* Either kind ends at max(load[h] + d, top - d) >= (load[h] + top)
         * / 2, less two roundings (<= 2^-52 top, inside the margin): when
         * that is above best, h is skipped, as its scan would end. */
        if ((s->load[h] + top) * 0.5 > best + 1e-15 * top)
          continue;
        uint32_t oh = off_of(s, h);
        if (s->used[h] < cap_of(s, h)) {
          double v = s->load[h] + wa > top - wa ? s->load[h] + wa : top - wa;
          if (v < best) {
            best = v;
            kind = 1;
            ba = a;
            bh = h;
          }
        }
        for (uint32_t b = 0; b < s->used[h]; b++) {
          double d = wa - s->iw[oh + b];
          if (d <= 0)
            continue;
          double v = s->load[h] + d > top - d ? s->load[h] + d : top - d;
          if (v < best && !has_on(s, has, g, s->item[oh + b])) {
            best = v;
            kind = 2;
            ba = a;
            bh = h;
            bb = b;
          }
        }
      }
    }
    if (!kind)
      return;
    uint32_t oh = off_of(s, bh);
    if (has) {
      uint32_t ea = s->item[og + ba];
      has[(size_t)ea * s->ng + g]--;
      has[(size_t)ea * s->ng + bh]++;
      if (kind == 2) {
        uint32_t eb = s->item[oh + bb];
        has[(size_t)eb * s->ng + bh]--;
        has[(size_t)eb * s->ng + g]++;
      }
    }
    if (kind == 1) {
      double wa = s->iw[og + ba];
      s->item[oh + s->used[bh]] = s->item[og + ba];
      s->iw[oh + s->used[bh]] = wa;
      s->used[bh]++;
      s->used[g]--;
      s->item[og + ba] = s->item[og + s->used[g]];
      s->iw[og + ba] = s->iw[og + s->used[g]];
      s->load[g] -= wa;
      s->load[bh] += wa;
    } else {
      double d = s->iw[og + ba] - s->iw[oh + bb];
      uint32_t te = s->item[og + ba];
      double tw = s->iw[og + ba];
      s->item[og + ba] = s->item[oh + bb];
      s->iw[og + ba] = s->iw[oh + bb];
      s->item[oh + bb] = te;
      s->iw[oh + bb] = tw;
      s->load[g] -= d;
      s->load[bh] += d;
    }
  }
}

/* The only GPU with a free slot, h, already holds e: move a replica b from a
 * GPU h2 without e to h (if h lacks b's expert) and put e in its place. */
static bool repair(sub_t *s, uint32_t *mark, uint32_t h, uint32_t e, double we) {
  for (uint32_t h2 = 0; h2 < s->ng; h2++) {
    if (mark[h2] == e + 1)
      continue;
    uint32_t o2 = off_of(s, h2);
    for (uint32_t k = 0; k < s->used[h2]; k++) {
      if (holds(s, h, s->item[o2 + k]))
        continue;
      uint32_t o = off_of(s, h) + s->used[h]++;
      s->item[o] = s->item[o2 + k];
      s->iw[o] = s->iw[o2 + k];
      s->load[h] += s->iw[o];
      s->load[h2] += we - s->iw[o];
      s->item[o2 + k] = e;
      s->iw[o2 + k] = we;
      mark[h2] = e + 1;
      return true;
    }
  }
  return false;
}

/* Every GPU of s with a free slot, in h. */
static void gh_build(eplb__gpu_heap_t *h, const sub_t *s) {
  eplb__gpu_heap_init(h, h->load, h->heap, h->pos, s->ng);
  for (uint32_t g = 0; g < s->ng; g++)
    if (s->used[g] < cap_of(s, g))
      eplb__gpu_heap_push(h, g);
}

/* Places the experts ids[0..ne) on GPUs g0..g0+ng-1 (all their slots). */
static eplb_status_t place(const eplb__layer_ctx_t *ctx, const uint32_t *ids, uint32_t ne,
                           uint32_t g0, uint32_t ng, int32_t *phy2log) {
  uint32_t base = ctx->gpu_first[g0], nslots = ctx->gpu_first[g0 + ng] - base;
  eplb_status_t st = EPLB_OK;
  uint32_t *cnt = eplb__malloc_array(ne, sizeof *cnt);
  uint32_t *work = eplb__malloc_array((size_t)ne + 4 * (size_t)ng, sizeof *work);
  eplb__ranked_t *reps = eplb__malloc_array(nslots, sizeof *reps);
  double *load = eplb__calloc(ng, sizeof *load);
  uint32_t *used = eplb__calloc(ng, sizeof *used);
  uint32_t *item = eplb__malloc_array(nslots, sizeof *item);
  double *iw = eplb__malloc_array(nslots, sizeof *iw);
  if (!cnt || !work || !reps || !load || !used || !item || !iw) {
    st = eplb__error(EPLB_ENOMEM, "planner", "balanced: out of memory for %u slots on %u GPUs",
                     nslots, ng);
    goto done;
  }
  eplb__replicate(ctx->w, ids, ne, nslots, cnt, work);
  uint32_t n = eplb__ranked_replicas(ctx->w, ids, ne, cnt, reps);
  sub_t s = {ctx, g0, ng, load, used, item, iw, base};
  /* mark[h] == expert + 1 when GPU h got a replica of the expert being placed
   * (replicas of one expert are adjacent after the sort). */
  uint32_t *mark = work + ne, *skipped = mark + ng;
  eplb__gpu_heap_t hp = {load, skipped + ng, skipped + 2 * (size_t)ng, 0};
  for (uint32_t h = 0; h < ng; h++)
    mark[h] = 0;
  gh_build(&hp, &s);
  /* GPUs in the heap that hold the expert being placed: when that is all of
   * them (an expert with more replicas than GPUs) the search is skipped
   * instead of popping every GPU. */
  uint32_t cur_e = UINT32_MAX, marked = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t e = reps[k].i, best = UINT32_MAX, any = hp.n ? hp.heap[0] : UINT32_MAX, nskip = 0;
    if (e != cur_e) {
      cur_e = e;
      marked = 0;
    }
    /* The least-loaded GPU without e: GPUs holding e are popped aside (at
     * most e's replicas placed so far) and put back. */
    while (hp.n + nskip > marked) {
      uint32_t h = hp.heap[0];
      if (mark[h] != e + 1) {
        best = h;
        break;
      }
      skipped[nskip++] = h;
      eplb__gpu_heap_remove(&hp, h);
    }
    for (uint32_t i = 0; i < nskip; i++)
      eplb__gpu_heap_push(&hp, skipped[i]);
    if (best == UINT32_MAX && any != UINT32_MAX && repair(&s, mark, any, e, reps[k].v)) {
      gh_build(&hp, &s); /* rare: two GPUs changed */
      marked = 0;
      for (uint32_t i = 0; i < hp.n; i++)
        marked += mark[hp.heap[i]] == e + 1;
      continue;
    }
    if (best == UINT32_MAX)
      best = any; /* more replicas than GPUs, or more slots than experts */
    bool was_marked = mark[best] == e + 1;
    mark[best] = e + 1;
    uint32_t o = off_of(&s, best) + used[best]++;
    item[o] = e;
    iw[o] = reps[k].v;
    load[best] += reps[k].v;
    if (used[best] >= cap_of(&s, best)) {
      eplb__gpu_heap_remove(&hp, best);
      marked -= was_marked;
    } else {
      eplb__gpu_heap_raised(&hp, best);
      marked += !was_marked;
    }
  }
  /* The presence counts need E x ng words: kept to 4 MiB (the scan is
   * used past that). */
  uint32_t E = ctx->num_experts;
  uint32_t *has = (uint64_t)E * ng <= (1u << 20) ? eplb__calloc((size_t)E * ng, sizeof *has) : NULL;
  improve(&s, ctx->improve_iterations, has);
  eplb__free(has);
  for (uint32_t r = 0; r < nslots; r++)
    phy2log[base + r] = (int32_t)item[r];
done:
  eplb__free(cnt);
  eplb__free(work);
  eplb__free(reps);
  eplb__free(load);
  eplb__free(used);
  eplb__free(item);
  eplb__free(iw);
  return st;
}

/* ---- keep groups on nodes ---------------------------------------------- */

typedef struct {
  eplb__groups_t g;
  uint32_t *ngroups; /* [N] */
  uint32_t *cap;     /* [N] groups that fit a node */
} groups_t;

/* Node n's estimated best max GPU load (eplb__groups_node_bound) with group
 * k moved to node m for the call. */
static double cost_with(groups_t *gr, uint32_t n, uint32_t k, uint32_t m) {
  uint32_t save = gr->g.node_of[k];
  gr->g.node_of[k] = m;
  double c = eplb__groups_node_bound(&gr->g, n);
  gr->g.node_of[k] = save;
  return c;
}

static void assign_groups(groups_t *gr) {
  eplb__groups_t *g = &gr->g;
  uint32_t K = g->K, N = g->N;
  for (uint32_t n = 0; n < N; n++)
    gr->ngroups[n] = 0;
  uint32_t empty = N;
  for (uint32_t i = 0; i < K; i++) {
    uint32_t k = g->order[i], best = UINT32_MAX;
    double bc = 0;
    bool must_empty = K - i <= empty; /* every node needs a group */
    for (uint32_t n = 0; n < N; n++) {
      if (gr->ngroups[n] >= gr->cap[n] || (must_empty && gr->ngroups[n]))
        continue;
      double c = cost_with(gr, n, k, n);
      if (best == UINT32_MAX || c < bc) {
        best = n;
        bc = c;
      }
    }
    g->node_of[k] = best;
    empty -= gr->ngroups[best] == 0;
    gr->ngroups[best]++;
  }
  /* Local search: move or swap groups off the costliest node. */
  for (uint32_t it = 0; it < 4 * K; it++) {
    uint32_t worst = 0;
    double wc = -1;
    for (uint32_t n = 0; n < N; n++) {
      double c = eplb__groups_node_bound(g, n);
      if (c > wc) {
        wc = c;
        worst = n;
      }
    }
    double best = wc * (1 - 1e-12);
    uint32_t bk = UINT32_MAX, bm = 0, bk2 = UINT32_MAX;
    for (uint32_t k = 0; k < K; k++) {
      if (g->node_of[k] != worst)
        continue;
      for (uint32_t m = 0; m < N; m++) {
        if (m == worst)
          continue;
        if (gr->ngroups[m] < gr->cap[m] && gr->ngroups[worst] > 1) {
          double a = cost_with(gr, worst, k, m), b = cost_with(gr, m, k, m);
          double v = a > b ? a : b;
          if (v < best) {
            best = v;
            bk = k;
            bm = m;
            bk2 = UINT32_MAX;
          }
        }
        for (uint32_t k2 = 0; k2 < K; k2++) {
          if (g->node_of[k2] != m || g->gload[k2] >= g->gload[k])
            continue;
          uint32_t save = g->node_of[k2];
          g->node_of[k2] = worst; /* evaluate the swap in place */
          g->node_of[k] = m;
          double a = eplb__groups_node_bound(g, worst);
          double b = eplb__groups_node_bound(g, m);
          g->node_of[k2] = save;
          g->node_of[k] = worst;
          double v = a > b ? a : b;
          if (v < best) {
            best = v;
            bk = k;
            bm = m;
            bk2 = k2;
          }
        }
      }
    }
    if (bk == UINT32_MAX)
      return;
    g->node_of[bk] = bm;
    if (bk2 != UINT32_MAX) {
      g->node_of[bk2] = worst;
    } else {
      gr->ngroups[worst]--;
      gr->ngroups[bm]++;
    }
  }
}

static eplb_status_t place_grouped(const eplb__layer_ctx_t *ctx, int32_t *phy2log) {
  uint32_t K = ctx->num_groups, N = ctx->num_nodes;
  groups_t gr = {0};
  eplb_status_t st = EPLB_OK;
  bool have = eplb__groups_init(&gr.g, ctx);
  gr.ngroups = eplb__calloc((size_t)N * 2, sizeof *gr.ngroups);
  if (!have || !gr.ngroups) {
    st = eplb__error(EPLB_ENOMEM, "planner", "balanced: out of memory");
    goto done;
  }
  gr.cap = gr.ngroups + N;
  uint32_t gs = gr.g.gs, gpn = gr.g.gpn;
  uint64_t total_cap = 0;
  uint32_t min_cap = UINT32_MAX;
  for (uint32_t n = 0; n < N; n++) {
    gr.cap[n] = eplb__groups_node_slots(&gr.g, n) / gs;
    total_cap += gr.cap[n];
    min_cap = gr.cap[n] < min_cap ? gr.cap[n] : min_cap;
  }
  if (K < N || total_cap < K || min_cap == 0) {
    st = eplb__error(EPLB_EINVAL, "planner",
                     "cannot keep %u groups of %u experts on %u nodes: every node needs a group "
                     "and its slots must hold its groups' experts",
                     K, gs, N);
    goto done;
  }
  assign_groups(&gr);
  /* The exact search (within its budget) starts from the local optimum. */
  bool exact = false;
  eplb__group_search(ctx, gr.g.node_of, gr.g.node_of, &exact);
  for (uint32_t n = 0; n < N && !st; n++) {
    uint32_t ne = 0;
    for (uint32_t k = 0; k < K; k++)
      if (gr.g.node_of[k] == n)
        for (uint32_t j = 0; j < gs; j++)
          gr.g.ids[ne++] = k * gs + j;
    st = place(ctx, gr.g.ids, ne, n * gpn, gpn, phy2log);
  }
done:
  eplb__groups_free(&gr.g);
  eplb__free(gr.ngroups);
  return st;
}

/* A candidate placement p2 with its shares s2 replaces p2l/sh (R slots). */
static void take(uint32_t R, int32_t *p2l, double *sh, const int32_t *p2, const double *s2) {
  memcpy(p2l, p2, R * sizeof *p2l);
  memcpy(sh, s2, R * sizeof *sh);
}

static eplb_status_t balanced_own(const eplb__layer_ctx_t *ctx, int32_t *phy2log, double *share,
                                  int *fallback) {
  uint32_t E = ctx->num_experts, R = ctx->num_slots, G = ctx->num_gpus;
  uint32_t K = ctx->num_groups ? ctx->num_groups : 1, N = ctx->num_nodes ? ctx->num_nodes : 1;
  eplb_status_t st;
  /* ds, dshare: the line start's plan, then DeepSeek's. */
  int32_t *ds = NULL;
  double *dshare = NULL;
  *fallback = 0;
  double mx = 0, lmx = 0;
  bool lined = false;
  if (eplb__balanced_line_apply(ctx)) {
    ds = eplb__malloc_array(R, sizeof *ds);
    dshare = eplb__malloc_array(R, sizeof *dshare);
    if (!ds || !dshare) {
      st = eplb__error(EPLB_ENOMEM, "planner", "balanced: out of memory");
      goto done;
    }
    if ((st = eplb__balanced_line(ctx, ds, &lined)) ||
        (lined && (st = eplb__split_shares(ctx, ds, dshare, &lmx))))
      goto done;
  }
  /* The line at the bound is optimal (to the refine's own 1e-9): the
   * search is skipped; short of it, the better of the two is kept. */
  if (lined && lmx <= ctx->lower_bound * (1 + 1e-9)) {
    take(R, phy2log, share, ds, dshare);
    mx = lmx;
  } else {
    if (ctx->keep_groups && K > 1) {
      st = place_grouped(ctx, phy2log);
    } else {
      uint32_t *ids = eplb__malloc_array(E, sizeof *ids);
      if (!ids) {
        st = eplb__error(EPLB_ENOMEM, "planner", "balanced: out of memory");
        goto done;
      }
      for (uint32_t e = 0; e < E; e++)
        ids[e] = e;
      st = place(ctx, ids, E, 0, G, phy2log);
      eplb__free(ids);
    }
    if (st || (st = eplb__split_shares(ctx, phy2log, share, &mx)) ||
        (st = eplb__balanced_refine(ctx, phy2log, share, &mx)))
      goto done;
    if (lined && lmx < mx) {
      take(R, phy2log, share, ds, dshare);
      mx = lmx;
    }
  }
  /* Guard: DeepSeek on the same inputs (it needs uniform slots, and keeps
   * groups on nodes only when hierarchical). */
  bool uniform = true;
  for (uint32_t g = 0; g < G; g++)
    uniform = uniform && ctx->slots_per_gpu[g] == R / G;
  if (!uniform || R % G || (ctx->keep_groups && K > 1 && K % N))
    goto done;
  /* At the certificate (to the guard's own 1e-12) DeepSeek cannot be better
   * by more than rounding: its O(R G) packing is skipped (the layer's
   * largest cost at 1,000 GPUs x 16 slots). */
  if (mx <= ctx->lower_bound * (1 + 1e-12))
    goto done;
  if (!ds)
    ds = eplb__malloc_array(R, sizeof *ds);
  if (!dshare)
    dshare = eplb__malloc_array(R, sizeof *dshare);
  if (!ds || !dshare) {
    st = eplb__error(EPLB_ENOMEM, "planner", "balanced: out of memory");
    goto done;
  }
  if ((st = eplb__deepseek_layer(ctx, ds)))
    goto done;
  eplb__uniform_shares(E, R, ds, dshare);
  double dmax = eplb__layer_max_load(ctx, ds, dshare, NULL);
  if (mx > dmax * (1 + 1e-12)) {
    double smax = 0;
    if ((st = eplb__split_shares(ctx, ds, dshare, &smax)))
      goto done;
    if (smax > dmax) /* rounding: keep DeepSeek's uniform shares */
      eplb__uniform_shares(E, R, ds, dshare);
    take(R, phy2log, share, ds, dshare);
    *fallback = 1;
  }
done:
  eplb__free(ds);
  eplb__free(dshare);
  return st;
}

/* Balanced with exact shares: an even-share placement is also a placement
 * the exact split can serve, so the even-share planner's placement,
 * re-split exactly, replaces balanced's own when its max load is lower
 * (Qwen3-235B EP64 layer 9: 1.0359 x the bound for balanced exact, 1.0043
 * for balanced uniform); every policy that starts from balanced gets it.
 * That search takes about as long as balanced's, so it runs only where it
 * can gain more than EVEN_SLACK of the layer's bound. Exact shares are then
 * never worse than the planner's even shares by more than that, layer by
 * layer. (The bound of every even-share plan is no test for skipping it: it
 * holds for even shares, not for an even placement re-split exactly; and it
 * cost more than it saved, 512 GPUs x 2 slots 2.23 s against 1.90 s.) */
#define EVEN_SLACK 1e-3

static eplb_status_t even_placement_too(const eplb__layer_ctx_t *c, int32_t *p2l, double *sh) {
  uint32_t R = c->num_slots;
  double mx = eplb__layer_max_load(c, p2l, sh, NULL);
  if (!(mx > c->lower_bound * (1 + EVEN_SLACK)))
    return EPLB_OK;
  eplb__layer_ctx_t u = *c; /* eplb__uniform_layer may raise its bound */
  u.bound_unused = true;    /* it is u's, dropped here */
  int32_t *p2 = eplb__malloc_array(R, sizeof *p2);
  double *s2 = eplb__malloc_array(R, sizeof *s2), mx2 = 0;
  int fallback = 0;
  eplb_status_t st = p2 && s2 ? EPLB_OK : eplb__error(EPLB_ENOMEM, "planner", "%u slots", R);
  if (st == EPLB_OK && (st = eplb__uniform_layer(&u, p2, s2, &fallback)) == EPLB_OK &&
      (st = eplb__split_shares(c, p2, s2, &mx2)) == EPLB_OK && mx2 < mx) {
    take(R, p2l, sh, p2, s2);
  }
  eplb__free(p2);
  eplb__free(s2);
  return st;
}

eplb_status_t eplb__balanced_layer(const eplb__layer_ctx_t *ctx, int32_t *phy2log, double *share,
                                   int *fallback) {
  eplb_status_t st = balanced_own(ctx, phy2log, share, fallback);
  return st == EPLB_OK ? even_placement_too(ctx, phy2log, share) : st;
}
