/* The per-batch split on the emulated device across real MPI processes
 * (#17; 2 or 4 ranks through mpirun, CK_FORK=no). Each rank routes its own
 * share of every ESFT step through a device runtime (its all-reduce runs on
 * the host communicator at the point of the stream where the NCCL one would
 * be enqueued) and through two host runtimes (fractional, and in whole
 * tokens: split_whole_tokens, which must route the device's slots on every
 * call). Rank 0 prints the TAP; every verdict is all-reduced so that the
 * ranks pass or fail together and stay in step. */
#include "tests/runtime/mpi_support.h"
#include "tests/support.h"

#include "eplb/plan.h"
#include "eplb/runtime.h"
#include "eplb/trace.h"
#include "eplb/runtime_device.h"
#include "eplb/runtime_testing.h"
#include "kernels/dispatch_math.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* topk_ids.npy of the ESFT sample: uint8 [tokens][26][6], 64 experts. */
enum { EL = 26, EE = 64, EK = 6, ET = 256 /* tokens per step */, R = 80 };
/* The split's status words when its guard stops it (kernels/split_math.h,
 * EPLB__SPLIT_BAD_IDS and _MISMATCH; that header cannot be included with
 * runtime/runtime.h). */
enum { SPLIT_BAD_IDS = 4, SPLIT_MISMATCH = 5 };

static void esft_cfg(eplb_runtime_config_t *c, eplb_device_kind_t kind) {
  eplb_runtime_config_default(c);
  c->num_layers = EL, c->num_experts = EE, c->topk = EK;
  c->slots_per_rank = R / g_size;
  c->rank = g_rank, c->world_size = g_size, c->ranks_per_node = g_size;
  c->comm.kind = EPLB_COMM_MPI;
  c->comm.mpi_comm = eplb_runtime_mpi_world();
  c->policy.window_steps = 8;
  c->split_per_batch = 1;
  c->device.kind = kind;
  c->continuous_window = 0; /* host and device runtimes compared on one placement */
}

/* The ids of layer l of tokens t0 .. t0 + n of the trace ([n][EK] int32). */
static void layer_ids(const uint8_t *d, size_t t0, size_t n, uint32_t l, int32_t *ids) {
  for (size_t t = 0; t < n; t++)
    for (int j = 0; j < EK; j++)
      ids[t * EK + j] = d[((t0 + t) * EL + l) * EK + j];
}

/* The host route's quota rule (runtime/batch.c, quota_map), the oracle of
 * the device route (as in test_device.c). */
static void host_quota(const int32_t *p2l, const double *share, uint32_t layer, const int32_t *ids,
                       size_t n, uint64_t token_base, int32_t *out) {
  static uint32_t c[EE], nc[EE], qq[EE][R], cur[EE];
  static int32_t cand[EE][R];
  memset(c, 0, sizeof c), memset(nc, 0, sizeof nc);
  for (uint32_t r = 0; r < R; r++)
    cand[p2l[r]][nc[p2l[r]]++] = (int32_t)r;
  for (size_t x = 0; x < n; x++)
    c[ids[x]]++;
  uint64_t th = eplb__dispatch_token_hash(token_base, layer);
  for (uint32_t e = 0; e < EE; e++) {
    double phi = eplb__dispatch_u(th, e) / 65536.0, cum = 0, below = 0;
    uint32_t given = 0, last = 0;
    cur[e] = 0;
    for (uint32_t j = 0; j < nc[e]; j++) {
      double sh = share[cand[e][j]];
      qq[e][j] = 0;
      if (!(sh > 0))
        continue;
      cum += sh * c[e];
      double next = floor(cum + phi);
      uint32_t k = next > below ? (uint32_t)(next - below) : 0;
      k = k > c[e] - given ? c[e] - given : k;
      qq[e][j] = k, given += k, last = j, below = next;
    }
    if (nc[e])
      qq[e][last] += c[e] - given;
  }
  for (size_t x = 0; x < n; x++) {
    uint32_t e = (uint32_t)ids[x];
    while (!qq[e][cur[e]])
      cur[e]++;
    out[x] = cand[e][cur[e]];
    qq[e][cur[e]]--;
  }
}

