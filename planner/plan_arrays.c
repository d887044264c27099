/* planner/plan_arrays.c — a plan from a serving stack's arrays (eplb/plan.h
 * eplb_plan_from_arrays): vLLM's and SGLang's phy2log, with or without
 * shares, checked as a plan file is, so that every policy (incremental
 * first) can start from the map a stack serves now. */
#include "planner/planner.h"

#include <math.h>
#include <string.h>

#define WHAT "plan from arrays"

eplb_status_t eplb_plan_arrays_init(eplb_plan_arrays_t *arrays, size_t size) {
  eplb_plan_arrays_t d;
  memset(&d, 0, sizeof d);
  d.num_nodes = 1;
  return eplb__opts_init(arrays, size, &d, sizeof d, "eplb_plan_arrays_t");
}

/* eplb_plan_arrays_default for EPLB__OPTS_TAKE, which fills a struct in place. */
static void eplb_plan_arrays_default_into(eplb_plan_arrays_t *a) {
  *a = eplb_plan_arrays_default();
}

/* The shape's numbers, checked against the limits a plan file has. */
static eplb_status_t check_shape(const eplb_plan_arrays_t *a, uint64_t *slots) {
  if (!a->num_layers || a->num_layers > EPLB_MAX_LAYERS || !a->num_experts ||
      a->num_experts > EPLB_MAX_EXPERTS || !a->num_gpus || a->num_gpus > EPLB_MAX_GPUS ||
      !a->num_nodes || a->num_gpus % a->num_nodes)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "plan from arrays: %u layers, %u experts, %u GPUs on %u nodes (each "
                       "at least 1 and at most %u / %u / %u; GPUs a multiple of nodes)",
                       a->num_layers, a->num_experts, a->num_gpus, a->num_nodes, EPLB_MAX_LAYERS,
                       EPLB_MAX_EXPERTS, EPLB_MAX_GPUS);
  uint64_t R = 0;
  for (uint32_t g = 0; g < a->num_gpus; g++) {
    uint32_t s = a->slots_per_gpu ? a->slots_per_gpu[g] : a->num_slots / a->num_gpus;
    if (!s)
      return eplb__error(EPLB_ESHAPE, "planner", "plan from arrays: GPU %u has no slot", g);
    R += s;
  }
  if (R != a->num_slots || R > EPLB_MAX_SLOTS || R < a->num_experts)
    return eplb__error(EPLB_ESHAPE, "planner",
                       "plan from arrays: %u slots (slots_per_gpu sum to %llu; at least the %u "
                       "experts, at most %u)",
                       a->num_slots, (unsigned long long)R, a->num_experts, EPLB_MAX_SLOTS);
  *slots = R;
  return EPLB_OK;
}

eplb_status_t eplb_plan_from_arrays(const eplb_plan_arrays_t *a, eplb_plan_t **out) {
  if (out)
    *out = NULL;
  eplb_plan_arrays_t own;
  eplb_status_t st =
      EPLB__OPTS_TAKE(own, a, eplb_plan_arrays_default_into, "eplb_plan_arrays_t", "planner");
  if (st != EPLB_OK)
    return st;
  a = a ? &own : NULL;
  if (!a || !out || !a->phy2log)
    return eplb__error(EPLB_EINVAL, "planner", "plan from arrays: NULL %s",
                       !a     ? "arrays"
                       : !out ? "out"
                              : "phy2log");
  uint64_t R = 0;
  st = check_shape(a, &R);
  if (st != EPLB_OK)
    return st;
  eplb__plan_shape_t shape = {a->num_layers, a->num_experts, a->num_gpus,
                              a->num_nodes,  (uint32_t)R,    a->slots_per_gpu};
  /* The layer checks are a plan file's: ids in range, every expert with a
   * replica, shares >= 0 and summing to 1 per expert. */
  size_t LR = (size_t)a->num_layers * R;
  if (a->shares) {
    /* A stack's NaN is named where it is, before any layer's sums. */
    for (size_t i = 0; i < LR; i++)
      if (!isfinite(a->shares[i]))
        return eplb__error(EPLB_EFORMAT, "planner",
                           WHAT ": layer %zu slot %zu: share %g is not finite", i / R, i % R,
                           a->shares[i]);
    return eplb__plan_from_arrays(&shape, a->policy, a->phy2log, a->shares, WHAT, out);
  }
  /* Even shares, as the stacks serve: the ids are checked first, since the
   * replica counts index by them. */
  for (size_t i = 0; i < LR; i++)
    if (a->phy2log[i] < 0 || (uint32_t)a->phy2log[i] >= a->num_experts)
      return eplb__error(EPLB_ERANGE, "planner",
                         WHAT ": layer %zu slot %zu: expert %d not in [0, %u)", i / R, i % R,
                         a->phy2log[i], a->num_experts);
  double *share = eplb__malloc_array(LR, sizeof *share);
  if (!share)
    return eplb__error(EPLB_ENOMEM, "planner", WHAT ": %zu slots", LR);
  for (uint32_t l = 0; l < a->num_layers; l++)
    eplb__uniform_shares(a->num_experts, (uint32_t)R, a->phy2log + (size_t)l * R,
                         share + (size_t)l * R);
  st = eplb__plan_from_arrays(&shape, a->policy, a->phy2log, share, WHAT, out);
  eplb__free(share);
  return st;
}
