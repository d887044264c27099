/* runtime/batch.c — the per-batch split (cfg.split_per_batch): every
 * record/route/record_counts call all-reduces the call's counts per node,
 * splits the batch over the layer's live placement (with the locality stage
 * when tokens come from several nodes) and maps by the fresh shares.
 *
 * Every rank runs the same solver on the same all-reduced counts and the same
 * placement, so the shares agree bit for bit without another message; the
 * only collective is the all-reduce, which every rank makes whatever went
 * wrong locally (a bad id is a flag in the message, not a skipped call). */
#include "runtime/runtime.h"
#include "eplb/kernels.h"
#include "eplb/model.h"
#include "eplb/split.h"
#include "kernels/dispatch_math.h"
#include "kernels/kernels.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* The whole-token split's scratch (b->whole_ws): the batch's global counts
 * [E] (uint32, as the device sums them), then the solver's workspace at a
 * 16-byte boundary. */
static size_t whole_ws_offset(uint32_t E) {
  return ((size_t)E * sizeof(uint32_t) + 15) & ~(size_t)15;
}

/* cfg.split_whole_tokens: checked and resolved (on by default where the
 * device splits too, so that the runtime's host splits agree with it), and
 * its scratch. */
static eplb_status_t whole_setup(eplb_runtime_t *rt) {
  eplb__batch_t *b = &rt->batch;
  const eplb_runtime_config_t *c = &rt->cfg;
  bool locality = rt->g.N > 1 && c->local_first;
  if (c->split_whole_tokens > 1)
    return eplb__error(EPLB_EINVAL, "runtime", "config: split_whole_tokens %u not in {0, 1}",
                       c->split_whole_tokens);
  if (c->split_whole_tokens && (locality || b->decode))
    return eplb__error(
        EPLB_EINVAL, "runtime", "config: split_whole_tokens: the device's solver has %s: %s",
        locality ? "no locality stage" : "no decode objective",
        locality ? "with several nodes it needs local_first 0" : "it needs split_model NULL");
  b->whole = c->split_whole_tokens ||
             (c->device.kind != EPLB_DEVICE_NONE && rt->split_on && !locality && !b->decode);
  if (!b->whole)
    return EPLB_OK;
  size_t ws = eplb__cuda_split_workspace_bytes(rt->g.E, rt->g.P, rt->g.S);
  if (!ws)
    return eplb__error(EPLB_ERANGE, "runtime", "split_whole_tokens: %u experts x %u slots", rt->g.E,
                       rt->g.R);
  if (!(b->whole_ws = eplb__malloc(whole_ws_offset(rt->g.E) + ws)))
    return eplb__error(EPLB_ENOMEM, "runtime", "split_whole_tokens: workspace");
  return EPLB_OK;
}

eplb_status_t eplb__batch_alloc(eplb_runtime_t *rt) {
  eplb__batch_t *b = &rt->batch;
  uint32_t L = rt->g.L, E = rt->g.E, R = rt->g.R, P = rt->g.P, N = rt->g.N;
  size_t LR = (size_t)L * R;
  b->N = N;
  eplb_status_t wst = whole_setup(rt);
  if (wst != EPLB_OK)
    return wst;
  b->splits = eplb__calloc(L, sizeof *b->splits);
  b->gpu_node = eplb__malloc_array(P, sizeof *b->gpu_node);
  b->gpu_slots = eplb__malloc_array(P, sizeof *b->gpu_slots);
  b->msg = eplb__malloc_array((size_t)N * E + 4, sizeof *b->msg);
  b->own = eplb__malloc_array(E, sizeof *b->own);
  b->nloads = eplb__malloc_array((size_t)N * E, sizeof *b->nloads);
  b->share = eplb__malloc_array(LR, sizeof *b->share);
  b->node_share = eplb__malloc_array(LR, sizeof *b->node_share);
  b->state = eplb__calloc(L, sizeof *b->state);
  b->t_star = eplb__calloc(L, sizeof *b->t_star);
  b->all_ns = eplb__malloc_array((size_t)N * R, sizeof *b->all_ns);
  b->gload = eplb__malloc_array(P, sizeof *b->gload);
  b->qcur = eplb__malloc_array(E, sizeof *b->qcur);
  b->qend = eplb__malloc_array(E, sizeof *b->qend);
  b->qrem = eplb__malloc_array(R, sizeof *b->qrem);
  b->dshare = eplb__malloc_array(R, sizeof *b->dshare);
  if (!b->dshare || !b->splits || !b->gpu_node || !b->gpu_slots || !b->msg || !b->own ||
      !b->nloads || !b->share || !b->node_share || !b->state || !b->t_star || !b->all_ns ||
      !b->gload || !b->qcur || !b->qend || !b->qrem)
    return eplb__error(EPLB_ENOMEM, "runtime", "per-batch split of %u layers x %u slots", L, R);
  for (uint32_t g = 0; g < P; g++)
    b->gpu_node[g] = g / rt->g.K, b->gpu_slots[g] = rt->g.S;
  for (uint32_t l = 0; l < L; l++) {
    eplb_status_t st = eplb_split_create(NULL, &b->splits[l]);
    if (st != EPLB_OK)
      return st;
  }
  return EPLB_OK;
}

