/* planner/plan_json.c — the plan file (JSON, format "eplb-plan", version 1). */
#include "planner/planner.h"
#include "traces/traces.h"

#include "eplb/plan_tooling.h"

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

/* Every value set is checked: jansson drops a key whose value is NULL (no
 * memory, or json_real of NaN/infinity) without a word. */
#define SET(o, k, v) (bad |= json_object_set_new((o), (k), (v)) != 0)

/* The summary object of the plan file and of eplb_plan_summary_json, or NULL
 * (no memory, or a figure that is not finite). */
static json_t *summary_to_json(const eplb_plan_t *p) {
  int bad = 0;
  eplb_plan_summary_t s;
  eplb_plan_summary(p, &s);
  const char *pol = eplb_plan_policy_str(p->policy);
  json_t *sum = json_object();
  if (!sum)
    return NULL;
  SET(sum, "policy", json_string(pol ? pol : "unknown"));
  SET(sum, "seconds", json_real(s.seconds));
  SET(sum, "layers", json_integer(p->num_layers));
  SET(sum, "mean_balancedness", json_real(s.mean_balancedness));
  SET(sum, "min_balancedness", json_real(s.min_balancedness));
  SET(sum, "mean_max_over_lower_bound", json_real(s.mean_ratio));
  SET(sum, "max_max_over_lower_bound", json_real(s.max_ratio));
  SET(sum, "lower_bound_kind", json_string(eplb_plan_lower_bound_kind(p)));
  SET(sum, "fallback_layers", json_integer(s.fallback_layers));
  if (p->policy == EPLB_POLICY_INCREMENTAL)
    SET(sum, "slots_moved", json_integer((json_int_t)s.slots_moved));
  if (p->policy == EPLB_POLICY_MIP) {
    uint32_t optimal = 0;
    double gap = 0;
    for (uint32_t l = 0; l < p->num_layers; l++) {
      optimal += p->metrics[l].mip_status == EPLB_OK;
      gap = p->metrics[l].mip_gap > gap ? p->metrics[l].mip_gap : gap;
    }
    SET(sum, "mip_layers_optimal", json_integer(optimal));
    SET(sum, "mip_max_gap", json_real(gap));
  }
  if (!bad)
    return sum;
  json_decref(sum);
  return NULL;
}

static json_t *plan_to_json(const eplb_plan_t *p) {
  int bad = 0;
  json_t *root = json_object(), *layers = json_array();
  if (!root || !layers)
    goto fail;
  const char *pol = eplb_plan_policy_str(p->policy);
  SET(root, "format", json_string("eplb-plan"));
  SET(root, "version", json_integer(1));
  SET(root, "policy", json_string(pol ? pol : "unknown"));
  SET(root, "num_layers", json_integer(p->num_layers));
  SET(root, "num_logical_experts", json_integer(p->num_experts));
  SET(root, "num_gpus", json_integer(p->num_gpus));
  SET(root, "num_nodes", json_integer(p->num_nodes));
  SET(root, "num_groups", json_integer(p->num_groups));
  SET(root, "keep_groups_on_nodes", json_boolean(p->keep_groups));
  SET(root, "slots_per_gpu", u32_array(p->slots_per_gpu, p->num_gpus));
  size_t R = p->num_slots, G = p->num_gpus;
  for (uint32_t l = 0; l < p->num_layers; l++) {
    json_t *lo = json_object(), *p2l = json_array();
    if (!lo || !p2l || json_array_append_new(layers, lo)) {
      json_decref(p2l);
      goto fail;
    }
    for (size_t r = 0; r < R; r++)
      bad |= json_array_append_new(p2l, json_integer(p->phy2log[l * R + r])) != 0;
    const eplb_plan_layer_metrics_t *m = &p->metrics[l];
    SET(lo, "phy2log", p2l);
    SET(lo, "share", real_array(p->share + l * R, R));
    if (p->node_share) {
      json_t *ns = json_array();
      for (size_t n = 0; ns && n < p->ns_nodes; n++)
        bad |= json_array_append_new(ns,
                                     real_array(p->node_share + (l * p->ns_nodes + n) * R, R)) != 0;
      SET(lo, "node_share", ns);
    }
    SET(lo, "gpu_load", real_array(p->gpu_load + l * G, G));
    SET(lo, "max_load", json_real(m->max_load));
    SET(lo, "lower_bound", json_real(m->lower_bound));
    SET(lo, "balancedness", json_real(m->balancedness));
    if (p->policy == EPLB_POLICY_MIP) {
      SET(lo, "mip_gap", json_real(m->mip_gap));
      SET(lo, "mip_status", json_string(eplb_status_name(m->mip_status)));
    }
  }
  bad |= json_object_set_new(root, "layers", layers) != 0;
  layers = NULL;
  SET(root, "summary", summary_to_json(p));
  if (!bad)
    return root;
fail:
  json_decref(layers);
  json_decref(root);
  return NULL;
}

