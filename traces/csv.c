#include "traces/traces.h"

#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE ((size_t)64 << 20)

/* ---- line reader (the library's allocator, any line length) ------------- */

typedef struct lines {
  FILE *f;
  const char *path;
  char *buf;
  size_t cap, len, start;
  uint64_t lineno;
  bool eof;
} lines_t;

static eplb_status_t lines_open(lines_t *r, const char *path) {
  memset(r, 0, sizeof *r);
  r->path = path;
  eplb_status_t st = eplb__check_input(path, "traces");
  if (st)
    return st;
  r->f = fopen(path, "rb");
  if (!r->f)
    return eplb__error(EPLB_EIO, "traces", "%s: cannot open: %s", path, strerror(errno));
  return EPLB_OK;
}

static void lines_close(lines_t *r) {
  if (r->f)
    fclose(r->f);
  eplb__free(r->buf);
  memset(r, 0, sizeof *r);
}

/* *line is NUL-terminated without its "\n" or "\r\n"; NULL at end of file. */
static eplb_status_t lines_next(lines_t *r, char **line, size_t *len) {
  for (;;) {
    char *nl = r->len > r->start ? memchr(r->buf + r->start, '\n', r->len - r->start) : NULL;
    if (nl || (r->eof && r->start < r->len)) {
      char *s = r->buf + r->start;
      size_t n = nl ? (size_t)(nl - s) : r->len - r->start;
      r->start += nl ? n + 1 : n;
      if (n && s[n - 1] == '\r')
        n--;
      s[n] = '\0'; /* the '\n' (or spare byte) is overwritten */
      if (r->lineno == 0 && n >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0) {
        memmove(s, s + 3, n - 2); /* a UTF-8 byte order mark from spreadsheet exports */
        n -= 3;
      }
      r->lineno++;
      *line = s;
      *len = n;
      return EPLB_OK;
    }
    if (r->eof) {
      *line = NULL;
      *len = 0;
      return EPLB_OK;
    }
    if (r->start) {
      memmove(r->buf, r->buf + r->start, r->len - r->start);
      r->len -= r->start;
      r->start = 0;
    }
    if (r->cap - r->len < 4096 + 1) {
      if (r->cap > MAX_LINE)
        return eplb__error(EPLB_EFORMAT, "traces", "%s:%" PRIu64 ":1: line too long", r->path,
                           r->lineno + 1);
      size_t cap = r->cap ? r->cap * 2 : 65536;
      char *b = eplb__realloc(r->buf, cap);
      if (!b)
        return eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", r->path);
      r->buf = b;
      r->cap = cap;
    }
    /* One byte stays free for the terminator of an unterminated last line. */
    size_t got = fread(r->buf + r->len, 1, r->cap - r->len - 1, r->f);
    if (got == 0) {
      if (ferror(r->f))
        return eplb__error(EPLB_EIO, "traces", "%s: read failed", r->path);
      r->eof = true;
    }
    r->len += got;
  }
}

/* ---- fields ------------------------------------------------------------- */

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

static void trim(const char **s, const char **e) {
  while (*s < *e && is_blank(**s))
    (*s)++;
  while (*e > *s && is_blank((*e)[-1]))
    (*e)--;
}

/* Whether a line, blanks around it aside, is the long-form header. */
static bool is_long_header(const char *line, size_t len) {
  const char *s = line, *e = line + len;
  trim(&s, &e);
  return (size_t)(e - s) == strlen(EPLB__CSV_LONG_HEADER) &&
         memcmp(s, EPLB__CSV_LONG_HEADER, (size_t)(e - s)) == 0;
}

static bool line_is_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!is_blank(s[i]))
      return false;
  return true;
}

/* The next line that is not blank (*line NULL at end of file). Blank lines
 * may only end a file: one before more data is an error naming its line. */
static eplb_status_t data_line_next(lines_t *r, const char *path, char **line, size_t *len) {
  uint64_t blank = 0;
  for (;;) {
    eplb_status_t st = lines_next(r, line, len);
    if (st != EPLB_OK || !*line)
      return st;
    if (!line_is_blank(*line, *len)) {
      if (blank)
        return eplb__error(EPLB_EFORMAT, "traces", "%s:%" PRIu64 ":1: empty line", path, blank);
      return EPLB_OK;
    }
    if (!blank)
      blank = r->lineno;
  }
}

