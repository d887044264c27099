/* gpu_check — run by tests/gpu/run.sh on one GPU: every kernel against its
 * CPU reference (random inputs and the ESFT trace), bit-identical counts
 * and maps; the runtime with the NCCL communicator on one rank; timings of
 * count + map and of the reference MoE layer. One summary table; exit 1 on
 * any mismatch or error, 2 when there is no device. Usage: gpu_check
 * SAMPLES_DIR */
#include "eplb/kernels.h"
#include "eplb/plan.h"
#include "eplb/runtime.h"
#include "eplb/trace.h"
#include "eplb/runtime_device.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"
#include "tests/reference/reference.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static char table[8192];

static void row(const char *name, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void row(const char *name, int ok, const char *fmt, ...) {
  char val[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(val, sizeof val, fmt, ap);
  va_end(ap);
  size_t len = strlen(table);
  snprintf(table + len, sizeof table - len, "%-34s %-5s %s\n", name, ok ? "ok" : "FAIL", val);
  if (!ok)
    failures++;
  fprintf(stderr, "gpu_check: %s: %s %s\n", name, ok ? "ok" : "FAIL", val);
}

#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "gpu_check: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
              cudaGetErrorString(e_));                                                             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define EP(call)                                                                                   \
  do {                                                                                             \
    eplb_status_t s_ = (call);                                                                     \
    if (s_ != EPLB_OK) {                                                                           \
      fprintf(stderr, "gpu_check: %s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,                 \
              eplb_status_name(s_), eplb_error_detail());                                          \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static void *dmalloc(size_t bytes) {
  void *p = NULL;
  CU(cudaMalloc(&p, bytes ? bytes : 1));
  CU(cudaMemset(p, 0, bytes ? bytes : 1));
  return p;
}
static void *hmalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "gpu_check: out of host memory\n");
    exit(1);
  }
  return p;
}
static void *upload(const void *h, size_t bytes) {
  void *d = dmalloc(bytes);
  CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  return d;
}
static int same(const void *dev, const void *host, size_t bytes) {
  void *h = hmalloc(bytes);
  CU(cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost));
  int eq = memcmp(h, host, bytes) == 0;
  free(h);
  return eq;
}

static uint64_t rng = 0x1234567;
static uint32_t rnd(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

/* ESFT topk_ids.npy: uint8 [T][26][6]; returns [26][T][6] int32. */
static int32_t *esft(const char *dir, size_t *tokens) {
  char path[4096];
  snprintf(path, sizeof path, "%s/esft-dsv2lite/topk_ids.npy", dir);
  FILE *f = fopen(path, "rb");
  unsigned char head[10];
  if (!f || fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6)) {
    fprintf(stderr, "gpu_check: cannot read %s\n", path);
    exit(1);
  }
  size_t hlen = head[8] | (size_t)head[9] << 8;
  fseek(f, 0, SEEK_END);
  size_t bytes = (size_t)ftell(f) - 10 - hlen, T = bytes / 156;
  fseek(f, (long)(10 + hlen), SEEK_SET);
  uint8_t *raw = hmalloc(bytes);
  if (fread(raw, 1, bytes, f) != bytes) {
    fprintf(stderr, "gpu_check: %s is short\n", path);
    exit(1);
  }
  fclose(f);
  int32_t *ids = hmalloc(bytes * 4);
  for (size_t t = 0; t < T; t++)
    for (size_t l = 0; l < 26; l++)
      for (size_t j = 0; j < 6; j++)
        ids[(l * T + t) * 6 + j] = raw[(t * 26 + l) * 6 + j];
  free(raw);
  *tokens = T;
  return ids;
}

