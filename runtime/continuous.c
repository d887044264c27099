/* runtime/continuous.c — continuous re-placement (cfg.continuous_window):
 * at every step_end a few slots move towards the recent counts, their
 * weights copied beside serving. The part's cycle, run by step_end:
 *   1. a set of moves in flight is polled; the ranks agree on each move
 *      (landed everywhere, still pending somewhere, or failed); while one is
 *      pending nothing else happens (serving goes on);
 *   2. landed moves switch their slots (staged weights copied in), failed
 *      ones are dropped (in place: copied again once, then abandoned);
 *   3. the next moves (rank 0's eplb_plan_step_moves, broadcast) start: the
 *      ranks agree that each can run, then post their transfers;
 *   4. with continuous_lag 1, rank 0's thread chooses the moves after them. */
#include "runtime/runtime.h"

#include <inttypes.h>
#include <string.h>

/* A move's code in the agreements (MAX over ranks). */
enum {
  MOVE_OK = 0,
  MOVE_PENDING = 1,
  MOVE_FAILED = 2,
  MOVE_INJECTED = 3,
  MOVE_TIMEOUT = 4,
  MOVE_DEVICE = 5 /* landed, but a device's table for its layer could not be uploaded */
};

struct eplb__cont {
  eplb__geom_t g;
  uint32_t W, lag;
  bool in_place;
  eplb_plan_step_options_t opts;
  uint64_t B;      /* expert_bytes */
  size_t cap;      /* moves in one set */
  int32_t *target; /* [L][R] the live placement with moves in flight at their new expert */
  int32_t *serve;  /* [L][R] the live placement (staged: moves in flight at their old expert) */
  uint8_t *busy;   /* [L][R] in flight (or abandoned, in place) */
  uint8_t *tries;  /* [L][R] in place: copies of the slot that failed */
  double *share;   /* [R] scratch: uniform shares in service */
  uint32_t *cnt;   /* [E] scratch */
  /* the set in flight */
  eplb_plan_move_t *fly;
  size_t nfly;
  uint64_t *codes;    /* [cap] */
  uint8_t *landed;    /* [2 cap] landed inside a step (eplb__cont_land_layer) */
  uint8_t *dirty;     /* [L] layers whose slots resolve() switched */
  uint8_t *staged;    /* [L] with a device somewhere: the layer's next table is staged */
  int32_t *next_p2l;  /* [R] scratch: a layer's placement once its landed moves switch */
  uint64_t *dev_fail; /* [L] a rank could not upload the layer's next table (agreed) */
  uint8_t *injected;  /* [2 cap] this rank's injected failure of a move (tests) */
  uint8_t *spoil;     /* [2 cap] this rank's injected damage of a copy it receives (tests) */
  uint64_t *sum;      /* [2 cap] agreed CRC-32 + 1 of a move's source bytes, 0: none */
  uint8_t *checked;   /* [2 cap] receive q was checked against its move's sum */
  size_t *stage_of;   /* [cap] staging index of a move this rank receives, else SIZE_MAX */
  eplb__xfer_t *xfer; /* [2 cap] receives, then sends */
  uint32_t *xmove;    /* [2 cap] the move of each */
  uint8_t *xfail;     /* [2 cap] */
  size_t nrecv, nsend;
  uint8_t *staging;
  size_t staging_cap;
  uint64_t seq;
  /* the next moves: rank 0's choice, then everyone's after the broadcast */
  eplb_plan_move_t *next;
  size_t nnext;
  /* in place: failed moves to copy again */
  eplb_plan_move_t *redo;
  size_t nredo;
  /* rank 0's planning thread (lag 1) and its inputs */
  pthread_t thread;
  bool thread_running, have_next;
  eplb_status_t plan_st;
  int32_t *snap_target;
  uint8_t *snap_busy;
  double *snap_share; /* [L][R] */
  double *loads;      /* [LE] */
};

