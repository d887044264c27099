/* Runtime suite across 4 MPI processes (run by meson through mpirun, with
 * CK_FORK=no). Rank 0 prints the TAP; every verdict is all-reduced so that
 * all ranks pass or fail each assertion together and stay in step. */
#include "tests/runtime/mpi_support.h"
#include "tests/support.h"

#include "eplb/model.h"
#include "eplb/plan.h"
#include "eplb/runtime.h"
#include "eplb/trace.h"
#include "eplb/runtime_device.h"
#include "eplb/runtime_testing.h"
#include "eplb/split.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void mpi_cfg(eplb_runtime_config_t *c, uint32_t L, uint32_t E, uint32_t k, uint32_t S) {
  eplb_runtime_config_default(c);
  c->num_layers = L;
  c->num_experts = E;
  c->topk = k;
  c->slots_per_rank = S;
  c->rank = g_rank;
  c->world_size = g_size;
  c->ranks_per_node = 2;
  c->comm.kind = EPLB_COMM_MPI;
  c->comm.mpi_comm = eplb_runtime_mpi_world();
  /* These tests pin the per-batch split and the periodic path: no slot
   * moves but theirs (continuous re-placement has its own suite). */
  c->continuous_window = 0;
}

START_TEST(allreduced_counts) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, 2, 8, 2, 4);
  c.policy.allreduce_period = 2;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  double w[16];
  int ok = 1;
  for (int s = 0; s < 2; s++) {
    for (uint32_t l = 0; l < 2; l++) {
      uint32_t counts[8];
      for (uint32_t e = 0; e < 8; e++)
        counts[e] = (g_rank + 1) * (e + 1) + l;
      ok &= eplb_runtime_record_counts(rt, l, counts) == EPLB_OK;
    }
    ok &= eplb_runtime_step_end(rt) == EPLB_OK;
    ok &= eplb_runtime_window(rt, EPLB_WINDOW_SUM, w) == EPLB_OK;
    for (uint32_t i = 0; i < 16; i++) {
      uint32_t l = i / 8, e = i % 8;
      /* sum over ranks r of (r + 1)(e + 1) + l, twice; nothing before the period closes */
      double want = s == 0 ? 0 : 2.0 * (10 * (e + 1) + 4 * l);
      ok &= w[i] == want;
    }
  }
  ck_assert(all_ok(ok));
  eplb_runtime_destroy(rt);
}
END_TEST

START_TEST(sampled_rows) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  const char *path = eplb_test_path(eplb_test_tmpdir(), "rows.eplbt");
  mpi_cfg(&c, 2, 8, 2, 4);
  c.sample_rows = 2;
  c.trace_path = path; /* used by rank 0 only */
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  int ok = 1;
  for (uint32_t l = 0; l < 2; l++) {
    int32_t ids[6];
    for (int i = 0; i < 6; i++)
      ids[i] = (int32_t)((g_rank + (uint32_t)i + l) % 8);
    ok &= eplb_runtime_record(rt, l, ids, 3) == EPLB_OK;
  }
  ok &= eplb_runtime_step_end(rt) == EPLB_OK;
  eplb_runtime_destroy(rt);
  if (g_rank == 0) {
    eplb_trace_t *t = NULL;
    eplb_trace_step_t st;
    ok &= eplb_trace_open(path, NULL, &t) == EPLB_OK;
    ok &= t && eplb_trace_read_step(t, 0, &st) == EPLB_OK && st.num_rows == 8;
    for (uint32_t r = 0; ok && r < 8; r++) {
      uint32_t p = r / 2, tok = r % 2;
      ok &= st.source_rank[r] == (int32_t)p;
      for (uint32_t l = 0; l < 2; l++)
        for (uint32_t j = 0; j < 2; j++)
          ok &= st.topk[(r * 2 + l) * 2 + j] == (p + tok * 2 + j + l) % 8;
    }
    ok &= st.counts[0] + st.counts[8] > 0;
    eplb_trace_close(t);
  }
  ck_assert(all_ok(ok));
}
END_TEST

