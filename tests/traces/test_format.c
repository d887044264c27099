/* Native trace format: round trips, streaming, window sums, torn tails at
 * every cut point, single-byte damage anywhere, appending, atomic creation,
 * I/O errors, allocation failures and input validation. */
#include "tests/support.h"
#include "traces/traces.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { TL = 3, TE = 10, TK = 2, TR = 4, MAX_ROWS = 5 };

static uint32_t mix(uint32_t a, uint32_t b) {
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u + (a << 6) + (a >> 2));
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return h;
}

/* Deterministic content of step s (by its original index). */
typedef struct gen_step {
  uint32_t counts[TL * TE];
  uint16_t ids[MAX_ROWS * TL * TK];
  int32_t src[MAX_ROWS];
  eplb_trace_step_t step;
} gen_step_t;

static void gen(gen_step_t *g, uint32_t s, int with_rows) {
  for (uint32_t i = 0; i < TL * TE; i++)
    g->counts[i] = mix(s, i) % 50 + (i == 0 ? 100000u : 0);
  uint32_t rows = with_rows ? mix(s, 999) % (MAX_ROWS + 1) : 0;
  for (uint32_t r = 0; r < rows; r++) {
    g->src[r] = (int32_t)(mix(s, r + 7) % (TR + 1)) - 1;
    for (uint32_t l = 0; l < TL; l++) {
      uint32_t start = mix(s * 31 + r, l) % TE;
      for (uint32_t j = 0; j < TK; j++)
        g->ids[(r * TL + l) * TK + j] = (uint16_t)((start + j * 3) % TE);
    }
  }
  memset(&g->step, 0, sizeof g->step);
  g->step.num_tokens = mix(s, 12345) % 1000;
  g->step.counts = g->counts;
  g->step.num_rows = rows;
  g->step.topk = rows ? g->ids : NULL;
  g->step.source_rank = rows ? g->src : NULL;
}

static void meta_init(eplb_trace_meta_t *m, uint32_t topk) {
  eplb_trace_meta_default(m);
  m->num_layers = TL;
  m->num_experts = TE;
  m->topk = topk;
  m->num_ranks = TR;
  m->phase = EPLB_PHASE_PREFILL;
  snprintf(m->model, sizeof m->model, "tiny-moe");
  snprintf(m->origin, sizeof m->origin, "test_format seed=%d", 7);
}

static void write_trace(const char *path, uint32_t nsteps, uint32_t spc, int rows) {
  eplb_trace_meta_t m;
  eplb_trace_writer_options_t o;
  eplb_trace_writer_t *w = NULL;
  gen_step_t g;
  meta_init(&m, TK);
  eplb_trace_writer_options_default(&o);
  o.steps_per_chunk = spc;
  ck_assert_int_eq(eplb_trace_writer_create(path, &m, &o, &w), EPLB_OK);
  for (uint32_t s = 0; s < nsteps; s++) {
    gen(&g, s, rows);
    ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
    ck_assert_uint_eq(eplb_trace_writer_num_steps(w), s + 1);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
}

/* Compares a read step with the generated step `orig`. */
static void check_step(const eplb_trace_step_t *st, uint32_t orig, int rows) {
  gen_step_t g;
  gen(&g, orig, rows);
  ck_assert_uint_eq(st->num_tokens, g.step.num_tokens);
  ck_assert_int_eq(memcmp(st->counts, g.counts, sizeof g.counts), 0);
  ck_assert_uint_eq(st->num_rows, g.step.num_rows);
  if (g.step.num_rows) {
    ck_assert_int_eq(memcmp(st->topk, g.ids, g.step.num_rows * TL * TK * sizeof(uint16_t)), 0);
    ck_assert_int_eq(memcmp(st->source_rank, g.src, g.step.num_rows * sizeof(int32_t)), 0);
  }
}

/* Loops that write hundreds of files use a tmpfs when there is one: fsync
 * there is free, so the suite stays fast. Removed by rm_dir(). */
static const char *fast_dir(void) {
  static char dir[64];
  snprintf(dir, sizeof dir, "/dev/shm/eplb-test-XXXXXX");
  if (access("/dev/shm", W_OK) == 0 && mkdtemp(dir))
    return dir;
  snprintf(dir, sizeof dir, "%s", eplb_test_tmpdir());
  return dir;
}

static void rm_dir(const char *dir) {
  if (strncmp(dir, "/dev/shm/", 9) == 0) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
  }
}

/* Ends of the META chunk and of every STEPS chunk, with cumulative steps. */
typedef struct layout {
  size_t n;
  uint64_t end[64];
  uint64_t steps[64];
} layout_t;

