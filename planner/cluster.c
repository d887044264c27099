/* The cluster model: "NxG" short forms and cluster files (JSON). */
#include "core/core.h"
#include "planner/planner.h"
#include "traces/traces.h"

#include "eplb/plan_tooling.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct eplb_cluster {
  uint32_t num_nodes, num_gpus;
  eplb_node_info_t *nodes; /* [num_nodes] */
  eplb_gpu_info_t *gpus;   /* [num_gpus] */
};

void eplb_cluster_destroy(eplb_cluster_t *c) {
  if (!c)
    return;
  eplb__free(c->nodes);
  eplb__free(c->gpus);
  eplb__free(c);
}

uint32_t eplb_cluster_num_nodes(const eplb_cluster_t *c) { return c ? c->num_nodes : 0; }
uint32_t eplb_cluster_num_gpus(const eplb_cluster_t *c) { return c ? c->num_gpus : 0; }

uint32_t eplb_cluster_node_of(const eplb_cluster_t *c, uint32_t gpu) {
  return c && gpu < c->num_gpus ? c->gpus[gpu].node : UINT32_MAX;
}

eplb_status_t eplb_cluster_node(const eplb_cluster_t *c, uint32_t node, eplb_node_info_t *out) {
  if (!c || !out || node >= c->num_nodes)
    return eplb__error(EPLB_EINVAL, "planner", "cluster_node: node %u out of range", node);
  *out = c->nodes[node];
  return EPLB_OK;
}

eplb_status_t eplb_cluster_gpu(const eplb_cluster_t *c, uint32_t gpu, eplb_gpu_info_t *out) {
  if (!c || !out || gpu >= c->num_gpus)
    return eplb__error(EPLB_EINVAL, "planner", "cluster_gpu: GPU %u out of range", gpu);
  *out = c->gpus[gpu];
  return EPLB_OK;
}

eplb_link_class_t eplb_cluster_link(const eplb_cluster_t *c, uint32_t a, uint32_t b) {
  if (!c || a >= c->num_gpus || b >= c->num_gpus || a == b)
    return EPLB_LINK_SAME_GPU;
  return c->gpus[a].node == c->gpus[b].node ? EPLB_LINK_INTRA_NODE : EPLB_LINK_INTER_NODE;
}

double eplb_cluster_bandwidth_gbps(const eplb_cluster_t *c, uint32_t a, uint32_t b) {
  if (!c || a >= c->num_gpus || b >= c->num_gpus)
    return 0.0;
  const eplb_node_info_t *na = &c->nodes[c->gpus[a].node], *nb = &c->nodes[c->gpus[b].node];
  switch (eplb_cluster_link(c, a, b)) {
  case EPLB_LINK_SAME_GPU: return INFINITY;
  case EPLB_LINK_INTRA_NODE: return na->intra_node_gbps;
  case EPLB_LINK_INTER_NODE: return fmin(na->inter_node_gbps, nb->inter_node_gbps);
  }
  return 0.0;
}

const char *eplb_link_class_str(eplb_link_class_t link) {
  switch (link) {
  case EPLB_LINK_SAME_GPU: return "same-gpu";
  case EPLB_LINK_INTRA_NODE: return "intra-node";
  case EPLB_LINK_INTER_NODE: return "inter-node";
  }
  return "unknown";
}

const char *eplb_nic_affinity_str(eplb_nic_affinity_t a) {
  switch (a) {
  case EPLB_NIC_UNKNOWN: return "unknown";
  case EPLB_NIC_SAME_SWITCH: return "same-switch";
  case EPLB_NIC_SAME_NUMA: return "same-numa";
  case EPLB_NIC_REMOTE: return "remote";
  case EPLB_NIC_NONE: return "none";
  }
  return "unknown";
}

/* Appends `count` copies of a node to the cluster. `gpus` (may be NULL)
 * describes each GPU of the node; without it GPUs get default names. */