static eplb_status_t field_error(const lines_t *r, const char *line, const char *s, const char *e,
                                 const char *what) {
  int n = (int)(e - s > 40 ? 40 : e - s);
  return eplb__error(EPLB_EFORMAT, "traces", "%s:%" PRIu64 ":%zu: %s: '%.*s'", r->path, r->lineno,
                     (size_t)(s - line) + 1, what, n, s);
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Plain decimal: digits [. digits] [e [sign] digits], at least one mantissa digit. */
static bool decimal_syntax(const char *s, const char *e) {
  int digits = 0;
  while (s < e && is_digit(*s))
    s++, digits++;
  if (s < e && *s == '.') {
    s++;
    while (s < e && is_digit(*s))
      s++, digits++;
  }
  if (!digits)
    return false;
  if (s < e && (*s == 'e' || *s == 'E')) {
    s++;
    if (s < e && (*s == '+' || *s == '-'))
      s++;
    if (s >= e || !is_digit(*s))
      return false;
    while (s < e && is_digit(*s))
      s++;
  }
  return s == e;
}

static bool names_non_finite(const char *s, const char *e) {
  if (s < e && (*s == '+' || *s == '-'))
    s++;
  size_t n = (size_t)(e - s);
  static const char *const words[] = {"nan", "inf", "infinity"};
  for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
    if (strlen(words[w]) != n)
      continue;
    size_t i = 0;
    while (i < n && (s[i] | 0x20) == words[w][i])
      i++;
    if (i == n)
      return true;
  }
  return false;
}

/* A non-negative finite number in [s, e) (already trimmed). */
static eplb_status_t parse_number(const lines_t *r, const char *line, const char *s, const char *e,
                                  double *out) {
  if (s == e)
    return field_error(r, line, s, e, "empty field");
  if (names_non_finite(s, e))
    return field_error(r, line, s, e, "value is not finite");
  const char *m = s < e && *s == '+' ? s + 1 : s;
  if (*s == '-')
    return field_error(r, line, s, e, decimal_syntax(s + 1, e) ? "negative value" : "not a number");
  if (!decimal_syntax(m, e))
    return field_error(r, line, s, e, "not a number");
  char buf[128];
  size_t n = (size_t)(e - m);
  if (n >= sizeof buf)
    return field_error(r, line, s, e, "number too long");
  memcpy(buf, m, n);
  buf[n] = '\0';
  /* strtod follows LC_NUMERIC; files always use '.'. */
  const char *dp = localeconv()->decimal_point;
  char *dot = strchr(buf, '.');
  if (dot && dp && dp[0] && dp[0] != '.' && !dp[1])
    *dot = dp[0];
  double v = strtod(buf, NULL);
  if (!isfinite(v))
    return field_error(r, line, s, e, "value out of range");
  *out = v + 0.0; /* -0 never reaches here, but keep zeros positive */
  return EPLB_OK;
}

/* A non-negative integer <= max; larger is EPLB_ERANGE. */
static eplb_status_t parse_uint(const lines_t *r, const char *line, const char *s, const char *e,
                                uint64_t max, const char *name, uint64_t *out) {
  if (s == e)
    return field_error(r, line, s, e, "empty field");
  if (*s == '-' && e - s > 1 && is_digit(s[1]))
    return eplb__error(EPLB_EFORMAT, "traces", "%s:%" PRIu64 ":%zu: negative %s", r->path,
                       r->lineno, (size_t)(s - line) + 1, name);
  uint64_t v = 0;
  bool over = false;
  for (const char *p = s; p < e; p++) {
    if (!is_digit(*p)) {
      char what[64];
      snprintf(what, sizeof what, "%s must be a non-negative integer", name);
      return field_error(r, line, s, e, what);
    }
    unsigned d = (unsigned)(*p - '0');
    if (v > (UINT64_MAX - d) / 10)
      over = true;
    else
      v = v * 10 + d;
  }
  if (over || v > max)
    return eplb__error(EPLB_ERANGE, "traces", "%s:%" PRIu64 ":%zu: %s %.*s exceeds %" PRIu64,
                       r->path, r->lineno, (size_t)(s - line) + 1, name,
                       (int)(e - s > 24 ? 24 : e - s), s, max);
  *out = v;
  return EPLB_OK;
}

/* ---- matrix ------------------------------------------------------------- */

eplb_status_t eplb__csv_sniff(const char *path, bool *is_long) {
  lines_t r;
  char *line;
  size_t len;
  eplb_status_t st = lines_open(&r, path);
  if (st != EPLB_OK)
    return st;
  *is_long = false;
  /* Only the first line matters; long lines are cut by the reader's cap. */
  if ((st = lines_next(&r, &line, &len)) == EPLB_OK && line)
    *is_long = is_long_header(line, len);
  lines_close(&r);
  return st;
}

