/* eplb/runtime.h — the embedded runtime that a serving stack links. It
 * needs only eplb/common.h; the device backend is eplb/runtime_device.h.
 *
 * A serving loop, one process per GPU ("rank"):
 *
 *   eplb_runtime_config_t cfg;
 *   eplb_runtime_config_default(&cfg);
 *   cfg.num_layers = L, cfg.num_experts = E, cfg.topk = K;
 *   cfg.slots_per_rank = S, cfg.rank = r, cfg.world_size = P;
 *   cfg.ranks_per_node = 8;
 *   cfg.comm.kind = EPLB_COMM_MPI, cfg.comm.mpi_comm = &comm;
 *   cfg.expert_bytes = B;                     (so that weights can move)
 *   eplb_runtime_create(&cfg, NULL, &rt);     (collective)
 *   for each layer l and local slot s:
 *     eplb_runtime_register_weights(rt, l, s, ptr, B);
 *     (or eplb_runtime_register_tensors for w13, w2 and scales)
 *   every step:
 *     for each MoE layer l:
 *       eplb_runtime_route(rt, l, topk_ids, n, token_base, slots);
 *       send token copy i to global slot slots[i], on rank slots[i] / S
 *     eplb_runtime_step_end(rt);              (collective)
 *   eplb_runtime_destroy(rt);                 (collective)
 *
 * Every call returns an eplb_status_t; after an error the runtime keeps
 * serving with the placement it has. The rest of this header: what each
 * call does, the config, state and metrics, MPI helpers.
 *
 * Per serving step the application (one process per GPU, "rank"):
 *   1. calls eplb_runtime_record() (or _record_counts) with the router's
 *      top-k choices of each MoE layer,
 *   2. calls eplb_runtime_map() to turn logical expert ids into physical
 *      slots (where to dispatch each token copy),
 *   3. calls eplb_runtime_step_end() at the step boundary.
 * eplb_runtime_route does 1 and 2 in one call. With a device backend
 * (cfg.device, eplb/runtime_device.h) the ids stay in device memory:
 * eplb_runtime_device_record / _map / _route enqueue on the caller's stream.
 * With more than one rank,
 * record, record_counts and route are by default collective: the batch's
 * counts are all-reduced and the layer is re-split exactly for this batch
 * before its tokens are mapped (cfg.split_per_batch).
 * step_end closes the step's statistics, all-reduces them across ranks
 * periodically, and every `interval_steps` steps plans a new placement on a
 * background thread and migrates expert weights between the ranks' registered
 * buffers, switching a few layers per step so serving never stops.
 *
 * Model: the cluster has world_size ranks (one rank = one GPU), each owning
 * slots_per_rank expert slots per layer; global slot s belongs to rank
 * s / slots_per_rank. Rank r is on node r / ranks_per_node. Plans use the
 * layout of eplb/plan.h with G = world_size, N = world_size / ranks_per_node
 * and R = slots_per_rank * world_size.
 *
 * Steps: every rank calls step_end the same number of times (it is a
 * collective call whenever the communicator has more than one rank). A
 * "global step" is one step's counts summed over all ranks.
 *
 * Communicators: NONE (one process, world_size 1), MPI (the application's
 * MPI_Comm; host buffers; the runtime duplicates the communicator at create
 * and frees its duplicate at destroy), NCCL (the application's ncclComm_t
 * and stream: the runtime splits its own communicator from it, non-blocking,
 * under a watchdog that aborts it after EPLB_NCCL_TIMEOUT_MS (default 60 s);
 * see docs/gpu.md; EPLB_EUNSUPPORTED in builds without NCCL). MPI must be initialised by the
 * application (at least MPI_THREAD_FUNNELED: the runtime calls MPI only from the threads that call
 * create/step_end/destroy; the planning thread never calls MPI).
 *
 * Units: counts are token copies (one per token per chosen expert); the
 * window is the sum of the last window_steps global steps; bytes are bytes.
 * record, record_counts and map never allocate; step_end allocates only when
 * a plan is applied or a migration round runs.
 *
 * Thread rules: a runtime is driven by one thread at a time (the serving
 * thread). eplb_runtime_map() and the getters only read the runtime, so
 * several threads may call them concurrently with each other, but not
 * concurrently with record, step_end, register_weights or destroy. The
 * planner runs on an internal thread that never touches what map reads.
 */
#ifndef EPLB_RUNTIME_H
#define EPLB_RUNTIME_H

#include "eplb/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum eplb_comm_kind {
  EPLB_COMM_NONE = 0, /* no communicator: world_size 1, or a standalone rank of a larger
                         world (benchmarks, simulation): every all-reduce is the identity
                         (this rank's counts stand for the world's), so it cannot migrate
                         (interval_steps, expert_bytes and shm_name must be 0) */
  EPLB_COMM_MPI = 1,  /* mpi_comm points at the application's MPI_Comm */
  EPLB_COMM_NCCL = 2  /* nccl_comm points at an ncclComm_t (a NULL ncclComm_t with world
                         size 1: the runtime creates one), cuda_stream at a cudaStream_t
                         (NULL: the default stream) */
} eplb_comm_kind_t;