static eplb_status_t add_nodes(eplb_cluster_t *c, const eplb_node_info_t *proto,
                               const eplb_gpu_info_t *gpus, uint32_t count) {
  if (count > EPLB_TOPO_MAX_NODES - c->num_nodes ||
      (uint64_t)proto->num_gpus * count > UINT32_MAX - c->num_gpus)
    return eplb__error(EPLB_ERANGE, "planner", "cluster: more than %u nodes", EPLB_TOPO_MAX_NODES);
  if (c->num_gpus + (uint64_t)proto->num_gpus * count > EPLB_MAX_GPUS)
    return eplb__error(EPLB_ERANGE, "planner", "cluster: %llu GPUs: over the limit of %u",
                       (unsigned long long)(c->num_gpus + (uint64_t)proto->num_gpus * count),
                       EPLB_MAX_GPUS);
  uint32_t nn = c->num_nodes + count, ng = c->num_gpus + proto->num_gpus * count;
  eplb_node_info_t *nodes = eplb__realloc_array(c->nodes, nn, sizeof *nodes);
  if (!nodes)
    return eplb__error(EPLB_ENOMEM, "planner", "cluster: out of memory");
  c->nodes = nodes;
  eplb_gpu_info_t *g = eplb__realloc_array(c->gpus, ng, sizeof *g);
  if (!g)
    return eplb__error(EPLB_ENOMEM, "planner", "cluster: out of memory");
  c->gpus = g;
  for (uint32_t k = 0; k < count; k++) {
    eplb_node_info_t *n = &c->nodes[c->num_nodes];
    *n = *proto;
    n->first_gpu = c->num_gpus;
    if (count > 1 || !n->name[0])
      snprintf(n->name, sizeof n->name, "%.40s%s%u", proto->name[0] ? proto->name : "node",
               proto->name[0] ? "-" : "", proto->name[0] ? k : c->num_nodes);
    for (uint32_t i = 0; i < proto->num_gpus; i++) {
      eplb_gpu_info_t *gi = &c->gpus[c->num_gpus + i];
      if (gpus) {
        *gi = gpus[i];
      } else {
        memset(gi, 0, sizeof *gi);
        snprintf(gi->name, sizeof gi->name, "gpu%u", i);
        gi->numa = -1;
        gi->nic = -1;
        gi->nic_affinity = EPLB_NIC_UNKNOWN;
      }
      gi->node = c->num_nodes;
      gi->local_index = i;
    }
    c->num_gpus += proto->num_gpus;
    c->num_nodes++;
  }
  return EPLB_OK;
}

static void uniform_proto(eplb_node_info_t *n, uint32_t gpus) {
  memset(n, 0, sizeof *n);
  snprintf(n->source, sizeof n->source, "uniform");
  n->num_gpus = gpus;
  n->intra_node_gbps = EPLB_TOPO_DEFAULT_INTRA_GBPS;
  n->inter_node_gbps = EPLB_TOPO_DEFAULT_INTER_GBPS;
}

eplb_status_t eplb_cluster_create_uniform(uint32_t nodes, uint32_t gpus_per_node,
                                          eplb_cluster_t **out) {
  if (!out)
    return eplb__error(EPLB_EINVAL, "planner", "cluster: out is NULL");
  *out = NULL;
  if (nodes == 0 || gpus_per_node == 0)
    return eplb__error(EPLB_EINVAL, "planner", "cluster: %ux%u has no GPU", nodes, gpus_per_node);
  if (nodes > EPLB_TOPO_MAX_NODES || gpus_per_node > EPLB_TOPO_MAX_GPUS_PER_NODE)
    return eplb__error(EPLB_ERANGE, "planner", "cluster: %ux%u exceeds %u nodes of %u GPUs", nodes,
                       gpus_per_node, EPLB_TOPO_MAX_NODES, EPLB_TOPO_MAX_GPUS_PER_NODE);
  if ((uint64_t)nodes * gpus_per_node > EPLB_MAX_GPUS)
    return eplb__error(EPLB_ERANGE, "planner", "cluster: %ux%u is %llu GPUs: over the limit of %u",
                       nodes, gpus_per_node, (unsigned long long)nodes * gpus_per_node,
                       EPLB_MAX_GPUS);
  eplb_cluster_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "planner", "cluster: out of memory");
  eplb_node_info_t proto;
  uniform_proto(&proto, gpus_per_node);
  eplb_status_t s = add_nodes(c, &proto, NULL, nodes);
  if (s != EPLB_OK) {
    eplb_cluster_destroy(c);
    return s;
  }
  *out = c;
  return EPLB_OK;
}

