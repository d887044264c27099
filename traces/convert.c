#include "traces/traces.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static void trace_convert_options_defaults(eplb_trace_convert_options_t *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->from = EPLB_TRACE_FORMAT_AUTO;
  opts->to = EPLB_TRACE_FORMAT_AUTO;
  opts->tokens_per_step = 256;
}

eplb_status_t eplb_trace_convert_options_init(eplb_trace_convert_options_t *opts, size_t size) {
  eplb_trace_convert_options_t d;
  trace_convert_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_trace_convert_options_t");
}

/* ---- sources: every input format yields steps of counts ------------------ */

typedef struct source {
  eplb_trace_format_t fmt;
  const char *path;
  eplb_trace_meta_t meta;
  uint64_t num_steps, next;
  size_t le; /* L * E */
  uint32_t *counts;
  eplb_trace_t *trace;  /* native */
  eplb__npy_t npy;      /* NPY (counts or top-k) */
  int64_t *ibuf;        /* one step of NPY counts, or one token of ids */
  eplb__csv_long_t csv; /* CSV long */
  size_t csv_pos;
  eplb_loads_t *matrix;                    /* CSV matrix */
  uint32_t tokens_per_step, rows_per_step; /* NPY top-k */
  uint16_t *rows;
  int32_t *src_rank;
} source_t;

static bool has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

eplb_status_t eplb__trace_format_guess(const char *path, eplb_trace_format_t *fmt) {
  *fmt = EPLB_TRACE_FORMAT_NATIVE;
  if (has_suffix(path, ".npy")) {
    *fmt = EPLB_TRACE_FORMAT_NPY_COUNTS;
  } else if (has_suffix(path, ".csv")) {
    bool is_long;
    eplb_status_t st = eplb__csv_sniff(path, &is_long);
    if (st != EPLB_OK)
      return st;
    *fmt = is_long ? EPLB_TRACE_FORMAT_CSV : EPLB_TRACE_FORMAT_CSV_MATRIX;
  }
  return EPLB_OK;
}

eplb_status_t eplb__check_shape(const char *path, uint64_t L, uint64_t E) {
  if (L == 0 || E == 0 || L > EPLB_TRACE_MAX_LAYERS || E > EPLB_TRACE_MAX_EXPERTS)
    return eplb__error(EPLB_ERANGE, "traces",
                       "%s: %" PRIu64 " layers x %" PRIu64 " experts is outside 1..%u x 1..%u",
                       path, L, E, EPLB_TRACE_MAX_LAYERS, EPLB_TRACE_MAX_EXPERTS);
  return EPLB_OK;
}

static eplb_status_t oom(const char *path) {
  return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
}

/* Sources without tokens record the count of tokens a step must have had:
 * the busiest layer's routed total over k (0 when k is unknown). */
static uint32_t tokens_from_counts(const uint32_t *counts, uint32_t L, uint32_t E, uint32_t k) {
  if (!k)
    return 0;
  uint64_t best = 0;
  for (uint32_t l = 0; l < L; l++) {
    uint64_t sum = 0;
    for (uint32_t e = 0; e < E; e++)
      sum += counts[(size_t)l * E + e];
    best = sum > best ? sum : best;
  }
  best = (best + k - 1) / k;
  return best > UINT32_MAX ? UINT32_MAX : (uint32_t)best;
}

/* Largest id of a top-k array and the first structural problem, in one pass. */
static eplb_status_t topk_scan(source_t *s, uint64_t *max_id) {
  eplb_status_t st;
  uint64_t tokens = s->npy.shape[0];
  size_t per = (size_t)s->meta.num_layers * s->meta.topk;
  *max_id = 0;
  for (uint64_t t = 0; t < tokens; t++) {
    if ((st = eplb__npy_read(&s->npy, per, s->ibuf)) != EPLB_OK)
      return st;
    for (size_t i = 0; i < per; i++) {
      if (s->ibuf[i] < 0)
        return eplb__error(EPLB_ERANGE, "traces",
                           "%s: negative expert id %" PRId64 " at token %" PRIu64 ", layer %zu",
                           s->path, s->ibuf[i], t, i / s->meta.topk);
      if ((uint64_t)s->ibuf[i] > *max_id)
        *max_id = (uint64_t)s->ibuf[i];
    }
  }
  return eplb__npy_seek(&s->npy, 0);
}

