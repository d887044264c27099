/* Synthetic traces. Each layer's expert popularity comes from a latent
 * Gaussian score per expert, a mix of a score shared by all layers and one of
 * its own (layer_variation). Scores follow an AR(1) process from step to
 * step, redrawn at domain switches; popularity is exp(sigma * score)
 * (lognormal) or 1 / rank^s by score rank (Zipf). Every token then picks k
 * distinct experts per layer from the popularity; after its first pick,
 * further picks favour the first pick's latent cluster (coactivation).
 * With rank_affinity, each tenant (a group of source ranks) has latent
 * scores of its own mixed into the shared ones, so what a token picks
 * depends on where it comes from. */
#include "traces/traces.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void synth_options_defaults(eplb_synth_options_t *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->num_layers = 4;
  opts->num_experts = 64;
  opts->topk = 6;
  opts->num_steps = 32;
  opts->tokens_per_step = 256;
  opts->seed = 1;
  opts->skew = EPLB_SKEW_ZIPF;
  opts->skew_param = 1.0;
  opts->layer_variation = 1.0;
  opts->drift = 0.9;
  opts->switch_every = 0;
  opts->coactivation = 0.3;
  opts->num_ranks = 8;
  opts->topk_rows_per_step = UINT32_MAX;
  opts->phase = EPLB_PHASE_DECODE;
  snprintf(opts->model, sizeof opts->model, "synthetic");
}

eplb_status_t eplb_synth_options_init(eplb_synth_options_t *opts, size_t size) {
  eplb_synth_options_t d;
  synth_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_synth_options_t");
}

/* Independent streams, so that e.g. tokens_per_step does not change the
 * popularity sequence. */
enum {
  STREAM_POPULARITY = 1,
  STREAM_TOKENS = 2,
  STREAM_CLUSTERS = 3,
  STREAM_CALIBRATION = 4,
  STREAM_TENANTS = 5
};

static void seed_stream(eplb__rng_t *rng, uint64_t seed, uint64_t stream) {
  eplb__rng_seed(rng, seed ^ (stream * 0xd1342543de82ef95u));
}

/* ---- popularity ------------------------------------------------------------ */

typedef struct scored {
  double score;
  uint32_t expert;
} scored_t;

static int by_score_desc(const void *a, const void *b) {
  const scored_t *x = a, *y = b;
  if (x->score != y->score)
    return x->score > y->score ? -1 : 1;
  return x->expert < y->expert ? -1 : x->expert > y->expert; /* total order: same on every libc */
}

/* p[e] (normalised to sum 1) from latent scores y[e]. */
static void popularity(const eplb_synth_options_t *o, const double *y, uint32_t E,
                       scored_t *scratch, double *p) {
  double sum = 0;
  if (o->skew == EPLB_SKEW_LOGNORMAL) {
    double ymax = y[0];
    for (uint32_t e = 1; e < E; e++)
      ymax = y[e] > ymax ? y[e] : ymax;
    for (uint32_t e = 0; e < E; e++) {
      /* A floor keeps every expert reachable when sigma is huge. */
      p[e] = fmax(exp(o->skew_param * (y[e] - ymax)), 1e-12);
      sum += p[e];
    }
  } else {
    for (uint32_t e = 0; e < E; e++)
      scratch[e] = (scored_t){y[e], e};
    qsort(scratch, E, sizeof *scratch, by_score_desc);
    for (uint32_t r = 0; r < E; r++) {
      double w = pow((double)r + 1.0, -o->skew_param);
      p[scratch[r].expert] = w;
      sum += w;
    }
  }
  for (uint32_t e = 0; e < E; e++)
    p[e] /= sum;
}

/* Approximate inclusion probabilities of drawing k distinct experts:
 * pi_e = 1 - exp(-lambda p_e) with sum pi = k (Newton from below on a
 * concave increasing function converges monotonically). */
