/* fuzz_trace_replay — runs the trace fuzz target on the files named on the
 * command line, then on deterministic mutations of a small valid trace made
 * in-process (bit flips, truncations, overwrites, header fields rewritten
 * with a valid header CRC, chunks duplicated or dropped). Prints TAP. Any
 * crash, sanitizer report or broken invariant fails the test. */
#include "tests/fuzz/fuzz_trace.h"
#include "traces/traces.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ITERATIONS 2000

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static uint8_t *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 65536;
      uint8_t *b = realloc(buf, cap);
      if (!b)
        abort();
      buf = b;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0)
      break;
  }
  fclose(f);
  *size = n;
  return buf;
}

/* A small trace with top-k rows, 4 chunks after the metadata. */
static uint8_t *make_seed(size_t *size) {
  char path[512];
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/fuzz-seed-%ld.eplbt", tmp && *tmp ? tmp : "/tmp", (long)getpid());
  eplb_trace_meta_t m;
  eplb_trace_meta_default(&m);
  m.num_layers = 2;
  m.num_experts = 8;
  m.topk = 2;
  m.num_ranks = 3;
  m.phase = EPLB_PHASE_DECODE;
  snprintf(m.model, sizeof m.model, "fuzz");
  eplb_trace_writer_options_t o;
  eplb_trace_writer_options_default(&o);
  o.steps_per_chunk = 2;
  o.atomic = 0;
  eplb_trace_writer_t *w = NULL;
  if (eplb_trace_writer_create(path, &m, &o, &w) != EPLB_OK)
    abort();
  uint32_t counts[16];
  uint16_t ids[3 * 2 * 2];
  int32_t src[3];
  for (uint32_t s = 0; s < 7; s++) {
    for (uint32_t i = 0; i < 16; i++)
      counts[i] = (s * 7 + i * 3) % 11;
    for (uint32_t r = 0; r < 3; r++) {
      src[r] = (int32_t)((r + s) % 4) - 1;
      for (uint32_t l = 0; l < 2; l++) {
        ids[(r * 2 + l) * 2] = (uint16_t)((r + s + l) % 8);
        ids[(r * 2 + l) * 2 + 1] = (uint16_t)((r + s + l + 3) % 8);
      }
    }
    eplb_trace_step_t st = {
        .num_tokens = 3, .counts = counts, .num_rows = s % 4, .topk = ids, .source_rank = src};
    if (eplb_trace_writer_append(w, &st) != EPLB_OK)
      abort();
  }
  if (eplb_trace_writer_finish(w) != EPLB_OK)
    abort();
  eplb_trace_writer_destroy(w);
  uint8_t *buf = slurp(path, size);
  unlink(path);
  if (!buf)
    abort();
  return buf;
}

/* Offsets of the chunk headers of a valid file. */
static size_t chunk_offsets(const uint8_t *buf, size_t size, size_t *off, size_t max) {
  size_t n = 0, pos = EPLB__TRACE_FILE_HEADER_SIZE;
  while (pos + EPLB__CHUNK_HEADER_SIZE <= size && n < max) {
    eplb__chunk_header_t h;
    if (eplb__chunk_header_decode(buf + pos, &h) != EPLB__HDR_OK)
      break;
    off[n++] = pos;
    pos += EPLB__CHUNK_HEADER_SIZE + h.payload_len;
  }
  return n;
}

static uint64_t interesting(void) {
  static const uint64_t v[] = {0,
                               1,
                               2,
                               3,
                               7,
                               8,
                               0xFF,
                               0xFFFF,
                               0x10000,
                               0x7FFFFFFF,
                               0xFFFFFFFF,
                               1u << 30,
                               (1u << 30) + 1,
                               UINT64_MAX,
                               0x8000000000000000ull};
  return rnd() % 3 ? v[rnd() % (sizeof v / sizeof v[0])] : rnd();
}

/* Rewrites one header field and re-seals the header CRC. */
static void mutate_header(uint8_t *buf, size_t off) {
  eplb__chunk_header_t h;
  if (eplb__chunk_header_decode(buf + off, &h) != EPLB__HDR_OK)
    return;
  uint64_t v = interesting();
  switch (rnd() % 8) {
  case 0: h.type = (uint16_t)v; break;
  case 1: h.flags = (uint16_t)v; break;
  case 2: h.first_step = v; break;
  case 3: h.num_tokens = v; break;
  case 4: h.num_steps = (uint32_t)v; break;
  case 5: h.payload_len = (uint32_t)v; break;
  case 6: h.raw_len = (uint32_t)v; break;
  default: h.payload_crc = (uint32_t)v; break;
  }
  eplb__chunk_header_encode(&h, buf + off);
}

int main(int argc, char **argv) {
  size_t inputs = 0;
  for (int i = 1; i < argc; i++) {
    size_t n;
    uint8_t *buf = slurp(argv[i], &n);
    if (!buf) {
      printf("not ok 1 - cannot read %s\n1..1\n", argv[i]);
      return 1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    inputs++;
  }
  size_t seed_size;
  uint8_t *seed = make_seed(&seed_size);
  size_t offs[16];
  size_t nchunks = chunk_offsets(seed, seed_size, offs, 16);
  if (nchunks != 5)
    abort();
  uint8_t *buf = malloc(2 * seed_size);
  if (!buf)
    abort();
  LLVMFuzzerTestOneInput(seed, seed_size);
  for (int it = 0; it < ITERATIONS; it++) {
    size_t n = seed_size;
    memcpy(buf, seed, n);
    int rounds = 1 + (int)(rnd() % 3);
    for (int r = 0; r < rounds; r++) {
      switch (rnd() % 6) {
      case 0: /* bit flips */
        for (int k = 1 + (int)(rnd() % 4); k > 0; k--)
          buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
        break;
      case 1: /* truncation */ n = rnd() % (n + 1); break;
      case 2: { /* overwrite a run */
        if (n == 0)
          break;
        size_t at = rnd() % n, len = 1 + rnd() % 8;
        for (size_t k = at; k < at + len && k < n; k++)
          buf[k] = (uint8_t)interesting();
        break;
      }
      case 3: /* a header field, with a valid header CRC */
      case 4: {
        size_t off = offs[rnd() % nchunks];
        if (off + EPLB__CHUNK_HEADER_SIZE <= n)
          mutate_header(buf, off);
        break;
      }
      default: { /* duplicate a chunk at the end, or drop the tail after it */
        size_t c = 1 + rnd() % (nchunks - 1);
        size_t end = c + 1 < nchunks ? offs[c + 1] : seed_size;
        if (rnd() % 2 && n == seed_size) {
          memcpy(buf + n, seed + offs[c], end - offs[c]);
          n += end - offs[c];
        } else if (offs[c] < n) {
          n = offs[c];
        }
        break;
      }
      }
    }
    LLVMFuzzerTestOneInput(buf, n);
    inputs++;
  }
  free(buf);
  free(seed);
  fuzz_trace_cleanup();
  printf("1..1\nok 1 - fuzz_trace_replay: %zu inputs without a crash or broken invariant\n",
         inputs + 1);
  return 0;
}