static eplb_status_t open_topk(source_t *s, const eplb_trace_convert_options_t *o) {
  eplb_status_t st;
  if ((st = eplb__npy_open(s->path, &s->npy)) != EPLB_OK)
    return st;
  if (s->npy.ndim != 3)
    return eplb__error(EPLB_ESHAPE, "traces",
                       "%s: top-k ids need shape [tokens, layers, k], got %" PRIu32 " dimensions",
                       s->path, s->npy.ndim);
  uint64_t L = s->npy.shape[1], k = s->npy.shape[2];
  if ((st = eplb__check_shape(s->path, L, 1)) != EPLB_OK)
    return st;
  if (k == 0 || k > EPLB_TRACE_MAX_TOPK)
    return eplb__error(EPLB_ERANGE, "traces", "%s: k = %" PRIu64 " is outside 1..%u", s->path, k,
                       EPLB_TRACE_MAX_TOPK);
  s->meta.num_layers = (uint32_t)L;
  s->meta.topk = (uint32_t)k;
  s->meta.phase = EPLB_PHASE_UNKNOWN;
  s->tokens_per_step = o->tokens_per_step;
  s->rows_per_step = o->topk_rows_per_step ? o->topk_rows_per_step : o->tokens_per_step;
  if (s->rows_per_step > s->tokens_per_step)
    s->rows_per_step = s->tokens_per_step;
  size_t per = (size_t)L * (size_t)k;
  if (!(s->ibuf = eplb__malloc_array(per, sizeof *s->ibuf)))
    return oom(s->path);
  uint64_t E = o->num_experts;
  if (!E) {
    uint64_t max_id;
    if ((st = topk_scan(s, &max_id)) != EPLB_OK)
      return st;
    E = max_id + 1;
    if (E > EPLB_TRACE_MAX_EXPERTS)
      return eplb__error(EPLB_ERANGE, "traces", "%s: expert id %" PRIu64 " exceeds the limit %u",
                         s->path, max_id, EPLB_TRACE_MAX_EXPERTS - 1);
  } else if (E > EPLB_TRACE_MAX_EXPERTS) {
    return eplb__error(EPLB_ERANGE, "traces", "num_experts = %" PRIu64 " exceeds %u", E,
                       EPLB_TRACE_MAX_EXPERTS);
  }
  if (k > E)
    return eplb__error(EPLB_ESHAPE, "traces", "%s: k = %" PRIu64 " exceeds %" PRIu64 " experts",
                       s->path, k, E);
  s->meta.num_experts = (uint32_t)E;
  uint64_t tokens = s->npy.shape[0];
  s->num_steps = tokens / s->tokens_per_step + (tokens % s->tokens_per_step != 0);
  s->rows = eplb__malloc_array((size_t)s->rows_per_step, per * sizeof *s->rows);
  s->src_rank = eplb__malloc_array(s->rows_per_step, sizeof *s->src_rank);
  if (!s->rows || !s->src_rank)
    return oom(s->path);
  for (uint32_t r = 0; r < s->rows_per_step; r++)
    s->src_rank[r] = -1;
  return EPLB_OK;
}

static eplb_status_t next_topk(source_t *s, eplb_trace_step_t *step) {
  eplb_status_t st;
  uint32_t L = s->meta.num_layers, k = s->meta.topk, E = s->meta.num_experts;
  uint64_t first = s->next * s->tokens_per_step;
  uint64_t n = s->npy.shape[0] - first;
  if (n > s->tokens_per_step)
    n = s->tokens_per_step;
  uint32_t keep = n < s->rows_per_step ? (uint32_t)n : s->rows_per_step;
  memset(s->counts, 0, s->le * sizeof *s->counts);
  for (uint64_t t = 0; t < n; t++) {
    if ((st = eplb__npy_read(&s->npy, (size_t)L * k, s->ibuf)) != EPLB_OK)
      return st;
    for (uint32_t l = 0; l < L; l++) {
      const int64_t *row = s->ibuf + (size_t)l * k;
      for (uint32_t j = 0; j < k; j++) {
        if (row[j] < 0 || row[j] >= (int64_t)E)
          return eplb__error(EPLB_ERANGE, "traces",
                             "%s: expert id %" PRId64 " at token %" PRIu64 ", layer %" PRIu32
                             " is outside 0..%" PRIu32,
                             s->path, row[j], first + t, l, E - 1);
        for (uint32_t i = 0; i < j; i++)
          if (row[i] == row[j])
            return eplb__error(EPLB_EFORMAT, "traces",
                               "%s: token %" PRIu64 ", layer %" PRIu32 " chooses expert %" PRId64
                               " twice",
                               s->path, first + t, l, row[j]);
        s->counts[(size_t)l * E + (size_t)row[j]]++;
        if (t < keep)
          s->rows[((size_t)t * L + l) * k + j] = (uint16_t)row[j];
      }
    }
  }
  step->num_tokens = (uint32_t)n;
  step->num_rows = keep;
  step->topk = s->rows;
  step->source_rank = s->src_rank;
  return EPLB_OK;
}

