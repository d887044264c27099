/* eplb/trace_tooling.h — the trace reports of trace.h as JSON trees, for
 * the project's tools: `eplb trace info|stats --json` add to the document
 * and print it without its text being written and parsed back. The tree is
 * the one eplb_trace_info_json and eplb_trace_stats_json write as text.
 * Not installed: it exposes jansson's json_t, which the installed headers
 * never name. */
#ifndef EPLB_TRACE_TOOLING_H
#define EPLB_TRACE_TOOLING_H

#include "eplb/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jansson's type (jansson.h declares the same typedef). */
typedef struct json_t json_t;

/* The object eplb_trace_info_json writes, as a new reference in *out (the
 * caller's, released with json_decref; NULL on failure). Returns EPLB_OK,
 * EPLB_EINVAL (NULL argument), EPLB_ENOMEM (or a name is not UTF-8).
 * Threads: as the trace handle. */
EPLB_API eplb_status_t eplb_trace_info_tree(eplb_trace_t *trace, const char *file, json_t **out);

/* The object eplb_trace_stats_json writes, as eplb_trace_info_tree hands it
 * out. Returns EPLB_OK, EPLB_EINVAL (NULL argument), EPLB_ERANGE (a ratio is
 * not finite), EPLB_ENOMEM (or file is not UTF-8). Any thread. */
EPLB_API eplb_status_t eplb_trace_stats_tree(const eplb_trace_stats_t *stats, const char *file,
                                             json_t **out);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_TRACE_TOOLING_H */
