/* runtime/comm_nccl.c — the runtime's NCCL communicator: counters and
 * migration buffers over the runtime's own communicator (split from the
 * application's, or created for one rank), on the application's stream.
 * Initialisation is non-blocking and every wait runs under a watchdog that
 * aborts the communicator, so a stuck peer cannot hang serving. The only
 * file that includes nccl.h. */
#include "eplb_config.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

#include <string.h>

#if EPLB_HAVE_NCCL
#include <nccl.h>
#include <stdlib.h>
#include <time.h>

struct eplb__nccl {
  ncclComm_t comm;
  cudaStream_t stream;
  uint32_t rank, size;
  bool aborted;  /* after a watchdog abort every call fails with ECOMM */
  void *scratch; /* device bounce buffer for host memory */
  size_t scratch_cap;
  double timeout; /* seconds */
};

static eplb_status_t nccl_fail(eplb__nccl_t *c, ncclResult_t r, const char *what) {
  eplb_status_t st = r == ncclUnhandledCudaError                         ? EPLB_EDEVICE
                     : r == ncclInvalidArgument || r == ncclInvalidUsage ? EPLB_EINVAL
                                                                         : EPLB_ECOMM;
  const char *last = c && c->comm ? ncclGetLastError(c->comm) : "";
  return eplb__error(st, "runtime", "%s: NCCL error %d: %s%s%s", what, (int)r,
                     ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

static void sleep_briefly(void) {
  struct timespec ts = {0, 50000};
  nanosleep(&ts, NULL);
}

static eplb_status_t watchdog_abort(eplb__nccl_t *c, const char *what) {
  ncclCommAbort(c->comm);
  c->aborted = true;
  return eplb__error(EPLB_ETIMEOUT, "runtime",
                     "%s: no progress in %.1f s; the NCCL communicator was aborted", what,
                     c->timeout);
}

/* Waits until the non-blocking communicator finished its last call. */
static eplb_status_t wait_comm(eplb__nccl_t *c, ncclResult_t r, const char *what) {
  double deadline = eplb__now() + c->timeout;
  while (r == ncclInProgress) {
    if (eplb__now() > deadline)
      return watchdog_abort(c, what);
    sleep_briefly();
    ncclResult_t q = ncclCommGetAsyncError(c->comm, &r);
    if (q != ncclSuccess)
      r = q;
  }
  return r == ncclSuccess ? EPLB_OK : nccl_fail(c, r, what);
}

/* Waits for the stream; a peer that never arrives trips the watchdog. */
static eplb_status_t wait_stream(eplb__nccl_t *c, const char *what) {
  double deadline = eplb__now() + c->timeout;
  for (;;) {
    int e = eplb__cuda_stream_query((void *)c->stream);
    if (e == 0)
      return EPLB_OK;
    if (e != EPLB__CUDA_NOT_READY)
      return eplb__cuda_status(e, what);
    ncclResult_t ar = ncclSuccess;
    if (ncclCommGetAsyncError(c->comm, &ar) == ncclSuccess && ar != ncclSuccess &&
        ar != ncclInProgress) {
      ncclCommAbort(c->comm);
      c->aborted = true;
      return nccl_fail(NULL, ar, what);
    }
    if (eplb__now() > deadline)
      return watchdog_abort(c, what);
    sleep_briefly();
  }
}

static eplb_status_t usable(eplb__nccl_t *c, const char *what) {
  if (c->aborted)
    return eplb__error(EPLB_ECOMM, "runtime", "%s: the NCCL communicator was aborted", what);
  return EPLB_OK;
}

static eplb_status_t scratch(eplb__nccl_t *c, size_t bytes) {
  if (bytes <= c->scratch_cap)
    return EPLB_OK;
  eplb__cuda_free(c->scratch);
  c->scratch = NULL, c->scratch_cap = 0;
  void *p = NULL;
  int e = eplb__cuda_malloc(&p, bytes);
  if (e != 0)
    return eplb__cuda_status(e, "NCCL scratch buffer");
  c->scratch = p;
  c->scratch_cap = bytes;
  return EPLB_OK;
}

eplb_status_t eplb__nccl_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__nccl_t **out) {
  eplb_status_t st = EPLB_OK;
  *out = NULL;
  if (!cfg->nccl_comm)
    return eplb__error(EPLB_EINVAL, "runtime", "comm kind NCCL: nccl_comm is NULL");
  ncclComm_t app = *(ncclComm_t *)cfg->nccl_comm;
  if (!app && size != 1)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "comm kind NCCL: *nccl_comm is NULL, which needs world_size 1, not %u",
                       size);
  int ndev = 0;
  int ce = eplb__cuda_device_count_raw(&ndev);
  if (ce != 0)
    return eplb__cuda_status(ce, "NCCL communicator");
  if (ndev <= 0)
    return eplb__error(EPLB_ENODEVICE, "runtime", "NCCL communicator: no CUDA device");
  eplb__nccl_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "runtime", "NCCL communicator");
  c->stream = cfg->cuda_stream ? *(cudaStream_t *)cfg->cuda_stream : NULL;
  c->rank = rank, c->size = size;
  const char *env = getenv("EPLB_NCCL_TIMEOUT_MS");
  c->timeout = env && atof(env) > 0 ? atof(env) / 1000 : 60.0;
  ncclConfig_t conf = NCCL_CONFIG_INITIALIZER;
  conf.blocking = 0;
  ncclResult_t r;
  if (app) {
    /* Our own communicator: aborting it never breaks the application's. */
    r = ncclCommSplit(app, 0, (int)rank, &c->comm, &conf);
  } else {
    ncclUniqueId id;
    r = ncclGetUniqueId(&id);
    if (r == ncclSuccess)
      r = ncclCommInitRankConfig(&c->comm, 1, id, 0, &conf);
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    st = nccl_fail(c, r, "NCCL communicator init");
    goto fail;
  }
  st = wait_comm(c, r, "NCCL communicator init");
  if (st != EPLB_OK)
    goto fail;
  int n = -1, me = -1;
  if (ncclCommCount(c->comm, &n) != ncclSuccess || ncclCommUserRank(c->comm, &me) != ncclSuccess ||
      (uint32_t)n != size || (uint32_t)me != rank) {
    st = eplb__error(EPLB_EINVAL, "runtime",
                     "config rank %u / world_size %u differ from the NCCL communicator's %d / %d",
                     rank, size, me, n);
    goto fail;
  }
  *out = c;
  return EPLB_OK;
