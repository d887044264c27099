#include "eplb/plan_tooling.h"
#include "core/core.h"
#include "eplb/topo.h"
#include "tests/support.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fixture(const char *name) {
  const char *d = getenv("EPLB_FIXTURES");
  return eplb_test_path(d ? d : "tests/fixtures", name);
}

static const char *write_tmp(const char *name, const char *text) {
  const char *p = eplb_test_path(eplb_test_tmpdir(), name);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  return p;
}

START_TEST(short_form) {
  eplb_cluster_t *c = NULL;
  ck_assert_int_eq(eplb_cluster_open("4x8", &c), EPLB_OK);
  ck_assert_uint_eq(eplb_cluster_num_nodes(c), 4);
  ck_assert_uint_eq(eplb_cluster_num_gpus(c), 32);
  ck_assert_uint_eq(eplb_cluster_node_of(c, 0), 0);
  ck_assert_uint_eq(eplb_cluster_node_of(c, 7), 0);
  ck_assert_uint_eq(eplb_cluster_node_of(c, 8), 1);
  ck_assert_uint_eq(eplb_cluster_node_of(c, 31), 3);
  ck_assert_uint_eq(eplb_cluster_node_of(c, 32), UINT32_MAX);
  ck_assert_int_eq(eplb_cluster_link(c, 1, 1), EPLB_LINK_SAME_GPU);
  ck_assert_int_eq(eplb_cluster_link(c, 1, 7), EPLB_LINK_INTRA_NODE);
  ck_assert_int_eq(eplb_cluster_link(c, 7, 8), EPLB_LINK_INTER_NODE);
  ck_assert(eplb_cluster_bandwidth_gbps(c, 0, 1) == EPLB_TOPO_DEFAULT_INTRA_GBPS);
  ck_assert(eplb_cluster_bandwidth_gbps(c, 0, 9) == EPLB_TOPO_DEFAULT_INTER_GBPS);
  ck_assert(isinf(eplb_cluster_bandwidth_gbps(c, 3, 3)));
  ck_assert(eplb_cluster_bandwidth_gbps(c, 3, 99) == 0.0);
  eplb_gpu_info_t g;
  ck_assert_int_eq(eplb_cluster_gpu(c, 9, &g), EPLB_OK);
  ck_assert_uint_eq(g.node, 1);
  ck_assert_uint_eq(g.local_index, 1);
  ck_assert_int_eq(eplb_cluster_gpu(c, 32, &g), EPLB_EINVAL);
  eplb_cluster_destroy(c);
  eplb_cluster_destroy(NULL);
  static const char *const bad[] = {"0x8", "4x0", "4x", "x8", "4*8", "-1x8", "4x8x2", "abc"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    c = (eplb_cluster_t *)1;
    eplb_status_t s = eplb_cluster_open(bad[i], &c);
    ck_assert_msg(s != EPLB_OK, "'%s' accepted", bad[i]);
    ck_assert_ptr_null(c);
    ck_assert_str_ne(eplb_error_detail(), "");
  }
  ck_assert_int_eq(eplb_cluster_open("5000x8", &c), EPLB_ERANGE);
  ck_assert_int_eq(eplb_cluster_open("4096x1024", &c), EPLB_ERANGE);
  ck_assert_ptr_null(c);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "over the limit of 65536"));
  ck_assert_int_eq(eplb_cluster_open("4096x16", &c), EPLB_OK);
  ck_assert_uint_eq(eplb_cluster_num_gpus(c), EPLB_MAX_GPUS);
  eplb_cluster_destroy(c);
}
END_TEST

