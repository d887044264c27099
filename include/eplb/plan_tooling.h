/* eplb/plan_tooling.h — the planner's reports of plan.h and topo.h as JSON
 * trees, for the project's tools: `eplb plan|plan eval|plan diff|split|topo
 * show --json` add to the document and print it without its text being
 * written and parsed back. Each tree is the one the matching eplb_*_json
 * writes as text (same keys, same order). Not installed: it exposes
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

#ifdef __cplusplus
}
#endif
#endif /* EPLB_PLAN_TOOLING_H */