static void parse_layout(const uint8_t *buf, size_t size, layout_t *lay) {
  uint64_t off = EPLB__TRACE_FILE_HEADER_SIZE, steps = 0;
  lay->n = 0;
  while (off < size) {
    eplb__chunk_header_t h;
    ck_assert_int_eq(eplb__chunk_header_decode(buf + off, &h), EPLB__HDR_OK);
    off += EPLB__CHUNK_HEADER_SIZE + h.payload_len;
    steps += h.num_steps;
    ck_assert_uint_lt(lay->n, 64);
    lay->end[lay->n] = off;
    lay->steps[lay->n] = steps;
    lay->n++;
  }
  ck_assert_uint_eq(off, size);
}

/* Reads every step; returns the first error, or EPLB_OK. Checks data. */
static eplb_status_t read_all(eplb_trace_t *t, int rows) {
  eplb_trace_step_t st;
  for (uint64_t i = 0; i < eplb_trace_num_steps(t); i++) {
    eplb_status_t s = eplb_trace_read_step(t, i, &st);
    if (s != EPLB_OK)
      return s;
    check_step(&st, (uint32_t)i, rows);
  }
  return EPLB_OK;
}

START_TEST(defaults_and_phase_names) {
  ck_assert_str_eq(eplb_trace_phase_str(EPLB_PHASE_DECODE), "decode");
  ck_assert_str_eq(eplb_trace_phase_str(EPLB_PHASE_UNKNOWN), "unknown");
  ck_assert_ptr_null(eplb_trace_phase_str((eplb_trace_phase_t)9));
  eplb_trace_writer_options_t o;
  eplb_trace_writer_options_default(&o);
  ck_assert_uint_eq(o.steps_per_chunk, 16);
  ck_assert_int_eq(o.compression_level, -1);
  ck_assert_int_eq(o.atomic, 1);
  eplb_trace_open_options_t oo;
  eplb_trace_open_options_default(&oo);
  ck_assert_int_eq(oo.allow_torn_tail, 0);
  eplb_trace_close(NULL);
  eplb_trace_writer_destroy(NULL);
}
END_TEST

START_TEST(round_trip_with_chunk_sizes) {
  static const uint32_t spcs[] = {1, 2, 3, 16, 100};
  for (size_t c = 0; c < sizeof spcs / sizeof spcs[0]; c++) {
    for (int rows = 0; rows <= 1; rows++) {
      const char *path = eplb_test_path(eplb_test_tmpdir(), "rt.eplbt");
      const uint32_t n = 37;
      write_trace(path, n, spcs[c], rows);
      eplb_trace_t *t = NULL;
      ck_assert_int_eq(eplb_trace_open(path, NULL, &t), EPLB_OK);
      const eplb_trace_meta_t *m = eplb_trace_meta(t);
      ck_assert_uint_eq(m->num_layers, TL);
      ck_assert_uint_eq(m->num_experts, TE);
      ck_assert_uint_eq(m->topk, TK);
      ck_assert_uint_eq(m->num_ranks, TR);
      ck_assert_int_eq(m->phase, EPLB_PHASE_PREFILL);
      ck_assert_str_eq(m->model, "tiny-moe");
      ck_assert_str_eq(m->origin, "test_format seed=7");
      ck_assert_uint_eq(eplb_trace_num_steps(t), n);
      uint64_t tokens = 0;
      int any_rows = 0;
      gen_step_t g;
      for (uint32_t s = 0; s < n; s++) {
        gen(&g, s, rows);
        tokens += g.step.num_tokens;
        any_rows |= g.step.num_rows > 0;
      }
      ck_assert_uint_eq(eplb_trace_num_tokens(t), tokens);
      ck_assert_int_eq(eplb_trace_has_topk(t), any_rows);
      /* Random order, then streaming. */
      eplb_trace_step_t st;
      for (uint32_t i = 0; i < n; i++) {
        uint32_t s = (i * 17 + 5) % n;
        ck_assert_int_eq(eplb_trace_read_step(t, s, &st), EPLB_OK);
        ck_assert_uint_eq(st.index, s);
        check_step(&st, s, rows);
      }
      for (int pass = 0; pass < 2; pass++) {
        uint64_t seen = 0;
        eplb_status_t s;
        while ((s = eplb_trace_next(t, &st)) == EPLB_OK) {
          ck_assert_uint_eq(st.index, seen);
          check_step(&st, (uint32_t)seen, rows);
          seen++;
        }
        ck_assert_int_eq(s, EPLB_EOF);
        ck_assert_uint_eq(seen, n);
        eplb_trace_rewind(t);
      }
      ck_assert_int_eq(eplb_trace_read_step(t, n, &st), EPLB_ERANGE);
      eplb_trace_close(t);
    }
  }
}
END_TEST

