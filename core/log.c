#include "core/core.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static eplb_log_fn log_fn;
static void *log_user;
static eplb_log_level_t log_max = EPLB_LOG_INFO;

/* Room for two paths of the longest an output may have (eplb_outputs_check),
 * so that a detail naming them is never cut. */
static _Thread_local char error_detail[8448];

void eplb_log_set_callback(eplb_log_fn fn, void *user, eplb_log_level_t max_level) {
  pthread_mutex_lock(&log_lock);
  log_fn = fn;
  log_user = user;
  log_max = max_level;
  pthread_mutex_unlock(&log_lock);
}

static void vlog(eplb_log_level_t level, const char *module, const char *fmt, va_list ap) {
  pthread_mutex_lock(&log_lock);
  eplb_log_fn fn = log_fn;
  void *user = log_user;
  eplb_log_level_t max = log_max;
  pthread_mutex_unlock(&log_lock);
  if (!fn || level > max)
    return;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fn(level, module, msg, user);
}

void eplb__log(eplb_log_level_t level, const char *module, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, module, fmt, ap);
  va_end(ap);
}

eplb_status_t eplb__error(eplb_status_t status, const char *module, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(error_detail, sizeof error_detail, fmt, ap);
  va_end(ap);
  /* Details quote bytes of hostile files; they must stay one line. */
  for (char *c = error_detail; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f)
      *c = '?';
  eplb__log(EPLB_LOG_DEBUG, module, "%s (%s)", error_detail, eplb_status_name(status));
  return status;
}

eplb_status_t eplb__error_wrap(eplb_status_t status, const char *module, const char *fmt, ...) {
  /* Copied first: the new detail is written where the old one lives. */
  char inner[sizeof error_detail - 512], outer[512];
  snprintf(inner, sizeof inner, "%.*s", (int)sizeof inner - 1,
           error_detail[0] ? error_detail : eplb_status_str(status));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(outer, sizeof outer, fmt, ap);
  va_end(ap);
  return eplb__error(status, module, "%s: %s", outer, inner);
}

const char *eplb_error_detail(void) { return error_detail; }

void eplb_error_clear(void) { error_detail[0] = '\0'; }

double eplb__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
