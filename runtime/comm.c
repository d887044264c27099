/* runtime/comm.c — the runtime's communicator: MPI on host buffers, or a
 * single rank, or NCCL (comm_nccl.c). The only file that includes mpi.h. */
#include "eplb_config.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Both builds: an NCCL communicator sits behind eplb__comm_t; the MPI
 * half (or its stubs without MPI) is below. */
static eplb_status_t nccl_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                 eplb__comm_t **out);
static eplb_status_t mpi_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__comm_t **out);
static eplb_status_t mpi_exchange(eplb__comm_t *comm, const eplb__xchg_t *how,
                                  const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *fail);
#define NCCL_OR(comm, call)                                                                        \
  if ((comm) && (comm)->nccl)                                                                      \
  return (call)

#if EPLB_HAVE_MPI
#include <limits.h>
#include <mpi.h>

struct eplb__comm {
  eplb__nccl_t *nccl; /* kind NCCL (comm_nccl.c); NULL: MPI */
  MPI_Comm comm;      /* our duplicate: our traffic never matches the application's */
  int tag_ub;         /* MPI_TAG_UB of comm (>= 32767) */
  /* exchange scratch, grown by eplb__comm_reserve */
  MPI_Request *req;
  MPI_Status *stat;
  int *idx;
  size_t cap;
  /* the exchange beside serving (eplb__comm_post/poll): its requests,
   * receives first, and the sends a stalled peer posts late */
  MPI_Request *areq;
  size_t acap, anrecv, atotal;
  int atag;
  double adeadline, asend_at;
  eplb__xfer_t *asend; /* [atotal - anrecv] kept until posted */
  bool asent;
};

static MPI_Comm world_comm = MPI_COMM_NULL;
static bool we_initialised;

static eplb_status_t mpi_fail(int rc, const char *what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "error %d", rc);
  return eplb__error(EPLB_ECOMM, "runtime", "%s: %s", what, text);
}

static eplb_status_t mpi_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__comm_t **out) {
  if (cfg->kind != EPLB_COMM_MPI || !cfg->mpi_comm)
    return eplb__error(EPLB_EINVAL, "runtime", "comm: unknown kind %d or NULL mpi_comm",
                       (int)cfg->kind);
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited)
    return eplb__error(EPLB_ESTATE, "runtime", "MPI is not initialised");
  MPI_Comm app = *(MPI_Comm *)cfg->mpi_comm;
  int r = -1, n = -1;
  if (MPI_Comm_rank(app, &r) != MPI_SUCCESS || MPI_Comm_size(app, &n) != MPI_SUCCESS)
    return eplb__error(EPLB_ECOMM, "runtime", "mpi_comm: cannot query rank/size");
  eplb__comm_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "runtime", "communicator");
  /* Collective: done before any check that could differ between ranks. */
  int rc = MPI_Comm_dup(app, &c->comm);
  if (rc != MPI_SUCCESS) {
    eplb__free(c);
    return mpi_fail(rc, "MPI_Comm_dup");
  }
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  int *ub = NULL, has_ub = 0;
  c->tag_ub = 32767; /* the least the standard allows */
  if (MPI_Comm_get_attr(c->comm, MPI_TAG_UB, &ub, &has_ub) == MPI_SUCCESS && has_ub && ub &&
      *ub > c->tag_ub)
    c->tag_ub = *ub;
  *out = c;
  if ((uint32_t)r != rank || (uint32_t)n != size)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config rank %u / world_size %u differ from the communicator's %d / %d",
                       rank, size, r, n);
  return EPLB_OK;
}

void eplb__comm_destroy(eplb__comm_t *comm) {
  if (!comm)
    return;
  if (comm->nccl)
    eplb__nccl_destroy(comm->nccl);
  else
    MPI_Comm_free(&comm->comm);
  eplb__free(comm->req);
  eplb__free(comm->stat);
  eplb__free(comm->idx);
  eplb__free(comm->areq);
  eplb__free(comm->asend);
  eplb__free(comm);
}

