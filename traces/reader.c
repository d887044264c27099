/* traces/reader.c — opening, indexing and reading native traces. */
#include "traces/traces.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct chunk_entry {
  uint64_t offset; /* of the chunk header */
  eplb__chunk_header_t h;
} chunk_entry_t;

struct eplb_trace {
  char *path;
  int fd;
  int allow_torn_tail;
  eplb_trace_meta_t meta;
  uint64_t indexed_end; /* offset after the last indexed chunk */
  chunk_entry_t *chunks;
  size_t num_chunks, cap_chunks;
  uint64_t num_steps, num_tokens;
  int has_topk;
  uint64_t cursor; /* next() position */
  /* The one decoded chunk. */
  eplb__chunk_buf_t buf;
  size_t cached; /* chunk index, SIZE_MAX = none */
  eplb__steps_view_t view;
  uint64_t *row_off; /* [num_steps + 1] first row of each step of the cached chunk */
  size_t row_off_cap;
};

static void trace_open_options_defaults(eplb_trace_open_options_t *opts) {
  if (opts)
    memset(opts, 0, sizeof *opts);
}

eplb_status_t eplb_trace_open_options_init(eplb_trace_open_options_t *opts, size_t size) {
  eplb_trace_open_options_t d;
  trace_open_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_trace_open_options_t");
}

static eplb_status_t file_size(eplb_trace_t *t, uint64_t *size) {
  struct stat sb;
  if (fstat(t->fd, &sb) != 0)
    return eplb__error(EPLB_EIO, "traces", "%s: stat failed: %s", t->path, strerror(errno));
  *size = (uint64_t)sb.st_size;
  return EPLB_OK;
}

/* Indexes chunks from t->indexed_end to the end of the file. `torn_ok`
 * decides whether an incomplete last chunk is an error. */
static eplb_status_t index_chunks(eplb_trace_t *t, int torn_ok, uint64_t *added) {
  uint64_t size = 0;
  eplb_status_t st = file_size(t, &size);
  uint64_t before = t->num_steps;
  while (st == EPLB_OK && t->indexed_end < size) {
    uint64_t off = t->indexed_end;
    uint64_t idx = t->num_chunks + 1; /* chunk 0 is the metadata */
    uint8_t raw[EPLB__CHUNK_HEADER_SIZE];
    eplb__chunk_header_t h;
    int torn = size - off < sizeof raw;
    if (!torn) {
      int r = eplb__pread_all(t->fd, raw, sizeof raw, off);
      if (r < 0) {
        st = eplb__error(EPLB_EIO, "traces", "%s: read failed at offset %" PRIu64 ": %s", t->path,
                         off, strerror(errno));
        break;
      }
      torn = r > 0;
    }
    if (!torn) {
      eplb__hdr_result_t hr = eplb__chunk_header_decode(raw, &h);
      const char *why = NULL;
      if (hr == EPLB__HDR_BAD_MAGIC) {
        st = eplb__error(EPLB_ECORRUPT, "traces",
                         "%s: chunk %" PRIu64 " at offset %" PRIu64 ": bad chunk magic", t->path,
                         idx, off);
        break;
      }
      if (hr == EPLB__HDR_BAD_CRC) {
        st = eplb__error(EPLB_ECORRUPT, "traces",
                         "%s: chunk %" PRIu64 " at offset %" PRIu64 ": header CRC mismatch",
                         t->path, idx, off);
        break;
      }
      if (!eplb__chunk_header_plausible(&h, &t->meta, &why)) {
        st = eplb__error(EPLB_EFORMAT, "traces", "%s: chunk %" PRIu64 " at offset %" PRIu64 ": %s",
                         t->path, idx, off, why);
        break;
      }
      if (h.first_step != t->num_steps) {
        st = eplb__error(EPLB_EFORMAT, "traces",
                         "%s: chunk %" PRIu64 " at offset %" PRIu64 ": starts at step %" PRIu64
                         ", expected %" PRIu64,
                         t->path, idx, off, h.first_step, t->num_steps);
        break;
      }
      torn = size - off - sizeof raw < h.payload_len;
    }
    if (torn) {
      if (!torn_ok)
        st = eplb__error(EPLB_ETRUNCATED, "traces",
                         "%s: cut short after step %" PRIu64 " (offset %" PRIu64
                         "); `eplb trace recover` keeps the complete steps",
                         t->path, t->num_steps, off);
      break;
    }
    if (t->num_chunks == t->cap_chunks) {
      size_t cap = t->cap_chunks ? 2 * t->cap_chunks : 64;
      chunk_entry_t *c = eplb__realloc_array(t->chunks, cap, sizeof *c);
      if (!c) {
        st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory indexing chunks", t->path);
        break;
      }
      t->chunks = c;
      t->cap_chunks = cap;
    }
    t->chunks[t->num_chunks].offset = off;
    t->chunks[t->num_chunks].h = h;
    t->num_chunks++;
    t->num_steps += h.num_steps;
    t->num_tokens += h.num_tokens;
    t->has_topk |= (h.flags & EPLB__CHUNK_FLAG_TOPK) != 0;
    t->indexed_end = off + sizeof raw + h.payload_len;
  }
  if (added)
    *added = t->num_steps - before;
  return st;
}

