/* eplb/split.h — the token split over a fixed placement (the split LP).
 *
 * A layer has E logical experts with loads w_e >= 0 (tokens, or any
 * non-negative weight), G GPUs and R replicas (physical slots). Slot r holds
 * expert phy2log[r]; slots are GPU-major: GPU 0 owns the first
 * slots_per_gpu[0] slots, GPU 1 the next slots_per_gpu[1], and so on.
 *
 * The split chooses amounts x_r >= 0 with sum over e's replicas of x_r = w_e
 * that minimise T = max over GPUs g of sum over g's replicas of x_r. The
 * optimum is
 *
 *     T* = max over expert sets A of w(A) / |N(A)|,
 *
 * N(A) being the GPUs holding a replica of an expert in A. The set attaining it
 * is the bottleneck certificate: no split can do better than T*, and the
 * returned split reaches it.
 *
 * Two solvers share one contract:
 *  - eplb_split_solve: exact combinatorial solver (Newton iterations on T, one
 *    max-flow each, on a graph from which single-GPU experts are contracted).
 *    Microseconds per layer at DeepSeek-V3 sizes; no allocation once the handle's
 *    workspace has grown to the problem size.
 *  - eplb_split_solve_glpk: the same LP as a GLPK model (the reference).
 *
 * Thread rules: a handle is used by one thread at a time; distinct handles may
 * be used concurrently. The GLPK path uses GLPK's per-thread environment: a
 * thread that called eplb_split_solve_glpk must call eplb_split_glpk_thread_done()
 * before it exits (the main thread may skip it; it only frees memory).
 */
#ifndef EPLB_SPLIT_H
#define EPLB_SPLIT_H

#include "eplb/common.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- options and handle ------------------------------------------------ */

typedef enum eplb_split_mode {
  /* Real-valued amounts; T* exact up to double rounding (see result). */
  EPLB_SPLIT_FRACTIONAL = 0,
  /* Whole tokens: loads must be integers <= 2^53; amounts are integers and
   * the largest GPU load is ceil(T*), the integer optimum. */
  EPLB_SPLIT_INTEGER = 1
} eplb_split_mode_t;

typedef struct eplb_split_options {
  uint32_t struct_size;   /* the caller's sizeof (common.h, "Struct sizes") */
  eplb_split_mode_t mode; /* default EPLB_SPLIT_FRACTIONAL */
  /* Warm start (default 1): the handle remembers the last bottleneck set of
   * each placement it solved (per layer index for eplb_split_solve_layers)
   * and starts Newton's iterations from that set's ratio under the new loads,
   * a valid lower bound that is usually the optimum for similar batches. The
   * result is the same as a cold solve; only the iteration count changes. */
  int warm_start;
  /* GLPK path only: time limit in seconds for one layer (0 = none). GLPK's
   * limit is not a hard deadline. */
  double glpk_time_limit_s;
  /* eplb_split_solve_layers only: layers solved on this many threads, the calling one
   * included (default 1: none started; 0: the online cores; at most
   * EPLB_SPLIT_MAX_THREADS). The results are the same for any count. Appended last. */
  uint32_t threads;
} eplb_split_options_t;

#define EPLB_SPLIT_MAX_THREADS 1024u

/* Fills *options with the defaults above. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_split_options_init(eplb_split_options_t *options, size_t size);
/* The defaults at the caller's sizeof, through eplb_split_options_init. */
static inline void eplb_split_options_default(eplb_split_options_t *options) {
  (void)eplb_split_options_init(options, sizeof *options);
}

/* Opaque solver handle: holds the workspace and the warm-start state. */
typedef struct eplb_split eplb_split_t;

/* Creates a solver. options NULL means defaults.
 * Returns EPLB_OK, EPLB_EINVAL (out NULL, unknown mode, warm_start not 0/1,
 * negative or NaN time limit, threads above EPLB_SPLIT_MAX_THREADS), EPLB_ENOMEM.
 * *out is NULL on failure. */
EPLB_API eplb_status_t eplb_split_create(const eplb_split_options_t *options, eplb_split_t **out);

/* Releases the solver. NULL is a no-op. */
EPLB_API void eplb_split_destroy(eplb_split_t *split);

/* Forgets the warm-start state (the next solve is cold). NULL is a no-op. */
EPLB_API void eplb_split_reset(eplb_split_t *split);

/* ---- problem and result ------------------------------------------------ */

