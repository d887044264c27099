/* traces/traces.h — internal header of the traces module.
 *
 * Sections: native format (byte layout helpers, chunk codec, shared I/O),
 * then the interop section appended by the importers/exporters. The byte
 * layout itself is documented at the top of traces/format.c. */
#ifndef EPLB_TRACES_H
#define EPLB_TRACES_H

#include "core/core.h"
#include "eplb/trace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <zstd.h>

/* ---- native format: constants ------------------------------------------- */

#define EPLB__TRACE_FILE_HEADER_SIZE 16u
#define EPLB__TRACE_VERSION 1u
#define EPLB__CHUNK_HEADER_SIZE 44u
#define EPLB__CHUNK_MAGIC 0x4B435045u /* bytes "EPCK" read as little-endian u32 */
#define EPLB__CHUNK_META 1u
#define EPLB__CHUNK_STEPS 2u
#define EPLB__CHUNK_FLAG_TOPK 0x1u
/* Hostile-input caps: decoded chunk size, and the metadata JSON. */
#define EPLB__CHUNK_MAX_RAW (1u << 30)
#define EPLB__META_MAX_RAW (64u * 1024u)
/* A long-form CSV may imply at most this many steps beyond its rows. */
#define EPLB__CSV_MAX_EMPTY_STEPS (1u << 20)
/* ... and at most max(2^24, 4,096 x its rows) counts (steps x layers x
 * experts): every implied count is written (and a step's layers x experts
 * held in memory), so "0,4095,65534,1" alone would cost 2^28 counts (1 GiB,
 * 3 GB of memory, 16 s) and one at step 2^20 days of writing. */
#define EPLB__CSV_MAX_COUNTS_BASE (1u << 24)
#define EPLB__CSV_MAX_COUNTS_PER_ROW 4096u
#define EPLB__TRACE_MAX_RANKS (1u << 24)

typedef struct eplb__chunk_header {
  uint16_t type;
  uint16_t flags;
  uint64_t first_step;
  uint64_t num_tokens; /* sum of num_tokens over the chunk's steps */
  uint32_t num_steps;
  uint32_t payload_len; /* compressed bytes following the header */
  uint32_t raw_len;     /* decoded bytes */
  uint32_t payload_crc; /* crc32 of the compressed bytes */
} eplb__chunk_header_t;

typedef enum eplb__hdr_result {
  EPLB__HDR_OK = 0,
  EPLB__HDR_BAD_MAGIC = 1,
  EPLB__HDR_BAD_CRC = 2
} eplb__hdr_result_t;

/* ---- native format: byte layout (format.c) ------------------------------ */

uint32_t eplb__crc32(const void *data, size_t len);

void eplb__trace_file_header_encode(uint8_t out[EPLB__TRACE_FILE_HEADER_SIZE]);

/* Serialises h with its header CRC. */
void eplb__chunk_header_encode(const eplb__chunk_header_t *h, uint8_t out[EPLB__CHUNK_HEADER_SIZE]);
/* Parses bytes into h; checks only magic and header CRC. */
eplb__hdr_result_t eplb__chunk_header_decode(const uint8_t in[EPLB__CHUNK_HEADER_SIZE],
                                             eplb__chunk_header_t *h);
/* Structural checks of a STEPS header against the metadata (flags, sizes,
 * caps). Fills *why with a static reason on failure and returns 0. */
int eplb__chunk_header_plausible(const eplb__chunk_header_t *h, const eplb_trace_meta_t *meta,
                                 const char **why);

/* Metadata: validation of a caller's struct (EPLB_EINVAL naming `what` and
 * the field), JSON encoding and decoding with field-level detail. */
eplb_status_t eplb__trace_meta_check(const eplb_trace_meta_t *meta, const char *what);
/* Returns a jansson-allocated string (free with free()) or NULL. */
char *eplb__trace_meta_to_json(const eplb_trace_meta_t *meta);
eplb_status_t eplb__trace_meta_from_json(const uint8_t *buf, size_t len, const char *path,
                                         eplb_trace_meta_t *meta);

