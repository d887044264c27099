#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Control characters from input (a CSV's "\r", a name with a newline) are
 * escaped, so that every message stays one line a terminal shows as is. */
static void put_escaped(const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '\n')
      fputs("\\n", stderr);
    else if (ch == '\r')
      fputs("\\r", stderr);
    else if (ch == '\t')
      fputs("\\t", stderr);
    else if (ch < 0x20 || ch == 0x7f)
      fprintf(stderr, "\\x%02x", ch);
    else
      fputc(ch, stderr);
  }
}

static void message(const char *fmt, va_list ap) {
  char buf[4096];
  vsnprintf(buf, sizeof buf, fmt, ap);
  fputs("eplb: ", stderr);
  put_escaped(buf);
  fputc('\n', stderr);
}

void cli_message(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  message(fmt, ap);
  va_end(ap);
}

int cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  message(fmt, ap);
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
  cli_message("%s: out of memory", what);
  return CLI_FAIL;
}

int cli_status_error(eplb_status_t status, const char *what) {
  const char *detail = eplb_error_detail();
  size_t n = what ? strlen(what) : 0;
  if (!detail || !*detail)
    cli_message("%s: %s", what ? what : "eplb", eplb_status_str(status));
  else if (!what || (!strncmp(detail, what, n) && detail[n] == ':'))
    cli_message("%s", detail); /* the library's detail already names the file */
  else
    cli_message("%s: %s", what, detail);
  return cli_exit_code(status);
}

/* The option that sets each field a library detail on a bad value names. */
static const struct {
  const char *field, *option;
} option_of[] = {{"threads", "--threads"},
                 {"time_limit", "--time-limit"},
                 {"locality_tolerance", "--tolerance"},
                 {"move_weight", "--move-weight"},
                 {"robust_steps", "--robust-steps"},
                 {"robust_aggregate_weight", "--robust-aggregate"},
                 {"split_tolerance", "--split-tolerance"},
                 {"gain_threshold", "--gain-threshold"},
                 {"num_layers", "--layers"},
                 {"num_experts", "--experts"},
                 {"topk", "--topk"},
                 {"skew_param", "--skew"},
                 {"layer_variation", "--layer-variation"},
                 {"drift", "--drift"},
                 {"coactivation", "--coactivation"},
                 {"rank_affinity", "--rank-affinity"},
                 {"num_tenants", "--tenants"},
                 {"num_ranks", "--ranks"},
                 {"ep", "--ep"},
                 {"step_begin", "--steps"},
                 {"tokens_per_step", "--tokens-per-step"},
                 {"topk_rows_per_step", "--rows-per-step"}};

static int ident_char(char ch) {
  return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9');
}

/* The option of the field named by the word at p of text, or NULL. */
static const char *option_at(const char *text, const char *p, size_t *len) {
  if (p > text && ident_char(p[-1]))
    return NULL;
  for (size_t i = 0; i < sizeof option_of / sizeof option_of[0]; i++) {
    *len = strlen(option_of[i].field);
    if (!strncmp(p, option_of[i].field, *len) && !ident_char(p[*len]))
      return option_of[i].option;
  }
  return NULL;
}

int cli_option_error(eplb_status_t status, const char *what) {
  const char *d = eplb_error_detail(), *opt;
  size_t len, n = 0;
  if (!d || !option_at(d, d, &len))
    return cli_status_error(status, what);
  /* Every field the detail names (not only the first) becomes its option. */
  char buf[1024];
  for (const char *p = d; *p && n + 1 < sizeof buf; p += opt ? len : 1) {
    opt = option_at(d, p, &len);
    int k = snprintf(buf + n, sizeof buf - n, "%.*s", opt ? (int)strlen(opt) : 1, opt ? opt : p);
    n = k > 0 && n + (size_t)k < sizeof buf ? n + (size_t)k : sizeof buf - 1;
  }
  buf[n] = '\0';
  cli_message("%s", buf);
  return cli_exit_code(status);
}

static int parse_u64(const char *opt, const char *s, uint64_t *out) {
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
  if (parse_u64(opt, s, &v))
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
  if (!s || !*s || *end || isnan(v) || (errno && errno != ERANGE)) {
    cli_usage_error("%s: expected a number, got '%s'", opt, s ? s : "");
    return -1;
  }
  /* strtod sets ERANGE for a subnormal result too (5e-324 is a double): only
   * an overflow, or an underflow to 0 of a number that is not 0, is out of
   * range. */
  if (isinf(v) && errno != ERANGE) {
    cli_usage_error("%s: expected a finite number, got '%s'", opt, s);
    return -1;
  }
  if (isinf(v) || (errno == ERANGE && v == 0)) {
    cli_usage_error("%s: %s is out of the range of a double (about 4.9e-324 to 1.8e308)", opt, s);
    return -1;
  }
  *out = v;
  return 0;
}

