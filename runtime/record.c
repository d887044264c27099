/* runtime/record.c — the runtime core's per-call paths (record, route,
 * record_counts) and step_end's close of the statistics: they compose the
 * parts (statistics, counting thread, dispatch, row sample, per-batch split,
 * mailbox), each reached through its own interface. */
#include "runtime/runtime.h"

#include <string.h>

/* With the per-batch split record, route and record_counts are collective:
 * a call that fails its own checks still joins the all-reduce, or its peers
 * would wait for it (the error is set after, so its detail is this call's). */
static void join_failed(eplb_runtime_t *rt, eplb__call_t kind, uint32_t layer) {
  if (rt->split_on)
    eplb__batch_join(rt, kind, layer);
}

eplb_status_t eplb_runtime_record(eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                                  uint32_t num_tokens) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "record: NULL runtime");
  if (num_tokens > 0 && !topk_ids)
    return join_failed(rt, EPLB__CALL_RECORD, layer),
           eplb__error(EPLB_EINVAL, "runtime", "record: NULL topk_ids");
  if (layer >= rt->g.L)
    return join_failed(rt, EPLB__CALL_RECORD, layer),
           eplb__error(EPLB_ERANGE, "runtime", "record: layer %u >= %u", layer, rt->g.L);
  if (rt->split_on)
    return eplb__batch_call(rt, EPLB__CALL_RECORD, layer, topk_ids, num_tokens, NULL, EPLB_OK, 0,
                            NULL);
  size_t n = (size_t)num_tokens * rt->g.k;
  /* The counting thread's queue validates as it packs (0: queued). */
  int queued = rt->counter ? eplb__counter_push(rt->counter, layer, topk_ids, n) : -1;
  if (queued != 0) {
    /* Validate first so that a bad call counts nothing; the counting loop
     * then has no check at all. */
    if (queued > 0 || !eplb__ids_below(topk_ids, n, rt->g.E))
      return eplb__bad_ids("record", &rt->g, layer, topk_ids, n);
    eplb__stats_count_ids(rt->stats, layer, topk_ids, n);
  }
  eplb__runtime_recorded(rt, layer, topk_ids, num_tokens);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_route(eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                                 uint32_t num_tokens, uint64_t token_base, int32_t *out_slots) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "route: NULL runtime");
  if (num_tokens > 0 && (!topk_ids || !out_slots))
    return join_failed(rt, EPLB__CALL_ROUTE, layer),
           eplb__error(EPLB_EINVAL, "runtime", "route: NULL %s",
                       topk_ids ? "out_slots" : "topk_ids");
  if (layer >= rt->g.L)
    return join_failed(rt, EPLB__CALL_ROUTE, layer),
           eplb__error(EPLB_ERANGE, "runtime", "route: layer %u >= %u", layer, rt->g.L);
  if (rt->split_on)
    return eplb__batch_call(rt, EPLB__CALL_ROUTE, layer, topk_ids, num_tokens, NULL, EPLB_OK,
                            token_base, out_slots);
  size_t n = (size_t)num_tokens * rt->g.k;
  /* With the SIMD map, one pass: the map checks the ids, so record's own
   * check (about a seventh of its time) is skipped, and with the counting
   * thread it writes the packed ids into the thread's queue as it reads
   * them (a full queue: counted inline). */
  uint8_t *dst = rt->counter ? eplb__counter_reserve(rt->counter, layer, n) : NULL;
  uint32_t top;
  const eplb__dtab_t *t = eplb__live_table(rt->live, layer);
  if (eplb__map_and_pack(t, rt->g.k, layer, topk_ids, num_tokens, token_base, out_slots, dst,
                         dst ? eplb__counter_width(rt->counter) : 1, &top)) {
    if (top >= rt->g.E) /* nothing was committed or counted */
      return eplb__bad_ids("route", &rt->g, layer, topk_ids, n);
    if (dst)
      eplb__counter_commit(rt->counter);
    else
      eplb__stats_count_ids(rt->stats, layer, topk_ids, n);
    eplb__runtime_recorded(rt, layer, topk_ids, num_tokens);
    return EPLB_OK;
  }
  /* The scalar map: one check of the ids for both the map and the count. */
  if (!eplb__ids_below(topk_ids, n, rt->g.E))
    return eplb__bad_ids("route", &rt->g, layer, topk_ids, n);
  eplb__map_scalar(t, rt->g.k, layer, topk_ids, num_tokens, token_base, out_slots);
  if (!rt->counter || eplb__counter_push(rt->counter, layer, topk_ids, n) != 0)
    eplb__stats_count_ids(rt->stats, layer, topk_ids, n);
  eplb__runtime_recorded(rt, layer, topk_ids, num_tokens);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_record_counts(eplb_runtime_t *rt, uint32_t layer,
                                         const uint32_t *counts) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "record_counts: NULL runtime");
  if (!counts)
    return join_failed(rt, EPLB__CALL_RECORD_COUNTS, layer),
           eplb__error(EPLB_EINVAL, "runtime", "record_counts: NULL counts");
  if (layer >= rt->g.L)
    return join_failed(rt, EPLB__CALL_RECORD_COUNTS, layer),
           eplb__error(EPLB_ERANGE, "runtime", "record_counts: layer %u >= %u", layer, rt->g.L);
  const uint32_t *restrict c = eplb__stats_counts(rt->stats, layer);
  const uint32_t *restrict add = counts;
  /* Without an early exit these loops vectorise; the error path looks again. */
  uint64_t sum = 0;
  uint32_t wraps = 0;
  eplb_status_t st = EPLB_OK;
  for (uint32_t e = 0; e < rt->g.E; e++) {
    wraps |= c[e] + add[e] < c[e];
    sum += add[e];
  }
  for (uint32_t e = 0; wraps && e < rt->g.E && st == EPLB_OK; e++)
    if (counts[e] > UINT32_MAX - c[e])
      st = eplb__error(EPLB_ERANGE, "runtime",
                       "record_counts: layer %u expert %u: count %u overflows the step", layer, e,
                       counts[e]);
  uint64_t tokens = sum / rt->g.k;
  if (st == EPLB_OK && tokens > UINT32_MAX - eplb__stats_tokens(rt->stats, layer))
    st = eplb__error(EPLB_ERANGE, "runtime", "record_counts: layer %u: too many tokens", layer);
  /* With the per-batch split the call is collective even when it fails. */
  if (rt->split_on)
    return eplb__batch_call(rt, EPLB__CALL_RECORD_COUNTS, layer, NULL, (uint32_t)tokens, counts, st,
                            0, NULL);
  if (st != EPLB_OK)
    return st;
  eplb__runtime_add_counts(rt, layer, counts, NULL, (uint32_t)tokens);
  return EPLB_OK;
}

