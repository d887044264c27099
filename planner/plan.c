/* planner/plan.c — making plans: options, validation of loads and options,
 * dispatch of each layer to its policy on worker threads, evaluation. The
 * plan object the policies share is in plan_core.c. */
#include "planner/planner.h"

#include "eplb/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void plan_options_defaults(eplb_plan_options_t *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->policy = EPLB_POLICY_BALANCED;
  opts->num_nodes = 1;
  opts->num_groups = 1;
  opts->time_limit = 10;
  opts->improve_iterations = UINT32_MAX; /* 4 * G */
  opts->move_weight = 0.005;
  opts->locality_tolerance = 0.01;
  opts->shares_step_end = UINT64_MAX;
  opts->robust_steps = 32;
}

eplb_status_t eplb_plan_options_init(eplb_plan_options_t *opts, size_t size) {
  eplb_plan_options_t d;
  plan_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_plan_options_t");
}

static eplb_status_t check_loads(const eplb_loads_t *loads, const char *what) {
  if (!loads || !loads->values || !loads->num_layers || !loads->num_experts)
    return eplb__error(EPLB_EINVAL, "planner", "%s: no loads", what);
  for (uint32_t l = 0; l < loads->num_layers; l++)
    for (uint32_t e = 0; e < loads->num_experts; e++) {
      double v = loads->values[(size_t)l * loads->num_experts + e];
      if (!isfinite(v) || v < 0)
        return eplb__error(EPLB_EFORMAT, "planner", "%s: layer %u expert %u: bad load %g", what, l,
                           e, v);
    }
  return eplb__check_layer_sums(loads, what);
}

eplb_status_t eplb_plan_options_check(const eplb_plan_options_t *o) {
  if (!o)
    return eplb__error(EPLB_EINVAL, "planner", "plan options: NULL");
  eplb_plan_options_t own;
  eplb_status_t st =
      EPLB__OPTS_TAKE(own, o, eplb_plan_options_default, "eplb_plan_options_t", "planner");
  if (st != EPLB_OK)
    return st;
  o = &own;
  if (o->threads > EPLB_PLAN_MAX_THREADS)
    return eplb__error(EPLB_EINVAL, "planner", "threads %u: must be 0..%u (0 = the online cores)",
                       o->threads, EPLB_PLAN_MAX_THREADS);
  if (!(o->time_limit >= 0))
    return eplb__error(EPLB_EINVAL, "planner",
                       "time_limit %g: must be >= 0 seconds per layer (0 = none)", o->time_limit);
  if (!(o->locality_tolerance >= 0) || !isfinite(o->locality_tolerance))
    return eplb__error(EPLB_EINVAL, "planner", "locality_tolerance %g: must be >= 0",
                       o->locality_tolerance);
  if (!(o->move_weight >= 0) || !isfinite(o->move_weight))
    return eplb__error(EPLB_EINVAL, "planner", "move_weight %g: must be a finite number >= 0",
                       o->move_weight);
  if (o->robust_steps == 0 || o->robust_steps > 65536)
    return eplb__error(EPLB_EINVAL, "planner", "robust_steps %u: must be in 1..65536",
                       o->robust_steps);
  if (!eplb_plan_effort_str(o->effort))
    return eplb__error(EPLB_EINVAL, "planner", "effort %d: not full (0) or online (1)",
                       (int)o->effort);
  if (!(o->robust_aggregate_weight >= 0 && o->robust_aggregate_weight <= 1))
    return eplb__error(EPLB_EINVAL, "planner", "robust_aggregate_weight %g: must be in [0, 1]",
                       o->robust_aggregate_weight);
  return EPLB_OK;
}

