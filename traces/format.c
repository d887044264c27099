/* traces/format.c — byte layout of the native trace format (.eplbt), CRC,
 * chunk header codec, metadata JSON, STEPS payload validation, shared I/O.
 *
 * Byte layout (all integers little-endian, (de)serialised byte by byte):
 *
 *   File header, 16 bytes:
 *     0  char[8] magic "EPLBTRC\0"
 *     8  u32     version = 1     (other values: EPLB_EFORMAT "unsupported version N")
 *    12  u32     flags = 0       (other values: EPLB_EFORMAT)
 *
 *   Then chunks, back to back. Chunk header, 44 bytes:
 *     0  u32 magic 'EPCK' (bytes 45 50 43 4B)
 *     4  u16 type          1 = META, 2 = STEPS
 *     6  u16 flags         bit0 = STEPS chunk has top-k rows; other bits 0
 *     8  u64 first_step    index of the chunk's first step (META: 0)
 *    16  u64 num_tokens    sum of num_tokens over the chunk's steps (META: 0)
 *    24  u32 num_steps     steps in the chunk (STEPS: >= 1; META: 0)
 *    28  u32 payload_len   compressed payload bytes following the header
 *    32  u32 raw_len       decoded payload bytes (<= 1 GiB)
 *    36  u32 payload_crc   zlib crc32 of the payload_len compressed bytes
 *    40  u32 header_crc    zlib crc32 of header bytes 0..39
 *   followed by payload_len bytes: one zstd frame (content size recorded).
 *
 *   The first chunk is META; its payload is a JSON object
 *     {"format": "eplb-trace", "version": 1, "layers": L, "experts": E,
 *      "topk": k, "ranks": R, "phase": "decode", "model": "...", "origin": "..."}
 *   Every later chunk is STEPS. Consecutive STEPS chunks have contiguous
 *   first_step, starting at 0. A STEPS payload of n steps decodes to:
 *     u32 num_tokens[n]
 *     u32 counts[n][L][E]
 *     if flags.bit0:
 *       u32 num_rows[n]
 *       i32 source_rank[sum num_rows]      (-1 = unknown)
 *       u16 ids[sum num_rows][L][k]        (< E)
 *   The 4-byte arrays come before the u16 ids so that every array is
 *   naturally aligned inside the decoded buffer (readers point into it).
 *   raw_len must equal this exact size.
 *   Stored form: the bytes that are compressed (and that zstd returns)
 *   differ from this layout in the leading m = n * (1 + L*E) u32 words
 *   (num_tokens and counts): the counts of step s > 0 of the chunk are
 *   replaced by zigzag(counts[s] - counts[s-1]) element-wise (mod 2^32,
 *   zigzag(d) = (d << 1) ^ (d >> 31) on the signed difference), and then the
 *   m words are stored as four byte planes: byte 0 of all m words, then
 *   byte 1, byte 2, byte 3. The rest follows unchanged. Counts are small and
 *   change slowly between steps, so the high planes are nearly constant:
 *   zstd level 1 runs ~6x faster and the output is ~1.8x smaller than on the
 *   interleaved words.
 *
 * A crash can only cut the file short: a torn last chunk is detected by its
 * length, any other damage by the checksums. */
#include "traces/traces.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static const unsigned char file_magic[8] = {'E', 'P', 'L', 'B', 'T', 'R', 'C', '\0'};

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) {
  return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

uint32_t eplb__crc32(const void *data, size_t len) {
  /* zlib takes uInt lengths: feed large buffers in pieces. */
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef *p = data;
  while (len > 0) {
    uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
    crc = crc32(crc, p, n);
    p += n;
    len -= n;
  }
  return (uint32_t)crc;
}

void eplb__trace_file_header_encode(uint8_t out[EPLB__TRACE_FILE_HEADER_SIZE]) {
  memcpy(out, file_magic, 8);
  put32(out + 8, EPLB__TRACE_VERSION);
  put32(out + 12, 0);
}

static eplb_status_t file_header_check(const uint8_t *buf, size_t len, const char *path) {
  if (len == 0)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: empty file, not an eplb trace", path);
  size_t m = len < 8 ? len : 8;
  if (memcmp(buf, file_magic, m) != 0)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: not an eplb trace (bad magic)", path);
  if (len < EPLB__TRACE_FILE_HEADER_SIZE)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: file header cut short (%zu of 16 bytes)", path,
                       len);
  uint32_t version = get32(buf + 8), flags = get32(buf + 12);
  if (version != EPLB__TRACE_VERSION)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: unsupported version %" PRIu32, path, version);
  if (flags != 0)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: unsupported file flags 0x%" PRIx32, path,
                       flags);
  return EPLB_OK;
}

