/* tools/eplbd/http.c — /metrics (Prometheus text format 0.0.4), /healthz and
 * /plan over a small pool of libmicrohttpd's internal threads. The listening
 * socket is made here so that port 0 works and the bound port can be
 * reported. */
#include "eplbd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* Stalled clients (slowloris: connect, then trickle a request or send
 * nothing) must never lock out health checks and scrapes. Refusing new
 * connections at a limit cannot do that: the stalled ones hold the slots,
 * whatever the per-address limit (every loopback client can use any of
 * 127.0.0.0/8), and an idle timeout is reset by each byte trickled. So the
 * newcomer always gets in: when the connections reach `soft`, or its
 * address holds `per_addr` idle ones, the oldest idle connection (no
 * request in progress: still sending its headers, or between requests) is
 * closed to make room, once it has been idle GRACE_S. A real request is
 * read within milliseconds, so it is never the oldest idle one, and the
 * grace keeps a burst of new connections from closing it before its
 * worker reads it. At `hard` the oldest idle one goes whatever its age, so
 * libmicrohttpd's own limit (above `hard`) is never reached: there it
 * would stop accepting, and nothing could make room any more. */
#define GRACE_S 1.0

typedef struct conn {
  struct conn *prev, *next; /* in the idle list, oldest first, while idle */
  int fd;
  struct sockaddr_in peer;
  double since; /* idle since (eplbd_now) */
  int idle;     /* in the idle list */
  int evicted;  /* shut down to make room; libmicrohttpd closes it */
} conn_t;

typedef struct guard {
  pthread_mutex_t lock;
  conn_t *head, *tail; /* idle connections, oldest first */
  unsigned live;       /* tracked connections not evicted */
  unsigned soft, hard, per_addr;
  uint64_t evicted; /* for /metrics */
} guard_t;

struct eplbd_http {
  struct MHD_Daemon *daemon;
  int fd;
  guard_t guard;
};

static guard_t *the_guard; /* for /metrics */

static void idle_push(guard_t *g, conn_t *c) {
  c->since = eplbd_now();
  c->prev = g->tail;
  c->next = NULL;
  if (g->tail)
    g->tail->next = c;
  else
    g->head = c;
  g->tail = c;
  c->idle = 1;
}

static void idle_unlink(guard_t *g, conn_t *c) {
  if (!c->idle)
    return;
  if (c->prev)
    c->prev->next = c->next;
  else
    g->head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  else
    g->tail = c->prev;
  c->prev = c->next = NULL;
  c->idle = 0;
}

/* Under g->lock. libmicrohttpd closes a descriptor only after the CLOSED
 * notification (which takes the lock), so c->fd is still this connection;
 * the peer is compared anyway before the shutdown, which makes its worker
 * see the end of the stream and close it. */
static void evict(guard_t *g, conn_t *c) {
  idle_unlink(g, c);
  c->evicted = 1;
  g->live--;
  g->evicted++;
  struct sockaddr_in p;
  socklen_t n = sizeof p;
  if (!getpeername(c->fd, (struct sockaddr *)&p, &n) && n == sizeof p &&
      p.sin_addr.s_addr == c->peer.sin_addr.s_addr && p.sin_port == c->peer.sin_port)
    shutdown(c->fd, SHUT_RDWR);
}

/* Called before a new connection is set up: makes room, never refuses. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t len) {
  guard_t *g = cls;
  if (len != sizeof(struct sockaddr_in))
    return MHD_YES;
  const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)addr;
  double old = eplbd_now() - GRACE_S;
  pthread_mutex_lock(&g->lock);
  unsigned same = 0;
  conn_t *first = NULL;
  for (conn_t *c = g->head; c; c = c->next)
    if (c->peer.sin_addr.s_addr == a->sin_addr.s_addr && !same++)
      first = c;
  if (same >= g->per_addr && (first->since <= old || g->live >= g->hard))
    evict(g, first);
  if (g->live >= g->soft && g->head && (g->head->since <= old || g->live >= g->hard))
    evict(g, g->head);
  pthread_mutex_unlock(&g->lock);
  return MHD_YES;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **ctx,
                          enum MHD_ConnectionNotificationCode toe) {
  guard_t *g = cls;
  conn_t *c = *ctx;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ad =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    /* Untracked (no memory, not IPv4): served, never evicted. */
    if (!fd || !ad || ad->client_addr->sa_family != AF_INET || !(c = calloc(1, sizeof *c)))
      return;
    c->fd = fd->connect_fd;
    memcpy(&c->peer, ad->client_addr, sizeof c->peer);
    pthread_mutex_lock(&g->lock);
    g->live++;
    idle_push(g, c);
    pthread_mutex_unlock(&g->lock);
    *ctx = c;
  } else if (c) {
    pthread_mutex_lock(&g->lock);
    if (!c->evicted) {
      idle_unlink(g, c);
      g->live--;
    }
    pthread_mutex_unlock(&g->lock);
    free(c);
    *ctx = NULL;
  }
}

