/* runtime/stats.c — the statistics part: per-step counts closed into
 * periods, the window ring and its sum, the EMA. The record paths and the
 * step's all-reduce, trace and mailbox are the runtime core's (record.c). */
#include "runtime/runtime.h"

#include <string.h>

struct eplb__stats {
  uint32_t L, E;
  size_t LE;
  uint32_t period;       /* policy.allreduce_period: steps per all-reduce */
  uint32_t W;            /* policy.window_steps */
  double decay;          /* policy.ema_decay */
  uint32_t *pending;     /* [period][LE + 2]: local counts, then tokens and the plan flag */
  uint32_t *step_tokens; /* [L] tokens recorded per layer this step */
  uint32_t pending_n;    /* steps closed into pending */
  uint32_t *ring;        /* [W][LE] global per-step counts */
  uint64_t *wsum;        /* [LE] */
  double *ema;           /* [LE] */
  uint64_t ring_n;       /* global steps pushed */
};

eplb_status_t eplb__stats_create(const eplb__geom_t *g, const eplb_runtime_policy_t *policy,
                                 eplb__stats_t **out) {
  eplb__stats_t *s = eplb__calloc(1, sizeof *s);
  *out = s;
  if (!s)
    return eplb__error(EPLB_ENOMEM, "runtime", "statistics");
  s->L = g->L, s->E = g->E, s->LE = g->LE;
  s->period = policy->allreduce_period, s->W = policy->window_steps;
  s->decay = policy->ema_decay;
  s->pending = eplb__calloc(s->period, (s->LE + 2) * sizeof(uint32_t));
  s->step_tokens = eplb__calloc(s->L, sizeof(uint32_t));
  s->ring = eplb__calloc(s->W, s->LE * sizeof(uint32_t));
  s->wsum = eplb__calloc(s->LE, sizeof(uint64_t));
  s->ema = eplb__calloc(s->LE, sizeof(double));
  if (!s->pending || !s->step_tokens || !s->ring || !s->wsum || !s->ema)
    return eplb__error(EPLB_ENOMEM, "runtime", "statistics (%u x %zu counters)", s->W, s->LE);
  return EPLB_OK;
}

void eplb__stats_destroy(eplb__stats_t *s) {
  if (!s)
    return;
  eplb__free(s->pending);
  eplb__free(s->step_tokens);
  eplb__free(s->ring);
  eplb__free(s->wsum);
  eplb__free(s->ema);
  eplb__free(s);
}

/* The open step's block of the pending all-reduce. */
static uint32_t *step_block(const eplb__stats_t *s) {
  return s->pending + (size_t)s->pending_n * (s->LE + 2);
}

uint32_t *eplb__stats_counts(eplb__stats_t *s, uint32_t layer) {
  return step_block(s) + (size_t)layer * s->E;
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
void eplb__stats_count_ids(eplb__stats_t *s, uint32_t layer, const int32_t *ids, size_t n) {
  uint32_t *restrict c = eplb__stats_counts(s, layer);
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

eplb_status_t eplb__bad_ids(const char *what, const eplb__geom_t *g, uint32_t layer,
                            const int32_t *ids, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((uint32_t)ids[i] >= g->E)
      return eplb__error(EPLB_ERANGE, "runtime",
                         "%s: layer %u token %zu position %zu: id %d not in [0, %u)", what, layer,
                         i / g->k, i % g->k, ids[i], g->E);
  return eplb__error(EPLB_ERANGE, "runtime", "%s: layer %u: an id out of range", what, layer);
}

void eplb__stats_add(eplb__stats_t *s, uint32_t layer, const uint32_t *add) {
  uint32_t *restrict c = eplb__stats_counts(s, layer);
  for (uint32_t e = 0; e < s->E; e++)
    c[e] += add[e];
}

uint32_t eplb__stats_tokens(const eplb__stats_t *s, uint32_t layer) {
  return s->step_tokens[layer];
}

void eplb__stats_add_tokens(eplb__stats_t *s, uint32_t layer, uint32_t num_tokens) {
  s->step_tokens[layer] += num_tokens;
}

uint32_t eplb__stats_open_step(const eplb__stats_t *s) { return s->pending_n; }

uint32_t eplb__stats_close_step(eplb__stats_t *s) {
  /* A step's tokens are its busiest layer's: every layer sees every token
   * once a step runs the whole model. */
  uint32_t tokens = 0;
  for (uint32_t l = 0; l < s->L; l++)
    tokens = s->step_tokens[l] > tokens ? s->step_tokens[l] : tokens;
  step_block(s)[s->LE] = tokens;
  memset(s->step_tokens, 0, s->L * sizeof *s->step_tokens);
  if (++s->pending_n < s->period)
    return 0;
  uint32_t n = s->pending_n;
  s->pending_n = 0;
  return n;
}

uint32_t *eplb__stats_period(eplb__stats_t *s, uint32_t n, size_t *words) {
  *words = (size_t)n * (s->LE + 2);
  return s->pending;
}

uint32_t *eplb__stats_flag(eplb__stats_t *s, uint32_t n) {
  return s->pending + (size_t)(n - 1) * (s->LE + 2) + s->LE + 1;
}

const uint32_t *eplb__stats_push(eplb__stats_t *s, uint32_t i) {
  const uint32_t *counts = s->pending + (size_t)i * (s->LE + 2);
  uint32_t *slot = s->ring + (size_t)(s->ring_n % s->W) * s->LE;
  double d = s->decay;
  bool first = s->ring_n == 0;
  for (size_t j = 0; j < s->LE; j++) {
    s->wsum[j] += (uint64_t)counts[j] - slot[j];
    slot[j] = counts[j];
    s->ema[j] = first ? counts[j] : d * s->ema[j] + (1 - d) * counts[j];
  }
  s->ring_n++;
  return counts;
}

void eplb__stats_clear(eplb__stats_t *s, uint32_t n) {
  memset(s->pending, 0, (size_t)n * (s->LE + 2) * sizeof *s->pending);
}

void eplb__stats_drop_open(eplb__stats_t *s) {
  memset(step_block(s), 0, (s->LE + 2) * sizeof *s->pending);
  memset(s->step_tokens, 0, s->L * sizeof *s->step_tokens);
}

void eplb__stats_window(const eplb__stats_t *s, eplb_runtime_window_kind_t kind, double *out) {
  for (size_t i = 0; i < s->LE; i++)
    out[i] = kind == EPLB_WINDOW_SUM ? (double)s->wsum[i] : s->ema[i];
}

uint64_t eplb__stats_steps(const eplb__stats_t *s) { return s->ring_n; }

uint64_t eplb__stats_window_steps(const eplb__stats_t *s) {
  return s->ring_n < s->W ? s->ring_n : s->W;
}

void eplb__stats_recent(const eplb__stats_t *s, uint32_t n, double *out) {
  uint64_t have = s->ring_n < s->W ? s->ring_n : s->W;
  n = n < have ? n : (uint32_t)have;
  memset(out, 0, s->LE * sizeof *out);
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t *row = s->ring + (size_t)((s->ring_n - 1 - i) % s->W) * s->LE;
    for (size_t j = 0; j < s->LE; j++)
      out[j] += row[j];
  }
}
