/* tools/eplbd/main.c — eplbd: watches statistics sources, replans every
 * period and publishes plans that clear the gain threshold (DESIGN.md
 * "Daemon"). Signals: SIGHUP reloads the config (a bad one is logged and the
 * old one kept), SIGTERM/SIGINT finish the current step and exit 0. */
#include "eplbd.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t reload_requested;

static void on_signal(int sig) {
  if (sig == SIGHUP)
    reload_requested = 1;
  else
    eplbd_stop_requested = 1;
}

static void usage(FILE *f) {
  fputs("usage: eplbd --config FILE [flags]\n"
        "       eplbd --trace T --out DIR [--period SECONDS] [--listen 127.0.0.1:PORT] [--once]\n"
        "       eplbd --shm /NAME [--out DIR] [flags]\n"
        "flags: --period S (fractional) --window STEPS --threshold GAIN --stale-after S\n"
        "       --gpus G --nodes N --replicas R | --slots-per-gpu S --expert-bytes B\n"
        "       --policy incremental|balanced --move-budget SLOTS --move-weight W\n"
        "       --listen HOST:PORT|off --allow-remote --port-file F --log-level LEVEL --once\n"
        "       --keep-plans N (plan files kept per --out directory; default 16, 0 = all)\n"
        "See docs/eplbd.md.\n",
        f);
}

static int usage_error(const char *fmt, const char *a, const char *b) {
  fputs("eplbd: ", stderr);
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  return EPLBD_BADINPUT;
}

static int num(const char *opt, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
    char range[64];
    snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    fprintf(stderr, "eplbd: --%s \"%s\": expected a number in %s\n", opt, s, range);
    return -1;
  }
  *out = v;
  return 0;
}

static int integer(const char *opt, const char *s, double hi, uint32_t *out) {
  double v;
  if (num(opt, s, 1, hi, &v))
    return -1;
  if (v != floor(v)) {
    fprintf(stderr, "eplbd: --%s \"%s\": expected an integer\n", opt, s);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                     {"trace", required_argument, 0, 't'},
                                     {"shm", required_argument, 0, 's'},
                                     {"out", required_argument, 0, 'o'},
                                     {"period", required_argument, 0, 'p'},
                                     {"listen", required_argument, 0, 'l'},
                                     {"allow-remote", no_argument, 0, 'A'},
                                     {"once", no_argument, 0, '1'},
                                     {"gpus", required_argument, 0, 'g'},
                                     {"nodes", required_argument, 0, 'n'},
                                     {"replicas", required_argument, 0, 'r'},
                                     {"slots-per-gpu", required_argument, 0, 'S'},
                                     {"window", required_argument, 0, 'w'},
                                     {"threshold", required_argument, 0, 'T'},
                                     {"stale-after", required_argument, 0, 'a'},
                                     {"expert-bytes", required_argument, 0, 'b'},
                                     {"log-level", required_argument, 0, 'L'},
                                     {"port-file", required_argument, 0, 'P'},
                                     {"move-budget", required_argument, 0, 'm'},
                                     {"move-weight", required_argument, 0, 'M'},
                                     {"policy", required_argument, 0, 'y'},
                                     {"help", no_argument, 0, 'h'},
                                     {"version", no_argument, 0, 'V'},
                                     {"keep-plans", required_argument, 0, 'k'},
                                     {0, 0, 0, 0}};

static int parse_args(int argc, char **argv, eplbd_cli_t *c) {
  memset(c, 0, sizeof *c);
  opterr = 0;
  int ch;
  uint32_t w;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'c': c->config_path = optarg; break;
    case 't': c->trace = optarg; break;
    case 's': c->shm = optarg; break;
    case 'o': c->out = optarg; break;
    case 'l': c->listen = optarg; break;
    case 'P': c->port_file = optarg; break;
    case 'L': c->log_level = optarg; break;
    case 'y': c->policy = optarg; break;
    case 'A': c->allow_remote = 1; break;
    case '1': c->once = 1; break;
    case 'p':
      if (num("period", optarg, 1e-3, 86400, &c->period))
        return EPLBD_BADINPUT;
      c->have_period = 1;
      break;
    case 'a':
      if (num("stale-after", optarg, 1e-3, 1e9, &c->stale_after))
        return EPLBD_BADINPUT;
      c->have_stale = 1;
      break;
    case 'T':
      if (num("threshold", optarg, -1, 1, &c->threshold))
        return EPLBD_BADINPUT;
      c->have_threshold = 1;
      break;
    case 'b':
      if (num("expert-bytes", optarg, 0, 1e15, &c->expert_bytes))
        return EPLBD_BADINPUT;
      c->have_expert_bytes = 1;
      break;
    case 'm':
      /* 0 is the config's default, unlimited: a value, not "not given". */
      if (!strcmp(optarg, "0"))
        c->move_budget = 0;
      else if (integer("move-budget", optarg, 1 << 24, &c->move_budget))
        return EPLBD_BADINPUT;
      c->have_move_budget = 1;
      break;
    case 'k':
      /* 0 keeps every plan: a value, not "not given". */
      if (strcmp(optarg, "0") && integer("keep-plans", optarg, 1 << 24, &c->keep_plans))
        return EPLBD_BADINPUT;
      c->have_keep_plans = 1;
      break;
    case 'M':
      if (num("move-weight", optarg, 0, 1e6, &c->move_weight))
        return EPLBD_BADINPUT;
      c->have_move_weight = 1;
      break;
    case 'g':
      if (integer("gpus", optarg, 65536, &c->gpus))
        return EPLBD_BADINPUT;
      break;
    case 'n':
      if (integer("nodes", optarg, 65536, &c->nodes))
        return EPLBD_BADINPUT;
      break;
    case 'r':
      if (integer("replicas", optarg, 1 << 24, &c->replicas))
        return EPLBD_BADINPUT;
      break;
    case 'S':
      if (integer("slots-per-gpu", optarg, 65536, &c->slots_per_gpu))
        return EPLBD_BADINPUT;
      break;
    case 'w':
      if (integer("window", optarg, 4e9, &w))
        return EPLBD_BADINPUT;
      c->window = w;
      break;
    case 'h': usage(stdout); exit(EPLBD_OK);
    case 'V': printf("eplbd %s\n", eplb_version()); exit(EPLBD_OK);
    default:
      return usage_error("%s: unknown option or missing value%s (see --help)", argv[optind - 1],
                         "");
    }
  }
  if (optind < argc)
    return usage_error("unexpected argument \"%s\"%s", argv[optind], "");
  if (!c->config_path && !c->trace && !c->shm) {
    usage(stderr);
    return EPLBD_BADINPUT;
  }
  return EPLBD_OK;
}