/* A request in progress (busy) or done (idle again, the newest). */
static void set_idle(guard_t *g, struct MHD_Connection *mc, int idle) {
  const union MHD_ConnectionInfo *i =
      MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  conn_t *c = i ? i->socket_context : NULL;
  if (!c)
    return;
  pthread_mutex_lock(&g->lock);
  if (!c->evicted && !idle)
    idle_unlink(g, c);
  else if (!c->evicted && !c->idle)
    idle_push(g, c);
  pthread_mutex_unlock(&g->lock);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **req,
                         enum MHD_RequestTerminationCode toe) {
  (void)req, (void)toe;
  set_idle(cls, mc, 1);
}

typedef struct buf {
  char *p;
  size_t n, cap;
  int oom;
} buf_t;

__attribute__((format(printf, 2, 3))) static void put(buf_t *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = b->oom ? 0 : vsnprintf(b->p ? b->p + b->n : NULL, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (b->oom || k < 0)
      return;
    if (b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = (b->cap + (size_t)k + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

/* A sample value as Prometheus reads it (Go's ParseFloat): printf spells a
 * NaN "nan" or "-nan" and an infinity "inf", which scrapers reject. */
typedef struct {
  char s[48];
} num_t;

static num_t num(double v, int decimals) {
  num_t n;
  if (isnan(v))
    snprintf(n.s, sizeof n.s, "NaN");
  else if (isinf(v))
    snprintf(n.s, sizeof n.s, "%s", v > 0 ? "+Inf" : "-Inf");
  else if (fabs(v) < 1e15)
    snprintf(n.s, sizeof n.s, "%.*f", decimals, v);
  else /* %f would print every digit of a huge value */
    snprintf(n.s, sizeof n.s, "%.17g", v);
  return n;
}

static void head(buf_t *b, const char *name, const char *type, const char *help) {
  put(b, "# HELP eplbd_%s %s\n# TYPE eplbd_%s %s\n", name, help, name, type);
}

/* One metric for every source; EXPR reads it from `s`. */
#define PER_SOURCE(b, NAME, TYPE, HELP, FMT, EXPR)                                                 \
  do {                                                                                             \
    head(b, NAME, TYPE, HELP);                                                                     \
    for (uint32_t i = 0; i < eplbd_num_sources; i++) {                                             \
      const eplbd_source_t *s = &eplbd_sources[i];                                                 \
      put(b, "eplbd_%s{source=\"%s\"} " FMT "\n", NAME, s->cfg.name, EXPR);                        \
    }                                                                                              \
  } while (0)

static void metrics(buf_t *b) {
  double now = eplbd_now();
  head(b, "up", "gauge", "1 while the daemon runs.");
  put(b, "eplbd_up 1\n");
  head(b, "uptime_seconds", "gauge", "Seconds since the daemon started.");
  put(b, "eplbd_uptime_seconds %s\n", num(now - eplbd_start_time, 3).s);
  head(b, "http_closed_to_make_room_total", "counter",
       "Idle HTTP connections closed so that a new client gets in (stalled clients).");
  pthread_mutex_lock(&the_guard->lock);
  uint64_t evicted = the_guard->evicted;
  pthread_mutex_unlock(&the_guard->lock);
  put(b, "eplbd_http_closed_to_make_room_total %llu\n", (unsigned long long)evicted);
  PER_SOURCE(b, "replans_total", "counter", "Plans computed.", "%llu",
             (unsigned long long)s->replans);
  PER_SOURCE(b, "publishes_total", "counter", "Plans published.", "%llu",
             (unsigned long long)s->publishes);
  PER_SOURCE(b, "skipped_below_threshold_total", "counter",
             "Plans not published because the gain was below the threshold.", "%llu",
             (unsigned long long)s->skipped_gain);
  PER_SOURCE(b, "skipped_by_bound_total", "counter",
             "Steps not planned because the lower bound caps the gain below the threshold.", "%llu",
             (unsigned long long)s->skipped_bound);
  PER_SOURCE(b, "invalid_plans_total", "counter", "Plans that failed validation (never published).",
             "%llu", (unsigned long long)s->invalid_plans);
  PER_SOURCE(b, "source_errors_total", "counter", "Failures reading the source or publishing.",
             "%llu", (unsigned long long)s->errors);
  PER_SOURCE(b, "slots_planned_to_move_total", "counter",
             "Slots whose expert changed between published plans.", "%llu",
             (unsigned long long)s->slots_moved);
  PER_SOURCE(b, "bytes_planned_to_move_total", "counter",
             "Expert weight bytes the published plans move (slots x expert_bytes).", "%llu",
             (unsigned long long)s->bytes_moved);
  PER_SOURCE(b, "planning_seconds_total", "counter", "Wall time spent planning.", "%s",
             num(s->planning_seconds_total, 6).s);
  PER_SOURCE(b, "planning_seconds_last", "gauge", "Wall time of the last plan.", "%s",
             num(s->planning_seconds_last, 6).s);
  PER_SOURCE(b, "source_staleness_seconds", "gauge", "Seconds since the source last updated.", "%s",
             num(now - s->changed_at, 3).s);
  PER_SOURCE(b, "source_stale", "gauge", "1 when the source has not updated for stale_after.", "%d",
             s->stale);
  PER_SOURCE(b, "plan_epoch", "gauge", "Epoch of the last published plan.", "%llu",
             (unsigned long long)s->epoch);
  PER_SOURCE(b, "balancedness_mean", "gauge",
             "Mean over layers of mean/max GPU load of the plan in force, on the latest window.",
             "%s", num(s->mean_balancedness, 6).s);
  PER_SOURCE(b, "balancedness_min", "gauge", "Worst layer's balancedness of the plan in force.",
             "%s", num(s->min_balancedness, 6).s);
  PER_SOURCE(b, "candidate_balancedness_mean", "gauge", "Mean balancedness of the last new plan.",
             "%s", num(s->candidate_balancedness, 6).s);
  PER_SOURCE(b, "predicted_gain", "gauge", "Last new plan's balancedness minus the current one's.",
             "%s", num(s->last_gain, 6).s);
  head(b, "layer_balancedness", "gauge",
       "Per-layer balancedness of the plan in force (first 128 layers only).");
  for (uint32_t i = 0; i < eplbd_num_sources; i++) {
    const eplbd_source_t *s = &eplbd_sources[i];
    for (uint32_t l = 0; l < s->layer_labels; l++)
      put(b, "eplbd_layer_balancedness{source=\"%s\",layer=\"%u\"} %s\n", s->cfg.name, l,
          num(s->layer_balancedness[l], 6).s);
  }
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type, char *body,
                             size_t len) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result ret = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result text(struct MHD_Connection *c, unsigned code, const char *msg) {
  char *body = strdup(msg);
  return body ? reply(c, code, "text/plain; charset=utf-8", body, strlen(body)) : MHD_NO;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state) {
  (void)version, (void)upload, (void)upload_size, (void)state;
  set_idle(cls, c, 0);
  if (strcmp(method, "GET") && strcmp(method, "HEAD"))
    return text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n");
  if (!strcmp(url, "/healthz"))
    return text(c, MHD_HTTP_OK, "ok\n");
  buf_t b = {0};
  if (!strcmp(url, "/metrics")) {
    pthread_mutex_lock(&eplbd_lock);
    metrics(&b);
    pthread_mutex_unlock(&eplbd_lock);
    if (b.oom) {
      free(b.p);
      return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    }
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n);
  }
  if (!strcmp(url, "/plan")) {
    const char *want = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "source");
    char *body = NULL;
    size_t len = 0;
    int found = 0;
    pthread_mutex_lock(&eplbd_lock);
    for (uint32_t i = 0; i < eplbd_num_sources && !found; i++) {
      const eplbd_source_t *s = &eplbd_sources[i];
      if (want && strcmp(want, s->cfg.name))
        continue;
      found = 1;
      if (s->plan_json && (body = malloc(s->plan_json_len + 1))) {
        memcpy(body, s->plan_json, s->plan_json_len);
        len = s->plan_json_len;
      }
    }
    pthread_mutex_unlock(&eplbd_lock);
    if (!found)
      return text(c, MHD_HTTP_NOT_FOUND, "no such source\n");
    if (!body)
      return text(c, MHD_HTTP_NOT_FOUND, "no plan published yet\n");
    return reply(c, MHD_HTTP_OK, "application/json", body, len);
  }
  return text(c, MHD_HTTP_NOT_FOUND, "not found: try /metrics, /healthz, /plan\n");
}

/* The bound, listening socket, or -1 (logged). Non-blocking: the workers
 * all wait on it, and those that lose the race for a new connection must
 * not block in accept(). */
static int listen_socket(const eplbd_config_t *cfg, struct sockaddr_in *a) {
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons(cfg->listen_port);
  a->sin_addr.s_addr = cfg->listen_addr;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
  socklen_t alen = sizeof *a;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(fd, (struct sockaddr *)a, sizeof *a) || listen(fd, 512) ||
      getsockname(fd, (struct sockaddr *)a, &alen)) {
    eplbd_log(EPLB_LOG_ERROR, "listen %s: %s", cfg->listen, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}

/* Connections the descriptors allow, up to want: the soft limit is raised
 * towards the hard one first (1,024 is a common default). */
static unsigned fd_budget(unsigned want) {
  const rlim_t need = (rlim_t)want + 128; /* traces, segments, plan files, epoll */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl))
    return want / 4;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) || getrlimit(RLIMIT_NOFILE, &rl))
      return want / 4;
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
    return want;
  return rl.rlim_cur > 256 ? (unsigned)(rl.rlim_cur - 128) : 128;
}

