/* Interchange formats (NPY, CSV long and matrix), loads, and conversions. */
#include "core/core.h"
#include "eplb/trace.h"
#include "tests/support.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Paths live in 8 rotating buffers: copy one that must outlive later calls. */
static char *tmp_copy(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s", eplb_test_tmp(name));
  return buf;
}

static void write_text(const char *path, const char *text) {
  eplb_test_write_file(path, text, strlen(text));
}

/* No stray temporary files in the test directory. */
static int count_tmp_files(void) {
  DIR *d = opendir(eplb_test_tmpdir());
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static void expect_error(eplb_status_t got, eplb_status_t want, const char *fragment) {
  ck_assert_msg(got == want, "status %s, want %s (%s)", eplb_status_name(got),
                eplb_status_name(want), eplb_error_detail());
  ck_assert_msg(strstr(eplb_error_detail(), fragment), "detail '%s' lacks '%s'",
                eplb_error_detail(), fragment);
}

/* An NPY file: preamble of version `major`, the dict, then `data`. */
static void write_npy(const char *path, int major, const char *dict, const void *data, size_t len) {
  unsigned char buf[4096];
  size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
  size_t hlen = dl + 1;
  hlen += (64 - (pre + hlen) % 64) % 64;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  for (size_t i = 0; i < pre - 8; i++)
    buf[8 + i] = (unsigned char)(hlen >> (8 * i));
  memset(buf + pre, ' ', hlen);
  memcpy(buf + pre, dict, dl);
  buf[pre + hlen - 1] = '\n';
  ck_assert_uint_le(pre + hlen + len, sizeof buf);
  memcpy(buf + pre + hlen, data, len);
  eplb_test_write_file(path, buf, pre + hlen + len);
}

/* ---- loads ----------------------------------------------------------------- */

START_TEST(loads_create_write_read_round_trip) {
  eplb_loads_t *l = NULL, *r = NULL;
  ck_assert_int_eq(eplb_loads_create(0, 4, &l), EPLB_EINVAL);
  ck_assert_int_eq(eplb_loads_create(EPLB_TRACE_MAX_LAYERS + 1, 4, &l), EPLB_ERANGE);
  ck_assert_int_eq(eplb_loads_create(3, 5, &l), EPLB_OK);
  for (int i = 0; i < 15; i++)
    ck_assert(l->values[i] == 0.0);
  const double vals[15] = {0,  1,  2.5, 1e-9, 123456789012.0, 0.1, 1.0 / 3, 7, 8, 9,
                           10, 11, 12,  13,   2e15 + 0.5};
  memcpy(l->values, vals, sizeof vals);
  const char *p = eplb_test_tmp("loads.csv");
  ck_assert_int_eq(eplb_loads_write_csv(l, p), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read(p, 0, UINT64_MAX, &r), EPLB_OK);
  ck_assert_uint_eq(r->num_layers, 3);
  ck_assert_uint_eq(r->num_experts, 5);
  for (int i = 0; i < 15; i++)
    ck_assert_msg(r->values[i] == vals[i], "value %d: %.17g != %.17g", i, r->values[i], vals[i]);
  eplb_loads_destroy(r);
  /* Unwritable: no file, no temporary, EIO. */
  expect_error(eplb_loads_write_csv(l, "/nonexistent-dir/x.csv"), EPLB_EIO, "/nonexistent-dir");
  l->values[3] = -1;
  ck_assert_int_eq(eplb_loads_write_csv(l, eplb_test_tmp("neg.csv")), EPLB_ERANGE);
  ck_assert(!eplb_test_exists(eplb_test_tmp("neg.csv")));
  ck_assert_int_eq(count_tmp_files(), 0);
  eplb_loads_destroy(l);
  eplb_loads_destroy(NULL);
}
END_TEST

START_TEST(loads_read_reference_matrices) {
  char path[1024];
  eplb_loads_t *l = NULL;
  snprintf(path, sizeof path, "%s/eplb-reference/v_small_loads.csv", eplb_test_samples());
  ck_assert_int_eq(eplb_loads_read(path, 0, UINT64_MAX, &l), EPLB_OK);
  ck_assert_uint_eq(l->num_layers, 2);
  ck_assert_uint_eq(l->num_experts, 16);
  ck_assert(l->values[0] == 87 && l->values[1] == 17 && l->values[15] == 100);
  ck_assert(l->values[16] == 144 && l->values[31] == 191);
  eplb_loads_destroy(l);
  snprintf(path, sizeof path, "%s/eplb-reference/i_zipf1_h288_loads.csv", eplb_test_samples());
  ck_assert_int_eq(eplb_loads_read(path, 0, UINT64_MAX, &l), EPLB_OK);
  ck_assert_uint_eq(l->num_layers, 58);
  ck_assert_uint_eq(l->num_experts, 256);
  eplb_loads_destroy(l);
}
END_TEST

START_TEST(csv_matrix_bad_inputs_name_line_and_column) {
  static const struct {
    const char *text, *fragment;
  } cases[] = {
      {"", "m.csv:1:1: empty file"},
      {"\n\n", "m.csv:1:1: empty file"},
      {"1,2,3\n4,5\n", "m.csv:2:4: row has 2 columns, line 1 has 3"},
      {"1,2\n4,5,6\n", "m.csv:2:5: row has more than 2 columns"},
      {"1,2\n3,-4\n", "m.csv:2:3: negative value"},
      {"1,nan\n", "m.csv:1:3: value is not finite"},
      {"1, inf\n", "m.csv:1:4: value is not finite"},
      {"1,2\n3,abc\n", "m.csv:2:3: not a number"},
      {"1,,2\n", "m.csv:1:3: empty field"},
      {"1,2,\n", "m.csv:1:5: empty field"},
      {"1,2\n\n3,4\n", "m.csv:2:1: empty line"},
      {"1,0x10\n", "m.csv:1:3: not a number"},
      {"1,1e999\n", "m.csv:1:3: value out of range"},
  };
  const char *p = eplb_test_tmp("m.csv");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    eplb_loads_t *l = (eplb_loads_t *)1;
    write_text(p, cases[i].text);
    expect_error(eplb_loads_read(p, 0, UINT64_MAX, &l), EPLB_EFORMAT, cases[i].fragment);
    ck_assert_ptr_null(l);
  }
  /* Accepted: CRLF, spaces, no final newline, trailing blank lines, fractions. */
  eplb_loads_t *l = NULL;
  write_text(p, "1.5 , 2e1\r\n 0,.25\r\n\n");
  ck_assert_int_eq(eplb_loads_read(p, 0, UINT64_MAX, &l), EPLB_OK);
  ck_assert(l->values[0] == 1.5 && l->values[1] == 20 && l->values[2] == 0 && l->values[3] == 0.25);
  eplb_loads_destroy(l);
  expect_error(eplb_loads_read(eplb_test_tmp("missing.csv"), 0, 1, &l), EPLB_EIO, "missing.csv");
}
END_TEST

