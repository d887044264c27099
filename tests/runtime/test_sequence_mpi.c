/* The collective calls' check across 2 and 4 MPI processes (run by meson
 * through mpirun, CK_FORK=no): one rank makes an extra, a missing or a
 * reordered call (record, route, record_counts, step_end, the application's
 * all-reduce), with the per-batch split on and off. Every rank must get
 * EPLB_ESHAPE from the same call, nothing may hang, the window statistics
 * must hold whole steps only (never a sum across mismatched calls), and the
 * steps after step_end must work on every rank alike. */
#include "tests/runtime/mpi_support.h"
#include "tests/support.h"

#include "eplb/runtime.h"

#include <string.h>

enum { L = 3, E = 8, K = 2, S = 4, TOK = 16 };

typedef enum fault {
  EXTRA_RECORD,     /* rank 1 records layer 0 twice (the reproducer) */
  MISSING_ROUTE,    /* rank 1 skips route of layer 1 */
  REORDERED,        /* rank 1 routes layers 1, 0, 2 */
  EXTRA_STEP_END,   /* rank 1 ends the step twice */
  MISSING_STEP_END, /* rank 1 does not end the step */
  EXTRA_ALLREDUCE,  /* rank 0 all-reduces once more */
  ROUTE_FOR_RECORD, /* rank 1 records where the others route: in step, that call only */
  NFAULTS
} fault_t;

static const char *const NAMES[] = {"extra record",    "missing route",    "reordered",
                                    "extra step_end",  "missing step_end", "extra allreduce",
                                    "record for route"};

static void gen(uint32_t step, uint32_t layer, int32_t *ids) {
  for (uint32_t t = 0; t < TOK; t++) {
    ids[t * K] = (int32_t)((step + layer + t) % 3);
    ids[t * K + 1] = (int32_t)(3 + (t * 7 + g_rank + step) % (E - 3));
  }
}

typedef struct tally {
  int first_err;  /* the first error status seen, 0 for none */
  long eshape;    /* calls that returned EPLB_ESHAPE */
  long other_err; /* calls that failed otherwise */
} tally_t;

static void note(tally_t *t, eplb_status_t st) {
  if (st == EPLB_OK)
    return;
  if (!t->first_err)
    t->first_err = st;
  t->eshape += st == EPLB_ESHAPE;
  t->other_err += st != EPLB_ESHAPE;
}

/* One step's calls on this rank; the faulty rank departs from them. */
static void step(eplb_runtime_t *rt, uint32_t s, fault_t f, bool bad, tally_t *t) {
  int32_t ids[TOK * K], slots[TOK * K];
  static const uint32_t order[] = {0, 1, 2}, reorder[] = {1, 0, 2};
  const uint32_t *ord = bad && f == REORDERED && g_rank == 1 ? reorder : order;
  for (uint32_t i = 0; i < L; i++) {
    uint32_t l = ord[i];
    gen(s, l, ids);
    if (bad && f == MISSING_ROUTE && g_rank == 1 && l == 1)
      continue;
    if (bad && f == ROUTE_FOR_RECORD && g_rank == 1 && l == 1)
      note(t, eplb_runtime_record(rt, l, ids, TOK));
    else
      note(t, eplb_runtime_route(rt, l, ids, TOK, (uint64_t)s * 1000, slots));
    if (bad && f == EXTRA_RECORD && g_rank == 1 && l == 0)
      note(t, eplb_runtime_record(rt, 0, ids, TOK));
  }
  double v[2] = {1, 2};
  note(t, eplb_runtime_allreduce(rt, v, 2, EPLB_REDUCE_SUM));
  if (bad && f == EXTRA_ALLREDUCE && g_rank == 0)
    note(t, eplb_runtime_allreduce(rt, v, 2, EPLB_REDUCE_SUM));
  if (!(bad && f == MISSING_STEP_END && g_rank == 1))
    note(t, eplb_runtime_step_end(rt));
  if (bad && f == EXTRA_STEP_END && g_rank == 1)
    note(t, eplb_runtime_step_end(rt));
}

/* Each layer's window total is a whole number of steps' tokens (TOK * K per
 * rank a step), the same number for every layer: no step is half counted
 * and no call's counts were summed with another kind of message. */