eplb_status_t eplb__cont_create(const eplb_runtime_config_t *cfg, const eplb__geom_t *g,
                                eplb__cont_t **out) {
  *out = NULL;
  if (!cfg->continuous_window)
    return EPLB_OK;
  eplb__cont_t *c = eplb__calloc(1, sizeof *c);
  *out = c;
  if (!c)
    return eplb__error(EPLB_ENOMEM, "runtime", "continuous re-placement");
  c->g = *g;
  c->W = cfg->continuous_window, c->lag = cfg->continuous_lag;
  c->in_place = cfg->continuous_in_place != 0;
  c->opts = cfg->continuous;
  c->opts.expert_bytes = cfg->expert_bytes;
  c->opts.in_place = c->in_place;
  c->B = cfg->expert_bytes;
  c->cap = (size_t)g->P * c->opts.slots_per_gpu + 1;
  size_t LR = (size_t)g->L * g->R;
  c->target = eplb__malloc_array(LR, sizeof *c->target);
  c->serve = eplb__malloc_array(LR, sizeof *c->serve);
  c->busy = eplb__calloc(LR, 1);
  c->tries = eplb__calloc(LR, 1);
  c->share = eplb__malloc_array(g->R, sizeof *c->share);
  c->cnt = eplb__malloc_array(g->E, sizeof *c->cnt);
  c->fly = eplb__malloc_array(2 * c->cap, sizeof *c->fly);
  c->codes = eplb__malloc_array(4 * c->cap, sizeof *c->codes); /* prepared, then agreed */
  c->stage_of = eplb__malloc_array(2 * c->cap, sizeof *c->stage_of);
  c->landed = eplb__calloc(2 * c->cap, 1);
  c->dirty = eplb__calloc(g->L, 1);
  c->staged = eplb__calloc(g->L, 1);
  c->next_p2l = eplb__malloc_array(g->R, sizeof *c->next_p2l);
  c->dev_fail = eplb__calloc(g->L, sizeof *c->dev_fail);
  c->injected = eplb__calloc(2 * c->cap, 1);
  c->spoil = eplb__calloc(2 * c->cap, 1);
  c->sum = eplb__calloc(2 * c->cap, sizeof *c->sum);
  c->checked = eplb__calloc(2 * c->cap, 1);
  c->xfer = eplb__malloc_array(4 * c->cap, sizeof *c->xfer);
  c->xmove = eplb__malloc_array(4 * c->cap, sizeof *c->xmove);
  c->xfail = eplb__malloc_array(4 * c->cap, 1);
  c->next = eplb__malloc_array(c->cap, sizeof *c->next);
  c->redo = eplb__malloc_array(c->cap, sizeof *c->redo);
  bool planner = g->rank == 0;
  if (planner) {
    c->snap_target = eplb__malloc_array(LR, sizeof *c->snap_target);
    c->snap_busy = eplb__malloc_array(LR, 1);
    c->snap_share = eplb__malloc_array(LR, sizeof *c->snap_share);
    c->loads = eplb__malloc_array(g->LE, sizeof *c->loads);
  }
  if (!c->target || !c->serve || !c->busy || !c->tries || !c->share || !c->cnt || !c->fly ||
      !c->codes || !c->stage_of || !c->landed || !c->dirty || !c->injected || !c->xfer ||
      !c->staged || !c->next_p2l || !c->dev_fail || !c->spoil || !c->sum || !c->checked ||
      !c->xmove || !c->xfail || !c->next || !c->redo ||
      (planner && (!c->snap_target || !c->snap_busy || !c->snap_share || !c->loads)))
    return eplb__error(EPLB_ENOMEM, "runtime", "continuous re-placement of %u x %u slots", g->L,
                       g->R);
  return EPLB_OK;
}

static void join(eplb__cont_t *c) {
  if (c->thread_running)
    pthread_join(c->thread, NULL);
  c->thread_running = false;
}

void eplb__cont_destroy(eplb__cont_t *c, eplb__comm_t *comm) {
  if (!c)
    return;
  join(c);
  if (c->nfly) /* nothing may write a buffer after destroy */
    eplb__comm_drop(comm, c->xfail);
  void *p[] = {c->target,  c->serve,       c->busy,      c->tries,
               c->share,   c->cnt,         c->fly,       c->codes,
               c->landed,  c->dirty,       c->injected,  c->stage_of,
               c->staged,  c->next_p2l,    c->dev_fail,  c->xfer,
               c->xmove,   c->xfail,       c->next,      c->redo,
               c->staging, c->snap_target, c->snap_busy, c->snap_share,
               c->loads,   c->spoil,       c->sum,       c->checked,
               c};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++)
    eplb__free(p[i]);
}

void eplb__cont_load(eplb__cont_t *c, const eplb__live_t *live) {
  for (uint32_t l = 0; c && l < c->g.L; l++) {
    memcpy(c->target + (size_t)l * c->g.R, eplb__live_p2l(live, l), c->g.R * sizeof *c->target);
    memcpy(c->serve + (size_t)l * c->g.R, eplb__live_p2l(live, l), c->g.R * sizeof *c->serve);
  }
}

