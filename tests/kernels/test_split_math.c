/* Kernels suite (CPU): the per-batch split of eplb__cuda_split in its C build
 * (kernels/split_math.h) against the exact host solver eplb_split_solve on
 * random instances and on every batch and layer of the ESFT trace under a
 * balanced plan; the iteration budget and bad placements keep the previous
 * shares; the table build (kernels/alias_math.h) equals the runtime's table
 * bit for bit, and the runtime's table equals the Vose construction it had
 * before the math moved into the shared header; all layers at once equal
 * layer by layer; the API's statuses; and, where a device exists, the CUDA
 * versions equal the references bit for bit. */
#include "tests/support.h"

#include "eplb_config.h"

#include "eplb/kernels.h"
#include "eplb/plan.h"
#include "eplb/split.h"
#include "kernels/alias_math.h"
#include "kernels/kernels.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next_u32(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}
static double next_unit(void) { return (next_u32() + 0.5) / 4294967296.0; }

/* One instance: E experts, G GPUs of S slots. */
typedef struct inst {
  uint32_t E, G, S;
  int32_t p2l[512];
  uint32_t counts[512];
} inst_t;

/* A random placement (every expert has a replica; some share a GPU, some
 * have one) and skewed counts with zeros. */
static void random_inst(inst_t *in) {
  uint32_t G = 1 + next_u32() % 8, S = 1 + next_u32() % 6;
  uint32_t R = G * S, E = 1 + next_u32() % R;
  if (next_u32() % 16 == 0) { /* DeepSeek-V3's shape: 256 experts in 32 x 9 slots */
    G = 32, S = 9, R = 288, E = 256;
    if (next_u32() % 2)
      G = 16, S = 18; /* or on 16 GPUs */
  }
  in->E = E, in->G = G, in->S = S;
  uint32_t perm[512];
  for (uint32_t r = 0; r < R; r++)
    perm[r] = r;
  for (uint32_t r = R; r > 1; r--) {
    uint32_t j = next_u32() % r, t = perm[r - 1];
    perm[r - 1] = perm[j], perm[j] = t;
  }
  for (uint32_t i = 0; i < R; i++) /* the first E slots of a shuffle: one of each */
    in->p2l[perm[i]] = (int32_t)(i < E ? i : next_u32() % E);
  double skew = 3.0 * next_unit();
  uint32_t mode = next_u32() % 10;
  for (uint32_t e = 0; e < E; e++) {
    double z = pow(e + 1.0, -skew) * 1000.0 * (1 + next_u32() % 50);
    uint32_t c = (uint32_t)(z * next_unit());
    if (next_u32() % 5 == 0)
      c = 0;
    if (mode == 0)
      c = next_u32(); /* up to 2^32 - 1 */
    else if (mode == 1)
      c = next_u32() % 3;
    in->counts[e] = c;
  }
  if (next_u32() % 50 == 0)
    memset(in->counts, 0, sizeof in->counts);
}

static eplb_split_t *int_solver(void) {
  eplb_split_options_t o;
  eplb_split_options_default(&o);
  o.mode = EPLB_SPLIT_INTEGER;
  o.warm_start = 0;
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(&o, &s), EPLB_OK);
  return s;
}

static uint32_t max_newton = 0;

/* Solves the instance both ways and checks the device math's split. */
static void check_inst(eplb_split_t *solver, const inst_t *in, unsigned char *ws,
                       double *share_out) {
  uint32_t E = in->E, G = in->G, S = in->S, R = G * S;
  uint32_t p2l_u[512], spg[64];
  double loads[512], share[512], gload[64];
  for (uint32_t r = 0; r < R; r++)
    p2l_u[r] = (uint32_t)in->p2l[r];
  for (uint32_t g = 0; g < G; g++)
    spg[g] = S;
  for (uint32_t e = 0; e < E; e++)
    loads[e] = in->counts[e];
  eplb_split_problem_t pb = {E, G, R, p2l_u, spg};
  eplb_split_result_t res = {.share = share, .gpu_load = gload};
  ck_assert_int_eq(eplb_split_solve(solver, &pb, loads, &res), EPLB_OK);

  double my[512], t = -1;
  uint32_t status = 99, it = 0;
  ck_assert_uint_ge(eplb__cuda_split_workspace_bytes(E, G, S), 1);
  eplb__split_ref(in->p2l, E, G, S, in->counts, my, &t, &status, ws, 64, &it);
  ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_CONVERGED);
  if (it > max_newton)
    max_newton = it;
  /* T*: the same rational, so the same double (the brief asks 1e-6). */
  ck_assert_msg(fabs(t - res.t_star) <= 1e-6 * fmax(1.0, res.t_star), "T* %.17g vs %.17g", t,
                res.t_star);
  ck_assert(t == res.t_star);
  double tot[512] = {0}, gl[64] = {0};
  for (uint32_t r = 0; r < R; r++) {
    uint32_t e = (uint32_t)in->p2l[r];
    ck_assert(my[r] >= 0 && my[r] <= 1);
    tot[e] += my[r];
    double x = my[r] * in->counts[e];
    ck_assert(fabs(x - nearbyint(x)) <= 1e-6 * fmax(1.0, x)); /* whole tokens */
    gl[r / S] += nearbyint(x);
  }
  for (uint32_t e = 0; e < E; e++)
    ck_assert_msg(fabs(tot[e] - 1) <= 1e-12, "expert %u shares sum to %.17g", e, tot[e]);
  double mx = 0;
  for (uint32_t g = 0; g < G; g++)
    mx = fmax(mx, gl[g]);
  ck_assert_msg(mx == ceil(t), "max GPU load %.17g, ceil(T*) %.17g", mx, ceil(t));
  ck_assert(mx == res.max_load);
  if (share_out)
    memcpy(share_out, my, R * sizeof *my);
}

