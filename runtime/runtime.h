/* runtime/runtime.h — internal header of the runtime module. */
#ifndef EPLB_RUNTIME_INTERNAL_H
#define EPLB_RUNTIME_INTERNAL_H

#include "core/core.h"
#include "planner/planner.h"
#include "eplb/model.h"
#include "eplb/abi.h"
#include "eplb/plan.h"
#include "eplb/runtime.h"
#include "eplb/runtime_device.h"
#include "eplb/runtime_testing.h"
#include "eplb/shm.h"
#include "eplb/split.h"
#include "eplb/trace.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- the geometry: the deployment's shape, fixed at create --------------- */

/* Single letters because every loop of the runtime indexes with them (they
 * are the planner's notation too); each part gets this struct, not the
 * runtime. Slot r of a layer lives on rank r / S, rank p on node p / K. */
typedef struct eplb__geom {
  uint32_t L;    /* layers (cfg.num_layers) */
  uint32_t E;    /* logical experts per layer (cfg.num_experts) */
  uint32_t k;    /* experts each token picks (cfg.topk) */
  uint32_t S;    /* slots per rank, one rank per GPU (cfg.slots_per_rank) */
  uint32_t P;    /* ranks = GPUs (cfg.world_size) */
  uint32_t K;    /* ranks per node (cfg.ranks_per_node) */
  uint32_t R;    /* physical slots per layer: S * P */
  uint32_t N;    /* nodes: P / K */
  uint32_t rank; /* this rank (cfg.rank) */
  uint32_t node; /* this rank's node: rank / K */
  size_t LE;     /* L * E: the counters of one step */
} eplb__geom_t;

/* Newton max-flows per whole-token split (typical layers take 1 to 4), one
 * budget for the device and the host's split_whole_tokens, so both fail on
 * the same layers and keep the same shares. */
enum { EPLB__SPLIT_MAX_ITERATIONS = 32 };

/* ---- comm.c / comm_mpi.c: the communicator ------------------------------ */

typedef struct eplb__comm eplb__comm_t;

/* One point-to-point transfer of a migration round. */
typedef struct eplb__xfer {
  uint32_t peer; /* rank */
  int tag;
  void *buf;
  size_t bytes;
} eplb__xfer_t;

/* NULL comm (kind NONE) means one rank: reductions are identities. */
eplb_status_t eplb__comm_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__comm_t **out);
void eplb__comm_destroy(eplb__comm_t *comm);
eplb_status_t eplb__comm_allreduce_u32(eplb__comm_t *comm, uint32_t *buf, size_t n);
eplb_status_t eplb__comm_allreduce_u64(eplb__comm_t *comm, uint64_t *buf, size_t n,
                                       eplb_reduce_op_t op);
eplb_status_t eplb__comm_allreduce_f64(eplb__comm_t *comm, double *buf, size_t n,
                                       eplb_reduce_op_t op);
eplb_status_t eplb__comm_bcast(eplb__comm_t *comm, void *buf, size_t bytes);
/* Gathers n uint32 of every rank into recv [P][n] on rank 0. */
eplb_status_t eplb__comm_gather_u32(eplb__comm_t *comm, const uint32_t *send, size_t n,
                                    uint32_t *recv);
/* How one migration round's exchange runs. */
typedef struct eplb__xchg {
  uint64_t seq;           /* the round's number, the same on every rank: with MPI its
                             messages carry a tag derived from it, so a late message of an
                             abandoned round never matches a later round's receive */
  uint32_t timeout_ms;    /* deadline from entry; 0 = none */
  uint32_t send_delay_ms; /* testing: post the sends this much later (a stalled peer) */
} eplb__xchg_t;

/* What became of one transfer (eplb__comm_exchange's fail[]; PENDING only
 * from eplb__comm_post/poll). */
enum { EPLB__XFER_OK = 0, EPLB__XFER_FAILED = 1, EPLB__XFER_TIMEOUT = 2, EPLB__XFER_PENDING = 3 };

/* Makes sure an exchange of up to n transfers needs no allocation, so that
 * the caller can agree on an EPLB_ENOMEM with its peers before posting. */
eplb_status_t eplb__comm_reserve(eplb__comm_t *comm, size_t n);
/* Posts all receives and sends and polls them until all completed or the
 * deadline passed; then cancels what is left (receives are waited for,
 * which MPI makes local after a cancel; sends are freed) so that no
 * request can write a buffer after the return. fail [nrecv + nsend]
 * (receives first) gets an EPLB__XFER_* per transfer. Returns EPLB_OK,
 * EPLB_ETIMEOUT (something was pending at the deadline), EPLB_ECOMM. */
eplb_status_t eplb__comm_exchange(eplb__comm_t *comm, const eplb__xchg_t *how,
                                  const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *fail);

/* The exchange beside serving (continuous re-placement): post starts the
 * transfers and returns (fail[] PENDING, or FAILED for one that could not
 * be posted; with how->send_delay_ms the sends are posted by a later poll);
 * poll tests them without waiting, sets fail[] as they finish and gives
 * how many are pending; at the deadline it cancels those as
 * eplb__comm_exchange does (TIMEOUT). One such exchange per communicator at
 * a time, until nothing is pending. NCCL runs the exchange inside post. */
eplb_status_t eplb__comm_post(eplb__comm_t *comm, const eplb__xchg_t *how,
                              const eplb__xfer_t *sends, size_t nsend, const eplb__xfer_t *recvs,
                              size_t nrecv, uint8_t *fail);
