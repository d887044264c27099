/* Fuzz target for the NPY readers: the input is a whole .npy file, read as
 * loads (eplb_loads_read: counts [T, L, E] or a matrix [L, E]), element by
 * element (the header parser and every dtype), and as top-k ids converted
 * to a trace (eplb_trace_convert), which must then open and read back. */
#include "tests/fuzz/fuzz_target.h"

#include "eplb/trace.h"
#include "traces/traces.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* Elements read one by one at most (a valid header may describe a large
 * array of a small file only if the data is really there). */
#define READ_ELEMENTS (1u << 16)

void fuzz_target_cleanup(void) { fuzz_util_cleanup(); }

static void as_loads(const char *path) {
  static const uint64_t ranges[][2] = {{0, UINT64_MAX}, {1, 2}, {UINT64_MAX - 1, UINT64_MAX}};
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
    eplb_loads_t *l = NULL;
    fuzz_util_begin();
    eplb_status_t st =
        fuzz_util_status(eplb_loads_read(path, ranges[i][0], ranges[i][1], &l), "loads_read");
    fuzz_util_check((st == EPLB_OK) == (l != NULL), "*out set exactly on success");
    if (l) {
      size_t n = (size_t)l->num_layers * l->num_experts;
      for (size_t k = 0; k < n && k < READ_ELEMENTS; k++)
        fuzz_util_check(isfinite(l->values[k]) && l->values[k] >= 0, "loads are finite and >= 0");
    }
    eplb_loads_destroy(l);
    if (st != EPLB_OK)
      break;
  }
}

static void as_elements(const char *path) {
  eplb__npy_t npy;
  fuzz_util_begin();
  if (fuzz_util_status(eplb__npy_open(path, &npy), "npy_open") != EPLB_OK)
    return;
  fuzz_util_check(npy.ndim <= EPLB__NPY_MAX_DIMS && npy.itemsize >= 1 && npy.itemsize <= 8,
                  "an NPY header that parses has a sane shape and dtype");
  uint64_t n = npy.count < READ_ELEMENTS ? npy.count : READ_ELEMENTS;
  int64_t v[64];
  eplb_status_t st = EPLB_OK;
  for (uint64_t done = 0; done < n && st == EPLB_OK;) {
    size_t m = n - done < 64 ? (size_t)(n - done) : 64;
    fuzz_util_begin();
    st = fuzz_util_status(eplb__npy_read(&npy, m, v), "npy_read");
    done += m;
  }
  fuzz_util_begin();
  if (fuzz_util_status(eplb__npy_seek(&npy, npy.count), "npy_seek") == EPLB_OK) {
    fuzz_util_begin();
    fuzz_util_check(fuzz_util_status(eplb__npy_read(&npy, 1, v), "npy_read") != EPLB_OK,
                    "no element past the end");
  }
  eplb__npy_close(&npy);
}

static void as_topk(const char *path) {
  const char *out = fuzz_util_path("topk.eplbt");
  eplb_trace_convert_options_t o;
  eplb_trace_convert_options_default(&o);
  o.from = EPLB_TRACE_FORMAT_NPY_TOPK;
  o.to = EPLB_TRACE_FORMAT_NATIVE;
  /* A fixed E bounds the trace a small file can imply (E = max id + 1
   * would let one id make every step 65,535 counts wide per layer). */
  o.num_experts = 64;
  o.tokens_per_step = 3;
  o.topk_rows_per_step = 2;
  fuzz_util_begin();
  if (fuzz_util_status(eplb_trace_convert(path, out, &o), "trace_convert") != EPLB_OK)
    return;
  eplb_trace_t *t = NULL;
  fuzz_util_begin();
  fuzz_util_check(fuzz_util_status(eplb_trace_open(out, NULL, &t), "trace_open") == EPLB_OK,
                  "a converted trace opens");
  eplb_trace_step_t step;
  uint64_t steps = 0;
  eplb_status_t st;
  while ((st = eplb_trace_next(t, &step)) == EPLB_OK)
    steps++;
  fuzz_util_check(st == EPLB_EOF && steps == eplb_trace_num_steps(t),
                  "a converted trace reads back completely");
  eplb_trace_close(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_util_path("in.npy");
  fuzz_util_put(path, data, size);
  as_loads(path);
  as_elements(path);
  as_topk(path);
  return 0;
}
