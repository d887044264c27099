/* runtime/runtime.c — config, create/destroy, buffers, getters, step_end. */
#include "runtime/runtime.h"

#include "planner/planner.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

void eplb_runtime_config_default(eplb_runtime_config_t *cfg) {
  if (!cfg)
    return;
  memset(cfg, 0, sizeof *cfg);
  cfg->world_size = 1;
  cfg->ranks_per_node = 1;
  cfg->local_first = 1;
  cfg->comm.kind = EPLB_COMM_NONE;
  eplb_runtime_policy_t *p = &cfg->policy;
  p->interval_steps = 0;
  p->window_steps = 32;
  p->ema_decay = 0.9;
  p->gain_threshold = 0.01;
  p->layers_per_step = 4;
  p->move_budget = 0;
  p->allreduce_period = 1;
  p->plan_lag_steps = 1;
  p->plan_policy = EPLB_POLICY_BALANCED;
  p->staging_bytes = (uint64_t)1 << 30;
  cfg->transfer_timeout_ms = 60000;
  cfg->split_per_batch = -1;
  cfg->split_tolerance = 0.01;
  cfg->device.kind = EPLB_DEVICE_NONE;
  cfg->device.window = 4;
}

static eplb_status_t check_config(const eplb_runtime_config_t *c) {
  const eplb_runtime_policy_t *p = &c->policy;
  if (!c->num_layers || !c->num_experts || !c->topk || !c->slots_per_rank || !c->world_size ||
      !c->ranks_per_node)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config: zero field (layers %u, experts %u, topk %u, slots_per_rank %u, "
                       "world_size %u, ranks_per_node %u)",
                       c->num_layers, c->num_experts, c->topk, c->slots_per_rank, c->world_size,
                       c->ranks_per_node);
  if (c->num_layers > EPLB_TRACE_MAX_LAYERS || c->num_experts > EPLB_TRACE_MAX_EXPERTS ||
      c->topk > EPLB_TRACE_MAX_TOPK || c->topk > c->num_experts)
    return eplb__error(EPLB_ERANGE, "runtime",
                       "config: layers %u, experts %u or topk %u beyond the limits", c->num_layers,
                       c->num_experts, c->topk);
  if (c->rank >= c->world_size)
    return eplb__error(EPLB_EINVAL, "runtime", "config: rank %u >= world_size %u", c->rank,
                       c->world_size);
  if (c->world_size % c->ranks_per_node)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config: ranks_per_node %u does not divide world_size %u", c->ranks_per_node,
                       c->world_size);
  if ((uint64_t)c->slots_per_rank * c->world_size > INT32_MAX ||
      (uint64_t)c->slots_per_rank * c->world_size < c->num_experts)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config: slots_per_rank %u x world_size %u must hold %u experts",
                       c->slots_per_rank, c->world_size, c->num_experts);
  if (!p->window_steps || !p->layers_per_step || !p->allreduce_period || !p->plan_lag_steps)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "policy: window_steps, layers_per_step, allreduce_period and "
                       "plan_lag_steps must be >= 1");
  if (p->window_steps > 1u << 20 || p->allreduce_period > 1u << 16)
    return eplb__error(EPLB_ERANGE, "runtime", "policy: window_steps %u or period %u too large",
                       p->window_steps, p->allreduce_period);
  if (p->interval_steps && p->interval_steps % p->allreduce_period)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "policy: allreduce_period %u does not divide interval_steps %u",
                       p->allreduce_period, p->interval_steps);
  if (!(p->ema_decay >= 0 && p->ema_decay < 1) || !isfinite(p->gain_threshold))
    return eplb__error(EPLB_EINVAL, "runtime",
                       "policy: ema_decay %g not in [0, 1) or bad "
                       "gain_threshold %g",
                       p->ema_decay, p->gain_threshold);
  if (!eplb_plan_policy_str(p->plan_policy))
    return eplb__error(EPLB_EINVAL, "runtime", "policy: unknown plan policy %d",
                       (int)p->plan_policy);
  if (p->plan_policy == EPLB_POLICY_LOCALITY)
    return eplb__error(EPLB_EUNSUPPORTED, "runtime",
                       "policy: the locality policy needs a cluster and co-activation, which "
                       "the runtime does not have yet");
  if (c->sample_rows > 65535 ||
      (uint64_t)c->sample_rows * c->num_layers * c->topk * c->world_size > (1u << 26))
    return eplb__error(EPLB_ERANGE, "runtime",
                       "config: sample_rows %u x layers x topk x ranks above 2^26 ids",
                       c->sample_rows);
  if (c->comm.kind == EPLB_COMM_NONE && c->world_size > 1 &&
      (p->interval_steps || c->shm_name || c->expert_bytes))
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config: a standalone rank (comm none, world_size %u) cannot migrate: "
                       "interval_steps, shm_name and expert_bytes must be 0",
                       c->world_size);
  if (c->split_per_batch < -1 || c->split_per_batch > 1 ||
      !(c->split_tolerance >= 0 && c->split_tolerance <= 1))
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config: split_per_batch %d not in {-1, 0, 1} or split_tolerance %g not "
                       "in [0, 1]",
                       c->split_per_batch, c->split_tolerance);
  if (!c->split_model != !c->split_gpu)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config: split_model and split_gpu go together (both or neither)");
  if (c->split_model) {
    eplb_status_t st = eplb_model_check(c->split_model);
    if (st == EPLB_OK)
      st = eplb_gpu_check(c->split_gpu);
    if (st != EPLB_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s", eplb_error_detail());
      return eplb__error(EPLB_EINVAL, "runtime", "config: split_model/split_gpu: %s", why);
    }
    if (c->world_size / c->ranks_per_node > 1 && c->local_first)
      return eplb__error(EPLB_EINVAL, "runtime",
                         "config: the decode objective (split_model) has no locality stage: "
                         "with %u nodes it needs local_first 0",
                         c->world_size / c->ranks_per_node);
  }
  if (c->expert_bytes > SIZE_MAX / 2)
    return eplb__error(EPLB_ERANGE, "runtime", "config: expert_bytes %" PRIu64, c->expert_bytes);
  return EPLB_OK;
}

