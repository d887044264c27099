/* traces/writer.c — creating and appending native traces. */
#include "traces/traces.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct eplb_trace_writer {
  char *path;
  char *tmp_path; /* atomic mode: the file being written, renamed by finish() */
  int tmp_slot;   /* its entry for eplb_remove_temporaries (-1: none) */
  int fd;
  int finished;
  eplb_trace_meta_t meta;
  eplb_trace_writer_options_t opts;
  uint64_t offset;     /* end of the data on disk */
  uint64_t steps_disk; /* steps in complete chunks on disk */
  uint32_t nbuf;       /* buffered steps */
  uint64_t buf_tokens;
  uint64_t buf_rows;
  uint32_t *tokens; /* [steps_per_chunk] */
  uint32_t *counts; /* [steps_per_chunk][L][E] */
  uint32_t *rows;   /* [steps_per_chunk] */
  int32_t *src;     /* [cap_rows] */
  uint16_t *ids;    /* [cap_rows][L][k] */
  uint64_t cap_rows;
  uint32_t *seen; /* [E] stamps for the duplicate check */
  uint32_t stamp;
  uint8_t *raw; /* assembled payload */
  size_t raw_cap;
  uint8_t *out; /* chunk header + compressed payload */
  size_t out_cap;
  ZSTD_CCtx *cctx;
};

static void trace_writer_options_defaults(eplb_trace_writer_options_t *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->steps_per_chunk = 16;
  opts->compression_level = -1;
  opts->fsync_chunks = 0;
  opts->atomic = 1;
}

eplb_status_t eplb_trace_writer_options_init(eplb_trace_writer_options_t *opts, size_t size) {
  eplb_trace_writer_options_t d;
  trace_writer_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_trace_writer_options_t");
}

static eplb_status_t io_error(const eplb_trace_writer_t *w, const char *what) {
  return eplb__error(EPLB_EIO, "traces", "%s: %s failed: %s", w->path, what, strerror(errno));
}

static int grow_bytes(uint8_t **buf, size_t *cap, size_t need) {
  if (*cap >= need && *buf)
    return 0;
  size_t c = *cap ? *cap : 4096;
  while (c < need)
    c = c > SIZE_MAX / 2 ? need : 2 * c;
  uint8_t *p = eplb__malloc(c);
  if (!p)
    return -1;
  eplb__free(*buf);
  *buf = p;
  *cap = c;
  return 0;
}

/* Compresses raw[0..raw_len) and writes it as one chunk at the file end. */
static eplb_status_t write_chunk(eplb_trace_writer_t *w, eplb__chunk_header_t *h,
                                 const uint8_t *raw, size_t raw_len) {
  size_t bound = ZSTD_compressBound(raw_len);
  if (grow_bytes(&w->out, &w->out_cap, EPLB__CHUNK_HEADER_SIZE + bound))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", w->path);
  if (!w->cctx && !(w->cctx = ZSTD_createCCtx()))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory (zstd context)", w->path);
  size_t n = ZSTD_compressCCtx(w->cctx, w->out + EPLB__CHUNK_HEADER_SIZE, bound, raw, raw_len,
                               w->opts.compression_level);
  if (ZSTD_isError(n))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: compression failed: %s", w->path,
                       ZSTD_getErrorName(n));
  h->raw_len = (uint32_t)raw_len;
  h->payload_len = (uint32_t)n;
  h->payload_crc = eplb__crc32(w->out + EPLB__CHUNK_HEADER_SIZE, n);
  eplb__chunk_header_encode(h, w->out);
  if (eplb__pwrite_all(w->fd, w->out, EPLB__CHUNK_HEADER_SIZE + n, w->offset) != 0) {
    eplb_status_t st = io_error(w, "write");
    /* Keep the file ending on a chunk boundary when the disk fills up. */
    if (ftruncate(w->fd, (off_t)w->offset) != 0) {
      /* The torn tail is dropped by the next reader or appender. */
    }
    return st;
  }
  w->offset += EPLB__CHUNK_HEADER_SIZE + n;
  if (w->opts.fsync_chunks && fsync(w->fd) != 0)
    return io_error(w, "fsync");
  return EPLB_OK;
}