static MPI_Op mpi_op(eplb_reduce_op_t op) {
  return op == EPLB_REDUCE_MAX ? MPI_MAX : op == EPLB_REDUCE_MIN ? MPI_MIN : MPI_SUM;
}

static eplb_status_t allreduce(eplb__comm_t *comm, void *buf, size_t n, MPI_Datatype type,
                               MPI_Op op) {
  if (!comm)
    return EPLB_OK;
  if (n > INT_MAX)
    return eplb__error(EPLB_ERANGE, "runtime", "all-reduce of %zu elements", n);
  int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, type, op, comm->comm);
  return rc == MPI_SUCCESS ? EPLB_OK : mpi_fail(rc, "MPI_Allreduce");
}

eplb_status_t eplb__comm_allreduce_u32(eplb__comm_t *comm, uint32_t *buf, size_t n) {
  NCCL_OR(comm, eplb__nccl_allreduce(comm->nccl, buf, n, EPLB__NCCL_U32, EPLB_REDUCE_SUM));
  return allreduce(comm, buf, n, MPI_UINT32_T, MPI_SUM);
}

eplb_status_t eplb__comm_allreduce_u64(eplb__comm_t *comm, uint64_t *buf, size_t n,
                                       eplb_reduce_op_t op) {
  NCCL_OR(comm, eplb__nccl_allreduce(comm->nccl, buf, n, EPLB__NCCL_U64, op));
  return allreduce(comm, buf, n, MPI_UINT64_T, mpi_op(op));
}

eplb_status_t eplb__comm_allreduce_f64(eplb__comm_t *comm, double *buf, size_t n,
                                       eplb_reduce_op_t op) {
  NCCL_OR(comm, eplb__nccl_allreduce(comm->nccl, buf, n, EPLB__NCCL_F64, op));
  return allreduce(comm, buf, n, MPI_DOUBLE, mpi_op(op));
}

eplb_status_t eplb__comm_bcast(eplb__comm_t *comm, void *buf, size_t bytes) {
  if (!comm)
    return EPLB_OK;
  NCCL_OR(comm, eplb__nccl_bcast(comm->nccl, buf, bytes));
  if (bytes > INT_MAX)
    return eplb__error(EPLB_ERANGE, "runtime", "broadcast of %zu bytes", bytes);
  int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, comm->comm);
  return rc == MPI_SUCCESS ? EPLB_OK : mpi_fail(rc, "MPI_Bcast");
}

eplb_status_t eplb__comm_gather_u32(eplb__comm_t *comm, const uint32_t *send, size_t n,
                                    uint32_t *recv) {
  if (!comm) {
    memcpy(recv, send, n * sizeof *send);
    return EPLB_OK;
  }
  NCCL_OR(comm, eplb__nccl_gather_u32(comm->nccl, send, n, recv));
  if (n > INT_MAX)
    return eplb__error(EPLB_ERANGE, "runtime", "gather of %zu elements", n);
  int rc = MPI_Gather(send, (int)n, MPI_UINT32_T, recv, (int)n, MPI_UINT32_T, 0, comm->comm);
  return rc == MPI_SUCCESS ? EPLB_OK : mpi_fail(rc, "MPI_Gather");
}

