/* runtime/stats.c — per-step counts, the window ring, the EMA, and the
 * optional trace of global steps. */
#include "runtime/runtime.h"

#include <string.h>

eplb_status_t eplb__stats_alloc(eplb_runtime_t *rt) {
  size_t period = rt->cfg.policy.allreduce_period, W = rt->cfg.policy.window_steps;
  rt->pending = eplb__calloc(period, (rt->LE + 2) * sizeof(uint32_t));
  rt->step_tokens = eplb__calloc(rt->L, sizeof(uint32_t));
  rt->ring = eplb__calloc(W, rt->LE * sizeof(uint32_t));
  rt->wsum = eplb__calloc(rt->LE, sizeof(uint64_t));
  rt->ema = eplb__calloc(rt->LE, sizeof(double));
  if (!rt->pending || !rt->step_tokens || !rt->ring || !rt->wsum || !rt->ema)
    return eplb__error(EPLB_ENOMEM, "runtime", "statistics (%zu x %zu counters)", W, rt->LE);
  return eplb__sample_alloc(rt);
}

/* The step's block of the pending all-reduce: [L][E] counts, then the
 * step's tokens and the plan flag. */
static uint32_t *step_block(const eplb_runtime_t *rt) {
  return rt->pending + (size_t)rt->pending_n * (rt->LE + 2);
}

/* GCC/clang vector extension: SSE2 on any x86-64, NEON on arm64, scalar
 * elsewhere; -O2's cost model does not vectorise these loops by itself. */
typedef uint32_t u32x4 __attribute__((vector_size(16)));

bool eplb__ids_below(const int32_t *ids, size_t n, uint32_t E) {
  /* Every id is <= the OR of all ids, so OR < E proves the batch valid in
   * one pass of ORs; an exact compare runs only when that fails (E not a
   * power of two, or a bad id). */
  u32x4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, v0, v1, v2, v3;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    memcpy(&v0, ids + i, sizeof v0);
    memcpy(&v1, ids + i + 4, sizeof v1);
    memcpy(&v2, ids + i + 8, sizeof v2);
    memcpy(&v3, ids + i + 12, sizeof v3);
    a0 |= v0, a1 |= v1, a2 |= v2, a3 |= v3;
  }
  a0 |= a1 | a2 | a3;
  uint32_t all = a0[0] | a0[1] | a0[2] | a0[3];
  for (; i < n; i++)
    all |= (uint32_t)ids[i];
  if (all < E)
    return true;
  uint32_t bad = 0;
  for (i = 0; i < n; i++)
    bad |= (uint32_t)ids[i] >= E;
  return !bad;
}

/* One read-modify-write per id, unrolled; the k ids of a token are
 * distinct, so consecutive increments rarely hit the same counter. */
static void count_ids(uint32_t *restrict c, const int32_t *restrict ids, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    c[(uint32_t)ids[i]]++;
    c[(uint32_t)ids[i + 1]]++;
    c[(uint32_t)ids[i + 2]]++;
    c[(uint32_t)ids[i + 3]]++;
  }
  for (; i < n; i++)
    c[(uint32_t)ids[i]]++;
}

eplb_status_t eplb__bad_ids(const char *what, const eplb_runtime_t *rt, uint32_t layer,
                            const int32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((uint32_t)ids[i] >= rt->E)
      return eplb__error(EPLB_ERANGE, "runtime",
                         "%s: layer %u token %zu position %zu: id %d not in [0, %u)", what, layer,
                         i / rt->k, i % rt->k, ids[i], rt->E);
  return eplb__error(EPLB_ERANGE, "runtime", "%s: layer %u: an id out of range", what, layer);
}

/* What a recorded call adds besides its counts. */
static void recorded(eplb_runtime_t *rt, uint32_t layer, const int32_t *ids, uint32_t num_tokens) {
  rt->step_tokens[layer] += num_tokens;
  rt->m.tokens_recorded += num_tokens;
  if (rt->sample)
    eplb__sample_record(rt, layer, ids, num_tokens);
}

void eplb__stats_add(eplb_runtime_t *rt, uint32_t layer, const uint32_t *add, const int32_t *ids,
                     uint32_t num_tokens) {
  uint32_t *restrict c = step_block(rt) + (size_t)layer * rt->E;
  for (uint32_t e = 0; e < rt->E; e++)
    c[e] += add[e];
  if (ids) {
    recorded(rt, layer, ids, num_tokens);
  } else {
    rt->step_tokens[layer] += num_tokens;
    rt->m.tokens_recorded += num_tokens;
  }
}

