/* runtime/device.c — the device side of the runtime (cfg.device): the
 * device ring of per-step counts, every layer's double-buffered dispatch
 * tables, the asynchronous copy-back of each step's counts into the host
 * statistics, and the table uploads of a plan switch.
 *
 * Written once over the backend table (eplb__dev_ops_t), so the emulated
 * device in CI runs the very protocol the GPU runs. Nothing here waits for
 * the device in the decode step: record and map only enqueue; step_end
 * enqueues the step's copy and feeds the rows whose events have completed,
 * and waits only when `window` copies are in flight. */
#include "runtime/runtime.h"
#include "kernels/kernels.h"

#include "eplb_config.h"

#include <stdio.h>
#include <string.h>

struct eplb__device {
  const eplb__dev_ops_t *ops;
  void *impl;
  void *stream;
  uint32_t W, L, E, R, k;
  size_t LE;
  size_t tab_words; /* one (layer, buffer) table: off [E+1], slot, alias, prob [R] */
  void *dmem;       /* device: ring rows, step, dropped, bad, epochs, tables */
  size_t dmem_bytes;
  eplb_cuda_ring_t ring;      /* pointers into dmem */
  eplb_cuda_dispatch_t *disp; /* [L] pointers into dmem */
  uint32_t *bad;              /* device, one uint32 */
  uint32_t *rows;             /* pinned [W][LE]: the copied-back ring rows */
  uint32_t *stage;            /* pinned [L][tab_words]: table uploads */
  void **events;              /* [W] one per row in flight */
  void **upload_event;        /* [L] a layer's last upload: a switch never waits for others' */
  uint8_t *upload_pending;
  uint32_t *cur_tokens;  /* [L] tokens recorded this step */
  uint32_t *pend_tokens; /* [W][L] tokens of each row in flight */
  uint64_t *pend_step;   /* [W] the step_end that closed the row */
  uint64_t head, tail;   /* rows closed, rows fed: rows in flight are tail .. head-1 */
  uint32_t *epoch;       /* [L] each layer's device epoch as enqueued */
  uint8_t *flip_pending; /* [L] a flip that failed, retried at the next step_end */
  size_t stage_words;    /* one layer's staging: its table, then p2l [R], share [R] (split) */
  /* The per-batch split (cfg.split_per_batch): its inputs double-buffered
   * per layer like the tables, [L][2][R], half pl_cur[l] live; a plan
   * switch stages the other half and its flip (pl_next) makes it live. */
  bool split;
  uint32_t P;             /* GPUs of the placement */
  int32_t *p2l;           /* device [L][2][R] */
  double *share;          /* device [L][2][R], then t_star [L] */
  double *t_star;         /* device [L] */
  uint32_t *sword;        /* device: status [L], then msg [E + 3], then a step word (0) */
  uint32_t *msg;          /* device: the call's counts [E], bad ids, check word, its square */
  eplb_cuda_ring_t sring; /* the call's counts as a one-row ring (dropped: msg[E]) */
  void *split_ws, *tab_ws, *quota_ws; /* device workspaces (quota: the route's map) */
  /* Multi-rank split (comm): every call all-reduces msg, whose tail comes
   * from tails (pinned, constant after create): per layer {0, w, w^2} and
   * {1, w, w^2} (failed here), then {1, 0, 0} (a bad layer). */
  eplb__comm_t *comm;
  uint32_t ranks, *tails;    /* ranks: summed by the all-reduce (1 without comm) */
  bool watch;                /* with a communicator: waits poll under its watchdog */
  uint8_t *pl_cur, *pl_next; /* [L] */
  eplb_runtime_device_stats_t st;
};

static eplb__device_t *dev_of(const eplb_runtime_t *rt, const char *what, eplb_status_t *st) {
  if (!rt) {
    *st = eplb__error(EPLB_EINVAL, "runtime", "%s: NULL runtime", what);
    return NULL;
  }
  if (!rt->dev) {
    *st = eplb__error(EPLB_ESTATE, "runtime", "%s: the runtime has no device (cfg.device.kind)",
                      what);
    return NULL;
  }
  *st = EPLB_OK;
  return rt->dev;
}

/* Lays the device allocation out: ring rows, four scalars, epochs [L],
 * then the tables; returns its size in bytes. Every array is 32-bit. */
static size_t layout(eplb__device_t *d, uint32_t *base) {
  size_t w = 0;
  d->ring = (eplb_cuda_ring_t){base ? base + w : NULL, NULL, NULL, d->W, d->L, d->E};
  w += (size_t)d->W * d->LE;
  if (base)
    d->ring.step = base + w, d->ring.dropped = base + w + 1, d->bad = base + w + 2;
  w += 4;
  size_t epochs = w;
  w += d->L;
  for (uint32_t l = 0; l < d->L; l++) {
    eplb_cuda_dispatch_t *x = &d->disp[l];
    x->num_experts = d->E, x->num_slots = d->R;
    x->epoch = base ? base + epochs + l : NULL;
    for (int b = 0; b < 2; b++, w += d->tab_words) {
      uint32_t *t = base ? base + w : NULL;
      x->buf[b].off = t;
      x->buf[b].slot = base ? (int32_t *)(t + d->E + 1) : NULL;
      x->buf[b].alias = base ? (int32_t *)(t + d->E + 1 + d->R) : NULL;
      x->buf[b].prob = base ? t + d->E + 1 + 2 * (size_t)d->R : NULL;
    }
  }
  return w * sizeof(uint32_t);
}