eplb_status_t eplb__csv_read_matrix(const char *path, eplb_loads_t **out) {
  eplb_status_t st;
  lines_t r;
  char *line;
  size_t len;
  double *vals = NULL;
  size_t nvals = 0, cap = 0;
  uint32_t rows = 0, cols = 0;
  *out = NULL;
  if ((st = lines_open(&r, path)) != EPLB_OK)
    return st;
  for (;;) {
    if ((st = data_line_next(&r, path, &line, &len)) != EPLB_OK)
      goto fail;
    if (!line)
      break;
    if (rows >= EPLB_TRACE_MAX_LAYERS) {
      st = eplb__error(EPLB_ERANGE, "traces", "%s:%" PRIu64 ":1: more than %u rows (layers)", path,
                       r.lineno, EPLB_TRACE_MAX_LAYERS);
      goto fail;
    }
    uint32_t n = 0;
    const char *p = line, *end = line + len;
    for (;;) {
      const char *comma = memchr(p, ',', (size_t)(end - p));
      const char *fe = comma ? comma : end;
      const char *s = p;
      trim(&s, &fe);
      if (rows > 0 && n >= cols) {
        st = eplb__error(EPLB_EFORMAT, "traces",
                         "%s:%" PRIu64 ":%zu: row has more than %" PRIu32 " columns like line 1",
                         path, r.lineno, (size_t)(s - line) + 1, cols);
        goto fail;
      }
      if (n >= EPLB_TRACE_MAX_EXPERTS) {
        st = eplb__error(EPLB_ERANGE, "traces", "%s:%" PRIu64 ":%zu: more than %u columns", path,
                         r.lineno, (size_t)(s - line) + 1, EPLB_TRACE_MAX_EXPERTS);
        goto fail;
      }
      if (nvals == cap) {
        size_t ncap = cap ? cap * 2 : 1024;
        double *nv = eplb__realloc_array(vals, ncap, sizeof *vals);
        if (!nv) {
          st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
          goto fail;
        }
        vals = nv;
        cap = ncap;
      }
      if ((st = parse_number(&r, line, s, fe, &vals[nvals])) != EPLB_OK)
        goto fail;
      nvals++;
      n++;
      if (!comma)
        break;
      p = comma + 1;
    }
    if (rows == 0)
      cols = n;
    else if (n != cols) {
      st = eplb__error(EPLB_EFORMAT, "traces",
                       "%s:%" PRIu64 ":%zu: row has %" PRIu32 " columns, line 1 has %" PRIu32, path,
                       r.lineno, len + 1, n, cols);
      goto fail;
    }
    rows++;
  }
  if (rows == 0) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s:1:1: empty file, expected a load matrix", path);
    goto fail;
  }
  if ((st = eplb_loads_create(rows, cols, out)) != EPLB_OK)
    goto fail;
  memcpy((*out)->values, vals, nvals * sizeof *vals);
fail:
  eplb__free(vals);
  lines_close(&r);
  return st;
}

