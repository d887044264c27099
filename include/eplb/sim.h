/* eplb/sim.h — the decode-step simulator: replays a trace against a plan (or
 * a rebalancing policy) on a cluster and estimates, step by step, balance,
 * all-to-all traffic and step time with a simple cost model.
 *
 * ---- Cost model ----------------------------------------------------------
 * Expert time t(x) for x tokens routed to one replica, from a table of
 * (tokens, µs) points with increasing token counts:
 *   t(0) = 0 (an inactive replica costs nothing),
 *   t(x) = t(x_0) for 0 < x <= x_0 (a memory-bound expert reads all of its
 *          weights however few tokens it gets),
 *   piecewise linear between points, linear extrapolation beyond the last
 *   two points (a one-point table is constant).
 * Defaults (DeepSeek-V3 shapes, H800, FP8; from DeepGEMM's and DeepEP's
 * published tables): 64 → 19.5, 128 → 21.5, 256 → 25.4, 512 → 45.3,
 * 1024 → 81.3, 4096 → 278 µs; dispatch 7,392 B and combine 14,336 B per
 * token copy; 44e6 B per expert (migration); bandwidths from the cluster.
 *
 * Cost file (JSON; every key optional, unknown keys are EPLB_EFORMAT):
 *   { "format": "eplb-cost", "version": 1,
 *     "expert_time_us": [[64, 19.5], [128, 21.5], ...],   (tokens, µs) pairs
 *     "dispatch_bytes_per_copy": 7392,
 *     "combine_bytes_per_copy": 14336,
 *     "bytes_per_expert": 44e6,
 *     "intra_node_gbps": 160,     (override the cluster's; absent = cluster)
 *     "inter_node_gbps": 45,
 *     "launch_us": 0 }            (once per layer per GPU with an active replica)
 *
 * ---- Replay (per step, per layer) ---------------------------------------
 * As written here for global shares; "Routing" below says how a token's
 * source node changes them. Loads are fluid: replica r of expert e gets count[e] * share[r] tokens;
 * a GPU's tokens are the sum over its replicas; its compute time is the sum of t(tokens) over its
 * active replicas (tokens > 0). Balancedness = mean GPU tokens / max GPU tokens (1 when the layer
 * has no tokens).
 *
 * Traffic. With top-k rows, each row stands for num_tokens / num_rows tokens
 * and comes from GPU source_rank when that is recorded (>= 0) and < G;
 * otherwise rows are spread round-robin within the step: row i comes from
 * GPU i mod G (data-parallel attention; no placement may count on a
 * request's tokens staying on one node unless the trace records it). A
 * (token, expert e) pair sends share[r] of a copy to each replica r of e; the
 * copy crosses nodes when the replica's node differs from the source's.
 * De-duplicated copies follow DeepEP's normal kernels (one copy per remote
 * node per token): per token, the expected sum over remote nodes m of
 * 1 - prod_e (1 - p_e(m)), p_e(m) being the share mass of e's replicas on m.
 * Steps without rows assume sources uniform over the GPUs (the same rule in
 * expectation): cross copies of e = count[e] * sum_r share[r] * (1 -
 * gpus_on(node(r)) / G); without co-activation information such steps report
 * dedup copies = cross copies (an upper bound).
 *
 * Time. A GPU's all-to-all time is max(send, recv) where each side is its
 * intra-node bytes / intra GB/s + inter-node bytes / inter GB/s (with a cost
 * model made from a model and a GPU description, eplb_cost_model_from_desc:
 * the larger of the two terms, as NVLink and RDMA run at once, plus the GPU's
 * a2a_latency_us for each of dispatch and combine), with
 * (dispatch + combine) bytes per copy (dispatch and combine move the same
 * copies in opposite directions; copies are not de-duplicated, as in the
 * low-latency decode kernels; in a trace whose phase is prefill they are,
 * as DeepEP's normal kernels do: each GPU's inter-node bytes are scaled by the
 * layer's de-duplicated / cross-node copies, the copies saved being forwarded
 * over NVLink on the receiving node). A GPU's compute is launch_us (when it has
 * an active replica) plus the sum of t(tokens). Layer time = max over GPUs of (compute +
 * all-to-all): each GPU is costed on its own, without overlap or waiting for
 * other GPUs (a simplification). Step time = sum over layers.
 *
 * Routing. Every plan is costed with the runtime's rule (eplb_runtime_map),
 * so that policies compare on the routing they are served with: a plan with
 * node shares routes by them (below); otherwise, with local_first (the
 * default), a token of expert e from node n goes to e's replicas on n with a
 * positive share, their shares renormalised to sum 1, and only when e has no
 * such replica on n to every replica by the global shares; without
 * local_first, by the global shares. Local-first routing is costed as the
 * node shares it amounts to (loads: replica r gets sum_n demand[n][e] x
 * share_n[r], demand as under "Node shares"), so it moves load towards
 * node-local replicas that the plan's shares did not foresee.
 *
 * Rebalancing. Without a fixed plan the simulator plans with a policy:
 * every rebalance_every steps from the window sum of the previous `window`
 * steps. The first plan, used from the first replayed step, is made from the
 * first `window` steps of the replayed range (it has seen them: an optimistic
 * start). rebalance_every = 0 plans once from the whole replayed range (an
 * oracle static plan), or, held out, from steps [plan_step_begin,
 * plan_step_end) and scores only the replayed steps outside them (they must
 * form one range: the plan steps may not cut the replayed range in two; see
 * eplb_sim_steps). The incremental policy plans from the plan in force
 * (its first plan is a balanced one). At a rebalance, migrated bytes = slots (over all
 * layers) whose expert changed x bytes_per_expert, costed as under "Migration".
 *
 * Migration. The weights a step receives (continuous re-placement's moves
 * started after the step before, or a replan's switched slots, all in the
 * step after the replan) cost each receiving GPU bytes / bandwidth of their
 * link class (NVLink from a GPU of its node, RDMA from another node; both at
 * once, so the slower of the two), the moves' own GPUs for continuous
 * re-placement, a replan's spread evenly over the GPUs. migration_us is the
 * slowest GPU's. The copies run beside the step, on links the all-to-all
 * leaves idle for step_time_us - a2a_us; what does not fit
 * (migration_exposed_us) adds to the step time.
 *
 * Node shares. A plan with node_share (the locality policy) routes a token of
 * expert e from node n to replica r with node_share[n][r], for traffic and
 * load: replica r gets sum_n demand[n][e] x node_share[n][r] tokens, where
 * demand[n][e] = count[e] x (the fraction of the step's rows picking e that
 * come from node n, sources as above), or count[e] x gpus_on(n) / G in a
 * step without rows. split_per_batch re-solves global shares (node shares
 * do not survive it) and routes them local-first or globally as above. In
 * policy mode, locality plans get the co-activation of the
 * same window as their loads (eplb_coact_from_trace) and the cluster.
 * Plan options with shares = EPLB_SHARES_ROBUST and no shares_trace get the
 * replayed trace and the same window as their loads (per-step loads sampled
 * from the window the plan is made from, never from the steps it replays
 * later unless the window covers them: the oracle plan's window is the whole
 * range).
 *
 * Threads: eplb_sim_run uses the trace handle (one thread at a time) and only
 * reads the cluster and plan; distinct runs on distinct traces may proceed
 * concurrently.
 */
