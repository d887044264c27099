/* planner/plan_core.c — the plan object itself: allocation, metrics,
 * checks and accessors. Apart from plan.c so that the policies, which call
 * these, do not depend on plan.c, which calls the policies (plan.c ->
 * policies -> plan_core.c; scripts/check_modules.py fails on a cycle). */
#include "planner/planner.h"

#include <math.h>
#include <string.h>

const char *eplb_plan_policy_str(eplb_plan_policy_t policy) {
  switch (policy) {
  case EPLB_POLICY_DEEPSEEK: return "deepseek";
  case EPLB_POLICY_BALANCED: return "balanced";
  case EPLB_POLICY_MIP: return "mip";
  case EPLB_POLICY_INCREMENTAL: return "incremental";
  case EPLB_POLICY_LOCALITY: return "locality";
  case EPLB_POLICY_DECODE: return "decode";
  }
  return NULL;
}

eplb_status_t eplb_plan_policy_parse(const char *name, eplb_plan_policy_t *out) {
  for (int p = EPLB_POLICY_DEEPSEEK; p < 32; p++) /* 32: past every policy; gaps are NULL */
    if (name && out && eplb_plan_policy_str((eplb_plan_policy_t)p) &&
        !strcmp(name, eplb_plan_policy_str((eplb_plan_policy_t)p))) {
      *out = (eplb_plan_policy_t)p;
      return EPLB_OK;
    }
  return eplb__error(EPLB_EINVAL, "planner",
                     "unknown policy '%s' (deepseek, balanced, mip, incremental, locality, "
                     "decode)",
                     name ? name : "");
}

eplb_status_t eplb__plan_alloc(uint32_t L, uint32_t E, uint32_t G, uint32_t N, uint32_t R,
                               const uint32_t *slots, eplb_plan_t **out) {
  *out = NULL;
  eplb_plan_t *p = eplb__calloc(1, sizeof *p);
  if (!p)
    return eplb__error(EPLB_ENOMEM, "planner", "plan: out of memory");
  p->num_layers = L;
  p->num_experts = E;
  p->num_gpus = G;
  p->num_nodes = N;
  p->num_slots = R;
  p->num_groups = 1;
  p->slots_per_gpu = eplb__malloc_array(G, sizeof *p->slots_per_gpu);
  p->gpu_first = eplb__malloc_array((size_t)G + 1, sizeof *p->gpu_first);
  p->phy2log = eplb__calloc((size_t)L * R, sizeof *p->phy2log);
  p->share = eplb__calloc((size_t)L * R, sizeof *p->share);
  p->gpu_load = eplb__calloc((size_t)L * G, sizeof *p->gpu_load);
  p->metrics = eplb__calloc(L, sizeof *p->metrics);
  if (!p->slots_per_gpu || !p->gpu_first || !p->phy2log || !p->share || !p->gpu_load ||
      !p->metrics) {
    eplb_plan_destroy(p);
    /* The size names what was asked: a cluster too large for this machine
     * is told apart from a transient failure. */
    size_t bytes = (size_t)L * R * (sizeof(int32_t) + sizeof(double)) +
                   (size_t)L * G * sizeof(double) + (size_t)L * sizeof(eplb_plan_layer_metrics_t);
    return eplb__error(EPLB_ENOMEM, "planner",
                       "plan: out of memory for %u layers x %u slots x %u GPUs (%zu bytes)", L, R,
                       G, bytes);
  }
  p->gpu_first[0] = 0;
  for (uint32_t g = 0; g < G; g++) {
    p->slots_per_gpu[g] = slots ? slots[g] : R / G;
    p->gpu_first[g + 1] = p->gpu_first[g] + p->slots_per_gpu[g];
  }
  *out = p;
  return EPLB_OK;
}

void eplb_plan_destroy(eplb_plan_t *plan) {
  if (!plan)
    return;
  eplb__free(plan->slots_per_gpu);
  eplb__free(plan->gpu_first);
  eplb__free(plan->phy2log);
  eplb__free(plan->share);
  eplb__free(plan->gpu_load);
  eplb__free(plan->metrics);
  eplb__free(plan->node_share);
  eplb__free(plan->replica_rank);
  eplb__free(plan);
}

