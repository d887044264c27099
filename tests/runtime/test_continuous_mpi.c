/* Continuous re-placement across 4 MPI processes on 2 nodes (run by meson
 * through mpirun, CK_FORK=no): slots move every step towards a changing
 * mix, their weights copied between the ranks' real buffers beside serving;
 * every mapped token is checked against the bytes of its slot at the
 * moment its layer is routed; failed, stalled and timed-out copies, in
 * place and staged; damaged copies; experts kept as several tensors;
 * config agreement. */
#include "tests/runtime/mpi_support.h"
#include "tests/support.h"

#include "eplb/plan.h"
#include "eplb/runtime.h"
#include "eplb/runtime_device.h"
#include "eplb/trace.h"
#include "eplb/runtime_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { L = 4, E = 8, K = 2, S = 4, B = 64, TOK = 48 };

static uint8_t buf[L][S][B];

/* Skewed tokens whose hot experts change every 6 steps. */
static void gen_tokens(uint32_t step, uint32_t layer, int32_t *ids) {
  uint64_t st = 0x9e3779b97f4a7c15ull ^ ((uint64_t)step << 20 | (uint64_t)layer << 8 | g_rank);
  uint32_t hot = (step / 6 * 3 + layer) % E;
  for (uint32_t t = 0; t < TOK; t++) {
    uint32_t a = eplb_test_xorshift(&st) % 3 ? hot : (uint32_t)(eplb_test_xorshift(&st) % E);
    uint32_t b = (a + 1 + (uint32_t)(eplb_test_xorshift(&st) % (E - 1))) % E;
    ids[t * K] = (int32_t)a, ids[t * K + 1] = (int32_t)b;
  }
}

static void cfg(eplb_runtime_config_t *c) {
  eplb_runtime_config_default(c);
  c->num_layers = L, c->num_experts = E, c->topk = K, c->slots_per_rank = S;
  c->rank = g_rank, c->world_size = g_size, c->ranks_per_node = 2;
  c->comm.kind = EPLB_COMM_MPI;
  c->comm.mpi_comm = eplb_runtime_mpi_world();
  c->expert_bytes = B;
  c->continuous_window = 1;
  c->continuous.slots_per_gpu = 2;
}

/* The expert whose pattern a buffer holds (1 + e everywhere), else -1. */
static double tag_of(const uint8_t *b) {
  for (uint32_t i = 1; i < B; i++)
    if (b[i] != b[0])
      return -1;
  return b[0] - 1.0;
}

/* With g_tensors a slot's expert is three tensors, as serving stacks keep
 * it: 40 bytes of buf, 16 and 8 bytes of tb (apart), each filled with the
 * expert's pattern. */
static int g_tensors;
static uint8_t tb[L][S][B];

static eplb_runtime_tensor_t pieces(uint32_t l, uint32_t s, int i) {
  eplb_runtime_tensor_t t[3] = {{buf[l][s], 40}, {tb[l][s], 16}, {tb[l][s] + 32, 8}};
  return t[i];
}

/* The expert whose pattern a slot's weights hold, else -1. */
static double slot_tag(uint32_t l, uint32_t s) {
  if (!g_tensors)
    return tag_of(buf[l][s]);
  uint8_t v = buf[l][s][0];
  for (int i = 0; i < 3; i++) {
    eplb_runtime_tensor_t t = pieces(l, s, i);
    for (size_t j = 0; j < t.bytes; j++)
      if (((const uint8_t *)t.ptr)[j] != v)
        return -1;
  }
  return v - 1.0;
}

static int make(const eplb_runtime_config_t *c, eplb_runtime_t **rt) {
  int ok = eplb_runtime_create(c, NULL, rt) == EPLB_OK;
  for (uint32_t l = 0; ok && l < L; l++) {
    const int32_t *p2l;
    ok &= eplb_runtime_layer_plan(*rt, l, &p2l, NULL) == EPLB_OK;
    for (uint32_t s = 0; s < S; s++) {
      memset(buf[l][s], 1 + p2l[g_rank * S + s], B);
      memset(tb[l][s], 1 + p2l[g_rank * S + s], B);
      eplb_runtime_tensor_t t[3] = {pieces(l, s, 0), pieces(l, s, 1), pieces(l, s, 2)};
      ok &= (g_tensors ? eplb_runtime_register_tensors(*rt, l, s, t, 3)
                       : eplb_runtime_register_weights(*rt, l, s, buf[l][s], B)) == EPLB_OK;
    }
  }
  return ok;
}