/* Counts [L][T][K] ids on both sides over `steps` steps; compares rings. */
static void check_count(const char *name, const int32_t *ids, uint32_t L, uint32_t E, uint32_t K,
                        uint32_t T, uint32_t steps) {
  uint32_t W = 3;
  size_t ring_bytes = (size_t)W * L * E * 4;
  uint32_t *hc = hmalloc(ring_bytes), hs = 0, hd = 0;
  eplb_cuda_ring_t h = {hc, &hs, &hd, W, L, E};
  eplb_cuda_ring_t d = {dmalloc(ring_bytes), dmalloc(4), dmalloc(4), W, L, E};
  int32_t *dids = upload(ids, (size_t)L * T * K * 4);
  uint32_t per = T / steps;
  for (uint32_t s = 0; s < steps; s++) {
    for (uint32_t l = 0; l < L; l++) {
      const int32_t *p = ids + ((size_t)l * T + (size_t)s * per) * K;
      eplb__count_ref(&h, l, p, per, K);
      EP(eplb__cuda_count(&d, l, dids + (p - ids), per, K, NULL));
    }
    if (s + 1 < steps) {
      eplb__step_ref(&h);
      EP(eplb__cuda_step(&d, NULL));
    }
  }
  CU(cudaDeviceSynchronize());
  int ok = same(d.counts, hc, ring_bytes) && same(d.step, &hs, 4) && same(d.dropped, &hd, 4);
  row(name, ok, "%u layers x %u tokens x top-%u, %u steps, %u dropped", L, T, K, steps, hd);
  cudaFree(d.counts), cudaFree(d.step), cudaFree(d.dropped), cudaFree(dids);
  free(hc);
}

/* Maps through a runtime's tables uploaded to the device (buffer 1 after a
 * switch) and compares with eplb_runtime_map. */
static void check_map(const char *name, const int32_t *ids, uint32_t L, uint32_t E, uint32_t K,
                      uint32_t T, uint32_t S) {
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = L, c.num_experts = E, c.topk = K, c.slots_per_rank = S;
  eplb_runtime_t *rt = NULL;
  EP(eplb_runtime_create(&c, NULL, &rt));
  eplb_cuda_dispatch_t d = {.epoch = dmalloc(4), .num_experts = E, .num_slots = S};
  for (int b = 0; b < 2; b++)
    d.buf[b] =
        (eplb_cuda_table_t){dmalloc((E + 1) * 4), dmalloc(S * 4), dmalloc(S * 4), dmalloc(S * 4)};
  int32_t *dids = upload(ids, (size_t)L * T * K * 4), *dout = dmalloc((size_t)T * K * 4);
  int32_t *want = hmalloc((size_t)T * K * 4);
  uint32_t *bad = dmalloc(4), zero = 0;
  int ok = 1;
  EP(eplb__cuda_switch(&d, NULL)); /* epoch 1: buffer 1 */
  for (uint32_t l = 0; l < L && ok; l++) {
    EP(eplb_cuda_table_upload(rt, l, &d, 1, NULL));
    EP(eplb__cuda_map(&d, l, dids + (size_t)l * T * K, T, K, 1000003ull * l, dout, bad, NULL));
    EP(eplb_runtime_map(rt, l, ids + (size_t)l * T * K, T, 1000003ull * l, want));
    CU(cudaDeviceSynchronize());
    ok = same(dout, want, (size_t)T * K * 4) && same(bad, &zero, 4);
  }
  row(name, ok, "%u layers x %u tokens x top-%u, %u experts in %u slots", L, T, K, E, S);
  for (int b = 0; b < 2; b++)
    cudaFree(d.buf[b].off), cudaFree(d.buf[b].slot), cudaFree(d.buf[b].alias),
        cudaFree(d.buf[b].prob);
  cudaFree(d.epoch), cudaFree(dids), cudaFree(dout), cudaFree(bad);
  free(want);
  eplb_runtime_destroy(rt);
}

static void check_sample(const int32_t *ids, uint32_t L, uint32_t K, uint32_t T) {
  uint32_t cap = 64, every = 7;
  size_t ib = (size_t)cap * L * K * 4;
  eplb_cuda_sample_ring_t h = {
      hmalloc(ib), hmalloc(cap * 4), hmalloc(cap * 8), cap, L, K, every, 3};
  eplb_cuda_sample_ring_t d = {
      dmalloc(ib), dmalloc(cap * 4), dmalloc(cap * 8), cap, L, K, every, 3};
  int32_t *dids = upload(ids, (size_t)L * T * K * 4);
  for (uint32_t l = 0; l < L; l++) {
    eplb__sample_ref(&h, l, ids + (size_t)l * T * K, T, 5);
    EP(eplb__cuda_sample(&d, l, dids + (size_t)l * T * K, T, 5, NULL));
  }
  CU(cudaDeviceSynchronize());
  int ok = same(d.ids, h.ids, ib) && same(d.src, h.src, cap * 4) && same(d.token, h.token, cap * 8);
  row("sample ring (ESFT)", ok, "every %u-th token, %u entries", every, cap);
  cudaFree(d.ids), cudaFree(d.src), cudaFree(d.token), cudaFree(dids);
  free(h.ids), free(h.src), free(h.token);
}

