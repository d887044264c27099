/* runtime/sample.c — a sample of whole top-k rows (all layers of a token)
 * with their source rank, gathered to rank 0 for the trace, so that the
 * planner can measure co-activation. */
#include "runtime/runtime.h"

#include <string.h>

static size_t block_len(const eplb_runtime_t *rt) {
  return 1 + (size_t)rt->cfg.sample_rows * rt->L * rt->k;
}

eplb_status_t eplb__sample_alloc(eplb_runtime_t *rt) {
  if (!rt->cfg.sample_rows)
    return EPLB_OK;
  size_t block = block_len(rt), period = rt->cfg.policy.allreduce_period;
  rt->sample = eplb__calloc(period, block * sizeof *rt->sample);
  rt->sample_fill = eplb__calloc(rt->L, sizeof *rt->sample_fill);
  if (!rt->sample || !rt->sample_fill)
    return eplb__error(EPLB_ENOMEM, "runtime", "row sample of %u rows", rt->cfg.sample_rows);
  if (rt->rank != 0)
    return EPLB_OK;
  size_t rows = (size_t)rt->P * rt->cfg.sample_rows;
  rt->sample_all = eplb__malloc_array((size_t)rt->P * period, block * sizeof *rt->sample_all);
  rt->row_ids = eplb__malloc_array(rows * rt->L, rt->k * sizeof *rt->row_ids);
  rt->row_src = eplb__malloc_array(rows, sizeof *rt->row_src);
  if (!rt->sample_all || !rt->row_ids || !rt->row_src)
    return eplb__error(EPLB_ENOMEM, "runtime", "row sample of %zu rows", rows);
  return EPLB_OK;
}

void eplb__sample_free(eplb_runtime_t *rt) {
  eplb__free(rt->sample);
  eplb__free(rt->sample_fill);
  eplb__free(rt->sample_all);
  eplb__free(rt->row_ids);
  eplb__free(rt->row_src);
}

void eplb__sample_record(eplb_runtime_t *rt, uint32_t layer, const int32_t *ids,
                         uint32_t num_tokens) {
  uint32_t n = rt->cfg.sample_rows, fill = rt->sample_fill[layer];
  uint32_t take = n - fill < num_tokens ? n - fill : num_tokens;
  uint32_t *row0 = rt->sample + (size_t)rt->pending_n * block_len(rt) + 1;
  for (uint32_t t = 0; t < take; t++)
    for (uint32_t j = 0; j < rt->k; j++)
      row0[((size_t)(fill + t) * rt->L + layer) * rt->k + j] = (uint32_t)ids[(size_t)t * rt->k + j];
  rt->sample_fill[layer] = fill + take;
}

void eplb__sample_close_step(eplb_runtime_t *rt) {
  uint32_t rows = rt->cfg.sample_rows;
  for (uint32_t l = 0; l < rt->L; l++)
    rows = rt->sample_fill[l] < rows ? rt->sample_fill[l] : rows;
  rt->sample[(size_t)rt->pending_n * block_len(rt)] = rows; /* rows seen by every layer */
  memset(rt->sample_fill, 0, rt->L * sizeof *rt->sample_fill);
}

eplb_status_t eplb__sample_gather(eplb_runtime_t *rt, uint32_t nsteps) {
  size_t n = nsteps * block_len(rt);
  eplb_status_t st = eplb__comm_gather_u32(rt->comm, rt->sample, n, rt->sample_all);
  memset(rt->sample, 0, n * sizeof *rt->sample);
  return st;
}

/* A row the trace accepts: ids < E, none twice in a layer. */
static bool row_ok(const eplb_runtime_t *rt, const uint32_t *row) {
  for (uint32_t l = 0; l < rt->L; l++) {
    const uint32_t *ids = row + (size_t)l * rt->k;
    for (uint32_t a = 0; a < rt->k; a++) {
      if (ids[a] >= rt->E)
        return false;
      for (uint32_t b = 0; b < a; b++)
        if (ids[a] == ids[b])
          return false;
    }
  }
  return true;
}

void eplb__sample_rows(eplb_runtime_t *rt, uint32_t s, uint32_t nsteps, eplb_trace_step_t *step) {
  size_t block = block_len(rt), row_len = (size_t)rt->L * rt->k;
  uint32_t rows = 0;
  for (uint32_t p = 0; p < rt->P; p++) {
    const uint32_t *blk = rt->sample_all + ((size_t)p * nsteps + s) * block;
    for (uint32_t r = 0; r < blk[0] && r < rt->cfg.sample_rows; r++) {
      const uint32_t *row = blk + 1 + r * row_len;
      if (!row_ok(rt, row))
        continue; /* record does not check duplicates; the trace would refuse the step */
      for (size_t i = 0; i < row_len; i++)
        rt->row_ids[rows * row_len + i] = (uint16_t)row[i];
      rt->row_src[rows++] = (int32_t)p;
    }
  }
  step->num_rows = rows;
  step->topk = rows ? rt->row_ids : NULL;
  step->source_rank = rows ? rt->row_src : NULL;
}
