/* The one file of eplb that includes hwloc.h: reads one node's GPUs, NUMA
 * nodes and NICs from an XML export, a synthetic description or the live
 * machine. */
#include "core/core.h"
#include "planner/planner.h"

#include <hwloc.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MAX_NICS 64u

static int is_gpu(hwloc_obj_t o) {
  /* PCI class 0x03xx is "display controller"; 0x0302 is what datacenter
   * GPUs (H100/H200/A100) report. */
  return o->type == HWLOC_OBJ_PCI_DEVICE && (o->attr->pcidev.class_id >> 8) == 0x03;
}

static int is_nic(hwloc_obj_t o) {
  /* 0x0200 Ethernet, 0x0207 InfiniBand: the RDMA-capable network classes. */
  return o->type == HWLOC_OBJ_PCI_DEVICE &&
         (o->attr->pcidev.class_id == 0x0200 || o->attr->pcidev.class_id == 0x0207);
}

/* The OS device name under a PCI device, preferring the kinds that name the
 * device as users know it (cuda0 / mlx5_0). */
static void osdev_name(hwloc_obj_t pci, char *buf, size_t n) {
  buf[0] = '\0';
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
      continue;
    int preferred = c->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC ||
                    c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    if (!buf[0] || preferred)
      snprintf(buf, n, "%s", c->name);
  }
}

static int numa_of(hwloc_topology_t topo, hwloc_obj_t o) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, o);
  if (!anc || !anc->nodeset || hwloc_bitmap_weight(anc->nodeset) != 1)
    return -1;
  return hwloc_bitmap_first(anc->nodeset);
}

/* Nearest NIC: the one whose common ancestor with the GPU is deepest in the
 * I/O tree (same PCIe switch beats same package beats the machine). */
static void nearest_nic(hwloc_topology_t topo, hwloc_obj_t gpu, hwloc_obj_t *nics, uint32_t n,
                        eplb_gpu_info_t *g) {
  g->nic = -1;
  g->nic_affinity = n ? EPLB_NIC_REMOTE : EPLB_NIC_NONE;
  int best_depth = -1;
  for (uint32_t i = 0; i < n; i++) {
    hwloc_obj_t anc = hwloc_get_common_ancestor_obj(topo, gpu, nics[i]);
    int depth = 0;
    for (hwloc_obj_t p = anc; p; p = p->parent)
      depth++;
    if (depth > best_depth) {
      best_depth = depth;
      g->nic = (int32_t)i;
      if (anc && (anc->type == HWLOC_OBJ_BRIDGE || anc->type == HWLOC_OBJ_PCI_DEVICE))
        g->nic_affinity = EPLB_NIC_SAME_SWITCH;
      else if (numa_of(topo, gpu) >= 0 && numa_of(topo, gpu) == numa_of(topo, nics[i]))
        g->nic_affinity = EPLB_NIC_SAME_NUMA;
      else
        g->nic_affinity = EPLB_NIC_REMOTE;
    }
  }
  if (g->nic >= 0)
    osdev_name(nics[g->nic], g->nic_name, sizeof g->nic_name);
}

static eplb_status_t describe(hwloc_topology_t topo, uint32_t want_gpus, const char *what,
                              eplb__topo_node_t *out) {
  hwloc_obj_t nics[MAX_NICS];
  uint32_t n_nics = 0, n_gpus = 0;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o)) {
    if (is_gpu(o))
      n_gpus++;
    else if (is_nic(o) && n_nics < MAX_NICS)
      nics[n_nics++] = o;
  }
  out->num_numa = (uint32_t)hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  out->num_pus = (uint32_t)hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  out->num_nics = n_nics;
  if (n_gpus && want_gpus && n_gpus != want_gpus)
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: the topology has %u GPUs but the cluster file says %u", what, n_gpus,
                       want_gpus);
  if (!n_gpus && !want_gpus)
    return eplb__error(EPLB_EFORMAT, "planner",
                       "%s: the topology has no GPU; give the node's \"gpus\" count", what);
  if ((n_gpus ? n_gpus : want_gpus) > EPLB_TOPO_MAX_GPUS_PER_NODE)
    return eplb__error(EPLB_ERANGE, "planner", "%s: more than %u GPUs", what,
                       EPLB_TOPO_MAX_GPUS_PER_NODE);
  out->num_gpus = n_gpus ? n_gpus : want_gpus;
  out->gpus = eplb__calloc(out->num_gpus, sizeof *out->gpus);
  if (!out->gpus)
    return eplb__error(EPLB_ENOMEM, "planner", "%s: out of memory", what);
  if (n_gpus) {
    uint32_t i = 0;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o)) {
      if (!is_gpu(o))
        continue;
      eplb_gpu_info_t *g = &out->gpus[i];
      osdev_name(o, g->name, sizeof g->name);
      if (!g->name[0])
        snprintf(g->name, sizeof g->name, "gpu%u", i);
      snprintf(g->pci_busid, sizeof g->pci_busid, "%04x:%02x:%02x.%x",
               (unsigned)o->attr->pcidev.domain, o->attr->pcidev.bus, o->attr->pcidev.dev,
               o->attr->pcidev.func);
      g->numa = numa_of(topo, o);
      nearest_nic(topo, o, nics, n_nics, g);
      i++;
    }
    return EPLB_OK;
  }
  /* No GPU objects (synthetic descriptions cannot hold any): spread the
   * GPUs evenly over the NUMA nodes in OS order, as vendors cable them. */
  uint32_t numa = out->num_numa ? out->num_numa : 1;
  for (uint32_t i = 0; i < out->num_gpus; i++) {
    eplb_gpu_info_t *g = &out->gpus[i];
    snprintf(g->name, sizeof g->name, "gpu%u", i);
    hwloc_obj_t nn = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE,
                                           (unsigned)((uint64_t)i * numa / out->num_gpus));
    g->numa = nn ? (int32_t)nn->os_index : -1;
    g->nic = -1;
    g->nic_affinity = n_nics ? EPLB_NIC_UNKNOWN : EPLB_NIC_NONE;
  }
  return EPLB_OK;
}

