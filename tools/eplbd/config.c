/* tools/eplbd/config.c — the JSON config file merged with command-line
 * flags. Strict: an unknown key, a wrong type or a value out of range is bad
 * input (one line naming the file, the key and the value). */
#define _DEFAULT_SOURCE /* realpath */
#include "eplbd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ctx {
  const char *file;
  char *err;
  size_t errlen;
  int failed;
} ctx_t;

__attribute__((format(printf, 2, 3))) static int bad(ctx_t *c, const char *fmt, ...) {
  if (c->failed)
    return -1;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char line[1024];
  if (c->file)
    snprintf(line, sizeof line, "%s: %s", c->file, msg);
  else
    snprintf(line, sizeof line, "%s", msg);
  /* Keys and values of the file are quoted: the message must stay one line. */
  eplbd_escape(c->err, c->errlen, line);
  c->failed = 1;
  return -1;
}

static char *dup_str(const char *s) {
  if (!s)
    return NULL;
  char *d = strdup(s);
  if (!d) {
    fputs("eplbd: out of memory\n", stderr);
    exit(EPLBD_FAIL);
  }
  return d;
}

static int get_num(ctx_t *c, json_t *o, const char *key, double lo, double hi, double *out) {
  json_t *v = json_object_get(o, key);
  if (!v)
    return 0;
  if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
      json_number_value(v) > hi)
    return bad(c, "\"%s\": expected a number in [%g, %g]", key, lo, hi);
  *out = json_number_value(v);
  return 0;
}

static int get_u32(ctx_t *c, json_t *o, const char *key, uint32_t lo, uint32_t hi, uint32_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v)
    return 0;
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return bad(c, "\"%s\": expected an integer in [%u, %u]", key, lo, hi);
  *out = (uint32_t)json_integer_value(v);
  return 0;
}

/* Step counts are whole: 64.5 steps would silently be 64. */
static int get_steps(ctx_t *c, json_t *o, const char *key, uint64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v)
    return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000000000)
    return bad(c, "\"%s\": expected an integer in [1, 1e12]", key);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

static int get_str(ctx_t *c, json_t *o, const char *key, char **out) {
  json_t *v = json_object_get(o, key);
  if (!v)
    return 0;
  if (!json_is_string(v))
    return bad(c, "\"%s\": expected a string", key);
  free(*out);
  *out = dup_str(json_string_value(v));
  return 0;
}

static int get_bool(ctx_t *c, json_t *o, const char *key, int *out) {
  json_t *v = json_object_get(o, key);
  if (!v)
    return 0;
  if (!json_is_boolean(v))
    return bad(c, "\"%s\": expected true or false", key);
  *out = json_is_true(v);
  return 0;
}

static int only_keys(ctx_t *c, json_t *o, const char *where, const char *const *keys) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    int known = 0;
    for (const char *const *p = keys; *p; p++)
      known |= !strcmp(k, *p);
    if (!known)
      return bad(c, "%s: unknown key \"%s\"", where, k);
  }
  return 0;
}

static const char *const top_keys[] = {
    "sources",     "period",       "stale_after", "threshold",     "window",
    "gpus",        "nodes",        "replicas",    "slots_per_gpu", "expert_bytes",
    "listen",      "allow_remote", "log_level",   "port_file",     "move_budget",
    "move_weight", "policy",       "threads",     "keep_plans",    NULL};
static const char *const source_keys[] = {"name",          "trace",  "shm",   "out",
                                          "publish_shm",   "gpus",   "nodes", "replicas",
                                          "slots_per_gpu", "window", NULL};

static int shape_keys(ctx_t *c, json_t *o, uint32_t *gpus, uint32_t *nodes, uint32_t *replicas,
                      uint32_t *spg) {
  return get_u32(c, o, "gpus", 1, 1u << 16, gpus) || get_u32(c, o, "nodes", 1, 1u << 16, nodes) ||
         get_u32(c, o, "replicas", 1, 1u << 24, replicas) ||
         get_u32(c, o, "slots_per_gpu", 1, 1u << 16, spg);
}