/* "NxG" with both numbers plain decimal; returns 0 and fills n, g on a match. */
static int parse_short(const char *s, uint32_t *n, uint32_t *g) {
  char *end;
  if (*s < '0' || *s > '9')
    return -1;
  errno = 0;
  unsigned long a = strtoul(s, &end, 10);
  if (errno || *end != 'x' || end[1] < '0' || end[1] > '9')
    return -1;
  unsigned long b = strtoul(end + 1, &end, 10);
  if (errno || *end || a > UINT32_MAX || b > UINT32_MAX)
    return -1;
  *n = (uint32_t)a;
  *g = (uint32_t)b;
  return 0;
}

/* Reads a bandwidth field (GB/s); absent keeps *v. Bounded, not only > 0:
 * bytes are divided by it, and 5e-324 GB/s makes every transfer time
 * infinite (1 kB/s to 1 PB/s covers every real link). */
static eplb_status_t get_gbps(json_t *obj, const char *key, const char *what, double *v) {
  json_t *j = json_object_get(obj, key);
  if (!j)
    return EPLB_OK;
  if (!json_is_number(j))
    return eplb__error(EPLB_EFORMAT, "planner", "%s: \"%s\" must be a number (GB/s)", what, key);
  if (!(json_number_value(j) >= 1e-6 && json_number_value(j) <= 1e6))
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: \"%s\" is %g: must be > 0, from 1e-06 to 1e+06 GB/s", what, key,
                       json_number_value(j));
  *v = json_number_value(j);
  return EPLB_OK;
}

static eplb_status_t get_count(json_t *obj, const char *key, const char *what, uint32_t max,
                               uint32_t *v) {
  json_t *j = json_object_get(obj, key);
  if (!j)
    return EPLB_OK;
  if (!json_is_integer(j) || json_integer_value(j) < 1 || json_integer_value(j) > (json_int_t)max)
    return eplb__error(EPLB_EFORMAT, "planner", "%s: \"%s\" must be an integer in 1..%u", what, key,
                       max);
  *v = (uint32_t)json_integer_value(j);
  return EPLB_OK;
}

static eplb_status_t check_keys(json_t *obj, const char *const *allowed, const char *what) {
  const char *key;
  json_t *val;
  json_object_foreach(obj, key, val) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++)
      ok |= !strcmp(key, *a);
    if (!ok)
      return eplb__error(EPLB_EFORMAT, "planner", "%s: unknown key \"%s\"", what, key);
  }
  return EPLB_OK;
}

/* The node descriptions hwloc loaded for one cluster file, each once: a
 * file may name one description on thousands of nodes, and hwloc takes up
 * to a second for each (4,094 PUs: 0.8 s; 64 entries of them took 52 s,
 * 4,096 about 55 min). Synthetic descriptions are budgeted too: the
 * distinct ones of a file may hold at most CLUSTER_MAX_SYNTHETIC_OBJECTS
 * objects together, twice what one may (EPLB_MAX_SYNTHETIC_OBJECTS), so a
 * file costs at most about two of the largest descriptions. */
#define CLUSTER_MAX_SYNTHETIC_OBJECTS (2u * EPLB_MAX_SYNTHETIC_OBJECTS)

typedef struct {
  eplb__topo_source_t src;
  char *arg; /* NULL for the live machine */
  uint32_t want_gpus;
  eplb__topo_node_t desc;
} topo_entry_t;

typedef struct {
  topo_entry_t *v;
  size_t n, cap;
  uint64_t synthetic_objects; /* of the distinct descriptions loaded */
} topo_cache_t;

static void topo_cache_free(topo_cache_t *tc) {
  for (size_t i = 0; i < tc->n; i++) {
    eplb__free(tc->v[i].arg);
    eplb__free(tc->v[i].desc.gpus);
  }
  eplb__free(tc->v);
}

/* The description of (src, arg, want_gpus), loaded on its first use; owned
 * by the cache. */