#ifndef EPLB_SIM_H
#define EPLB_SIM_H

#include "eplb/common.h"
#include "eplb/model.h"
#include "eplb/plan.h"
#include "eplb/topo.h"
#include "eplb/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cost model ---------------------------------------------------------- */

#define EPLB_COST_MAX_POINTS 64u

typedef struct eplb_cost_model {
  uint32_t struct_size;                 /* the caller's sizeof (common.h, "Struct sizes") */
  uint32_t num_points;                  /* >= 1 points in the expert time table */
  double tokens[EPLB_COST_MAX_POINTS];  /* strictly increasing, > 0 */
  double time_us[EPLB_COST_MAX_POINTS]; /* µs for that many tokens, >= 0 */
  double dispatch_bytes_per_copy;       /* bytes per (token, destination), >= 0 */
  double combine_bytes_per_copy;        /* bytes per (token, destination), >= 0 */
  double bytes_per_expert;              /* weights moved per migrated slot, >= 0 */
  double intra_node_gbps;               /* > 0 overrides the cluster; 0 = cluster's */
  double inter_node_gbps;               /* > 0 overrides the cluster; 0 = cluster's */
  double launch_us; /* >= 0: paid once per layer by a GPU with an active replica (default 0,
                       the table's times include it) */
} eplb_cost_model_t;