static eplb_status_t alloc_host(eplb__device_t *d) {
  d->disp = eplb__calloc(d->L, sizeof *d->disp);
  d->events = eplb__calloc(d->W, sizeof *d->events);
  d->cur_tokens = eplb__calloc(d->L, sizeof *d->cur_tokens);
  d->pend_tokens = eplb__calloc((size_t)d->W * d->L, sizeof *d->pend_tokens);
  d->pend_step = eplb__calloc(d->W, sizeof *d->pend_step);
  d->epoch = eplb__calloc(d->L, sizeof *d->epoch);
  d->flip_pending = eplb__calloc(d->L, 1);
  d->pl_cur = eplb__calloc(d->L, 1);
  d->pl_next = eplb__calloc(d->L, 1);
  d->upload_event = eplb__calloc(d->L, sizeof *d->upload_event);
  d->upload_pending = eplb__calloc(d->L, 1);
  if (!d->disp || !d->events || !d->cur_tokens || !d->pend_tokens || !d->pend_step || !d->epoch ||
      !d->flip_pending || !d->pl_cur || !d->pl_next || !d->upload_event || !d->upload_pending)
    return eplb__error(EPLB_ENOMEM, "runtime", "device: host state of %u layers", d->L);
  return EPLB_OK;
}

/* The check word of a call (as runtime/batch.c's): ranks must be at the
 * same layer of the same shape. */
static uint32_t check_word(uint32_t layer, uint32_t E) {
  uint32_t v[2] = {layer, E};
  return (uint32_t)eplb__fnv1a(EPLB__FNV1A_BASIS, v, sizeof v) | 1u;
}

/* The pinned tails of the multi-rank messages (see the struct). */
static eplb_status_t alloc_tails(eplb__device_t *d) {
  size_t rows = 2 * (size_t)d->L + 1;
  eplb_status_t st = d->ops->host_alloc(d->impl, (void **)&d->tails, rows * 3 * sizeof *d->tails);
  if (st != EPLB_OK)
    return st;
  for (size_t i = 0; i < rows; i++) {
    uint32_t w = i < rows - 1 ? check_word((uint32_t)(i / 2), d->E) : 0, *t = d->tails + i * 3;
    t[0] = i == rows - 1 || i % 2, t[1] = w, t[2] = w * w;
  }
  return EPLB_OK;
}

/* The split's device memory: inputs, outputs, the call's counts, workspaces. */
static eplb_status_t alloc_split(eplb__device_t *d) {
  const eplb__dev_ops_t *o = d->ops;
  size_t LR2 = (size_t)d->L * 2 * d->R, words = (size_t)d->L + d->E + 4;
  size_t ws = eplb__cuda_split_workspace_bytes(d->E, d->P, d->R / d->P);
  size_t tws = eplb__cuda_table_workspace_bytes(d->E, d->R);
  size_t qws = eplb__quota_workspace_bytes(d->E, d->R);
  eplb_status_t st;
  if (!ws || !tws)
    return eplb__error(EPLB_ERANGE, "runtime", "device split: %u experts x %u slots", d->E, d->R);
  if ((st = o->alloc(d->impl, (void **)&d->p2l, LR2 * sizeof *d->p2l)) != EPLB_OK ||
      (st = o->alloc(d->impl, (void **)&d->share, (LR2 + d->L) * sizeof *d->share)) != EPLB_OK ||
      (st = o->alloc(d->impl, (void **)&d->sword, words * sizeof *d->sword)) != EPLB_OK ||
      (st = o->alloc(d->impl, &d->split_ws, ws)) != EPLB_OK ||
      (st = o->alloc(d->impl, &d->tab_ws, tws)) != EPLB_OK ||
      (st = o->alloc(d->impl, &d->quota_ws, qws)) != EPLB_OK)
    return st;
  if (d->comm && (st = alloc_tails(d)) != EPLB_OK)
    return st;
  d->t_star = d->share + LR2;
  uint32_t *c = d->msg = d->sword + d->L;
  d->sring = (eplb_cuda_ring_t){c, c + d->E + 3, c + d->E, 1, 1, d->E};
  /* The step word must read 0 (row 0): zero all of it. */
  if ((st = o->memset(d->impl, d->sword, words * sizeof *d->sword, d->stream)) != EPLB_OK)
    return st;
  return o->memset(d->impl, d->share, (LR2 + d->L) * sizeof *d->share, d->stream);
}

