#include "traces/traces.h"

#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <string.h>

eplb_status_t eplb_loads_create(uint32_t num_layers, uint32_t num_experts, eplb_loads_t **out) {
  if (!out)
    return eplb__error(EPLB_EINVAL, "traces", "loads: out is NULL");
  *out = NULL;
  if (num_layers == 0 || num_experts == 0)
    return eplb__error(EPLB_EINVAL, "traces",
                       "loads: %" PRIu32 " layers x %" PRIu32 " experts: both must be >= 1",
                       num_layers, num_experts);
  if (num_layers > EPLB_TRACE_MAX_LAYERS || num_experts > EPLB_TRACE_MAX_EXPERTS)
    return eplb__error(EPLB_ERANGE, "traces",
                       "loads: %" PRIu32 " layers x %" PRIu32 " experts exceeds %u x %u",
                       num_layers, num_experts, EPLB_TRACE_MAX_LAYERS, EPLB_TRACE_MAX_EXPERTS);
  eplb_loads_t *l = eplb__calloc(1, sizeof *l);
  double *v = eplb__calloc((size_t)num_layers * num_experts, sizeof *v);
  if (!l || !v) {
    eplb__free(l);
    eplb__free(v);
    return eplb__error(EPLB_ENOMEM, "traces", "loads: out of memory");
  }
  l->num_layers = num_layers;
  l->num_experts = num_experts;
  l->values = v;
  *out = l;
  return EPLB_OK;
}

void eplb_loads_destroy(eplb_loads_t *loads) {
  if (!loads)
    return;
  eplb__free(loads->values);
  eplb__free(loads);
}

/* Integers print exactly; fractions with 17 significant digits, which read
 * back to the same double. Always with '.', whatever the locale. */
static int format_value(char *buf, size_t cap, double v) {
  int n;
  if (v == floor(v) && v < 9007199254740992.0)
    n = snprintf(buf, cap, "%.0f", v);
  else
    n = snprintf(buf, cap, "%.17g", v);
  const char *dp = localeconv()->decimal_point;
  if (dp && dp[0] && dp[0] != '.' && !dp[1]) {
    char *c = strchr(buf, dp[0]);
    if (c)
      *c = '.';
  }
  return n;
}

eplb_status_t eplb_loads_write_csv(const eplb_loads_t *loads, const char *path) {
  if (!loads || !path || !loads->values)
    return eplb__error(EPLB_EINVAL, "traces", "loads: loads or path is NULL");
  if (loads->num_layers == 0 || loads->num_experts == 0)
    return eplb__error(EPLB_EINVAL, "traces", "%s: loads have no layers or experts", path);
  for (size_t i = 0; i < (size_t)loads->num_layers * loads->num_experts; i++) {
    double v = loads->values[i];
    if (!isfinite(v) || v < 0)
      return eplb__error(EPLB_ERANGE, "traces", "%s: load of layer %zu expert %zu is %g", path,
                         i / loads->num_experts, i % loads->num_experts, v);
  }
  eplb__outfile_t of;
  eplb_status_t st = eplb__outfile_open(path, &of);
  if (st != EPLB_OK)
    return st;
  char buf[64];
  for (uint32_t l = 0; l < loads->num_layers; l++) {
    const double *row = loads->values + (size_t)l * loads->num_experts;
    for (uint32_t e = 0; e < loads->num_experts; e++) {
      format_value(buf, sizeof buf, row[e]);
      fputs(buf, of.f);
      fputc(e + 1 < loads->num_experts ? ',' : '\n', of.f);
    }
  }
  return eplb__outfile_commit(&of);
}