/* Fills *model with the defaults in the file comment. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_cost_model_init(eplb_cost_model_t *model, size_t size);
/* The defaults at the caller's sizeof, through eplb_cost_model_init. */
static inline void eplb_cost_model_default(eplb_cost_model_t *model) {
  (void)eplb_cost_model_init(model, sizeof *model);
}

/* Reads a cost file (see the file comment): keys absent keep the defaults.
 * Returns EPLB_OK, EPLB_EIO (cannot read), EPLB_EFORMAT (bad JSON, unknown
 * key, wrong type, non-increasing or non-positive token counts, negative or
 * non-finite values, more than EPLB_COST_MAX_POINTS points; the detail names
 * the file and key), EPLB_EINVAL (NULL argument, *out's struct_size out of
 * range). *out is written only on success, at most its struct_size bytes: set
 * it up with eplb_cost_model_default first (eplb/common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_cost_model_read(const char *path, eplb_cost_model_t *out);

/* Checks a model (the same rules as the file). EPLB_OK or EPLB_EINVAL with
 * the field in the detail. */
EPLB_API eplb_status_t eplb_cost_model_check(const eplb_cost_model_t *model);

/* t(tokens) in µs under the interpolation rule above (tokens <= 0, a NULL
 * model or one whose struct_size is refused → 0). */
EPLB_API double eplb_cost_model_expert_time(const eplb_cost_model_t *model, double tokens);

/* The cost model of a model on a GPU (eplb/model.h): the expert time table samples
 * eplb_model_expert_time at 64 token counts from 1 to 2^20 spaced evenly in log scale
 * (within 0.5% of the formula in between; 1 token costs a full weight read, as any x in
 * (0, 1]), dispatch/combine bytes and bytes_per_expert from the model, intra/inter-node
 * bandwidths from the GPU's NVLink and RDMA figures (they override the cluster's), and
 * launch_us from the GPU. EPLB_OK or EPLB_EINVAL (NULL, a description that fails
 * eplb_model_check / eplb_gpu_check, *out's struct_size out of range). *out is set up
 * with eplb_cost_model_default first: at most its struct_size bytes are written. */
EPLB_API eplb_status_t eplb_cost_model_from_desc(const eplb_model_desc_t *model,
                                                 const eplb_gpu_desc_t *gpu,
                                                 eplb_cost_model_t *out);

/* ---- replay ---------------------------------------------------------------- */

/* One replayed step, passed to the callback. Pointers are valid during the
 * callback only. Copies and tokens are expected values (fractional). */
