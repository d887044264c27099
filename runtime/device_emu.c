/* runtime/device_emu.c — the emulated device: host memory stands for
 * device memory and the kernels. CPU references (kernels/count.c, map.c) for the
 * kernels, so CI runs the device path of the runtime without a GPU.
 *
 * Its "stream" runs every operation at once. What a GPU does late or
 * wrongly is made to happen on demand (eplb_runtime_device_inject): events
 * that complete only after a number of queries (a busy device), uploads and
 * launches that fail. */
#include "kernels/kernels.h"
#include "runtime/runtime.h"

#include <string.h>

typedef struct emu {
  uint64_t ticks;           /* event queries answered "running" so far: the device's clock */
  uint32_t event_delay;     /* queries after its record before an event completes */
  uint32_t upload_failures; /* uploads left to fail */
  uint32_t launch_failures; /* launches left to fail */
} emu_t;

/* An event completes when the device's clock reaches `due`: time passes
 * with queries, whichever event they ask about, as it passes on a GPU
 * whether or not anyone looks. */
typedef struct emu_event {
  uint64_t due;
} emu_event_t;

static eplb_status_t emu_open(void **impl, const eplb_runtime_device_t *cfg) {
  (void)cfg;
  *impl = eplb__calloc(1, sizeof(emu_t));
  return *impl ? EPLB_OK : eplb__error(EPLB_ENOMEM, "runtime", "emulated device");
}

static void emu_close(void *impl) { eplb__free(impl); }

static eplb_status_t emu_alloc(void *impl, void **ptr, size_t bytes) {
  (void)impl;
  *ptr = eplb__calloc(1, bytes ? bytes : 1);
  return *ptr ? EPLB_OK : eplb__error(EPLB_ENOMEM, "runtime", "emulated device: %zu bytes", bytes);
}

static void emu_free(void *impl, void *ptr) {
  (void)impl;
  eplb__free(ptr);
}

static eplb_status_t emu_memset(void *impl, void *dst, size_t bytes, void *stream) {
  (void)impl, (void)stream;
  memset(dst, 0, bytes);
  return EPLB_OK;
}

/* Counts down a failure knob: true when this call is to fail. */
static bool take(uint32_t *left) {
  if (!*left)
    return false;
  --*left;
  return true;
}

static eplb_status_t emu_upload(void *impl, void *dst, const void *src, size_t bytes,
                                void *stream) {
  (void)stream;
  if (take(&((emu_t *)impl)->upload_failures))
    return eplb__error(EPLB_EDEVICE, "runtime", "emulated device: injected upload failure");
  memcpy(dst, src, bytes);
  return EPLB_OK;
}

static eplb_status_t emu_download(void *impl, void *dst, const void *src, size_t bytes,
                                  void *stream) {
  (void)impl, (void)stream;
  memcpy(dst, src, bytes);
  return EPLB_OK;
}

static eplb_status_t emu_event_create(void *impl, void **event) {
  (void)impl;
  *event = eplb__calloc(1, sizeof(emu_event_t));
  return *event ? EPLB_OK : eplb__error(EPLB_ENOMEM, "runtime", "emulated device: event");
}

static void emu_event_destroy(void *impl, void *event) {
  (void)impl;
  eplb__free(event);
}

static eplb_status_t emu_event_record(void *impl, void *event, void *stream) {
  (void)stream;
  emu_t *e = impl;
  ((emu_event_t *)event)->due = e->ticks + e->event_delay;
  return EPLB_OK;
}

static int emu_event_query(void *impl, void *event, eplb_status_t *st) {
  emu_t *e = impl;
  *st = EPLB_OK;
  if (e->ticks >= ((emu_event_t *)event)->due)
    return 1;
  e->ticks++;
  return 0;
}

static eplb_status_t emu_event_sync(void *impl, void *event) {
  (void)impl;
  ((emu_event_t *)event)->due = 0;
  return EPLB_OK;
}

/* Its stream runs everything at once. */
static int emu_stream_query(void *impl, void *stream, eplb_status_t *st) {
  (void)impl, (void)stream;
  *st = EPLB_OK;
  return 1;
}

static eplb_status_t emu_stream_sync(void *impl, void *stream) {
  (void)impl, (void)stream;
  return EPLB_OK;
}

static eplb_status_t launch_failed(void *impl, const char *what) {
  if (take(&((emu_t *)impl)->launch_failures))
    return eplb__error(EPLB_EDEVICE, "runtime", "emulated device: %s: injected launch failure",
                       what);
  return EPLB_OK;
}

static eplb_status_t emu_count(void *impl, const eplb_cuda_ring_t *ring, uint32_t layer,
                               const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                               void *stream) {
  (void)stream;
  eplb_status_t st = launch_failed(impl, "count");
  if (st == EPLB_OK)
    eplb__count_ref(ring, layer, ids, num_tokens, topk);
  return st;
}