static int same_windows(const eplb_runtime_t *a, const eplb_runtime_t *b) {
  static double wa[EL * EE], wb[EL * EE];
  int ok = 1;
  for (int kind = 0; kind < 2; kind++) {
    ok &= eplb_runtime_window(a, (eplb_runtime_window_kind_t)kind, wa) == EPLB_OK;
    ok &= eplb_runtime_window(b, (eplb_runtime_window_kind_t)kind, wb) == EPLB_OK;
    ok &= !memcmp(wa, wb, sizeof wa);
  }
  return ok;
}

/* One call of layer l at step s on every rank: the host runtimes (rt[0]
 * fractional, rt[1] in whole tokens) and the device runtime (rt[2]) route
 * this rank's block of the step's tokens; the device's shares must be the
 * split of the step's global counts (the reference, warm from ref_share
 * [R]), its slots the host quota rule's on them; the whole-token host's
 * shares, T* and slots the device's on every call; the fractional host's
 * slots the device's when its shares are the same. *same counts those
 * calls. */
static int one_call(eplb_runtime_t *const rt[3], const uint8_t *data, size_t s, uint32_t l,
                    double *ref_share, void *ws, size_t *same, uint64_t *h) {
  static int32_t all[ET * EK], hs[ET * EK], ds[ET * EK], wts[ET * EK], want[ET * EK];
  eplb_runtime_t *host = rt[0], *whole = rt[1], *dev = rt[2];
  static uint32_t counts[EE];
  size_t n = ET / g_size, t0 = s * ET + g_rank * n;
  const int32_t *ids = all + g_rank * n * EK;
  int ok = 1;
  layer_ids(data, s * ET, ET, l, all);
  ok &= eplb_runtime_route(host, l, ids, (uint32_t)n, t0, hs) == EPLB_OK;
  ok &= eplb_runtime_route(whole, l, ids, (uint32_t)n, t0, wts) == EPLB_OK;
  ok &= eplb_runtime_device_route(dev, l, ids, (uint32_t)n, t0, ds) == EPLB_OK;
  const int32_t *p2l;
  const double *psh, *hsh, *wsh, *dsh, *dt;
  const uint32_t *dst;
  double t_ref = 0, ht = 0, wt = 0;
  uint32_t status = 9;
  eplb_runtime_layer_plan(dev, l, &p2l, &psh);
  memset(counts, 0, sizeof counts);
  for (size_t i = 0; i < ET * EK; i++)
    counts[all[i]]++;
  eplb__split_ref(p2l, EE, g_size, R / g_size, counts, ref_share, &t_ref, &status, ws, 32, NULL);
  ok &= eplb_runtime_layer_split(host, l, &hsh, NULL, &ht) == EPLB_OK;
  ok &= eplb_runtime_layer_split(whole, l, &wsh, NULL, &wt) == EPLB_OK;
  ok &= eplb__device_split_state(dev, l, &dsh, &dt, &dst) == EPLB_OK;
  ok &= status == 0 && *dst == 0 && *dt == t_ref && !memcmp(dsh, ref_share, R * sizeof *dsh);
  ok &= fabs(ht - t_ref) <= 1e-9 * t_ref;
  host_quota(p2l, dsh, l, ids, n * EK, t0, want);
  ok &= !memcmp(ds, want, n * EK * sizeof *ds);
  ok &= !memcmp(wsh, dsh, R * sizeof *dsh) && wt == *dt && !memcmp(wts, ds, n * EK * sizeof *ds);
  if (!memcmp(hsh, dsh, R * sizeof *dsh)) {
    ok &= !memcmp(hs, ds, n * EK * sizeof *ds);
    ++*same;
  }
  *h = eplb__fnv1a(*h, dsh, R * sizeof *dsh);
  *h = eplb__fnv1a(*h, dt, sizeof *dt);
  return ok;
}

