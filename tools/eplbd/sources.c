/* tools/eplbd/sources.c — the statistics sources: a trace that is still
 * being appended (follow mode) or a runtime's shared-memory segment. A
 * source that fails is logged (once per distinct error) and retried on the
 * next period; it never stops the daemon. */
#include "eplbd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int report(eplbd_source_t *s, eplb_status_t st, const char *msg) {
  pthread_mutex_lock(&eplbd_lock);
  s->errors++;
  pthread_mutex_unlock(&eplbd_lock);
  s->have_data = 0;
  if (strcmp(msg, s->last_error))
    eplbd_log(EPLB_LOG_ERROR, "source %s: %s (skipped; retrying every period)", s->cfg.name, msg);
  snprintf(s->last_error, sizeof s->last_error, "%s", msg);
  s->bad_input = st == EPLB_EFORMAT || st == EPLB_ECORRUPT || st == EPLB_ERANGE ||
                 st == EPLB_ESHAPE || st == EPLB_ETRUNCATED || st == EPLB_EINVAL;
  return -1;
}

static int fail(eplbd_source_t *s, eplb_status_t st, const char *what) {
  char msg[256];
  snprintf(msg, sizeof msg, "%s: %s", what,
           eplb_error_detail()[0] ? eplb_error_detail() : eplb_status_str(st));
  return report(s, st, msg);
}

int eplbd_source_bad_input(const eplbd_source_t *s) { return s->bad_input; }

/* Slots per layer of the plans for E experts (as step.c plans them). */
static uint64_t replicas_of(const eplbd_source_t *s, uint32_t E) {
  uint32_t G = s->cfg.gpus;
  return s->cfg.replicas        ? s->cfg.replicas
         : s->cfg.slots_per_gpu ? (uint64_t)s->cfg.slots_per_gpu * G
                                : ((uint64_t)(E + G - 1) / G + 1) * G;
}

/* The source's shape against the configured plan, from its header alone:
 * a source the planner would refuse is refused before its statistics
 * (up to 4096 x 65535 counts) are copied or summed each period. */
static int check_shape(eplbd_source_t *s, uint32_t L, uint32_t E) {
  uint32_t G = s->cfg.gpus;
  uint64_t R = replicas_of(s, E);
  char msg[256];
  if (R < E)
    snprintf(msg, sizeof msg, "%u layers x %u experts: %llu replicas are fewer than the experts", L,
             E, (unsigned long long)R);
  else if (R > EPLB_MAX_SLOTS || R * G > EPLB_MAX_PLAN_WORK || (uint64_t)L * R > (1ull << 28))
    snprintf(msg, sizeof msg,
             "%u layers x %u experts: %llu replicas on %u GPUs: over the planner's limits (%u "
             "slots, %llu slots x GPUs, 2^28 layers x slots)",
             L, E, (unsigned long long)R, G, EPLB_MAX_SLOTS,
             (unsigned long long)EPLB_MAX_PLAN_WORK);
  else
    return 0;
  return report(s, EPLB_EINVAL, msg);
}

/* The segment's mailbox against the plan block it would have to hold: a
 * mailbox too small would be refused only after planning, every period. */
static int check_mailbox(eplbd_source_t *s) {
  if (!s->cfg.publish_shm)
    return 0;
  uint64_t L = s->num_layers, G = s->cfg.gpus, R = replicas_of(s, s->num_experts);
  uint64_t have = eplb_shm_mailbox_bytes(s->shm);
  uint64_t need = eplb_shm_plan_block_bytes((uint32_t)L, (uint32_t)G, R);
  if (need && need <= have)
    return 0;
  char msg[256];
  snprintf(msg, sizeof msg,
           "mailbox of %llu bytes cannot hold a plan of %llu layers x %llu slots on %llu GPUs "
           "(%llu bytes): create the segment with a larger mailbox, or set \"publish_shm\": false",
           (unsigned long long)have, (unsigned long long)L, (unsigned long long)R,
           (unsigned long long)G, (unsigned long long)need);
  return report(s, EPLB_EINVAL, msg);
}

void eplbd_source_init(eplbd_source_t *s, const eplbd_source_cfg_t *cfg, const eplbd_config_t *g) {
  memset(s, 0, sizeof *s);
  s->cfg = *cfg;
  s->cfg.gpus = cfg->gpus ? cfg->gpus : g->gpus;
  s->cfg.nodes = cfg->nodes ? cfg->nodes : g->nodes;
  s->cfg.replicas = cfg->replicas ? cfg->replicas : g->replicas;
  s->cfg.slots_per_gpu = cfg->slots_per_gpu ? cfg->slots_per_gpu : g->slots_per_gpu;
  s->window = cfg->window ? cfg->window : g->window;
  s->keep_plans = g->keep_plans;
  s->changed_at = eplbd_now();
}

void eplbd_source_fini(eplbd_source_t *s) {
  eplb_trace_close(s->trace);
  eplb_shm_close(s->shm);
  eplb_loads_destroy(s->loads);
  eplb_plan_destroy(s->current);
  free(s->plan_json);
  free(s->layer_balancedness);
  memset(s, 0, sizeof *s);
}

static int set_shape(eplbd_source_t *s, uint32_t L, uint32_t E) {
  if (check_shape(s, L, E))
    return -1;
  if (s->loads && (s->num_layers != L || s->num_experts != E)) {
    eplb_loads_destroy(s->loads);
    s->loads = NULL;
  }
  s->num_layers = L;
  s->num_experts = E;
  eplb_status_t st;
  if (!s->loads && (st = eplb_loads_create(L, E, &s->loads)))
    return fail(s, st, "loads");
  return 0;
}

