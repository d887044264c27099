/* eplb/sim_tooling.h — the simulator's reports, for the project's tools:
 * `eplb sim --json` (as a JSON tree, added to the document and printed
 * without its text being written and parsed back; and as that text) and
 * `eplb sim --csv` (its rows and its file). Not installed (issue #34: report
 * writers are the tools'); the tree exposes jansson's json_t, which the
 * installed headers never name. */
#ifndef EPLB_SIM_TOOLING_H
#define EPLB_SIM_TOOLING_H

#include "eplb/sim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* jansson's type (jansson.h declares the same typedef). */
typedef struct json_t json_t;

/* What `eplb sim --json` reports of one or more runs on the same trace and steps. */
typedef struct eplb_sim_report {
  const char *trace;              /* the trace and cluster as the caller names them */
  const char *cluster;            /* (e.g. the paths or "NxG" given) */
  const eplb_sim_options_t *opts; /* split_per_batch, local_first, model and gpu */
  int fixed_plan;                 /* nonzero: a plan file (no plan steps) */
  uint64_t plan_steps[2];         /* eplb_sim_steps' ranges, half-open */
  uint64_t scored_steps[2];
  uint32_t num_runs;                   /* runs, in order */
  const eplb_sim_summary_t *summaries; /* [num_runs] */
  const char *const *names;            /* [num_runs] each run's policy (or plan) name */
} eplb_sim_report_t;

/* eplb_sim_report_json's object, as a new reference in *out (the caller's,
 * released with json_decref; NULL on failure). Returns EPLB_OK, EPLB_EINVAL
 * (NULL argument), the statuses of eplb_sim_summary_json (EPLB_ERANGE: a
 * figure is not finite), EPLB_ENOMEM (or a name is not UTF-8). Any
 * thread. */
EPLB_API eplb_status_t eplb_sim_report_tree(const eplb_sim_report_t *report, json_t **out);

/* The document of `eplb sim --json`: {"trace", "cluster", "split_per_batch",
 * "local_first", "plan_steps": [A, B] (null with fixed_plan), "scored_steps": [C, D],
 * "policies": [eplb_sim_summary_json's object of each run]}, then "model" and "gpu"
 * (their names) when opts->model and opts->gpu are both set; reals with 17 significant
 * digits. Like snprintf: at most `size` bytes with the NUL into buf (NUL-terminated when
 * size > 0; buf may be NULL when size is 0), the full length without the NUL in *len
 * (may be NULL). Returns EPLB_OK, EPLB_EINVAL (NULL argument, NULL buf with size > 0),
 * the statuses of eplb_sim_summary_json (EPLB_ERANGE: a figure is not finite),
 * EPLB_ENOMEM (or a name is not UTF-8). Any thread. */
EPLB_API eplb_status_t eplb_sim_report_json(const eplb_sim_report_t *report, char *buf, size_t size,
                                            size_t *len);

/* The per-step CSV of `eplb sim --csv`, without line ends. The header: "step,num_tokens,
 * balancedness,min_balancedness,plan_balancedness,cross_node_copies,dedup_copies,
 * cross_node_bytes,est_step_time_us,compute_us,a2a_us,migrated_bytes" then ",gpu<g>" for
 * g < num_gpus. A row: those fields of a step (eplb_sim_step_t: balancedness to 6
 * decimals, copies, times and tokens to 3, bytes to units), then gpu_tokens[g] to 3
 * decimals for g < step->num_gpus. Like snprintf: at most `size` bytes with the NUL into
 * buf (NUL-terminated when size > 0; buf may be NULL when size is 0), the full length
 * without the NUL in *len (may be NULL). EPLB_OK, or EPLB_EINVAL (NULL step, NULL buf with
 * size > 0, NULL gpu_tokens with GPUs). Any thread. */
EPLB_API eplb_status_t eplb_sim_csv_header(uint32_t num_gpus, char *buf, size_t size, size_t *len);
EPLB_API eplb_status_t eplb_sim_step_csv(const eplb_sim_step_t *step, char *buf, size_t size,
                                         size_t *len);

/* The file of `eplb sim --csv`: the header, then a row per step of each run (the texts
 * above, each line ending in "\n"), after a "policy" column when policy_column is nonzero
 * (--compare: several runs in one file). Written to a temporary that eplb_sim_csv_finish
 * renames to path. */
typedef struct eplb_sim_csv eplb_sim_csv_t;

/* Starts the file for num_gpus GPUs and writes its header. Returns EPLB_OK; EPLB_EINVAL
 * (NULL argument, or path names what an output may not replace), EPLB_EIO (cannot create
 * the temporary), EPLB_ENOMEM. *out (the caller's: eplb_sim_csv_finish or
 * eplb_sim_csv_destroy) is set on success, NULL otherwise. */
EPLB_API eplb_status_t eplb_sim_csv_create(const char *path, uint32_t num_gpus, int policy_column,
                                           eplb_sim_csv_t **out);

/* Appends the row of one step (from eplb_sim_options_t.on_step), after `policy` when the
 * file has that column. Returns EPLB_OK, EPLB_EINVAL (NULL argument, as eplb_sim_step_csv),
 * EPLB_ENOMEM or EPLB_EIO; the first failure is also kept for eplb_sim_csv_finish. One
 * thread at a time per file. */
EPLB_API eplb_status_t eplb_sim_csv_append(eplb_sim_csv_t *csv, const char *policy,
                                           const eplb_sim_step_t *step);

/* Renames the file into place and frees csv. Returns EPLB_OK, or the first failure of a
 * row (its detail) or of the write (EPLB_EIO), and then leaves no file; EPLB_EINVAL for
 * NULL. */
EPLB_API eplb_status_t eplb_sim_csv_finish(eplb_sim_csv_t *csv);

/* Frees csv and removes its temporary, leaving path as it was. NULL is a no-op. */
EPLB_API void eplb_sim_csv_destroy(eplb_sim_csv_t *csv);

/* One run's summary as the JSON object of `eplb sim --json`'s "policies": {"policy",
 * "steps", "mean_balancedness", "p5_balancedness", "min_balancedness",
 * "mean_plan_balancedness", "cross_node_copies", "dedup_copies", "cross_node_bytes",
 * "dedup_bytes", "est_step_time_us" (the mean), "p99_step_time_us", "mean_max_active",
 * "migrated_bytes", "migration_us", "num_plans", "rows_steps"} (bytes, µs, token copies;
 * reals with 17 significant digits); policy names the run. Like snprintf: at most `size`
 * bytes with the NUL into buf (NUL-terminated when size > 0; buf may be NULL when size is
 * 0), the full length without the NUL in *len (may be NULL). Returns EPLB_OK, EPLB_EINVAL
 * (NULL argument, NULL buf with size > 0), EPLB_ERANGE (a figure is not finite),
 * EPLB_ENOMEM (or policy is not UTF-8). Any thread. */
EPLB_API eplb_status_t eplb_sim_summary_json(const eplb_sim_summary_t *summary, const char *policy,
                                             char *buf, size_t size, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_SIM_TOOLING_H */