static void write_port_file(const char *path, unsigned port) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  int bad = !f || fprintf(f, "%u\n", port) < 0;
  if ((f && fclose(f)) || bad || rename(tmp, path))
    eplbd_log(EPLB_LOG_WARN, "%s: cannot write the port", path);
}

int eplbd_http_start(const eplbd_config_t *cfg, eplbd_http_t **out) {
  *out = NULL;
  if (!cfg->listen[0])
    return 0;
  struct sockaddr_in a;
  int fd = listen_socket(cfg, &a);
  eplbd_http_t *h = fd < 0 ? NULL : calloc(1, sizeof *h);
  if (!h) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  /* The workers poll (epoll): a stalled connection costs a descriptor, not
   * a thread; several workers keep one slow /metrics from delaying the
   * others. Idle connections time out after TIMEOUT_S; under pressure the
   * guard (above) closes the oldest idle one well before that. */
  enum { LIMIT = 1024, PER_ADDR = 64, TIMEOUT_S = 5, WORKERS = 4 };
  unsigned limit = fd_budget(LIMIT);
  pthread_mutex_init(&h->guard.lock, NULL);
  h->guard.soft = limit / 4;
  h->guard.hard = limit / 2; /* each worker may hold limit / WORKERS */
  h->guard.per_addr = PER_ADDR < h->guard.soft ? PER_ADDR : h->guard.soft;
  the_guard = &h->guard;
  h->daemon =
      MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, on_accept, &h->guard, handle, &h->guard,
                       MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)WORKERS,
                       MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_CONNECTION_TIMEOUT,
                       (unsigned)TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION, on_connection, &h->guard,
                       MHD_OPTION_NOTIFY_COMPLETED, on_completed, &h->guard, MHD_OPTION_END);
  if (!h->daemon) {
    eplbd_log(EPLB_LOG_ERROR, "listen %s: libmicrohttpd failed to start", cfg->listen);
    close(fd);
    the_guard = NULL;
    pthread_mutex_destroy(&h->guard.lock);
    free(h);
    return -1;
  }
  h->fd = fd;
  unsigned port = ntohs(a.sin_port);
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
  eplbd_log(EPLB_LOG_INFO, "serving /metrics /healthz /plan on %s:%u (%u connections)", host, port,
            limit);
  if (cfg->port_file)
    write_port_file(cfg->port_file, port);
  *out = h;
  return 0;
}

void eplbd_http_stop(eplbd_http_t *h) {
  if (!h)
    return;
  /* MHD closes the listening socket it was given. */
  MHD_stop_daemon(h->daemon);
  the_guard = NULL;
  pthread_mutex_destroy(&h->guard.lock);
  free(h);
}