/* Everything that must agree across ranks (not the rank, not the trace). */
static uint64_t config_hash(const eplb_runtime_t *rt) {
  const eplb_runtime_config_t *c = &rt->cfg;
  const eplb_runtime_policy_t *p = &c->policy;
  uint64_t v[] = {c->num_layers,
                  c->num_experts,
                  c->topk,
                  c->slots_per_rank,
                  c->world_size,
                  c->ranks_per_node,
                  (uint64_t)c->local_first,
                  c->expert_bytes,
                  (uint64_t)c->comm.kind,
                  p->interval_steps,
                  p->window_steps,
                  p->layers_per_step,
                  p->move_budget,
                  p->allreduce_period,
                  p->plan_lag_steps,
                  (uint64_t)p->plan_policy,
                  p->staging_bytes,
                  c->transfer_timeout_ms,
                  (uint64_t)(int64_t)c->split_per_batch};
  uint64_t h = eplb__fnv1a(EPLB__FNV1A_BASIS, v, sizeof v);
  h = eplb__fnv1a(h, &p->ema_decay, sizeof p->ema_decay);
  h = eplb__fnv1a(h, &p->gain_threshold, sizeof p->gain_threshold);
  h = eplb__fnv1a(h, &c->split_tolerance, sizeof c->split_tolerance);
  const eplb__batch_t *b = &rt->batch;
  uint8_t dec = b->decode;
  h = eplb__fnv1a(h, &dec, sizeof dec);
  if (dec) { /* the figures, not the names */
    h = eplb__fnv1a(h, &b->model.hidden_size,
                    sizeof b->model - offsetof(eplb_model_desc_t, hidden_size));
    h = eplb__fnv1a(h, &b->gpu.hbm_gbps, sizeof b->gpu - offsetof(eplb_gpu_desc_t, hbm_gbps));
  }
  if (rt->phy2log) {
    h = eplb__fnv1a(h, rt->phy2log, (size_t)rt->L * rt->R * sizeof *rt->phy2log);
    h = eplb__fnv1a(h, rt->share, (size_t)rt->L * rt->R * sizeof *rt->share);
    h = eplb__fnv1a(h, &rt->ns_hash, sizeof rt->ns_hash);
  }
  return h;
}

