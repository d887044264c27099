/* eplb — expert-parallel load balancing for Mixture-of-Experts inference.
 *
 * common.h: conventions shared by every public header: export macro, the one
 * status enum, the logging callback, allocation hooks, error details, and
 * feature queries.
 *
 * Rules that hold for the whole library:
 *  - Every fallible call returns eplb_status_t (EPLB_OK == 0, errors < 0).
 *  - The library never prints to stdout/stderr, never exits, never aborts.
 *    Diagnostics go to the logging callback (none by default) and the last
 *    error's text is kept per thread (eplb_error_detail()).
 *  - Handles are opaque `eplb_x_t *` created by `eplb_x_create`/`_open` and
 *    released by `eplb_x_destroy`/`_close`; destroying NULL is a no-op.
 *  - Options structs are initialised by `eplb_x_options_default()`, and
 *    carry their size (see "Struct sizes" below).
 *  - Unless a header says otherwise a handle may be used by one thread at a
 *    time; distinct handles may be used concurrently.
 */
#ifndef EPLB_COMMON_H
#define EPLB_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define EPLB_API __declspec(dllexport)
#elif defined(__GNUC__)
#define EPLB_API __attribute__((visibility("default")))
#else
#define EPLB_API
#endif

/* Status codes. Negative values are errors; the set only grows. */
typedef enum eplb_status {
  EPLB_OK = 0,
  EPLB_EINVAL = -1,       /* an argument is invalid (NULL, out of range, inconsistent) */
  EPLB_ENOMEM = -2,       /* an allocation failed */
  EPLB_EIO = -3,          /* the operating system failed a read/write/open */
  EPLB_EFORMAT = -4,      /* input is malformed: bad magic, version, syntax, value */
  EPLB_ECORRUPT = -5,     /* a checksum does not match: data was damaged */
  EPLB_ETRUNCATED = -6,   /* input ends early (e.g. a file cut short by a crash) */
  EPLB_ERANGE = -7,       /* a value is outside its allowed range (expert id, count) */
  EPLB_ESHAPE = -8,       /* dimensions do not agree (layers, experts, GPUs) */
  EPLB_EUNSUPPORTED = -9, /* the feature was not built in, or is not implemented for this input */
  EPLB_ENODEVICE = -10,   /* no usable GPU */
  EPLB_ESOLVER = -11,     /* the LP/MIP solver failed */
  EPLB_ETIMEOUT = -12,    /* a time limit was reached before a result */
  EPLB_EINFEASIBLE = -13, /* the problem has no solution */
  EPLB_ECOMM = -14,       /* a communicator (MPI/NCCL) operation failed */
  EPLB_ESTATE = -15,      /* the call is not valid in the handle's current state */
  EPLB_EBUSY = -16,       /* a resource is in use; try again */
  EPLB_EOF = -17,         /* end of stream (not an error for iterators) */
  EPLB_EDEVICE = -18      /* a CUDA call failed */
} eplb_status_t;

/* Limits: the largest inputs the library accepts, the same for every reader
 * and writer (a file eplb writes can always be read back). Beyond them an
 * operation fails up front with EPLB_ERANGE (the planner: EPLB_EINVAL) and a
 * detail naming the number and the limit; no work is started.
 *   layers, experts:  per trace / plan (EPLB_TRACE_MAX_LAYERS/_EXPERTS alias these)
 *   GPUs:             per plan or cluster
 *   slots:            physical expert slots per layer (all GPUs together)
 *   plan work:        slots x GPUs per layer, what the planner's placement
 *                     search costs (2^28 plans in about 1 s per layer)
 *   sim nodes:        nodes of a cluster the simulator replays on (its
 *                     per-step cost grows with the square of the nodes)
 *   steps:            steps of a trace that a conversion may create
 *   tokens per step:  tokens of one synthetic step (trace gen)
 *   synthetic objects: objects of every level of one hwloc synthetic node
 *                     description ("pack:2 core:4 pu:2" has 2 + 8 + 16): hwloc
 *                     builds them in time quadratic in their number (4096:
 *                     under a second; 65536: minutes) */
#define EPLB_MAX_LAYERS 4096u
#define EPLB_MAX_EXPERTS 65535u
#define EPLB_MAX_GPUS 65536u
#define EPLB_MAX_SLOTS 65536u
#define EPLB_MAX_PLAN_WORK (UINT64_C(1) << 28)
#define EPLB_MAX_SIM_NODES 1024u
#define EPLB_MAX_STEPS (UINT64_C(1) << 32)
#define EPLB_MAX_TOKENS_PER_STEP (1u << 24)
#define EPLB_MAX_SYNTHETIC_OBJECTS 4096u

/* Short, static English text for a status ("invalid argument", ...). Never NULL. */
EPLB_API const char *eplb_status_str(eplb_status_t status);

/* Symbolic name of a status ("EPLB_EINVAL"). Never NULL. */
EPLB_API const char *eplb_status_name(eplb_status_t status);