/* Uniform shares over each expert's slots in service of placement p2l. */
static void uniform(const eplb__cont_t *c, const int32_t *p2l, const uint8_t *out, double *share,
                    uint32_t *cnt) {
  memset(cnt, 0, c->g.E * sizeof *cnt);
  for (uint32_t r = 0; r < c->g.R; r++)
    cnt[p2l[r]] += !(out && out[r]);
  for (uint32_t r = 0; r < c->g.R; r++)
    share[r] = (out && out[r]) || !cnt[p2l[r]] ? 0.0 : 1.0 / cnt[p2l[r]];
}

/* ---- choosing the moves (rank 0) --------------------------------------- */

static eplb_status_t choose(eplb__cont_t *c, const int32_t *target, const uint8_t *busy,
                            double *share) {
  const eplb__geom_t *g = &c->g;
  for (uint32_t l = 0; l < g->L; l++)
    uniform(c, target + (size_t)l * g->R, NULL, share + (size_t)l * g->R, c->cnt);
  eplb__plan_shape_t shape = {g->L, g->E, g->P, g->N, g->R, NULL};
  eplb_plan_t *cur = NULL;
  eplb_status_t st =
      eplb__plan_from_arrays(&shape, EPLB_POLICY_INCREMENTAL, target, share, NULL, &cur);
  eplb_loads_t loads = {g->L, g->E, c->loads};
  if (st == EPLB_OK)
    st = eplb_plan_step_moves(cur, busy, &loads, &c->opts, c->next, c->cap - 1, &c->nnext);
  eplb_plan_destroy(cur);
  if (st != EPLB_OK)
    c->nnext = 0;
  return st;
}

static void *plan_main(void *arg) {
  eplb__cont_t *c = arg;
  c->plan_st = choose(c, c->snap_target, c->snap_busy, c->snap_share);
  eplb_split_glpk_thread_done();
  return NULL;
}

/* Rank 0: the window and the placement as they are now, for a choice made
 * at once (lag 0) or on the thread (lag 1: used at the next step_end). */
static void start_choice(eplb_runtime_t *rt) {
  eplb__cont_t *c = rt->cont;
  size_t LR = (size_t)c->g.L * c->g.R;
  eplb__stats_recent(rt->stats, c->W, c->loads);
  memcpy(c->snap_target, c->target, LR * sizeof *c->target);
  memcpy(c->snap_busy, c->busy, LR);
  c->have_next = true;
  if (c->lag == 0 || pthread_create(&c->thread, NULL, plan_main, c) != 0) {
    plan_main(c); /* inline keeps the ranks in step; only latency suffers */
    return;
  }
  c->thread_running = true;
}

/* Every rank: rank 0's choice (or nothing) as `next`; *comm_ok: the
 * broadcasts went through (a failed choice is still an agreed empty one). */
static eplb_status_t share_choice(eplb_runtime_t *rt, bool *comm_ok) {
  eplb__cont_t *c = rt->cont;
  uint64_t head[2] = {0, 0};
  if (rt->g.rank == 0) {
    join(c);
    bool use = c->have_next && c->plan_st == EPLB_OK;
    head[0] = use ? c->nnext : 0;
    head[1] = c->have_next && c->plan_st != EPLB_OK ? (uint64_t)c->plan_st : 0;
    c->have_next = false;
  }
  eplb_status_t st = eplb__comm_bcast(rt->comm, head, sizeof head);
  if (st == EPLB_OK && head[0] > c->cap - 1)
    st = eplb__error(EPLB_ECOMM, "runtime", "continuous: %" PRIu64 " moves broadcast", head[0]);
  if (st == EPLB_OK && head[0])
    st = eplb__comm_bcast(rt->comm, c->next, head[0] * sizeof *c->next);
  c->nnext = st == EPLB_OK ? (size_t)head[0] : 0;
  *comm_ok = st == EPLB_OK;
  if (st == EPLB_OK && head[1]) {
    rt->m.plans_failed++;
    return eplb__error((eplb_status_t)head[1], "runtime",
                       "continuous: rank 0's choice of moves failed; nothing moves this step");
  }
  return st;
}

/* ---- one set of moves --------------------------------------------------- */

static bool registered(const eplb_runtime_t *rt, uint32_t layer, uint32_t slot) {
  return eplb__wtab_has(rt->wt, layer, slot % rt->g.S);
}

/* Whether move m can start from the state every rank shares (a choice made
 * a step ago may meet a move that failed since). */
static bool still_valid(const eplb__cont_t *c, const eplb_plan_move_t *m) {
  size_t o = (size_t)m->layer * c->g.R;
  return m->layer < c->g.L && m->slot < c->g.R && m->src_slot < c->g.R &&
         c->target[o + m->slot] == m->from_expert && c->target[o + m->src_slot] == m->to_expert &&
         !c->busy[o + m->slot] && !c->busy[o + m->src_slot] && m->to_expert >= 0 &&
         (uint32_t)m->to_expert < c->g.E;
}

