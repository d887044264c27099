/* Topology declarations shared by planner/cluster.c and planner/topo_hwloc.c.
 * (To be folded into planner/planner.h.) */
#ifndef EPLB_PLANNER_TOPO_INTERNAL_H
#define EPLB_PLANNER_TOPO_INTERNAL_H

#include "eplb/topo.h"

typedef enum eplb__topo_source {
  EPLB__TOPO_XML = 1,
  EPLB__TOPO_SYNTHETIC = 2,
  EPLB__TOPO_LIVE = 3
} eplb__topo_source_t;

/* What hwloc tells about one node. gpus[] has num_gpus entries (owned,
 * eplb__free); node/local_index are left for the caller to fill. */
typedef struct eplb__topo_node {
  uint32_t num_gpus, num_numa, num_pus, num_nics;
  eplb_gpu_info_t *gpus;
} eplb__topo_node_t;

/* Loads a node description with hwloc (the only hwloc user in eplb).
 * want_gpus: the GPU count the cluster file gives (0 = take it from the
 * topology). GPUs found as PCI devices must agree with want_gpus; a topology
 * without GPUs gets want_gpus GPUs spread evenly over its NUMA nodes.
 * `what` names the node in error details. */
eplb_status_t eplb__topo_load(eplb__topo_source_t source, const char *arg, uint32_t want_gpus,
                              const char *what, eplb__topo_node_t *out);

#endif
