/* Fuzz target for cluster files (eplb_cluster_open on a JSON file): the
 * input is a whole cluster file, written next to a copy of the hwloc XML
 * fixture under the name "node.xml" so that seeds can name it. Beyond "no
 * crash, no leak, a status with a detail": an opened cluster is consistent
 * (nodes own contiguous GPU ranges that add up to the total). */
#include "tests/fuzz/fuzz_target.h"

#include "eplb/topo.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#ifndef EPLB_FUZZ_FIXTURES
#define EPLB_FUZZ_FIXTURES "tests/fixtures"
#endif

void fuzz_target_cleanup(void) { fuzz_util_cleanup(); }

/* hwloc 2.9 inserts the objects of a synthetic topology in time quadratic
 * in their number: EPLB_MAX_SYNTHETIC_OBJECTS keeps that under a second,
 * but under ASan a replay of many inputs near the limit would still take
 * minutes, so inputs whose descriptions multiply out between this and the
 * limit are skipped. */
#define SLOW_SYNTHETIC_PRODUCT 2048u

static int slow_synthetic(const uint8_t *data, size_t size) {
  json_t *root = json_loadb((const char *)data, size, 0, NULL);
  json_t *nodes = json_object_get(root, "nodes");
  int slow = 0;
  for (size_t i = 0; i < json_array_size(nodes) && !slow; i++) {
    const char *s = json_string_value(json_object_get(json_array_get(nodes, i), "synthetic"));
    uint64_t product = 1;
    for (const char *p = s; p && *p; p++) {
      if (*p < '0' || *p > '9')
        continue;
      uint64_t n = 0;
      for (; *p >= '0' && *p <= '9' && n <= EPLB_MAX_SYNTHETIC_OBJECTS; p++)
        n = 10 * n + (uint64_t)(*p - '0');
      if (n > 1 && (product *= n) > EPLB_MAX_SYNTHETIC_OBJECTS)
        break;
      if (!*p)
        break;
    }
    slow = product > SLOW_SYNTHETIC_PRODUCT && product <= EPLB_MAX_SYNTHETIC_OBJECTS;
  }
  json_decref(root);
  return slow;
}

/* The fixture travels with the input's directory: relative "xml" names
 * resolve there. Missing fixture: seeds that name it fail to open (EIO). */
static void init(void) {
  static int done;
  if (done)
    return;
  done = 1;
  /* hwloc's PCI plugin leaks by design (NOTES.md); live nodes stay testable. */
  setenv("HWLOC_PLUGINS_BLACKLIST", "hwloc_pci", 0);
  /* Seeds may also name a FIFO, which must be refused, not waited on. */
  if (mkfifo(fuzz_util_path("fifo.xml"), 0600) != 0)
    abort();
  FILE *f = fopen(EPLB_FUZZ_FIXTURES "/node-2numa-4gpu-2nic.xml", "rb");
  if (!f)
    return;
  static uint8_t buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  fuzz_util_put(fuzz_util_path("node.xml"), buf, n);
}

static void check_cluster(const eplb_cluster_t *c) {
  uint32_t nn = eplb_cluster_num_nodes(c), ng = eplb_cluster_num_gpus(c);
  fuzz_util_check(nn >= 1 && ng >= 1 && ng <= EPLB_MAX_GPUS, "a cluster has nodes and GPUs");
  uint32_t next = 0;
  for (uint32_t n = 0; n < nn; n++) {
    eplb_node_info_t ni;
    fuzz_util_check(eplb_cluster_node(c, n, &ni) == EPLB_OK, "every node is readable");
    fuzz_util_check(ni.first_gpu == next && ni.num_gpus >= 1 && ni.intra_node_gbps > 0 &&
                        ni.inter_node_gbps > 0 && isfinite(ni.intra_node_gbps) &&
                        isfinite(ni.inter_node_gbps),
                    "nodes own contiguous GPU ranges and positive bandwidths");
    for (uint32_t i = 0; i < ni.num_gpus; i++) {
      eplb_gpu_info_t gi;
      fuzz_util_check(eplb_cluster_gpu(c, next + i, &gi) == EPLB_OK && gi.node == n &&
                          gi.local_index == i && eplb_cluster_node_of(c, next + i) == n,
                      "every GPU knows its node");
    }
    next += ni.num_gpus;
  }
  fuzz_util_check(next == ng, "the nodes' GPUs add up to the total");
  fuzz_util_check(eplb_cluster_bandwidth_gbps(c, 0, ng - 1) > 0, "GPUs are connected");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  init();
  if (slow_synthetic(data, size))
    return 0;
  const char *path = fuzz_util_path("cluster.json");
  fuzz_util_put(path, data, size);
  eplb_cluster_t *c = NULL;
  fuzz_util_begin();
  eplb_status_t st = fuzz_util_status(eplb_cluster_open(path, &c), "cluster_open");
  fuzz_util_check((st == EPLB_OK) == (c != NULL), "*out set exactly on success");
  if (c)
    check_cluster(c);
  eplb_cluster_destroy(c);
  return 0;
}