#undef SET

/* A figure that is not finite, named: NaN or infinity has no JSON form, and
 * a plan file that lost it would be refused when read back. */
static eplb_status_t check_finite(const eplb_plan_t *p, const char *path) {
  size_t R = p->num_slots, G = p->num_gpus;
  for (uint32_t l = 0; l < p->num_layers; l++) {
    const eplb_plan_layer_metrics_t *m = &p->metrics[l];
    const char *bad = !isfinite(m->max_load)       ? "max_load"
                      : !isfinite(m->lower_bound)  ? "lower_bound"
                      : !isfinite(m->balancedness) ? "balancedness"
                      : !isfinite(m->mip_gap)      ? "mip_gap"
                                                   : NULL;
    for (size_t g = 0; !bad && g < G; g++)
      bad = isfinite(p->gpu_load[l * G + g]) ? NULL : "gpu_load";
    for (size_t r = 0; !bad && r < R; r++)
      bad = isfinite(p->share[l * R + r]) ? NULL : "share";
    if (bad)
      return eplb__error(EPLB_ERANGE, "planner", "%s: layer %u: \"%s\" is not a finite number",
                         path, l, bad);
  }
  eplb_plan_summary_t s;
  eplb_plan_summary(p, &s);
  if (!isfinite(s.seconds + s.mean_balancedness + s.min_balancedness + s.mean_ratio + s.max_ratio))
    return eplb__error(EPLB_ERANGE, "planner", "%s: a summary figure is not a finite number", path);
  return EPLB_OK;
}