static eplb_status_t check_options(const eplb_loads_t *loads, const eplb_plan_options_t *o) {
  uint32_t E = loads->num_experts, G = o->num_gpus, R = o->num_replicas;
  uint32_t N = o->num_nodes, K = o->num_groups;
  if (!eplb_plan_policy_str(o->policy))
    return eplb__error(EPLB_EINVAL, "planner", "unknown policy %d", (int)o->policy);
  if (G == 0)
    return eplb__error(EPLB_EINVAL, "planner", "number of GPUs must be >= 1");
  if (o->policy == EPLB_POLICY_DECODE) {
    if (!o->model || !o->gpu)
      return eplb__error(EPLB_EINVAL, "planner", "decode policy needs a model and a GPU");
    eplb_status_t st = eplb_model_check(o->model);
    if (st == EPLB_OK)
      st = eplb_gpu_check(o->gpu);
    if (st != EPLB_OK)
      return st;
  }
  eplb_status_t vst = eplb_plan_options_check(o);
  if (vst != EPLB_OK)
    return vst;
  if (loads->num_layers > EPLB_MAX_LAYERS || E > EPLB_MAX_EXPERTS)
    return eplb__error(EPLB_EINVAL, "planner",
                       "%u layers x %u experts: over the limits of %u layers and %u experts",
                       loads->num_layers, E, EPLB_MAX_LAYERS, EPLB_MAX_EXPERTS);
  if (G > EPLB_MAX_GPUS)
    return eplb__error(EPLB_EINVAL, "planner", "%u GPUs: over the limit of %u", G, EPLB_MAX_GPUS);
  if (R > EPLB_MAX_SLOTS)
    return eplb__error(EPLB_EINVAL, "planner", "%u replicas: over the limit of %u slots per layer",
                       R, EPLB_MAX_SLOTS);
  if ((uint64_t)R * G > EPLB_MAX_PLAN_WORK)
    return eplb__error(EPLB_EINVAL, "planner",
                       "%u replicas x %u GPUs = %llu: over the limit of %llu per layer", R, G,
                       (unsigned long long)R * G, (unsigned long long)EPLB_MAX_PLAN_WORK);
  if (N == 0 || G % N)
    return eplb__error(EPLB_EINVAL, "planner", "%u GPUs are not a multiple of %u nodes", G, N);
  /* Groups matter only where they are kept on nodes, as DeepSeek's own
   * check does: its hierarchical mode, or keep_groups_on_nodes. */
  bool groups_used =
      o->keep_groups_on_nodes || (o->policy == EPLB_POLICY_DEEPSEEK && K > 1 && N && K % N == 0);
  if (K == 0 || (groups_used && E % K))
    return eplb__error(EPLB_EINVAL, "planner", "%u experts are not a multiple of %u groups", E, K);
  if (R < E)
    return eplb__error(EPLB_EINVAL, "planner", "%u replicas are fewer than the %u experts", R, E);
  if (o->slots_per_gpu) {
    if (o->policy == EPLB_POLICY_DEEPSEEK)
      return eplb__error(EPLB_EINVAL, "planner",
                         "deepseek policy needs the same number of slots on every GPU");
    uint64_t sum = 0;
    for (uint32_t g = 0; g < G; g++) {
      if (o->slots_per_gpu[g] == 0)
        return eplb__error(EPLB_EINVAL, "planner", "GPU %u has no slot", g);
      sum += o->slots_per_gpu[g];
    }
    if (sum != R)
      return eplb__error(EPLB_EINVAL, "planner", "slots per GPU sum to %llu, not the %u replicas",
                         (unsigned long long)sum, R);
  } else if (R % G) {
    return eplb__error(EPLB_EINVAL, "planner", "%u replicas are not a multiple of %u GPUs", R, G);
  }
  /* The plan file holds layers x slots (x nodes, for locality's node shares)
   * numbers; the reader takes at most 2^28 of them. */
  uint64_t rows =
      o->policy == EPLB_POLICY_LOCALITY && o->cluster ? eplb_cluster_num_nodes(o->cluster) : 1;
  if ((uint64_t)loads->num_layers * R * rows > (UINT64_C(1) << 28))
    return eplb__error(EPLB_EINVAL, "planner",
                       "%u layers x %u replicas x %llu nodes: over the plan file's limit of %llu",
                       loads->num_layers, R, (unsigned long long)rows,
                       (unsigned long long)(UINT64_C(1) << 28));
  if (o->keep_groups_on_nodes && o->policy == EPLB_POLICY_DEEPSEEK && K % N)
    return eplb__error(EPLB_EINVAL, "planner",
                       "deepseek keeps groups on nodes only when %u groups divide by %u nodes", K,
                       N);
  return EPLB_OK;
}

/* ---- layers in parallel -------------------------------------------------
 * Layers are independent problems: workers take the next layer index from a
 * shared counter and write only that layer's slices of the plan, so the
 * result does not depend on which worker planned which layer. What could
 * carry over between layers on one worker is reset per layer (the split
 * handle's warm-start memory), and everything else a layer reads is
 * read-only (loads, options, opts->from, the cluster, the co-activation). */