/* One layer's placement. The arrays are borrowed for the call only. */
typedef struct eplb_split_problem {
  uint32_t num_experts;          /* E >= 1 */
  uint32_t num_gpus;             /* G >= 1 */
  uint32_t num_slots;            /* R >= 1 */
  const uint32_t *phy2log;       /* [R]: expert held by slot r, < E */
  const uint32_t *slots_per_gpu; /* [G]: may hold zeros; must sum to R */
} eplb_split_problem_t;

/* Output. Arrays are provided by the caller (NULL where marked optional) and
 * fully overwritten on EPLB_OK; their contents are unspecified on error. */
typedef struct eplb_split_result {
  double *share;               /* [R] required: x_r / w_e; per expert they are >= 0
                                * and sum to 1. For w_e = 0: uniform over e's
                                * replicas. */
  double *amount;              /* [R] optional: x_r (integers in integer mode) */
  double *gpu_load;            /* [G] required: sum of x_r on each GPU */
  uint8_t *bottleneck_experts; /* [E] optional: 1 for experts in the set A */
  uint8_t *bottleneck_gpus;    /* [G] optional: 1 for GPUs in N(A) */
  /* Scalars written by the solver: */
  double t_star;                   /* T* = w(A)/|N(A)|, computed from the set A by
                                    * summing its loads in expert order then dividing */
  double max_load;                 /* largest gpu_load: T* (within 1e-12 relative) in
                                    * fractional mode, ceil(T*) in integer mode */
  uint32_t num_bottleneck_experts; /* |A| (0 only when every load is 0) */
  uint32_t num_bottleneck_gpus;    /* |N(A)| */
  uint32_t iterations;             /* max-flow (or simplex) runs made */
} eplb_split_result_t;

/* Solves one layer with the exact solver.
 * loads: [num_experts] non-negative finite values (integers <= 2^53 in integer
 * mode). Returns
 *  - EPLB_OK;
 *  - EPLB_EINVAL: a NULL argument or required result array, E/G/R zero, a
 *    negative, NaN or infinite load, a non-integral load in integer mode, or an
 *    expert with no replica (the detail names the expert);
 *  - EPLB_ERANGE: a phy2log entry >= E (the detail names the slot);
 *  - EPLB_ESHAPE: slots_per_gpu does not sum to num_slots;
 *  - EPLB_ENOMEM: the workspace could not grow (the handle stays usable);
 *  - EPLB_ESOLVER: internal inconsistency (a bug; never expected).
 * The detail (eplb_error_detail) names the field and value at fault. */
EPLB_API eplb_status_t eplb_split_solve(eplb_split_t *split, const eplb_split_problem_t *problem,
                                        const double *loads, eplb_split_result_t *out);

/* Same contract, solved by GLPK's simplex (reference). The bottleneck set is
 * read from GLPK's dual solution; when that does not reproduce T* (degenerate
 * duals) the set is returned empty (sizes 0, masks all 0).
 * Extra returns: EPLB_ESOLVER (GLPK failed or raised an error: it never
 * aborts the process and never prints), EPLB_ETIMEOUT (glpk_time_limit_s
 * reached before an optimum). Warm start does not apply. */
EPLB_API eplb_status_t eplb_split_solve_glpk(eplb_split_t *split,
                                             const eplb_split_problem_t *problem,
                                             const double *loads, eplb_split_result_t *out);

/* Solves L layers: problems[l] with the loads that follow the previous
 * layers' (offset sum of problems[j].num_experts for j < l, i.e. loads is
 * [L][E] when every layer has E experts), writing results[l]. With warm start
 * each layer index keeps its own state. With options.threads other than 1 the
 * layers are solved in parallel (threads started and joined within the call; the
 * handle keeps their workspaces for the next call) and every result is the same as
 * with one thread. On an error returns the lowest failing layer's (the detail is
 * prefixed with "layer l: "); layers above it may not have been solved. L = 0 is a
 * no-op. */
EPLB_API eplb_status_t eplb_split_solve_layers(eplb_split_t *split, uint32_t num_layers,
                                               const eplb_split_problem_t *problems,
                                               const double *loads, eplb_split_result_t *results);

