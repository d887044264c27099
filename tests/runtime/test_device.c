/* Runtime device backend (#17) on the emulated device: the device path
 * (device ring, copy-back, feed, table uploads and epoch flips) must give
 * the host runtime's slots and statistics over the ESFT trace, with static
 * shares and with plan switches; late events, failed uploads and failed
 * launches keep the runtime serving with a status and a detail. */
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
enum { EL = 26, EE = 64, EK = 6, ET = 256 /* tokens per step */ };

static uint8_t *load_esft(size_t *tokens) { return eplb_test_load_esft(tokens); }

static void esft_cfg(eplb_runtime_config_t *c, eplb_device_kind_t kind) {
  eplb_runtime_config_default(c);
  c->num_layers = EL, c->num_experts = EE, c->topk = EK, c->slots_per_rank = 80;
  c->policy.window_steps = 8;
  c->device.kind = kind;
}

/* The ids of layer l of step s ([ET][EK] int32). */
static void step_ids(const uint8_t *d, size_t s, uint32_t l, int32_t *ids) {
  for (size_t t = 0; t < ET; t++)
    for (int j = 0; j < EK; j++)
      ids[t * EK + j] = d[((s * ET + t) * EL + l) * EK + j];
}

static void same_windows(const eplb_runtime_t *a, const eplb_runtime_t *b) {
  static double wa[EL * EE], wb[EL * EE];
  for (int kind = 0; kind < 2; kind++) {
    ck_assert_int_eq(eplb_runtime_window(a, (eplb_runtime_window_kind_t)kind, wa), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_window(b, (eplb_runtime_window_kind_t)kind, wb), EPLB_OK);
    ck_assert_mem_eq(wa, wb, sizeof wa);
  }
}

/* Host route vs device route on every layer of every step of the trace:
 * the same slots, windows, EMA, epochs and metrics. Returns the epochs. */
static uint64_t replay_esft(uint32_t interval_steps) {
  size_t T = 0;
  uint8_t *d = load_esft(&T);
  eplb_runtime_config_t c;
  eplb_runtime_t *host = NULL, *dev = NULL;
  esft_cfg(&c, EPLB_DEVICE_NONE);
  c.policy.interval_steps = interval_steps;
  c.policy.gain_threshold = 0;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &host), EPLB_OK);
  c.device.kind = EPLB_DEVICE_EMULATED;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &dev), EPLB_OK);
  static int32_t ids[ET * EK], hs[ET * EK], ds[ET * EK];
  size_t steps = T / ET;
  ck_assert_uint_ge(steps, 100);
  for (size_t s = 0; s < steps; s++) {
    for (uint32_t l = 0; l < EL; l++) {
      step_ids(d, s, l, ids);
      ck_assert_int_eq(eplb_runtime_route(host, l, ids, ET, s * ET, hs), EPLB_OK);
      ck_assert_int_eq(eplb_runtime_device_route(dev, l, ids, ET, s * ET, ds), EPLB_OK);
      ck_assert_mem_eq(hs, ds, sizeof hs);
    }
    ck_assert_int_eq(eplb_runtime_step_end(host), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_step_end(dev), EPLB_OK);
    same_windows(host, dev);
    ck_assert_uint_eq(eplb_runtime_epoch(host), eplb_runtime_epoch(dev));
  }
  eplb_runtime_metrics_t mh, md;
  eplb_runtime_metrics(host, &mh);
  eplb_runtime_metrics(dev, &md);
  ck_assert_uint_eq(mh.tokens_recorded, md.tokens_recorded);
  ck_assert_uint_eq(mh.global_steps, md.global_steps);
  ck_assert_uint_eq(mh.layers_switched, md.layers_switched);
  eplb_runtime_device_stats_t st;
  ck_assert_int_eq(eplb_runtime_device_stats(dev, &st), EPLB_OK);
  ck_assert_uint_eq(st.steps, steps);
  ck_assert_uint_eq(st.steps_fed, steps);
  ck_assert_uint_eq(st.steps_late + st.ring_waits + st.errors + st.uploads_failed, 0);
  ck_assert_uint_eq(st.flips, md.layers_switched);
  ck_assert_uint_eq(st.uploads, md.layers_switched);
  uint64_t epoch = eplb_runtime_epoch(dev);
  eplb_runtime_destroy(host);
  eplb_runtime_destroy(dev);
  free(d);
  return epoch;
}

START_TEST(esft_static_shares_match_host) { ck_assert_uint_eq(replay_esft(0), 0); }
END_TEST

START_TEST(esft_plan_switch_matches_host) { ck_assert_uint_ge(replay_esft(16), 1); }
END_TEST

/* A small deployment whose hot experts make every plan switch layers. */
enum { SL = 2, SE = 8, SK = 2, SS = 12, SN = 64 };