static void inclusion(const double *p, uint32_t E, uint32_t k, double *pi) {
  double lambda = k;
  for (int it = 0; it < 100; it++) {
    double f = -(double)k, df = 0;
    for (uint32_t e = 0; e < E; e++) {
      double x = exp(-lambda * p[e]);
      f += 1 - x;
      df += p[e] * x;
    }
    if (f > -1e-9 * k || df <= 0)
      break;
    lambda -= f / df;
  }
  for (uint32_t e = 0; e < E; e++)
    pi[e] = 1 - exp(-lambda * p[e]);
}

static double pearson(const double *a, const double *b, uint32_t n) {
  double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  for (uint32_t i = 0; i < n; i++) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  for (uint32_t i = 0; i < n; i++) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : NAN;
}

/* The AR(1) coefficient of the latent scores that makes consecutive steps'
 * expected counts (not the scores) correlate by `drift` across experts.
 * Monte Carlo with common random numbers, so the estimate is smooth in the
 * coefficient and bisection applies. */
static eplb_status_t calibrate(const eplb_synth_options_t *o, double *coef) {
  uint32_t E = o->num_experts, k = o->topk;
  *coef = o->drift;
  if (o->drift <= 0 || o->drift >= 1 || k >= E || o->skew_param == 0)
    return EPLB_OK;
  uint32_t reps = 65536 / E;
  reps = reps < 4 ? 4 : reps > 64 ? 64 : reps;
  size_t n = (size_t)reps * E;
  double *z = eplb__malloc_array(n * 2 + (size_t)E * 5, sizeof *z);
  scored_t *scratch = eplb__malloc_array(E, sizeof *scratch);
  if (!z || !scratch) {
    eplb__free(z);
    eplb__free(scratch);
    return eplb__error(EPLB_ENOMEM, "traces", "synth: out of memory");
  }
  double *noise = z + n, *y2 = noise + n, *p1 = y2 + E, *p2 = p1 + E, *pi1 = p2 + E, *pi2 = pi1 + E;
  eplb__rng_t rng;
  seed_stream(&rng, 0x5eed, STREAM_CALIBRATION);
  for (size_t i = 0; i < n; i++) {
    z[i] = eplb__rng_normal(&rng);
    noise[i] = eplb__rng_normal(&rng);
  }
  double lo = 0, hi = 1;
  for (int it = 0; it < 24; it++) {
    double a = 0.5 * (lo + hi), b = sqrt(1 - a * a), sum = 0;
    int used = 0;
    for (uint32_t r = 0; r < reps; r++) {
      const double *z1 = z + (size_t)r * E, *nz = noise + (size_t)r * E;
      for (uint32_t e = 0; e < E; e++)
        y2[e] = a * z1[e] + b * nz[e];
      popularity(o, z1, E, scratch, p1);
      popularity(o, y2, E, scratch, p2);
      inclusion(p1, E, k, pi1);
      inclusion(p2, E, k, pi2);
      double c = pearson(pi1, pi2, E);
      if (c == c) {
        sum += c;
        used++;
      }
    }
    if (!used)
      break;
    if (sum / used < o->drift)
      lo = a;
    else
      hi = a;
    *coef = 0.5 * (lo + hi);
  }
  eplb__free(z);
  eplb__free(scratch);
  return EPLB_OK;
}

/* ---- sampling ---------------------------------------------------------------- */

/* Vose's alias table: one uniform draw per sample. */
static void alias_build(const double *p, uint32_t E, double *prob, uint32_t *alias,
                        uint32_t *work) {
  uint32_t *small = work, *large = work + E;
  uint32_t ns = 0, nl = 0;
  for (uint32_t e = 0; e < E; e++) {
    prob[e] = p[e] * E;
    alias[e] = e;
    if (prob[e] < 1)
      small[ns++] = e;
    else
      large[nl++] = e;
  }
  while (ns && nl) {
    uint32_t s = small[--ns], l = large[nl - 1];
    alias[s] = l;
    prob[l] -= 1 - prob[s];
    if (prob[l] < 1) {
      nl--;
      small[ns++] = l;
    }
  }
  while (nl)
    prob[large[--nl]] = 1;
  while (ns)
    prob[small[--ns]] = 1; /* rounding leftovers */
}