eplb_status_t eplb__comm_reserve(eplb__comm_t *comm, size_t n) {
  if (!comm || comm->nccl || n <= comm->cap)
    return EPLB_OK;
  if (n > INT_MAX)
    return eplb__error(EPLB_ERANGE, "runtime", "%zu transfers in one round", n);
  MPI_Request *req = eplb__realloc_array(comm->req, n, sizeof *req);
  if (req)
    comm->req = req;
  MPI_Status *stat = eplb__realloc_array(comm->stat, n, sizeof *stat);
  if (stat)
    comm->stat = stat;
  int *idx = eplb__realloc_array(comm->idx, n, sizeof *idx);
  if (idx)
    comm->idx = idx;
  if (!req || !stat || !idx)
    return eplb__error(EPLB_ENOMEM, "runtime", "%zu transfer requests", n);
  comm->cap = n;
  return EPLB_OK;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Cancels every pending request of the round and marks it `code`. A
 * cancelled receive is waited for (the standard makes that wait local, and
 * after it nothing writes the staging buffer); a send is freed, since some
 * MPIs cannot cancel sends: its message, if it ever leaves, carries this
 * round's tag, which no later receive uses. */
static void abandon(MPI_Request *req, size_t nrecv, size_t total, uint8_t *fail, uint8_t code) {
  for (size_t i = 0; i < total; i++) {
    if (req[i] == MPI_REQUEST_NULL)
      continue;
    MPI_Cancel(&req[i]);
    if (i < nrecv)
      MPI_Wait(&req[i], MPI_STATUS_IGNORE);
    else
      MPI_Request_free(&req[i]);
    req[i] = MPI_REQUEST_NULL;
    fail[i] = code;
  }
}

static eplb_status_t mpi_exchange(eplb__comm_t *comm, const eplb__xchg_t *how,
                                  const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *fail) {
  eplb_status_t st = EPLB_OK;
  size_t total = nsend + nrecv;
  double t0 = eplb__now();
  double deadline = how->timeout_ms ? t0 + how->timeout_ms / 1000.0 : INFINITY;
  if ((st = eplb__comm_reserve(comm, total)) != EPLB_OK)
    return st;
  MPI_Request *req = comm->req;
  MPI_Status *stat = comm->stat;
  int tag = (int)(how->seq % ((uint64_t)comm->tag_ub + 1));
  memset(fail, EPLB__XFER_OK, total);
  for (size_t i = 0; i < total; i++)
    req[i] = MPI_REQUEST_NULL;
  for (size_t i = 0; i < nrecv; i++)
    if (recvs[i].bytes > INT_MAX ||
        MPI_Irecv(recvs[i].buf, (int)recvs[i].bytes, MPI_BYTE, (int)recvs[i].peer, tag, comm->comm,
                  &req[i]) != MPI_SUCCESS) {
      fail[i] = EPLB__XFER_FAILED;
      req[i] = MPI_REQUEST_NULL;
    }
  if (how->send_delay_ms)
    sleep_us((long)how->send_delay_ms * 1000);
  for (size_t i = 0; i < nsend; i++)
    if (sends[i].bytes > INT_MAX ||
        MPI_Isend(sends[i].buf, (int)sends[i].bytes, MPI_BYTE, (int)sends[i].peer, tag, comm->comm,
                  &req[nrecv + i]) != MPI_SUCCESS) {
      fail[nrecv + i] = EPLB__XFER_FAILED;
      req[nrecv + i] = MPI_REQUEST_NULL;
    }
  /* Polling instead of MPI_Waitall: a peer that never sends must not hold
   * this rank past the deadline. Short transfers finish while spinning;
   * long ones are polled with sleeps so oversubscribed ranks can run. */
  for (;;) {
    int out = 0;
    int rc = MPI_Testsome((int)total, req, &out, comm->idx, stat);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      abandon(req, nrecv, total, fail, EPLB__XFER_FAILED);
      st = mpi_fail(rc, "MPI_Testsome");
      break;
    }
    if (out == MPI_UNDEFINED)
      break; /* nothing left */
    for (int o = 0; rc == MPI_ERR_IN_STATUS && o < out; o++)
      if (stat[o].MPI_ERROR != MPI_SUCCESS) {
        int i = comm->idx[o];
        fail[i] = EPLB__XFER_FAILED;
        if (req[i] != MPI_REQUEST_NULL) /* not every MPI frees a failed request */
          MPI_Request_free(&req[i]);
      }
    double now = eplb__now();
    if (now >= deadline) {
      abandon(req, nrecv, total, fail, EPLB__XFER_TIMEOUT);
      st = eplb__error(EPLB_ETIMEOUT, "runtime", "transfers still pending after %u ms",
                       how->timeout_ms);
      break;
    }
    if (out == 0 && now - t0 > 1e-3)
      sleep_us(100);
  }
  for (size_t i = 0; i < total && st == EPLB_OK; i++)
    if (fail[i])
      st = i < nrecv
               ? eplb__error(EPLB_ECOMM, "runtime", "receive of %zu bytes from rank %u failed",
                             recvs[i].bytes, recvs[i].peer)
               : eplb__error(EPLB_ECOMM, "runtime", "send of %zu bytes to rank %u failed",
                             sends[i - nrecv].bytes, sends[i - nrecv].peer);
  return st;
}