/* ---- per-batch split with locality ----------------------------------------
 * Tokens come from nodes: node_loads[n][e] of expert e's tokens are routed
 * from node n (loads w_e = sum over n). The split is made in two stages:
 *  1. eplb_split_solve on w: T*, its certificate and a split reaching it;
 *  2. among splits whose every GPU load is <= cap, the one that sends the
 *     fewest tokens to a replica on another node than theirs (a min-cost
 *     flow over (node, expert) sources and GPUs), cap = T* (1 + tolerance)
 *     (integer mode: max(ceil T*, floor(T* (1 + tolerance)))).
 * So the busiest GPU is within the tolerance of the optimum and, within it,
 * no split keeps more tokens on their node. */
typedef struct eplb_split_local {
  uint32_t num_nodes;       /* N >= 1 (<= G) */
  const uint32_t *gpu_node; /* [G] node of each GPU, < N */
  const double *node_loads; /* [N][E] >= 0 and finite (integers in integer mode) */
  double tolerance;         /* in [0, 1]: the busiest GPU may exceed T* by this fraction */
} eplb_split_local_t;

/* Solves one layer with locality (see above). out: as eplb_split_solve, but
 * share, amount and gpu_load describe the stage-2 split (share = amount /
 * w_e summed over nodes; max_load <= cap), and t_star / the bottleneck set
 * are stage 1's (the certificate of the optimum). node_share [N][R]
 * (required): the share of replica r in node n's tokens of its expert
 * (per expert and node they sum to 1; the global share where node n has no
 * token of the expert). *cross (optional): tokens routed off their node.
 * When rounding leaves the capped flow short (fractional loads spanning
 * many orders of magnitude), stage 1's split is returned in every row.
 * Returns the statuses of eplb_split_solve, and EPLB_EINVAL (NULL
 * locality, gpu_node, node_loads or node_share; num_nodes 0 or > G; a
 * negative, NaN or infinite node load, non-integral in integer mode;
 * tolerance outside [0, 1]), EPLB_ERANGE (a gpu_node >= num_nodes).
 * Same thread rules and warm start as eplb_split_solve; no allocation once
 * the handle has grown to the problem. */
EPLB_API eplb_status_t eplb_split_solve_local(eplb_split_t *split,
                                              const eplb_split_problem_t *problem,
                                              const eplb_split_local_t *local,
                                              eplb_split_result_t *out, double *node_share,
                                              double *cross);

/* Solves a layer some of whose slots are out of service (their weights are
 * being copied: the runtime's continuous re-placement): out_of_service [R],
 * nonzero for such a slot. The split is that of the placement without those
 * slots, written back with share 0 (and amount 0, node shares 0) on them, so
 * they carry nothing and are in no bottleneck set; every expert needs a
 * replica in service (else EPLB_EINVAL naming it). local NULL: as
 * eplb_split_solve on loads; else as eplb_split_solve_local (loads unused,
 * node_share [N][R] required). Same statuses, thread rules and warm start
 * (keyed on the placement in service); EPLB_EINVAL also for a NULL
 * out_of_service, or for one that leaves no slot. */
EPLB_API eplb_status_t eplb_split_solve_in_service(eplb_split_t *split,
                                                   const eplb_split_problem_t *problem,
                                                   const uint8_t *out_of_service,
                                                   const eplb_split_local_t *local,
                                                   const double *loads, eplb_split_result_t *out,
                                                   double *node_share, double *cross);

/* Frees the calling thread's GLPK environment (see the thread rules above).
 * Safe to call when GLPK was never used. */
EPLB_API void eplb_split_glpk_thread_done(void);