/* The objects of a synthetic description, every level's count times its
 * parents' ("pack:2 numa:1 core:2 pu:1" has 2 + 2 + 4 + 4), checked against
 * EPLB_MAX_SYNTHETIC_OBJECTS before hwloc builds them. Attributes "(...)" and memory children
 * "[...]" are skipped; a level whose count cannot be read is left to hwloc. */
eplb_status_t eplb__topo_synthetic_objects(const char *s, const char *what, uint64_t *count) {
  uint64_t pus = 1, objs = 0;
  if (count)
    *count = 0;
  const char *p = s;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == '\n')
      p++;
    if (!*p)
      break;
    const char *tok = p, *colon = NULL, *end = NULL;
    int depth = 0;
    for (; *p && (depth > 0 || (*p != ' ' && *p != '\t' && *p != '\n')); p++) {
      if (*p == '(' || *p == '[') {
        if (depth++ == 0 && !end)
          end = p;
      } else if ((*p == ')' || *p == ']') && depth > 0) {
        depth--;
      } else if (*p == ':' && depth == 0 && !end) {
        colon = p;
      }
    }
    if (*tok == '[')
      continue; /* memory children */
    if (!end)
      end = p;
    const char *num = colon ? colon + 1 : tok;
    if (num >= end || *num < '0' || *num > '9')
      continue;
    uint64_t n = 0;
    bool big = false; /* n or the product does not fit 64 bits */
    for (const char *q = num; q < end && *q >= '0' && *q <= '9'; q++)
      big = big || __builtin_mul_overflow(n, 10, &n) ||
            __builtin_add_overflow(n, (uint64_t)(*q - '0'), &n);
    if (n == 0 && !big)
      continue;
    big = big || __builtin_mul_overflow(pus, n, &pus) || __builtin_add_overflow(objs, pus, &objs);
    if (big)
      return eplb__error(EPLB_ERANGE, "planner",
                         "%s: synthetic description '%s': over 2^64 objects, over the limit of %u",
                         what, s, EPLB_MAX_SYNTHETIC_OBJECTS);
    if (objs > EPLB_MAX_SYNTHETIC_OBJECTS)
      return eplb__error(EPLB_ERANGE, "planner",
                         "%s: synthetic description '%s': %" PRIu64
                         " objects or more, over the limit of %u",
                         what, s, objs, EPLB_MAX_SYNTHETIC_OBJECTS);
  }
  if (count)
    *count = objs;
  return EPLB_OK;
}

eplb_status_t eplb__topo_load(eplb__topo_source_t source, const char *arg, uint32_t want_gpus,
                              const char *what, eplb__topo_node_t *out) {
  memset(out, 0, sizeof *out);
  hwloc_topology_t topo = NULL;
  eplb_status_t s = EPLB_OK;
  if (source == EPLB__TOPO_SYNTHETIC && arg && (s = eplb__topo_synthetic_objects(arg, what, NULL)))
    return s;
  if (hwloc_topology_init(&topo) != 0)
    return eplb__error(EPLB_ENOMEM, "planner", "%s: hwloc_topology_init failed", what);
  /* GPUs and NICs are I/O objects, which hwloc drops unless asked to keep
   * them — also when importing XML. */
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  int rc = 0;
  switch (source) {
  case EPLB__TOPO_XML: rc = hwloc_topology_set_xml(topo, arg); break;
  case EPLB__TOPO_SYNTHETIC: rc = hwloc_topology_set_synthetic(topo, arg); break;
  case EPLB__TOPO_LIVE: break;
  }
  if (rc != 0) {
    s = eplb__error(EPLB_EFORMAT, "planner", "%s: hwloc rejects the %s '%s'", what,
                    source == EPLB__TOPO_XML ? "XML file" : "synthetic description", arg);
    goto done;
  }
  if (hwloc_topology_load(topo) != 0) {
    s = eplb__error(EPLB_EFORMAT, "planner", "%s: hwloc cannot load the topology '%s'", what,
                    arg ? arg : "live machine");
    goto done;
  }
  s = describe(topo, want_gpus, what, out);
done:
  if (s != EPLB_OK) {
    eplb__free(out->gpus);
    memset(out, 0, sizeof *out);
  }
  hwloc_topology_destroy(topo);
  return s;
}