void eplb__chunk_header_encode(const eplb__chunk_header_t *h,
                               uint8_t out[EPLB__CHUNK_HEADER_SIZE]) {
  put32(out, EPLB__CHUNK_MAGIC);
  put16(out + 4, h->type);
  put16(out + 6, h->flags);
  put64(out + 8, h->first_step);
  put64(out + 16, h->num_tokens);
  put32(out + 24, h->num_steps);
  put32(out + 28, h->payload_len);
  put32(out + 32, h->raw_len);
  put32(out + 36, h->payload_crc);
  put32(out + 40, eplb__crc32(out, 40));
}

eplb__hdr_result_t eplb__chunk_header_decode(const uint8_t in[EPLB__CHUNK_HEADER_SIZE],
                                             eplb__chunk_header_t *h) {
  if (get32(in) != EPLB__CHUNK_MAGIC)
    return EPLB__HDR_BAD_MAGIC;
  if (get32(in + 40) != eplb__crc32(in, 40))
    return EPLB__HDR_BAD_CRC;
  h->type = get16(in + 4);
  h->flags = get16(in + 6);
  h->first_step = get64(in + 8);
  h->num_tokens = get64(in + 16);
  h->num_steps = get32(in + 24);
  h->payload_len = get32(in + 28);
  h->raw_len = get32(in + 32);
  h->payload_crc = get32(in + 36);
  return EPLB__HDR_OK;
}

size_t eplb__steps_raw_size(const eplb_trace_meta_t *meta, uint32_t num_steps, int has_topk,
                            uint64_t total_rows) {
  /* L, E, k are bounded by the metadata limits, so the per-step products
   * fit in 64 bits; only the multiplications by counts can overflow. */
  uint64_t le = (uint64_t)meta->num_layers * meta->num_experts;
  uint64_t per_step = 4 + 4 * le + (has_topk ? 4 : 0);
  uint64_t cap = EPLB__CHUNK_MAX_RAW;
  if (num_steps > cap / per_step)
    return 0;
  uint64_t size = per_step * num_steps;
  if (has_topk) {
    uint64_t per_row = 4 + 2 * (uint64_t)meta->num_layers * meta->topk;
    if (total_rows > (cap - size) / per_row)
      return 0;
    size += per_row * total_rows;
  }
  return (size_t)size;
}

int eplb__chunk_header_plausible(const eplb__chunk_header_t *h, const eplb_trace_meta_t *meta,
                                 const char **why) {
  int topk = (h->flags & EPLB__CHUNK_FLAG_TOPK) != 0;
  if (h->type != EPLB__CHUNK_STEPS)
    *why = h->type == EPLB__CHUNK_META ? "second metadata chunk" : "unknown chunk type";
  else if (h->flags & ~EPLB__CHUNK_FLAG_TOPK)
    *why = "unknown chunk flags";
  else if (topk && meta->topk == 0)
    *why = "top-k rows in a trace without topk";
  else if (h->num_steps == 0)
    *why = "chunk with no steps";
  else if (h->raw_len > EPLB__CHUNK_MAX_RAW)
    *why = "decoded size beyond 1 GiB";
  else if (h->payload_len == 0 || h->payload_len > ZSTD_compressBound(h->raw_len))
    *why = "payload length does not match decoded size";
  else {
    size_t min = eplb__steps_raw_size(meta, h->num_steps, topk, 0);
    if (min == 0 || h->raw_len < min || (!topk && h->raw_len != min))
      *why = "decoded size does not match step count";
    else
      return 1;
  }
  return 0;
}