void eplb__batch_free(eplb_runtime_t *rt) {
  eplb__batch_t *b = &rt->batch;
  if (b->splits)
    for (uint32_t l = 0; l < rt->g.L; l++)
      eplb_split_destroy(b->splits[l]);
  void *ptrs[] = {b->splits, b->gpu_node,   b->gpu_slots, b->msg,    b->own,     b->nloads,
                  b->share,  b->node_share, b->state,     b->t_star, b->all_ns,  b->gload,
                  b->qcur,   b->qend,       b->qrem,      b->dshare, b->whole_ws};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    eplb__free(ptrs[i]);
  memset(b, 0, sizeof *b);
}

void eplb__batch_decode_setup(eplb_runtime_t *rt, const eplb_model_desc_t *model,
                              const eplb_gpu_desc_t *gpu) {
  eplb__batch_t *b = &rt->batch;
  b->decode = model && gpu;
  if (!b->decode)
    return;
  b->model = *model;
  b->gpu = *gpu;
  eplb_decode_split_options_default(&b->dopts);
  eplb_decode_split_options_for(model, gpu, rt->g.P, rt->g.K, &b->dopts);
}

uint64_t eplb__batch_hash(const eplb__batch_t *b, uint64_t h) {
  uint8_t dec = b->decode, whole = b->whole;
  h = eplb__fnv1a(h, &whole, sizeof whole);
  h = eplb__fnv1a(h, &dec, sizeof dec);
  if (dec) { /* the figures, not the names */
    h = eplb__fnv1a(h, &b->model.hidden_size,
                    sizeof b->model - offsetof(eplb_model_desc_t, hidden_size));
    h = eplb__fnv1a(h, &b->gpu.hbm_gbps, sizeof b->gpu - offsetof(eplb_gpu_desc_t, hbm_gbps));
  }
  return h;
}

eplb_status_t eplb_runtime_layer_split(const eplb_runtime_t *rt, uint32_t layer,
                                       const double **share, const double **node_share,
                                       double *t_star) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "layer_split: NULL runtime");
  if (layer >= rt->g.L)
    return eplb__error(EPLB_ERANGE, "runtime", "layer_split: layer %u >= %u", layer, rt->g.L);
  const eplb__batch_t *b = &rt->batch;
  size_t o = (size_t)layer * rt->g.R;
  uint8_t s = b->state[layer];
  if (share)
    *share = s ? b->share + o : eplb__live_share(rt->live, layer);
  if (node_share)
    *node_share = s == 2 ? b->node_share + o : !s ? eplb__live_node_share(rt->live, layer) : NULL;
  if (t_star)
    *t_star = s ? b->t_star[layer] : 0;
  return EPLB_OK;
}

/* The check word of a call: ranks must be at the same layer of the same
 * shape. Its sum and the sum of its square both match P times this rank's
 * only when every rank sent the same word (up to wrap-around coincidences). */
static uint32_t check_word(const eplb_runtime_t *rt, uint32_t layer) {
  uint32_t v[2] = {layer, rt->g.E};
  return (uint32_t)eplb__fnv1a(EPLB__FNV1A_BASIS, v, sizeof v) | 1u;
}

