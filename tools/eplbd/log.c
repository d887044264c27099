/* tools/eplbd/log.c — leveled log lines on stderr, one fprintf per line so
 * that lines from the HTTP thread and the library never interleave. */
#include "eplbd.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int log_level = EPLB_LOG_INFO;
static const char *const names[] = {"error", "warn", "info", "debug"};

int eplbd_log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, names[i]))
      return i;
  return -1;
}

void eplbd_escape(char *out, size_t cap, const char *in) {
  size_t o = 0;
  for (; *in && o + 5 < cap; in++) {
    unsigned char c = (unsigned char)*in;
    if (c == '\n' || c == '\r' || c == '\t')
      o += (size_t)snprintf(out + o, cap - o, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
    else if (c < 0x20 || c == 0x7f)
      o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    else
      out[o++] = (char)c;
  }
  out[o] = 0;
}

static void line(eplb_log_level_t level, const char *module, const char *raw) {
  /* Names and library details can carry input bytes: one line each, always. */
  char msg[4096];
  eplbd_escape(msg, sizeof msg, raw);
  struct timespec ts;
  struct tm tm;
  char when[32];
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03ldZ eplbd %s: %s%s%s\n", when, ts.tv_nsec / 1000000, names[level],
          module ? module : "", module ? ": " : "", msg);
}

static void from_library(eplb_log_level_t level, const char *module, const char *message,
                         void *user) {
  (void)user;
  line(level, module, message);
}

void eplbd_log_init(int level) {
  log_level = level;
  eplb_log_set_callback(from_library, NULL, (eplb_log_level_t)level);
}

void eplbd_log(eplb_log_level_t level, const char *fmt, ...) {
  if ((int)level > log_level)
    return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  line(level, NULL, msg);
}