START_TEST(config_mismatch) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, 2, 8, 2, 4);
  if (g_rank == 2)
    c.policy.window_steps = 16;
  eplb_status_t st = eplb_runtime_create(&c, NULL, &rt);
  ck_assert(all_ok(st == EPLB_EINVAL && rt == NULL));
  ck_assert(all_ok(strstr(eplb_error_detail(), "different") != NULL));
  mpi_cfg(&c, 2, 8, 2, 4);
  if (g_rank == 1)
    c.topk = 0;
  st = eplb_runtime_create(&c, NULL, &rt);
  ck_assert(all_ok(st == EPLB_EINVAL && rt == NULL));
  mpi_cfg(&c, 2, 8, 2, 4);
  c.rank = (g_rank + 1) % g_size; /* disagrees with the communicator */
  st = eplb_runtime_create(&c, NULL, &rt);
  ck_assert(all_ok(st == EPLB_EINVAL && rt == NULL));
}
END_TEST

/* 4 GPUs x 2 slots, 2 nodes: expert 0 in slots 0 (node 0), 4 and 5 (node 1),
 * expert 1 in the rest; node_share rows differ by node and from the global
 * shares. Each rank writes its own file (`tweak` perturbs node 1's row). */
static eplb_plan_t *node_share_plan(int tweak) {
  char name[64];
  snprintf(name, sizeof name, "ns_plan_%u.json", g_rank);
  const char *path = eplb_test_path(eplb_test_tmpdir(), name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "{\"format\":\"eplb-plan\",\"version\":1,\"num_layers\":1,\"num_logical_experts\":2,"
          "\"num_gpus\":4,\"num_nodes\":2,\"slots_per_gpu\":2,\"layers\":[{"
          "\"phy2log\":[0,1,1,1,0,0,1,1],\"share\":[0.4,0.2,0.2,0.2,0.25,0.35,0.2,0.2],"
          "\"node_share\":[[0.7,0.25,0.25,0.25,0.2,0.1,0.25,0],[0.1,0,0,0,%s,0.5,0.5]]}]}\n",
          tweak ? "0.4,0.5" : "0.3,0.6");
  fclose(f);
  eplb_plan_t *plan = NULL;
  ck_assert_int_eq(eplb_plan_read(path, &plan), EPLB_OK);
  return plan;
}

/* Every rank maps expert 0's tokens by its node's row of the plan's node
 * shares; ranks whose node shares differ do not start. */
START_TEST(map_follows_node_shares) {
  static const double want[2][8] = {{0.7, 0, 0, 0, 0.2, 0.1, 0, 0}, {0.1, 0, 0, 0, 0.3, 0.6, 0, 0}};
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, 1, 2, 1, 2);
  eplb_plan_t *plan = node_share_plan(0);
  ck_assert(all_ok(eplb_runtime_create(&c, plan, &rt) == EPLB_OK));
  enum { N = 60000 };
  int32_t *ids = calloc(N, sizeof *ids), *out = malloc(N * sizeof *out);
  ck_assert_ptr_nonnull(ids && out ? ids : NULL);
  int ok = eplb_runtime_map(rt, 0, ids, N, 1000 * g_rank, out) == EPLB_OK;
  long cnt[8] = {0};
  for (int i = 0; ok && i < N; i++) {
    ok &= out[i] >= 0 && out[i] < 8;
    if (ok)
      cnt[out[i]]++;
  }
  /* Within 5 binomial sigma of node_share[node] (global: 0.4/0.25/0.35). */
  const double *p = want[g_rank / 2];
  for (int r = 0; r < 8; r++)
    ok &= fabs((double)cnt[r] - N * p[r]) <= 5 * sqrt(N * p[r] * (1 - p[r])) + 0.5;
  ck_assert(all_ok(ok));
  free(ids), free(out);
  eplb_runtime_destroy(rt);
  eplb_plan_destroy(plan);
  plan = node_share_plan(g_rank == 3);
  eplb_status_t st = eplb_runtime_create(&c, plan, &rt);
  ck_assert(all_ok(st == EPLB_EINVAL && rt == NULL));
  eplb_plan_destroy(plan);
}
END_TEST

enum { ML = 4, ME = 8, MK = 2, MS = 3, MB = 64, TOK = 48 };

