/* eplb/trace_tooling.h — the trace reports of trace.h as JSON trees, for
 * the project's tools: `eplb trace info|stats --json` add to the document
 * and print it without its text being written and parsed back. The tree is
 * the one eplb_trace_info_json and eplb_trace_stats_json (below) write as
 * text. Not installed (issue #34: report writers are the tools'); the trees
 * expose jansson's json_t, which the installed headers never name. */
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

/* The statistics as the JSON object of `eplb trace stats --json`: {"file" (the caller's name
 * for the trace), "steps", "ep": [the EP sizes], "layers": [{"layer",
 * "busiest_expert_over_mean", "busiest_gpu_over_mean": {"<ep>": ratio, ...},
 * "busiest_gpu_over_mean_per_step": {...}, "step_correlation"}], "summary":
 * {"busiest_expert_over_mean", "busiest_gpu_over_mean": {"<ep>": {"window", "per_step"}},
 * "step_correlation"}}; ratios are dimensionless, a correlation that is NaN is null; reals
 * with 17 significant digits. Like snprintf: at most `size` bytes with the NUL into buf
 * (NUL-terminated when size > 0; buf may be NULL when size is 0), the full length without
 * the NUL in *len (may be NULL): call with size 0 to learn it. Returns EPLB_OK, EPLB_EINVAL
 * (NULL argument, NULL buf with size > 0), EPLB_ERANGE (a ratio is not finite),
 * EPLB_ENOMEM (or file is not UTF-8). Any thread (the statistics are only read). */
EPLB_API eplb_status_t eplb_trace_stats_json(const eplb_trace_stats_t *stats, const char *file,
                                             char *buf, size_t size, size_t *len);

/* The header facts of `eplb trace info --json`: {"file" (the caller's name), "layers",
 * "experts", "topk", "ranks", "steps", "tokens", "has_topk", "phase", "model", "origin"}.
 * Written like eplb_trace_stats_json. Returns EPLB_OK, EPLB_EINVAL (NULL argument, NULL buf
 * with size > 0), EPLB_ENOMEM (or a name is not UTF-8). Threads: as the trace handle. */
EPLB_API eplb_status_t eplb_trace_info_json(eplb_trace_t *trace, const char *file, char *buf,
                                            size_t size, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_TRACE_TOOLING_H */
