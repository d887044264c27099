/* Fuzz target for the plan file reader (eplb_plan_read): the input is a
 * whole plan file. Beyond "no crash, no leak, a status with a detail": a
 * plan that reads is written back and reads back identical, and evaluates
 * on uniform loads. */
#include "tests/fuzz/fuzz_target.h"

#include "eplb/plan.h"

#include <stdlib.h>
#include <string.h>

void fuzz_target_cleanup(void) { fuzz_util_cleanup(); }

static void same_plan(const eplb_plan_t *a, const eplb_plan_t *b) {
  uint32_t L = eplb_plan_num_layers(a), R = eplb_plan_num_slots(a), G = eplb_plan_num_gpus(a);
  fuzz_util_check(L == eplb_plan_num_layers(b) && R == eplb_plan_num_slots(b) &&
                      G == eplb_plan_num_gpus(b) &&
                      eplb_plan_num_experts(a) == eplb_plan_num_experts(b) &&
                      eplb_plan_num_nodes(a) == eplb_plan_num_nodes(b) &&
                      eplb_plan_node_share_nodes(a) == eplb_plan_node_share_nodes(b),
                  "plan shape survives write + read");
  fuzz_util_check(!memcmp(eplb_plan_slots_per_gpu(a), eplb_plan_slots_per_gpu(b), G * 4u),
                  "slots_per_gpu survive write + read");
  for (uint32_t l = 0; l < L; l++) {
    fuzz_util_check(!memcmp(eplb_plan_phy2log(a, l), eplb_plan_phy2log(b, l), R * 4u) &&
                        !memcmp(eplb_plan_share(a, l), eplb_plan_share(b, l), R * 8u),
                    "phy2log and share survive write + read");
    const double *na = eplb_plan_node_share(a, l), *nb = eplb_plan_node_share(b, l);
    fuzz_util_check(!na == !nb, "node_share survives write + read");
    if (na)
      fuzz_util_check(!memcmp(na, nb, (size_t)eplb_plan_node_share_nodes(a) * R * 8u),
                      "node_share values survive write + read");
  }
}

static void exercise(eplb_plan_t *p) {
  uint32_t L = eplb_plan_num_layers(p), E = eplb_plan_num_experts(p);
  uint32_t *cnt = malloc((size_t)E * sizeof *cnt);
  if (!cnt)
    abort();
  for (uint32_t l = 0; l < L; l++) {
    fuzz_util_begin();
    fuzz_util_check(fuzz_util_status(eplb_plan_logcnt(p, l, cnt), "plan_logcnt") == EPLB_OK,
                    "logcnt of a plan that read");
  }
  free(cnt);
  eplb_loads_t *loads = NULL;
  if ((size_t)L * E <= (1u << 20) && eplb_loads_create(L, E, &loads) == EPLB_OK) {
    for (size_t i = 0; i < (size_t)L * E; i++)
      loads->values[i] = (double)(i % 7);
    fuzz_util_begin();
    fuzz_util_check(fuzz_util_status(eplb_plan_evaluate(p, loads), "plan_evaluate") == EPLB_OK,
                    "a plan that read evaluates on its own shape");
    eplb_plan_summary_t s;
    eplb_plan_summary(p, &s);
    eplb_loads_destroy(loads);
  }
  const char *back = fuzz_util_path("back.json");
  fuzz_util_begin();
  if (fuzz_util_status(eplb_plan_write(p, back), "plan_write") != EPLB_OK)
    abort();
  eplb_plan_t *q = NULL;
  fuzz_util_begin();
  fuzz_util_check(fuzz_util_status(eplb_plan_read(back, &q), "plan_read") == EPLB_OK,
                  "a plan written by eplb reads back");
  same_plan(p, q);
  eplb_plan_destroy(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_util_path("plan.json");
  fuzz_util_put(path, data, size);
  eplb_plan_t *p = NULL;
  fuzz_util_begin();
  eplb_status_t st = fuzz_util_status(eplb_plan_read(path, &p), "plan_read");
  fuzz_util_check((st == EPLB_OK) == (p != NULL), "*out set exactly on success");
  if (p)
    exercise(p);
  eplb_plan_destroy(p);
  return 0;
}
