/* eplb/plan.h — placement plans: how many replicas each logical expert gets,
 * which GPU slot holds each replica, and what share of an expert's tokens
 * each replica receives; plus the certificate (lower bound) of every layer.
 *
 * Model (see DESIGN.md "Plan file"): a layer has E logical experts and R
 * slots; GPU g owns the next slots_per_gpu[g] slots (GPU-major); GPU g is on
 * node g / (G/N). A layer's plan is phy2log[R] (expert held by each slot)
 * and share[R] (fraction of that expert's tokens sent to the slot; the
 * shares of one expert sum to 1). GPU load = sum over its slots of
 * share * load[expert]. Loads are token counts or averages (doubles, >= 0).
 *
 * Metrics are always computed by the library from loads, never taken from a
 * file: max_load (busiest GPU), mean_load (total / G), balancedness
 * (mean / max, 1 when the layer has no load), lower_bound (no plan with
 * these constraints can have a smaller max_load):
 *   max(total / G, min over replica counts c (sum c = R) of max_e load_e/c_e)
 * with no spare slot (R == E) also the heaviest expert plus the S_g - 1
 * lightest (every GPU is full of distinct experts), and with
 * keep_groups_on_nodes also the group bounds
 *   max(heaviest group, g_(N-1) + g_N) / (GPUs of a node)
 * where g_0 >= g_1 >= ... are the group loads (a node's GPUs serve every
 * group placed on it; of the N+1 heaviest groups two share a node), and
 *   min over group-to-node assignments of max over nodes of
 *   max(node load / its GPUs, min-max per-replica load over its slots)
 * found by an exhaustive search when it finishes within its budget (small
 * group counts such as DeepSeek-V3's 8 groups on 4 nodes).
 *
 * Threads: a plan is used by one thread at a time; distinct plans may be
 * built concurrently. The mip policy uses GLPK's per-thread environment: a
 * thread that planned with it calls eplb_split_glpk_thread_done() before it
 * exits (the main thread may skip it).
 *
 * eplb_plan_create plans the layers in parallel on opts.threads threads (the
 * calling thread and threads - 1 it starts and joins before returning; never
 * more than the layers; 0 = the online cores, except that a plan too small to
 * repay starting a thread is planned inline). The plan is the same, byte
 * for byte, whatever the thread count: each layer is planned on its own from
 * the same inputs (the mip policy's result can still depend on the machine's
 * speed through its time limit). The planner's threads release their GLPK
 * environments themselves; borrowed inputs (opts.from, cluster, coact) are
 * only read, and the shares trace is read by the calling thread only. The
 * logging callback is called from the calling thread. An error is the one of
 * the lowest-numbered failing layer, as without threads.
 */
#ifndef EPLB_PLAN_H
#define EPLB_PLAN_H

#include "eplb/coact.h"
#include "eplb/common.h"
#include "eplb/reshare.h"
#include "eplb/topo.h"
#include "eplb/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "deepseek", "balanced", "mip", "incremental", "locality", "decode"; NULL for others. */
EPLB_API const char *eplb_plan_policy_str(eplb_plan_policy_t policy);

/* Parses a policy name. EPLB_EINVAL (detail names the value) if unknown. */
EPLB_API eplb_status_t eplb_plan_policy_parse(const char *name, eplb_plan_policy_t *out);

typedef enum eplb_plan_shares {
  EPLB_SHARES_EXACT = 0,   /* the policy's own shares (default; see "Shares") */
  EPLB_SHARES_UNIFORM = 1, /* 1/c for each of an expert's c replicas */
  EPLB_SHARES_ROBUST = 2   /* eplb_split_solve_robust on per-step loads of a trace */
} eplb_plan_shares_t;

/* The loads a plan made from a trace window is made for (eplb_plan_create_from_trace). */
typedef enum eplb_plan_window_loads {
  EPLB_WINDOW_LOADS_CHOSEN = 0, /* balanced: loads (and, served statically, shares) chosen by
                                   holding out parts of the window (below; default) */
  EPLB_WINDOW_LOADS_RAW = 1     /* the window's summed counts as they are */
} eplb_plan_window_loads_t;

/* How a plan will be served, which that choice scores. */
typedef enum eplb_plan_serve {
  EPLB_SERVE_SPLIT = 0, /* re-split every batch over the placement (the runtime's default
                           with several ranks; eplb sim --split-per-batch) (default) */
  EPLB_SERVE_SHARES = 1 /* by the plan's own shares (a static deployment, an export) */
} eplb_plan_serve_t;

/* How far balanced searches with uniform shares (what eplb.compat, eplb.vllm and
 * eplb.sglang plan). Held out, the in-window gain of the deep search does not carry over
 * (tools/python/bench/vs_deepseek.py: Qwen3-235B EP64 held-out balancedness 0.8348 full,
 * 0.8378 online; DeepSeek's 0.8299), while it costs 7 to 18 times the online search. */
typedef enum eplb_plan_effort {
  EPLB_EFFORT_FULL = 0,  /* every start, the iterated search and the uniform-share
                            certificate (default) */
  EPLB_EFFORT_ONLINE = 1 /* for a planner inside a serving loop: no iterated search, and the
                            count start aimed from the exact-share bound, which stays the
                            layer's certificate; same plans as full on two slots a GPU */
} eplb_plan_effort_t;

/* "full", "online"; NULL for other values. */
EPLB_API const char *eplb_plan_effort_str(eplb_plan_effort_t effort);
/* Parses an effort name. EPLB_EINVAL (detail names the value) if unknown. */
EPLB_API eplb_status_t eplb_plan_effort_parse(const char *name, eplb_plan_effort_t *out);

