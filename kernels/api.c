/* kernels/api.c — the public entry points of eplb/kernels.h: argument
 * checks, then the CUDA launchers (or EPLB_EUNSUPPORTED without CUDA). */
#include "core/core.h"
#include "eplb_config.h"
#include "kernels/kernels.h"

eplb_status_t eplb__cuda_status(int err, const char *what) {
  if (err == 0)
    return EPLB_OK;
#if EPLB_HAVE_CUDA
  if (eplb__cuda_error_is_nodevice(err))
    return eplb__error(EPLB_ENODEVICE, "kernels", "%s: no CUDA device (cuda error %d: %s)", what,
                       err, eplb__cuda_error_string(err));
  return eplb__error(EPLB_EDEVICE, "kernels", "%s: cuda error %d: %s", what, err,
                     eplb__cuda_error_string(err));
#else
  return eplb__error(EPLB_EUNSUPPORTED, "kernels", "%s: built without CUDA (error %d)", what, err);
#endif
}

#if EPLB_HAVE_CUDA
#define LAUNCH(what, call) return eplb__cuda_status((call), what)
#else
#define LAUNCH(what, call)                                                                         \
  return eplb__error(EPLB_EUNSUPPORTED, "kernels", "%s: built without CUDA", what)
#endif

static eplb_status_t check_ring(const eplb_cuda_ring_t *r, const char *what) {
  if (!r || !r->counts || !r->step || !r->dropped)
    return eplb__error(EPLB_EINVAL, "kernels", "%s: NULL ring or ring pointer", what);
  if (!r->window || !r->num_layers || !r->num_experts)
    return eplb__error(EPLB_EINVAL, "kernels", "%s: ring window %u, layers %u, experts %u", what,
                       r->window, r->num_layers, r->num_experts);
  if (r->num_experts > EPLB__COUNT_MAX_EXPERTS)
    return eplb__error(EPLB_ERANGE, "kernels", "%s: %u experts > %u", what, r->num_experts,
                       EPLB__COUNT_MAX_EXPERTS);
  return EPLB_OK;
}

eplb_status_t eplb__cuda_count(const eplb_cuda_ring_t *ring, uint32_t layer,
                               const int32_t *topk_ids, uint32_t num_tokens, uint32_t topk,
                               void *stream) {
  eplb_status_t st = check_ring(ring, "cuda_count");
  if (st != EPLB_OK)
    return st;
  if (layer >= ring->num_layers)
    return eplb__error(EPLB_ERANGE, "kernels", "cuda_count: layer %u >= %u", layer,
                       ring->num_layers);
  if (!topk || (num_tokens && !topk_ids))
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_count: topk %u, ids %p", topk,
                       (const void *)topk_ids);
  LAUNCH("cuda_count", eplb__cuda_count_launch(ring, layer, topk_ids, num_tokens, topk, stream));
}

eplb_status_t eplb__cuda_step(const eplb_cuda_ring_t *ring, void *stream) {
  eplb_status_t st = check_ring(ring, "cuda_step");
  if (st != EPLB_OK)
    return st;
  LAUNCH("cuda_step", eplb__cuda_step_launch(ring, stream));
}

eplb_status_t eplb__cuda_check_dispatch(const eplb_cuda_dispatch_t *d, const char *what) {
  if (!d || !d->epoch)
    return eplb__error(EPLB_EINVAL, "kernels", "%s: NULL dispatch or epoch", what);
  for (int b = 0; b < 2; b++)
    if (!d->buf[b].off || !d->buf[b].slot || !d->buf[b].alias || !d->buf[b].prob)
      return eplb__error(EPLB_EINVAL, "kernels", "%s: NULL array in table buffer %d", what, b);
  if (!d->num_experts || !d->num_slots)
    return eplb__error(EPLB_EINVAL, "kernels", "%s: %u experts, %u slots", what, d->num_experts,
                       d->num_slots);
  return EPLB_OK;
}

eplb_status_t eplb__cuda_map(const eplb_cuda_dispatch_t *d, uint32_t layer, const int32_t *topk_ids,
                             uint32_t num_tokens, uint32_t topk, uint64_t token_base,
                             int32_t *out_slots, uint32_t *bad, void *stream) {
  eplb_status_t st = eplb__cuda_check_dispatch(d, "cuda_map");
  if (st != EPLB_OK)
    return st;
  if (!topk || (num_tokens && (!topk_ids || !out_slots)))
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_map: topk %u or NULL ids/out", topk);
  LAUNCH("cuda_map", eplb__cuda_map_launch(d, layer, topk_ids, num_tokens, topk, token_base,
                                           out_slots, bad, stream));
}

eplb_status_t eplb__cuda_switch(const eplb_cuda_dispatch_t *d, void *stream) {
  eplb_status_t st = eplb__cuda_check_dispatch(d, "cuda_switch");
  if (st != EPLB_OK)
    return st;
  LAUNCH("cuda_switch", eplb__cuda_switch_launch(d, stream));
}

eplb_status_t eplb__cuda_sample(const eplb_cuda_sample_ring_t *s, uint32_t layer,
                                const int32_t *topk_ids, uint32_t num_tokens, uint64_t token_base,
                                void *stream) {
  if (!s || !s->ids || !s->src || !s->token)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_sample: NULL ring or ring pointer");
  if (!s->capacity || !s->num_layers || !s->topk || !s->every)
    return eplb__error(EPLB_EINVAL, "kernels",
                       "cuda_sample: capacity %u, layers %u, topk %u, every %u", s->capacity,
                       s->num_layers, s->topk, s->every);
  if (layer >= s->num_layers)
    return eplb__error(EPLB_ERANGE, "kernels", "cuda_sample: layer %u >= %u", layer, s->num_layers);
  if (num_tokens && !topk_ids)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_sample: NULL ids");
  LAUNCH("cuda_sample",
         eplb__cuda_sample_launch(s, layer, topk_ids, num_tokens, token_base, stream));
}