START_TEST(hwloc_xml_fixture_gives_numa_and_nearest_nic) {
  eplb_cluster_t *c = NULL;
  eplb_status_t s = eplb_cluster_open(fixture("cluster-hetero.json"), &c);
  ck_assert_msg(s == EPLB_OK, "%s", eplb_error_detail());
  /* 2 x h200 (4 GPUs from the XML) + small (2) + plain (3) */
  ck_assert_uint_eq(eplb_cluster_num_nodes(c), 4);
  ck_assert_uint_eq(eplb_cluster_num_gpus(c), 13);
  eplb_node_info_t n;
  ck_assert_int_eq(eplb_cluster_node(c, 1, &n), EPLB_OK);
  ck_assert_str_eq(n.source, "xml");
  ck_assert_str_eq(n.name, "h200-1");
  ck_assert_uint_eq(n.first_gpu, 4);
  ck_assert_uint_eq(n.num_gpus, 4);
  ck_assert_uint_eq(n.num_numa, 2);
  ck_assert_uint_eq(n.num_nics, 2);
  ck_assert_uint_eq(n.slots_per_gpu, 9);
  ck_assert(n.intra_node_gbps == 150 && n.inter_node_gbps == 40);
  for (uint32_t i = 0; i < 4; i++) {
    eplb_gpu_info_t g;
    ck_assert_int_eq(eplb_cluster_gpu(c, 4 + i, &g), EPLB_OK);
    char want[16];
    snprintf(want, sizeof want, "cuda%u", i);
    ck_assert_str_eq(g.name, want);
    ck_assert_int_eq(g.numa, (int)(i / 2));
    ck_assert_int_eq(g.nic, (int)(i / 2));
    snprintf(want, sizeof want, "mlx5_%u", i / 2);
    ck_assert_str_eq(g.nic_name, want);
    ck_assert_int_eq(g.nic_affinity, EPLB_NIC_SAME_SWITCH);
    ck_assert_uint_eq(g.node, 1);
  }
  eplb_gpu_info_t g;
  ck_assert_int_eq(eplb_cluster_gpu(c, 0, &g), EPLB_OK);
  ck_assert_str_eq(g.pci_busid, "0000:11:00.0");
  /* synthetic node: GPUs spread over its 2 NUMA nodes, no NIC known */
  ck_assert_int_eq(eplb_cluster_node(c, 2, &n), EPLB_OK);
  ck_assert_str_eq(n.source, "synthetic");
  ck_assert_uint_eq(n.num_gpus, 2);
  ck_assert_uint_eq(n.num_numa, 2);
  ck_assert_int_eq(eplb_cluster_gpu(c, 8, &g), EPLB_OK);
  ck_assert_int_eq(g.numa, 0);
  ck_assert_int_eq(eplb_cluster_gpu(c, 9, &g), EPLB_OK);
  ck_assert_int_eq(g.numa, 1);
  ck_assert_int_eq(g.nic_affinity, EPLB_NIC_NONE);
  /* heterogeneous bandwidths: the slower inter-node end wins */
  ck_assert(eplb_cluster_bandwidth_gbps(c, 0, 8) == 25);
  ck_assert(eplb_cluster_bandwidth_gbps(c, 0, 4) == 40);
  ck_assert(eplb_cluster_bandwidth_gbps(c, 10, 12) == 300);
  ck_assert_int_eq(eplb_cluster_node(c, 3, &n), EPLB_OK);
  ck_assert_str_eq(n.source, "uniform");
  ck_assert_uint_eq(n.slots_per_gpu, 0);
  eplb_cluster_destroy(c);
}
END_TEST

struct bad_case {
  const char *json;
  eplb_status_t status;
  const char *detail;
};