/* Keeps this node's row of the plan's per-source-node shares. A plan made
 * for another node count (a heterogeneous cluster model) cannot say which
 * row is ours: its node shares are ignored, on every rank alike. */
static eplb_status_t load_node_shares(eplb_runtime_t *rt, const eplb_plan_t *plan) {
  uint32_t N = eplb_plan_node_share_nodes(plan), R = rt->R;
  if (!N)
    return EPLB_OK;
  if (N != rt->P / rt->K) {
    eplb__log(EPLB_LOG_WARN, "runtime",
              "initial plan: node shares for %u nodes, the runtime has %u; using global shares", N,
              rt->P / rt->K);
    return EPLB_OK;
  }
  uint64_t h = EPLB__FNV1A_BASIS;
  for (uint32_t l = 0; l < rt->L; l++) {
    const double *ns = eplb_plan_node_share(plan, l);
    for (size_t i = 0; i < (size_t)N * R; i++)
      if (!(ns[i] >= 0 && ns[i] <= 1 + 1e-9))
        return eplb__error(EPLB_EINVAL, "runtime",
                           "initial plan: layer %u node %zu slot %zu: node share %g not in [0, 1]",
                           l, i / R, i % R, ns[i]);
    h = eplb__fnv1a(h, ns, (size_t)N * R * sizeof *ns);
    memcpy(rt->node_share + (size_t)l * R, ns + (size_t)rt->node * R, R * sizeof *ns);
    rt->has_ns[l] = 1;
  }
  rt->ns_hash = h;
  return EPLB_OK;
}

static eplb_status_t load_plan(eplb_runtime_t *rt, const eplb_plan_t *initial) {
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *own = NULL;
  eplb_loads_t *uniform = NULL;
  if (!initial) {
    eplb_plan_options_t o;
    eplb_plan_options_default(&o);
    o.num_gpus = rt->P;
    o.num_nodes = rt->P / rt->K;
    o.num_replicas = rt->R;
    if ((st = eplb_loads_create(rt->L, rt->E, &uniform)) != EPLB_OK)
      goto done;
    for (size_t i = 0; i < rt->LE; i++)
      uniform->values[i] = 1.0;
    if ((st = eplb_plan_create(uniform, &o, &own)) != EPLB_OK)
      goto done;
    initial = own;
  }
  if ((st = eplb__runtime_plan_fits(rt, initial, "initial plan")) != EPLB_OK)
    goto done;
  for (uint32_t l = 0; l < rt->L; l++) {
    memcpy(rt->phy2log + (size_t)l * rt->R, eplb_plan_phy2log(initial, l),
           rt->R * sizeof *rt->phy2log);
    memcpy(rt->share + (size_t)l * rt->R, eplb_plan_share(initial, l), rt->R * sizeof *rt->share);
  }
  st = load_node_shares(rt, initial);
done:
  eplb_plan_destroy(own);
  eplb_loads_destroy(uniform);
  return st;
}