typedef struct eplb_sim_step {
  uint64_t step;            /* trace step index */
  uint32_t num_tokens;      /* tokens of the step */
  int used_rows;            /* 1 if traffic came from top-k rows, 0 if from the uniform rule */
  double balancedness;      /* mean over layers (after the per-batch split when enabled) */
  double min_balancedness;  /* min over layers */
  double plan_balancedness; /* mean over layers with the plan's own shares and routing */
  double cross_node_copies; /* token copies crossing nodes, summed over layers */
  double dedup_copies;      /* the same with one copy per (token, remote node) */
  double cross_node_bytes;  /* cross_node_copies x (dispatch + combine) bytes */
  double dedup_bytes;       /* dedup_copies x (dispatch + combine) bytes */
  double step_time_us;      /* estimated step time (sum over layers) */
  double compute_us;        /* sum over layers of the slowest GPU's compute */
  double a2a_us;            /* sum over layers of the slowest GPU's all-to-all */
  double migrated_bytes;    /* moved by a rebalance before this step (0 if none) */
  double migration_us;      /* their time */
  uint32_t num_gpus;        /* G */
  const double *gpu_tokens; /* [G] tokens of each GPU, summed over layers */
  const double *gpu_active; /* [G] active replicas of each GPU, summed over layers */
  double max_active;        /* mean over layers of the most active replicas on one GPU */
  /* Appended: the part of migration_us the step's links could not hide (see
   * "Migration"), already in step_time_us. */
  double migration_exposed_us;
} eplb_sim_step_t;

typedef void (*eplb_sim_step_fn)(const eplb_sim_step_t *step, void *user);

typedef struct eplb_sim_options {
  uint32_t struct_size;          /* the caller's sizeof (common.h, "Struct sizes") */
  const eplb_cost_model_t *cost; /* NULL: eplb_cost_model_default (borrowed for the call) */
  uint64_t step_begin;           /* first step replayed (default 0) */
  uint64_t step_end;             /* one past the last (default UINT64_MAX: to the end) */
  int split_per_batch;           /* 1: re-split every step and layer over the plan's placement
                                    as the runtime's per-batch split does: with local_first
                                    and several nodes eplb_split_solve_local (T*, then the
                                    fewest tokens off their node within split_tolerance),
                                    else eplb_split_solve */
  /* Policy mode (plan == NULL in eplb_sim_run). num_gpus is set from the cluster;
   * num_nodes from the cluster when its nodes are alike, else 1. */
  eplb_plan_options_t plan;
  uint64_t rebalance_every; /* steps between plans (0: one oracle plan of the whole range) */
  uint64_t window;          /* steps summed for a plan (0: rebalance_every) */
  eplb_sim_step_fn on_step; /* called after every scored step, may be NULL */
  void *user;
  int local_first; /* 1 (default): plans without node shares route local-first (see
                      "Routing"), as the runtime's default; 0: by global shares */
  /* Held out (policy mode): plan from steps [plan_step_begin, plan_step_end) and score
   * the replayed steps outside them. With rebalance_every > 0 the plan steps must come
   * before the scored ones, and each replan is made from the `window` steps before it
   * (earlier steps than the replayed ones included: all are past). Both 0 (default):
   * off; plan_step_end = UINT64_MAX: to the trace's end. */
  uint64_t plan_step_begin;
  uint64_t plan_step_end;
  double split_tolerance; /* the per-batch split's locality slack, in [0, 1] (default 0.01) */
  /* Rebalancing (rebalance_every > 0): which layers of a new plan switch, by the runtime's
   * rule (eplb_plan_switch_select): gain threshold (default 0.01, as the runtime's; <= -1:
   * every layer that differs) and move budget in slots per replan (0 = unlimited). */
  double gain_threshold;
  uint64_t move_budget;
  /* The deployment (eplb/model.h; borrowed for the call). With both set and cost NULL
   * the cost model is eplb_cost_model_from_desc's. The decode policy needs them: it
   * plans with them (plan.model, plan.gpu and decode_steps = the window's steps are set
   * by the simulator), and with split_per_batch each layer of each step is split by
   * eplb_decode_split, kept only where its modelled layer time (this cost model, the
   * plan's routing) is below the token-balanced split's, which is what a runtime that
   * re-splits for decode does (the check guards against the split's simpler all-to-all
   * term). */
  const eplb_model_desc_t *model;
  const eplb_gpu_desc_t *gpu;
  /* Continuous re-placement, the runtime's (eplb_runtime_config_t.continuous_window):
   * 0 (default) off; else, in policy mode with split_per_batch and without rebalance_every,
   * after every step the moves of eplb_plan_step_moves (options `step_moves`) on the sum
   * of the last continuous_window steps' counts (up to continuous_lag steps older) start.
   * continuous_copy_steps 0 (default): their copies land in the next step before their
   * layer is reached, and they serve it (the runtime over MPI, which lands a layer's
   * moves in the layer's first call once every rank's copies are done: host memory, or
   * copies much shorter than a step); 1: they serve from the step after, and in the next
   * step the slot still serves its old expert (staged) or, continuous_in_place, carries
   * nothing (the split routes around it). The steps before
   * the first scored one that the run plans on (held out) run the moves too, as the
   * runtime serving them would; migrated_bytes counts the moved slots. */
  uint32_t continuous_window;
  uint32_t continuous_lag;        /* 0 (default: the runtime's) or 1 (it chooses on its thread) */
  int continuous_in_place;        /* with copy_steps 1: 0 (default) staged; 1 in place */
  uint32_t continuous_copy_steps; /* 0 (default) or 1 */
  eplb_plan_step_options_t step_moves;
} eplb_sim_options_t;