START_TEST(random_vs_split_solve) {
  eplb_split_t *s = int_solver();
  unsigned char *ws = malloc(eplb__cuda_split_workspace_bytes(256, 32, 18));
  ck_assert_ptr_nonnull(ws);
  inst_t in;
  for (int i = 0; i < 3000; i++) {
    random_inst(&in);
    check_inst(s, &in, ws, NULL);
  }
  ck_assert_uint_ge(max_newton, 2); /* some instances did iterate */
  free(ws);
  eplb_split_destroy(s);
}
END_TEST

/* topk_ids.npy of the ESFT sample: uint8 [tokens][26][6], 64 experts. */
static uint8_t *load_esft(size_t *tokens) { return eplb_test_load_esft(tokens); }

enum { EL = 26, EE = 64, EK = 6, EG = 8, ES = 10, EB = 256 };

/* A balanced plan (2 nodes x 4 GPUs, 10 slots each) of the whole trace. */
static eplb_plan_t *esft_plan(const uint8_t *ids, size_t T) {
  static double w[EL * EE];
  memset(w, 0, sizeof w);
  for (size_t i = 0; i < T * EL * EK; i++)
    w[(i / EK) % EL * EE + ids[i]] += 1;
  eplb_loads_t loads = {EL, EE, w};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_BALANCED;
  o.num_gpus = EG;
  o.num_nodes = 2;
  o.num_replicas = EG * ES;
  o.threads = 1;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(&loads, &o, &p), EPLB_OK);
  return p;
}

START_TEST(esft_every_batch_and_layer) {
  size_t T = 0;
  uint8_t *ids = load_esft(&T);
  eplb_plan_t *plan = esft_plan(ids, T);
  eplb_split_t *s = int_solver();
  unsigned char *ws = malloc(eplb__cuda_split_workspace_bytes(EE, EG, ES));
  ck_assert_ptr_nonnull(ws);
  inst_t in = {EE, EG, ES, {0}, {0}};
  size_t n = 0;
  for (size_t b = 0; b + EB <= T; b += EB)
    for (uint32_t l = 0; l < EL; l++) {
      memcpy(in.p2l, eplb_plan_phy2log(plan, l), EG * ES * sizeof(int32_t));
      memset(in.counts, 0, sizeof in.counts);
      for (size_t i = b; i < b + EB; i++)
        for (uint32_t k = 0; k < EK; k++)
          in.counts[ids[(i * EL + l) * EK + k]]++;
      check_inst(s, &in, ws, NULL);
      n++;
    }
  ck_assert_uint_ge(n, 26 * 100);
  free(ws);
  eplb_split_destroy(s);
  eplb_plan_destroy(plan);
  free(ids);
}
END_TEST

/* Exhausting the budget, or a bad placement, leaves share and t_star as
 * they were (bit for bit). */