/* The identity and size of the trace file are taken before it is opened: a
 * replacement in between is then seen at the next poll (the other order
 * would miss it for good). */
static int open_trace(eplbd_source_t *s) {
  struct stat sb;
  int known = !stat(s->cfg.trace, &sb);
  eplb_trace_open_options_t o;
  eplb_trace_open_options_default(&o);
  o.allow_torn_tail = 1;
  eplb_status_t st = eplb_trace_open(s->cfg.trace, &o, &s->trace);
  if (st)
    return fail(s, st, "trace");
  const eplb_trace_meta_t *m = eplb_trace_meta(s->trace);
  if (set_shape(s, m->num_layers, m->num_experts)) {
    eplb_trace_close(s->trace);
    s->trace = NULL;
    return -1;
  }
  s->trace_dev = known ? (uint64_t)sb.st_dev : 0;
  s->trace_ino = known ? (uint64_t)sb.st_ino : 0;
  s->trace_size = known ? (uint64_t)sb.st_size : 0;
  return 0;
}

/* Why the followed trace must be read again from its start, or NULL: the
 * path now names another file (replaced by rename, or a producer restarted
 * on the path), or the file is shorter than already read (truncated or
 * rewritten in place). The open descriptor would never show either. A path
 * that is gone keeps the file followed until another appears. */
static const char *trace_changed(eplbd_source_t *s, char *why, size_t cap) {
  struct stat sb;
  if (stat(s->cfg.trace, &sb))
    return NULL;
  if ((uint64_t)sb.st_dev != s->trace_dev || (uint64_t)sb.st_ino != s->trace_ino)
    snprintf(why, cap, "replaced by another file");
  else if ((uint64_t)sb.st_size < s->trace_size)
    snprintf(why, cap, "truncated (%llu bytes, %llu before)", (unsigned long long)sb.st_size,
             (unsigned long long)s->trace_size);
  else {
    s->trace_size = (uint64_t)sb.st_size;
    return NULL;
  }
  return why;
}

static int poll_trace(eplbd_source_t *s) {
  eplb_status_t st;
  char buf[128];
  const char *why = s->trace ? trace_changed(s, buf, sizeof buf) : NULL;
  /* Damage after open is most often a rewrite in place that kept the size:
   * read from the start at once; if the file is damaged, the open says so. */
  if (!why && s->trace && eplb_trace_refresh(s->trace, NULL))
    why = "rewritten in place (unreadable past what was read)";
  if (why) {
    eplbd_log(EPLB_LOG_WARN, "source %s: trace %s %s: reading it again from the start", s->cfg.name,
              s->cfg.trace, why);
    eplb_trace_close(s->trace);
    s->trace = NULL;
    s->have_data = 0;
    s->seen = 0;
    s->planned = UINT64_MAX; /* whatever the new file holds is new */
  }
  if (!s->trace && open_trace(s))
    return -1;
  uint64_t n = eplb_trace_num_steps(s->trace);
  if (n == s->seen && s->have_data)
    return 0;
  if (n == 0)
    return 0;
  uint64_t begin = n > s->window ? n - s->window : 0;
  if ((st = eplb_trace_window_sum(s->trace, begin, n, s->loads->values))) {
    eplb_trace_close(s->trace);
    s->trace = NULL;
    return fail(s, st, "trace window");
  }
  s->seen = n;
  s->have_data = 1;
  return 1;
}

static int poll_shm(eplbd_source_t *s) {
  eplb_status_t st;
  if (!s->shm) {
    if ((st = eplb_shm_open(s->cfg.shm, s->cfg.publish_shm ? EPLB_SHM_READ_WRITE : EPLB_SHM_READ,
                            &s->shm)))
      return fail(s, st, "segment");
    if (set_shape(s, eplb_shm_num_layers(s->shm), eplb_shm_num_experts(s->shm)) ||
        check_mailbox(s)) {
      /* Opened again (and checked again) next period: no read without loads. */
      eplb_shm_close(s->shm);
      s->shm = NULL;
      return -1;
    }
    eplbd_publish_resume_mailbox(s);
  }
  eplb_shm_stats_info_t info;
  if ((st = eplb_shm_read_stats(s->shm, &info, NULL))) {
    if (st != EPLB_EBUSY) {
      eplb_shm_close(s->shm);
      s->shm = NULL;
    }
    return fail(s, st, "segment");
  }
  if (info.sequence == 0 || (info.sequence == s->seen && s->have_data))
    return 0;
  if ((st = eplb_shm_read_stats(s->shm, &info, s->loads->values))) {
    if (st != EPLB_EBUSY) {
      eplb_shm_close(s->shm);
      s->shm = NULL;
    }
    return fail(s, st, "segment");
  }
  s->seen = info.sequence;
  s->have_data = 1;
  return 1;
}

int eplbd_source_poll(eplbd_source_t *s, double now) {
  int r = s->cfg.trace ? poll_trace(s) : poll_shm(s);
  if (r > 0) {
    if (s->last_error[0])
      eplbd_log(EPLB_LOG_INFO, "source %s: reading again", s->cfg.name);
    s->last_error[0] = 0;
    s->bad_input = 0;
    pthread_mutex_lock(&eplbd_lock);
    s->changed_at = now;
    pthread_mutex_unlock(&eplbd_lock);
  }
  return r;
}