fail:
  eplb__nccl_destroy(c);
  return st;
}

void eplb__nccl_destroy(eplb__nccl_t *c) {
  if (!c)
    return;
  if (c->comm && !c->aborted) {
    /* Finalize flushes our operations; a peer that never comes is aborted. */
    if (wait_comm(c, ncclCommFinalize(c->comm), "NCCL finalize") == EPLB_OK)
      ncclCommDestroy(c->comm);
    else if (!c->aborted)
      ncclCommAbort(c->comm);
  }
  eplb__cuda_free(c->scratch);
  eplb__free(c);
}

static ncclRedOp_t red_op(eplb_reduce_op_t op) {
  return op == EPLB_REDUCE_MAX ? ncclMax : op == EPLB_REDUCE_MIN ? ncclMin : ncclSum;
}

eplb_status_t eplb__nccl_allreduce(eplb__nccl_t *c, void *buf, size_t n, eplb__nccl_type_t t,
                                   eplb_reduce_op_t op) {
  static const char what[] = "NCCL all-reduce";
  eplb_status_t st = usable(c, what);
  ncclDataType_t type = t == EPLB__NCCL_U32   ? ncclUint32
                        : t == EPLB__NCCL_U64 ? ncclUint64
                                              : ncclFloat64;
  size_t elem = t == EPLB__NCCL_U32 ? 4 : 8;
  if (st != EPLB_OK || n == 0)
    return st;
  if (n > SIZE_MAX / elem)
    return eplb__error(EPLB_ERANGE, "runtime", "%s of %zu elements", what, n);
  st = scratch(c, n * elem);
  if (st != EPLB_OK)
    return st;
  int e = eplb__cuda_h2d_async(c->scratch, buf, n * elem, (void *)c->stream);
  if (e != 0)
    return eplb__cuda_status(e, what);
  ncclResult_t r = ncclAllReduce(c->scratch, c->scratch, n, type, red_op(op), c->comm, c->stream);
  if ((st = wait_comm(c, r, what)) != EPLB_OK)
    return st;
  e = eplb__cuda_d2h_async(buf, c->scratch, n * elem, (void *)c->stream);
  if (e != 0)
    return eplb__cuda_status(e, what);
  return wait_stream(c, what);
}

