/* runtime/device_cuda.c — the CUDA device backend: the runtime's backend
 * table over the kernels module (eplb/kernels.h and the launchers of
 * kernels/kernels.h), which holds every CUDA runtime call.
 *
 * Each call makes cfg.device.ordinal current and restores the caller's
 * device afterwards: a serving stack that drives several GPUs from one
 * thread must not find its current device changed by the runtime. */
#include "eplb_config.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

#if EPLB_HAVE_CUDA

typedef struct cuda_dev {
  int ordinal;
} cuda_dev_t;

/* Makes the backend's device current; *prev receives the caller's (-1:
 * nothing to restore). */
static int enter(void *impl, int *prev) {
  int want = ((cuda_dev_t *)impl)->ordinal, cur = -1;
  *prev = -1;
  int err = eplb__cuda_get_device(&cur);
  if (err)
    return err;
  if (cur == want)
    return 0;
  *prev = cur;
  return eplb__cuda_set_device(want);
}

static void leave(int prev) {
  if (prev >= 0)
    (void)eplb__cuda_set_device(prev);
}

/* Runs `call` (an int cudaError_t expression) on the backend's device. */
#define ON_DEVICE(impl, what, call)                                                                \
  do {                                                                                             \
    int prev_, err_ = enter((impl), &prev_);                                                       \
    if (!err_)                                                                                     \
      err_ = (call);                                                                               \
    leave(prev_);                                                                                  \
    return eplb__cuda_status(err_, (what));                                                        \
  } while (0)

static eplb_status_t cu_open(void **impl, const eplb_runtime_device_t *cfg) {
  int n = 0;
  eplb_status_t st = eplb_cuda_device_count(&n);
  if (st != EPLB_OK)
    return st;
  if (cfg->ordinal < 0 || cfg->ordinal >= n)
    return eplb__error(EPLB_EINVAL, "runtime", "config: device ordinal %d, %d devices",
                       (int)cfg->ordinal, n);
  cuda_dev_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "runtime", "cuda device");
  c->ordinal = cfg->ordinal;
  *impl = c;
  return EPLB_OK;
}

static void cu_close(void *impl) { eplb__free(impl); }

static eplb_status_t cu_alloc(void *impl, void **ptr, size_t bytes) {
  ON_DEVICE(impl, "device: cudaMalloc", eplb__cuda_malloc(ptr, bytes));
}

static void cu_free(void *impl, void *ptr) {
  int prev;
  if (!enter(impl, &prev))
    eplb__cuda_free(ptr);
  leave(prev);
}

static eplb_status_t cu_host_alloc(void *impl, void **ptr, size_t bytes) {
  ON_DEVICE(impl, "device: cudaMallocHost", eplb__cuda_host_alloc(ptr, bytes));
}

static void cu_host_free(void *impl, void *ptr) {
  int prev;
  if (!enter(impl, &prev))
    eplb__cuda_host_free(ptr);
  leave(prev);
}

static eplb_status_t cu_memset(void *impl, void *dst, size_t bytes, void *stream) {
  ON_DEVICE(impl, "device: cudaMemsetAsync", eplb__cuda_memset_async(dst, 0, bytes, stream));
}

static eplb_status_t cu_upload(void *impl, void *dst, const void *src, size_t bytes, void *stream) {
  ON_DEVICE(impl, "device: table upload", eplb__cuda_h2d_async(dst, src, bytes, stream));
}

static eplb_status_t cu_download(void *impl, void *dst, const void *src, size_t bytes,
                                 void *stream) {
  ON_DEVICE(impl, "device: counts copy-back", eplb__cuda_d2h_async(dst, src, bytes, stream));
}

static eplb_status_t cu_event_create(void *impl, void **event) {
  ON_DEVICE(impl, "device: cudaEventCreate", eplb__cuda_event_create(event));
}

static void cu_event_destroy(void *impl, void *event) {
  int prev;
  if (!enter(impl, &prev))
    eplb__cuda_event_destroy(event);
  leave(prev);
}

static eplb_status_t cu_event_record(void *impl, void *event, void *stream) {
  ON_DEVICE(impl, "device: cudaEventRecord", eplb__cuda_event_record(event, stream));
}

static int cu_event_query(void *impl, void *event, eplb_status_t *st) {
  (void)impl; /* an event query needs no current device */
  int err = eplb__cuda_event_query(event);
  *st = EPLB_OK;
  if (err == EPLB__CUDA_NOT_READY)
    return 0;
  if (err == 0)
    return 1;
  *st = eplb__cuda_status(err, "device: cudaEventQuery");
  return -1;
}