START_TEST(window_sum_matches_direct_sum) {
  const char *path = eplb_test_path(eplb_test_tmpdir(), "win.eplbt");
  const uint32_t n = 29;
  write_trace(path, n, 4, 1);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &t), EPLB_OK);
  static const uint64_t ranges[][2] = {{0, 29},  {0, 1}, {3, 9}, {4, 8},         {7, 100},
                                       {28, 29}, {5, 5}, {9, 3}, {0, UINT64_MAX}};
  for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
    double got[TL * TE], want[TL * TE] = {0};
    uint64_t end = ranges[r][1] < n ? ranges[r][1] : n;
    for (uint64_t s = ranges[r][0]; s < end; s++) {
      gen_step_t g;
      gen(&g, (uint32_t)s, 1);
      for (int i = 0; i < TL * TE; i++)
        want[i] += g.counts[i];
    }
    for (int i = 0; i < TL * TE; i++)
      got[i] = -1;
    ck_assert_int_eq(eplb_trace_window_sum(t, ranges[r][0], ranges[r][1], got), EPLB_OK);
    for (int i = 0; i < TL * TE; i++)
      ck_assert_double_eq(got[i], want[i]);
  }
  /* Interleaving with streaming keeps the stream position. */
  eplb_trace_step_t st;
  ck_assert_int_eq(eplb_trace_next(t, &st), EPLB_OK);
  double tmp[TL * TE];
  ck_assert_int_eq(eplb_trace_window_sum(t, 20, 29, tmp), EPLB_OK);
  ck_assert_int_eq(eplb_trace_next(t, &st), EPLB_OK);
  ck_assert_uint_eq(st.index, 1);
  check_step(&st, 1, 1);
  eplb_trace_close(t);
}
END_TEST

START_TEST(every_cut_point) {
  const char *dir = fast_dir();
  const char *full = eplb_test_path(dir, "cut-full.eplbt");
  const char *cut = eplb_test_path(dir, "cut.eplbt");
  const char *rec = eplb_test_path(dir, "cut-rec.eplbt");
  write_trace(full, 7, 2, 1);
  size_t size;
  uint8_t *buf = eplb_test_read_file(full, &size);
  layout_t lay;
  parse_layout(buf, size, &lay);
  ck_assert_uint_eq(lay.n, 5); /* meta + 4 step chunks */
  for (size_t c = 0; c <= size; c++) {
    eplb_test_write_file(cut, buf, c);
    uint64_t complete = 0;
    int boundary = 0;
    for (size_t i = 0; i < lay.n; i++) {
      if (lay.end[i] <= c)
        complete = lay.steps[i];
      boundary |= lay.end[i] == c;
    }
    int in_head = c < lay.end[0];
    eplb_trace_t *t = NULL;
    eplb_status_t s = eplb_trace_open(cut, NULL, &t);
    if (in_head)
      ck_assert_int_eq(s, EPLB_EFORMAT);
    else if (boundary)
      ck_assert_int_eq(s, EPLB_OK);
    else {
      ck_assert_int_eq(s, EPLB_ETRUNCATED);
      ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "cut short"));
      ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "recover"));
    }
    eplb_trace_close(t);
    t = NULL;
    eplb_trace_open_options_t oo;
    eplb_trace_open_options_default(&oo);
    oo.allow_torn_tail = 1;
    s = eplb_trace_open(cut, &oo, &t);
    ck_assert_int_eq(s, in_head ? EPLB_EFORMAT : EPLB_OK);
    if (t) {
      ck_assert_uint_eq(eplb_trace_num_steps(t), complete);
      ck_assert_int_eq(read_all(t, 1), EPLB_OK);
      eplb_trace_close(t);
      t = NULL;
    }
    eplb_trace_recover_report_t rep;
    s = eplb_trace_recover(cut, rec, &rep);
    ck_assert_int_eq(s, in_head ? EPLB_EFORMAT : EPLB_OK);
    if (s == EPLB_OK) {
      ck_assert_uint_eq(rep.steps_recovered, complete);
      ck_assert_uint_eq(rep.chunks_bad, boundary ? 0 : 1);
      ck_assert_int_eq(eplb_trace_open(rec, NULL, &t), EPLB_OK);
      ck_assert_uint_eq(eplb_trace_num_steps(t), complete);
      ck_assert_int_eq(read_all(t, 1), EPLB_OK);
      eplb_trace_close(t);
      t = NULL;
    } else {
      ck_assert(!eplb_test_exists(rec));
    }
    unlink(rec);
  }
  free(buf);
  rm_dir(dir);
}
END_TEST

/* Opens and reads everything; the first error, or EPLB_OK if the data was
 * read back unchanged. */