START_TEST(bad_cluster_files) {
  static const struct bad_case cases[] = {
      {"{\"nodes\": [{\"gpus\": 8, \"color\": 1}]}", EPLB_EFORMAT, "unknown key \"color\""},
      {"{\"nodes\": [{\"gpus\": 0}]}", EPLB_EFORMAT, "\"gpus\""},
      {"{\"nodes\": [{}]}", EPLB_EFORMAT, "\"gpus\" is missing"},
      {"{\"nodes\": []}", EPLB_EFORMAT, "non-empty"},
      {"{\"nodes\": [{\"gpus\": 8, \"inter_node_gbps\": 0}]}", EPLB_EFORMAT, "> 0"},
      {"{\"nodes\": [{\"gpus\": 8, \"intra_node_gbps\": -5}]}", EPLB_EFORMAT, "> 0"},
      {"{\"nodes\": [{\"gpus\": 8, \"xml\": \"missing.xml\"}]}", EPLB_EIO, "missing.xml"},
      {"{\"nodes\": [{\"gpus\": 3, \"xml\": \"FIXTURE\"}]}", EPLB_EFORMAT, "has 4 GPUs"},
      {"{\"nodes\": [{\"synthetic\": \"pack:2 core:2 pu:1\"}]}", EPLB_EFORMAT, "no GPU"},
      {"{\"nodes\": [{\"gpus\": 2, \"synthetic\": \"bogus:7\"}]}", EPLB_EFORMAT, "hwloc"},
      {"{\"format\": \"other\", \"nodes\": [{\"gpus\": 2}]}", EPLB_EFORMAT, "format"},
      {"{\"version\": 2, \"nodes\": [{\"gpus\": 2}]}", EPLB_EFORMAT, "version"},
      {"{\"nodes\": [{\"gpus\": 2}]", EPLB_EFORMAT, "cluster.json:"},
      {"[1, 2]", EPLB_EFORMAT, "not a JSON object"},
      /* Synthetic descriptions over EPLB_MAX_SYNTHETIC_OBJECTS: refused before hwloc. */
      {"{\"nodes\": [{\"gpus\": 2, \"synthetic\": \"pack:256 core:256 pu:1\"}]}", EPLB_ERANGE,
       "65792 objects or more, over the limit of 4096"},
      {"{\"nodes\": [{\"gpus\": 2, \"synthetic\": \"pack:1000 core:1000 pu:1\"}]}", EPLB_ERANGE,
       "1001000 objects or more, over the limit of 4096"},
      {"{\"nodes\": [{\"gpus\": 2, \"synthetic\": \"pack:4294967296 pu:1\"}]}", EPLB_ERANGE,
       "4294967296 objects or more"},
      {"{\"nodes\": [{\"gpus\": 2, \"synthetic\": \"pack:100000 core:100000 numa:100000 "
       "core:100000 pu:100000\"}]}",
       EPLB_ERANGE, "objects or more"},
      {"{\"nodes\": [{\"gpus\": 2, \"synthetic\": \"pack:99999999999999999999999 pu:1\"}]}",
       EPLB_ERANGE, "over 2^64 objects"},
      {"{\"nodes\": [{\"gpus\": 1024, \"count\": 4096}]}", EPLB_ERANGE,
       "4194304 GPUs: over the limit of 65536"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[512];
    const char *fx = fixture("node-2numa-4gpu-2nic.xml");
    const char *at = strstr(cases[i].json, "FIXTURE");
    if (at)
      snprintf(text, sizeof text, "%.*s%s%s", (int)(at - cases[i].json), cases[i].json, fx, at + 7);
    else
      snprintf(text, sizeof text, "%s", cases[i].json);
    const char *p = write_tmp("cluster.json", text);
    eplb_cluster_t *c = NULL;
    eplb_status_t s = eplb_cluster_open(p, &c);
    ck_assert_msg(s == cases[i].status, "case %zu: status %s (%s)", i, eplb_status_name(s),
                  eplb_error_detail());
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(eplb_error_detail(), cases[i].detail), "case %zu: detail '%s'", i,
                  eplb_error_detail());
  }
}
END_TEST