static eplb_status_t open_npy_counts(source_t *s) {
  eplb_status_t st;
  if ((st = eplb__npy_open(s->path, &s->npy)) != EPLB_OK)
    return st;
  if (s->npy.ndim != 3)
    return eplb__error(EPLB_ESHAPE, "traces",
                       "%s: counts need shape [steps, layers, experts], got %" PRIu32
                       " dimensions (top-k ids need from = NPY_TOPK)",
                       s->path, s->npy.ndim);
  if ((st = eplb__check_shape(s->path, s->npy.shape[1], s->npy.shape[2])) != EPLB_OK)
    return st;
  s->meta.num_layers = (uint32_t)s->npy.shape[1];
  s->meta.num_experts = (uint32_t)s->npy.shape[2];
  s->num_steps = s->npy.shape[0];
  size_t le = (size_t)s->meta.num_layers * s->meta.num_experts;
  if (!(s->ibuf = eplb__malloc_array(le, sizeof *s->ibuf)))
    return oom(s->path);
  return EPLB_OK;
}

static eplb_status_t next_npy_counts(source_t *s) {
  eplb_status_t st = eplb__npy_read(&s->npy, s->le, s->ibuf);
  if (st != EPLB_OK)
    return st;
  for (size_t i = 0; i < s->le; i++) {
    int64_t v = s->ibuf[i];
    if (v < 0 || v > (int64_t)UINT32_MAX)
      return eplb__error(v < 0 ? EPLB_EFORMAT : EPLB_ERANGE, "traces",
                         "%s: count %" PRId64 " at [%" PRIu64 ", %zu, %zu] is %s", s->path, v,
                         s->next, i / s->meta.num_experts, i % s->meta.num_experts,
                         v < 0 ? "negative" : "above 2^32-1");
    s->counts[i] = (uint32_t)v;
  }
  return EPLB_OK;
}

static eplb_status_t open_csv_matrix(source_t *s) {
  eplb_status_t st = eplb__csv_read_matrix(s->path, &s->matrix);
  if (st != EPLB_OK)
    return st;
  s->meta.num_layers = s->matrix->num_layers;
  s->meta.num_experts = s->matrix->num_experts;
  s->num_steps = 1;
  for (size_t i = 0; i < (size_t)s->meta.num_layers * s->meta.num_experts; i++) {
    double v = s->matrix->values[i];
    if (v != floor(v) || v > (double)UINT32_MAX)
      return eplb__error(v != floor(v) ? EPLB_EFORMAT : EPLB_ERANGE, "traces",
                         "%s:%zu: value %g in column %zu is not a count (integer 0..2^32-1)",
                         s->path, i / s->meta.num_experts + 1, v, i % s->meta.num_experts + 1);
  }
  return EPLB_OK;
}