static void post_sends(eplb__comm_t *c, uint8_t *fail) {
  size_t ns = c->atotal - c->anrecv;
  for (size_t i = 0; i < ns; i++) {
    MPI_Request *rq = &c->areq[c->anrecv + i];
    if (c->asend[i].bytes > INT_MAX ||
        MPI_Isend(c->asend[i].buf, (int)c->asend[i].bytes, MPI_BYTE, (int)c->asend[i].peer, c->atag,
                  c->comm, rq) != MPI_SUCCESS) {
      fail[c->anrecv + i] = EPLB__XFER_FAILED;
      *rq = MPI_REQUEST_NULL;
    }
  }
  c->asent = true;
}

static eplb_status_t mpi_post(eplb__comm_t *c, const eplb__xchg_t *how, const eplb__xfer_t *sends,
                              size_t nsend, const eplb__xfer_t *recvs, size_t nrecv,
                              uint8_t *fail) {
  size_t total = nsend + nrecv;
  /* Until posted, every transfer counts as failed: an early return leaves
   * nothing pending for the caller's agreement to wait on. */
  memset(fail, EPLB__XFER_FAILED, total);
  c->atotal = 0;
  if (total > INT_MAX)
    return eplb__error(EPLB_ERANGE, "runtime", "%zu transfers in one exchange", total);
  if (total > c->acap) {
    MPI_Request *rq = eplb__realloc_array(c->areq, total, sizeof *rq);
    if (rq)
      c->areq = rq;
    eplb__xfer_t *sd = eplb__realloc_array(c->asend, total, sizeof *sd);
    if (sd)
      c->asend = sd;
    if (!rq || !sd)
      return eplb__error(EPLB_ENOMEM, "runtime", "%zu transfer requests", total);
    c->acap = total;
  }
  if (eplb__comm_reserve(c, total) != EPLB_OK)
    return eplb__error(EPLB_ENOMEM, "runtime", "%zu transfer requests", total);
  double now = eplb__now();
  c->anrecv = nrecv, c->atotal = total;
  c->atag = (int)(how->seq % ((uint64_t)c->tag_ub + 1));
  c->adeadline = how->timeout_ms ? now + how->timeout_ms / 1000.0 : INFINITY;
  c->asend_at = now + how->send_delay_ms / 1000.0;
  memcpy(c->asend, sends, nsend * sizeof *sends);
  memset(fail, EPLB__XFER_PENDING, total);
  for (size_t i = 0; i < total; i++)
    c->areq[i] = MPI_REQUEST_NULL;
  for (size_t i = 0; i < nrecv; i++)
    if (recvs[i].bytes > INT_MAX ||
        MPI_Irecv(recvs[i].buf, (int)recvs[i].bytes, MPI_BYTE, (int)recvs[i].peer, c->atag, c->comm,
                  &c->areq[i]) != MPI_SUCCESS) {
      fail[i] = EPLB__XFER_FAILED;
      c->areq[i] = MPI_REQUEST_NULL;
    }
  c->asent = false;
  if (!how->send_delay_ms)
    post_sends(c, fail);
  return EPLB_OK;
}

/* Tests the exchange beside serving once; at its deadline what is left is
 * cancelled as eplb__comm_exchange does. */
