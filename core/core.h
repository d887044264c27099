/* core/core.h — internal header of the core module: allocation, logging,
 * error details and small helpers shared by every other module. Symbols here
 * are `eplb__` (internal, not exported from libeplb). */
#ifndef EPLB_CORE_H
#define EPLB_CORE_H

#include "eplb/common.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define EPLB__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define EPLB__PRINTF(f, a)
#endif

/* Allocation through the user's hooks. eplb__malloc_array and friends check
 * n * size for overflow and return NULL on it. */
void *eplb__malloc(size_t size);
void *eplb__calloc(size_t n, size_t size);
void *eplb__realloc(void *ptr, size_t size);
void *eplb__malloc_array(size_t n, size_t size);
void *eplb__realloc_array(void *ptr, size_t n, size_t size);
/* Room for one more element in the growable array v of *cap elements, n of
 * them used: doubled (first when empty) once full. Returns the array (v,
 * or where it moved), or NULL with v and *cap kept when allocation fails. */
void *eplb__room_for_one(void *v, size_t *cap, size_t n, size_t size, size_t first);
void eplb__free(void *ptr);
char *eplb__strdup(const char *s);

/* Logs through the user's callback if the level is enabled. */
void eplb__log(eplb_log_level_t level, const char *module, const char *fmt, ...) EPLB__PRINTF(3, 4);

/* Records the thread's error detail (formatted), logs it at DEBUG under
 * `module`, and returns `status` so that callers can write
 * `return eplb__error(EPLB_EFORMAT, "traces", "%s: bad magic", path);`. */
eplb_status_t eplb__error(eplb_status_t status, const char *module, const char *fmt, ...)
    EPLB__PRINTF(3, 4);

/* One item of eplb__pool_run: worker in [0, workers) (per-worker state such
 * as a solver handle is indexed by it; worker 0 is the calling thread). */
typedef eplb_status_t (*eplb__pool_fn_t)(void *arg, uint32_t worker, uint32_t item);
/* Runs fn for items 0 .. n-1 on up to `workers` threads, the calling thread
 * being one of them (workers <= 1 starts none). Items are handed out in
 * increasing order; once one fails, higher items may be skipped. Returns
 * EPLB_OK, or the lowest failing item's status and detail (*failed, when
 * not NULL, its index; UINT32_MAX when none failed). Threads that cannot
 * be started (or set up) only leave their items to the others, the calling
 * thread at worst doing all of them. thread_done
 * (may be NULL) runs on each started thread before it ends (per-thread
 * library state such as GLPK's environment). */
eplb_status_t eplb__pool_run(uint32_t workers, uint32_t n, eplb__pool_fn_t fn, void *arg,
                             void (*thread_done)(void), uint32_t *failed);
/* How many workers a job of `items` items gets: `requested`, or with 0 the
 * online cores (at most max) unless the job is `small` (starting a thread,
 * ~0.1 ms, ~1 ms on a loaded machine, would cost more than it saves); never
 * more than the items, at least 1. */
uint32_t eplb__pool_workers(uint32_t requested, uint32_t items, uint32_t max, int small);

/* eplb__error with "FMT: " before the thread's current detail (or, when
 * there is none, the status's string): a caller naming what failed (a
 * layer, a device call) around a callee's reason. */
eplb_status_t eplb__error_wrap(eplb_status_t status, const char *module, const char *fmt, ...)
    EPLB__PRINTF(3, 4);

/* The size rule of the public option structs (eplb/common.h, "Struct
 * sizes"); `name` is the struct's type name for the detail.
 * eplb__opts_init: a sized init. Writes the first `size` bytes of o: the
 * library's defaults (lib_size bytes of them) for the fields that fit, zeros
 * past them, and struct_size = size. EPLB_EINVAL for NULL or a size outside
 * [EPLB_STRUCT_SIZE_MIN, EPLB_STRUCT_SIZE_MAX].
 * eplb__opts_take: reads a caller's struct src into dst, the library's own
 * (lib_size bytes, already holding the defaults: a shorter caller's missing
 * tail keeps them); dst->struct_size becomes lib_size. src NULL leaves the
 * defaults. EPLB_EINVAL for a size out of range, EPLB_EUNSUPPORTED for a
 * longer caller whose bytes past lib_size are not all zero.
 * eplb__opts_give: writes the library's struct src into a caller's dst, at
 * most dst's struct_size bytes (struct_size itself is kept). EPLB_EINVAL for
 * NULL or a size out of range. */
eplb_status_t eplb__opts_init(void *o, size_t size, const void *defaults, size_t lib_size,
                              const char *name);
eplb_status_t eplb__opts_take(void *dst, const void *src, size_t lib_size, const char *name,
                              const char *module);
eplb_status_t eplb__opts_give(void *dst, const void *src, size_t lib_size, const char *name,
                              const char *module);

/* eplb__opts_take into the local struct `dst` (an lvalue of the library's
 * type), after default_fn(&dst) put the defaults there. */
#define EPLB__OPTS_TAKE(dst, src, default_fn, name, module)                                        \
  (default_fn(&(dst)), eplb__opts_take(&(dst), (src), sizeof(dst), (name), (module)))