/* Text of the last error raised on the calling thread, naming the file,
 * field or value at fault, e.g. "x.eplbt: chunk 3 at offset 4096: CRC
 * mismatch". Empty string when none. Valid until the next eplb call on this
 * thread. Thread-safe (thread-local storage). */
EPLB_API const char *eplb_error_detail(void);

/* Clears the calling thread's error detail. */
EPLB_API void eplb_error_clear(void);

/* Unlinks the temporary files of the outputs this process is writing at the
 * moment of the call (plans, exports, traces, conversions: each is written
 * under "<target>.tmp.<pid>.<suffix>" and renamed when complete).
 * Async-signal-safe: call it from a SIGINT/SIGTERM handler before exiting,
 * so that an interrupted write leaves nothing behind. The writes it cut
 * short then fail; the handler should not return to them. */
EPLB_API void eplb_remove_temporaries(void);

/* Removes the temporaries that writers which are gone left next to path
 * ("<path>.tmp.<pid>.<letters/digits>" of a process that no longer exists,
 * unwritten for a minute; "<path>.tmp.<letters/digits>" of an older eplb,
 * unwritten for an hour): files, and staging directories with the files in
 * them (one level). A path ending in '/' names a directory whose own
 * ".tmp.<pid>.<x>" entries are swept. Every atomic write of the library
 * calls it after its rename; a tool that renames its own temporary into
 * place calls it too. Best effort: nothing is reported. */
EPLB_API void eplb_remove_stale_temporaries(const char *path);

/* ---- types the planner and the runtime share ----------------------------
 * Defined here so that eplb/runtime.h compiles with this header alone: the
 * runtime takes plans as opaque handles, and its config names a policy and
 * embeds continuous re-placement's budget (eplb/plan.h documents them). */

/* A plan: placement (phy2log), shares and metrics (eplb/plan.h). Opaque. */
typedef struct eplb_plan eplb_plan_t;

typedef enum eplb_plan_policy {
  EPLB_POLICY_DEEPSEEK = 0,    /* DeepSeek EPLB (rebalance_experts), uniform shares */
  EPLB_POLICY_BALANCED = 1,    /* min-max replication, LPT placement, exact shares, local search */
  EPLB_POLICY_MIP = 2,         /* GLPK placement MIP (small instances), warm start from balanced */
  EPLB_POLICY_INCREMENTAL = 3, /* from opts.from: few slot changes toward a balanced replan */
  EPLB_POLICY_LOCALITY = 4,    /* fewest cross-node copies within a tolerance of balanced */
  EPLB_POLICY_DECODE = 5       /* least modelled decode step time (eplb/model.h; "Decode") */
} eplb_plan_policy_t;

/* The budget of one step's slot moves (eplb/plan.h, eplb_plan_step_moves;
 * the runtime's cfg.continuous). */
typedef struct eplb_plan_step_options {
  uint32_t struct_size;   /* the caller's sizeof (common.h, "Struct sizes") */
  uint32_t slots_per_gpu; /* slots each GPU may receive per step (default 16; 0: no move).
                             Bursts after a change of the traffic's mix use it; on the
                             bundled ESFT replay (8 GPUs) the mean is ~1.3 a GPU a step */
  uint64_t bytes_per_gpu; /* bytes each GPU may receive per step, with expert_bytes
                             (default 0: no byte limit) */
  uint64_t expert_bytes;  /* bytes of one expert's weights (default 0) */
  uint32_t max_per_layer; /* slots changed in one layer per step (default 8) */
  double move_weight;     /* price of one moved slot in mean GPU loads (default 0.0005) */
  /* 0 (default): staged copies: a moving slot serves its old expert, and can be copied
   * from, until its layer's moves land together, so a layer may swap experts between
   * slots. 1: copies into the slots themselves: a moving slot carries nothing at once,
   * so every expert that gives a slot up keeps one that does not move, and no moving
   * slot is a source. */
  uint32_t in_place;
} eplb_plan_step_options_t;