static eplb_status_t open_and_read(const char *path, int torn_ok) {
  eplb_trace_open_options_t oo;
  eplb_trace_open_options_default(&oo);
  oo.allow_torn_tail = torn_ok;
  eplb_trace_t *t = NULL;
  eplb_status_t s = eplb_trace_open(path, &oo, &t);
  if (s == EPLB_OK) {
    ck_assert_uint_eq(eplb_trace_num_steps(t), 7);
    s = read_all(t, 1);
    if (s == EPLB_OK) {
      double sum[TL * TE];
      s = eplb_trace_window_sum(t, 0, 7, sum);
    }
  }
  eplb_trace_close(t);
  return s;
}

START_TEST(every_single_byte_flip_is_detected) {
  const char *dir = fast_dir();
  const char *full = eplb_test_path(dir, "flip-full.eplbt");
  const char *bad = eplb_test_path(dir, "flip.eplbt");
  const char *rec = eplb_test_path(dir, "flip-rec.eplbt");
  write_trace(full, 7, 2, 1);
  size_t size;
  uint8_t *buf = eplb_test_read_file(full, &size);
  layout_t lay;
  parse_layout(buf, size, &lay);
  static const uint8_t masks[] = {0x01, 0x80, 0xFF};
  for (size_t i = 0; i < size; i++) {
    for (size_t m = 0; m < sizeof masks; m++) {
      buf[i] ^= masks[m];
      eplb_test_write_file(bad, buf, size);
      buf[i] ^= masks[m];
      for (int torn_ok = 0; torn_ok <= 1; torn_ok++) {
        eplb_status_t s = open_and_read(bad, torn_ok);
        if (s != EPLB_ECORRUPT && s != EPLB_EFORMAT && s != EPLB_ETRUNCATED)
          ck_abort_msg("flip of byte %zu (mask %02x) gave %s", i, masks[m], eplb_status_name(s));
      }
      eplb_trace_recover_report_t rep;
      eplb_status_t s = eplb_trace_recover(bad, rec, &rep);
      if (i < lay.end[0]) {
        ck_assert(s == EPLB_EFORMAT || s == EPLB_ECORRUPT);
        continue;
      }
      ck_assert_int_eq(s, EPLB_OK);
      ck_assert_uint_ge(rep.chunks_bad, 1);
      ck_assert_uint_eq(rep.chunks_ok, lay.n - 2);
      ck_assert_uint_ge(rep.steps_recovered, 7 - 2);
      ck_assert_uint_gt(rep.bytes_skipped, 0);
    }
  }
  free(buf);
  rm_dir(dir);
}
END_TEST

START_TEST(recover_skips_a_damaged_middle_chunk) {
  const char *dir = eplb_test_tmpdir();
  const char *full = eplb_test_path(dir, "mid.eplbt");
  const char *rec = eplb_test_path(dir, "mid-rec.eplbt");
  write_trace(full, 8, 2, 1);
  size_t size;
  uint8_t *buf = eplb_test_read_file(full, &size);
  layout_t lay;
  parse_layout(buf, size, &lay);
  /* Damage the payload of the second STEPS chunk (steps 2, 3). */
  buf[lay.end[1] + EPLB__CHUNK_HEADER_SIZE + 3] ^= 0x55;
  eplb_test_write_file(full, buf, size);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(full, NULL, &t), EPLB_OK); /* headers are intact */
  eplb_trace_step_t st;
  ck_assert_int_eq(eplb_trace_read_step(t, 1, &st), EPLB_OK);
  ck_assert_int_eq(eplb_trace_read_step(t, 2, &st), EPLB_ECORRUPT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "chunk 2"));
  ck_assert_int_eq(eplb_trace_read_step(t, 4, &st), EPLB_OK);
  double sum[TL * TE];
  ck_assert_int_eq(eplb_trace_window_sum(t, 0, 8, sum), EPLB_ECORRUPT);
  eplb_trace_close(t);
  eplb_trace_recover_report_t rep;
  ck_assert_int_eq(eplb_trace_recover(full, rec, &rep), EPLB_OK);
  ck_assert_uint_eq(rep.steps_recovered, 6);
  ck_assert_uint_eq(rep.chunks_ok, 3);
  ck_assert_uint_eq(rep.chunks_bad, 1);
  ck_assert_uint_eq(rep.bytes_skipped, lay.end[2] - lay.end[1]);
  ck_assert_int_eq(eplb_trace_open(rec, NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 6);
  static const uint32_t orig[] = {0, 1, 4, 5, 6, 7};
  for (uint32_t i = 0; i < 6; i++) {
    ck_assert_int_eq(eplb_trace_read_step(t, i, &st), EPLB_OK);
    ck_assert_uint_eq(st.index, i);
    check_step(&st, orig[i], 1);
  }
  ck_assert_str_eq(eplb_trace_meta(t)->model, "tiny-moe");
  eplb_trace_close(t);
  /* Garbage between chunks is skipped too. */
  uint8_t *big = malloc(size + 100);
  memcpy(big, buf, lay.end[1]);
  memset(big + lay.end[1], 'E', 50);
  memcpy(big + lay.end[1] + 50, "EPCKEPCK", 8);
  memset(big + lay.end[1] + 58, 0, 42);
  memcpy(big + lay.end[1] + 100, buf + lay.end[1], size - lay.end[1]);
  eplb_test_write_file(full, big, size + 100);
  ck_assert_int_eq(eplb_trace_open(full, NULL, &t), EPLB_ECORRUPT);
  ck_assert_int_eq(eplb_trace_recover(full, rec, &rep), EPLB_OK);
  /* The garbage and the damaged chunk after it are one damaged region. */
  ck_assert_uint_eq(rep.chunks_bad, 1);
  ck_assert_uint_eq(rep.bytes_skipped, 100 + lay.end[2] - lay.end[1]);
  ck_assert_uint_eq(rep.steps_recovered, 6);
  free(big);
  free(buf);
}
END_TEST