/* Decoded STEPS payload; pointers point into the decoded buffer. */
typedef struct eplb__steps_view {
  uint32_t num_steps;
  uint64_t total_rows;
  const uint32_t *num_tokens; /* [n] */
  const uint32_t *counts;     /* [n][L][E] */
  const uint32_t *num_rows;   /* [n], NULL without top-k */
  const int32_t *source_rank; /* [rows] */
  const uint16_t *ids;        /* [rows][L][k] */
} eplb__steps_view_t;

/* Exact decoded size of a STEPS payload; 0 on overflow or beyond the cap. */
size_t eplb__steps_raw_size(const eplb_trace_meta_t *meta, uint32_t num_steps, int has_topk,
                            uint64_t total_rows);

/* Stored form of the words (see format.c): writes byte b of word i to
 * dst[b * stride + i], the word being src[i], or zigzag(src[i] - prev[i])
 * when prev is not NULL. */
void eplb__planes_put(const uint32_t *src, const uint32_t *prev, size_t count, uint8_t *dst,
                      size_t stride);

/* In-place little-endian <-> host conversion (no-op on little-endian hosts). */
void eplb__le32_array(uint32_t *v, size_t n);
void eplb__le16_array(uint16_t *v, size_t n);

/* ---- native format: I/O helpers (format.c) ------------------------------ */

/* Reads exactly n bytes at off. Returns 0, 1 (end of file first) or -1 (errno). */
int eplb__pread_all(int fd, void *buf, size_t n, uint64_t off);
/* Writes exactly n bytes at off, retrying on EINTR and short writes. 0 or -1 (errno). */
int eplb__pwrite_all(int fd, const void *buf, size_t n, uint64_t off);

/* Reusable buffers for reading one chunk's payload. */
typedef struct eplb__chunk_buf {
  uint8_t *comp;
  size_t comp_cap;
  uint8_t *raw; /* as decompressed */
  size_t raw_cap;
  uint8_t *plain; /* STEPS: byte planes undone, the layout of format.c */
  size_t plain_cap;
  ZSTD_DCtx *dctx;
} eplb__chunk_buf_t;

/* Undoes the byte planes of a decompressed STEPS payload (b->raw) into
 * b->plain, converts it from little-endian on big-endian hosts, validates it
 * and fills *view (pointing into b->plain). Errors name path, chunk, offset. */
eplb_status_t eplb__steps_parse(const eplb_trace_meta_t *meta, const eplb__chunk_header_t *h,
                                eplb__chunk_buf_t *b, eplb__steps_view_t *view, const char *path,
                                uint64_t chunk_index, uint64_t offset);

void eplb__chunk_buf_free(eplb__chunk_buf_t *b);
/* Reads the payload of the chunk whose header is at `offset`, checks its
 * CRC and decompresses it into b->raw (h->raw_len bytes). */
eplb_status_t eplb__chunk_load(eplb__chunk_buf_t *b, int fd, const char *path, uint64_t chunk_index,
                               uint64_t offset, const eplb__chunk_header_t *h);

/* Reads and validates the file header and the META chunk of an open file of
 * `size` bytes. On success *meta is filled and *end is the offset after the
 * META chunk. */
eplb_status_t eplb__trace_read_head(eplb__chunk_buf_t *b, int fd, const char *path, uint64_t size,
                                    eplb_trace_meta_t *meta, uint64_t *end);

/* ---- native format: reader internals (reader.c) ------------------------- */

/* Offset just after the last complete chunk indexed (where an appender
 * continues). */
uint64_t eplb__trace_indexed_end(const eplb_trace_t *trace);

/* ---- native format: writer internals (writer.c) ------------------------- */

/* Writes an already-compressed, verified chunk (recovery), numbering it at
 * the writer's next step. Buffered steps are flushed first. */
eplb_status_t eplb__trace_writer_put_chunk(eplb_trace_writer_t *w, const eplb__chunk_header_t *h,
                                           const uint8_t *payload);

/* ---- interop ------------------------------------------------------------ */
/* Interchange formats (npy.c, csv.c, convert.c, loads.c, loads_read.c) and
 * the synthetic generator (synth.c; its PRNG is core's eplb__rng). Atomic
 * output files are core's eplb__outfile. */

/* Format of an input path from its suffix: .npy is NPY counts, .csv the
 * long or matrix CSV by its first line (eplb__csv_sniff, whose errors it
 * returns), anything else native. */