void eplb__le32_array(uint32_t *v, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (size_t i = 0; i < n; i++)
    v[i] = __builtin_bswap32(v[i]);
#else
  (void)v;
  (void)n;
#endif
}

void eplb__le16_array(uint16_t *v, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (size_t i = 0; i < n; i++)
    v[i] = __builtin_bswap16(v[i]);
#else
  (void)v;
  (void)n;
#endif
}

/* Byte planes sit on the append and read paths of every step (~16 K words
 * per step of a 61 x 256 model): SSE2, baseline on x86-64, does 16 words per
 * iteration; the scalar loops finish the tail and serve other targets. */
static inline uint32_t zigzag(uint32_t cur, uint32_t prev) {
  uint32_t d = cur - prev;
  return (d << 1) ^ (0u - (d >> 31));
}

void eplb__planes_put(const uint32_t *src, const uint32_t *prev, size_t count, uint8_t *dst,
                      size_t stride) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi32(0xFF);
  for (; i + 16 <= count; i += 16) {
    __m128i w[4];
    for (int j = 0; j < 4; j++) {
      w[j] = _mm_loadu_si128((const __m128i *)(const void *)(src + i + 4 * j));
      if (prev) {
        __m128i d =
            _mm_sub_epi32(w[j], _mm_loadu_si128((const __m128i *)(const void *)(prev + i + 4 * j)));
        w[j] = _mm_xor_si128(_mm_slli_epi32(d, 1), _mm_srai_epi32(d, 31));
      }
    }
    for (int k = 0; k < 4; k++) {
      /* Values are < 256 after the mask, so the saturating packs are exact. */
      __m128i ab = _mm_packs_epi32(_mm_and_si128(w[0], mask), _mm_and_si128(w[1], mask));
      __m128i cd = _mm_packs_epi32(_mm_and_si128(w[2], mask), _mm_and_si128(w[3], mask));
      _mm_storeu_si128((__m128i *)(void *)(dst + (size_t)k * stride + i), _mm_packus_epi16(ab, cd));
      for (int j = 0; j < 4; j++)
        w[j] = _mm_srli_epi32(w[j], 8);
    }
  }
#endif
  uint8_t *p0 = dst, *p1 = dst + stride, *p2 = dst + 2 * stride, *p3 = dst + 3 * stride;
  for (; i < count; i++) {
    uint32_t v = prev ? zigzag(src[i], prev[i]) : src[i];
    p0[i] = (uint8_t)v;
    p1[i] = (uint8_t)(v >> 8);
    p2[i] = (uint8_t)(v >> 16);
    p3[i] = (uint8_t)(v >> 24);
  }
}

static void undelta(uint32_t *cur, const uint32_t *prev, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t z = cur[i];
    cur[i] = prev[i] + ((z >> 1) ^ (0u - (z & 1u)));
  }
}

static void planes_get(const uint8_t *src, size_t count, uint32_t *dst) {
  const uint8_t *p0 = src, *p1 = src + count, *p2 = src + 2 * count, *p3 = src + 3 * count;
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= count; i += 16) {
    __m128i b0 = _mm_loadu_si128((const __m128i *)(const void *)(p0 + i));
    __m128i b1 = _mm_loadu_si128((const __m128i *)(const void *)(p1 + i));
    __m128i b2 = _mm_loadu_si128((const __m128i *)(const void *)(p2 + i));
    __m128i b3 = _mm_loadu_si128((const __m128i *)(const void *)(p3 + i));
    __m128i lo01 = _mm_unpacklo_epi8(b0, b1), hi01 = _mm_unpackhi_epi8(b0, b1);
    __m128i lo23 = _mm_unpacklo_epi8(b2, b3), hi23 = _mm_unpackhi_epi8(b2, b3);
    __m128i *d = (__m128i *)(void *)(dst + i);
    _mm_storeu_si128(d, _mm_unpacklo_epi16(lo01, lo23));
    _mm_storeu_si128(d + 1, _mm_unpackhi_epi16(lo01, lo23));
    _mm_storeu_si128(d + 2, _mm_unpacklo_epi16(hi01, hi23));
    _mm_storeu_si128(d + 3, _mm_unpackhi_epi16(hi01, hi23));
  }