START_TEST(budget_and_bad_input_keep_previous) {
  unsigned char *ws = malloc(eplb__cuda_split_workspace_bytes(256, 32, 18));
  ck_assert_ptr_nonnull(ws);
  inst_t in;
  int tried = 0;
  for (int i = 0; i < 5000 && tried < 50; i++) {
    random_inst(&in);
    uint32_t R = in.G * in.S, status = 99, it = 0;
    double share[512], t = 0;
    eplb__split_ref(in.p2l, in.E, in.G, in.S, in.counts, share, &t, &status, ws, 1000, &it);
    ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_CONVERGED);
    if (it < 2)
      continue;
    tried++;
    double prev[512], keep[512], t2 = -7.25;
    for (uint32_t r = 0; r < R; r++)
      prev[r] = keep[r] = next_unit();
    uint32_t it2 = 12345;
    eplb__split_ref(in.p2l, in.E, in.G, in.S, in.counts, prev, &t2, &status, ws, it - 1, &it2);
    ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_NOT_CONVERGED);
    ck_assert_mem_eq(prev, keep, R * sizeof *prev);
    ck_assert(t2 == -7.25);
    ck_assert_uint_eq(it2, 12345);
    /* The exact budget suffices. */
    eplb__split_ref(in.p2l, in.E, in.G, in.S, in.counts, prev, &t2, &status, ws, it, &it2);
    ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_CONVERGED);
    ck_assert_mem_eq(prev, share, R * sizeof *prev);
    ck_assert(t2 == t);
    /* Bad placements: an id out of range, an expert without a replica. */
    int32_t save = in.p2l[0];
    for (int bad = 0; bad < 3; bad++) {
      in.p2l[0] = bad == 0 ? (int32_t)in.E : bad == 1 ? -1 : save;
      uint32_t E = bad == 2 ? in.E + 1 : in.E; /* expert E has no replica */
      memcpy(prev, keep, sizeof prev);
      t2 = -7.25;
      eplb__split_ref(in.p2l, E, in.G, in.S, in.counts, prev, &t2, &status, ws, 100, NULL);
      ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_BAD_INPUT);
      ck_assert_mem_eq(prev, keep, R * sizeof *prev);
      ck_assert(t2 == -7.25);
    }
    in.p2l[0] = save;
  }
  ck_assert_int_ge(tried, 20);
  free(ws);
  /* Counts whose total x GPUs passes 2^62: 65,535 experts of 2^32 - 1
   * tokens on 65,536 GPUs of one slot. */
  enum { BE = 65535, BG = 65536 };
  int32_t *p2l = malloc(BG * sizeof *p2l);
  uint32_t *counts = malloc(BE * sizeof *counts), status = 0;
  double *share = malloc(BG * sizeof *share), t = 3;
  ws = malloc(eplb__cuda_split_workspace_bytes(BE, BG, 1));
  ck_assert(p2l && counts && share && ws);
  for (uint32_t r = 0; r < BG; r++)
    p2l[r] = (int32_t)(r % BE), share[r] = 0.5;
  for (uint32_t e = 0; e < BE; e++)
    counts[e] = UINT32_MAX;
  eplb__split_ref(p2l, BE, BG, 1, counts, share, &t, &status, ws, 100, NULL);
  ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_BAD_INPUT);
  ck_assert(t == 3 && share[0] == 0.5);
  counts[0] = 7;
  for (uint32_t e = 1; e < BE; e++)
    counts[e] = e % 1000; /* small totals are fine at this size */
  eplb__split_ref(p2l, BE, BG, 1, counts, share, &t, &status, ws, 100, NULL);
  ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_CONVERGED);
  free(p2l);
  free(counts);
  free(share);
  free(ws);
}
END_TEST

/* The runtime's Vose construction as it was before it moved into
 * kernels/alias_math.h (verbatim but for the names), to show the move kept
 * every table bit for bit. */
static uint32_t old_to_prob(double q) { return q >= 1 ? UINT32_MAX : (uint32_t)ldexp(q, 32); }
static void old_build_alias(eplb__dtab_t *t, uint32_t a, uint32_t b) {
  uint32_t n = b - a, ns = 0, nl = 0;
  uint32_t *small = t->work, *large = t->work + n;
  double *q = t->q;
  for (uint32_t j = a; j < b; j++) {
    q[j] = t->weight[j] * n;
    if (q[j] < 1)
      small[ns++] = j;
    else
      large[nl++] = j;
  }
  while (ns && nl) {
    uint32_t s = small[--ns], l = large[nl - 1];
    t->prob[s] = old_to_prob(q[s]);
    t->alias[s] = t->slot[l];
    q[l] -= 1 - q[s];
    if (q[l] < 1) {
      nl--;
      small[ns++] = l;
    }
  }
  while (nl) {
    uint32_t l = large[--nl];
    t->prob[l] = UINT32_MAX, t->alias[l] = t->slot[l];
  }
  while (ns) {
    uint32_t s = small[--ns];
    t->prob[s] = UINT32_MAX, t->alias[s] = t->slot[s];
  }
}
/* The old global-shares table (no node shares, no local-first). */
static uint32_t old_table(eplb__dtab_t *t, uint32_t E, uint32_t R, const int32_t *p2l,
                          const double *share) {
  eplb__alias_bucket(E, R, p2l, t->rstart, t->rlist);
  uint32_t pos = 0;
  for (uint32_t e = 0; e < E; e++) {
    t->off[e] = pos;
    const uint32_t *list = t->rlist + t->rstart[e], n = t->rstart[e + 1] - t->rstart[e];
    if (n == 1 && share[list[0]] > 0) {
      t->slot[pos] = t->alias[pos] = (int32_t)list[0];
      t->prob[pos] = UINT32_MAX;
      pos++;
      continue;
    }
    double total = 0;
    for (uint32_t i = 0; i < n; i++)
      if (share[list[i]] > 0)
        total += share[list[i]];
    uint32_t end = pos;
    if (total > 0)
      for (uint32_t i = 0; i < n; i++)
        if (share[list[i]] > 0) {
          t->slot[end] = (int32_t)list[i];
          t->weight[end++] = share[list[i]] / total;
        }
    old_build_alias(t, pos, end);
    pos = end;
  }
  t->off[E] = pos;
  return pos;
}

/* Host tables of E experts x R slots for eplb__table_build_ref. */
typedef struct host_tab {
  uint32_t off[257], prob[576];
  int32_t slot[576], alias[576];
} host_tab_t;