/* With g_device the ranks it marks route on their (emulated) device; with
 * g_fail_upload rank 1's next device upload fails at the first step_end
 * that resolves a set of moves (one is in flight; a 64-byte copy lands
 * well within the step's sleep). */
static uint32_t g_device;
static int g_fail_upload;

typedef struct run {
  long violations, bad_status, differ; /* differ: ranks disagreed (status, shares) */
  long status[32];                     /* step_end statuses seen, by -code */
} run_t;

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Steps [from, to) of the mix: every layer routed, then checked: each
 * token's slot holds its expert now (tags gathered after the route), the
 * fresh shares are the same on every rank, step_end agrees everywhere. */
static void steps(eplb_runtime_t *rt, uint32_t from, uint32_t to, run_t *r) {
  const uint32_t R = S * g_size;
  int32_t ids[TOK * K], slots[TOK * K];
  double tags[S * 4];
  for (uint32_t step = from; step < to; step++) {
    for (uint32_t l = 0; l < L; l++) {
      gen_tokens(step, l, ids);
      uint64_t base = ((uint64_t)step * g_size + g_rank) * TOK;
      eplb_status_t rs = g_device >> g_rank & 1
                             ? eplb_runtime_device_route(rt, l, ids, TOK, base, slots)
                             : eplb_runtime_route(rt, l, ids, TOK, base, slots);
      r->bad_status += rs != EPLB_OK;
      memset(tags, 0, sizeof tags);
      for (uint32_t s = 0; s < S; s++)
        tags[g_rank * S + s] = slot_tag(l, s);
      ck_assert_int_eq(eplb_runtime_allreduce(rt, tags, R, EPLB_REDUCE_SUM), EPLB_OK);
      for (uint32_t i = 0; i < TOK * K; i++)
        r->violations += tags[slots[i]] != ids[i];
      const double *share;
      ck_assert_int_eq(eplb_runtime_layer_split(rt, l, &share, NULL, NULL), EPLB_OK);
      if (!g_device) /* a device rank's shares live on its device */
        r->differ += !all_same(fnv(share, R * sizeof *share, 1469598103934665603ull));
    }
    /* A step takes time on a GPU: copies and stalls are measured against it. */
    nanosleep(&(struct timespec){0, 8 * 1000 * 1000}, NULL);
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    if (g_fail_upload && m.migrating) {
      g_fail_upload = 0; /* on every rank: the set in flight is the same everywhere */
      if (g_rank == 1)
        ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 1, 0), EPLB_OK);
    }
    eplb_status_t st = eplb_runtime_step_end(rt);
    r->status[st <= 0 && st > -32 ? -st : 31]++;
    r->differ += !all_same((uint64_t)st);
  }
}

/* After the last routes, two step_ends settle what is in flight; then each
 * of this rank's slots in service holds its expert. */
static long settled_mismatches(eplb_runtime_t *rt) {
  long bad = 0;
  for (int i = 0; i < 2; i++)
    eplb_runtime_step_end(rt);
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *p2l;
    const double *share;
    eplb_runtime_layer_plan(rt, l, &p2l, &share);
    for (uint32_t s = 0; s < S; s++)
      bad += share[g_rank * S + s] > 0 && slot_tag(l, s) != p2l[g_rank * S + s];
  }
  return bad;
}

START_TEST(moves_follow_the_mix) {
  for (int in_place = 0; in_place < 2; in_place++) {
    eplb_runtime_config_t c;
    eplb_runtime_t *rt = NULL;
    cfg(&c);
    c.continuous_in_place = in_place;
    ck_assert(all_ok(make(&c, &rt)));
    run_t r = {0};
    steps(rt, 0, 30, &r);
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    ck_assert(all_ok(r.violations == 0 && r.bad_status == 0 && r.differ == 0));
    ck_assert(all_ok(r.status[-EPLB_OK] == 30));
    ck_assert(all_ok(m.continuous_moves > 4 && m.slots_moved == m.continuous_moves));
    ck_assert(all_ok(m.continuous_failed == 0 && m.bytes_moved[1] + m.bytes_moved[2] > 0));
    ck_assert(all_ok(m.layers_switched == 0)); /* slots move, not whole layers */
    ck_assert(all_ok(settled_mismatches(rt) == 0));
    eplb_runtime_destroy(rt);
  }
}
END_TEST