eplb_status_t eplb__comm_poll(eplb__comm_t *comm, uint8_t *fail, size_t *pending);
/* Cancels what the exchange beside serving still has pending (destroy). */
void eplb__comm_drop(eplb__comm_t *comm, uint8_t *fail);

/* comm_nccl.c: the NCCL communicator behind eplb__comm_t (kind NCCL).
 * Host buffers pass through a device scratch buffer; waits are bounded by
 * the watchdog (env EPLB_NCCL_TIMEOUT_MS, default 60 s) that aborts the
 * communicator (EPLB_ETIMEOUT, then EPLB_ECOMM on every later call). */
typedef struct eplb__nccl eplb__nccl_t;
typedef enum eplb__nccl_type { EPLB__NCCL_U32, EPLB__NCCL_U64, EPLB__NCCL_F64 } eplb__nccl_type_t;
eplb_status_t eplb__nccl_create(const eplb_runtime_comm_t *cfg, uint32_t rank, uint32_t size,
                                eplb__nccl_t **out);
void eplb__nccl_destroy(eplb__nccl_t *c);
eplb_status_t eplb__nccl_allreduce(eplb__nccl_t *c, void *buf, size_t n, eplb__nccl_type_t t,
                                   eplb_reduce_op_t op);
eplb_status_t eplb__nccl_bcast(eplb__nccl_t *c, void *buf, size_t bytes);
eplb_status_t eplb__nccl_gather_u32(eplb__nccl_t *c, const uint32_t *send, size_t n,
                                    uint32_t *recv);
eplb_status_t eplb__nccl_exchange(eplb__nccl_t *c, const eplb__xfer_t *sends, size_t nsend,
                                  const eplb__xfer_t *recvs, size_t nrecv, uint8_t *recv_failed);

/* ---- dispatch.c: per-layer dispatch tables ------------------------------ */

/* Candidates of expert e are columns off[e] .. off[e+1] (Walker's alias
 * method, kernels/dispatch_math.h: the column comes from the token hash's
 * word u, and it keeps slot[j] when the word v is below its rounded prob,
 * else takes alias[j]). */
typedef struct eplb__dtab {
  uint32_t *off;  /* [E+1] */
  int32_t *slot;  /* [R] the column's candidate slot */
  int32_t *alias; /* [R] */
  uint32_t *prob; /* [R] in 2^-32 units */
  double *weight; /* [R] the candidate's renormalised share */
  uint32_t *work; /* [2R] scratch of the build */
  double *q;      /* [R] scratch of the build */
  /* The same table packed for the scalar map (one load per expert, one
   * 16-byte cell per column): col[e] = off[e] | (off[e+1] - off[e]) << 32. */
  uint64_t *col;           /* [E] */
  struct eplb__cell *cell; /* [R] */
  int32_t *direct;         /* [E] the slot of an expert with one column, else -1 */
  uint32_t multi;          /* experts with several columns */
  /* The same table in 16-bit words for the SIMD map, which holds it in
   * registers (pairs of 32-word registers looked up by permutes, no
   * gathers). ent[e] is the slot of an expert with one column, else
   * 0x8000 | first cell | columns << 7; cells number only the columns of
   * experts with several. Usable (simd_pe > 0) when E <= 512, R <= 32768
   * and there are at most 128 such cells, which covers redundant-expert
   * plans such as 256 experts in 288 slots. */
  uint16_t *ent;    /* [512]: simd_pe * 64 used (a power of two) */
  uint16_t *cslot;  /* [128] the cell's slot (its alias when it never keeps) */
  uint16_t *calias; /* [128] */
  uint16_t *ckeep;  /* [128] keep when v <= ckeep (keep_below - 1) */
  uint32_t simd_pe; /* register pairs of ent (0: the SIMD map does not apply) */
  uint32_t simd_pc; /* register pairs of the cells */
  uint32_t *rstart; /* [E+1] the table's placement by expert: expert e's slots are */
  uint32_t *rlist;  /* [R]   rlist[rstart[e] .. rstart[e+1]), in slot order (the quota map
                       reads them from the live table) */
  int32_t *p2l;     /* [R] the placement rstart/rlist were built from: an unchanged one
                       (every per-batch rebuild between rebalances) skips the bucketing */
  bool p2l_ok;      /* p2l holds a placement */
} eplb__dtab_t;

/* Column j of an alias table: slot[j], alias[j], eplb__dispatch_keep_below(prob[j]). */
typedef struct eplb__cell {
  int32_t slot, alias;
  uint32_t keep, pad;
} eplb__cell_t;

/* The map's kernel. SCALAR is the reference; AVX512 (F, BW, DQ, VL) must
 * choose the same slots. AUTO takes the best this CPU runs, unless env
 * EPLB_MAP_ISA=scalar (read once). */
typedef enum eplb__map_isa { EPLB__MAP_AUTO, EPLB__MAP_SCALAR, EPLB__MAP_AVX512 } eplb__map_isa_t;
/* The kernel map uses now. */
eplb__map_isa_t eplb__map_isa(void);
/* For tests and benchmarks, not concurrently with map: forces isa (AUTO
 * detects again). Returns false (and changes nothing) when the CPU lacks it. */
