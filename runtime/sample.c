/* runtime/sample.c — a sample of whole top-k rows (all layers of a token)
 * with their source rank, gathered to rank 0 for the trace, so that the
 * planner can measure co-activation. */
#include "runtime/runtime.h"

#include <string.h>

struct eplb__sample {
  eplb__geom_t g;
  uint32_t rows;                  /* cfg.sample_rows: rows kept per rank and step */
  size_t block;                   /* 1 + rows * L * k: a step's complete-row count, then rows */
  uint32_t *sample, *sample_fill; /* [period][block]; sample_fill [L]: rows taken this step */
  uint32_t *sample_all;           /* rank 0: [P][period][block] */
  uint16_t *row_ids;              /* rank 0: [P*rows][L][k] */
  int32_t *row_src;               /* rank 0: [P*rows] */
};

eplb_status_t eplb__sample_create(const eplb__geom_t *g, uint32_t rows, uint32_t period,
                                  eplb__sample_t **out) {
  *out = NULL;
  if (!rows)
    return EPLB_OK;
  eplb__sample_t *sp = eplb__calloc(1, sizeof *sp);
  *out = sp;
  if (!sp)
    return eplb__error(EPLB_ENOMEM, "runtime", "row sample of %u rows", rows);
  sp->g = *g;
  sp->rows = rows;
  sp->block = 1 + (size_t)rows * g->L * g->k;
  sp->sample = eplb__calloc(period, sp->block * sizeof *sp->sample);
  sp->sample_fill = eplb__calloc(g->L, sizeof *sp->sample_fill);
  if (!sp->sample || !sp->sample_fill)
    return eplb__error(EPLB_ENOMEM, "runtime", "row sample of %u rows", rows);
  if (g->rank != 0)
    return EPLB_OK;
  size_t all = (size_t)g->P * rows;
  sp->sample_all = eplb__malloc_array((size_t)g->P * period, sp->block * sizeof *sp->sample_all);
  sp->row_ids = eplb__malloc_array(all * g->L, g->k * sizeof *sp->row_ids);
  sp->row_src = eplb__malloc_array(all, sizeof *sp->row_src);
  if (!sp->sample_all || !sp->row_ids || !sp->row_src)
    return eplb__error(EPLB_ENOMEM, "runtime", "row sample of %zu rows", all);
  return EPLB_OK;
}

void eplb__sample_destroy(eplb__sample_t *sp) {
  if (!sp)
    return;
  eplb__free(sp->sample);
  eplb__free(sp->sample_fill);
  eplb__free(sp->sample_all);
  eplb__free(sp->row_ids);
  eplb__free(sp->row_src);
  eplb__free(sp);
}

void eplb__sample_record(eplb__sample_t *sp, uint32_t step, uint32_t layer, const int32_t *ids,
                         uint32_t num_tokens) {
  uint32_t n = sp->rows, fill = sp->sample_fill[layer], L = sp->g.L, k = sp->g.k;
  uint32_t take = n - fill < num_tokens ? n - fill : num_tokens;
  uint32_t *row0 = sp->sample + (size_t)step * sp->block + 1;
  for (uint32_t t = 0; t < take; t++)
    for (uint32_t j = 0; j < k; j++)
      row0[((size_t)(fill + t) * L + layer) * k + j] = (uint32_t)ids[(size_t)t * k + j];
  sp->sample_fill[layer] = fill + take;
}

void eplb__sample_close_step(eplb__sample_t *sp, uint32_t step) {
  uint32_t rows = sp->rows;
  for (uint32_t l = 0; l < sp->g.L; l++)
    rows = sp->sample_fill[l] < rows ? sp->sample_fill[l] : rows;
  sp->sample[(size_t)step * sp->block] = rows; /* rows seen by every layer */
  memset(sp->sample_fill, 0, sp->g.L * sizeof *sp->sample_fill);
}

void eplb__sample_drop_step(eplb__sample_t *sp) {
  memset(sp->sample_fill, 0, sp->g.L * sizeof *sp->sample_fill);
}

eplb_status_t eplb__sample_gather(eplb__sample_t *sp, eplb__comm_t *comm, uint32_t nsteps) {
  size_t n = nsteps * sp->block;
  eplb_status_t st = eplb__comm_gather_u32(comm, sp->sample, n, sp->sample_all);
  memset(sp->sample, 0, n * sizeof *sp->sample);
  return st;
}

/* A row the trace accepts: ids < E, none twice in a layer. */
static bool row_ok(const eplb__geom_t *g, const uint32_t *row) {
  for (uint32_t l = 0; l < g->L; l++) {
    const uint32_t *ids = row + (size_t)l * g->k;
    for (uint32_t a = 0; a < g->k; a++) {
      if (ids[a] >= g->E)
        return false;
      for (uint32_t b = 0; b < a; b++)
        if (ids[a] == ids[b])
          return false;
    }
  }
  return true;
}

void eplb__sample_rows(eplb__sample_t *sp, uint32_t s, uint32_t nsteps, eplb_trace_step_t *step) {
  size_t block = sp->block, row_len = (size_t)sp->g.L * sp->g.k;
  uint32_t rows = 0;
  for (uint32_t p = 0; p < sp->g.P; p++) {
    const uint32_t *blk = sp->sample_all + ((size_t)p * nsteps + s) * block;
    for (uint32_t r = 0; r < blk[0] && r < sp->rows; r++) {
      const uint32_t *row = blk + 1 + r * row_len;
      if (!row_ok(&sp->g, row))
        continue; /* record does not check duplicates; the trace would refuse the step */
      for (size_t i = 0; i < row_len; i++)
        sp->row_ids[rows * row_len + i] = (uint16_t)row[i];
      sp->row_src[rows++] = (int32_t)p;
    }
  }
  step->num_rows = rows;
  step->topk = rows ? sp->row_ids : NULL;
  step->source_rank = rows ? sp->row_src : NULL;
}