static eplb_status_t mpi_poll(eplb__comm_t *c, uint8_t *fail, size_t *pending) {
  double now = eplb__now();
  eplb_status_t st = EPLB_OK;
  if (!c->asent && now >= c->asend_at && now < c->adeadline)
    post_sends(c, fail);
  int out = 0;
  int rc = c->atotal ? MPI_Testsome((int)c->atotal, c->areq, &out, c->idx, c->stat) : MPI_SUCCESS;
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    abandon(c->areq, c->anrecv, c->atotal, fail, EPLB__XFER_FAILED);
    st = mpi_fail(rc, "MPI_Testsome");
    out = MPI_UNDEFINED;
  }
  for (int o = 0; out != MPI_UNDEFINED && o < out; o++) {
    int i = c->idx[o];
    bool bad = rc == MPI_ERR_IN_STATUS && c->stat[o].MPI_ERROR != MPI_SUCCESS;
    fail[i] = bad ? EPLB__XFER_FAILED : EPLB__XFER_OK;
    if (bad && c->areq[i] != MPI_REQUEST_NULL)
      MPI_Request_free(&c->areq[i]);
  }
  size_t left = 0;
  for (size_t i = 0; i < c->atotal; i++)
    left += fail[i] == EPLB__XFER_PENDING;
  if (left && now >= c->adeadline) {
    abandon(c->areq, c->anrecv, c->atotal, fail, EPLB__XFER_TIMEOUT);
    for (size_t i = 0; i < c->atotal; i++) /* sends never posted */
      fail[i] = fail[i] == EPLB__XFER_PENDING ? EPLB__XFER_TIMEOUT : fail[i];
    left = 0;
  }
  *pending = left;
  return st;
}

static void mpi_drop(eplb__comm_t *c, uint8_t *fail) {
  abandon(c->areq, c->anrecv, c->atotal, fail, EPLB__XFER_TIMEOUT);
  c->atotal = 0;
}

eplb_status_t eplb_runtime_mpi_init(int *argc, char ***argv, uint32_t *rank, uint32_t *size) {
  int inited = 0, r = 0, n = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS)
      return mpi_fail(rc, "MPI_Init_thread");
    we_initialised = true;
  }
  world_comm = MPI_COMM_WORLD;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rank)
    *rank = (uint32_t)r;
  if (size)
    *size = (uint32_t)n;
  return EPLB_OK;
}

eplb_status_t eplb_runtime_mpi_allreduce(double *values, size_t n, eplb_reduce_op_t op) {
  int inited = 0, finalized = 0;
  if ((n > 0 && !values) ||
      (op != EPLB_REDUCE_SUM && op != EPLB_REDUCE_MAX && op != EPLB_REDUCE_MIN))
    return eplb__error(EPLB_EINVAL, "runtime", "mpi_allreduce: NULL values or op %d", (int)op);
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized)
    return eplb__error(EPLB_ESTATE, "runtime", "mpi_allreduce: MPI is not initialised");
  if (n > INT_MAX)
    return eplb__error(EPLB_ERANGE, "runtime", "mpi_allreduce of %zu values", n);
  int rc = MPI_Allreduce(MPI_IN_PLACE, values, (int)n, MPI_DOUBLE, mpi_op(op), MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? EPLB_OK : mpi_fail(rc, "MPI_Allreduce");
}

void *eplb_runtime_mpi_world(void) {
  world_comm = MPI_COMM_WORLD;
  return &world_comm;
}

void eplb_runtime_mpi_finalize(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (we_initialised && !finalized)
    MPI_Finalize();
  we_initialised = false;
}

#else /* !EPLB_HAVE_MPI */

struct eplb__comm {
  eplb__nccl_t *nccl; /* kind NCCL (comm_nccl.c), the only kind here */
};

static eplb_status_t mpi_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__comm_t **out) {
  (void)rank, (void)size, (void)out;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "communicator kind %d not built in",
                     (int)cfg->kind);
}

void eplb__comm_destroy(eplb__comm_t *comm) {
  if (comm)
    eplb__nccl_destroy(comm->nccl);
  eplb__free(comm);
}