static uint64_t rng(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* Top-k ids with a hot expert per layer that moves every 8 steps. */
static void gen_tokens(uint32_t step, uint32_t layer, int32_t *ids) {
  uint64_t s = (uint64_t)step * 1000003u + g_rank * 7919u + layer;
  int32_t hot = (int32_t)((layer + step / 8) % ME);
  for (uint32_t t = 0; t < TOK; t++) {
    int32_t a = rng(&s) % 3 ? hot : (int32_t)(rng(&s) % ME);
    int32_t b = (int32_t)(rng(&s) % ME);
    if (b == a)
      b = (a + 1) % ME;
    ids[t * MK] = a;
    ids[t * MK + 1] = b;
  }
}

START_TEST(migration_zero_violations) {
  static uint8_t buf[ML][MS][MB];
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, ML, ME, MK, MS);
  const uint32_t R = MS * g_size;
  c.expert_bytes = MB;
  c.policy.interval_steps = 4;
  c.policy.window_steps = 4;
  c.policy.layers_per_step = 1;
  c.policy.gain_threshold = 0;
  /* The static local-first rule is what this test checks (not_local). */
  c.split_per_batch = 0;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  int ok = 1;
  for (uint32_t l = 0; l < ML; l++) {
    const int32_t *p2l;
    ok &= eplb_runtime_layer_plan(rt, l, &p2l, NULL) == EPLB_OK;
    for (uint32_t s = 0; s < MS; s++) {
      memset(buf[l][s], 1 + p2l[g_rank * MS + s], MB);
      ok &= eplb_runtime_register_weights(rt, l, s, buf[l][s], MB) == EPLB_OK;
    }
  }
  if (g_rank == 1)
    ok &= eplb_runtime_inject_transfer_failure(rt, 2) == EPLB_OK;
  double *tags = malloc(ML * R * sizeof *tags);
  int32_t ids[TOK * MK], slots[TOK * MK];
  long violations = 0, not_local = 0, ecomm = 0;
  for (uint32_t step = 0; step < 24; step++) {
    /* Tags: what each slot's live buffer holds, gathered from every rank. */
    memset(tags, 0, ML * R * sizeof *tags);
    for (uint32_t l = 0; l < ML; l++)
      for (uint32_t s = 0; s < MS; s++) {
        int uniform = 1;
        for (uint32_t b = 1; b < MB; b++)
          uniform &= buf[l][s][b] == buf[l][s][0];
        tags[l * R + g_rank * MS + s] = uniform ? buf[l][s][0] : -1000;
      }
    ok &= eplb_runtime_allreduce(rt, tags, ML * R, EPLB_REDUCE_SUM) == EPLB_OK;
    for (uint32_t l = 0; l < ML; l++) {
      const int32_t *p2l;
      const double *share;
      eplb_runtime_layer_plan(rt, l, &p2l, &share);
      gen_tokens(step, l, ids);
      ok &= eplb_runtime_record(rt, l, ids, TOK) == EPLB_OK;
      uint64_t base = (uint64_t)step * TOK * g_size + g_rank * TOK;
      ok &= eplb_runtime_map(rt, l, ids, TOK, base, slots) == EPLB_OK;
      for (uint32_t i = 0; i < TOK * MK; i++) {
        violations += tags[l * R + (uint32_t)slots[i]] != 1 + ids[i];
        int local_replica = 0;
        for (uint32_t r = 0; r < R; r++)
          local_replica |= p2l[r] == ids[i] && share[r] > 0 && r / (2 * MS) == g_rank / 2;
        not_local += local_replica && (uint32_t)slots[i] / (2 * MS) != g_rank / 2;
      }
    }
    eplb_status_t st = eplb_runtime_step_end(rt);
    ecomm += st == EPLB_ECOMM;
    ok &= st == EPLB_OK || st == EPLB_ECOMM;
  }
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(ok));
  ck_assert(all_ok(violations == 0));
  ck_assert(all_ok(not_local == 0));
  ck_assert(all_ok(ecomm == 1 && m.layers_failed == 1));
  ck_assert(all_ok(m.layers_switched >= 4 && m.epoch > 0 && m.slots_moved > 0));
  ck_assert(all_ok(m.bytes_moved[1] + m.bytes_moved[2] > 0));
  free(tags);
  eplb_runtime_destroy(rt);
}
END_TEST

/* A sum over every layer's plan that differs when a slot's expert does. */
static double plan_hash(eplb_runtime_t *rt) {
  double h = 0;
  for (uint32_t l = 0; l < ML; l++) {
    const int32_t *p2l;
    eplb_runtime_layer_plan(rt, l, &p2l, NULL);
    for (uint32_t r = 0; r < MS * g_size; r++)
      h += (double)(p2l[r] + 1) * (1 + r + l * 97);
  }
  return h;
}