/* "exact", "uniform", "robust"; NULL for other values. */
EPLB_API const char *eplb_plan_shares_str(eplb_plan_shares_t shares);
/* Parses a shares mode. EPLB_EINVAL (detail names the value) if unknown. */
EPLB_API eplb_status_t eplb_plan_shares_parse(const char *name, eplb_plan_shares_t *out);
/* Parses "POLICY" or "POLICY:SHARES" (e.g. "balanced:robust", as `eplb sim --compare`
 * names its runs) into *policy and, with the suffix, *shares (left alone without one).
 * EPLB_OK; EPLB_EINVAL (NULL argument, or the detail of eplb_plan_policy_parse /
 * eplb_plan_shares_parse naming the unknown part; *policy may be written when only the
 * shares are bad). Any thread. */
EPLB_API eplb_status_t eplb_plan_policy_spec_parse(const char *spec, eplb_plan_policy_t *policy,
                                                   eplb_plan_shares_t *shares);

typedef struct eplb_plan_options {
  uint32_t struct_size;          /* the caller's sizeof (common.h, "Struct sizes") */
  eplb_plan_policy_t policy;     /* default balanced */
  uint32_t num_gpus;             /* G >= 1 (required) */
  uint32_t num_nodes;            /* N >= 1, G % N == 0 (default 1) */
  uint32_t num_replicas;         /* R >= E slots per layer (required) */
  uint32_t num_groups;           /* K expert groups, E % K == 0 (default 1) */
  const uint32_t *slots_per_gpu; /* [G] slots of each GPU (sum = R, each >= 1), or NULL for
                                    R / G each (then R % G == 0). Not for deepseek. Copied. */
  int keep_groups_on_nodes;      /* balanced/mip: every replica of a group on one node */
  double time_limit;             /* mip: wall seconds per layer, >= 0 (default 10; 0 = none):
                                    the layer returns within ~10% of it with the best plan
                                    found (metrics.mip_status EPLB_ETIMEOUT: not proven) */
  uint32_t improve_iterations;   /* balanced: local-search moves per layer (default 4*G, at
                                    most 256; 0 none) */
  /* incremental: re-plans from the current plan `from` (required, borrowed for the call;
   * same layers, experts, GPUs, nodes and slots per GPU as the loads and options, else
   * EPLB_EINVAL). Per layer it takes the best of: `from` with exact shares re-split for the
   * new loads (the guard: never worse), the balanced plan relabelled to keep as many
   * experts in the slots they already occupy as possible (an assignment of target GPUs to
   * physical GPUs), and a greedy that changes one or two slots at a time from `from`
   * (adding replicas of, or moving, the bottleneck experts of the exact split), keeping a
   * change only while it lowers
   *   J = max_load + move_weight * mean_load * slots_moved
   * (slots_moved: slots whose expert differs from `from`; mean_load = total / G), and never
   * more than move_budget slots per layer. Shares are exact. With keep_groups_on_nodes a
   * greedy change keeps every group on one node.
   * With shares = EPLB_SHARES_UNIFORM (what vLLM and SGLang serve) every candidate is
   * scored as served, J with the busiest GPU under 1/c shares: `from`, the plan above, the
   * even-share plan relabelled onto `from` (up to 256 GPUs) and a walk that changes one
   * slot (towards that plan, or to a replica of a hot expert) or swaps two at a time, each
   * step the change whose sorted GPU loads are least, keeping the best prefix (without
   * keep_groups_on_nodes only; a fixed work bound per layer). In every candidate an expert
   * that stays on a GPU keeps its slot. Sequential per layer: the same bytes for any thread
   * count. */
  const struct eplb_plan *from;
  uint32_t move_budget; /* incremental: max slots changed per layer (default 0 = unlimited) */
  double move_weight;   /* incremental: price of one changed slot in mean GPU loads
                           (default 0.005: a slot moves for >= 0.5% of the mean load) */
  /* locality (see "Locality" below): the cluster (required, borrowed for the call; its GPU
   * count must equal num_gpus, nodes may differ in GPU count), the co-activation of the
   * loads' steps (required, borrowed; same layers, experts and nodes), and the tolerance:
   * every layer's max GPU load stays <= (1 + locality_tolerance) x balanced's (default 0.01). */
  const eplb_cluster_t *cluster;
  const struct eplb_coact *coact;
  double locality_tolerance;
  /* Shares (see "Shares" below): the policy's own (default), uniform or robust. For robust,
   * the per-step loads come from steps [shares_step_begin, min(shares_step_end, steps)) of
   * shares_trace (required, borrowed for the call, read with eplb_trace_read_step; same
   * layers and experts as the loads): at most robust_steps of them (default 32), evenly
   * spaced, plus the aggregate loads as one more step weighted robust_aggregate_weight
   * in [0, 1] (default 0): objective (1 - a) mean_s T_s/m_s + a T_agg/m_agg. */
  eplb_plan_shares_t shares;
  eplb_trace_t *shares_trace;
  uint64_t shares_step_begin, shares_step_end; /* default 0, UINT64_MAX */
  uint32_t robust_steps;
  double robust_aggregate_weight;
  /* Threads that plan layers in parallel (see the file comment): 0 = the online cores
   * (default), at most EPLB_PLAN_MAX_THREADS. Appended last: eplb_abi_struct_size
   * ("eplb_plan_options") grows with it. */
  uint32_t threads;
  /* decode (see "Decode" below): the model and GPU whose modelled step time the policy
   * minimises (required, borrowed for the call; struct eplb_model_desc and eplb_gpu_desc
   * of eplb/model.h), and how many steps the loads sum (the policy plans for the mean
   * step, loads / decode_steps; <= 0 means 1). Appended last, like threads. */
  const struct eplb_model_desc *model;
  const struct eplb_gpu_desc *gpu;
  double decode_steps;
  /* Appended. Planning for the traffic that follows a window (eplb_plan_create_from_trace
   * only: it has the window's steps; see "Plans that generalise" there). */
  eplb_plan_window_loads_t window_loads; /* default EPLB_WINDOW_LOADS_CHOSEN */
  eplb_plan_serve_t serve;               /* default EPLB_SERVE_SPLIT */
  eplb_plan_effort_t effort;             /* appended; default EPLB_EFFORT_FULL */
} eplb_plan_options_t;