START_TEST(esft_split_on_every_rank) {
  size_t T = 0;
  uint8_t *data = eplb_test_load_esft(&T);
  eplb_runtime_config_t c;
  eplb_runtime_t *rt[3] = {NULL, NULL, NULL}; /* host, host in whole tokens, device */
  esft_cfg(&c, EPLB_DEVICE_NONE);
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt[0]) == EPLB_OK));
  c.split_whole_tokens = 1;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt[1]) == EPLB_OK));
  esft_cfg(&c, EPLB_DEVICE_EMULATED);
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt[2]) == EPLB_OK));
  eplb_runtime_t *host = rt[0], *whole = rt[1], *dev = rt[2];
  size_t wsb = eplb__cuda_split_workspace_bytes(EE, g_size, R / g_size);
  void *ws = malloc(wsb);
  static double ref_share[EL][R];
  for (uint32_t l = 0; l < EL; l++) {
    const int32_t *p2l;
    const double *psh;
    eplb_runtime_layer_plan(dev, l, &p2l, &psh);
    memcpy(ref_share[l], psh, sizeof ref_share[l]);
  }
  size_t steps = T / ET, same = 0;
  int ok = ws && steps >= 100;
  for (size_t s = 0; s < steps; s++) {
    uint64_t h = EPLB__FNV1A_BASIS;
    for (uint32_t l = 0; l < EL; l++)
      ok &= one_call(rt, data, s, l, ref_share[l], ws, &same, &h);
    ok &= eplb_runtime_step_end(host) == EPLB_OK;
    ok &= eplb_runtime_step_end(whole) == EPLB_OK;
    ok &= eplb_runtime_step_end(dev) == EPLB_OK;
    ok &= same_windows(host, dev) && same_windows(whole, dev);
    /* Every rank's device computed the same shares and T*, bit for bit. */
    ck_assert_msg(all_same(h), "step %zu: the device shares differ across ranks", s);
  }
  eplb_runtime_device_stats_t st;
  ok &= eplb_runtime_device_stats(dev, &st) == EPLB_OK && st.errors == 0;
  eplb_runtime_metrics_t mh, md, mw;
  eplb_runtime_metrics(host, &mh);
  eplb_runtime_metrics(dev, &md);
  eplb_runtime_metrics(whole, &mw);
  ok &= mh.tokens_recorded == md.tokens_recorded && mw.tokens_recorded == md.tokens_recorded;
  ok &= mw.splits == steps * EL && mw.splits_failed == 0;
  if (g_rank == 0)
    fprintf(stderr,
            "%u ranks: %zu of %zu calls had the fractional host's shares, all the whole-token "
            "host's\n",
            g_size, same, steps * EL);
  ck_assert(all_ok(ok && same > 0));
  eplb_runtime_destroy(host);
  eplb_runtime_destroy(whole);
  eplb_runtime_destroy(dev);
  free(ws);
  free(data);
}
END_TEST

/* A failed check names its line and rank on stderr (the verdict is agreed
 * later, so that the ranks stay in step). */