static uint32_t alias_draw(eplb__rng_t *rng, const double *prob, const uint32_t *alias,
                           uint32_t E) {
  double u = eplb__rng_uniform(rng) * E;
  uint32_t i = (uint32_t)u;
  if (i >= E)
    i = E - 1;
  return u - i < prob[i] ? i : alias[i];
}

typedef struct layer_ctx {
  uint32_t E, k;
  const double *p;
  const double *prob;
  const uint32_t *alias;
  const uint32_t *cluster_of;      /* [E] */
  const uint32_t *cluster_members; /* experts ordered by cluster */
  const double *member_p;          /* p of cluster_members[i] */
  const double *cluster_total;     /* sum of p per cluster */
  uint32_t cluster_size;
  uint32_t *stamp; /* [E]: token + 1 when already picked by that token */
  double coactivation;
} layer_ctx_t;

/* Exact proportional draw among all experts not yet picked (the fallback
 * when rejection keeps hitting picked ones). */
static uint32_t draw_unpicked(eplb__rng_t *rng, const layer_ctx_t *c, uint32_t mark) {
  double total = 0;
  uint32_t last = 0;
  for (uint32_t e = 0; e < c->E; e++)
    if (c->stamp[e] != mark)
      total += c->p[e];
  double u = eplb__rng_uniform(rng) * total;
  for (uint32_t e = 0; e < c->E; e++) {
    if (c->stamp[e] == mark)
      continue;
    last = e;
    if (u < c->p[e])
      return e;
    u -= c->p[e];
  }
  return last; /* rounding */
}

/* Proportional draw among the unpicked members of cluster cl; 0 if none. */
static int draw_in_cluster(eplb__rng_t *rng, const layer_ctx_t *c, uint32_t cl,
                           const uint32_t *picks, uint32_t npicks, uint32_t mark, uint32_t *out) {
  double total = c->cluster_total[cl];
  for (uint32_t i = 0; i < npicks; i++)
    if (c->cluster_of[picks[i]] == cl)
      total -= c->p[picks[i]];
  if (!(total > 1e-12 * c->cluster_total[cl]))
    return 0;
  uint32_t begin = cl * c->cluster_size;
  uint32_t end = begin + c->cluster_size < c->E ? begin + c->cluster_size : c->E;
  double u = eplb__rng_uniform(rng) * total;
  int got = 0;
  for (uint32_t i = begin; i < end; i++) {
    uint32_t e = c->cluster_members[i];
    if (c->stamp[e] == mark)
      continue;
    *out = e;
    got = 1;
    if (u < c->member_p[i])
      break;
    u -= c->member_p[i];
  }
  return got;
}

static void sample_token(eplb__rng_t *rng, const layer_ctx_t *c, uint32_t mark, uint16_t *out,
                         uint32_t *counts) {
  uint32_t picks[EPLB_TRACE_MAX_TOPK];
  for (uint32_t j = 0; j < c->k; j++) {
    uint32_t e = 0;
    int got = 0;
    if (j > 0 && c->coactivation > 0 && eplb__rng_uniform(rng) < c->coactivation)
      got = draw_in_cluster(rng, c, c->cluster_of[picks[0]], picks, j, mark, &e);
    for (int tries = 0; !got && tries < 32; tries++) {
      e = alias_draw(rng, c->prob, c->alias, c->E);
      got = c->stamp[e] != mark;
    }
    if (!got) /* the unpicked mass is small: draw exactly */
      e = draw_unpicked(rng, c, mark);
    c->stamp[e] = mark;
    picks[j] = e;
    counts[e]++;
    if (out)
      out[j] = (uint16_t)e;
  }
}

/* ---- generation -------------------------------------------------------------- */

#define SYNTH_BAD(...) eplb__error(EPLB_EINVAL, "traces", __VA_ARGS__)