/* The set to start: copies to redo, then the choice; each still valid and
 * no slot twice. */
static void gather(eplb__cont_t *c) {
  c->nfly = 0;
  memset(c->dirty, 0, c->g.L); /* here: layers with a move that cannot start */
  for (size_t i = 0; i < c->nredo + c->nnext && c->nfly < 2 * c->cap; i++) {
    const eplb_plan_move_t *m = i < c->nredo ? &c->redo[i] : &c->next[i - c->nredo];
    size_t o = (size_t)m->layer * c->g.R;
    /* A copy again: its slot is out of service by design, its source pinned. */
    bool ok = i < c->nredo ? c->target[o + m->src_slot] == m->to_expert && !c->busy[o + m->src_slot]
                           : still_valid(c, m);
    /* In place a slot being written is no source; staged, it is read before
     * its layer lands. A slot is never written twice. */
    for (size_t j = 0; j < c->nfly && ok; j++)
      ok = c->fly[j].layer != m->layer ||
           (c->fly[j].slot != m->slot &&
            (!c->in_place || (c->fly[j].slot != m->src_slot && c->fly[j].src_slot != m->slot)));
    if (ok) {
      c->fly[c->nfly++] = *m;
    } else if (i < c->nredo) {
      c->busy[o + m->slot] = 1; /* stays out of service: abandoned */
    } else {
      c->dirty[m->layer] = 1;
    }
  }
  /* Staged, a layer's moves land together (they may swap experts): one that
   * cannot start holds back its whole layer. */
  size_t kept = 0;
  for (size_t i = 0; i < c->nfly; i++)
    if (c->in_place || !c->dirty[c->fly[i].layer])
      c->fly[kept++] = c->fly[i];
  c->nfly = kept;
  memset(c->dirty, 0, c->g.L);
  c->nredo = c->nnext = 0;
}

/* Staged: a move that cannot run fails its whole layer (agreed codes, so
 * every rank drops the same layers). */
static void fail_layers(eplb__cont_t *c, uint64_t *codes) {
  if (c->in_place)
    return;
  for (size_t i = 0; i < c->nfly; i++)
    if (codes[i] != MOVE_OK)
      c->dirty[c->fly[i].layer] = 1;
  for (size_t i = 0; i < c->nfly; i++)
    if (c->dirty[c->fly[i].layer] && codes[i] == MOVE_OK)
      codes[i] = MOVE_FAILED;
  memset(c->dirty, 0, c->g.L);
}

/* This rank's part of the set: local failures (a weight buffer not
 * registered, no staging memory, an injected failure) as codes, agreed
 * before any transfer is posted so that no peer waits for a send. */
static eplb_status_t prepare(eplb_runtime_t *rt) {
  eplb__cont_t *c = rt->cont;
  uint32_t me = rt->g.rank, S = rt->g.S;
  size_t nin = 0;
  for (size_t i = 0; i < c->nfly; i++) {
    const eplb_plan_move_t *m = &c->fly[i];
    bool dst = m->slot / S == me, src = m->src_slot / S == me;
    c->codes[i] = MOVE_OK;
    c->landed[i] = 0;
    c->stage_of[i] = SIZE_MAX;
    if (c->B && ((dst && !registered(rt, m->layer, m->slot)) ||
                 (src && !registered(rt, m->layer, m->src_slot))))
      c->codes[i] = MOVE_FAILED;
    /* An injected failure strikes after the copy started, as a failed
     * receive would (in place, the slot's weights are then lost). */
    c->injected[i] = (dst || src) && eplb__rebal_take_failure(rt->rb, m->layer);
    c->spoil[i] = dst && !src && c->B && eplb__rebal_take_corruption(rt->rb, m->layer);
    /* Several tensors a slot land in staging even in place (they are
     * scattered into the slot's tensors when the move lands). */
    if (dst && c->B && (!c->in_place || eplb__wtab_packed(rt->wt)))
      c->stage_of[i] = nin++;
    /* A source sent from here with several tensors is gathered first. */
    if (src && !dst && c->B && eplb__wtab_packed(rt->wt))
      c->stage_of[i] = nin++;
    /* The source's checksum, agreed with the codes: the receiver checks
     * its copy against it before the copy may serve. */
    c->codes[c->nfly + i] = src && !dst && c->codes[i] == MOVE_OK
                                ? eplb__wtab_sum(rt->wt, m->layer, m->src_slot % S)
                                : 0;
  }
  if (nin && nin * c->B > c->staging_cap) {
    uint8_t *grown = nin > SIZE_MAX / c->B ? NULL : eplb__realloc(c->staging, nin * c->B);
    if (grown) {
      c->staging = grown;
      c->staging_cap = nin * c->B;
    } else {
      for (size_t i = 0; i < c->nfly; i++)
        c->codes[i] = c->stage_of[i] != SIZE_MAX ? MOVE_FAILED : c->codes[i];
    }
  }
  /* codes has room for 2 nfly (4 cap): one all-reduce agrees both. */
  eplb_status_t st = eplb__comm_allreduce_u64(rt->comm, c->codes, 2 * c->nfly, EPLB_REDUCE_MAX);
  memcpy(c->sum, c->codes + c->nfly, c->nfly * sizeof *c->sum);
  memset(c->checked, 0, c->nfly);
  if (st == EPLB_OK)
    fail_layers(c, c->codes);
  return st;
}

