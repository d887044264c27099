/* tests/runtime/mpi_support.c — see mpi_support.h. */
#include "tests/runtime/mpi_support.h"
#include "tests/support.h"

#include <stdio.h>

uint32_t g_rank, g_size;
eplb_runtime_t *g_verdict;

int mpi_test_init(int *argc, char ***argv, const char *who, const uint32_t *sizes, int n) {
  int fits = 0;
  if (eplb_runtime_mpi_init(argc, argv, &g_rank, &g_size) == EPLB_OK)
    for (int i = 0; i < n; i++)
      fits |= g_size == sizes[i];
  if (!fits) {
    fprintf(stderr, "%s: needs MPI with %u ranks (or another size it lists)\n", who, sizes[0]);
    return 1;
  }
  if (g_rank != 0 && !freopen("/dev/null", "w", stdout))
    return 1;
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = 1, c.num_experts = 1, c.topk = 1, c.slots_per_rank = 1;
  c.rank = g_rank, c.world_size = g_size, c.ranks_per_node = g_size;
  c.comm.kind = EPLB_COMM_MPI;
  c.comm.mpi_comm = eplb_runtime_mpi_world();
  c.split_per_batch = 0;
  if (eplb_runtime_create(&c, NULL, &g_verdict) != EPLB_OK) {
    fprintf(stderr, "%s: rank %u: %s\n", who, g_rank, eplb_error_detail());
    return 1;
  }
  return 0;
}

int mpi_test_run(Suite *s) {
  int rc = eplb_test_run(s);
  eplb_runtime_destroy(g_verdict);
  eplb_runtime_mpi_finalize();
  return rc;
}

int all_ok(int ok) {
  double v = ok ? 1 : 0;
  ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, &v, 1, EPLB_REDUCE_MIN), EPLB_OK);
  return v == 1;
}

int all_same(uint64_t h) {
  double lo[2] = {(double)(h & 0xFFFFFFFFu), (double)(h >> 32)}, hi[2] = {lo[0], lo[1]};
  ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, lo, 2, EPLB_REDUCE_MIN), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, hi, 2, EPLB_REDUCE_MAX), EPLB_OK);
  return lo[0] == hi[0] && lo[1] == hi[1];
}
