/* tests/lp/test_split.c — the exact split solver against GLPK, its
 * certificate, integer mode, warm start, bad input, GLPK's error paths and
 * allocation failures. */
#include "lp/lp.h"
#include "tests/reference/reference.h"
#include "tests/support.h"

#include <fcntl.h>
#include <float.h>
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- random instances ---------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void) { return eplb_test_xorshift(&rng_state); }

static uint32_t rndn(uint32_t n) { return (uint32_t)(rnd() % n); }
static double rndu(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

typedef struct inst {
  uint32_t E, G, R;
  uint32_t phy2log[512], slots[64];
  double loads[128];
} inst_t;

/* Random placement: each expert at least once, extra replicas anywhere
 * (duplicates on a GPU allowed), GPUs possibly empty; slots GPU-major. */
static void gen_placement(inst_t *in) {
  uint32_t gpu[512], exp_[512];
  in->E = 1 + rndn(40);
  in->G = 1 + rndn(12);
  in->R = in->E + rndn(in->E + 1);
  int spread = (int)rndn(3); /* 0: random; 1: experts clustered; 2: one replica per GPU max */
  for (uint32_t r = 0; r < in->R; r++) {
    exp_[r] = r < in->E ? r : rndn(in->E);
    gpu[r] = spread == 1 ? (exp_[r] * in->G / in->E + rndn(2)) % in->G : rndn(in->G);
  }
  memset(in->slots, 0, sizeof in->slots);
  uint32_t k = 0;
  for (uint32_t g = 0; g < in->G; g++)
    for (uint32_t r = 0; r < in->R; r++)
      if (gpu[r] == g) {
        in->phy2log[k++] = exp_[r];
        in->slots[g]++;
      }
}

static void gen_loads(inst_t *in, int integral) {
  int pattern = (int)rndn(5);
  for (uint32_t e = 0; e < in->E; e++) {
    double w;
    switch (pattern) {
    case 0: w = rndu() * 100.0; break;
    case 1: w = (double)rndn(4); break;               /* ties and zeros */
    case 2: w = rndn(3) ? 0.0 : rndu() * 10.0; break; /* mostly zero */
    case 3: w = exp(rndu() * 20.0 - 10.0); break;     /* wide range */
    default: w = (double)(rndn(1000) + (rndn(8) ? 0 : 5000)); break;
    }
    in->loads[e] = integral ? floor(w) : w;
  }
  if (rndn(50) == 0)
    for (uint32_t e = 0; e < in->E; e++)
      in->loads[e] = 0.0;
}

typedef struct res {
  double share[512], amount[512], gpu_load[64];
  uint8_t be[128], bg[64];
  eplb_split_result_t r;
} res_t;

static eplb_split_problem_t problem_of(const inst_t *in) {
  eplb_split_problem_t p = {in->E, in->G, in->R, in->phy2log, in->slots};
  return p;
}

static void res_init(res_t *o) {
  memset(o, 0, sizeof *o);
  o->r.share = o->share;
  o->r.amount = o->amount;
  o->r.gpu_load = o->gpu_load;
  o->r.bottleneck_experts = o->be;
  o->r.bottleneck_gpus = o->bg;
}

static int rel_eq(double a, double b, double tol) {
  return fabs(a - b) <= tol * fmax(fmax(fabs(a), fabs(b)), 1e-300) || a == b;
}

/* Checks everything a result promises about a problem. */
static void check_result(const inst_t *in, const res_t *o, int integer, int exact_cert) {
  const eplb_split_result_t *r = &o->r;
  double sum[128] = {0}, load[64] = {0};
  uint32_t gr = 0;
  for (uint32_t g = 0; g < in->G; g++)
    for (uint32_t k = 0; k < in->slots[g]; k++, gr++) {
      uint32_t e = in->phy2log[gr];
      ck_assert(o->share[gr] >= 0.0);
      sum[e] += o->share[gr];
      load[g] += o->share[gr] * in->loads[e];
      ck_assert(rel_eq(o->amount[gr], o->share[gr] * in->loads[e], 1e-12) ||
                fabs(o->amount[gr] - o->share[gr] * in->loads[e]) < 1e-12);
      if (integer)
        ck_assert(o->amount[gr] == floor(o->amount[gr]));
    }
  for (uint32_t e = 0; e < in->E; e++)
    ck_assert_msg(fabs(sum[e] - 1.0) <= 1e-12, "expert %u shares sum to %.17g", e, sum[e]);
  double mx = 0;
  for (uint32_t g = 0; g < in->G; g++) {
    ck_assert(fabs(load[g] - o->gpu_load[g]) <= 1e-9 * fmax(1.0, load[g]));
    if (o->gpu_load[g] > mx)
      mx = o->gpu_load[g];
  }
  ck_assert(mx == r->max_load);
  if (integer)
    ck_assert_msg(r->max_load == ceil(r->t_star - 1e-9 * r->t_star), "max %.17g T* %.17g",
                  r->max_load, r->t_star);
  else
    ck_assert_msg(r->max_load <= r->t_star * (1 + 1e-12) + 1e-300, "max %.17g > T* %.17g",
                  r->max_load, r->t_star);
  /* The certificate: recompute w(A)/|N(A)| from the masks. */
  if (!exact_cert && r->num_bottleneck_experts == 0)
    return;
  double w = 0;
  uint32_t na = 0, ng = 0;
  uint8_t hit[64] = {0};
  for (uint32_t e = 0; e < in->E; e++)
    if (o->be[e]) {
      w += in->loads[e];
      na++;
    }
  gr = 0;
  for (uint32_t g = 0; g < in->G; g++)
    for (uint32_t k = 0; k < in->slots[g]; k++, gr++)
      hit[g] |= o->be[in->phy2log[gr]];
  for (uint32_t g = 0; g < in->G; g++) {
    ck_assert_int_eq(hit[g], o->bg[g]);
    ng += hit[g];
  }
  ck_assert_uint_eq(na, r->num_bottleneck_experts);
  ck_assert_uint_eq(ng, r->num_bottleneck_gpus);
  double ratio = ng ? w / ng : 0.0;
  ck_assert_msg(rel_eq(ratio, r->t_star, exact_cert ? 1e-15 : 1e-9), "cert %.17g T* %.17g", ratio,
                r->t_star);
}

static eplb_split_t *make(eplb_split_mode_t mode, int warm) {
  eplb_split_options_t o;
  eplb_split_options_default(&o);
  o.mode = mode;
  o.warm_start = warm;
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(&o, &s), EPLB_OK);
  return s;
}