/* The device backend: where the decode step's record and map run (see
 * "Device backend" below and docs/gpu.md). */
typedef enum eplb_device_kind {
  EPLB_DEVICE_NONE = 0,    /* host memory only (record, map, route): the default */
  EPLB_DEVICE_CUDA = 1,    /* a CUDA device: the eplb_runtime_device_* calls take device
                              pointers and enqueue on `stream` (EPLB_EUNSUPPORTED at create
                              in builds without CUDA, EPLB_ENODEVICE without a device) */
  EPLB_DEVICE_EMULATED = 2 /* host memory standing for device memory, the kernels' CPU
                              references as kernels, operations run at once; its events
                              and uploads can be made late or failing
                              (eplb_runtime_device_inject): the device path in CI */
} eplb_device_kind_t;

typedef struct eplb_runtime_device {
  eplb_device_kind_t kind; /* default NONE */
  int32_t ordinal;         /* CUDA: the device (made current around each CUDA call and
                              restored, so the caller's current device is untouched) */
  void *stream;            /* CUDA: the cudaStream_t value (not its address); NULL = the
                              legacy default stream. Every device call enqueues on it. */
  uint32_t window;         /* steps whose counts may be in flight: rows of the device ring
                              and of the pinned host copy, >= 1, <= 1024 (default 4) */
} eplb_runtime_device_t;

typedef struct eplb_runtime_comm {
  eplb_comm_kind_t kind; /* default NONE */
  void *mpi_comm;        /* MPI: address of an MPI_Comm (borrowed; must outlive create) */
  void *nccl_comm;       /* NCCL: address of an ncclComm_t */
  void *cuda_stream;     /* NCCL: address of a cudaStream_t */
} eplb_runtime_comm_t;

/* When and how the runtime replans. */
typedef struct eplb_runtime_policy {
  uint32_t interval_steps;        /* replan every N steps; 0 = never (default 0) */
  uint32_t window_steps;          /* W: global steps in the statistics window (default 32) */
  double ema_decay;               /* d in [0, 1): ema = d * ema + (1 - d) * counts (default 0.9) */
  double gain_threshold;          /* a layer switches only if the new plan raises its balancedness
                                     on the window by at least this much (default 0.01) */
  uint32_t layers_per_step;       /* layers switched at one step boundary, >= 1 (default 4) */
  uint32_t move_budget;           /* slots (all ranks) whose expert may change per replan;
                                     0 = unlimited (default 0). Layers with the largest gain first. */
  uint32_t allreduce_period;      /* all-reduce the statistics every N steps, >= 1 (default 1);
                                     must divide interval_steps when that is not 0 */
  uint32_t plan_lag_steps;        /* steps between starting a plan and applying it, >= 1
                                     (default 1): every rank takes the plan at the same step */
  eplb_plan_policy_t plan_policy; /* default balanced; incremental re-plans from the live
                                     plan (eplb/plan.h), moving far fewer slots; decode needs
                                     split_model and split_gpu (the deployment it models),
                                     and its layers switch on modelled step time */
  uint64_t staging_bytes;         /* staging memory per rank for a migration round (default 1 GiB);
                                     a round holds at least one layer whatever the budget */
} eplb_runtime_policy_t;

/* cfg.continuous_window's default: continuous re-placement (window 1)
 * wherever the deployment can run it (see the field). */
#define EPLB_CONTINUOUS_AUTO UINT32_MAX