static eplb_runtime_t *small_rt(eplb_device_kind_t kind, uint32_t interval, uint32_t window) {
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = SL, c.num_experts = SE, c.topk = SK, c.slots_per_rank = SS;
  c.policy.interval_steps = interval;
  c.policy.window_steps = 64;
  c.policy.layers_per_step = SL;
  c.policy.gain_threshold = 0;
  c.device.kind = kind;
  c.device.window = window;
  eplb_runtime_t *rt = NULL;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
  return rt;
}

/* Token t of step s picks expert (s % 2) (hot, moving) and another. */
static void hot_ids(uint32_t s, int32_t *ids) {
  for (uint32_t t = 0; t < SN; t++)
    ids[t * SK] = (int32_t)(s / 4 % 2), ids[t * SK + 1] = (int32_t)(2 + (t + s) % (SE - 2));
}

static double window_total(const eplb_runtime_t *rt) {
  double w[SL * SE], sum = 0;
  ck_assert_int_eq(eplb_runtime_window(rt, EPLB_WINDOW_SUM, w), EPLB_OK);
  for (int i = 0; i < SL * SE; i++)
    sum += w[i];
  return sum;
}

START_TEST(delayed_events_feed_late_and_wait_only_when_full) {
  enum { W = 4, STEPS = 12 };
  eplb_runtime_t *rt = small_rt(EPLB_DEVICE_EMULATED, 0, W);
  int32_t ids[SN * SK];
  eplb_runtime_device_stats_t st;
  /* Two queries per event: rows join two steps late, no wait. */
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 2, 0, 0), EPLB_OK);
  for (uint32_t s = 0; s < STEPS; s++) {
    hot_ids(s, ids);
    for (uint32_t l = 0; l < SL; l++)
      ck_assert_int_eq(eplb_runtime_device_record(rt, l, ids, SN), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  }
  ck_assert_int_eq(eplb_runtime_device_stats(rt, &st), EPLB_OK);
  ck_assert_uint_eq(st.ring_waits, 0);
  ck_assert_uint_gt(st.steps_late, 0);
  ck_assert_uint_eq(st.steps_late, st.steps_fed);
  ck_assert_uint_lt(st.steps_fed, STEPS);
  ck_assert(window_total(rt) < (double)STEPS * SL * SN * SK);
  /* flush feeds the open step; the window takes it when the step closes
   * (its own empty row is flushed too, so nothing stays in flight). */
  ck_assert_int_eq(eplb_runtime_device_flush(rt), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_device_flush(rt), EPLB_OK);
  ck_assert(window_total(rt) == (double)STEPS * SL * SN * SK);
  ck_assert_int_eq(eplb_runtime_device_stats(rt, &st), EPLB_OK);
  ck_assert_uint_eq(st.steps_fed, st.steps);
  /* Events that never complete by themselves: step_end waits only for the
   * oldest copy, once the W rows are all in flight. */
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 1000000, 0, 0), EPLB_OK);
  for (uint32_t s = 0; s < STEPS; s++) {
    hot_ids(s, ids);
    ck_assert_int_eq(eplb_runtime_device_record(rt, 0, ids, SN), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  }
  eplb_runtime_device_stats_t st2;
  ck_assert_int_eq(eplb_runtime_device_stats(rt, &st2), EPLB_OK);
  ck_assert_uint_eq(st2.ring_waits, STEPS - W);
  ck_assert_uint_eq(st2.steps_fed - st.steps_fed, STEPS - W);
  ck_assert_int_eq(eplb_runtime_device_flush(rt), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  ck_assert(window_total(rt) == (double)STEPS * SL * SN * SK + (double)STEPS * SN * SK);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert_uint_eq(m.tokens_recorded, (uint64_t)STEPS * SN * (SL + 1));
  eplb_runtime_destroy(rt); /* with nothing in flight: flushed */
  /* Destroy with copies in flight waits for them (ASan would see a late write). */
  rt = small_rt(EPLB_DEVICE_EMULATED, 0, W);
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 1000000, 0, 0), EPLB_OK);
  for (uint32_t s = 0; s < 3; s++)
    ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  eplb_runtime_destroy(rt);
}
END_TEST

/* Device map == host map of the same runtime, every layer. */
static void device_matches_host(const eplb_runtime_t *rt, uint64_t base) {
  int32_t ids[SN * SK], hs[SN * SK], ds[SN * SK];
  hot_ids(7, ids);
  for (uint32_t l = 0; l < SL; l++) {
    ck_assert_int_eq(eplb_runtime_map(rt, l, ids, SN, base, hs), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_device_map(rt, l, ids, SN, base, ds), EPLB_OK);
    ck_assert_mem_eq(hs, ds, sizeof hs);
  }
}