/* `eplb topo show --json`'s document, from the library. */
START_TEST(cluster_json_has_every_node_and_gpu) {
  const char *p = write_tmp("json.json", "{\"format\": \"eplb-cluster\", \"version\": 1, "
                                         "\"nodes\": [{\"name\": \"a\", \"gpus\": 2, "
                                         "\"slots_per_gpu\": 3, \"intra_node_gbps\": 123.25}, "
                                         "{\"name\": \"b\", \"gpus\": 1}]}");
  eplb_cluster_t *c = NULL;
  ck_assert_int_eq(eplb_cluster_open(p, &c), EPLB_OK);
  size_t n = 0;
  ck_assert_int_eq(eplb_cluster_json(c, NULL, 0, &n), EPLB_OK);
  char *buf = malloc(n + 1);
  ck_assert_int_eq(eplb_cluster_json(c, buf, n + 1, NULL), EPLB_OK);
  ck_assert_uint_eq(strlen(buf), n);
  json_t *j = json_loads(buf, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "num_nodes")), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "num_gpus")), 3);
  json_t *nodes = json_object_get(j, "nodes");
  ck_assert_uint_eq(json_array_size(nodes), 2);
  json_t *a = json_array_get(nodes, 0), *b = json_array_get(nodes, 1);
  ck_assert_uint_eq(json_object_size(a), 11);
  ck_assert_str_eq(json_string_value(json_object_get(a, "name")), "a");
  ck_assert_str_eq(json_string_value(json_object_get(a, "source")), "uniform");
  ck_assert_int_eq(json_integer_value(json_object_get(a, "slots_per_gpu")), 3);
  ck_assert_double_eq(json_real_value(json_object_get(a, "intra_node_gbps")), 123.25);
  ck_assert_double_eq(json_real_value(json_object_get(b, "inter_node_gbps")),
                      EPLB_TOPO_DEFAULT_INTER_GBPS);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "first_gpu")), 2);
  json_t *g = json_array_get(json_object_get(b, "gpus"), 0);
  ck_assert_uint_eq(json_object_size(g), 8);
  ck_assert_int_eq(json_integer_value(json_object_get(g, "gpu")), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(g, "local_index")), 0);
  ck_assert_int_eq(json_integer_value(json_object_get(g, "nic")), -1);
  ck_assert_str_eq(json_string_value(json_object_get(g, "nic_affinity")),
                   eplb_nic_affinity_str(EPLB_NIC_UNKNOWN));
  json_decref(j);
  /* Cut like snprintf. */
  char small[5];
  ck_assert_int_eq(eplb_cluster_json(c, small, sizeof small, &n), EPLB_OK);
  ck_assert_str_eq(small, "{\"nu");
  ck_assert_uint_eq(n, strlen(buf));
  free(buf);
  ck_assert_int_eq(eplb_cluster_json(c, NULL, 4, &n), EPLB_EINVAL);
  ck_assert_int_eq(eplb_cluster_json(NULL, NULL, 0, &n), EPLB_EINVAL);
  eplb_cluster_destroy(c);
}
END_TEST

START_TEST(allocation_failures_are_clean) {
  eplb_test_alloc_install();
  for (long n = 0;; n++) {
    eplb_test_alloc_fail_after(n);
    eplb_cluster_t *c = NULL;
    eplb_status_t s = eplb_cluster_open(fixture("cluster-hetero.json"), &c);
    eplb_test_alloc_reset();
    if (s == EPLB_OK) {
      ck_assert_uint_eq(eplb_cluster_num_gpus(c), 13);
      eplb_cluster_destroy(c);
      break;
    }
    ck_assert_int_eq(s, EPLB_ENOMEM);
    ck_assert_ptr_null(c);
    ck_assert_int_lt(n, 1000);
  }
  eplb_allocator_set(NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("topo");
  TCase *tc = tcase_create("topo");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, short_form);
  tcase_add_test(tc, hwloc_xml_fixture_gives_numa_and_nearest_nic);
  tcase_add_test(tc, bad_cluster_files);
  tcase_add_test(tc, cluster_json_has_every_node_and_gpu);
  tcase_add_test(tc, allocation_failures_are_clean);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