/* Counts the call's ids into own [E]; false on an id out of range. */
static bool count_own(eplb_runtime_t *rt, const int32_t *ids, size_t n) {
  uint32_t *own = rt->batch.own;
  memset(own, 0, rt->g.E * sizeof *own);
  if (!eplb__ids_below(ids, n, rt->g.E))
    return false;
  for (size_t i = 0; i < n; i++)
    own[(uint32_t)ids[i]]++;
  return true;
}

/* The decode objective (cfg.split_model) on a global split: its search from
 * the T* shares, kept only where the modelled time drops (strictly). A failed
 * search keeps the T* shares. */
static void decode_layer(eplb_runtime_t *rt, uint32_t layer, const eplb_split_problem_t *pb,
                         double *share) {
  eplb__batch_t *b = &rt->batch;
  double tb = 0, td = 0;
  eplb_status_t st = eplb_decode_split_refine(pb, b->nloads, &b->model, &b->gpu, &b->dopts, share,
                                              b->dshare, &tb, &td);
  if (st != EPLB_OK) {
    eplb__log(EPLB_LOG_WARN, "runtime", "layer %u: decode split failed, T* shares kept: %s", layer,
              eplb_error_detail());
    return;
  }
  if (td < tb) {
    memcpy(share, b->dshare, rt->g.R * sizeof *share);
    rt->m.splits_decode++;
  }
}

/* The split in whole tokens (cfg.split_whole_tokens) of the batch
 * b->nloads [N][E] over placement p2l: the device's solver on the same
 * global counts, so the shares and T* are the device's bit for bit. share
 * [R] is written only on success. */
static eplb_status_t split_whole(eplb_runtime_t *rt, uint32_t layer, const int32_t *p2l,
                                 double *share, double *t_star) {
  eplb__batch_t *b = &rt->batch;
  uint32_t E = rt->g.E, N = b->N, status = EPLB__CUDA_SPLIT_INTERNAL;
  uint32_t *counts = b->whole_ws;
  for (uint32_t e = 0; e < E; e++) {
    uint64_t w = 0; /* exact: the rows are uint32 counts */
    for (uint32_t n = 0; n < N; n++)
      w += (uint64_t)b->nloads[(size_t)n * E + e];
    if (w > UINT32_MAX) /* only eplb_runtime_split's given counts can be */
      return eplb__error(EPLB_ERANGE, "runtime",
                         "layer %u: whole-token split: expert %u has %" PRIu64 " tokens > 2^32",
                         layer, e, w);
    counts[e] = (uint32_t)w;
  }
  eplb__split_ref(p2l, E, rt->g.P, rt->g.S, counts, share, t_star, &status,
                  (unsigned char *)b->whole_ws + whole_ws_offset(E), EPLB__SPLIT_MAX_ITERATIONS,
                  NULL);
  if (status == EPLB__CUDA_SPLIT_CONVERGED)
    return EPLB_OK;
  return eplb__error(status == EPLB__CUDA_SPLIT_BAD_INPUT ? EPLB_ERANGE : EPLB_ESOLVER, "runtime",
                     "layer %u: whole-token split: %s", layer,
                     status == EPLB__CUDA_SPLIT_NOT_CONVERGED ? "not converged in 32 max-flows"
                     : status == EPLB__CUDA_SPLIT_BAD_INPUT   ? "bad placement or counts"
                                                              : "internal error");
}

/* Splits the batch b->nloads [N][E] over the layer's live placement: the
 * global split (in whole tokens with cfg.split_whole_tokens), then the
 * locality stage with several nodes and local_first (or the decode
 * objective; create allows either only without the other and the
 * whole-token split).
 * On success the layer's fresh shares are set; on failure they stay (and a
 * warning names the layer). */