/* 1 when v is the same on every rank. */
static int same_everywhere(double v) {
  double x[2] = {v, -v};
  ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, x, 2, EPLB_REDUCE_MAX), EPLB_OK);
  return x[0] == -x[1];
}

START_TEST(transfer_stall_times_out) {
  static uint8_t buf[ML][MS][MB];
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, ML, ME, MK, MS);
  const uint32_t R = MS * g_size;
  c.expert_bytes = MB;
  c.policy.interval_steps = 4;
  c.policy.window_steps = 4;
  c.policy.layers_per_step = 1;
  c.policy.gain_threshold = 0;
  c.transfer_timeout_ms = 300;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  int ok = 1;
  for (uint32_t l = 0; l < ML; l++) {
    const int32_t *p2l;
    ok &= eplb_runtime_layer_plan(rt, l, &p2l, NULL) == EPLB_OK;
    for (uint32_t s = 0; s < MS; s++) {
      memset(buf[l][s], 1 + p2l[g_rank * MS + s], MB);
      ok &= eplb_runtime_register_weights(rt, l, s, buf[l][s], MB) == EPLB_OK;
    }
  }
  /* Rank 2 posts its sends of its first sending round well past the deadline. */
  if (g_rank == 2)
    ok &= eplb_runtime_inject_transfer_stall(rt, 1000) == EPLB_OK;
  double *tags = malloc(ML * R * sizeof *tags);
  int32_t ids[TOK * MK], slots[TOK * MK];
  long violations = 0, timeouts = 0, kept = 0, agreed = 1, switched_after = 0;
  for (uint32_t step = 0; step < 24; step++) {
    memset(tags, 0, ML * R * sizeof *tags);
    for (uint32_t l = 0; l < ML; l++)
      for (uint32_t s = 0; s < MS; s++) {
        int uniform = 1;
        for (uint32_t b = 1; b < MB; b++)
          uniform &= buf[l][s][b] == buf[l][s][0];
        tags[l * R + g_rank * MS + s] = uniform ? buf[l][s][0] : -1000;
      }
    ok &= eplb_runtime_allreduce(rt, tags, ML * R, EPLB_REDUCE_SUM) == EPLB_OK;
    for (uint32_t l = 0; l < ML; l++) {
      gen_tokens(step, l, ids);
      ok &= eplb_runtime_record(rt, l, ids, TOK) == EPLB_OK;
      uint64_t base = (uint64_t)step * TOK * g_size + g_rank * TOK;
      ok &= eplb_runtime_map(rt, l, ids, TOK, base, slots) == EPLB_OK;
      for (uint32_t i = 0; i < TOK * MK; i++)
        violations += tags[l * R + (uint32_t)slots[i]] != 1 + ids[i];
    }
    eplb_runtime_metrics_t before, after;
    eplb_runtime_metrics(rt, &before);
    double hash = plan_hash(rt);
    eplb_status_t st = eplb_runtime_step_end(rt);
    eplb_runtime_metrics(rt, &after);
    ok &= st == EPLB_OK || st == EPLB_ETIMEOUT;
    agreed &= same_everywhere(st);
    if (st == EPLB_ETIMEOUT) {
      timeouts++;
      /* The round's layer failed everywhere: no slot changed, no switch. */
      kept += plan_hash(rt) == hash && after.epoch == before.epoch &&
              after.layers_failed == before.layers_failed + 1 &&
              strstr(eplb_error_detail(), "keep their old plan") != NULL;
    } else if (timeouts > 0) {
      switched_after += after.layers_switched - before.layers_switched;
    }
    agreed &= same_everywhere(plan_hash(rt));
  }
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(ok));
  ck_assert(all_ok(agreed));
  ck_assert(all_ok(violations == 0));
  ck_assert(all_ok(timeouts >= 1 && kept == timeouts));
  ck_assert(all_ok(switched_after > 0 && m.layers_failed == (uint64_t)timeouts));
  free(tags);
  eplb_runtime_destroy(rt);
}
END_TEST