static void run_random(uint64_t seed, int n, int integer) {
  eplb_split_mode_t mode = integer ? EPLB_SPLIT_INTEGER : EPLB_SPLIT_FRACTIONAL;
  eplb_split_t *cold = make(mode, 0), *warm = make(mode, 1);
  static inst_t in;
  static res_t a, b, c;
  rng_state = seed;
  for (int i = 0; i < n; i++) {
    if (i % 4 == 0)
      gen_placement(&in); /* then a few batches on the same placement */
    gen_loads(&in, integer);
    eplb_split_problem_t p = problem_of(&in);
    res_init(&a);
    res_init(&b);
    res_init(&c);
    ck_assert_int_eq(eplb_split_solve(cold, &p, in.loads, &a.r), EPLB_OK);
    check_result(&in, &a, integer, 1);
    ck_assert_int_eq(eplb_split_solve(warm, &p, in.loads, &b.r), EPLB_OK);
    check_result(&in, &b, integer, 1);
    ck_assert_msg(rel_eq(a.r.t_star, b.r.t_star, 1e-12), "warm %.17g cold %.17g", b.r.t_star,
                  a.r.t_star);
    eplb_status_t st = eplb_split_solve_glpk(cold, &p, in.loads, &c.r);
    ck_assert_msg(st == EPLB_OK, "glpk: %s", eplb_error_detail());
    check_result(&in, &c, integer, 0);
    ck_assert_msg(rel_eq(a.r.t_star, c.r.t_star, 1e-9) || fabs(a.r.t_star - c.r.t_star) < 1e-12,
                  "instance %d: flow %.17g glpk %.17g", i, a.r.t_star, c.r.t_star);
    if (integer)
      ck_assert(a.r.max_load == c.r.max_load);
  }
  eplb_split_destroy(cold);
  eplb_split_destroy(warm);
}

/* Edmonds-Karp on a dense capacity matrix, the reference for Dinic. */
static double ref_maxflow(uint32_t n, double cap[12][12], uint32_t s, uint32_t t) {
  double total = 0.0;
  for (;;) {
    int prev[12];
    uint32_t queue[12], head = 0, tail = 0;
    for (uint32_t v = 0; v < n; v++)
      prev[v] = -1;
    prev[s] = (int)s;
    queue[tail++] = s;
    while (head < tail && prev[t] < 0) {
      uint32_t u = queue[head++];
      for (uint32_t v = 0; v < n; v++)
        if (prev[v] < 0 && cap[u][v] > 1e-12) {
          prev[v] = (int)u;
          queue[tail++] = v;
        }
    }
    if (prev[t] < 0)
      return total;
    double d = HUGE_VAL;
    for (uint32_t v = t; v != s; v = (uint32_t)prev[v])
      d = fmin(d, cap[prev[v]][v]);
    for (uint32_t v = t; v != s; v = (uint32_t)prev[v]) {
      cap[prev[v]][v] -= d;
      cap[v][prev[v]] += d;
    }
    total += d;
  }
}

/* Dinic (eplb__flow_run, with its pruning of the level graph) against
 * Edmonds-Karp on random graphs of up to 12 nodes, with arcs from the
 * source straight to the sink, parallel arcs and arcs into the source:
 * the same maximum flow, and the source side it labels is a cut of that
 * value. */
START_TEST(maxflow_matches_a_reference) {
  rng_state = 0x5eed0fu + (uint64_t)_i;
  eplb__flow_t f = {0};
  for (int it = 0; it < 400; it++) {
    uint32_t n = 2 + rndn(11), m = 1 + rndn(40), s = 0, t = n - 1;
    double cap[12][12] = {{0}}, c[40];
    ck_assert_int_eq(eplb__flow_reserve(&f, n, m), EPLB_OK);
    for (uint32_t k = 0; k < m; k++) {
      uint32_t u = rndn(n), v = rndn(n);
      if (u == v)
        v = (u + 1) % n;
      if (it % 4 == 0 && k == 0) { /* straight from the source to the sink */
        u = s;
        v = t;
      }
      c[k] = rndn(3) ? (double)(1 + rndn(9)) : rndu() * 10;
      cap[u][v] += c[k];
      eplb__flow_edge(&f, k, u, v);
    }
    eplb__flow_build(&f, n, m);
    for (uint32_t k = 0; k < m; k++) {
      f.res[2 * k] = c[k];
      f.res[2 * k + 1] = 0.0;
    }
    double got = eplb__flow_run(&f, s, t, 1e-12), cut = 0.0;
    ck_assert_double_eq_tol(got, ref_maxflow(n, cap, s, t), 1e-9);
    ck_assert(f.level[s] >= 0 && f.level[t] < 0);
    for (uint32_t k = 0; k < m; k++)
      if (f.level[f.to[2 * k + 1]] >= 0 && f.level[f.to[2 * k]] < 0)
        cut += c[k];
    ck_assert_double_eq_tol(cut, got, 1e-9);
  }
  eplb__flow_free(&f);
}
END_TEST