START_TEST(failed_upload_keeps_tables_and_serves_on) {
  eplb_runtime_t *rt = small_rt(EPLB_DEVICE_EMULATED, 2, 4);
  int32_t ids[SN * SK];
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 1000, 0), EPLB_OK);
  int failed = 0;
  for (uint32_t s = 0; s < 12; s++) {
    hot_ids(s, ids);
    for (uint32_t l = 0; l < SL; l++)
      ck_assert_int_eq(eplb_runtime_device_record(rt, l, ids, SN), EPLB_OK);
    eplb_status_t st = eplb_runtime_step_end(rt);
    if (st != EPLB_OK) {
      ck_assert_int_eq(st, EPLB_EDEVICE);
      ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "device table upload failed"));
      failed++;
    }
    ck_assert_uint_eq(eplb_runtime_epoch(rt), 0); /* host and device keep their tables */
    device_matches_host(rt, s * SN);
  }
  ck_assert_int_gt(failed, 0);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert_uint_gt(m.layers_failed, 0);
  ck_assert_uint_eq(m.layers_switched, 0);
  eplb_runtime_device_stats_t st;
  ck_assert_int_eq(eplb_runtime_device_stats(rt, &st), EPLB_OK);
  ck_assert_uint_eq(st.uploads_failed, st.uploads);
  ck_assert_uint_eq(st.flips, 0);
  /* Uploads work again: the next plan switches, host and device alike. */
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 0, 0), EPLB_OK);
  for (uint32_t s = 12; s < 24 && eplb_runtime_epoch(rt) == 0; s++) {
    hot_ids(s, ids);
    for (uint32_t l = 0; l < SL; l++)
      ck_assert_int_eq(eplb_runtime_device_record(rt, l, ids, SN), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
    device_matches_host(rt, s * SN);
  }
  ck_assert_uint_ge(eplb_runtime_epoch(rt), 1);
  eplb_runtime_destroy(rt);
}
END_TEST

START_TEST(epoch_flips_mid_run) {
  eplb_runtime_t *rt = small_rt(EPLB_DEVICE_EMULATED, 2, 4);
  int32_t ids[SN * SK];
  uint32_t flips_seen = 0;
  for (uint32_t s = 0; s < 24; s++) {
    hot_ids(s, ids);
    for (uint32_t l = 0; l < SL; l++)
      ck_assert_int_eq(eplb_runtime_device_record(rt, l, ids, SN), EPLB_OK);
    uint64_t e0 = eplb_runtime_epoch(rt);
    ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
    flips_seen += eplb_runtime_epoch(rt) != e0;
    /* Maps after the boundary use the new tables on both sides. */
    device_matches_host(rt, s * SN);
  }
  ck_assert_uint_ge(flips_seen, 2);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  eplb_runtime_device_stats_t st;
  ck_assert_int_eq(eplb_runtime_device_stats(rt, &st), EPLB_OK);
  ck_assert_uint_eq(st.flips, m.layers_switched);
  /* The device's epoch word of each layer counts its flips (emulated
   * device memory is host memory). */
  uint64_t sum = 0;
  for (uint32_t l = 0; l < SL; l++) {
    const eplb_cuda_dispatch_t *d = NULL;
    const eplb_cuda_ring_t *r = NULL;
    ck_assert_int_eq(eplb_runtime_device_tables(rt, l, &d, &r), EPLB_OK);
    sum += *d->epoch;
    ck_assert_uint_eq(*r->step, 24);
  }
  ck_assert_uint_eq(sum, st.flips);
  eplb_runtime_destroy(rt);
}
END_TEST

/* A flip that fails at a plan switch (the runtime's host tables have
 * switched): step_end says so, device maps keep the old table until the
 * next step_end retries the flip; then they follow the host again. */
START_TEST(failed_flip_is_retried) {
  int32_t ids[SN * SK];
  uint32_t at = 0; /* the step whose step_end switches, from a run without faults */
  eplb_runtime_t *rt = small_rt(EPLB_DEVICE_EMULATED, 2, 4);
  for (uint32_t s = 0; s < 24 && !at; s++) {
    hot_ids(s, ids);
    for (uint32_t l = 0; l < SL; l++)
      ck_assert_int_eq(eplb_runtime_device_record(rt, l, ids, SN), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
    at = eplb_runtime_epoch(rt) ? s : 0;
  }
  eplb_runtime_destroy(rt);
  ck_assert_uint_gt(at, 0);
  rt = small_rt(EPLB_DEVICE_EMULATED, 2, 4);
  for (uint32_t s = 0; s <= at + 1; s++) {
    hot_ids(s, ids);
    for (uint32_t l = 0; l < SL; l++)
      ck_assert_int_eq(eplb_runtime_device_record(rt, l, ids, SN), EPLB_OK);
    /* At the switch: the ring step and the first flip fail. */
    if (s == at)
      ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 0, 2), EPLB_OK);
    eplb_status_t st = eplb_runtime_step_end(rt);
    eplb_runtime_device_stats_t ds;
    eplb_runtime_metrics_t m;
    ck_assert_int_eq(eplb_runtime_device_stats(rt, &ds), EPLB_OK);
    eplb_runtime_metrics(rt, &m);
    if (s == at) {
      ck_assert_int_eq(st, EPLB_EDEVICE);
      ck_assert_uint_eq(eplb_runtime_epoch(rt), 1);
      ck_assert_uint_eq(ds.flips + 1, m.layers_switched);
    } else {
      ck_assert_int_eq(st, EPLB_OK);
      ck_assert_uint_eq(ds.flips, m.layers_switched);
      device_matches_host(rt, s * SN);
    }
  }
  eplb_runtime_destroy(rt);
}
END_TEST