static eplb_status_t cu_event_sync(void *impl, void *event) {
  (void)impl;
  return eplb__cuda_status(eplb__cuda_event_sync(event), "device: cudaEventSynchronize");
}

static int cu_stream_query(void *impl, void *stream, eplb_status_t *st) {
  (void)impl; /* a stream query needs no current device */
  int err = eplb__cuda_stream_query(stream);
  *st = EPLB_OK;
  if (err == EPLB__CUDA_NOT_READY)
    return 0;
  if (err == 0)
    return 1;
  *st = eplb__cuda_status(err, "device: cudaStreamQuery");
  return -1;
}

static eplb_status_t cu_stream_sync(void *impl, void *stream) {
  ON_DEVICE(impl, "device: cudaStreamSynchronize", eplb__cuda_stream_sync(stream));
}

/* The kernels go through the public entry points (argument checks, then
 * the launchers), with the backend's device current. */
static eplb_status_t on_device(void *impl, eplb_status_t (*fn)(void *), void *arg) {
  int prev, err = enter(impl, &prev);
  eplb_status_t st = err ? eplb__cuda_status(err, "device: cudaSetDevice") : fn(arg);
  leave(prev);
  return st;
}

typedef struct launch {
  const eplb_cuda_ring_t *ring;
  const eplb_cuda_dispatch_t *d;
  uint32_t layer, num_tokens, topk;
  const int32_t *ids;
  uint64_t token_base;
  int32_t *out;
  uint32_t *bad;
  void *stream;
} launch_t;

static eplb_status_t do_count(void *a) {
  launch_t *x = a;
  return eplb__cuda_count(x->ring, x->layer, x->ids, x->num_tokens, x->topk, x->stream);
}

static eplb_status_t do_step(void *a) {
  launch_t *x = a;
  return eplb__cuda_step(x->ring, x->stream);
}

static eplb_status_t do_map(void *a) {
  launch_t *x = a;
  return eplb__cuda_map(x->d, x->layer, x->ids, x->num_tokens, x->topk, x->token_base, x->out,
                        x->bad, x->stream);
}

static eplb_status_t do_flip(void *a) {
  launch_t *x = a;
  return eplb__cuda_switch(x->d, x->stream);
}

typedef struct split_args {
  const int32_t *p2l;
  uint32_t E, G, S, max_iterations, which, word, ranks;
  const uint32_t *counts, *tail;
  double *share, *t_star;
  const double *cshare;
  uint32_t *status;
  void *workspace, *stream;
  const eplb_cuda_dispatch_t *d;
} split_args_t;

static eplb_status_t do_split(void *a) {
  split_args_t *x = a;
  return eplb__cuda_split_guarded(x->p2l, x->E, x->G, x->S, x->counts, x->share, x->t_star,
                                  x->status, x->workspace, x->max_iterations, x->tail, x->word,
                                  x->ranks, x->stream);
}

static eplb_status_t do_table_build(void *a) {
  split_args_t *x = a;
  return eplb__cuda_table_build(x->d, x->which, x->p2l, x->cshare, x->workspace, x->stream);
}

static eplb_status_t cu_split(void *impl, const int32_t *phy2log, uint32_t num_experts,
                              uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                              double *share, double *t_star, uint32_t *status, void *workspace,
                              uint32_t max_iterations, const uint32_t *tail, uint32_t word,
                              uint32_t ranks, void *stream) {
  split_args_t x = {.p2l = phy2log,
                    .tail = tail,
                    .word = word,
                    .ranks = ranks,
                    .E = num_experts,
                    .G = num_gpus,
                    .S = slots_per_gpu,
                    .max_iterations = max_iterations,
                    .counts = counts,
                    .share = share,
                    .t_star = t_star,
                    .status = status,
                    .workspace = workspace,
                    .stream = stream};
  return on_device(impl, do_split, &x);
}

static eplb_status_t cu_table_build(void *impl, const eplb_cuda_dispatch_t *d, uint32_t which,
                                    const int32_t *phy2log, const double *share, void *workspace,
                                    void *stream) {
  split_args_t x = {.d = d,
                    .which = which,
                    .p2l = phy2log,
                    .cshare = share,
                    .workspace = workspace,
                    .stream = stream};
  return on_device(impl, do_table_build, &x);
}