START_TEST(bad_files_are_rejected) {
  const char *dir = eplb_test_tmpdir();
  const char *p = eplb_test_path(dir, "bad.eplbt");
  eplb_trace_t *t = NULL;
  eplb_test_write_file(p, "", 0);
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "empty"));
  ck_assert_ptr_null(t);
  eplb_test_write_file(p, "step,layer,expert,count\n0,0,0,1\n", 32);
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "bad magic"));
  write_trace(p, 3, 1, 0);
  size_t size;
  uint8_t *buf = eplb_test_read_file(p, &size);
  buf[8] = 2;
  eplb_test_write_file(p, buf, size);
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "unsupported version 2"));
  ck_assert_int_eq(eplb_trace_recover(p, eplb_test_path(dir, "r.eplbt"), NULL), EPLB_EFORMAT);
  free(buf);
  ck_assert_int_eq(eplb_trace_open(eplb_test_path(dir, "missing.eplbt"), NULL, &t), EPLB_EIO);
  ck_assert_int_eq(eplb_trace_open(NULL, NULL, &t), EPLB_EINVAL);
}
END_TEST

/* A file whose META JSON is hostile but well framed. */
static void write_with_meta_json(const char *path, const char *json) {
  uint8_t out[4096];
  eplb__trace_file_header_encode(out);
  size_t n = ZSTD_compress(out + 60, sizeof out - 60, json, strlen(json), 1);
  ck_assert(!ZSTD_isError(n));
  eplb__chunk_header_t h = {.type = EPLB__CHUNK_META,
                            .payload_len = (uint32_t)n,
                            .raw_len = (uint32_t)strlen(json),
                            .payload_crc = eplb__crc32(out + 60, n)};
  eplb__chunk_header_encode(&h, out + 16);
  eplb_test_write_file(path, out, 60 + n);
}

START_TEST(metadata_fields_are_validated) {
  static const struct {
    const char *json;
    eplb_status_t want;
    const char *field;
  } cases[] = {
      {"{\"format\":\"eplb-trace\",\"version\":1,\"layers\":0,\"experts\":4,\"topk\":2,"
       "\"ranks\":0,\"phase\":\"decode\",\"model\":\"\",\"origin\":\"\"}",
       EPLB_ERANGE, "layers"},
      {"{\"format\":\"eplb-trace\",\"version\":1,\"layers\":2,\"experts\":70000,\"topk\":2,"
       "\"ranks\":0,\"phase\":\"decode\",\"model\":\"\",\"origin\":\"\"}",
       EPLB_ERANGE, "experts"},
      {"{\"format\":\"eplb-trace\",\"version\":1,\"layers\":2,\"experts\":4,\"topk\":5,"
       "\"ranks\":0,\"phase\":\"decode\",\"model\":\"\",\"origin\":\"\"}",
       EPLB_ERANGE, "topk"},
      {"{\"format\":\"eplb-trace\",\"version\":1,\"layers\":2,\"experts\":4,\"topk\":2,"
       "\"ranks\":0,\"phase\":\"sideways\",\"model\":\"\",\"origin\":\"\"}",
       EPLB_EFORMAT, "phase"},
      {"{\"format\":\"eplb-trace\",\"version\":1,\"experts\":4,\"topk\":2,"
       "\"ranks\":0,\"phase\":\"decode\",\"model\":\"\",\"origin\":\"\"}",
       EPLB_EFORMAT, "layers"},
      {"{\"format\":\"eplb-trace\",\"version\":1,\"layers\":\"2\",\"experts\":4,\"topk\":2,"
       "\"ranks\":0,\"phase\":\"decode\",\"model\":\"\",\"origin\":\"\"}",
       EPLB_EFORMAT, "layers"},
      {"{\"format\":\"eplb-trace\",\"version\":1,\"layers\":2,\"experts\":4,\"topk\":2,"
       "\"ranks\":0,\"phase\":\"decode\",\"model\":"
       "\"0123456789012345678901234567890123456789012345678901234567890123456789\","
       "\"origin\":\"\"}",
       EPLB_ERANGE, "model"},
      {"{\"format\":\"other\",\"version\":1}", EPLB_EFORMAT, "format"},
      {"[1,2,3]", EPLB_EFORMAT, "JSON"},
      {"{\"format\":\"eplb-trace\",\"version\":3}", EPLB_EFORMAT, "version 3"},
  };
  const char *p = eplb_test_path(eplb_test_tmpdir(), "meta.eplbt");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_with_meta_json(p, cases[i].json);
    eplb_trace_t *t = NULL;
    ck_assert_int_eq(eplb_trace_open(p, NULL, &t), cases[i].want);
    ck_assert_msg(strstr(eplb_error_detail(), cases[i].field), "case %zu: %s", i,
                  eplb_error_detail());
  }
  /* The same framing with valid JSON opens (the helper is sound). */
  write_with_meta_json(p, "{\"format\":\"eplb-trace\",\"version\":1,\"layers\":2,\"experts\":4,"
                          "\"topk\":2,\"ranks\":0,\"phase\":\"mixed\",\"model\":\"m\",\"origin\":"
                          "\"o\"}");
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_OK);
  ck_assert_int_eq(eplb_trace_meta(t)->phase, EPLB_PHASE_MIXED);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 0);
  eplb_trace_close(t);
}
END_TEST

