/* sim/cost.c — the simulator's cost model: defaults, the cost file, and the
 * expert time interpolation. */
#include "sim/sim.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static void cost_model_defaults(eplb_cost_model_t *m) {
  static const double tok[] = {64, 128, 256, 512, 1024, 4096};
  static const double us[] = {19.5, 21.5, 25.4, 45.3, 81.3, 278};
  if (!m)
    return;
  memset(m, 0, sizeof *m);
  m->num_points = (uint32_t)(sizeof tok / sizeof tok[0]);
  memcpy(m->tokens, tok, sizeof tok);
  memcpy(m->time_us, us, sizeof us);
  m->dispatch_bytes_per_copy = 7392;
  m->combine_bytes_per_copy = 14336;
  m->bytes_per_expert = 44e6;
}

eplb_status_t eplb_cost_model_init(eplb_cost_model_t *m, size_t size) {
  eplb_cost_model_t d;
  cost_model_defaults(&d);
  return eplb__opts_init(m, size, &d, sizeof d, "eplb_cost_model_t");
}

static int bad_value(double v) { return !isfinite(v) || v < 0; }

eplb_status_t eplb_cost_model_check(const eplb_cost_model_t *model) {
  if (!model)
    return eplb__error(EPLB_EINVAL, "sim", "cost model: NULL");
  eplb_cost_model_t own;
  eplb_status_t st =
      EPLB__OPTS_TAKE(own, model, eplb_cost_model_default, "eplb_cost_model_t", "sim");
  if (st != EPLB_OK)
    return st;
  const eplb_cost_model_t *m = &own;
  if (m->num_points < 1 || m->num_points > EPLB_COST_MAX_POINTS)
    return eplb__error(EPLB_EINVAL, "sim", "cost model: expert_time_us has %u points (1..%u)",
                       m->num_points, EPLB_COST_MAX_POINTS);
  for (uint32_t i = 0; i < m->num_points; i++) {
    if (!isfinite(m->tokens[i]) || m->tokens[i] <= 0 || bad_value(m->time_us[i]))
      return eplb__error(EPLB_EINVAL, "sim", "cost model: expert_time_us point %u (%g, %g) invalid",
                         i, m->tokens[i], m->time_us[i]);
    if (i > 0 && m->tokens[i] <= m->tokens[i - 1])
      return eplb__error(EPLB_EINVAL, "sim",
                         "cost model: expert_time_us tokens not increasing at point %u", i);
  }
  struct {
    const char *name;
    double v;
  } f[] = {{"dispatch_bytes_per_copy", m->dispatch_bytes_per_copy},
           {"combine_bytes_per_copy", m->combine_bytes_per_copy},
           {"bytes_per_expert", m->bytes_per_expert},
           {"intra_node_gbps", m->intra_node_gbps},
           {"inter_node_gbps", m->inter_node_gbps},
           {"launch_us", m->launch_us}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (bad_value(f[i].v))
      return eplb__error(EPLB_EINVAL, "sim", "cost model: %s = %g invalid", f[i].name, f[i].v);
  return EPLB_OK;
}

double eplb_cost_model_expert_time(const eplb_cost_model_t *model, double x) {
  eplb_cost_model_t m;
  if (!model ||
      EPLB__OPTS_TAKE(m, model, eplb_cost_model_default, "eplb_cost_model_t", "sim") != EPLB_OK)
    return 0;
  return eplb__cost_time(&m, x);
}

double eplb__cost_time(const eplb_cost_model_t *m, double x) {
  if (!m || !(x > 0) || m->num_points < 1)
    return 0;
  uint32_t n = m->num_points;
  if (x <= m->tokens[0] || n == 1)
    return m->time_us[0];
  uint32_t i = 1;
  while (i < n - 1 && x > m->tokens[i])
    i++;
  /* Segment [i-1, i]; beyond the last point it is extended linearly. */
  double x0 = m->tokens[i - 1], x1 = m->tokens[i];
  double y0 = m->time_us[i - 1], y1 = m->time_us[i];
  double t = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
  return t > 0 ? t : 0;
}

/* Reads a non-negative finite number; returns 0 on success. */
static int get_number(const json_t *v, double *out) {
  if (!json_is_number(v))
    return -1;
  double d = json_number_value(v);
  if (!isfinite(d) || d < 0)
    return -1;
  *out = d;
  return 0;
}

static eplb_status_t read_table(const char *path, const json_t *a, eplb_cost_model_t *m) {
  if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > EPLB_COST_MAX_POINTS)
    return eplb__error(EPLB_EFORMAT, "sim", "%s: expert_time_us: expected 1..%u [tokens, us] pairs",
                       path, EPLB_COST_MAX_POINTS);
  size_t n = json_array_size(a);
  for (size_t i = 0; i < n; i++) {
    const json_t *p = json_array_get(a, i);
    if (!json_is_array(p) || json_array_size(p) != 2 ||
        get_number(json_array_get(p, 0), &m->tokens[i]) ||
        get_number(json_array_get(p, 1), &m->time_us[i]) || m->tokens[i] <= 0)
      return eplb__error(EPLB_EFORMAT, "sim",
                         "%s: expert_time_us[%zu]: expected [tokens > 0, us >= 0]", path, i);
    if (i > 0 && m->tokens[i] <= m->tokens[i - 1])
      return eplb__error(EPLB_EFORMAT, "sim", "%s: expert_time_us[%zu]: tokens not increasing",
                         path, i);
  }
  m->num_points = (uint32_t)n;
  return EPLB_OK;
}