bool eplb__map_force_isa(eplb__map_isa_t isa);
/* The SIMD map, which also writes the ids, packed to `width` bytes each (1
 * or 2), to pack [n] unless pack is NULL. Returns false (and does nothing) where the SIMD map does
 * not apply; else true and *top = the largest id as unsigned (>= E: a bad
 * id; out and pack are then unspecified). */
bool eplb__map_and_pack(const eplb__dtab_t *t, uint32_t k, uint32_t layer, const int32_t *topk_ids,
                        uint32_t num_tokens, uint64_t token_base, int32_t *out_slots, uint8_t *pack,
                        uint32_t width, uint32_t *top);

/* The scalar map (any table) of ids already checked to be < E. */
void eplb__map_scalar(const eplb__dtab_t *t, uint32_t k, uint32_t layer, const int32_t *topk_ids,
                      uint32_t num_tokens, uint64_t token_base, int32_t *out_slots);

eplb_status_t eplb__dtab_alloc(eplb__dtab_t *t, uint32_t E, uint32_t R);
void eplb__dtab_free(eplb__dtab_t *t);
/* Builds the table of one layer for a rank on `node`. */
void eplb__dtab_build(eplb__dtab_t *t, uint32_t E, uint32_t R, const int32_t *phy2log,
                      const double *share, uint32_t slots_per_rank, uint32_t ranks_per_node,
                      uint32_t node, int local_first);
/* The same with the plan's per-source-node shares of `node` (node_share [R],
 * NULL for none): an expert's candidates are then its slots with a positive
 * node share, weighted by them (they encode locality, so local_first does not
 * apply); an expert without any falls back to the global shares. */
void eplb__dtab_build_node(eplb__dtab_t *t, uint32_t E, uint32_t R, const int32_t *phy2log,
                           const double *share, const double *node_share, uint32_t slots_per_rank,
                           uint32_t ranks_per_node, uint32_t node, int local_first);

/* Migrations use the planner's diff and schedule (planner/planner.h:
 * eplb__migration_layer, eplb__migration_rounds), the same code as
 * eplb_plan_diff_schedule, so `eplb plan diff` prints the rounds the
 * runtime runs. */

/* ---- counter.c: counting on an internal thread (cfg.count_thread) ------- */

typedef struct eplb__counter eplb__counter_t;
eplb_status_t eplb__counter_create(uint32_t L, uint32_t E, eplb__counter_t **out);
void eplb__counter_destroy(eplb__counter_t *c);
/* record's path: validates and queues one call's ids (see counter.c). */
int eplb__counter_push(eplb__counter_t *c, uint32_t layer, const int32_t *ids, size_t n);
/* route's path: room for n packed ids of a layer (eplb__counter_width bytes
 * each) to be written by the caller, or NULL (no room: count another way);
 * published by commit, dropped by reserving again. */
uint8_t *eplb__counter_reserve(eplb__counter_t *c, uint32_t layer, size_t n);
void eplb__counter_commit(eplb__counter_t *c);
uint32_t eplb__counter_width(const eplb__counter_t *c);
/* For tests: hold = true keeps the worker from counting (as a worker
 * without a CPU would) until hold = false; not across step_end. */
void eplb__counter_hold(eplb__counter_t *c, bool hold);
/* step_end's: counts what is queued and adds all counted since the last
 * collect to counts [L * E]. */
void eplb__counter_collect(eplb__counter_t *c, uint32_t *restrict counts);

/* ---- weights.c: the registered expert weights (one or several tensors) -- */

typedef struct eplb__wtab eplb__wtab_t;
eplb_status_t eplb__wtab_create(uint32_t L, uint32_t S, uint64_t expert_bytes, eplb__wtab_t **out);
void eplb__wtab_destroy(eplb__wtab_t *w);
/* Registers (l, s)'s n tensors; their sum must be expert_bytes and the
 * layout the first registration's. */
eplb_status_t eplb__wtab_set(eplb__wtab_t *w, uint32_t l, uint32_t s,
                             const eplb_runtime_tensor_t *t, uint32_t n);
bool eplb__wtab_has(const eplb__wtab_t *w, uint32_t l, uint32_t s);
/* The slot's one buffer, to read or write in place; NULL with several
 * tensors (then gather / scatter through contiguous bytes). */
void *eplb__wtab_direct(const eplb__wtab_t *w, uint32_t l, uint32_t s);
bool eplb__wtab_packed(const eplb__wtab_t *w);
void eplb__wtab_gather(const eplb__wtab_t *w, uint32_t l, uint32_t s, void *dst);
void eplb__wtab_scatter(const eplb__wtab_t *w, uint32_t l, uint32_t s, const void *src);
/* A checksum of the slot's tensors, equal to that of their gathered bytes
 * (eplb__wtab_sum_buf); never 0. */
uint64_t eplb__wtab_sum(const eplb__wtab_t *w, uint32_t l, uint32_t s);
uint64_t eplb__wtab_sum_buf(const eplb__wtab_t *w, const void *buf);

/* ---- sequence.c: the collective calls' check ----------------------------- */

typedef enum eplb__call {
  EPLB__CALL_RECORD = 1,
  EPLB__CALL_ROUTE = 2,
  EPLB__CALL_RECORD_COUNTS = 3,
  EPLB__CALL_ALLREDUCE = 4,
  EPLB__CALL_STEP_END = 5
} eplb__call_t;

typedef struct eplb__seq {
  uint32_t n;           /* collective calls made in this step */
  bool desync;          /* out of step: collective calls fail until step_end */
  bool drop_step;       /* a call of this step was out of step: the step is not closed */
  bool batch_unchecked; /* some rank has a device: per-batch calls go without header */
} eplb__seq_t;

