/* runtime/mailbox.c — rank 0's link to eplbd: the window published into the
 * shared-memory segment of eplb/shm.h, and plans taken from its mailbox. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

struct eplb__mbox {
  char *name;
  eplb_shm_t *shm;
  double *counts;    /* [LE] the window sum as published */
  uint64_t seen;     /* mailbox epoch taken last */
  uint64_t applying; /* epoch being migrated, acknowledged when done */
};

eplb_status_t eplb__mbox_open(const char *name, const eplb__geom_t *g, eplb__mbox_t **out) {
  *out = NULL;
  if (!name || g->rank != 0)
    return EPLB_OK;
  eplb__mbox_t *mb = eplb__calloc(1, sizeof *mb);
  if (!mb)
    return eplb__error(EPLB_ENOMEM, "runtime", "shared-memory statistics");
  *out = mb;
  mb->counts = eplb__calloc(g->LE, sizeof *mb->counts);
  if (!(mb->name = eplb__strdup(name)) || !mb->counts)
    return eplb__error(EPLB_ENOMEM, "runtime", "shared-memory statistics");
  return eplb_shm_create(name, g->L, g->E, 0, &mb->shm);
}

void eplb__mbox_close(eplb__mbox_t *mb) {
  if (!mb)
    return;
  if (mb->shm) {
    eplb_shm_close(mb->shm);
    eplb_shm_unlink(mb->name);
  }
  eplb__free(mb->counts);
  eplb__free(mb->name);
  eplb__free(mb);
}

bool eplb__mbox_plan_waiting(eplb__mbox_t *mb) {
  uint64_t epoch = 0;
  return eplb_shm_mailbox_epoch(mb->shm, &epoch) == EPLB_OK && epoch > mb->seen;
}

void eplb__mbox_publish(eplb__mbox_t *mb, const eplb__stats_t *st) {
  uint64_t steps = eplb__stats_steps(st);
  eplb__stats_window(st, EPLB_WINDOW_SUM, mb->counts);
  eplb_status_t s = eplb_shm_publish_stats(mb->shm, steps ? steps - 1 : 0,
                                           eplb__stats_window_steps(st), mb->counts);
  if (s != EPLB_OK)
    eplb__log(EPLB_LOG_WARN, "runtime", "%s: publishing statistics failed: %s", mb->name,
              eplb_error_detail());
}

eplb_status_t eplb__mbox_take_plan(eplb__mbox_t *mb, const eplb__geom_t *g, eplb_plan_t **out) {
  eplb_plan_t *plan = NULL;
  uint64_t epoch = 0;
  eplb_status_t st = eplb_shm_read_plan(mb->shm, &epoch, &plan);
  if (st == EPLB_OK && !plan)
    st = eplb__error(EPLB_ESTATE, "runtime", "%s: the mailbox emptied", mb->name);
  if (st == EPLB_OK) {
    char what[160];
    snprintf(what, sizeof what, "%s: posted plan", mb->name);
    st = eplb__live_plan_fits(g, plan, what);
  }
  if (epoch > mb->seen)
    mb->seen = epoch; /* a bad plan is not retried: the daemon posts a new epoch */
  if (st != EPLB_OK)
    eplb__log(EPLB_LOG_ERROR, "runtime", "mailbox plan %llu rejected: %s",
              (unsigned long long)epoch, eplb_error_detail());
  mb->applying = st == EPLB_OK ? epoch : 0;
  if (st == EPLB_OK)
    *out = plan;
  else
    eplb_plan_destroy(plan);
  return st;
}

void eplb__mbox_ack(eplb__mbox_t *mb) {
  if (mb && mb->applying) {
    eplb_shm_ack_plan(mb->shm, mb->applying);
    mb->applying = 0;
  }
}
