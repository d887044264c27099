/* runtime/mailbox.c — rank 0's link to eplbd: the window published into the
 * shared-memory segment of eplb/shm.h, and plans taken from its mailbox. */
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

eplb_status_t eplb__shm_open(eplb_runtime_t *rt) {
  if (!rt->shm_name || rt->rank != 0)
    return EPLB_OK;
  rt->shm_counts = eplb__calloc(rt->LE, sizeof *rt->shm_counts);
  if (!rt->shm_counts)
    return eplb__error(EPLB_ENOMEM, "runtime", "shared-memory statistics");
  return eplb_shm_create(rt->shm_name, rt->L, rt->E, 0, &rt->shm);
}

void eplb__shm_close(eplb_runtime_t *rt) {
  if (rt->shm) {
    eplb_shm_close(rt->shm);
    eplb_shm_unlink(rt->shm_name);
  }
  rt->shm = NULL;
  eplb__free(rt->shm_counts);
  rt->shm_counts = NULL;
}

bool eplb__shm_plan_waiting(eplb_runtime_t *rt) {
  uint64_t epoch = 0;
  if (rt->planning || rt->mig_n > 0 || rt->mailbox_ready)
    return false;
  return eplb_shm_mailbox_epoch(rt->shm, &epoch) == EPLB_OK && epoch > rt->shm_seen;
}

void eplb__shm_publish(eplb_runtime_t *rt) {
  uint64_t W = rt->cfg.policy.window_steps;
  for (size_t i = 0; i < rt->LE; i++)
    rt->shm_counts[i] = (double)rt->wsum[i];
  eplb_status_t st = eplb_shm_publish_stats(rt->shm, rt->ring_n ? rt->ring_n - 1 : 0,
                                            rt->ring_n < W ? rt->ring_n : W, rt->shm_counts);
  if (st != EPLB_OK)
    eplb__log(EPLB_LOG_WARN, "runtime", "%s: publishing statistics failed: %s", rt->shm_name,
              eplb_error_detail());
}

void eplb__shm_take_plan(eplb_runtime_t *rt) {
  eplb_plan_t *plan = NULL;
  uint64_t epoch = 0;
  double t0 = eplb__now();
  eplb_status_t st = eplb_shm_read_plan(rt->shm, &epoch, &plan);
  if (st == EPLB_OK && !plan)
    st = eplb__error(EPLB_ESTATE, "runtime", "%s: the mailbox emptied", rt->shm_name);
  if (st == EPLB_OK) {
    char what[160];
    snprintf(what, sizeof what, "%s: posted plan", rt->shm_name);
    st = eplb__runtime_plan_fits(rt, plan, what);
  }
  if (epoch > rt->shm_seen)
    rt->shm_seen = epoch; /* a bad plan is not retried: the daemon posts a new epoch */
  memset(rt->next_flag, 0, rt->L);
  for (uint32_t l = 0; st == EPLB_OK && l < rt->L; l++) {
    size_t o = (size_t)l * rt->R;
    const int32_t *np = eplb_plan_phy2log(plan, l);
    const double *ns = eplb_plan_share(plan, l);
    memcpy(rt->next_p2l + o, np, rt->R * sizeof *np);
    memcpy(rt->next_share + o, ns, rt->R * sizeof *ns);
    /* The segment's plan block has no node shares: a layer dispatching by
     * node shares switches to the posted global shares even if they match. */
    rt->next_flag[l] = rt->has_ns[l];
    for (uint32_t r = 0; r < rt->R; r++)
      if (np[r] != rt->phy2log[o + r] || fabs(ns[r] - rt->share[o + r]) > 1e-12)
        rt->next_flag[l] = 1;
  }
  if (st != EPLB_OK)
    eplb__log(EPLB_LOG_ERROR, "runtime", "mailbox plan %llu rejected: %s",
              (unsigned long long)epoch, eplb_error_detail());
  rt->shm_applying = st == EPLB_OK ? epoch : 0;
  rt->plan_status = st;
  rt->plan_seconds = eplb__now() - t0;
  eplb_plan_destroy(plan);
}

void eplb__shm_ack(eplb_runtime_t *rt) {
  if (rt->shm && rt->shm_applying) {
    eplb_shm_ack_plan(rt->shm, rt->shm_applying);
    rt->shm_applying = 0;
  }
}