static eplb_status_t check_open(const eplb_trace_writer_t *w) {
  if (w->finished)
    return eplb__error(EPLB_ESTATE, "traces", "%s: writer already finished", w->path);
  if (w->fd < 0)
    return eplb__error(EPLB_ESTATE, "traces", "%s: writer is closed after an error", w->path);
  return EPLB_OK;
}

eplb_status_t eplb_trace_writer_flush(eplb_trace_writer_t *w) {
  if (!w)
    return eplb__error(EPLB_EINVAL, "traces", "flush: writer must not be NULL");
  eplb_status_t st = check_open(w);
  if (st != EPLB_OK || w->nbuf == 0)
    return st;
  uint32_t n = w->nbuf;
  int has_topk = w->buf_rows > 0;
  size_t le = (size_t)w->meta.num_layers * w->meta.num_experts;
  size_t raw_len = eplb__steps_raw_size(&w->meta, n, has_topk, w->buf_rows);
  if (grow_bytes(&w->raw, &w->raw_cap, raw_len))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", w->path);
  /* Tokens then counts, as byte planes of m words (see format.c). */
  size_t m = (size_t)n * (1 + le);
  uint8_t *p = w->raw;
  eplb__planes_put(w->tokens, NULL, n, p, m);
  for (size_t s = 0; s < n; s++)
    eplb__planes_put(w->counts + s * le, s ? w->counts + (s - 1) * le : NULL, le, p + n + s * le,
                     m);
  p += 4 * m;
  if (has_topk) {
    size_t nid = (size_t)w->buf_rows * w->meta.num_layers * w->meta.topk;
    memcpy(p, w->rows, 4 * (size_t)n);
    eplb__le32_array((uint32_t *)(void *)p, n);
    p += 4 * (size_t)n;
    memcpy(p, w->src, 4 * (size_t)w->buf_rows);
    eplb__le32_array((uint32_t *)(void *)p, (size_t)w->buf_rows);
    p += 4 * (size_t)w->buf_rows;
    memcpy(p, w->ids, 2 * nid);
    eplb__le16_array((uint16_t *)(void *)p, nid);
  }
  eplb__chunk_header_t h = {.type = EPLB__CHUNK_STEPS,
                            .flags = has_topk ? EPLB__CHUNK_FLAG_TOPK : 0,
                            .first_step = w->steps_disk,
                            .num_tokens = w->buf_tokens,
                            .num_steps = n};
  if ((st = write_chunk(w, &h, w->raw, raw_len)) != EPLB_OK)
    return st;
  w->steps_disk += n;
  w->nbuf = 0;
  w->buf_tokens = 0;
  w->buf_rows = 0;
  return EPLB_OK;
}

static eplb_status_t validate_step(eplb_trace_writer_t *w, const eplb_trace_step_t *s) {
  const eplb_trace_meta_t *m = &w->meta;
  if (!s->counts)
    return eplb__error(EPLB_EINVAL, "traces", "%s: append: counts must not be NULL", w->path);
  if (s->num_rows == 0)
    return EPLB_OK;
  if (m->topk == 0)
    return eplb__error(EPLB_EINVAL, "traces",
                       "%s: append: %" PRIu32 " top-k rows but the trace has topk = 0", w->path,
                       s->num_rows);
  if (!s->topk)
    return eplb__error(EPLB_EINVAL, "traces", "%s: append: num_rows > 0 needs topk", w->path);
  uint32_t L = m->num_layers, k = m->topk;
  for (uint32_t r = 0; r < s->num_rows; r++) {
    if (s->source_rank) {
      int32_t sr = s->source_rank[r];
      if (sr < -1 || (m->num_ranks && sr >= (int64_t)m->num_ranks))
        return eplb__error(EPLB_ERANGE, "traces",
                           "%s: append: source_rank[%" PRIu32 "] = %" PRId32
                           " out of range (-1..%" PRIu32 ")",
                           w->path, r, sr, m->num_ranks ? m->num_ranks - 1 : INT32_MAX);
    }
    for (uint32_t l = 0; l < L; l++) {
      const uint16_t *row = s->topk + ((size_t)r * L + l) * k;
      if (++w->stamp == 0) {
        memset(w->seen, 0, sizeof *w->seen * m->num_experts);
        w->stamp = 1;
      }
      for (uint32_t j = 0; j < k; j++) {
        if (row[j] >= m->num_experts)
          return eplb__error(EPLB_ERANGE, "traces",
                             "%s: append: expert id %u (row %" PRIu32 ", layer %" PRIu32
                             ") >= %" PRIu32 " experts",
                             w->path, (unsigned)row[j], r, l, m->num_experts);
        if (w->seen[row[j]] == w->stamp)
          return eplb__error(EPLB_EINVAL, "traces",
                             "%s: append: expert id %u twice in row %" PRIu32 ", layer %" PRIu32,
                             w->path, (unsigned)row[j], r, l);
        w->seen[row[j]] = w->stamp;
      }
    }
  }
  return EPLB_OK;
}