/* ---- Decode ----------------------------------------------------------------
 * The decode policy minimises the modelled time of the slowest GPU of a decode step
 * (eplb/model.h): a GPU pays one weight read per replica that gets any token, so where an
 * expert's tokens are few they are best on one of its replicas, and where they are many,
 * spread for token balance. Two placements are tried, balanced's and one that packs one
 * replica of every expert by load and then puts the spare replicas one per GPU (so every
 * GPU has a replica a light batch can leave idle); each gets eplb_decode_split's shares on
 * the mean step's loads (loads / decode_steps), and the one whose slowest GPU models faster
 * is kept (metrics.fallback = 1 when that is balanced's). When the mean step is
 * memory-bound (a slot's mean tokens cost less compute than its weight read) both the
 * placements and that choice use loads shrunk halfway to the mean expert: a window's skew
 * largely does not recur in the next one, and a placement fitted to it loses held out. A plan
 * served as is thus already gathers light experts' tokens; a runtime that re-splits every batch
 * calls eplb_decode_split with the batch's counts. Without opts.model and opts.gpu: EPLB_EINVAL. */

/* Most threads one eplb_plan_create may use. */
#define EPLB_PLAN_MAX_THREADS 1024u

/* ---- Shares ----------------------------------------------------------------
 * A plan's shares are static: a serving stack that cannot re-split each batch uses them
 * for every step. EPLB_SHARES_EXACT keeps the policy's own shares (exact split of the
 * planned loads for balanced, mip, incremental and locality; uniform for deepseek): optimal
 * for the aggregate loads, fragile against the shifts between steps. EPLB_SHARES_UNIFORM
 * gives every replica of an expert 1/c: what DeepSeek, SGLang and TensorRT-LLM serve (their
 * exported plans carry no shares, so plan with uniform shares when exporting).
 * With the balanced policy, uniform shares are an objective of their own: replica counts
 * and placement are chosen for per-replica load load/c (starts from a min-max packing and
 * from DeepSeek's placement, then a descent on the busiest GPU that swaps replicas or moves
 * a slot from one expert to another), so every layer's max GPU load is <= the deepseek
 * policy's on the same inputs (its hierarchical mode included). Its certificate is the
 * uniform-share bound (eplb_plan_lower_bound_kind): the exact-share bound raised, on a
 * layer more than 0.1% above it, to the largest load at which a relaxation of "every GPU
 * at most L" fails for every choice of counts (dual feasible functions of bin packing:
 * replicas above L/2 cannot share a GPU, and so on), which holds for every plan that
 * splits evenly, keeping groups on nodes or not; metrics.fallback = 1 marks a layer whose
 * result grew from DeepSeek's placement. With other policies uniform shares replace the
 * policy's own after its placement.
 * EPLB_SHARES_ROBUST solves eplb_split_solve_robust (eplb/split.h) on the per-step loads:
 * shares that maximise the harmonic mean of the per-step balancedness. It replaces the
 * shares after the policy's placement, which stays exactly as with exact shares (metrics
 * are those of the final shares on the planned loads). Not for locality (its node shares
 * are the policy): EPLB_EINVAL. */

/* ---- Locality --------------------------------------------------------------
 * The locality policy cuts cross-node token copies (a token from node n routed to a
 * replica on another node) at (nearly) balanced's max GPU load:
 *  1. balanced's plan of the layer gives the target T = (1 + tolerance) x its max load;
 *  2. replica counts follow balanced's min-max rule; an expert with c replicas is put on
 *     min(c, N) distinct nodes (hot experts get a local copy on every node), the others
 *     are partitioned over the nodes (greedy growth then pairwise swaps) so that experts
 *     picked together, and experts picked mostly by one node's tokens, share a node,
 *     within each node's slots and load;
 *  3. within each node replicas are placed on its GPUs by balanced's machinery;
 *  4. per-source-node shares solve the transportation problem: tokens x[n][r] of
 *     expert e from node n to replica r, sum_r x[n][r] = demand[n][e], every GPU load
 *     <= T, minimising the copies that cross nodes (the split's locality stage,
 *     eplb_split_solve_local, the min-cost flow the runtime's per-batch split runs).
 * When the placement cannot meet T the layer keeps balanced's placement and gets such
 * node shares on it (metrics.fallback = 1); it is never worse than T.
 * Demand per (source node, expert) is the layer's load split in the proportions of the
 * co-activation's node token counts (by the GPUs' share of the nodes when it has none).
 * The plan then carries node_share (eplb_plan_node_share): a token of expert e from node
 * n goes to replica r with probability node_share[n][r]; share[r] is the global mix
 * sum_n x[n][r] / load_e. */

/* The defaults in the comments above, in the first `size` bytes of *opts (common.h,
 * "Struct sizes"). EPLB_OK, or EPLB_EINVAL (NULL, a size out of range). */