static int parse_source(ctx_t *c, json_t *o, uint32_t i, eplbd_source_cfg_t *s) {
  char where[32];
  snprintf(where, sizeof where, "sources[%u]", i);
  if (!json_is_object(o))
    return bad(c, "%s: expected an object", where);
  s->publish_shm = -1; /* not given: finish() resolves it from the source's kind */
  return only_keys(c, o, where, source_keys) || get_str(c, o, "name", &s->name) ||
                 get_str(c, o, "trace", &s->trace) || get_str(c, o, "shm", &s->shm) ||
                 get_str(c, o, "out", &s->out) || get_bool(c, o, "publish_shm", &s->publish_shm) ||
                 shape_keys(c, o, &s->gpus, &s->nodes, &s->replicas, &s->slots_per_gpu) ||
                 get_steps(c, o, "window", &s->window)
             ? -1
             : 0;
}

static int set_policy(ctx_t *c, eplbd_config_t *cfg, const char *policy) {
  if (!policy)
    return 0;
  if (strcmp(policy, "incremental") && strcmp(policy, "balanced"))
    return bad(c, "policy \"%s\": expected incremental or balanced", policy);
  cfg->full_replans = !strcmp(policy, "balanced");
  return 0;
}

/* Larger than any sensible config: a mistaken path (a trace, a disk image)
 * is refused instead of read into memory. */
#define CONFIG_MAX_BYTES (16 << 20)

/* Opened without blocking and checked to be a regular file first: opening a
 * FIFO without a writer (or reading a device) would block the daemon, at
 * start or in the SIGHUP reload that must keep it publishing. */
static json_t *load_json(ctx_t *c) {
  int fd = open(c->file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb)) {
    bad(c, "cannot open: %s", strerror(errno));
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  json_t *root = NULL;
  json_error_t je;
  if (!S_ISREG(sb.st_mode))
    bad(c, "not a regular file");
  else if (sb.st_size > CONFIG_MAX_BYTES)
    bad(c, "%lld bytes: larger than a config file can be (%d)", (long long)sb.st_size,
        CONFIG_MAX_BYTES);
  else if (!(root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je)))
    bad(c, "line %d: %s", je.line, je.text);
  close(fd);
  return root;
}

static int parse_file(ctx_t *c, eplbd_config_t *cfg) {
  json_t *root = load_json(c);
  int rc = -1;
  if (!root)
    return -1;
  if (!json_is_object(root)) {
    bad(c, "expected a JSON object");
    goto done;
  }
  char *level = NULL;
  if (only_keys(c, root, "config", top_keys) ||
      get_num(c, root, "period", 1e-3, 86400, &cfg->period) ||
      get_num(c, root, "stale_after", 1e-3, 1e9, &cfg->stale_after) ||
      get_num(c, root, "threshold", -1, 1, &cfg->threshold) ||
      get_steps(c, root, "window", &cfg->window) ||
      get_u32(c, root, "keep_plans", 0, 1u << 24, &cfg->keep_plans) ||
      get_num(c, root, "expert_bytes", 0, 1e15, &cfg->expert_bytes) ||
      get_u32(c, root, "move_budget", 0, 1u << 24, &cfg->move_budget) ||
      get_u32(c, root, "threads", 0, EPLB_PLAN_MAX_THREADS, &cfg->threads) ||
      get_num(c, root, "move_weight", 0, 1e6, &cfg->move_weight) ||
      shape_keys(c, root, &cfg->gpus, &cfg->nodes, &cfg->replicas, &cfg->slots_per_gpu) ||
      get_str(c, root, "listen", &cfg->listen) ||
      get_bool(c, root, "allow_remote", &cfg->allow_remote) ||
      get_str(c, root, "port_file", &cfg->port_file) || get_str(c, root, "log_level", &level)) {
    free(level);
    goto done;
  }
  char *policy = NULL;
  if (get_str(c, root, "policy", &policy) || set_policy(c, cfg, policy)) {
    free(policy);
    free(level);
    goto done;
  }
  free(policy);
  if (level) {
    cfg->log_level = eplbd_log_level_parse(level);
    if (cfg->log_level < 0)
      bad(c, "\"log_level\": \"%s\" is not error, warn, info or debug", level);
    free(level);
    if (c->failed)
      goto done;
  }
  json_t *src = json_object_get(root, "sources");
  if (src) {
    if (!json_is_array(src) || json_array_size(src) > EPLBD_MAX_SOURCES) {
      bad(c, "\"sources\": expected an array of at most %u objects", EPLBD_MAX_SOURCES);
      goto done;
    }
    cfg->num_sources = (uint32_t)json_array_size(src);
    cfg->sources = calloc(cfg->num_sources + 1, sizeof *cfg->sources);
    if (!cfg->sources)
      goto done;
    for (uint32_t i = 0; i < cfg->num_sources; i++)
      if (parse_source(c, json_array_get(src, i), i, &cfg->sources[i]))
        goto done;
  }
  rc = 0;
done:
  json_decref(root);
  return rc;
}