eplb_status_t eplb_trace_open(const char *path, const eplb_trace_open_options_t *opts,
                              eplb_trace_t **out) {
  eplb_status_t st = EPLB_OK;
  eplb_trace_t *t = NULL;
  uint64_t size;
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "traces", "trace open: path and out must not be NULL");
  *out = NULL;
  eplb_trace_open_options_t own;
  if ((st = EPLB__OPTS_TAKE(own, opts, eplb_trace_open_options_default, "eplb_trace_open_options_t",
                            "traces")) != EPLB_OK)
    return st;
  opts = &own;
  t = eplb__calloc(1, sizeof *t);
  if (!t || !(t->path = eplb__strdup(path))) {
    st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
    goto fail;
  }
  t->fd = -1;
  t->cached = SIZE_MAX;
  t->allow_torn_tail = opts ? opts->allow_torn_tail != 0 : 0;
  if ((st = eplb__check_input(path, "traces")))
    goto fail;
  t->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (t->fd < 0) {
    st = eplb__error(EPLB_EIO, "traces", "%s: cannot open: %s", path, strerror(errno));
    goto fail;
  }
  if ((st = file_size(t, &size)) != EPLB_OK ||
      (st = eplb__trace_read_head(&t->buf, t->fd, path, size, &t->meta, &t->indexed_end)) !=
          EPLB_OK ||
      (st = index_chunks(t, t->allow_torn_tail, NULL)) != EPLB_OK)
    goto fail;
  *out = t;
  return EPLB_OK;
fail:
  eplb_trace_close(t);
  return st;
}

void eplb_trace_close(eplb_trace_t *t) {
  if (!t)
    return;
  if (t->fd >= 0)
    close(t->fd);
  eplb__chunk_buf_free(&t->buf);
  eplb__free(t->row_off);
  eplb__free(t->chunks);
  eplb__free(t->path);
  eplb__free(t);
}

const eplb_trace_meta_t *eplb_trace_meta(const eplb_trace_t *t) { return t ? &t->meta : NULL; }
uint64_t eplb_trace_num_steps(const eplb_trace_t *t) { return t ? t->num_steps : 0; }
uint64_t eplb__trace_indexed_end(const eplb_trace_t *t) { return t->indexed_end; }
uint64_t eplb_trace_num_tokens(const eplb_trace_t *t) { return t ? t->num_tokens : 0; }
int eplb_trace_has_topk(const eplb_trace_t *t) { return t ? t->has_topk : 0; }

static size_t find_chunk(const eplb_trace_t *t, uint64_t step) {
  size_t lo = 0, hi = t->num_chunks;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->chunks[mid].h.first_step <= step)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