static eplb_status_t topo_cached(topo_cache_t *tc, eplb__topo_source_t src, const char *arg,
                                 uint32_t want_gpus, const char *what,
                                 const eplb__topo_node_t **out) {
  for (size_t i = 0; i < tc->n; i++) {
    const topo_entry_t *e = &tc->v[i];
    if (e->src == src && e->want_gpus == want_gpus && !e->arg == !arg &&
        (!arg || !strcmp(e->arg, arg))) {
      *out = &e->desc;
      return EPLB_OK;
    }
  }
  uint64_t objs = 0;
  eplb_status_t s = EPLB_OK;
  if (src == EPLB__TOPO_SYNTHETIC && (s = eplb__topo_synthetic_objects(arg, what, &objs)))
    return s;
  if (tc->synthetic_objects + objs > CLUSTER_MAX_SYNTHETIC_OBJECTS)
    return eplb__error(EPLB_ERANGE, "planner",
                       "%s: synthetic description '%s': %llu objects after %llu in the file's "
                       "other descriptions, over the limit of %u for a file",
                       what, arg, (unsigned long long)objs,
                       (unsigned long long)tc->synthetic_objects, CLUSTER_MAX_SYNTHETIC_OBJECTS);
  topo_entry_t *grown = eplb__room_for_one(tc->v, &tc->cap, tc->n, sizeof *grown, 4);
  if (!grown)
    return eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", what);
  tc->v = grown;
  topo_entry_t *e = &tc->v[tc->n];
  *e = (topo_entry_t){.src = src, .want_gpus = want_gpus, .arg = arg ? eplb__strdup(arg) : NULL};
  if (arg && !e->arg)
    return eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", what);
  if ((s = eplb__topo_load(src, arg, want_gpus, what, &e->desc))) {
    eplb__free(e->arg);
    return s;
  }
  tc->n++;
  tc->synthetic_objects += objs;
  *out = &e->desc;
  return EPLB_OK;
}

static eplb_status_t parse_node(eplb_cluster_t *c, json_t *jn, const char *dir, double intra,
                                double inter, const char *file, size_t index, topo_cache_t *tc) {
  static const char *const keys[] = {"name",
                                     "gpus",
                                     "xml",
                                     "synthetic",
                                     "live",
                                     "slots_per_gpu",
                                     "intra_node_gbps",
                                     "inter_node_gbps",
                                     "count",
                                     NULL};
  char what[512];
  snprintf(what, sizeof what, "%s: nodes[%zu]", file, index);
  if (!json_is_object(jn))
    return eplb__error(EPLB_EFORMAT, "planner", "%s: must be an object", what);
  eplb_status_t s = check_keys(jn, keys, what);
  if (s != EPLB_OK)
    return s;
  eplb_node_info_t proto;
  uniform_proto(&proto, 0);
  proto.intra_node_gbps = intra;
  proto.inter_node_gbps = inter;
  uint32_t count = 1;
  json_t *name = json_object_get(jn, "name");
  if (name && !json_is_string(name))
    return eplb__error(EPLB_EFORMAT, "planner", "%s: \"name\" must be a string", what);
  if (name)
    snprintf(proto.name, sizeof proto.name, "%s", json_string_value(name));
  if ((s = get_count(jn, "gpus", what, EPLB_TOPO_MAX_GPUS_PER_NODE, &proto.num_gpus)) ||
      (s = get_count(jn, "slots_per_gpu", what, UINT32_MAX / 2, &proto.slots_per_gpu)) ||
      (s = get_count(jn, "count", what, EPLB_TOPO_MAX_NODES, &count)) ||
      (s = get_gbps(jn, "intra_node_gbps", what, &proto.intra_node_gbps)) ||
      (s = get_gbps(jn, "inter_node_gbps", what, &proto.inter_node_gbps)))
    return s;
  json_t *xml = json_object_get(jn, "xml"), *syn = json_object_get(jn, "synthetic");
  json_t *live = json_object_get(jn, "live");
  if (!!xml + !!syn + !!(live && json_is_true(live)) > 1)
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: give at most one of \"xml\", \"synthetic\", \"live\"", what);
  if ((xml && !json_is_string(xml)) || (syn && !json_is_string(syn)) ||
      (live && !json_is_boolean(live)))
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: \"xml\"/\"synthetic\" must be strings, \"live\" a boolean", what);
  if (!xml && !syn && !(live && json_is_true(live))) {
    if (!proto.num_gpus)
      return eplb__error(EPLB_EFORMAT, "planner", "%s: \"gpus\" is missing", what);
    return add_nodes(c, &proto, NULL, count);
  }
  const eplb__topo_node_t *desc = NULL;
  eplb__topo_source_t src = xml ? EPLB__TOPO_XML : syn ? EPLB__TOPO_SYNTHETIC : EPLB__TOPO_LIVE;
  char path[4096];
  const char *arg = NULL;
  if (xml) {
    const char *x = json_string_value(xml);
    if (x[0] == '/' || !dir[0])
      snprintf(path, sizeof path, "%s", x);
    else
      snprintf(path, sizeof path, "%s/%s", dir, x);
    if (access(path, R_OK) != 0)
      return eplb__error(EPLB_EIO, "planner", "%s: cannot read XML file '%s': %s", what, path,
                         strerror(errno));
    /* hwloc would block for ever on a FIFO named by a hostile file. */
    if ((s = eplb__check_input(path, "planner")))
      return s;
    arg = path;
  } else if (syn) {
    arg = json_string_value(syn);
  }
  s = topo_cached(tc, src, arg, proto.num_gpus, what, &desc);
  if (s != EPLB_OK)
    return s;
  proto.num_gpus = desc->num_gpus;
  proto.num_numa = desc->num_numa;
  proto.num_pus = desc->num_pus;
  proto.num_nics = desc->num_nics;
  snprintf(proto.source, sizeof proto.source, "%s",
           src == EPLB__TOPO_XML         ? "xml"
           : src == EPLB__TOPO_SYNTHETIC ? "synthetic"
                                         : "live");
  return add_nodes(c, &proto, desc->gpus, count);
}