/* FNV-1a of n doubles' bytes, as two exactly representable halves. */
static void hash2(const double *v, size_t n, double out[2]) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char *b = (const unsigned char *)v;
  for (size_t i = 0; i < n * sizeof *v; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  out[0] = (double)(h >> 32), out[1] = (double)(h & 0xffffffffu);
}

/* 1 when the two-word hash h is the same on the ranks where `mine` holds
 * (the others pass -1 / +inf neutral values). */
static int same_hash(const double h[2], int mine) {
  double x[4] = {mine ? h[0] : -1, mine ? h[1] : -1, mine ? -h[0] : -INFINITY,
                 mine ? -h[1] : -INFINITY};
  ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, x, 4, EPLB_REDUCE_MAX), EPLB_OK);
  return x[0] == -x[2] && x[1] == -x[3];
}

/* The per-batch split (on by default with 4 ranks): every step every rank
 * routes its own skewed tokens; the shares agree bit for bit on all ranks
 * (node rows within each node), every token lands on a replica of its
 * expert, and the realised busiest GPU is within the tolerance of the
 * batch's optimum T* (plus one token per replica per rank of rounding). */
START_TEST(per_batch_split_agrees) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, ML, ME, MK, MS);
  const uint32_t R = MS * g_size;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  eplb_runtime_t *srt = NULL; /* the same plan by its static shares */
  c.split_per_batch = 0;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &srt) == EPLB_OK));
  c.split_per_batch = -1;
  int ok = 1, agree = 1;
  int32_t ids[TOK * MK], slots[TOK * MK];
  double worst = 0, sum_split = 0, sum_static = 0;
  eplb_runtime_metrics_t m0;
  eplb_runtime_metrics(rt, &m0);
  for (uint32_t step = 0; step < 12; step++) {
    for (uint32_t l = 0; l < ML; l++) {
      gen_tokens(step, l, ids);
      uint64_t base = (uint64_t)step * TOK * g_size + g_rank * TOK;
      ok &= eplb_runtime_route(rt, l, ids, TOK, base, slots) == EPLB_OK;
      const int32_t *p2l;
      const double *share, *ns, *pshare;
      double t_star = 0, hg[2], hn[2];
      ok &= eplb_runtime_layer_plan(rt, l, &p2l, &pshare) == EPLB_OK;
      ok &= eplb_runtime_layer_split(rt, l, &share, &ns, &t_star) == EPLB_OK;
      ok &= ns != NULL && t_star > 0; /* 2 nodes, local_first: the locality stage ran */
      double glob[MS * 4 + 1];
      memcpy(glob, share, R * sizeof *share);
      glob[R] = t_star;
      hash2(glob, R + 1, hg);
      hash2(ns, R, hn);
      agree &= same_hash(hg, 1);
      for (uint32_t node = 0; node < 2; node++)
        agree &= same_hash(hn, g_rank / 2 == node);
      /* Realised GPU loads, this batch and the plan's static map. */
      double gpu[8] = {0};
      for (uint32_t i = 0; i < TOK * MK; i++) {
        ok &= slots[i] >= 0 && (uint32_t)slots[i] < R && p2l[slots[i]] == ids[i];
        if (ok)
          gpu[(uint32_t)slots[i] / MS] += 1;
      }
      ok &= eplb_runtime_map(srt, l, ids, TOK, base, slots) == EPLB_OK;
      for (uint32_t i = 0; ok && i < TOK * MK; i++)
        gpu[4 + (uint32_t)slots[i] / MS] += 1;
      ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, gpu, 8, EPLB_REDUCE_SUM), EPLB_OK);
      double mx = 0, smx = 0, tot = 0;
      for (uint32_t g = 0; g < 4; g++)
        mx = fmax(mx, gpu[g]), smx = fmax(smx, gpu[4 + g]), tot += gpu[g];
      double over = mx - (ceil(t_star * (1 + c.split_tolerance)) + MS * g_size);
      worst = over > worst ? over : worst;
      sum_split += tot / 4 / mx;
      sum_static += tot / 4 / smx;
    }
    ok &= eplb_runtime_step_end(rt) == EPLB_OK;
  }
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(ok));
  ck_assert(all_ok(agree));
  ck_assert(all_ok(worst <= 0));
  ck_assert(all_ok(m.splits - m0.splits == 12 * ML && m.splits_failed == 0));
  ck_assert(all_ok(m.tokens_recorded == 12 * ML * TOK));
  /* Measured: a mean of 0.781 against 0.543 by the plan's static shares. */
  ck_assert(all_ok(sum_split > sum_static + 0.03 * 12 * ML));
  eplb_runtime_destroy(rt);
  eplb_runtime_destroy(srt);
}
END_TEST

