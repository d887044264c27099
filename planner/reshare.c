/* planner/reshare.c — what a plan serves under other shares than its own
 * (plan.h "Other shares on the same placement"): the even split of an
 * export without shares, and the optimal shares re-solved for new loads. */
#include "planner/planner.h"

#include <math.h>
#include <string.h>

eplb_status_t eplb_plan_evaluate_uniform(const eplb_plan_t *plan, const eplb_loads_t *loads,
                                         eplb_plan_served_t *out) {
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *copy = NULL;
  eplb_plan_summary_t s;
  if (!plan || !loads || !out)
    return eplb__error(EPLB_EINVAL, "planner", "evaluate_uniform: NULL argument");
  if (loads->num_layers != plan->num_layers || loads->num_experts != plan->num_experts)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "plan has %u layers x %u experts but the loads have %u x %u",
                       plan->num_layers, plan->num_experts, loads->num_layers, loads->num_experts);
  uint32_t L = plan->num_layers, R = plan->num_slots;
  eplb_plan_summary(plan, &s);
  memset(out, 0, sizeof *out);
  out->mean_balancedness = s.mean_balancedness;
  out->min_balancedness = s.min_balancedness;
  if ((st = eplb__plan_alloc(L, plan->num_experts, plan->num_gpus, plan->num_nodes, R,
                             plan->slots_per_gpu, &copy)))
    goto done;
  copy->policy = plan->policy;
  copy->num_groups = plan->num_groups;
  copy->keep_groups = plan->keep_groups;
  memcpy(copy->phy2log, plan->phy2log, (size_t)L * R * sizeof *copy->phy2log);
  for (uint32_t l = 0; l < L; l++) {
    size_t o = (size_t)l * R;
    eplb__uniform_shares(plan->num_experts, R, plan->phy2log + o, copy->share + o);
    for (uint32_t r = 0; r < R; r++)
      out->shares_dropped |= fabs(plan->share[o + r] - copy->share[o + r]) > 1e-12;
  }
  if (!out->shares_dropped)
    goto done;
  if ((st = eplb_plan_evaluate(copy, loads)))
    goto done;
  eplb_plan_summary(copy, &s);
  out->mean_balancedness = s.mean_balancedness;
  out->min_balancedness = s.min_balancedness;
done:
  eplb_plan_destroy(copy);
  return st;
}

static void plan_resplit_options_defaults(eplb_plan_resplit_options_t *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->tolerance = 0.01;
}

eplb_status_t eplb_plan_resplit_options_init(eplb_plan_resplit_options_t *opts, size_t size) {
  eplb_plan_resplit_options_t d;
  plan_resplit_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_plan_resplit_options_t");
}

/* A re-split's inputs and buffers. */
typedef struct resplit {
  const eplb_plan_t *plan;
  const eplb_plan_resplit_options_t *o;
  uint32_t E, G, R, N;             /* N: the cluster's nodes, 0 without one */
  uint32_t *phy2log, *gpu_node;    /* [R], [G] */
  double *share, *gpu_load;        /* [R], [G] */
  double *node_loads, *node_share; /* [N][E], [N][R] */
  double *ws;                      /* [E]: a layer's loads scaled (subnormal loads) */
} resplit_t;

/* Tokens the plan sends off their node: by its node shares, else
 * local-first (a node's tokens stay on its replicas when it has any), as
 * the runtime routes. */
static double plan_cross(const resplit_t *r, uint32_t l) {
  const eplb_plan_t *p = r->plan;
  const double *ns = eplb_plan_node_share(p, l);
  bool by_node = ns && p->ns_nodes == r->N;
  const int32_t *p2l = p->phy2log + (size_t)l * r->R;
  const double *sh = p->share + (size_t)l * r->R;
  double x = 0;
  for (uint32_t n = 0; n < r->N; n++)
    for (uint32_t e = 0; e < r->E; e++) {
      double d = r->node_loads[(size_t)n * r->E + e], off = 0, on = 0;
      if (d <= 0)
        continue;
      for (uint32_t g = 0; g < r->G; g++)
        for (uint32_t s = p->gpu_first[g]; s < p->gpu_first[g + 1]; s++)
          if ((uint32_t)p2l[s] == e)
            *(r->gpu_node[g] == n ? &on : &off) += by_node ? ns[(size_t)n * r->R + s] : sh[s];
      x += by_node ? d * off : on > 0 ? 0 : d;
    }
  return x;
}

