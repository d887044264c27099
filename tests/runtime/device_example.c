#include <eplb/eplb.h>
#include <stdio.h>
#include <stdlib.h>

enum { LAYERS = 4, EXPERTS = 64, TOPK = 6, SLOTS = 72, TOKENS = 128, STEPS = 64 };

#ifdef EPLB_EXAMPLE_EMULATED /* CI: host memory stands for device memory */
#define KIND EPLB_DEVICE_EMULATED
static void *dev_alloc(size_t n) { return calloc(1, n); }
#define dev_free free
static void router(int32_t *ids, uint32_t step, uint32_t layer) { /* the model's top-k */
  for (uint32_t i = 0; i < TOKENS * TOPK; i++)
    ids[i] = (int32_t)((i % TOPK) * 7 + (i / TOPK) % 7 * (step % 3 ? 1 : layer + 1)) % EXPERTS;
}
#else
#include <cuda_runtime.h>
#define KIND EPLB_DEVICE_CUDA
static void *dev_alloc(size_t n) {
  void *p = NULL;
  return cudaMalloc(&p, n) ? NULL : p;
}
#define dev_free cudaFree
void router(int32_t *ids, uint32_t step, uint32_t layer); /* your gate, on the stream */
#endif
#define CHECK(call) /* if-else: safe in any statement position */                                  \
  if ((st = (call)) == EPLB_OK) {                                                                  \
  } else {                                                                                         \
    fprintf(stderr, "%s: %s\n", #call, eplb_error_detail());                                       \
    goto out;                                                                                      \
  }

int main(void) {
  eplb_runtime_config_t cfg;
  eplb_runtime_config_default(&cfg);
  cfg.num_layers = LAYERS, cfg.num_experts = EXPERTS, cfg.topk = TOPK, cfg.slots_per_rank = SLOTS;
  cfg.policy.interval_steps = 16; /* replan every 16 steps from the window */
  cfg.device.kind = KIND;         /* CUDA: also .ordinal and .stream (the cudaStream_t) */
  eplb_runtime_t *rt = NULL;
  eplb_status_t st;
  int32_t *ids = dev_alloc(TOKENS * TOPK * 4), *slots = dev_alloc(TOKENS * TOPK * 4);
  if (!ids || !slots)
    return fprintf(stderr, "out of device memory\n"), 1;
  CHECK(eplb_runtime_create(&cfg, NULL, &rt));
  for (uint32_t step = 0; step < STEPS; step++) {
    for (uint32_t layer = 0; layer < LAYERS; layer++) {
      router(ids, step, layer);
      /* count + map on the device, no host sync; then dispatch to `slots` */
      CHECK(eplb_runtime_device_route(rt, layer, ids, TOKENS, (uint64_t)step * TOKENS, slots));
    }
    CHECK(eplb_runtime_step_end(rt)); /* counts join the window; plans switch here */
  }
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  printf("steps %llu, epoch %llu, layers switched %llu\n", (unsigned long long)m.steps,
         (unsigned long long)m.epoch, (unsigned long long)m.layers_switched);
out:
  eplb_runtime_destroy(rt); /* waits for its copies in flight */
  dev_free(ids), dev_free(slots);
  return st == EPLB_OK ? 0 : 1;
}
