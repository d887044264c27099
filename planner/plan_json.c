/* planner/plan_json.c — the plan file (JSON, format "eplb-plan", version 1). */
#include "planner/planner.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Limits on untrusted plan files (beyond them: EPLB_ERANGE). */
#define MAX_LAYERS EPLB_MAX_LAYERS
#define MAX_EXPERTS EPLB_MAX_EXPERTS
#define MAX_GPUS EPLB_MAX_GPUS
#define MAX_CELLS (1u << 28) /* layers * slots */

static json_t *u32_array(const uint32_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_integer(v[i]))) {
      json_decref(a);
      return NULL;
    }
  return a;
}

static json_t *real_array(const double *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_real(v[i]))) {
      json_decref(a);
      return NULL;
    }
  return a;
}

static json_t *plan_to_json(const eplb_plan_t *p) {
  json_t *root = json_object(), *layers = json_array();
  if (!root || !layers)
    goto fail;
  const char *pol = eplb_plan_policy_str(p->policy);
  json_object_set_new(root, "format", json_string("eplb-plan"));
  json_object_set_new(root, "version", json_integer(1));
  json_object_set_new(root, "policy", json_string(pol ? pol : "unknown"));
  json_object_set_new(root, "num_layers", json_integer(p->num_layers));
  json_object_set_new(root, "num_logical_experts", json_integer(p->num_experts));
  json_object_set_new(root, "num_gpus", json_integer(p->num_gpus));
  json_object_set_new(root, "num_nodes", json_integer(p->num_nodes));
  json_object_set_new(root, "num_groups", json_integer(p->num_groups));
  json_object_set_new(root, "keep_groups_on_nodes", json_boolean(p->keep_groups));
  json_object_set_new(root, "slots_per_gpu", u32_array(p->slots_per_gpu, p->num_gpus));
  size_t R = p->num_slots, G = p->num_gpus;
  for (uint32_t l = 0; l < p->num_layers; l++) {
    json_t *lo = json_object(), *p2l = json_array();
    if (!lo || !p2l || json_array_append_new(layers, lo)) {
      json_decref(p2l);
      goto fail;
    }
    for (size_t r = 0; r < R; r++)
      json_array_append_new(p2l, json_integer(p->phy2log[l * R + r]));
    const eplb_plan_layer_metrics_t *m = &p->metrics[l];
    json_object_set_new(lo, "phy2log", p2l);
    json_object_set_new(lo, "share", real_array(p->share + l * R, R));
    if (p->node_share) {
      json_t *ns = json_array();
      for (size_t n = 0; ns && n < p->ns_nodes; n++)
        json_array_append_new(ns, real_array(p->node_share + (l * p->ns_nodes + n) * R, R));
      json_object_set_new(lo, "node_share", ns);
    }
    json_object_set_new(lo, "gpu_load", real_array(p->gpu_load + l * G, G));
    json_object_set_new(lo, "max_load", json_real(m->max_load));
    json_object_set_new(lo, "lower_bound", json_real(m->lower_bound));
    json_object_set_new(lo, "balancedness", json_real(m->balancedness));
    if (p->policy == EPLB_POLICY_MIP) {
      json_object_set_new(lo, "mip_gap", json_real(m->mip_gap));
      json_object_set_new(lo, "mip_status", json_string(eplb_status_name(m->mip_status)));
    }
  }
  json_object_set_new(root, "layers", layers);
  layers = NULL;
  eplb_plan_summary_t s;
  eplb_plan_summary(p, &s);
  json_t *sum = json_object();
  if (!sum)
    goto fail;
  json_object_set_new(sum, "seconds", json_real(s.seconds));
  json_object_set_new(sum, "mean_balancedness", json_real(s.mean_balancedness));
  json_object_set_new(sum, "min_balancedness", json_real(s.min_balancedness));
  json_object_set_new(sum, "mean_max_over_lower_bound", json_real(s.mean_ratio));
  json_object_set_new(sum, "max_max_over_lower_bound", json_real(s.max_ratio));
  json_object_set_new(sum, "fallback_layers", json_integer(s.fallback_layers));
  json_object_set_new(root, "summary", sum);
  return root;
fail:
  json_decref(layers);
  json_decref(root);
  return NULL;
}

eplb_status_t eplb_plan_write(const eplb_plan_t *plan, const char *path) {
  if (!plan || !path)
    return eplb__error(EPLB_EINVAL, "planner", "plan write: NULL argument");
  json_t *root = plan_to_json(plan);
  if (!root)
    return eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", path);
  eplb__outfile_t of;
  eplb_status_t st = eplb__outfile_open(path, &of);
  if (!st) {
    if (!json_dumpf(root, of.f, JSON_COMPACT | JSON_REAL_PRECISION(17)) && fputc('\n', of.f) >= 0) {
      st = eplb__outfile_commit(&of);
    } else {
      eplb__outfile_abort(&of);
      st = eplb__error(EPLB_EIO, "planner", "%s: write failed", path);
    }
  }
  json_decref(root);
  return st;
}

/* ---- reading ------------------------------------------------------------ */