typedef struct eplb_runtime_config {
  uint32_t struct_size;    /* the caller's sizeof (common.h, "Struct sizes") */
  uint32_t num_layers;     /* L >= 1 (<= EPLB_TRACE_MAX_LAYERS) */
  uint32_t num_experts;    /* E >= 1 (<= EPLB_TRACE_MAX_EXPERTS) */
  uint32_t topk;           /* k >= 1 (<= EPLB_TRACE_MAX_TOPK) */
  uint32_t slots_per_rank; /* S >= 1, S * world_size >= E */
  uint32_t rank;           /* this process, < world_size (must match the communicator) */
  uint32_t world_size;     /* ranks (= GPUs), >= 1 */
  uint32_t ranks_per_node; /* >= 1, divides world_size (default 1) */
  int local_first;         /* 1 (default): map prefers replicas on the rank's node */
  uint64_t expert_bytes;   /* size of one expert's weights; 0: no weights are moved
                              (plans switch without migration) */
  const char *trace_path;  /* optional: rank 0 appends every global step's counts to this
                              native trace (created if missing); NULL = none. Copied. */
  eplb_runtime_comm_t comm;
  eplb_runtime_policy_t policy;
  /* Fields added later stay at the end (bindings mirror this layout). */
  uint32_t sample_rows; /* <= 65535: whole top-k rows (every layer of one token) kept per
                           rank per step for co-activation: the first sample_rows tokens
                           of each layer's record calls (record, not record_counts; the
                           same token order in every layer), gathered to rank 0 with
                           their source rank and stored in the trace's rows. Rows with
                           an id twice in a layer are dropped. 0 = none (default). */
  /* optional: rank 0 creates this POSIX shared-memory segment (eplb/shm.h,
   * "/name", mode 0600; EPLB_EBUSY at create if it exists), publishes the window
   * sum into it after every all-reduce, and takes plans that eplbd posts to its
   * mailbox: checked at each all-reduce while no plan or migration is in
   * progress, a new epoch is applied like the runtime's own plans (every layer
   * that differs switches; no gain threshold or move budget) and acknowledged
   * once migrated. A plan of the wrong shape is rejected with a log line and
   * not retried. Set interval_steps 0 to leave planning to the daemon. The
   * name is removed at destroy. Copied. NULL = none. */
  const char *shm_name;
  /* Deadline of a migration round's transfers in ms, from the moment the rank starts
   * them (default 60000; 0 = wait forever). With MPI the round's requests are polled
   * against it; at expiry what is pending is cancelled and the round's layers are
   * agreed failed on every rank like any failed transfer: they keep their old plan
   * and step_end returns EPLB_ETIMEOUT. Only staging buffers are ever received into,
   * so no live slot is half written. NCCL rounds are bounded by the NCCL watchdog
   * instead (EPLB_NCCL_TIMEOUT_MS, which aborts the communicator). Must agree across
   * ranks (part of create's check). */
  uint32_t transfer_timeout_ms;
  /* 1: record only validates the ids and queues them (packed to 1 or 2 bytes
   * each) for an internal thread that counts them; step_end counts what is
   * still queued itself before the step closes, so the step's counts are
   * exact and the same as with 0. Takes the counting (about a cycle per id)
   * off the serving thread for hosts with a spare core; the serving thread
   * makes no system call for it (the thread polls, backing off to 1 ms when
   * idle). A call that finds the queue full (1 MiB: the thread is steps
   * behind) counts inline rather than wait. Needs E <= 65536. 0 = count in
   * record (default). */
  uint32_t count_thread;
  /* The per-batch split (LPLB-like, exact): -1 (default) on when world_size > 1,
   * 0 off (map by the plan's static shares), 1 on. When on, record, record_counts
   * and route become COLLECTIVE calls: every rank calls them for the same layers
   * in the same order (with its own tokens; 0 tokens is fine), and each call
   *  1. counts this rank's ids of the call per expert;
   *  2. all-reduces them over the communicator as per-node counts ([nodes][E]
   *     u32, one call) with a check word (layer, E) and an error flag;
   *  3. splits the batch's global counts over the layer's live placement
   *     (eplb_split_solve, warm-started per layer): T*, the optimum of the
   *     busiest GPU; with local_first and more than one node, then the
   *     locality stage (eplb_split_solve_local): among splits whose busiest
   *     GPU is <= T* (1 + split_tolerance), the fewest tokens leaving their
   *     node, as per-source-node shares. Every rank computes the same shares
   *     from the same inputs, bit for bit;
   *  4. route maps the call's ids by exact quotas of those shares: this
   *     rank's c tokens of expert e go c * share to each candidate, rounded
   *     by systematic rounding with a phase hashed from (token_base, layer,
   *     e), so every replica gets its quota within one token per rank (not
   *     within sampling error). record and record_counts rebuild the layer's
   *     dispatch table from the fresh shares instead, and a following
   *     eplb_runtime_map samples it as usual.
   * The fresh shares replace the plan's shares (and its node shares) for
   * that layer's map until the next call (eplb_runtime_layer_split reads
   * them). The counting thread is not used for these calls (the counts are
   * needed at once). Errors are agreed: an id out of range on any rank keeps
   * the previous shares on every rank (the bad rank gets EPLB_ERANGE and
   * counts nothing); a check-word mismatch (ranks calling different layers)
   * gives EPLB_ESHAPE on every rank, nothing counted or mapped; a split that
   * fails keeps the previous shares (metrics.splits_failed, a warning) and
   * serving goes on. Must agree across ranks. */
  int32_t split_per_batch;
  double split_tolerance; /* the locality stage's slack, in [0, 1] (default 0.01) */
  /* The device backend (EPLB_DEVICE_NONE by default: host only; see
   * "Device backend" below). With a device, split_per_batch on needs one node
   * or local_first 0 (the device split has no locality stage), and a cuda
   * device with a communicator needs comm kind NCCL (else EPLB_EUNSUPPORTED
   * at create). */
  eplb_runtime_device_t device;
  /* The per-batch split's decode objective (eplb/model.h; both NULL by default: token
   * balance only). With a model and a GPU (copied at create; both or neither, else
   * EPLB_EINVAL; checked like eplb_model_check / eplb_gpu_check), each per-batch split
   * of step 3 above, after the exact split (T*), runs eplb_decode_split's search from it
   * (eplb_decode_split_refine) on the batch's global counts, with a2a_us_per_token =
   * eplb_model_a2a_us_per_token(model, gpu, world_size, ranks_per_node) and launch_us
   * the GPU's, and keeps the decode shares only where their modelled layer time
   * (eplb_decode_split_time: the slowest GPU's weight reads, compute, launch and
   * all-to-all receive) is strictly below the token-balanced split's; else the layer
   * keeps the T* shares (metrics.splits_decode counts the splits that kept decode
   * shares). In memory-bound decode this gathers a light expert's tokens on fewer
   * replicas (fewer weight reads). Every rank computes the same shares bit for bit.
   * The decode objective has no locality stage: with more than one node it needs
   * local_first 0 (else EPLB_EINVAL at create). The device split (device_record and
   * _route) stays token-balanced; the host calls use the objective. Part of create's
   * agreement across ranks. */
  const struct eplb_model_desc *split_model;
  const struct eplb_gpu_desc *split_gpu;
  /* 1: the host's per-batch splits (record, record_counts and route with
   * split_per_batch, and eplb_runtime_split) are made in whole tokens by the
   * device's solver (the CPU build of eplb__cuda_split, kernels/split_math.h)
   * instead of eplb_split_solve: the same T*, but an integer number of
   * tokens per replica (the busiest GPU gets exactly ceil(T*) tokens; share =
   * tokens / the expert's count, 1/c on each of c replicas of an expert
   * without tokens). Optimal splits are rarely unique and the two solvers
   * pick different ones, so only this makes a host runtime's shares, and
   * the slots route gives, bit-identical to a device runtime's (ranks that
   * mix host and device routing need it). Needs one node or local_first 0
   * (the device solver has no locality stage) and no split_model (the
   * decode objective would move the shares off the device's): EPLB_EINVAL
   * at create otherwise. A split that does not converge in 32 Newton
   * max-flows (the device's budget) fails like any other: the layer keeps
   * its plan's shares. Split + table build costs about 1.3 times the
   * fractional path's (eplb bench runtime --split-per-batch: 2 to 3.5 us
   * more per layer at 256 experts on 32 GPUs x 9 slots). With a device
   * backend and split_per_batch on (and no split_model) it is always on,
   * whatever this says: the device splits in whole tokens, and the
   * runtime's own host splits then agree with it. 0 (default): fractional,
   * eplb_split_solve. Must agree across ranks (part of create's check).
   * Read at create only, like the rest of the config. */
  uint32_t split_whole_tokens;
  /* Continuous re-placement (eplb/plan.h, eplb_plan_step_moves):
   * EPLB_CONTINUOUS_AUTO (the default): W = 1 when every rank can run it (several
   * ranks on MPI with the per-batch split, no device on any rank, no shm_name, no
   * interval_steps; agreed at create), else off (a device takes it explicitly: below). 0: off. W >=
   * 1: at every step_end the runtime moves a few slots towards the sum of the last W global steps'
   * counts (W <= policy.window_steps), within `continuous`'s budget (slots, or bytes with
   * expert_bytes, that each rank receives per step; at most max_per_layer slots a layer; only moves
   * whose gain pays move_weight). Every rank applies the same moves (rank 0 chooses them and
   * broadcasts them). A move's weights are copied from a rank holding the expert beside serving:
   * the transfers are posted at step_end and polled (never waited for) while the next step runs. A
   * layer's moves land at the layer's first per-batch call (record, record_counts or route) at
   * which every rank's copies of that layer are done: the call's all-reduce carries one more word
   * for it, so every rank decides alike, and the new experts serve that very call; else at a later
   * call or step_end. While in flight, by default (continuous_in_place 0) the slot still serves its
   * old expert and the copy lands in a staging buffer of this rank (slots_per_gpu buffers of
   * expert_bytes), copied into the slot when the move lands (before the call maps any token). With
   * continuous_in_place 1 the copy lands in the slot itself (no staging memory): the slot carries
   * nothing while in flight (the per-batch split routes around it: eplb_split_solve_in_service;
   * eplb_runtime_layer_plan shows it at its new expert with share 0). A new set of moves starts
   * only when the last one has landed or failed everywhere (step_end agrees on it). A move whose
   * transfer fails or passes transfer_timeout_ms is dropped on every rank: staged, the slot keeps
   * serving its old expert; in place, its weights are lost, so it is copied again once and, failing
   * again, stays out of service (metrics.continuous_abandoned). Serving never stops and nothing
   * maps to a slot whose weights are not whole. With a device on some rank (cfg.device, the device
   * split's settings) copies are staged (continuous_in_place 0: the device's split has no slot out
   * of service) and a set's moves land at step_end only: each rank builds and uploads the layer's
   * next table, the ranks agree on the uploads, and a layer whose upload failed on some rank keeps
   * its old experts on every rank (its moves dropped, step_end EPLB_EDEVICE); the tables then flip
   * on every device for the next step. Needs the per-batch split on, an MPI communicator (or one
   * rank; NCCL not yet), no interval_steps and no shm_name (one planner moves slots at a
   * time); in place not with split_whole_tokens, split_model or a device. EPLB_EINVAL at
   * create otherwise. */
  uint32_t continuous_window;
  uint32_t continuous_lag;     /* 0 (default): rank 0 chooses the moves inside step_end
                                  from the step just closed (the other ranks wait for it at
                                  the broadcast: eplb bench ... figures in ARCHITECTURE.md);
                                  1: on a planning thread, from the counts of the step
                                  before, started a step earlier (no wait, a step staler) */
  int32_t continuous_in_place; /* 0 (default): staged copies; 1: in place */
  eplb_plan_step_options_t continuous;
} eplb_runtime_config_t;

