/* reshare.h — other shares on a plan's placement: what an exported plan serves with
 * even shares, and the optimal shares re-solved for new loads (`eplb split`). Part of the
 * planner's API (eplb/plan.h includes it); the plan itself is eplb/plan.h's.
 *
 * Ownership: every plan, loads, cluster and co-activation argument is borrowed for the
 * call. Thread rules: each function's own comment. */
#ifndef EPLB_RESHARE_H
#define EPLB_RESHARE_H

#include "eplb/coact.h"
#include "eplb/common.h"
#include "eplb/topo.h"
#include "eplb/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Other shares on the same placement ----------------------------------------------
 * What a plan serves when its shares are not its own: the even split of an export format
 * without shares (eplb_plan_export: the target splits an expert's tokens 1/c over its c
 * replicas), and the optimal shares re-solved for new loads (`eplb split`, an online
 * re-split that moves no weights). */

/* Balancedness a plan serves with uniform shares (1/c per replica). */
typedef struct eplb_plan_served {
  int shares_dropped;       /* 1: some share differs from 1/c by more than 1e-12 */
  double mean_balancedness; /* mean over layers; the plan's own figure when !shares_dropped */
  double min_balancedness;  /* the least layer's */
} eplb_plan_served_t;

/* Evaluates a copy of `plan` with uniform shares on `loads` (same layers and experts, as
 * eplb_plan_evaluate) and fills *out. When the plan's shares are already uniform nothing
 * is evaluated: *out carries the plan's own metrics (eplb_plan_summary; those of the loads
 * it was made or last evaluated with). Returns EPLB_OK, EPLB_EINVAL (NULL argument, bad
 * loads), EPLB_ESHAPE, EPLB_EFORMAT (a layer's loads too large), EPLB_ENOMEM. Reads the
 * plan only; any number of threads may evaluate one plan. */
EPLB_API eplb_status_t eplb_plan_evaluate_uniform(const eplb_plan_t *plan,
                                                  const eplb_loads_t *loads,
                                                  eplb_plan_served_t *out);

typedef struct eplb_plan_resplit_options {
  uint32_t struct_size; /* the caller's sizeof (common.h, "Struct sizes") */
  int integer; /* 1: whole tokens (the loads must be integers; the busiest GPU gets ceil(T*)) */
  /* Locality, both or neither: the per-batch split of the runtime (eplb_split_solve_local:
   * T* first, then the fewest tokens off their source node with every GPU within
   * T* (1 + tolerance)), with each layer's loads split over nodes by eplb_coact_node_loads.
   * The cluster's GPUs must be the plan's; borrowed, only read. */
  const eplb_cluster_t *cluster;
  const eplb_coact_t *coact;
  double tolerance; /* in [0, 1]; default 0.01 */
  /* Layers solved in parallel on this many threads, the calling one included (0, the
   * default: the online cores, or none started for a small job, as eplb_plan_create; at
   * most EPLB_PLAN_MAX_THREADS). The result is the same for any count. */
  uint32_t threads;
} eplb_plan_resplit_options_t;

/* One layer before (the plan's shares) and after (the re-solved ones), on the loads. */
typedef struct eplb_plan_resplit_layer {
  double t_star; /* the optimum busiest-GPU load over the placement */
  double max_load_before, max_load_after;
  double balancedness_before, balancedness_after; /* mean / max GPU load (1: no load) */
  double lower_bound;                             /* the layer's certificate (any placement) */
  /* With a cluster (else 0): tokens sent off their source node, before by the plan's node
   * shares when it has them for the cluster's nodes, else local-first (a node's tokens
   * stay on its replicas when it has any), as the runtime routes. */
  double cross_node_before, cross_node_after;
} eplb_plan_resplit_layer_t;

/* A re-split over its layers, as `eplb split` and eplb_plan_resplit_json's "summary"
 * report it: means and minima of the layers' balancedness, the gain (mean after - mean
 * before, from the sums), max loads and cross-node copies summed over layers (summed max
 * loads are the per-step MoE critical path) and max_load_reduction = 1 - after / before
 * of those sums (0 when before is 0). */
typedef struct eplb_plan_resplit_summary {
  double mean_balancedness_before, mean_balancedness_after;
  double min_balancedness_before, min_balancedness_after;
  double balancedness_gain;
  double max_load_before, max_load_after;
  double max_load_reduction;
  double cross_node_before, cross_node_after;
} eplb_plan_resplit_summary_t;

/* Summarises layers[num_layers] (num_layers >= 1) into *out. EPLB_EINVAL for a NULL
 * argument or no layer. Any thread. */
EPLB_API eplb_status_t eplb_plan_resplit_summarize(const eplb_plan_resplit_layer_t *layers,
                                                   uint32_t num_layers,
                                                   eplb_plan_resplit_summary_t *out);

/* Fills *opts with the defaults above. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_plan_resplit_options_init(eplb_plan_resplit_options_t *opts,
                                                      size_t size);
/* The defaults at the caller's sizeof, through eplb_plan_resplit_options_init. */
static inline void eplb_plan_resplit_options_default(eplb_plan_resplit_options_t *opts) {
  (void)eplb_plan_resplit_options_init(opts, sizeof *opts);
}

/* Re-solves every layer's shares over the plan's placement for `loads` (same layers and
 * experts) with the exact split solver (eplb/split.h) and fills out[L]. With set_shares the
 * plan receives the new shares (eplb_plan_set_shares; node shares become the global ones)
 * and its metrics are evaluated on the loads; else the plan's metrics are those of the
 * loads (eplb_plan_evaluate) and its shares are left alone. opts NULL: the defaults.
 * Returns EPLB_OK, EPLB_EINVAL (NULL argument, bad loads, a tolerance outside [0, 1], a
 * cluster without coact or the reverse, fractional loads with integer, threads > 1,024),
 * EPLB_ESHAPE (loads or cluster of another shape), the solver's errors (the lowest failing
 * layer's; the detail starts with "layer L: "), EPLB_ENOMEM. On a solver error the plan's
 * shares are left alone. One call at a time per plan (it starts opts->threads - 1 threads of its
 * own, each freeing its GLPK state before it ends). */
EPLB_API eplb_status_t eplb_plan_resplit(eplb_plan_t *plan, const eplb_loads_t *loads,
                                         const eplb_plan_resplit_options_t *opts, int set_shares,
                                         eplb_plan_resplit_layer_t *out);

#ifdef __cplusplus
}
#endif

#endif /* EPLB_RESHARE_H */