/* The period's global steps enter the window and the trace. */
static eplb_status_t push_period(eplb_runtime_t *rt, uint32_t n) {
  eplb_status_t st = EPLB_OK;
  for (uint32_t s = 0; s < n; s++) {
    const uint32_t *c = eplb__stats_push(rt->stats, s);
    rt->m.global_steps++;
    if (!rt->trace)
      continue;
    eplb_trace_step_t step = {.num_tokens = c[rt->g.LE], .counts = c};
    if (rt->sample)
      eplb__sample_rows(rt->sample, s, n, &step);
    eplb_status_t ts = eplb_trace_writer_append(rt->trace, &step);
    if (ts != EPLB_OK) {
      eplb__log(EPLB_LOG_ERROR, "runtime", "%s: trace append failed, recording stops: %s",
                rt->trace_path, eplb_error_detail());
      eplb_trace_writer_destroy(rt->trace);
      rt->trace = NULL;
      st = eplb__error(ts, "runtime", "%s: trace append failed; recording stopped", rt->trace_path);
    }
  }
  return st;
}

void eplb__runtime_drop_step(eplb_runtime_t *rt) {
  if (rt->counter)
    eplb__counter_collect(rt->counter, eplb__stats_counts(rt->stats, 0));
  if (rt->sample)
    eplb__sample_drop_step(rt->sample);
  eplb__stats_drop_open(rt->stats);
}

eplb_status_t eplb__runtime_close_step(eplb_runtime_t *rt) {
  eplb_status_t st = EPLB_OK;
  if (rt->counter)
    eplb__counter_collect(rt->counter, eplb__stats_counts(rt->stats, 0));
  if (rt->sample)
    eplb__sample_close_step(rt->sample, eplb__stats_open_step(rt->stats));
  uint32_t n = eplb__stats_close_step(rt->stats);
  if (!n)
    return EPLB_OK;
  size_t words = 0;
  uint32_t *period = eplb__stats_period(rt->stats, n, &words);
  /* Rank 0 tells everyone about a posted plan in the same all-reduce. */
  uint32_t *flag = eplb__stats_flag(rt->stats, n);
  *flag = rt->mbox && !eplb__rebal_busy(rt->rb) && eplb__mbox_plan_waiting(rt->mbox);
  st = eplb__comm_allreduce_u32(rt->comm, period, words);
  if (st != EPLB_OK)
    goto done;
  eplb__rebal_set_mailbox(rt->rb, *flag > 0);
  if (rt->sample && (st = eplb__sample_gather(rt->sample, rt->comm, n)) != EPLB_OK)
    goto done;
  st = push_period(rt, n);
  if (rt->mbox)
    eplb__mbox_publish(rt->mbox, rt->stats);
done:
  eplb__stats_clear(rt->stats, n);
  return st;
}

eplb_status_t eplb_runtime_window(const eplb_runtime_t *rt, eplb_runtime_window_kind_t kind,
                                  double *out) {
  if (!rt || !out || (kind != EPLB_WINDOW_SUM && kind != EPLB_WINDOW_EMA))
    return eplb__error(EPLB_EINVAL, "runtime", "window: NULL argument or kind %d", (int)kind);
  eplb__stats_window(rt->stats, kind, out);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_map(const eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                               uint32_t num_tokens, uint64_t token_base, int32_t *out_slots) {
  if (!rt || (num_tokens > 0 && (!topk_ids || !out_slots)))
    return eplb__error(EPLB_EINVAL, "runtime", "map: NULL argument");
  if (layer >= rt->g.L)
    return eplb__error(EPLB_ERANGE, "runtime", "map: layer %u >= %u", layer, rt->g.L);
  size_t n = (size_t)num_tokens * rt->g.k;
  uint32_t top;
  const eplb__dtab_t *t = eplb__live_table(rt->live, layer);
  if (eplb__map_and_pack(t, rt->g.k, layer, topk_ids, num_tokens, token_base, out_slots, NULL, 1,
                         &top))
    return top < rt->g.E ? EPLB_OK : eplb__bad_ids("map", &rt->g, layer, topk_ids, n);
  /* One vectorised check of the batch keeps the scalar loops free of it. */
  if (!eplb__ids_below(topk_ids, n, rt->g.E))
    return eplb__bad_ids("map", &rt->g, layer, topk_ids, n);
  eplb__map_scalar(t, rt->g.k, layer, topk_ids, num_tokens, token_base, out_slots);
  return EPLB_OK;
}