static eplb_status_t open_source(source_t *s, const eplb_trace_convert_options_t *o) {
  eplb_status_t st;
  if (s->fmt == EPLB_TRACE_FORMAT_AUTO &&
      (st = eplb__trace_format_guess(s->path, &s->fmt)) != EPLB_OK)
    return st;
  switch (s->fmt) {
  case EPLB_TRACE_FORMAT_NATIVE:
    if ((st = eplb_trace_open(s->path, NULL, &s->trace)) != EPLB_OK)
      return st;
    s->meta = *eplb_trace_meta(s->trace);
    s->num_steps = eplb_trace_num_steps(s->trace);
    break;
  case EPLB_TRACE_FORMAT_NPY_COUNTS:
    if ((st = open_npy_counts(s)) != EPLB_OK)
      return st;
    break;
  case EPLB_TRACE_FORMAT_NPY_TOPK:
    if ((st = open_topk(s, o)) != EPLB_OK)
      return st;
    break;
  case EPLB_TRACE_FORMAT_CSV:
    if ((st = eplb__csv_read_long(s->path, &s->csv)) != EPLB_OK)
      return st;
    s->meta.num_layers = s->csv.num_layers;
    s->meta.num_experts = s->csv.num_experts;
    s->num_steps = s->csv.num_steps;
    /* Given dimensions win over the ones inferred from the largest ids. */
    if (o->meta && o->meta->num_layers && o->meta->num_experts) {
      if (o->meta->num_layers < s->meta.num_layers || o->meta->num_experts < s->meta.num_experts)
        return eplb__error(EPLB_ERANGE, "traces",
                           "%s: ids reach layer %" PRIu32 ", expert %" PRIu32
                           " but the metadata says %" PRIu32 " x %" PRIu32,
                           s->path, s->meta.num_layers - 1, s->meta.num_experts - 1,
                           o->meta->num_layers, o->meta->num_experts);
      s->meta.num_layers = o->meta->num_layers;
      s->meta.num_experts = o->meta->num_experts;
    }
    break;
  case EPLB_TRACE_FORMAT_CSV_MATRIX:
    if ((st = open_csv_matrix(s)) != EPLB_OK)
      return st;
    break;
  default:
    return eplb__error(EPLB_EINVAL, "traces", "%s: unknown input format %d", s->path, (int)s->fmt);
  }
  s->le = (size_t)s->meta.num_layers * s->meta.num_experts;
  if (s->fmt != EPLB_TRACE_FORMAT_NATIVE && !(s->counts = eplb__calloc(s->le, sizeof *s->counts)))
    return oom(s->path);
  return EPLB_OK;
}

/* The next step; its arrays stay valid until the next call. */
static eplb_status_t source_next(source_t *s, eplb_trace_step_t *step) {
  eplb_status_t st = EPLB_OK;
  memset(step, 0, sizeof *step);
  step->index = s->next;
  switch (s->fmt) {
  case EPLB_TRACE_FORMAT_NATIVE:
    st = eplb_trace_next(s->trace, step);
    if (st == EPLB_EOF)
      st = eplb__error(EPLB_ETRUNCATED, "traces", "%s: step %" PRIu64 " missing", s->path, s->next);
    s->next++;
    return st;
  case EPLB_TRACE_FORMAT_NPY_COUNTS: st = next_npy_counts(s); break;
  case EPLB_TRACE_FORMAT_NPY_TOPK: st = next_topk(s, step); break;
  case EPLB_TRACE_FORMAT_CSV:
    memset(s->counts, 0, s->le * sizeof *s->counts);
    for (; s->csv_pos < s->csv.num_entries && s->csv.entries[s->csv_pos].step == s->next;
         s->csv_pos++) {
      const eplb__csv_entry_t *en = &s->csv.entries[s->csv_pos];
      s->counts[(size_t)en->layer * s->meta.num_experts + en->expert] = en->count;
    }
    break;
  default: /* CSV matrix: one step */
    for (size_t i = 0; i < s->le; i++)
      s->counts[i] = (uint32_t)s->matrix->values[i];
    break;
  }
  step->counts = s->counts;
  if (s->fmt != EPLB_TRACE_FORMAT_NPY_TOPK)
    step->num_tokens =
        tokens_from_counts(s->counts, s->meta.num_layers, s->meta.num_experts, s->meta.topk);
  s->next++;
  return st;
}

static void close_source(source_t *s) {
  eplb_trace_close(s->trace);
  eplb__npy_close(&s->npy);
  eplb__free(s->ibuf);
  eplb__csv_long_free(&s->csv);
  eplb_loads_destroy(s->matrix);
  eplb__free(s->counts);
  eplb__free(s->rows);
  eplb__free(s->src_rank);
}

/* ---- sinks ---------------------------------------------------------------- */

typedef struct sink {
  eplb_trace_format_t fmt;
  const char *path;
  eplb_trace_meta_t meta;
  uint64_t num_steps;
  eplb_trace_writer_t *w;
  eplb__outfile_t of;
  unsigned char *bytes; /* one step of little-endian counts */
} sink_t;

static eplb_status_t write_failed(const sink_t *k) {
  return eplb__error(EPLB_EIO, "traces", "%s: write failed", k->path);
}