eplb_status_t eplb_trace_writer_append(eplb_trace_writer_t *w, const eplb_trace_step_t *step) {
  if (!w || !step)
    return eplb__error(EPLB_EINVAL, "traces", "append: writer and step must not be NULL");
  eplb_status_t st = check_open(w);
  if (st == EPLB_OK)
    st = validate_step(w, step);
  if (st != EPLB_OK)
    return st;
  const eplb_trace_meta_t *m = &w->meta;
  size_t le = (size_t)m->num_layers * m->num_experts;
  size_t per_row = (size_t)m->num_layers * m->topk;
  /* A chunk never exceeds the readers' decoded-size cap. */
  size_t alone = eplb__steps_raw_size(m, 1, step->num_rows > 0, step->num_rows);
  if (alone == 0)
    return eplb__error(EPLB_ERANGE, "traces",
                       "%s: append: step with %" PRIu32 " top-k rows exceeds the 1 GiB chunk limit",
                       w->path, step->num_rows);
  uint64_t rows = w->buf_rows + step->num_rows;
  size_t next = eplb__steps_raw_size(m, w->nbuf + 1, rows > 0, rows);
  if (w->nbuf > 0 && next == 0 && (st = eplb_trace_writer_flush(w)) != EPLB_OK)
    return st;
  rows = w->buf_rows + step->num_rows;
  if (rows > w->cap_rows) {
    uint64_t cap = w->cap_rows ? w->cap_rows : 256;
    while (cap < rows)
      cap *= 2;
    int32_t *src = eplb__realloc_array(w->src, (size_t)cap, sizeof *src);
    if (!src)
      return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", w->path);
    w->src = src;
    uint16_t *ids = eplb__realloc_array(w->ids, (size_t)cap, per_row * sizeof *ids);
    if (!ids)
      return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", w->path);
    w->ids = ids;
    w->cap_rows = cap;
  }
  uint32_t i = w->nbuf;
  w->tokens[i] = step->num_tokens;
  memcpy(w->counts + i * le, step->counts, le * sizeof *w->counts);
  w->rows[i] = step->num_rows;
  if (step->num_rows) {
    if (step->source_rank)
      memcpy(w->src + w->buf_rows, step->source_rank, step->num_rows * sizeof *w->src);
    else
      for (uint32_t r = 0; r < step->num_rows; r++)
        w->src[w->buf_rows + r] = -1;
    memcpy(w->ids + w->buf_rows * per_row, step->topk,
           (size_t)step->num_rows * per_row * sizeof *w->ids);
  }
  w->buf_rows = rows;
  w->buf_tokens += step->num_tokens;
  w->nbuf++;
  if (w->nbuf >= w->opts.steps_per_chunk)
    return eplb_trace_writer_flush(w);
  return EPLB_OK;
}

uint64_t eplb_trace_writer_num_steps(const eplb_trace_writer_t *w) {
  return w ? w->steps_disk + w->nbuf : 0;
}