/* Monotonic clock in seconds. */
double eplb__now(void);

/* FNV-1a over n bytes, continuing from h (start with EPLB__FNV1A_BASIS):
 * fingerprints of configurations and placements, not security. */
#define EPLB__FNV1A_BASIS 0xcbf29ce484222325ull
static inline uint64_t eplb__fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *b = data;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Balancedness of a layer: its mean GPU load over its busiest GPU's, total
 * / num_gpus / max, 1 for an idle layer (nothing is unbalanced). The one
 * definition the planner's metrics, switching and window choice and the
 * simulator share, so their figures agree to the bit. Not clamped: rounding
 * can put the mean an ulp above the max, and a caller stating a certificate
 * (plan metrics) clamps. */
static inline double eplb__balancedness(double total, uint32_t num_gpus, double max) {
  return max > 0 ? total / num_gpus / max : 1.0;
}

/* The same of GPU loads gpu [num_gpus], summed in GPU order. */
static inline double eplb__balancedness_of(const double *gpu, uint32_t num_gpus) {
  double total = 0, max = 0;
  for (uint32_t g = 0; g < num_gpus; g++) {
    total += gpu[g];
    max = gpu[g] > max ? gpu[g] : max;
  }
  return eplb__balancedness(total, num_gpus, max);
}

/* Deterministic PRNG (xoshiro256**, seeded through splitmix64): the same
 * sequence on every platform. Used by the synthetic trace generator and
 * the planner's randomised searches. */
typedef struct eplb__rng {
  uint64_t s[4];
} eplb__rng_t;

void eplb__rng_seed(eplb__rng_t *rng, uint64_t seed);
uint64_t eplb__rng_next(eplb__rng_t *rng);
/* Uniform in [0, 1) with 53 random bits. */
double eplb__rng_uniform(eplb__rng_t *rng);
/* Uniform integer in [0, n), n >= 1, without modulo bias. */
uint64_t eplb__rng_below(eplb__rng_t *rng, uint64_t n);
/* Standard normal (polar method). */
double eplb__rng_normal(eplb__rng_t *rng);

/* An output written under a temporary name (path + ".tmp.XXXXXX", mode
 * 0644) in the target's directory and renamed into place by commit, so no
 * partial file ever appears at path. */
typedef struct eplb__outfile {
  FILE *f;
  char *path;
  char *tmp;
  int slot; /* in the table eplb_remove_temporaries empties (-1: none) */
} eplb__outfile_t;

/* EPLB_EINVAL when path names what an output may not replace
 * (eplb__check_output), EPLB_EIO when the directory is not writable,
 * EPLB_ENOMEM. */
eplb_status_t eplb__outfile_open(const char *path, eplb__outfile_t *out);
/* Flushes, syncs, closes, renames and syncs the directory (EPLB_EIO); on a
 * failure before the rename the temporary is removed. */
eplb_status_t eplb__outfile_commit(eplb__outfile_t *out);
/* Closes and removes the temporary (no-op after commit or on a zeroed one). */
void eplb__outfile_abort(eplb__outfile_t *out);
/* Syncs the directory holding path, so that a rename into it is durable.
 * File systems that cannot sync a directory are not an error. */
eplb_status_t eplb__fsync_dir(const char *path);

/* Temporaries of outputs: "<target>.tmp.<pid>.<suffix>" (suffix letters
 * and digits; 0, or -1 when it does not fit cap). Every writer names its
 * temporary so, registers it while it exists (so that
 * eplb_remove_temporaries can unlink it from a signal handler) and sweeps
 * the target's stale temporaries after each successful rename. */
int eplb__tmp_name(char *buf, size_t cap, const char *path, const char *suffix);
/* A slot, or -1 when the table is full (the temporary is then only not
 * removed on a signal). */
int eplb__tmp_register(const char *tmp);
void eplb__tmp_unregister(int slot);
/* Creates the temporary named by the template tmp ("...XXXXXX": mkstemp, or
 * mkdtemp when dir) and registers it, with SIGINT, SIGTERM and SIGHUP
 * blocked in between. Returns the file's descriptor (0 for a directory) and
 * *slot (eplb__tmp_register's), or -1 with errno set and *slot -1. */
int eplb__tmp_create(char *tmp, int dir, int *slot);
/* Removes the siblings of path that are temporaries of writers that are
 * gone (see outfile.c for the rule); best effort, never an error. */
void eplb__tmp_sweep(const char *path);

/* EPLB_OK when `path` is a regular file or does not exist (the opener then
 * reports it); else EPLB_EIO "PATH: not a regular file", so that a reader
 * never blocks on a FIFO with no writer or reads a device without end. */
eplb_status_t eplb__check_input(const char *path, const char *module);

/* EPLB_OK when `path` does not exist or is a regular file (or a link to
 * one): what an output may replace. Else EPLB_EINVAL "PATH is a directory"
 * or "PATH exists and is not a regular file" (a FIFO, a device, a socket),
 * found with stat, so that it never blocks. */
eplb_status_t eplb__check_output(const char *path, const char *module);

#endif /* EPLB_CORE_H */