static eplb_status_t parse_file(eplb_cluster_t *c, const char *path) {
  static const char *const keys[] = {"format",          "version", "intra_node_gbps",
                                     "inter_node_gbps", "nodes",   NULL};
  json_error_t jerr;
  eplb_status_t s = eplb__check_input(path, "planner");
  if (s)
    return s;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    if (access(path, R_OK) != 0)
      return eplb__error(EPLB_EIO, "planner", "%s: %s", path, strerror(errno));
    return eplb__error(EPLB_EFORMAT, "planner", "%s:%d:%d: %s", path, jerr.line, jerr.column,
                       jerr.text);
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  else
    dir[0] = '\0';
  double intra = EPLB_TOPO_DEFAULT_INTRA_GBPS, inter = EPLB_TOPO_DEFAULT_INTER_GBPS;
  json_t *fmt = json_object_get(root, "format"), *ver = json_object_get(root, "version");
  json_t *nodes = json_object_get(root, "nodes");
  if (!json_is_object(root)) {
    s = eplb__error(EPLB_EFORMAT, "planner", "%s: not a JSON object", path);
    goto done;
  }
  if ((s = check_keys(root, keys, path)))
    goto done;
  if (fmt && (!json_is_string(fmt) || strcmp(json_string_value(fmt), "eplb-cluster"))) {
    s = eplb__error(EPLB_EFORMAT, "planner", "%s: \"format\" must be \"eplb-cluster\"", path);
    goto done;
  }
  if (ver && (!json_is_integer(ver) || json_integer_value(ver) != 1)) {
    s = eplb__error(EPLB_EFORMAT, "planner", "%s: unsupported \"version\" (this is 1)", path);
    goto done;
  }
  if ((s = get_gbps(root, "intra_node_gbps", path, &intra)) ||
      (s = get_gbps(root, "inter_node_gbps", path, &inter)))
    goto done;
  if (!json_is_array(nodes) || json_array_size(nodes) == 0) {
    s = eplb__error(EPLB_EFORMAT, "planner", "%s: \"nodes\" must be a non-empty array", path);
    goto done;
  }
  size_t i;
  json_t *jn;
  topo_cache_t tc = {0};
  json_array_foreach(nodes, i, jn) {
    if ((s = parse_node(c, jn, dir, intra, inter, path, i, &tc)))
      break;
  }
  topo_cache_free(&tc);
done:
  json_decref(root);
  return s;
}

/* One node: the machine this process runs on (its GPUs from hwloc). */
static eplb_status_t open_live(eplb_cluster_t **out) {
  eplb_cluster_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "planner", "cluster: out of memory");
  eplb__topo_node_t desc;
  eplb_status_t s = eplb__topo_load(EPLB__TOPO_LIVE, NULL, 0, "live machine", &desc);
  if (s == EPLB_OK) {
    eplb_node_info_t proto;
    uniform_proto(&proto, desc.num_gpus);
    snprintf(proto.source, sizeof proto.source, "live");
    snprintf(proto.name, sizeof proto.name, "localhost");
    proto.num_numa = desc.num_numa;
    proto.num_pus = desc.num_pus;
    proto.num_nics = desc.num_nics;
    s = add_nodes(c, &proto, desc.gpus, 1);
    eplb__free(desc.gpus);
  }
  if (s != EPLB_OK) {
    eplb_cluster_destroy(c);
    return s;
  }
  *out = c;
  return EPLB_OK;
}