eplb_status_t eplb__trace_writer_put_chunk(eplb_trace_writer_t *w, const eplb__chunk_header_t *h,
                                           const uint8_t *payload) {
  eplb_status_t st = eplb_trace_writer_flush(w);
  if (st != EPLB_OK)
    return st;
  uint8_t head[EPLB__CHUNK_HEADER_SIZE];
  eplb__chunk_header_t c = *h;
  c.first_step = w->steps_disk;
  eplb__chunk_header_encode(&c, head);
  if (eplb__pwrite_all(w->fd, head, sizeof head, w->offset) != 0 ||
      eplb__pwrite_all(w->fd, payload, h->payload_len, w->offset + sizeof head) != 0)
    return io_error(w, "write");
  w->offset += sizeof head + h->payload_len;
  w->steps_disk += h->num_steps;
  return EPLB_OK;
}

/* Allocates the handle and its per-chunk buffers (no file yet). */
static eplb_status_t writer_alloc(const char *path, const eplb_trace_meta_t *meta,
                                  const eplb_trace_writer_options_t *opts,
                                  eplb_trace_writer_t **out) {
  eplb_trace_writer_t *w = eplb__calloc(1, sizeof *w);
  if (!w)
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
  w->fd = -1;
  w->tmp_slot = -1;
  w->meta = *meta;
  if (opts)
    w->opts = *opts;
  else
    eplb_trace_writer_options_default(&w->opts);
  if (w->opts.steps_per_chunk == 0)
    w->opts.steps_per_chunk = 1;
  /* Never buffer more steps than one chunk may hold. */
  uint32_t max_steps =
      (uint32_t)(EPLB__CHUNK_MAX_RAW / eplb__steps_raw_size(meta, 1, meta->topk > 0, 0));
  if (w->opts.steps_per_chunk > max_steps)
    w->opts.steps_per_chunk = max_steps;
  size_t spc = w->opts.steps_per_chunk;
  size_t le = (size_t)meta->num_layers * meta->num_experts;
  w->path = eplb__strdup(path);
  w->tokens = eplb__malloc_array(spc, sizeof *w->tokens);
  w->rows = eplb__malloc_array(spc, sizeof *w->rows);
  w->counts = eplb__malloc_array(spc * le, sizeof *w->counts);
  w->seen = eplb__calloc(meta->num_experts, sizeof *w->seen);
  if (!w->path || !w->tokens || !w->rows || !w->counts || !w->seen) {
    eplb_trace_writer_destroy(w);
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
  }
  *out = w;
  return EPLB_OK;
}

/* Writes the file header and the META chunk at offset 0. */
static eplb_status_t write_head(eplb_trace_writer_t *w) {
  uint8_t head[EPLB__TRACE_FILE_HEADER_SIZE];
  eplb__trace_file_header_encode(head);
  if (eplb__pwrite_all(w->fd, head, sizeof head, 0) != 0)
    return io_error(w, "write");
  w->offset = sizeof head;
  char *json = eplb__trace_meta_to_json(&w->meta);
  if (!json)
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory (metadata)", w->path);
  eplb__chunk_header_t h = {.type = EPLB__CHUNK_META};
  eplb_status_t st = write_chunk(w, &h, (const uint8_t *)json, strlen(json));
  free(json);
  return st;
}

static eplb_status_t check_meta(const eplb_trace_meta_t *meta, const char *path) {
  if (!meta)
    return eplb__error(EPLB_EINVAL, "traces", "%s: metadata must not be NULL", path);
  char what[300];
  snprintf(what, sizeof what, "%s: metadata", path);
  return eplb__trace_meta_check(meta, what);
}