eplb_status_t eplb_synth_options_check(const eplb_synth_options_t *o) {
  if (!o)
    return SYNTH_BAD("synth options: NULL");
  eplb_synth_options_t own;
  eplb_status_t st =
      EPLB__OPTS_TAKE(own, o, eplb_synth_options_default, "eplb_synth_options_t", "traces");
  if (st != EPLB_OK)
    return st;
  o = &own;
  if (o->num_layers < 1 || o->num_layers > EPLB_TRACE_MAX_LAYERS)
    return SYNTH_BAD("num_layers %" PRIu32 ": must be 1..%u", o->num_layers, EPLB_TRACE_MAX_LAYERS);
  if (o->num_experts < 1 || o->num_experts > EPLB_TRACE_MAX_EXPERTS)
    return SYNTH_BAD("num_experts %" PRIu32 ": must be 1..%u", o->num_experts,
                     EPLB_TRACE_MAX_EXPERTS);
  if (o->topk < 1 || o->topk > EPLB_TRACE_MAX_TOPK || o->topk > o->num_experts)
    return SYNTH_BAD("topk %" PRIu32 ": must be 1..min(%u, num_experts)", o->topk,
                     EPLB_TRACE_MAX_TOPK);
  if (!(o->skew == EPLB_SKEW_ZIPF || o->skew == EPLB_SKEW_LOGNORMAL))
    return SYNTH_BAD("skew %d: unknown skew kind", (int)o->skew);
  if (!(o->skew_param >= 0 && o->skew_param <= 100))
    return SYNTH_BAD("skew_param %g: must be in [0, 100]", o->skew_param);
  const struct {
    const char *name;
    double v;
  } unit[] = {{"layer_variation", o->layer_variation},
              {"drift", o->drift},
              {"coactivation", o->coactivation},
              {"rank_affinity", o->rank_affinity}};
  for (size_t i = 0; i < sizeof unit / sizeof unit[0]; i++)
    if (!(unit[i].v >= 0 && unit[i].v <= 1))
      return SYNTH_BAD("%s %g: must be in [0, 1]", unit[i].name, unit[i].v);
  if (o->rank_affinity > 0 && o->num_ranks == 0)
    return SYNTH_BAD("rank_affinity %g: needs num_ranks > 0 (tenants are groups of source ranks)",
                     o->rank_affinity);
  if (o->rank_affinity > 0 && o->num_tenants > o->num_ranks)
    return SYNTH_BAD("num_tenants %" PRIu32 ": exceeds num_ranks %" PRIu32, o->num_tenants,
                     o->num_ranks);
  if (o->tokens_per_step > EPLB_MAX_TOKENS_PER_STEP)
    return eplb__error(EPLB_ERANGE, "traces", "tokens_per_step %" PRIu32 ": over the limit of %u",
                       o->tokens_per_step, EPLB_MAX_TOKENS_PER_STEP);
  /* The step's top-k rows must fit one chunk (else the writer refuses them
   * only after the whole step was drawn). */
  uint64_t nrows =
      o->topk_rows_per_step > o->tokens_per_step ? o->tokens_per_step : o->topk_rows_per_step;
  uint64_t row_bytes = nrows * ((uint64_t)o->num_layers * o->topk * 2 + 8);
  if (row_bytes > EPLB__CHUNK_MAX_RAW)
    return eplb__error(EPLB_ERANGE, "traces",
                       "topk_rows_per_step %" PRIu32 ": %" PRIu64 " top-k rows of %" PRIu32
                       " layers x %" PRIu32 " are %" PRIu64
                       " bytes a step: over the 1 GiB chunk limit",
                       o->topk_rows_per_step, nrows, o->num_layers, o->topk, row_bytes);
  return EPLB_OK;
}

typedef struct synth {
  double *z_shared, *z_layer, *y, *p, *prob, *member_p, *cluster_total;
  uint32_t *alias, *work, *cluster_of, *members, *stamp, *counts;
  scored_t *scratch;
  uint16_t *rows;
  int32_t *src;
  int32_t *row_of_token;
  /* tenants (rank_affinity > 0): latent scores [Tn][E] and [Tn][L][E];
   * the current layer's popularity, alias tables and cluster sums [Tn][E] */
  double *zt_shared, *zt_layer, *tp, *tprob, *tmember_p, *tcluster_total;
  uint32_t *talias, *tenant_of_token;
  layer_ctx_t *tctx;
} synth_t;

