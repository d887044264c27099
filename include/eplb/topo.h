/* eplb/topo.h — the cluster model: nodes, GPUs, and how they are connected.
 *
 * A cluster is N nodes; GPUs are numbered globally, node by node (node 0's
 * GPUs first). Each node is described by one of:
 *   - nothing but a GPU count ("uniform": the short form "NxG"),
 *   - an hwloc XML export of the machine (GPUs, NUMA nodes and NICs are read
 *     from its PCI objects and OS devices),
 *   - an hwloc synthetic description ("pack:2 numa:1 core:8 pu:2"; hwloc
 *     cannot put GPUs in one, so GPUs are spread over its NUMA nodes),
 *   - the live machine this process runs on.
 * plus the bandwidth of its GPU-to-GPU links inside the node (NVLink class)
 * and of its links to other nodes (RDMA class).
 *
 * Cluster file (JSON):
 *   { "format": "eplb-cluster", "version": 1,
 *     "intra_node_gbps": 160, "inter_node_gbps": 45,          (defaults for nodes)
 *     "nodes": [ { "name": "a0", "gpus": 8,
 *                  "xml": "node.xml" | "synthetic": "..." | "live": true,
 *                  "slots_per_gpu": 9, "intra_node_gbps": 160, "inter_node_gbps": 45,
 *                  "count": 4 }, ... ] }
 * "count" repeats a node description; relative "xml" paths are resolved
 * against the cluster file's directory. Unknown keys are errors.
 *
 * Threads: a cluster is immutable after creation; any number of threads may
 * query it concurrently.
 */
#ifndef EPLB_TOPO_H
#define EPLB_TOPO_H

#include "eplb/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults (GB/s per GPU) for "NxG" and for nodes that do not say. */
#define EPLB_TOPO_DEFAULT_INTRA_GBPS 160.0 /* NVLink, usable */
#define EPLB_TOPO_DEFAULT_INTER_GBPS 45.0  /* RDMA NIC per GPU */
#define EPLB_TOPO_MAX_NODES 4096u
#define EPLB_TOPO_MAX_GPUS_PER_NODE 1024u /* and EPLB_MAX_GPUS in all (common.h) */

typedef struct eplb_cluster eplb_cluster_t;

typedef enum eplb_link_class {
  EPLB_LINK_SAME_GPU = 0,   /* no transfer */
  EPLB_LINK_INTRA_NODE = 1, /* NVLink / NVSwitch class */
  EPLB_LINK_INTER_NODE = 2  /* RDMA network class */
} eplb_link_class_t;

/* How close a GPU is to the NIC it would use for inter-node traffic. */
typedef enum eplb_nic_affinity {
  EPLB_NIC_UNKNOWN = 0,     /* the node description has no PCI information */
  EPLB_NIC_SAME_SWITCH = 1, /* NIC under the same PCIe switch (best for GPUDirect RDMA) */
  EPLB_NIC_SAME_NUMA = 2,   /* same CPU package / NUMA node, different switch */
  EPLB_NIC_REMOTE = 3,      /* across the CPU interconnect */
  EPLB_NIC_NONE = 4         /* the node has no NIC in its description */
} eplb_nic_affinity_t;

typedef struct eplb_node_info {
  char name[64];
  char source[16];    /* "uniform", "xml", "synthetic" or "live" */
  uint32_t first_gpu; /* global index of the node's first GPU */
  uint32_t num_gpus;
  uint32_t slots_per_gpu; /* expert slots per GPU on this node (0 = not given) */
  uint32_t num_numa;      /* NUMA nodes (0 = unknown) */
  uint32_t num_pus;       /* processing units (0 = unknown) */
  uint32_t num_nics;      /* RDMA/Ethernet NICs found (0 = none or unknown) */
  double intra_node_gbps; /* GPU-to-GPU inside the node */
  double inter_node_gbps; /* per GPU, to other nodes */
} eplb_node_info_t;

typedef struct eplb_gpu_info {
  uint32_t node;                    /* node index */
  uint32_t local_index;             /* index within its node */
  int32_t numa;                     /* OS index of its NUMA node, -1 = unknown */
  int32_t nic;                      /* index of its nearest NIC within the node, -1 = none */
  eplb_nic_affinity_t nic_affinity; /* how near that NIC is */
  char name[32];                    /* OS device name ("cuda0") or "gpu<i>" */
  char pci_busid[16];               /* "0000:11:00.0", empty if unknown */
  char nic_name[32];                /* nearest NIC's OS device name, empty if none */
} eplb_gpu_info_t;

/* Opens a cluster from a specification: "NxG" (N identical nodes of G GPUs,
 * default bandwidths, e.g. "4x8"), "live" (one node: this machine, its GPUs
 * found by hwloc) or the path of a cluster file.
 * Returns EPLB_OK; EPLB_EINVAL (bad short form), EPLB_EIO (unreadable file),
 * EPLB_EFORMAT (bad JSON, unknown key, missing/zero GPUs, bandwidth <= 0, an
 * XML that hwloc rejects, a GPU count that disagrees with the XML),
 * EPLB_ERANGE (too many nodes/GPUs), EPLB_ENOMEM. *out is owned by the caller
 * (eplb_cluster_destroy). */
EPLB_API eplb_status_t eplb_cluster_open(const char *spec, eplb_cluster_t **out);

/* A cluster of `nodes` identical nodes of `gpus_per_node` GPUs, default
 * bandwidths, no hwloc description. */
EPLB_API eplb_status_t eplb_cluster_create_uniform(uint32_t nodes, uint32_t gpus_per_node,
                                                   eplb_cluster_t **out);

/* Releases the cluster. NULL is a no-op. */
EPLB_API void eplb_cluster_destroy(eplb_cluster_t *cluster);

EPLB_API uint32_t eplb_cluster_num_nodes(const eplb_cluster_t *cluster);
EPLB_API uint32_t eplb_cluster_num_gpus(const eplb_cluster_t *cluster);

/* Node of a GPU (UINT32_MAX if gpu is out of range). */
EPLB_API uint32_t eplb_cluster_node_of(const eplb_cluster_t *cluster, uint32_t gpu);

/* Describes node `node` / GPU `gpu`. EPLB_EINVAL when out of range. */
EPLB_API eplb_status_t eplb_cluster_node(const eplb_cluster_t *cluster, uint32_t node,
                                         eplb_node_info_t *out);
EPLB_API eplb_status_t eplb_cluster_gpu(const eplb_cluster_t *cluster, uint32_t gpu,
                                        eplb_gpu_info_t *out);

/* Link class between two GPUs. A GPU out of range gives EPLB_LINK_SAME_GPU
 * (and bandwidth 0 below), never a plausible-looking class. */
EPLB_API eplb_link_class_t eplb_cluster_link(const eplb_cluster_t *cluster, uint32_t gpu_a,
                                             uint32_t gpu_b);

/* Bandwidth in GB/s of a transfer from gpu_a to gpu_b: the intra-node
 * bandwidth of their node, or the smaller inter-node bandwidth of the two
 * nodes; +infinity for the same GPU; 0 when out of range. */
EPLB_API double eplb_cluster_bandwidth_gbps(const eplb_cluster_t *cluster, uint32_t gpu_a,
                                            uint32_t gpu_b);

EPLB_API const char *eplb_link_class_str(eplb_link_class_t link);
EPLB_API const char *eplb_nic_affinity_str(eplb_nic_affinity_t affinity);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_TOPO_H */