/* Fills *cfg with the defaults above (shape fields 0: the caller must set
 * them; world_size 1, ranks_per_node 1, rank 0). init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_runtime_config_init(eplb_runtime_config_t *cfg, size_t size);
/* The defaults at the caller's sizeof, through eplb_runtime_config_init. */
static inline void eplb_runtime_config_default(eplb_runtime_config_t *cfg) {
  (void)eplb_runtime_config_init(cfg, sizeof *cfg);
}

typedef struct eplb_runtime eplb_runtime_t;

/* Creates a runtime. Collective over the communicator: every rank calls it
 * with the same config (except `rank`) and the same initial plan; the
 * runtime all-reduces a hash of both and, on any mismatch or any rank's
 * invalid config, fails on every rank with EPLB_EINVAL (logged under
 * "runtime", naming the ranks' hashes).
 * initial_plan: borrowed (copied); NULL = a plan from uniform loads with
 * the balanced policy. Its shape must be L x E with G = world_size,
 * N = world_size / ranks_per_node and slots_per_rank slots on every GPU
 * (else EPLB_ESHAPE).
 * Returns EPLB_OK, EPLB_EINVAL (NULL argument, a zero or inconsistent field;
 * the detail names it), EPLB_ERANGE (a shape above the trace limits),
 * EPLB_ESHAPE, EPLB_EUNSUPPORTED (MPI or NCCL not built in), EPLB_ENODEVICE
 * (NCCL without a GPU), EPLB_ECOMM (an MPI or NCCL call failed), EPLB_ETIMEOUT
 * (the NCCL watchdog fired), EPLB_EIO/EFORMAT/ESHAPE from opening the trace,
 * EPLB_ENOMEM. On success *out is owned by the caller (eplb_runtime_destroy). */