void eplb__plan_layer_ctx(const eplb_plan_t *p, const double *w, eplb__layer_ctx_t *c) {
  *c = (eplb__layer_ctx_t){.w = w,
                           .num_experts = p->num_experts,
                           .num_gpus = p->num_gpus,
                           .num_nodes = p->num_nodes,
                           .num_slots = p->num_slots,
                           .num_groups = p->num_groups,
                           .slots_per_gpu = p->slots_per_gpu,
                           .gpu_first = p->gpu_first,
                           .keep_groups = p->keep_groups};
}

double eplb__layer_max_load(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                            const double *share, double *gpu_load) {
  double mx = 0;
  for (uint32_t g = 0; g < ctx->num_gpus; g++) {
    double l = 0;
    for (uint32_t r = ctx->gpu_first[g]; r < ctx->gpu_first[g + 1]; r++)
      l += share[r] * ctx->w[phy2log[r]];
    if (gpu_load)
      gpu_load[g] = l;
    if (l > mx)
      mx = l;
  }
  return mx;
}

void eplb__plan_layer_metrics(eplb_plan_t *plan, uint32_t layer, const double *w,
                              double lower_bound) {
  eplb__layer_ctx_t c;
  eplb__plan_layer_ctx(plan, w, &c);
  size_t R = plan->num_slots, G = plan->num_gpus;
  eplb_plan_layer_metrics_t *m = &plan->metrics[layer];
  /* Subnormal loads: share x load underflows (half of 5e-324 is 0), so a
   * layer whose loads are all tiny is summed scaled by 2^k (exact) and the
   * results scaled back (monotone rounding keeps max >= bound). */
  int k = eplb__load_scale(w, plan->num_experts);
  double *ws = k ? eplb__malloc_array(plan->num_experts, sizeof *ws) : NULL;
  if (ws) {
    for (uint32_t e = 0; e < plan->num_experts; e++)
      ws[e] = ldexp(w[e], k);
    c.w = ws;
  } else {
    k = 0;
  }
  double *gl = plan->gpu_load + layer * G;
  double mx = eplb__layer_max_load(&c, plan->phy2log + layer * R, plan->share + layer * R, gl);
  double total = 0;
  for (uint32_t e = 0; e < plan->num_experts; e++)
    total += c.w[e];
  eplb__free(ws);
  for (size_t g = 0; k && g < G; g++)
    gl[g] = ldexp(gl[g], -k);
  m->max_load = ldexp(mx, -k);
  m->total_load = ldexp(total, -k);
  m->mean_load = m->total_load / (double)G;
  /* Rounding alone can put the mean or the bound an ulp above the max; the
   * certificate states what holds exactly (balancedness <= 1 <= max/bound). */
  double bal = eplb__balancedness(total, (uint32_t)G, mx);
  m->balancedness = bal < 1 ? bal : 1.0;
  m->lower_bound = lower_bound < m->max_load ? lower_bound : m->max_load;
}

eplb_status_t eplb__plan_check_layer(const eplb_plan_t *plan, uint32_t layer, const char *what) {
  uint32_t E = plan->num_experts, R = plan->num_slots;
  const int32_t *p2l = plan->phy2log + (size_t)layer * R;
  const double *sh = plan->share + (size_t)layer * R;
  double *sum = eplb__calloc(E, sizeof *sum);
  uint32_t *cnt = eplb__calloc(E, sizeof *cnt);
  eplb_status_t st = EPLB_OK;
  if (!sum || !cnt) {
    st = eplb__error(EPLB_ENOMEM, "planner", "plan: out of memory");
    goto done;
  }
  for (uint32_t r = 0; r < R; r++) {
    if (p2l[r] < 0 || (uint32_t)p2l[r] >= E) {
      st = eplb__error(EPLB_ERANGE, "planner", "%s: layer %u slot %u: expert %d out of range 0..%u",
                       what, layer, r, p2l[r], E - 1);
      goto done;
    }
    if (!(sh[r] >= 0 && sh[r] <= 1 + 1e-9)) {
      st = eplb__error(EPLB_EFORMAT, "planner", "%s: layer %u slot %u: share %.17g not in [0, 1]",
                       what, layer, r, sh[r]);
      goto done;
    }
    sum[p2l[r]] += sh[r];
    cnt[p2l[r]]++;
  }
  for (uint32_t e = 0; e < E; e++) {
    if (!cnt[e]) {
      st = eplb__error(EPLB_EFORMAT, "planner", "%s: layer %u: expert %u has no replica", what,
                       layer, e);
      goto done;
    }
    if (fabs(sum[e] - 1) > 1e-6) {
      st = eplb__error(EPLB_EFORMAT, "planner",
                       "%s: layer %u: shares of expert %u sum to %.17g, not 1", what, layer, e,
                       sum[e]);
      goto done;
    }
  }
done:
  eplb__free(sum);
  eplb__free(cnt);
  return st;
}