START_TEST(csv_long_reads_any_order_and_rejects_bad_rows) {
  const char *p = eplb_test_tmp("long.csv");
  eplb_loads_t *l = NULL;
  write_text(p, "step,layer,expert,count\n2,1,3,5\n0,0,0,1\n1,1,3,2\n0,1,3,4\n");
  ck_assert_int_eq(eplb_loads_read(p, 0, UINT64_MAX, &l), EPLB_OK);
  ck_assert_uint_eq(l->num_layers, 2);
  ck_assert_uint_eq(l->num_experts, 4);
  ck_assert(l->values[0] == 1 && l->values[7] == 11);
  eplb_loads_destroy(l);
  ck_assert_int_eq(eplb_loads_read(p, 1, 2, &l), EPLB_OK);
  ck_assert(l->values[0] == 0 && l->values[7] == 2);
  eplb_loads_destroy(l);
  static const struct {
    const char *text;
    eplb_status_t st;
    const char *fragment;
  } cases[] = {
      {"step,layer,expert,count\n", EPLB_EFORMAT, "no data rows"},
      {"step,layer,expert,count\n0,0,0,1\n0,0,0,2\n", EPLB_EFORMAT,
       "long.csv:3:1: duplicate entry for step 0, layer 0, expert 0 (first on line 2)"},
      {"step,layer,expert,count\n0,0,-1,1\n", EPLB_EFORMAT, "long.csv:2:5: negative expert"},
      {"step,layer,expert,count\n0,0,1.5,1\n", EPLB_EFORMAT, "long.csv:2:5: expert must be"},
      {"step,layer,expert,count\n0,0,1\n", EPLB_EFORMAT, "long.csv:2:6: expected 4 fields"},
      {"step,layer,expert,count\n0,0,1,2,3\n", EPLB_EFORMAT, "long.csv:2:8: expected 4 fields"},
      {"step,layer,expert,count\n0,4096,1,2\n", EPLB_ERANGE, "long.csv:2:3: layer 4096 exceeds"},
      {"step,layer,expert,count\n0,1,1,4294967296\n", EPLB_ERANGE, "count 4294967296"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_text(p, cases[i].text);
    expect_error(eplb_loads_read(p, 0, UINT64_MAX, &l), cases[i].st, cases[i].fragment);
  }
}
END_TEST

/* ---- NPY --------------------------------------------------------------------- */

START_TEST(npy_counts_dtypes_versions_and_ranges) {
  /* [3 steps, 1 layer, 2 experts] = {1,2},{3,4},{5,6} in several encodings. */
  const char *p = eplb_test_tmp("c.npy");
  eplb_loads_t *l = NULL;
  const unsigned char u1[6] = {1, 2, 3, 4, 5, 6};
  const unsigned char be2[12] = {0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6};
  unsigned char le8[48] = {0};
  for (int i = 0; i < 6; i++)
    le8[8 * i] = (unsigned char)(i + 1);
  const struct {
    int major;
    const char *descr;
    const void *data;
    size_t len;
  } enc[] = {{1, "|u1", u1, 6}, {2, ">u2", be2, 12}, {3, "<i8", le8, 48}, {1, "<u8", le8, 48}};
  for (size_t i = 0; i < sizeof enc / sizeof *enc; i++) {
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (3, 1, 2), }",
             enc[i].descr);
    write_npy(p, enc[i].major, dict, enc[i].data, enc[i].len);
    ck_assert_int_eq(eplb_loads_read(p, 0, UINT64_MAX, &l), EPLB_OK);
    ck_assert(l->values[0] == 9 && l->values[1] == 12);
    eplb_loads_destroy(l);
    ck_assert_int_eq(eplb_loads_read(p, 1, 2, &l), EPLB_OK);
    ck_assert(l->values[0] == 3 && l->values[1] == 4);
    eplb_loads_destroy(l);
    ck_assert_int_eq(eplb_loads_read(p, 2, 1, &l), EPLB_OK);
    ck_assert(l->values[0] == 0 && l->values[1] == 0);
    eplb_loads_destroy(l);
  }
  /* A 2-D [L, E] array is one matrix; the step range does not apply. */
  write_npy(p, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", u1, 6);
  ck_assert_int_eq(eplb_loads_read(p, 5, 9, &l), EPLB_OK);
  ck_assert_uint_eq(l->num_layers, 2);
  ck_assert_uint_eq(l->num_experts, 3);
  ck_assert(l->values[0] == 1 && l->values[5] == 6);
  eplb_loads_destroy(l);
  /* Python 2 longs, double quotes and key order do not matter. */
  write_npy(p, 1, "{\"shape\": (3L, 1L, 2L), \"fortran_order\": False, \"descr\": \"|u1\"}", u1, 6);
  ck_assert_int_eq(eplb_loads_read(p, 0, UINT64_MAX, &l), EPLB_OK);
  ck_assert(l->values[1] == 12);
  eplb_loads_destroy(l);
}
END_TEST