static eplb_status_t open_sink(sink_t *k) {
  eplb_status_t st;
  if (k->fmt == EPLB_TRACE_FORMAT_AUTO) {
    if (has_suffix(k->path, ".eplbt"))
      k->fmt = EPLB_TRACE_FORMAT_NATIVE;
    else if (has_suffix(k->path, ".npy"))
      k->fmt = EPLB_TRACE_FORMAT_NPY_COUNTS;
    else if (has_suffix(k->path, ".csv"))
      k->fmt = EPLB_TRACE_FORMAT_CSV;
    else
      return eplb__error(EPLB_EINVAL, "traces",
                         "%s: cannot tell the output format from the name (use .eplbt, .npy or "
                         ".csv, or set opts.to)",
                         k->path);
  }
  size_t le = (size_t)k->meta.num_layers * k->meta.num_experts;
  switch (k->fmt) {
  case EPLB_TRACE_FORMAT_NATIVE: return eplb_trace_writer_create(k->path, &k->meta, NULL, &k->w);
  case EPLB_TRACE_FORMAT_NPY_COUNTS: {
    if (!(k->bytes = eplb__malloc_array(le, 4)))
      return oom(k->path);
    uint64_t shape[3] = {k->num_steps, k->meta.num_layers, k->meta.num_experts};
    if ((st = eplb__outfile_open(k->path, &k->of)) != EPLB_OK)
      return st;
    return eplb__npy_write_header(k->of.f, k->path, "<u4", 3, shape);
  }
  case EPLB_TRACE_FORMAT_CSV:
    if (k->num_steps == 0)
      return eplb__error(EPLB_ESHAPE, "traces", "%s: a CSV trace needs at least one step", k->path);
    if ((st = eplb__outfile_open(k->path, &k->of)) != EPLB_OK)
      return st;
    if (fputs(EPLB__CSV_LONG_HEADER "\n", k->of.f) < 0)
      return write_failed(k);
    return EPLB_OK;
  case EPLB_TRACE_FORMAT_CSV_MATRIX:
    if (k->num_steps != 1)
      return eplb__error(EPLB_ESHAPE, "traces",
                         "%s: a CSV matrix holds one step, the input has %" PRIu64
                         " (sum them with eplb_loads_read, or write a long-form CSV)",
                         k->path, k->num_steps);
    return eplb__outfile_open(k->path, &k->of);
  case EPLB_TRACE_FORMAT_NPY_TOPK:
    return eplb__error(EPLB_EUNSUPPORTED, "traces",
                       "%s: writing top-k ids as NPY is not implemented", k->path);
  default:
    return eplb__error(EPLB_EINVAL, "traces", "%s: unknown output format %d", k->path, (int)k->fmt);
  }
}

static eplb_status_t sink_put(sink_t *k, const eplb_trace_step_t *step) {
  uint32_t L = k->meta.num_layers, E = k->meta.num_experts;
  size_t le = (size_t)L * E;
  FILE *f = k->of.f;
  switch (k->fmt) {
  case EPLB_TRACE_FORMAT_NATIVE: return eplb_trace_writer_append(k->w, step);
  case EPLB_TRACE_FORMAT_NPY_COUNTS:
    for (size_t i = 0; i < le; i++) {
      uint32_t v = step->counts[i];
      unsigned char *b = k->bytes + 4 * i;
      b[0] = (unsigned char)v;
      b[1] = (unsigned char)(v >> 8);
      b[2] = (unsigned char)(v >> 16);
      b[3] = (unsigned char)(v >> 24);
    }
    return fwrite(k->bytes, 4, le, f) == le ? EPLB_OK : write_failed(k);
  case EPLB_TRACE_FORMAT_CSV: {
    /* Zero counts are implied, except the last cell, which fixes the shape. */
    bool last_step = step->index + 1 == k->num_steps;
    for (size_t i = 0; i < le; i++)
      if (step->counts[i] || (last_step && i + 1 == le))
        if (fprintf(f, "%" PRIu64 ",%zu,%zu,%" PRIu32 "\n", step->index, i / E, i % E,
                    step->counts[i]) < 0)
          return write_failed(k);
    return EPLB_OK;
  }
  default: /* matrix */
    for (size_t i = 0; i < le; i++)
      if (fprintf(f, "%" PRIu32 "%c", step->counts[i], i % E + 1 < E ? ',' : '\n') < 0)
        return write_failed(k);
    return EPLB_OK;
  }
}