START_TEST(append_continues_numbering) {
  const char *dir = eplb_test_tmpdir();
  const char *p = eplb_test_path(dir, "app.eplbt");
  write_trace(p, 5, 2, 1);
  eplb_trace_writer_t *w = NULL;
  eplb_trace_writer_options_t o;
  eplb_trace_writer_options_default(&o);
  o.steps_per_chunk = 3;
  ck_assert_int_eq(eplb_trace_writer_open_append(p, NULL, &o, &w), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_writer_num_steps(w), 5);
  gen_step_t g;
  for (uint32_t s = 5; s < 9; s++) {
    gen(&g, s, 1);
    ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
  }
  eplb_trace_writer_destroy(w); /* in place: flushes the buffered step */
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 9);
  ck_assert_int_eq(read_all(t, 1), EPLB_OK);
  eplb_trace_close(t);
  /* Shapes must agree. */
  eplb_trace_meta_t m;
  meta_init(&m, TK);
  m.num_experts = TE + 1;
  ck_assert_int_eq(eplb_trace_writer_open_append(p, &m, NULL, &w), EPLB_ESHAPE);
  ck_assert_ptr_null(w);
  meta_init(&m, TK);
  ck_assert_int_eq(eplb_trace_writer_open_append(p, &m, NULL, &w), EPLB_OK);
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_ESTATE);
  eplb_trace_writer_destroy(w);
  /* Missing file: created when meta is given, EIO otherwise. */
  const char *q = eplb_test_path(dir, "app-new.eplbt");
  ck_assert_int_eq(eplb_trace_writer_open_append(q, NULL, NULL, &w), EPLB_EIO);
  ck_assert(!eplb_test_exists(q));
  ck_assert_int_eq(eplb_trace_writer_open_append(q, &m, NULL, &w), EPLB_OK);
  for (uint32_t s = 0; s < 3; s++) {
    gen(&g, s, 1);
    ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  ck_assert_int_eq(eplb_trace_open(q, NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 3);
  ck_assert_int_eq(read_all(t, 1), EPLB_OK);
  eplb_trace_close(t);
}
END_TEST

START_TEST(append_drops_a_torn_tail) {
  const char *p = eplb_test_path(eplb_test_tmpdir(), "torn.eplbt");
  write_trace(p, 6, 2, 1);
  size_t size;
  uint8_t *buf = eplb_test_read_file(p, &size);
  eplb_test_write_file(p, buf, size - 5);
  free(buf);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_ETRUNCATED);
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_open_append(p, NULL, NULL, &w), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_writer_num_steps(w), 4);
  gen_step_t g;
  for (uint32_t s = 4; s < 7; s++) {
    gen(&g, s, 1);
    ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 7);
  ck_assert_int_eq(read_all(t, 1), EPLB_OK);
  eplb_trace_close(t);
}
END_TEST

