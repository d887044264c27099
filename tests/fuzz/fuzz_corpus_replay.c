/* fuzz_corpus_replay — the replay driver of the parser fuzz targets (one
 * executable per target): runs LLVMFuzzerTestOneInput on every file of the
 * corpus directories named on the command line, in name order, then on
 * --mutations N deterministic mutations of each (a fixed-seed PRNG): bit
 * flips, truncations, runs overwritten, deleted or duplicated, numbers
 * replaced by edge cases (huge, negative, NaN, 2^32, 2^64), tokens inserted
 * (brackets, quotes, keywords), little-endian integers overwritten at
 * aligned offsets (binary headers) and splices with other corpus files.
 * Prints TAP. Any crash, sanitizer report or broken invariant fails it. */
#define _DEFAULT_SOURCE /* d_type */
#include "tests/fuzz/fuzz_target.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Inputs above this are refused: the corpus holds small files. */
#define REPLAY_MAX_INPUT (1u << 20)

typedef struct input {
  uint8_t *data;
  size_t size;
  char *path;
} input_t;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p)
    abort();
  return p;
}

static uint8_t *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  uint8_t *buf = xmalloc(REPLAY_MAX_INPUT + 1);
  *size = fread(buf, 1, REPLAY_MAX_INPUT + 1, f);
  fclose(f);
  if (*size > REPLAY_MAX_INPUT) {
    free(buf);
    return NULL;
  }
  return buf;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const input_t *)a)->path, ((const input_t *)b)->path);
}

/* Appends every regular file of dir (not recursive) to *in. */
static int load_dir(const char *dir, input_t **in, size_t *n, size_t *cap) {
  DIR *d = opendir(dir);
  if (!d)
    return -1;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    char *path = xmalloc(len);
    snprintf(path, len, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (stat(path, &sb) || !S_ISREG(sb.st_mode)) {
      free(path);
      continue;
    }
    if (*n == *cap) {
      *cap = *cap ? 2 * *cap : 64;
      input_t *g = realloc(*in, *cap * sizeof *g);
      if (!g)
        abort();
      *in = g;
    }
    input_t *x = &(*in)[*n];
    x->path = path;
    if (!(x->data = slurp(path, &x->size))) {
      closedir(d);
      printf("1..1\nnot ok 1 - cannot read %s (or over %u bytes)\n", path, REPLAY_MAX_INPUT);
      return -2;
    }
    (*n)++;
  }
  closedir(d);
  return 0;
}

static const char *const tokens[] = {"0",
                                     "1",
                                     "-1",
                                     "-0",
                                     "2",
                                     "7",
                                     "255",
                                     "256",
                                     "65535",
                                     "65536",
                                     "4096",
                                     "4097",
                                     "2147483647",
                                     "2147483648",
                                     "4294967295",
                                     "4294967296",
                                     "9007199254740993",
                                     "18446744073709551615",
                                     "18446744073709551616",
                                     "99999999999999999999999999",
                                     "1e308",
                                     "1e999",
                                     "-1e999",
                                     "1e-320",
                                     "0.5",
                                     "1.0000001",
                                     "NaN",
                                     "nan",
                                     "inf",
                                     "-inf",
                                     "Infinity",
                                     "0x10",
                                     "1,",
                                     ",",
                                     ",,",
                                     "\n",
                                     "\r\n",
                                     " ",
                                     "\t",
                                     "\"",
                                     "'",
                                     "\\",
                                     "\\u0000",
                                     "\\ud800",
                                     "null",
                                     "true",
                                     "false",
                                     "[]",
                                     "{}",
                                     "[",
                                     "]",
                                     "{",
                                     "}",
                                     ":",
                                     "[[[[[[[[[[[[[[[[",
                                     "{\"a\":{\"a\":{\"a\":",
                                     "\"\":0,",
                                     "\"x\"",
                                     "\xff\xfe",
                                     "\x80",
                                     "",
                                     "(",
                                     ")",
                                     "L",
                                     "'<u4'",
                                     "'|u1'",
                                     "'>i8'",
                                     "'<f8'",
                                     "True",
                                     "False",
                                     "step,layer,expert,count\n"};

static const uint64_t ints[] = {0,
                                1,
                                2,
                                3,
                                7,
                                8,
                                63,
                                64,
                                255,
                                256,
                                4096,
                                65535,
                                65536,
                                0x7FFFFFFF,
                                0x80000000,
                                0xFFFFFFFF,
                                0x100000000ull,
                                1ull << 30,
                                1ull << 40,
                                0x7FFFFFFFFFFFFFFFull,
                                0x8000000000000000ull,
                                UINT64_MAX,
                                0x7FF8000000000000ull /* NaN */,
                                0x7FF0000000000000ull /* +inf */,
                                0xBFF0000000000000ull /* -1.0 */,
                                0x3FF0000000000000ull /* 1.0 */};

/* With FUZZ_SLOW_MS set, an input that takes longer is reported on stderr
 * and kept as slow-N in the current directory: the corpus must stay fast
 * enough for the whole suite to run in a minute under ASan. */