static eplb_status_t alloc_all(eplb_runtime_t *rt) {
  size_t LR = (size_t)rt->L * rt->R;
  rt->phy2log = eplb__malloc_array(LR, sizeof *rt->phy2log);
  rt->share = eplb__malloc_array(LR, sizeof *rt->share);
  rt->node_share = eplb__malloc_array(LR, sizeof *rt->node_share);
  rt->has_ns = eplb__calloc(rt->L, 1);
  rt->tab = eplb__calloc(rt->L, sizeof *rt->tab);
  rt->active = eplb__calloc(rt->L, 1);
  rt->weights = eplb__calloc((size_t)rt->L * rt->S, sizeof *rt->weights);
  rt->plan_loads = eplb__calloc(rt->LE, sizeof *rt->plan_loads);
  rt->next_flag = eplb__calloc(rt->L, 1);
  rt->next_p2l = eplb__calloc(LR, sizeof *rt->next_p2l);
  rt->next_share = eplb__calloc(LR, sizeof *rt->next_share);
  rt->mig_layers = eplb__calloc(rt->L, sizeof *rt->mig_layers);
  rt->mig_round = eplb__calloc(rt->L, sizeof *rt->mig_round);
  rt->mig_off = eplb__calloc((size_t)rt->L + 1, sizeof *rt->mig_off);
  rt->inject_fail = eplb__calloc(rt->L, 1);
  rt->round_fail = eplb__calloc(rt->L, sizeof *rt->round_fail);
  rt->slot_gpu = eplb__malloc_array(rt->R, sizeof *rt->slot_gpu);
  rt->mig_used = eplb__malloc_array(rt->R, sizeof *rt->mig_used);
  if (!rt->slot_gpu || !rt->mig_used)
    return eplb__error(EPLB_ENOMEM, "runtime", "runtime of %u slots", rt->R);
  for (uint32_t r = 0; r < rt->R; r++)
    rt->slot_gpu[r] = r / rt->S;
  if (!rt->round_fail || !rt->phy2log || !rt->share || !rt->node_share || !rt->has_ns || !rt->tab ||
      !rt->active || !rt->weights || !rt->plan_loads || !rt->next_flag || !rt->next_p2l ||
      !rt->next_share || !rt->mig_layers || !rt->mig_round || !rt->mig_off || !rt->inject_fail)
    return eplb__error(EPLB_ENOMEM, "runtime", "runtime of %u layers x %u slots", rt->L, rt->R);
  for (uint32_t l = 0; l < rt->L; l++)
    for (int b = 0; b < 2; b++) {
      eplb_status_t st = eplb__dtab_alloc(&rt->tab[l][b], rt->E, rt->R);
      if (st != EPLB_OK)
        return st;
    }
  eplb_status_t bs = eplb__batch_alloc(rt);
  if (bs != EPLB_OK)
    return bs;
  if (rt->cfg.count_thread) {
    eplb_status_t st = eplb__counter_create(rt->L, rt->E, &rt->counter);
    if (st != EPLB_OK)
      return st;
  }
  return eplb__stats_alloc(rt);
}

static eplb_status_t open_trace(eplb_runtime_t *rt) {
  if (!rt->trace_path || rt->rank != 0)
    return EPLB_OK;
  eplb_trace_meta_t meta;
  eplb_trace_meta_default(&meta);
  meta.num_layers = rt->L;
  meta.num_experts = rt->E;
  meta.topk = rt->k;
  meta.num_ranks = rt->P;
  snprintf(meta.origin, sizeof meta.origin, "eplb runtime (%u ranks)", rt->P);
  return eplb_trace_writer_open_append(rt->trace_path, &meta, NULL, &rt->trace);
}

