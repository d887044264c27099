/* bench_runtime — record + map cost per step at DeepSeek-V3 shapes (58
 * layers, 256 experts, top-8, 256 tokens per rank; 32 ranks' slots seen from
 * one rank: 288 slots = 32 replicated experts). Run by `meson test
 * --benchmark`; prints one line per slot count. Not a test: no assertions. */
#include "eplb/runtime.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>

static int run(uint32_t slots) {
  enum { L = 58, E = 256, K = 8, T = 256, STEPS = 1000 };
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = L, c.num_experts = E, c.topk = K, c.slots_per_rank = slots;
  eplb_runtime_t *rt = NULL;
  if (eplb_runtime_create(&c, NULL, &rt) != EPLB_OK) {
    fprintf(stderr, "bench_runtime: %s\n", eplb_error_detail());
    return 1;
  }
  int32_t *ids = malloc(sizeof *ids * L * T * K), *out = malloc(sizeof *out * T * K);
  if (!ids || !out)
    return 1;
  uint64_t x = 1;
  for (size_t i = 0; i < (size_t)L * T * K; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids[i] = (int32_t)((x >> 33) % E);
  }
  double rec = 0, map = 0;
  for (int s = 0; s < STEPS; s++) {
    double t0 = eplb__now();
    for (uint32_t l = 0; l < L; l++)
      eplb_runtime_record(rt, l, ids + (size_t)l * T * K, T);
    double t1 = eplb__now();
    for (uint32_t l = 0; l < L; l++)
      eplb_runtime_map(rt, l, ids + (size_t)l * T * K, T, (uint64_t)s * T, out);
    rec += t1 - t0;
    map += eplb__now() - t1;
    eplb_runtime_step_end(rt);
  }
  printf("slots %u: record %.1f us, map %.1f us, total %.1f us per step (%u ids)\n", slots,
         rec / STEPS * 1e6, map / STEPS * 1e6, (rec + map) / STEPS * 1e6, L * T * K);
  free(ids), free(out);
  eplb_runtime_destroy(rt);
  return 0;
}

int main(void) { return run(256) || run(288) || run(512); }