/* "A:B" -> [A, B); "A:" -> [A, end); ":B" -> [0, B). */
static int parse_range(const char *opt, const char *s, uint64_t *begin, uint64_t *end) {
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
  if (alen && parse_u64(opt, a, begin))
    return -1;
  if (colon[1] && parse_u64(opt, colon + 1, end))
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

/* The getopt value of the table's i-th option that has no short one. */
enum { CLI_OPT_BASE = 1000 };

static int parse_opt(const cli_opt_t *o) {
  char name[80];
  snprintf(name, sizeof name, "--%s", o->name);
  switch (o->kind) {
  case CLI_U32: return cli_parse_u32(name, optarg, o->field);
  case CLI_U64: return parse_u64(name, optarg, o->field);
  case CLI_DOUBLE: return cli_parse_double(name, optarg, o->field);
  case CLI_RANGE: return parse_range(name, optarg, o->field, o->given);
  case CLI_STR: *(const char **)o->field = optarg; return 0;
  default: *(int *)o->field = 1; return 0; /* CLI_FLAG */
  }
}

int cli_getopt(int argc, char **argv, const char *shorts, const cli_opt_t *opts) {
  struct option lo[49];
  size_t n = 0;
  for (; opts[n].name && n + 1 < sizeof lo / sizeof lo[0]; n++) {
    int noarg = opts[n].kind == CLI_FLAG || opts[n].kind == CLI_NOARG;
    lo[n] = (struct option){opts[n].name, noarg ? no_argument : required_argument, NULL,
                            opts[n].val ? opts[n].val : CLI_OPT_BASE + (int)n};
  }
  lo[n] = (struct option){NULL, 0, NULL, 0};
  for (;;) {
    int c = getopt_long(argc, argv, shorts, lo, NULL);
    const cli_opt_t *o = NULL;
    for (size_t i = 0; c != -1 && c != '?' && !o && i < n; i++)
      o = lo[i].val == c ? &opts[i] : NULL;
    if (!o || o->kind == CLI_ARG || o->kind == CLI_NOARG)
      return c;
    if (parse_opt(o))
      return '?';
    if (o->given && o->kind <= CLI_DOUBLE)
      *(int *)o->given = 1;
  }
}

/* Set when a figure was not finite or a JSON value could not be made: jansson
 * refuses NaN and infinity (json_real returns NULL), and json_object_set_new
 * then drops the key without a word. */
static int json_broken;

json_t *cli_real(double v) {
  json_t *j = isfinite(v) ? json_real(v) : NULL;
  if (!j) {
    json_broken = 1;
    return json_null();
  }
  return j;
}

json_t *cli_json_checked(json_t *j) {
  if (!j) {
    json_broken = 1;
    return json_null();
  }
  return j;
}

int cli_print_json_flags(json_t *j, size_t flags) {
  if (!j || json_broken) {
    json_decref(j);
    json_broken = 0;
    fputs("eplb: the JSON output has a figure that is not a finite number (or memory ran out): "
          "not written\n",
          stderr);
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

int cli_check_plan_shape(const char *data_path, uint32_t L, uint32_t E, const eplb_plan_t *plan,
                         const char *plan_path) {
  if (eplb_plan_num_layers(plan) == L && eplb_plan_num_experts(plan) == E)
    return CLI_OK;
  return cli_usage_error("%s: %u layers x %u experts, but the plan %s has %u x %u", data_path, L, E,
                         plan_path, eplb_plan_num_layers(plan), eplb_plan_num_experts(plan));
}

int cli_flush_summary(void) {
  if (!fflush(stdout))
    return CLI_OK;
  cli_message("cannot write the summary");
  return CLI_FAIL;
}

int cli_summary_commit(int rc) {
  if (rc == CLI_OK)
    rc = cli_flush_summary();
  return rc == CLI_OK ? cli_outputs_commit() : rc;
}

/* ---- outputs committed together (eplb_outputs_*) ----------------------- */
static eplb_outputs_t *staged; /* made by the first cli_output_stage */

int cli_check_output(const char *opt, const char *path, int is_dir) {
  if (eplb_outputs_check(path, is_dir) == EPLB_OK)
    return CLI_OK;
  return cli_usage_error("%s: %s", opt, eplb_error_detail());
}

const char *cli_output_stage(const char *opt, const char *path, int is_dir) {
  const char *tmp = NULL;
  eplb_status_t st = staged ? EPLB_OK : eplb_outputs_create(&staged);
  if (st == EPLB_OK)
    st = eplb_outputs_stage(staged, path, is_dir, &tmp);
  if (st != EPLB_OK)
    cli_message("%s: %s", opt, eplb_error_detail());
  return tmp;
}

void cli_output_expect(const char *tmp, const char *name) {
  /* Best effort: an unannounced file is only not removed on a signal. */
  if (staged)
    (void)eplb_outputs_expect(staged, tmp, name);
}

void cli_outputs_remove(void) {
  eplb_outputs_destroy(staged);
  staged = NULL;
}

int cli_outputs_commit(void) {
  eplb_status_t st = staged ? eplb_outputs_commit(staged) : EPLB_OK;
  if (st != EPLB_OK)
    cli_message("%s", eplb_error_detail());
  cli_outputs_remove();
  /* EPLB_EINVAL: a target turned into a directory, or out of one. */
  return st == EPLB_OK ? CLI_OK : st == EPLB_EINVAL ? CLI_BADINPUT : CLI_FAIL;
}

/* The library's table holds the staged outputs too (eplb_outputs_stage). */
static void on_fatal_signal(int sig) {
  eplb_remove_temporaries();
  signal(sig, SIG_DFL);
  raise(sig);
}

void cli_install_signal_handlers(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    /* Keep an ignored signal ignored (nohup). */
    struct sigaction old;
    if (!sigaction(sigs[i], NULL, &old) && old.sa_handler == SIG_IGN)
      continue;
    sigaction(sigs[i], &sa, NULL);
  }
}