static void check_nccl(void) {
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = 4, c.num_experts = 16, c.topk = 2, c.slots_per_rank = 20;
  c.policy.interval_steps = 4, c.policy.plan_lag_steps = 1;
  void *own = NULL; /* NULL ncclComm_t: the runtime creates its own (one rank) */
  cudaStream_t stream;
  CU(cudaStreamCreate(&stream));
  c.comm.kind = EPLB_COMM_NCCL, c.comm.nccl_comm = &own, c.comm.cuda_stream = &stream;
  eplb_runtime_t *rt = NULL;
  eplb_status_t st = eplb_runtime_create(&c, NULL, &rt);
  int ok = st == EPLB_OK;
  int32_t ids[64];
  for (int i = 0; i < 64; i++)
    ids[i] = i % 3;
  for (int s = 0; s < 10 && ok; s++) {
    for (uint32_t l = 0; l < 4 && ok; l++)
      ok = eplb_runtime_record(rt, l, ids, 32) == EPLB_OK;
    st = ok ? eplb_runtime_step_end(rt) : st;
    ok = ok && st == EPLB_OK;
  }
  double v[3] = {1.5, -2, 7};
  ok = ok && eplb_runtime_allreduce(rt, v, 3, EPLB_REDUCE_SUM) == EPLB_OK && v[0] == 1.5 &&
       v[1] == -2 && v[2] == 7;
  eplb_runtime_metrics_t m = {0};
  if (rt)
    eplb_runtime_metrics(rt, &m);
  ok = ok && m.global_steps == 10;
  row("runtime, NCCL, world size 1", ok, "%s; %llu global steps, %llu plans",
      ok ? "create/record/step_end/allreduce" : eplb_error_detail(),
      (unsigned long long)m.global_steps, (unsigned long long)m.plans);
  eplb_runtime_destroy(rt);
  CU(cudaStreamDestroy(stream));
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static void check_moe_small(void) {
  eplb_test_moe_shape_t sh = {16, 64, 32, 8, 2};
  size_t nx = 16 * 64, nr = 8 * 64, nw = 8 * 32 * 64;
  float *x = hmalloc(nx * 4), *wr = hmalloc(nr * 4), *w1 = hmalloc(nw * 4), *w3 = hmalloc(nw * 4),
        *w2 = hmalloc(nw * 4), *y = hmalloc(nx * 4), *yg = hmalloc(nx * 4);
  float *all[] = {x, wr, w1, w3, w2};
  size_t len[] = {nx, nr, nw, nw, nw};
  for (int a = 0; a < 5; a++)
    for (size_t i = 0; i < len[a]; i++)
      all[a][i] = (float)((int)(rnd() % 2001) - 1000) / 4000.0f;
  int32_t top[32], topg[32];
  eplb_test_moe_ref(&sh, x, wr, w1, w3, w2, y, top);
  eplb_test_moe_gpu_t *m = NULL;
  int err = eplb_test_moe_gpu_create(&sh, 0, wr, w1, w3, w2, 0, &m);
  if (!err)
    err = eplb_test_moe_gpu_set_input(m, x);
  if (!err)
    err = eplb_test_moe_gpu_route(m);
  if (!err)
    err = eplb_test_moe_gpu_forward(m, NULL, NULL);
  if (!err)
    err = eplb_test_moe_gpu_output(m, yg, topg);
  double maxerr = 0;
  for (size_t i = 0; i < nx && !err; i++)
    maxerr = fmax(maxerr, fabs(yg[i] - y[i]) / (fabs(y[i]) + 1e-3));
  int ok = !err && memcmp(top, topg, sizeof top) == 0 && maxerr < 1e-3;
  row("MoE layer fp32 vs CPU (small)", ok, "error %d, top-k %s, max rel. error %.2e", err,
      memcmp(top, topg, sizeof top) ? "differ" : "equal", maxerr);
  eplb_test_moe_gpu_destroy(m);
  for (int a = 0; a < 5; a++)
    free(all[a]);
  free(y), free(yg);
}

/* The device runtime (#17) on the GPU against the emulated device: 100
 * steps of the ESFT trace (256 tokens a step) through record -> per-batch
 * split -> map on both, every slot compared bit for bit, then the window
 * after a flush. A standalone rank of 8 GPUs (80 slots) so the split has
 * work. Then a timed pass per layer: count, split, map and the reference
 * MoE layer at DeepSeek-V2-Lite shapes (hidden 2048, expert width 1408,
 * 64 experts, top-6, bf16) mapping with the runtime's live table. */
enum { DL = 26, DE = 64, DK = 6, DT = 256, DSTEPS = 100 };

static eplb_runtime_t *device_rt(eplb_device_kind_t kind, int split, cudaStream_t s) {
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = DL, c.num_experts = DE, c.topk = DK;
  c.world_size = 8, c.ranks_per_node = 8, c.slots_per_rank = 10;
  c.split_per_batch = split;
  c.policy.window_steps = 128;
  c.device.kind = kind, c.device.stream = s, c.device.window = 4;
  eplb_runtime_t *rt = NULL;
  EP(eplb_runtime_create(&c, NULL, &rt));
  return rt;
}

static float median(float *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_f);
  return n ? v[n / 2] : 0;
}