static eplb_status_t split_layer(eplb_runtime_t *rt, uint32_t layer) {
  eplb__batch_t *b = &rt->batch;
  uint32_t E = rt->g.E, N = b->N, R = rt->g.R;
  eplb_status_t st;
  double t2 = eplb__now();
  size_t o = (size_t)layer * R;
  eplb_split_problem_t pb = {E, rt->g.P, R, (const uint32_t *)eplb__live_p2l(rt->live, layer),
                             b->gpu_slots};
  eplb_split_result_t res = {.share = b->share + o, .gpu_load = b->gload};
  bool local = N > 1 && rt->cfg.local_first;
  double cross = 0;
  const uint8_t *oos = eplb__live_oos(rt->live, layer); /* weights being written */
  if (local) {
    eplb_split_local_t loc = {N, b->gpu_node, b->nloads, rt->cfg.split_tolerance};
    st = oos ? eplb_split_solve_in_service(b->splits[layer], &pb, oos, &loc, NULL, &res, b->all_ns,
                                           &cross)
             : eplb_split_solve_local(b->splits[layer], &pb, &loc, &res, b->all_ns, &cross);
  } else if (b->whole) {
    st = split_whole(rt, layer, eplb__live_p2l(rt->live, layer), res.share, &res.t_star);
  } else {
    for (uint32_t e = 0; e < E; e++) {
      double w = 0;
      for (uint32_t n = 0; n < N; n++)
        w += b->nloads[(size_t)n * E + e];
      b->nloads[e] = w; /* row 0 now holds the sums */
    }
    st = oos ? eplb_split_solve_in_service(b->splits[layer], &pb, oos, NULL, b->nloads, &res, NULL,
                                           NULL)
             : eplb_split_solve(b->splits[layer], &pb, b->nloads, &res);
    if (st == EPLB_OK && b->decode)
      decode_layer(rt, layer, &pb, res.share);
  }
  rt->m.split_seconds += eplb__now() - t2;
  if (st != EPLB_OK) {
    /* The solver may have written part of the shares: the layer falls back
     * to the plan's until the next split succeeds. */
    eplb__log(EPLB_LOG_WARN, "runtime", "layer %u: per-batch split failed, plan shares kept: %s",
              layer, eplb_error_detail());
    b->state[layer] = 0;
    return st;
  }
  if (local)
    memcpy(b->node_share + o, b->all_ns + (size_t)rt->g.node * R, R * sizeof *b->node_share);
  b->state[layer] = local ? 2 : 1;
  b->t_star[layer] = res.t_star;
  rt->m.splits++;
  rt->m.split_cross_tokens += cross;
  return EPLB_OK;
}

/* All-reduces own [E] as this node's row with the flag and the check word,
 * then splits. *fresh: the layer has new shares. Returns EPLB_OK (fresh, or
 * the layer keeps its shares after a bad id somewhere or a failed split),
 * EPLB_ECOMM, or EPLB_ESHAPE (ranks disagree on the layer: every rank sees
 * it). */
static eplb_status_t exchange_and_split(eplb_runtime_t *rt, uint32_t layer, bool bad, bool *fresh) {
  eplb__batch_t *b = &rt->batch;
  uint32_t E = rt->g.E, N = b->N;
  /* Without the locality stage only the global sums count, and a device
   * rank sends [E + 3] (device.c): every rank sends that layout then, so
   * host and device ranks can share one split. */
  bool local = N > 1 && rt->cfg.local_first;
  size_t NE = local ? (size_t)N * E : E;
  *fresh = false;
  /* With continuous re-placement one more word: this rank's transfers of
   * the layer's moves in flight are done (eplb__cont_layer_done). Not with
   * a device somewhere: a device rank's message has no such word, and its
   * table goes live at step_end (continuous.c, stage_devices). */
  bool landing = rt->cont && !rt->dev_any;
  bool moving = landing && eplb__cont_layer_moving(rt->cont, layer);
  size_t words = NE + 3 + landing;
  memset(b->msg, 0, words * sizeof *b->msg);
  if (!bad)
    memcpy(b->msg + (local ? (size_t)rt->g.node * E : 0), b->own, E * sizeof *b->own);
  if (moving)
    b->msg[NE + 3] = eplb__cont_layer_done(rt, layer);
  /* A layer out of range sends the device's {1, 0, 0}: peers on a valid
   * layer see the words differ (EPLB_ESHAPE), as they would on the device. */
  uint32_t word = layer < rt->g.L ? check_word(rt, layer) : 0;
  b->msg[NE] = bad, b->msg[NE + 1] = word, b->msg[NE + 2] = word * word;
  double t0 = eplb__now();
  eplb_status_t st = eplb__comm_allreduce_u32(rt->comm, b->msg, words);
  double t1 = eplb__now();
  rt->m.allreduce_seconds += t1 - t0;
  if (st != EPLB_OK)
    return st;
  uint32_t ranks = rt->comm ? rt->g.P : 1; /* a standalone rank reduces alone */
  if (b->msg[NE + 1] != word * ranks || b->msg[NE + 2] != word * word * ranks)
    return eplb__error(EPLB_ESHAPE, "runtime",
                       "per-batch split: layer %u: the ranks called different layers or shapes "
                       "(every rank must make the same calls in the same order)",
                       layer);
  /* Every rank's copies of the layer landed: its new experts serve this
   * call already (the same decision on every rank, from the same sums). */
  if (moving && b->msg[NE + 3] == ranks)
    eplb__cont_land_layer(rt, layer);
  if (b->msg[NE]) {
    rt->m.splits_failed++;
    return EPLB_OK; /* some rank had a bad id: every rank keeps its shares */
  }
  for (size_t i = 0; i < (size_t)N * E; i++) /* split_layer sums all N rows */
    b->nloads[i] = i < NE ? b->msg[i] : 0;
  st = split_layer(rt, layer);
  *fresh = st == EPLB_OK;
  if (st != EPLB_OK) /* the same on every rank (same inputs): all keep their shares */
    rt->m.splits_failed++;
  return EPLB_OK;
}