static void free_all(eplb_runtime_t *rt) {
  eplb__rebalance_stop(rt);
  eplb__device_close(rt->dev);
  eplb__counter_destroy(rt->counter);
  eplb__shm_close(rt);
  if (rt->trace) {
    eplb_trace_writer_finish(rt->trace);
    eplb_trace_writer_destroy(rt->trace);
  }
  eplb__comm_destroy(rt->comm);
  eplb__sample_free(rt);
  eplb__batch_free(rt);
  if (rt->tab)
    for (uint32_t l = 0; l < rt->L; l++) {
      eplb__dtab_free(&rt->tab[l][0]);
      eplb__dtab_free(&rt->tab[l][1]);
    }
  void *ptrs[] = {rt->shm_name,    rt->trace_path, rt->phy2log,    rt->share,       rt->tab,
                  rt->active,      rt->weights,    rt->pending,    rt->step_tokens, rt->ring,
                  rt->wsum,        rt->ema,        rt->plan_loads, rt->next_flag,   rt->next_p2l,
                  rt->next_share,  rt->moves,      rt->mig_layers, rt->mig_round,   rt->mig_off,
                  rt->inject_fail, rt->staging,    rt->round_fail, rt->node_share,  rt->has_ns,
                  rt->slot_gpu,    rt->mig_used};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    eplb__free(ptrs[i]);
  eplb__free(rt);
}

static void build_tables(eplb_runtime_t *rt) {
  for (uint32_t l = 0; l < rt->L; l++)
    eplb__dtab_build_node(&rt->tab[l][0], rt->E, rt->R, rt->phy2log + (size_t)l * rt->R,
                          rt->share + (size_t)l * rt->R,
                          rt->has_ns[l] ? rt->node_share + (size_t)l * rt->R : NULL, rt->S, rt->K,
                          rt->node, rt->cfg.local_first);
}

