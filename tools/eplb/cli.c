#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("eplb: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return CLI_BADINPUT;
}

int cli_exit_code(eplb_status_t status) {
  switch (status) {
  case EPLB_OK: return CLI_OK;
  case EPLB_EINVAL:
  case EPLB_EIO: /* a missing input or an unwritable output named by the user */
  case EPLB_EFORMAT:
  case EPLB_ECORRUPT:
  case EPLB_ETRUNCATED:
  case EPLB_ERANGE:
  case EPLB_ESHAPE:
  case EPLB_EINFEASIBLE: return CLI_BADINPUT;
  default: return CLI_FAIL;
  }
}

int cli_out_of_memory(const char *what) {
  fprintf(stderr, "eplb: %s: out of memory\n", what);
  return CLI_FAIL;
}

int cli_status_error(eplb_status_t status, const char *what) {
  const char *detail = eplb_error_detail();
  if (detail && *detail)
    fprintf(stderr, "eplb: %s: %s\n", what, detail);
  else
    fprintf(stderr, "eplb: %s: %s\n", what, eplb_status_str(status));
  return cli_exit_code(status);
}

int cli_parse_u64(const char *opt, const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+') {
    cli_usage_error("%s: expected a non-negative integer, got '%s'", opt, s ? s : "");
    return -1;
  }
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) {
    cli_usage_error("%s: expected a non-negative integer, got '%s'", opt, s);
    return -1;
  }
  *out = (uint64_t)v;
  return 0;
}

int cli_parse_u32(const char *opt, const char *s, uint32_t *out) {
  uint64_t v;
  if (cli_parse_u64(opt, s, &v))
    return -1;
  if (v > UINT32_MAX) {
    cli_usage_error("%s: %s is too large", opt, s);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

int cli_parse_double(const char *opt, const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = s ? strtod(s, &end) : NAN;
  if (!s || !*s || errno || *end || !isfinite(v)) {
    cli_usage_error("%s: expected a number, got '%s'", opt, s ? s : "");
    return -1;
  }
  *out = v;
  return 0;
}

int cli_parse_range(const char *opt, const char *s, uint64_t *begin, uint64_t *end) {
  const char *colon = s ? strchr(s, ':') : NULL;
  if (!colon) {
    cli_usage_error("%s: expected A:B, got '%s'", opt, s ? s : "");
    return -1;
  }
  char a[32] = {0};
  size_t alen = (size_t)(colon - s);
  if (alen >= sizeof a) {
    cli_usage_error("%s: '%s' is too long", opt, s);
    return -1;
  }
  memcpy(a, s, alen);
  *begin = 0;
  *end = UINT64_MAX;
  if (alen && cli_parse_u64(opt, a, begin))
    return -1;
  if (colon[1] && cli_parse_u64(opt, colon + 1, end))
    return -1;
  if (*end <= *begin) {
    cli_usage_error("%s: empty range '%s'", opt, s);
    return -1;
  }
  return 0;
}

int cli_parse_u32_list(const char *opt, const char *s, uint32_t **out, uint32_t *n) {
  *out = NULL;
  *n = 0;
  if (!s || !*s) {
    cli_usage_error("%s: expected a comma-separated list", opt);
    return -1;
  }
  size_t cap = 1;
  for (const char *p = s; *p; p++)
    cap += *p == ',';
  uint32_t *v = calloc(cap, sizeof *v);
  char *copy = strdup(s);
  if (!v || !copy) {
    free(v);
    free(copy);
    cli_usage_error("out of memory");
    return -1;
  }
  uint32_t k = 0;
  int rc = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (cli_parse_u32(opt, tok, &v[k])) {
      rc = -1;
      break;
    }
    k++;
  }
  if (!rc && k == 0)
    rc = (cli_usage_error("%s: expected a comma-separated list", opt), -1);
  free(copy);
  if (rc) {
    free(v);
    return -1;
  }
  *out = v;
  *n = k;
  return 0;
}

int cli_print_json_flags(json_t *j, size_t flags) {
  if (!j) {
    fputs("eplb: out of memory\n", stderr);
    return CLI_FAIL;
  }
  int rc = CLI_OK;
  /* Flushed here: a full disk shows now, not after the exit status is set. */
  if (json_dumpf(j, stdout, flags) || fputc('\n', stdout) == EOF || fflush(stdout)) {
    fputs("eplb: cannot write the JSON output\n", stderr);
    rc = CLI_FAIL;
  }
  json_decref(j);
  return rc;
}

int cli_print_json(json_t *j) {
  return cli_print_json_flags(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
}

int cli_read_loads(const char *path, uint64_t b, uint64_t e, eplb_loads_t **out) {
  eplb_status_t st = eplb_loads_read(path, b, e, out);
  return st ? cli_status_error(st, path) : CLI_OK;
}