eplb_status_t eplb_runtime_record(eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                                  uint32_t num_tokens) {
  if (!rt || (num_tokens > 0 && !topk_ids))
    return eplb__error(EPLB_EINVAL, "runtime", "record: NULL argument");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "record: layer %u >= %u", layer, rt->L);
  if (rt->split_on)
    return eplb__batch_call(rt, "record", layer, topk_ids, num_tokens, NULL, EPLB_OK, 0, NULL);
  size_t n = (size_t)num_tokens * rt->k;
  uint32_t E = rt->E;
  /* The counting thread's queue validates as it packs (0: queued). */
  int queued = rt->counter ? eplb__counter_push(rt->counter, layer, topk_ids, n) : -1;
  if (queued != 0) {
    /* Validate first so that a bad call counts nothing; the counting loop
     * then has no check at all. */
    if (queued > 0 || !eplb__ids_below(topk_ids, n, E))
      return eplb__bad_ids("record", rt, layer, topk_ids, n);
    count_ids(step_block(rt) + (size_t)layer * E, topk_ids, n);
  }
  recorded(rt, layer, topk_ids, num_tokens);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_route(eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                                 uint32_t num_tokens, uint64_t token_base, int32_t *out_slots) {
  if (!rt || (num_tokens > 0 && (!topk_ids || !out_slots)))
    return eplb__error(EPLB_EINVAL, "runtime", "route: NULL argument");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "route: layer %u >= %u", layer, rt->L);
  if (rt->split_on)
    return eplb__batch_call(rt, "route", layer, topk_ids, num_tokens, NULL, EPLB_OK, token_base,
                            out_slots);
  size_t n = (size_t)num_tokens * rt->k;
  /* With the SIMD map, one pass: the map checks the ids, so record's own
   * check (about a seventh of its time) is skipped, and with the counting
   * thread it writes the packed ids into the thread's queue as it reads
   * them (a full queue: counted inline). */
  uint8_t *dst = rt->counter ? eplb__counter_reserve(rt->counter, layer, n) : NULL;
  uint32_t top;
  if (eplb__map_and_pack(rt, layer, topk_ids, num_tokens, token_base, out_slots, dst,
                         dst ? eplb__counter_width(rt->counter) : 1, &top)) {
    if (top >= rt->E) /* nothing was committed or counted */
      return eplb__bad_ids("route", rt, layer, topk_ids, n);
    if (dst)
      eplb__counter_commit(rt->counter);
    else
      count_ids(step_block(rt) + (size_t)layer * rt->E, topk_ids, n);
    recorded(rt, layer, topk_ids, num_tokens);
    return EPLB_OK;
  }
  /* The scalar map: one check of the ids for both the map and the count. */
  if (!eplb__ids_below(topk_ids, n, rt->E))
    return eplb__bad_ids("route", rt, layer, topk_ids, n);
  eplb__map_scalar(rt, layer, topk_ids, num_tokens, token_base, out_slots);
  if (!rt->counter || eplb__counter_push(rt->counter, layer, topk_ids, n) != 0)
    count_ids(step_block(rt) + (size_t)layer * rt->E, topk_ids, n);
  recorded(rt, layer, topk_ids, num_tokens);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_record_counts(eplb_runtime_t *rt, uint32_t layer,
                                         const uint32_t *counts) {
  if (!rt || !counts)
    return eplb__error(EPLB_EINVAL, "runtime", "record_counts: NULL argument");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "record_counts: layer %u >= %u", layer, rt->L);
  uint32_t *restrict c = step_block(rt) + (size_t)layer * rt->E;
  const uint32_t *restrict add = counts;
  /* Without an early exit these loops vectorise; the error path looks again. */
  uint64_t sum = 0;
  uint32_t wraps = 0;
  eplb_status_t st = EPLB_OK;
  for (uint32_t e = 0; e < rt->E; e++) {
    wraps |= c[e] + add[e] < c[e];
    sum += add[e];
  }
  for (uint32_t e = 0; wraps && e < rt->E && st == EPLB_OK; e++)
    if (counts[e] > UINT32_MAX - c[e])
      st = eplb__error(EPLB_ERANGE, "runtime",
                       "record_counts: layer %u expert %u: count %u overflows the step", layer, e,
                       counts[e]);
  uint64_t tokens = sum / rt->k;
  if (st == EPLB_OK && tokens > UINT32_MAX - rt->step_tokens[layer])
    st = eplb__error(EPLB_ERANGE, "runtime", "record_counts: layer %u: too many tokens", layer);
  /* With the per-batch split the call is collective even when it fails. */
  if (rt->split_on)
    return eplb__batch_call(rt, "record_counts", layer, NULL, (uint32_t)tokens, counts, st, 0,
                            NULL);
  if (st != EPLB_OK)
    return st;
  eplb__stats_add(rt, layer, counts, NULL, (uint32_t)tokens);
  return EPLB_OK;
}