eplb_status_t eplb_plan_write(const eplb_plan_t *plan, const char *path) {
  if (!plan || !path)
    return eplb__error(EPLB_EINVAL, "planner", "plan write: NULL argument");
  eplb_status_t fst = check_finite(plan, path);
  if (fst)
    return fst;
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

eplb_status_t eplb_plan_summary_tree(const eplb_plan_t *plan, json_t **out) {
  if (out)
    *out = NULL;
  if (!plan || !out)
    return eplb__error(EPLB_EINVAL, "planner", "plan summary json: NULL argument");
  eplb_plan_summary_t s;
  eplb_plan_summary(plan, &s);
  double gaps = 0;
  for (uint32_t l = 0; l < plan->num_layers; l++)
    gaps += plan->metrics[l].mip_gap;
  if (!isfinite(s.seconds + s.mean_balancedness + s.min_balancedness + s.mean_ratio + s.max_ratio +
                gaps))
    return eplb__error(EPLB_ERANGE, "planner", "plan summary: a figure is not a finite number");
  if (!(*out = summary_to_json(plan)))
    return eplb__error(EPLB_ENOMEM, "planner", "plan summary json: out of memory");
  return EPLB_OK;
}

eplb_status_t eplb_plan_summary_json(const eplb_plan_t *plan, char *buf, size_t size, size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_plan_summary_tree(plan, &j);
  return eplb__json_text(st, j, "planner", "plan summary json", buf, size, len);
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
static eplb_status_t read_node_share(const char *path, eplb_plan_t *p, uint32_t l, json_t *ns,
                                     json_t *layers) {
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
    /* Every layer's rows must be there before the array for all of them is
     * allocated: a small file cannot make the reader reserve gigabytes. */
    for (size_t k = 0; k < json_array_size(layers); k++) {
      json_t *rows = json_object_get(json_array_get(layers, k), "node_share");
      bool fits = json_array_size(rows) == N;
      for (size_t n = 0; fits && n < N; n++)
        fits = json_array_size(json_array_get(rows, n)) == R;
      if (!fits)
        return eplb__error(EPLB_EFORMAT, "planner",
                           "%s: layer %zu: \"node_share\": expected %zu rows of %zu numbers", path,
                           k, N, R);
    }
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

/* Counts the layers (objects in a top-level array) with a byte scan before
 * jansson builds the tree: a 250 MB file of 10^6 layers is refused in a
 * fraction of a second instead of after seconds and GBs of parsing. */
static eplb_status_t prescan(const char *path) {
  enum { CHUNK = 1 << 16 };
  FILE *f = fopen(path, "rb");
  char *buf = f ? eplb__malloc(CHUNK) : NULL;
  if (!buf) {
    if (f)
      fclose(f);
    return EPLB_OK; /* the reader reports it */
  }
  size_t n;
  int in_str = 0, esc = 0;
  uint64_t depth = 0, layers = 0;
  eplb_status_t st = EPLB_OK;
  while (!st && (n = fread(buf, 1, CHUNK, f)) > 0) {
    for (size_t i = 0; i < n; i++) {
      char c = buf[i];
      if (in_str) {
        if (esc)
          esc = 0;
        else if (c == '\\')
          esc = 1;
        else if (c == '"')
          in_str = 0;
        continue;
      }
      if (c == '"') {
        in_str = 1;
      } else if (c == '{' || c == '[') {
        if (c == '{' && depth == 2 && ++layers > MAX_LAYERS) {
          st = eplb__error(EPLB_ERANGE, "planner", "%s: more than %u layers: over the limit", path,
                           MAX_LAYERS);
          break;
        }
        depth++;
      } else if ((c == '}' || c == ']') && depth) {
        depth--;
      }
    }
  }
  fclose(f);
  eplb__free(buf);
  return st;
}

/* The keys of each object of a plan file and the type of each value: what
 * the writer writes, and nothing else. A key that is unknown (a typo such as
 * "shares" would otherwise leave uniform shares without a word), of another
 * type ("keep_groups_on_nodes": "yes" read as false) or missing when
 * required is refused naming it, as eplbd's config reader does. */
typedef enum { K_INT, K_NUM, K_STR, K_BOOL, K_ARR, K_OBJ, K_INT_OR_ARR, K_ARR_OR_NULL } kind_t;

typedef struct {
  const char *key;
  kind_t kind;
  bool required;
} key_rule_t;

static const key_rule_t root_keys[] = {{"format", K_STR, false},
                                       {"version", K_INT, false},
                                       {"policy", K_STR, false},
                                       {"num_layers", K_INT, true},
                                       {"num_logical_experts", K_INT, true},
                                       {"num_gpus", K_INT, true},
                                       {"num_nodes", K_INT, false},
                                       {"num_groups", K_INT, false},
                                       {"keep_groups_on_nodes", K_BOOL, false},
                                       {"slots_per_gpu", K_INT_OR_ARR, true},
                                       {"layers", K_ARR, true},
                                       {"summary", K_OBJ, false},
                                       {NULL, K_INT, false}};

/* Metrics are type-checked but not read: the plan has no loads until
 * eplb_plan_evaluate. "share" stays optional (uniform when absent), as
 * plan.h documents for a minimal plan. */
static const key_rule_t layer_keys[] = {{"phy2log", K_ARR, true},
                                        {"share", K_ARR_OR_NULL, false},
                                        {"node_share", K_ARR_OR_NULL, false},
                                        {"gpu_load", K_ARR, false},
                                        {"max_load", K_NUM, false},
                                        {"lower_bound", K_NUM, false},
                                        {"balancedness", K_NUM, false},
                                        {"mip_gap", K_NUM, false},
                                        {"mip_status", K_STR, false},
                                        {NULL, K_INT, false}};

static const key_rule_t summary_keys[] = {{"policy", K_STR, false},
                                          {"seconds", K_NUM, false},
                                          {"layers", K_INT, false},
                                          {"mean_balancedness", K_NUM, false},
                                          {"min_balancedness", K_NUM, false},
                                          {"mean_max_over_lower_bound", K_NUM, false},
                                          {"max_max_over_lower_bound", K_NUM, false},
                                          {"lower_bound_kind", K_STR, false},
                                          {"fallback_layers", K_INT, false},
                                          {"slots_moved", K_INT, false},
                                          {"mip_layers_optimal", K_INT, false},
                                          {"mip_max_gap", K_NUM, false},
                                          {NULL, K_INT, false}};

static bool kind_ok(json_t *v, kind_t k) {
  switch (k) {
  case K_INT: return json_is_integer(v);
  case K_NUM: return json_is_number(v);
  case K_STR: return json_is_string(v);
  case K_BOOL: return json_is_boolean(v);
  case K_ARR: return json_is_array(v);
  case K_OBJ: return json_is_object(v);
  case K_INT_OR_ARR: return json_is_integer(v) || json_is_array(v);
  case K_ARR_OR_NULL: return json_is_array(v) || json_is_null(v);
  }
  return false;
}

static const char *kind_name(kind_t k) {
  static const char *const names[] = {"an integer",
                                      "a number",
                                      "a string",
                                      "a boolean",
                                      "an array",
                                      "an object",
                                      "an integer or an array",
                                      "an array or null"};
  return names[k];
}

/* obj's keys against rules; `where` prefixes the key in the detail ("",
 * "layer 3: ", "\"summary\": "). */
static eplb_status_t check_keys(const char *path, const char *where, json_t *obj,
                                const key_rule_t *rules) {
  const char *key;
  json_t *val;
  json_object_foreach(obj, key, val) {
    const key_rule_t *r = rules;
    while (r->key && strcmp(r->key, key))
      r++;
    if (!r->key)
      return eplb__error(EPLB_EFORMAT, "planner", "%s: %sunknown key \"%s\"", path, where, key);
    if (!kind_ok(val, r->kind))
      return eplb__error(EPLB_EFORMAT, "planner", "%s: %s\"%s\": expected %s", path, where, key,
                         kind_name(r->kind));
  }
  for (const key_rule_t *r = rules; r->key; r++)
    if (r->required && !json_object_get(obj, r->key))
      return eplb__error(EPLB_EFORMAT, "planner", "%s: %s\"%s\" missing", path, where, r->key);
  return EPLB_OK;
}

/* Each layer's keys, the metrics' elements, the summary's keys and the
 * names the reader would otherwise fall back from: the policy and the
 * bound's kind. */
static eplb_status_t check_schema(const char *path, json_t *root) {
  eplb_status_t st = check_keys(path, "", root, root_keys);
  json_t *sum = json_object_get(root, "summary"), *layers = json_object_get(root, "layers");
  if (!st && sum)
    st = check_keys(path, "\"summary\": ", sum, summary_keys);
  for (size_t l = 0; !st && l < json_array_size(layers); l++) {
    char where[48];
    json_t *lo = json_array_get(layers, l), *gl = json_object_get(lo, "gpu_load");
    snprintf(where, sizeof where, "layer %zu: ", l);
    if (!json_is_object(lo))
      return eplb__error(EPLB_EFORMAT, "planner", "%s: layer %zu: expected an object", path, l);
    st = check_keys(path, where, lo, layer_keys);
    for (size_t g = 0; !st && g < json_array_size(gl); g++)
      if (!json_is_number(json_array_get(gl, g)))
        st = eplb__error(EPLB_EFORMAT, "planner", "%s: layer %zu: gpu_load[%zu] is not a number",
                         path, l, g);
  }
  json_t *pol = json_object_get(root, "policy");
  if (!st && pol && eplb_plan_policy_parse(json_string_value(pol), &(eplb_plan_policy_t){0}))
    st = eplb__error(EPLB_EFORMAT, "planner",
                     "%s: \"policy\": \"%s\" is not a policy (deepseek, balanced, mip, "
                     "incremental, locality, decode)",
                     path, json_string_value(pol));
  json_t *kind = json_object_get(sum, "lower_bound_kind");
  const char *k = json_string_value(kind);
  if (!st && kind && strcmp(k, "exact-share") && strcmp(k, "uniform-share"))
    st = eplb__error(EPLB_EFORMAT, "planner",
                     "%s: \"summary\": \"lower_bound_kind\": \"%s\" is not \"exact-share\" or "
                     "\"uniform-share\"",
                     path, k);
  return st;
}

/* The file's shape: "format", "version", layers, experts, GPUs, nodes and
 * groups, consistent with each other. */
typedef struct plan_shape {
  uint32_t L, E, G, N, K;
  uint64_t R;
} plan_shape_t;

static eplb_status_t read_shape(const char *path, json_t *root, plan_shape_t *sh) {
  eplb_status_t st;
  if (!json_is_object(root))
    return eplb__error(EPLB_EFORMAT, "planner", "%s: not a JSON object", path);
  json_t *fmt = json_object_get(root, "format");
  if (fmt && (!json_is_string(fmt) || strcmp(json_string_value(fmt), "eplb-plan")))
    return eplb__error(EPLB_EFORMAT, "planner", "%s: \"format\" is not \"eplb-plan\"", path);
  json_t *ver = json_object_get(root, "version");
  if (ver && (!json_is_integer(ver) || json_integer_value(ver) != 1))
    return eplb__error(EPLB_EFORMAT, "planner", "%s: unsupported \"version\" (expected 1)", path);
  if ((st = check_schema(path, root)))
    return st;
  sh->K = 1;
  if ((st = get_u32(path, root, "num_layers", UINT32_MAX, MAX_LAYERS, &sh->L)) ||
      (st = get_u32(path, root, "num_logical_experts", UINT32_MAX, MAX_EXPERTS, &sh->E)) ||
      (st = get_u32(path, root, "num_gpus", UINT32_MAX, MAX_GPUS, &sh->G)) ||
      (st = get_u32(path, root, "num_nodes", 1, MAX_GPUS, &sh->N)) ||
      (st = get_u32(path, root, "num_groups", 1, MAX_EXPERTS, &sh->K)))
    return st;
  if (sh->G % sh->N || sh->E % sh->K)
    return eplb__error(EPLB_ESHAPE, "planner", "%s: %u GPUs on %u nodes, %u experts in %u groups",
                       path, sh->G, sh->N, sh->E, sh->K);
  return EPLB_OK;
}

/* "slots_per_gpu" (one number or G) into slots[G], their sum into sh->R;
 * then every layer's "phy2log" must have R entries, checked before the plan
 * is allocated: a few kB claiming 4,096 layers of 65,536 slots would
 * otherwise cost gigabytes before the first layer is found short. */
static eplb_status_t read_slots(const char *path, json_t *root, plan_shape_t *sh, uint32_t *slots) {
  json_t *sv = json_object_get(root, "slots_per_gpu");
  uint64_t R = 0;
  for (uint32_t g = 0; g < sh->G; g++) {
    json_t *x = json_is_array(sv) ? json_array_get(sv, g) : sv;
    if ((json_is_array(sv) && json_array_size(sv) != sh->G) || !json_is_integer(x) ||
        json_integer_value(x) < 1 || json_integer_value(x) > (1 << 24))
      return eplb__error(EPLB_EFORMAT, "planner",
                         "%s: \"slots_per_gpu\": expected %u positive integers or one", path,
                         sh->G);
    slots[g] = (uint32_t)json_integer_value(x);
    R += slots[g];
  }
  if (R > EPLB_MAX_SLOTS)
    return eplb__error(EPLB_ERANGE, "planner", "%s: %llu slots per layer: over the limit of %u",
                       path, (unsigned long long)R, EPLB_MAX_SLOTS);
  if (R < sh->E || R * sh->L > MAX_CELLS)
    return eplb__error(EPLB_ESHAPE, "planner", "%s: %llu slots for %u experts x %u layers", path,
                       (unsigned long long)R, sh->E, sh->L);
  sh->R = R;
  json_t *layers = json_object_get(root, "layers");
  if (!json_is_array(layers) || json_array_size(layers) != sh->L)
    return eplb__error(EPLB_EFORMAT, "planner", "%s: \"layers\": expected an array of %u layers",
                       path, sh->L);
  for (uint32_t l = 0; l < sh->L; l++) {
    json_t *p2l = json_object_get(json_array_get(layers, l), "phy2log");
    if (!json_is_array(p2l) || json_array_size(p2l) != R)
      return eplb__error(EPLB_EFORMAT, "planner",
                         "%s: layer %u: \"phy2log\": expected an array of %llu expert ids", path, l,
                         (unsigned long long)R);
  }
  return EPLB_OK;
}

/* Layer l's phy2log and shares (uniform when absent), checked, and its
 * optional node shares. */
static eplb_status_t read_layer(const char *path, eplb_plan_t *p, uint32_t l, json_t *layers) {
  size_t R = p->num_slots;
  uint32_t E = p->num_experts;
  json_t *lo = json_array_get(layers, l);
  json_t *p2l = json_object_get(lo, "phy2log"), *sh = json_object_get(lo, "share");
  if (!json_is_array(p2l) || json_array_size(p2l) != R)
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: layer %u: \"phy2log\": expected an array of %llu expert ids", path, l,
                       (unsigned long long)R);
  if (sh && !json_is_null(sh) && (!json_is_array(sh) || json_array_size(sh) != R))
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: layer %u: \"share\": expected an array of %llu numbers", path, l,
                       (unsigned long long)R);
  int32_t *dst = p->phy2log + (size_t)l * R;
  double *dsh = p->share + (size_t)l * R;
  for (size_t r = 0; r < R; r++) {
    json_t *x = json_array_get(p2l, r);
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= E)
      return eplb__error(json_is_integer(x) ? EPLB_ERANGE : EPLB_EFORMAT, "planner",
                         "%s: layer %u: phy2log[%zu] is not an expert id 0..%u", path, l, r, E - 1);
    dst[r] = (int32_t)json_integer_value(x);
    if (json_is_array(sh)) {
      json_t *y = json_array_get(sh, r);
      if (!json_is_number(y))
        return eplb__error(EPLB_EFORMAT, "planner", "%s: layer %u: share[%zu] is not a number",
                           path, l, r);
      dsh[r] = json_number_value(y);
    }
  }
  if (!json_is_array(sh))
    eplb__uniform_shares(E, (uint32_t)R, dst, dsh);
  eplb_status_t st = eplb__plan_check_layer(p, l, path);
  if (!st)
    st = read_node_share(path, p, l, json_object_get(lo, "node_share"), layers);
  return st;
}