uint32_t eplb_plan_num_layers(const eplb_plan_t *p) { return p ? p->num_layers : 0; }
uint32_t eplb_plan_num_experts(const eplb_plan_t *p) { return p ? p->num_experts : 0; }
uint32_t eplb_plan_num_gpus(const eplb_plan_t *p) { return p ? p->num_gpus : 0; }
uint32_t eplb_plan_num_nodes(const eplb_plan_t *p) { return p ? p->num_nodes : 0; }
uint32_t eplb_plan_num_slots(const eplb_plan_t *p) { return p ? p->num_slots : 0; }
eplb_plan_policy_t eplb_plan_policy(const eplb_plan_t *p) {
  return p ? p->policy : EPLB_POLICY_BALANCED;
}
const uint32_t *eplb_plan_slots_per_gpu(const eplb_plan_t *p) {
  return p ? p->slots_per_gpu : NULL;
}

const int32_t *eplb_plan_phy2log(const eplb_plan_t *p, uint32_t layer) {
  return p && layer < p->num_layers ? p->phy2log + (size_t)layer * p->num_slots : NULL;
}
const double *eplb_plan_share(const eplb_plan_t *p, uint32_t layer) {
  return p && layer < p->num_layers ? p->share + (size_t)layer * p->num_slots : NULL;
}
const double *eplb_plan_node_share(const eplb_plan_t *p, uint32_t layer) {
  return p && p->node_share && layer < p->num_layers
             ? p->node_share + (size_t)layer * p->ns_nodes * p->num_slots
             : NULL;
}
uint32_t eplb_plan_node_share_nodes(const eplb_plan_t *p) {
  return p && p->node_share ? p->ns_nodes : 0;
}
const double *eplb_plan_gpu_load(const eplb_plan_t *p, uint32_t layer) {
  return p && layer < p->num_layers ? p->gpu_load + (size_t)layer * p->num_gpus : NULL;
}

eplb_status_t eplb_plan_logcnt(const eplb_plan_t *p, uint32_t layer, uint32_t *out) {
  if (!p || !out || layer >= p->num_layers)
    return eplb__error(EPLB_EINVAL, "planner", "logcnt: bad layer %u", layer);
  memset(out, 0, p->num_experts * sizeof *out);
  const int32_t *p2l = p->phy2log + (size_t)layer * p->num_slots;
  for (uint32_t r = 0; r < p->num_slots; r++)
    out[p2l[r]]++;
  return EPLB_OK;
}

eplb_status_t eplb_plan_layer_metrics(const eplb_plan_t *p, uint32_t layer,
                                      eplb_plan_layer_metrics_t *out) {
  if (!p || !out || layer >= p->num_layers)
    return eplb__error(EPLB_EINVAL, "planner", "metrics: bad layer %u", layer);
  *out = p->metrics[layer];
  return EPLB_OK;
}

const char *eplb_plan_lower_bound_kind(const eplb_plan_t *p) {
  return p && p->uniform_bound ? "uniform-share" : "exact-share";
}

void eplb_plan_summary(const eplb_plan_t *p, eplb_plan_summary_t *out) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (!p)
    return;
  out->policy = p->policy;
  out->seconds = p->seconds;
  out->min_balancedness = 1;
  for (uint32_t l = 0; l < p->num_layers; l++) {
    const eplb_plan_layer_metrics_t *m = &p->metrics[l];
    double ratio = m->lower_bound > 0 ? m->max_load / m->lower_bound : 1.0;
    out->mean_balancedness += m->balancedness;
    out->mean_ratio += ratio;
    if (m->balancedness < out->min_balancedness)
      out->min_balancedness = m->balancedness;
    if (ratio > out->max_ratio)
      out->max_ratio = ratio;
    out->fallback_layers += m->fallback != 0;
    out->slots_moved += m->slots_moved;
  }
  if (p->num_layers) {
    out->mean_balancedness /= p->num_layers;
    out->mean_ratio /= p->num_layers;
  }
}
