/* runtime/sequence.c — the collective calls' check: every collective entry
 * (record, route and record_counts with the per-batch split, step_end, the
 * application's all-reduce) first all-reduces a fixed 4-word header: its
 * kind, its place in the step and its layer, and the step. A rank that made
 * one call more or less than its peers then meets a header that differs,
 * before any payload of another size can pair with a different call (which
 * MPI does not survive), and every rank sees the same difference, so all
 * return the same error from the same call.
 *
 * Calls at the same place of the same step that differ only in layer (or
 * record against route) are still in step: that call fails alone. Anything
 * else (another kind of call, another place, another step) means the ranks
 * went out of step: every collective call fails at once, without touching
 * the communicator, until step_end, whose header is then the next on every
 * rank; there the ranks agree on the step count (the largest) and go on in
 * step. A step with a call that failed here is not closed: its statistics
 * are dropped on every rank (they would miss a layer or hold one twice). */
#include "runtime/runtime.h"

#include <inttypes.h>

enum { KIND_SHIFT = 56, SEQ_SHIFT = 24, LAYER_MASK = (1u << 24) - 1 };

const char *eplb__seq_call_name(eplb__call_t kind) {
  switch (kind) {
  case EPLB__CALL_RECORD: return "record";
  case EPLB__CALL_ROUTE: return "route";
  case EPLB__CALL_RECORD_COUNTS: return "record_counts";
  case EPLB__CALL_ALLREDUCE: return "allreduce";
  case EPLB__CALL_STEP_END: return "step_end";
  }
  return "?";
}

/* Record, route and record_counts at one place exchange the same message. */
static int call_class(uint64_t kind) { return kind <= EPLB__CALL_RECORD_COUNTS ? 0 : (int)kind; }

static uint64_t header(eplb__call_t kind, uint32_t seq, uint32_t layer) {
  return (uint64_t)kind << KIND_SHIFT | (uint64_t)seq << SEQ_SHIFT |
         (layer < LAYER_MASK ? layer : LAYER_MASK);
}

eplb_status_t eplb__seq_skipped(const eplb_runtime_t *rt, const char *what) {
  if (!rt->seq.desync)
    return EPLB_OK;
  return eplb__error(EPLB_ESHAPE, "runtime",
                     "%s: skipped: the ranks' collective calls went out of step in this step; "
                     "every collective call fails until step_end",
                     what);
}

eplb_status_t eplb__seq_enter(eplb_runtime_t *rt, eplb__call_t kind, uint32_t layer) {
  eplb__seq_t *q = &rt->seq;
  const char *what = eplb__seq_call_name(kind);
  eplb_status_t st = EPLB_OK;
  if (!rt->comm)
    return EPLB_OK;
  if (kind != EPLB__CALL_STEP_END && (st = eplb__seq_skipped(rt, what)) != EPLB_OK)
    return st;
  /* A device rank's per-batch call all-reduces on its stream, where a host
   * header cannot go without a sync: with a device on some rank the
   * per-batch calls carry only their payload's check word. */
  if (q->batch_unchecked && call_class(kind) == 0)
    return EPLB_OK;
  /* The resync header leaves out the place and the step: after a missed or
   * extra call the ranks' counts of either may differ. */
  uint64_t h = q->desync ? header(kind, 0, 0) : header(kind, q->n, layer);
  uint64_t w[4] = {h, ~h, rt->m.steps, ~rt->m.steps};
  st = eplb__comm_allreduce_u64(rt->comm, w, 4, EPLB_REDUCE_MAX);
  if (st != EPLB_OK)
    return st;
  uint64_t hmin = ~w[1], smax = w[2], smin = ~w[3];
  q->n = kind == EPLB__CALL_STEP_END ? 0 : q->n + 1;
  if (q->desync) {
    /* Every rank is at step_end: the step count is agreed (the largest). */
    q->desync = false;
    q->drop_step = true;
    rt->m.steps = smax;
    eplb__log(EPLB_LOG_WARN, "runtime",
              "collective calls back in step at step_end (step %" PRIu64 "); the step's "
              "statistics were dropped",
              smax);
    return EPLB_OK;
  }
  if (w[0] == hmin && w[2] == smin)
    return EPLB_OK;
  uint64_t kmax = w[0] >> KIND_SHIFT, kmin = hmin >> KIND_SHIFT;
  uint64_t seqmax = w[0] >> SEQ_SHIFT & 0xffffffffu, seqmin = hmin >> SEQ_SHIFT & 0xffffffffu;
  bool in_step = call_class(kmax) == call_class(kmin) && seqmax == seqmin && w[2] == smin;
  q->drop_step = true;
  if (in_step)
    return eplb__error(EPLB_ESHAPE, "runtime",
                       "%s: layer %u: the ranks called different layers or calls at the same "
                       "place (every rank must make the same calls in the same order)",
                       what, layer);
  q->desync = true;
  q->n = 0;
  return eplb__error(EPLB_ESHAPE, "runtime",
                     "%s (step %" PRIu64 " here): the ranks' collective calls went out of step "
                     "(another rank made another kind of call, or one more or one less before "
                     "it); every collective call fails until step_end",
                     what, rt->m.steps);
}