eplb_status_t eplb_plan_read(const char *path, eplb_plan_t **out) {
  if (!path || !out)
    return eplb__error(EPLB_EINVAL, "planner", "plan read: NULL argument");
  *out = NULL;
  json_error_t err;
  eplb_status_t cst = eplb__check_input(path, "planner");
  if (!cst)
    cst = prescan(path);
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
  eplb_plan_t *p = NULL;
  uint32_t *slots = NULL;
  plan_shape_t sh;
  eplb_status_t st = read_shape(path, root, &sh);
  if (!st && !(slots = eplb__malloc_array(sh.G, sizeof *slots)))
    st = eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", path);
  if (!st)
    st = read_slots(path, root, &sh, slots);
  if (!st)
    st = eplb__plan_alloc(sh.L, sh.E, sh.G, sh.N, (uint32_t)sh.R, slots, &p);
  if (!st) {
    p->num_groups = sh.K;
    p->keep_groups = json_is_true(json_object_get(root, "keep_groups_on_nodes"));
    /* The kind travels in the summary, so eplb plan eval keeps certifying a
     * uniform-share plan against the bound that holds for it. */
    json_t *kind = json_object_get(json_object_get(root, "summary"), "lower_bound_kind");
    p->uniform_bound = json_is_string(kind) && !strcmp(json_string_value(kind), "uniform-share");
    json_t *pol = json_object_get(root, "policy");
    p->policy = EPLB_POLICY_BALANCED; /* a minimal plan names none */
    if (pol)
      (void)eplb_plan_policy_parse(json_string_value(pol), &p->policy);
  }
  json_t *layers = json_object_get(root, "layers");
  for (uint32_t l = 0; !st && l < sh.L; l++)
    st = read_layer(path, p, l, layers);
  json_decref(root);
  eplb__free(slots);
  if (st)
    eplb_plan_destroy(p);
  else
    *out = p;
  return st;
}
