/* runtime/weights.c — the registered expert weights of this rank's slots.
 * A serving stack keeps an expert as several tensors (vLLM and SGLang: w13,
 * w2, and quantisation scales of their own shapes), so a slot holds up to
 * EPLB_RUNTIME_MAX_TENSORS buffers, the same byte sizes in every slot (the
 * layout, fixed by the first registration). The movers (rebalance.c,
 * continuous.c) move an expert as cfg.expert_bytes contiguous bytes: with
 * one tensor they read and write the buffer itself; with several they
 * gather a source into a contiguous buffer and scatter a landed copy into
 * the slot's tensors, so that a slot switches only when all of them have
 * landed (a copy lands whole or not at all). */
#include "runtime/runtime.h"

#include "traces/traces.h"

#include <inttypes.h>
#include <string.h>

struct eplb__wtab {
  uint32_t L, S;
  uint64_t B;                               /* cfg.expert_bytes */
  uint32_t T;                               /* tensors per slot; 0 before any registration */
  uint64_t bytes[EPLB_RUNTIME_MAX_TENSORS]; /* the layout */
  void **ptr;                               /* [L][S][MAX_TENSORS]; NULL: not registered */
};

eplb_status_t eplb__wtab_create(uint32_t L, uint32_t S, uint64_t B, eplb__wtab_t **out) {
  eplb__wtab_t *w = eplb__calloc(1, sizeof *w);
  *out = w;
  if (!w)
    return eplb__error(EPLB_ENOMEM, "runtime", "weights table");
  w->L = L, w->S = S, w->B = B;
  w->ptr = eplb__calloc((size_t)L * S * EPLB_RUNTIME_MAX_TENSORS, sizeof *w->ptr);
  if (!w->ptr)
    return eplb__error(EPLB_ENOMEM, "runtime", "weights table of %u x %u slots", L, S);
  return EPLB_OK;
}

void eplb__wtab_destroy(eplb__wtab_t *w) {
  if (!w)
    return;
  eplb__free(w->ptr);
  eplb__free(w);
}

static void **slot_ptrs(const eplb__wtab_t *w, uint32_t l, uint32_t s) {
  return w->ptr + ((size_t)l * w->S + s) * EPLB_RUNTIME_MAX_TENSORS;
}

eplb_status_t eplb__wtab_set(eplb__wtab_t *w, uint32_t l, uint32_t s,
                             const eplb_runtime_tensor_t *t, uint32_t n) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!t[i].ptr || !t[i].bytes)
      return eplb__error(EPLB_EINVAL, "runtime",
                         "register_tensors: layer %u slot %u: tensor %u is NULL or empty", l, s, i);
    sum += t[i].bytes;
  }
  if (sum != w->B)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "register_tensors: layer %u slot %u: %u tensors of %" PRIu64
                       " bytes in all, expert_bytes is %" PRIu64,
                       l, s, n, sum, w->B);
  /* Tensor i of a source lands in tensor i of its destination. */
  for (uint32_t i = 0; w->T && i < n; i++)
    if (n != w->T || t[i].bytes != w->bytes[i])
      return eplb__error(EPLB_EINVAL, "runtime",
                         "register_tensors: layer %u slot %u: %u tensors, tensor %u of %zu bytes; "
                         "every slot must have the first registration's layout (%u tensors, "
                         "tensor %u of %" PRIu64 " bytes)",
                         l, s, n, i, t[i].bytes, w->T, i < w->T ? i : 0,
                         w->bytes[i < w->T ? i : 0]);
  w->T = n;
  void **p = slot_ptrs(w, l, s);
  for (uint32_t i = 0; i < n; i++)
    w->bytes[i] = t[i].bytes, p[i] = t[i].ptr;
  return EPLB_OK;
}

bool eplb__wtab_has(const eplb__wtab_t *w, uint32_t l, uint32_t s) {
  return slot_ptrs(w, l, s)[0] != NULL;
}

void *eplb__wtab_direct(const eplb__wtab_t *w, uint32_t l, uint32_t s) {
  return w->T <= 1 ? slot_ptrs(w, l, s)[0] : NULL;
}

bool eplb__wtab_packed(const eplb__wtab_t *w) { return w->T > 1; }

void eplb__wtab_gather(const eplb__wtab_t *w, uint32_t l, uint32_t s, void *dst) {
  void **p = slot_ptrs(w, l, s);
  uint8_t *o = dst;
  for (uint32_t i = 0; i < w->T; o += w->bytes[i], i++)
    memcpy(o, p[i], w->bytes[i]);
}

void eplb__wtab_scatter(const eplb__wtab_t *w, uint32_t l, uint32_t s, const void *src) {
  void **p = slot_ptrs(w, l, s);
  const uint8_t *o = src;
  for (uint32_t i = 0; i < w->T; o += w->bytes[i], i++)
    memcpy(p[i], o, w->bytes[i]);
}

/* CRC-32 of each tensor, combined in order: the same value for a slot's
 * tensors and for their gathered bytes. */
static uint64_t combine(uint64_t h, const void *p, uint64_t n) {
  return (h ^ eplb__crc32(p, n)) * 0x100000001b3ull + 1;
}

uint64_t eplb__wtab_sum(const eplb__wtab_t *w, uint32_t l, uint32_t s) {
  void **p = slot_ptrs(w, l, s);
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < w->T; i++)
    h = combine(h, p[i], w->bytes[i]);
  return h | 1; /* never 0: 0 means "no checksum" */
}

uint64_t eplb__wtab_sum_buf(const eplb__wtab_t *w, const void *buf) {
  const uint8_t *o = buf;
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < w->T; o += w->bytes[i], i++)
    h = combine(h, o, w->bytes[i]);
  return h | 1;
}