EPLB_API eplb_status_t eplb_runtime_create(const eplb_runtime_config_t *cfg,
                                           const eplb_plan_t *initial_plan, eplb_runtime_t **out);

/* Waits for the planning thread, finishes the trace, frees everything
 * (registered buffers stay the application's). Collective with MPI (frees
 * the duplicated communicator). NULL is a no-op. */
EPLB_API void eplb_runtime_destroy(eplb_runtime_t *rt);

/* Registers this rank's weight buffer of (layer, local slot), slot <
 * slots_per_rank, holding global slot rank * slots_per_rank + slot. bytes
 * must equal cfg.expert_bytes. The buffer is borrowed until destroy (or
 * re-registration) and must hold the expert the current plan puts in that
 * slot; migrations overwrite it at step boundaries (inside step_end) only.
 * Returns EPLB_OK, EPLB_EINVAL (NULL ptr, wrong size: the detail gives
 * both), EPLB_ERANGE (layer or slot), EPLB_ESTATE (a migration is running). */
EPLB_API eplb_status_t eplb_runtime_register_weights(eplb_runtime_t *rt, uint32_t layer,
                                                     uint32_t slot, void *ptr, size_t bytes);

/* One buffer of an expert's weights (e.g. w13, w2, a quantisation scale). */
#define EPLB_RUNTIME_MAX_TENSORS 16u
typedef struct eplb_runtime_tensor {
  void *ptr;
  size_t bytes;
} eplb_runtime_tensor_t;

/* Registers the weights of (layer, local slot) as n tensors (1 <= n <=
 * EPLB_RUNTIME_MAX_TENSORS) whose bytes sum to cfg.expert_bytes: the way
 * serving stacks keep an expert (vLLM, SGLang: w13, w2 and scales of their
 * own shapes). The first registration fixes the layout (n and each
 * tensor's bytes); every other slot, on every rank, must have the same
 * (tensor i of a source lands in tensor i of its destination). Migrations
 * (whole-layer and continuous) move all of a slot's tensors together: they
 * land in staging and are copied into the slot's tensors only once all of
 * them have arrived, so a slot switches only when its whole expert has
 * landed (in place, the slot is out of service meanwhile). With one tensor
 * this is eplb_runtime_register_weights. Host memory (the MPI path); with a
 * device or NCCL only one tensor (EPLB_EUNSUPPORTED). Same borrowing and
 * timing rules as eplb_runtime_register_weights. Returns EPLB_OK,
 * EPLB_EINVAL (NULL, n out of range, an empty tensor, the sum or the layout
 * differs: the detail says which), EPLB_ERANGE, EPLB_ESTATE,
 * EPLB_EUNSUPPORTED. */