/* Before a collective call's payload: the header all-reduce (kind, place in
 * the step, layer, step). EPLB_OK: in step, the payload may follow;
 * EPLB_ESHAPE: the ranks' calls differ (every rank gets it at this call; no
 * payload may follow); EPLB_ECOMM from the communicator. Out of step, every
 * call but step_end fails at once; step_end's header brings the ranks back
 * (agreed step count, the statistics not yet all-reduced dropped). */
eplb_status_t eplb__seq_enter(eplb_runtime_t *rt, eplb__call_t kind, uint32_t layer);
const char *eplb__seq_call_name(eplb__call_t kind);
/* Out of step: the error of a collective call `what` skipped until
 * step_end; else EPLB_OK. */
eplb_status_t eplb__seq_skipped(const eplb_runtime_t *rt, const char *what);

/* ---- batch.c: the per-batch split (cfg.split_per_batch) ----------------- */

typedef struct eplb__batch {
  uint32_t N;            /* nodes: token sources of the locality stage */
  eplb_split_t **splits; /* [L] a handle per layer: its graph and warm start stay */
  uint32_t *gpu_node;    /* [P] */
  uint32_t *gpu_slots;   /* [P] S each */
  uint32_t *msg;         /* [N*E + 3] per-node counts, bad flag, check word and square */
  uint32_t *own;         /* [E] this call's counts */
  double *nloads;        /* [N*E] the all-reduced counts */
  double *share;         /* [L][R] fresh global shares */
  double *node_share;    /* [L][R] this node's row of the fresh node shares */
  uint8_t *state;        /* [L] 0 none (plan's shares), 1 global split, 2 with locality */
  double *t_star;        /* [L] */
  double *all_ns;        /* [N*R] every node's row, scratch */
  double *gload;         /* [P] scratch */
  uint32_t *qcur, *qend; /* [E] quota cursor into the live table's rlist, end of e's list */
  uint32_t *qrem;        /* [R] quota left of rlist[i] */
  /* The decode objective (cfg.split_model and split_gpu, copied at create). */
  bool decode;
  eplb_model_desc_t model;
  eplb_gpu_desc_t gpu;
  eplb_decode_split_options_t dopts;
  double *dshare; /* [R] the decode search's shares, scratch */
  bool whole;     /* cfg.split_whole_tokens resolved: the device's integer solver */
  void *whole_ws; /* its workspace (kernels/split_math.h) */
} eplb__batch_t;

eplb_status_t eplb__batch_alloc(eplb_runtime_t *rt);
/* Copies the decode objective (checked config; NULL model: none). */
void eplb__batch_decode_setup(eplb_runtime_t *rt, const eplb_model_desc_t *model,
                              const eplb_gpu_desc_t *gpu);
void eplb__batch_free(eplb_runtime_t *rt);
/* h extended by the decode objective's figures (ranks must agree on them). */
uint64_t eplb__batch_hash(const eplb__batch_t *b, uint64_t h);
/* Joins the layer's all-reduce for a record, route or record_counts call
 * that failed its own checks (layer may be out of range): its peers keep
 * their shares (or see EPLB_ESHAPE) instead of waiting. */
void eplb__batch_join(eplb_runtime_t *rt, eplb__call_t kind, uint32_t layer);
/* One collective record (out_slots NULL), route, or record_counts (counts
 * non-NULL, counts_err its own check) call with the per-batch split. */
eplb_status_t eplb__batch_call(eplb_runtime_t *rt, eplb__call_t kind, uint32_t layer,
                               const int32_t *ids, uint32_t num_tokens, const uint32_t *counts,
                               eplb_status_t counts_err, uint64_t token_base, int32_t *out_slots);

/* ---- device.c: the device backend (cfg.device) -------------------------- */

/* A backend is a small table of functions (as ggml keeps its backends
 * apart): device_emu.c (host memory, the kernels' CPU references) and
 * device_cuda.c (the CUDA launchers of kernels/). device.c holds everything
 * above them: the ring, the tables, the copy-back and the feed, written
 * once for both, so the emulated device tests the same protocol the GPU
 * runs. Statuses carry a detail; `impl` is the backend's state. */