/* Rebuilds the layer's dispatch table (the idle one, then flips) from its
 * fresh shares, for eplb_runtime_map. */
static void rebuild_table(eplb_runtime_t *rt, uint32_t layer) {
  const eplb__batch_t *b = &rt->batch;
  size_t o = (size_t)layer * rt->g.R;
  eplb__live_build_idle(rt->live, layer, eplb__live_p2l(rt->live, layer), b->share + o,
                        b->state[layer] == 2 ? b->node_share + o : NULL);
  eplb__live_flip(rt->live, layer);
}

/* Maps the call's ids by exact quotas of the fresh shares: this rank's c
 * tokens of expert e give candidate j floor(C_j + phi) - floor(C_{j-1} +
 * phi) of them, C_j = c (s_1 + ... + s_j), phi in [0, 1) hashed from
 * (token_base, layer, e): the quotas sum to c, each is within one token of
 * c s_j, and the phase spreads the rounding over ranks and calls instead
 * of always favouring the first replica. */
static void quota_map(eplb_runtime_t *rt, uint32_t layer, const int32_t *ids, uint32_t num_tokens,
                      uint64_t token_base, int32_t *out) {
  eplb__batch_t *b = &rt->batch;
  uint32_t E = rt->g.E, R = rt->g.R;
  size_t o = (size_t)layer * R, n = (size_t)num_tokens * rt->g.k;
  const double *s = b->state[layer] == 2 ? b->node_share + o : b->share + o;
  /* The live table was built for this placement and holds its slots
   * bucketed by expert: no need to bucket them again per call. */
  const eplb__dtab_t *t = eplb__live_table(rt->live, layer);
  const uint32_t *rstart = t->rstart, *rlist = t->rlist;
  uint64_t th = eplb__dispatch_token_hash(token_base, layer);
  for (uint32_t e = 0; e < E; e++) {
    uint32_t c = b->own[e], a = rstart[e], z = rstart[e + 1];
    b->qcur[e] = a, b->qend[e] = z;
    if (!c)
      continue;
    double phi = eplb__dispatch_u(th, e) / 65536.0, cum = 0, below = 0;
    uint32_t given = 0, last = a;
    for (uint32_t i = a; i < z; i++) {
      double sh = s[rlist[i]];
      b->qrem[i] = 0;
      if (!(sh > 0))
        continue;
      cum += sh * c;
      double next = floor(cum + phi);
      uint32_t q = next > below ? (uint32_t)(next - below) : 0;
      q = q > c - given ? c - given : q;
      b->qrem[i] = q, given += q, last = i, below = next;
    }
    /* Rounding of the running sum may leave a token over: the last
     * candidate with a share takes it. */
    b->qrem[last] += c - given;
    while (!b->qrem[b->qcur[e]])
      b->qcur[e]++;
  }
  /* The quotas of e sum to its count in the call, so the cursor never runs
   * past e's list. */
  for (size_t x = 0; x < n; x++) {
    uint32_t e = (uint32_t)ids[x], i = b->qcur[e];
    out[x] = (int32_t)rlist[i];
    if (!--b->qrem[i]) {
      while (++i < b->qend[e] && !b->qrem[i])
        ;
      b->qcur[e] = i;
    }
  }
}

