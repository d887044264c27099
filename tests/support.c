#include "tests/support.h"

#include "core/core.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int eplb_test_run(Suite *suite) {
  SRunner *sr = srunner_create(suite);
  srunner_set_tap(sr, "-");
  srunner_run_all(sr, CK_SILENT);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

const char *eplb_test_samples(void) {
  const char *s = getenv("EPLB_SAMPLES");
  return s ? s : "traces/samples";
}

const char *eplb_test_tmpdir(void) {
  static char dir[512];
  if (!dir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/eplb-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir)) {
      perror("mkdtemp");
      abort();
    }
  }
  return dir;
}

const char *eplb_test_path(const char *dir, const char *name) {
  static char bufs[8][1024];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
  return b;
}

const char *eplb_test_tmp(const char *name) { return eplb_test_path(eplb_test_tmpdir(), name); }

void *eplb_test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s: cannot open", path);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  ck_assert_int_ge(n, 0);
  ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
  unsigned char *b = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(b);
  ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  b[n] = '\0';
  *len = (size_t)n;
  return b;
}

void eplb_test_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "%s: cannot create", path);
  ck_assert_uint_eq(fwrite(data, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
}

bool eplb_test_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* Atomic: the runtime's planning and counting threads allocate too. */
static _Atomic long fail_at = -1;
static _Atomic long count;

static void *t_malloc(size_t n, void *u) {
  (void)u;
  if (fail_at >= 0 && count++ >= fail_at)
    return NULL;
  if (fail_at < 0)
    count++;
  return malloc(n);
}
static void *t_calloc(size_t n, size_t s, void *u) {
  (void)u;
  if (fail_at >= 0 && count++ >= fail_at)
    return NULL;
  if (fail_at < 0)
    count++;
  return calloc(n, s);
}
static void *t_realloc(void *p, size_t n, void *u) {
  (void)u;
  if (fail_at >= 0 && count++ >= fail_at)
    return NULL;
  if (fail_at < 0)
    count++;
  return realloc(p, n);
}
static void t_free(void *p, void *u) {
  (void)u;
  free(p);
}

void eplb_test_alloc_install(void) {
  static const eplb_allocator_t a = {t_malloc, t_calloc, t_realloc, t_free, NULL};
  eplb_allocator_set(&a);
}

void eplb_test_alloc_fail_after(long n) {
  count = 0;
  fail_at = n;
}

void eplb_test_alloc_reset(void) {
  count = 0;
  fail_at = -1;
}

long eplb_test_alloc_count(void) { return count; }

const char *eplb_test_cli_out(void) {
  static char path[1024];
  if (!path[0])
    snprintf(path, sizeof path, "%s/cli.out", eplb_test_tmpdir());
  return path;
}

const char *eplb_test_cli_err(void) {
  static char path[1024];
  if (!path[0])
    snprintf(path, sizeof path, "%s/cli.err", eplb_test_tmpdir());
  return path;
}

int eplb_test_run_cli(const char *bin, const char *const *args) {
  const char *out = eplb_test_cli_out(), *err = eplb_test_cli_err();
  pid_t pid = fork();
  if (pid == 0) {
    const char *argv[64] = {bin};
    for (int i = 0; args[i] && i < 62; i++)
      argv[i + 1] = args[i];
    if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr))
      _exit(99);
    execv(bin, (char *const *)argv);
    _exit(98);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

unsigned char *eplb_test_load_esft(size_t *tokens) {
  FILE *f = fopen(eplb_test_path(eplb_test_samples(), "esft-dsv2lite/topk_ids.npy"), "rb");
  ck_assert_ptr_nonnull(f);
  unsigned char head[10];
  ck_assert_uint_eq(fread(head, 1, 10, f), 10);
  ck_assert_int_eq(memcmp(head, "\x93NUMPY", 6), 0);
  size_t hlen = head[8] | (size_t)head[9] << 8;
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  size_t bytes = (size_t)ftell(f) - 10 - hlen;
  ck_assert_int_eq(fseek(f, (long)(10 + hlen), SEEK_SET), 0);
  unsigned char *d = malloc(bytes);
  ck_assert_ptr_nonnull(d);
  ck_assert_uint_eq(fread(d, 1, bytes, f), bytes);
  fclose(f);
  *tokens = bytes / (26 * 6);
  return d;
}

uint64_t eplb_test_xorshift(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}