typedef struct eplb__dev_ops {
  const char *name;
  eplb_status_t (*open)(void **impl, const eplb_runtime_device_t *cfg);
  void (*close)(void *impl);
  /* Device memory (zeroed by the caller with memset) and pinned host memory. */
  eplb_status_t (*alloc)(void *impl, void **ptr, size_t bytes);
  void (*free)(void *impl, void *ptr);
  eplb_status_t (*host_alloc)(void *impl, void **ptr, size_t bytes);
  void (*host_free)(void *impl, void *ptr);
  eplb_status_t (*memset)(void *impl, void *dst, size_t bytes, void *stream);
  /* Table uploads (pinned source) and count copy-backs, asynchronous. */
  eplb_status_t (*upload)(void *impl, void *dst, const void *src, size_t bytes, void *stream);
  eplb_status_t (*download)(void *impl, void *dst, const void *src, size_t bytes, void *stream);
  eplb_status_t (*event_create)(void *impl, void **event);
  void (*event_destroy)(void *impl, void *event);
  eplb_status_t (*event_record)(void *impl, void *event, void *stream);
  /* 1 done, 0 still running, -1 failed (status in the detail, *st). */
  int (*event_query)(void *impl, void *event, eplb_status_t *st);
  eplb_status_t (*event_sync)(void *impl, void *event);
  eplb_status_t (*stream_sync)(void *impl, void *stream);
  /* As event_query, for everything queued on the stream. */
  int (*stream_query)(void *impl, void *stream, eplb_status_t *st);
  /* The kernels (eplb/kernels.h contracts). */
  eplb_status_t (*count)(void *impl, const eplb_cuda_ring_t *ring, uint32_t layer,
                         const int32_t *ids, uint32_t num_tokens, uint32_t topk, void *stream);
  eplb_status_t (*step)(void *impl, const eplb_cuda_ring_t *ring, void *stream);
  eplb_status_t (*map)(void *impl, const eplb_cuda_dispatch_t *d, uint32_t layer,
                       const int32_t *ids, uint32_t num_tokens, uint32_t topk, uint64_t token_base,
                       int32_t *out, uint32_t *bad, void *stream);
  eplb_status_t (*flip)(void *impl, const eplb_cuda_dispatch_t *d, void *stream);
  /* The per-batch split on the device (eplb__cuda_split; with tail, first
   * the guard of a multi-rank call, eplb__quota_guard in
   * kernels/split_math.h) and the table build from its shares into buffer
   * `which` (eplb__cuda_table_build). */
  eplb_status_t (*split)(void *impl, const int32_t *phy2log, uint32_t num_experts,
                         uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                         double *share, double *t_star, uint32_t *status, void *workspace,
                         uint32_t max_iterations, const uint32_t *tail, uint32_t word,
                         uint32_t ranks, void *stream);
  /* The device route's exact quotas (eplb__quota_ref's contract). */
  eplb_status_t (*quota)(void *impl, const eplb_cuda_dispatch_t *d, uint32_t layer,
                         const int32_t *phy2log, const double *share, const uint32_t *status,
                         const int32_t *ids, uint32_t num_tokens, uint32_t topk,
                         uint64_t token_base, int32_t *out, uint32_t *bad, void *workspace,
                         void *stream);
  /* Sums buf [n] (device) over the ranks at this point of the stream:
   * emulated, the host communicator at once (MPI); cuda, an NCCL
   * all-reduce enqueued on the stream (eplb__comm_allreduce_u32_stream).
   * A NULL comm (one rank) leaves buf as it is. */
  eplb_status_t (*allreduce)(void *impl, eplb__comm_t *comm, uint32_t *buf, size_t n, void *stream);
  eplb_status_t (*table_build)(void *impl, const eplb_cuda_dispatch_t *d, uint32_t which,
                               const int32_t *phy2log, const double *share, void *workspace,
                               void *stream);
  /* Testing knobs (emulated device only; NULL elsewhere). */
  void (*inject)(void *impl, uint32_t event_delay, uint32_t upload_failures,
                 uint32_t launch_failures);
} eplb__dev_ops_t;

const eplb__dev_ops_t *eplb__dev_emu_ops(void);
/* NULL in builds without CUDA. */
const eplb__dev_ops_t *eplb__dev_cuda_ops(void);

typedef struct eplb__device eplb__device_t;
/* Opens rt->dev from rt->cfg.device (kind NONE: nothing) and uploads the
 * host tables of every layer into buffer 0 (waits for the upload). */
eplb_status_t eplb__device_open(eplb_runtime_t *rt);
/* Waits for the copies in flight and frees everything. NULL-safe. */
void eplb__device_close(eplb__device_t *dev);
/* step_end's part, before the statistics close: copy-back, ring step, feed. */
eplb_status_t eplb__device_step_end(eplb_runtime_t *rt);
/* Uploads host table t of `layer` into the layer's idle device buffer (a
 * plan switch's table, before the round's agreement); with the device
 * split, also the placement p2l [R] and shares share [R] it was built
 * from, into the idle half of the split's inputs (NULL: they stay). */
eplb_status_t eplb__device_stage(eplb_runtime_t *rt, uint32_t layer, const eplb__dtab_t *t,
                                 const int32_t *p2l, const double *share);
/* Flips the layer's device epoch (after stage): later maps use it, and the
 * split the staged placement. */
eplb_status_t eplb__device_flip(eplb_runtime_t *rt, uint32_t layer);
/* For tests: the device split's state of a layer (device memory; host
 * memory on the emulated device): the live half's shares [R], T* and the
 * status word of its last split. EPLB_ESTATE without the device split. */
eplb_status_t eplb__device_split_state(const eplb_runtime_t *rt, uint32_t layer,
                                       const double **share, const double **t_star,
                                       const uint32_t **status);
/* comm.c for the device split: an all-reduce (sum) of device memory buf
 * [n] enqueued on `stream` without waiting for it (NCCL; NULL comm: one
 * rank, nothing to do; MPI: EPLB_EUNSUPPORTED, its buffers are host
 * memory); and the check of a wait on that stream: EPLB_OK (then it has
 * slept briefly) while the wait started at `since` (eplb__now) is within
 * the NCCL watchdog and no asynchronous NCCL error is seen; else the
 * communicator is aborted (EPLB_ETIMEOUT, EPLB_ECOMM). */
eplb_status_t eplb__comm_allreduce_u32_stream(eplb__comm_t *comm, uint32_t *buf, size_t n,
                                              void *stream);