/* The per-batch split with the decode objective (cfg.split_model, 2 nodes,
 * local_first 0): an ESFT-like batch of 3 tokens per rank on a few experts.
 * Every rank gets the same shares bit for bit; they sum to 1 per expert,
 * every token lands on a replica of its expert, and they model no slower
 * than the token-balanced split of the batch's global counts (the library's
 * eplb_split_solve and eplb_decode_split_time, the runtime's options). */
START_TEST(per_batch_decode_split_agrees) {
  enum { T = 3 };
  eplb_model_desc_t md;
  eplb_gpu_desc_t gd;
  ck_assert_int_eq(eplb_model_preset("deepseek-v3", &md), EPLB_OK);
  ck_assert_int_eq(eplb_gpu_preset("h20", &gd), EPLB_OK);
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, ML, ME, MK, MS);
  c.local_first = 0, c.split_model = &md, c.split_gpu = &gd;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  const uint32_t R = MS * g_size;
  eplb_decode_split_options_t o;
  eplb_decode_split_options_default(&o);
  o.a2a_us_per_token = eplb_model_a2a_us_per_token(&md, &gd, g_size, 2);
  o.launch_us = gd.launch_us;
  eplb_split_t *ref = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &ref), EPLB_OK);
  int ok = 1, agree = 1, sums = 1, notworse = 1;
  uint32_t spg[4] = {MS, MS, MS, MS};
  for (uint32_t step = 0; step < 6; step++) {
    for (uint32_t l = 0; l < ML; l++) {
      int32_t ids[T * MK], slots[T * MK];
      double w[ME] = {0};
      for (uint32_t i = 0; i < T; i++) {
        uint32_t a = (g_rank + i + step) % 3, b = 3 + (g_rank * 3 + i * 2 + l + step) % (ME - 3);
        ids[i * MK] = (int32_t)a, ids[i * MK + 1] = (int32_t)b;
        w[a] += 1, w[b] += 1;
      }
      uint64_t base = (uint64_t)step * T * g_size + g_rank * T;
      ok &= eplb_runtime_route(rt, l, ids, T, base, slots) == EPLB_OK;
      const int32_t *p2l;
      const double *share, *ns;
      double t_star = 0, hg[2], td = 0, tb = 0;
      ok &= eplb_runtime_layer_plan(rt, l, &p2l, NULL) == EPLB_OK;
      ok &= eplb_runtime_layer_split(rt, l, &share, &ns, &t_star) == EPLB_OK;
      ok &= ns == NULL && t_star > 0;
      double glob[MS * 4 + 1];
      memcpy(glob, share, R * sizeof *share);
      glob[R] = t_star;
      hash2(glob, R + 1, hg);
      agree &= same_hash(hg, 1);
      for (uint32_t i = 0; i < T * MK; i++)
        ok &= slots[i] >= 0 && (uint32_t)slots[i] < R && p2l[slots[i]] == ids[i];
      double sum[ME] = {0}, sh[MS * 4], gl[4];
      for (uint32_t r = 0; r < R; r++)
        sum[p2l[r]] += share[r];
      for (uint32_t e = 0; e < ME; e++)
        sums &= fabs(sum[e] - 1) <= 1e-12;
      /* The batch's global counts, then the token-balanced reference. */
      ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, w, ME, EPLB_REDUCE_SUM), EPLB_OK);
      eplb_split_problem_t pb = {ME, g_size, R, (const uint32_t *)p2l, spg};
      eplb_split_result_t res = {.share = sh, .gpu_load = gl};
      ok &= eplb_split_solve(ref, &pb, w, &res) == EPLB_OK;
      ok &= eplb_decode_split_time(&pb, w, &md, &gd, &o, share, NULL, &td) == EPLB_OK;
      ok &= eplb_decode_split_time(&pb, w, &md, &gd, &o, sh, NULL, &tb) == EPLB_OK;
      notworse &= td <= tb * (1 + 1e-12);
    }
    ok &= eplb_runtime_step_end(rt) == EPLB_OK;
  }
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(ok));
  ck_assert(all_ok(agree));
  ck_assert(all_ok(sums));
  ck_assert(all_ok(notworse));
  ck_assert(all_ok(m.splits == 6 * ML && m.splits_failed == 0 && m.splits_decode > 0));
  eplb_split_destroy(ref);
  eplb_runtime_destroy(rt);
}
END_TEST