START_TEST(follow_mode_refresh) {
  const char *p = eplb_test_path(eplb_test_tmpdir(), "follow.eplbt");
  eplb_trace_meta_t m;
  meta_init(&m, TK);
  eplb_trace_writer_options_t o;
  eplb_trace_writer_options_default(&o);
  o.steps_per_chunk = 1;
  o.atomic = 0;
  o.fsync_chunks = 1;
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, &o, &w), EPLB_OK);
  gen_step_t g;
  gen(&g, 0, 1);
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 1);
  for (uint32_t s = 1; s < 4; s++) {
    gen(&g, s, 1);
    ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
  }
  /* A half-written chunk at the end is waited for, not an error. */
  int fd = open(p, O_WRONLY | O_APPEND);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, "EPCK\2\0", 6), 6);
  close(fd);
  uint64_t added = 99;
  ck_assert_int_eq(eplb_trace_refresh(t, &added), EPLB_OK);
  ck_assert_uint_eq(added, 3);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 4);
  ck_assert_int_eq(read_all(t, 1), EPLB_OK);
  ck_assert_int_eq(eplb_trace_refresh(t, &added), EPLB_OK);
  ck_assert_uint_eq(added, 0);
  eplb_trace_close(t);
  eplb_trace_writer_destroy(w);
}
END_TEST

START_TEST(atomic_create_and_io_errors) {
  const char *dir = eplb_test_tmpdir();
  char sub[1024];
  snprintf(sub, sizeof sub, "%s/atomic", dir);
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  const char *p = eplb_test_path(sub, "a.eplbt");
  eplb_trace_meta_t m;
  meta_init(&m, TK);
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_OK);
  gen_step_t g;
  gen(&g, 0, 1);
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
  ck_assert_int_eq(eplb_trace_writer_flush(w), EPLB_OK);
  ck_assert(!eplb_test_exists(p));
  eplb_trace_writer_destroy(w);
  ck_assert(!eplb_test_exists(p));
  /* Nothing is left in the directory (no temporary file). */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", sub);
  ck_assert_int_eq(system(cmd), 0);
  /* finish() replaces an existing file in one step. */
  write_trace(p, 2, 1, 0);
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_OK);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 2);
  eplb_trace_close(t);
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_num_steps(t), 0);
  eplb_trace_close(t);
  /* A directory that does not exist. */
  const char *q = eplb_test_path(dir, "no/such/dir/x.eplbt");
  for (int atomic = 0; atomic <= 1; atomic++) {
    eplb_trace_writer_options_t o;
    eplb_trace_writer_options_default(&o);
    o.atomic = atomic;
    ck_assert_int_eq(eplb_trace_writer_create(q, &m, &o, &w), EPLB_EIO);
    ck_assert_ptr_null(w);
    ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "no/such/dir"));
    ck_assert(!eplb_test_exists(q));
  }
  ck_assert_int_eq(eplb_trace_recover(p, q, NULL), EPLB_EIO);
  /* A device (here /dev/full) is never written nor replaced, even in place
   * (writers refuse FIFOs and devices, issue 33 N1): refused before any
   * byte, and still a device afterwards. */
  struct stat sb;
  if (stat("/dev/full", &sb) == 0 && S_ISCHR(sb.st_mode)) {
    eplb_trace_writer_options_t o;
    eplb_trace_writer_options_default(&o);
    o.atomic = 0;
    ck_assert_int_eq(eplb_trace_writer_create("/dev/full", &m, &o, &w), EPLB_EINVAL);
    ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "/dev/full"));
    ck_assert_int_eq(stat("/dev/full", &sb), 0);
    ck_assert(S_ISCHR(sb.st_mode));
  }
}
END_TEST

START_TEST(append_validates_steps) {
  const char *p = eplb_test_path(eplb_test_tmpdir(), "val.eplbt");
  eplb_trace_meta_t m;
  meta_init(&m, TK);
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_OK);
  gen_step_t g;
  gen(&g, 3, 1);
  g.step.num_rows = 2;
  g.step.topk = g.ids;
  g.step.source_rank = g.src;
  g.ids[0] = 0;
  g.ids[1] = 1;
  g.src[0] = g.src[1] = 0;
  g.ids[TK * TL + 1] = TE; /* row 1, layer 0 */
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_ERANGE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "expert id 10"));
  g.ids[TK * TL + 1] = g.ids[TK * TL];
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "twice"));
  g.ids[TK * TL + 1] = (uint16_t)((g.ids[TK * TL] + 1) % TE);
  g.src[1] = TR;
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_ERANGE);
  g.src[1] = -1;
  g.step.topk = NULL;
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_EINVAL);
  g.step.topk = g.ids;
  g.step.counts = NULL;
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_EINVAL);
  g.step.counts = g.counts;
  ck_assert_uint_eq(eplb_trace_writer_num_steps(w), 0);
  g.step.source_rank = NULL; /* unknown ranks */
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_OK);
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(p, NULL, &t), EPLB_OK);
  eplb_trace_step_t st;
  ck_assert_int_eq(eplb_trace_read_step(t, 0, &st), EPLB_OK);
  ck_assert_uint_eq(st.num_rows, 2);
  ck_assert_int_eq(st.source_rank[0], -1);
  ck_assert_int_eq(st.source_rank[1], -1);
  eplb_trace_close(t);
  /* Rows in a trace without topk. */
  meta_init(&m, 0);
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_OK);
  ck_assert_int_eq(eplb_trace_writer_append(w, &g.step), EPLB_EINVAL);
  eplb_trace_writer_destroy(w);
  /* Invalid metadata. */
  meta_init(&m, TK);
  m.num_layers = 0;
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_EINVAL);
  meta_init(&m, TK);
  m.num_experts = 70000;
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_EINVAL);
  meta_init(&m, TK);
  m.topk = 65;
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_EINVAL);
  meta_init(&m, TK);
  m.phase = (eplb_trace_phase_t)7;
  ck_assert_int_eq(eplb_trace_writer_create(p, &m, NULL, &w), EPLB_EINVAL);
  ck_assert_int_eq(eplb_trace_writer_create(p, NULL, NULL, &w), EPLB_EINVAL);
  ck_assert_ptr_null(w);
}
END_TEST