eplb_status_t eplb__comm_allreduce_u32(eplb__comm_t *comm, uint32_t *buf, size_t n) {
  NCCL_OR(comm, eplb__nccl_allreduce(comm->nccl, buf, n, EPLB__NCCL_U32, EPLB_REDUCE_SUM));
  (void)comm, (void)buf, (void)n;
  return EPLB_OK;
}

eplb_status_t eplb__comm_allreduce_u64(eplb__comm_t *comm, uint64_t *buf, size_t n,
                                       eplb_reduce_op_t op) {
  NCCL_OR(comm, eplb__nccl_allreduce(comm->nccl, buf, n, EPLB__NCCL_U64, op));
  (void)comm, (void)buf, (void)n, (void)op;
  return EPLB_OK;
}

eplb_status_t eplb__comm_allreduce_f64(eplb__comm_t *comm, double *buf, size_t n,
                                       eplb_reduce_op_t op) {
  NCCL_OR(comm, eplb__nccl_allreduce(comm->nccl, buf, n, EPLB__NCCL_F64, op));
  (void)comm, (void)buf, (void)n, (void)op;
  return EPLB_OK;
}

eplb_status_t eplb__comm_bcast(eplb__comm_t *comm, void *buf, size_t bytes) {
  NCCL_OR(comm, eplb__nccl_bcast(comm->nccl, buf, bytes));
  (void)comm, (void)buf, (void)bytes;
  return EPLB_OK;
}

eplb_status_t eplb__comm_gather_u32(eplb__comm_t *comm, const uint32_t *send, size_t n,
                                    uint32_t *recv) {
  NCCL_OR(comm, eplb__nccl_gather_u32(comm->nccl, send, n, recv));
  memcpy(recv, send, n * sizeof *send);
  return EPLB_OK;
}

eplb_status_t eplb__comm_reserve(eplb__comm_t *comm, size_t n) {
  (void)comm, (void)n;
  return EPLB_OK;
}

/* Unreachable: without MPI every communicator is an NCCL one. */
static eplb_status_t mpi_post(eplb__comm_t *c, const eplb__xchg_t *how, const eplb__xfer_t *sends,
                              size_t nsend, const eplb__xfer_t *recvs, size_t nrecv,
                              uint8_t *fail) {
  (void)c, (void)how, (void)sends, (void)nsend, (void)recvs, (void)nrecv, (void)fail;
  return eplb__error(EPLB_ESTATE, "runtime", "transfer between ranks without a communicator");
}

static eplb_status_t mpi_poll(eplb__comm_t *c, uint8_t *fail, size_t *pending) {
  (void)c, (void)fail;
  *pending = 0;
  return EPLB_OK;
}

static void mpi_drop(eplb__comm_t *c, uint8_t *fail) { (void)c, (void)fail; }

static eplb_status_t mpi_exchange(eplb__comm_t *comm, const eplb__xchg_t *how,
                                  const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *fail) {
  (void)comm, (void)how, (void)sends, (void)nsend, (void)recvs, (void)nrecv, (void)fail;
  return eplb__error(EPLB_ESTATE, "runtime", "transfer between ranks without a communicator");
}

eplb_status_t eplb_runtime_mpi_init(int *argc, char ***argv, uint32_t *rank, uint32_t *size) {
  (void)argc, (void)argv;
  if (rank)
    *rank = 0;
  if (size)
    *size = 1;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without MPI");
}

eplb_status_t eplb_runtime_mpi_allreduce(double *values, size_t n, eplb_reduce_op_t op) {
  (void)values, (void)n, (void)op;
  return eplb__error(EPLB_EUNSUPPORTED, "runtime", "built without MPI");
}

void *eplb_runtime_mpi_world(void) { return NULL; }

void eplb_runtime_mpi_finalize(void) {}

#endif

static eplb_status_t nccl_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                 eplb__comm_t **out) {
  eplb__nccl_t *n = NULL;
  eplb_status_t st = eplb__nccl_create(cfg, rank, size, &n);
  if (st != EPLB_OK)
    return st;
  eplb__comm_t *c = eplb__calloc(1, sizeof *c);
  if (!c) {
    eplb__nccl_destroy(n);
    return eplb__error(EPLB_ENOMEM, "runtime", "communicator");
  }
  c->nccl = n;
  *out = c;
  return EPLB_OK;
}