EPLB_API eplb_status_t eplb_runtime_register_tensors(eplb_runtime_t *rt, uint32_t layer,
                                                     uint32_t slot,
                                                     const eplb_runtime_tensor_t *tensors,
                                                     uint32_t n);

/* Counts one layer's top-k choices of this step: topk_ids is
 * [num_tokens][topk], ids in [0, E). May be called once per layer per step,
 * or several times (counts add). An id out of range: EPLB_ERANGE (the detail
 * names token and position) and nothing of the call is counted.
 * EPLB_EINVAL for a NULL ids with num_tokens > 0, EPLB_ERANGE for layer >= L. */
EPLB_API eplb_status_t eplb_runtime_record(eplb_runtime_t *rt, uint32_t layer,
                                           const int32_t *topk_ids, uint32_t num_tokens);

/* Adds ready-made counts [E] to a layer's current step (tokens of the step
 * are taken as sum / topk). EPLB_ERANGE if a count would overflow the step's
 * uint32 counter (nothing counted). */
EPLB_API eplb_status_t eplb_runtime_record_counts(eplb_runtime_t *rt, uint32_t layer,
                                                  const uint32_t *counts);

/* Maps top-k ids [num_tokens][topk] of a layer to global physical slots
 * out_slots [num_tokens][topk] (slot s is on rank s / slots_per_rank).
 * Deterministic: the choice depends only on (token_base + i, layer, expert)
 * and the layer's current dispatch table. The expert's candidates are
 *  - the layer's plan has per-source-node shares (eplb_plan_node_share: a
 *    locality plan given to eplb_runtime_create, with one row per node, i.e.
 *    world_size / ranks_per_node rows; other row counts are ignored with a
 *    warning): the replicas with a positive share in the row of this rank's
 *    node (rank / ranks_per_node), weighted by that row (it already encodes
 *    locality, so local_first does not apply); an expert without any falls
 *    back to the cases below. A plan installed later by the runtime's own
 *    rebalancing or from eplbd's mailbox carries no node shares;
 *  - local_first = 1 and the expert has replicas with a positive share on
 *    this rank's node: those replicas, their shares renormalised to sum 1
 *    (tokens stay on the node; the plan's GPU loads assume global shares,
 *    so load shifts towards node-local replicas);
 *  - otherwise: every replica with a positive share, with the plan's shares.
 * A single candidate is taken directly; among several, a 64-bit hash of
 * (token, layer) and the expert pick candidate c with probability share_c
 * (up to 2^-16; Walker's alias method, kernels/dispatch_math.h), so over
 * many tokens each replica receives its share of the expert's tokens within
 * sampling error.
 * token_base is the global index of the call's first token (use the same
 * numbering on every rank so that retries map identically).
 * Returns EPLB_OK, EPLB_ERANGE (layer, or an id: the detail names token and
 * position; out_slots is then unspecified), EPLB_EINVAL (NULL arrays).
 * Cost: about a cycle per id with AVX-512 (E <= 512, at most 128 alias
 * columns of replicated experts per layer, R <= 32768), a few ns otherwise;
 * no allocation. */
EPLB_API eplb_status_t eplb_runtime_map(const eplb_runtime_t *rt, uint32_t layer,
                                        const int32_t *topk_ids, uint32_t num_tokens,
                                        uint64_t token_base, int32_t *out_slots);

/* eplb_runtime_record then eplb_runtime_map of the same ids, for a serving
 * loop that does both (the usual case): same counts, same slots, same
 * thread rules as record, and cheaper than the two calls. With the SIMD map
 * (see map's cost) the map's check of the ids stands for record's; with
 * cfg.count_thread the ids are also read once: the map hands them, packed,
 * to the counting thread as it maps them. An id out of range: EPLB_ERANGE, nothing counted,
 * out_slots unspecified. EPLB_EINVAL for NULL arrays. */
EPLB_API eplb_status_t eplb_runtime_route(eplb_runtime_t *rt, uint32_t layer,
                                          const int32_t *topk_ids, uint32_t num_tokens,
                                          uint64_t token_base, int32_t *out_slots);