/* Defaults above; plan options from eplb_plan_options_default. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_sim_options_init(eplb_sim_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_sim_options_init. */
static inline void eplb_sim_options_default(eplb_sim_options_t *opts) {
  (void)eplb_sim_options_init(opts, sizeof *opts);
}

/* Checks the values of opts that need neither trace nor cluster:
 * split_tolerance (in [0, 1]), gain_threshold (not NaN) and the plan
 * options' (eplb_plan_options_check). eplb_sim_run makes the same checks; a
 * caller calls this to refuse a bad value before opening the inputs. Returns
 * EPLB_OK, or EPLB_EINVAL with a detail that starts with the field's name and
 * value ("split_tolerance 2: must be in [0, 1]"; a plan option's is named as
 * in eplb_plan_options_t, "threads 2000: ..."). opts is borrowed and not
 * changed; thread-safe. */
EPLB_API eplb_status_t eplb_sim_options_check(const eplb_sim_options_t *opts);

typedef struct eplb_sim_summary {
  uint64_t num_steps;            /* steps replayed and scored */
  double mean_balancedness;      /* over steps of the step's mean over layers */
  double p5_balancedness;        /* 5th percentile over steps (nearest rank) */
  double min_balancedness;       /* min over steps and layers */
  double mean_plan_balancedness; /* like mean_balancedness with the plan's shares: the
                                    per-batch split's gain is the difference */
  double cross_node_copies;      /* totals over steps */
  double dedup_copies;
  double cross_node_bytes;
  double dedup_bytes;
  double mean_step_time_us; /* mean over steps */
  double total_step_time_us;
  double migrated_bytes; /* total over rebalances */
  double migration_us;
  uint32_t num_plans;       /* plans used (1 for a fixed plan) */
  uint64_t used_rows_steps; /* steps whose traffic came from top-k rows */
  double p99_step_time_us;  /* 99th percentile over steps (nearest rank) */
  double mean_max_active;   /* mean over steps and layers of the most active replicas
                               on one GPU (what a memory-bound decode step waits for) */
  /* Appended (ABI: fields only ever go at the end). */
  double bound_step_time_us;   /* mean over steps of a lower bound of the modelled step time
                                  of any placement and split on these GPUs: per layer, each
                                  of the A experts that get tokens needs an active replica,
                                  so some GPU reads ceil(A / G) weights (t of one token each,
                                  when the table's times do not fall as tokens rise), pays
                                  its launch and, with a deployment, the two all-to-all
                                  kernels' latency */
  double migration_exposed_us; /* total over steps of eplb_sim_step_t's (in the step times) */
} eplb_sim_summary_t;

