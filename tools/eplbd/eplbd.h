/* tools/eplbd/eplbd.h — internal declarations of the eplbd daemon, shared by
 * its files. The daemon uses only the public API (include/eplb). */
#ifndef EPLBD_H
#define EPLBD_H

#include <eplb/plan.h>
#include <eplb/shm.h>
#include <eplb/trace.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

/* Exit codes: 0 success, 1 failure, 2 bad input (usage, config, data). */
enum { EPLBD_OK = 0, EPLBD_FAIL = 1, EPLBD_BADINPUT = 2 };

/* Layers that get a per-layer gauge in /metrics (bounded label sets). */
#define EPLBD_MAX_LAYER_LABELS 128u
#define EPLBD_MAX_SOURCES 64u

/* ---- log.c ---- */
void eplbd_log_init(int level);
int eplbd_log_level_parse(const char *s); /* -1 if unknown */
/* Copies in with control characters escaped ("\\n", "\\r", "\\xNN"),
 * truncated to fit cap: messages that quote input stay one line. */
void eplbd_escape(char *out, size_t cap, const char *in);
void eplbd_log(eplb_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- config.c ---- */
typedef struct eplbd_source_cfg {
  char *name;
  char *trace;     /* follow this trace, or NULL */
  char *shm;       /* read this segment, or NULL */
  char *out;       /* publish plan-<epoch>.json + current here, or NULL */
  int publish_shm; /* post plans to the segment's mailbox (-1 while parsing: not given) */
  uint32_t gpus, nodes, replicas, slots_per_gpu; /* 0 = the global value */
  uint64_t window;                               /* 0 = the global value */
} eplbd_source_cfg_t;

typedef struct eplbd_config {
  eplbd_source_cfg_t *sources;
  uint32_t num_sources;
  double period;       /* seconds between planning steps */
  double stale_after;  /* seconds without an update before a source is stale */
  double threshold;    /* publish when new - current mean balancedness >= this */
  uint64_t window;     /* trace steps planned from */
  uint32_t keep_plans; /* plan-N.json kept per --out directory (0 = all) */
  uint32_t gpus, nodes, replicas, slots_per_gpu;
  double expert_bytes;  /* bytes of one expert's weights, for bytes-to-move */
  int full_replans;     /* 1: policy "balanced" (full replans), 0: "incremental" */
  uint32_t move_budget; /* incremental: max slots changed per layer (0 = unlimited) */
  uint32_t threads;     /* planner threads (eplb_plan_options_t.threads; 0 = online cores) */
  double move_weight;   /* incremental: price of a slot change in mean GPU loads */
  char *listen;         /* "HOST:PORT", "" = no HTTP */
  uint32_t listen_addr; /* listen's IPv4 address, network byte order */
  uint16_t listen_port; /* listen's port (0: any free port) */
  int allow_remote;
  int log_level;
  char *port_file; /* write the bound HTTP port here */
} eplbd_config_t;

/* Command-line values that override the file (and are kept across SIGHUP). */
typedef struct eplbd_cli {
  const char *config_path;
  const char *trace, *shm, *out, *listen, *port_file, *log_level, *policy;
  double period, stale_after, threshold, expert_bytes, move_weight;
  int have_period, have_stale, have_threshold, have_expert_bytes, have_move_weight;
  uint32_t move_budget;
  int have_move_budget; /* --move-budget given (0 = unlimited is a value) */
  uint32_t keep_plans;
  int have_keep_plans; /* --keep-plans given (0 = keep all is a value) */
  uint32_t gpus, nodes, replicas, slots_per_gpu;
  uint64_t window;
  int allow_remote, once;
} eplbd_cli_t;

/* Builds the effective config from the file (if any) and the flags. On bad
 * input returns EPLBD_BADINPUT with a one-line message in err. */
int eplbd_config_load(const eplbd_cli_t *cli, eplbd_config_t *cfg, char *err, size_t errlen);
void eplbd_config_free(eplbd_config_t *cfg);

/* ---- sources.c: one deployment (a trace or a segment) ---- */
/* Only the main thread writes a source; once installed in eplbd_sources,
 * what /metrics and /plan read (cfg.name, changed_at, stale and everything
 * from `epoch` down) changes only under eplbd_lock. */
typedef struct eplbd_source {
  eplbd_source_cfg_t cfg; /* resolved: no zero means "global" */
  uint64_t window;
  uint32_t keep_plans; /* the global value */
  eplb_trace_t *trace;
  uint64_t trace_dev, trace_ino, trace_size; /* the followed file, as last seen */
  eplb_shm_t *shm;
  uint32_t num_layers, num_experts;
  eplb_loads_t *loads;
  uint64_t seen;     /* trace steps or shm sequence last observed */
  uint64_t planned;  /* value of seen when last planned */
  int have_data;     /* loads hold a window */
  double changed_at; /* monotonic time of the last observed update */
  int stale;
  char last_error[256];
  int bad_input; /* the last failure was malformed data, not the system */
  /* planning and publishing */
  eplb_plan_t *current;
  uint64_t epoch;
  int exhausted;   /* epoch reached 2^64-1: nothing more is published (epochs never wrap) */
  char *plan_json; /* bytes of the current plan file */
  size_t plan_json_len;
  double *layer_balancedness; /* [min(L, EPLBD_MAX_LAYER_LABELS)] of the current plan */
  uint32_t layer_labels;
  double mean_balancedness, min_balancedness, candidate_balancedness, last_gain;
  uint64_t replans, publishes, skipped_gain, skipped_bound, invalid_plans, errors;
  uint64_t slots_moved, bytes_moved;
  double planning_seconds_total, planning_seconds_last;
} eplbd_source_t;

/* Resolves the source's settings against the global ones; nothing is opened
 * before the first poll (which retries a missing trace every period). */
void eplbd_source_init(eplbd_source_t *s, const eplbd_source_cfg_t *cfg, const eplbd_config_t *g);
void eplbd_source_fini(eplbd_source_t *s);
/* Refreshes the source; returns 1 when new data arrived, 0 when none, -1 on
 * an error (logged, recorded in last_error). Sets have_data/loads. */
int eplbd_source_poll(eplbd_source_t *s, double now);
/* Why the last failure was bad input (exit 2 with --once). */
int eplbd_source_bad_input(const eplbd_source_t *s);

/* ---- publish.c ---- */
/* Lists cfg.out: removes temporary leftovers, takes the largest plan-N.json
 * as the last epoch, loads the newest plan that reads back valid as current
 * and repairs the `current` link. */
int eplbd_publish_resume(eplbd_source_t *s);
/* Once the segment is open (s->shm): the next epoch follows the mailbox's,
 * so a restarted daemon without cfg.out posts an epoch the runtime takes. */
void eplbd_publish_resume_mailbox(eplbd_source_t *s);
/* Validates `plan` (re-read from what was written) and publishes it under
 * epoch s->epoch + 1 to the directory and/or mailbox. */
int eplbd_publish(eplbd_source_t *s, const eplb_plan_t *plan);

/* ---- step.c ---- */
/* One planning step of a source: plan, compare, publish when worth it.
 * Returns 0 on success (published or not), -1 on a failure. */
int eplbd_step(eplbd_source_t *s, const eplbd_config_t *g);

/* ---- http.c ---- */
typedef struct eplbd_http eplbd_http_t;
int eplbd_http_start(const eplbd_config_t *cfg, eplbd_http_t **out);
void eplbd_http_stop(eplbd_http_t *h);

/* ---- state.c: shared state (main.c installs the sources; HTTP reads them) ---- */
/* Set by SIGTERM/SIGINT: every loop that can take long (resume, the
 * sources of a period, name searches) checks it. */
extern volatile sig_atomic_t eplbd_stop_requested;
extern pthread_mutex_t eplbd_lock;
extern eplbd_source_t *eplbd_sources;
extern uint32_t eplbd_num_sources;
extern double eplbd_start_time;
double eplbd_now(void);

#endif
