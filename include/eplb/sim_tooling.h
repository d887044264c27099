/* eplb/sim_tooling.h — the simulator's report of sim.h as a JSON tree, for
 * the project's tools: `eplb sim --json` adds to the document and prints it
 * without its text being written and parsed back. The tree is the one
 * eplb_sim_report_json writes as text. Not installed: it exposes jansson's
 * json_t, which the installed headers never name. */
#ifndef EPLB_SIM_TOOLING_H
#define EPLB_SIM_TOOLING_H

#include "eplb/sim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jansson's type (jansson.h declares the same typedef). */
typedef struct json_t json_t;

/* eplb_sim_report_json's object, as a new reference in *out (the caller's,
 * released with json_decref; NULL on failure). Returns EPLB_OK, EPLB_EINVAL
 * (NULL argument), the statuses of eplb_sim_summary_json (EPLB_ERANGE: a
 * figure is not finite), EPLB_ENOMEM (or a name is not UTF-8). Any
 * thread. */
EPLB_API eplb_status_t eplb_sim_report_tree(const eplb_sim_report_t *report, json_t **out);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_SIM_TOOLING_H */