#endif
  for (; i < count; i++)
    dst[i] = (uint32_t)p0[i] | (uint32_t)p1[i] << 8 | (uint32_t)p2[i] << 16 | (uint32_t)p3[i] << 24;
}

static int grow(uint8_t **buf, size_t *cap, size_t need) {
  if (*cap >= need && *buf)
    return 0;
  /* Fresh allocation: old contents are never needed. */
  uint8_t *p = eplb__malloc(need);
  if (!p)
    return -1;
  eplb__free(*buf);
  *buf = p;
  *cap = need;
  return 0;
}

eplb_status_t eplb__steps_parse(const eplb_trace_meta_t *meta, const eplb__chunk_header_t *h,
                                eplb__chunk_buf_t *b, eplb__steps_view_t *view, const char *path,
                                uint64_t chunk_index, uint64_t offset) {
  uint32_t n = h->num_steps;
  /* The header's raw_len was checked against the minimum size, so the
   * planar words lie inside the buffer. */
  size_t m = (size_t)n * (1 + (size_t)meta->num_layers * meta->num_experts);
  if (grow(&b->plain, &b->plain_cap, h->raw_len))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory decoding chunk %" PRIu64, path,
                       chunk_index);
  uint8_t *raw = b->plain;
  planes_get(b->raw, m, (uint32_t *)(void *)raw);
  memcpy(raw + 4 * m, b->raw + 4 * m, h->raw_len - 4 * m);
  int has_topk = (h->flags & EPLB__CHUNK_FLAG_TOPK) != 0;
  size_t le = (size_t)meta->num_layers * meta->num_experts;
  uint32_t *tokens = (uint32_t *)(void *)raw;
  uint32_t *counts = tokens + n;
  for (uint32_t s = 1; s < n; s++)
    undelta(counts + s * le, counts + (s - 1) * le, le);
  uint32_t *rows = NULL;
  int32_t *src = NULL;
  uint16_t *ids = NULL;
  uint64_t total_rows = 0;
  if (has_topk) {
    rows = counts + (size_t)n * le;
    eplb__le32_array(rows, n);
    for (uint32_t s = 0; s < n; s++)
      total_rows += rows[s];
  }
  size_t want = eplb__steps_raw_size(meta, n, has_topk, total_rows);
  if (want == 0 || want != h->raw_len)
    return eplb__error(EPLB_EFORMAT, "traces",
                       "%s: chunk %" PRIu64 " at offset %" PRIu64 ": decoded size %" PRIu32
                       " does not match its %" PRIu64 " top-k rows",
                       path, chunk_index, offset, h->raw_len, total_rows);
  uint64_t tok = 0;
  for (uint32_t s = 0; s < n; s++)
    tok += tokens[s];
  if (tok != h->num_tokens)
    return eplb__error(EPLB_EFORMAT, "traces",
                       "%s: chunk %" PRIu64 " at offset %" PRIu64 ": token total %" PRIu64
                       " differs from its header (%" PRIu64 ")",
                       path, chunk_index, offset, tok, h->num_tokens);
  if (has_topk) {
    src = (int32_t *)(void *)(rows + n);
    ids = (uint16_t *)(void *)(src + total_rows);
    eplb__le32_array((uint32_t *)(void *)src, (size_t)total_rows);
    size_t nid = (size_t)total_rows * meta->num_layers * meta->topk;
    eplb__le16_array(ids, nid);
    for (uint64_t r = 0; r < total_rows; r++) {
      if (src[r] < -1 || (meta->num_ranks && src[r] >= (int64_t)meta->num_ranks))
        return eplb__error(EPLB_ERANGE, "traces",
                           "%s: chunk %" PRIu64 " at offset %" PRIu64 ": source_rank %" PRId32
                           " of row %" PRIu64 " out of range",
                           path, chunk_index, offset, src[r], r);
    }
    uint16_t max = 0;
    for (size_t i = 0; i < nid; i++)
      max = ids[i] > max ? ids[i] : max;
    if (nid && max >= meta->num_experts)
      return eplb__error(EPLB_ERANGE, "traces",
                         "%s: chunk %" PRIu64 " at offset %" PRIu64 ": expert id %u >= %" PRIu32
                         " experts",
                         path, chunk_index, offset, (unsigned)max, meta->num_experts);
  }
  view->num_steps = n;
  view->total_rows = total_rows;
  view->num_tokens = tokens;
  view->counts = counts;
  view->num_rows = rows;
  view->source_rank = src;
  view->ids = ids;
  return EPLB_OK;
}

