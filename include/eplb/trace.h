/* eplb/trace.h — recorded router decisions ("traces").
 *
 * A trace holds, for every step (one forward pass / decode iteration), the
 * number of tokens routed to each (layer, logical expert), and optionally the
 * top-k rows of (a sample of) the step's tokens with the rank each token came
 * from. The planner, the simulator and the daemon read traces; the runtime and
 * `eplb trace gen` write them.
 *
 * Native format (".eplbt", see docs/ARCHITECTURE.md for the byte layout): a
 * 16-byte file header followed by append-only, self-describing chunks, each
 * with a header CRC32 and a payload CRC32 and a zstd-compressed payload. The
 * first chunk holds the metadata (JSON); every later chunk holds a run of
 * consecutive steps. A file cut short by a crash keeps every step of its
 * complete chunks (eplb_trace_recover, or the appender reopening it); damage
 * is always detected by the checksums and reported, never read as data.
 *
 * Threads: a reader or writer handle is used by one thread at a time.
 * Different handles (also on the same file) may be used concurrently.
 */
#ifndef EPLB_TRACE_H
#define EPLB_TRACE_H

#include "eplb/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits that every reader enforces (bad input beyond them is EPLB_ERANGE). */
#define EPLB_TRACE_MAX_LAYERS EPLB_MAX_LAYERS
#define EPLB_TRACE_MAX_EXPERTS EPLB_MAX_EXPERTS /* ids are stored as uint16 */
#define EPLB_TRACE_MAX_TOPK 64u

typedef enum eplb_trace_phase {
  EPLB_PHASE_UNKNOWN = 0,
  EPLB_PHASE_PREFILL = 1,
  EPLB_PHASE_DECODE = 2,
  EPLB_PHASE_MIXED = 3
} eplb_trace_phase_t;

/* "unknown", "prefill", "decode", "mixed"; NULL for other values. Static
 * strings; any thread. */
EPLB_API const char *eplb_trace_phase_str(eplb_trace_phase_t phase);
/* The phase named `name` (one of the names above) into *out. EPLB_EINVAL
 * (the detail lists the names; *out unchanged) for any other name or a NULL
 * argument. Any thread. */
EPLB_API eplb_status_t eplb_trace_phase_parse(const char *name, eplb_trace_phase_t *out);

typedef struct eplb_trace_meta {
  uint32_t struct_size; /* the caller's sizeof (common.h, "Struct sizes") */
  uint32_t num_layers;  /* L, MoE layers (>= 1) */
  uint32_t num_experts; /* E, logical experts per layer (>= 1) */
  uint32_t topk;        /* k, experts per token (0 = unknown; required for top-k rows) */
  uint32_t num_ranks;   /* ranks tokens come from (0 = unknown) */
  eplb_trace_phase_t phase;
  char model[64];   /* NUL-terminated model name, may be empty */
  char origin[256]; /* NUL-terminated provenance (tool, source file, seed) */
} eplb_trace_meta_t;

/* Zeroes *meta (phase unknown, empty strings). init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_trace_meta_init(eplb_trace_meta_t *meta, size_t size);
/* The defaults at the caller's sizeof, through eplb_trace_meta_init. */
static inline void eplb_trace_meta_default(eplb_trace_meta_t *meta) {
  (void)eplb_trace_meta_init(meta, sizeof *meta);
}

/* One step. Arrays are row-major. When read, pointers are owned by the reader
 * and stay valid until the next call on that reader. */
typedef struct eplb_trace_step {
  uint64_t index;             /* 0-based step number (ignored when appending) */
  uint32_t num_tokens;        /* tokens of the step (all ranks) */
  const uint32_t *counts;     /* [L][E] tokens routed to (layer, expert) */
  uint32_t num_rows;          /* top-k rows stored for this step (0 = none) */
  const uint16_t *topk;       /* [num_rows][L][k] expert ids, no duplicate within a row */
  const int32_t *source_rank; /* [num_rows] rank the token came from, -1 = unknown */
} eplb_trace_step_t;

/* ---- reading ------------------------------------------------------------ */

typedef struct eplb_trace eplb_trace_t;

