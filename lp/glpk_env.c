/* lp/glpk_env.c — GLPK made safe for a library: it must never abort the
 * process nor write to stdout (see NOTES.md "GLPK 5.0"). */
#include "lp/lp.h"

#include <glpk.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

/* GLPK's environment is per thread, so is everything the hooks touch. */
static _Thread_local jmp_buf *guard_jump;
static _Thread_local char term_line[512];
static _Thread_local size_t term_len;
static _Thread_local char term_last[512];

static void term_flush(void) {
  if (!term_len)
    return;
  term_line[term_len] = '\0';
  eplb__log(EPLB_LOG_DEBUG, "lp", "glpk: %s", term_line);
  memcpy(term_last, term_line, term_len + 1);
  term_len = 0;
}

/* Collects GLPK's output into lines for the log; returning 1 suppresses
 * GLPK's own printing, including fatal-error text that ignores term_out. */
static int term_hook(void *info, const char *s) {
  (void)info;
  for (; *s; s++) {
    if (*s == '\n')
      term_flush();
    else if (term_len < sizeof term_line - 1)
      term_line[term_len++] = *s;
  }
  return 1;
}

static void error_hook(void *info) {
  (void)info;
  if (guard_jump)
    longjmp(*guard_jump, 1);
}

eplb_status_t eplb__glpk_call(const char *what, eplb__glpk_body body, void *ctx) {
  jmp_buf jump;
  eplb_status_t status;
  if (glp_init_env() > 1)
    return eplb__error(EPLB_ENOMEM, "lp", "%s: GLPK environment could not be created", what);
  glp_term_hook(term_hook, NULL);
  term_len = 0;
  term_last[0] = '\0';
  if (setjmp(jump)) {
    /* GLPK's state is undefined now: drop the environment (every glp_prob of
     * this thread with it); the hooks go with it and are set again next call. */
    guard_jump = NULL;
    term_flush();
    glp_free_env();
    status = eplb__error(EPLB_ESOLVER, "lp", "%s: GLPK error: %s", what,
                         term_last[0] ? term_last : "unknown");
    goto done;
  }
  guard_jump = &jump;
  glp_error_hook(error_hook, NULL);
  status = body(ctx);
  /* A later unguarded GLPK user must not jump into this dead frame. */
  glp_error_hook(NULL, NULL);
  guard_jump = NULL;
  term_flush();
done:
  return status;
}

int eplb__glpk_time_limit_ms(double seconds) {
  if (!(seconds > 0))
    return INT_MAX;
  if (seconds >= (double)INT_MAX / 1000.0)
    return INT_MAX;
  int ms = (int)(seconds * 1000.0);
  return ms < 1 ? 1 : ms;
}

void eplb_split_glpk_thread_done(void) { glp_free_env(); }