static void check_device_runtime(const int32_t *es, size_t T) {
  if (T < (size_t)DSTEPS * DT) {
    row("device runtime vs emulated (ESFT)", 0, "trace has %zu tokens", T);
    return;
  }
  cudaStream_t s;
  CU(cudaStreamCreate(&s));
  eplb_runtime_t *gpu = device_rt(EPLB_DEVICE_CUDA, 1, s),
                 *emu = device_rt(EPLB_DEVICE_EMULATED, 1, NULL);
  eplb_runtime_t *cnt = device_rt(EPLB_DEVICE_CUDA, 0, s);
  size_t n = (size_t)DT * DK;
  int32_t *hids = hmalloc(n * 4), *hout = hmalloc(n * 4), *eout = hmalloc(n * 4);
  int32_t *dids = dmalloc((size_t)DL * n * 4), *dout = dmalloc(n * 4);
  size_t mismatches = 0;
  for (uint32_t step = 0; step < DSTEPS; step++) {
    for (uint32_t l = 0; l < DL; l++)
      CU(cudaMemcpyAsync(dids + l * n, es + ((size_t)l * T + (size_t)step * DT) * DK, n * 4,
                         cudaMemcpyHostToDevice, s));
    for (uint32_t l = 0; l < DL; l++) {
      memcpy(hids, es + ((size_t)l * T + (size_t)step * DT) * DK, n * 4);
      EP(eplb_runtime_device_route(gpu, l, dids + l * n, DT, (uint64_t)step * DT, dout));
      EP(eplb_runtime_device_route(emu, l, hids, DT, (uint64_t)step * DT, eout));
      CU(cudaMemcpyAsync(hout, dout, n * 4, cudaMemcpyDeviceToHost, s));
      CU(cudaStreamSynchronize(s));
      mismatches += memcmp(hout, eout, n * 4) != 0;
    }
    EP(eplb_runtime_step_end(gpu));
    EP(eplb_runtime_step_end(emu));
  }
  EP(eplb_runtime_device_flush(gpu));
  EP(eplb_runtime_step_end(gpu));
  EP(eplb_runtime_step_end(emu));
  double *wg = hmalloc((size_t)DL * DE * 8), *we = hmalloc((size_t)DL * DE * 8);
  EP(eplb_runtime_window(gpu, EPLB_WINDOW_SUM, wg));
  EP(eplb_runtime_window(emu, EPLB_WINDOW_SUM, we));
  eplb_runtime_device_stats_t st;
  EP(eplb_runtime_device_stats(gpu, &st));
  row("device runtime vs emulated (ESFT)", !mismatches,
      "%u steps x %u layers, %zu layer "
      "mismatches; split on 8 GPUs",
      DSTEPS, DL, mismatches);
  row("device runtime window vs emulated", !memcmp(wg, we, (size_t)DL * DE * 8),
      "after flush; %llu rows fed late, %llu ring waits", (unsigned long long)st.steps_late,
      (unsigned long long)st.ring_waits);

  /* Timed pass: per layer, events between the calls (the harness waits at
   * each step's end to read them; the runtime itself never does). */
  eplb_test_moe_shape_t sh = {DT, 2048, 1408, DE, DK};
  eplb_test_moe_gpu_t *m = NULL;
  int err = eplb_test_moe_gpu_create(&sh, 1, NULL, NULL, NULL, NULL, 0.02f, &m);
  float *x = hmalloc((size_t)DT * 2048 * 4);
  for (size_t i = 0; i < (size_t)DT * 2048; i++)
    x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
  if (!err)
    err = eplb_test_moe_gpu_set_input(m, x);
  if (!err)
    err = eplb_test_moe_gpu_route(m);
  cudaEvent_t ev[DL][5];
  for (uint32_t l = 0; l < DL; l++)
    for (int i = 0; i < 5; i++)
      CU(cudaEventCreate(&ev[l][i]));
  size_t NS = (size_t)DSTEPS * DL;
  float *tc = hmalloc(NS * 4), *ts = hmalloc(NS * 4), *tm = hmalloc(NS * 4), *tf = hmalloc(NS * 4);
  for (uint32_t step = 0; step < DSTEPS && !err; step++) {
    for (uint32_t l = 0; l < DL; l++)
      CU(cudaMemcpyAsync(dids + l * n, es + ((size_t)l * T + (size_t)step * DT) * DK, n * 4,
                         cudaMemcpyHostToDevice, s));
    for (uint32_t l = 0; l < DL && !err; l++) {
      const eplb_cuda_dispatch_t *d = NULL;
      EP(eplb_runtime_device_tables(gpu, l, &d, NULL));
      CU(cudaEventRecord(ev[l][0], s));
      EP(eplb_runtime_device_record(cnt, l, dids + l * n, DT));
      CU(cudaEventRecord(ev[l][1], s));
      EP(eplb_runtime_device_record(gpu, l, dids + l * n, DT));
      CU(cudaEventRecord(ev[l][2], s));
      EP(eplb_runtime_device_map(gpu, l, dids + l * n, DT, (uint64_t)step * DT, dout));
      CU(cudaEventRecord(ev[l][3], s));
      err = eplb_test_moe_gpu_forward(m, d, s);
      CU(cudaEventRecord(ev[l][4], s));
    }
    CU(cudaStreamSynchronize(s));
    for (uint32_t l = 0; l < DL && !err; l++) {
      float t[4];
      for (int i = 0; i < 4; i++)
        CU(cudaEventElapsedTime(&t[i], ev[l][i], ev[l][i + 1]));
      size_t k = (size_t)step * DL + l;
      tc[k] = t[0] * 1000, ts[k] = (t[1] - t[0]) * 1000, tm[k] = t[2] * 1000, tf[k] = t[3] * 1000;
    }
    EP(eplb_runtime_step_end(gpu));
    EP(eplb_runtime_step_end(cnt));
  }
  /* Medians over every (step, layer): the per-layer cost of each piece. */
  row("per layer: count (us)", !err, "%.2f (median of %u steps x %u layers)", median(tc, NS),
      DSTEPS, DL);
  row("per layer: split + table build (us)", !err, "%.2f", median(ts, NS));
  row("per layer: map (us)", !err, "%.2f", median(tm, NS));
  row("per layer: MoE layer V2-Lite (us)", !err, "%.1f (error %d)", median(tf, NS), err);
  eplb_test_moe_gpu_destroy(m);
  eplb_runtime_destroy(gpu);
  eplb_runtime_destroy(emu);
  eplb_runtime_destroy(cnt);
  for (uint32_t l = 0; l < DL; l++)
    for (int i = 0; i < 5; i++)
      CU(cudaEventDestroy(ev[l][i]));
  CU(cudaStreamDestroy(s));
  free(hids), free(hout), free(eout), free(wg), free(we), free(x), free(tc), free(ts), free(tm),
      free(tf);
  CU(cudaFree(dids));
  CU(cudaFree(dout));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gpu_check SAMPLES_DIR\n");
    return 2;
  }
  int n = 0;
  if (eplb_cuda_device_count(&n) != EPLB_OK) {
    fprintf(stderr, "gpu_check: %s\n", eplb_error_detail());
    return 2;
  }
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  fprintf(stderr, "gpu_check: device 0: %s\n", prop.name);

  /* Random ids with ~1% out of range (counted as dropped). */
  enum { L = 4, E = 256, K = 8, T = 1024 };
  int32_t *ids = hmalloc((size_t)L * T * K * 4), *valid = hmalloc((size_t)L * T * K * 4);
  for (size_t i = 0; i < (size_t)L * T * K; i++) {
    uint32_t r = rnd();
    valid[i] = (int32_t)(r % E);
    ids[i] = r % 97 == 0 ? (r & 1 ? -1 : E + 3) : valid[i];
  }
  check_count("count (random, bad ids)", ids, L, E, K, T, 4);
  size_t ET = 0;
  int32_t *es = esft(argv[1], &ET);
  check_count("count (ESFT trace)", es, 26, 64, 6, (uint32_t)ET, 8);
  check_map("map (random, 288 slots)", valid, L, E, K, T, 288);
  check_map("map (ESFT trace, 80 slots)", es, 26, 64, 6, (uint32_t)ET, 80);
  check_sample(es, 26, 6, 4096);
  check_moe_small();
  check_nccl();
  check_device_runtime(es, ET);

  /* count + map per layer: 256 tokens x top-8, 256 experts, 58 layers per
   * sample, median of 200 samples (cudaEvent timing). */
  enum { TL = 58, TT = 256, SAMPLES = 200 };
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = TL, c.num_experts = E, c.topk = K, c.slots_per_rank = 288;
  eplb_runtime_t *rt = NULL;
  EP(eplb_runtime_create(&c, NULL, &rt));
  eplb_cuda_dispatch_t d = {.epoch = dmalloc(4), .num_experts = E, .num_slots = 288};
  for (int b = 0; b < 2; b++)
    d.buf[b] = (eplb_cuda_table_t){dmalloc((E + 1) * 4), dmalloc(288 * 4), dmalloc(288 * 4),
                                   dmalloc(288 * 4)};
  EP(eplb_cuda_table_upload(rt, 0, &d, 0, NULL));
  eplb_cuda_ring_t ring = {dmalloc((size_t)32 * TL * E * 4), dmalloc(4), dmalloc(4), 32, TL, E};
  int32_t *dids = upload(valid, (size_t)TT * K * 4), *dout = dmalloc((size_t)TT * K * 4);
  cudaStream_t s;
  CU(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  float *per = hmalloc(SAMPLES * 4), *cnt_only = hmalloc(SAMPLES * 4);
  for (int pass = 0; pass < 2; pass++)
    for (int i = -10; i < SAMPLES; i++) {
      CU(cudaEventRecord(e0, s));
      for (uint32_t l = 0; l < TL; l++) {
        EP(eplb__cuda_count(&ring, l, dids, TT, K, s));
        if (pass == 0)
          EP(eplb__cuda_map(&d, 0, dids, TT, K, l, dout, NULL, s));
      }
      CU(cudaEventRecord(e1, s));
      CU(cudaEventSynchronize(e1));
      float ms = 0;
      CU(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 0)
        (pass == 0 ? per : cnt_only)[i] = ms * 1000 / TL;
    }
  qsort(per, SAMPLES, 4, cmp_f);
  qsort(cnt_only, SAMPLES, 4, cmp_f);
  float us = per[SAMPLES / 2];
  row("time: count + map per layer", us <= 5, "%.2f us (count alone %.2f us; goal <= 5 us)", us,
      cnt_only[SAMPLES / 2]);

  /* The reference MoE layer at DeepSeek-V3 shapes, bf16, batch 256. */
  eplb_test_moe_shape_t sh = {256, 7168, 2048, 256, 8};
  eplb_test_moe_gpu_t *m = NULL;
  int err = eplb_test_moe_gpu_create(&sh, 1, NULL, NULL, NULL, NULL, 0.02f, &m);
  float *x = hmalloc((size_t)256 * 7168 * 4), *ms_moe = hmalloc(20 * 4);
  for (size_t i = 0; i < (size_t)256 * 7168; i++)
    x[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
  if (!err)
    err = eplb_test_moe_gpu_set_input(m, x);
  if (!err)
    err = eplb_test_moe_gpu_route(m);
  for (int i = -3; i < 20 && !err; i++) {
    CU(cudaEventRecord(e0, s));
    err = eplb_test_moe_gpu_forward(m, &d, s);
    CU(cudaEventRecord(e1, s));
    CU(cudaEventSynchronize(e1));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 0)
      ms_moe[i] = ms * 1000;
  }
  float moe = 0;
  if (!err) {
    qsort(ms_moe, 20, 4, cmp_f);
    moe = ms_moe[10];
  }
  row("time: MoE layer (V3 shapes, bf16)", !err, "%.1f us (error %d)", moe, err);
  if (!err)
    row("ratio (count + map) / MoE", us / moe <= 0.01, "%.3f%% (goal <= 1%%)", 100 * us / moe);
  eplb_test_moe_gpu_destroy(m);
  eplb_runtime_destroy(rt);

  printf("%-34s %-5s %s\n%s", "check", "", "result", table);
  printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