/* ---- robust static shares (GLPK) ------------------------------------------
 * Shares chosen once for many steps: exact shares for one load vector put an
 * expert's tokens on few replicas and do not hedge against the shifts between
 * steps. Given S per-step load vectors w_s[E] (s = 1..S) and weights v_s >= 0,
 * the robust split chooses shares x_r >= 0 with sum over e's replicas of
 * x_r = 1 minimising
 *
 *     sum_s v_s T_s / m_s,   T_s >= sum over g's replicas of x_r w_s[e(r)]
 *                            for every GPU g,
 *
 * m_s = sum_e w_s[e] / G being step s's mean GPU load, so T_s / m_s =
 * 1 / balancedness_s. With equal weights the optimum maximises the harmonic
 * mean of the per-step balancedness, S / sum_s (1 / balancedness_s), a lower
 * bound of their arithmetic mean (AM >= HM; the two agree to second order
 * when every step is near 1); the arithmetic mean itself is not concave in
 * the shares, the harmonic form is an LP. Steps without load (m_s = 0) or
 * with weight 0 are ignored. An expert with one replica, or with no load in
 * any counted step, gets fixed shares (1, or uniform), so the LP only holds
 * the replicas of replicated experts: a few dozen columns and S x G rows.
 * To blend with an aggregate plan, pass the aggregate load vector as one
 * more step with the weight wanted.
 *
 * S = 1 gives a split with the exact solver's T* (the same LP).
 *
 * Result (the eplb_split_result_t above, same ownership rules):
 *  - share [R] required: the robust shares (>= 0, summing to 1 per expert);
 *  - gpu_load [G] required: GPU loads under the mean of the S load vectors
 *    (unweighted); amount [R] optional: share x that mean load;
 *  - t_star: the mean over the counted steps of T_s (step s's largest GPU
 *    load under the returned shares, in load units; 0 when no step counts);
 *  - max_load: the largest gpu_load;
 *  - bottleneck_* masks (when given) are zeroed and both counts are 0: the
 *    robust LP has no single bottleneck set;
 *  - iterations: 1 when the LP was solved, 0 when every share was fixed.
 * step_loads: [num_steps][E] row-major; step_weights: [num_steps] or NULL
 * (all 1). Fractional only: the handle's mode is ignored; its
 * glpk_time_limit_s applies. Returns EPLB_OK, EPLB_EINVAL (NULL argument,
 * num_steps 0, a negative/NaN/infinite load or weight: the detail names the
 * step and expert, an expert without replica), EPLB_ERANGE, EPLB_ESHAPE
 * (as eplb_split_solve), EPLB_ETIMEOUT, EPLB_ESOLVER (GLPK), EPLB_ENOMEM.
 * Thread rules: those of eplb_split_solve_glpk. */
EPLB_API eplb_status_t eplb_split_solve_robust_weighted(
    eplb_split_t *split, const eplb_split_problem_t *problem, const double *step_loads,
    const double *step_weights, uint32_t num_steps, eplb_split_result_t *out);

/* eplb_split_solve_robust_weighted with every weight 1. */
EPLB_API eplb_status_t eplb_split_solve_robust(eplb_split_t *split,
                                               const eplb_split_problem_t *problem,
                                               const double *step_loads, uint32_t num_steps,
                                               eplb_split_result_t *out);

/* ---- LPLB-like placements on a fixed replica graph ----------------------- */

typedef enum eplb_split_graph {
  EPLB_SPLIT_GRAPH_RING = 0,     /* neighbours of i: i+1, i-1, i+2, i-2, ... */
  EPLB_SPLIT_GRAPH_CUBE = 1,     /* 8-GPU 3-cube: i^1, i^2, i^4 (group size 8) */
  EPLB_SPLIT_GRAPH_HYPERCUBE = 2 /* i^1, i^2, i^4, i^8 (group size 16; or 8) */
} eplb_split_graph_t;

/* Builds a placement like LPLB's: num_gpus GPUs split into consecutive groups
 * of group_size (8 or 16; num_gpus a multiple of it), each GPU holding
 * experts_per_gpu "home" experts (expert e lives on GPU e / experts_per_gpu;
 * num_experts = num_gpus * experts_per_gpu) followed by redundant_per_gpu
 * redundant slots.
 *
 * Rule: GPU g's neighbours within its group are listed in the graph's order
 * (the k-th neighbour is nb_k(g), k = 0, 1, ...; the cube has 3 neighbours,
 * the hypercube log2(group_size), the ring group_size - 1: +1, -1, +2, -2, ...
 * mod group_size, distinct). Redundant slot j (0-based) of GPU g holds home
 * expert (j / d) mod experts_per_gpu of neighbour nb_{j mod d}(g), d being
 * the neighbour count — i.e. slot j copies, round-robin over neighbours, the
 * neighbours' home experts in order. A GPU never holds two copies of one
 * expert as long as redundant_per_gpu <= d * experts_per_gpu (else EINVAL).
 *
 * phy2log: caller's [num_gpus * (experts_per_gpu + redundant_per_gpu)];
 * slots_per_gpu: caller's [num_gpus]. Returns EPLB_OK or EPLB_EINVAL (bad
 * kind, group size, counts, NULL arrays; the cube needs group size 8). */
EPLB_API eplb_status_t eplb_split_graph_place(eplb_split_graph_t kind, uint32_t group_size,
                                              uint32_t num_gpus, uint32_t experts_per_gpu,
                                              uint32_t redundant_per_gpu, uint32_t *phy2log,
                                              uint32_t *slots_per_gpu);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_SPLIT_H */