typedef struct {
  const eplb_loads_t *loads;
  const eplb_plan_options_t *opts;
  eplb_plan_t *p;
  eplb_split_t **split; /* one per worker: a handle is used by one thread at a time */
} job_t;

static eplb_status_t plan_one_layer(const job_t *job, eplb_split_t *split, uint32_t l) {
  const eplb_plan_options_t *opts = job->opts;
  eplb_plan_t *p = job->p;
  uint32_t E = p->num_experts, R = p->num_slots;
  eplb__layer_ctx_t c;
  const double *w = job->loads->values + (size_t)l * E;
  eplb__plan_layer_ctx(p, w, &c);
  c.split = split;
  c.lower_bound = eplb__lower_bound(&c);
  /* 4 G moves (and 2 G + 1 split solves in balanced's refinement), up to
   * 256: each costs O(slots), so past 64 GPUs a fixed budget keeps a layer
   * near-linear in its size. */
  c.online = opts->effort == EPLB_EFFORT_ONLINE;
  c.static_shares = opts->serve == EPLB_SERVE_SHARES || opts->shares == EPLB_SHARES_ROBUST;
  c.improve_iterations = opts->improve_iterations != UINT32_MAX ? opts->improve_iterations
                         : opts->num_gpus < 64                  ? 4 * opts->num_gpus
                                                                : 256;
  int32_t *p2l = p->phy2log + (size_t)l * R;
  double *sh = p->share + (size_t)l * R;
  eplb_plan_layer_metrics_t *m = &p->metrics[l];
  eplb_status_t st = EPLB_OK;
  switch (opts->policy) {
  case EPLB_POLICY_DEEPSEEK:
    st = eplb__deepseek_layer_rank(&c, p2l, p->replica_rank + (size_t)l * R);
    if (!st)
      eplb__uniform_shares(E, R, p2l, sh);
    break;
  case EPLB_POLICY_BALANCED:
    /* Served evenly, a placement tuned for exact shares loses its balance;
     * its certificate is then the uniform-share bound (p->uniform_bound). */
    st = opts->shares == EPLB_SHARES_UNIFORM ? eplb__uniform_layer(&c, p2l, sh, &m->fallback)
                                             : eplb__balanced_layer(&c, p2l, sh, &m->fallback);
    break;
  case EPLB_POLICY_LOCALITY:
    st = eplb__locality_layer(&c, opts, l, p2l, sh, p->node_share + (size_t)l * p->ns_nodes * R,
                              &m->fallback);
    break;
  case EPLB_POLICY_INCREMENTAL:
    /* Served evenly, candidates are scored as served (incremental_even.c). */
    st = (opts->shares == EPLB_SHARES_UNIFORM ? eplb__incremental_even_layer
                                              : eplb__incremental_layer)(
        &c, opts, eplb_plan_phy2log(opts->from, l), p2l, sh, &m->slots_moved, &m->fallback);
    break;
  case EPLB_POLICY_DECODE: st = eplb__decode_layer(&c, opts, p2l, sh, &m->fallback); break;
  case EPLB_POLICY_MIP: {
    /* The limit is the layer's wall time, balanced's start included. */
    double deadline = opts->time_limit > 0 ? eplb__now() + opts->time_limit : 0;
    st = eplb__balanced_layer(&c, p2l, sh, &m->fallback);
    if (!st)
      m->mip_status = eplb__mip_layer(&c, deadline, p2l, sh, &m->mip_gap);
    break;
  }
  }
  if (!st)
    eplb__plan_layer_metrics(p, l, w, c.lower_bound);
  return st;
}

static eplb_status_t plan_item(void *arg, uint32_t worker, uint32_t l) {
  const job_t *job = arg;
  eplb_split_reset(job->split[worker]);
  return plan_one_layer(job, job->split[worker], l);
}

/* Plans every layer of p with up to `threads` workers, the calling thread
 * being one of them (so threads == 1 starts none). */
