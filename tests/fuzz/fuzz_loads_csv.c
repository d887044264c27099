/* Fuzz target for the CSV loads readers (matrix and long form, through
 * eplb_loads_read): the input is a whole .csv file. Beyond "no crash, no
 * leak, a status with a detail": loads that read are finite and >= 0, and
 * a matrix written back by eplb_loads_write_csv reads back identical. */
#include "tests/fuzz/fuzz_target.h"

#include "eplb/trace.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Beyond this many cells the checks would dominate the run time; the
 * reader itself is still exercised. */
#define CHECK_CELLS (1u << 16)

void fuzz_target_cleanup(void) { fuzz_util_cleanup(); }

static void check_loads(const eplb_loads_t *l) {
  size_t n = (size_t)l->num_layers * l->num_experts;
  fuzz_util_check(l->num_layers >= 1 && l->num_experts >= 1 && l->values,
                  "loads have a shape and values");
  if (n > CHECK_CELLS)
    return;
  for (size_t i = 0; i < n; i++)
    fuzz_util_check(isfinite(l->values[i]) && l->values[i] >= 0, "loads are finite and >= 0");
  const char *back = fuzz_util_path("back.csv");
  fuzz_util_begin();
  if (fuzz_util_status(eplb_loads_write_csv(l, back), "loads_write_csv") != EPLB_OK)
    abort();
  eplb_loads_t *r = NULL;
  fuzz_util_begin();
  fuzz_util_check(fuzz_util_status(eplb_loads_read(back, 0, UINT64_MAX, &r), "loads_read") ==
                      EPLB_OK,
                  "loads written by eplb read back");
  fuzz_util_check(r->num_layers == l->num_layers && r->num_experts == l->num_experts &&
                      !memcmp(r->values, l->values, n * sizeof *r->values),
                  "loads survive write + read");
  eplb_loads_destroy(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint64_t ranges[][2] = {{0, UINT64_MAX}, {1, 3}, {UINT64_MAX - 1, UINT64_MAX}};
  const char *path = fuzz_util_path("in.csv");
  fuzz_util_put(path, data, size);
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
    eplb_loads_t *l = NULL;
    fuzz_util_begin();
    eplb_status_t st =
        fuzz_util_status(eplb_loads_read(path, ranges[i][0], ranges[i][1], &l), "loads_read");
    fuzz_util_check((st == EPLB_OK) == (l != NULL), "*out set exactly on success");
    if (l)
      check_loads(l);
    eplb_loads_destroy(l);
    if (st != EPLB_OK)
      break; /* the same bytes fail the same way for every range */
  }
  return 0;
}