START_TEST(launch_failures_keep_serving) {
  eplb_runtime_t *rt = small_rt(EPLB_DEVICE_EMULATED, 0, 4);
  eplb_runtime_t *host = small_rt(EPLB_DEVICE_NONE, 0, 4);
  int32_t ids[SN * SK], out[SN * SK];
  hot_ids(0, ids);
  /* A failed count: the call counts nothing, the next works. */
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 0, 1), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_device_record(rt, 0, ids, SN), EPLB_EDEVICE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "device_record: layer 0"));
  ck_assert_int_eq(eplb_runtime_device_record(rt, 1, ids, SN), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_record(host, 1, ids, SN), EPLB_OK);
  /* A failed map: a status; the next map works. */
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 0, 1), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_device_map(rt, 0, ids, SN, 0, out), EPLB_EDEVICE);
  device_matches_host(rt, 0);
  /* A failed ring step at the boundary: the step's counts join the next. */
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 0, 1), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_EDEVICE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "closing the ring row failed"));
  ck_assert_int_eq(eplb_runtime_step_end(host), EPLB_OK);
  ck_assert(window_total(rt) == 0 && window_total(host) == SN * SK);
  ck_assert_int_eq(eplb_runtime_device_record(rt, 0, ids, SN), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_record(host, 0, ids, SN), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_step_end(host), EPLB_OK);
  ck_assert(window_total(rt) == window_total(host));
  eplb_runtime_metrics_t a, b;
  eplb_runtime_metrics(rt, &a);
  eplb_runtime_metrics(host, &b);
  ck_assert_uint_eq(a.tokens_recorded, b.tokens_recorded);
  eplb_runtime_destroy(rt);
  eplb_runtime_destroy(host);
}
END_TEST

START_TEST(bad_arguments) {
  eplb_runtime_t *rt = small_rt(EPLB_DEVICE_EMULATED, 0, 4);
  int32_t ids[SN * SK] = {0}, out[SN * SK];
  ck_assert_int_eq(eplb_runtime_device_record(rt, 0, NULL, 1), EPLB_EINVAL);
  ck_assert_int_eq(eplb_runtime_device_record(NULL, 0, ids, 1), EPLB_EINVAL);
  ck_assert_int_eq(eplb_runtime_device_record(rt, SL, ids, 1), EPLB_ERANGE);
  ck_assert_int_eq(eplb_runtime_device_record(rt, 0, NULL, 0), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_device_map(rt, 0, NULL, 1, 0, out), EPLB_EINVAL);
  ck_assert_int_eq(eplb_runtime_device_map(rt, 0, ids, 1, 0, NULL), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "out_slots"));
  ck_assert_int_eq(eplb_runtime_device_map(rt, SL, ids, 1, 0, out), EPLB_ERANGE);
  ck_assert_int_eq(eplb_runtime_device_route(rt, 0, ids, 1, 0, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb_runtime_device_route(rt, 0, NULL, 1, 0, out), EPLB_EINVAL);
  ck_assert_int_eq(eplb_runtime_device_tables(rt, SL, NULL, NULL), EPLB_ERANGE);
  ck_assert_int_eq(eplb_runtime_device_stats(rt, NULL), EPLB_EINVAL);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert_uint_eq(m.tokens_recorded, 0);
  /* Ids out of range are dropped on the device and map to -1. */
  ids[1] = SE, ids[2] = -3;
  ck_assert_int_eq(eplb_runtime_device_route(rt, 0, ids, 2, 0, out), EPLB_OK);
  ck_assert_int_eq(out[1], -1);
  ck_assert_int_eq(out[2], -1);
  const eplb_cuda_ring_t *r = NULL;
  ck_assert_int_eq(eplb_runtime_device_tables(rt, 0, NULL, &r), EPLB_OK);
  ck_assert_uint_eq(*r->dropped, 2);
  eplb_runtime_destroy(rt);
  /* No device: the device calls say so. */
  rt = small_rt(EPLB_DEVICE_NONE, 0, 4);
  ck_assert_int_eq(eplb_runtime_device_record(rt, 0, ids, 1), EPLB_ESTATE);
  ck_assert_int_eq(eplb_runtime_device_map(rt, 0, ids, 1, 0, out), EPLB_ESTATE);
  ck_assert_int_eq(eplb_runtime_device_flush(rt), EPLB_ESTATE);
  ck_assert_int_eq(eplb_runtime_device_inject(rt, 0, 0, 0), EPLB_ESTATE);
  eplb_runtime_destroy(rt);
}
END_TEST