/* Where move i's weights land on this rank. */
static void *landing(eplb_runtime_t *rt, size_t i) {
  eplb__cont_t *c = rt->cont;
  return c->stage_of[i] != SIZE_MAX
             ? c->staging + c->stage_of[i] * c->B
             : eplb__wtab_direct(rt->wt, c->fly[i].layer, c->fly[i].slot % rt->g.S);
}

/* The bytes move i sends or copies from here: the source slot's buffer, or
 * its tensors gathered into out. */
static void *source(eplb_runtime_t *rt, size_t i, void *out) {
  const eplb_plan_move_t *m = &rt->cont->fly[i];
  uint32_t s = m->src_slot % rt->g.S;
  void *p = eplb__wtab_direct(rt->wt, m->layer, s);
  if (p)
    return p;
  eplb__wtab_gather(rt->wt, m->layer, s, out);
  return out;
}

/* The agreed moves become busy (in place: out of service at once) and
 * their transfers start: a copy on this rank at once, others posted. */
static eplb_status_t post(eplb_runtime_t *rt) {
  eplb__cont_t *c = rt->cont;
  uint32_t me = rt->g.rank, S = rt->g.S;
  c->nrecv = c->nsend = 0;
  for (size_t i = 0; i < c->nfly; i++) {
    const eplb_plan_move_t *m = &c->fly[i];
    if (c->codes[i] != MOVE_OK)
      continue;
    size_t o = (size_t)m->layer * c->g.R;
    c->busy[o + m->slot] = 1;
    c->target[o + m->slot] = m->to_expert;
    uint32_t dr = m->slot / S, sr = m->src_slot / S;
    if (!c->B || (dr != me && sr != me))
      continue;
    void *to = landing(rt, i); /* a send's: where its tensors are gathered */
    if (dr == me && sr == me) {
      void *from = source(rt, i, to);
      if (from != to)
        memcpy(to, from, c->B);
    } else if (dr == me) {
      c->xfer[c->nrecv] = (eplb__xfer_t){sr, 0, to, c->B}, c->xmove[c->nrecv++] = i;
    } else {
      c->xfer[2 * c->cap + c->nsend] = (eplb__xfer_t){dr, 0, source(rt, i, to), c->B},
                           c->xmove[2 * c->cap + c->nsend++] = i;
    }
  }
  /* The exchange wants receives then sends in one array. */
  memmove(c->xfer + c->nrecv, c->xfer + 2 * c->cap, c->nsend * sizeof *c->xfer);
  memmove(c->xmove + c->nrecv, c->xmove + 2 * c->cap, c->nsend * sizeof *c->xmove);
  /* An injected stall holds the next set in which this rank sends. */
  eplb__xchg_t how = {c->seq++, rt->cfg.transfer_timeout_ms,
                      c->nsend ? eplb__rebal_take_stall(rt->rb) : 0};
  return eplb__comm_post(rt->comm, &how, c->xfer + c->nrecv, c->nsend, c->xfer, c->nrecv, c->xfail);
}

/* A layer's slots changed: its table (uniform shares over the slots in
 * service, what map and a failed split fall back to) goes live and its
 * last per-batch shares are forgotten. */