/* A stall shorter than the deadline: the set waits (serving goes on, the
 * slots keep their old expert or, in place, carry nothing) and lands late. */
START_TEST(a_stalled_copy_waits) {
  for (int in_place = 0; in_place < 2; in_place++) {
    eplb_runtime_config_t c;
    eplb_runtime_t *rt = NULL;
    cfg(&c);
    c.continuous_in_place = in_place;
    c.transfer_timeout_ms = 20000;
    ck_assert(all_ok(make(&c, &rt)));
    ck_assert_int_eq(eplb_runtime_inject_transfer_stall(rt, 100), EPLB_OK);
    run_t r = {0};
    steps(rt, 0, 30, &r);
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    ck_assert(all_ok(r.violations == 0 && r.differ == 0 && r.status[-EPLB_OK] == 30));
    ck_assert(all_ok(m.continuous_waits > 0 && m.continuous_failed == 0));
    ck_assert(all_ok(m.continuous_moves > 0));
    ck_assert(all_ok(settled_mismatches(rt) == 0));
    eplb_runtime_destroy(rt);
  }
}
END_TEST

/* Copies that fail (injected on rank 3, every layer) or time out: dropped
 * on every rank with the same status; staged, the slots keep serving their
 * old expert; in place, a slot is copied again once, then abandoned (out of
 * service for good). Later moves go on. */
START_TEST(failed_and_timed_out_copies) {
  for (int in_place = 0; in_place < 2; in_place++) {
    eplb_runtime_config_t c;
    eplb_runtime_t *rt = NULL;
    cfg(&c);
    c.continuous_in_place = in_place;
    c.transfer_timeout_ms = 100;
    ck_assert(all_ok(make(&c, &rt)));
    run_t r = {0};
    steps(rt, 0, 4, &r);
    for (uint32_t step = 4; step < 16; step++) { /* armed every step: a retry fails too */
      for (uint32_t l = 0; g_rank == 3 && l < L; l++)
        eplb_runtime_inject_transfer_failure(rt, l);
      steps(rt, step, step + 1, &r);
    }
    eplb_runtime_inject_transfer_stall(rt, 1500);
    steps(rt, 16, 40, &r);
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    ck_assert(all_ok(r.violations == 0 && r.differ == 0 && r.bad_status == 0));
    ck_assert(all_ok(r.status[-EPLB_ECOMM] >= 1 && r.status[-EPLB_ETIMEOUT] >= 1));
    ck_assert(all_ok(r.status[-EPLB_OK] + r.status[-EPLB_ECOMM] + r.status[-EPLB_ETIMEOUT] == 40));
    ck_assert(all_ok(m.continuous_failed >= 2 && m.continuous_moves > 4));
    ck_assert(all_ok(in_place ? m.continuous_abandoned >= 1 : m.continuous_abandoned == 0));
    ck_assert(all_ok(settled_mismatches(rt) == 0));
    /* An abandoned slot stays out of service: share 0, no token (checked above). */
    eplb_runtime_destroy(rt);
  }
}
END_TEST

/* Copies that arrive damaged (injected on every rank and layer, for a while):
 * each fails its source's checksum, so it never serves, on any rank; staged,
 * the slots keep their old expert, in place the slot stays out of service
 * (copied again once). Without the check a damaged copy would land and the
 * tokens routed to it would meet the wrong bytes (a violation below). */
START_TEST(damaged_copies_never_serve) {
  for (int in_place = 0; in_place < 2; in_place++) {
    eplb_runtime_config_t c;
    eplb_runtime_t *rt = NULL;
    cfg(&c);
    c.continuous_in_place = in_place;
    ck_assert(all_ok(make(&c, &rt)));
    run_t r = {0};
    steps(rt, 0, 4, &r);
    for (uint32_t step = 4; step < 14; step++) {
      for (uint32_t l = 0; l < L; l++)
        ck_assert_int_eq(eplb_runtime_inject_transfer_corruption(rt, l), EPLB_OK);
      steps(rt, step, step + 1, &r);
    }
    steps(rt, 14, 30, &r);
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    ck_assert(all_ok(r.violations == 0 && r.differ == 0 && r.bad_status == 0));
    ck_assert(all_ok(r.status[-EPLB_ECOMM] >= 1));
    ck_assert(all_ok(r.status[-EPLB_OK] + r.status[-EPLB_ECOMM] == 30));
    ck_assert(all_ok(m.continuous_failed >= 1 && m.continuous_moves > 4));
    ck_assert(all_ok(settled_mismatches(rt) == 0));
    eplb_runtime_destroy(rt);
  }
  ck_assert_int_eq(eplb_runtime_inject_transfer_corruption(NULL, 0), EPLB_EINVAL);
}
END_TEST