START_TEST(npy_bad_inputs) {
  const char *p = eplb_test_tmp("bad.npy");
  eplb_loads_t *l = NULL;
  const unsigned char d[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  static const struct {
    const char *dict;
    size_t len;
    eplb_status_t st;
    const char *fragment;
  } cases[] = {
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (3, 1, 2), }", 5, EPLB_ETRUNCATED,
       "cut short"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (3, 1, 2), }", 7, EPLB_EFORMAT,
       "after its data"},
      {"{'descr': '|u1', 'fortran_order': True, 'shape': (3, 1, 2), }", 6, EPLB_EFORMAT,
       "Fortran order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1), }", 12, EPLB_EFORMAT,
       "dtype '<f4' is not supported"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (3, 1, 2), }", 6, EPLB_ETRUNCATED,
       "shape needs"},
      {"{'descr': '|u1', 'fortran_order': False}", 6, EPLB_EFORMAT, "needs the keys"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (3, 1, 2), 'x': 1}", 6, EPLB_EFORMAT,
       "unexpected key 'x'"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (6,), }", 6, EPLB_ESHAPE, "1 dimensions"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}", 6,
       EPLB_EFORMAT, "too large"},
      {"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (3,)}", 6, EPLB_EFORMAT,
       "structured"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_npy(p, 1, cases[i].dict, d, cases[i].len);
    expect_error(eplb_loads_read(p, 0, UINT64_MAX, &l), cases[i].st, cases[i].fragment);
    ck_assert_ptr_null(l);
  }
  /* Negative counts of a signed dtype. */
  const signed char neg[6] = {1, 2, 3, -4, 5, 6};
  write_npy(p, 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3, 1, 2), }", neg, 6);
  expect_error(eplb_loads_read(p, 0, UINT64_MAX, &l), EPLB_EFORMAT,
               "negative count -4 at [1, 0, 1]");
  /* Not NPY at all, empty, cut in the preamble or header. */
  eplb_test_write_file(p, "hello world", 11);
  expect_error(eplb_loads_read(p, 0, 1, &l), EPLB_EFORMAT, "not an NPY file");
  eplb_test_write_file(p, "", 0);
  expect_error(eplb_loads_read(p, 0, 1, &l), EPLB_EFORMAT, "empty file");
  eplb_test_write_file(p, "\x93NUMPY\x01", 7);
  expect_error(eplb_loads_read(p, 0, 1, &l), EPLB_ETRUNCATED, "preamble");
  eplb_test_write_file(p, "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
  expect_error(eplb_loads_read(p, 0, 1, &l), EPLB_ETRUNCATED, "header");
  eplb_test_write_file(p, "\x93NUMPY\x04\x00\x40\x00", 10);
  expect_error(eplb_loads_read(p, 0, 1, &l), EPLB_EFORMAT, "version 4.0");
}
END_TEST