static long whole_steps(eplb_runtime_t *rt) {
  double w[L * E];
  if (eplb_runtime_window(rt, EPLB_WINDOW_SUM, w) != EPLB_OK)
    return -1;
  double per = (double)TOK * K * g_size, n0 = -1;
  for (uint32_t l = 0; l < L; l++) {
    double sum = 0;
    for (uint32_t e = 0; e < E; e++)
      sum += w[l * E + e];
    double n = sum / per;
    if (n != (double)(long)n || (n0 >= 0 && n != n0))
      return -1;
    n0 = n;
  }
  return (long)n0;
}

static uint64_t steps_of(eplb_runtime_t *rt) {
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  return m.steps;
}

static void run_fault(fault_t f, int split) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  eplb_runtime_config_default(&c);
  c.num_layers = L, c.num_experts = E, c.topk = K, c.slots_per_rank = S;
  c.rank = g_rank, c.world_size = g_size, c.ranks_per_node = g_size > 2 ? 2 : 1;
  c.comm.kind = EPLB_COMM_MPI;
  c.comm.mpi_comm = eplb_runtime_mpi_world();
  c.split_per_batch = split;
  c.policy.window_steps = 64;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  tally_t before = {0}, bad = {0}, after = {0};
  for (uint32_t s = 0; s < 3; s++)
    step(rt, s, f, false, &before);
  step(rt, 3, f, true, &bad);
  /* Out of step, the calls up to each rank's next step_end fail at once;
   * a rank that ended one step more or less is then a step ahead or behind
   * in its own loop, so the loop follows the runtime's agreed step count. */
  step(rt, 4, f, false, &bad);
  long at_bad = whole_steps(rt);
  uint64_t from = steps_of(rt);
  for (int guard = 0; steps_of(rt) < 10 && guard < 20; guard++)
    step(rt, (uint32_t)steps_of(rt), f, false, &after);
  long at_end = whole_steps(rt);
  ck_assert_msg(all_ok(before.first_err == 0 && after.first_err == 0), "%s, split %d: clean steps",
                NAMES[f], split);
  ck_assert_msg(all_ok(bad.first_err == EPLB_ESHAPE && bad.other_err == 0), "%s, split %d",
                NAMES[f], split);
  /* Whole steps only: one step is lost, the fault's (in step, one failing
   * call costs its step alone; out of step, the step of each rank's next
   * step_end); every later step counts. */
  ck_assert_msg(all_ok(at_bad >= 3 && at_bad <= 4 && at_end == at_bad + (long)(10 - from) &&
                       at_end == 9 && steps_of(rt) == 10),
                "%s, split %d: %ld whole steps after the fault, %ld at the end (from step %d)",
                NAMES[f], split, at_bad, at_end, (int)from);
  ck_assert(all_same(steps_of(rt)));
  double w[L * E];
  eplb_runtime_window(rt, EPLB_WINDOW_SUM, w);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof w; i++)
    h = (h ^ ((const unsigned char *)w)[i]) * 1099511628211ull;
  ck_assert(all_same(h));
  eplb_runtime_destroy(rt);
}

START_TEST(faults_with_split) {
  for (int f = 0; f < NFAULTS; f++)
    run_fault((fault_t)f, 1);
}
END_TEST

/* Without the split record and route are each rank's own: the faults of
 * the collective calls are step_end's and the application's all-reduce. */
START_TEST(faults_without_split) {
  const fault_t faults[] = {EXTRA_STEP_END, MISSING_STEP_END, EXTRA_ALLREDUCE};
  for (size_t i = 0; i < sizeof faults / sizeof *faults; i++)
    run_fault(faults[i], 0);
}
END_TEST

int main(int argc, char **argv) {
  const uint32_t sizes[] = {2, 4};
  if (mpi_test_init(&argc, &argv, "test_sequence_mpi", sizes, 2))
    return 1;
  Suite *s = suite_create("runtime-sequence-mpi");
  TCase *tc = tcase_create("sequence");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, faults_with_split);
  tcase_add_test(tc, faults_without_split);
  suite_add_tcase(s, tc);
  return mpi_test_run(s);
}