static eplb_status_t finish_sink(sink_t *k) {
  if (k->fmt == EPLB_TRACE_FORMAT_NATIVE)
    return eplb_trace_writer_finish(k->w);
  return eplb__outfile_commit(&k->of);
}

static void close_sink(sink_t *k) {
  eplb_trace_writer_destroy(k->w);
  eplb__outfile_abort(&k->of);
  eplb__free(k->bytes);
}

/* ---- conversion ------------------------------------------------------------ */

/* The output's metadata: the input's, with what the caller gave on top. */
static eplb_status_t merge_meta(const source_t *s, const eplb_trace_meta_t *given,
                                eplb_trace_meta_t *out) {
  *out = s->meta;
  if (given) {
    if (s->fmt != EPLB_TRACE_FORMAT_CSV &&
        ((given->num_layers && given->num_layers != out->num_layers) ||
         (given->num_experts && given->num_experts != out->num_experts)))
      return eplb__error(EPLB_ESHAPE, "traces",
                         "%s: input has %" PRIu32 " layers x %" PRIu32
                         " experts, the metadata says %" PRIu32 " x %" PRIu32,
                         s->path, out->num_layers, out->num_experts, given->num_layers,
                         given->num_experts);
    if (given->topk && out->topk && given->topk != out->topk)
      return eplb__error(EPLB_ESHAPE, "traces",
                         "%s: input has k = %" PRIu32 ", the metadata says %" PRIu32, s->path,
                         out->topk, given->topk);
    if (given->topk)
      out->topk = given->topk;
    if (given->num_ranks)
      out->num_ranks = given->num_ranks;
    if (given->phase != EPLB_PHASE_UNKNOWN)
      out->phase = given->phase;
    if (given->model[0])
      memcpy(out->model, given->model, sizeof out->model);
    if (given->origin[0])
      memcpy(out->origin, given->origin, sizeof out->origin);
    out->model[sizeof out->model - 1] = '\0';
    out->origin[sizeof out->origin - 1] = '\0';
  }
  if (!out->origin[0]) {
    const char *base = strrchr(s->path, '/');
    snprintf(out->origin, sizeof out->origin, "eplb convert %s", base ? base + 1 : s->path);
  }
  return EPLB_OK;
}

eplb_status_t eplb_trace_convert(const char *in_path, const char *out_path,
                                 const eplb_trace_convert_options_t *opts) {
  eplb_trace_convert_options_t defaults;
  source_t s;
  sink_t k;
  eplb_status_t st;
  memset(&s, 0, sizeof s);
  memset(&k, 0, sizeof k);
  if (!in_path || !out_path)
    return eplb__error(EPLB_EINVAL, "traces", "convert: in_path or out_path is NULL");
  eplb_trace_meta_t given;
  if ((st = EPLB__OPTS_TAKE(defaults, opts, eplb_trace_convert_options_default,
                            "eplb_trace_convert_options_t", "traces")) != EPLB_OK)
    return st;
  if (defaults.meta) {
    if ((st = EPLB__OPTS_TAKE(given, defaults.meta, eplb_trace_meta_default, "eplb_trace_meta_t",
                              "traces")) != EPLB_OK)
      return st;
    defaults.meta = &given;
  }
  opts = &defaults;
  if (opts->tokens_per_step == 0)
    return eplb__error(EPLB_EINVAL, "traces", "tokens_per_step 0: must be >= 1");
  s.path = in_path;
  s.fmt = opts->from;
  eplb_trace_meta_default(&s.meta);
  if ((st = open_source(&s, opts)) != EPLB_OK)
    goto done;
  k.path = out_path;
  k.fmt = opts->to;
  k.num_steps = s.num_steps;
  if ((st = merge_meta(&s, opts->meta, &k.meta)) != EPLB_OK)
    goto done;
  if ((st = open_sink(&k)) != EPLB_OK)
    goto done;
  for (uint64_t i = 0; i < s.num_steps; i++) {
    eplb_trace_step_t step;
    if ((st = source_next(&s, &step)) != EPLB_OK)
      goto done;
    step.index = i;
    if ((st = sink_put(&k, &step)) != EPLB_OK)
      goto done;
  }
  st = finish_sink(&k);
done:
  close_sink(&k);
  close_source(&s);
  return st;
}