START_TEST(random_fractional_match_glpk) {
  run_random(0x9e3779b97f4a7c15ull + (uint64_t)_i, 300, 0);
}
END_TEST

START_TEST(random_integer_match_glpk) { run_random(0x1234567ull + (uint64_t)_i, 150, 1); }
END_TEST

/* ---- drifting batches: warm start matches cold ---------------------------- */

START_TEST(warm_start_on_drifting_batches) {
  enum { E = 64, G = 8, R = 80 };
  uint32_t phy[R], slots[G];
  for (uint32_t g = 0; g < G; g++)
    slots[g] = R / G;
  for (uint32_t r = 0; r < R; r++)
    phy[r] = r < E ? r : (r * 7) % E;
  /* Keep GPU-major order consistent: slot r on GPU r / 10; fine for any ids. */
  eplb_split_problem_t p = {E, G, R, phy, slots};
  eplb_split_t *cold = make(EPLB_SPLIT_FRACTIONAL, 0), *warm = make(EPLB_SPLIT_FRACTIONAL, 1);
  double loads[E], share[R], gl[G];
  double logpop[E];
  rng_state = 42;
  for (uint32_t e = 0; e < E; e++)
    logpop[e] = rndu() * 3;
  uint32_t cold_it = 0, warm_it = 0;
  for (int b = 0; b < 200; b++) {
    for (uint32_t e = 0; e < E; e++) {
      logpop[e] = 0.9 * logpop[e] + 0.3 * (rndu() - 0.5);
      loads[e] = floor(exp(logpop[e]) * 20 + rndn(5));
    }
    eplb_split_result_t a = {.share = share, .gpu_load = gl}, c = a;
    ck_assert_int_eq(eplb_split_solve(cold, &p, loads, &a), EPLB_OK);
    ck_assert_int_eq(eplb_split_solve(warm, &p, loads, &c), EPLB_OK);
    ck_assert(a.t_star == c.t_star || rel_eq(a.t_star, c.t_star, 1e-12));
    cold_it += a.iterations;
    warm_it += c.iterations;
  }
  ck_assert_uint_le(warm_it, cold_it);
  /* After reset the warm handle is cold again. */
  eplb_split_reset(warm);
  eplb_split_destroy(cold);
  eplb_split_destroy(warm);
}
END_TEST

START_TEST(no_allocation_after_warmup) {
  static inst_t in;
  static res_t o;
  rng_state = 7;
  gen_placement(&in);
  gen_loads(&in, 0);
  eplb_split_problem_t p = problem_of(&in);
  eplb_split_t *s = make(EPLB_SPLIT_FRACTIONAL, 1);
  res_init(&o);
  eplb_test_alloc_install();
  ck_assert_int_eq(eplb_split_solve(s, &p, in.loads, &o.r), EPLB_OK);
  eplb_test_alloc_reset();
  for (int i = 0; i < 10; i++) {
    in.loads[i % in.E] += 1.0;
    ck_assert_int_eq(eplb_split_solve(s, &p, in.loads, &o.r), EPLB_OK);
  }
  ck_assert_int_eq(eplb_test_alloc_count(), 0);
  eplb_split_destroy(s);
  eplb_allocator_set(NULL);
}
END_TEST

/* ---- batch over layers ------------------------------------------------- */

START_TEST(layers_match_single_solves) {
  enum { L = 6 };
  static inst_t in[L];
  static res_t o[L], one;
  eplb_split_problem_t p[L];
  eplb_split_result_t r[L];
  static double loads[L * 128];
  size_t off = 0;
  rng_state = 99;
  for (int l = 0; l < L; l++) {
    gen_placement(&in[l]);
    gen_loads(&in[l], 0);
    p[l] = problem_of(&in[l]);
    memcpy(loads + off, in[l].loads, in[l].E * sizeof(double));
    off += in[l].E;
    res_init(&o[l]);
    r[l] = o[l].r;
  }
  eplb_split_t *s = make(EPLB_SPLIT_FRACTIONAL, 1);
  for (int rep = 0; rep < 2; rep++) {
    ck_assert_int_eq(eplb_split_solve_layers(s, L, p, loads, r), EPLB_OK);
    for (int l = 0; l < L; l++) {
      res_init(&one);
      ck_assert_int_eq(eplb_split_solve(s, &p[l], in[l].loads, &one.r), EPLB_OK);
      ck_assert(rel_eq(one.r.t_star, r[l].t_star, 1e-12));
    }
  }
  /* An error names its layer. */
  in[3].loads[0] = -1.0;
  loads[in[0].E + in[1].E + in[2].E] = -1.0;
  ck_assert_int_eq(eplb_split_solve_layers(s, L, p, loads, r), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "layer 3: "));
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "loads[0]"));
  ck_assert_int_eq(eplb_split_solve_layers(s, 0, NULL, NULL, NULL), EPLB_OK);
  ck_assert_int_eq(eplb_split_solve_layers(NULL, 1, p, loads, r), EPLB_EINVAL);
  eplb_split_destroy(s);
}
END_TEST