eplb_status_t eplb__comm_stream_watch(eplb__comm_t *comm, double since);
eplb_status_t eplb__nccl_allreduce_stream(eplb__nccl_t *c, uint32_t *buf, size_t n, void *stream);
eplb_status_t eplb__nccl_stream_watch(eplb__nccl_t *c, double since);

/* ---- stats.c: the statistics part --------------------------------------- */

/* Per-step counts, closed into a period of policy.allreduce_period steps
 * that one all-reduce makes global; the global steps enter the window ring
 * (and its sum) and the EMA. Its state is its own (opaque): the runtime
 * core orders the steps, the all-reduce and the trace around it. */
typedef struct eplb__stats eplb__stats_t;
eplb_status_t eplb__stats_create(const eplb__geom_t *g, const eplb_runtime_policy_t *policy,
                                 eplb__stats_t **out);
void eplb__stats_destroy(eplb__stats_t *s);
/* The open step's counts of `layer` [E]; layer 0's is that of every layer
 * [L][E] (the counting thread's collect adds to it). */
uint32_t *eplb__stats_counts(eplb__stats_t *s, uint32_t layer);
/* Counts ids [n], all < E, into the layer's open step. */
void eplb__stats_count_ids(eplb__stats_t *s, uint32_t layer, const int32_t *ids, size_t n);
/* Adds add [E] to the layer's open step. */
void eplb__stats_add(eplb__stats_t *s, uint32_t layer, const uint32_t *add);
/* The layer's tokens in the open step, and adding to them. */
uint32_t eplb__stats_tokens(const eplb__stats_t *s, uint32_t layer);
void eplb__stats_add_tokens(eplb__stats_t *s, uint32_t layer, uint32_t num_tokens);
/* The open step's place in its period (the row sample's block). */
uint32_t eplb__stats_open_step(const eplb__stats_t *s);
/* Closes the open step; returns the period's n steps when that completed
 * it (its all-reduce is due), else 0. */
uint32_t eplb__stats_close_step(eplb__stats_t *s);
/* The completed period as one buffer to all-reduce ([n][L*E + 2]: counts,
 * tokens, plan flag; *words its length), and its last step's plan flag. */
uint32_t *eplb__stats_period(eplb__stats_t *s, uint32_t n, size_t *words);
uint32_t *eplb__stats_flag(eplb__stats_t *s, uint32_t n);
/* Step i of the all-reduced period enters the ring, the window sum and the
 * EMA; returns its counts [L*E + 1] (the last: its tokens). */
const uint32_t *eplb__stats_push(eplb__stats_t *s, uint32_t i);
/* Zeroes the period's n steps for the next period. */
void eplb__stats_clear(eplb__stats_t *s, uint32_t n);
/* Forgets the open step's counts and tokens. */
void eplb__stats_drop_open(eplb__stats_t *s);
/* The window sum or EMA [L*E]; global steps pushed; steps in the window. */
void eplb__stats_window(const eplb__stats_t *s, eplb_runtime_window_kind_t kind, double *out);
uint64_t eplb__stats_steps(const eplb__stats_t *s);
uint64_t eplb__stats_window_steps(const eplb__stats_t *s);
/* Sum of the last n global steps (fewer when fewer were pushed) into out [LE]. */
void eplb__stats_recent(const eplb__stats_t *s, uint32_t n, double *out);
/* 1 when every ids[i], taken as unsigned, is < E (so negatives fail). */
bool eplb__ids_below(const int32_t *ids, size_t n, uint32_t E);
/* The error (EPLB_ERANGE, its detail naming the call, token and position)
 * of a call `what` whose ids [n] hold one out of [0, E). */
eplb_status_t eplb__bad_ids(const char *what, const eplb__geom_t *g, uint32_t layer,
                            const int32_t *ids, size_t n);

/* ---- sample.c: the row sample part (cfg.sample_rows > 0) ----------------- */

/* Whole top-k rows with their source ranks, gathered to rank 0 for the
 * trace. Steps are those of the statistics' period. */
typedef struct eplb__sample eplb__sample_t;
/* rows 0: no sample (*out NULL). */
eplb_status_t eplb__sample_create(const eplb__geom_t *g, uint32_t rows, uint32_t period,
                                  eplb__sample_t **out);
void eplb__sample_destroy(eplb__sample_t *sp);
/* Takes a call's first rows into open step `step` of the period. */
void eplb__sample_record(eplb__sample_t *sp, uint32_t step, uint32_t layer, const int32_t *ids,
                         uint32_t num_tokens);
/* Stores the count of complete rows of step `step`, being closed. */
void eplb__sample_close_step(eplb__sample_t *sp, uint32_t step);
/* The open step's rows are forgotten (taken again from row 0). */
void eplb__sample_drop_step(eplb__sample_t *sp);
/* Gathers nsteps closed blocks to rank 0 (collective). */
eplb_status_t eplb__sample_gather(eplb__sample_t *sp, eplb__comm_t *comm, uint32_t nsteps);
/* Rank 0: fills step's rows from gathered step s of nsteps. */
void eplb__sample_rows(eplb__sample_t *sp, uint32_t s, uint32_t nsteps, eplb_trace_step_t *step);

/* ---- mailbox.c: the mailbox part, rank 0's link to eplbd ----------------- */

typedef struct eplb__mbox eplb__mbox_t;
/* Creates the segment `name` (a copy is kept). NULL name or a rank other
 * than 0: no mailbox (*out NULL). */