/* ---- conversions ------------------------------------------------------------- */

enum { TL = 3, TE = 5, TK = 2, TT = 4 };

/* A native trace of TT steps with deterministic counts and no top-k rows. */
static void make_trace(const char *path, uint64_t steps) {
  eplb_trace_meta_t m;
  eplb_trace_meta_default(&m);
  m.num_layers = TL;
  m.num_experts = TE;
  m.topk = TK;
  eplb_trace_writer_t *w = NULL;
  ck_assert_int_eq(eplb_trace_writer_create(path, &m, NULL, &w), EPLB_OK);
  for (uint64_t s = 0; s < steps; s++) {
    uint32_t counts[TL * TE];
    for (int i = 0; i < TL * TE; i++)
      counts[i] = (uint32_t)((s * 7 + (uint64_t)i * 3) % 11);
    counts[TL * TE - 1] = 0; /* the last cell is zero: the CSV must keep the shape */
    eplb_trace_step_t st = {.num_tokens = 10, .counts = counts};
    ck_assert_int_eq(eplb_trace_writer_append(w, &st), EPLB_OK);
  }
  ck_assert_int_eq(eplb_trace_writer_finish(w), EPLB_OK);
  eplb_trace_writer_destroy(w);
}

static void assert_same_counts(const char *a, const char *b) {
  eplb_trace_t *x = NULL, *y = NULL;
  ck_assert_msg(eplb_trace_open(a, NULL, &x) == EPLB_OK, "%s", eplb_error_detail());
  ck_assert_msg(eplb_trace_open(b, NULL, &y) == EPLB_OK, "%s", eplb_error_detail());
  const eplb_trace_meta_t *mx = eplb_trace_meta(x), *my = eplb_trace_meta(y);
  ck_assert_uint_eq(mx->num_layers, my->num_layers);
  ck_assert_uint_eq(mx->num_experts, my->num_experts);
  ck_assert_uint_eq(eplb_trace_num_steps(x), eplb_trace_num_steps(y));
  size_t le = (size_t)mx->num_layers * mx->num_experts;
  for (uint64_t s = 0; s < eplb_trace_num_steps(x); s++) {
    eplb_trace_step_t sx, sy;
    ck_assert_int_eq(eplb_trace_read_step(x, s, &sx), EPLB_OK);
    ck_assert_int_eq(eplb_trace_read_step(y, s, &sy), EPLB_OK);
    ck_assert_mem_eq(sx.counts, sy.counts, le * sizeof *sx.counts);
  }
  eplb_trace_close(x);
  eplb_trace_close(y);
}