/* Layers on several threads: every result byte for byte the same as one
 * thread's, over three calls in a row (the warm-start states carry over
 * per layer whichever worker solved it), in both modes; an error is the
 * lowest failing layer's whatever the thread count. */
START_TEST(layers_same_whatever_the_threads) {
  enum { L = 40 };
  static inst_t in[L];
  static res_t a[L], b[L];
  static double loads[3][L * 128];
  eplb_split_problem_t p[L];
  eplb_split_result_t ra[L], rb[L];
  rng_state = 4242 + (uint64_t)_i;
  for (int l = 0; l < L; l++) {
    gen_placement(&in[l]);
    p[l] = problem_of(&in[l]);
  }
  for (int c = 0; c < 3; c++)
    for (int l = 0, off = 0; l < L; off += (int)in[l++].E) {
      gen_loads(&in[l], _i);
      memcpy(loads[c] + off, in[l].loads, in[l].E * sizeof(double));
    }
  eplb_split_options_t o;
  eplb_split_options_default(&o);
  ck_assert_uint_eq(o.threads, 1);
  o.mode = _i ? EPLB_SPLIT_INTEGER : EPLB_SPLIT_FRACTIONAL;
  eplb_split_t *one = NULL, *many[2] = {NULL, NULL};
  ck_assert_int_eq(eplb_split_create(&o, &one), EPLB_OK);
  o.threads = 3;
  ck_assert_int_eq(eplb_split_create(&o, &many[0]), EPLB_OK);
  o.threads = 0;
  ck_assert_int_eq(eplb_split_create(&o, &many[1]), EPLB_OK);
  for (int c = 0; c < 3; c++) {
    for (int l = 0; l < L; l++) {
      res_init(&a[l]);
      ra[l] = a[l].r;
    }
    ck_assert_int_eq(eplb_split_solve_layers(one, L, p, loads[c], ra), EPLB_OK);
    for (int m = 0; m < 2; m++) {
      for (int l = 0; l < L; l++) {
        res_init(&b[l]);
        rb[l] = b[l].r;
      }
      ck_assert_int_eq(eplb_split_solve_layers(many[m], L, p, loads[c], rb), EPLB_OK);
      for (int l = 0; l < L; l++) {
        uint32_t R = in[l].R, G = in[l].G, E = in[l].E;
        ck_assert_msg(!memcmp(a[l].share, b[l].share, R * sizeof(double)) &&
                          !memcmp(a[l].amount, b[l].amount, R * sizeof(double)) &&
                          !memcmp(a[l].gpu_load, b[l].gpu_load, G * sizeof(double)) &&
                          !memcmp(a[l].be, b[l].be, E) && !memcmp(a[l].bg, b[l].bg, G),
                      "call %d, %s threads, layer %d differs", c, m ? "0" : "3", l);
        ck_assert(!memcmp(&ra[l].t_star, &rb[l].t_star, sizeof(double)) &&
                  ra[l].iterations == rb[l].iterations &&
                  ra[l].num_bottleneck_experts == rb[l].num_bottleneck_experts);
      }
    }
  }
  /* Layers 7 and 23 fail: layer 7 is reported. */
  size_t o7 = 0, o23 = 0;
  for (int l = 0; l < 23; l++)
    o23 += in[l].E, o7 += l < 7 ? in[l].E : 0;
  loads[0][o7] = -1.0, loads[0][o23] = NAN;
  ck_assert_int_eq(eplb_split_solve_layers(many[0], L, p, loads[0], rb), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "layer 7: "));
  o.threads = EPLB_SPLIT_MAX_THREADS + 1;
  eplb_split_t *bad = NULL;
  ck_assert_int_eq(eplb_split_create(&o, &bad), EPLB_EINVAL);
  ck_assert_ptr_null(bad);
  eplb_split_destroy(one);
  eplb_split_destroy(many[0]);
  eplb_split_destroy(many[1]);
}
END_TEST

/* ---- bad input ------------------------------------------------------- */

typedef eplb_status_t (*solve_fn)(eplb_split_t *, const eplb_split_problem_t *, const double *,
                                  eplb_split_result_t *);

static void bad_inputs(solve_fn solve) {
  uint32_t phy[5] = {0, 1, 2, 0, 2}, slots[2] = {3, 2};
  double loads[4] = {1, 2, 3, 4}, share[5], gl[2];
  eplb_split_problem_t p = {3, 2, 5, phy, slots};
  eplb_split_result_t r = {.share = share, .gpu_load = gl};
  eplb_split_t *s = make(EPLB_SPLIT_FRACTIONAL, 1);
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_OK);
  ck_assert(r.t_star == 3.0);
  ck_assert_int_eq(solve(s, NULL, loads, &r), EPLB_EINVAL);
  ck_assert_int_eq(solve(s, &p, NULL, &r), EPLB_EINVAL);
  ck_assert_int_eq(solve(s, &p, loads, NULL), EPLB_EINVAL);
  ck_assert_int_eq(solve(NULL, &p, loads, &r), EPLB_EINVAL);
  eplb_split_result_t nos = {.gpu_load = gl};
  ck_assert_int_eq(solve(s, &p, loads, &nos), EPLB_EINVAL);
  /* An expert with no replica. */
  p.num_experts = 4;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "expert 3"));
  p.num_experts = 3;
  /* Expert id out of range. */
  phy[4] = 7;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_ERANGE);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "phy2log[4] = 7"));
  phy[4] = 2;
  /* Slots do not add up. */
  slots[1] = 3;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_ESHAPE);
  slots[1] = 2;
  /* Negative, NaN, infinite loads. */
  loads[1] = -0.5;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "loads[1]"));
  loads[1] = NAN;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_EINVAL);
  loads[1] = INFINITY;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_EINVAL);
  /* The check's first pass flags -0.0 with the bad ones; the second lets it
   * through, and names the first bad load after it. */
  loads[0] = -0.0, loads[1] = -DBL_MIN, loads[2] = NAN;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "loads[1]"));
  loads[1] = 2, loads[2] = 3;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_OK);
  loads[0] = 1;
  loads[1] = 2;
  p.num_gpus = 0;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_EINVAL);
  p.num_gpus = 2;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_OK);
  eplb_split_destroy(s);
  /* Integer mode needs whole tokens. */
  s = make(EPLB_SPLIT_INTEGER, 0);
  loads[2] = 2.5;
  ck_assert_int_eq(solve(s, &p, loads, &r), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "loads[2]"));
  eplb_split_destroy(s);
}