/* Device and pinned memory, events; the device memory zeroed on the stream. */
static eplb_status_t alloc_device(eplb__device_t *d) {
  const eplb__dev_ops_t *o = d->ops;
  eplb_status_t st;
  d->dmem_bytes = layout(d, NULL);
  if ((st = o->alloc(d->impl, &d->dmem, d->dmem_bytes)) != EPLB_OK)
    return st;
  layout(d, d->dmem);
  if ((st = o->memset(d->impl, d->dmem, d->dmem_bytes, d->stream)) != EPLB_OK)
    return st;
  if ((st = o->host_alloc(d->impl, (void **)&d->rows, d->W * d->LE * sizeof *d->rows)) != EPLB_OK)
    return st;
  /* The staging, then 4 words for eplb_runtime_device_counters. */
  if ((st = o->host_alloc(d->impl, (void **)&d->stage,
                          (d->L * d->stage_words + 4) * sizeof *d->stage)) != EPLB_OK)
    return st;
  if (d->split && (st = alloc_split(d)) != EPLB_OK)
    return st;
  for (uint32_t i = 0; i < d->W; i++)
    if ((st = o->event_create(d->impl, &d->events[i])) != EPLB_OK)
      return st;
  for (uint32_t l = 0; l < d->L; l++)
    if ((st = o->event_create(d->impl, &d->upload_event[l])) != EPLB_OK)
      return st;
  return EPLB_OK;
}

/* Waits for an event (NULL: everything on the stream). Behind the split's
 * NCCL all-reduce the stream may wait for a peer that never comes: the wait
 * then polls under the NCCL watchdog, which aborts the communicator (its
 * kernels end). */
static eplb_status_t wait_event(eplb__device_t *d, void *ev) {
  if (!d->watch)
    return ev ? d->ops->event_sync(d->impl, ev) : d->ops->stream_sync(d->impl, d->stream);
  double t0 = eplb__now();
  for (;;) {
    eplb_status_t st = EPLB_OK;
    int q =
        ev ? d->ops->event_query(d->impl, ev, &st) : d->ops->stream_query(d->impl, d->stream, &st);
    if (q)
      return q > 0 ? EPLB_OK : st;
    if ((st = eplb__comm_stream_watch(d->comm, t0)) != EPLB_OK)
      return st;
  }
}

/* Waits for layer l's last upload (its staging is then free). */
static eplb_status_t upload_wait(eplb__device_t *d, uint32_t l) {
  if (!d->upload_pending[l])
    return EPLB_OK;
  d->upload_pending[l] = 0;
  return wait_event(d, d->upload_event[l]);
}

void eplb__device_close(eplb__device_t *d) {
  if (!d)
    return;
  const eplb__dev_ops_t *o = d->ops;
  /* Copies in flight write into the pinned rows and uploads read the
   * staging: both must be done before the memory goes. */
  if (d->impl) {
    for (uint64_t i = d->tail; d->events && i < d->head; i++)
      (void)wait_event(d, d->events[i % d->W]);
    for (uint32_t l = 0; d->upload_event && d->upload_pending && l < d->L; l++)
      (void)upload_wait(d, l);
    for (uint32_t i = 0; d->events && i < d->W; i++)
      if (d->events[i])
        o->event_destroy(d->impl, d->events[i]);
    for (uint32_t l = 0; d->upload_event && l < d->L; l++)
      if (d->upload_event[l])
        o->event_destroy(d->impl, d->upload_event[l]);
    if (d->rows)
      o->host_free(d->impl, d->rows);
    if (d->stage)
      o->host_free(d->impl, d->stage);
    if (d->tails)
      o->host_free(d->impl, d->tails);
    if (d->dmem)
      o->free(d->impl, d->dmem);
    void *dev[] = {d->p2l, d->share, d->sword, d->split_ws, d->tab_ws, d->quota_ws};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
      if (dev[i])
        o->free(d->impl, dev[i]);
    o->close(d->impl);
  }
  void *ptrs[] = {d->disp,      d->events,       d->cur_tokens,     d->pend_tokens,
                  d->pend_step, d->epoch,        d->flip_pending,   d->pl_cur,
                  d->pl_next,   d->upload_event, d->upload_pending, d};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    eplb__free(ptrs[i]);
}

/* The device split has no locality stage: with several nodes it needs
 * local_first 0. Its all-reduce runs on the stream: cuda needs NCCL (MPI
 * reduces host memory: a host round trip per layer); the emulated device,
 * whose memory is host memory, takes any communicator. */
static eplb_status_t check_split(const eplb_runtime_t *rt) {
  if (!rt->split_on)
    return EPLB_OK;
  if (rt->g.N > 1 && rt->cfg.local_first)
    return eplb__error(EPLB_EUNSUPPORTED, "runtime",
                       "config: the per-batch split on the device has no locality stage: with %u "
                       "nodes it needs local_first 0 (or split_per_batch 0)",
                       rt->g.N);
  if (rt->cfg.device.kind == EPLB_DEVICE_CUDA && rt->comm && rt->cfg.comm.kind != EPLB_COMM_NCCL)
    return eplb__error(EPLB_EUNSUPPORTED, "runtime",
                       "config: the per-batch split on a cuda device all-reduces on the stream: "
                       "it needs comm kind NCCL (or split_per_batch 0)");
  return EPLB_OK;
}