START_TEST(device_config) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  eplb_runtime_config_default(&c);
  ck_assert_int_eq(c.device.kind, EPLB_DEVICE_NONE);
  ck_assert_uint_eq(c.device.window, 4);
  c.num_layers = SL, c.num_experts = SE, c.topk = SK, c.slots_per_rank = SS;
  /* CUDA: unsupported without CUDA, no device here (CI has none). */
  c.device.kind = EPLB_DEVICE_CUDA;
  eplb_status_t st = eplb_runtime_create(&c, NULL, &rt);
  if (!eplb_feature_enabled(EPLB_FEATURE_CUDA))
    ck_assert_int_eq(st, EPLB_EUNSUPPORTED);
  else if (st != EPLB_OK)
    ck_assert_int_eq(st, EPLB_ENODEVICE);
  eplb_runtime_destroy(rt);
  rt = NULL;
  c.device.kind = (eplb_device_kind_t)7;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EINVAL);
  c.device.kind = EPLB_DEVICE_EMULATED;
  c.device.window = 0;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EINVAL);
  c.device.window = 2;
  /* The device split: one process, one node (or local_first 0). */
  c.split_per_batch = 1;
  c.world_size = 2, c.slots_per_rank = SS / 2, c.ranks_per_node = 1;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "split_per_batch"));
  ck_assert_ptr_null(rt);
  c.local_first = 0;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
  eplb_runtime_destroy(rt);
  rt = NULL;
  c.local_first = 1, c.world_size = 1, c.slots_per_rank = SS, c.ranks_per_node = 1;
  c.split_per_batch = -1; /* one rank: off */
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
  eplb_runtime_destroy(rt);
  /* attach: a host runtime takes a device later (bindings). */
  rt = small_rt(EPLB_DEVICE_NONE, 0, 4);
  eplb_runtime_device_t dv = {EPLB_DEVICE_CUDA, 0, NULL, 4};
  st = eplb_runtime_device_attach(rt, &dv);
  ck_assert_int_eq(st,
                   eplb_feature_enabled(EPLB_FEATURE_CUDA) ? EPLB_ENODEVICE : EPLB_EUNSUPPORTED);
  int32_t ids[SN * SK] = {0}, out[SN * SK];
  ck_assert_int_eq(eplb_runtime_device_record(rt, 0, ids, 1), EPLB_ESTATE);
  dv.kind = EPLB_DEVICE_EMULATED;
  ck_assert_int_eq(eplb_runtime_device_attach(rt, &dv), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_device_attach(rt, &dv), EPLB_ESTATE);
  ck_assert_int_eq(eplb_runtime_device_attach(rt, NULL), EPLB_EINVAL);
  hot_ids(0, ids);
  ck_assert_int_eq(eplb_runtime_device_route(rt, 0, ids, SN, 0, out), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  uint32_t cnt[3] = {9, 9, 9};
  ck_assert_int_eq(eplb_runtime_device_counters(rt, cnt), EPLB_OK);
  ck_assert(cnt[0] == 1 && cnt[1] == 0 && cnt[2] == 0);
  ck_assert_int_eq(eplb_runtime_device_counters(rt, NULL), EPLB_EINVAL);
  ck_assert(window_total(rt) == SN * SK);
  eplb_runtime_destroy(rt);
  ck_assert_uint_eq(eplb_abi_struct_size("eplb_runtime_device"), sizeof(eplb_runtime_device_t));
  ck_assert_uint_eq(eplb_abi_struct_size("eplb_runtime_device_stats"),
                    sizeof(eplb_runtime_device_stats_t));
}
END_TEST

START_TEST(alloc_failure_at_create) {
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = SL, c.num_experts = SE, c.topk = SK, c.slots_per_rank = SS;
  c.device.kind = EPLB_DEVICE_EMULATED;
  eplb_test_alloc_install();
  /* Without and with the device split (its own device memory). */
  for (int split = 0; split < 2; split++) {
    c.split_per_batch = split;
    eplb_runtime_t *rt = NULL;
    eplb_test_alloc_reset();
    ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
    long n = eplb_test_alloc_count();
    eplb_runtime_destroy(rt);
    for (long i = 0; i < n; i++) {
      rt = NULL;
      eplb_test_alloc_fail_after(i);
      eplb_status_t st = eplb_runtime_create(&c, NULL, &rt);
      eplb_test_alloc_reset();
      ck_assert_int_eq(st, EPLB_ENOMEM);
      ck_assert_ptr_null(rt);
    }
  }
}
END_TEST