static eplb_status_t check_opts(const eplb_trace_writer_options_t *o, const char *path) {
  if (o && (o->compression_level < ZSTD_minCLevel() || o->compression_level > ZSTD_maxCLevel()))
    return eplb__error(EPLB_EINVAL, "traces", "%s: compression_level %d out of range %d..%d", path,
                       o->compression_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  return EPLB_OK;
}

/* The caller's metadata and options (either may be NULL) as this library's
 * structs in *m and *o, and *meta and *opts pointing to them. */
static eplb_status_t take_args(const eplb_trace_meta_t **meta,
                               const eplb_trace_writer_options_t **opts, eplb_trace_meta_t *m,
                               eplb_trace_writer_options_t *o) {
  eplb_status_t st = EPLB_OK;
  if (*meta && (st = EPLB__OPTS_TAKE(*m, *meta, eplb_trace_meta_default, "eplb_trace_meta_t",
                                     "traces")) == EPLB_OK)
    *meta = m;
  if (st == EPLB_OK && *opts &&
      (st = EPLB__OPTS_TAKE(*o, *opts, eplb_trace_writer_options_default,
                            "eplb_trace_writer_options_t", "traces")) == EPLB_OK)
    *opts = o;
  return st;
}

eplb_status_t eplb_trace_writer_create(const char *path, const eplb_trace_meta_t *meta,
                                       const eplb_trace_writer_options_t *opts,
                                       eplb_trace_writer_t **out) {
  static atomic_uint counter;
  eplb_trace_writer_t *w = NULL;
  eplb_trace_meta_t m;
  eplb_trace_writer_options_t o;
  eplb_status_t st;
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "traces", "writer_create: path and out must not be NULL");
  *out = NULL;
  if ((st = take_args(&meta, &opts, &m, &o)) != EPLB_OK)
    return st;
  if ((st = check_meta(meta, path)) != EPLB_OK || (st = check_opts(opts, path)) != EPLB_OK ||
      (st = eplb__check_output(path, "traces")) != EPLB_OK ||
      (st = writer_alloc(path, meta, opts, &w)) != EPLB_OK)
    return st;
  const char *target = path;
  if (w->opts.atomic) {
    size_t n = strlen(path) + 64;
    if (!(w->tmp_path = eplb__malloc(n))) {
      st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
      goto fail;
    }
    char suffix[16];
    snprintf(suffix, sizeof suffix, "%u", atomic_fetch_add(&counter, 1u));
    eplb__tmp_name(w->tmp_path, n, path, suffix);
    target = w->tmp_path;
  }
  w->fd =
      open(target, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (w->opts.atomic ? O_EXCL : 0), 0644);
  if (w->fd < 0) {
    st = eplb__error(EPLB_EIO, "traces", "%s: cannot create: %s", target, strerror(errno));
    goto fail;
  }
  if (w->tmp_path)
    w->tmp_slot = eplb__tmp_register(w->tmp_path);
  if ((st = write_head(w)) != EPLB_OK)
    goto fail;
  *out = w;
  return EPLB_OK;
fail:
  if (w->fd < 0) {
    /* Never unlink a name this writer did not create. */
    eplb__free(w->tmp_path);
    w->tmp_path = NULL;
  } else if (!w->opts.atomic) {
    /* An in-place file without its head is no trace: remove it. */
    close(w->fd);
    w->fd = -1;
    unlink(path);
  }
  eplb_trace_writer_destroy(w);
  return st;
}

static int same_shape(const eplb_trace_meta_t *a, const eplb_trace_meta_t *b) {
  return a->num_layers == b->num_layers && a->num_experts == b->num_experts && a->topk == b->topk;
}

