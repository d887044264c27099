/* lp/split_handle.c — the exact split handle's life: options, create,
 * reset and destroy. At the top of the handle's files: destroy frees the
 * workspaces of every stage that hangs off the handle (split_local.c,
 * split_mask.c, split_probe.c's snapshots, split_sub.c), and none of them
 * calls back here. */
#include "lp/lp.h"

#include <string.h>

static void split_options_defaults(eplb_split_options_t *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->mode = EPLB_SPLIT_FRACTIONAL;
  o->warm_start = 1;
  o->glpk_time_limit_s = 0.0;
  o->threads = 1;
}

eplb_status_t eplb_split_options_init(eplb_split_options_t *o, size_t size) {
  eplb_split_options_t d;
  split_options_defaults(&d);
  return eplb__opts_init(o, size, &d, sizeof d, "eplb_split_options_t");
}

eplb_status_t eplb_split_create(const eplb_split_options_t *options, eplb_split_t **out) {
  eplb_split_options_t o;
  if (!out)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: out is NULL");
  *out = NULL;
  eplb_status_t take =
      EPLB__OPTS_TAKE(o, options, eplb_split_options_default, "eplb_split_options_t", "lp");
  if (take != EPLB_OK)
    return take;
  if (o.mode != EPLB_SPLIT_FRACTIONAL && o.mode != EPLB_SPLIT_INTEGER)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: mode %d is not a split mode", (int)o.mode);
  if (o.warm_start != 0 && o.warm_start != 1)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: warm_start = %d: must be 0 or 1",
                       o.warm_start);
  if (!(o.glpk_time_limit_s >= 0))
    return eplb__error(EPLB_EINVAL, "lp", "split_create: glpk_time_limit_s = %g: must be >= 0",
                       o.glpk_time_limit_s);
  if (o.threads > EPLB_SPLIT_MAX_THREADS)
    return eplb__error(EPLB_EINVAL, "lp", "split_create: threads = %u: must be 0..%u", o.threads,
                       EPLB_SPLIT_MAX_THREADS);
  eplb_split_t *s = eplb__calloc(1, sizeof *s);
  if (!s)
    return eplb__error(EPLB_ENOMEM, "lp", "split_create: out of memory");
  s->opt = o;
  *out = s;
  return EPLB_OK;
}

static void free_arrays(eplb_split_t *s) {
  void *arrays[] = {s->c_phy2log, s->c_slots,  s->count,    s->rep_start, s->rep_list,
                    s->gpu_of,    s->ndist,    s->sgpu,     s->multi,     s->pair_start,
                    s->pair_gpu,  s->pair_cnt, s->rep_pair, s->base,      s->gin,
                    s->pamt,      s->gmark,    s->set,      s->memo_loads};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
    eplb__free(arrays[i]);
}

void eplb_split_destroy(eplb_split_t *s) {
  if (!s)
    return;
  free_arrays(s);
  eplb__flow_free(&s->flow);
  eplb__split_snap_free(&s->snap);
  eplb__split_snap_free(&s->low);
  eplb__split_sub_free(&s->sub);
  for (size_t i = 0; i < s->num_warm; i++)
    eplb__free(s->warm[i].mask);
  eplb__free(s->warm);
  eplb__split_local_free(s->local);
  eplb__split_mask_free(s->mask);
  for (uint32_t i = 0; i < s->num_kids; i++)
    eplb_split_destroy(s->kids[i]);
  eplb__free(s->kids);
  eplb__free(s);
}

void eplb_split_reset(eplb_split_t *s) {
  if (!s)
    return;
  for (size_t i = 0; i < s->num_warm; i++)
    s->warm[i].hash = 0;
  /* Probes then start from this call's solves only: no snapshot of the
   * last one's flow either (it depends on which layer the handle solved). */
  s->snap.ok = s->low.ok = false;
  s->fresh = false;
  s->base_ok = false;
}