eplb_status_t eplb__mbox_open(const char *name, const eplb__geom_t *g, eplb__mbox_t **out);
/* Closes and unlinks the segment. NULL-safe. */
void eplb__mbox_close(eplb__mbox_t *mb);
/* 1 when a plan newer than the last taken is posted. */
bool eplb__mbox_plan_waiting(eplb__mbox_t *mb);
/* Publishes the window sum (errors are logged, not returned: the daemon is
 * advisory and serving must not stop). */
void eplb__mbox_publish(eplb__mbox_t *mb, const eplb__stats_t *st);
/* Takes the posted plan (*out), checked against the geometry; an invalid
 * plan is an error and is not taken again: the daemon posts a new epoch. */
eplb_status_t eplb__mbox_take_plan(eplb__mbox_t *mb, const eplb__geom_t *g, eplb_plan_t **out);
/* Acknowledges the plan taken last, once it is applied. NULL-safe. */
void eplb__mbox_ack(eplb__mbox_t *mb);

/* ---- rebalance.c: the migration part ------------------------------------- */

/* Rank 0's planning thread, the migration diff, its rounds, the expert
 * weight buffers and the testing knobs: its state is its own (opaque);
 * step_end runs it, and it reaches the live plan, the device and the other
 * parts through the runtime. */
typedef struct eplb__rebal eplb__rebal_t;
eplb_status_t eplb__rebal_create(const eplb__geom_t *g, eplb__rebal_t **out);
/* Joins the planning thread and frees. NULL-safe. */
void eplb__rebal_destroy(eplb__rebal_t *rb);
/* step_end's: the replan / migration state machine. */
eplb_status_t eplb__rebalance_step(eplb_runtime_t *rt);
/* Planning, migrating, or a mailbox plan agreed and not applied yet. */
bool eplb__rebal_busy(const eplb__rebal_t *rb);
bool eplb__rebal_migrating(const eplb__rebal_t *rb);
/* Every rank: whether the period's all-reduce says a mailbox plan waits. */
void eplb__rebal_set_mailbox(eplb__rebal_t *rb, bool ready);
void eplb__rebal_set_weights(eplb__rebal_t *rb, uint32_t layer, uint32_t slot, void *ptr,
                             size_t bytes);
/* Testing: the layer's next transfer fails; the next round with sends
 * posts them ms late. */
void eplb__rebal_inject_failure(eplb__rebal_t *rb, uint32_t layer);
/* The registered buffer of (layer, local slot), NULL if none; an armed
 * injected failure of `layer` (consumed); the armed stall in ms (consumed):
 * continuous re-placement's moves use the same buffers and test hooks. */
void *eplb__rebal_weights(const eplb__rebal_t *rb, uint32_t layer, uint32_t slot);
bool eplb__rebal_take_failure(eplb__rebal_t *rb, uint32_t layer);
uint32_t eplb__rebal_take_stall(eplb__rebal_t *rb);
void eplb__rebal_inject_stall(eplb__rebal_t *rb, uint32_t ms);
/* Testing: the next copy of `layer` this rank receives from another rank
 * (continuous re-placement) is damaged on arrival; taken (consumed) when
 * the move is prepared. */
void eplb__rebal_inject_corruption(eplb__rebal_t *rb, uint32_t layer);
bool eplb__rebal_take_corruption(eplb__rebal_t *rb, uint32_t layer);
/* Mean over layers of the live plan's balancedness on loads [L][E]. */
double eplb__runtime_balancedness(const eplb_runtime_t *rt, const double *loads);

/* ---- live.c: the live plan and its dispatch tables ---------------------- */
/* ESHAPE (the detail starts with `what`) unless plan p has this
 * deployment's shape: layers, experts, GPUs, nodes, slots per GPU. */
eplb_status_t eplb__live_plan_fits(const eplb__geom_t *g, const eplb_plan_t *p, const char *what);

/* The live plan (placement, shares, this node's row of the node shares)
 * and its tables, double-buffered by layer: a switch builds the idle table
 * and flips. Its state is its own (opaque): only live.c writes it. */
typedef struct eplb__live eplb__live_t;
/* local_first: cfg.local_first, the tables' rule. */
eplb_status_t eplb__live_create(const eplb__geom_t *g, int local_first, eplb__live_t **out);
/* NULL-safe. */
void eplb__live_destroy(eplb__live_t *lv);
/* The initial plan (NULL: a balanced plan of uniform loads) goes live with
 * this node's row of its node shares, and every layer's table is built. */
eplb_status_t eplb__live_load(eplb__live_t *lv, const eplb_plan_t *initial);
/* h extended by the live plan (ranks must agree on it); NULL lv: h. */
uint64_t eplb__live_hash(const eplb__live_t *lv, uint64_t h);
/* The layer's placement and shares [R]; layers follow each other, so layer
 * 0's are the whole plan [L][R]. */
const int32_t *eplb__live_p2l(const eplb__live_t *lv, uint32_t layer);
const double *eplb__live_share(const eplb__live_t *lv, uint32_t layer);
/* This node's row of the layer's node shares [R]; NULL when it has none. */
const double *eplb__live_node_share(const eplb__live_t *lv, uint32_t layer);
/* The layer's table that map reads. */
const eplb__dtab_t *eplb__live_table(const eplb__live_t *lv, uint32_t layer);
/* The layer's two tables (which: 0, 1) and the one map reads: the device
 * mirrors both buffers and the epoch (tests/kernels compare with them). */