/* The per-step oracle over steps [step_begin, min(step_end, steps)): each step planned
 * on its own counts by `balanced` with exact shares (opts gives the GPUs, nodes, slots and
 * groups; its policy and shares are replaced), scored on that same step. balancedness: the
 * mean over steps and layers of those plans' balancedness; ceiling: the same of mean load
 * / the plan's lower bound, which no placement and split of these slots can pass on the
 * step (so ceiling >= balancedness, within the plans' certified gap). A policy's held-out
 * balancedness (routed as served) is below both: they are what planning on the future
 * would give. Costs one plan per step. Returns EPLB_OK, EPLB_EINVAL (NULL argument, empty
 * range), the planner's and the trace's statuses. */
typedef struct eplb_sim_oracle {
  uint64_t num_steps;
  double balancedness;
  double ceiling;
} eplb_sim_oracle_t;

EPLB_API eplb_status_t eplb_sim_oracle(eplb_trace_t *trace, uint64_t step_begin, uint64_t step_end,
                                       const eplb_plan_options_t *opts, eplb_sim_oracle_t *out);

/* eplb_sim_oracle over the steps a run with `opts` scores (eplb_sim_steps, with the fixed
 * `plan` or none), with the slots of that run's plans: the plan's GPUs, nodes and slots, or
 * opts->plan's on the cluster's GPUs (its nodes when they divide the GPUs, else one);
 * opts->plan.threads either way. What `eplb sim` prints beside the policies. Returns
 * EPLB_OK, EPLB_EINVAL (NULL argument), the statuses of eplb_sim_steps and
 * eplb_sim_oracle. *out is written on success. */
EPLB_API eplb_status_t eplb_sim_run_oracle(eplb_trace_t *trace, const eplb_cluster_t *cluster,
                                           const eplb_plan_t *plan, const eplb_sim_options_t *opts,
                                           eplb_sim_oracle_t *out);

/* The steps a run with `opts` on a trace of num_steps steps plans on and
 * scores, as half-open ranges: plan_steps = those the first (or only) plan
 * is made from ([0, 0) when fixed_plan is nonzero), scored_steps = those
 * replayed and reported (num_steps of the summary is their count). Returns
 * EPLB_OK, or EPLB_EINVAL with the problem in the detail: empty replayed
 * range; plan steps with a fixed plan, after the scored steps with rebalance_every > 0, empty,
 * past num_steps, covering every replayed step, or strictly inside the
 * replayed range (the scored steps would be two ranges). eplb_sim_run makes
 * the same checks. */
EPLB_API eplb_status_t eplb_sim_steps(const eplb_sim_options_t *opts, uint64_t num_steps,
                                      int fixed_plan, uint64_t plan_steps[2],
                                      uint64_t scored_steps[2]);

/* Replays steps [step_begin, min(step_end, steps)) of `trace` on `cluster`
 * with the fixed `plan`, or, when plan is NULL, with plans made by
 * opts->plan's policy (see "Rebalancing"). opts may be NULL (defaults; then a
 * plan is required). Held out (plan_step_begin/plan_step_end), the scored
 * steps are those of eplb_sim_steps. The trace is read with
 * eplb_trace_read_step.
 * Returns EPLB_OK; EPLB_EINVAL (NULL trace/cluster/out, empty step range,
 * bad plan steps, bad cost model, bad plan options), EPLB_ESHAPE (plan and trace layers or
 * experts differ, plan GPUs != cluster GPUs; the detail names both), trace
 * read errors, split solver errors (split_per_batch), plan_create errors
 * (policy mode), EPLB_ERANGE (a plan expert id >= E), EPLB_ENOMEM. The
 * callback sees steps in order. *out is written on success. */