static eplb_status_t get_u32(const char *path, json_t *o, const char *key, uint32_t def,
                             uint32_t max, uint32_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v && def != UINT32_MAX) {
    *out = def;
    return EPLB_OK;
  }
  if (!json_is_integer(v))
    return eplb__error(EPLB_EFORMAT, "planner", "%s: \"%s\": %s", path, key,
                       v ? "not an integer" : "missing");
  json_int_t x = json_integer_value(v);
  if (x < 1 || (uint64_t)x > max)
    return eplb__error(EPLB_ERANGE, "planner", "%s: \"%s\": %lld out of range 1..%u", path, key,
                       (long long)x, max);
  *out = (uint32_t)x;
  return EPLB_OK;
}

/* Optional "node_share" of a layer: [N][R] numbers, N the same for every
 * layer, each row summing to 1 over every expert's replicas. */
static eplb_status_t read_node_share(const char *path, eplb_plan_t *p, uint32_t l, json_t *ns) {
  size_t R = p->num_slots, E = p->num_experts;
  if (!ns || json_is_null(ns)) {
    if (p->node_share)
      return eplb__error(EPLB_EFORMAT, "planner", "%s: layer %u: \"node_share\" missing", path, l);
    return EPLB_OK;
  }
  size_t N = json_is_array(ns) ? json_array_size(ns) : 0;
  if (!N || N > MAX_GPUS || (p->node_share && N != p->ns_nodes) || (!p->node_share && l > 0))
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: layer %u: \"node_share\": expected the same number of node rows in "
                       "every layer",
                       path, l);
  if (!p->node_share) {
    if ((uint64_t)p->num_layers * N * R > MAX_CELLS)
      return eplb__error(EPLB_ERANGE, "planner", "%s: \"node_share\": %zu nodes: too many", path,
                         N);
    p->node_share = eplb__calloc((size_t)p->num_layers * N * R, sizeof *p->node_share);
    if (!p->node_share)
      return eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", path);
    p->ns_nodes = (uint32_t)N;
  }
  double *sum = eplb__malloc_array(E, sizeof *sum);
  if (!sum)
    return eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", path);
  const int32_t *p2l = p->phy2log + (size_t)l * R;
  eplb_status_t st = EPLB_OK;
  for (size_t n = 0; n < N && !st; n++) {
    json_t *row = json_array_get(ns, n);
    double *dst = p->node_share + ((size_t)l * N + n) * R;
    if (!json_is_array(row) || json_array_size(row) != R) {
      st = eplb__error(EPLB_EFORMAT, "planner",
                       "%s: layer %u: node_share[%zu]: expected an array of %zu numbers", path, l,
                       n, R);
      break;
    }
    memset(sum, 0, E * sizeof *sum);
    for (size_t r = 0; r < R && !st; r++) {
      json_t *y = json_array_get(row, r);
      double v = json_is_number(y) ? json_number_value(y) : -1;
      if (!(v >= 0 && v <= 1 + 1e-9))
        st = eplb__error(EPLB_EFORMAT, "planner",
                         "%s: layer %u: node_share[%zu][%zu] is not a number in [0, 1]", path, l, n,
                         r);
      dst[r] = v;
      sum[p2l[r]] += v;
    }
    for (size_t e = 0; e < E && !st; e++)
      if (fabs(sum[e] - 1) > 1e-6)
        st = eplb__error(EPLB_EFORMAT, "planner",
                         "%s: layer %u: node_share[%zu] of expert %zu sums to %g", path, l, n, e,
                         sum[e]);
  }
  eplb__free(sum);
  return st;
}

