/* traces/json_text.c — a JSON report's text from its tree: the one place
 * that turns a tree into the snprintf-like text of the eplb_*_json
 * writers, so that every report is built once (as a tree, which the tools
 * take as it is) and dumped the same way. In traces, the lowest module
 * that writes JSON, so planner and sim share it. */
#include "traces/traces.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Compact, with reals that read back as the same doubles. */
#define TEXT_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(17))

eplb_status_t eplb__json_text(eplb_status_t st, json_t *j, const char *module, const char *what,
                              char *buf, size_t size, size_t *len) {
  if (len)
    *len = 0;
  if (!buf && size) {
    json_decref(j);
    return eplb__error(EPLB_EINVAL, module, "%s: NULL argument", what);
  }
  if (size)
    buf[0] = '\0';
  if (st != EPLB_OK) {
    json_decref(j);
    return st;
  }
  size_t n = json_dumpb(j, NULL, 0, TEXT_FLAGS);
  /* json_dumpb leaves a buffer too small for the whole text undefined: a
   * prefix is cut from a full copy. */
  char *full = n && size && n >= size ? malloc(n) : NULL;
  if (n && n < size)
    json_dumpb(j, buf, size, TEXT_FLAGS);
  else if (full)
    json_dumpb(j, full, n, TEXT_FLAGS);
  json_decref(j);
  if (!n || (size && n >= size && !full))
    return eplb__error(EPLB_ENOMEM, module, "%s: out of memory", what);
  if (full && size)
    memcpy(buf, full, size - 1);
  if (size)
    buf[n < size ? n : size - 1] = '\0';
  free(full);
  if (len)
    *len = n;
  return EPLB_OK;
}