static eplb_status_t plan_layers(const eplb_loads_t *loads, const eplb_plan_options_t *opts,
                                 eplb_plan_t *p) {
  uint32_t L = p->num_layers;
  /* With threads left to the planner (0), a plan below about a thread
   * start's work in all (layers x slots x GPUs, which the policies' costs
   * grow with) is planned inline. The plan is the same either way. */
  uint32_t n = eplb__pool_workers(opts->threads, L, EPLB_PLAN_MAX_THREADS,
                                  (uint64_t)L * p->num_slots * p->num_gpus < (1u << 18));
  job_t job = {.loads = loads, .opts = opts, .p = p, .split = eplb__calloc(n, sizeof(void *))};
  if (!job.split)
    return eplb__error(EPLB_ENOMEM, "planner", "plan: out of memory for %u planner threads", n);
  eplb_status_t st = EPLB_OK;
  for (uint32_t i = 0; i < n && !st; i++)
    st = eplb_split_create(NULL, &job.split[i]);
  /* GLPK's environment is per thread (mip). */
  if (!st)
    st = eplb__pool_run(n, L, plan_item, &job, eplb_split_glpk_thread_done, NULL);
  for (uint32_t i = 0; i < n; i++)
    eplb_split_destroy(job.split[i]);
  eplb__free(job.split);
  if (st)
    return st;
  /* Logged here, in layer order, rather than from the workers: the log
   * callback sees the calling thread only. */
  for (uint32_t l = 0; opts->policy == EPLB_POLICY_MIP && l < L; l++)
    if (p->metrics[l].mip_status)
      eplb__log(EPLB_LOG_WARN, "planner", "layer %u: mip: %s; keeping the best plan found", l,
                eplb_status_str(p->metrics[l].mip_status));
  return EPLB_OK;
}

eplb_status_t eplb_plan_create(const eplb_loads_t *loads, const eplb_plan_options_t *opts,
                               eplb_plan_t **out) {
  if (!out || !opts)
    return eplb__error(EPLB_EINVAL, "planner", "plan: NULL argument");
  *out = NULL;
  double t0 = eplb__now();
  eplb_plan_options_t own;
  eplb_status_t st =
      EPLB__OPTS_TAKE(own, opts, eplb_plan_options_default, "eplb_plan_options_t", "planner");
  if (st != EPLB_OK)
    return st;
  opts = &own;
  st = check_loads(loads, "loads");
  if (st)
    return st;
  if ((st = check_options(loads, opts)))
    return st;
  if (opts->policy == EPLB_POLICY_INCREMENTAL && (st = eplb__incremental_check(loads, opts)))
    return st;
  if (opts->policy == EPLB_POLICY_LOCALITY && (st = eplb__locality_check(loads, opts)))
    return st;
  if ((st = eplb__shares_check(loads, opts)))
    return st;
  uint32_t L = loads->num_layers, E = loads->num_experts, R = opts->num_replicas;
  eplb_plan_t *p = NULL;
  if ((st = eplb__plan_alloc(L, E, opts->num_gpus, opts->num_nodes, R, opts->slots_per_gpu, &p)))
    return st;
  p->policy = opts->policy;
  /* Groups that do not divide the experts are not used (check_options). */
  p->num_groups = E % opts->num_groups ? 1 : opts->num_groups;
  p->keep_groups = opts->keep_groups_on_nodes ||
                   (opts->policy == EPLB_POLICY_DEEPSEEK &&
                    opts->num_groups % opts->num_nodes == 0 && opts->num_groups > 1);
  /* DeepSeek's replica order is kept for eplb_plan_replica_rank (log2phy). */
  if (opts->policy == EPLB_POLICY_DEEPSEEK &&
      !(p->replica_rank = eplb__calloc((size_t)L * R, sizeof *p->replica_rank))) {
    st = eplb__error(EPLB_ENOMEM, "planner", "plan: out of memory for replica ranks");
    goto fail;
  }
  if (opts->policy == EPLB_POLICY_LOCALITY) {
    p->ns_nodes = eplb_cluster_num_nodes(opts->cluster);
    size_t count = (size_t)L * p->ns_nodes * R;
    p->node_share = eplb__calloc(count, sizeof *p->node_share);
    if (!p->node_share) {
      st = eplb__error(EPLB_ENOMEM, "planner",
                       "plan: out of memory for node shares (%u layers x %u nodes x %u slots, "
                       "%zu bytes)",
                       L, p->ns_nodes, R, count * sizeof *p->node_share);
      goto fail;
    }
  }
  if ((st = plan_layers(loads, opts, p)))
    goto fail;
  if (opts->shares != EPLB_SHARES_EXACT && (st = eplb__shares_apply(p, loads, opts)))
    goto fail;
  p->uniform_bound = opts->policy == EPLB_POLICY_BALANCED && opts->shares == EPLB_SHARES_UNIFORM &&
                     opts->effort == EPLB_EFFORT_FULL;
  p->seconds = eplb__now() - t0;
  *out = p;
  return EPLB_OK;
fail:
  eplb_plan_destroy(p);
  return st;
}