static void check_table(const inst_t *in, const double *share, eplb__dtab_t *t, eplb__dtab_t *t2,
                        unsigned char *tws) {
  uint32_t E = in->E, R = in->G * in->S, epoch = 0;
  static host_tab_t h[2];
  memset(h, 0xA5, sizeof h);
  eplb_cuda_dispatch_t d = {
      {{h[0].off, h[0].slot, h[0].alias, h[0].prob}, {h[1].off, h[1].slot, h[1].alias, h[1].prob}},
      &epoch,
      E,
      R};
  eplb__table_build_ref(&d, 1, in->p2l, share, tws);
  eplb__dtab_build(t, E, R, in->p2l, share, in->S, 1, 0, 0);
  uint32_t used = t->off[E];
  ck_assert_mem_eq(h[1].off, t->off, (E + 1) * sizeof *t->off);
  ck_assert_mem_eq(h[1].slot, t->slot, used * sizeof *t->slot);
  ck_assert_mem_eq(h[1].alias, t->alias, used * sizeof *t->alias);
  ck_assert_mem_eq(h[1].prob, t->prob, used * sizeof *t->prob);
  ck_assert_uint_eq(h[0].off[0], 0xA5A5A5A5u); /* the other buffer is untouched */
  ck_assert_uint_eq(old_table(t2, E, R, in->p2l, share), used);
  ck_assert_mem_eq(t2->off, t->off, (E + 1) * sizeof *t->off);
  ck_assert_mem_eq(t2->slot, t->slot, used * sizeof *t->slot);
  ck_assert_mem_eq(t2->alias, t->alias, used * sizeof *t->alias);
  ck_assert_mem_eq(t2->prob, t->prob, used * sizeof *t->prob);
}

START_TEST(table_build_matches_runtime) {
  eplb_split_t *s = int_solver();
  unsigned char *ws = malloc(eplb__cuda_split_workspace_bytes(256, 32, 18));
  unsigned char *tws = malloc(eplb__cuda_table_workspace_bytes(256, 576));
  ck_assert_ptr_nonnull(ws);
  ck_assert_ptr_nonnull(tws);
  inst_t in;
  double share[512];
  for (int i = 0; i < 2000; i++) {
    random_inst(&in);
    uint32_t R = in.G * in.S;
    eplb__dtab_t t = {0}, t2 = {0};
    ck_assert_int_eq(eplb__dtab_alloc(&t, in.E, R), EPLB_OK);
    ck_assert_int_eq(eplb__dtab_alloc(&t2, in.E, R), EPLB_OK);
    if (i % 3 == 0) { /* arbitrary shares, zeros and negatives included */
      for (uint32_t r = 0; r < R; r++) {
        uint32_t x = next_u32() % 8;
        share[r] = x == 0 ? 0.0 : x == 1 ? -0.25 : next_unit() * (x == 2 ? 1e-300 : 1.0);
      }
    } else { /* the split's shares */
      check_inst(s, &in, ws, share);
    }
    check_table(&in, share, &t, &t2, tws);
    eplb__dtab_free(&t);
    eplb__dtab_free(&t2);
  }
  /* A bad placement leaves the buffer untouched. */
  uint32_t off[3] = {7, 7, 7}, prob[2] = {7, 7}, epoch = 0;
  int32_t slot[2] = {7, 7}, p2l[2] = {0, 2};
  double sh[2] = {1, 1};
  eplb_cuda_dispatch_t d = {{{off, slot, slot, prob}, {off, slot, slot, prob}}, &epoch, 2, 2};
  eplb__table_build_ref(&d, 0, p2l, sh, tws);
  ck_assert_uint_eq(off[0], 7);
  ck_assert_int_eq(slot[0], 7);
  free(tws);
  free(ws);
  eplb_split_destroy(s);
}
END_TEST