/* Agreed errors: a bad id on one rank keeps the previous shares on every
 * rank (that rank alone gets EPLB_ERANGE and counts nothing); ranks calling
 * different layers all get EPLB_ESHAPE; serving goes on afterwards. */
/* The device backend (emulated) across 4 ranks: the same windows as a
 * host runtime fed the same ids; a table upload that fails on rank 1 only
 * keeps the switching layers' plans on every rank (the round's agreement),
 * every rank returns EPLB_EDEVICE, and once uploads work the plan switches
 * everywhere with device maps equal to host maps. */
START_TEST(device_runtime_agrees) {
  enum { T = 64 };
  eplb_runtime_config_t c;
  eplb_runtime_t *host = NULL, *dev = NULL;
  mpi_cfg(&c, 2, 8, 2, 4);
  c.split_per_batch = 0; /* the device split is one process's */
  c.policy.interval_steps = 2, c.policy.window_steps = 8, c.policy.layers_per_step = 2;
  c.policy.gain_threshold = 0;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &host) == EPLB_OK));
  c.device.kind = EPLB_DEVICE_EMULATED;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &dev) == EPLB_OK));
  if (g_rank == 1)
    ck_assert_int_eq(eplb_runtime_device_inject(dev, 0, 1000, 0), EPLB_OK);
  int ok = 1, edevice = 0;
  int32_t ids[T * 2], hs[T * 2], ds[T * 2];
  double wh[16], wd[16];
  for (uint32_t s = 0; s < 24; s++) {
    if (s == 12 && g_rank == 1)
      ck_assert_int_eq(eplb_runtime_device_inject(dev, 0, 0, 0), EPLB_OK);
    for (uint32_t t = 0; t < T; t++)
      ids[t * 2] = (int32_t)(s / 4 % 2), ids[t * 2 + 1] = (int32_t)(2 + (t + s + g_rank) % 6);
    for (uint32_t l = 0; l < 2; l++) {
      ok &= eplb_runtime_route(host, l, ids, T, s * T, hs) == EPLB_OK;
      ok &= eplb_runtime_device_route(dev, l, ids, T, s * T, ds) == EPLB_OK;
      ok &= eplb_runtime_map(dev, l, ids, T, s * T, hs) == EPLB_OK; /* the device's host tables */
      ok &= memcmp(hs, ds, sizeof hs) == 0;
    }
    ok &= eplb_runtime_step_end(host) == EPLB_OK;
    eplb_status_t st = eplb_runtime_step_end(dev);
    edevice += st == EPLB_EDEVICE;
    ok &= st == EPLB_OK || st == EPLB_EDEVICE;
    if (s < 12)
      ok &= eplb_runtime_epoch(dev) == 0;
    ok &= eplb_runtime_window(host, EPLB_WINDOW_SUM, wh) == EPLB_OK;
    ok &= eplb_runtime_window(dev, EPLB_WINDOW_SUM, wd) == EPLB_OK;
    ok &= memcmp(wh, wd, sizeof wh) == 0;
  }
  ck_assert(all_ok(ok));
  double e[2] = {edevice, -edevice};
  ck_assert_int_eq(eplb_runtime_allreduce(g_verdict, e, 2, EPLB_REDUCE_MAX), EPLB_OK);
  ck_assert(all_ok(edevice > 0 && e[0] == edevice && -e[1] == edevice)); /* every rank alike */
  ck_assert(all_ok(eplb_runtime_epoch(dev) >= 1 && eplb_runtime_epoch(host) >= 1));
  eplb_runtime_destroy(dev);
  eplb_runtime_destroy(host);
}
END_TEST