eplb_status_t eplb__comm_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__comm_t **out) {
  *out = NULL;
  if (cfg->kind == EPLB_COMM_NONE) /* one rank, or a standalone rank (runtime.h) */
    return EPLB_OK;
  if (cfg->kind == EPLB_COMM_NCCL)
    return nccl_create(cfg, rank, size, out);
  return mpi_create(cfg, rank, size, out);
}

eplb_status_t eplb__comm_exchange(eplb__comm_t *comm, const eplb__xchg_t *how,
                                  const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *fail) {
  size_t total = nsend + nrecv;
  if (total == 0)
    return EPLB_OK;
  memset(fail, EPLB__XFER_FAILED, total);
  if (!comm)
    return eplb__error(EPLB_ESTATE, "runtime", "transfer between ranks without a communicator");
  if (comm->nccl) {
    /* NCCL bounds its waits by its watchdog, which aborts the communicator. */
    eplb_status_t st = eplb__nccl_exchange(comm->nccl, sends, nsend, recvs, nrecv, fail);
    memset(fail + nrecv, st == EPLB_OK ? EPLB__XFER_OK : EPLB__XFER_FAILED, nsend);
    for (size_t i = 0; st == EPLB_ETIMEOUT && i < total; i++)
      fail[i] = fail[i] ? EPLB__XFER_TIMEOUT : EPLB__XFER_OK;
    return st;
  }
  return mpi_exchange(comm, how, sends, nsend, recvs, nrecv, fail);
}

eplb_status_t eplb__comm_post(eplb__comm_t *comm, const eplb__xchg_t *how,
                              const eplb__xfer_t *sends, size_t nsend, const eplb__xfer_t *recvs,
                              size_t nrecv, uint8_t *fail) {
  if (nsend + nrecv == 0)
    return EPLB_OK;
  if (!comm) {
    memset(fail, EPLB__XFER_FAILED, nsend + nrecv);
    return eplb__error(EPLB_ESTATE, "runtime", "transfer between ranks without a communicator");
  }
  /* NCCL has no exchange beside serving here: it runs now, under its watchdog. */
  if (comm->nccl)
    return eplb__comm_exchange(comm, how, sends, nsend, recvs, nrecv, fail);
  return mpi_post(comm, how, sends, nsend, recvs, nrecv, fail);
}

eplb_status_t eplb__comm_poll(eplb__comm_t *comm, uint8_t *fail, size_t *pending) {
  *pending = 0;
  if (!comm || comm->nccl)
    return EPLB_OK;
  return mpi_poll(comm, fail, pending);
}

void eplb__comm_drop(eplb__comm_t *comm, uint8_t *fail) {
  if (comm && !comm->nccl)
    mpi_drop(comm, fail);
}

/* The device split's all-reduce: device memory on the stream, so only NCCL
 * can take it; MPI reduces host memory (the emulated device's path, whose
 * "device" memory is host memory, calls eplb__comm_allreduce_u32). */
eplb_status_t eplb__comm_allreduce_u32_stream(eplb__comm_t *comm, uint32_t *buf, size_t n,
                                              void *stream) {
  if (!comm)
    return EPLB_OK;
  if (comm->nccl)
    return eplb__nccl_allreduce_stream(comm->nccl, buf, n, stream);
  return eplb__error(EPLB_EUNSUPPORTED, "runtime",
                     "device all-reduce: the cuda device needs comm kind NCCL, not MPI");
}

eplb_status_t eplb__comm_stream_watch(eplb__comm_t *comm, double since) {
  if (comm && comm->nccl)
    return eplb__nccl_stream_watch(comm->nccl, since);
  (void)since; /* nothing of ours is on the stream but kernels, which end */
  return EPLB_OK;
}