START_TEST(api_statuses) {
  int n = 0;
  eplb_status_t dev = eplb_cuda_device_count(&n);
  int cuda = eplb_feature_enabled(EPLB_FEATURE_CUDA);
  ck_assert_uint_eq(eplb__cuda_split_workspace_bytes(0, 1, 1), 0);
  ck_assert_uint_eq(eplb__cuda_split_workspace_bytes(1, 0, 1), 0);
  ck_assert_uint_eq(eplb__cuda_split_workspace_bytes(EPLB_MAX_EXPERTS + 1, 1, 1), 0);
  ck_assert_uint_eq(eplb__cuda_split_workspace_bytes(1, 65536, 2), 0);
  ck_assert_uint_gt(eplb__cuda_split_workspace_bytes(256, 32, 9), 0);
  ck_assert_uint_eq(eplb__cuda_table_workspace_bytes(0, 1), 0);
  ck_assert_uint_gt(eplb__cuda_table_workspace_bytes(256, 288), 0);
  int32_t p2l[4] = {0, 1, 0, 1};
  uint32_t counts[2] = {3, 4}, status = 0, epoch = 0;
  double share[4], t = 0;
  char ws[4096];
  ck_assert_int_eq(eplb__cuda_split(NULL, 2, 2, 2, counts, share, &t, &status, ws, 8, NULL),
                   EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "phy2log"));
  ck_assert_int_eq(eplb__cuda_split(p2l, 2, 2, 2, counts, share, &t, &status, NULL, 8, NULL),
                   EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "workspace"));
  ck_assert_int_eq(eplb__cuda_split(p2l, 0, 2, 2, counts, share, &t, &status, ws, 8, NULL),
                   EPLB_EINVAL);
  ck_assert_int_eq(eplb__cuda_split(p2l, 2, 2, 2, counts, share, &t, &status, ws, 0, NULL),
                   EPLB_EINVAL);
  ck_assert_int_eq(eplb__cuda_split(p2l, 70000, 2, 2, counts, share, &t, &status, ws, 8, NULL),
                   EPLB_ERANGE);
  ck_assert_int_eq(eplb__cuda_split(p2l, 2, 256, 512, counts, share, &t, &status, ws, 8, NULL),
                   EPLB_ERANGE);
  uint32_t off[3] = {0}, prob[4] = {0};
  int32_t slot[4] = {0};
  eplb_cuda_dispatch_t d = {{{off, slot, slot, prob}, {off, slot, slot, prob}}, &epoch, 2, 4};
  ck_assert_int_eq(eplb__cuda_table_build(NULL, 0, p2l, share, ws, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb__cuda_table_build(&d, 2, p2l, share, ws, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb__cuda_table_build(&d, 0, p2l, NULL, ws, NULL), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "share"));
  ck_assert_int_eq(
      eplb__cuda_split_layers(p2l, 0, 2, 2, 2, counts, share, &t, &status, ws, 8, NULL),
      EPLB_EINVAL);
  ck_assert_int_eq(eplb__cuda_split_layers(p2l, EPLB_MAX_LAYERS + 1, 2, 2, 2, counts, share, &t,
                                           &status, ws, 8, NULL),
                   EPLB_ERANGE);
  if (dev == EPLB_OK)
    return; /* host pointers would be wrong on a device: gpu_matches_ref runs it */
  eplb_status_t want = cuda ? EPLB_ENODEVICE : EPLB_EUNSUPPORTED;
  ck_assert_int_eq(eplb__cuda_split(p2l, 2, 2, 2, counts, share, &t, &status, ws, 8, NULL), want);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "cuda_split"));
  ck_assert_int_eq(eplb__cuda_table_build(&d, 1, p2l, share, ws, NULL), want);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "cuda_table_build"));
}
END_TEST

/* ---- on a device: eplb__cuda_split and eplb__cuda_table_build --------------- */

/* The device helpers are kernels/device.cu's: only in a CUDA build. */
#if EPLB_HAVE_CUDA

static void *dev_copy(const void *src, size_t bytes) {
  void *p = NULL;
  ck_assert_int_eq(eplb__cuda_malloc(&p, bytes), 0);
  if (src)
    ck_assert_int_eq(eplb__cuda_h2d_async(p, src, bytes, NULL), 0);
  return p;
}

static void dev_wait(void) {
  int err;
  while ((err = eplb__cuda_stream_query(NULL)) == EPLB__CUDA_NOT_READY)
    ;
  ck_assert_int_eq(err, 0);
}

