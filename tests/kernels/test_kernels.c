/* Kernels suite (CPU): the CPU references of the CUDA kernels — counts
 * equal a naive count (random and the ESFT trace), the map is the
 * runtime's map bit for bit, keeps shares and local-first, switches by
 * epoch; the sample ring; the reference MoE layer; and the clean statuses
 * of the CUDA API and of the NCCL communicator without a device. */
#include "tests/reference/reference.h"
#include "tests/support.h"

#include "eplb/kernels.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

START_TEST(count_naive) {
  enum { W = 4, L = 3, E = 64, K = 6, N = 500 };
  static uint32_t counts[W * L * E], naive[L * E];
  static int32_t ids[N * K];
  uint32_t step = 0, dropped = 0, bad = 0;
  eplb_cuda_ring_t r = {counts, &step, &dropped, W, L, E};
  memset(counts, 0, sizeof counts);
  for (int s = 0; s < 6; s++) { /* wraps the ring */
    memset(naive, 0, sizeof naive);
    for (uint32_t l = 0; l < L; l++) {
      for (int i = 0; i < N * K; i++) {
        uint32_t x = next_u32();
        ids[i] = x % 33 == 0 ? (x & 1 ? -1 : E + (int32_t)(x % 7)) : (int32_t)(x % E);
        if ((uint32_t)ids[i] < E)
          naive[l * E + (uint32_t)ids[i]]++;
        else
          bad++;
      }
      eplb__count_ref(&r, l, ids, N / 2, K); /* two calls add up */
      eplb__count_ref(&r, l, ids + N / 2 * K, N - N / 2, K);
    }
    ck_assert_mem_eq(counts + (size_t)(step % W) * L * E, naive, sizeof naive);
    ck_assert_uint_eq(dropped, bad);
    eplb__step_ref(&r);
    ck_assert_uint_eq(step, (uint32_t)s + 1);
    for (size_t i = 0; i < (size_t)L * E; i++)
      ck_assert_uint_eq(counts[(size_t)(step % W) * L * E + i], 0);
  }
}
END_TEST

/* topk_ids.npy of the ESFT sample: uint8 [tokens][26][6], 64 experts. */
static uint8_t *load_esft(size_t *tokens) { return eplb_test_load_esft(tokens); }

START_TEST(count_esft) {
  size_t T = 0;
  uint8_t *d = load_esft(&T);
  ck_assert_uint_ge(T, 4096);
  enum { L = 26, E = 64, K = 6, N = 4096 };
  static uint32_t counts[2 * L * E], naive[L * E];
  static int32_t ids[N * K];
  uint32_t step = 0, dropped = 0;
  eplb_cuda_ring_t r = {counts, &step, &dropped, 2, L, E};
  memset(counts, 0, sizeof counts), memset(naive, 0, sizeof naive);
  for (uint32_t l = 0; l < L; l++) {
    for (size_t t = 0; t < N; t++)
      for (int j = 0; j < K; j++) {
        ids[t * K + j] = d[(t * L + l) * K + j];
        naive[l * E + ids[t * K + j]]++;
      }
    eplb__count_ref(&r, l, ids, N, K);
  }
  ck_assert_mem_eq(counts, naive, sizeof naive);
  ck_assert_uint_eq(dropped, 0);
  free(d);
}
END_TEST

static eplb_cuda_table_t view(const eplb__dtab_t *t) {
  return (eplb_cuda_table_t){t->off, t->slot, t->alias, t->prob};
}

START_TEST(map_matches_runtime) {
  enum { L = 2, E = 16, K = 4, S = 24, N = 2000 };
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = L, c.num_experts = E, c.topk = K, c.slots_per_rank = S;
  eplb_runtime_t *rt = NULL;
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_OK);
  static int32_t ids[N * K], a[N * K], b[N * K];
  for (int i = 0; i < N * K; i++)
    ids[i] = (int32_t)(next_u32() % E);
  for (uint32_t l = 0; l < L; l++) {
    uint32_t epoch = eplb__live_active(rt->live, l), bad = 0;
    eplb_cuda_dispatch_t d = {
        {view(eplb__live_buffer(rt->live, l, 0)), view(eplb__live_buffer(rt->live, l, 1))},
        &epoch,
        E,
        rt->g.R};
    ck_assert_int_eq(eplb_runtime_map(rt, l, ids, N, 12345, a), EPLB_OK);
    eplb__map_ref(&d, l, ids, N, K, 12345, b, &bad);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_uint_eq(bad, 0);
  }
  eplb_runtime_destroy(rt);
}
END_TEST

/* Two nodes of two ranks with two slots each: expert 0 in slots 0, 1
 * (node 0) and 4, 5 (node 1); expert 1 in 2, 3 (node 0, slot 3 share 0)
 * and 6, 7. */
static const int32_t p2l[8] = {0, 0, 1, 1, 0, 0, 1, 1};
static const double shares[8] = {0.1, 0.2, 0.5, 0.0, 0.3, 0.4, 0.25, 0.25};

