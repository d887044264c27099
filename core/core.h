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
void eplb__free(void *ptr);
char *eplb__strdup(const char *s);

/* Logs through the user's callback if the level is enabled. */
void eplb__log(eplb_log_level_t level, const char *module, const char *fmt, ...) EPLB__PRINTF(3, 4);

/* Records the thread's error detail (formatted), logs it at DEBUG under
 * `module`, and returns `status` so that callers can write
 * `return eplb__error(EPLB_EFORMAT, "traces", "%s: bad magic", path);`. */
eplb_status_t eplb__error(eplb_status_t status, const char *module, const char *fmt, ...)
    EPLB__PRINTF(3, 4);

/* Monotonic clock in seconds. */
double eplb__now(void);

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

#endif /* EPLB_CORE_H */
