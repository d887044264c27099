/* runtime/runtime.c — config, create/destroy, buffers, getters, step_end. */
#include "runtime/runtime.h"

#include "planner/planner.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

static void runtime_config_defaults(eplb_runtime_config_t *cfg) {
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
  eplb_plan_step_options_default(&cfg->continuous);
  cfg->continuous_window = EPLB_CONTINUOUS_AUTO;
}

eplb_status_t eplb_runtime_config_init(eplb_runtime_config_t *cfg, size_t size) {
  eplb_runtime_config_t d;
  runtime_config_defaults(&d);
  return eplb__opts_init(cfg, size, &d, sizeof d, "eplb_runtime_config_t");
}

/* What continuous re-placement with a window of W needs that this config
 * lacks (eplb/runtime.h, continuous_window), or NULL. */
static const char *continuous_lacks(const eplb_runtime_config_t *c, uint32_t W) {
  const eplb_plan_step_options_t *o = &c->continuous;
  bool split = c->split_per_batch > 0 || (c->split_per_batch < 0 && c->world_size > 1);
  return !split                                    ? "the per-batch split on"
         : W > c->policy.window_steps              ? "continuous_window <= policy.window_steps"
         : c->continuous_lag > 1                   ? "continuous_lag 0 or 1"
         : c->policy.interval_steps || c->shm_name ? "no interval_steps and no shm_name"
         : c->comm.kind == EPLB_COMM_NCCL          ? "an MPI communicator (not NCCL yet)"
         : (c->continuous_in_place < 0 || c->continuous_in_place > 1) ? "continuous_in_place 0 or 1"
         : c->continuous_in_place && c->device.kind != EPLB_DEVICE_NONE
             ? "staged copies with a device (continuous_in_place 0: the device's split has no "
               "slots out of service)"
         : c->continuous_in_place && (c->split_whole_tokens || c->split_model)
             ? "in place: no split_whole_tokens and no split_model"
         : !(o->move_weight >= 0 && isfinite(o->move_weight)) ? "a finite move_weight >= 0"
         : o->slots_per_gpu > 1024                            ? "continuous.slots_per_gpu <= 1024"
                                                              : NULL;
}

/* Whether this rank's config lets the auto default run continuous
 * re-placement (window 1): several ranks on MPI and every rule above. The
 * ranks agree at create (a device on one rank turns it off on all). */
static bool auto_continuous(const eplb_runtime_config_t *c) {
  return c->continuous_window == EPLB_CONTINUOUS_AUTO && c->world_size > 1 &&
         c->comm.kind == EPLB_COMM_MPI && c->device.kind == EPLB_DEVICE_NONE &&
         !continuous_lacks(c, 1);
}

static eplb_status_t check_continuous(const eplb_runtime_config_t *c) {
  uint32_t W = c->continuous_window;
  const char *why = W && W != EPLB_CONTINUOUS_AUTO ? continuous_lacks(c, W) : NULL;
  if (!why)
    return EPLB_OK;
  return eplb__error(EPLB_EINVAL, "runtime", "config: continuous_window %u needs %s", W, why);
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
  if (c->split_per_batch < -1 || c->split_per_batch > 1)
    return eplb__error(EPLB_EINVAL, "runtime", "config: split_per_batch %d not in {-1, 0, 1}",
                       c->split_per_batch);
  if (!(c->split_tolerance >= 0 && c->split_tolerance <= 1))
    return eplb__error(EPLB_EINVAL, "runtime", "config: split_tolerance %.17g not in [0, 1]",
                       c->split_tolerance);
  if (!c->split_model != !c->split_gpu)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "config: split_model and split_gpu go together (both or neither)");
  if (p->plan_policy == EPLB_POLICY_DECODE && !c->split_model)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "policy: the decode policy models a deployment: it needs split_model "
                       "and split_gpu");
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
  return check_continuous(c);
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
                  (uint64_t)(int64_t)c->split_per_batch,
                  c->continuous_window,
                  c->continuous_lag,
                  (uint64_t)(int64_t)c->continuous_in_place,
                  c->continuous.slots_per_gpu,
                  c->continuous.bytes_per_gpu,
                  c->continuous.max_per_layer};
  uint64_t h = eplb__fnv1a(EPLB__FNV1A_BASIS, v, sizeof v);
  h = eplb__fnv1a(h, &p->ema_decay, sizeof p->ema_decay);
  h = eplb__fnv1a(h, &p->gain_threshold, sizeof p->gain_threshold);
  h = eplb__fnv1a(h, &c->split_tolerance, sizeof c->split_tolerance);
  h = eplb__fnv1a(h, &c->continuous.move_weight, sizeof c->continuous.move_weight);
  h = eplb__batch_hash(&rt->batch, h);
  return eplb__live_hash(rt->live, h);
}