static eplb_status_t pick_backend(const eplb_runtime_device_t *c, const eplb__dev_ops_t **out) {
  *out = NULL;
  if (c->kind == EPLB_DEVICE_EMULATED) {
    *out = eplb__dev_emu_ops();
    return EPLB_OK;
  }
  if (c->kind != EPLB_DEVICE_CUDA)
    return eplb__error(EPLB_EINVAL, "runtime", "config: device kind %d unknown", (int)c->kind);
  *out = eplb__dev_cuda_ops();
  if (!*out)
    return eplb__error(EPLB_EUNSUPPORTED, "runtime", "config: device cuda: built without CUDA");
  return EPLB_OK;
}

eplb_status_t eplb__device_open(eplb_runtime_t *rt) {
  const eplb_runtime_device_t *c = &rt->cfg.device;
  const eplb__geom_t *g = &rt->g;
  if (c->kind == EPLB_DEVICE_NONE)
    return EPLB_OK;
  const eplb__dev_ops_t *ops;
  eplb_status_t st = pick_backend(c, &ops);
  if (st != EPLB_OK)
    return st;
  if (!c->window || c->window > 1024)
    return eplb__error(EPLB_EINVAL, "runtime", "config: device window %u not in [1, 1024]",
                       c->window);
  if (g->E > 8192) /* the count kernel's shared-memory histogram */
    return eplb__error(EPLB_ERANGE, "runtime", "config: device: %u experts > 8192", g->E);
  if ((st = check_split(rt)) != EPLB_OK)
    return st;
  eplb__device_t *d = eplb__calloc(1, sizeof *d);
  if (!d)
    return eplb__error(EPLB_ENOMEM, "runtime", "device");
  rt->dev = d; /* from here free_all closes it, whatever fails */
  d->ops = ops, d->stream = c->stream, d->W = c->window;
  d->L = g->L, d->E = g->E, d->R = g->R, d->k = g->k, d->LE = g->LE;
  d->tab_words = (size_t)g->E + 1 + 3 * (size_t)g->R;
  d->split = rt->split_on, d->P = g->P;
  d->comm = rt->split_on ? rt->comm : NULL, d->ranks = d->comm ? g->P : 1;
  d->watch = d->comm != NULL; /* the emulated device runs the same polling */
  d->stage_words = d->tab_words + (d->split ? 3 * (size_t)g->R : 0);
  if ((st = alloc_host(d)) != EPLB_OK)
    return st;
  if ((st = ops->open(&d->impl, c)) != EPLB_OK)
    return st;
  if ((st = alloc_device(d)) != EPLB_OK)
    return st;
  /* Every layer's live table into buffer 0 (epoch 0); create may wait. */
  for (uint32_t l = 0; l < g->L && st == EPLB_OK; l++) {
    d->epoch[l] = 1, d->pl_cur[l] = 1; /* stage writes the idle halves: 0 */
    st = eplb__device_stage(rt, l, eplb__live_table(rt->live, l), eplb__live_p2l(rt->live, l),
                            eplb__live_share(rt->live, l));
    d->epoch[l] = 0, d->pl_cur[l] = 0, d->pl_next[l] = 0;
  }
  for (uint32_t l = 0; l < g->L; l++) {
    eplb_status_t w = upload_wait(d, l);
    st = st == EPLB_OK ? w : st;
  }
  d->st.uploads = 0; /* count the switches' uploads, not create's */
  return st;
}

/* ---- tables ---------------------------------------------------------------- */

/* The placement and shares of a staged table, into the idle half of the
 * split's inputs (through the layer's pinned staging `s`, 3R words). */
static eplb_status_t stage_split(eplb__device_t *d, uint32_t layer, uint32_t *s, const int32_t *p2l,
                                 const double *share) {
  size_t R = d->R, half = ((size_t)layer * 2 + !d->pl_cur[layer]) * R;
  memcpy(s, p2l, R * sizeof *p2l);
  memcpy(s + R, share, R * sizeof *share);
  eplb_status_t st = d->ops->upload(d->impl, d->p2l + half, s, R * sizeof *p2l, d->stream);
  if (st == EPLB_OK)
    st = d->ops->upload(d->impl, d->share + half, s + R, R * sizeof *share, d->stream);
  d->pl_next[layer] = st == EPLB_OK;
  return st;
}