eplb_status_t eplb__batch_call(eplb_runtime_t *rt, eplb__call_t kind, uint32_t layer,
                               const int32_t *ids, uint32_t num_tokens, const uint32_t *counts,
                               eplb_status_t counts_err, uint64_t token_base, int32_t *out_slots) {
  eplb__batch_t *b = &rt->batch;
  const char *what = eplb__seq_call_name(kind);
  size_t n = (size_t)num_tokens * rt->g.k;
  eplb_status_t qs = eplb__seq_enter(rt, kind, layer);
  if (qs != EPLB_OK) {
    /* Serving goes on: the live table maps (no count, no split). */
    if (out_slots && eplb__ids_below(ids, n, rt->g.E))
      eplb__map_scalar(eplb__live_table(rt->live, layer), rt->g.k, layer, ids, num_tokens,
                       token_base, out_slots);
    return qs;
  }
  bool bad;
  if (counts) {
    memcpy(b->own, counts, rt->g.E * sizeof *b->own);
    /* The all-reduce sums uint32 counts over the ranks. */
    for (uint32_t e = 0; counts_err == EPLB_OK && e < rt->g.E; e++)
      if (counts[e] > UINT32_MAX / rt->g.P)
        counts_err = eplb__error(EPLB_ERANGE, "runtime",
                                 "%s: layer %u expert %u: count %u above 2^32 / %u ranks", what,
                                 layer, e, counts[e], rt->g.P);
    bad = counts_err != EPLB_OK;
  } else if (n > UINT32_MAX / rt->g.P) { /* the all-reduce sums over the ranks */
    bad = true;
    counts_err = eplb__error(EPLB_ERANGE, "runtime",
                             "%s: layer %u: %u tokens above 2^32 / %u "
                             "ranks ids",
                             what, layer, num_tokens, rt->g.P);
  } else {
    bad = !count_own(rt, ids, n);
  }
  bool fresh;
  eplb_status_t st = exchange_and_split(rt, layer, bad, &fresh);
  if (st == EPLB_ESHAPE)
    return st;
  if (bad)
    return counts_err != EPLB_OK ? counts_err : eplb__bad_ids(what, &rt->g, layer, ids, n);
  double t0 = eplb__now();
  if (out_slots && fresh)
    quota_map(rt, layer, ids, num_tokens, token_base, out_slots);
  else if (out_slots)
    eplb__map_scalar(eplb__live_table(rt->live, layer), rt->g.k, layer, ids, num_tokens, token_base,
                     out_slots);
  else if (fresh)
    rebuild_table(rt, layer);
  rt->m.split_seconds += eplb__now() - t0;
  /* The call's counts join the step even when the exchange failed: they
   * are this rank's tokens, and step_end's all-reduce still runs. */
  eplb__runtime_add_counts(rt, layer, b->own, counts ? NULL : ids, num_tokens);
  return st;
}

void eplb__batch_join(eplb_runtime_t *rt, eplb__call_t kind, uint32_t layer) {
  bool fresh;
  if (eplb__seq_enter(rt, kind, layer) == EPLB_OK)
    (void)exchange_and_split(rt, layer, true, &fresh);
}

eplb_status_t eplb_runtime_split(eplb_runtime_t *rt, uint32_t layer, const uint32_t *node_counts) {
  if (!rt || !node_counts)
    return eplb__error(EPLB_EINVAL, "runtime", "split: NULL argument");
  if (layer >= rt->g.L)
    return eplb__error(EPLB_ERANGE, "runtime", "split: layer %u >= %u", layer, rt->g.L);
  eplb__batch_t *b = &rt->batch;
  size_t NE = (size_t)b->N * rt->g.E;
  for (size_t i = 0; i < NE; i++)
    b->nloads[i] = node_counts[i];
  eplb_status_t st = split_layer(rt, layer);
  if (st != EPLB_OK) {
    rt->m.splits_failed++;
    return st;
  }
  double t0 = eplb__now();
  rebuild_table(rt, layer);
  rt->m.split_seconds += eplb__now() - t0;
  /* The device follows on its stream; should the upload fail it keeps its
   * table (the split only moves load between replicas of the placement, so
   * either table is correct) and the status says so. */
  if (rt->dev && (st = eplb__device_stage(rt, layer, eplb__live_table(rt->live, layer), NULL,
                                          NULL)) == EPLB_OK)
    st = eplb__device_flip(rt, layer);
  return st;
}