eplb_status_t eplb_cost_model_read(const char *path, eplb_cost_model_t *out) {
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "sim", "cost model: NULL argument");
  eplb_status_t st = EPLB_OK;
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    st = jerr.line < 0 ? eplb__error(EPLB_EIO, "sim", "%s: cannot read: %s", path, jerr.text)
                       : eplb__error(EPLB_EFORMAT, "sim", "%s:%d: %s", path, jerr.line, jerr.text);
    goto done;
  }
  if (!json_is_object(root)) {
    st = eplb__error(EPLB_EFORMAT, "sim", "%s: expected a JSON object", path);
    goto done;
  }
  eplb_cost_model_t m;
  eplb_cost_model_default(&m);
  struct {
    const char *key;
    double *dst;
  } nums[] = {{"dispatch_bytes_per_copy", &m.dispatch_bytes_per_copy},
              {"combine_bytes_per_copy", &m.combine_bytes_per_copy},
              {"bytes_per_expert", &m.bytes_per_expert},
              {"intra_node_gbps", &m.intra_node_gbps},
              {"inter_node_gbps", &m.inter_node_gbps},
              {"launch_us", &m.launch_us}};
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "format")) {
      if (!json_is_string(v) || strcmp(json_string_value(v), "eplb-cost")) {
        st = eplb__error(EPLB_EFORMAT, "sim", "%s: format: expected \"eplb-cost\"", path);
        goto done;
      }
      continue;
    }
    if (!strcmp(key, "version")) {
      if (!json_is_integer(v) || json_integer_value(v) != 1) {
        st = eplb__error(EPLB_EFORMAT, "sim", "%s: version: expected 1", path);
        goto done;
      }
      continue;
    }
    if (!strcmp(key, "expert_time_us")) {
      if ((st = read_table(path, v, &m)) != EPLB_OK)
        goto done;
      continue;
    }
    size_t i = 0;
    while (i < sizeof nums / sizeof nums[0] && strcmp(key, nums[i].key))
      i++;
    if (i == sizeof nums / sizeof nums[0]) {
      st = eplb__error(EPLB_EFORMAT, "sim", "%s: unknown key '%s'", path, key);
      goto done;
    }
    if (get_number(v, nums[i].dst)) {
      st = eplb__error(EPLB_EFORMAT, "sim", "%s: %s: expected a number >= 0", path, key);
      goto done;
    }
    /* A zero bandwidth would mean "use the cluster's": say so explicitly by omitting it. */
    if ((!strcmp(key, "intra_node_gbps") || !strcmp(key, "inter_node_gbps")) && *nums[i].dst <= 0) {
      st = eplb__error(EPLB_EFORMAT, "sim", "%s: %s: expected a bandwidth > 0", path, key);
      goto done;
    }
  }
  st = eplb__opts_give(out, &m, sizeof m, "eplb_cost_model_t", "sim");
done:
  json_decref(root);
  return st;
}

eplb_status_t eplb_cost_model_from_desc(const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu,
                                        eplb_cost_model_t *out) {
  if (!model || !gpu || !out)
    return eplb__error(EPLB_EINVAL, "sim", "cost model from description: NULL argument");
  eplb_status_t st = eplb_model_check(model);
  if (st == EPLB_OK)
    st = eplb_gpu_check(gpu);
  if (st != EPLB_OK)
    return st;
  eplb_cost_model_t m;
  memset(&m, 0, sizeof m);
  /* Log-spaced samples: the blend bends only around its knee, and a ratio of
   * 2^(20/63) ~ 1.25 between points keeps interpolation within 0.5%. */
  m.num_points = EPLB_COST_MAX_POINTS;
  for (uint32_t i = 0; i < m.num_points; i++) {
    m.tokens[i] = pow(2.0, 20.0 * i / (m.num_points - 1));
    m.time_us[i] = eplb_model_expert_time(model, gpu, m.tokens[i]);
  }
  m.dispatch_bytes_per_copy = eplb_model_dispatch_bytes(model);
  m.combine_bytes_per_copy = eplb_model_combine_bytes(model);
  m.bytes_per_expert = eplb_model_expert_bytes(model);
  m.intra_node_gbps = gpu->nvlink_gbps;
  m.inter_node_gbps = gpu->rdma_gbps;
  m.launch_us = gpu->launch_us;
  return eplb__opts_give(out, &m, sizeof m, "eplb_cost_model_t", "sim");
}