/* ---- metadata ------------------------------------------------------------ */

static const char *const phase_names[] = {"unknown", "prefill", "decode", "mixed"};

const char *eplb_trace_phase_str(eplb_trace_phase_t phase) {
  unsigned p = (unsigned)phase;
  return p < sizeof phase_names / sizeof phase_names[0] ? phase_names[p] : NULL;
}

eplb_status_t eplb_trace_phase_parse(const char *name, eplb_trace_phase_t *out) {
  for (unsigned p = 0; name && out && p < sizeof phase_names / sizeof phase_names[0]; p++)
    if (!strcmp(name, phase_names[p])) {
      *out = (eplb_trace_phase_t)p;
      return EPLB_OK;
    }
  return eplb__error(EPLB_EINVAL, "traces",
                     "unknown phase '%s' (prefill, decode, mixed or unknown)", name ? name : "");
}

/* Canonical names first (indexed by the enum), then the aliases. */
static const struct {
  const char *name;
  eplb_trace_format_t format;
} format_names[] = {
    {"auto", EPLB_TRACE_FORMAT_AUTO},
    {"eplbt", EPLB_TRACE_FORMAT_NATIVE},
    {"counts-npy", EPLB_TRACE_FORMAT_NPY_COUNTS},
    {"topk-npy", EPLB_TRACE_FORMAT_NPY_TOPK},
    {"csv", EPLB_TRACE_FORMAT_CSV},
    {"csv-matrix", EPLB_TRACE_FORMAT_CSV_MATRIX},
    {"native", EPLB_TRACE_FORMAT_NATIVE},
    {"npy-counts", EPLB_TRACE_FORMAT_NPY_COUNTS},
    {"npy", EPLB_TRACE_FORMAT_NPY_COUNTS},
    {"npy-topk", EPLB_TRACE_FORMAT_NPY_TOPK},
};

const char *eplb_trace_format_str(eplb_trace_format_t format) {
  unsigned f = (unsigned)format;
  return f <= EPLB_TRACE_FORMAT_CSV_MATRIX ? format_names[f].name : NULL;
}

eplb_status_t eplb_trace_format_parse(const char *name, eplb_trace_format_t *out) {
  for (size_t i = 0; name && out && i < sizeof format_names / sizeof format_names[0]; i++)
    if (!strcmp(name, format_names[i].name)) {
      *out = format_names[i].format;
      return EPLB_OK;
    }
  return eplb__error(EPLB_EINVAL, "traces",
                     "unknown format '%s' (eplbt, topk-npy, counts-npy, csv, csv-matrix)",
                     name ? name : "");
}

static void trace_meta_defaults(eplb_trace_meta_t *meta) {
  if (meta)
    memset(meta, 0, sizeof *meta);
}

