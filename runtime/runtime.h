/* runtime/runtime.h — internal header of the runtime module. */
#ifndef EPLB_RUNTIME_INTERNAL_H
#define EPLB_RUNTIME_INTERNAL_H

#include "core/core.h"
#include "planner/planner.h"
#include "eplb/model.h"
#include "eplb/runtime.h"
#include "eplb/shm.h"
#include "eplb/split.h"
#include "eplb/trace.h"

#include <pthread.h>
#include <stdbool.h>

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

/* What became of one transfer (eplb__comm_exchange's fail[]). */
enum { EPLB__XFER_OK = 0, EPLB__XFER_FAILED = 1, EPLB__XFER_TIMEOUT = 2 };

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
bool eplb__map_and_pack(const eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                        uint32_t num_tokens, uint64_t token_base, int32_t *out_slots, uint8_t *pack,
                        uint32_t width, uint32_t *top);

/* ESHAPE (the detail starts with `what`) unless plan p has this
 * deployment's shape: layers, experts, GPUs, nodes, slots per GPU. */
eplb_status_t eplb__runtime_plan_fits(const eplb_runtime_t *rt, const eplb_plan_t *p,
                                      const char *what);
/* The scalar map (any table) of ids already checked to be < E. */
void eplb__map_scalar(const eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
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
} eplb__batch_t;

eplb_status_t eplb__batch_alloc(eplb_runtime_t *rt);
/* Copies the decode objective (checked config; NULL model: none). */
void eplb__batch_decode_setup(eplb_runtime_t *rt, const eplb_model_desc_t *model,
                              const eplb_gpu_desc_t *gpu);
void eplb__batch_free(eplb_runtime_t *rt);
/* A layer switched plans: its fresh shares belong to the old placement. */
void eplb__batch_reset_layer(eplb_runtime_t *rt, uint32_t layer);
/* One collective record (out_slots NULL), route, or record_counts (counts
 * non-NULL, counts_err its own check) call with the per-batch split. */