static void synth_free(synth_t *s) {
  eplb__free(s->z_shared);
  eplb__free(s->z_layer);
  eplb__free(s->y);
  eplb__free(s->p);
  eplb__free(s->prob);
  eplb__free(s->member_p);
  eplb__free(s->cluster_total);
  eplb__free(s->alias);
  eplb__free(s->work);
  eplb__free(s->cluster_of);
  eplb__free(s->members);
  eplb__free(s->stamp);
  eplb__free(s->counts);
  eplb__free(s->scratch);
  eplb__free(s->rows);
  eplb__free(s->src);
  eplb__free(s->row_of_token);
  eplb__free(s->zt_shared);
  eplb__free(s->zt_layer);
  eplb__free(s->tp);
  eplb__free(s->tprob);
  eplb__free(s->tmember_p);
  eplb__free(s->tcluster_total);
  eplb__free(s->talias);
  eplb__free(s->tenant_of_token);
  eplb__free(s->tctx);
}

/* Tenant count in effect: 0 when rank_affinity is off (the generator then
 * runs exactly as it did before tenants existed). */
static uint32_t tenant_count(const eplb_synth_options_t *o) {
  if (!(o->rank_affinity > 0))
    return 0;
  if (o->num_tenants)
    return o->num_tenants;
  return o->num_ranks / 8 + (o->num_ranks % 8 != 0);
}

static eplb_status_t tenants_alloc(synth_t *s, uint32_t Tn, uint32_t L, uint32_t E, uint32_t T) {
  size_t te = (size_t)Tn * E;
  s->zt_shared = eplb__malloc_array(te, sizeof(double));
  s->zt_layer = eplb__malloc_array(te, (size_t)L * sizeof(double));
  s->tp = eplb__malloc_array(te, sizeof(double));
  s->tprob = eplb__malloc_array(te, sizeof(double));
  s->tmember_p = eplb__malloc_array(te, sizeof(double));
  s->tcluster_total = eplb__malloc_array(te, sizeof(double));
  s->talias = eplb__malloc_array(te, sizeof(uint32_t));
  s->tctx = eplb__malloc_array(Tn, sizeof(layer_ctx_t));
  s->tenant_of_token = eplb__malloc_array(T, sizeof(uint32_t));
  if (!s->zt_shared || !s->zt_layer || !s->tp || !s->tprob || !s->tmember_p || !s->tcluster_total ||
      !s->talias || !s->tctx || !s->tenant_of_token)
    return eplb__error(EPLB_ENOMEM, "traces", "synth: out of memory");
  return EPLB_OK;
}

static void redraw(eplb__rng_t *rng, double *z, size_t n) {
  for (size_t i = 0; i < n; i++)
    z[i] = eplb__rng_normal(rng);
}

static void evolve(eplb__rng_t *rng, double *z, size_t n, double a) {
  double b = sqrt(1 - a * a);
  for (size_t i = 0; i < n; i++)
    z[i] = a * z[i] + b * eplb__rng_normal(rng);
}

/* The sampling tables of the popularity of latent scores y ([E] each): p,
 * its alias table (prob, alias), p by cluster member (mp) and the cluster
 * sums (ct) of the layer's clusters `members`. */
static void layer_tables(synth_t *s, const eplb_synth_options_t *o, const double *y,
                         const uint32_t *members, uint32_t csize, double *p, double *prob,
                         uint32_t *alias, double *mp, double *ct) {
  uint32_t E = o->num_experts;
  popularity(o, y, E, s->scratch, p);
  alias_build(p, E, prob, alias, s->work);
  memset(ct, 0, E * sizeof *ct);
  for (uint32_t i = 0; i < E; i++) {
    mp[i] = p[members[i]];
    ct[i / csize] += mp[i];
  }
}