START_TEST(per_batch_split_errors) {
  eplb_runtime_config_t c;
  eplb_runtime_t *rt = NULL;
  mpi_cfg(&c, ML, ME, MK, MS);
  const uint32_t R = MS * g_size;
  ck_assert(all_ok(eplb_runtime_create(&c, NULL, &rt) == EPLB_OK));
  int32_t ids[TOK * MK], slots[TOK * MK];
  gen_tokens(0, 1, ids);
  ck_assert(all_ok(eplb_runtime_route(rt, 1, ids, TOK, g_rank * TOK, slots) == EPLB_OK));
  const double *share;
  double before[MS * 4], h[2], t0 = 0, t1 = 0;
  eplb_runtime_layer_split(rt, 1, &share, NULL, &t0);
  memcpy(before, share, sizeof before);
  gen_tokens(1, 1, ids);
  if (g_rank == 2)
    ids[5] = ME; /* out of range */
  eplb_status_t st = eplb_runtime_route(rt, 1, ids, TOK, g_rank * TOK, slots);
  ck_assert(all_ok(st == (g_rank == 2 ? EPLB_ERANGE : EPLB_OK)));
  eplb_runtime_layer_split(rt, 1, &share, NULL, &t1);
  hash2(share, R, h);
  ck_assert(all_ok(!memcmp(before, share, sizeof before) && t0 == t1));
  ck_assert(all_ok(same_hash(h, 1)));
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(rt, &m);
  ck_assert(all_ok(m.splits_failed == 1 && m.tokens_recorded == (g_rank == 2 ? 1 : 2) * TOK));
  gen_tokens(2, 1, ids);
  st = eplb_runtime_route(rt, g_rank == 3 ? 2 : 1, ids, TOK, g_rank * TOK, slots);
  ck_assert(all_ok(st == EPLB_ESHAPE));
  ck_assert(all_ok(eplb_runtime_route(rt, 1, ids, TOK, g_rank * TOK, slots) == EPLB_OK));
  /* A call that fails its own checks still joins the all-reduce: a layer
   * out of range on one rank is EPLB_ESHAPE on its peers; a NULL argument
   * keeps every rank's shares. Before, the peers waited for ever. */
  st = eplb_runtime_route(rt, g_rank == 1 ? ML : 1, ids, TOK, g_rank * TOK, slots);
  ck_assert(all_ok(st == (g_rank == 1 ? EPLB_ERANGE : EPLB_ESHAPE)));
  eplb_runtime_layer_split(rt, 1, &share, NULL, &t0);
  memcpy(before, share, sizeof before);
  st = eplb_runtime_route(rt, 1, g_rank == 0 ? NULL : ids, TOK, g_rank * TOK, slots);
  ck_assert(all_ok(st == (g_rank == 0 ? EPLB_EINVAL : EPLB_OK)));
  st = eplb_runtime_record(rt, 1, g_rank == 3 ? NULL : ids, TOK);
  ck_assert(all_ok(st == (g_rank == 3 ? EPLB_EINVAL : EPLB_OK)));
  uint32_t counts[ME] = {0};
  counts[0] = TOK * MK;
  st = eplb_runtime_record_counts(rt, 1, g_rank == 2 ? NULL : counts);
  ck_assert(all_ok(st == (g_rank == 2 ? EPLB_EINVAL : EPLB_OK)));
  eplb_runtime_layer_split(rt, 1, &share, NULL, &t1);
  ck_assert(all_ok(!memcmp(before, share, sizeof before) && t0 == t1));
  ck_assert(all_ok(eplb_runtime_route(rt, 1, ids, TOK, g_rank * TOK, slots) == EPLB_OK));
  ck_assert(all_ok(eplb_runtime_step_end(rt) == EPLB_OK));
  eplb_runtime_destroy(rt);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("runtime-mpi");
  TCase *tc = tcase_create("mpi");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, allreduced_counts);
  tcase_add_test(tc, sampled_rows);
  tcase_add_test(tc, config_mismatch);
  tcase_add_test(tc, map_follows_node_shares);
  tcase_add_test(tc, migration_zero_violations);
  tcase_add_test(tc, transfer_stall_times_out);
  tcase_add_test(tc, per_batch_split_agrees);
  tcase_add_test(tc, per_batch_decode_split_agrees);
  tcase_add_test(tc, per_batch_split_errors);
  tcase_add_test(tc, device_runtime_agrees);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  const uint32_t sizes[] = {4};
  if (mpi_test_init(&argc, &argv, "test_runtime_mpi", sizes, (int)(sizeof sizes / sizeof *sizes)))
    return 1;
  return mpi_test_run(suite());
}