eplb_status_t eplb__runtime_plan_fits(const eplb_runtime_t *rt, const eplb_plan_t *p,
                                      const char *what) {
  if (eplb_plan_num_layers(p) != rt->L || eplb_plan_num_experts(p) != rt->E ||
      eplb_plan_num_gpus(p) != rt->P || eplb_plan_num_nodes(p) != rt->P / rt->K ||
      eplb_plan_num_slots(p) != rt->R)
    return eplb__error(EPLB_ESHAPE, "runtime",
                       "%s: %u layers, %u experts, %u GPUs, %u nodes, %u slots; the runtime has "
                       "%u, %u, %u, %u, %u",
                       what, eplb_plan_num_layers(p), eplb_plan_num_experts(p),
                       eplb_plan_num_gpus(p), eplb_plan_num_nodes(p), eplb_plan_num_slots(p), rt->L,
                       rt->E, rt->P, rt->P / rt->K, rt->R);
  const uint32_t *spg = eplb_plan_slots_per_gpu(p);
  for (uint32_t g = 0; g < rt->P; g++)
    if (spg[g] != rt->S)
      return eplb__error(EPLB_ESHAPE, "runtime", "%s: GPU %u has %u slots, not %u", what, g, spg[g],
                         rt->S);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_create(const eplb_runtime_config_t *cfg, const eplb_plan_t *initial_plan,
                                  eplb_runtime_t **out) {
  eplb_status_t st = EPLB_OK;
  char detail[512] = "";
  if (!out || !cfg)
    return eplb__error(EPLB_EINVAL, "runtime", "create: NULL argument");
  *out = NULL;
  eplb_runtime_t *rt = eplb__calloc(1, sizeof *rt);
  if (!rt)
    return eplb__error(EPLB_ENOMEM, "runtime", "runtime");
  rt->cfg = *cfg;
  rt->cfg.trace_path = NULL;
  rt->cfg.shm_name = NULL;
  rt->cfg.split_model = NULL;
  rt->cfg.split_gpu = NULL;
  /* The communicator first: its creation is collective, and every later
   * failure must still reach the agreement below or peers would hang. */
  st = eplb__comm_create(&cfg->comm, cfg->rank, cfg->world_size, &rt->comm);
  if (st == EPLB_OK)
    st = check_config(cfg);
  if (st == EPLB_OK) {
    rt->L = cfg->num_layers, rt->E = cfg->num_experts, rt->k = cfg->topk;
    rt->S = cfg->slots_per_rank, rt->P = cfg->world_size, rt->K = cfg->ranks_per_node;
    rt->R = rt->S * rt->P, rt->rank = cfg->rank, rt->node = cfg->rank / cfg->ranks_per_node;
    rt->LE = (size_t)rt->L * rt->E;
    rt->split_on = cfg->split_per_batch > 0 || (cfg->split_per_batch < 0 && cfg->world_size > 1);
    eplb__batch_decode_setup(rt, cfg->split_model, cfg->split_gpu);
    if ((cfg->trace_path && !(rt->trace_path = eplb__strdup(cfg->trace_path))) ||
        (cfg->shm_name && !(rt->shm_name = eplb__strdup(cfg->shm_name))))
      st = eplb__error(EPLB_ENOMEM, "runtime", "trace path or segment name");
  }
  if (st == EPLB_OK)
    st = alloc_all(rt);
  if (st == EPLB_OK)
    st = load_plan(rt, initial_plan);
  if (st == EPLB_OK)
    build_tables(rt);
  /* Before the agreement below: a rank whose device fails fails them all. */
  if (st == EPLB_OK)
    st = eplb__device_open(rt);
  if (st == EPLB_OK)
    st = open_trace(rt);
  if (st == EPLB_OK)
    st = eplb__shm_open(rt);
  if (st != EPLB_OK)
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  if (rt->comm) {
    uint64_t h = config_hash(rt);
    uint64_t v[3] = {h, ~h, st != EPLB_OK};
    eplb_status_t cs = eplb__comm_allreduce_u64(rt->comm, v, 3, EPLB_REDUCE_MAX);
    if (cs != EPLB_OK) {
      st = cs;
    } else if (st == EPLB_OK && v[2]) {
      st = eplb__error(EPLB_EINVAL, "runtime", "create: the config is invalid on another rank");
    } else if (st == EPLB_OK && v[0] != ~v[1]) {
      eplb__log(EPLB_LOG_ERROR, "runtime",
                "rank %u: config/plan hash %016" PRIx64 " differs across ranks (min %016" PRIx64
                ", max %016" PRIx64 ")",
                cfg->rank, h, ~v[1], v[0]);
      st = eplb__error(EPLB_EINVAL, "runtime",
                       "create: ranks have different configs or initial plans (rank %u hash "
                       "%016" PRIx64 ")",
                       cfg->rank, h);
    } else if (st != EPLB_OK) {
      st = eplb__error(st, "runtime", "%s", detail); /* keep our own detail */
    }
  }
  if (st != EPLB_OK) {
    free_all(rt);
    return st;
  }
  *out = rt;
  return EPLB_OK;
}

void eplb_runtime_destroy(eplb_runtime_t *rt) {
  if (rt)
    free_all(rt);
}

eplb_status_t eplb_runtime_register_weights(eplb_runtime_t *rt, uint32_t layer, uint32_t slot,
                                            void *ptr, size_t bytes) {
  if (!rt || !ptr)
    return eplb__error(EPLB_EINVAL, "runtime", "register_weights: NULL argument");
  if (layer >= rt->L || slot >= rt->S)
    return eplb__error(EPLB_ERANGE, "runtime",
                       "register_weights: layer %u / slot %u out of %u / %u", layer, slot, rt->L,
                       rt->S);
  if (bytes != rt->cfg.expert_bytes)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "register_weights: layer %u slot %u: %zu bytes, expert_bytes is %" PRIu64,
                       layer, slot, bytes, rt->cfg.expert_bytes);
  if (rt->mig_n > 0)
    return eplb__error(EPLB_ESTATE, "runtime", "register_weights: a migration is running");
  rt->weights[(size_t)layer * rt->S + slot] = (eplb__weights_t){ptr, bytes};
  return EPLB_OK;
}

