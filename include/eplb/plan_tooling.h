/* eplb/plan_tooling.h — the planner's reports, for the project's tools:
 * `eplb plan|plan eval|plan diff|split|topo show --json`, as JSON trees (added
 * to the document and printed without their text being written and parsed
 * back) and as the texts of the same trees (same keys, same order). Not
 * installed (issue #34: report writers are the tools'; eplb_plan_summary_json,
 * which the Python binding reads, stays in plan.h); the trees expose
 * jansson's json_t, which the installed headers never name.
 *
 * Each function puts a new reference in *out (the caller's, released with
 * json_decref; NULL on failure) and returns EPLB_OK or the statuses of its
 * text writer but the buffer's (EPLB_EINVAL for a NULL argument, out
 * included). Threads: as its text writer. */
#ifndef EPLB_PLAN_TOOLING_H
#define EPLB_PLAN_TOOLING_H

#include "eplb/plan.h"
#include "eplb/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jansson's type (jansson.h declares the same typedef). */
typedef struct json_t json_t;

/* eplb_plan_summary_json's object. */
EPLB_API eplb_status_t eplb_plan_summary_tree(const eplb_plan_t *plan, json_t **out);

/* eplb_plan_eval_json's object. */
EPLB_API eplb_status_t eplb_plan_eval_tree(const eplb_plan_t *plan, json_t **out);

/* eplb_plan_diff_json's object. */
EPLB_API eplb_status_t eplb_plan_diff_tree(const eplb_plan_t *from,
                                           const eplb_plan_diff_options_t *opts,
                                           const eplb_plan_diff_stats_t *stats, json_t **out);

/* eplb_plan_resplit_json's object. */
EPLB_API eplb_status_t eplb_plan_resplit_tree(const eplb_plan_resplit_options_t *opts,
                                              const eplb_plan_resplit_layer_t *layers,
                                              uint32_t num_layers, json_t **out);

/* eplb_cluster_json's object. */
EPLB_API eplb_status_t eplb_cluster_tree(const eplb_cluster_t *cluster, json_t **out);

/* The evaluation report of `eplb plan eval --json`, one JSON object: {"layers": [{"gpu_load":
 * [G], "max_load", "mean_load", "lower_bound", "balancedness"}, ...], "summary": the summary
 * object above without "seconds"}, from the plan's metrics (those of the loads it was made
 * or last evaluated with, eplb_plan_evaluate; loads in tokens). Written like
 * eplb_plan_summary_json (size 0 to learn the length; 17 significant digits). Returns EPLB_OK,
 * EPLB_EINVAL (NULL plan, NULL buf with size > 0), EPLB_ERANGE (a figure is not finite),
 * EPLB_ENOMEM. Any thread (the plan is only read). */
EPLB_API eplb_status_t eplb_plan_eval_json(const eplb_plan_t *plan, char *buf, size_t size,
                                           size_t *len);

/* The migration report of `eplb plan diff --json`: {"slots" (layers x slots of `from`),
 * "slots_moved", "layers_changed", "max_layer_moved", "moves" and "bytes" ({"same_gpu",
 * "intra_node", "inter_node"}), "expert_bytes", "staging_bytes", "layers_per_step" (opts'
 * layers_per_round), "rounds", "max_bytes_in_round"}, all integers (bytes, slots, rounds),
 * from stats that eplb_plan_diff_schedule computed with opts. Written like
 * eplb_plan_summary_json. Returns EPLB_OK, EPLB_EINVAL (NULL argument, NULL buf with
 * size > 0), EPLB_ENOMEM. Any thread. */
EPLB_API eplb_status_t eplb_plan_diff_json(const eplb_plan_t *from,
                                           const eplb_plan_diff_options_t *opts,
                                           const eplb_plan_diff_stats_t *stats, char *buf,
                                           size_t size, size_t *len);

/* The report of `eplb split --json` for the layers[num_layers] eplb_plan_resplit filled with
 * opts: {"layers": [{"layer", "t_star", "max_load_before", "max_load_after",
 * "balancedness_before", "balancedness_after", "lower_bound"} plus, with opts->cluster,
 * "cross_node_copies_before"/"_after"], "summary": {"layers", "integer", the means over layers
 * of balancedness and max load before and after, the minimum balancedness before and after,
 * "balancedness_gain" (mean after - mean before), "max_load_reduction" (1 - summed max loads
 * after / before) and, with a cluster, "nodes", "tolerance" and the summed cross-node
 * copies}}; loads in tokens. Written like eplb_plan_summary_json. Returns EPLB_OK,
 * EPLB_EINVAL (NULL argument, num_layers 0, NULL buf with size > 0), EPLB_ERANGE (a figure is
 * not finite), EPLB_ENOMEM. Any thread. */
EPLB_API eplb_status_t eplb_plan_resplit_json(const eplb_plan_resplit_options_t *opts,
                                              const eplb_plan_resplit_layer_t *layers,
                                              uint32_t num_layers, char *buf, size_t size,
                                              size_t *len);

/* The cluster as the JSON document of `eplb topo show --json`: {"num_nodes", "num_gpus",
 * "nodes": [{"node", "name", "source", "first_gpu", "num_gpus", "slots_per_gpu",
 * "num_numa", "num_nics", "intra_node_gbps", "inter_node_gbps" (GB/s per GPU), "gpus":
 * [{"gpu" (global index), "local_index", "name", "pci_busid", "numa", "nic" (-1: none or
 * unknown), "nic_name", "nic_affinity" (eplb_nic_affinity_str)}]}]} (reals with 17
 * significant digits). Like snprintf: at most `size` bytes with the NUL into buf
 * (NUL-terminated when size > 0; buf may be NULL when size is 0), the full length without
 * the NUL in *len (may be NULL). Returns EPLB_OK, EPLB_EINVAL (NULL cluster, NULL buf with
 * size > 0), EPLB_ENOMEM (or a name is not UTF-8, or a bandwidth is not finite). Any
 * thread (the cluster is only read). */
EPLB_API eplb_status_t eplb_cluster_json(const eplb_cluster_t *cluster, char *buf, size_t size,
                                         size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_PLAN_TOOLING_H */