eplb_status_t eplb_plan_evaluate(eplb_plan_t *plan, const eplb_loads_t *loads) {
  if (!plan)
    return eplb__error(EPLB_EINVAL, "planner", "evaluate: NULL plan");
  eplb_status_t st = check_loads(loads, "loads");
  if (st)
    return st;
  if (loads->num_layers != plan->num_layers || loads->num_experts != plan->num_experts)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "plan has %u layers x %u experts but the loads have %u x %u",
                       plan->num_layers, plan->num_experts, loads->num_layers, loads->num_experts);
  for (uint32_t l = 0; l < plan->num_layers; l++) {
    eplb__layer_ctx_t c;
    const double *w = loads->values + (size_t)l * plan->num_experts;
    eplb__plan_layer_ctx(plan, w, &c);
    double lb = eplb__lower_bound(&c);
    eplb__plan_layer_metrics(plan, l, w, lb);
    /* As eplb__uniform_layer: only a layer visibly above the exact-share
     * bound pays for the search. */
    double mx = plan->metrics[l].max_load;
    if (plan->uniform_bound && mx > lb * (1 + 1e-3))
      eplb__plan_layer_metrics(plan, l, w, eplb__uniform_bound(&c, lb, mx));
  }
  return EPLB_OK;
}

eplb_status_t eplb_plan_set_shares(eplb_plan_t *plan, uint32_t layer, const double *share) {
  if (!plan || !share || layer >= plan->num_layers)
    return eplb__error(EPLB_EINVAL, "planner", "set_shares: bad plan, layer %u or NULL shares",
                       layer);
  uint32_t R = plan->num_slots;
  double *dst = plan->share + (size_t)layer * R;
  double *old = eplb__malloc_array(R, sizeof *old);
  if (!old)
    return eplb__error(EPLB_ENOMEM, "planner", "set_shares: out of memory");
  memcpy(old, dst, R * sizeof *old);
  memcpy(dst, share, R * sizeof *dst);
  eplb_status_t st = eplb__plan_check_layer(plan, layer, "set_shares");
  if (st) {
    memcpy(dst, old, R * sizeof *dst); /* the plan stays as it was */
  } else {
    /* The loads behind the old metrics are not kept: metrics wait for
     * eplb_plan_evaluate, as for a plan read from a file. */
    memset(plan->gpu_load + (size_t)layer * plan->num_gpus, 0,
           plan->num_gpus * sizeof *plan->gpu_load);
    memset(&plan->metrics[layer], 0, sizeof plan->metrics[layer]);
    /* Node shares made for the old shares would contradict the new ones. */
    for (uint32_t n = 0; plan->node_share && n < plan->ns_nodes; n++)
      memcpy(plan->node_share + ((size_t)layer * plan->ns_nodes + n) * R, share, R * sizeof *dst);
    /* Other shares can beat every even split: the uniform-share bound would
     * no longer be a bound of this plan. */
    plan->uniform_bound = false;
  }
  eplb__free(old);
  return st;
}

/* ---- plans from arrays (planner.h: eplb__plan_from_arrays) ------------- */

eplb_status_t eplb__plan_from_arrays(const eplb__plan_shape_t *shape, eplb_plan_policy_t policy,
                                     const int32_t *phy2log, const double *share, const char *check,
                                     eplb_plan_t **out) {
  const eplb__plan_shape_t *sh = shape;
  eplb_plan_t *p = NULL;
  *out = NULL;
  eplb_status_t st = eplb__plan_alloc(sh->layers, sh->experts, sh->gpus, sh->nodes, sh->slots,
                                      sh->slots_per_gpu, &p);
  if (st != EPLB_OK)
    return st;
  p->policy = policy;
  size_t lr = (size_t)sh->layers * sh->slots;
  memcpy(p->phy2log, phy2log, lr * sizeof *p->phy2log);
  memcpy(p->share, share, lr * sizeof *p->share);
  for (uint32_t l = 0; check && l < sh->layers && st == EPLB_OK; l++)
    st = eplb__plan_check_layer(p, l, check);
  if (st != EPLB_OK)
    eplb_plan_destroy(p);
  else
    *out = p;
  return st;
}
