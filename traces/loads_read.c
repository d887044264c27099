/* traces/loads_read.c — loads from a file (eplb_loads_read): a native
 * trace, an NPY counts array or a CSV, summed over a step range. Above the
 * formats' readers and the loads object (loads.c), so the readers can build
 * loads without calling back up here. */
#include "traces/traces.h"

#include <inttypes.h>

/* A step range given (anything but the whole file) that starts at or past
 * the file's end selects nothing: all-zero loads would plan as perfectly
 * balanced. */
static eplb_status_t check_range(const char *path, uint64_t begin, uint64_t end, uint64_t steps) {
  if (begin < steps || (begin == 0 && end == UINT64_MAX))
    return EPLB_OK;
  if (end == UINT64_MAX)
    return eplb__error(EPLB_ERANGE, "traces",
                       "%s: steps from %" PRIu64 " select no step (the file has %" PRIu64 ")", path,
                       begin, steps);
  return eplb__error(EPLB_ERANGE, "traces",
                     "%s: steps [%" PRIu64 ", %" PRIu64 ") select no step (the file has %" PRIu64
                     ")",
                     path, begin, end, steps);
}

/* keep: where the open trace goes (NULL: closed here). */
static eplb_status_t read_native(const char *path, uint64_t begin, uint64_t end, eplb_loads_t **out,
                                 eplb_trace_t **keep) {
  eplb_trace_t *t = NULL;
  eplb_status_t st = eplb_trace_open(path, NULL, &t);
  if (st != EPLB_OK)
    return st;
  const eplb_trace_meta_t *m = eplb_trace_meta(t);
  if ((st = check_range(path, begin, end, eplb_trace_num_steps(t))) == EPLB_OK &&
      (st = eplb_loads_create(m->num_layers, m->num_experts, out)) == EPLB_OK &&
      (st = eplb_trace_window_sum(t, begin, end, (*out)->values)) != EPLB_OK) {
    eplb_loads_destroy(*out);
    *out = NULL;
  }
  if (keep && st == EPLB_OK)
    *keep = t;
  else
    eplb_trace_close(t);
  return st;
}

/* A 3-D counts array summed over its steps [begin, end), or a 2-D [L, E]
 * matrix taken as is. */
static eplb_status_t read_npy(const char *path, uint64_t begin, uint64_t end, eplb_loads_t **out) {
  eplb__npy_t npy;
  int64_t *buf = NULL;
  eplb_status_t st = eplb__npy_open(path, &npy);
  if (st != EPLB_OK)
    return st;
  *out = NULL;
  if (npy.ndim != 2 && npy.ndim != 3) {
    st = eplb__error(EPLB_ESHAPE, "traces",
                     "%s: NPY loads need shape [steps, layers, experts] or [layers, experts], "
                     "got %" PRIu32 " dimensions",
                     path, npy.ndim);
    goto fail;
  }
  uint64_t steps = npy.ndim == 3 ? npy.shape[0] : 1;
  uint64_t nl = npy.shape[npy.ndim - 2], ne = npy.shape[npy.ndim - 1];
  if ((st = eplb__check_shape(path, nl, ne)) != EPLB_OK)
    goto fail;
  if (npy.ndim == 2) {
    begin = 0;
    end = 1;
  } else if ((st = check_range(path, begin, end, steps)) != EPLB_OK) {
    goto fail;
  }
  if (end > steps)
    end = steps;
  if ((st = eplb_loads_create((uint32_t)nl, (uint32_t)ne, out)) != EPLB_OK)
    goto fail;
  size_t per = (size_t)(nl * ne);
  if (begin < end) {
    if (!(buf = eplb__malloc_array(per, sizeof *buf))) {
      st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
      goto fail;
    }
    if ((st = eplb__npy_seek(&npy, begin * per)) != EPLB_OK)
      goto fail;
  }
  for (uint64_t t = begin; t < end; t++) {
    if ((st = eplb__npy_read(&npy, per, buf)) != EPLB_OK)
      goto fail;
    for (size_t i = 0; i < per; i++) {
      if (buf[i] < 0) {
        st = eplb__error(EPLB_EFORMAT, "traces",
                         "%s: negative count %" PRId64 " at [%" PRIu64 ", %zu, %zu]", path, buf[i],
                         t, i / (size_t)ne, i % (size_t)ne);
        goto fail;
      }
      (*out)->values[i] += (double)buf[i];
    }
  }
  eplb__free(buf);
  eplb__npy_close(&npy);
  return EPLB_OK;
fail:
  eplb__free(buf);
  eplb__npy_close(&npy);
  eplb_loads_destroy(*out);
  *out = NULL;
  return st;
}

static eplb_status_t read_csv_long(const char *path, uint64_t begin, uint64_t end,
                                   eplb_loads_t **out) {
  eplb__csv_long_t csv;
  eplb_status_t st = eplb__csv_read_long(path, &csv);
  if (st != EPLB_OK)
    return st;
  if ((st = check_range(path, begin, end, csv.num_steps)) == EPLB_OK &&
      (st = eplb_loads_create(csv.num_layers, csv.num_experts, out)) == EPLB_OK) {
    for (size_t i = 0; i < csv.num_entries; i++) {
      const eplb__csv_entry_t *en = &csv.entries[i];
      if (en->step >= begin && en->step < end)
        (*out)->values[(size_t)en->layer * csv.num_experts + en->expert] += en->count;
    }
  }
  eplb__csv_long_free(&csv);
  return st;
}

eplb_status_t eplb_loads_read_trace(const char *path, uint64_t step_begin, uint64_t step_end,
                                    eplb_loads_t **out, eplb_trace_t **trace) {
  if (trace)
    *trace = NULL;
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "traces", "loads: path or out is NULL");
  *out = NULL;
  eplb_trace_format_t fmt;
  eplb_status_t st = eplb__trace_format_guess(path, &fmt);
  if (st != EPLB_OK)
    return st;
  switch (fmt) {
  case EPLB_TRACE_FORMAT_NPY_COUNTS: return read_npy(path, step_begin, step_end, out);
  case EPLB_TRACE_FORMAT_CSV: return read_csv_long(path, step_begin, step_end, out);
  case EPLB_TRACE_FORMAT_CSV_MATRIX: return eplb__csv_read_matrix(path, out);
  default: return read_native(path, step_begin, step_end, out, trace);
  }
}

eplb_status_t eplb_loads_read(const char *path, uint64_t step_begin, uint64_t step_end,
                              eplb_loads_t **out) {
  return eplb_loads_read_trace(path, step_begin, step_end, out, NULL);
}