START_TEST(convert_round_trips_through_every_format) {
  char a[1024], one[1024];
  tmp_copy(a, sizeof a, "a.eplbt");
  make_trace(a, TT);
  ck_assert_int_eq(eplb_trace_convert(a, eplb_test_tmp("a.npy"), NULL), EPLB_OK);
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("a.npy"), eplb_test_tmp("a.csv"), NULL),
                   EPLB_OK);
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("a.csv"), eplb_test_tmp("b.eplbt"), NULL),
                   EPLB_OK);
  assert_same_counts(a, eplb_test_tmp("b.eplbt"));
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("a.csv"), eplb_test_tmp("c.npy"), NULL),
                   EPLB_OK);
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("c.npy"), eplb_test_tmp("c.eplbt"), NULL),
                   EPLB_OK);
  assert_same_counts(a, eplb_test_tmp("c.eplbt"));
  /* The npy loads equal the trace's window sums. */
  eplb_loads_t *la = NULL, *lb = NULL;
  ck_assert_int_eq(eplb_loads_read(a, 1, 3, &la), EPLB_OK);
  ck_assert_int_eq(eplb_loads_read(eplb_test_tmp("a.npy"), 1, 3, &lb), EPLB_OK);
  ck_assert_mem_eq(la->values, lb->values, TL * TE * sizeof(double));
  eplb_loads_destroy(lb);
  ck_assert_int_eq(eplb_loads_read(eplb_test_tmp("a.csv"), 1, 3, &lb), EPLB_OK);
  ck_assert_mem_eq(la->values, lb->values, TL * TE * sizeof(double));
  eplb_loads_destroy(lb);
  eplb_loads_destroy(la);
  /* Matrix CSV: one step only. */
  eplb_trace_convert_options_t mo;
  eplb_trace_convert_options_default(&mo);
  mo.to = EPLB_TRACE_FORMAT_CSV_MATRIX;
  mo.tokens_per_step = 1;
  expect_error(eplb_trace_convert(a, eplb_test_tmp("m.csv"), &mo), EPLB_ESHAPE, "holds one step");
  ck_assert(!eplb_test_exists(eplb_test_tmp("m.csv")));
  tmp_copy(one, sizeof one, "one.eplbt");
  make_trace(one, 1);
  eplb_trace_convert_options_t o;
  eplb_trace_convert_options_default(&o);
  o.to = EPLB_TRACE_FORMAT_CSV_MATRIX;
  ck_assert_int_eq(eplb_trace_convert(one, eplb_test_tmp("m.csv"), &o), EPLB_OK);
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("m.csv"), eplb_test_tmp("m.eplbt"), NULL),
                   EPLB_OK);
  assert_same_counts(one, eplb_test_tmp("m.eplbt"));
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("m.csv"), eplb_test_tmp("m.npy"), NULL),
                   EPLB_OK);
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("m.npy"), eplb_test_tmp("m2.eplbt"), NULL),
                   EPLB_OK);
  assert_same_counts(one, eplb_test_tmp("m2.eplbt"));
  /* Given metadata reaches the output; wrong shapes are refused. */
  eplb_trace_meta_t meta;
  eplb_trace_meta_default(&meta);
  snprintf(meta.model, sizeof meta.model, "test-model");
  meta.num_ranks = 4;
  eplb_trace_convert_options_default(&o);
  o.meta = &meta;
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("a.csv"), eplb_test_tmp("d.eplbt"), &o),
                   EPLB_OK);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(eplb_test_tmp("d.eplbt"), NULL, &t), EPLB_OK);
  ck_assert_str_eq(eplb_trace_meta(t)->model, "test-model");
  ck_assert_uint_eq(eplb_trace_meta(t)->num_ranks, 4);
  ck_assert_ptr_nonnull(strstr(eplb_trace_meta(t)->origin, "a.csv"));
  eplb_trace_close(t);
  meta.num_layers = 7;
  meta.num_experts = 9;
  expect_error(eplb_trace_convert(eplb_test_tmp("a.npy"), eplb_test_tmp("e.eplbt"), &o),
               EPLB_ESHAPE, "metadata");
  ck_assert(!eplb_test_exists(eplb_test_tmp("e.eplbt")));
  /* The long CSV takes given dimensions over the inferred ones. */
  ck_assert_int_eq(eplb_trace_convert(eplb_test_tmp("a.csv"), eplb_test_tmp("e.eplbt"), &o),
                   EPLB_OK);
  ck_assert_int_eq(eplb_trace_open(eplb_test_tmp("e.eplbt"), NULL, &t), EPLB_OK);
  ck_assert_uint_eq(eplb_trace_meta(t)->num_experts, 9);
  eplb_trace_close(t);
  ck_assert_int_eq(count_tmp_files(), 0);
}
END_TEST

START_TEST(convert_failures_leave_no_file) {
  char a[1024];
  tmp_copy(a, sizeof a, "f.eplbt");
  make_trace(a, 2);
  expect_error(eplb_trace_convert(a, "/nonexistent-dir/x.npy", NULL), EPLB_EIO,
               "/nonexistent-dir/x.npy");
  ck_assert_int_ne(eplb_trace_convert(a, "/nonexistent-dir/x.eplbt", NULL), EPLB_OK);
  ck_assert_int_eq(eplb_trace_convert(a, eplb_test_tmp("x.unknown"), NULL), EPLB_EINVAL);
  /* A bad row late in the input: the partial output is removed. */
  const char *p = eplb_test_tmp("late.csv");
  write_text(p, "step,layer,expert,count\n0,0,0,1\n1,0,0,1\n2,0,0,x\n");
  expect_error(eplb_trace_convert(p, eplb_test_tmp("late.npy"), NULL), EPLB_EFORMAT,
               "late.csv:4:7");
  ck_assert(!eplb_test_exists(eplb_test_tmp("late.npy")));
  const signed char neg[6] = {1, 2, 3, 4, 5, -6};
  write_npy(eplb_test_tmp("neg.npy"), 1,
            "{'descr': '|i1', 'fortran_order': False, 'shape': (3, 1, 2), }", neg, 6);
  expect_error(eplb_trace_convert(eplb_test_tmp("neg.npy"), eplb_test_tmp("neg.csv"), NULL),
               EPLB_EFORMAT, "[2, 0, 1] is negative");
  ck_assert(!eplb_test_exists(eplb_test_tmp("neg.csv")));
  write_text(eplb_test_tmp("frac.csv"), "1,2.5\n");
  expect_error(eplb_trace_convert(eplb_test_tmp("frac.csv"), eplb_test_tmp("frac.npy"), NULL),
               EPLB_EFORMAT, "frac.csv:1: value 2.5 in column 2");
  ck_assert_int_eq(count_tmp_files(), 0);
}
END_TEST