eplb_status_t eplb__device_stage(eplb_runtime_t *rt, uint32_t layer, const eplb__dtab_t *t,
                                 const int32_t *p2l, const double *share) {
  eplb__device_t *d = rt->dev;
  eplb_status_t st;
  /* The staging of this layer may still feed its last switch's or split's
   * copy: those are steps apart for one layer, so this rarely waits. */
  if ((st = upload_wait(d, layer)) != EPLB_OK) {
    d->st.errors++;
    return st;
  }
  uint32_t *s = d->stage + (size_t)layer * d->stage_words, E = d->E, R = d->R;
  uint32_t used = t->off[E]; /* columns in use, <= R */
  memcpy(s, t->off, ((size_t)E + 1) * sizeof *s);
  memcpy(s + E + 1, t->slot, used * sizeof *s);
  memcpy(s + E + 1 + R, t->alias, used * sizeof *s);
  memcpy(s + E + 1 + 2 * (size_t)R, t->prob, used * sizeof *s);
  uint32_t which = (d->epoch[layer] + 1) & 1u;
  /* One copy of the whole (layer, buffer) block: columns past `used` are
   * never read, so their stale words do no harm. */
  st = d->ops->upload(d->impl, d->disp[layer].buf[which].off, s, d->tab_words * sizeof *s,
                      d->stream);
  if (st == EPLB_OK && d->split && p2l)
    st = stage_split(d, layer, s + d->tab_words, p2l, share);
  if (st == EPLB_OK)
    st = d->ops->event_record(d->impl, d->upload_event[layer], d->stream);
  d->upload_pending[layer] = st == EPLB_OK;
  d->st.uploads++;
  if (st != EPLB_OK) {
    /* The layer keeps its plan: its staged placement must not go live at
     * a later flip, and copies that were queued may still read the staging,
     * which nothing tracks now: let them finish. */
    d->pl_next[layer] = 0;
    (void)wait_event(d, NULL);
    d->st.uploads_failed++;
    return eplb__error_wrap(st, "runtime", "device: layer %u: table upload failed", layer);
  }
  return EPLB_OK;
}

eplb_status_t eplb__device_flip(eplb_runtime_t *rt, uint32_t layer) {
  eplb__device_t *d = rt->dev;
  eplb_status_t st = d->ops->flip(d->impl, &d->disp[layer], d->stream);
  if (st != EPLB_OK) {
    d->flip_pending[layer] = 1;
    d->st.errors++;
    return eplb__error_wrap(st, "runtime", "device: layer %u: epoch flip failed (retried)", layer);
  }
  d->flip_pending[layer] = 0;
  d->epoch[layer]++;
  if (d->pl_next[layer])
    d->pl_cur[layer] ^= 1, d->pl_next[layer] = 0;
  d->st.flips++;
  return EPLB_OK;
}

/* ---- the step boundary ------------------------------------------------------ */

/* The oldest row in flight joins the open step. */
static void feed_oldest(eplb_runtime_t *rt) {
  eplb__device_t *d = rt->dev;
  uint32_t slot = (uint32_t)(d->tail % d->W);
  const uint32_t *row = d->rows + (size_t)slot * d->LE;
  for (uint32_t l = 0; l < d->L; l++)
    eplb__runtime_add_counts(rt, l, row + (size_t)l * d->E, NULL,
                             d->pend_tokens[(size_t)slot * d->L + l]);
  d->st.steps_late += d->pend_step[slot] != rt->m.steps;
  d->st.steps_fed++;
  d->tail++;
}

/* Feeds rows oldest first: all (wait) or those whose copy completed. */
static eplb_status_t feed(eplb_runtime_t *rt, bool wait) {
  eplb__device_t *d = rt->dev;
  eplb_status_t st = EPLB_OK;
  while (d->tail < d->head) {
    void *ev = d->events[d->tail % d->W];
    eplb_status_t es = EPLB_OK;
    int q = wait ? ((es = wait_event(d, ev)) == EPLB_OK ? 1 : -1)
                 : d->ops->event_query(d->impl, ev, &es);
    if (q == 0)
      break;
    if (q < 0) {
      /* A stream error: the copy's outcome is unknown, so its counts are
       * dropped rather than trusted; serving goes on. */
      d->st.errors++;
      if (st == EPLB_OK)
        st = eplb__error_wrap(es, "runtime",
                              "device: the copy of step %llu failed; its counts are dropped",
                              (unsigned long long)d->tail);
      d->tail++;
      continue;
    }
    feed_oldest(rt);
  }
  return st;
}

/* Enqueues the copy of the current row, its event and the ring step. On a
 * failure nothing advances: the row keeps its counts and the next step's
 * add to them, so they arrive late but neither lost nor counted twice. */
static eplb_status_t close_row(eplb__device_t *d, uint64_t step_no) {
  const eplb__dev_ops_t *o = d->ops;
  uint32_t slot = (uint32_t)(d->head % d->W);
  eplb_status_t st =
      o->download(d->impl, d->rows + (size_t)slot * d->LE, d->ring.counts + (size_t)slot * d->LE,
                  d->LE * sizeof *d->rows, d->stream);
  if (st == EPLB_OK)
    st = o->event_record(d->impl, d->events[slot], d->stream);
  if (st == EPLB_OK)
    st = o->step(d->impl, &d->ring, d->stream);
  if (st != EPLB_OK) {
    d->st.errors++;
    return eplb__error_wrap(
        st, "runtime", "device: step %llu: closing the ring row failed; its counts join the next",
        (unsigned long long)d->head);
  }
  memcpy(d->pend_tokens + (size_t)slot * d->L, d->cur_tokens, d->L * sizeof *d->cur_tokens);
  memset(d->cur_tokens, 0, d->L * sizeof *d->cur_tokens);
  d->pend_step[slot] = step_no;
  d->head++;
  d->st.steps++;
  return EPLB_OK;
}