static void frequencies(const eplb_cuda_dispatch_t *d, uint32_t n, double *freq) {
  enum { CH = 1000 };
  int32_t ids[CH * 2], out[CH * 2];
  uint32_t hits[8] = {0};
  for (uint32_t i = 0; i < CH; i++)
    ids[2 * i] = 0, ids[2 * i + 1] = 1;
  for (uint32_t base = 0; base < n; base += CH) {
    eplb__map_ref(d, 3, ids, CH, 2, base, out, NULL);
    for (int i = 0; i < CH * 2; i++) {
      ck_assert_int_ge(out[i], 0);
      ck_assert_int_lt(out[i], 8);
      ck_assert_int_eq(p2l[out[i]], ids[i]); /* a replica of the right expert */
      hits[out[i]]++;
    }
  }
  for (int s = 0; s < 8; s++)
    freq[s] = hits[s] / (double)n;
}

START_TEST(map_distribution_local_first_epoch) {
  eplb__dtab_t t[2] = {{0}, {0}};
  ck_assert_int_eq(eplb__dtab_alloc(&t[0], 2, 8), EPLB_OK);
  ck_assert_int_eq(eplb__dtab_alloc(&t[1], 2, 8), EPLB_OK);
  eplb__dtab_build(&t[0], 2, 8, p2l, shares, 2, 2, 0, 1); /* node 0, local first */
  eplb__dtab_build(&t[1], 2, 8, p2l, shares, 2, 2, 0, 0); /* global shares */
  uint32_t epoch = 0;
  eplb_cuda_dispatch_t d = {{view(&t[0]), view(&t[1])}, &epoch, 2, 8};
  double f[8];
  uint32_t n = 100000;
  frequencies(&d, n, f);
  const double local[8] = {1.0 / 3, 2.0 / 3, 1, 0, 0, 0, 0, 0};
  for (int s = 0; s < 8; s++)
    ck_assert_double_eq_tol(f[s], local[s], 0.01);
  epoch = 7; /* odd: buffer 1, switched without touching the tables */
  frequencies(&d, n, f);
  for (int s = 0; s < 8; s++)
    ck_assert_double_eq_tol(f[s], shares[s], 0.01);
  /* Deterministic, and bad ids give -1 and are counted. */
  int32_t ids[4] = {1, -1, 0, 2}, o1[4], o2[4];
  uint32_t bad = 0;
  eplb__map_ref(&d, 0, ids, 2, 2, 99, o1, &bad);
  eplb__map_ref(&d, 0, ids, 2, 2, 99, o2, &bad);
  ck_assert_mem_eq(o1, o2, sizeof o1);
  ck_assert_int_eq(o1[1], -1);
  ck_assert_int_eq(o1[3], -1);
  ck_assert_uint_eq(bad, 4);
  eplb__dtab_free(&t[0]);
  eplb__dtab_free(&t[1]);
}
END_TEST

START_TEST(sample_ring) {
  enum { CAP = 8, L = 2, K = 3, EVERY = 4, N = 64 };
  int32_t ids[CAP * L * K], src[CAP], in[N * K];
  uint64_t tok[CAP];
  memset(ids, 0xff, sizeof ids), memset(src, 0, sizeof src), memset(tok, 0, sizeof tok);
  eplb_cuda_sample_ring_t s = {ids, src, tok, CAP, L, K, EVERY, 5};
  for (int i = 0; i < N * K; i++)
    in[i] = i;
  for (uint32_t l = 0; l < L; l++) { /* tokens 100 .. 163 in two calls */
    eplb__sample_ref(&s, l, in, 30, 100);
    eplb__sample_ref(&s, l, in + 30 * K, N - 30, 130);
  }
  /* Sampled: 100, 104, ..., 160: the last 8 of them are 132 .. 160. */
  for (uint64_t g = 132; g <= 160; g += EVERY) {
    size_t e = (size_t)(g / EVERY % CAP);
    ck_assert_uint_eq(tok[e], g);
    ck_assert_int_eq(src[e], 5);
    for (uint32_t l = 0; l < L; l++)
      for (int j = 0; j < K; j++)
        ck_assert_int_eq(ids[(e * L + l) * K + j], (int32_t)((g - 100) * K + j));
  }
}
END_TEST