/* ---- top-k import ------------------------------------------------------------- */

START_TEST(convert_imports_esft_topk_ids) {
  char in[1024];
  snprintf(in, sizeof in, "%s/esft-dsv2lite/topk_ids.npy", eplb_test_samples());
  size_t len;
  unsigned char *raw = eplb_test_read_file(in, &len);
  size_t hlen = (size_t)raw[8] | (size_t)raw[9] << 8;
  const unsigned char *ids = raw + 10 + hlen;
  enum { NT = 33279, NL = 26, K = 6, E = 64, TPS = 1000, ROWS = 5 };
  ck_assert_uint_eq(len - 10 - hlen, (size_t)NT * NL * K);
  eplb_trace_convert_options_t o;
  eplb_trace_convert_options_default(&o);
  o.from = EPLB_TRACE_FORMAT_NPY_TOPK;
  o.tokens_per_step = TPS;
  o.topk_rows_per_step = ROWS;
  char out[1024];
  tmp_copy(out, sizeof out, "esft.eplbt");
  ck_assert_msg(eplb_trace_convert(in, out, &o) == EPLB_OK, "%s", eplb_error_detail());
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(out, NULL, &t), EPLB_OK);
  const eplb_trace_meta_t *m = eplb_trace_meta(t);
  ck_assert_uint_eq(m->num_layers, NL);
  ck_assert_uint_eq(m->num_experts, E);
  ck_assert_uint_eq(m->topk, K);
  ck_assert_uint_eq(eplb_trace_num_steps(t), (NT + TPS - 1) / TPS);
  ck_assert_uint_eq(eplb_trace_num_tokens(t), NT);
  static uint32_t want[NL * E];
  eplb_trace_step_t st;
  for (uint64_t s = 0; eplb_trace_next(t, &st) == EPLB_OK; s++) {
    size_t first = (size_t)s * TPS, n = NT - first < TPS ? NT - first : TPS;
    ck_assert_uint_eq(st.num_tokens, n);
    memset(want, 0, sizeof want);
    for (size_t tok = first; tok < first + n; tok++)
      for (int l = 0; l < NL; l++)
        for (int j = 0; j < K; j++)
          want[l * E + ids[(tok * NL + (size_t)l) * K + (size_t)j]]++;
    ck_assert_mem_eq(st.counts, want, sizeof want);
    ck_assert_uint_eq(st.num_rows, ROWS);
    for (size_t i = 0; i < (size_t)ROWS * NL * K; i++)
      ck_assert_uint_eq(st.topk[i], ids[first * NL * K + i]);
    ck_assert_int_eq(st.source_rank[0], -1);
  }
  eplb_trace_close(t);
  /* The same ids with too few experts, or a duplicate in one row. */
  o.num_experts = 32;
  expect_error(eplb_trace_convert(in, eplb_test_tmp("small.eplbt"), &o), EPLB_ERANGE,
               "outside 0..31");
  ck_assert(!eplb_test_exists(eplb_test_tmp("small.eplbt")));
  free(raw);
  const unsigned char dup[2 * 2 * 2] = {0, 1, 2, 3, 4, 5, 6, 6};
  write_npy(eplb_test_tmp("dup.npy"), 1,
            "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 2), }", dup, sizeof dup);
  eplb_trace_convert_options_default(&o);
  o.from = EPLB_TRACE_FORMAT_NPY_TOPK;
  expect_error(eplb_trace_convert(eplb_test_tmp("dup.npy"), eplb_test_tmp("dup.eplbt"), &o),
               EPLB_EFORMAT, "token 1, layer 1 chooses expert 6 twice");
  const unsigned char neg[16] = {0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 3, 0, 0, 0};
  write_npy(eplb_test_tmp("negid.npy"), 1,
            "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 1, 2), }", neg, sizeof neg);
  expect_error(eplb_trace_convert(eplb_test_tmp("negid.npy"), eplb_test_tmp("negid.eplbt"), &o),
               EPLB_ERANGE, "negative expert id -1 at token 0, layer 0");
  ck_assert_int_eq(count_tmp_files(), 0);
}
END_TEST