eplb_status_t eplb_runtime_step_end(eplb_runtime_t *rt) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "step_end: NULL runtime");
  /* The device's finished copies join this step before it closes. */
  eplb_status_t ds = rt->dev ? eplb__device_step_end(rt) : EPLB_OK;
  char detail[512] = "";
  if (ds != EPLB_OK)
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  eplb_status_t st = eplb__stats_step_end(rt);
  if (st != EPLB_OK)
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  else if (ds != EPLB_OK)
    st = ds;
  eplb_status_t rs = eplb__rebalance_step(rt);
  rt->m.steps++;
  if (st != EPLB_OK && rs == EPLB_OK)
    return eplb__error(st, "runtime", "%s", detail);
  return st != EPLB_OK ? st : rs;
}

uint64_t eplb_runtime_epoch(const eplb_runtime_t *rt) { return rt ? rt->m.epoch : 0; }

eplb_status_t eplb_runtime_layer_plan(const eplb_runtime_t *rt, uint32_t layer,
                                      const int32_t **phy2log, const double **share) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "layer_plan: NULL runtime");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "layer_plan: layer %u >= %u", layer, rt->L);
  if (phy2log)
    *phy2log = rt->phy2log + (size_t)layer * rt->R;
  if (share)
    *share = rt->share + (size_t)layer * rt->R;
  return EPLB_OK;
}

eplb_status_t eplb_runtime_plan(const eplb_runtime_t *rt, eplb_plan_t **out) {
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *plan = NULL;
  eplb_loads_t *loads = NULL;
  if (!rt || !out)
    return eplb__error(EPLB_EINVAL, "runtime", "plan: NULL argument");
  *out = NULL;
  st = eplb__plan_alloc(rt->L, rt->E, rt->P, rt->P / rt->K, rt->R, NULL, &plan);
  if (st != EPLB_OK)
    goto done;
  plan->policy = rt->cfg.policy.plan_policy;
  memcpy(plan->phy2log, rt->phy2log, (size_t)rt->L * rt->R * sizeof *rt->phy2log);
  memcpy(plan->share, rt->share, (size_t)rt->L * rt->R * sizeof *rt->share);
  if (rt->ring_n > 0) {
    if ((st = eplb_loads_create(rt->L, rt->E, &loads)) != EPLB_OK)
      goto done;
    eplb_runtime_window(rt, EPLB_WINDOW_SUM, loads->values);
    if ((st = eplb_plan_evaluate(plan, loads)) != EPLB_OK)
      goto done;
  }
  *out = plan;
  plan = NULL;
done:
  eplb_plan_destroy(plan);
  eplb_loads_destroy(loads);
  return st;
}

void eplb_runtime_metrics(const eplb_runtime_t *rt, eplb_runtime_metrics_t *out) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (!rt)
    return;
  *out = rt->m;
  out->window_balancedness = 1.0;
  double *w = eplb__malloc_array(rt->LE, sizeof *w);
  if (w && rt->ring_n > 0) {
    eplb_runtime_window(rt, EPLB_WINDOW_SUM, w);
    out->window_balancedness = eplb__runtime_balancedness(rt, w);
  }
  eplb__free(w);
}

eplb_status_t eplb_runtime_inject_transfer_failure(eplb_runtime_t *rt, uint32_t layer) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "inject: NULL runtime");
  if (layer >= rt->L)
    return eplb__error(EPLB_ERANGE, "runtime", "inject: layer %u >= %u", layer, rt->L);
  rt->inject_fail[layer] = 1;
  return EPLB_OK;
}

eplb_status_t eplb_runtime_inject_transfer_stall(eplb_runtime_t *rt, uint32_t ms) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "inject: NULL runtime");
  rt->inject_stall_ms = ms;
  return EPLB_OK;
}

eplb_status_t eplb_runtime_allreduce(eplb_runtime_t *rt, double *values, size_t n,
                                     eplb_reduce_op_t op) {
  if (!rt || (n > 0 && !values) ||
      (op != EPLB_REDUCE_SUM && op != EPLB_REDUCE_MAX && op != EPLB_REDUCE_MIN))
    return eplb__error(EPLB_EINVAL, "runtime", "allreduce: NULL argument or op %d", (int)op);
  return eplb__comm_allreduce_f64(rt->comm, values, n, op);
}