static void relayer(eplb_runtime_t *rt, uint32_t l) {
  eplb__cont_t *c = rt->cont;
  const int32_t *p2l = c->serve + (size_t)l * c->g.R;
  uniform(c, p2l, eplb__live_oos(rt->live, l), c->share, c->cnt);
  if (!c->staged[l])
    eplb__live_build_idle(rt->live, l, p2l, c->share, NULL);
  eplb__live_switch(rt->live, l, p2l, c->share);
  if (c->staged[l] && rt->dev && eplb__device_flip(rt, l) != EPLB_OK)
    eplb__log(EPLB_LOG_ERROR, "runtime", "continuous: %s", eplb_error_detail());
  c->staged[l] = 0;
  eplb__batch_reset_layer(rt, l);
}

/* With a device on some rank (agreed at create; staged copies only) a
 * layer's landed moves switch only where every rank's device has the
 * layer's next table: each rank builds it into the idle buffers (host and
 * device) before anything lands, the ranks agree on the uploads, and a
 * layer whose upload failed somewhere keeps its old experts everywhere
 * (its moves dropped, MOVE_DEVICE); relayer then flips the staged ones. */
static eplb_status_t stage_devices(eplb_runtime_t *rt, uint64_t *agree) {
  eplb__cont_t *c = rt->cont;
  const eplb__geom_t *g = &c->g;
  memset(c->dev_fail, 0, g->L * sizeof *c->dev_fail);
  for (uint32_t l = 0; l < g->L; l++) {
    bool lands = false;
    memcpy(c->next_p2l, c->serve + (size_t)l * g->R, g->R * sizeof *c->next_p2l);
    for (size_t i = 0; i < c->nfly; i++)
      if (c->fly[i].layer == l && agree[i] == MOVE_OK && !c->landed[i])
        c->next_p2l[c->fly[i].slot] = (int32_t)c->fly[i].to_expert, lands = true;
    if (!lands)
      continue;
    uniform(c, c->next_p2l, NULL, c->share, c->cnt);
    eplb__dtab_t *t = eplb__live_build_idle(rt->live, l, c->next_p2l, c->share, NULL);
    c->staged[l] = 1;
    if (rt->dev && eplb__device_stage(rt, l, t, c->next_p2l, c->share) != EPLB_OK) {
      eplb__log(EPLB_LOG_ERROR, "runtime", "continuous: %s", eplb_error_detail());
      c->dev_fail[l] = 1;
    }
  }
  eplb_status_t st = eplb__comm_allreduce_u64(rt->comm, c->dev_fail, g->L, EPLB_REDUCE_MAX);
  for (size_t i = 0; i < c->nfly; i++) {
    uint32_t l = c->fly[i].layer;
    if (agree[i] == MOVE_OK && !c->landed[i] && (st != EPLB_OK || c->dev_fail[l]))
      agree[i] = MOVE_DEVICE;
  }
  for (uint32_t l = 0; l < g->L; l++)
    if (st != EPLB_OK || c->dev_fail[l])
      c->staged[l] = 0; /* the idle buffers hold a table that never goes live */
  return st;
}

/* Whether any move of the set is in layer l. */
static bool touches(const eplb__cont_t *c, uint32_t l) {
  for (size_t i = 0; i < c->nfly; i++)
    if (c->fly[i].layer == l)
      return true;
  return false;
}

/* In place: the set's slots are out of service from now on. */
static void take_out(eplb_runtime_t *rt) {
  eplb__cont_t *c = rt->cont;
  for (size_t i = 0; i < c->nfly; i++) {
    const eplb_plan_move_t *m = &c->fly[i];
    if (c->codes[i] != MOVE_OK)
      continue;
    c->serve[(size_t)m->layer * c->g.R + m->slot] = m->to_expert;
    eplb__live_set_oos(rt->live, m->layer, m->slot, true);
  }
  for (uint32_t l = 0; l < c->g.L; l++)
    if (touches(c, l))
      relayer(rt, l);
}

/* Polls the set's transfers, then checks each copy received since against
 * its source's checksum: a damaged copy is a failed transfer, so it never
 * serves (staged, its layer keeps the old experts; in place, its slot stays
 * out of service). Checked once, when the receive completes. */
static eplb_status_t poll_checked(eplb_runtime_t *rt, size_t *pending) {
  eplb__cont_t *c = rt->cont;
  eplb_status_t st = eplb__comm_poll(rt->comm, c->xfail, pending);
  for (size_t q = 0; q < c->nrecv; q++) {
    if (c->checked[q] || c->xfail[q] != EPLB__XFER_OK)
      continue;
    size_t i = c->xmove[q];
    uint8_t *p = landing(rt, i);
    c->checked[q] = 1;
    if (c->spoil[i])
      p[c->B / 2] ^= 0x10;
    if (!c->sum[i] || eplb__wtab_sum_buf(rt->wt, p) == c->sum[i])
      continue;
    c->xfail[q] = EPLB__XFER_FAILED;
    eplb__log(EPLB_LOG_ERROR, "runtime",
              "continuous: the copy of layer %u slot %u from rank %u does not match its "
              "source's checksum: dropped",
              c->fly[i].layer, c->fly[i].slot, c->fly[i].src_slot / rt->g.S);
  }
  return st;
}