/* Every API path once; returns the first error. */
static eplb_status_t scenario(const char *dir) {
  const char *p = eplb_test_path(dir, "oom.eplbt");
  const char *r = eplb_test_path(dir, "oom-rec.eplbt");
  eplb_trace_meta_t m;
  meta_init(&m, TK);
  eplb_trace_writer_options_t o;
  eplb_trace_writer_options_default(&o);
  o.steps_per_chunk = 2;
  eplb_trace_writer_t *w = NULL;
  eplb_trace_t *t = NULL;
  gen_step_t g;
  double sum[TL * TE];
  eplb_trace_step_t st;
  eplb_status_t s = eplb_trace_writer_create(p, &m, &o, &w);
  for (uint32_t i = 0; s == EPLB_OK && i < 5; i++) {
    gen(&g, i, 1);
    s = eplb_trace_writer_append(w, &g.step);
  }
  if (s == EPLB_OK)
    s = eplb_trace_writer_finish(w);
  eplb_trace_writer_destroy(w);
  w = NULL;
  if (s == EPLB_OK)
    s = eplb_trace_writer_open_append(p, NULL, &o, &w);
  if (s == EPLB_OK) {
    gen(&g, 5, 1);
    s = eplb_trace_writer_append(w, &g.step);
  }
  if (s == EPLB_OK)
    s = eplb_trace_writer_finish(w);
  eplb_trace_writer_destroy(w);
  if (s == EPLB_OK)
    s = eplb_trace_open(p, NULL, &t);
  while (s == EPLB_OK)
    s = eplb_trace_next(t, &st);
  if (s == EPLB_EOF)
    s = eplb_trace_window_sum(t, 1, 6, sum);
  if (s == EPLB_OK)
    s = eplb_trace_refresh(t, NULL);
  eplb_trace_close(t);
  if (s == EPLB_OK)
    s = eplb_trace_recover(p, r, NULL);
  return s;
}

START_TEST(allocation_failures_never_crash_or_leak) {
  const char *dir = fast_dir();
  eplb_test_alloc_install();
  long n;
  for (n = 0; n < 10000; n++) {
    eplb_test_alloc_fail_after(n);
    eplb_status_t s = scenario(dir);
    eplb_test_alloc_reset();
    if (s == EPLB_OK)
      break;
    ck_assert_msg(s == EPLB_ENOMEM, "n=%ld: %s (%s)", n, eplb_status_name(s), eplb_error_detail());
  }
  ck_assert_int_lt(n, 10000);
  ck_assert_int_gt(n, 5);
  /* No temporary file is left behind by the failed attempts. */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 2", dir);
  ck_assert_int_eq(system(cmd), 0);
  rm_dir(dir);
  eplb_allocator_set(NULL);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("traces_format");
  TCase *tc = tcase_create("format");
  tcase_add_test(tc, defaults_and_phase_names);
  tcase_add_test(tc, round_trip_with_chunk_sizes);
  tcase_add_test(tc, window_sum_matches_direct_sum);
  tcase_add_test(tc, every_cut_point);
  tcase_add_test(tc, every_single_byte_flip_is_detected);
  tcase_add_test(tc, recover_skips_a_damaged_middle_chunk);
  tcase_add_test(tc, bad_files_are_rejected);
  tcase_add_test(tc, metadata_fields_are_validated);
  tcase_add_test(tc, append_continues_numbering);
  tcase_add_test(tc, append_drops_a_torn_tail);
  tcase_add_test(tc, follow_mode_refresh);
  tcase_add_test(tc, atomic_create_and_io_errors);
  tcase_add_test(tc, append_validates_steps);
  tcase_add_test(tc, allocation_failures_never_crash_or_leak);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