EPLB_API eplb_status_t eplb_sim_run(eplb_trace_t *trace, const eplb_cluster_t *cluster,
                                    const eplb_plan_t *plan, const eplb_sim_options_t *opts,
                                    eplb_sim_summary_t *out);

/* ---- setting up and reporting a run -------------------------------------- */

/* The slots of a policy-mode run (opts->plan.num_replicas and slots_per_gpu) on cluster,
 * as `eplb sim` sets them: slots_per_gpu > 0 gives every GPU that many; else replicas > 0
 * slots per layer spread by the planner; else (both 0) the cluster file's slots_per_gpu of
 * each node, written to slots[G] (the caller's, G = eplb_cluster_num_gpus; borrowed by
 * opts->plan.slots_per_gpu until the run is done). Returns EPLB_OK; EPLB_EINVAL: NULL
 * argument or both given, slots_per_gpu x G over EPLB_MAX_SLOTS (detail "S x G GPUs = R
 * slots per layer: over the limit of ..."), or neither given and a node of the cluster
 * without slots_per_gpu ("the cluster does not set slots_per_gpu"); EPLB_ERANGE: R slots
 * per layer over EPLB_MAX_SLOTS or R x G over EPLB_MAX_PLAN_WORK ("R slots per layer on G
 * GPUs: over the limits of ..."). Only opts->plan is written, and only on success. Any
 * thread (the cluster is only read). */
EPLB_API eplb_status_t eplb_sim_options_slots(eplb_sim_options_t *opts,
                                              const eplb_cluster_t *cluster, uint32_t slots_per_gpu,
                                              uint32_t replicas, uint32_t *slots);

/* What prices a run's steps (eplb_sim_options_price); the caller's, and it must outlive the
 * runs that use it (the options point into it). */
typedef struct eplb_sim_pricing {
  eplb_cost_model_t cost;  /* the cost file's table, else eplb_cost_model_default */
  eplb_model_desc_t model; /* the deployment, when have_model */
  eplb_gpu_desc_t gpu;
  int have_model;
  char phrase[400]; /* what priced them, for a reader: "cost file F", "M on G", or the
                       default table and why (the trace's model has no preset, or none) */
} eplb_sim_pricing_t;

/* Sets how the runs of opts are priced, as `eplb sim` does: with the deployment req
 * resolves (eplb_deployment_resolve; the caller names the trace's model, experts and path
 * in it), opts->model and opts->gpu point to it, and its steps are costed from the
 * descriptions (opts->cost NULL) unless cost_file is given; a cost file (cost_file, read by
 * the caller, named cost_name in the phrase) or no deployment is the table's additive rule
 * (opts->cost: the file's table, else the default). Returns EPLB_OK; EPLB_EINVAL (NULL
 * argument); the statuses of eplb_deployment_resolve and, labelled "<model label>: ...",
 * of eplb_cost_model_from_desc. opts is written only on success. Any thread. */
EPLB_API eplb_status_t eplb_sim_options_price(eplb_sim_options_t *opts,
                                              const eplb_deployment_request_t *req,
                                              const eplb_cost_model_t *cost_file,
                                              const char *cost_name, eplb_sim_pricing_t *p);

/* The held-out window `eplb sim --compare` plans on by default (without rebalancing):
 * plan on the first half of the replayed steps [step_begin, min(step_end, num_steps)) and
 * score the second (rounded down: of 5 steps, 2 planned, 3 scored), so that no policy is
 * scored on the steps its plan was made from. Sets opts->plan_step_begin and
 * plan_step_end; the other fields are left alone. Returns EPLB_OK, or EPLB_EINVAL (NULL
 * opts, fewer than 2 steps to replay: "N step(s) to replay; holding out half needs 2
 * or more"). Any thread. */
EPLB_API eplb_status_t eplb_sim_options_hold_out(eplb_sim_options_t *opts, uint64_t num_steps);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_SIM_H */
