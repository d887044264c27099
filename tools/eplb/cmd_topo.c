/* eplb topo show */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char topo_usage[] =
    "usage: eplb topo show [--cluster FILE|NxG|live] [--json]\n"
    "  Prints the cluster's nodes, their GPUs with NUMA node and nearest NIC, and the\n"
    "  bandwidth of each link class. Default: --cluster live (this machine).\n";

static void print_text(const eplb_cluster_t *c) {
  uint32_t N = eplb_cluster_num_nodes(c), G = eplb_cluster_num_gpus(c);
  printf("cluster: %" PRIu32 " nodes, %" PRIu32 " GPUs\n", N, G);
  for (uint32_t n = 0; n < N; n++) {
    eplb_node_info_t ni;
    eplb_cluster_node(c, n, &ni);
    printf("node %" PRIu32 " %s (%s): %" PRIu32 " GPUs [%" PRIu32 "..%" PRIu32 "]", n, ni.name,
           ni.source, ni.num_gpus, ni.first_gpu, ni.first_gpu + ni.num_gpus - 1);
    if (ni.slots_per_gpu)
      printf(", %" PRIu32 " slots/GPU", ni.slots_per_gpu);
    if (ni.num_numa)
      printf(", %" PRIu32 " NUMA, %" PRIu32 " NICs", ni.num_numa, ni.num_nics);
    printf("; intra-node %.0f GB/s, inter-node %.0f GB/s per GPU\n", ni.intra_node_gbps,
           ni.inter_node_gbps);
    for (uint32_t i = 0; i < ni.num_gpus; i++) {
      eplb_gpu_info_t g;
      eplb_cluster_gpu(c, ni.first_gpu + i, &g);
      printf("  gpu %-4" PRIu32 " %-8s", ni.first_gpu + i, g.name);
      if (g.pci_busid[0])
        printf(" pci %s", g.pci_busid);
      if (g.numa >= 0)
        printf(" numa %" PRId32, g.numa);
      if (g.nic >= 0)
        printf(" nic %s (%s)", g.nic_name, eplb_nic_affinity_str(g.nic_affinity));
      else if (g.nic_affinity == EPLB_NIC_NONE)
        printf(" no nic");
      putchar('\n');
    }
  }
  printf("link classes: same-gpu (no transfer), intra-node (NVLink class), inter-node (RDMA)\n");
}

int cli_topo(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "show")) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
      return fputs(topo_usage, stdout), CLI_OK;
    fputs(topo_usage, stderr);
    return CLI_BADINPUT;
  }
  const char *spec = "live";
  int json = 0, c;
  const cli_opt_t opts[] = {{"cluster", CLI_STR, .field = &spec},
                            {"json", CLI_FLAG, .field = &json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  argc--;
  argv++;
  optind = 1;
  if ((c = cli_getopt(argc, argv, "h", opts)) != -1) /* the table takes all but --help */
    return c == 'h' ? (fputs(topo_usage, stdout), CLI_OK) : CLI_BADINPUT;
  if (optind != argc)
    return cli_usage_error("topo show: unexpected argument '%s'", argv[optind]);
  eplb_cluster_t *cl = NULL;
  int rc = CLI_OK;
  eplb_status_t s = eplb_cluster_open(spec, &cl);
  if (s != EPLB_OK)
    return cli_status_error(s, "topo show");
  if (json) {
    json_t *root;
    eplb_cluster_tree(cl, &root);
    rc = cli_print_json_flags(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  } else {
    print_text(cl);
  }
  eplb_cluster_destroy(cl);
  return rc;
}