/* Each tenant's popularity of layer l (the shared scores are in s->y) and
 * its sampling context; the clusters are the layer's, shared by all. */
static void tenant_layer(synth_t *s, const eplb_synth_options_t *o, uint32_t Tn, uint32_t l,
                         uint32_t csize, const layer_ctx_t *base) {
  uint32_t E = o->num_experts, L = o->num_layers;
  double a = 1 - o->rank_affinity, b = sqrt(1 - a * a);
  double vs = sqrt(1 - o->layer_variation), vl = sqrt(o->layer_variation);
  const uint32_t *members = base->cluster_members;
  for (uint32_t t = 0; t < Tn; t++) {
    const double *zs = s->zt_shared + (size_t)t * E;
    const double *zl = s->zt_layer + ((size_t)t * L + l) * E;
    double *p = s->tp + (size_t)t * E, *prob = s->tprob + (size_t)t * E;
    double *mp = s->tmember_p + (size_t)t * E, *ct = s->tcluster_total + (size_t)t * E;
    uint32_t *alias = s->talias + (size_t)t * E;
    /* s->p serves as scratch: with tenants the base context draws nothing. */
    for (uint32_t e = 0; e < E; e++)
      s->p[e] = a * s->y[e] + b * (vs * zs[e] + vl * zl[e]);
    layer_tables(s, o, s->p, members, csize, p, prob, alias, mp, ct);
    layer_ctx_t c = *base;
    c.p = p;
    c.prob = prob;
    c.alias = alias;
    c.member_p = mp;
    c.cluster_total = ct;
    s->tctx[t] = c;
  }
}

/* The generator's arrays (tenants' apart: tenants_alloc). */
static eplb_status_t synth_alloc(synth_t *s, const eplb_synth_options_t *o, uint32_t nrows) {
  uint32_t L = o->num_layers, E = o->num_experts, k = o->topk, T = o->tokens_per_step;
  size_t le = (size_t)L * E;
  s->z_shared = eplb__malloc_array(E, sizeof(double));
  s->z_layer = eplb__malloc_array(le, sizeof(double));
  s->y = eplb__malloc_array(E, sizeof(double));
  s->p = eplb__malloc_array(E, sizeof(double));
  s->prob = eplb__malloc_array(E, sizeof(double));
  s->member_p = eplb__malloc_array(E, sizeof(double));
  s->cluster_total = eplb__malloc_array(E, sizeof(double));
  s->alias = eplb__malloc_array(E, sizeof(uint32_t));
  s->work = eplb__malloc_array(2 * (size_t)E, sizeof(uint32_t));
  s->cluster_of = eplb__malloc_array(le, sizeof(uint32_t));
  s->members = eplb__malloc_array(le, sizeof(uint32_t));
  s->stamp = eplb__malloc_array(E, sizeof(uint32_t));
  s->counts = eplb__malloc_array(le, sizeof(uint32_t));
  s->scratch = eplb__malloc_array(E, sizeof(scored_t));
  s->rows = eplb__malloc_array((size_t)nrows * L, k * sizeof(uint16_t));
  s->src = eplb__malloc_array(nrows, sizeof(int32_t));
  s->row_of_token = eplb__malloc_array(T, sizeof(int32_t));
  if (!s->z_shared || !s->z_layer || !s->y || !s->p || !s->prob || !s->member_p ||
      !s->cluster_total || !s->alias || !s->work || !s->cluster_of || !s->members || !s->stamp ||
      !s->counts || !s->scratch || !s->rows || !s->src || !s->row_of_token)
    return eplb__error(EPLB_ENOMEM, "traces", "synth: out of memory");
  return EPLB_OK;
}

/* Latent clusters of csize experts per layer, from a random permutation
 * (stream rcl), and the stored rows: an even stride over the step's tokens,
 * so every rank shows. */