const eplb__dtab_t *eplb__live_buffer(const eplb__live_t *lv, uint32_t layer, uint32_t which);
uint32_t eplb__live_active(const eplb__live_t *lv, uint32_t layer);
/* For tests that build their own table in place of the live one. */
eplb__dtab_t *eplb__live_table_rw(eplb__live_t *lv, uint32_t layer);
/* Builds the layer's idle table for p2l/share [R] (node_share [R], or NULL
 * for the global shares) and returns it; it goes live at eplb__live_flip. */
eplb__dtab_t *eplb__live_build_idle(eplb__live_t *lv, uint32_t layer, const int32_t *p2l,
                                    const double *share, const double *node_share);
void eplb__live_flip(eplb__live_t *lv, uint32_t layer);
/* A layer switch: p2l/share [R] become the layer's plan, without node
 * shares, and its table built idle goes live. */
void eplb__live_switch(eplb__live_t *lv, uint32_t layer, const int32_t *p2l, const double *share);
/* The layer's slots out of service [R] (continuous re-placement in place:
 * their weights are being written), NULL when none is; set/clear one. The
 * per-batch split routes around them; their share in a switch must be 0. */
const uint8_t *eplb__live_oos(const eplb__live_t *lv, uint32_t layer);
void eplb__live_set_oos(eplb__live_t *lv, uint32_t layer, uint32_t slot, bool out);

/* ---- continuous.c: continuous re-placement (cfg.continuous_window) ------ */

typedef struct eplb__cont eplb__cont_t;
/* *out NULL when the config has no continuous re-placement. */
eplb_status_t eplb__cont_create(const eplb_runtime_config_t *cfg, const eplb__geom_t *g,
                                eplb__cont_t **out);
/* Joins the planning thread and cancels transfers in flight. NULL no-op. */
void eplb__cont_destroy(eplb__cont_t *c, eplb__comm_t *comm);
/* The live placement at create. */
void eplb__cont_load(eplb__cont_t *c, const eplb__live_t *live);
/* step_end's part (collective): settle the moves in flight, start the next. */
eplb_status_t eplb__cont_step(eplb_runtime_t *rt);
/* A set of moves is in flight (its buffers are being read or written). */
bool eplb__cont_busy(const eplb__cont_t *c);
/* In-step landing, through the per-batch split's all-reduce of a layer
 * call: whether the layer has moves in flight not landed yet (the same on
 * every rank), whether this rank's transfers of them are done (polls), and
 * landing them once every rank's are (before the call's split). */
bool eplb__cont_layer_moving(const eplb__cont_t *c, uint32_t layer);
uint32_t eplb__cont_layer_done(eplb_runtime_t *rt, uint32_t layer);
void eplb__cont_land_layer(eplb_runtime_t *rt, uint32_t layer);

/* ---- the runtime core: runtime.c, record.c ------------------------------- */

struct eplb_runtime {
  eplb_runtime_config_t cfg;
  eplb__geom_t g; /* the parts get &g */
  eplb__comm_t *comm;
  char *trace_path;
  eplb_trace_writer_t *trace; /* rank 0, cfg.trace_path: global steps (+ row sample) */

  /* The parts (NULL where not used on this rank or by this config). */
  eplb__live_t *live; /* the live plan and its dispatch tables */
  eplb__stats_t *stats;
  eplb__sample_t *sample;
  eplb__mbox_t *mbox;
  eplb__rebal_t *rb;
  eplb__cont_t *cont;       /* cfg.continuous_window; NULL: off */
  eplb__counter_t *counter; /* cfg.count_thread; NULL: record counts inline */
  bool split_on;            /* cfg.split_per_batch resolved */
  eplb__batch_t batch;      /* its state (batch.c's alone) */
  eplb__device_t *dev;      /* cfg.device, NULL for none */
  bool dev_any;             /* a device on some rank (agreed at create) */
  eplb__seq_t seq;          /* the collective calls' check (sequence.c) */
  eplb__wtab_t *wt;         /* the registered weights (weights.c) */

  eplb_runtime_metrics_t m; /* every part adds to its own counters */
};

/* A layer switched plans: its fresh per-batch shares belong to the old
 * placement. Inline, so that the movers (rebalance.c, continuous.c) need not
 * call into batch.c, which calls them. */
static inline void eplb__batch_reset_layer(eplb_runtime_t *rt, uint32_t layer) {
  rt->batch.state[layer] = 0;
}

/* For tests (eplb__counter_hold): the counting thread; NULL without one. */
eplb__counter_t *eplb__runtime_counter(const eplb_runtime_t *rt);

/* tally.c: a recorded call's tokens, metrics and sampled rows; with its
 * counts (add [E], ids the call's when it has them for the sample). */
void eplb__runtime_recorded(eplb_runtime_t *rt, uint32_t layer, const int32_t *ids,
                            uint32_t num_tokens);
void eplb__runtime_add_counts(eplb_runtime_t *rt, uint32_t layer, const uint32_t *add,
                              const int32_t *ids, uint32_t num_tokens);
/* step_end's close of the statistics: the step, and the period's
 * all-reduce, trace and mailbox publication when it completes. */
eplb_status_t eplb__runtime_close_step(eplb_runtime_t *rt);
/* step_end of a step with a call out of step: its counts, queued counts and
 * rows are forgotten, on every rank alike (the step is not closed). */
void eplb__runtime_drop_step(eplb_runtime_t *rt);

#endif