eplb_status_t eplb_plan_read(const char *path, eplb_plan_t **out) {
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "planner", "plan read: NULL argument");
  *out = NULL;
  json_error_t err;
  eplb_status_t cst = eplb__check_input(path, "planner");
  if (cst)
    return cst;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    FILE *f = fopen(path, "r");
    if (!f)
      return eplb__error(EPLB_EIO, "planner", "%s: cannot open", path);
    fclose(f);
    return eplb__error(EPLB_EFORMAT, "planner", "%s: line %d: %s", path, err.line, err.text);
  }
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *p = NULL;
  uint32_t *slots = NULL;
  uint32_t L, E, G, N, K = 1;
  if (!json_is_object(root)) {
    st = eplb__error(EPLB_EFORMAT, "planner", "%s: not a JSON object", path);
    goto done;
  }
  json_t *fmt = json_object_get(root, "format");
  if (fmt && (!json_is_string(fmt) || strcmp(json_string_value(fmt), "eplb-plan"))) {
    st = eplb__error(EPLB_EFORMAT, "planner", "%s: \"format\" is not \"eplb-plan\"", path);
    goto done;
  }
  json_t *ver = json_object_get(root, "version");
  if (ver && (!json_is_integer(ver) || json_integer_value(ver) != 1)) {
    st = eplb__error(EPLB_EFORMAT, "planner", "%s: unsupported \"version\" (expected 1)", path);
    goto done;
  }
  if ((st = get_u32(path, root, "num_layers", UINT32_MAX, MAX_LAYERS, &L)) ||
      (st = get_u32(path, root, "num_logical_experts", UINT32_MAX, MAX_EXPERTS, &E)) ||
      (st = get_u32(path, root, "num_gpus", UINT32_MAX, MAX_GPUS, &G)) ||
      (st = get_u32(path, root, "num_nodes", 1, MAX_GPUS, &N)) ||
      (st = get_u32(path, root, "num_groups", 1, MAX_EXPERTS, &K)))
    goto done;
  if (G % N || E % K) {
    st = eplb__error(EPLB_ESHAPE, "planner", "%s: %u GPUs on %u nodes, %u experts in %u groups",
                     path, G, N, E, K);
    goto done;
  }
  slots = eplb__malloc_array(G, sizeof *slots);
  if (!slots) {
    st = eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", path);
    goto done;
  }
  json_t *sv = json_object_get(root, "slots_per_gpu");
  uint64_t R = 0;
  for (uint32_t g = 0; g < G; g++) {
    json_t *x = json_is_array(sv) ? json_array_get(sv, g) : sv;
    if ((json_is_array(sv) && json_array_size(sv) != G) || !json_is_integer(x) ||
        json_integer_value(x) < 1 || json_integer_value(x) > (1 << 24)) {
      st = eplb__error(EPLB_EFORMAT, "planner",
                       "%s: \"slots_per_gpu\": expected %u positive integers or one", path, G);
      goto done;
    }
    slots[g] = (uint32_t)json_integer_value(x);
    R += slots[g];
  }
  if (R > EPLB_MAX_SLOTS) {
    st = eplb__error(EPLB_ERANGE, "planner", "%s: %llu slots per layer: over the limit of %u", path,
                     (unsigned long long)R, EPLB_MAX_SLOTS);
    goto done;
  }
  if (R < E || R * L > MAX_CELLS) {
    st = eplb__error(EPLB_ESHAPE, "planner", "%s: %llu slots for %u experts x %u layers", path,
                     (unsigned long long)R, E, L);
    goto done;
  }
  json_t *layers = json_object_get(root, "layers");
  if (!json_is_array(layers) || json_array_size(layers) != L) {
    st = eplb__error(EPLB_EFORMAT, "planner", "%s: \"layers\": expected an array of %u layers",
                     path, L);
    goto done;
  }
  if ((st = eplb__plan_alloc(L, E, G, N, (uint32_t)R, slots, &p)))
    goto done;
  p->num_groups = K;
  p->keep_groups = json_is_true(json_object_get(root, "keep_groups_on_nodes"));
  json_t *pol = json_object_get(root, "policy");
  p->policy = EPLB_POLICY_BALANCED;
  if (json_is_string(pol))
    for (int q = EPLB_POLICY_DEEPSEEK; q <= EPLB_POLICY_LOCALITY; q++)
      if (!strcmp(json_string_value(pol), eplb_plan_policy_str((eplb_plan_policy_t)q)))
        p->policy = (eplb_plan_policy_t)q;
  for (uint32_t l = 0; l < L; l++) {
    json_t *lo = json_array_get(layers, l);
    json_t *p2l = json_object_get(lo, "phy2log"), *sh = json_object_get(lo, "share");
    if (!json_is_array(p2l) || json_array_size(p2l) != R) {
      st = eplb__error(EPLB_EFORMAT, "planner",
                       "%s: layer %u: \"phy2log\": expected an array of %llu expert ids", path, l,
                       (unsigned long long)R);
      goto done;
    }
    if (sh && !json_is_null(sh) && (!json_is_array(sh) || json_array_size(sh) != R)) {
      st = eplb__error(EPLB_EFORMAT, "planner",
                       "%s: layer %u: \"share\": expected an array of %llu numbers", path, l,
                       (unsigned long long)R);
      goto done;
    }
    int32_t *dst = p->phy2log + (size_t)l * R;
    double *dsh = p->share + (size_t)l * R;
    for (size_t r = 0; r < R; r++) {
      json_t *x = json_array_get(p2l, r);
      if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= E) {
        st = eplb__error(json_is_integer(x) ? EPLB_ERANGE : EPLB_EFORMAT, "planner",
                         "%s: layer %u: phy2log[%zu] is not an expert id 0..%u", path, l, r, E - 1);
        goto done;
      }
      dst[r] = (int32_t)json_integer_value(x);
      if (json_is_array(sh)) {
        json_t *y = json_array_get(sh, r);
        if (!json_is_number(y)) {
          st = eplb__error(EPLB_EFORMAT, "planner", "%s: layer %u: share[%zu] is not a number",
                           path, l, r);
          goto done;
        }
        dsh[r] = json_number_value(y);
      }
    }
    if (!json_is_array(sh))
      eplb__uniform_shares(E, (uint32_t)R, dst, dsh);
    if ((st = eplb__plan_check_layer(p, l, path)))
      goto done;
    if ((st = read_node_share(path, p, l, json_object_get(lo, "node_share"))))
      goto done;
  }
done:
  json_decref(root);
  eplb__free(slots);
  if (st)
    eplb_plan_destroy(p);
  else
    *out = p;
  return st;
}