/* Checks the options and the loads. */
static eplb_status_t resplit_check(resplit_t *r, const eplb_loads_t *loads) {
  const eplb_plan_resplit_options_t *o = r->o;
  if (!(o->tolerance >= 0 && o->tolerance <= 1) || !o->cluster != !o->coact)
    return eplb__error(EPLB_EINVAL, "planner",
                       "resplit: tolerance %g not in [0, 1], or a cluster without coact",
                       o->tolerance);
  if (loads->num_layers != r->plan->num_layers || loads->num_experts != r->E)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "plan has %u layers x %u experts but the loads have %u x %u",
                       r->plan->num_layers, r->E, loads->num_layers, loads->num_experts);
  for (size_t i = 0; o->integer && i < (size_t)loads->num_layers * r->E; i++)
    if (loads->values[i] != floor(loads->values[i]) || loads->values[i] > 9007199254740992.0)
      return eplb__error(EPLB_EINVAL, "planner",
                         "resplit: layer %zu expert %zu: integer needs whole tokens of at most "
                         "2^53 (exact in a double), got %.17g",
                         i / r->E, i % r->E, loads->values[i]);
  if (o->cluster && eplb_cluster_num_gpus(o->cluster) != r->G)
    return eplb__error(EPLB_ESHAPE, "planner", "resplit: the cluster has %u GPUs, the plan %u",
                       eplb_cluster_num_gpus(o->cluster), r->G);
  r->N = o->cluster ? eplb_cluster_num_nodes(o->cluster) : 0;
  return EPLB_OK;
}

/* A worker's buffers (r's shape and options set). */
static eplb_status_t resplit_alloc(resplit_t *r) {
  const eplb_plan_resplit_options_t *o = r->o;
  r->phy2log = eplb__malloc_array(r->R, sizeof *r->phy2log);
  r->share = eplb__malloc_array(r->R, sizeof *r->share);
  r->gpu_load = eplb__malloc_array(r->G, sizeof *r->gpu_load);
  r->gpu_node = eplb__malloc_array(r->G, sizeof *r->gpu_node);
  r->node_loads = eplb__malloc_array((size_t)r->N * r->E + 1, sizeof *r->node_loads);
  r->node_share = eplb__malloc_array((size_t)r->N * r->R + 1, sizeof *r->node_share);
  r->ws = eplb__malloc_array(r->E, sizeof *r->ws);
  if (!r->phy2log || !r->share || !r->gpu_load || !r->gpu_node || !r->node_loads ||
      !r->node_share || !r->ws)
    return eplb__error(EPLB_ENOMEM, "planner", "resplit: out of memory");
  for (uint32_t g = 0; r->N && g < r->G; g++)
    r->gpu_node[g] = eplb_cluster_node_of(o->cluster, g);
  return EPLB_OK;
}

/* Solves layer l into r->share and fills *y (the plan's metrics are the
 * "before"). */
static eplb_status_t resplit_layer(resplit_t *r, eplb_split_t *solver, const eplb_loads_t *loads,
                                   uint32_t l, eplb_plan_resplit_layer_t *y) {
  eplb_status_t st;
  const double *w = loads->values + (size_t)l * r->E;
  const int32_t *p2l = r->plan->phy2log + (size_t)l * r->R;
  /* Subnormal loads, as eplb_plan_evaluate: solved scaled by 2^k (exact)
   * and the figures scaled back, since share x load underflows (the max
   * load came out below T* and the mean, balancedness 1.001). The locality
   * split takes a trace's whole-token counts, never subnormal. */
  int k = r->N ? 0 : eplb__load_scale(w, r->E);
  for (uint32_t e = 0; k && e < r->E; e++)
    r->ws[e] = ldexp(w[e], k);
  if (k)
    w = r->ws;
  for (uint32_t s = 0; s < r->R; s++)
    r->phy2log[s] = (uint32_t)p2l[s];
  eplb_split_problem_t p = {r->E, r->G, r->R, r->phy2log, r->plan->slots_per_gpu};
  eplb_split_result_t res = {.share = r->share, .gpu_load = r->gpu_load};
  memset(y, 0, sizeof *y);
  if (r->N) {
    if ((st = eplb_coact_node_loads(r->o->coact, r->o->cluster, l, w, r->node_loads)))
      return st;
    y->cross_node_before = plan_cross(r, l);
    eplb_split_local_t loc = {r->N, r->gpu_node, r->node_loads, r->o->tolerance};
    st = eplb_split_solve_local(solver, &p, &loc, &res, r->node_share, &y->cross_node_after);
  } else {
    st = eplb_split_solve(solver, &p, w, &res);
  }
  if (st)
    return eplb__error_wrap(st, "planner", "layer %u", l);
  const eplb_plan_layer_metrics_t *m = &r->plan->metrics[l];
  double total = 0;
  for (uint32_t e = 0; e < r->E; e++)
    total += w[e];
  /* Mean and max of the same (scaled) sums; rounding alone may still put
   * the mean an ulp above the max, as eplb_plan_evaluate clamps. */
  double bal = eplb__balancedness(total, r->G, res.max_load);
  y->t_star = ldexp(res.t_star, -k);
  y->max_load_before = m->max_load;
  y->max_load_after = ldexp(res.max_load, -k);
  y->balancedness_before = m->balancedness;
  y->balancedness_after = bal < 1 ? bal : 1.0;
  y->lower_bound = m->lower_bound;
  return EPLB_OK;
}

