/* lp/split_mask.c — a split with slots out of service (eplb_split_solve_in_service):
 * solved as the placement without them, then written back with share 0 on
 * those slots. The runtime's continuous re-placement takes a slot out of
 * service while its weights are copied, so the per-batch split routes
 * around it; compacting keeps the solvers' graphs free of slots that can
 * carry nothing (a slot with capacity 0 would still join N(A)). */
#include "lp/lp.h"

#include <string.h>

struct eplb__split_mask {
  size_t cap_r, cap_g, cap_ns;
  uint32_t *p2l;   /* [R'] the slots in service, in slot order */
  uint32_t *idx;   /* [R'] their slot */
  double *share;   /* [R'] */
  double *amount;  /* [R'] */
  uint32_t *slots; /* [G] slots in service per GPU */
  double *ns;      /* [N][R'] */
};

void eplb__split_mask_free(struct eplb__split_mask *w) {
  if (!w)
    return;
  eplb__free(w->p2l);
  eplb__free(w->idx);
  eplb__free(w->share);
  eplb__free(w->amount);
  eplb__free(w->slots);
  eplb__free(w->ns);
  eplb__free(w);
}

/* The compacted problem into w and *cp; EPLB_EINVAL/ESHAPE for what the
 * compaction itself needs (the solver checks the rest). */
static eplb_status_t compact(struct eplb__split_mask *w, const eplb_split_problem_t *p,
                             const uint8_t *oos, eplb_split_problem_t *cp) {
  uint32_t R = p->num_slots, G = p->num_gpus;
  if (!p->phy2log || !p->slots_per_gpu || !R || !G || R > (1u << 28) || G > (1u << 28))
    return eplb__error(EPLB_EINVAL, "lp",
                       "split: a problem with out_of_service needs phy2log, "
                       "slots_per_gpu and 1 <= R, G <= 2^28");
  if (eplb__grow_all(&w->cap_r, R,
                     (const eplb__array_ref_t[]){{(void **)&w->p2l, sizeof *w->p2l},
                                                 {(void **)&w->idx, sizeof *w->idx},
                                                 {(void **)&w->share, sizeof *w->share},
                                                 {(void **)&w->amount, sizeof *w->amount}},
                     4) ||
      eplb__grow_all(&w->cap_g, G,
                     (const eplb__array_ref_t[]){{(void **)&w->slots, sizeof *w->slots}}, 1))
    return eplb__error(EPLB_ENOMEM, "lp", "split: out-of-service workspace of %u slots", R);
  uint32_t r = 0, n = 0;
  for (uint32_t g = 0; g < G; g++) {
    uint32_t kept = 0;
    for (uint32_t j = 0; j < p->slots_per_gpu[g]; j++, r++) {
      if (r >= R)
        return eplb__error(EPLB_ESHAPE, "lp", "split: slots_per_gpu sums past num_slots %u", R);
      if (oos[r])
        continue;
      w->p2l[n] = p->phy2log[r];
      w->idx[n++] = r;
      kept++;
    }
    w->slots[g] = kept;
  }
  if (r != R)
    return eplb__error(EPLB_ESHAPE, "lp", "split: slots_per_gpu sums to %u, num_slots is %u", r, R);
  if (!n)
    return eplb__error(EPLB_EINVAL, "lp", "split: every slot is out of service");
  *cp = (eplb_split_problem_t){p->num_experts, G, n, w->p2l, w->slots};
  return EPLB_OK;
}

eplb_status_t eplb_split_solve_in_service(eplb_split_t *split, const eplb_split_problem_t *p,
                                          const uint8_t *oos, const eplb_split_local_t *local,
                                          const double *loads, eplb_split_result_t *out,
                                          double *node_share, double *cross) {
  if (!split || !p || !oos || !out || !out->share || (local && !node_share))
    return eplb__error(EPLB_EINVAL, "lp", "split_in_service: NULL %s",
                       !split        ? "handle"
                       : !p          ? "problem"
                       : !oos        ? "out_of_service"
                       : !out        ? "result"
                       : !out->share ? "result.share"
                                     : "node_share");
  struct eplb__split_mask **slot = eplb__split_mask_ws(split);
  if (!*slot && !(*slot = eplb__calloc(1, sizeof **slot)))
    return eplb__error(EPLB_ENOMEM, "lp", "split: out-of-service workspace");
  struct eplb__split_mask *w = *slot;
  eplb_split_problem_t cp;
  eplb_status_t st = compact(w, p, oos, &cp);
  if (st != EPLB_OK)
    return st;
  uint32_t R = p->num_slots, n = cp.num_slots, N = local ? local->num_nodes : 0;
  eplb_split_result_t cr = *out;
  cr.share = w->share;
  cr.amount = out->amount ? w->amount : NULL;
  if (local) {
    if (eplb__grow((void **)&w->ns, &w->cap_ns, (size_t)N * n, sizeof *w->ns) != EPLB_OK)
      return eplb__error(EPLB_ENOMEM, "lp", "split: node shares of %u x %u slots", N, n);
    st = eplb_split_solve_local(split, &cp, local, &cr, w->ns, cross);
  } else {
    st = eplb_split_solve(split, &cp, loads, &cr);
  }
  if (st != EPLB_OK)
    return st;
  /* The scalars and the [E], [G] arrays are the compact solve's as they are. */
  double *share = out->share, *amount = out->amount;
  *out = cr;
  out->share = share;
  out->amount = amount;
  memset(share, 0, (size_t)R * sizeof *share);
  if (amount)
    memset(amount, 0, (size_t)R * sizeof *amount);
  for (uint32_t j = 0; j < n; j++) {
    share[w->idx[j]] = w->share[j];
    if (amount)
      amount[w->idx[j]] = w->amount[j];
  }
  for (uint32_t v = 0; v < N; v++) {
    double *row = node_share + (size_t)v * R;
    memset(row, 0, (size_t)R * sizeof *row);
    for (uint32_t j = 0; j < n; j++)
      row[w->idx[j]] = w->ns[(size_t)v * n + j];
  }
  return EPLB_OK;
}