/* The host route's quota rule (runtime/batch.c, quota_map), written again
 * here as the oracle of the device route: the call's c tokens of expert e
 * give its slots (slot order, positive share) floor(C_j + phi) -
 * floor(C_{j-1} + phi) tokens, in call order, the rounding's leftover to
 * the last. */
static void host_quota(const int32_t *p2l, const double *share, uint32_t E, uint32_t R,
                       uint32_t layer, const int32_t *ids, size_t n, uint64_t token_base,
                       int32_t *out) {
  static uint32_t c[512], q[512];
  static int32_t cand[512][64];
  static uint32_t nc[512];
  ck_assert_uint_le(E, 512);
  memset(c, 0, sizeof c), memset(nc, 0, sizeof nc);
  for (uint32_t r = 0; r < R; r++)
    cand[p2l[r]][nc[p2l[r]]++] = (int32_t)r;
  for (size_t x = 0; x < n; x++)
    c[ids[x]]++;
  static uint32_t qq[512][64], cur[512];
  uint64_t th = eplb__dispatch_token_hash(token_base, layer);
  for (uint32_t e = 0; e < E; e++) {
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
  (void)q;
  for (size_t x = 0; x < n; x++) {
    uint32_t e = (uint32_t)ids[x];
    while (!qq[e][cur[e]])
      cur[e]++;
    out[x] = cand[e][cur[e]];
    qq[e][cur[e]]--;
  }
}

/* The per-batch split on the emulated device against the kernels' CPU
 * references driven by hand: every route call splits the layer from the
 * call's counts (warm from the last shares) and maps the call by exact
 * quotas of the fresh shares (the host route's rule); the split's T* and
 * shares must be the reference's. A plan switch restages the placement and
 * the plan's shares. */
static void split_replay(uint32_t world, uint32_t interval) {
  size_t T = 0;
  uint8_t *data = load_esft(&T);
  eplb_runtime_config_t c;
  esft_cfg(&c, EPLB_DEVICE_EMULATED);
  c.world_size = world, c.ranks_per_node = world, c.slots_per_rank = 80 / world;
  c.split_per_batch = 1;
  c.policy.interval_steps = interval;
  c.policy.gain_threshold = -1; /* one GPU gains nothing: switch whatever changed */
  eplb_runtime_t *rt = NULL;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
  enum { R = 80 };
  uint32_t S = R / world;
  size_t sws = eplb__cuda_split_workspace_bytes(EE, world, S);
  size_t tws = eplb__cuda_table_workspace_bytes(EE, R);
  void *sw = malloc(sws), *tw = malloc(tws);
  static double share[EL][R], plan_share[EL][R];
  static int32_t plan_p2l[EL][R], ids[ET * EK], got[ET * EK], want[ET * EK];
  static uint32_t off[EE + 1], prob[R], counts[EE];
  static int32_t slot[R], alias[R];
  uint32_t epoch = 0, status = 0;
  double t_star = 0;
  eplb_cuda_dispatch_t ref = {{{off, slot, alias, prob}, {off, slot, alias, prob}}, &epoch, EE, R};
  ck_assert_ptr_nonnull(sw);
  ck_assert_ptr_nonnull(tw);
  uint64_t switches = 0, records = 0;
  for (size_t s = 0; s < T / ET; s++) {
    for (uint32_t l = 0; l < EL; l++) {
      const int32_t *p2l;
      const double *psh;
      eplb_runtime_layer_plan(rt, l, &p2l, &psh);
      if (s == 0 || memcmp(p2l, plan_p2l[l], sizeof plan_p2l[l]) ||
          memcmp(psh, plan_share[l], sizeof plan_share[l])) {
        switches += s > 0;
        memcpy(plan_p2l[l], p2l, sizeof plan_p2l[l]);
        memcpy(plan_share[l], psh, sizeof plan_share[l]);
        memcpy(share[l], psh, sizeof share[l]);
      }
      step_ids(data, s, l, ids);
      memset(counts, 0, sizeof counts);
      for (size_t i = 0; i < ET * EK; i++)
        counts[ids[i]]++;
      eplb__split_ref(p2l, EE, world, S, counts, share[l], &t_star, &status, sw, 32, NULL);
      ck_assert_uint_eq(status, 0);
      if (s % 2) { /* route: exact quotas */
        host_quota(p2l, share[l], EE, R, l, ids, ET * EK, s * ET, want);
        ck_assert_int_eq(eplb_runtime_device_route(rt, l, ids, ET, s * ET, got), EPLB_OK);
      } else { /* record rebuilds the table, which map samples */
        eplb__table_build_ref(&ref, 0, p2l, share[l], tw);
        eplb__map_ref(&ref, l, ids, ET, EK, s * ET, want, NULL);
        ck_assert_int_eq(eplb_runtime_device_record(rt, l, ids, ET), EPLB_OK);
        ck_assert_int_eq(eplb_runtime_device_map(rt, l, ids, ET, s * ET, got), EPLB_OK);
        records++;
      }
      ck_assert_mem_eq(got, want, sizeof got);
      const double *dsh, *dt;
      const uint32_t *dst;
      ck_assert_int_eq(eplb__device_split_state(rt, l, &dsh, &dt, &dst), EPLB_OK);
      ck_assert_mem_eq(dsh, share[l], sizeof share[l]);
      ck_assert(*dt == t_star && *dst == 0);
    }
    ck_assert_int_eq(eplb_runtime_step_end(rt), EPLB_OK);
  }
  if (interval)
    ck_assert_uint_ge(switches, 1);
  eplb_runtime_device_stats_t st;
  ck_assert_int_eq(eplb_runtime_device_stats(rt, &st), EPLB_OK);
  ck_assert_uint_eq(st.errors, 0);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert_uint_eq(st.flips, records + m.layers_switched); /* route does not flip */
  eplb_runtime_destroy(rt);
  free(sw), free(tw), free(data);
}

/* The whole ESFT trace routed by two host runtimes and a device runtime,
 * all with the per-batch split: the same statistics every step. The
 * device's slots are the host route's quota rule on the device's shares;
 * the host runtime that splits in whole tokens (split_whole_tokens) has the
 * device's shares and T* bit for bit and routes the same slots on every
 * call; the fractional one has the same T* (1e-9), its own slots the
 * device's only where the two splits chose the same shares (an optimal
 * split is rarely unique). */
static void split_vs_host(uint32_t world) {
  size_t T = 0;
  uint8_t *data = load_esft(&T);
  eplb_runtime_config_t c;
  eplb_runtime_t *host = NULL, *dev = NULL, *whole = NULL;
  esft_cfg(&c, EPLB_DEVICE_NONE);
  c.world_size = world, c.ranks_per_node = world, c.slots_per_rank = 80 / world;
  c.split_per_batch = 1;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &host), EPLB_OK);
  c.split_whole_tokens = 1;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &whole), EPLB_OK);
  c.split_whole_tokens = 0;
  c.device.kind = EPLB_DEVICE_EMULATED;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &dev), EPLB_OK);
  static int32_t ids[ET * EK], hs[ET * EK], ds[ET * EK], ws[ET * EK], want[ET * EK];
  size_t steps = T / ET, same = 0, calls = 0;
  for (size_t s = 0; s < steps; s++) {
    for (uint32_t l = 0; l < EL; l++, calls++) {
      step_ids(data, s, l, ids);
      ck_assert_int_eq(eplb_runtime_route(host, l, ids, ET, s * ET, hs), EPLB_OK);
      ck_assert_int_eq(eplb_runtime_route(whole, l, ids, ET, s * ET, ws), EPLB_OK);
      ck_assert_int_eq(eplb_runtime_device_route(dev, l, ids, ET, s * ET, ds), EPLB_OK);
      const int32_t *p2l;
      const double *psh, *hsh, *wsh, *dsh, *dt;
      const uint32_t *dst;
      double ht = 0, wt = 0;
      eplb_runtime_layer_plan(dev, l, &p2l, &psh);
      ck_assert_int_eq(eplb_runtime_layer_split(host, l, &hsh, NULL, &ht), EPLB_OK);
      ck_assert_int_eq(eplb_runtime_layer_split(whole, l, &wsh, NULL, &wt), EPLB_OK);
      ck_assert_int_eq(eplb__device_split_state(dev, l, &dsh, &dt, &dst), EPLB_OK);
      ck_assert_uint_eq(*dst, 0);
      ck_assert_msg(fabs(*dt - ht) <= 1e-9 * ht, "T* %.17g vs %.17g", *dt, ht);
      host_quota(p2l, dsh, EE, 80, l, ids, ET * EK, s * ET, want);
      ck_assert_mem_eq(ds, want, sizeof ds);
      ck_assert_mem_eq(wsh, dsh, 80 * sizeof *dsh);
      ck_assert(wt == *dt);
      ck_assert_mem_eq(ws, ds, sizeof ws);
      if (!memcmp(hsh, dsh, 80 * sizeof *dsh)) {
        ck_assert_mem_eq(hs, ds, sizeof hs);
        same++;
      }
    }
    ck_assert_int_eq(eplb_runtime_step_end(host), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_step_end(dev), EPLB_OK);
    ck_assert_int_eq(eplb_runtime_step_end(whole), EPLB_OK);
    same_windows(host, dev);
    same_windows(whole, dev);
  }
  fprintf(stderr,
          "split_vs_host(%u): %zu of %zu calls with the same shares fractionally, all %zu in "
          "whole tokens\n",
          world, same, calls, calls);
  /* One GPU: every split is optimal, and the two solvers choose differently. */
  ck_assert(world == 1 || same > 0);
  eplb_runtime_metrics_t mh, md, mw;
  eplb_runtime_metrics(host, &mh);
  eplb_runtime_metrics(dev, &md);
  eplb_runtime_metrics(whole, &mw);
  ck_assert_uint_eq(mh.tokens_recorded, md.tokens_recorded);
  ck_assert_uint_eq(mw.tokens_recorded, md.tokens_recorded);
  ck_assert_uint_eq(mw.splits, calls);
  ck_assert_uint_eq(mw.splits_failed, 0);
  eplb_runtime_destroy(host);
  eplb_runtime_destroy(dev);
  eplb_runtime_destroy(whole);
  free(data);
}