typedef struct eplb_trace_open_options {
  uint32_t struct_size; /* the caller's sizeof (common.h, "Struct sizes") */
  /* 0 (default): a file whose last chunk is incomplete fails with
   * EPLB_ETRUNCATED. 1: the torn tail is ignored (a file still being
   * appended, or the daemon's follow mode); damage before the tail is still
   * an error. */
  int allow_torn_tail;
} eplb_trace_open_options_t;

/* The defaults in the comments above, in the first `size` bytes of *opts (common.h,
 * "Struct sizes"). EPLB_OK, or EPLB_EINVAL (NULL, a size out of range). */
EPLB_API eplb_status_t eplb_trace_open_options_init(eplb_trace_open_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_trace_open_options_init. */
static inline void eplb_trace_open_options_default(eplb_trace_open_options_t *opts) {
  (void)eplb_trace_open_options_init(opts, sizeof *opts);
}

/* Opens a native trace and indexes its chunks (headers only; payloads are
 * verified when read). opts may be NULL (defaults).
 * Returns EPLB_OK, EPLB_EIO (cannot open/read), EPLB_EFORMAT (not a trace,
 * bad magic/version/metadata), EPLB_ECORRUPT (a checksum fails),
 * EPLB_ETRUNCATED (cut short), EPLB_ERANGE, EPLB_ENOMEM.
 * On success *out is a new handle owned by the caller (eplb_trace_close). */
EPLB_API eplb_status_t eplb_trace_open(const char *path, const eplb_trace_open_options_t *opts,
                                       eplb_trace_t **out);

/* Closes the handle. NULL is a no-op. */
EPLB_API void eplb_trace_close(eplb_trace_t *trace);

/* Metadata, valid for the handle's lifetime. */
EPLB_API const eplb_trace_meta_t *eplb_trace_meta(const eplb_trace_t *trace);
EPLB_API uint64_t eplb_trace_num_steps(const eplb_trace_t *trace);
/* Sum of num_tokens over all steps. */
EPLB_API uint64_t eplb_trace_num_tokens(const eplb_trace_t *trace);
/* 1 if any step stores top-k rows. */
EPLB_API int eplb_trace_has_topk(const eplb_trace_t *trace);

/* Random access to step `index` (< num_steps). Decodes and verifies its
 * chunk (cached, so sequential reads decode each chunk once). */
EPLB_API eplb_status_t eplb_trace_read_step(eplb_trace_t *trace, uint64_t index,
                                            eplb_trace_step_t *step);

/* Streaming: the step after the previous next() (the first one after open or
 * rewind). Returns EPLB_EOF after the last step. */
EPLB_API eplb_status_t eplb_trace_next(eplb_trace_t *trace, eplb_trace_step_t *step);
EPLB_API void eplb_trace_rewind(eplb_trace_t *trace);

/* Re-reads the file end and indexes chunks appended since open (follow
 * mode). A torn tail is never an error here. *new_steps (may be NULL)
 * receives how many steps were added. */
EPLB_API eplb_status_t eplb_trace_refresh(eplb_trace_t *trace, uint64_t *new_steps);

/* out[l * E + e] = sum of counts over steps [begin, end). end is clamped to
 * num_steps; begin >= end gives zeros. out has L*E elements. */
EPLB_API eplb_status_t eplb_trace_window_sum(eplb_trace_t *trace, uint64_t begin, uint64_t end,
                                             double *out);

/* ---- statistics ---------------------------------------------------------- */

/* What `eplb trace stats` reports: how skewed the experts are, how unbalanced
 * GPUs would be without load balancing, and how much the loads drift. */
typedef struct eplb_trace_stats_options {
  uint32_t struct_size;          /* the caller's sizeof (common.h, "Struct sizes") */
  uint64_t step_begin, step_end; /* steps [begin, end), end clamped to the trace (default
                                    0, UINT64_MAX: all) */
  const uint32_t *ep;            /* expert-parallel sizes (GPUs) to score: [num_ep], each
                                    1..E; read during the call only */
  uint32_t num_ep;               /* 0 (default): 8, 16 and 32 (those <= E; E if none) */
} eplb_trace_stats_options_t;

/* Ratios are dimensionless ("busiest / mean"; 1 = even, also for a window
 * without tokens). A "contiguous placement" puts expert e on GPU e * ep / E,
 * one replica each: what a deployment without load balancing serves.
 * Arrays of [L][num_ep] are row-major by layer. */
typedef struct eplb_trace_stats {
  uint64_t step_begin, step_end; /* the steps read, [begin, end) (end clamped) */
  uint32_t num_layers;           /* L */
  uint32_t num_experts;          /* E */
  uint32_t num_ep;
  uint32_t *ep;                        /* [num_ep] the EP sizes scored */
  double *expert_over_mean;            /* [L] busiest expert / mean expert, window sums */
  double *gpu_over_mean;               /* [L][num_ep] busiest GPU / mean GPU of the
                                          contiguous placement, window sums */
  double *gpu_over_mean_per_step;      /* [L][num_ep] the same per step, mean over steps */
  double *step_correlation;            /* [L] mean Pearson correlation of consecutive steps'
                                          counts (pairs where both vary); NaN if none */
  double mean_expert_over_mean;        /* means over layers of the above */
  double *mean_gpu_over_mean;          /* [num_ep] */
  double *mean_gpu_over_mean_per_step; /* [num_ep] */
  double mean_step_correlation;        /* over layers with a correlation; NaN if none */
} eplb_trace_stats_t;

/* The defaults in the comments above, in the first `size` bytes of *opts (common.h,
 * "Struct sizes"). EPLB_OK, or EPLB_EINVAL (NULL, a size out of range). */
EPLB_API eplb_status_t eplb_trace_stats_options_init(eplb_trace_stats_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_trace_stats_options_init. */
static inline void eplb_trace_stats_options_default(eplb_trace_stats_options_t *opts) {
  (void)eplb_trace_stats_options_init(opts, sizeof *opts);
}

/* Reads steps [step_begin, step_end) of the trace once (with
 * eplb_trace_read_step: the position of eplb_trace_next is unchanged, and
 * step pointers read before from this handle become invalid) and computes
 * the statistics. opts may be NULL (defaults).
 * Returns EPLB_OK, EPLB_EINVAL (NULL argument), EPLB_ERANGE (an EP size of 0
 * or above E; a range that selects no step; the detail names it), a read
 * error of eplb_trace_read_step (EPLB_ECORRUPT, EPLB_ETRUNCATED, EPLB_EIO,
 * ...), EPLB_ENOMEM. On success *out is owned by the caller
 * (eplb_trace_stats_destroy); on error *out is NULL.
 * Threads: as the trace handle (one thread at a time per handle). */
EPLB_API eplb_status_t eplb_trace_stats(eplb_trace_t *trace, const eplb_trace_stats_options_t *opts,
                                        eplb_trace_stats_t **out);

/* Frees the statistics and their arrays. NULL is a no-op. */
EPLB_API void eplb_trace_stats_destroy(eplb_trace_stats_t *stats);

/* ---- writing and appending ---------------------------------------------- */

typedef struct eplb_trace_writer eplb_trace_writer_t;

typedef struct eplb_trace_writer_options {
  uint32_t struct_size;     /* the caller's sizeof (common.h, "Struct sizes") */
  uint32_t steps_per_chunk; /* steps buffered per chunk (default 16); 1 = every step is
                               on disk when append returns */
  int compression_level;    /* zstd level (default -1: zstd's fast mode keeps a live appender
                               within ~40 us per 61 x 256 step; 1..19 trade speed for size) */
  int fsync_chunks;         /* 1: fsync after each chunk (default 0) */
  int atomic;               /* eplb_trace_writer_create only: 1 (default) writes to a
                               temporary name that finish() renames to path, so no partial
                               file is ever visible under path; 0 writes path directly */
} eplb_trace_writer_options_t;

/* The defaults in the comments above, in the first `size` bytes of *opts (common.h,
 * "Struct sizes"). EPLB_OK, or EPLB_EINVAL (NULL, a size out of range). */
EPLB_API eplb_status_t eplb_trace_writer_options_init(eplb_trace_writer_options_t *opts,
                                                      size_t size);
/* The defaults at the caller's sizeof, through eplb_trace_writer_options_init. */
static inline void eplb_trace_writer_options_default(eplb_trace_writer_options_t *opts) {
  (void)eplb_trace_writer_options_init(opts, sizeof *opts);
}

/* Creates a new trace at path (replacing any file there once finished).
 * meta must be valid (L, E >= 1, within limits). opts may be NULL. */
EPLB_API eplb_status_t eplb_trace_writer_create(const char *path, const eplb_trace_meta_t *meta,
                                                const eplb_trace_writer_options_t *opts,
                                                eplb_trace_writer_t **out);

/* Opens an existing trace for appending: validates it, drops a torn tail
 * (truncating the file to its last complete chunk) and continues at the next
 * step number. If the file does not exist and meta is not NULL, creates it.
 * If it exists and meta is not NULL, the shapes must agree (EPLB_ESHAPE).
 * Writes are in place (opts->atomic is ignored). */
EPLB_API eplb_status_t eplb_trace_writer_open_append(const char *path,
                                                     const eplb_trace_meta_t *meta,
                                                     const eplb_trace_writer_options_t *opts,
                                                     eplb_trace_writer_t **out);

/* Appends one step (step->index is ignored). Validates ids (< E), no
 * duplicates in a row, num_rows > 0 needs meta.topk > 0. Copies the data. */
EPLB_API eplb_status_t eplb_trace_writer_append(eplb_trace_writer_t *w,
                                                const eplb_trace_step_t *step);

/* Writes buffered steps as a chunk now. */
EPLB_API eplb_status_t eplb_trace_writer_flush(eplb_trace_writer_t *w);

/* Flushes, fsyncs, and (atomic mode) renames the file into place. After
 * finish only destroy is valid. */
EPLB_API eplb_status_t eplb_trace_writer_finish(eplb_trace_writer_t *w);

/* Steps in the file so far (including buffered ones). */
EPLB_API uint64_t eplb_trace_writer_num_steps(const eplb_trace_writer_t *w);

/* Releases the writer. An atomic writer that was not finished removes its
 * temporary file (nothing appears under path); an in-place writer flushes
 * what it buffered. NULL is a no-op. */
EPLB_API void eplb_trace_writer_destroy(eplb_trace_writer_t *w);

/* ---- recovery ----------------------------------------------------------- */

typedef struct eplb_trace_recover_report {
  uint64_t steps_recovered; /* steps written to the output */
  uint64_t chunks_ok;       /* data chunks copied */
  uint64_t chunks_bad;      /* damaged chunks skipped (checksum, torn, garbage) */
  uint64_t bytes_skipped;   /* input bytes not copied */
} eplb_trace_recover_report_t;

/* Copies every intact step of a damaged (or healthy) trace to a new file,
 * renumbering steps contiguously. Needs an intact file header and metadata
 * chunk. The output is written atomically. report may be NULL. */
EPLB_API eplb_status_t eplb_trace_recover(const char *in_path, const char *out_path,
                                          eplb_trace_recover_report_t *report);

/* ---- interchange formats ------------------------------------------------ */

typedef enum eplb_trace_format {
  EPLB_TRACE_FORMAT_AUTO = 0,   /* from the file name suffix */
  EPLB_TRACE_FORMAT_NATIVE,     /* .eplbt */
  EPLB_TRACE_FORMAT_NPY_COUNTS, /* .npy counts [T, L, E], any integer dtype */
  EPLB_TRACE_FORMAT_NPY_TOPK,   /* .npy topk_ids [tokens, L, k], uint8/uint16/int32/int64 */
  EPLB_TRACE_FORMAT_CSV,        /* .csv "step,layer,expert,count" (long form, with header) */
  EPLB_TRACE_FORMAT_CSV_MATRIX  /* .csv rows = layers, columns = experts, one step, no header */
} eplb_trace_format_t;

/* The canonical name of a format: "auto", "eplbt", "counts-npy", "topk-npy",
 * "csv", "csv-matrix" (what `eplb trace convert --from/--to` and the Python
 * binding print); NULL for other values. Static strings; any thread. */
EPLB_API const char *eplb_trace_format_str(eplb_trace_format_t format);
/* The format named `name` into *out: a canonical name or an alias ("native"
 * for eplbt; "npy-counts" and "npy" for counts-npy; "npy-topk" for topk-npy).
 * EPLB_EINVAL (the detail lists the canonical names; *out unchanged) for any
 * other name or a NULL argument. Any thread. */
EPLB_API eplb_status_t eplb_trace_format_parse(const char *name, eplb_trace_format_t *out);

typedef struct eplb_trace_convert_options {
  uint32_t struct_size;          /* the caller's sizeof (common.h, "Struct sizes") */
  eplb_trace_format_t from;      /* default AUTO (.csv input: long form if its first line is the
                                    "step,layer,expert,count" header, else matrix) */
  eplb_trace_format_t to;        /* default AUTO (.csv output: long form) */
  uint32_t num_experts;          /* NPY_TOPK input: E (0 = max id + 1) */
  uint32_t tokens_per_step;      /* NPY_TOPK input: tokens per step, >= 1 for any input
                                    (default 256) */
  uint32_t topk_rows_per_step;   /* NPY_TOPK input: rows kept per step (0 = all, default) */
  const eplb_trace_meta_t *meta; /* optional: model/origin/phase/ranks for the output */
} eplb_trace_convert_options_t;

/* The defaults in the comments above, in the first `size` bytes of *opts (common.h,
 * "Struct sizes"). EPLB_OK, or EPLB_EINVAL (NULL, a size out of range). */
EPLB_API eplb_status_t eplb_trace_convert_options_init(eplb_trace_convert_options_t *opts,
                                                       size_t size);
/* The defaults, sized for the caller's header (eplb_trace_convert_options_init(opts, sizeof
 * *opts)). */
static inline void eplb_trace_convert_options_default(eplb_trace_convert_options_t *opts) {
  (void)eplb_trace_convert_options_init(opts, sizeof *opts);
}

/* Converts between formats. The output is written atomically: on any error
 * no file is left at out_path (a file already there stays as it was).
 * opts may be NULL (defaults).
 *  - NPY_TOPK input: tokens are grouped into steps of tokens_per_step (the
 *    last step may be shorter); counts come from the ids; the first
 *    topk_rows_per_step rows of each step are kept, with source_rank -1.
 *    Negative ids or ids >= E are EPLB_ERANGE; an id twice in one row is
 *    EPLB_EFORMAT (the detail names token and layer).
 *  - Long CSV input: rows in any order; a repeated (step, layer, expert) is
 *    EPLB_EFORMAT; missing entries are 0; steps = largest step + 1, and
 *    layers/experts likewise unless meta gives larger ones.
 *  - Long CSV output lists the non-zero counts plus the last cell of the
 *    last step (so the shape survives a round trip). NPY output is '<u4'
 *    counts [T, L, E]. CSV matrix output needs a one-step input (ESHAPE).
 *  - Inputs without tokens (NPY/CSV counts) record num_tokens as the busiest
 *    layer's total over k when k is known (meta->topk), else 0. Top-k rows
 *    are kept only native -> native and NPY_TOPK -> native.
 *  - meta (optional) sets model, origin, phase, ranks and k of the output;
 *    its layers/experts, when non-zero, must match the input (ESHAPE).
 * Returns EPLB_EFORMAT/ESHAPE/ERANGE/ETRUNCATED for bad input (detail names
 * the file, line or element), EPLB_EINVAL (NULL path, unknown output
 * suffix), EPLB_EIO, EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_trace_convert(const char *in_path, const char *out_path,
                                          const eplb_trace_convert_options_t *opts);

/* ---- loads: per-(layer, expert) totals for planning --------------------- */

/* A dense [num_layers][num_experts] matrix of non-negative, finite loads
 * (token counts or windowed averages). Owned by the caller once returned. */
typedef struct eplb_loads {
  uint32_t num_layers;
  uint32_t num_experts;
  double *values; /* [num_layers * num_experts] */
} eplb_loads_t;

/* Allocates a zeroed L x E matrix. EPLB_EINVAL for 0 layers/experts,
 * EPLB_ERANGE beyond the trace limits, EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_loads_create(uint32_t num_layers, uint32_t num_experts,
                                         eplb_loads_t **out);

/* Reads loads from a file: a native trace (counts summed over steps
 * [step_begin, step_end); step_end = UINT64_MAX for all), a CSV matrix (rows
 * = layers, columns = experts; numbers may be fractional), a long-form CSV or
 * an NPY counts array [T, L, E] (summed over the step range). A CSV matrix
 * or a 2-D NPY [L, E] is one matrix taken as is (the range does not apply).
 * The format comes from the suffix (.npy, .csv; anything else is read as a
 * native trace); a .csv whose first line is "step,layer,expert,count" is
 * long form. Negative, NaN, infinite or non-numeric values, empty fields or
 * files and ragged rows are EPLB_EFORMAT with "FILE:LINE:COLUMN: problem" in
 * the detail; more than the trace limits of rows/columns is EPLB_ERANGE,
 * and so is a step range (other than the whole file) that starts at or past
 * the last step of a trace, 3-D NPY or long-form CSV (it selects nothing).
 * On success *out is owned by the caller (eplb_loads_destroy); on error
 * *out is NULL. */
EPLB_API eplb_status_t eplb_loads_read(const char *path, uint64_t step_begin, uint64_t step_end,
                                       eplb_loads_t **out);

/* eplb_loads_read that hands back the native trace it summed, still open, so
 * that a caller that needs more of it (its metadata, its steps: the decode
 * policy's model and window, eplb_plan_create_from_trace) does not open the
 * file again: *trace is the handle (the caller's, eplb_trace_close) for a
 * native trace, NULL for the other formats and on error. Same statuses. */
EPLB_API eplb_status_t eplb_loads_read_trace(const char *path, uint64_t step_begin,
                                             uint64_t step_end, eplb_loads_t **out,
                                             eplb_trace_t **trace);

/* Writes a CSV matrix (rows = layers, columns = experts), atomically.
 * Integers are written exactly, fractions with 17 significant digits (they
 * read back to the same double). Negative or non-finite values are
 * EPLB_ERANGE; EPLB_EIO when path cannot be written (nothing is left). */
EPLB_API eplb_status_t eplb_loads_write_csv(const eplb_loads_t *loads, const char *path);

/* Frees the matrix. NULL is a no-op. */
EPLB_API void eplb_loads_destroy(eplb_loads_t *loads);

/* ---- synthetic traces --------------------------------------------------- */

typedef enum eplb_skew_kind {
  EPLB_SKEW_ZIPF = 0,     /* popularity of rank r ~ 1 / r^param */
  EPLB_SKEW_LOGNORMAL = 1 /* popularity ~ exp(N(0, param^2)) */
} eplb_skew_kind_t;

typedef struct eplb_synth_options {
  uint32_t struct_size;                   /* the caller's sizeof (common.h, "Struct sizes") */
  uint32_t num_layers, num_experts, topk; /* shape (defaults 4, 64, 6) */
  uint64_t num_steps;                     /* default 32 */
  uint32_t tokens_per_step;               /* default 256 */
  uint64_t seed;                          /* default 1; same seed, same file */
  eplb_skew_kind_t skew;                  /* default zipf */
  double skew_param;                      /* default 1.0 */
  double layer_variation;                 /* 0..1: how much each layer's popularity differs from
                                             the others (default 1 = independent layers) */
  double drift;                           /* step-to-step correlation of popularity, 0..1
                                             (default 0.9) */
  uint64_t switch_every;                  /* abrupt domain switch every N steps (0 = never) */
  double coactivation;                    /* 0..1: strength of experts being picked together
                                             (default 0.3) */
  uint32_t num_ranks;                     /* source ranks of tokens (default 8; 0 = unknown) */
  uint32_t topk_rows_per_step;            /* rows stored per step (default: all tokens;
                                             UINT32_MAX = all; 0 = none) */
  eplb_trace_phase_t phase;               /* default decode */
  char model[64];                         /* default "synthetic" */
  double rank_affinity;                   /* 0..1: how much a token's experts depend on its
                                             source's tenant (default 0 = not at all) */
  uint32_t num_tenants;                   /* tenants the ranks are grouped into (default 0 =
                                             one per 8 consecutive ranks, rounded up) */
} eplb_synth_options_t;

/* The defaults in the comments above, in the first `size` bytes of *opts (common.h,
 * "Struct sizes"). EPLB_OK, or EPLB_EINVAL (NULL, a size out of range). */
EPLB_API eplb_status_t eplb_synth_options_init(eplb_synth_options_t *opts, size_t size);
/* The defaults at the caller's sizeof, through eplb_synth_options_init. */
static inline void eplb_synth_options_default(eplb_synth_options_t *opts) {
  (void)eplb_synth_options_init(opts, sizeof *opts);
}

/* Writes a synthetic trace (atomically). Deterministic in opts (seed
 * included): the generator has its own PRNG; results may differ across
 * platforms only where their libm's exp/log/pow round differently. Counts of
 * each step equal the top-k choices of its tokens (every token picks k
 * distinct experts per layer).
 * Model: each expert has a latent Gaussian score per layer, a mix of a score
 * shared by all layers and the layer's own (layer_variation); popularity is
 * 1/rank^param by score (zipf) or exp(param * score) (lognormal). Scores move
 * as an AR(1) process whose coefficient is calibrated so that consecutive
 * steps' expected counts correlate by `drift` across experts; every
 * switch_every steps they are redrawn. After a token's first pick, each
 * further pick comes with probability `coactivation` from the first pick's
 * latent cluster (2k experts). Token i of a step comes from rank
 * i * num_ranks / tokens_per_step; stored rows are an even sample of the
 * step's tokens.
 * Tenants (rank_affinity > 0, needs num_ranks > 0): the ranks are cut into
 * num_tenants contiguous groups (rank r belongs to tenant r * num_tenants /
 * num_ranks; by default one per 8 ranks, i.e. per 8-GPU node), standing for
 * the requests a data-parallel group serves. Each tenant has its own latent
 * score per layer (same mix of shared and per-layer parts, same drift and
 * switches), and a token from tenant t draws from the scores
 * (1 - A) * y + sqrt(1 - (1 - A)^2) * y_t, A = rank_affinity: two tenants'
 * scores correlate by (1 - A)^2. Each tenant's popularity keeps the asked
 * skew; the mix over tenants is flatter. Measured (58 x 256, top-8,
 * coactivation 0.5, 32 ranks, 4 tenants, 100 steps x 256 tokens, zipf 1.0):
 * Spearman (Pearson) correlation of two tenants' expert counts over the
 * trace, mean over layers and pairs: A = 0 0.98 (1.00), 0.25 0.48 (0.42),
 * 0.5 0.20 (0.15), 0.75 0.05 (0.03); the ESFT tasks: 0.12-0.29. rank_affinity = 0
 * gives the same file as before the field existed.
 * Measured busiest expert / mean (one step, 128 experts,
 * top-8): zipf 0.3 ~2.8x (mixed-domain traffic), zipf 0.8-1.2 ~9-14x
 * (narrow domain), lognormal 1.0 ~6x, 2.0 ~12x.
 * opts may be NULL (defaults). EPLB_EINVAL for invalid options, EPLB_EIO,
 * EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_synth_generate(const char *path, const eplb_synth_options_t *opts);

/* Checks opts as eplb_synth_generate does first: the shape (num_layers
 * 1..EPLB_TRACE_MAX_LAYERS, num_experts 1..EPLB_TRACE_MAX_EXPERTS, topk
 * 1..min(EPLB_TRACE_MAX_TOPK, num_experts)), the skew and skew_param (in
 * [0, 100]), layer_variation, drift, coactivation and rank_affinity (in
 * [0, 1]; rank_affinity > 0 needs num_ranks > 0 and num_tenants <=
 * num_ranks), tokens_per_step (<= EPLB_MAX_TOKENS_PER_STEP) and a step's
 * top-k rows (one chunk, under 1 GiB). A caller calls it to refuse a bad value
 * before other work. Returns EPLB_OK, EPLB_EINVAL or EPLB_ERANGE (the two
 * limits) with a detail that starts with the field's name and value ("drift
 * 2: must be in [0, 1]"), so that a caller can name its own option for it.
 * opts is borrowed and not changed; thread-safe. */
EPLB_API eplb_status_t eplb_synth_options_check(const eplb_synth_options_t *opts);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_TRACE_H */