#define CHECK(x)                                                                                   \
  do {                                                                                             \
    if (!(x)) {                                                                                    \
      fprintf(stderr, "rank %u: line %d: %s\n", g_rank, __LINE__, #x);                             \
      ok = 0;                                                                                      \
    }                                                                                              \
  } while (0)

/* The split's state of layer l: its status word and a hash of its shares. */
static uint64_t split_hash(const eplb_runtime_t *dev, uint32_t l, uint32_t *status) {
  const double *dsh, *dt;
  const uint32_t *dst;
  ck_assert_int_eq(eplb__device_split_state(dev, l, &dsh, &dt, &dst), EPLB_OK);
  *status = *dst;
  return eplb__fnv1a(EPLB__FNV1A_BASIS, dsh, R * sizeof *dsh);
}

/* Bad input on one rank: an id out of range, NULL ids, a layer out of
 * range, a failed launch, a failed upload. The rank's call says so (or
 * drops the id); every rank still makes the all-reduce, none hangs, all
 * keep their shares (the status word says why), and the next good call
 * splits again on every rank alike. */
START_TEST(bad_input_on_one_rank_keeps_shares) {
  size_t T = 0;
  uint8_t *data = eplb_test_load_esft(&T);
  eplb_runtime_config_t c;
  eplb_runtime_t *dev = NULL;
  esft_cfg(&c, EPLB_DEVICE_EMULATED);
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &dev) == EPLB_OK));
  static int32_t ids[ET * EK], out[ET * EK];
  uint32_t n = ET / g_size, st0 = 9, st1 = 9, bad = g_size - 1;
  int ok = 1;
  layer_ids(data, g_rank * n, n, 0, ids);
  CHECK(eplb_runtime_device_route(dev, 0, ids, n, g_rank * n, out) == EPLB_OK);
  uint64_t h0 = split_hash(dev, 0, &st0);
  CHECK(st0 == 0);
  /* 1. an id out of range on the last rank: dropped, mapped to -1. */
  if (g_rank == bad)
    ids[3] = EE;
  CHECK(eplb_runtime_device_route(dev, 0, ids, n, g_rank * n, out) == EPLB_OK);
  CHECK(g_rank != bad || out[3] == -1);
  CHECK(split_hash(dev, 0, &st1) == h0 && st1 == SPLIT_BAD_IDS);
  layer_ids(data, g_rank * n, n, 0, ids);
  /* 2. NULL ids on the last rank: EINVAL there. */
  eplb_status_t st = eplb_runtime_device_route(dev, 0, g_rank == bad ? NULL : ids, n, 0, out);
  CHECK(st == (g_rank == bad ? EPLB_EINVAL : EPLB_OK));
  CHECK(split_hash(dev, 0, &st1) == h0 && st1 == SPLIT_BAD_IDS);
  /* 3. a layer out of range on the last rank: ERANGE there, a mismatch
   * for the others. */
  st = eplb_runtime_device_record(dev, g_rank == bad ? EL : 0, ids, n);
  CHECK(st == (g_rank == bad ? EPLB_ERANGE : EPLB_OK));
  CHECK(split_hash(dev, 0, &st1) == h0);
  CHECK(g_rank == bad || st1 == SPLIT_MISMATCH);
  /* 3b. more ids than the all-reduce's sums can hold on the last rank
   * (refused before its ids are read): ERANGE there, shares kept. */
  st = eplb_runtime_device_route(dev, 0, ids, g_rank == bad ? UINT32_MAX / EK / g_size + 1 : n,
                                 g_rank * n, out);
  CHECK(st == (g_rank == bad ? EPLB_ERANGE : EPLB_OK));
  CHECK(split_hash(dev, 0, &st1) == h0);
  CHECK(g_rank == bad || st1 == SPLIT_BAD_IDS);
  /* 4. a failed launch (the count) on the last rank: EDEVICE there, the
   * call counts nothing; the others keep their shares. */
  if (g_rank == bad)
    CHECK(eplb_runtime_device_inject(dev, 0, 0, 1) == EPLB_OK);
  st = eplb_runtime_device_route(dev, 0, ids, n, g_rank * n, out);
  CHECK(st == (g_rank == bad ? EPLB_EDEVICE : EPLB_OK));
  CHECK(split_hash(dev, 0, &st1) == h0);
  CHECK(g_rank == bad || st1 == SPLIT_BAD_IDS);
  /* 5. a failed upload of the message's tail on the last rank, after its
   * ids were counted: EDEVICE there (route still maps by the live table),
   * a mismatch everywhere else; shares kept. */
  if (g_rank == bad)
    CHECK(eplb_runtime_device_inject(dev, 0, 1, 0) == EPLB_OK);
  st = eplb_runtime_device_route(dev, 0, ids, n, g_rank * n, out);
  CHECK(st == (g_rank == bad ? EPLB_EDEVICE : EPLB_OK));
  CHECK(g_rank != bad || strstr(eplb_error_detail(), "the ids are counted") != NULL);
  CHECK(split_hash(dev, 0, &st1) == h0);
  CHECK(g_rank == bad || st1 == SPLIT_MISMATCH);
  for (uint32_t i = 0; i < n * EK; i++)
    CHECK(out[i] >= 0 && out[i] < R);
  /* 6. good calls again: a fresh split, the same on every rank. */
  layer_ids(data, ET + g_rank * n, n, 0, ids);
  CHECK(eplb_runtime_device_route(dev, 0, ids, n, ET + g_rank * n, out) == EPLB_OK);
  uint64_t h1 = split_hash(dev, 0, &st1);
  CHECK(st1 == 0 && h1 != h0);
  ck_assert(all_same(h1));
  CHECK(eplb_runtime_step_end(dev) == EPLB_OK);
  ck_assert(all_ok(ok));
  eplb_runtime_destroy(dev);
  free(data);
}
END_TEST

/* What create refuses, on every rank alike: the device split with several
 * nodes and local_first (no locality stage on the device), and a cuda
 * device's split over MPI (its all-reduce runs on the stream: NCCL only;
 * without CUDA the cuda backend is unsupported anyway). */