/* "HOST:PORT" with an IPv4 literal host; loopback unless allowed. Keeps the
 * parsed address for eplbd_http_start. */
static int check_listen(ctx_t *c, eplbd_config_t *cfg) {
  if (!cfg->listen[0])
    return 0;
  const char *colon = strrchr(cfg->listen, ':');
  char host[64];
  if (!colon || (size_t)(colon - cfg->listen) >= sizeof host)
    return bad(c, "listen \"%s\": expected HOST:PORT", cfg->listen);
  memcpy(host, cfg->listen, (size_t)(colon - cfg->listen));
  host[colon - cfg->listen] = 0;
  /* Digits only: strtol alone would take " 80" or "+80". */
  bool digits = colon[1] != 0 && strlen(colon + 1) <= 5;
  for (const char *p = colon + 1; *p; p++)
    digits &= *p >= '0' && *p <= '9';
  char *end;
  long port = digits ? strtol(colon + 1, &end, 10) : -1;
  struct in_addr a;
  if (!digits || port > 65535 || inet_pton(AF_INET, host, &a) != 1)
    return bad(c, "listen \"%s\": expected an IPv4 address and a port 0-65535", cfg->listen);
  if ((ntohl(a.s_addr) >> 24) != 127 && !cfg->allow_remote)
    return bad(c, "listen \"%s\" is not a loopback address: add --allow-remote", cfg->listen);
  cfg->listen_addr = a.s_addr;
  cfg->listen_port = (uint16_t)port;
  return 0;
}

/* An absolute path with ".", ".." and symbolic links resolved as far as the
 * path exists, the rest taken as written: two spellings of one directory
 * compare equal, and a directory inside another has it as a prefix.
 * Returns -1 when the path is too long. */
static int resolve(const char *in, char *out) {
  char buf[PATH_MAX];
  if (in[0] == '/')
    strcpy(out, "/");
  else if (!getcwd(out, PATH_MAX))
    return -1;
  for (const char *p = in; *p;) {
    size_t n = strcspn(p, "/"), len = strlen(out);
    if ((n == 1 && p[0] == '.') || n == 0) {
      /* nothing to add */
    } else if (n == 2 && p[0] == '.' && p[1] == '.') {
      char *slash = strrchr(out, '/');
      slash[slash == out] = 0; /* the parent of "/" is "/" */
    } else {
      if (len + 1 + n >= PATH_MAX)
        return -1;
      if (len > 1)
        out[len++] = '/';
      memcpy(out + len, p, n);
      out[len + n] = 0;
      if (realpath(out, buf))
        strcpy(out, buf);
    }
    p += n + (p[n] == '/');
  }
  return 0;
}

/* Whether path is an existing directory the daemon may write into; fills
 * why otherwise. */
