/* coact.h — co-activation of a trace's experts: which experts the same token picks, and
 * from which node. The locality policy (eplb/plan.h, "Locality") and the per-batch split's
 * locality stage read it; eplb_plan_options_t borrows it.
 *
 * Thread rules: an eplb_coact_t is immutable once built; any number of threads may read it.
 * Ownership: eplb_coact_from_trace's *out belongs to the caller (eplb_coact_destroy); the
 * layer arrays belong to the object. */
#ifndef EPLB_COACT_H
#define EPLB_COACT_H

#include "eplb/common.h"
#include "eplb/topo.h"
#include "eplb/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Co-activation of a trace's steps, per layer: how often two experts are picked by the
 * same token (pair counts) and how many (token, expert) picks come from each node.
 * Sources: a row's recorded source rank when it is >= 0 and < the cluster's GPUs, else
 * row i of a step comes from GPU i mod G (round-robin within the step, the simulator's
 * rule: no placement may count on a request's tokens staying on one node unless the
 * trace records it). Counts are over the stored top-k rows (not scaled to num_tokens).
 * Immutable once built; any number of threads may read it. */
typedef struct eplb_coact eplb_coact_t;

/* Builds the co-activation of steps [begin, min(end, steps)) of `trace` for `cluster`.
 * Returns EPLB_OK, EPLB_EINVAL (NULL argument, empty range, a trace without top-k rows in
 * that range: the detail says "locality needs top-k rows"), trace read errors,
 * EPLB_ERANGE (E*E too large), EPLB_ENOMEM. *out is owned by the caller. */
EPLB_API eplb_status_t eplb_coact_from_trace(eplb_trace_t *trace, uint64_t begin, uint64_t end,
                                             const eplb_cluster_t *cluster, eplb_coact_t **out);
/* Releases it. NULL is a no-op. */
EPLB_API void eplb_coact_destroy(eplb_coact_t *coact);
EPLB_API uint32_t eplb_coact_num_layers(const eplb_coact_t *coact);
EPLB_API uint32_t eplb_coact_num_experts(const eplb_coact_t *coact);
EPLB_API uint32_t eplb_coact_num_nodes(const eplb_coact_t *coact);
/* Rows counted (over all steps). */
EPLB_API uint64_t eplb_coact_num_rows(const eplb_coact_t *coact);
/* Layer arrays, valid for the object's lifetime; NULL if layer >= L.
 * pairs: [E][E] symmetric, pairs[a*E+b] = rows picking both a and b (diagonal 0).
 * node_tokens: [N][E] picks of expert e by rows from node n. */
EPLB_API const double *eplb_coact_pairs(const eplb_coact_t *coact, uint32_t layer);
EPLB_API const double *eplb_coact_node_tokens(const eplb_coact_t *coact, uint32_t layer);
/* A layer's loads[E] split over source nodes the way the locality policy and the
 * per-batch split see them: out[N][E] = loads[e] in the proportions of the layer's
 * node_tokens, or by the nodes' GPU counts in `cluster` for an expert no row picked.
 * Returns EPLB_OK, EPLB_EINVAL (NULL argument, layer >= L, a cluster with another
 * node count than the co-activation's). */
EPLB_API eplb_status_t eplb_coact_node_loads(const eplb_coact_t *coact,
                                             const eplb_cluster_t *cluster, uint32_t layer,
                                             const double *loads, double *out);

#ifdef __cplusplus
}
#endif

#endif /* EPLB_COACT_H */