static eplb_status_t decode_chunk(eplb_trace_t *t, size_t ci) {
  if (t->cached == ci)
    return EPLB_OK;
  t->cached = SIZE_MAX;
  const chunk_entry_t *c = &t->chunks[ci];
  eplb_status_t st = eplb__chunk_load(&t->buf, t->fd, t->path, ci + 1, c->offset, &c->h);
  if (st == EPLB_OK)
    st = eplb__steps_parse(&t->meta, &c->h, &t->buf, &t->view, t->path, ci + 1, c->offset);
  if (st != EPLB_OK)
    return st;
  size_t n = (size_t)c->h.num_steps + 1;
  if (t->view.num_rows) {
    if (n > t->row_off_cap) {
      uint64_t *r = eplb__malloc_array(n, sizeof *r);
      if (!r)
        return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", t->path);
      eplb__free(t->row_off);
      t->row_off = r;
      t->row_off_cap = n;
    }
    t->row_off[0] = 0;
    for (size_t s = 1; s < n; s++)
      t->row_off[s] = t->row_off[s - 1] + t->view.num_rows[s - 1];
  }
  t->cached = ci;
  return EPLB_OK;
}

eplb_status_t eplb_trace_read_step(eplb_trace_t *t, uint64_t index, eplb_trace_step_t *step) {
  if (!t || !step)
    return eplb__error(EPLB_EINVAL, "traces", "read_step: trace and step must not be NULL");
  if (index >= t->num_steps)
    return eplb__error(EPLB_ERANGE, "traces", "%s: step %" PRIu64 " beyond the %" PRIu64 " steps",
                       t->path, index, t->num_steps);
  size_t ci = find_chunk(t, index);
  eplb_status_t st = decode_chunk(t, ci);
  if (st != EPLB_OK)
    return st;
  size_t s = (size_t)(index - t->chunks[ci].h.first_step);
  size_t le = (size_t)t->meta.num_layers * t->meta.num_experts;
  memset(step, 0, sizeof *step);
  step->index = index;
  step->num_tokens = t->view.num_tokens[s];
  step->counts = t->view.counts + s * le;
  if (t->view.num_rows && t->view.num_rows[s]) {
    uint64_t r0 = t->row_off[s];
    step->num_rows = t->view.num_rows[s];
    step->source_rank = t->view.source_rank + r0;
    step->topk = t->view.ids + r0 * t->meta.num_layers * t->meta.topk;
  }
  return EPLB_OK;
}

eplb_status_t eplb_trace_next(eplb_trace_t *t, eplb_trace_step_t *step) {
  if (!t || !step)
    return eplb__error(EPLB_EINVAL, "traces", "next: trace and step must not be NULL");
  if (t->cursor >= t->num_steps)
    return EPLB_EOF;
  eplb_status_t st = eplb_trace_read_step(t, t->cursor, step);
  if (st == EPLB_OK)
    t->cursor++;
  return st;
}

void eplb_trace_rewind(eplb_trace_t *t) {
  if (t)
    t->cursor = 0;
}

eplb_status_t eplb_trace_refresh(eplb_trace_t *t, uint64_t *new_steps) {
  if (new_steps)
    *new_steps = 0;
  if (!t)
    return eplb__error(EPLB_EINVAL, "traces", "refresh: trace must not be NULL");
  return index_chunks(t, 1, new_steps);
}

eplb_status_t eplb_trace_window_sum(eplb_trace_t *t, uint64_t begin, uint64_t end, double *out) {
  if (!t || !out)
    return eplb__error(EPLB_EINVAL, "traces", "window_sum: trace and out must not be NULL");
  size_t le = (size_t)t->meta.num_layers * t->meta.num_experts;
  for (size_t i = 0; i < le; i++)
    out[i] = 0.0;
  if (end > t->num_steps)
    end = t->num_steps;
  if (begin >= end)
    return EPLB_OK;
  for (size_t ci = find_chunk(t, begin); ci < t->num_chunks; ci++) {
    const eplb__chunk_header_t *h = &t->chunks[ci].h;
    if (h->first_step >= end)
      break;
    eplb_status_t st = decode_chunk(t, ci);
    if (st != EPLB_OK)
      return st;
    uint64_t s0 = begin > h->first_step ? begin - h->first_step : 0;
    uint64_t s1 = end - h->first_step < h->num_steps ? end - h->first_step : h->num_steps;
    for (uint64_t s = s0; s < s1; s++) {
      const uint32_t *c = t->view.counts + (size_t)s * le;
      for (size_t i = 0; i < le; i++)
        out[i] += (double)c[i];
    }
  }
  return EPLB_OK;
}