START_TEST(moe_reference) {
  enum { B = 3, H = 8, F = 4, E = 5, K = 2 };
  eplb_test_moe_shape_t sh = {B, H, F, E, K};
  float x[B * H], wr[E * H], w1[E * F * H], w3[E * F * H], w2[E * H * F], y[B * H], y2[B * H];
  float *all[] = {x, wr, w1, w3, w2};
  size_t len[] = {B * H, E * H, E * F * H, E * F * H, E * H * F};
  for (int a = 0; a < 5; a++)
    for (size_t i = 0; i < len[a]; i++)
      all[a][i] = (float)((int)(next_u32() % 2001) - 1000) / 1000.0f;
  int32_t top[B * K];
  eplb_test_moe_ref(&sh, x, wr, w1, w3, w2, y, top);
  for (int t = 0; t < B; t++) {
    float sc[E];
    for (int e = 0; e < E; e++) {
      sc[e] = 0;
      for (int h = 0; h < H; h++)
        sc[e] += x[t * H + h] * wr[e * H + h];
    }
    /* The chosen ids are distinct and no unchosen expert scores higher. */
    ck_assert_int_ne(top[t * K], top[t * K + 1]);
    ck_assert(sc[top[t * K]] >= sc[top[t * K + 1]]);
    for (int e = 0; e < E; e++)
      if (e != top[t * K] && e != top[t * K + 1])
        ck_assert(sc[e] <= sc[top[t * K + 1]]);
  }
  for (size_t i = 0; i < len[4]; i++)
    w2[i] *= 2; /* the layer is linear in the down projection */
  eplb_test_moe_ref(&sh, x, wr, w1, w3, w2, y2, NULL);
  for (int i = 0; i < B * H; i++) {
    ck_assert(isfinite(y[i]));
    ck_assert_float_eq_tol(y2[i], 2 * y[i], 1e-5f);
  }
}
END_TEST

/* Without a device every entry point fails cleanly; with one, only the
 * argument checks are tested here (tests/gpu runs the kernels). */
START_TEST(api_statuses) {
  int n = -1;
  eplb_status_t dev = eplb_cuda_device_count(&n);
  int cuda = eplb_feature_enabled(EPLB_FEATURE_CUDA);
  ck_assert_int_eq(dev, cuda ? (n > 0 ? EPLB_OK : EPLB_ENODEVICE) : EPLB_EUNSUPPORTED);
  ck_assert_int_eq(eplb__cuda_count(NULL, 0, NULL, 0, 1, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb__cuda_map(NULL, 0, NULL, 0, 1, 0, NULL, NULL, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb__cuda_sample(NULL, 0, NULL, 0, 0, NULL), EPLB_EINVAL);
  uint32_t u = 0;
  eplb_cuda_ring_t r = {&u, &u, &u, 1, 1, 20000};
  ck_assert_int_eq(eplb__cuda_count(&r, 0, NULL, 0, 1, NULL), EPLB_ERANGE);
  if (dev == EPLB_OK)
    return;
  /* Host pointers would be wrong on a device; none is here to read them. */
  eplb_status_t want = cuda ? EPLB_ENODEVICE : EPLB_EUNSUPPORTED;
  int32_t ids[4] = {0, 1, 2, 3}, out[4];
  r.num_experts = 4;
  ck_assert_int_eq(eplb__cuda_count(&r, 0, ids, 2, 2, NULL), want);
  ck_assert_int_eq(eplb__cuda_step(&r, NULL), want);
  uint32_t off[5] = {0, 1, 2, 3, 4}, prob[4] = {0};
  int32_t slot[4] = {0, 1, 2, 3};
  eplb_cuda_table_t t = {off, slot, slot, prob};
  eplb_cuda_dispatch_t d = {{t, t}, &u, 4, 4};
  ck_assert_int_eq(eplb__cuda_map(&d, 0, ids, 2, 2, 0, out, NULL, NULL), want);
  ck_assert_int_eq(eplb__cuda_switch(&d, NULL), want);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "cuda_switch"));
  int32_t src = 0;
  uint64_t tok = 0;
  eplb_cuda_sample_ring_t s = {out, &src, &tok, 1, 1, 2, 1, 0};
  ck_assert_int_eq(eplb__cuda_sample(&s, 0, ids, 2, 0, NULL), want);
}
END_TEST

START_TEST(nccl_without_device) {
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = 2, c.num_experts = 8, c.topk = 2, c.slots_per_rank = 8;
  c.comm.kind = EPLB_COMM_NCCL;
  eplb_runtime_t *rt = NULL;
  int nccl = eplb_feature_enabled(EPLB_FEATURE_NCCL), n = 0;
  if (!nccl) {
    ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EUNSUPPORTED);
    ck_assert_ptr_null(rt);
    return;
  }
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_EINVAL); /* no nccl_comm */
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "nccl_comm"));
  void *no_comm = NULL; /* an ncclComm_t that is NULL: the runtime makes its own */
  c.comm.nccl_comm = &no_comm;
  if (eplb_cuda_device_count(&n) == EPLB_OK)
    return; /* the GPU check runs this path on a device */
  ck_assert_int_eq(eplb_runtime_create(&c, NULL, &rt), EPLB_ENODEVICE);
  ck_assert_ptr_null(rt);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "NCCL"));
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("kernels");
  TCase *tc = tcase_create("ref");
  tcase_add_test(tc, count_naive);
  tcase_add_test(tc, count_esft);
  tcase_add_test(tc, map_matches_runtime);
  tcase_add_test(tc, map_distribution_local_first_epoch);
  tcase_add_test(tc, sample_ring);
  tcase_add_test(tc, moe_reference);
  tcase_add_test(tc, api_statuses);
  tcase_add_test(tc, nccl_without_device);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