/* split_whole_tokens: refused with the locality stage or the decode
 * objective (the device's solver has neither) and outside {0, 1}; on by
 * itself with a device and the split, where eplb_runtime_split (a host
 * split) then gives the device solver's shares. */
START_TEST(split_whole_tokens_config) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  esft_cfg(&c, EPLB_DEVICE_NONE);
  c.world_size = 4, c.ranks_per_node = 2, c.slots_per_rank = 20, c.split_whole_tokens = 1;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "locality"));
  c.local_first = 0;
  eplb_model_desc_t model;
  eplb_gpu_desc_t gpu;
  ck_assert_int_eq(eplb_model_preset(eplb_model_preset_name(0), &model), EPLB_OK);
  ck_assert_int_eq(eplb_gpu_preset(eplb_gpu_preset_name(0), &gpu), EPLB_OK);
  c.split_model = &model, c.split_gpu = &gpu;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "decode"));
  c.split_model = NULL, c.split_gpu = NULL, c.split_whole_tokens = 2;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EINVAL);
  c.split_whole_tokens = 1;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
  eplb_runtime_destroy(rt);
  /* A device runtime with the split, the field left 0. */
  esft_cfg(&c, EPLB_DEVICE_EMULATED);
  c.world_size = 4, c.ranks_per_node = 4, c.slots_per_rank = 20, c.split_per_batch = 1;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
  static uint32_t counts[EE];
  static double share[80];
  for (uint32_t e = 0; e < EE; e++)
    counts[e] = (e * 37u) % 101u;
  const int32_t *p2l;
  const double *psh, *got;
  double t_ref = 0, t_got = 0;
  uint32_t status = 9;
  eplb_runtime_layer_plan(rt, 3, &p2l, &psh);
  void *w = malloc(eplb__cuda_split_workspace_bytes(EE, 4, 20));
  ck_assert_ptr_nonnull(w);
  eplb__split_ref(p2l, EE, 4, 20, counts, share, &t_ref, &status, w, 32, NULL);
  ck_assert_uint_eq(status, 0);
  ck_assert_int_eq(eplb_runtime_split(rt, 3, counts), EPLB_OK);
  ck_assert_int_eq(eplb_runtime_layer_split(rt, 3, &got, NULL, &t_got), EPLB_OK);
  ck_assert_mem_eq(got, share, sizeof share);
  ck_assert(t_got == t_ref);
  eplb_runtime_destroy(rt);
  free(w);
}
END_TEST