static eplb_status_t alloc_all(eplb_runtime_t *rt) {
  const eplb__geom_t *g = &rt->g;
  eplb_status_t st = eplb__live_create(g, rt->cfg.local_first, &rt->live);
  if (st == EPLB_OK)
    st = eplb__rebal_create(g, &rt->rb);
  if (st == EPLB_OK)
    st = eplb__batch_alloc(rt);
  if (st == EPLB_OK && rt->cfg.count_thread)
    st = eplb__counter_create(g->L, g->E, &rt->counter);
  if (st == EPLB_OK)
    st = eplb__stats_create(g, &rt->cfg.policy, &rt->stats);
  if (st == EPLB_OK)
    st = eplb__sample_create(g, rt->cfg.sample_rows, rt->cfg.policy.allreduce_period, &rt->sample);
  /* The auto default's part is made where this rank could run it, and
   * dropped at create's agreement unless every rank can. */
  eplb_runtime_config_t cc = rt->cfg;
  if (cc.continuous_window == EPLB_CONTINUOUS_AUTO)
    cc.continuous_window = auto_continuous(&rt->cfg) ? 1 : 0;
  if (st == EPLB_OK)
    st = eplb__cont_create(&cc, g, &rt->cont);
  if (st == EPLB_OK)
    st = eplb__wtab_create(g->L, g->S, rt->cfg.expert_bytes, &rt->wt);
  return st;
}

static eplb_status_t open_trace(eplb_runtime_t *rt) {
  if (!rt->trace_path || rt->g.rank != 0)
    return EPLB_OK;
  eplb_trace_meta_t meta;
  eplb_trace_meta_default(&meta);
  meta.num_layers = rt->g.L;
  meta.num_experts = rt->g.E;
  meta.topk = rt->g.k;
  meta.num_ranks = rt->g.P;
  snprintf(meta.origin, sizeof meta.origin, "eplb runtime (%u ranks)", rt->g.P);
  return eplb_trace_writer_open_append(rt->trace_path, &meta, NULL, &rt->trace);
}

static void free_all(eplb_runtime_t *rt) {
  /* The planning threads read the live plan: they are joined first. */
  eplb__cont_destroy(rt->cont, rt->comm);
  eplb__rebal_destroy(rt->rb);
  eplb__device_close(rt->dev);
  eplb__counter_destroy(rt->counter);
  eplb__mbox_close(rt->mbox);
  if (rt->trace) {
    eplb_trace_writer_finish(rt->trace);
    eplb_trace_writer_destroy(rt->trace);
  }
  eplb__comm_destroy(rt->comm);
  eplb__sample_destroy(rt->sample);
  eplb__stats_destroy(rt->stats);
  eplb__batch_free(rt);
  eplb__live_destroy(rt->live);
  eplb__wtab_destroy(rt->wt);
  eplb__free(rt->trace_path);
  eplb__free(rt);
}

eplb__counter_t *eplb__runtime_counter(const eplb_runtime_t *rt) { return rt->counter; }