static void run(const uint8_t *data, size_t size, const char *origin) {
  static const char *slow_env;
  static int init, kept;
  if (!init) {
    slow_env = getenv("FUZZ_SLOW_MS");
    init = 1;
  }
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  LLVMFuzzerTestOneInput(data, size);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) * 1e-6;
  if (slow_env && ms > atof(slow_env)) {
    char name[32];
    snprintf(name, sizeof name, "slow-%d", kept++);
    fprintf(stderr, "fuzz: %.0f ms: a mutation of %s (kept as %s)\n", ms, origin, name);
    FILE *f = fopen(name, "wb");
    if (f) {
      fwrite(data, 1, size, f);
      fclose(f);
    }
  }
}

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Replaces buf[at, at + len) by rep (rlen bytes); returns the new size. */
static size_t replace(uint8_t *buf, size_t n, size_t cap, size_t at, size_t len, const void *rep,
                      size_t rlen) {
  if (at > n)
    at = n;
  if (len > n - at)
    len = n - at;
  if (n - len + rlen > cap)
    return n;
  memmove(buf + at + rlen, buf + at + len, n - at - len);
  memcpy(buf + at, rep, rlen);
  return n - len + rlen;
}

static size_t mutate(uint8_t *buf, size_t n, size_t cap, const input_t *other) {
  switch (rnd() % 10) {
  case 0: /* bit flips */
    for (int k = 1 + (int)below(4); n && k > 0; k--)
      buf[below(n)] ^= (uint8_t)(1u << below(8));
    return n;
  case 1: /* truncation */ return below(n + 1);
  case 2: { /* a run of one byte value */
    if (!n)
      return n;
    size_t at = below(n), len = 1 + below(16);
    uint8_t v = (uint8_t)(rnd() % 2 ? ints[below(sizeof ints / sizeof ints[0])] : rnd());
    for (size_t k = at; k < at + len && k < n; k++)
      buf[k] = v;
    return n;
  }
  case 3: { /* delete a run */
    size_t at = below(n + 1);
    return replace(buf, n, cap, at, 1 + below(32), "", 0);
  }
  case 4: { /* duplicate a run elsewhere */
    if (!n)
      return n;
    size_t at = below(n), len = 1 + below(n - at < 64 ? n - at : 64);
    uint8_t tmp[64];
    memcpy(tmp, buf + at, len);
    return replace(buf, n, cap, below(n + 1), 0, tmp, len);
  }
  case 5: { /* a number replaced by an edge case */
    size_t start = below(n + 1), at = start;
    while (at < n && !is_digit(buf[at]))
      at++;
    if (at == n)
      at = start;
    size_t end = at;
    while (end < n && (is_digit(buf[end]) || buf[end] == '.' || buf[end] == 'e' ||
                       buf[end] == '-' || buf[end] == '+'))
      end++;
    const char *t = tokens[below(31)];
    return replace(buf, n, cap, at, end - at, t, strlen(t));
  }
  case 6: { /* a token inserted or overwriting */
    const char *t = tokens[below(sizeof tokens / sizeof tokens[0])];
    size_t at = below(n + 1);
    return replace(buf, n, cap, at, rnd() % 2 ? below(4) : 0, t, strlen(t));
  }
  case 7:
  case 8: { /* a little-endian integer at an aligned offset (binary headers) */
    size_t w = rnd() % 2 ? 8 : 4;
    if (n < w)
      return n;
    size_t at = below(n / w) * w;
    uint64_t v = rnd() % 4 ? ints[below(sizeof ints / sizeof ints[0])] : rnd();
    if (rnd() % 4 == 0)
      v += rnd() % 3 - 1; /* off by one */
    for (size_t k = 0; k < w; k++)
      buf[at + k] = (uint8_t)(v >> (8 * k));
    return n;
  }
  default: { /* splice: the tail of another input after a prefix of this one */
    if (!other->size)
      return n;
    size_t at = below(n + 1), from = below(other->size);
    size_t len = other->size - from;
    return replace(buf, n, cap, at, n - at, other->data + from, len);
  }
  }
}

int main(int argc, char **argv) {
  size_t mutations = 100, ninputs = 0, cap = 0;
  input_t *in = NULL;
  int first = 1;
  if (argc > 2 && !strcmp(argv[1], "--mutations")) {
    mutations = (size_t)strtoull(argv[2], NULL, 10);
    first = 3;
  }
  for (int i = first; i < argc; i++) {
    int r = load_dir(argv[i], &in, &ninputs, &cap);
    if (r == -1) {
      printf("1..1\nnot ok 1 - cannot list %s\n", argv[i]);
      return 1;
    }
    if (r)
      return 1;
  }
  if (!ninputs) {
    printf("1..1\nnot ok 1 - empty corpus\n");
    return 1;
  }
  qsort(in, ninputs, sizeof *in, by_path);
  size_t runs = 0, bufcap = 2 * REPLAY_MAX_INPUT + 4096;
  uint8_t *buf = xmalloc(bufcap);
  for (size_t i = 0; i < ninputs; i++) {
    run(in[i].data, in[i].size, in[i].path);
    runs++;
  }
  for (size_t i = 0; i < ninputs; i++) {
    for (size_t m = 0; m < mutations; m++) {
      size_t n = in[i].size;
      memcpy(buf, in[i].data, n);
      for (int r = 1 + (int)below(3); r > 0; r--)
        n = mutate(buf, n, bufcap, &in[below(ninputs)]);
      run(buf, n, in[i].path);
      runs++;
    }
  }
  fuzz_target_cleanup();
  free(buf);
  for (size_t i = 0; i < ninputs; i++) {
    free(in[i].data);
    free(in[i].path);
  }
  free(in);
  const char *self = strrchr(argv[0], '/');
  printf("1..1\nok 1 - %s: %zu inputs (%zu corpus files) without a crash or broken invariant\n",
         self ? self + 1 : argv[0], runs, ninputs);
  return 0;
}