/* This rank's view of the set (prepared codes, then its transfers), agreed
 * by MAX into agree [nfly]; *done when no move is pending anywhere. The
 * all-reduce runs whatever this rank saw, so no peer waits. */
static eplb_status_t settle(eplb_runtime_t *rt, uint64_t *agree, bool *done) {
  eplb__cont_t *c = rt->cont;
  size_t pending = 0;
  eplb_status_t ps = poll_checked(rt, &pending);
  memcpy(agree, c->codes, c->nfly * sizeof *agree);
  for (size_t i = 0; i < c->nfly; i++)
    if (c->injected[i] && agree[i] < MOVE_INJECTED)
      agree[i] = MOVE_INJECTED;
  for (size_t q = 0; q < c->nrecv + c->nsend; q++) {
    uint64_t code = c->xfail[q] == EPLB__XFER_PENDING   ? MOVE_PENDING
                    : c->xfail[q] == EPLB__XFER_TIMEOUT ? MOVE_TIMEOUT
                    : c->xfail[q]                       ? MOVE_FAILED
                                                        : MOVE_OK;
    uint64_t *a = &agree[c->xmove[q]];
    *a = code > *a ? code : *a;
  }
  eplb_status_t st = eplb__comm_allreduce_u64(rt->comm, agree, c->nfly, EPLB_REDUCE_MAX);
  *done = st == EPLB_OK;
  for (size_t i = 0; st == EPLB_OK && i < c->nfly; i++)
    *done = *done && agree[i] != MOVE_PENDING;
  if (*done) /* landed moves have no sibling that failed: their layer landed whole */
    fail_layers(c, agree);
  if (ps != EPLB_OK)
    eplb__log(EPLB_LOG_ERROR, "runtime", "continuous: polling transfers: %s", eplb_error_detail());
  return st;
}

/* Link class of a move, for the metrics. */
static int link_of(const eplb_runtime_t *rt, const eplb_plan_move_t *m) {
  uint32_t a = m->src_slot / rt->g.S, b = m->slot / rt->g.S;
  return a == b                       ? EPLB_LINK_SAME_GPU
         : a / rt->g.K == b / rt->g.K ? EPLB_LINK_INTRA_NODE
                                      : EPLB_LINK_INTER_NODE;
}

/* Move i landed on every rank: its slot serves the new expert (staged
 * weights copied in first). The caller rebuilds the layer's table. */
static void land_one(eplb_runtime_t *rt, size_t i) {
  eplb__cont_t *c = rt->cont;
  const eplb_plan_move_t *m = &c->fly[i];
  size_t o = (size_t)m->layer * c->g.R + m->slot;
  if (c->B && m->slot / rt->g.S == rt->g.rank && c->stage_of[i] != SIZE_MAX)
    eplb__wtab_scatter(rt->wt, m->layer, m->slot % rt->g.S, landing(rt, i));
  c->serve[o] = m->to_expert;
  c->busy[o] = 0;
  c->tries[o] = 0;
  c->landed[i] = 1;
  if (c->in_place)
    eplb__live_set_oos(rt->live, m->layer, m->slot, false);
  rt->m.continuous_moves++;
  rt->m.slots_moved++;
  rt->m.bytes_moved[link_of(rt, m)] += c->B;
}

/* The agreed outcome: landed moves switch their slots; failed ones are
 * dropped (staged: the slot still serves its old expert) or, in place,
 * copied again once and then abandoned. */