/* One global step enters the ring, the window sum and the EMA. */
static void push_global(eplb_runtime_t *rt, const uint32_t *counts) {
  uint32_t W = rt->cfg.policy.window_steps;
  uint32_t *slot = rt->ring + (size_t)(rt->ring_n % W) * rt->LE;
  double d = rt->cfg.policy.ema_decay;
  bool first = rt->ring_n == 0;
  for (size_t i = 0; i < rt->LE; i++) {
    rt->wsum[i] += (uint64_t)counts[i] - slot[i];
    slot[i] = counts[i];
    rt->ema[i] = first ? counts[i] : d * rt->ema[i] + (1 - d) * counts[i];
  }
  rt->ring_n++;
}

eplb_status_t eplb__stats_step_end(eplb_runtime_t *rt) {
  eplb_status_t st = EPLB_OK;
  size_t stride = rt->LE + 2;
  if (rt->counter)
    eplb__counter_collect(rt->counter, step_block(rt));
  uint32_t tokens = 0;
  for (uint32_t l = 0; l < rt->L; l++)
    tokens = rt->step_tokens[l] > tokens ? rt->step_tokens[l] : tokens;
  step_block(rt)[rt->LE] = tokens;
  memset(rt->step_tokens, 0, rt->L * sizeof *rt->step_tokens);
  if (rt->sample)
    eplb__sample_close_step(rt);
  if (++rt->pending_n < rt->cfg.policy.allreduce_period)
    return EPLB_OK;
  uint32_t n = rt->pending_n;
  rt->pending_n = 0;
  /* Rank 0 tells everyone about a posted plan in the same all-reduce. */
  uint32_t *flag = rt->pending + (size_t)(n - 1) * stride + rt->LE + 1;
  *flag = rt->shm && eplb__shm_plan_waiting(rt);
  st = eplb__comm_allreduce_u32(rt->comm, rt->pending, (size_t)n * stride);
  if (st != EPLB_OK)
    goto done;
  rt->mailbox_ready = *flag > 0;
  if (rt->sample && (st = eplb__sample_gather(rt, n)) != EPLB_OK)
    goto done;
  for (uint32_t s = 0; s < n; s++) {
    const uint32_t *c = rt->pending + (size_t)s * stride;
    push_global(rt, c);
    rt->m.global_steps++;
    if (rt->trace) {
      eplb_trace_step_t step = {.num_tokens = c[rt->LE], .counts = c};
      if (rt->sample)
        eplb__sample_rows(rt, s, n, &step);
      eplb_status_t ts = eplb_trace_writer_append(rt->trace, &step);
      if (ts != EPLB_OK) {
        eplb__log(EPLB_LOG_ERROR, "runtime", "%s: trace append failed, recording stops: %s",
                  rt->trace_path, eplb_error_detail());
        eplb_trace_writer_destroy(rt->trace);
        rt->trace = NULL;
        st = eplb__error(ts, "runtime", "%s: trace append failed; recording stopped",
                         rt->trace_path);
      }
    }
  }
  if (rt->shm)
    eplb__shm_publish(rt);
done:
  memset(rt->pending, 0, (size_t)n * stride * sizeof *rt->pending);
  return st;
}

eplb_status_t eplb_runtime_window(const eplb_runtime_t *rt, eplb_runtime_window_kind_t kind,
                                  double *out) {
  if (!rt || !out || (kind != EPLB_WINDOW_SUM && kind != EPLB_WINDOW_EMA))
    return eplb__error(EPLB_EINVAL, "runtime", "window: NULL argument or kind %d", (int)kind);
  for (size_t i = 0; i < rt->LE; i++)
    out[i] = kind == EPLB_WINDOW_SUM ? (double)rt->wsum[i] : rt->ema[i];
  return EPLB_OK;
}
