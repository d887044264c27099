/* tests/eplbd/feed.c — test helper for the eplbd tests (public API only):
 *   feed trace PATH HZ SECONDS L E      append drifting steps to a trace
 *   feed shm /NAME HZ SECONDS L E [EPOCH [MAILBOX]]
 *                                       create a segment, publish at HZ, remove it
 *                                       (EPOCH: the mailbox starts at that epoch;
 *                                       MAILBOX: its capacity in bytes)
 *   feed hostile /NAME KIND             create a segment and damage its header
 *                                       (KIND: magic, version, size, shape, seq, short;
 *                                       huge: finite counts whose sums overflow)
 *   feed flap /NAME SECONDS             create a segment, then shrink and regrow it
 *                                       (restoring its bytes, statistics renewed) in a
 *                                       loop as another process could
 *   feed mailbox /NAME                  print the epoch of the posted plan (validated)
 *   feed epoch /NAME                    print the mailbox epoch only (no plan read)
 *   feed unlink /NAME
 * SECONDS 0 runs until killed. */
#include <eplb/plan.h>
#include <eplb/shm.h>
#include <eplb/trace.h>

#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) {
  (void)sig;
  stop = 1;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pause_until(double t) {
  double left = t - now();
  if (left > 0) {
    struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

/* Skewed counts whose hot experts rotate slowly: plans keep changing. */
static void fill(uint32_t *c, double *d, uint32_t L, uint32_t E, uint64_t step) {
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t e = 0; e < E; e++) {
      uint32_t rank = (e + (uint32_t)(step / 4) + l) % E;
      double v = 1536.0 / (1.0 + rank) * (0.5 + (double)((e * 7 + step * 13 + l) % 11) / 10.0);
      if (c)
        c[(size_t)l * E + e] = (uint32_t)v;
      if (d)
        d[(size_t)l * E + e] += v;
    }
}

static int die(const char *what) {
  fprintf(stderr, "feed: %s: %s\n", what, eplb_error_detail());
  return 1;
}

static int feed_trace(const char *path, double hz, double secs, uint32_t L, uint32_t E) {
  eplb_trace_meta_t m;
  eplb_trace_meta_default(&m);
  m.num_layers = L;
  m.num_experts = E;
  m.topk = 6;
  eplb_trace_writer_options_t o;
  eplb_trace_writer_options_default(&o);
  o.steps_per_chunk = 1;
  eplb_trace_writer_t *w;
  if (eplb_trace_writer_open_append(path, &m, &o, &w))
    return die(path);
  uint32_t *c = calloc((size_t)L * E, sizeof *c);
  double t0 = now();
  for (uint64_t i = 0; !stop && (secs <= 0 || now() - t0 < secs); i++) {
    fill(c, NULL, L, E, eplb_trace_writer_num_steps(w));
    eplb_trace_step_t s = {0, 256, c, 0, NULL, NULL};
    if (eplb_trace_writer_append(w, &s))
      return die(path);
    pause_until(t0 + (double)(i + 1) / hz);
  }
  eplb_trace_writer_destroy(w);
  free(c);
  return 0;
}

static int feed_shm(const char *name, double hz, double secs, uint32_t L, uint32_t E,
                    uint64_t epoch, uint64_t mailbox) {
  eplb_shm_unlink(name);
  eplb_shm_t *shm;
  if (eplb_shm_create(name, L, E, mailbox, &shm))
    return die(name);
  if (epoch) { /* an empty mailbox that claims this epoch, as a hostile segment could */
    int fd = shm_open(name, O_RDWR, 0);
    eplb_shm_header_t *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED)
      return die(name);
    h->mailbox_epoch = epoch;
    munmap(h, sizeof *h);
    close(fd);
  }
  double *d = calloc((size_t)L * E, sizeof *d);
  double t0 = now();
  /* Like the runtime: a window over the last ~256 steps (here a decaying
   * sum), published every step. */
  double *step = calloc((size_t)L * E, sizeof *step);
  for (uint64_t i = 0; !stop && (secs <= 0 || now() - t0 < secs); i++) {
    memset(step, 0, (size_t)L * E * sizeof *step);
    fill(NULL, step, L, E, i);
    for (size_t k = 0; k < (size_t)L * E; k++)
      d[k] = d[k] * (255.0 / 256.0) + step[k];
    if (eplb_shm_publish_stats(shm, i, i < 256 ? i + 1 : 256, d))
      return die(name);
    pause_until(t0 + (double)(i + 1) / hz);
  }
  free(d);
  free(step);
  eplb_shm_close(shm);
  eplb_shm_unlink(name);
  return 0;
}