/* ---- struct sizes --------------------------------------------------------
 * Every public struct that has an `eplb_x_default()` (the option structs, the
 * runtime config, the cost model, plan arrays, trace metadata) starts with
 * `uint32_t struct_size`: the size of the struct as the caller was compiled,
 * so that a program built against an older or newer header than the
 * libeplb it loads never has bytes read or written past its struct (the
 * rule of Linux's openat2 `struct open_how`).
 *  - `eplb_x_default(x)` is a static inline of the header that calls the
 *    exported `eplb_x_init(x, sizeof *x)`: the caller's own size is what
 *    gets stored. init writes exactly `size` bytes: the library's defaults
 *    for the fields that fit, zeros past the fields the library knows.
 *    Bindings that mirror a struct call `eplb_x_init` with their own size.
 *    init returns EPLB_OK, or EPLB_EINVAL (NULL, or a size outside
 *    [EPLB_STRUCT_SIZE_MIN, EPLB_STRUCT_SIZE_MAX]).
 *  - Build such a struct with its `_default()` and then set fields; a struct
 *    literal or memset leaves struct_size 0, which every function refuses.
 *  - A function that reads such a struct reads only struct_size bytes of
 *    it. Shorter (an older caller): the fields past them take the library's
 *    defaults. Longer (a newer caller): accepted only when every byte past
 *    the library's own size is zero (a new field's "not used"), else
 *    EPLB_EUNSUPPORTED with a detail naming the struct and the byte. Out of
 *    range (0, under EPLB_STRUCT_SIZE_MIN, over EPLB_STRUCT_SIZE_MAX):
 *    EPLB_EINVAL.
 *  - A function that fills such a struct (eplb_cost_model_read, ...) needs
 *    struct_size set (by `_default()`) and writes at most that many bytes.
 *  - Structs grow only at their end; a new field starts at or past the
 *    previous version's sizeof (explicit padding where the tail padding
 *    would otherwise take it), and 0 means the behaviour before it existed.
 *  - A struct embedded by value in another (eplb_plan_step_options_t as
 *    eplb_runtime_config_t's `continuous`, its last member) is covered by
 *    the outer struct's size: its own struct_size is set by the outer's
 *    `_default()` and not read. Such a struct does not grow while embedded;
 *    new fields go to the outer struct's end. A struct reached through a
 *    pointer (eplb_sim_options_t's cost model) keeps its own size. */
#define EPLB_STRUCT_SIZE_MIN 4u
#define EPLB_STRUCT_SIZE_MAX 65536u

/* ---- logging ---------------------------------------------------------- */

typedef enum eplb_log_level {
  EPLB_LOG_ERROR = 0,
  EPLB_LOG_WARN = 1,
  EPLB_LOG_INFO = 2,
  EPLB_LOG_DEBUG = 3
} eplb_log_level_t;

/* Receives one formatted message (no trailing newline). `module` is the
 * library module ("traces", "lp", ...). May be called from any thread the
 * library runs on (including planner background threads): make it
 * thread-safe. */
typedef void (*eplb_log_fn)(eplb_log_level_t level, const char *module, const char *message,
                            void *user);

/* Installs the process-wide log callback (NULL: drop messages, the default)
 * and the most verbose level passed to it. Thread-safe; takes effect for
 * messages started after the call. */
EPLB_API void eplb_log_set_callback(eplb_log_fn fn, void *user, eplb_log_level_t max_level);

/* ---- allocation hooks --------------------------------------------------- */

/* Process-wide allocator used by every allocation the library makes (except
 * inside third-party libraries). `malloc`/`realloc` follow the C contracts;
 * returning NULL makes the calling API fail with EPLB_ENOMEM and leave no
 * partial state. All four must be set. */
typedef struct eplb_allocator {
  void *(*malloc)(size_t size, void *user);
  void *(*calloc)(size_t n, size_t size, void *user);
  void *(*realloc)(void *ptr, size_t size, void *user);
  void (*free)(void *ptr, void *user);
  void *user;
} eplb_allocator_t;

/* Replaces the allocator (NULL restores the C library's). Call it before any
 * other eplb call, or when no eplb object is alive: memory must be freed by
 * the allocator that allocated it. Returns EPLB_EINVAL if a member is NULL. */
EPLB_API eplb_status_t eplb_allocator_set(const eplb_allocator_t *allocator);

/* ---- build information ------------------------------------------------- */

typedef enum eplb_feature {
  EPLB_FEATURE_CUDA = 1,
  EPLB_FEATURE_NCCL = 2,
  EPLB_FEATURE_MPI = 3
} eplb_feature_t;

/* 1 when the feature was compiled in, 0 otherwise (including unknown values). */
EPLB_API int eplb_feature_enabled(eplb_feature_t feature);

/* The headers' version (what a caller was compiled against); the build
 * checks that they agree with the library's (tests/core). Compare with
 * EPLB_VERSION_AT_LEAST; eplb_version() and eplb_version_number() give
 * the version of the library actually loaded, which may be newer. */
#define EPLB_VERSION_MAJOR 0
#define EPLB_VERSION_MINOR 1
#define EPLB_VERSION_PATCH 0
#define EPLB_VERSION_ENCODE(major, minor, patch) ((major)*1000000 + (minor)*1000 + (patch))
#define EPLB_VERSION_NUMBER                                                                        \
  EPLB_VERSION_ENCODE(EPLB_VERSION_MAJOR, EPLB_VERSION_MINOR, EPLB_VERSION_PATCH)
#define EPLB_VERSION_AT_LEAST(major, minor, patch)                                                 \
  (EPLB_VERSION_NUMBER >= EPLB_VERSION_ENCODE(major, minor, patch))

/* Library version, "MAJOR.MINOR.PATCH". */
EPLB_API const char *eplb_version(void);

/* Library version as EPLB_VERSION_ENCODE(major, minor, patch). */
EPLB_API int eplb_version_number(void);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_COMMON_H */