eplb_status_t eplb_trace_meta_init(eplb_trace_meta_t *meta, size_t size) {
  eplb_trace_meta_t d;
  trace_meta_defaults(&d);
  return eplb__opts_init(meta, size, &d, sizeof d, "eplb_trace_meta_t");
}

eplb_status_t eplb__trace_meta_check(const eplb_trace_meta_t *m, const char *what) {
  if (m->num_layers < 1 || m->num_layers > EPLB_TRACE_MAX_LAYERS)
    return eplb__error(EPLB_EINVAL, "traces", "%s: layers = %" PRIu32 " out of range 1..%u", what,
                       m->num_layers, EPLB_TRACE_MAX_LAYERS);
  if (m->num_experts < 1 || m->num_experts > EPLB_TRACE_MAX_EXPERTS)
    return eplb__error(EPLB_EINVAL, "traces", "%s: experts = %" PRIu32 " out of range 1..%u", what,
                       m->num_experts, EPLB_TRACE_MAX_EXPERTS);
  if (m->topk > EPLB_TRACE_MAX_TOPK || m->topk > m->num_experts)
    return eplb__error(EPLB_EINVAL, "traces",
                       "%s: topk = %" PRIu32 " out of range 0..%u (and <= experts)", what, m->topk,
                       EPLB_TRACE_MAX_TOPK);
  if (m->num_ranks > EPLB__TRACE_MAX_RANKS)
    return eplb__error(EPLB_EINVAL, "traces", "%s: ranks = %" PRIu32 " out of range 0..%u", what,
                       m->num_ranks, EPLB__TRACE_MAX_RANKS);
  if (!eplb_trace_phase_str(m->phase))
    return eplb__error(EPLB_EINVAL, "traces", "%s: phase = %d unknown", what, (int)m->phase);
  if (!memchr(m->model, '\0', sizeof m->model))
    return eplb__error(EPLB_EINVAL, "traces", "%s: model name not NUL-terminated", what);
  if (!memchr(m->origin, '\0', sizeof m->origin))
    return eplb__error(EPLB_EINVAL, "traces", "%s: origin not NUL-terminated", what);
  return EPLB_OK;
}

char *eplb__trace_meta_to_json(const eplb_trace_meta_t *m) {
  json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:s, s:s, s:s}", "format", "eplb-trace",
                        "version", (int)EPLB__TRACE_VERSION, "layers", (json_int_t)m->num_layers,
                        "experts", (json_int_t)m->num_experts, "topk", (json_int_t)m->topk, "ranks",
                        (json_int_t)m->num_ranks, "phase", eplb_trace_phase_str(m->phase), "model",
                        m->model, "origin", m->origin);
  if (!o)
    return NULL;
  char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(o);
  return s;
}

static eplb_status_t json_uint(json_t *o, const char *key, uint32_t lo, uint32_t hi,
                               const char *path, uint32_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: metadata: missing field '%s'", path, key);
  if (!json_is_integer(v))
    return eplb__error(EPLB_EFORMAT, "traces", "%s: metadata: field '%s' is not an integer", path,
                       key);
  json_int_t x = json_integer_value(v);
  if (x < (json_int_t)lo || x > (json_int_t)hi)
    return eplb__error(EPLB_ERANGE, "traces",
                       "%s: metadata: field '%s' = %" JSON_INTEGER_FORMAT " out of range %" PRIu32
                       "..%" PRIu32,
                       path, key, x, lo, hi);
  *out = (uint32_t)x;
  return EPLB_OK;
}

static eplb_status_t json_str(json_t *o, const char *key, char *out, size_t cap, const char *path) {
  json_t *v = json_object_get(o, key);
  if (!v)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: metadata: missing field '%s'", path, key);
  if (!json_is_string(v))
    return eplb__error(EPLB_EFORMAT, "traces", "%s: metadata: field '%s' is not a string", path,
                       key);
  size_t n = json_string_length(v);
  const char *s = json_string_value(v);
  if (n >= cap || memchr(s, '\0', n))
    return eplb__error(EPLB_ERANGE, "traces",
                       "%s: metadata: field '%s' longer than %zu bytes or holds NUL", path, key,
                       cap - 1);
  memcpy(out, s, n + 1);
  return EPLB_OK;
}

