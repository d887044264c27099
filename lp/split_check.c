/* lp/split_check.c — input validation and certificate helpers shared by the
 * exact and the GLPK split solvers, so both report bad input identically. */
#include "lp/lp.h"

#include <math.h>
#include <string.h>

/* Keeps node and arc counts of the flow graph far from uint32 overflow. */
#define SPLIT_MAX_DIM (1u << 28)

eplb_status_t eplb__grow(void **ptr, size_t *cap, size_t n, size_t size) {
  if (*cap >= n && *ptr)
    return EPLB_OK;
  void *p = eplb__malloc_array(n ? n : 1, size);
  if (!p)
    return EPLB_ENOMEM;
  eplb__free(*ptr);
  *ptr = p;
  *cap = n;
  return EPLB_OK;
}

eplb_status_t eplb__grow_all(size_t *cap, size_t need, const eplb__array_ref_t *list, size_t n) {
  void *fresh[8] = {0};
  size_t i;
  if (*cap >= need)
    return EPLB_OK;
  for (i = 0; i < n; i++)
    if (!(fresh[i] = eplb__malloc_array(need, list[i].size)))
      break;
  if (i < n) {
    for (size_t j = 0; j < i; j++)
      eplb__free(fresh[j]);
    return EPLB_ENOMEM;
  }
  for (i = 0; i < n; i++) {
    eplb__free(*list[i].p);
    *list[i].p = fresh[i];
  }
  *cap = need;
  return EPLB_OK;
}

eplb_status_t eplb__split_check(const eplb_split_problem_t *p, const double *loads,
                                const eplb_split_result_t *out, bool integer) {
  if (!p || !loads || !out)
    return eplb__error(EPLB_EINVAL, "lp", "split: NULL %s",
                       !p       ? "problem"
                       : !loads ? "loads"
                                : "result");
  if (!out->share || !out->gpu_load)
    return eplb__error(EPLB_EINVAL, "lp", "split: result.%s is NULL",
                       !out->share ? "share" : "gpu_load");
  if (!p->phy2log || !p->slots_per_gpu)
    return eplb__error(EPLB_EINVAL, "lp", "split: problem.%s is NULL",
                       !p->phy2log ? "phy2log" : "slots_per_gpu");
  if (!p->num_experts || !p->num_gpus || !p->num_slots)
    return eplb__error(EPLB_EINVAL, "lp",
                       "split: num_experts=%u num_gpus=%u num_slots=%u: each must be >= 1",
                       p->num_experts, p->num_gpus, p->num_slots);
  if (p->num_experts > SPLIT_MAX_DIM || p->num_gpus > SPLIT_MAX_DIM || p->num_slots > SPLIT_MAX_DIM)
    return eplb__error(EPLB_ERANGE, "lp",
                       "split: num_experts=%u num_gpus=%u num_slots=%u: each must be <= %u",
                       p->num_experts, p->num_gpus, p->num_slots, SPLIT_MAX_DIM);
  uint64_t sum = 0;
  for (uint32_t g = 0; g < p->num_gpus; g++)
    sum += p->slots_per_gpu[g];
  if (sum != p->num_slots)
    return eplb__error(EPLB_ESHAPE, "lp", "split: slots_per_gpu sums to %llu, num_slots is %u",
                       (unsigned long long)sum, p->num_slots);
  /* Each check is first one branch-free pass the compiler vectorises (this
   * runs on every solve); only a failing one looks for the first culprit. */
  uint32_t big = 0;
  for (uint32_t r = 0; r < p->num_slots; r++)
    big |= p->phy2log[r] >= p->num_experts;
  for (uint32_t r = 0; big && r < p->num_slots; r++)
    if (p->phy2log[r] >= p->num_experts)
      return eplb__error(EPLB_ERANGE, "lp",
                         "split: phy2log[%u] = %u: expert id out of range [0, %u)", r,
                         p->phy2log[r], p->num_experts);
  /* A load is finite and >= 0 when its bits b are below 0x7ff0...0 (or it
   * is -0.0): b | (b + 2^52) has the top bit clear for all of them but
   * -0.0, which the second pass lets through. */
  uint64_t seen = 0;
  for (uint32_t e = 0; e < p->num_experts; e++) {
    uint64_t b;
    memcpy(&b, &loads[e], sizeof b);
    seen |= b | (b + (UINT64_C(1) << 52));
  }
  for (uint32_t e = 0; e < p->num_experts && (integer || seen >> 63); e++) {
    double w = loads[e];
    if (!(w >= 0) || !isfinite(w))
      return eplb__error(EPLB_EINVAL, "lp", "split: loads[%u] = %g: must be finite and >= 0", e, w);
    if (integer && (w != floor(w) || w > 9007199254740992.0))
      return eplb__error(EPLB_EINVAL, "lp",
                         "split: loads[%u] = %.17g: integer mode needs whole tokens <= 2^53", e, w);
  }
  return EPLB_OK;
}

double eplb__split_ratio(const eplb_split_problem_t *p, const double *loads, const uint8_t *set,
                         uint8_t *gmark, uint32_t *na, uint32_t *ng) {
  uint32_t r = 0;
  double w = 0.0;
  *na = 0;
  *ng = 0;
  for (uint32_t e = 0; e < p->num_experts; e++)
    if (set[e]) {
      w += loads[e];
      ++*na;
    }
  for (uint32_t g = 0; g < p->num_gpus; g++) {
    uint8_t hit = 0;
    for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++)
      hit |= set[p->phy2log[r]];
    gmark[g] = hit;
    *ng += hit;
  }
  return *ng ? w / (double)*ng : 0.0;
}

void eplb__split_certificate(const eplb_split_problem_t *p, const double *loads, const uint8_t *set,
                             uint8_t *gmark, eplb_split_result_t *out) {
  uint32_t na, ng;
  out->t_star = eplb__split_ratio(p, loads, set, gmark, &na, &ng);
  out->num_bottleneck_experts = na;
  out->num_bottleneck_gpus = ng;
  if (out->bottleneck_experts)
    memcpy(out->bottleneck_experts, set, p->num_experts);
  if (out->bottleneck_gpus)
    memcpy(out->bottleneck_gpus, gmark, p->num_gpus);
}

eplb_status_t eplb__split_count_replicas(const eplb_split_problem_t *p, uint32_t *count) {
  memset(count, 0, (size_t)p->num_experts * sizeof *count);
  for (uint32_t r = 0; r < p->num_slots; r++)
    count[p->phy2log[r]]++;
  for (uint32_t e = 0; e < p->num_experts; e++)
    if (!count[e])
      return eplb__error(EPLB_EINVAL, "lp", "split: expert %u has no replica in phy2log", e);
  return EPLB_OK;
}