typedef struct quota_args {
  const eplb_cuda_dispatch_t *d;
  uint32_t layer, num_tokens, topk;
  const int32_t *p2l, *ids;
  const double *share;
  const uint32_t *status;
  uint64_t token_base;
  int32_t *out;
  uint32_t *bad;
  void *workspace, *stream;
} quota_args_t;

static eplb_status_t do_quota(void *a) {
  quota_args_t *x = a;
  if (x->num_tokens && (!x->ids || !x->out))
    return eplb__error(EPLB_EINVAL, "runtime", "device quota map: NULL %s",
                       x->ids ? "out_slots" : "ids");
  return eplb__cuda_status(eplb__cuda_quota_launch(x->d, x->layer, x->p2l, x->share, x->status,
                                                   x->ids, x->num_tokens, x->topk, x->token_base,
                                                   x->out, x->bad, x->workspace, x->stream),
                           "device quota map");
}

static eplb_status_t cu_quota(void *impl, const eplb_cuda_dispatch_t *d, uint32_t layer,
                              const int32_t *phy2log, const double *share, const uint32_t *status,
                              const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                              uint64_t token_base, int32_t *out, uint32_t *bad, void *workspace,
                              void *stream) {
  quota_args_t x = {.d = d,
                    .layer = layer,
                    .num_tokens = num_tokens,
                    .topk = topk,
                    .p2l = phy2log,
                    .ids = ids,
                    .share = share,
                    .status = status,
                    .token_base = token_base,
                    .out = out,
                    .bad = bad,
                    .workspace = workspace,
                    .stream = stream};
  return on_device(impl, do_quota, &x);
}

typedef struct reduce_args {
  eplb__comm_t *comm;
  uint32_t *buf;
  size_t n;
  void *stream;
} reduce_args_t;

static eplb_status_t do_allreduce(void *a) {
  reduce_args_t *x = a;
  return eplb__comm_allreduce_u32_stream(x->comm, x->buf, x->n, x->stream);
}

/* NCCL on the caller's stream, with the backend's device current (NCCL
 * enqueues on the current device's context). */
static eplb_status_t cu_allreduce(void *impl, eplb__comm_t *comm, uint32_t *buf, size_t n,
                                  void *stream) {
  reduce_args_t x = {comm, buf, n, stream};
  return on_device(impl, do_allreduce, &x);
}

static eplb_status_t cu_count(void *impl, const eplb_cuda_ring_t *ring, uint32_t layer,
                              const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                              void *stream) {
  launch_t x = {.ring = ring,
                .layer = layer,
                .ids = ids,
                .num_tokens = num_tokens,
                .topk = topk,
                .stream = stream};
  return on_device(impl, do_count, &x);
}

static eplb_status_t cu_step(void *impl, const eplb_cuda_ring_t *ring, void *stream) {
  launch_t x = {.ring = ring, .stream = stream};
  return on_device(impl, do_step, &x);
}

static eplb_status_t cu_map(void *impl, const eplb_cuda_dispatch_t *d, uint32_t layer,
                            const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                            uint64_t token_base, int32_t *out, uint32_t *bad, void *stream) {
  launch_t x = {.d = d,
                .layer = layer,
                .ids = ids,
                .num_tokens = num_tokens,
                .topk = topk,
                .token_base = token_base,
                .out = out,
                .bad = bad,
                .stream = stream};
  return on_device(impl, do_map, &x);
}

static eplb_status_t cu_flip(void *impl, const eplb_cuda_dispatch_t *d, void *stream) {
  launch_t x = {.d = d, .stream = stream};
  return on_device(impl, do_flip, &x);
}

static const eplb__dev_ops_t cuda_ops = {
    .name = "cuda",
    .open = cu_open,
    .close = cu_close,
    .alloc = cu_alloc,
    .free = cu_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .memset = cu_memset,
    .upload = cu_upload,
    .download = cu_download,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .stream_sync = cu_stream_sync,
    .stream_query = cu_stream_query,
    .count = cu_count,
    .step = cu_step,
    .map = cu_map,
    .flip = cu_flip,
    .split = cu_split,
    .table_build = cu_table_build,
    .quota = cu_quota,
    .allreduce = cu_allreduce,
    .inject = NULL,
};

const eplb__dev_ops_t *eplb__dev_cuda_ops(void) { return &cuda_ops; }

#else

const eplb__dev_ops_t *eplb__dev_cuda_ops(void) { return NULL; }

#endif
