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

#endif /* EPLB_CORE_H */