EPLB_API eplb_status_t eplb_plan_options_init(eplb_plan_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_plan_options_init. */
static inline void eplb_plan_options_default(eplb_plan_options_t *opts) {
  (void)eplb_plan_options_init(opts, sizeof *opts);
}

/* Checks the values of opts that need neither loads nor inputs, whatever the
 * policy and shares: threads (0..EPLB_PLAN_MAX_THREADS), time_limit (>= 0
 * seconds), locality_tolerance and move_weight (finite, >= 0), robust_steps
 * (1..65536), robust_aggregate_weight (in [0, 1]). eplb_plan_create makes the
 * same checks first; a caller calls this to refuse a bad value before reading
 * the inputs. Returns EPLB_OK, or EPLB_EINVAL with a detail that starts with
 * the field's name and value ("threads 2000: must be 0..1024 (0 = the online
 * cores)"), so that a caller can name its own option for the field. opts is
 * borrowed and not changed; thread-safe (the detail is the calling thread's). */
EPLB_API eplb_status_t eplb_plan_options_check(const eplb_plan_options_t *opts);

/* Per-layer certificate and, for mip, the solver outcome. */
typedef struct eplb_plan_layer_metrics {
  double total_load;   /* sum of the layer's loads */
  double mean_load;    /* total / G */
  double max_load;     /* busiest GPU under the plan's shares */
  double lower_bound;  /* see the file comment; > 0 unless the layer has no load */
  double balancedness; /* mean / max (1 when max == 0) */
  /* mip only (else 0 / EPLB_OK): relative gap (max - best bound) / max proven by the
   * solver, and its status (EPLB_OK optimal, ETIMEOUT, ESOLVER, EINFEASIBLE): on failure
   * the layer keeps the balanced plan. */
  double mip_gap;
  eplb_status_t mip_status;
  int fallback;         /* 1 when the policy's own result was replaced by a better guard plan */
  uint32_t slots_moved; /* incremental: slots whose expert differs from opts.from (else 0) */
} eplb_plan_layer_metrics_t;

typedef struct eplb_plan_summary {
  eplb_plan_policy_t policy;
  double seconds;           /* wall time of eplb_plan_create (0 for a plan read from a file) */
  double mean_balancedness; /* over layers */
  double min_balancedness;
  double mean_ratio; /* mean over layers of max_load / lower_bound (layers with a zero
                        bound count as 1) */
  double max_ratio;
  uint32_t fallback_layers; /* layers with metrics.fallback set */
  uint64_t slots_moved;     /* sum of metrics.slots_moved (incremental) */
} eplb_plan_summary_t;

/* eplb_plan_t: see eplb/common.h (opaque there, so that eplb/runtime.h
 * needs no planner header). */

/* Plans every layer of `loads` ([L][E], values >= 0 and finite) under opts.
 * Returns EPLB_OK, EPLB_EINVAL (inconsistent options: R < E, G % N != 0,
 * E % K != 0, R % G != 0 with uniform slots, uneven slots with deepseek,
 * groups that cannot fit their nodes...; the detail names the value),
 * EPLB_EFORMAT (a negative/NaN/infinite load, detail names layer and
 * expert; a layer whose loads sum above 2^1000, detail names the layer),
 * EPLB_ENOMEM. A mip solver failure is not an error: the layer
 * keeps the balanced plan and metrics.mip_status says why. On success *out
 * is a new plan owned by the caller (eplb_plan_destroy). */
EPLB_API eplb_status_t eplb_plan_create(const eplb_loads_t *loads, const eplb_plan_options_t *opts,
                                        eplb_plan_t **out);

/* Releases the plan. NULL is a no-op. */
EPLB_API void eplb_plan_destroy(eplb_plan_t *plan);

/* Shape. */
EPLB_API uint32_t eplb_plan_num_layers(const eplb_plan_t *plan);
EPLB_API uint32_t eplb_plan_num_experts(const eplb_plan_t *plan);
EPLB_API uint32_t eplb_plan_num_gpus(const eplb_plan_t *plan);
EPLB_API uint32_t eplb_plan_num_nodes(const eplb_plan_t *plan);
EPLB_API uint32_t eplb_plan_num_slots(const eplb_plan_t *plan);
EPLB_API eplb_plan_policy_t eplb_plan_policy(const eplb_plan_t *plan);
/* [G] slots of each GPU; valid for the plan's lifetime. */
EPLB_API const uint32_t *eplb_plan_slots_per_gpu(const eplb_plan_t *plan);

/* Per-layer arrays, valid for the plan's lifetime; NULL if layer >= L.
 * phy2log: [R] expert of each slot. share: [R]. gpu_load: [G]. */
EPLB_API const int32_t *eplb_plan_phy2log(const eplb_plan_t *plan, uint32_t layer);
EPLB_API const double *eplb_plan_share(const eplb_plan_t *plan, uint32_t layer);
EPLB_API const double *eplb_plan_gpu_load(const eplb_plan_t *plan, uint32_t layer);
/* Per-source-node shares [N][R] of a layer (locality plans and plan files with
 * "node_share"): node_share[n*R + r] = fraction of expert phy2log[r]'s tokens from node n
 * that go to replica r (they sum to 1 over each expert's replicas, for every n); NULL when
 * the plan has none or layer >= L. N is eplb_plan_node_share_nodes (the cluster's nodes,
 * which may differ from eplb_plan_num_nodes for a heterogeneous cluster). */
EPLB_API const double *eplb_plan_node_share(const eplb_plan_t *plan, uint32_t layer);
EPLB_API uint32_t eplb_plan_node_share_nodes(const eplb_plan_t *plan);

/* Replica count of each expert: out[E]. EPLB_EINVAL if layer >= L. */
EPLB_API eplb_status_t eplb_plan_logcnt(const eplb_plan_t *plan, uint32_t layer, uint32_t *out);

/* Which copy of its expert each slot is: out[R], the replicas of an expert numbered
 * 0..logcnt-1, so that log2phy[e][out[r]] = r for e = phy2log[r]. A deepseek plan made by
 * eplb_plan_create numbers them as DeepSeek's rebalance_experts does (phyrank: 0 is the
 * original, then in the order replicas were added), so its log2phy is the reference's;
 * other plans, and plans read from a file, number them in slot order. EPLB_EINVAL if
 * layer >= L or NULL, EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_plan_replica_rank(const eplb_plan_t *plan, uint32_t layer,
                                              uint32_t *out);

EPLB_API eplb_status_t eplb_plan_layer_metrics(const eplb_plan_t *plan, uint32_t layer,
                                               eplb_plan_layer_metrics_t *out);
EPLB_API void eplb_plan_summary(const eplb_plan_t *plan, eplb_plan_summary_t *out);
/* Which lower bound the plan's metrics (lower_bound, max/LB) are certified against:
 * "exact-share" (eplb__lower_bound: no plan, whatever its shares, has a lower max load)
 * or "uniform-share" (balanced planned with EPLB_SHARES_UNIFORM: no plan that splits
 * each expert evenly over its replicas has a lower max load; see "Shares";
 * eplb_plan_set_shares turns it back to "exact-share"). Never NULL (a NULL plan gives
 * "exact-share"). Static string; any thread. */
EPLB_API const char *eplb_plan_lower_bound_kind(const eplb_plan_t *plan);
/* The summary as one JSON object, the "summary" of the plan file and of
 * `eplb plan --json`: {"policy", "seconds", "layers", "mean_balancedness",
 * "min_balancedness", "mean_max_over_lower_bound", "max_max_over_lower_bound",
 * "lower_bound_kind" (eplb_plan_lower_bound_kind), "fallback_layers"}, plus "slots_moved"
 * (incremental) and "mip_layers_optimal", "mip_max_gap" (mip); reals with 17 significant digits
 * (they read back to the same double). Like snprintf: writes at most `size` bytes including the NUL
 * into buf (NUL-terminated when size > 0; buf may be NULL when size is 0) and
 * stores the full length without the NUL in *len (may be NULL): call with
 * size 0 to learn it. Returns EPLB_OK, EPLB_EINVAL (NULL plan, NULL buf with
 * size > 0), EPLB_ERANGE (a figure is not finite), EPLB_ENOMEM. Any thread
 * (the plan is only read). */
EPLB_API eplb_status_t eplb_plan_summary_json(const eplb_plan_t *plan, char *buf, size_t size,
                                              size_t *len);

/* Re-evaluates the plan on other loads (same L and E, else EPLB_ESHAPE with
 * both shapes in the detail): recomputes GPU loads with the plan's shares,
 * and every metric and bound. keep_groups_on_nodes/num_groups of the plan
 * select the bound, and a uniform-share plan (eplb_plan_lower_bound_kind, kept
 * in the plan file) is certified against the uniform-share bound again. EPLB_EFORMAT for a bad load
 * value. */
EPLB_API eplb_status_t eplb_plan_evaluate(eplb_plan_t *plan, const eplb_loads_t *loads);

/* Replaces layer `layer`'s shares with share[R] (copied), e.g. after
 * re-splitting them for new loads (eplb_split_solve). Each share must be in
 * [0, 1] and each expert's shares must sum to 1 (1e-6). On success the
 * layer's GPU loads and metrics are zero until the next eplb_plan_evaluate
 * (the plan does not keep loads); on error the plan is unchanged.
 * Returns EPLB_OK, EPLB_EINVAL (NULL, layer >= L), EPLB_EFORMAT (a bad share;
 * the detail names the slot or expert), EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_plan_set_shares(eplb_plan_t *plan, uint32_t layer, const double *share);

/* ---- files -------------------------------------------------------------- */

/* Writes the plan file (JSON, format "eplb-plan", version 1) atomically
 * (temporary file + rename: no partial file is ever visible at path).
 * EPLB_EIO on a system failure. */
EPLB_API eplb_status_t eplb_plan_write(const eplb_plan_t *plan, const char *path);

/* ---- plans from a serving stack's arrays ------------------------------- */

/* What a serving stack holds of its placement: vLLM's physical_to_logical
 * map and SGLang's physical_to_logical_map are phy2log; neither carries
 * shares (uniform 1/c over an expert's c replicas is what they serve). */
typedef struct eplb_plan_arrays {
  uint32_t struct_size; /* the caller's sizeof (common.h, "Struct sizes") */
  uint32_t num_layers, num_experts, num_gpus;
  uint32_t num_nodes;            /* default 1; num_gpus must be a multiple */
  uint32_t num_slots;            /* physical slots per layer (all GPUs) */
  const uint32_t *slots_per_gpu; /* [num_gpus], summing to num_slots; NULL: even */
  const int32_t *phy2log;        /* [num_layers][num_slots], slots GPU-major */
  const double *shares;          /* [num_layers][num_slots]; NULL: uniform 1/c */
  eplb_plan_policy_t policy;     /* recorded in the plan (default DEEPSEEK) */
} eplb_plan_arrays_t;

/* num_nodes 1, policy EPLB_POLICY_DEEPSEEK, the rest zero/NULL. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_plan_arrays_init(eplb_plan_arrays_t *arrays, size_t size);
/* The defaults by value, sized for the caller's header. */
static inline eplb_plan_arrays_t eplb_plan_arrays_default(void) {
  eplb_plan_arrays_t arrays;
  (void)eplb_plan_arrays_init(&arrays, sizeof arrays);
  return arrays;
}

/* A plan from the arrays (copied; the caller keeps them), checked as a plan
 * file is: every id in [0, num_experts), every expert with a replica, shares
 * finite, >= 0 and summing to 1 per expert (1e-6). Metrics are zero until
 * eplb_plan_evaluate. With it a policy can start from what a stack serves
 * now (opts.from of EPLB_POLICY_INCREMENTAL). Thread-safe. Returns EPLB_OK,
 * EPLB_EINVAL (NULL), EPLB_ESHAPE (a count out of its limit, slots that do
 * not add up), EPLB_ERANGE (an id out of range; the detail names layer and
 * slot), EPLB_EFORMAT (an expert without a replica, a bad share), EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_plan_from_arrays(const eplb_plan_arrays_t *arrays, eplb_plan_t **out);

/* Reads a plan file. Accepts a minimal plan: num_layers,
 * num_logical_experts, num_gpus, num_nodes (default 1), slots_per_gpu (a
 * list, or one number for every GPU) and layers[].phy2log; share optional
 * (uniform over an expert's replicas when absent). Strict otherwise: a key
 * eplb_plan_write does not write (top level, layer or summary), a value of
 * another type, an unknown policy or bound kind is EPLB_EFORMAT naming the
 * key. Every expert needs a replica; shares must be >= 0 and sum to 1 per
 * expert (1e-6). Metrics in the file are ignored: the plan has no loads
 * until eplb_plan_evaluate (metrics are zero until then). EPLB_EIO,
 * EPLB_EFORMAT (detail names the field and layer), EPLB_ESHAPE,
 * EPLB_ERANGE (an expert id out of range). */
EPLB_API eplb_status_t eplb_plan_read(const char *path, eplb_plan_t **out);

typedef enum eplb_plan_export_format {
  EPLB_EXPORT_DEEPSEEK_CSV = 0, /* DIR/phy2log.csv [L][R], DIR/log2phy.csv [L][E*maxcnt] (-1
                                   padded, expert-major), DIR/logcnt.csv [L][E] */
  EPLB_EXPORT_SGLANG = 1,       /* DIR/expert_location.json {"physical_to_logical_map": [L][R]}
                                   for SGLang --init-expert-location */
  EPLB_EXPORT_TRTLLM = 2        /* DIR/moe_load_balancer.yaml: num_slots and
                                   initial_global_assignments {layer: [R expert ids]} */
} eplb_plan_export_format_t;

/* "deepseek-csv", "sglang", "trtllm"; NULL for other values. */
EPLB_API const char *eplb_plan_export_format_str(eplb_plan_export_format_t format);
EPLB_API eplb_status_t eplb_plan_export_format_parse(const char *name,
                                                     eplb_plan_export_format_t *out);

/* Writes the export files into the existing directory dir, each atomically.
 * These formats carry no shares (serving stacks split uniformly): the exported plan is
 * served with uniform shares, so plan it with shares = EPLB_SHARES_UNIFORM (`eplb plan
 * --shares uniform`) to see the balancedness it will really get. */
EPLB_API eplb_status_t eplb_plan_export(const eplb_plan_t *plan, eplb_plan_export_format_t format,
                                        const char *dir);

/* The names of the files eplb_plan_export writes for format into its directory, in the
 * order it writes them, as a NULL-terminated list of static strings (so that a caller can
 * remove an interrupted export without listing the directory); NULL for an unknown
 * format. Any thread. */
EPLB_API const char *const *eplb_plan_export_files(eplb_plan_export_format_t format);

/* ---- migration between two plans ---------------------------------------- */

typedef struct eplb_plan_diff_stats {
  uint64_t slots_moved;        /* slots whose expert differs, all layers */
  uint64_t moves[3];           /* per link class (eplb_link_class_t of eplb/topo.h; nodes
                                  as in the plan: GPU g on node g / (G/N)) */
  uint64_t bytes[3];           /* moves * expert_bytes per link class */
  uint32_t layers_changed;     /* layers with at least one moved slot */
  uint32_t max_layer_moved;    /* most slots moved in one layer */
  uint32_t rounds;             /* transfer rounds (0 when nothing moves) */
  uint64_t max_bytes_in_round; /* most bytes one GPU receives in one round (same-GPU copies
                                  included) */
} eplb_plan_diff_stats_t;

/* How a migration is scheduled: what the runtime does (eplb/runtime.h). */
typedef struct eplb_plan_diff_options {
  uint32_t struct_size;      /* the caller's sizeof (common.h, "Struct sizes") */
  uint64_t expert_bytes;     /* bytes of one expert's weights, >= 1 (default 44040192: one
                                DeepSeek-V3 routed expert in FP8) */
  uint64_t staging_bytes;    /* staging memory per GPU for one round, 0 = unlimited, else
                                >= expert_bytes (default 1 GiB: the runtime's default) */
  uint32_t layers_per_round; /* layers switched per round, >= 1 (default 4: the runtime's
                                layers_per_step) */
} eplb_plan_diff_options_t;

/* Fills *opts with the defaults above. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_plan_diff_options_init(eplb_plan_diff_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_plan_diff_options_init. */
static inline void eplb_plan_diff_options_default(eplb_plan_diff_options_t *opts) {
  (void)eplb_plan_diff_options_init(opts, sizeof *opts);
}

/* The migration from plan `from` to plan `to` (same layers, experts, GPUs,
 * nodes and slots per GPU, else EPLB_ESHAPE naming both shapes), scheduled
 * exactly as the runtime executes it when every layer that differs switches
 * (a plan taken from eplbd's mailbox; the runtime and this function share
 * one implementation). Every slot whose expert changes receives that
 * expert's weights from a slot holding it in `from`: one on the same GPU when
 * there is one, else on the same node, else any, spreading the sends of a
 * layer over the candidate sources. Transfers (same-GPU copies included: the
 * live slot serves until the switch, so they go through staging too) are
 * grouped into rounds of whole layers, in layer order: at most
 * layers_per_round layers and staging_bytes received per GPU in a round,
 * though a round always holds one layer (so max_bytes_in_round exceeds
 * staging_bytes when one layer alone needs more). Fills *out. Returns
 * EPLB_OK, EPLB_EINVAL (NULL argument, bad sizes), EPLB_ESHAPE, EPLB_EFORMAT
 * (an expert of `to` in no slot of `from`), EPLB_ERANGE (byte counts
 * overflow), EPLB_ENOMEM. Reads both plans only. */
EPLB_API eplb_status_t eplb_plan_diff_schedule(const eplb_plan_t *from, const eplb_plan_t *to,
                                               const eplb_plan_diff_options_t *opts,
                                               eplb_plan_diff_stats_t *out);

/* eplb_plan_diff_schedule with layers_per_round unlimited. */
EPLB_API eplb_status_t eplb_plan_diff(const eplb_plan_t *from, const eplb_plan_t *to,
                                      uint64_t expert_bytes, uint64_t staging_bytes,
                                      eplb_plan_diff_stats_t *out);

/* ---- Planning from a trace window -----------------------------------------------
 * Plans that generalise: a plan exactly fitted to a window serves the steps after it
 * poorly (the mix of requests moves; on ESFT, held out, balanced on the raw window trails
 * DeepSeek's EPLB in 8 of 12 cases). With window_loads CHOSEN (the default) and the
 * balanced policy, a window of 4 steps or more chooses its planning loads by four folds:
 * each candidate plans the window less one quarter and is scored on that quarter, each
 * quarter in turn (the mix moves both ways), as it will be served (serve: the exact split
 * of each step, or the plan's own shares); the best mean wins (ties to the window as it
 * is) and plans the whole window. Candidates: balanced on loads^p, p = 1, 1/2, 1/4 (per
 * layer rescaled to the same total; a flatter load hedges: a warm expert gets a replica
 * before it is hot); with SERVE_SHARES and the policy's own shares also balanced with
 * uniform shares (exact shares fitted to a window hedge nothing) and DeepSeek's placement
 * (even slots only). With SERVE_SHARES every candidate's placement is then refined for the
 * window's steps rather than their sum (slots swapped between GPUs while the mean over the
 * steps of the busiest GPU's load falls; replica counts and shares kept; plans with
 * locality's per-node shares or keep_groups_on_nodes are left as they are): served
 * statically, experts that peak in the same steps must not share a GPU. The plan's metrics
 * are those of the window's own loads, and its policy is the candidate's.
 * Every rank choosing from the same window chooses alike.
 *
 * One call for "plan the steps [step_begin, step_end) of a trace": the loads are the
 * window's counts summed (eplb_trace_window_sum), and the side inputs a policy needs come
 * from the same window unless opts supplies them: the co-activation for locality
 * (eplb_coact_from_trace with opts->cluster), the per-step loads for robust shares
 * (shares_trace = trace, shares steps = the window). incremental without opts->from plans
 * from `current` when given, else as balanced (a first plan has nothing to change from).
 * window (may be NULL; else the trace's layers x experts) receives the summed loads, for a
 * caller that also judges the plan on them (eplb_plan_switch_select) without reading the
 * steps again. The simulator and the replay plan through it. Returns what
 * eplb_trace_window_sum, eplb_coact_from_trace and eplb_plan_create return; EPLB_EINVAL for
 * a NULL argument, EPLB_ESHAPE for a window of another shape. */
EPLB_API eplb_status_t eplb_plan_create_from_trace(eplb_trace_t *trace, uint64_t step_begin,
                                                   uint64_t step_end,
                                                   const eplb_plan_options_t *opts,
                                                   const eplb_plan_t *current, eplb_loads_t *window,
                                                   eplb_plan_t **out);

/* ---- Switching -------------------------------------------------------------
 * Which layers of a new plan are worth switching to: the one rule the runtime's replans,
 * the simulator's rebalancing and eplbd's per-layer gauges follow. A layer's balancedness
 * (mean / max GPU load, each plan with its own shares) is measured on `loads`, the window
 * the new plan was made from (or, for decode plans, its modelled step time: see the
 * options). A layer whose placement and shares are identical never
 * switches; the others switch when the new plan raises its balancedness by at least
 * gain_threshold, largest gains first (ties by layer), skipping a layer whose changed
 * slots no longer fit the move budget. A layer with new shares only moves no weights. */
typedef struct eplb_plan_switch_options {
  uint32_t struct_size;  /* the caller's sizeof (common.h, "Struct sizes") */
  double gain_threshold; /* not NaN (default 0.01); <= -1 switches every layer that
                            differs, > 1 none */
  uint64_t move_budget;  /* slots whose expert may change over all switched layers;
                            0 = unlimited (default 0) */
  /* Appended (ABI). The decode objective, for decode plans: with model and gpu set
   * (both or neither, else EPLB_EINVAL), a layer's gain is how much lower its modelled
   * step time is under the new plan, relative to the current plan's, instead of the rise
   * of its balancedness: eplb_decode_split_time of each plan's own shares on the mean
   * step (loads / decode_steps), with eplb_decode_split_options_for(model, gpu, the plans'
   * GPUs, gpus_per_node). A decode plan gathers a light expert's tokens on few replicas,
   * so its balancedness falls where its step time falls too. Default NULL, 1, 0. */
  const struct eplb_model_desc *model;
  const struct eplb_gpu_desc *gpu;
  double decode_steps;    /* steps the loads sum; <= 0 means 1 */
  uint32_t gpus_per_node; /* 0: all GPUs on one node */
} eplb_plan_switch_options_t;

/* What eplb_plan_switch_select chose. */
typedef struct eplb_plan_switch_summary {
  uint32_t layers_switched;
  uint64_t slots_moved;           /* slots whose expert changes in the switched layers */
  double mean_balancedness_cur;   /* mean over layers of the current plan's, on the loads */
  double mean_balancedness_next;  /* the same for the new plan */
  double mean_balancedness_after; /* the plan in force after the switch */
} eplb_plan_switch_summary_t;

/* Fills *opts with the defaults above. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_plan_switch_options_init(eplb_plan_switch_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_plan_switch_options_init. */
static inline void eplb_plan_switch_options_default(eplb_plan_switch_options_t *opts) {
  (void)eplb_plan_switch_options_init(opts, sizeof *opts);
}

/* Selects the layers of `next` to switch to from `cur` (same layers, experts, GPUs and
 * slots per GPU, else EPLB_ESHAPE) on `loads` (same layers and experts): take[L] receives 1
 * for a layer that switches, 0 otherwise; *out (may be NULL) the summary. opts NULL: the
 * defaults. Returns EPLB_OK, EPLB_EINVAL (NULL plan, loads or take; a NaN threshold),
 * EPLB_ESHAPE, EPLB_ENOMEM. Reads the plans only. */
EPLB_API eplb_status_t eplb_plan_switch_select(const eplb_plan_t *cur, const eplb_plan_t *next,
                                               const eplb_loads_t *loads,
                                               const eplb_plan_switch_options_t *opts,
                                               uint8_t *take, eplb_plan_switch_summary_t *out);

/* Makes `next` the plan in force after a selection: every layer with take[l] == 0 gets
 * `cur`'s placement, shares, node shares and metrics back (same shape as
 * eplb_plan_switch_select requires, and the same node-share rows, else EPLB_ESHAPE).
 * Returns EPLB_OK, EPLB_EINVAL (NULL argument), EPLB_ESHAPE. */
EPLB_API eplb_status_t eplb_plan_switch_apply(eplb_plan_t *next, const eplb_plan_t *cur,
                                              const uint8_t *take);

/* ---- Continuous re-placement: a few slots a step ------------------------------------
 * A plan from a past window serves the steps that follow poorly when the mix of requests
 * changes (ESFT on 8 GPUs: one plan 0.82-0.85 per-step balancedness with the per-batch
 * split); moving a few slots every step towards the recent counts follows it. Each step
 * the runtime (and the simulator, which models the runtime) asks eplb_plan_step_moves
 * which slots to change: an incremental plan from the target placement `cur` (the slots
 * in flight counted at their new expert) on the recent loads, at most max_per_layer slots
 * a layer, a move kept only where it lowers the layer's exact-split max load by more than
 * move_weight x mean load per moved slot (the cost of a slot out of service for a step
 * and of its bytes), then layers taken by gain per moved slot, largest first, while no
 * GPU receives more than slots_per_gpu slots. A slot in flight (busy) is never moved or
 * copied from; in_place adds that every expert keeps a replica in service. Each move
 * names the slot its weights are copied from: a slot of cur holding the new expert, on
 * the same node when there is one, the least used so far. A layer's moves are meant to
 * land together (the runtime and the simulator do). */
/* eplb_plan_step_options_t is defined in eplb/common.h (the runtime's config
 * embeds it). */

/* One slot that changes: slot `slot` of `layer` stops serving from_expert and, once
 * the weights of to_expert are copied from slot src_slot (same layer), serves it. */
typedef struct eplb_plan_move {
  uint32_t layer, slot, src_slot;
  int32_t from_expert, to_expert;
} eplb_plan_move_t;

/* Fills *opts with the defaults above. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_plan_step_options_init(eplb_plan_step_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_plan_step_options_init. */
static inline void eplb_plan_step_options_default(eplb_plan_step_options_t *opts) {
  (void)eplb_plan_step_options_init(opts, sizeof *opts);
}

/* Chooses this step's moves from the target placement `cur` (a plan; its shares are not
 * read) on `loads` (same layers and experts; e.g. the last few steps' counts): busy
 * [L][R] (may be NULL: none) marks slots in flight or out of service. Writes up to `cap`
 * moves into moves (layer order, then slot order) and their count into *n; a layer's
 * moves are taken all or none. Deterministic: the same inputs give the same moves on
 * every rank and at any thread count. Returns EPLB_OK, EPLB_EINVAL (NULL cur, loads or
 * n; moves NULL with cap > 0; a negative or NaN move_weight), EPLB_ESHAPE (loads and cur
 * differ in layers or experts), the planner's statuses (EPLB_EFORMAT for a bad load,
 * EPLB_ENOMEM). */
EPLB_API eplb_status_t eplb_plan_step_moves(const eplb_plan_t *cur, const uint8_t *busy,
                                            const eplb_loads_t *loads,
                                            const eplb_plan_step_options_t *opts,
                                            eplb_plan_move_t *moves, size_t cap, size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_PLAN_H */
