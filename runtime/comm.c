/* runtime/comm.c — the runtime's communicator: MPI on host buffers, or a
 * single rank, or NCCL (comm_nccl.c). The only file that includes mpi.h. */
#include "eplb_config.h"
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

/* Both builds: an NCCL communicator sits behind eplb__comm_t. */
static eplb_status_t nccl_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                 eplb__comm_t **out);
#define NCCL_OR(comm, call)                                                                        \
  if ((comm) && (comm)->nccl)                                                                      \
  return (call)

#if EPLB_HAVE_MPI
#include <limits.h>
#include <mpi.h>

struct eplb__comm {
  eplb__nccl_t *nccl; /* kind NCCL (comm_nccl.c); NULL: MPI */
  MPI_Comm comm;      /* our duplicate: our traffic never matches the application's */
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

eplb_status_t eplb__comm_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__comm_t **out) {
  *out = NULL;
  if (cfg->kind == EPLB_COMM_NONE) {
    if (size != 1)
      return eplb__error(EPLB_EINVAL, "runtime", "comm kind none needs world_size 1, not %u", size);
    return EPLB_OK;
  }
  if (cfg->kind == EPLB_COMM_NCCL)
    return nccl_create(cfg, rank, size, out);
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

eplb_status_t eplb__comm_exchange(eplb__comm_t *comm, const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *recv_failed) {
  eplb_status_t st = EPLB_OK;
  size_t total = nsend + nrecv;
  MPI_Request *req = NULL;
  MPI_Status *stat = NULL;
  if (total == 0)
    return EPLB_OK;
  if (!comm)
    return eplb__error(EPLB_ESTATE, "runtime", "transfer between ranks without a communicator");
  NCCL_OR(comm, eplb__nccl_exchange(comm->nccl, sends, nsend, recvs, nrecv, recv_failed));
  req = eplb__malloc_array(total, sizeof *req);
  stat = eplb__malloc_array(total, sizeof *stat);
  if (!req || !stat) {
    st = eplb__error(EPLB_ENOMEM, "runtime", "%zu transfer requests", total);
    goto done;
  }
  for (size_t i = 0; i < total; i++)
    req[i] = MPI_REQUEST_NULL;
  for (size_t i = 0; i < nrecv; i++) {
    recv_failed[i] = 0;
    if (recvs[i].bytes > INT_MAX ||
        MPI_Irecv(recvs[i].buf, (int)recvs[i].bytes, MPI_BYTE, (int)recvs[i].peer, recvs[i].tag,
                  comm->comm, &req[i]) != MPI_SUCCESS) {
      recv_failed[i] = 1;
      req[i] = MPI_REQUEST_NULL;
    }
  }
  bool send_failed = false;
  for (size_t i = 0; i < nsend; i++) {
    if (sends[i].bytes > INT_MAX ||
        MPI_Isend(sends[i].buf, (int)sends[i].bytes, MPI_BYTE, (int)sends[i].peer, sends[i].tag,
                  comm->comm, &req[nrecv + i]) != MPI_SUCCESS) {
      send_failed = true;
      req[nrecv + i] = MPI_REQUEST_NULL;
    }
  }
  int rc = MPI_Waitall((int)total, req, stat);
  if (rc == MPI_ERR_IN_STATUS) {
    for (size_t i = 0; i < nrecv; i++)
      if (stat[i].MPI_ERROR != MPI_SUCCESS)
        recv_failed[i] = 1;
    for (size_t i = nrecv; i < total; i++)
      if (stat[i].MPI_ERROR != MPI_SUCCESS)
        send_failed = true;
  } else if (rc != MPI_SUCCESS) {
    memset(recv_failed, 1, nrecv);
    st = mpi_fail(rc, "MPI_Waitall");
    goto done;
  }
  for (size_t i = 0; i < nrecv; i++)
    if (recv_failed[i])
      st = eplb__error(EPLB_ECOMM, "runtime", "receive of %zu bytes from rank %u failed",
                       recvs[i].bytes, recvs[i].peer);
  if (send_failed && st == EPLB_OK)
    st = eplb__error(EPLB_ECOMM, "runtime", "a send failed");
done:
  eplb__free(req);
  eplb__free(stat);
  return st;
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

eplb_status_t eplb__comm_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__comm_t **out) {
  (void)rank;
  *out = NULL;
  if (cfg->kind == EPLB_COMM_NONE) {
    if (size != 1)
      return eplb__error(EPLB_EINVAL, "runtime", "comm kind none needs world_size 1, not %u", size);
    return EPLB_OK;
  }
  if (cfg->kind == EPLB_COMM_NCCL)
    return nccl_create(cfg, rank, size, out);
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

eplb_status_t eplb__comm_exchange(eplb__comm_t *comm, const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *recv_failed) {
  if (nsend + nrecv == 0)
    return EPLB_OK;
  NCCL_OR(comm, eplb__nccl_exchange(comm->nccl, sends, nsend, recvs, nrecv, recv_failed));
  (void)sends, (void)recvs;
  memset(recv_failed, 1, nrecv);
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