eplb_status_t eplb__trace_format_guess(const char *path, eplb_trace_format_t *fmt);
/* EPLB_ERANGE naming path unless 1 <= L <= EPLB_TRACE_MAX_LAYERS and
 * 1 <= E <= EPLB_TRACE_MAX_EXPERTS. */
eplb_status_t eplb__check_shape(const char *path, uint64_t L, uint64_t E);

/* NPY arrays (format versions 1.0, 2.0, 3.0) of integer dtypes, read as a
 * stream of elements in C order. */
#define EPLB__NPY_MAX_DIMS 32u

typedef struct eplb__npy {
  FILE *f;
  const char *path; /* borrowed, for error details */
  uint32_t ndim;
  uint64_t shape[EPLB__NPY_MAX_DIMS];
  uint64_t count;       /* product of shape */
  uint64_t data_offset; /* bytes before the first element */
  uint64_t next;        /* index of the element the next read returns */
  unsigned itemsize;
  bool is_signed;
  bool big_endian;
  char descr[8];
} eplb__npy_t;

/* Opens and validates header and file size: EPLB_EIO, EPLB_EFORMAT (not NPY,
 * bad header, fortran order, unsupported dtype, trailing bytes),
 * EPLB_ETRUNCATED (file shorter than its shape says). */
eplb_status_t eplb__npy_open(const char *path, eplb__npy_t *npy);
/* Reads the next n elements. A uint64 above INT64_MAX is EPLB_ERANGE. */
eplb_status_t eplb__npy_read(eplb__npy_t *npy, size_t n, int64_t *out);
/* Positions the stream at element `index` (<= count). */
eplb_status_t eplb__npy_seek(eplb__npy_t *npy, uint64_t index);
void eplb__npy_close(eplb__npy_t *npy);
/* Writes a version 1.0 header padded to a multiple of 64 bytes.
 * The data that follows must be little-endian `descr` elements. */
eplb_status_t eplb__npy_write_header(FILE *f, const char *path, const char *descr, uint32_t ndim,
                                     const uint64_t *shape);

/* CSV. Every error detail is "FILE:LINE:COLUMN: problem". */
#define EPLB__CSV_LONG_HEADER "step,layer,expert,count"

/* *is_long = 1 when the first line is the long-form header. */
eplb_status_t eplb__csv_sniff(const char *path, bool *is_long);
/* A matrix of non-negative finite numbers, rows = layers. */
eplb_status_t eplb__csv_read_matrix(const char *path, eplb_loads_t **out);

typedef struct eplb__csv_entry {
  uint64_t step;
  uint64_t line;
  uint32_t layer, expert, count;
} eplb__csv_entry_t;

typedef struct eplb__csv_long {
  uint64_t num_steps;               /* max step + 1 */
  uint32_t num_layers, num_experts; /* max + 1 */
  size_t num_entries;
  eplb__csv_entry_t *entries; /* sorted by (step, layer, expert), no duplicates */
} eplb__csv_long_t;

/* Reads a long-form CSV ("step,layer,expert,count" header). Duplicated
 * (step, layer, expert) is EPLB_EFORMAT; ids past the trace limits, steps or
 * counts implied beyond the limits above EPLB_ERANGE. */
eplb_status_t eplb__csv_read_long(const char *path, eplb__csv_long_t *out);
void eplb__csv_long_free(eplb__csv_long_t *csv);

/* ---- JSON reports (json_text.c) ------------------------------------------ */

/* The text every eplb_*_json writer hands out, made from the report's tree
 * (its eplb_*_tree, written once): j compact with reals to 17 significant
 * digits, like snprintf into buf[size] (NUL-terminated when size > 0; buf
 * NULL only with size 0), the full length without the NUL in *len
 * (optional). j (released here) is the tree a builder made with status st;
 * a failed st is returned as is. EPLB_EINVAL ("<what>: NULL argument") for a
 * NULL buf with size > 0; EPLB_ENOMEM when the text cannot be made. module
 * names the caller in details. jansson.h stays out of this header: the
 * modules that include it without writing JSON need not see jansson. */
struct json_t;
eplb_status_t eplb__json_text(eplb_status_t st, struct json_t *j, const char *module,
                              const char *what, char *buf, size_t size, size_t *len);

#endif /* EPLB_TRACES_H */