START_TEST(device_split_config) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  esft_cfg(&c, EPLB_DEVICE_EMULATED);
  c.ranks_per_node = 1;
  eplb_status_t st = eplb_runtime_create(&c, NULL, &rt);
  ck_assert(all_ok(st == EPLB_EUNSUPPORTED && rt == NULL &&
                   strstr(eplb_error_detail(), "locality") != NULL));
  c.local_first = 0;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  eplb_runtime_destroy(rt);
  rt = NULL;
  esft_cfg(&c, EPLB_DEVICE_CUDA);
  st = eplb_runtime_create(&c, NULL, &rt);
  int ok = st == EPLB_EUNSUPPORTED && rt == NULL;
  ok &= !eplb_feature_enabled(EPLB_FEATURE_CUDA) || strstr(eplb_error_detail(), "NCCL") != NULL;
  ck_assert(all_ok(ok));
}
END_TEST

/* One deployment whose ranks route differently: even ranks through the
 * device, odd ranks on the host in whole tokens, one node per rank and
 * local_first 0 (the device's split has no locality stage). Every rank must
 * send the same all-reduce (the counts of one row, not one row per node)
 * and split alike: the shares and T* hash the same on every rank at every
 * call, and every rank's slots follow the host quota rule on them. */
START_TEST(host_and_device_ranks_share_one_split) {
  size_t T = 0;
  uint8_t *data = eplb_test_load_esft(&T);
  eplb_runtime_config_t c;
  int on_dev = g_rank % 2 == 0;
  esft_cfg(&c, on_dev ? EPLB_DEVICE_EMULATED : EPLB_DEVICE_NONE);
  c.ranks_per_node = 1, c.local_first = 0, c.split_whole_tokens = 1;
  eplb_runtime_t *rt = NULL;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  static int32_t all[ET * EK], out[ET * EK], want[ET * EK];
  size_t n = ET / g_size, steps = T / ET < 40 ? T / ET : 40;
  int ok = steps >= 40;
  for (size_t s = 0; s < steps; s++) {
    for (uint32_t l = 0; l < EL; l++) {
      size_t t0 = s * ET + g_rank * n;
      const int32_t *ids = all + g_rank * n * EK;
      layer_ids(data, s * ET, ET, l, all);
      eplb_status_t st = on_dev ? eplb_runtime_device_route(rt, l, ids, (uint32_t)n, t0, out)
                                : eplb_runtime_route(rt, l, ids, (uint32_t)n, t0, out);
      CHECK(st == EPLB_OK);
      const int32_t *p2l;
      const double *psh, *sh, *tp;
      double t = 0;
      const uint32_t *dst;
      eplb_runtime_layer_plan(rt, l, &p2l, &psh);
      if (on_dev) {
        CHECK(eplb__device_split_state(rt, l, &sh, &tp, &dst) == EPLB_OK && *dst == 0);
        t = *tp;
      } else {
        CHECK(eplb_runtime_layer_split(rt, l, &sh, NULL, &t) == EPLB_OK);
      }
      host_quota(p2l, sh, l, ids, n * EK, t0, want);
      CHECK(!memcmp(out, want, n * EK * sizeof *out));
      uint64_t h = eplb__fnv1a(EPLB__FNV1A_BASIS, sh, R * sizeof *sh);
      ck_assert_msg(all_same(eplb__fnv1a(h, &t, sizeof t)),
                    "step %zu layer %u: host and device ranks split differently", s, l);
    }
    CHECK(eplb_runtime_step_end(rt) == EPLB_OK);
  }
  /* A synchronous read behind the stream's all-reduces: the watched stream
   * wait (cfg with a communicator), one step counted per step_end. */
  uint32_t cnt[3] = {0, 9, 9};
  CHECK(!on_dev || (eplb_runtime_device_counters(rt, cnt) == EPLB_OK && cnt[0] == steps &&
                    cnt[1] == 0 && cnt[2] == 0));
  ck_assert(all_ok(ok));
  eplb_runtime_destroy(rt);
  free(data);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("runtime-device-mpi");
  TCase *tc = tcase_create("device_mpi");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, esft_split_on_every_rank);
  tcase_add_test(tc, bad_input_on_one_rank_keeps_shares);
  tcase_add_test(tc, device_split_config);
  tcase_add_test(tc, host_and_device_ranks_share_one_split);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  const uint32_t sizes[] = {2, 4};
  if (mpi_test_init(&argc, &argv, "test_device_mpi", sizes, (int)(sizeof sizes / sizeof *sizes)))
    return 1;
  return mpi_test_run(suite());
}
