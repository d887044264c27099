/* traces/recover.c — salvaging the intact chunks of a damaged trace. */
#include "traces/traces.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCAN_BLOCK (64u * 1024u)

/* 1 when a complete, verified STEPS chunk starts at pos (its payload is then
 * in b->comp), 0 when not, -1 on a read error or out of memory. */
static int try_chunk(int fd, const char *path, uint64_t pos, uint64_t size,
                     const eplb_trace_meta_t *meta, eplb__chunk_buf_t *b, eplb__chunk_header_t *h,
                     eplb_status_t *fatal) {
  uint8_t raw[EPLB__CHUNK_HEADER_SIZE];
  const char *why;
  eplb__steps_view_t view;
  if (size - pos < sizeof raw)
    return 0;
  if (eplb__pread_all(fd, raw, sizeof raw, pos) != 0) {
    *fatal = eplb__error(EPLB_EIO, "traces", "%s: read failed at offset %" PRIu64 ": %s", path, pos,
                         strerror(errno));
    return -1;
  }
  if (eplb__chunk_header_decode(raw, h) != EPLB__HDR_OK ||
      !eplb__chunk_header_plausible(h, meta, &why) || size - pos - sizeof raw < h->payload_len)
    return 0;
  eplb_status_t st = eplb__chunk_load(b, fd, path, 0, pos, h);
  if (st == EPLB_OK)
    st = eplb__steps_parse(meta, h, b, &view, path, 0, pos);
  if (st == EPLB_ENOMEM || st == EPLB_EIO) {
    *fatal = st;
    return -1;
  }
  return st == EPLB_OK;
}

/* Offset of the next chunk magic at or after `from` (size if none). */
static int find_magic(int fd, uint8_t *blk, uint64_t from, uint64_t size, uint64_t *found) {
  while (size - from >= 4) {
    size_t n = size - from < SCAN_BLOCK ? (size_t)(size - from) : SCAN_BLOCK;
    if (eplb__pread_all(fd, blk, n, from) != 0)
      return -1;
    for (size_t i = 0; i + 4 <= n; i++)
      if (blk[i] == 'E' && blk[i + 1] == 'P' && blk[i + 2] == 'C' && blk[i + 3] == 'K') {
        *found = from + i;
        return 0;
      }
    from += n - 3;
  }
  *found = size;
  return 0;
}

eplb_status_t eplb_trace_recover(const char *in_path, const char *out_path,
                                 eplb_trace_recover_report_t *report) {
  eplb_status_t st = EPLB_OK;
  eplb__chunk_buf_t b = {0};
  eplb_trace_writer_t *w = NULL;
  eplb_trace_recover_report_t rep = {0};
  eplb_trace_meta_t meta;
  uint8_t *blk = NULL;
  uint64_t pos = 0, size = 0;
  struct stat sb;
  if (report)
    memset(report, 0, sizeof *report);
  if (!in_path || !out_path)
    return eplb__error(EPLB_EINVAL, "traces", "recover: paths must not be NULL");
  eplb_status_t cst = eplb__check_input(in_path, "traces");
  if (cst)
    return cst;
  int fd = open(in_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return eplb__error(EPLB_EIO, "traces", "%s: cannot open: %s", in_path, strerror(errno));
  if (fstat(fd, &sb) != 0) {
    st = eplb__error(EPLB_EIO, "traces", "%s: stat failed: %s", in_path, strerror(errno));
    goto done;
  }
  size = (uint64_t)sb.st_size;
  if ((st = eplb__trace_read_head(&b, fd, in_path, size, &meta, &pos)) != EPLB_OK)
    goto done;
  if (!(blk = eplb__malloc(SCAN_BLOCK))) {
    st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", in_path);
    goto done;
  }
  if ((st = eplb_trace_writer_create(out_path, &meta, NULL, &w)) != EPLB_OK)
    goto done;
  int in_bad = 0;
  while (pos < size) {
    eplb__chunk_header_t h;
    int ok = try_chunk(fd, in_path, pos, size, &meta, &b, &h, &st);
    if (ok < 0)
      goto done;
    if (ok) {
      if ((st = eplb__trace_writer_put_chunk(w, &h, b.comp)) != EPLB_OK)
        goto done;
      rep.chunks_ok++;
      rep.steps_recovered += h.num_steps;
      pos += EPLB__CHUNK_HEADER_SIZE + h.payload_len;
      in_bad = 0;
      continue;
    }
    /* One damaged region counts once, however many false magics it holds. */
    if (!in_bad)
      rep.chunks_bad++;
    in_bad = 1;
    uint64_t next;
    if (find_magic(fd, blk, pos + 1, size, &next) != 0) {
      st = eplb__error(EPLB_EIO, "traces", "%s: read failed: %s", in_path, strerror(errno));
      goto done;
    }
    rep.bytes_skipped += next - pos;
    pos = next;
  }
  if ((st = eplb_trace_writer_finish(w)) != EPLB_OK)
    goto done;
  if (rep.chunks_bad)
    eplb__log(EPLB_LOG_WARN, "traces",
              "%s: recovered %" PRIu64 " steps; skipped %" PRIu64 " damaged regions (%" PRIu64
              " bytes)",
              in_path, rep.steps_recovered, rep.chunks_bad, rep.bytes_skipped);
  if (report)
    *report = rep;
done:
  eplb_trace_writer_destroy(w);
  eplb__free(blk);
  eplb__chunk_buf_free(&b);
  close(fd);
  return st;
}