/* Closes the step (collective). In order: the step's counts join the
 * pending block; every allreduce_period steps the block is all-reduced and
 * each global step enters the window ring and the EMA (and the trace on rank
 * 0); a running migration executes its next round (transfers, then staging
 * copied into live slots and up to layers_per_step dispatch tables switched);
 * a plan started plan_lag_steps ago is applied (rank 0 broadcasts it) and its
 * first round runs; every interval_steps steps a plan of the window starts on
 * the planning thread (rank 0).
 * Returns EPLB_OK, or an error after which the runtime keeps serving with
 * the plan it has (the step is closed in every case):
 *  - EPLB_ECOMM: transfers of a round failed on some rank; the layers named
 *    in the detail keep their old plan on every rank (metrics.layers_failed);
 *    also a failed all-reduce or broadcast;
 *  - EPLB_ETIMEOUT: as EPLB_ECOMM, but at least one of the round's failed
 *    layers had a transfer still pending at cfg.transfer_timeout_ms on some
 *    rank (a stalled or dead peer). Every rank returns the same of the two.
 *    The deadline bounds the transfers only: the agreement that follows is a
 *    collective, so a peer that never comes back to step_end still blocks it
 *    (MPI cannot drop a process);
 *  - the planner's status (EPLB_ESOLVER, EPLB_ENOMEM, ...) when rank 0's plan
 *    failed: nothing switches (metrics.plans_failed; rank 0's detail is
 *    logged there at ERROR);
 *  - EPLB_EIO/EFORMAT from the trace append on rank 0 (recording stops;
 *    rank 0 only: the other ranks return EPLB_OK, so do not stop one rank on
 *    it);
 *  - EPLB_ENOMEM (a round's buffers: agreed before any transfer, the round's
 *    layers keep their plan on every rank and every rank returns it or
 *    EPLB_ECOMM);
 *  - EPLB_ESHAPE: the ranks' collective calls went out of step (below); the
 *    step is not closed and nothing else happens.
 * A rank-local error never skips a collective: every rank makes the same
 * sequence of collective calls in every step_end.
 *
 * Collective calls out of step. Every collective call (record, route and
 * record_counts with the per-batch split, step_end, eplb_runtime_allreduce)
 * first all-reduces a small header: its kind, its place among the step's
 * collective calls, its layer, and the step count. Should one rank make a
 * call more or less than its peers, or another call in its place, every rank
 * gets EPLB_ESHAPE from the same call (no payload of another call is ever
 * reduced with it, and nothing hangs). Calls at the same place that differ
 * only in layer (or record against route) fail alone. Otherwise the ranks
 * are out of step: every collective call fails at once (route still maps by
 * the live table) until each rank's next step_end, where they meet again,
 * agree on the step count (the largest) and go on. A step in which a call
 * failed this way is not closed: its statistics are dropped on every rank
 * alike. With a device on some rank, the per-batch calls carry only their
 * payload's check word (the device all-reduces on its stream), and
 * step_end's and allreduce's headers still bring the ranks back. One header
 * all-reduce of 32 bytes per call. */
EPLB_API eplb_status_t eplb_runtime_step_end(eplb_runtime_t *rt);

/* ---- state and metrics -------------------------------------------------- */

typedef enum eplb_runtime_window_kind {
  EPLB_WINDOW_SUM = 0, /* global counts summed over the last W global steps */
  EPLB_WINDOW_EMA = 1  /* EMA of the global per-step counts: the first step's counts, then
                          ema = d * ema + (1 - d) * counts (0 before the first step) */
} eplb_runtime_window_kind_t;

/* Copies the window statistics into out [L][E]. EPLB_EINVAL for NULL/kind. */
EPLB_API eplb_status_t eplb_runtime_window(const eplb_runtime_t *rt,
                                           eplb_runtime_window_kind_t kind, double *out);

/* Epoch of the dispatch tables: 0 at create, +1 at every step boundary that
 * switched at least one layer. */
EPLB_API uint64_t eplb_runtime_epoch(const eplb_runtime_t *rt);

/* The current plan of a layer (what map uses): phy2log [R] and share [R],
 * valid until the next step_end. EPLB_ERANGE for layer >= L. */
EPLB_API eplb_status_t eplb_runtime_layer_plan(const eplb_runtime_t *rt, uint32_t layer,
                                               const int32_t **phy2log, const double **share);

/* The shares the layer's last per-batch split produced (cfg.split_per_batch,
 * or eplb_runtime_split):
 * share [R] the global shares, node_share [R] this rank's node's row of the
 * per-source-node shares (NULL when the split had no locality stage), valid
 * until the next record/route/record_counts or step_end; *t_star (optional)
 * the batch's optimum of the busiest GPU. Before the layer's first split (or
 * after a plan switch, or a failed split) the plan's shares, its node row
 * (a locality plan) or NULL, and 0. EPLB_EINVAL (NULL runtime), EPLB_ERANGE
 * for layer >= L. */
EPLB_API eplb_status_t eplb_runtime_layer_split(const eplb_runtime_t *rt, uint32_t layer,
                                                const double **share, const double **node_share,
                                                double *t_star);

/* Re-splits a layer from global per-source-node counts that the application
 * all-reduced itself (node_counts [N][E], N = world_size / ranks_per_node;
 * e.g. an engine that all-reduces its router's counts on the GPU): the same
 * split as the per-batch path of record (eplb_split_solve, then the locality
 * stage when N > 1 and local_first, or the decode objective of
 * cfg.split_model), and the layer's dispatch table is
 * rebuilt from it for eplb_runtime_map. Not collective; nothing is recorded
 * (the statistics take record/record_counts). Works whether or not
 * cfg.split_per_batch is on. Returns EPLB_OK, EPLB_EINVAL (NULL argument),
 * EPLB_ERANGE (layer), EPLB_ENOMEM, EPLB_EDEVICE (with a device: the
 * layer's table upload or flip failed; the host table is rebuilt, the device
 * keeps its table); a failed split keeps the layer's shares and returns the
 * solver's status. */