/* Replaces the running sources with those of cfg. */
static int install_sources(const eplbd_config_t *cfg) {
  eplbd_source_t *n = calloc(cfg->num_sources, sizeof *n);
  if (!n)
    return -1;
  for (uint32_t i = 0; i < cfg->num_sources; i++) {
    eplbd_source_init(&n[i], &cfg->sources[i], cfg);
    if (!eplbd_stop_requested && eplbd_publish_resume(&n[i]))
      n[i].errors++;
  }
  pthread_mutex_lock(&eplbd_lock);
  eplbd_source_t *old = eplbd_sources;
  uint32_t nold = eplbd_num_sources;
  eplbd_sources = n;
  eplbd_num_sources = cfg->num_sources;
  pthread_mutex_unlock(&eplbd_lock);
  for (uint32_t i = 0; i < nold; i++)
    eplbd_source_fini(&old[i]);
  free(old);
  return 0;
}

static void update_staleness(eplbd_source_t *s, const eplbd_config_t *cfg, double now) {
  int stale = now - s->changed_at > cfg->stale_after;
  if (stale != s->stale)
    eplbd_log(stale ? EPLB_LOG_WARN : EPLB_LOG_INFO,
              stale ? "source %s: stale (no update for %.1f s): no replans until it updates"
                    : "source %s: updating again after %.1f s",
              s->cfg.name, now - s->changed_at);
  pthread_mutex_lock(&eplbd_lock);
  s->stale = stale;
  pthread_mutex_unlock(&eplbd_lock);
}

/* One period over every source. */
static void run_period(const eplbd_config_t *cfg) {
  for (uint32_t i = 0; i < eplbd_num_sources && !eplbd_stop_requested; i++) {
    eplbd_source_t *s = &eplbd_sources[i];
    double now = eplbd_now();
    int was_stale = s->stale;
    int r = eplbd_source_poll(s, now);
    if (r > 0 && was_stale)
      eplbd_log(EPLB_LOG_INFO, "source %s: updating again: replans resume", s->cfg.name);
    if (r > 0) {
      pthread_mutex_lock(&eplbd_lock);
      s->stale = 0;
      pthread_mutex_unlock(&eplbd_lock);
    } else {
      update_staleness(s, cfg, now);
    }
    /* An exhausted source was logged once; planning for it would be wasted. */
    if (r >= 0 && s->have_data && !s->stale && s->seen != s->planned && !s->exhausted)
      eplbd_step(s, cfg);
  }
}