static void synth_layout(synth_t *s, const eplb_synth_options_t *o, eplb__rng_t *rcl,
                         uint32_t csize, uint32_t nrows) {
  uint32_t L = o->num_layers, E = o->num_experts, T = o->tokens_per_step;
  for (uint32_t l = 0; l < L; l++) {
    uint32_t *m = s->members + (size_t)l * E;
    for (uint32_t e = 0; e < E; e++)
      m[e] = e;
    for (uint32_t e = E - 1; e > 0; e--) {
      uint32_t j = (uint32_t)eplb__rng_below(rcl, (uint64_t)e + 1);
      uint32_t t = m[e];
      m[e] = m[j];
      m[j] = t;
    }
    for (uint32_t i = 0; i < E; i++)
      s->cluster_of[(size_t)l * E + m[i]] = i / csize;
  }
  for (uint32_t t = 0; t < T; t++)
    s->row_of_token[t] = -1;
  for (uint32_t r = 0; r < nrows; r++) {
    uint32_t t = (uint32_t)((uint64_t)r * T / nrows);
    s->row_of_token[t] = (int32_t)r;
    s->src[r] = o->num_ranks ? (int32_t)((uint64_t)t * o->num_ranks / T) : -1;
  }
}

/* The output's metadata; the origin records the options. */
static void synth_meta(const eplb_synth_options_t *o, uint32_t Tn, eplb_trace_meta_t *meta) {
  eplb_trace_meta_default(meta);
  meta->num_layers = o->num_layers;
  meta->num_experts = o->num_experts;
  meta->topk = o->topk;
  meta->num_ranks = o->num_ranks;
  meta->phase = o->phase;
  memcpy(meta->model, o->model, sizeof meta->model);
  meta->model[sizeof meta->model - 1] = '\0';
  snprintf(meta->origin, sizeof meta->origin,
           "eplb synth seed=%" PRIu64
           " skew=%s:%g layer_variation=%g drift=%g switch_every=%" PRIu64
           " coactivation=%g tokens_per_step=%" PRIu32,
           o->seed, o->skew == EPLB_SKEW_ZIPF ? "zipf" : "lognormal", o->skew_param,
           o->layer_variation, o->drift, o->switch_every, o->coactivation, o->tokens_per_step);
  if (Tn) { /* only then: files without tenants keep their bytes */
    size_t used = strlen(meta->origin);
    snprintf(meta->origin + used, sizeof meta->origin - used, " rank_affinity=%g tenants=%" PRIu32,
             o->rank_affinity, Tn);
  }
}

/* The generator's random streams (independent: each keeps its sequence
 * whatever the others draw). */
typedef struct synth_rng {
  eplb__rng_t pop, tok, cl, ten;
} synth_rng_t;

/* One step's scores (redrawn at a switch, else evolved by coef), then every
 * layer's tokens into s->counts and the stored rows. */
static void synth_step(synth_t *s, const eplb_synth_options_t *o, synth_rng_t *rng, uint64_t step,
                       double coef, uint32_t Tn, uint32_t csize) {
  uint32_t L = o->num_layers, E = o->num_experts, k = o->topk, T = o->tokens_per_step;
  size_t le = (size_t)L * E;
  int redraw_now = step == 0 || (o->switch_every && step % o->switch_every == 0);
  if (redraw_now) {
    redraw(&rng->pop, s->z_shared, E);
    redraw(&rng->pop, s->z_layer, le);
  } else {
    evolve(&rng->pop, s->z_shared, E, coef);
    evolve(&rng->pop, s->z_layer, le, coef);
  }
  if (Tn && redraw_now) {
    redraw(&rng->ten, s->zt_shared, (size_t)Tn * E);
    redraw(&rng->ten, s->zt_layer, (size_t)Tn * le);
  } else if (Tn) {
    evolve(&rng->ten, s->zt_shared, (size_t)Tn * E, coef);
    evolve(&rng->ten, s->zt_layer, (size_t)Tn * le, coef);
  }
  double vs = sqrt(1 - o->layer_variation), vl = sqrt(o->layer_variation);
  memset(s->counts, 0, le * sizeof *s->counts);
  for (uint32_t l = 0; l < L; l++) {
    const double *zl = s->z_layer + (size_t)l * E;
    for (uint32_t e = 0; e < E; e++)
      s->y[e] = vs * s->z_shared[e] + vl * zl[e];
    const uint32_t *members = s->members + (size_t)l * E;
    memset(s->stamp, 0, E * sizeof *s->stamp);
    layer_ctx_t c = {E,       k,           s->p,
                     s->prob, s->alias,    s->cluster_of + (size_t)l * E,
                     members, s->member_p, s->cluster_total,
                     csize,   s->stamp,    o->coactivation};
    /* With tenants every token draws from its tenant's tables. */
    if (Tn)
      tenant_layer(s, o, Tn, l, csize, &c);
    else
      layer_tables(s, o, s->y, members, csize, s->p, s->prob, s->alias, s->member_p,
                   s->cluster_total);
    for (uint32_t t = 0; t < T; t++) {
      int32_t r = s->row_of_token[t];
      uint16_t *out = r >= 0 ? s->rows + ((size_t)r * L + l) * k : NULL;
      const layer_ctx_t *tc = Tn ? &s->tctx[s->tenant_of_token[t]] : &c;
      sample_token(&rng->tok, tc, t + 1, out, s->counts + (size_t)l * E);
    }
  }
}