eplb_status_t eplb__trace_meta_from_json(const uint8_t *buf, size_t len, const char *path,
                                         eplb_trace_meta_t *meta) {
  eplb_status_t st = EPLB_OK;
  json_error_t err;
  eplb_trace_meta_t m;
  char phase[16];
  uint32_t version = 0;
  eplb_trace_meta_default(&m);
  json_t *o = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, &err);
  if (!o || !json_is_object(o)) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: metadata is not a JSON object: %s", path,
                     o ? "wrong type" : err.text);
    goto done;
  }
  json_t *fmt = json_object_get(o, "format");
  if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "eplb-trace") != 0) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: metadata: field 'format' is not \"eplb-trace\"",
                     path);
    goto done;
  }
  if ((st = json_uint(o, "version", 0, UINT32_MAX, path, &version)) != EPLB_OK)
    goto done;
  if (version != EPLB__TRACE_VERSION) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: metadata: unsupported version %" PRIu32, path,
                     version);
    goto done;
  }
  if ((st = json_uint(o, "layers", 1, EPLB_TRACE_MAX_LAYERS, path, &m.num_layers)) ||
      (st = json_uint(o, "experts", 1, EPLB_TRACE_MAX_EXPERTS, path, &m.num_experts)) ||
      (st = json_uint(o, "topk", 0, EPLB_TRACE_MAX_TOPK, path, &m.topk)) ||
      (st = json_uint(o, "ranks", 0, EPLB__TRACE_MAX_RANKS, path, &m.num_ranks)) ||
      (st = json_str(o, "phase", phase, sizeof phase, path)) ||
      (st = json_str(o, "model", m.model, sizeof m.model, path)) ||
      (st = json_str(o, "origin", m.origin, sizeof m.origin, path)))
    goto done;
  if (m.topk > m.num_experts) {
    st = eplb__error(EPLB_ERANGE, "traces",
                     "%s: metadata: field 'topk' = %" PRIu32 " exceeds experts = %" PRIu32, path,
                     m.topk, m.num_experts);
    goto done;
  }
  int found = 0;
  for (unsigned p = 0; p < sizeof phase_names / sizeof phase_names[0]; p++)
    if (!strcmp(phase, phase_names[p])) {
      m.phase = (eplb_trace_phase_t)p;
      found = 1;
    }
  if (!found) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s: metadata: field 'phase' = \"%s\" unknown", path,
                     phase);
    goto done;
  }
  *meta = m;
done:
  json_decref(o);
  return st;
}

/* ---- I/O ------------------------------------------------------------------ */

int eplb__pread_all(int fd, void *buf, size_t n, uint64_t off) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -1;
    if (r == 0)
      return 1;
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