eplb_status_t eplb__batch_call(eplb_runtime_t *rt, const char *what, uint32_t layer,
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
  /* The kernels (eplb/kernels.h contracts). */
  eplb_status_t (*count)(void *impl, const eplb_cuda_ring_t *ring, uint32_t layer,
                         const int32_t *ids, uint32_t num_tokens, uint32_t topk, void *stream);
  eplb_status_t (*step)(void *impl, const eplb_cuda_ring_t *ring, void *stream);
  eplb_status_t (*map)(void *impl, const eplb_cuda_dispatch_t *d, uint32_t layer,
                       const int32_t *ids, uint32_t num_tokens, uint32_t topk, uint64_t token_base,
                       int32_t *out, uint32_t *bad, void *stream);
  eplb_status_t (*flip)(void *impl, const eplb_cuda_dispatch_t *d, void *stream);
  /* The per-batch split on the device (eplb_cuda_split) and the table
   * build from its shares into buffer `which` (eplb_cuda_table_build). */
  eplb_status_t (*split)(void *impl, const int32_t *phy2log, uint32_t num_experts,
                         uint32_t num_gpus, uint32_t slots_per_gpu, const uint32_t *counts,
                         double *share, double *t_star, uint32_t *status, void *workspace,
                         uint32_t max_iterations, void *stream);
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

/* ---- the runtime ----------------------------------------------------------- */

typedef struct eplb__weights {
  void *ptr;
  size_t bytes;
} eplb__weights_t;

struct eplb_runtime {
  eplb_runtime_config_t cfg;
  char *trace_path;
  uint32_t L, E, k, S, P, K, R, rank, node;
  size_t LE;
  eplb__comm_t *comm;

  /* live plan and dispatch tables (double-buffered by layer) */
  int32_t *phy2log; /* [L][R] */
  double *share;    /* [L][R] */
  /* This node's row of the live plan's per-source-node shares, for layers
   * with has_ns set (plans of the locality policy); the runtime's own plans
   * and eplbd's mailbox plans carry none, so installing one clears the flag. */
  double *node_share; /* [L][R] */
  uint8_t *has_ns;    /* [L] */
  uint64_t ns_hash;   /* fnv of the initial plan's node shares (all nodes), 0 if none */
  eplb__dtab_t (*tab)[2];
  uint8_t *active;          /* [L] */
  eplb__weights_t *weights; /* [L][S] */

  /* statistics */
  uint32_t *pending;     /* [period][LE + 1]: local counts, last = tokens */
  uint32_t *step_tokens; /* [L] tokens recorded per layer this step */
  uint32_t pending_n;    /* steps closed into pending */
  uint32_t *ring;        /* [W][LE] global per-step counts */
  uint64_t *wsum;        /* [LE] */
  double *ema;           /* [LE] */
  uint64_t ring_n;       /* global steps pushed */
  eplb_trace_writer_t *trace;
  eplb__counter_t *counter; /* NULL: record counts inline */

  /* planning (rank 0's thread) */
  pthread_t thread;
  bool thread_running;
  uint64_t apply_step;
  double *plan_loads; /* [LE] snapshot */
  uint8_t *next_flag; /* [L] layer switches */
  int32_t *next_p2l;  /* [L][R] */
  double *next_share; /* [L][R] */
  eplb_status_t plan_status;
  double plan_seconds;

  /* migration in progress */
  eplb__migration_t *moves;
  size_t nmoves, moves_cap;
  uint32_t *mig_layers; /* layers to switch, in order */
  uint32_t *mig_round;  /* round of each */
  size_t *mig_off;      /* [L+1] moves of the i-th layer: mig_off[i] .. mig_off[i+1] */
  bool planning;        /* a plan is being computed (every rank knows) */
  uint32_t mig_n, mig_rounds, mig_next_round;
  uint8_t *inject_fail;     /* [L] */
  uint32_t inject_stall_ms; /* the next round with sends posts them this late */
  uint64_t xfer_seq;        /* rounds run (same on every rank) */
  uint64_t *round_fail;     /* [L] per-layer failure flags of a round (all-reduced) */
  uint8_t *staging;
  size_t staging_cap;
  uint32_t *slot_gpu; /* [R] s / S: the migration's geometry with batch.gpu_node */
  uint32_t *mig_used; /* [R] scratch of the diff */

  /* row sample: [period][1 + n*L*k] (rows complete, rows [n][L][k]) */
  uint32_t *sample, *sample_fill; /* sample_fill [L]: rows taken this step */
  uint32_t *sample_all;           /* rank 0: [P][period][block] */
  uint16_t *row_ids;              /* rank 0: [P*n][L][k] */
  int32_t *row_src;               /* rank 0: [P*n] */

  /* shared memory with eplbd (rank 0 only) */
  char *shm_name;
  eplb_shm_t *shm;
  double *shm_counts;    /* [LE] */
  uint64_t shm_seen;     /* mailbox epoch taken last */
  uint64_t shm_applying; /* epoch being migrated, acknowledged when done */
  bool mailbox_ready;    /* every rank: a posted plan is to be applied */

  bool split_on;       /* cfg.split_per_batch resolved */
  eplb__batch_t batch; /* its state */

  eplb__device_t *dev; /* cfg.device, NULL for none */

  eplb_runtime_metrics_t m;
};

/* stats.c */
eplb_status_t eplb__stats_alloc(eplb_runtime_t *rt);
/* 1 when every ids[i], taken as unsigned, is < E (so negatives fail). */
bool eplb__ids_below(const int32_t *ids, size_t n, uint32_t E);
/* The error (EPLB_ERANGE, its detail naming the call, token and position)
 * of a call `what` whose ids [n] hold one out of [0, E). */
eplb_status_t eplb__bad_ids(const char *what, const eplb_runtime_t *rt, uint32_t layer,
                            const int32_t *ids, size_t n);
eplb_status_t eplb__stats_step_end(eplb_runtime_t *rt);
/* Adds a call's counts add [E] to the layer's step, with its num_tokens
 * (and the row sample from ids, when given). */
void eplb__stats_add(eplb_runtime_t *rt, uint32_t layer, const uint32_t *add, const int32_t *ids,
                     uint32_t num_tokens);

/* sample.c: whole top-k rows with source ranks (cfg.sample_rows > 0). */
eplb_status_t eplb__sample_alloc(eplb_runtime_t *rt);
void eplb__sample_free(eplb_runtime_t *rt);
void eplb__sample_record(eplb_runtime_t *rt, uint32_t layer, const int32_t *ids,
                         uint32_t num_tokens);
/* Stores the count of complete rows of the step being closed. */
void eplb__sample_close_step(eplb_runtime_t *rt);
/* Gathers nsteps closed blocks to rank 0 (collective). */
eplb_status_t eplb__sample_gather(eplb_runtime_t *rt, uint32_t nsteps);
/* Rank 0: fills step's rows from gathered step s of nsteps. */
void eplb__sample_rows(eplb_runtime_t *rt, uint32_t s, uint32_t nsteps, eplb_trace_step_t *step);

/* mailbox.c: the shared-memory segment with eplbd (rank 0). */
eplb_status_t eplb__shm_open(eplb_runtime_t *rt);
void eplb__shm_close(eplb_runtime_t *rt);
/* 1 when a plan newer than the last taken is posted and the runtime is idle. */
bool eplb__shm_plan_waiting(eplb_runtime_t *rt);
/* Publishes the window sum (errors are logged, not returned: the daemon is
 * advisory and serving must not stop). */
void eplb__shm_publish(eplb_runtime_t *rt);
/* Rank 0: reads the posted plan into next_p2l/next_share/next_flag and sets
 * plan_status (an invalid plan is an error; nothing switches). */
void eplb__shm_take_plan(eplb_runtime_t *rt);
void eplb__shm_ack(eplb_runtime_t *rt);

/* rebalance.c: the replan / migration state machine run by step_end. */
eplb_status_t eplb__rebalance_step(eplb_runtime_t *rt);
void eplb__rebalance_stop(eplb_runtime_t *rt);
/* Mean over layers of the live plan's balancedness on loads [L][E]. */
double eplb__runtime_balancedness(const eplb_runtime_t *rt, const double *loads);

#endif