/* Every allocation failure is reported as ENOMEM and leaks nothing (ASan). */
START_TEST(allocation_failures_are_clean) {
  char m[1024], lg[1024], np[1024], out[1024];
  tmp_copy(m, sizeof m, "am.csv");
  tmp_copy(lg, sizeof lg, "al.csv");
  tmp_copy(np, sizeof np, "an.npy");
  tmp_copy(out, sizeof out, "aout.npy");
  write_text(m, "1,2,3\n4,5,6\n");
  write_text(lg, "step,layer,expert,count\n1,0,2,5\n0,1,0,3\n");
  const unsigned char u1[6] = {1, 2, 3, 4, 5, 6};
  write_npy(np, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 1, 2), }", u1, 6);
  const char *inputs[3] = {m, lg, np};
  eplb_test_alloc_install();
  for (int i = 0; i < 3; i++) {
    for (long n = 0;; n++) {
      eplb_loads_t *l = NULL;
      eplb_test_alloc_fail_after(n);
      eplb_status_t st = eplb_loads_read(inputs[i], 0, UINT64_MAX, &l);
      eplb_test_alloc_reset();
      if (st == EPLB_OK) {
        eplb_loads_destroy(l);
        break;
      }
      ck_assert_int_eq(st, EPLB_ENOMEM);
      ck_assert_ptr_null(l);
    }
    unlink(out);
    for (long n = 0;; n++) {
      eplb_test_alloc_fail_after(n);
      eplb_status_t st = eplb_trace_convert(inputs[i], out, NULL);
      eplb_test_alloc_reset();
      if (st == EPLB_OK)
        break;
      ck_assert_msg(st == EPLB_ENOMEM, "%d %s", st, eplb_error_detail());
      ck_assert(!eplb_test_exists(out));
    }
  }
  eplb_allocator_set(NULL);
  ck_assert_int_eq(count_tmp_files(), 0);
}
END_TEST

START_TEST(format_and_phase_names) {
  for (int f = EPLB_TRACE_FORMAT_AUTO; f <= EPLB_TRACE_FORMAT_CSV_MATRIX; f++) {
    const char *name = eplb_trace_format_str((eplb_trace_format_t)f);
    eplb_trace_format_t back = (eplb_trace_format_t)-1;
    ck_assert_ptr_nonnull(name);
    ck_assert_int_eq(eplb_trace_format_parse(name, &back), EPLB_OK);
    ck_assert_int_eq(back, f);
  }
  ck_assert_ptr_null(eplb_trace_format_str((eplb_trace_format_t)99));
  ck_assert_str_eq(eplb_trace_format_str(EPLB_TRACE_FORMAT_NPY_TOPK), "topk-npy");
  static const struct {
    const char *alias;
    eplb_trace_format_t f;
  } aliases[] = {{"native", EPLB_TRACE_FORMAT_NATIVE},
                 {"npy-topk", EPLB_TRACE_FORMAT_NPY_TOPK},
                 {"npy-counts", EPLB_TRACE_FORMAT_NPY_COUNTS},
                 {"npy", EPLB_TRACE_FORMAT_NPY_COUNTS}};
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    eplb_trace_format_t f = EPLB_TRACE_FORMAT_AUTO;
    ck_assert_int_eq(eplb_trace_format_parse(aliases[i].alias, &f), EPLB_OK);
    ck_assert_int_eq(f, aliases[i].f);
  }
  eplb_trace_format_t f = EPLB_TRACE_FORMAT_CSV;
  expect_error(eplb_trace_format_parse("topk", &f), EPLB_EINVAL, "topk-npy");
  ck_assert_int_eq(f, EPLB_TRACE_FORMAT_CSV);
  ck_assert_int_eq(eplb_trace_format_parse(NULL, &f), EPLB_EINVAL);
  for (int p = EPLB_PHASE_UNKNOWN; p <= EPLB_PHASE_MIXED; p++) {
    eplb_trace_phase_t back = EPLB_PHASE_UNKNOWN;
    ck_assert_int_eq(eplb_trace_phase_parse(eplb_trace_phase_str((eplb_trace_phase_t)p), &back),
                     EPLB_OK);
    ck_assert_int_eq(back, p);
  }
  eplb_trace_phase_t ph = EPLB_PHASE_DECODE;
  expect_error(eplb_trace_phase_parse("train", &ph), EPLB_EINVAL, "train");
  ck_assert_int_eq(ph, EPLB_PHASE_DECODE);
}
END_TEST