int eplb__pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = pwrite(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -1;
    if (r == 0) {
      errno = ENOSPC;
      return -1;
    }
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

void eplb__chunk_buf_free(eplb__chunk_buf_t *b) {
  eplb__free(b->comp);
  eplb__free(b->raw);
  eplb__free(b->plain);
  ZSTD_freeDCtx(b->dctx);
  memset(b, 0, sizeof *b);
}

eplb_status_t eplb__chunk_load(eplb__chunk_buf_t *b, int fd, const char *path, uint64_t chunk_index,
                               uint64_t offset, const eplb__chunk_header_t *h) {
  if (grow(&b->comp, &b->comp_cap, h->payload_len))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory reading chunk %" PRIu64, path,
                       chunk_index);
  int r = eplb__pread_all(fd, b->comp, h->payload_len, offset + EPLB__CHUNK_HEADER_SIZE);
  if (r < 0)
    return eplb__error(EPLB_EIO, "traces", "%s: read failed at offset %" PRIu64 ": %s", path,
                       offset, strerror(errno));
  if (r > 0)
    return eplb__error(EPLB_ETRUNCATED, "traces",
                       "%s: chunk %" PRIu64 " at offset %" PRIu64 ": file shrank while reading",
                       path, chunk_index, offset);
  if (eplb__crc32(b->comp, h->payload_len) != h->payload_crc)
    return eplb__error(EPLB_ECORRUPT, "traces",
                       "%s: chunk %" PRIu64 " at offset %" PRIu64 ": payload CRC mismatch", path,
                       chunk_index, offset);
  /* A frame must announce the size the header promised before we allocate it. */
  unsigned long long fcs = ZSTD_getFrameContentSize(b->comp, h->payload_len);
  if (fcs != h->raw_len)
    return eplb__error(EPLB_ECORRUPT, "traces",
                       "%s: chunk %" PRIu64 " at offset %" PRIu64
                       ": payload frame size disagrees with header",
                       path, chunk_index, offset);
  if (!b->dctx && !(b->dctx = ZSTD_createDCtx()))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory (zstd context)", path);
  if (grow(&b->raw, &b->raw_cap, h->raw_len))
    return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory decoding chunk %" PRIu64, path,
                       chunk_index);
  size_t got = ZSTD_decompressDCtx(b->dctx, b->raw, h->raw_len, b->comp, h->payload_len);
  if (ZSTD_isError(got) || got != h->raw_len)
    return eplb__error(EPLB_ECORRUPT, "traces",
                       "%s: chunk %" PRIu64 " at offset %" PRIu64 ": payload does not decode (%s)",
                       path, chunk_index, offset,
                       ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
  return EPLB_OK;
}

eplb_status_t eplb__trace_read_head(eplb__chunk_buf_t *b, int fd, const char *path, uint64_t size,
                                    eplb_trace_meta_t *meta, uint64_t *end) {
  uint8_t head[EPLB__TRACE_FILE_HEADER_SIZE];
  uint8_t ch[EPLB__CHUNK_HEADER_SIZE];
  eplb__chunk_header_t h;
  size_t n = size < sizeof head ? (size_t)size : sizeof head;
  int r = eplb__pread_all(fd, head, n, 0);
  if (r < 0)
    return eplb__error(EPLB_EIO, "traces", "%s: read failed: %s", path, strerror(errno));
  eplb_status_t st = file_header_check(head, r ? 0 : n, path);
  if (st != EPLB_OK)
    return st;
  uint64_t off = EPLB__TRACE_FILE_HEADER_SIZE;
  if (size < off + sizeof ch || eplb__pread_all(fd, ch, sizeof ch, off) != 0)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: metadata chunk missing or cut short", path);
  eplb__hdr_result_t hr = eplb__chunk_header_decode(ch, &h);
  if (hr == EPLB__HDR_BAD_MAGIC)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: chunk 0 at offset 16: bad chunk magic", path);
  if (hr == EPLB__HDR_BAD_CRC)
    return eplb__error(EPLB_ECORRUPT, "traces", "%s: chunk 0 at offset 16: header CRC mismatch",
                       path);
  if (h.type != EPLB__CHUNK_META || h.flags || h.num_steps || h.first_step || h.num_tokens ||
      h.raw_len == 0 || h.raw_len > EPLB__META_MAX_RAW || h.payload_len == 0 ||
      h.payload_len > ZSTD_compressBound(h.raw_len))
    return eplb__error(EPLB_EFORMAT, "traces", "%s: chunk 0 at offset 16: not a metadata chunk",
                       path);
  if (size - off - sizeof ch < h.payload_len)
    return eplb__error(EPLB_EFORMAT, "traces", "%s: metadata chunk cut short", path);
  if ((st = eplb__chunk_load(b, fd, path, 0, off, &h)) != EPLB_OK)
    return st;
  if ((st = eplb__trace_meta_from_json(b->raw, h.raw_len, path, meta)) != EPLB_OK)
    return st;
  *end = off + sizeof ch + h.payload_len;
  return EPLB_OK;
}