/* ---- long form ---------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b) {
  const eplb__csv_entry_t *x = a, *y = b;
  if (x->step != y->step)
    return x->step < y->step ? -1 : 1;
  if (x->layer != y->layer)
    return x->layer < y->layer ? -1 : 1;
  if (x->expert != y->expert)
    return x->expert < y->expert ? -1 : 1;
  return x->line < y->line ? -1 : x->line > y->line;
}

eplb_status_t eplb__csv_read_long(const char *path, eplb__csv_long_t *out) {
  eplb_status_t st;
  lines_t r;
  char *line;
  size_t len, cap = 0;
  memset(out, 0, sizeof *out);
  if ((st = lines_open(&r, path)) != EPLB_OK)
    return st;
  if ((st = lines_next(&r, &line, &len)) != EPLB_OK)
    goto fail;
  if (!line) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s:1:1: empty file, expected the header \"%s\"", path,
                     EPLB__CSV_LONG_HEADER);
    goto fail;
  }
  if (!is_long_header(line, len)) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s:1:1: expected the header \"%s\"", path,
                     EPLB__CSV_LONG_HEADER);
    goto fail;
  }
  static const char *const names[4] = {"step", "layer", "expert", "count"};
  const uint64_t max[4] = {UINT64_MAX - 1, EPLB_TRACE_MAX_LAYERS - 1, EPLB_TRACE_MAX_EXPERTS - 1,
                           UINT32_MAX};
  for (;;) {
    if ((st = data_line_next(&r, path, &line, &len)) != EPLB_OK)
      goto fail;
    if (!line)
      break;
    uint64_t v[4];
    const char *p = line, *end = line + len;
    for (int i = 0; i < 4; i++) {
      const char *comma = memchr(p, ',', (size_t)(end - p));
      const char *fe = comma ? comma : end;
      const char *s = p;
      trim(&s, &fe);
      if ((i < 3 && !comma) || (i == 3 && comma)) {
        st = eplb__error(EPLB_EFORMAT, "traces",
                         "%s:%" PRIu64 ":%zu: expected 4 fields (step,layer,expert,count)", path,
                         r.lineno, (size_t)((i < 3 ? end : comma) - line) + 1);
        goto fail;
      }
      if ((st = parse_uint(&r, line, s, fe, max[i], names[i], &v[i])) != EPLB_OK)
        goto fail;
      p = comma ? comma + 1 : end;
    }
    if (out->num_entries == cap) {
      size_t ncap = cap ? cap * 2 : 1024;
      eplb__csv_entry_t *ne = eplb__realloc_array(out->entries, ncap, sizeof *ne);
      if (!ne) {
        st = eplb__error(EPLB_ENOMEM, "traces", "%s: out of memory", path);
        goto fail;
      }
      out->entries = ne;
      cap = ncap;
    }
    if (v[0] >= EPLB_MAX_STEPS) {
      st = eplb__error(EPLB_ERANGE, "traces",
                       "%s:%" PRIu64 ":1: step %" PRIu64 ": over the limit of %" PRIu64 " steps",
                       path, r.lineno, v[0], EPLB_MAX_STEPS);
      goto fail;
    }
    eplb__csv_entry_t *en = &out->entries[out->num_entries++];
    en->step = v[0];
    en->layer = (uint32_t)v[1];
    en->expert = (uint32_t)v[2];
    en->count = (uint32_t)v[3];
    en->line = r.lineno;
    if (v[0] + 1 > out->num_steps)
      out->num_steps = v[0] + 1;
    if (v[1] + 1 > out->num_layers)
      out->num_layers = (uint32_t)v[1] + 1;
    if (v[2] + 1 > out->num_experts)
      out->num_experts = (uint32_t)v[2] + 1;
  }
  if (out->num_entries == 0) {
    st = eplb__error(EPLB_EFORMAT, "traces", "%s:2:1: no data rows after the header", path);
    goto fail;
  }
  /* Steps without a row are empty steps; a few are normal, a billion built
   * from two rows are not. */
  if (out->num_steps - out->num_entries > EPLB__CSV_MAX_EMPTY_STEPS &&
      out->num_steps > out->num_entries) {
    st = eplb__error(EPLB_ERANGE, "traces",
                     "%s: %" PRIu64 " steps implied by %zu rows: over the limit of %u steps "
                     "without a row",
                     path, out->num_steps, out->num_entries, EPLB__CSV_MAX_EMPTY_STEPS);
    goto fail;
  }
  /* Work bounded by the input's size: each implied count is written. */
  uint64_t counts = out->num_steps * out->num_layers * out->num_experts;
  uint64_t max_counts = (uint64_t)out->num_entries * EPLB__CSV_MAX_COUNTS_PER_ROW;
  if (max_counts < EPLB__CSV_MAX_COUNTS_BASE)
    max_counts = EPLB__CSV_MAX_COUNTS_BASE;
  if (counts > max_counts) {
    st = eplb__error(EPLB_ERANGE, "traces",
                     "%s: %" PRIu64 " steps x %" PRIu32 " layers x %" PRIu32 " experts = %" PRIu64
                     " counts implied by %zu rows: over the limit of %" PRIu64
                     " (2^24, or %u per row when more)",
                     path, out->num_steps, out->num_layers, out->num_experts, counts,
                     out->num_entries, max_counts, EPLB__CSV_MAX_COUNTS_PER_ROW);
    goto fail;
  }
  qsort(out->entries, out->num_entries, sizeof *out->entries, entry_cmp);
  for (size_t i = 1; i < out->num_entries; i++) {
    const eplb__csv_entry_t *a = &out->entries[i - 1], *b = &out->entries[i];
    if (a->step == b->step && a->layer == b->layer && a->expert == b->expert) {
      st = eplb__error(EPLB_EFORMAT, "traces",
                       "%s:%" PRIu64 ":1: duplicate entry for step %" PRIu64 ", layer %" PRIu32
                       ", expert %" PRIu32 " (first on line %" PRIu64 ")",
                       path, b->line, b->step, b->layer, b->expert, a->line);
      goto fail;
    }
  }
  lines_close(&r);
  return EPLB_OK;
fail:
  lines_close(&r);
  eplb__csv_long_free(out);
  return st;
}

void eplb__csv_long_free(eplb__csv_long_t *csv) {
  eplb__free(csv->entries);
  memset(csv, 0, sizeof *csv);
}