eplb_status_t eplb_runtime_create(const eplb_runtime_config_t *cfg, const eplb_plan_t *initial_plan,
                                  eplb_runtime_t **out) {
  char detail[512] = "";
  if (!out || !cfg)
    return eplb__error(EPLB_EINVAL, "runtime", "create: NULL argument");
  *out = NULL;
  /* Before the collective part: a config whose size cannot be read has no
   * communicator to agree over either. */
  eplb_runtime_config_t own;
  eplb_status_t st =
      EPLB__OPTS_TAKE(own, cfg, eplb_runtime_config_default, "eplb_runtime_config_t", "runtime");
  if (st != EPLB_OK)
    return st;
  /* Embedded, covered by the outer size (eplb/common.h). */
  own.continuous.struct_size = sizeof own.continuous;
  cfg = &own;
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
    uint32_t S = cfg->slots_per_rank, P = cfg->world_size, K = cfg->ranks_per_node;
    rt->g = (eplb__geom_t){.L = cfg->num_layers,
                           .E = cfg->num_experts,
                           .k = cfg->topk,
                           .S = S,
                           .P = P,
                           .K = K,
                           .R = S * P,
                           .N = P / K,
                           .rank = cfg->rank,
                           .node = cfg->rank / K,
                           .LE = (size_t)cfg->num_layers * cfg->num_experts};
    rt->split_on = cfg->split_per_batch > 0 || (cfg->split_per_batch < 0 && cfg->world_size > 1);
    eplb__batch_decode_setup(rt, cfg->split_model, cfg->split_gpu);
    if (cfg->trace_path && !(rt->trace_path = eplb__strdup(cfg->trace_path)))
      st = eplb__error(EPLB_ENOMEM, "runtime", "trace path");
  }
  if (st == EPLB_OK)
    st = alloc_all(rt);
  if (st == EPLB_OK)
    st = eplb__live_load(rt->live, initial_plan);
  if (st == EPLB_OK)
    eplb__cont_load(rt->cont, rt->live);
  /* Before the agreement below: a rank whose device fails fails them all. */
  if (st == EPLB_OK)
    st = eplb__device_open(rt);
  if (st == EPLB_OK)
    st = open_trace(rt);
  if (st == EPLB_OK)
    st = eplb__mbox_open(cfg->shm_name, &rt->g, &rt->mbox);
  if (st != EPLB_OK)
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  rt->dev_any = rt->dev != NULL;
  if (rt->comm) {
    uint64_t h = config_hash(rt);
    uint64_t v[5] = {h, ~h, st != EPLB_OK, rt->dev != NULL, !auto_continuous(cfg)};
    eplb_status_t cs = eplb__comm_allreduce_u64(rt->comm, v, 5, EPLB_REDUCE_MAX);
    rt->seq.batch_unchecked = rt->dev_any = v[3] != 0;
    if (cs == EPLB_OK && v[4] && rt->cont && cfg->continuous_window == EPLB_CONTINUOUS_AUTO) {
      eplb__cont_destroy(rt->cont, rt->comm); /* some rank cannot: off on every rank */
      rt->cont = NULL;
    }
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
  if (rt->cfg.continuous_window == EPLB_CONTINUOUS_AUTO) /* resolved: what runs */
    rt->cfg.continuous_window = rt->cont ? 1 : 0;
  *out = rt;
  return EPLB_OK;
}

void eplb_runtime_destroy(eplb_runtime_t *rt) {
  if (rt)
    free_all(rt);
}

eplb_status_t eplb_runtime_register_tensors(eplb_runtime_t *rt, uint32_t layer, uint32_t slot,
                                            const eplb_runtime_tensor_t *tensors, uint32_t n) {
  if (!rt || !tensors || n < 1 || n > EPLB_RUNTIME_MAX_TENSORS)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "register_tensors: NULL argument or %u tensors (1 to %u)", n,
                       EPLB_RUNTIME_MAX_TENSORS);
  if (layer >= rt->g.L || slot >= rt->g.S)
    return eplb__error(EPLB_ERANGE, "runtime",
                       "register_tensors: layer %u / slot %u out of %u / %u", layer, slot, rt->g.L,
                       rt->g.S);
  /* The device and NCCL paths move one device buffer per slot. */
  if (n > 1 && (rt->dev || rt->cfg.comm.kind == EPLB_COMM_NCCL))
    return eplb__error(EPLB_EUNSUPPORTED, "runtime",
                       "register_tensors: %u tensors: a device or NCCL runtime moves one buffer "
                       "per slot",
                       n);
  if (eplb__rebal_migrating(rt->rb) || eplb__cont_busy(rt->cont))
    return eplb__error(EPLB_ESTATE, "runtime", "register_tensors: a migration is running");
  return eplb__wtab_set(rt->wt, layer, slot, tensors, n);
}

eplb_status_t eplb_runtime_register_weights(eplb_runtime_t *rt, uint32_t layer, uint32_t slot,
                                            void *ptr, size_t bytes) {
  if (!rt || !ptr)
    return eplb__error(EPLB_EINVAL, "runtime", "register_weights: NULL argument");
  if (layer >= rt->g.L || slot >= rt->g.S)
    return eplb__error(EPLB_ERANGE, "runtime",
                       "register_weights: layer %u / slot %u out of %u / %u", layer, slot, rt->g.L,
                       rt->g.S);
  if (bytes != rt->cfg.expert_bytes)
    return eplb__error(EPLB_EINVAL, "runtime",
                       "register_weights: layer %u slot %u: %zu bytes, expert_bytes is %" PRIu64,
                       layer, slot, bytes, rt->cfg.expert_bytes);
  eplb_runtime_tensor_t t = {ptr, bytes};
  return eplb_runtime_register_tensors(rt, layer, slot, &t, 1);
}

