/* Temporary files of the parser fuzz targets: most parsers take a path, so
 * each input is written to a file in a private directory first. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "tests/fuzz/fuzz_target.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_NAMES 16

static char dir[256];
static char paths[MAX_NAMES][320];
static size_t num_paths;

const char *fuzz_util_path(const char *name) {
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp && *tmp ? tmp : "/tmp";
    snprintf(dir, sizeof dir, "%s/eplb-fuzz-XXXXXX", base);
    if (!mkdtemp(dir))
      abort();
    /* libFuzzer never calls the cleanup; it exits through exit(). */
    atexit(fuzz_util_cleanup);
  }
  for (size_t i = 0; i < num_paths; i++) {
    const char *slash = strrchr(paths[i], '/');
    if (!strcmp(slash + 1, name))
      return paths[i];
  }
  if (num_paths == MAX_NAMES)
    abort();
  snprintf(paths[num_paths], sizeof paths[num_paths], "%s/%s", dir, name);
  return paths[num_paths++];
}

void fuzz_util_put(const char *path, const uint8_t *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0)
    abort();
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0)
      abort();
    data += n;
    size -= (size_t)n;
  }
  close(fd);
}

void fuzz_util_cleanup(void) {
  fuzz_util_print_stats();
  for (size_t i = 0; i < num_paths; i++)
    unlink(paths[i]);
  num_paths = 0;
  if (dir[0])
    rmdir(dir);
  dir[0] = 0;
}

void fuzz_util_check(int ok, const char *what) {
  if (ok)
    return;
  fprintf(stderr, "fuzz: broken invariant: %s\n", what);
  abort();
}

/* Outcomes per call, printed on stderr at cleanup when FUZZ_STATS is set:
 * a corpus whose every input fails at the first check tests little. */
#define MAX_CALLS 32
static struct {
  const char *call;
  unsigned long ok, failed;
} stats[MAX_CALLS];

static void count(const char *call, int ok) {
  for (size_t i = 0; i < MAX_CALLS; i++) {
    if (!stats[i].call)
      stats[i].call = call;
    if (stats[i].call == call || !strcmp(stats[i].call, call)) {
      if (ok)
        stats[i].ok++;
      else
        stats[i].failed++;
      return;
    }
  }
}

void fuzz_util_print_stats(void) {
  static int printed;
  if (printed++ || !getenv("FUZZ_STATS"))
    return;
  for (size_t i = 0; i < MAX_CALLS && stats[i].call; i++)
    fprintf(stderr, "fuzz: %-20s %8lu ok %8lu failed\n", stats[i].call, stats[i].ok,
            stats[i].failed);
}

void fuzz_util_begin(void) { eplb_error_clear(); }

eplb_status_t fuzz_util_status(eplb_status_t st, const char *call) {
  if (!strcmp(eplb_status_name(st), "EPLB_UNKNOWN")) {
    fprintf(stderr, "fuzz: %s returned unknown status %d\n", call, (int)st);
    abort();
  }
  const char *d = eplb_error_detail();
  if (st != EPLB_OK && st != EPLB_EOF && (!d || !d[0] || strchr(d, '\n'))) {
    fprintf(stderr, "fuzz: %s returned %s without a one-line detail: \"%s\"\n", call,
            eplb_status_name(st), d ? d : "(null)");
    abort();
  }
  count(call, st == EPLB_OK);
  return st;
}