eplb_status_t eplb__device_step_end(eplb_runtime_t *rt) {
  eplb__device_t *d = rt->dev;
  eplb_status_t st = EPLB_OK, s2;
  char detail[512] = "";
  for (uint32_t l = 0; l < d->L; l++)
    if (d->flip_pending[l] && (s2 = eplb__device_flip(rt, l)) != EPLB_OK && st == EPLB_OK)
      st = s2, snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  /* The host row of this step is the oldest's when the ring is full. */
  if (d->head - d->tail == d->W) {
    d->st.ring_waits++;
    void *ev = d->events[d->tail % d->W];
    if ((s2 = wait_event(d, ev)) != EPLB_OK) {
      d->st.errors++, d->tail++;
      if (st == EPLB_OK)
        st = s2, snprintf(detail, sizeof detail, "%s", eplb_error_detail());
    } else {
      feed_oldest(rt);
    }
  }
  if ((s2 = close_row(d, rt->m.steps)) != EPLB_OK && st == EPLB_OK)
    st = s2, snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  if ((s2 = feed(rt, false)) != EPLB_OK && st == EPLB_OK)
    st = s2, snprintf(detail, sizeof detail, "%s", eplb_error_detail());
  return st == EPLB_OK ? st : eplb__error(st, "runtime", "%s", detail);
}

/* ---- the public calls ------------------------------------------------------- */

/* This rank's message of a multi-rank call: the call's counts, the tail
 * {bad ids (the count adds its dropped ones), word, word^2}; `failed`: a
 * tail that keeps every rank's shares. */
static eplb_status_t split_message(eplb__device_t *d, uint32_t layer, const int32_t *ids,
                                   uint32_t num_tokens, bool failed) {
  const eplb__dev_ops_t *o = d->ops;
  size_t row = layer < d->L ? 2 * (size_t)layer + failed : 2 * (size_t)d->L;
  eplb_status_t st = o->memset(d->impl, d->msg, d->E * sizeof *d->msg, d->stream);
  if (st == EPLB_OK)
    st = o->upload(d->impl, d->msg + d->E, d->tails + 3 * row, 3 * sizeof *d->msg, d->stream);
  if (st == EPLB_OK && !failed && num_tokens)
    st = o->count(d->impl, &d->sring, 0, ids, num_tokens, d->k, d->stream);
  return st;
}

/* The per-batch split of one record or route call, all on the stream: the
 * call's counts, their all-reduce (multi-rank: every call makes it, whatever
 * failed here, or peers would wait), the split over the live placement
 * (warm; skipped, keeping the shares, when a rank had bad ids or the calls
 * differ), then for route (out) the call's exact quotas (*mapped), for
 * record the idle table's build and the flip. A failed kernel leaves the
 * live table in use; a split without fresh shares (its status word) makes
 * the quota map use the live table, as the host route does. `failed`: only
 * join the all-reduce (the call already failed here). */
static eplb_status_t split_call(eplb_runtime_t *rt, uint32_t layer, const int32_t *ids,
                                uint32_t num_tokens, bool failed, uint64_t token_base, int32_t *out,
                                bool *mapped) {
  eplb__device_t *d = rt->dev;
  const eplb__dev_ops_t *o = d->ops;
  eplb_status_t st = EPLB_OK, ms = EPLB_OK;
  *mapped = false;
  /* A plan switch's flip still pending must land first, or the split would
   * build the old placement's table over the staged one. */
  if (!failed && d->flip_pending[layer] && (st = eplb__device_flip(rt, layer)) != EPLB_OK)
    failed = true;
  if (d->comm) {
    ms = split_message(d, layer, ids, num_tokens, failed);
    eplb_status_t ar = o->allreduce(d->impl, d->comm, d->msg, (size_t)d->E + 3, d->stream);
    ms = ms != EPLB_OK ? ms : ar;
  } else if (!failed) {
    ms = o->memset(d->impl, d->sring.counts, d->E * sizeof *d->sring.counts, d->stream);
    if (ms == EPLB_OK && num_tokens)
      ms = o->count(d->impl, &d->sring, 0, ids, num_tokens, d->k, d->stream);
  }
  if (failed || (st = ms) != EPLB_OK)
    return st;
  size_t half = ((size_t)layer * 2 + d->pl_cur[layer]) * d->R;
  st = o->split(d->impl, d->p2l + half, d->E, d->P, d->R / d->P, d->msg, d->share + half,
                d->t_star + layer, d->sword + layer, d->split_ws, EPLB__SPLIT_MAX_ITERATIONS,
                d->comm ? d->msg + d->E : NULL, check_word(layer, d->E), d->ranks, d->stream);
  if (st == EPLB_OK && out) {
    st = o->quota(d->impl, &d->disp[layer], layer, d->p2l + half, d->share + half, d->sword + layer,
                  ids, num_tokens, d->k, token_base, out, d->bad, d->quota_ws, d->stream);
    *mapped = st == EPLB_OK;
    return st;
  }
  if (st == EPLB_OK)
    st = o->table_build(d->impl, &d->disp[layer], (d->epoch[layer] + 1) & 1u, d->p2l + half,
                        d->share + half, d->tab_ws, d->stream);
  if (st == EPLB_OK)
    st = eplb__device_flip(rt, layer);
  return st;
}