static eplb_status_t emu_step(void *impl, const eplb_cuda_ring_t *ring, void *stream) {
  (void)stream;
  eplb_status_t st = launch_failed(impl, "ring step");
  if (st == EPLB_OK)
    eplb__step_ref(ring);
  return st;
}

static eplb_status_t emu_map(void *impl, const eplb_cuda_dispatch_t *d, uint32_t layer,
                             const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                             uint64_t token_base, int32_t *out, uint32_t *bad, void *stream) {
  (void)stream;
  eplb_status_t st = launch_failed(impl, "map");
  if (st == EPLB_OK)
    eplb__map_ref(d, layer, ids, num_tokens, topk, token_base, out, bad);
  return st;
}

static eplb_status_t emu_flip(void *impl, const eplb_cuda_dispatch_t *d, void *stream) {
  (void)stream;
  eplb_status_t st = launch_failed(impl, "epoch flip");
  if (st == EPLB_OK)
    ++*d->epoch;
  return st;
}

static eplb_status_t emu_split(void *impl, const int32_t *phy2log, uint32_t num_experts,
                               uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                               double *share, double *t_star, uint32_t *status, void *workspace,
                               uint32_t max_iterations, const uint32_t *tail, uint32_t word,
                               uint32_t ranks, void *stream) {
  (void)stream;
  eplb_status_t st = launch_failed(impl, "split");
  if (st != EPLB_OK)
    return st;
  /* The kernel's guard (kernels/split.cu), then its math. */
  uint32_t guard = tail ? eplb__split_guard(tail, word, ranks) : 0u;
  if (guard)
    *status = guard;
  else
    eplb__split_ref(phy2log, num_experts, num_gpus, slots_per_gpu, counts, share, t_star, status,
                    workspace, max_iterations, NULL);
  return EPLB_OK;
}

static eplb_status_t emu_quota(void *impl, const eplb_cuda_dispatch_t *d, uint32_t layer,
                               const int32_t *phy2log, const double *share, const uint32_t *status,
                               const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                               uint64_t token_base, int32_t *out, uint32_t *bad, void *workspace,
                               void *stream) {
  (void)stream;
  eplb_status_t st = launch_failed(impl, "quota map");
  if (st == EPLB_OK)
    eplb__quota_ref(d, layer, phy2log, share, status, ids, num_tokens, topk, token_base, out, bad,
                    workspace);
  return st;
}

/* The stream runs everything at once, so "at this point of the stream" is
 * now: the host communicator sums the (host) memory in place. Never an
 * injected failure: a rank that skipped the collective would hang the
 * others, which is what the protocol above must never do. */
static eplb_status_t emu_allreduce(void *impl, eplb__comm_t *comm, uint32_t *buf, size_t n,
                                   void *stream) {
  (void)impl, (void)stream;
  return eplb__comm_allreduce_u32(comm, buf, n);
}

static eplb_status_t emu_table_build(void *impl, const eplb_cuda_dispatch_t *d, uint32_t which,
                                     const int32_t *phy2log, const double *share, void *workspace,
                                     void *stream) {
  (void)stream;
  eplb_status_t st = launch_failed(impl, "table build");
  if (st == EPLB_OK)
    eplb__table_build_ref(d, which, phy2log, share, workspace);
  return st;
}

static void emu_inject(void *impl, uint32_t event_delay, uint32_t upload_failures,
                       uint32_t launch_failures) {
  emu_t *e = impl;
  e->event_delay = event_delay;
  e->upload_failures = upload_failures;
  e->launch_failures = launch_failures;
}

static const eplb__dev_ops_t emu_ops = {
    .name = "emulated",
    .open = emu_open,
    .close = emu_close,
    .alloc = emu_alloc,
    .free = emu_free,
    .host_alloc = emu_alloc, /* host memory is as pinned as it gets here */
    .host_free = emu_free,
    .memset = emu_memset,
    .upload = emu_upload,
    .download = emu_download,
    .event_create = emu_event_create,
    .event_destroy = emu_event_destroy,
    .event_record = emu_event_record,
    .event_query = emu_event_query,
    .event_sync = emu_event_sync,
    .stream_sync = emu_stream_sync,
    .stream_query = emu_stream_query,
    .count = emu_count,
    .step = emu_step,
    .map = emu_map,
    .flip = emu_flip,
    .split = emu_split,
    .table_build = emu_table_build,
    .quota = emu_quota,
    .allreduce = emu_allreduce,
    .inject = emu_inject,
};

const eplb__dev_ops_t *eplb__dev_emu_ops(void) { return &emu_ops; }