EPLB_API eplb_status_t eplb_runtime_split(eplb_runtime_t *rt, uint32_t layer,
                                          const uint32_t *node_counts);

/* A copy of the current plan (every layer), evaluated on the window loads
 * (metrics zero while the window is empty). *out is owned by the caller. */
EPLB_API eplb_status_t eplb_runtime_plan(const eplb_runtime_t *rt, eplb_plan_t **out);

typedef struct eplb_runtime_metrics {
  uint64_t steps;        /* step_end calls */
  uint64_t global_steps; /* global steps all-reduced into the window */
  uint64_t epoch;
  uint64_t plans;             /* plans computed or taken from the mailbox (every rank) */
  uint64_t plans_failed;      /* of which failed (the current plan stayed) */
  uint64_t rebalances;        /* plans applied with at least one layer to switch */
  uint64_t layers_switched;   /* layer switches done */
  uint64_t layers_failed;     /* layer switches abandoned after a failed transfer */
  uint64_t slots_moved;       /* slots (all ranks) whose expert changed */
  uint64_t bytes_moved[3];    /* all ranks, by eplb_link_class_t: same GPU, intra, inter node */
  uint64_t tokens_recorded;   /* this rank */
  double last_plan_seconds;   /* wall time of the last plan */
  double window_balancedness; /* current plan on the window, mean over layers (1 if empty) */
  int migrating;              /* 1 while a plan or a migration is in progress */
  /* Per-batch split (cfg.split_per_batch), this rank: */
  uint64_t splits;           /* calls that re-split a layer */
  uint64_t splits_failed;    /* calls that kept the previous shares (a failed split, a bad id) */
  double split_seconds;      /* wall time in the split and the table or quota build */
  double allreduce_seconds;  /* wall time in the per-call all-reduce of counts */
  double split_cross_tokens; /* tokens the splits sent off their node (all ranks' tokens) */
  uint64_t migration_rounds; /* migration rounds run (eplb_plan_diff_schedule's rounds) */
  uint64_t splits_decode;    /* per-batch splits that kept the decode objective's shares
                                (cfg.split_model; added later, so at the end) */
  /* Continuous re-placement (cfg.continuous_window), the same on every rank: */
  uint64_t continuous_moves;     /* slots that changed expert (landed moves) */
  uint64_t continuous_failed;    /* moves dropped (a failed or timed-out transfer) */
  uint64_t continuous_abandoned; /* in place: slots left out of service */
  uint64_t continuous_waits;     /* step_ends at which a set of moves was still in flight */
} eplb_runtime_metrics_t;

EPLB_API void eplb_runtime_metrics(const eplb_runtime_t *rt, eplb_runtime_metrics_t *out);

/* ---- helpers for applications without their own MPI code ---------------- */

typedef enum eplb_reduce_op {
  EPLB_REDUCE_SUM = 0,
  EPLB_REDUCE_MAX = 1,
  EPLB_REDUCE_MIN = 2
} eplb_reduce_op_t;

/* All-reduces values [n] in place over the runtime's communicator
 * (collective; identity with one rank). EPLB_EINVAL, EPLB_ECOMM, or
 * EPLB_ESHAPE when the ranks' calls differ (another n or op: this call
 * alone; another call in its place: out of step until step_end, see
 * eplb_runtime_step_end), values then unchanged. */
EPLB_API eplb_status_t eplb_runtime_allreduce(eplb_runtime_t *rt, double *values, size_t n,
                                              eplb_reduce_op_t op);

/* Initialises MPI (MPI_THREAD_FUNNELED) unless already initialised, and gives
 * MPI_COMM_WORLD's rank and size. argc/argv may be NULL.
 * EPLB_EUNSUPPORTED without MPI, EPLB_ECOMM. */
EPLB_API eplb_status_t eplb_runtime_mpi_init(int *argc, char ***argv, uint32_t *rank,
                                             uint32_t *size);

/* All-reduces values [n] in place over MPI_COMM_WORLD (collective over every
 * process), for agreeing before a runtime exists or after it is gone, e.g. on
 * an error that only some ranks saw at start-up. Needs MPI initialised.
 * EPLB_EINVAL (NULL values, op), EPLB_ESTATE (MPI not initialised or
 * finalised), EPLB_ERANGE (n > INT_MAX), EPLB_ECOMM, EPLB_EUNSUPPORTED
 * without MPI. */
EPLB_API eplb_status_t eplb_runtime_mpi_allreduce(double *values, size_t n, eplb_reduce_op_t op);

/* Address of a static MPI_Comm holding MPI_COMM_WORLD (for
 * eplb_runtime_comm_t.mpi_comm); NULL without MPI. */
EPLB_API void *eplb_runtime_mpi_world(void);

/* Finalises MPI if this library initialised it. */
EPLB_API void eplb_runtime_mpi_finalize(void);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_RUNTIME_H */