/* The checks of a device record or route call. */
static eplb_status_t check_call(const eplb__device_t *d, const char *what, uint32_t layer,
                                const int32_t *ids, uint32_t num_tokens, bool route,
                                const int32_t *out) {
  if (layer >= d->L)
    return eplb__error(EPLB_ERANGE, "runtime", "%s: layer %u >= %u", what, layer, d->L);
  if (num_tokens && (!ids || (route && !out)))
    return eplb__error(EPLB_EINVAL, "runtime", "%s: layer %u: NULL device %s", what, layer,
                       ids ? "out_slots" : "ids");
  if (num_tokens > UINT32_MAX - d->cur_tokens[layer])
    return eplb__error(EPLB_ERANGE, "runtime", "%s: layer %u: too many tokens", what, layer);
  /* The all-reduce sums uint32 counts over the ranks (as on the host). */
  if (d->comm && (uint64_t)num_tokens * d->k > UINT32_MAX / d->ranks)
    return eplb__error(EPLB_ERANGE, "runtime", "%s: layer %u: %u tokens above 2^32 / top-k / ranks",
                       what, layer, num_tokens);
  return EPLB_OK;
}

/* device_record and _route (route: quotas into out_slots with the split).
 * *counted: the ids were counted (a later failure is the split's: the layer
 * keeps its table, which route then maps by); *mapped: quotas written.
 * With a multi-rank split a call that fails its checks still joins. */
static eplb_status_t record(eplb_runtime_t *rt, const char *what, uint32_t layer,
                            const int32_t *topk_ids, uint32_t num_tokens, bool route,
                            uint64_t token_base, int32_t *out_slots, bool *counted, bool *mapped) {
  eplb_status_t st;
  *counted = *mapped = false;
  eplb__device_t *d = dev_of(rt, what, &st);
  if (!d)
    return st;
  /* Out of step with the other ranks (eplb__seq_enter): no collective call
   * until step_end, on the device as on the host. */
  if (d->split && d->comm && (st = eplb__seq_skipped(rt, what)) != EPLB_OK)
    return st;
  st = check_call(d, what, layer, topk_ids, num_tokens, route, out_slots);
  if (st == EPLB_OK && num_tokens &&
      (st = d->ops->count(d->impl, &d->ring, layer, topk_ids, num_tokens, d->k, d->stream)) !=
          EPLB_OK) {
    d->st.errors++;
    st = eplb__error_wrap(st, "runtime", "%s: layer %u", what, layer);
  }
  if (st != EPLB_OK && d->split && d->comm) {
    char detail[512];
    snprintf(detail, sizeof detail, "%s", eplb_error_detail());
    (void)split_call(rt, layer, NULL, 0, true, 0, NULL, mapped);
    return eplb__error(st, "runtime", "%s", detail);
  }
  if (st != EPLB_OK)
    return st;
  d->cur_tokens[layer] += num_tokens;
  *counted = true;
  if (!d->split || (!num_tokens && !d->comm))
    return EPLB_OK;
  st = split_call(rt, layer, topk_ids, num_tokens, false, token_base, route ? out_slots : NULL,
                  mapped);
  if (st != EPLB_OK) {
    d->st.errors++;
    return eplb__error_wrap(
        st, "runtime",
        "%s: layer %u: per-batch split (the ids are counted; the layer keeps its table)", what,
        layer);
  }
  return EPLB_OK;
}

eplb_status_t eplb_runtime_device_record(eplb_runtime_t *rt, uint32_t layer,
                                         const int32_t *topk_ids, uint32_t num_tokens) {
  bool counted, mapped;
  return record(rt, "device_record", layer, topk_ids, num_tokens, false, 0, NULL, &counted,
                &mapped);
}

