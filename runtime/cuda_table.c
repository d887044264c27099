/* runtime/cuda_table.c — eplb_cuda_table_upload: a layer's live dispatch
 * table copied into a device table buffer. It lives in the runtime, which
 * owns the tables, and reaches the device through the kernels module. */
#include "eplb_config.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

eplb_status_t eplb_cuda_table_upload(const eplb_runtime_t *rt, uint32_t layer,
                                     const eplb_cuda_dispatch_t *d, uint32_t which, void *stream) {
  eplb_status_t st = eplb__cuda_check_dispatch(d, "cuda_table_upload");
  if (st != EPLB_OK)
    return st;
  if (!rt || which > 1)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_table_upload: NULL runtime or buffer %u",
                       which);
  if (layer >= rt->g.L)
    return eplb__error(EPLB_ERANGE, "kernels", "cuda_table_upload: layer %u >= %u", layer, rt->g.L);
  if (d->num_experts != rt->g.E || d->num_slots != rt->g.R)
    return eplb__error(EPLB_ESHAPE, "kernels",
                       "cuda_table_upload: table of %u experts x %u slots, runtime %u x %u",
                       d->num_experts, d->num_slots, rt->g.E, rt->g.R);
#if EPLB_HAVE_CUDA
  const eplb__dtab_t *t = eplb__live_table(rt->live, layer);
  const eplb_cuda_table_t *b = &d->buf[which];
  uint32_t used = t->off[rt->g.E]; /* columns in use: <= R */
  int err = eplb__cuda_h2d_async(b->off, t->off, ((size_t)rt->g.E + 1) * sizeof *t->off, stream);
  if (!err && used)
    err = eplb__cuda_h2d_async(b->slot, t->slot, used * sizeof *t->slot, stream);
  if (!err && used)
    err = eplb__cuda_h2d_async(b->alias, t->alias, used * sizeof *t->alias, stream);
  if (!err && used)
    err = eplb__cuda_h2d_async(b->prob, t->prob, used * sizeof *t->prob, stream);
  return eplb__cuda_status(err, "cuda_table_upload");
#else
  (void)stream;
  return eplb__error(EPLB_EUNSUPPORTED, "kernels", "cuda_table_upload: built without CUDA");
#endif
}