eplb_status_t eplb_runtime_step_end(eplb_runtime_t *rt) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "step_end: NULL runtime");
  /* Out of step with the other ranks, the step neither closes nor counts. */
  eplb_status_t qs = eplb__seq_enter(rt, EPLB__CALL_STEP_END, 0);
  if (qs != EPLB_OK)
    return qs;
  bool dropped = rt->seq.drop_step;
  rt->seq.drop_step = false;
  /* The device's finished copies join this step before it closes. */
  eplb_status_t ds = rt->dev ? eplb__device_step_end(rt) : EPLB_OK;
  if (dropped)
    eplb__runtime_drop_step(rt);
  char detail[512] = "";
  if (ds != EPLB_OK)
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  eplb_status_t st = dropped ? EPLB_OK : eplb__runtime_close_step(rt);
  if (st != EPLB_OK)
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  else if (ds != EPLB_OK)
    st = ds;
  eplb_status_t rs = rt->cont ? eplb__cont_step(rt) : eplb__rebalance_step(rt);
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
  if (layer >= rt->g.L)
    return eplb__error(EPLB_ERANGE, "runtime", "layer_plan: layer %u >= %u", layer, rt->g.L);
  if (phy2log)
    *phy2log = eplb__live_p2l(rt->live, layer);
  if (share)
    *share = eplb__live_share(rt->live, layer);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_plan(const eplb_runtime_t *rt, eplb_plan_t **out) {
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *plan = NULL;
  eplb_loads_t *loads = NULL;
  if (!rt || !out)
    return eplb__error(EPLB_EINVAL, "runtime", "plan: NULL argument");
  *out = NULL;
  eplb__plan_shape_t shape = {rt->g.L, rt->g.E, rt->g.P, rt->g.N, rt->g.R, NULL};
  st = eplb__plan_from_arrays(&shape, rt->cfg.policy.plan_policy, eplb__live_p2l(rt->live, 0),
                              eplb__live_share(rt->live, 0), NULL, &plan);
  if (st != EPLB_OK)
    goto done;
  if (eplb__stats_steps(rt->stats) > 0) {
    if ((st = eplb_loads_create(rt->g.L, rt->g.E, &loads)) != EPLB_OK)
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
  double *w = eplb__malloc_array(rt->g.LE, sizeof *w);
  if (w && eplb__stats_steps(rt->stats) > 0) {
    eplb_runtime_window(rt, EPLB_WINDOW_SUM, w);
    out->window_balancedness = eplb__runtime_balancedness(rt, w);
  }
  eplb__free(w);
}

eplb_status_t eplb_runtime_inject_transfer_failure(eplb_runtime_t *rt, uint32_t layer) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "inject: NULL runtime");
  if (layer >= rt->g.L)
    return eplb__error(EPLB_ERANGE, "runtime", "inject: layer %u >= %u", layer, rt->g.L);
  eplb__rebal_inject_failure(rt->rb, layer);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_inject_transfer_corruption(eplb_runtime_t *rt, uint32_t layer) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "inject: NULL runtime");
  if (layer >= rt->g.L)
    return eplb__error(EPLB_ERANGE, "runtime", "inject: layer %u >= %u", layer, rt->g.L);
  eplb__rebal_inject_corruption(rt->rb, layer);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_inject_transfer_stall(eplb_runtime_t *rt, uint32_t ms) {
  if (!rt)
    return eplb__error(EPLB_EINVAL, "runtime", "inject: NULL runtime");
  eplb__rebal_inject_stall(rt->rb, ms);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_allreduce(eplb_runtime_t *rt, double *values, size_t n,
                                     eplb_reduce_op_t op) {
  if (!rt || (n > 0 && !values) ||
      (op != EPLB_REDUCE_SUM && op != EPLB_REDUCE_MAX && op != EPLB_REDUCE_MIN))
    return eplb__error(EPLB_EINVAL, "runtime", "allreduce: NULL argument or op %d", (int)op);
  /* The header carries n and op, so that ranks that differ fail alike. */
  eplb_status_t st = eplb__seq_enter(
      rt, EPLB__CALL_ALLREDUCE, (uint32_t)(n < (1u << 20) ? n : (1u << 20)) << 2 | (uint32_t)op);
  return st != EPLB_OK ? st : eplb__comm_allreduce_f64(rt->comm, values, n, op);
}