START_TEST(bad_input_exact) { bad_inputs(eplb_split_solve); }
END_TEST

START_TEST(bad_input_glpk) { bad_inputs(eplb_split_solve_glpk); }
END_TEST

START_TEST(bad_options) {
  eplb_split_options_t o;
  eplb_split_t *s = (eplb_split_t *)&o;
  eplb_split_options_default(&o);
  eplb_split_options_default(NULL);
  ck_assert_int_eq(eplb_split_create(&o, NULL), EPLB_EINVAL);
  o.mode = (eplb_split_mode_t)5;
  ck_assert_int_eq(eplb_split_create(&o, &s), EPLB_EINVAL);
  ck_assert_ptr_null(s);
  eplb_split_options_default(&o);
  o.warm_start = 2;
  ck_assert_int_eq(eplb_split_create(&o, &s), EPLB_EINVAL);
  eplb_split_options_default(&o);
  o.glpk_time_limit_s = NAN;
  ck_assert_int_eq(eplb_split_create(&o, &s), EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_create(NULL, &s), EPLB_OK);
  eplb_split_destroy(s);
  eplb_split_destroy(NULL);
  eplb_split_reset(NULL);
}
END_TEST

/* ---- GLPK: errors, time limits, silence --------------------------------- */

static int stdout_saved = -1;
static char stdout_path[4096];