/* An expert kept as three tensors (vLLM's and SGLang's w13, w2, scales):
 * continuous moves, staged and in place, with copies damaged on arrival
 * for a while, and whole-layer migrations, move all three together; no
 * token ever meets a slot whose tensors hold different experts. Layouts
 * that differ are refused. */
START_TEST(several_tensors_a_slot) {
  g_tensors = 1;
  for (int mode = 0; mode < 3; mode++) {
    eplb_runtime_config_t c;
    eplb_runtime_t *rt = NULL;
    cfg(&c);
    c.continuous_in_place = mode == 1;
    if (mode == 2) { /* whole-layer migrations, every 4 steps */
      c.continuous_window = 0;
      c.policy.interval_steps = 4, c.policy.window_steps = 4, c.policy.gain_threshold = 0;
    }
    ck_assert(all_ok(make(&c, &rt)));
    run_t r = {0};
    steps(rt, 0, 6, &r);
    for (uint32_t step = 6; step < 12; step++) {
      for (uint32_t l = 0; mode < 2 && l < L; l++)
        eplb_runtime_inject_transfer_corruption(rt, l);
      steps(rt, step, step + 1, &r);
    }
    steps(rt, 12, 30, &r);
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    ck_assert(all_ok(r.violations == 0 && r.bad_status == 0 && r.differ == 0));
    ck_assert(all_ok(m.bytes_moved[1] + m.bytes_moved[2] > 0));
    ck_assert(all_ok(mode < 2 ? m.continuous_moves > 4 && m.continuous_failed >= 1
                              : m.layers_switched >= 1));
    ck_assert(all_ok(settled_mismatches(rt) == 0));
    eplb_runtime_destroy(rt);
  }
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  cfg(&c);
  ck_assert(all_ok(make(&c, &rt)));
  eplb_runtime_tensor_t t[3] = {pieces(0, 0, 0), pieces(0, 0, 1), pieces(0, 0, 2)};
  t[1].bytes = 8, t[2].bytes = 16; /* the same sum, another layout */
  ck_assert_int_eq(eplb_runtime_register_tensors(rt, 0, 1, t, 3), EPLB_EINVAL);
  t[2].bytes = 8; /* the sum differs from expert_bytes */
  ck_assert_int_eq(eplb_runtime_register_tensors(rt, 0, 1, t, 3), EPLB_EINVAL);
  ck_assert_int_eq(eplb_runtime_register_tensors(rt, 0, 1, t, 0), EPLB_EINVAL);
  ck_assert_int_eq(eplb_runtime_register_tensors(rt, L, 0, t, 3), EPLB_ERANGE);
  eplb_runtime_tensor_t one = {buf[0][1], B};
  ck_assert_int_eq(eplb_runtime_register_tensors(rt, 0, 1, &one, 1), EPLB_EINVAL);
  eplb_runtime_destroy(rt);
  g_tensors = 0;
}
END_TEST

/* The default (EPLB_CONTINUOUS_AUTO): several ranks on MPI with the split
 * move slots continuously; periodic replans (interval_steps) turn it off;
 * a device on some ranks turns it off on every rank (agreed at create, so
 * step_end's collectives stay in step: no rank hangs). */
START_TEST(auto_default) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  cfg(&c);
  c.continuous_window = EPLB_CONTINUOUS_AUTO;
  ck_assert(all_ok(make(&c, &rt)));
  run_t r = {0};
  steps(rt, 0, 20, &r);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(r.violations == 0 && r.differ == 0 && r.status[-EPLB_OK] == 20));
  ck_assert(all_ok(m.continuous_moves > 0 && m.layers_switched == 0));
  eplb_runtime_destroy(rt);
  cfg(&c);
  c.continuous_window = EPLB_CONTINUOUS_AUTO;
  c.policy.interval_steps = 4;
  ck_assert(all_ok(make(&c, &rt)));
  memset(&r, 0, sizeof r);
  steps(rt, 0, 12, &r);
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(r.violations == 0 && m.continuous_moves == 0 && m.layers_switched > 0));
  eplb_runtime_destroy(rt);
  /* The device split's settings (one node a rank, whole tokens), a device on
   * the odd ranks only. */
  cfg(&c);
  c.continuous_window = EPLB_CONTINUOUS_AUTO;
  c.ranks_per_node = 1, c.local_first = 0, c.split_whole_tokens = 1;
  c.device.kind = g_rank % 2 ? EPLB_DEVICE_EMULATED : EPLB_DEVICE_NONE;
  rt = NULL;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  int ok = 1;
  for (int i = 0; i < 4; i++)
    ok &= eplb_runtime_step_end(rt) == EPLB_OK;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(ok && m.continuous_moves == 0 && m.steps == 4));
  eplb_runtime_destroy(rt);
}
END_TEST