static int hostile(const char *name, const char *kind) {
  eplb_shm_unlink(name);
  eplb_shm_t *shm;
  if (eplb_shm_create(name, 4, 16, 4096, &shm))
    return die(name);
  double d[64];
  for (int i = 0; i < 64; i++)
    d[i] = !strcmp(kind, "huge") ? DBL_MAX / (1 + i % 3) : i;
  eplb_shm_publish_stats(shm, 1, 1, d);
  eplb_shm_close(shm);
  int fd = shm_open(name, O_RDWR, 0);
  eplb_shm_header_t *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (!strcmp(kind, "magic"))
    h->magic ^= 1;
  else if (!strcmp(kind, "version"))
    h->version = 99;
  else if (!strcmp(kind, "size"))
    h->segment_bytes = UINT64_C(1) << 50;
  else if (!strcmp(kind, "shape"))
    h->num_experts = 65535, h->num_layers = 4096;
  else if (!strcmp(kind, "seq"))
    h->stats_seq = 3; /* a writer that died mid-write */
  else if (!strcmp(kind, "short"))
    (void)!ftruncate(fd, 100);
  munmap(h, sizeof *h);
  close(fd);
  return 0;
}

/* Shrinks and regrows the segment as a buggy or hostile process of the same
 * user could, through its own descriptor (no mapping here: this process
 * must survive it). After each regrowth the bytes are restored with a new
 * statistics sequence, so a reader sees fresh data between the cuts. */
static int flap(const char *name, double secs) {
  eplb_shm_unlink(name);
  eplb_shm_t *shm;
  if (eplb_shm_create(name, 4, 16, 4096, &shm))
    return die(name);
  double d[64];
  for (int i = 0; i < 64; i++)
    d[i] = 1 + i % 7;
  eplb_shm_publish_stats(shm, 1, 1, d);
  eplb_shm_close(shm);
  int fd = shm_open(name, O_RDWR, 0);
  off_t len = fd < 0 ? -1 : lseek(fd, 0, SEEK_END);
  uint8_t *image = len > 0 ? malloc((size_t)len) : NULL;
  if (!image || pread(fd, image, (size_t)len, 0) != len) {
    fprintf(stderr, "feed: %s: cannot read the segment back\n", name);
    return 1;
  }
  const off_t cut[] = {0, 100, 300, len / 2, len - 8};
  uint64_t seq;
  memcpy(&seq, image + offsetof(eplb_shm_header_t, stats_seq), sizeof seq);
  double t0 = now();
  for (unsigned i = 0; !stop && now() - t0 < secs; i++) {
    (void)!ftruncate(fd, cut[i % (sizeof cut / sizeof *cut)]);
    struct timespec ts = {0, (long)(i % 5) * 200000};
    nanosleep(&ts, NULL);
    (void)!ftruncate(fd, len);
    seq += 2;
    memcpy(image + offsetof(eplb_shm_header_t, stats_seq), &seq, sizeof seq);
    (void)!pwrite(fd, image, (size_t)len, 0);
    nanosleep(&ts, NULL);
  }
  free(image);
  close(fd);
  eplb_shm_unlink(name);
  return 0;
}

int main(int argc, char **argv) {
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  if (argc == 7 && !strcmp(argv[1], "trace"))
    return feed_trace(argv[2], atof(argv[3]), atof(argv[4]), (uint32_t)atoi(argv[5]),
                      (uint32_t)atoi(argv[6]));
  if (argc >= 7 && argc <= 9 && !strcmp(argv[1], "shm"))
    return feed_shm(argv[2], atof(argv[3]), atof(argv[4]), (uint32_t)atoi(argv[5]),
                    (uint32_t)atoi(argv[6]), argc >= 8 ? strtoull(argv[7], NULL, 10) : 0,
                    argc == 9 ? strtoull(argv[8], NULL, 10) : 0);
  if (argc == 4 && !strcmp(argv[1], "hostile"))
    return hostile(argv[2], argv[3]);
  if (argc == 4 && !strcmp(argv[1], "flap"))
    return flap(argv[2], atof(argv[3]));
  if (argc == 3 && !strcmp(argv[1], "epoch")) {
    eplb_shm_t *shm;
    uint64_t epoch = 0;
    if (eplb_shm_open(argv[2], EPLB_SHM_READ, &shm) || eplb_shm_mailbox_epoch(shm, &epoch))
      return die(argv[2]);
    printf("%llu\n", (unsigned long long)epoch);
    eplb_shm_close(shm);
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "unlink"))
    return eplb_shm_unlink(argv[2]) ? 1 : 0;
  if (argc == 3 && !strcmp(argv[1], "mailbox")) {
    eplb_shm_t *shm;
    eplb_plan_t *p = NULL;
    uint64_t epoch = 0;
    if (eplb_shm_open(argv[2], EPLB_SHM_READ, &shm) || eplb_shm_read_plan(shm, &epoch, &p))
      return die(argv[2]);
    printf("%llu\n", (unsigned long long)epoch);
    eplb_plan_destroy(p);
    eplb_shm_close(shm);
    return 0;
  }
  fputs("usage: see tests/eplbd/feed.c\n", stderr);
  return 2;
}