eplb_status_t eplb_trace_writer_open_append(const char *path, const eplb_trace_meta_t *meta,
                                            const eplb_trace_writer_options_t *opts,
                                            eplb_trace_writer_t **out) {
  eplb_trace_writer_t *w = NULL;
  eplb_trace_t *t = NULL;
  eplb_status_t st;
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "traces", "open_append: path and out must not be NULL");
  *out = NULL;
  eplb_trace_meta_t m;
  eplb_trace_writer_options_t wo;
  if ((st = take_args(&meta, &opts, &m, &wo)) != EPLB_OK)
    return st;
  if ((meta && (st = check_meta(meta, path)) != EPLB_OK) ||
      (st = check_opts(opts, path)) != EPLB_OK)
    return st;
  if (access(path, F_OK) != 0 && errno == ENOENT) {
    if (!meta)
      return eplb__error(EPLB_EIO, "traces", "%s: cannot open: %s (and no metadata to create it)",
                         path, strerror(ENOENT));
    eplb_trace_writer_options_t o;
    if (opts)
      o = *opts;
    else
      eplb_trace_writer_options_default(&o);
    o.atomic = 0;
    return eplb_trace_writer_create(path, meta, &o, out);
  }
  eplb_trace_open_options_t oo;
  eplb_trace_open_options_default(&oo);
  oo.allow_torn_tail = 1;
  if ((st = eplb_trace_open(path, &oo, &t)) != EPLB_OK)
    goto fail;
  const eplb_trace_meta_t *have = eplb_trace_meta(t);
  if (meta && !same_shape(meta, have)) {
    st = eplb__error(EPLB_ESHAPE, "traces",
                     "%s: file has %" PRIu32 " layers x %" PRIu32 " experts, topk %" PRIu32
                     "; asked for %" PRIu32 " x %" PRIu32 ", topk %" PRIu32,
                     path, have->num_layers, have->num_experts, have->topk, meta->num_layers,
                     meta->num_experts, meta->topk);
    goto fail;
  }
  if ((st = writer_alloc(path, have, opts, &w)) != EPLB_OK)
    goto fail;
  w->steps_disk = eplb_trace_num_steps(t);
  w->offset = eplb__trace_indexed_end(t);
  eplb_trace_close(t);
  t = NULL;
  w->fd = open(path, O_RDWR | O_CLOEXEC);
  if (w->fd < 0) {
    st =
        eplb__error(EPLB_EIO, "traces", "%s: cannot open for appending: %s", path, strerror(errno));
    goto fail;
  }
  struct stat sb;
  if (fstat(w->fd, &sb) != 0) {
    st = io_error(w, "stat");
    goto fail;
  }
  if ((uint64_t)sb.st_size != w->offset) {
    if (ftruncate(w->fd, (off_t)w->offset) != 0) {
      st = io_error(w, "truncating the torn tail");
      goto fail;
    }
    eplb__log(EPLB_LOG_WARN, "traces", "%s: dropped a torn tail of %" PRIu64 " bytes", path,
              (uint64_t)sb.st_size - w->offset);
  }
  *out = w;
  return EPLB_OK;
fail:
  eplb_trace_close(t);
  eplb_trace_writer_destroy(w);
  return st;
}

eplb_status_t eplb_trace_writer_finish(eplb_trace_writer_t *w) {
  if (!w)
    return eplb__error(EPLB_EINVAL, "traces", "finish: writer must not be NULL");
  eplb_status_t st = eplb_trace_writer_flush(w);
  if (st != EPLB_OK)
    return st;
  if (fsync(w->fd) != 0)
    return io_error(w, "fsync");
  if (close(w->fd) != 0) {
    w->fd = -1;
    return io_error(w, "close");
  }
  w->fd = -1;
  if (w->tmp_path) {
    /* The target may have become a FIFO or a device since the create. */
    if ((st = eplb__check_output(w->path, "traces")) != EPLB_OK)
      return st;
    if (rename(w->tmp_path, w->path) != 0)
      return io_error(w, "rename");
    eplb__free(w->tmp_path);
    w->tmp_path = NULL;
    eplb__tmp_unregister(w->tmp_slot);
    w->tmp_slot = -1;
    eplb__tmp_sweep(w->path);
    if ((st = eplb__fsync_dir(w->path)) != EPLB_OK)
      return st;
  }
  w->finished = 1;
  return EPLB_OK;
}

void eplb_trace_writer_destroy(eplb_trace_writer_t *w) {
  if (!w)
    return;
  if (w->fd >= 0) {
    if (!w->tmp_path && !w->finished)
      (void)eplb_trace_writer_flush(w);
    close(w->fd);
  }
  if (w->tmp_path)
    unlink(w->tmp_path);
  eplb__tmp_unregister(w->tmp_slot);
  eplb__free(w->tmp_path);
  eplb__free(w->path);
  eplb__free(w->tokens);
  eplb__free(w->counts);
  eplb__free(w->rows);
  eplb__free(w->src);
  eplb__free(w->ids);
  eplb__free(w->seen);
  eplb__free(w->raw);
  eplb__free(w->out);
  ZSTD_freeCCtx(w->cctx);
  eplb__free(w);
}