static void resplit_free(resplit_t *r) {
  eplb__free(r->phy2log);
  eplb__free(r->share);
  eplb__free(r->gpu_load);
  eplb__free(r->gpu_node);
  eplb__free(r->node_loads);
  eplb__free(r->node_share);
  eplb__free(r->ws);
}

/* Layers in parallel (core/pool.c): each worker its own buffers and solver,
 * reset per layer (so a layer's result cannot depend on the worker); the
 * new shares are kept per layer and set in layer order afterwards, since
 * setting them clears the metrics other layers' "before" figures read. */
typedef struct {
  resplit_t *r;          /* [workers] */
  eplb_split_t **solver; /* [workers] */
  const eplb_loads_t *loads;
  double *shares; /* [L][R] when the shares are set, else NULL */
  eplb_plan_resplit_layer_t *out;
} rjob_t;

static eplb_status_t resplit_item(void *arg, uint32_t worker, uint32_t l) {
  const rjob_t *j = arg;
  resplit_t *r = &j->r[worker];
  eplb_split_reset(j->solver[worker]);
  eplb_status_t st = resplit_layer(r, j->solver[worker], j->loads, l, &j->out[l]);
  if (!st && j->shares)
    memcpy(j->shares + (size_t)l * r->R, r->share, r->R * sizeof *r->share);
  return st;
}

eplb_status_t eplb_plan_resplit(eplb_plan_t *plan, const eplb_loads_t *loads,
                                const eplb_plan_resplit_options_t *opts, int set_shares,
                                eplb_plan_resplit_layer_t *out) {
  eplb_plan_resplit_options_t def;
  eplb_split_options_t so;
  eplb_status_t st;
  if (!plan || !loads || !out)
    return eplb__error(EPLB_EINVAL, "planner", "resplit: NULL argument");
  if ((st = EPLB__OPTS_TAKE(def, opts, eplb_plan_resplit_options_default,
                            "eplb_plan_resplit_options_t", "planner")))
    return st;
  resplit_t r0 = {
      .plan = plan, .o = &def, .E = plan->num_experts, .G = plan->num_gpus, .R = plan->num_slots};
  uint32_t L = plan->num_layers;
  if (r0.o->threads > EPLB_PLAN_MAX_THREADS)
    return eplb__error(EPLB_EINVAL, "planner", "resplit: threads %u: must be 0..%u", r0.o->threads,
                       EPLB_PLAN_MAX_THREADS);
  /* As eplb_plan_create: a small job left to the library runs inline. */
  uint32_t n = eplb__pool_workers(r0.o->threads, L, EPLB_PLAN_MAX_THREADS,
                                  (uint64_t)L * r0.R * r0.G < (1u << 18));
  if ((st = resplit_check(&r0, loads)) || (st = eplb_plan_evaluate(plan, loads)))
    return st;
  rjob_t j = {.r = eplb__calloc(n, sizeof *j.r),
              .solver = eplb__calloc(n, sizeof *j.solver),
              .loads = loads,
              .shares = set_shares ? eplb__malloc_array((size_t)L * r0.R, sizeof(double)) : NULL,
              .out = out};
  if (!j.r || !j.solver || (set_shares && !j.shares && L)) {
    st = eplb__error(EPLB_ENOMEM, "planner", "resplit: out of memory");
    goto done;
  }
  eplb_split_options_default(&so);
  so.mode = r0.o->integer ? EPLB_SPLIT_INTEGER : EPLB_SPLIT_FRACTIONAL;
  for (uint32_t i = 0; i < n && !st; i++) {
    j.r[i] = r0;
    if (!(st = resplit_alloc(&j.r[i])))
      st = eplb_split_create(&so, &j.solver[i]);
  }
  if (!st)
    st = eplb__pool_run(n, L, resplit_item, &j, eplb_split_glpk_thread_done, NULL);
  for (uint32_t l = 0; !st && set_shares && l < L; l++)
    st = eplb_plan_set_shares(plan, l, j.shares + (size_t)l * r0.R);
  if (!st && set_shares)
    st = eplb_plan_evaluate(plan, loads);
done:
  for (uint32_t i = 0; i < n && j.r && j.solver; i++) {
    eplb_split_destroy(j.solver[i]);
    resplit_free(&j.r[i]);
  }
  eplb__free(j.r);
  eplb__free(j.solver);
  eplb__free(j.shares);
  return st;
}