/* Statistics against a direct computation on make_trace's counts. */
START_TEST(trace_stats_figures_and_errors) {
  const char *path = eplb_test_tmp("stats.eplbt");
  make_trace(path, TT);
  eplb_trace_t *t = NULL;
  ck_assert_int_eq(eplb_trace_open(path, NULL, &t), EPLB_OK);
  eplb_trace_stats_options_t o;
  eplb_trace_stats_options_default(&o);
  static const uint32_t ep[] = {1, 5};
  o.ep = ep, o.num_ep = 2;
  o.step_begin = 1;
  eplb_trace_stats_t *s = NULL;
  ck_assert_msg(eplb_trace_stats(t, &o, &s) == EPLB_OK, "%s", eplb_error_detail());
  ck_assert_uint_eq(s->step_begin, 1);
  ck_assert_uint_eq(s->step_end, TT); /* clamped */
  ck_assert_uint_eq(s->num_layers, TL);
  ck_assert_uint_eq(s->num_ep, 2);
  double mean_expert = 0;
  for (uint32_t l = 0; l < TL; l++) {
    double w[TE] = {0}, total = 0, max = 0;
    for (uint64_t st = 1; st < TT; st++)
      for (uint32_t e = 0; e < TE; e++) {
        uint32_t c = (uint32_t)((st * 7 + (uint64_t)(l * TE + e) * 3) % 11);
        w[e] += l * TE + e == TL * TE - 1 ? 0 : c;
      }
    for (uint32_t e = 0; e < TE; e++) {
      total += w[e];
      max = w[e] > max ? w[e] : max;
    }
    ck_assert_double_eq_tol(s->expert_over_mean[l], max / (total / TE), 1e-12);
    /* One GPU holds every expert: busiest = mean. With one expert per GPU,
     * the GPU ratio is the expert ratio. */
    ck_assert_double_eq_tol(s->gpu_over_mean[l * 2 + 0], 1.0, 1e-12);
    ck_assert_double_eq_tol(s->gpu_over_mean[l * 2 + 1], s->expert_over_mean[l], 1e-12);
    ck_assert_double_eq_tol(s->gpu_over_mean_per_step[l * 2 + 0], 1.0, 1e-12);
    ck_assert(s->step_correlation[l] >= -1 && s->step_correlation[l] <= 1);
    mean_expert += s->expert_over_mean[l] / TL;
  }
  ck_assert_double_eq_tol(s->mean_expert_over_mean, mean_expert, 1e-12);
  ck_assert_double_eq_tol(s->mean_gpu_over_mean[0], 1.0, 1e-12);
  eplb_trace_stats_destroy(s);
  eplb_trace_stats_destroy(NULL);
  /* Defaults: EP 8, 16, 32 all exceed the 5 experts: EP 5 (the experts). */
  ck_assert_msg(eplb_trace_stats(t, NULL, &s) == EPLB_OK, "%s", eplb_error_detail());
  ck_assert_uint_eq(s->num_ep, 1);
  ck_assert_uint_eq(s->ep[0], TE);
  eplb_trace_stats_destroy(s);
  /* An EP size above the experts, asked for: an error naming it. */
  static const uint32_t ep8[] = {8};
  eplb_trace_stats_options_t o8 = o;
  o8.ep = ep8, o8.num_ep = 1;
  s = (eplb_trace_stats_t *)1;
  expect_error(eplb_trace_stats(t, &o8, &s), EPLB_ERANGE, "ep 8");
  ck_assert_ptr_null(s);
  o.step_begin = TT;
  expect_error(eplb_trace_stats(t, &o, &s), EPLB_ERANGE, "step_begin 4: selects no step");
  ck_assert_int_eq(eplb_trace_stats(NULL, &o, &s), EPLB_EINVAL);
  /* A single step: no correlation (NaN), per-step = window. */
  o.step_begin = 0, o.step_end = 1;
  ck_assert_int_eq(eplb_trace_stats(t, &o, &s), EPLB_OK);
  ck_assert(isnan(s->step_correlation[0]) && isnan(s->mean_step_correlation));
  ck_assert_double_eq_tol(s->gpu_over_mean[1], s->gpu_over_mean_per_step[1], 1e-12);
  eplb_trace_stats_destroy(s);
  /* Every allocation failure is EPLB_ENOMEM with nothing returned. */
  eplb_test_alloc_install();
  o.step_end = UINT64_MAX;
  for (long n = 0;; n++) {
    eplb_test_alloc_fail_after(n);
    eplb_status_t st = eplb_trace_stats(t, &o, &s);
    eplb_test_alloc_reset();
    if (st == EPLB_OK)
      break;
    ck_assert_msg(st == EPLB_ENOMEM, "%d %s", st, eplb_error_detail());
    ck_assert_ptr_null(s);
  }
  eplb_allocator_set(NULL);
  eplb_trace_stats_destroy(s);
  eplb_trace_close(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("traces-interop");
  TCase *tc = tcase_create("interop");
  tcase_add_test(tc, loads_create_write_read_round_trip);
  tcase_add_test(tc, loads_read_reference_matrices);
  tcase_add_test(tc, csv_matrix_bad_inputs_name_line_and_column);
  tcase_add_test(tc, csv_long_reads_any_order_and_rejects_bad_rows);
  tcase_add_test(tc, npy_counts_dtypes_versions_and_ranges);
  tcase_add_test(tc, npy_bad_inputs);
  tcase_add_test(tc, convert_round_trips_through_every_format);
  tcase_add_test(tc, convert_failures_leave_no_file);
  tcase_add_test(tc, convert_imports_esft_topk_ids);
  tcase_add_test(tc, allocation_failures_are_clean);
  tcase_add_test(tc, format_and_phase_names);
  tcase_add_test(tc, trace_stats_figures_and_errors);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