START_TEST(esft_split_one_rank_vs_host) { split_vs_host(1); }
END_TEST

START_TEST(esft_split_standalone_rank_vs_host) { split_vs_host(4); }
END_TEST

START_TEST(device_split_standalone_rank) { split_replay(4, 0); }
END_TEST

START_TEST(device_split_with_plan_switch) { split_replay(1, 16); }
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("runtime-device");
  TCase *tc = tcase_create("device");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, esft_static_shares_match_host);
  tcase_add_test(tc, esft_plan_switch_matches_host);
  tcase_add_test(tc, delayed_events_feed_late_and_wait_only_when_full);
  tcase_add_test(tc, failed_upload_keeps_tables_and_serves_on);
  tcase_add_test(tc, epoch_flips_mid_run);
  tcase_add_test(tc, launch_failures_keep_serving);
  tcase_add_test(tc, failed_flip_is_retried);
  tcase_add_test(tc, bad_arguments);
  tcase_add_test(tc, device_config);
  tcase_add_test(tc, alloc_failure_at_create);
  tcase_add_test(tc, device_split_standalone_rank);
  tcase_add_test(tc, device_split_with_plan_switch);
  tcase_add_test(tc, esft_split_one_rank_vs_host);
  tcase_add_test(tc, esft_split_standalone_rank_vs_host);
  tcase_add_test(tc, split_whole_tokens_config);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