eplb_status_t eplb_runtime_device_map(const eplb_runtime_t *rt, uint32_t layer,
                                      const int32_t *topk_ids, uint32_t num_tokens,
                                      uint64_t token_base, int32_t *out_slots) {
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_map", &st);
  if (!d)
    return st;
  if (layer >= d->L)
    return eplb__error(EPLB_ERANGE, "runtime", "device_map: layer %u >= %u", layer, d->L);
  if (num_tokens && (!topk_ids || !out_slots))
    return eplb__error(EPLB_EINVAL, "runtime", "device_map: layer %u: NULL device %s", layer,
                       topk_ids ? "out_slots" : "ids");
  if (!num_tokens)
    return EPLB_OK;
  st = d->ops->map(d->impl, &d->disp[layer], layer, topk_ids, num_tokens, d->k, token_base,
                   out_slots, d->bad, d->stream);
  if (st != EPLB_OK)
    return eplb__error_wrap(st, "runtime", "device_map: layer %u", layer);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_device_route(eplb_runtime_t *rt, uint32_t layer, const int32_t *topk_ids,
                                        uint32_t num_tokens, uint64_t token_base,
                                        int32_t *out_slots) {
  bool counted, mapped;
  eplb_status_t st = record(rt, "device_route", layer, topk_ids, num_tokens, true, token_base,
                            out_slots, &counted, &mapped);
  if (mapped || (st != EPLB_OK && !counted))
    return st;
  /* No quotas (no split, or it failed after counting): the live table,
   * which is valid whatever failed, serves the tokens. */
  eplb_status_t mst =
      eplb_runtime_device_map(rt, layer, topk_ids, num_tokens, token_base, out_slots);
  return mst != EPLB_OK ? mst : st;
}

eplb_status_t eplb_runtime_device_flush(eplb_runtime_t *rt) {
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_flush", &st);
  if (!d)
    return st;
  return feed(rt, true);
}

eplb_status_t eplb_runtime_device_set_stream(eplb_runtime_t *rt, void *stream) {
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_set_stream", &st);
  if (!d)
    return st;
  /* The ring step and the flips are ordered on one stream: the old one's
   * work must be done before the new one's starts. */
  if ((st = wait_event(d, NULL)) != EPLB_OK)
    return eplb__error_wrap(st, "runtime", "device_set_stream");
  d->stream = stream;
  return EPLB_OK;
}

eplb_status_t eplb_runtime_device_tables(const eplb_runtime_t *rt, uint32_t layer,
                                         const eplb_cuda_dispatch_t **dispatch,
                                         const eplb_cuda_ring_t **ring) {
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_tables", &st);
  if (!d)
    return st;
  if (layer >= d->L)
    return eplb__error(EPLB_ERANGE, "runtime", "device_tables: layer %u >= %u", layer, d->L);
  if (dispatch)
    *dispatch = &d->disp[layer];
  if (ring)
    *ring = &d->ring;
  return EPLB_OK;
}

eplb_status_t eplb_runtime_device_stats(const eplb_runtime_t *rt,
                                        eplb_runtime_device_stats_t *out) {
  if (!out)
    return eplb__error(EPLB_EINVAL, "runtime", "device_stats: NULL out");
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_stats", &st);
  if (!d)
    return st;
  *out = d->st;
  return EPLB_OK;
}

eplb_status_t eplb_runtime_device_inject(eplb_runtime_t *rt, uint32_t event_delay,
                                         uint32_t upload_failures, uint32_t launch_failures) {
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_inject", &st);
  if (!d)
    return st;
  if (!d->ops->inject)
    return eplb__error(EPLB_ESTATE, "runtime", "device_inject: only the emulated device");
  d->ops->inject(d->impl, event_delay, upload_failures, launch_failures);
  return EPLB_OK;
}

eplb_status_t eplb_runtime_device_attach(eplb_runtime_t *rt, const eplb_runtime_device_t *device) {
  if (!rt || !device)
    return eplb__error(EPLB_EINVAL, "runtime", "device_attach: NULL argument");
  if (rt->dev)
    return eplb__error(EPLB_ESTATE, "runtime", "device_attach: the runtime has a device already");
  if (device->kind == EPLB_DEVICE_NONE)
    return EPLB_OK;
  rt->cfg.device = *device;
  eplb_status_t st = eplb__device_open(rt);
  if (st != EPLB_OK) {
    eplb__device_close(rt->dev);
    rt->dev = NULL;
    rt->cfg.device.kind = EPLB_DEVICE_NONE;
  }
  return st;
}

eplb_status_t eplb_runtime_device_counters(const eplb_runtime_t *rt, uint32_t out[3]) {
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_counters", &st);
  if (!d)
    return st;
  if (!out)
    return eplb__error(EPLB_EINVAL, "runtime", "device_counters: NULL out");
  /* step, dropped and bad are consecutive words of the device memory. */
  uint32_t *h = d->stage + d->L * d->stage_words;
  st = d->ops->download(d->impl, h, d->ring.step, 3 * sizeof *h, d->stream);
  if (st == EPLB_OK)
    st = wait_event(d, NULL);
  if (st != EPLB_OK)
    return eplb__error_wrap(st, "runtime", "device_counters");
  memcpy(out, h, 3 * sizeof *h);
  return EPLB_OK;
}

eplb_status_t eplb__device_split_state(const eplb_runtime_t *rt, uint32_t layer,
                                       const double **share, const double **t_star,
                                       const uint32_t **status) {
  eplb_status_t st;
  eplb__device_t *d = dev_of(rt, "device_split_state", &st);
  if (!d)
    return st;
  if (!d->split || layer >= d->L)
    return eplb__error(EPLB_ESTATE, "runtime", "device_split_state: no split of layer %u", layer);
  *share = d->share + ((size_t)layer * 2 + d->pl_cur[layer]) * d->R;
  *t_star = d->t_star + layer, *status = d->sword + layer;
  return EPLB_OK;
}