static int run_once(const eplbd_config_t *cfg) {
  int rc = EPLBD_OK;
  for (uint32_t i = 0; i < eplbd_num_sources && !eplbd_stop_requested; i++) {
    eplbd_source_t *s = &eplbd_sources[i];
    if (eplbd_source_poll(s, eplbd_now()) < 0 || !s->have_data) {
      if (!s->last_error[0])
        eplbd_log(EPLB_LOG_ERROR, "source %s: no statistics yet", s->cfg.name);
      rc = rc == EPLBD_OK && eplbd_source_bad_input(s) ? EPLBD_BADINPUT : EPLBD_FAIL;
      continue;
    }
    /* Epochs at their end (logged when found) are bad data, not a failure. */
    if (s->exhausted)
      rc = rc == EPLBD_OK ? EPLBD_BADINPUT : rc;
    else if (eplbd_step(s, cfg))
      rc = rc == EPLBD_OK && eplbd_source_bad_input(s) ? EPLBD_BADINPUT : EPLBD_FAIL;
  }
  return rc;
}

static void sleep_until(double deadline) {
  while (!eplbd_stop_requested && !reload_requested) {
    double left = deadline - eplbd_now();
    if (left <= 0)
      return;
    struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
    nanosleep(&ts, NULL); /* EINTR on a signal: the loop checks the flags */
  }
}

int main(int argc, char **argv) {
  eplbd_cli_t cli;
  eplbd_config_t cfg;
  char err[640];
  int rc = parse_args(argc, argv, &cli);
  if (rc)
    return rc;
  if (eplbd_config_load(&cli, &cfg, err, sizeof err)) {
    char esc[2048];
    eplbd_escape(esc, sizeof esc, err);
    fprintf(stderr, "eplbd: %s\n", esc);
    return EPLBD_BADINPUT;
  }
  eplbd_start_time = eplbd_now();
  eplbd_log_init(cfg.log_level);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (install_sources(&cfg)) {
    eplbd_config_free(&cfg);
    return EPLBD_FAIL;
  }
  eplbd_http_t *http = NULL;
  if (cli.once) {
    rc = run_once(&cfg);
    goto done;
  }
  if (eplbd_http_start(&cfg, &http)) {
    rc = EPLBD_FAIL;
    goto done;
  }
  eplbd_log(EPLB_LOG_INFO, "started: %u source(s), period %g s, threshold %g", cfg.num_sources,
            cfg.period, cfg.threshold);
  double next = eplbd_now();
  while (!eplbd_stop_requested) {
    if (reload_requested) {
      reload_requested = 0;
      eplbd_config_t fresh;
      if (!cli.config_path) {
        eplbd_log(EPLB_LOG_WARN, "SIGHUP: no config file to reload");
      } else if (eplbd_config_load(&cli, &fresh, err, sizeof err)) {
        eplbd_log(EPLB_LOG_ERROR, "SIGHUP: %s: keeping the running config", err);
      } else {
        if (strcmp(fresh.listen, cfg.listen))
          eplbd_log(EPLB_LOG_WARN, "SIGHUP: a new listen address takes effect at restart");
        if (install_sources(&fresh)) {
          eplbd_config_free(&fresh);
        } else {
          free(fresh.listen);
          fresh.listen = cfg.listen;
          fresh.listen_addr = cfg.listen_addr;
          fresh.listen_port = cfg.listen_port;
          cfg.listen = NULL;
          eplbd_config_free(&cfg);
          cfg = fresh;
          eplbd_log_init(cfg.log_level);
          eplbd_log(EPLB_LOG_INFO, "SIGHUP: config reloaded (%u source(s), period %g s)",
                    cfg.num_sources, cfg.period);
        }
      }
    }
    run_period(&cfg);
    next += cfg.period;
    double now = eplbd_now();
    if (next < now)
      next = now; /* planning overran the period: don't try to catch up */
    sleep_until(next);
  }
  eplbd_log(EPLB_LOG_INFO, "stopping");
done:
  eplbd_http_stop(http);
  pthread_mutex_lock(&eplbd_lock);
  for (uint32_t i = 0; i < eplbd_num_sources; i++)
    eplbd_source_fini(&eplbd_sources[i]);
  free(eplbd_sources);
  eplbd_sources = NULL;
  eplbd_num_sources = 0;
  pthread_mutex_unlock(&eplbd_lock);
  eplbd_config_free(&cfg);
  return rc;
}