eplb_status_t eplb__nccl_bcast(eplb__nccl_t *c, void *buf, size_t bytes) {
  static const char what[] = "NCCL broadcast";
  eplb_status_t st = usable(c, what);
  if (st != EPLB_OK || bytes == 0)
    return st;
  if ((st = scratch(c, bytes)) != EPLB_OK)
    return st;
  int e = eplb__cuda_h2d_async(c->scratch, buf, bytes, (void *)c->stream);
  if (e != 0)
    return eplb__cuda_status(e, what);
  ncclResult_t r = ncclBroadcast(c->scratch, c->scratch, bytes, ncclUint8, 0, c->comm, c->stream);
  if ((st = wait_comm(c, r, what)) != EPLB_OK)
    return st;
  e = eplb__cuda_d2h_async(buf, c->scratch, bytes, (void *)c->stream);
  if (e != 0)
    return eplb__cuda_status(e, what);
  return wait_stream(c, what);
}

/* NCCL has no gather: rank 0 receives every rank's block in one group. */
eplb_status_t eplb__nccl_gather_u32(eplb__nccl_t *c, const uint32_t *send, size_t n,
                                    uint32_t *recv) {
  static const char what[] = "NCCL gather";
  eplb_status_t st = usable(c, what);
  if (st != EPLB_OK || n == 0)
    return st;
  if (n > SIZE_MAX / 4 / c->size)
    return eplb__error(EPLB_ERANGE, "runtime", "%s of %zu x %u elements", what, n, c->size);
  size_t block = n * 4, total = c->rank == 0 ? block * c->size : block;
  if ((st = scratch(c, total)) != EPLB_OK)
    return st;
  uint8_t *dev = c->scratch;
  /* Rank 0's own block is block 0 of its buffer. */
  int e = eplb__cuda_h2d_async(dev, send, block, (void *)c->stream);
  if (e != 0)
    return eplb__cuda_status(e, what);
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess && c->rank == 0) {
    for (uint32_t p = 1; p < c->size && r == ncclSuccess; p++)
      r = ncclRecv(dev + block * p, n, ncclUint32, (int)p, c->comm, c->stream);
  } else if (r == ncclSuccess) {
    r = ncclSend(dev, n, ncclUint32, 0, c->comm, c->stream);
  }
  ncclResult_t g = ncclGroupEnd();
  if ((st = wait_comm(c, r == ncclSuccess ? g : r, what)) != EPLB_OK)
    return st;
  if (c->rank == 0) {
    e = eplb__cuda_d2h_async(recv, dev, total, (void *)c->stream);
    if (e != 0)
      return eplb__cuda_status(e, what);
  }
  return wait_stream(c, what);
}

static bool on_device(const void *p) { return eplb__cuda_is_device_ptr(p) != 0; }

/* Device buffers (registered weights) go directly; host buffers through
 * the scratch buffer. A failure fails every receive: NCCL reports no
 * per-operation status. */
eplb_status_t eplb__nccl_exchange(eplb__nccl_t *c, const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *recv_failed) {
  static const char what[] = "NCCL exchange";
  eplb_status_t st = usable(c, what);
  size_t total = 0, pos = 0;
  int e = 0;
  memset(recv_failed, 1, nrecv);
  if (st != EPLB_OK)
    return st;
  for (size_t i = 0; i < nsend + nrecv; i++) {
    const eplb__xfer_t *x = i < nsend ? &sends[i] : &recvs[i - nsend];
    if (!on_device(x->buf)) {
      if (x->bytes > SIZE_MAX - 256 - total)
        return eplb__error(EPLB_ERANGE, "runtime", "%s: staging overflows", what);
      total += (x->bytes + 255) / 256 * 256;
    }
  }
  if ((st = scratch(c, total)) != EPLB_OK)
    return st;
  uint8_t *dev = c->scratch;
  ncclResult_t r = ncclGroupStart();
  for (size_t i = 0; i < nsend + nrecv && r == ncclSuccess && e == 0; i++) {
    const eplb__xfer_t *x = i < nsend ? &sends[i] : &recvs[i - nsend];
    void *p = x->buf;
    if (!on_device(x->buf)) {
      p = dev + pos;
      pos += (x->bytes + 255) / 256 * 256;
      if (i < nsend)
        e = eplb__cuda_h2d_async(p, x->buf, x->bytes, (void *)c->stream);
    }
    if (e == 0)
      r = i < nsend ? ncclSend(p, x->bytes, ncclUint8, (int)x->peer, c->comm, c->stream)
                    : ncclRecv(p, x->bytes, ncclUint8, (int)x->peer, c->comm, c->stream);
  }
  ncclResult_t g = ncclGroupEnd();
  if (e != 0)
    return eplb__cuda_status(e, what);
  if ((st = wait_comm(c, r == ncclSuccess ? g : r, what)) != EPLB_OK)
    return st;
  pos = 0;
  for (size_t i = 0; i < nsend + nrecv && e == 0; i++) {
    const eplb__xfer_t *x = i < nsend ? &sends[i] : &recvs[i - nsend];
    if (on_device(x->buf))
      continue;
    if (i >= nsend)
      e = eplb__cuda_d2h_async(x->buf, dev + pos, x->bytes, (void *)c->stream);
    pos += (x->bytes + 255) / 256 * 256;
  }
  if (e != 0)
    return eplb__cuda_status(e, what);
  if ((st = wait_stream(c, what)) != EPLB_OK)
    return st;
  memset(recv_failed, 0, nrecv);
  return EPLB_OK;
}