static void stdout_capture(void) {
  fflush(stdout);
  snprintf(stdout_path, sizeof stdout_path, "%s", eplb_test_path(eplb_test_tmpdir(), "stdout"));
  int fd = open(stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  stdout_saved = dup(1);
  dup2(fd, 1);
  close(fd);
}

static long stdout_release(void) {
  fflush(stdout);
  dup2(stdout_saved, 1);
  close(stdout_saved);
  FILE *f = fopen(stdout_path, "rb");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  return n;
}

static eplb_status_t bad_glpk_body(void *ctx) {
  (void)ctx;
  glp_prob *lp = glp_create_prob();
  glp_add_cols(lp, 2);
  glp_set_col_bnds(lp, 99, GLP_LO, 0.0, 0.0); /* column 99 does not exist */
  glp_delete_prob(lp);
  return EPLB_OK;
}

static int logged;
static void count_log(eplb_log_level_t level, const char *module, const char *msg, void *user) {
  (void)level;
  (void)msg;
  (void)user;
  if (!strcmp(module, "lp"))
    logged++;
}

START_TEST(glpk_error_is_caught_silently) {
  eplb_log_set_callback(count_log, NULL, EPLB_LOG_DEBUG);
  stdout_capture();
  eplb_status_t st = eplb__glpk_call("test", bad_glpk_body, NULL);
  eplb_status_t st2 = eplb__glpk_call("test", bad_glpk_body, NULL);
  char detail[512];
  snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  /* GLPK works again afterwards. */
  uint32_t phy[3] = {0, 1, 0}, slots[2] = {2, 1};
  double loads[2] = {4, 2}, share[3], gl[2];
  eplb_split_problem_t p = {2, 2, 3, phy, slots};
  eplb_split_result_t r = {.share = share, .gpu_load = gl};
  eplb_split_t *s = make(EPLB_SPLIT_FRACTIONAL, 0);
  eplb_status_t st3 = eplb_split_solve_glpk(s, &p, loads, &r);
  long out = stdout_release();
  ck_assert_int_eq(st, EPLB_ESOLVER);
  ck_assert_int_eq(st2, EPLB_ESOLVER);
  ck_assert_ptr_nonnull(strstr(detail, "test: GLPK error: "));
  ck_assert_int_eq(st3, EPLB_OK);
  ck_assert(r.t_star == 3.0);
  ck_assert_int_eq(out, 0);
  ck_assert_int_gt(logged, 0);
  eplb_split_destroy(s);
  eplb_split_glpk_thread_done();
  eplb_split_glpk_thread_done();
  eplb_log_set_callback(NULL, NULL, EPLB_LOG_ERROR);
  ck_assert_int_eq(eplb__glpk_time_limit_ms(0), 2147483647);
  ck_assert_int_eq(eplb__glpk_time_limit_ms(1e-9), 1);
  ck_assert_int_eq(eplb__glpk_time_limit_ms(2.5), 2500);
}
END_TEST

START_TEST(glpk_time_limit) {
  enum { E = 3000, G = 300, R = 6000 };
  uint32_t *phy = malloc(R * sizeof *phy), slots[G];
  double *loads = malloc(E * sizeof *loads), *share = malloc(R * sizeof *share), gl[G];
  rng_state = 5;
  for (uint32_t g = 0; g < G; g++)
    slots[g] = R / G;
  for (uint32_t r = 0; r < R; r++)
    phy[r] = r < E ? (r * 7919u) % E : rndn(E);
  for (uint32_t e = 0; e < E; e++)
    loads[e] = rndu() * 1000;
  eplb_split_options_t o;
  eplb_split_options_default(&o);
  o.glpk_time_limit_s = 1e-6;
  eplb_split_t *s = NULL;
  ck_assert_int_eq(eplb_split_create(&o, &s), EPLB_OK);
  eplb_split_problem_t p = {E, G, R, phy, slots};
  eplb_split_result_t r = {.share = share, .gpu_load = gl};
  stdout_capture();
  eplb_status_t st = eplb_split_solve_glpk(s, &p, loads, &r);
  long out = stdout_release();
  ck_assert_msg(st == EPLB_ETIMEOUT || st == EPLB_OK, "status %d", st);
  ck_assert_int_eq(out, 0);
  /* The exact solver does it regardless. */
  ck_assert_int_eq(eplb_split_solve(s, &p, loads, &r), EPLB_OK);
  eplb_split_destroy(s);
  free(phy);
  free(loads);
  free(share);
}
END_TEST

/* ---- allocation failures ------------------------------------------------ */

START_TEST(allocation_failures) {
  static inst_t in;
  static res_t o;
  rng_state = 11;
  do
    gen_placement(&in);
  while (in.R == in.E);
  gen_loads(&in, 0);
  eplb_split_problem_t p = problem_of(&in);
  eplb_test_alloc_install();
  for (int glpk = 0; glpk < 2; glpk++) {
    int ok = 0;
    for (long n = 0; n < 200 && !ok; n++) {
      eplb_test_alloc_reset();
      eplb_test_alloc_fail_after(n);
      eplb_split_t *s = NULL;
      eplb_status_t st = eplb_split_create(NULL, &s);
      if (st == EPLB_OK) {
        res_init(&o);
        st = glpk ? eplb_split_solve_glpk(s, &p, in.loads, &o.r)
                  : eplb_split_solve(s, &p, in.loads, &o.r);
        if (st == EPLB_ENOMEM) {
          /* The handle stays usable once memory is back. */
          eplb_test_alloc_reset();
          st = glpk ? eplb_split_solve_glpk(s, &p, in.loads, &o.r)
                    : eplb_split_solve(s, &p, in.loads, &o.r);
          ck_assert_int_eq(st, EPLB_OK);
        } else {
          ck_assert_int_eq(st, EPLB_OK);
          ok = 1;
        }
      } else {
        ck_assert_int_eq(st, EPLB_ENOMEM);
        ck_assert_ptr_null(s);
      }
      eplb_test_alloc_reset();
      eplb_split_destroy(s);
    }
    ck_assert(ok);
  }
  eplb_allocator_set(NULL);
}
END_TEST

/* ---- replica-graph placements ------------------------------------------- */

START_TEST(graph_placements) {
  const eplb_split_graph_t kinds[3] = {EPLB_SPLIT_GRAPH_RING, EPLB_SPLIT_GRAPH_CUBE,
                                       EPLB_SPLIT_GRAPH_HYPERCUBE};
  static uint32_t phy[4096], slots[64];
  static double loads[1024];
  static res_t a, c;
  eplb_split_t *s = make(EPLB_SPLIT_FRACTIONAL, 0);
  rng_state = 3;
  for (int k = 0; k < 3; k++)
    for (uint32_t gs = 8; gs <= 16; gs += 8) {
      if (kinds[k] == EPLB_SPLIT_GRAPH_CUBE && gs == 16) {
        ck_assert_int_eq(eplb_split_graph_place(kinds[k], gs, 32, 4, 2, phy, slots), EPLB_EINVAL);
        continue;
      }
      uint32_t G = 2 * gs, epg = 4, red = 3;
      ck_assert_int_eq(eplb_split_graph_place(kinds[k], gs, G, epg, red, phy, slots), EPLB_OK);
      uint32_t E = G * epg, R = G * (epg + red), seen[1024] = {0};
      for (uint32_t g = 0, r = 0; g < G; g++) {
        ck_assert_uint_eq(slots[g], epg + red);
        for (uint32_t i = 0; i < slots[g]; i++, r++) {
          ck_assert_uint_lt(phy[r], E);
          /* No expert twice on a GPU; redundant copies stay in the group. */
          for (uint32_t j = r - i; j < r; j++)
            ck_assert_uint_ne(phy[j], phy[r]);
          ck_assert_uint_eq(phy[r] / epg / gs, g / gs);
          seen[phy[r]]++;
        }
      }
      for (uint32_t e = 0; e < E; e++)
        ck_assert_uint_ge(seen[e], 1);
      for (uint32_t e = 0; e < E; e++)
        loads[e] = rndu() * 100;
      eplb_split_problem_t p = {E, G, R, phy, slots};
      res_init(&a);
      res_init(&c);
      a.r.amount = c.r.amount = NULL;
      a.r.bottleneck_experts = c.r.bottleneck_experts = NULL;
      a.r.bottleneck_gpus = c.r.bottleneck_gpus = NULL;
      double share_a[4096], share_c[4096];
      a.r.share = share_a;
      c.r.share = share_c;
      ck_assert_int_eq(eplb_split_solve(s, &p, loads, &a.r), EPLB_OK);
      ck_assert_int_eq(eplb_split_solve_glpk(s, &p, loads, &c.r), EPLB_OK);
      ck_assert(rel_eq(a.r.t_star, c.r.t_star, 1e-9));
    }
  ck_assert_int_eq(eplb_split_graph_place(EPLB_SPLIT_GRAPH_CUBE, 8, 8, 2, 7, phy, slots),
                   EPLB_EINVAL); /* 7 > 3 neighbours x 2 experts */
  ck_assert_int_eq(eplb_split_graph_place(EPLB_SPLIT_GRAPH_RING, 8, 12, 2, 1, phy, slots),
                   EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_graph_place(EPLB_SPLIT_GRAPH_RING, 4, 8, 2, 1, phy, slots),
                   EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_graph_place((eplb_split_graph_t)9, 8, 8, 2, 1, phy, slots),
                   EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_graph_place(EPLB_SPLIT_GRAPH_RING, 8, 8, 2, 1, NULL, slots),
                   EPLB_EINVAL);
  eplb_split_destroy(s);
}
END_TEST

/* ---- hand-made instances ---------------------------------------------- */

START_TEST(known_answers) {
  /* GPU0: e0 e1, GPU1: e1 e2, GPU2: e3. Loads 6, 4, 2, 3: {e0,e1,e2} on 2 GPUs
   * gives 6; e3 alone 3. */
  uint32_t phy[5] = {0, 1, 1, 2, 3}, slots[3] = {2, 2, 1};
  double loads[4] = {6, 4, 2, 3}, share[5], gl[3];
  uint8_t be[4], bg[3];
  eplb_split_problem_t p = {4, 3, 5, phy, slots};
  eplb_split_result_t r = {
      .share = share, .gpu_load = gl, .bottleneck_experts = be, .bottleneck_gpus = bg};
  eplb_split_t *s = make(EPLB_SPLIT_INTEGER, 1);
  ck_assert_int_eq(eplb_split_solve(s, &p, loads, &r), EPLB_OK);
  ck_assert(r.t_star == 6.0);
  ck_assert(r.max_load == 6.0);
  ck_assert(be[0] && !be[3]); /* {e0} on GPU0 or {e0, e1, e2} on GPUs 0-1 */
  ck_assert(r.num_bottleneck_gpus == 1 || (be[1] && be[2] && r.num_bottleneck_gpus == 2));
  ck_assert(share[1] == 0.0 && share[2] == 1.0);
  /* Odd total: integer optimum is the ceiling. */
  loads[0] = 5;
  ck_assert_int_eq(eplb_split_solve(s, &p, loads, &r), EPLB_OK);
  ck_assert(r.t_star == 5.5);
  ck_assert(r.max_load == 6.0);
  ck_assert(be[0] && be[1] && be[2] && !be[3] && bg[0] && bg[1] && !bg[2]);
  /* All zero loads: uniform shares, empty certificate. */
  memset(loads, 0, sizeof loads);
  ck_assert_int_eq(eplb_split_solve(s, &p, loads, &r), EPLB_OK);
  ck_assert(r.t_star == 0.0 && r.num_bottleneck_experts == 0);
  ck_assert(share[1] == 0.5 && share[0] == 1.0);
  eplb_split_destroy(s);
}
END_TEST

/* ---- the locality stage ---------------------------------------------------- */

/* Random instances with 1-3 nodes: the locality split keeps every GPU under
 * T* (1 + tol), its node shares route exactly the node loads, and its
 * cross-node volume equals the optimum of the GLPK transportation LP at the
 * same capacity (the reference the locality policy uses). */
static void run_local(uint64_t seed, int n, int integer) {
  eplb_split_t *s = make(integer ? EPLB_SPLIT_INTEGER : EPLB_SPLIT_FRACTIONAL, 1);
  static inst_t in;
  static res_t a, plain;
  static double nl[3 * 128], ns[3 * 512], x[3 * 512];
  static uint32_t gnode[64], rep_gpu[512], rep_node[512];
  rng_state = seed;
  for (int i = 0; i < n; i++) {
    if (i % 4 == 0)
      gen_placement(&in);
    uint32_t N = 1 + rndn(in.G < 3 ? in.G : 3);
    for (uint32_t g = 0; g < in.G; g++)
      gnode[g] = g * N / in.G; /* contiguous, every node has a GPU */
    gen_loads(&in, 1);
    for (uint32_t e = 0; e < in.E; e++) {
      double left = in.loads[e];
      for (uint32_t v = 0; v < N; v++) {
        double part = v + 1 == N ? left : floor(left * rndu());
        nl[v * in.E + e] = integer ? part : part * 0.75;
        left -= part;
      }
    }
    double tol = rndn(2) ? 0.0 : 0.05;
    eplb_split_problem_t p = problem_of(&in);
    eplb_split_local_t loc = {N, gnode, nl, tol};
    double cross = -1;
    res_init(&a);
    eplb_status_t st = eplb_split_solve_local(s, &p, &loc, &a.r, ns, &cross);
    ck_assert_msg(st == EPLB_OK, "instance %d: %s", i, eplb_error_detail());
    double w[128], tot = 0;
    for (uint32_t e = 0; e < in.E; e++) {
      w[e] = 0;
      for (uint32_t v = 0; v < N; v++)
        w[e] += nl[v * in.E + e];
      tot += w[e];
    }
    res_init(&plain);
    ck_assert_int_eq(eplb_split_solve(s, &p, w, &plain.r), EPLB_OK);
    ck_assert(rel_eq(a.r.t_star, plain.r.t_star, 1e-12));
    double cap =
        integer ? fmax(ceil(a.r.t_star), floor(a.r.t_star * (1 + tol))) : a.r.t_star * (1 + tol);
    ck_assert_msg(a.r.max_load <= cap * (1 + 1e-9) + 1e-9, "instance %d: max %.17g cap %.17g", i,
                  a.r.max_load, cap);
    /* Node shares route each node's tokens: per (node, expert) they sum to
     * 1, and the GPU loads they give are the result's. */
    double gl[64] = {0}, xc = 0;
    for (uint32_t v = 0; v < N; v++)
      for (uint32_t e = 0; e < in.E; e++) {
        double sum = 0;
        for (uint32_t r = 0, g = 0, k = 0; r < in.R; r++, k++) {
          while (k >= in.slots[g])
            g++, k = 0;
          if (in.phy2log[r] != e)
            continue;
          double sh = ns[v * in.R + r], amt = sh * nl[v * in.E + e];
          ck_assert(sh >= 0 && sh <= 1 + 1e-12);
          sum += sh;
          gl[g] += amt;
          xc += gnode[g] != v ? amt : 0;
        }
        ck_assert_msg(rel_eq(sum, 1, 1e-9), "instance %d node %u expert %u: sum %.17g", i, v, e,
                      sum);
      }
    for (uint32_t g = 0; g < in.G; g++)
      ck_assert_msg(fabs(gl[g] - a.r.gpu_load[g]) <= 1e-9 * fmax(tot, 1),
                    "instance %d GPU %u: %.17g vs %.17g", i, g, gl[g], a.r.gpu_load[g]);
    ck_assert(fabs(xc - cross) <= 1e-9 * fmax(tot, 1));
    /* The optimum: GLPK's transportation LP at the same capacity. */
    for (uint32_t r = 0, g = 0, k = 0; r < in.R; r++, k++) {
      while (k >= in.slots[g])
        g++, k = 0;
      rep_gpu[r] = g, rep_node[r] = gnode[g];
    }
    eplb_test_transport_problem_t tp = {
        N, in.E, in.R, in.G, in.phy2log, rep_gpu, rep_node, nl, cap * (1 + 1e-12)};
    double ref = -1;
    st = eplb_test_transport_solve(&tp, x, &ref);
    ck_assert_msg(st == EPLB_OK, "instance %d: transport %s", i, eplb_error_detail());
    ck_assert_msg(fabs(cross - ref) <= 1e-6 * fmax(tot, 1), "instance %d: cross %.17g LP %.17g", i,
                  cross, ref);
  }
  eplb_split_destroy(s);
}

START_TEST(local_matches_transport_lp) { run_local(0xabcdef12345ull + (uint64_t)_i, 250, _i); }
END_TEST

START_TEST(local_bad_input) {
  eplb_split_t *s = make(EPLB_SPLIT_FRACTIONAL, 1);
  uint32_t p2l[4] = {0, 1, 0, 1}, slots[2] = {2, 2}, gnode[2] = {0, 1};
  double nl[4] = {1, 2, 3, 4}, ns[8];
  static res_t a;
  res_init(&a);
  eplb_split_problem_t p = {2, 2, 4, p2l, slots};
  eplb_split_local_t loc = {2, gnode, nl, 0.01};
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, ns, NULL), EPLB_OK);
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, NULL, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb_split_solve_local(s, &p, NULL, &a.r, ns, NULL), EPLB_EINVAL);
  loc.tolerance = NAN;
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, ns, NULL), EPLB_EINVAL);
  loc.tolerance = 0.01, loc.num_nodes = 3;
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, ns, NULL), EPLB_EINVAL);
  loc.num_nodes = 2, gnode[1] = 2;
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, ns, NULL), EPLB_ERANGE);
  gnode[1] = 1, nl[3] = -1;
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, ns, NULL), EPLB_EINVAL);
  ck_assert(strstr(eplb_error_detail(), "node 1 expert 1") != NULL);
  nl[3] = INFINITY;
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, ns, NULL), EPLB_EINVAL);
  /* Both nodes hold both experts: with loads local to each node no token
   * needs to leave, and the balance is still exact. */
  nl[0] = 4, nl[1] = 0, nl[2] = 0, nl[3] = 4;
  double cross = -1;
  ck_assert_int_eq(eplb_split_solve_local(s, &p, &loc, &a.r, ns, &cross), EPLB_OK);
  ck_assert(cross == 0 && a.r.max_load == 4 && a.r.t_star == 4);
  eplb_split_destroy(s);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("lp");
  TCase *t = tcase_create("split");
  tcase_add_loop_test(t, maxflow_matches_a_reference, 0, 3);
  tcase_add_loop_test(t, random_fractional_match_glpk, 0, 3);
  tcase_add_loop_test(t, random_integer_match_glpk, 0, 2);
  tcase_add_test(t, warm_start_on_drifting_batches);
  tcase_add_test(t, no_allocation_after_warmup);
  tcase_add_test(t, layers_match_single_solves);
  tcase_add_loop_test(t, layers_same_whatever_the_threads, 0, 2);
  tcase_add_test(t, bad_input_exact);
  tcase_add_test(t, bad_input_glpk);
  tcase_add_test(t, bad_options);
  tcase_add_test(t, glpk_error_is_caught_silently);
  tcase_add_test(t, glpk_time_limit);
  tcase_add_test(t, allocation_failures);
  tcase_add_test(t, graph_placements);
  tcase_add_test(t, known_answers);
  tcase_add_loop_test(t, local_matches_transport_lp, 0, 2);
  tcase_add_test(t, local_bad_input);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return eplb_test_run(suite()); }
