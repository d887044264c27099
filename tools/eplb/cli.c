#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

void cli_message(const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fputs("eplb: ", stderr);
  put_escaped(buf);
  fputc('\n', stderr);
}

int cli_usage_error(const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  cli_message("%s", buf);
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
  size_t n = strlen(what);
  if (!detail || !*detail)
    cli_message("%s: %s", what, eplb_status_str(status));
  else if (!strncmp(detail, what, n) && detail[n] == ':')
    cli_message("%s", detail); /* the library's detail already names the file */
  else
    cli_message("%s: %s", what, detail);
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

int cli_deployment(const char *model_arg, const char *gpu_arg, const char *source,
                   const char *trace_model, uint32_t num_experts, int need,
                   eplb_model_desc_t *model, eplb_gpu_desc_t *gpu, int *have) {
  eplb_status_t st;
  *have = 0;
  if (model_arg) {
    if ((st = eplb_model_load(model_arg, model)) != EPLB_OK)
      return cli_status_error(st, "--model");
  } else if (!trace_model || !trace_model[0] || eplb_model_preset(trace_model, model) != EPLB_OK) {
    if (!need && !gpu_arg)
      return CLI_OK;
    if (trace_model && trace_model[0])
      return cli_usage_error("%s: model '%s' has no preset: give --model NAME|FILE "
                             "(deepseek-v2-lite, deepseek-v3, qwen3-235b-a22b, kimi-k2, "
                             "mixtral-8x7b, or a model file)",
                             source, trace_model);
    return cli_usage_error("%s names no model: give --model NAME|FILE", source);
  }
  if ((st = eplb_gpu_load(gpu_arg ? gpu_arg : "h800", gpu)) != EPLB_OK)
    return cli_status_error(st, "--gpu");
  if (model->num_experts != num_experts)
    return cli_usage_error("--model %s has %.0f experts per layer, %s has %" PRIu32, model->name,
                           model->num_experts, source, num_experts);
  *have = 1;
  return CLI_OK;
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

/* ---- outputs committed together ------------------------------------------
 * Static buffers only: cli_outputs_remove runs in a signal handler. */
#define CLI_MAX_OUTPUTS 8
#define CLI_MAX_DIR_FILES 16
typedef struct cli_output {
  volatile sig_atomic_t live; /* tmp exists and is ours */
  int is_dir;
  char path[4096], tmp[4200];
  char files[CLI_MAX_DIR_FILES][256]; /* a staged directory's entries */
  volatile sig_atomic_t nfiles;
} cli_output_t;
static cli_output_t outputs[CLI_MAX_OUTPUTS];
static int noutputs;

/* "dir/" names the directory "dir": the temporary is its sibling. */
static void strip_slashes(char *p) {
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/')
    p[--n] = 0;
}

int cli_check_output(const char *opt, const char *path, int is_dir) {
  char dir[4096];
  struct stat sb;
  if (!path || !*path)
    return cli_usage_error("%s: empty path", opt);
  if (strlen(path) >= sizeof dir - 64)
    return cli_usage_error("%s: path too long", opt);
  snprintf(dir, sizeof dir, "%s", path);
  strip_slashes(dir);
  if (!stat(dir, &sb)) {
    if (!is_dir && S_ISDIR(sb.st_mode))
      return cli_usage_error("%s: %s is a directory", opt, path);
    if (is_dir && !S_ISDIR(sb.st_mode))
      return cli_usage_error("%s: %s exists and is not a directory", opt, path);
  }
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = 0;
  else if (slash)
    *slash = 0;
  else
    snprintf(dir, sizeof dir, ".");
  if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
    return cli_usage_error("%s: %s: directory %s does not exist", opt, path, dir);
  if (access(dir, W_OK | X_OK))
    return cli_usage_error("%s: %s: directory %s is not writable", opt, path, dir);
  return CLI_OK;
}

const char *cli_output_stage(const char *opt, const char *path, int is_dir) {
  if (cli_check_output(opt, path, is_dir))
    return NULL;
  if (noutputs == CLI_MAX_OUTPUTS) {
    cli_message("%s: too many outputs", opt);
    return NULL;
  }
  cli_output_t *o = &outputs[noutputs];
  memset(o, 0, sizeof *o);
  char base[4096];
  snprintf(base, sizeof base, "%s", path);
  strip_slashes(base);
  memcpy(o->path, base, sizeof base);
  /* The library's temporary-name pattern, so that its sweep after a later
   * write of the same target removes what a SIGKILL left. A directory that
   * exists is staged inside itself: its files then move within one file
   * system even when it is a link to another. */
  struct stat sb;
  if (is_dir && !stat(base, &sb) && S_ISDIR(sb.st_mode))
    snprintf(o->tmp, sizeof o->tmp, "%s/.tmp.%ld.XXXXXX", base, (long)getpid());
  else
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld.XXXXXX", base, (long)getpid());
  o->is_dir = is_dir;
  int ok;
  if (is_dir) {
    ok = mkdtemp(o->tmp) != NULL;
  } else {
    int fd = mkstemp(o->tmp);
    ok = fd >= 0 && !fchmod(fd, 0644) && !close(fd);
  }
  if (!ok) {
    cli_message("%s: %s: cannot create a temporary: %s", opt, path, strerror(errno));
    return NULL;
  }
  o->live = 1;
  noutputs++;
  return o->tmp;
}

void cli_output_expect(const char *tmp, const char *name) {
  for (int i = 0; i < noutputs; i++) {
    cli_output_t *o = &outputs[i];
    if (strcmp(o->tmp, tmp) || o->nfiles == CLI_MAX_DIR_FILES)
      continue;
    for (int k = 0; k < o->nfiles; k++)
      if (!strcmp(o->files[k], name))
        return;
    size_t n = strlen(name);
    if (n >= sizeof o->files[0])
      return;
    memmove(o->files[o->nfiles], name, n + 1);
    o->nfiles++;
  }
}

static void remove_one(cli_output_t *o) {
  if (!o->live)
    return;
  if (o->is_dir) {
    char p[4500];
    for (int k = 0; k < o->nfiles; k++) {
      /* snprintf is not async-signal-safe: join by hand. */
      size_t a = strlen(o->tmp), b = strlen(o->files[k]);
      if (a + b + 2 > sizeof p)
        continue;
      memcpy(p, o->tmp, a);
      p[a] = '/';
      memcpy(p + a + 1, o->files[k], b + 1);
      unlink(p);
    }
    rmdir(o->tmp);
  } else {
    unlink(o->tmp);
  }
  o->live = 0;
}

void cli_outputs_remove(void) {
  for (int i = 0; i < noutputs; i++)
    remove_one(&outputs[i]);
}

/* The entries of a staged directory, so that removing it needs no readdir
 * (the signal handler cannot) and committing it knows what to move. */
static int list_dir(cli_output_t *o) {
  DIR *d = opendir(o->tmp);
  if (!d)
    return -1;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    if (strlen(e->d_name) >= sizeof o->files[0] || o->nfiles == CLI_MAX_DIR_FILES) {
      rc = -1;
      continue;
    }
    cli_output_expect(o->tmp, e->d_name);
  }
  closedir(d);
  return rc;
}

int cli_outputs_commit(void) {
  int rc = CLI_OK;
  for (int i = 0; i < noutputs && rc == CLI_OK; i++)
    if (outputs[i].is_dir && list_dir(&outputs[i])) {
      cli_message("%s: cannot list the staged files", outputs[i].path);
      rc = CLI_FAIL;
    }
  for (int i = 0; i < noutputs && rc == CLI_OK; i++) {
    cli_output_t *o = &outputs[i];
    struct stat sb;
    if (!o->is_dir || stat(o->path, &sb)) {
      /* A file, or a directory that does not exist yet: one rename. */
      if (rename(o->tmp, o->path)) {
        cli_message("%s: cannot write: %s", o->path, strerror(errno));
        rc = errno == EISDIR || errno == ENOTDIR || errno == ENOTEMPTY ? CLI_BADINPUT : CLI_FAIL;
        break;
      }
      o->live = 0;
      eplb_remove_stale_temporaries(o->path);
      continue;
    }
    for (int k = 0; k < o->nfiles; k++) {
      char from[4500], to[4400];
      snprintf(from, sizeof from, "%s/%s", o->tmp, o->files[k]);
      snprintf(to, sizeof to, "%s/%s", o->path, o->files[k]);
      if (rename(from, to)) {
        cli_message("%s: cannot write: %s", to, strerror(errno));
        rc = CLI_FAIL;
        break;
      }
    }
    if (rc == CLI_OK) {
      rmdir(o->tmp);
      o->live = 0;
      /* Staging of killed runs: beside the directory and inside it. */
      char inside[4400];
      snprintf(inside, sizeof inside, "%s/", o->path);
      eplb_remove_stale_temporaries(o->path);
      eplb_remove_stale_temporaries(inside);
    }
  }
  cli_outputs_remove();
  noutputs = 0;
  return rc;
}

static void on_fatal_signal(int sig) {
  eplb_remove_temporaries();
  cli_outputs_remove();
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