eplb_status_t eplb_cluster_open(const char *spec, eplb_cluster_t **out) {
  if (!spec || !out)
    return eplb__error(EPLB_EINVAL, "planner", "cluster_open: NULL argument");
  *out = NULL;
  uint32_t n, g;
  if (parse_short(spec, &n, &g) == 0)
    return eplb_cluster_create_uniform(n, g, out);
  if (!strcmp(spec, "live"))
    return open_live(out);
  if (!strchr(spec, '.') && !strchr(spec, '/') && access(spec, F_OK) != 0)
    return eplb__error(EPLB_EINVAL, "planner",
                       "cluster '%s': expected NxG (e.g. 4x8) or a cluster file", spec);
  eplb_cluster_t *c = eplb__calloc(1, sizeof *c);
  if (!c)
    return eplb__error(EPLB_ENOMEM, "planner", "cluster: out of memory");
  eplb_status_t s = parse_file(c, spec);
  if (s != EPLB_OK) {
    eplb_cluster_destroy(c);
    return s;
  }
  *out = c;
  return EPLB_OK;
}

/* ---- the cluster as JSON (eplb topo show --json) -------------------------- */

/* One node and its GPUs; NULL when a value cannot be made (no memory, a
 * name that is not UTF-8, a bandwidth that is not finite). */
static json_t *node_json(const eplb_cluster_t *c, uint32_t n) {
  const eplb_node_info_t *ni = &c->nodes[n];
  json_t *gpus = json_array();
  int bad = !gpus || !isfinite(ni->intra_node_gbps) || !isfinite(ni->inter_node_gbps);
  for (uint32_t i = 0; !bad && i < ni->num_gpus; i++) {
    const eplb_gpu_info_t *g = &c->gpus[ni->first_gpu + i];
    bad = json_array_append_new(
        gpus,
        json_pack("{s:I, s:I, s:s, s:s, s:I, s:I, s:s, s:s}", "gpu",
                  (json_int_t)(ni->first_gpu + i), "local_index", (json_int_t)i, "name", g->name,
                  "pci_busid", g->pci_busid, "numa", (json_int_t)g->numa, "nic", (json_int_t)g->nic,
                  "nic_name", g->nic_name, "nic_affinity", eplb_nic_affinity_str(g->nic_affinity)));
  }
  if (bad) {
    json_decref(gpus);
    return NULL;
  }
  return json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:o}", "node", (json_int_t)n,
                   "name", ni->name, "source", ni->source, "first_gpu", (json_int_t)ni->first_gpu,
                   "num_gpus", (json_int_t)ni->num_gpus, "slots_per_gpu",
                   (json_int_t)ni->slots_per_gpu, "num_numa", (json_int_t)ni->num_numa, "num_nics",
                   (json_int_t)ni->num_nics, "intra_node_gbps", ni->intra_node_gbps,
                   "inter_node_gbps", ni->inter_node_gbps, "gpus", gpus);
}

eplb_status_t eplb_cluster_tree(const eplb_cluster_t *cluster, json_t **out) {
  if (out)
    *out = NULL;
  if (!cluster || !out)
    return eplb__error(EPLB_EINVAL, "planner", "cluster json: NULL argument");
  json_t *nodes = json_array();
  int bad = !nodes;
  for (uint32_t n = 0; !bad && n < cluster->num_nodes; n++)
    bad = json_array_append_new(nodes, node_json(cluster, n));
  json_t *root = bad ? NULL
                     : json_pack("{s:I, s:I, s:O}", "num_nodes", (json_int_t)cluster->num_nodes,
                                 "num_gpus", (json_int_t)cluster->num_gpus, "nodes", nodes);
  json_decref(nodes);
  if (!(*out = root))
    return eplb__error(EPLB_ENOMEM, "planner",
                       "cluster json: out of memory (or a name is not UTF-8, or a bandwidth is "
                       "not finite)");
  return EPLB_OK;
}

eplb_status_t eplb_cluster_json(const eplb_cluster_t *cluster, char *buf, size_t size,
                                size_t *len) {
  json_t *j;
  eplb_status_t st = eplb_cluster_tree(cluster, &j);
  return eplb__json_text(st, j, "planner", "cluster json", buf, size, len);
}