/* Sees an asynchronous error of the communicator (a peer gone, a failed
 * collective): aborts it, so that whatever of ours the stream holds ends. */
static eplb_status_t async_error(eplb__nccl_t *c, const char *what) {
  ncclResult_t ar = ncclSuccess;
  if (ncclCommGetAsyncError(c->comm, &ar) != ncclSuccess || ar == ncclSuccess ||
      ar == ncclInProgress)
    return EPLB_OK;
  ncclCommAbort(c->comm);
  c->aborted = true;
  return nccl_fail(NULL, ar, what);
}

/* Enqueued on the caller's stream, in place, with no host wait: the device
 * split reads the sums on the same stream. Only the enqueue is waited for
 * (non-blocking communicator), under the watchdog. */
eplb_status_t eplb__nccl_allreduce_stream(eplb__nccl_t *c, uint32_t *buf, size_t n, void *stream) {
  static const char what[] = "NCCL all-reduce of the device split";
  eplb_status_t st = usable(c, what);
  if (st == EPLB_OK)
    st = async_error(c, what);
  if (st != EPLB_OK || n == 0)
    return st;
  ncclResult_t r = ncclAllReduce(buf, buf, n, ncclUint32, ncclSum, c->comm, (cudaStream_t)stream);
  return wait_comm(c, r, what);
}

eplb_status_t eplb__nccl_stream_watch(eplb__nccl_t *c, double since) {
  static const char what[] = "device wait behind an NCCL all-reduce";
  eplb_status_t st = usable(c, what);
  if (st == EPLB_OK)
    st = async_error(c, what);
  if (st != EPLB_OK)
    return st;
  if (eplb__now() - since > c->timeout)
    return watchdog_abort(c, what);
  sleep_briefly();
  return EPLB_OK;
}

#else /* !EPLB_HAVE_NCCL */

eplb_status_t eplb__nccl_allreduce_stream(eplb__nccl_t *c, uint32_t *buf, size_t n, void *stream) {
  (void)c, (void)buf, (void)n, (void)stream;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without NCCL");
}

eplb_status_t eplb__nccl_stream_watch(eplb__nccl_t *c, double since) {
  (void)c, (void)since;
  return EPLB_OK;
}

eplb_status_t eplb__nccl_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__nccl_t **out) {
  (void)cfg, (void)rank, (void)size;
  *out = NULL;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without NCCL");
}

void eplb__nccl_destroy(eplb__nccl_t *c) { (void)c; }

eplb_status_t eplb__nccl_allreduce(eplb__nccl_t *c, void *buf, size_t n, eplb__nccl_type_t t,
                                   eplb_reduce_op_t op) {
  (void)c, (void)buf, (void)n, (void)t, (void)op;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without NCCL");
}

eplb_status_t eplb__nccl_bcast(eplb__nccl_t *c, void *buf, size_t bytes) {
  (void)c, (void)buf, (void)bytes;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without NCCL");
}

eplb_status_t eplb__nccl_gather_u32(eplb__nccl_t *c, const uint32_t *send, size_t n,
                                    uint32_t *recv) {
  (void)c, (void)send, (void)n, (void)recv;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without NCCL");
}

eplb_status_t eplb__nccl_exchange(eplb__nccl_t *c, const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *recv_failed) {
  (void)c, (void)sends, (void)nsend, (void)recvs;
  memset(recv_failed, 1, nrecv);
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without NCCL");
}

#endif