eplb_status_t eplb_synth_generate(const char *path, const eplb_synth_options_t *opts) {
  eplb_synth_options_t o;
  synth_t s;
  eplb_trace_writer_t *w = NULL;
  eplb_status_t st;
  memset(&s, 0, sizeof s);
  if ((st = EPLB__OPTS_TAKE(o, opts, eplb_synth_options_default, "eplb_synth_options_t",
                            "traces")) != EPLB_OK)
    return st;
  if (!path)
    return SYNTH_BAD("synth: path is NULL");
  if ((st = eplb_synth_options_check(&o)) != EPLB_OK)
    return st;
  uint32_t L = o.num_layers, E = o.num_experts, k = o.topk, T = o.tokens_per_step;
  uint32_t nrows = o.topk_rows_per_step > T ? T : o.topk_rows_per_step;
  if ((st = synth_alloc(&s, &o, nrows)) != EPLB_OK)
    goto done;
  uint32_t Tn = tenant_count(&o);
  if (Tn && (st = tenants_alloc(&s, Tn, L, E, T)) != EPLB_OK)
    goto done;
  for (uint32_t t = 0; Tn && t < T; t++) /* rank of token t, then its tenant */
    s.tenant_of_token[t] = (uint32_t)((uint64_t)t * o.num_ranks / T * Tn / o.num_ranks);
  double coef;
  if ((st = calibrate(&o, &coef)) != EPLB_OK)
    goto done;
  synth_rng_t rng;
  seed_stream(&rng.ten, o.seed, STREAM_TENANTS);
  seed_stream(&rng.pop, o.seed, STREAM_POPULARITY);
  seed_stream(&rng.tok, o.seed, STREAM_TOKENS);
  seed_stream(&rng.cl, o.seed, STREAM_CLUSTERS);
  uint32_t csize = 2 * k < E ? 2 * k : E; /* clusters of 2k experts */
  synth_layout(&s, &o, &rng.cl, csize, nrows);
  eplb_trace_meta_t meta;
  synth_meta(&o, Tn, &meta);
  if ((st = eplb_trace_writer_create(path, &meta, NULL, &w)) != EPLB_OK)
    goto done;
  for (uint64_t step = 0; step < o.num_steps; step++) {
    synth_step(&s, &o, &rng, step, coef, Tn, csize);
    eplb_trace_step_t ts = {.num_tokens = T,
                            .counts = s.counts,
                            .num_rows = nrows,
                            .topk = s.rows,
                            .source_rank = s.src};
    if ((st = eplb_trace_writer_append(w, &ts)) != EPLB_OK)
      goto done;
  }
  st = eplb_trace_writer_finish(w);
done:
  eplb_trace_writer_destroy(w);
  synth_free(&s);
  return st;
}