/* Staged copies with a device on every rank, then on the odd ranks only:
 * the moves' tables go live on the devices at step_end, after every rank's
 * upload succeeded; an upload that fails on one rank drops its layer's
 * moves on every rank (EPLB_EDEVICE), and nothing maps to a slot that
 * does not hold its expert. */
START_TEST(with_a_device) {
  const uint32_t masks[] = {0xffffffffu, 0xaaaaaaaau};
  for (int i = 0; i < 2; i++) {
    eplb_runtime_config_t c;
    eplb_runtime_t *rt = NULL;
    cfg(&c);
    c.ranks_per_node = 1, c.local_first = 0, c.split_whole_tokens = 1; /* the device split's */
    g_device = masks[i];
    c.device.kind = g_device >> g_rank & 1 ? EPLB_DEVICE_EMULATED : EPLB_DEVICE_NONE;
    ck_assert(all_ok(make(&c, &rt)));
    run_t r = {0};
    steps(rt, 0, 12, &r);
    g_fail_upload = 1;
    steps(rt, 12, 30, &r);
    eplb_runtime_metrics_t m;
    eplb_runtime_metrics(rt, &m);
    ck_assert(all_ok(r.violations == 0 && r.bad_status == 0 && r.differ == 0));
    ck_assert(all_ok(!g_fail_upload && r.status[-EPLB_EDEVICE] == 1 && r.status[-EPLB_OK] == 29));
    ck_assert(all_ok(m.continuous_moves > 4 && m.continuous_failed > 0));
    ck_assert(all_ok(m.layers_switched == 0));
    ck_assert(all_ok(settled_mismatches(rt) == 0));
    eplb_runtime_destroy(rt);
  }
  g_device = 0;
}
END_TEST

/* A budget of 0 moves nothing; a window longer than the history uses what
 * exists; a config that differs between ranks is refused on every rank. */
START_TEST(budget_window_and_agreement) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  cfg(&c);
  c.continuous.slots_per_gpu = 0;
  ck_assert(all_ok(make(&c, &rt)));
  run_t r = {0};
  steps(rt, 0, 8, &r);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(m.continuous_moves == 0 && r.violations == 0));
  eplb_runtime_destroy(rt);
  cfg(&c);
  c.continuous_window = 30;
  c.policy.window_steps = 30;
  ck_assert(all_ok(make(&c, &rt)));
  memset(&r, 0, sizeof r);
  steps(rt, 0, 8, &r);
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(m.continuous_moves > 0 && r.violations == 0 && r.status[-EPLB_OK] == 8));
  eplb_runtime_destroy(rt);
  cfg(&c);
  c.continuous.max_per_layer = g_rank == 2 ? 3 : 2;
  rt = NULL;
  eplb_status_t st = eplb_runtime_create(&c, NULL, &rt);
  ck_assert(all_ok(st == EPLB_EINVAL && rt == NULL));
}
END_TEST

int main(int argc, char **argv) {
  const uint32_t sizes[] = {4};
  if (mpi_test_init(&argc, &argv, "test_continuous_mpi", sizes, 1))
    return 1;
  Suite *s = suite_create("runtime-continuous-mpi");
  TCase *tc = tcase_create("continuous");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, moves_follow_the_mix);
  tcase_add_test(tc, a_stalled_copy_waits);
  tcase_add_test(tc, failed_and_timed_out_copies);
  tcase_add_test(tc, damaged_copies_never_serve);
  tcase_add_test(tc, several_tensors_a_slot);
  tcase_add_test(tc, auto_default);
  tcase_add_test(tc, with_a_device);
  tcase_add_test(tc, budget_window_and_agreement);
  suite_add_tcase(s, tc);
  return mpi_test_run(s);
}