static eplb_status_t resolve(eplb_runtime_t *rt, uint64_t *agree) {
  eplb__cont_t *c = rt->cont;
  char failed[160] = "";
  size_t flen = 0, nfail = 0;
  bool timed_out = false, device = false;
  eplb_status_t ds = rt->dev_any ? stage_devices(rt, agree) : EPLB_OK;
  for (size_t i = 0; i < c->nfly; i++) {
    const eplb_plan_move_t *m = &c->fly[i];
    size_t o = (size_t)m->layer * c->g.R + m->slot;
    bool started = c->codes[i] == MOVE_OK;
    if (c->landed[i])
      continue;
    if (agree[i] == MOVE_OK) {
      land_one(rt, i);
      c->dirty[m->layer] = 1;
      continue;
    }
    rt->m.continuous_failed++;
    timed_out |= agree[i] == MOVE_TIMEOUT;
    device |= agree[i] == MOVE_DEVICE;
    if (flen < sizeof failed - 24)
      flen += (size_t)snprintf(failed + flen, sizeof failed - flen, "%s%u:%u", flen ? "," : "",
                               m->layer, m->slot);
    nfail++;
    if (!started) /* never posted: nothing changed */
      continue;
    if (!c->in_place) {
      c->busy[o] = 0;
      c->target[o] = m->from_expert;
    } else if (++c->tries[o] < 2) {
      c->redo[c->nredo++] = *m;
    } else {
      rt->m.continuous_abandoned++;
      eplb__log(EPLB_LOG_ERROR, "runtime",
                "layer %u slot %u: its weights could not be copied twice; it stays out of "
                "service",
                m->layer, m->slot);
    }
  }
  for (uint32_t l = 0; l < c->g.L; l++)
    if (c->dirty[l]) {
      relayer(rt, l);
      c->dirty[l] = 0;
    }
  c->nfly = 0;
  if (ds != EPLB_OK)
    return ds;
  if (!nfail)
    return EPLB_OK;
  return eplb__error(timed_out ? EPLB_ETIMEOUT
                     : device  ? EPLB_EDEVICE
                               : EPLB_ECOMM,
                     "runtime", "continuous: %zu moves (layer:slot %s) dropped: %s on some rank%s",
                     nfail, failed,
                     timed_out ? "a transfer passed transfer_timeout_ms"
                     : device  ? "a device table upload failed"
                               : "a transfer failed",
                     c->in_place ? "" : "; their slots keep their old expert");
}

eplb_status_t eplb__cont_step(eplb_runtime_t *rt) {
  eplb__cont_t *c = rt->cont;
  eplb_status_t st = EPLB_OK, rs = EPLB_OK;
  if (c->nfly) {
    bool done = false;
    uint64_t *agree = c->codes + 2 * c->cap;
    if ((st = settle(rt, agree, &done)) != EPLB_OK)
      return st; /* the communicator failed: the set stays in flight */
    if (!done) {
      rt->m.continuous_waits++;
      rt->m.migrating = 1;
      return EPLB_OK;
    }
    rs = resolve(rt, agree);
  }
  if (c->lag == 0 && rt->g.rank == 0)
    start_choice(rt);
  bool comm_ok = false;
  eplb_status_t cs = share_choice(rt, &comm_ok);
  gather(c);
  eplb_status_t ps = EPLB_OK;
  c->nrecv = c->nsend = 0;
  if (comm_ok && c->nfly && (ps = prepare(rt)) == EPLB_OK) {
    if (c->in_place)
      take_out(rt);
    ps = post(rt); /* a post that failed marks its transfers failed: agreed at the next step */
  } else if (ps != EPLB_OK || !comm_ok) {
    c->nfly = 0; /* the communicator failed before anything started */
  }
  cs = cs != EPLB_OK ? cs : ps;
  if (c->lag > 0 && rt->g.rank == 0 && !c->have_next)
    start_choice(rt);
  rt->m.migrating = c->nfly > 0;
  st = st != EPLB_OK ? st : rs != EPLB_OK ? rs : cs;
  return st;
}

bool eplb__cont_busy(const eplb__cont_t *c) { return c && c->nfly > 0; }

bool eplb__cont_layer_moving(const eplb__cont_t *c, uint32_t layer) {
  for (size_t i = 0; i < c->nfly; i++)
    if (c->fly[i].layer == layer && c->codes[i] == MOVE_OK && !c->landed[i])
      return true;
  return false;
}

uint32_t eplb__cont_layer_done(eplb_runtime_t *rt, uint32_t layer) {
  eplb__cont_t *c = rt->cont;
  size_t pending = 0;
  if (poll_checked(rt, &pending) != EPLB_OK)
    return 0; /* step_end agrees on what failed */
  for (size_t q = 0; q < c->nrecv + c->nsend; q++)
    if (c->fly[c->xmove[q]].layer == layer && c->xfail[q] != EPLB__XFER_OK)
      return 0;
  for (size_t i = 0; i < c->nfly; i++)
    if (c->fly[i].layer == layer && c->injected[i])
      return 0;
  return 1;
}

void eplb__cont_land_layer(eplb_runtime_t *rt, uint32_t layer) {
  eplb__cont_t *c = rt->cont;
  for (size_t i = 0; i < c->nfly; i++)
    if (c->fly[i].layer == layer && c->codes[i] == MOVE_OK && !c->landed[i])
      land_one(rt, i);
  relayer(rt, layer);
}