START_TEST(gpu_matches_ref) {
  int n = 0;
  if (eplb_cuda_device_count(&n) != EPLB_OK)
    return; /* no device (CI): the references above stand for the kernels */
  size_t T = 0;
  uint8_t *ids = load_esft(&T);
  eplb_plan_t *plan = esft_plan(ids, T);
  enum { R = EG * ES };
  size_t wsb = eplb__cuda_split_workspace_bytes(EE, EG, ES);
  size_t twsb = eplb__cuda_table_workspace_bytes(EE, R);
  unsigned char *ws = malloc(wsb), *tws = malloc(twsb);
  ck_assert_ptr_nonnull(ws);
  ck_assert_ptr_nonnull(tws);
  void *d_ws = dev_copy(NULL, wsb), *d_tws = dev_copy(NULL, twsb);
  int32_t *d_p2l = dev_copy(NULL, R * sizeof(int32_t));
  uint32_t *d_counts = dev_copy(NULL, EE * sizeof(uint32_t)), *d_status = dev_copy(NULL, 4);
  double *d_share = dev_copy(NULL, R * sizeof(double)), *d_t = dev_copy(NULL, 8);
  uint32_t *d_off = dev_copy(NULL, (EE + 1) * 4), *d_prob = dev_copy(NULL, R * 4);
  int32_t *d_slot = dev_copy(NULL, R * 4), *d_alias = dev_copy(NULL, R * 4);
  uint32_t *d_epoch = dev_copy(NULL, 4);
  eplb_cuda_table_t dt = {d_off, d_slot, d_alias, d_prob};
  eplb_cuda_dispatch_t dd = {{dt, dt}, d_epoch, EE, R};
  static host_tab_t h, g;
  uint32_t epoch = 0;
  eplb_cuda_dispatch_t hd = {
      {{h.off, h.slot, h.alias, h.prob}, {h.off, h.slot, h.alias, h.prob}}, &epoch, EE, R};
  uint32_t counts[EE];
  double share[R], gshare[R], t = 0, gt = 0;
  for (size_t b = 0; b + EB <= T; b += EB * 8)
    for (uint32_t l = 0; l < EL; l++) {
      const int32_t *p2l = eplb_plan_phy2log(plan, l);
      memset(counts, 0, sizeof counts);
      for (size_t i = b; i < b + EB; i++)
        for (uint32_t k = 0; k < EK; k++)
          counts[ids[(i * EL + l) * EK + k]]++;
      for (uint32_t r = 0; r < R; r++)
        share[r] = 1.0 / (r + 1); /* "previous" shares */
      ck_assert_int_eq(eplb__cuda_h2d_async(d_p2l, p2l, R * 4, NULL), 0);
      ck_assert_int_eq(eplb__cuda_h2d_async(d_counts, counts, sizeof counts, NULL), 0);
      ck_assert_int_eq(eplb__cuda_h2d_async(d_share, share, sizeof share, NULL), 0);
      dev_wait();
      uint32_t budget = l % 7 == 0 ? 1 : 64, status = 99, gstatus = 98;
      eplb__split_ref(p2l, EE, EG, ES, counts, share, &t, &status, ws, budget, NULL);
      ck_assert_int_eq(
          eplb__cuda_split(d_p2l, EE, EG, ES, d_counts, d_share, d_t, d_status, d_ws, budget, NULL),
          EPLB_OK);
      eplb__table_build_ref(&hd, 0, p2l, share, tws);
      ck_assert_int_eq(eplb__cuda_table_build(&dd, 1, d_p2l, d_share, d_tws, NULL), EPLB_OK);
      ck_assert_int_eq(eplb__cuda_d2h_async(gshare, d_share, sizeof gshare, NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(&gt, d_t, 8, NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(&gstatus, d_status, 4, NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(g.off, d_off, sizeof h.off[0] * (EE + 1), NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(g.slot, d_slot, R * 4, NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(g.alias, d_alias, R * 4, NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(g.prob, d_prob, R * 4, NULL), 0);
      dev_wait();
      ck_assert_uint_eq(gstatus, status);
      ck_assert_mem_eq(gshare, share, sizeof share);
      if (status == EPLB__CUDA_SPLIT_CONVERGED)
        ck_assert_mem_eq(&gt, &t, 8);
      uint32_t used = h.off[EE];
      ck_assert_mem_eq(g.off, h.off, (EE + 1) * 4);
      ck_assert_mem_eq(g.slot, h.slot, used * 4);
      ck_assert_mem_eq(g.alias, h.alias, used * 4);
      ck_assert_mem_eq(g.prob, h.prob, used * 4);
    }
  void *all[] = {d_ws, d_tws, d_p2l,  d_counts, d_status, d_share,
                 d_t,  d_off, d_prob, d_slot,   d_alias,  d_epoch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    eplb__cuda_free(all[i]);
  free(ws);
  free(tws);
  eplb_plan_destroy(plan);
  free(ids);
}
END_TEST

/* A layer too large for shared memory (384 experts on 64 GPUs x 8 slots,
 * kimi-k2's shape: ~52 KiB of workspace): the kernels' global-memory path
 * against the references, bit for bit. */
START_TEST(gpu_global_workspace_matches_ref) {
  enum { E = 384, G = 64, S = 8, R = G * S };
  static int32_t p2l[R];
  static uint32_t counts[E], off[E + 1], goff[E + 1], prob[R], gprob[R];
  static int32_t slot[R], alias[R], gslot[R], galias[R];
  static double share[R], gshare[R];
  for (uint32_t r = 0; r < R; r++)
    p2l[r] = (int32_t)(r < E ? r : next_u32() % (E / 4)); /* the hottest get the spares */
  for (uint32_t e = 0; e < E; e++)
    counts[e] = next_u32() % (e < E / 4 ? 400 : 40);
  for (uint32_t r = 0; r < R; r++)
    share[r] = 0.5;
  size_t wsb = eplb__cuda_split_workspace_bytes(E, G, S);
  size_t twsb = eplb__cuda_table_workspace_bytes(E, R);
  ck_assert_uint_gt(wsb, 48 * 1024); /* beyond shared memory */
  unsigned char *ws = malloc(wsb), *tws = malloc(twsb);
  ck_assert_ptr_nonnull(ws);
  ck_assert_ptr_nonnull(tws);
  /* The references first (they run in CI too), uploads from their inputs. */
  double t = 0, gt = 0;
  uint32_t epoch = 0, status = 99, gstatus = 98;
  static double share0[R];
  memcpy(share0, share, sizeof share);
  eplb__split_ref(p2l, E, G, S, counts, share, &t, &status, ws, 64, NULL);
  ck_assert_uint_eq(status, EPLB__CUDA_SPLIT_CONVERGED);
  eplb_cuda_table_t ht = {off, slot, alias, prob};
  eplb_cuda_dispatch_t hd = {{ht, ht}, &epoch, E, R};
  eplb__table_build_ref(&hd, 0, p2l, share, tws);
  ck_assert_uint_le(off[E], R);
  int n = 0;
  if (eplb_cuda_device_count(&n) != EPLB_OK) {
    free(ws);
    free(tws);
    return;
  }
  void *d_ws = dev_copy(NULL, wsb), *d_tws = dev_copy(NULL, twsb);
  int32_t *d_p2l = dev_copy(p2l, sizeof p2l);
  uint32_t *d_counts = dev_copy(counts, sizeof counts), *d_status = dev_copy(NULL, 4);
  double *d_share = dev_copy(share0, sizeof share0), *d_t = dev_copy(NULL, 8);
  uint32_t *d_off = dev_copy(NULL, sizeof off), *d_prob = dev_copy(NULL, sizeof prob);
  int32_t *d_slot = dev_copy(NULL, sizeof slot), *d_alias = dev_copy(NULL, sizeof alias);
  uint32_t *d_epoch = dev_copy(NULL, 4);
  eplb_cuda_table_t dt = {d_off, d_slot, d_alias, d_prob};
  eplb_cuda_dispatch_t dd = {{dt, dt}, d_epoch, E, R};
  ck_assert_int_eq(
      eplb__cuda_split(d_p2l, E, G, S, d_counts, d_share, d_t, d_status, d_ws, 64, NULL), EPLB_OK);
  ck_assert_int_eq(eplb__cuda_table_build(&dd, 1, d_p2l, d_share, d_tws, NULL), EPLB_OK);
  ck_assert_int_eq(eplb__cuda_d2h_async(gshare, d_share, sizeof gshare, NULL), 0);
  ck_assert_int_eq(eplb__cuda_d2h_async(&gt, d_t, 8, NULL), 0);
  ck_assert_int_eq(eplb__cuda_d2h_async(&gstatus, d_status, 4, NULL), 0);
  ck_assert_int_eq(eplb__cuda_d2h_async(goff, d_off, sizeof goff, NULL), 0);
  ck_assert_int_eq(eplb__cuda_d2h_async(gslot, d_slot, sizeof gslot, NULL), 0);
  ck_assert_int_eq(eplb__cuda_d2h_async(galias, d_alias, sizeof galias, NULL), 0);
  ck_assert_int_eq(eplb__cuda_d2h_async(gprob, d_prob, sizeof gprob, NULL), 0);
  dev_wait();
  ck_assert_uint_eq(gstatus, status);
  ck_assert_mem_eq(gshare, share, sizeof share);
  ck_assert_mem_eq(&gt, &t, 8);
  ck_assert_mem_eq(goff, off, sizeof off);
  ck_assert_mem_eq(gslot, slot, off[E] * 4);
  ck_assert_mem_eq(galias, alias, off[E] * 4);
  ck_assert_mem_eq(gprob, prob, off[E] * 4);
  void *all[] = {d_ws, d_tws, d_p2l,  d_counts, d_status, d_share,
                 d_t,  d_off, d_prob, d_slot,   d_alias,  d_epoch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    eplb__cuda_free(all[i]);
  free(ws);
  free(tws);
}
END_TEST
#endif

/* The layers of one batch at once: per-layer statuses (a bad placement in
 * layer 3, budget 1 in every layer but the rest converge); CPU reference
 * == per-layer references, and (on a device) the kernel == the reference. */
static void batch_layers(const uint8_t *ids, size_t b, const eplb_plan_t *plan, int32_t *p2l,
                         uint32_t *counts, double *share) {
  memset(counts, 0, EL * EE * sizeof *counts);
  for (uint32_t l = 0; l < EL; l++) {
    memcpy(p2l + l * EG * ES, eplb_plan_phy2log(plan, l), EG * ES * sizeof *p2l);
    for (size_t i = b; i < b + EB; i++)
      for (uint32_t k = 0; k < EK; k++)
        counts[l * EE + ids[(i * EL + l) * EK + k]]++;
  }
  p2l[3 * EG * ES + 5] = EE; /* layer 3: a slot of no expert */
  for (uint32_t i = 0; i < EL * EG * ES; i++)
    share[i] = 1.0 / (i + 1);
}

START_TEST(layers_ref_is_per_layer) {
  size_t T = 0;
  uint8_t *ids = load_esft(&T);
  eplb_plan_t *plan = esft_plan(ids, T);
  size_t wsb = eplb__cuda_split_workspace_bytes(EE, EG, ES);
  ck_assert_uint_eq(wsb % 8, 0);
  unsigned char *ws = malloc(wsb * EL);
  static int32_t p2l[EL * EG * ES];
  static uint32_t counts[EL * EE], st[EL], st1[EL];
  static double share[EL * EG * ES], share1[EL * EG * ES], t[EL], t1[EL];
  for (size_t b = 0; b + EB <= T; b += EB * 16) {
    batch_layers(ids, b, plan, p2l, counts, share);
    memcpy(share1, share, sizeof share);
    for (uint32_t budget = 1; budget <= 64; budget *= 64) {
      eplb__split_layers_ref(p2l, EL, EE, EG, ES, counts, share, t, st, ws, budget);
      for (uint32_t l = 0; l < EL; l++) {
        eplb__split_ref(p2l + l * EG * ES, EE, EG, ES, counts + l * EE, share1 + l * EG * ES,
                        t1 + l, st1 + l, ws, budget, NULL);
        ck_assert_uint_eq(st[l], st1[l]);
        if (l == 3)
          ck_assert_uint_eq(st[l], EPLB__CUDA_SPLIT_BAD_INPUT);
        else if (budget > 1)
          ck_assert_uint_eq(st[l], EPLB__CUDA_SPLIT_CONVERGED);
        if (st[l] == EPLB__CUDA_SPLIT_CONVERGED)
          ck_assert(t[l] == t1[l]);
      }
      ck_assert_mem_eq(share, share1, sizeof share);
    }
  }
  free(ws);
  eplb_plan_destroy(plan);
  free(ids);
}
END_TEST

#if EPLB_HAVE_CUDA
START_TEST(gpu_layers_match_ref) {
  int n = 0;
  if (eplb_cuda_device_count(&n) != EPLB_OK)
    return; /* no device (CI) */
  size_t T = 0;
  uint8_t *ids = load_esft(&T);
  eplb_plan_t *plan = esft_plan(ids, T);
  enum { R = EG * ES };
  size_t wsb = eplb__cuda_split_workspace_bytes(EE, EG, ES) * EL;
  unsigned char *ws = malloc(wsb);
  static int32_t p2l[EL * R];
  static uint32_t counts[EL * EE], st[EL], gst[EL];
  static double share[EL * R], gshare[EL * R], t[EL], gt[EL];
  void *d_ws = dev_copy(NULL, wsb);
  int32_t *d_p2l = dev_copy(NULL, sizeof p2l);
  uint32_t *d_counts = dev_copy(NULL, sizeof counts), *d_st = dev_copy(NULL, sizeof st);
  double *d_share = dev_copy(NULL, sizeof share), *d_t = dev_copy(NULL, sizeof t);
  for (size_t b = 0; b + EB <= T; b += EB * 4)
    for (uint32_t budget = 1; budget <= 64; budget *= 64) {
      batch_layers(ids, b, plan, p2l, counts, share);
      for (uint32_t l = 0; l < EL; l++)
        t[l] = gt[l] = -1.0, st[l] = gst[l] = 99;
      ck_assert_int_eq(eplb__cuda_h2d_async(d_p2l, p2l, sizeof p2l, NULL), 0);
      ck_assert_int_eq(eplb__cuda_h2d_async(d_counts, counts, sizeof counts, NULL), 0);
      ck_assert_int_eq(eplb__cuda_h2d_async(d_share, share, sizeof share, NULL), 0);
      ck_assert_int_eq(eplb__cuda_h2d_async(d_t, t, sizeof t, NULL), 0);
      dev_wait();
      eplb__split_layers_ref(p2l, EL, EE, EG, ES, counts, share, t, st, ws, budget);
      ck_assert_int_eq(eplb__cuda_split_layers(d_p2l, EL, EE, EG, ES, d_counts, d_share, d_t, d_st,
                                               d_ws, budget, NULL),
                       EPLB_OK);
      ck_assert_int_eq(eplb__cuda_d2h_async(gshare, d_share, sizeof gshare, NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(gt, d_t, sizeof gt, NULL), 0);
      ck_assert_int_eq(eplb__cuda_d2h_async(gst, d_st, sizeof gst, NULL), 0);
      dev_wait();
      ck_assert_mem_eq(gst, st, sizeof st);
      ck_assert_mem_eq(gt, t, sizeof t);
      ck_assert_mem_eq(gshare, share, sizeof share);
    }
  void *all[] = {d_ws, d_p2l, d_counts, d_st, d_share, d_t};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    eplb__cuda_free(all[i]);
  free(ws);
  eplb_plan_destroy(plan);
  free(ids);
}
END_TEST
#endif

static Suite *suite(void) {
  Suite *s = suite_create("split_math");
  TCase *tc = tcase_create("split");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, random_vs_split_solve);
  tcase_add_test(tc, esft_every_batch_and_layer);
  tcase_add_test(tc, budget_and_bad_input_keep_previous);
  tcase_add_test(tc, table_build_matches_runtime);
  tcase_add_test(tc, api_statuses);
  tcase_add_test(tc, layers_ref_is_per_layer);
#if EPLB_HAVE_CUDA
  tcase_add_test(tc, gpu_matches_ref);
  tcase_add_test(tc, gpu_global_workspace_matches_ref);
  tcase_add_test(tc, gpu_layers_match_ref);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