static int writable_dir(const char *path, char *why, size_t cap) {
  struct stat sb;
  if (stat(path, &sb))
    snprintf(why, cap, "%s", strerror(errno));
  else if (!S_ISDIR(sb.st_mode))
    snprintf(why, cap, "not a directory");
  else if (access(path, W_OK | X_OK))
    snprintf(why, cap, "not writable: %s", strerror(errno));
  else
    return 1;
  return 0;
}

static int usable_file(const char *path, char *why, size_t cap) {
  struct stat sb;
  if (stat(path, &sb))
    snprintf(why, cap, "%s", strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    snprintf(why, cap, "not a regular file");
  else
    return 1;
  return 0;
}

/* Whether dir (resolved) is a writable directory, or can be made one by
 * mkdir in a writable parent (eplbd creates one level). Fills why otherwise. */
static int usable_dir(const char *dir, char *why, size_t cap) {
  struct stat sb;
  if (!stat(dir, &sb) || errno != ENOENT)
    return writable_dir(dir, why, cap);
  char parent[PATH_MAX], reason[96];
  snprintf(parent, sizeof parent, "%s", dir);
  char *slash = strrchr(parent, '/');
  slash[slash == parent] = 0;
  if (writable_dir(parent, reason, sizeof reason))
    return 1;
  snprintf(why, cap, "missing, and its parent %.120s: %s", parent, reason);
  return 0;
}

/* Whether b is a or below it, at a component boundary (/x/p1 is not in /x/p). */
static int inside(const char *a, const char *b) {
  size_t n = strlen(a);
  return !strncmp(a, b, n) && (b[n] == '/' || b[n] == 0 || !strcmp(a, "/"));
}

/* Directories a source must not publish into: pruning removes plan-*.json
 * there, and `current` would sit among the system's files. */
static int system_dir(const char *p) {
  static const char *const dirs[] = {
      "/",         "/bin",       "/boot",  "/dev",     "/etc",     "/home",    "/lib",
      "/lib32",    "/lib64",     "/media", "/mnt",     "/opt",     "/root",    "/run",
      "/sbin",     "/srv",       "/tmp",   "/usr",     "/usr/bin", "/usr/lib", "/usr/local",
      "/usr/sbin", "/usr/share", "/var",   "/var/lib", "/var/log", "/var/tmp", NULL};
  for (const char *const *d = dirs; *d; d++)
    if (!strcmp(p, *d))
      return 1;
  return inside("/proc", p) || inside("/sys", p);
}

/* What the filesystem must offer before anything runs: an output directory
 * of each source's own, usable, no other source's inside it (each source
 * numbers its own epochs), a directory for the port file, and with --once
 * the traces themselves (a running daemon waits for a trace to appear). */
static int check_paths(ctx_t *c, eplbd_config_t *cfg, int once) {
  char why[256];
  char(*res)[PATH_MAX] = calloc(cfg->num_sources + 1u, sizeof *res);
  int rc = res ? 0 : bad(c, "out of memory");
  for (uint32_t i = 0; i < cfg->num_sources && !rc; i++) {
    const eplbd_source_cfg_t *s = &cfg->sources[i];
    if (once && s->trace && !usable_file(s->trace, why, sizeof why))
      rc = bad(c, "source \"%s\": trace \"%s\": %s (--once reads it now)", s->name, s->trace, why);
    if (rc || !s->out)
      continue;
    if (resolve(s->out, res[i]))
      rc = bad(c, "source \"%s\": \"out\" \"%s\": path too long", s->name, s->out);
    else if (system_dir(res[i]))
      rc = bad(c,
               "source \"%s\": \"out\" \"%s\" is a system directory (%s): give the source "
               "a directory of its own",
               s->name, s->out, res[i]);
    else if (!usable_dir(res[i], why, sizeof why))
      rc = bad(c, "source \"%s\": \"out\" \"%s\": %s", s->name, s->out, why);
    for (uint32_t j = 0; j < i && !rc; j++)
      if (cfg->sources[j].out && (inside(res[i], res[j]) || inside(res[j], res[i])))
        rc = bad(c,
                 "sources \"%s\" and \"%s\" publish into overlapping directories (\"%s\" "
                 "and \"%s\"): give each source its own \"out\"",
                 cfg->sources[j].name, s->name, cfg->sources[j].out, s->out);
  }
  if (!rc && cfg->port_file) {
    char *slash = resolve(cfg->port_file, res[0]) ? NULL : strrchr(res[0], '/');
    struct stat sb;
    if (slash)
      slash[slash == res[0]] = 0;
    if (!slash || !cfg->port_file[0] || (!stat(cfg->port_file, &sb) && S_ISDIR(sb.st_mode)))
      rc = bad(c, "port_file \"%s\": expected the path of a file", cfg->port_file);
    else if (!writable_dir(res[0], why, sizeof why))
      rc = bad(c, "port_file \"%s\": directory %s: %s", cfg->port_file, res[0], why);
  }
  free(res);
  return rc;
}

static int check_source(ctx_t *c, eplbd_config_t *cfg, uint32_t i) {
  eplbd_source_cfg_t *s = &cfg->sources[i];
  if (!!s->trace == !!s->shm)
    return bad(c, "sources[%u]: give exactly one of \"trace\" and \"shm\"", i);
  if ((s->trace && !s->trace[0]) || (s->shm && s->shm[0] != '/'))
    return bad(c, "sources[%u]: empty trace path or shm name without a leading '/'", i);
  if (s->shm && (strchr(s->shm + 1, '/') || !s->shm[1] || strlen(s->shm) > 255))
    return bad(c, "sources[%u]: shm name \"%s\": one '/' then 1-254 other characters", i, s->shm);
  if (s->out && !s->out[0])
    return bad(c, "sources[%u]: \"out\" is empty: give a directory", i);
  /* A trace has no mailbox: the flag there would be silently ignored. */
  if (s->trace && s->publish_shm >= 0)
    return bad(c, "sources[%u]: \"publish_shm\" needs a \"shm\" source (a trace has no mailbox)",
               i);
  if (s->publish_shm < 0)
    s->publish_shm = !!s->shm;
  if (!s->out && !s->publish_shm)
    return bad(c, "sources[%u]: nowhere to publish: give \"out\" (or a segment)", i);
  if (!s->name) {
    char n[32];
    snprintf(n, sizeof n, "source%u", i);
    s->name = dup_str(n);
  }
  if (!s->name[0] || strlen(s->name) > 64)
    return bad(c, "sources[%u]: name of %zu characters: give 1 to 64", i, strlen(s->name));
  for (const char *p = s->name; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-' || *p == '.'))
      return bad(c, "sources[%u]: name \"%s\": use letters, digits, '_', '-', '.'", i, s->name);
  for (uint32_t j = 0; j < i; j++) {
    if (!strcmp(cfg->sources[j].name, s->name))
      return bad(c, "sources[%u]: name \"%s\" is used twice", i, s->name);
    /* Two writers of one mailbox would refuse each other's epochs. */
    if (s->shm && s->publish_shm && cfg->sources[j].shm && cfg->sources[j].publish_shm &&
        !strcmp(cfg->sources[j].shm, s->shm))
      return bad(c, "sources \"%s\" and \"%s\" both post plans to segment %s", cfg->sources[j].name,
                 s->name, s->shm);
  }
  return 0;
}

static int finish(ctx_t *c, eplbd_config_t *cfg, int once) {
  if (!cfg->num_sources)
    return bad(c, "no source: give --trace or --shm, or \"sources\" in a config file");
  if (cfg->nodes && cfg->gpus % cfg->nodes)
    return bad(c, "%u GPUs do not divide into %u nodes", cfg->gpus, cfg->nodes);
  for (uint32_t i = 0; i < cfg->num_sources; i++)
    if (check_source(c, cfg, i))
      return -1;
  return check_listen(c, cfg) || check_paths(c, cfg, once);
}

int eplbd_config_load(const eplbd_cli_t *cli, eplbd_config_t *cfg, char *err, size_t errlen) {
  memset(cfg, 0, sizeof *cfg);
  cfg->period = 10;
  cfg->stale_after = 60;
  cfg->threshold = 0.01;
  cfg->window = 64;
  cfg->keep_plans = 16;
  cfg->gpus = 8;
  cfg->nodes = 1;
  cfg->log_level = EPLB_LOG_INFO;
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  cfg->move_weight = po.move_weight;
  cfg->listen = dup_str("127.0.0.1:9464");
  /* Errors name the config file when there is one (its sources, shapes and
   * listen address are checked after the flags are merged); flag errors
   * name the flag. main prints "eplbd: " before either. */
  ctx_t c = {cli->config_path, err, errlen, 0};
  if (cli->config_path && parse_file(&c, cfg))
    goto fail;
  if (cli->have_period)
    cfg->period = cli->period;
  if (cli->have_stale)
    cfg->stale_after = cli->stale_after;
  if (cli->have_threshold)
    cfg->threshold = cli->threshold;
  if (cli->have_expert_bytes)
    cfg->expert_bytes = cli->expert_bytes;
  if (cli->window)
    cfg->window = cli->window;
  if (cli->have_move_budget)
    cfg->move_budget = cli->move_budget;
  if (set_policy(&c, cfg, cli->policy))
    goto fail;
  if (cli->have_move_weight)
    cfg->move_weight = cli->move_weight;
  if (cli->have_keep_plans)
    cfg->keep_plans = cli->keep_plans;
  if (cli->gpus)
    cfg->gpus = cli->gpus;
  if (cli->nodes)
    cfg->nodes = cli->nodes;
  if (cli->replicas)
    cfg->replicas = cli->replicas;
  if (cli->slots_per_gpu)
    cfg->slots_per_gpu = cli->slots_per_gpu;
  if (cli->allow_remote)
    cfg->allow_remote = 1;
  if (cli->listen) {
    free(cfg->listen);
    cfg->listen = dup_str(!strcmp(cli->listen, "off") ? "" : cli->listen);
  }
  if (cli->port_file) {
    free(cfg->port_file);
    cfg->port_file = dup_str(cli->port_file);
  }
  if (cli->log_level && (cfg->log_level = eplbd_log_level_parse(cli->log_level)) < 0) {
    bad(&c, "--log-level \"%s\": expected error, warn, info or debug", cli->log_level);
    goto fail;
  }
  if (cli->trace || cli->shm) {
    eplbd_source_cfg_t *n = realloc(cfg->sources, (cfg->num_sources + 2) * sizeof *n);
    if (!n)
      goto fail;
    cfg->sources = n;
    eplbd_source_cfg_t *s = &cfg->sources[cfg->num_sources];
    memset(s, 0, sizeof *s);
    s->name = dup_str(cfg->num_sources ? NULL : "default");
    s->trace = dup_str(cli->trace);
    s->shm = dup_str(cli->shm);
    s->out = dup_str(cli->out);
    s->publish_shm = -1;
    cfg->num_sources++;
  } else if (cli->out) {
    bad(&c, "--out needs --trace or --shm");
    goto fail;
  }
  if (finish(&c, cfg, cli->once))
    goto fail;
  return EPLBD_OK;
fail:
  if (!c.failed)
    snprintf(err, errlen, "out of memory");
  eplbd_config_free(cfg);
  return EPLBD_BADINPUT;
}

void eplbd_config_free(eplbd_config_t *cfg) {
  for (uint32_t i = 0; i < cfg->num_sources; i++) {
    free(cfg->sources[i].name);
    free(cfg->sources[i].trace);
    free(cfg->sources[i].shm);
    free(cfg->sources[i].out);
  }
  free(cfg->sources);
  free(cfg->listen);
  free(cfg->port_file);
  memset(cfg, 0, sizeof *cfg);
}
