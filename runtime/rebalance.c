/* runtime/rebalance.c — the replan and migration state machine that
 * step_end runs: plan on rank 0's thread, broadcast, diff, then one round of
 * transfers and layer switches per step boundary. */
#include "runtime/runtime.h"

#include "eplb/split.h"
#include "planner/planner.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* While the thread plans it writes only next_* and plan_*, which the
 * serving thread reads after the join (apply_plan). */
struct eplb__rebal {
  eplb__geom_t g;
  /* planning (rank 0's thread) */
  pthread_t thread;
  bool thread_running;
  bool planning;      /* a plan is being computed (every rank knows) */
  bool mailbox_ready; /* every rank: a posted plan is to be applied */
  uint64_t apply_step;
  double *plan_loads; /* [LE] snapshot */
  double plan_steps;  /* steps plan_loads sums */
  uint8_t *next_flag; /* [L] layer switches */
  int32_t *next_p2l;  /* [L][R] */
  double *next_share; /* [L][R] */
  eplb_status_t plan_status;
  double plan_seconds;

  /* migration in progress */
  eplb__migration_t *moves;
  size_t nmoves, moves_cap;
  uint32_t *mig_layers; /* layers to switch, in order */
  uint32_t *mig_round;  /* round of each */
  size_t *mig_off;      /* [L+1] moves of the i-th layer: mig_off[i] .. mig_off[i+1] */
  uint32_t mig_n, mig_rounds, mig_next_round;
  uint8_t *inject_fail;    /* [L] */
  uint8_t *inject_corrupt; /* [L] continuous re-placement: the next copy received arrives damaged */
  uint32_t inject_stall_ms; /* the next round with sends posts them this late */
  uint64_t xfer_seq;        /* rounds run (same on every rank) */
  uint64_t *round_fail;     /* [L] per-layer failure flags of a round (all-reduced) */
  uint8_t *staging;
  size_t staging_cap;
  uint32_t *slot_gpu; /* [R] s / S and gpu_node [P] p / K: the migration's geometry */
  uint32_t *gpu_node;
  uint32_t *mig_used; /* [R] scratch of the diff */
};

eplb_status_t eplb__rebal_create(const eplb__geom_t *g, eplb__rebal_t **out) {
  eplb__rebal_t *rb = eplb__calloc(1, sizeof *rb);
  *out = rb;
  if (!rb)
    return eplb__error(EPLB_ENOMEM, "runtime", "runtime of %u layers x %u slots", g->L, g->R);
  rb->g = *g;
  size_t LR = (size_t)g->L * g->R;
  rb->plan_loads = eplb__calloc(g->LE, sizeof *rb->plan_loads);
  rb->next_flag = eplb__calloc(g->L, 1);
  rb->next_p2l = eplb__calloc(LR, sizeof *rb->next_p2l);
  rb->next_share = eplb__calloc(LR, sizeof *rb->next_share);
  rb->mig_layers = eplb__calloc(g->L, sizeof *rb->mig_layers);
  rb->mig_round = eplb__calloc(g->L, sizeof *rb->mig_round);
  rb->mig_off = eplb__calloc((size_t)g->L + 1, sizeof *rb->mig_off);
  rb->inject_fail = eplb__calloc(g->L, 1);
  rb->inject_corrupt = eplb__calloc(g->L, 1);
  rb->round_fail = eplb__calloc(g->L, sizeof *rb->round_fail);
  rb->slot_gpu = eplb__malloc_array(g->R, sizeof *rb->slot_gpu);
  rb->gpu_node = eplb__malloc_array(g->P, sizeof *rb->gpu_node);
  rb->mig_used = eplb__malloc_array(g->R, sizeof *rb->mig_used);
  if (!rb->slot_gpu || !rb->gpu_node || !rb->mig_used)
    return eplb__error(EPLB_ENOMEM, "runtime", "runtime of %u slots", g->R);
  for (uint32_t r = 0; r < g->R; r++)
    rb->slot_gpu[r] = r / g->S;
  for (uint32_t p = 0; p < g->P; p++)
    rb->gpu_node[p] = p / g->K;
  if (!rb->round_fail || !rb->plan_loads || !rb->next_flag || !rb->next_p2l || !rb->next_share ||
      !rb->mig_layers || !rb->mig_round || !rb->mig_off || !rb->inject_fail || !rb->inject_corrupt)
    return eplb__error(EPLB_ENOMEM, "runtime", "runtime of %u layers x %u slots", g->L, g->R);
  return EPLB_OK;
}

static void stop_plan(eplb__rebal_t *rb) {
  if (rb->thread_running)
    pthread_join(rb->thread, NULL);
  rb->thread_running = false;
}

void eplb__rebal_destroy(eplb__rebal_t *rb) {
  if (!rb)
    return;
  stop_plan(rb);
  void *ptrs[] = {rb->plan_loads,  rb->next_flag,      rb->next_p2l,  rb->next_share,
                  rb->moves,       rb->mig_layers,     rb->mig_round, rb->mig_off,
                  rb->inject_fail, rb->inject_corrupt, rb->staging,   rb->round_fail,
                  rb->slot_gpu,    rb->gpu_node,       rb->mig_used,  rb};
  for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
    eplb__free(ptrs[i]);
}

void eplb__rebal_inject_failure(eplb__rebal_t *rb, uint32_t layer) { rb->inject_fail[layer] = 1; }

void eplb__rebal_inject_stall(eplb__rebal_t *rb, uint32_t ms) { rb->inject_stall_ms = ms; }

void eplb__rebal_inject_corruption(eplb__rebal_t *rb, uint32_t layer) {
  rb->inject_corrupt[layer] = 1;
}

bool eplb__rebal_take_corruption(eplb__rebal_t *rb, uint32_t layer) {
  bool armed = rb->inject_corrupt[layer];
  rb->inject_corrupt[layer] = 0;
  return armed;
}

bool eplb__rebal_take_failure(eplb__rebal_t *rb, uint32_t layer) {
  bool armed = rb->inject_fail[layer];
  rb->inject_fail[layer] = 0;
  return armed;
}

uint32_t eplb__rebal_take_stall(eplb__rebal_t *rb) {
  uint32_t ms = rb->inject_stall_ms;
  rb->inject_stall_ms = 0;
  return ms;
}

bool eplb__rebal_busy(const eplb__rebal_t *rb) {
  return rb->planning || rb->mig_n > 0 || rb->mailbox_ready;
}

bool eplb__rebal_migrating(const eplb__rebal_t *rb) { return rb->mig_n > 0; }

void eplb__rebal_set_mailbox(eplb__rebal_t *rb, bool ready) { rb->mailbox_ready = ready; }

/* Balancedness (mean / max GPU load) of one layer's placement on loads w. */
static double layer_balancedness(const eplb_runtime_t *rt, const int32_t *p2l, const double *share,
                                 const double *w, double *gpu) {
  double total = 0, max = 0;
  memset(gpu, 0, rt->g.P * sizeof *gpu);
  for (uint32_t r = 0; r < rt->g.R; r++)
    gpu[r / rt->g.S] += share[r] * w[p2l[r]];
  for (uint32_t g = 0; g < rt->g.P; g++) {
    total += gpu[g];
    max = gpu[g] > max ? gpu[g] : max;
  }
  return max > 0 ? total / rt->g.P / max : 1.0;
}

double eplb__runtime_balancedness(const eplb_runtime_t *rt, const double *loads) {
  double *gpu = eplb__malloc_array(rt->g.P, sizeof *gpu);
  double sum = 0;
  if (!gpu)
    return 0;
  for (uint32_t l = 0; l < rt->g.L; l++)
    sum += layer_balancedness(rt, eplb__live_p2l(rt->live, l), eplb__live_share(rt->live, l),
                              loads + (size_t)l * rt->g.E, gpu);
  eplb__free(gpu);
  return sum / rt->g.L;
}

/* Plans from the window snapshot, then picks the layers worth switching by
 * the planner's rule (eplb_plan_switch_select: the simulator's too). */
static eplb_status_t plan_and_select(eplb_runtime_t *rt) {
  eplb__rebal_t *rb = rt->rb;
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *plan = NULL, *cur = NULL;
  uint32_t L = rt->g.L, R = rt->g.R;
  memset(rb->next_flag, 0, L);
  double total = 0;
  for (size_t i = 0; i < rt->g.LE; i++)
    total += rb->plan_loads[i];
  if (total == 0)
    return EPLB_OK;
  eplb_loads_t loads = {L, rt->g.E, rb->plan_loads};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = rt->cfg.policy.plan_policy;
  o.num_gpus = rt->g.P;
  o.num_nodes = rt->g.N;
  o.num_replicas = R;
  /* Decode plans model the deployment of the per-batch split (the copy made
   * at create; the config check requires one), for the window's mean step. */
  o.model = rt->batch.decode ? &rt->batch.model : NULL;
  o.gpu = rt->batch.decode ? &rt->batch.gpu : NULL;
  o.decode_steps = rb->plan_steps;
  /* The thread owns nothing the serving thread writes while planning: the
   * live plan only changes after the join. */
  eplb__plan_shape_t shape = {L, rt->g.E, rt->g.P, rt->g.N, R, NULL};
  if ((st = eplb__plan_from_arrays(&shape, EPLB_POLICY_DEEPSEEK, eplb__live_p2l(rt->live, 0),
                                   eplb__live_share(rt->live, 0), NULL, &cur)) != EPLB_OK)
    goto done;
  if (o.policy == EPLB_POLICY_INCREMENTAL)
    o.from = cur;
  if ((st = eplb_plan_create(&loads, &o, &plan)) != EPLB_OK)
    goto done;
  for (uint32_t l = 0; l < L; l++) {
    memcpy(rb->next_p2l + (size_t)l * R, eplb_plan_phy2log(plan, l), R * sizeof *rb->next_p2l);
    memcpy(rb->next_share + (size_t)l * R, eplb_plan_share(plan, l), R * sizeof *rb->next_share);
  }
  eplb_plan_switch_options_t so;
  eplb_plan_switch_options_default(&so);
  so.gain_threshold = rt->cfg.policy.gain_threshold;
  so.move_budget = rt->cfg.policy.move_budget;
  if (o.policy == EPLB_POLICY_DECODE) {
    so.model = o.model;
    so.gpu = o.gpu;
    so.decode_steps = o.decode_steps;
    so.gpus_per_node = rt->g.K;
  }
  st = eplb_plan_switch_select(cur, plan, &loads, &so, rb->next_flag, NULL);
done:
  eplb_plan_destroy(plan);
  eplb_plan_destroy(cur);
  return st;
}

static void *plan_main(void *arg) {
  eplb_runtime_t *rt = arg;
  double t0 = eplb__now();
  eplb__rebal_t *rb = rt->rb;
  rb->plan_status = plan_and_select(rt);
  if (rb->plan_status != EPLB_OK)
    eplb__log(EPLB_LOG_ERROR, "runtime", "plan failed: %s", eplb_error_detail());
  rb->plan_seconds = eplb__now() - t0;
  eplb_split_glpk_thread_done(); /* the mip policy uses GLPK's per-thread state */
  return NULL;
}

static eplb_status_t start_plan(eplb_runtime_t *rt) {
  eplb__rebal_t *rb = rt->rb;
  rb->planning = true;
  rb->apply_step = rt->m.steps + rt->cfg.policy.plan_lag_steps;
  if (rt->g.rank != 0)
    return EPLB_OK;
  eplb__stats_window(rt->stats, EPLB_WINDOW_SUM, rb->plan_loads);
  rb->plan_steps = (double)eplb__stats_window_steps(rt->stats);
  if (pthread_create(&rb->thread, NULL, plan_main, rt) != 0) {
    /* Planning inline keeps ranks in step; only latency suffers. */
    plan_main(rt);
    return EPLB_OK;
  }
  rb->thread_running = true;
  return EPLB_OK;
}

/* Rank 0: the mailbox's plan becomes the next plan, as the thread's would. */
static void take_mailbox_plan(eplb_runtime_t *rt) {
  eplb__rebal_t *rb = rt->rb;
  eplb_plan_t *plan = NULL;
  uint32_t R = rt->g.R;
  double t0 = eplb__now();
  eplb_status_t st = rt->mbox ? eplb__mbox_take_plan(rt->mbox, &rt->g, &plan)
                              : eplb__error(EPLB_ESTATE, "runtime", "no mailbox on this rank");
  memset(rb->next_flag, 0, rt->g.L);
  for (uint32_t l = 0; st == EPLB_OK && l < rt->g.L; l++) {
    size_t o = (size_t)l * R;
    const int32_t *np = eplb_plan_phy2log(plan, l), *lp = eplb__live_p2l(rt->live, l);
    const double *ns = eplb_plan_share(plan, l), *ls = eplb__live_share(rt->live, l);
    memcpy(rb->next_p2l + o, np, R * sizeof *np);
    memcpy(rb->next_share + o, ns, R * sizeof *ns);
    /* The segment's plan block has no node shares: a layer dispatching by
     * node shares switches to the posted global shares even if they match. */
    rb->next_flag[l] = eplb__live_node_share(rt->live, l) != NULL;
    for (uint32_t r = 0; r < R; r++)
      if (np[r] != lp[r] || fabs(ns[r] - ls[r]) > 1e-12)
        rb->next_flag[l] = 1;
  }
  eplb_plan_destroy(plan);
  rb->plan_status = st;
  rb->plan_seconds = eplb__now() - t0;
}

/* Builds each layer's next table into its idle host buffer (the map reads
 * only the live one) and, with a device, uploads it into the layer's idle
 * device buffer, before the round's agreement: a failed upload (code 5)
 * then keeps the layer's plan on every rank, host and device alike. */
static void stage_tables(eplb_runtime_t *rt, uint32_t first, uint32_t count, uint64_t *fail) {
  eplb__rebal_t *rb = rt->rb;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t l = rb->mig_layers[first + i];
    size_t o = (size_t)l * rt->g.R;
    if (fail[i])
      continue;
    eplb__dtab_t *t =
        eplb__live_build_idle(rt->live, l, rb->next_p2l + o, rb->next_share + o, NULL);
    if (rt->dev && eplb__device_stage(rt, l, t, rb->next_p2l + o, rb->next_share + o) != EPLB_OK) {
      eplb__log(EPLB_LOG_ERROR, "runtime", "%s", eplb_error_detail());
      fail[i] = 5;
    }
  }
}

/* The status of a round whose layers `failed` (comma list) kept their
 * plan, by the worst code of the agreement (5 a device upload, 4 a
 * timeout, 2 a transfer; 0 none), or whose device flip failed. */
static eplb_status_t round_status(const eplb_runtime_t *rt, const char *failed, int code,
                                  eplb_status_t flip_st) {
  if (code == 5)
    return eplb__error(EPLB_EDEVICE, "runtime",
                       "migration: layers %s keep their old plan (a device table upload failed "
                       "on some rank)",
                       failed);
  if (code == 4)
    return eplb__error(EPLB_ETIMEOUT, "runtime",
                       "migration: layers %s keep their old plan (a transfer was still pending "
                       "after %u ms)",
                       failed, rt->cfg.transfer_timeout_ms);
  if (code)
    return eplb__error(EPLB_ECOMM, "runtime",
                       "migration: layers %s keep their old plan (a transfer failed)", failed);
  if (flip_st != EPLB_OK)
    return eplb__error(flip_st, "runtime",
                       "migration: a device epoch flip failed; retried at the next step_end");
  return EPLB_OK;
}

/* One migration round's working state (run_round and its parts). */
typedef struct round {
  uint32_t round, first, count; /* the round's layers: mig_layers[first, first + count) */
  size_t m0, m1;                /* its moves: moves[m0, m1) */
  size_t nin, nsend, nrecv;     /* slots this rank receives; transfers posted */
  uint64_t B;                   /* bytes of one expert */
  uint64_t *fail;               /* [count] codes agreed by MAX (rb->round_fail) */
  eplb__xfer_t *sends, *recvs;
  uint8_t *xfail;
  uint32_t *xlayer; /* round-local layer of each transfer: receives, then sends */
  size_t *rmove;    /* [nin] the move of each staged slot */
  uint8_t *packed;  /* [moves][B] several tensors a slot: sources gathered to send */
  eplb__xchg_t how;
} round_t;

/* The round's layers and moves, and how many slots this rank receives. */
static void round_span(const eplb_runtime_t *rt, round_t *rd) {
  eplb__rebal_t *rb = rt->rb;
  uint32_t first = 0, count = 0;
  while (first < rb->mig_n && rb->mig_round[first] != rd->round)
    first++;
  while (first + count < rb->mig_n && rb->mig_round[first + count] == rd->round)
    count++;
  rd->first = first;
  rd->count = count;
  rd->m0 = rb->mig_off[first];
  rd->m1 = rb->mig_off[first + count];
  for (size_t m = rd->m0; m < rd->m1; m++)
    rd->nin += rb->moves[m].dst_slot / rt->g.S == rt->g.rank;
}

/* Allocates the round's lists and staging, and checks the weight buffers
 * before any transfer. A local failure must still reach the agreements, or
 * peers would wait forever: it marks every layer of the round (code 1)
 * instead, and a missing buffer marks its layer, so that no peer waits for
 * a send that never comes. Returns the local error, if any. */
static eplb_status_t round_prepare(eplb_runtime_t *rt, round_t *rd) {
  eplb__rebal_t *rb = rt->rb;
  eplb_status_t st = EPLB_OK;
  size_t nin = rd->nin, nm = rd->m1 - rd->m0;
  uint64_t B = rd->B;
  uint64_t *fail = rd->fail = rb->round_fail;
  memset(fail, 0, rd->count * sizeof *fail);
  rd->sends = eplb__calloc(nm + 1, sizeof *rd->sends);
  rd->recvs = eplb__calloc(nin + 1, sizeof *rd->recvs);
  rd->xfail = eplb__calloc(nin + nm + 1, 1);
  rd->xlayer = eplb__calloc(nin + nm + 1, sizeof *rd->xlayer);
  rd->rmove = eplb__calloc(nin + 1, sizeof *rd->rmove);
  bool packed = B > 0 && eplb__wtab_packed(rt->wt);
  rd->packed = packed ? eplb__malloc_array(nm + 1, B) : NULL;
  bool local_fail = !rd->sends || !rd->recvs || !rd->xfail || !rd->xlayer || !rd->rmove ||
                    (packed && !rd->packed);
  if (local_fail)
    st = eplb__error(EPLB_ENOMEM, "runtime", "migration round %u", rd->round);
  else if ((st = eplb__comm_reserve(rt->comm, nin + nm)) != EPLB_OK)
    local_fail = true;
  if (!local_fail && B > 0 && nin > 0 && nin * B > rb->staging_cap) {
    uint8_t *grown = nin > SIZE_MAX / B ? NULL : eplb__realloc(rb->staging, nin * B);
    if (grown) {
      rb->staging = grown;
      rb->staging_cap = nin * B;
    } else {
      local_fail = true;
      st = eplb__error(EPLB_ENOMEM, "runtime", "staging of %zu x %" PRIu64 " bytes", nin, B);
    }
  }
  for (uint32_t i = 0; local_fail && i < rd->count; i++)
    fail[i] = 1;
  for (uint32_t i = 0; B > 0 && i < rd->count; i++) {
    uint32_t l = rb->mig_layers[rd->first + i];
    for (size_t m = rb->mig_off[rd->first + i]; m < rb->mig_off[rd->first + i + 1]; m++) {
      const eplb__migration_t *mv = &rb->moves[m];
      bool mine_src = mv->src_slot / rt->g.S == rt->g.rank,
           mine_dst = mv->dst_slot / rt->g.S == rt->g.rank;
      if ((mine_src && !eplb__wtab_has(rt->wt, l, mv->src_slot % rt->g.S)) ||
          (mine_dst && !eplb__wtab_has(rt->wt, l, mv->dst_slot % rt->g.S)))
        fail[i] = 1;
    }
  }
  return st;
}

/* After the first agreement: the transfers of the layers every rank can
 * move (local copies straight into staging), receives then sends. */
static void round_post(eplb_runtime_t *rt, round_t *rd) {
  eplb__rebal_t *rb = rt->rb;
  uint64_t B = rd->B;
  size_t j = 0;
  for (uint32_t i = 0; B > 0 && i < rd->count; i++) {
    uint32_t l = rb->mig_layers[rd->first + i];
    for (size_t m = rb->mig_off[rd->first + i]; m < rb->mig_off[rd->first + i + 1]; m++) {
      const eplb__migration_t *mv = &rb->moves[m];
      uint32_t srank = mv->src_slot / rt->g.S, drank = mv->dst_slot / rt->g.S;
      uint32_t ss = mv->src_slot % rt->g.S;
      void *src = eplb__wtab_direct(rt->wt, l, ss);
      if (srank == rt->g.rank && !src && !rd->fail[i]) /* several tensors: gathered */
        eplb__wtab_gather(rt->wt, l, ss, src = rd->packed + (m - rd->m0) * B);
      if (drank == rt->g.rank) {
        if (!rd->fail[i]) {
          uint8_t *stage = rb->staging + j * B;
          rd->rmove[j] = m;
          if (srank == rt->g.rank) {
            memcpy(stage, src, B);
          } else {
            rd->xlayer[rd->nrecv] = i;
            rd->recvs[rd->nrecv++] = (eplb__xfer_t){srank, (int)(l & 0x7fff), stage, B};
          }
        }
        j++;
      } else if (srank == rt->g.rank && !rd->fail[i]) {
        rd->xlayer[rd->nin + rd->nsend] = i;
        rd->sends[rd->nsend++] = (eplb__xfer_t){drank, (int)(l & 0x7fff), src, B};
      }
    }
  }
  if (rd->nsend > 0 && rb->inject_stall_ms) {
    rd->how.send_delay_ms = rb->inject_stall_ms;
    rb->inject_stall_ms = 0;
  }
  /* The exchange wants receives then sends in one array. */
  if (rd->nsend > 0 && rd->nrecv < rd->nin) /* nsend == 0 also covers a failed allocation */
    memmove(rd->xlayer + rd->nrecv, rd->xlayer + rd->nin, rd->nsend * sizeof *rd->xlayer);
}

/* The exchange's outcome as layer codes (2 a transfer failed, 4 one timed
 * out; an error no transfer names fails every layer of the round), then
 * the injected failures (3). */
static void round_attribute(eplb_runtime_t *rt, round_t *rd, eplb_status_t xs) {
  eplb__rebal_t *rb = rt->rb;
  uint64_t *fail = rd->fail;
  bool marked = false;
  for (size_t q = 0; q < rd->nrecv + rd->nsend; q++) {
    uint64_t code = rd->xfail[q] == EPLB__XFER_TIMEOUT ? 4 : rd->xfail[q] ? 2 : 0;
    if (code > fail[rd->xlayer[q]])
      fail[rd->xlayer[q]] = code;
    marked |= code > 0;
  }
  for (uint32_t i = 0; xs != EPLB_OK && !marked && i < rd->count; i++)
    if (!fail[i])
      fail[i] = xs == EPLB_ETIMEOUT ? 4 : 2; /* unattributed: keep every layer of the round */
  for (uint32_t i = 0; i < rd->count; i++)
    if (rb->inject_fail[rb->mig_layers[rd->first + i]]) {
      rb->inject_fail[rb->mig_layers[rd->first + i]] = 0;
      fail[i] = 3;
    }
}

/* Layer i of the round moved everywhere: staging into its live slots
 * (staged slots [j0, j1)), then its plan and table switch. */
static void switch_layer(eplb_runtime_t *rt, const round_t *rd, uint32_t i, size_t j0, size_t j1,
                         eplb_status_t *flip_st) {
  eplb__rebal_t *rb = rt->rb;
  uint32_t l = rb->mig_layers[rd->first + i];
  size_t a = rb->mig_off[rd->first + i], b = rb->mig_off[rd->first + i + 1];
  uint64_t B = rd->B;
  for (size_t q = j0; B > 0 && q < j1; q++) {
    const eplb__migration_t *mv = &rb->moves[rd->rmove[q]];
    eplb__wtab_scatter(rt->wt, l, mv->dst_slot % rt->g.S, rb->staging + q * B);
  }
  size_t o = (size_t)l * rt->g.R;
  /* stage_tables built the idle table before the agreement. */
  eplb__live_switch(rt->live, l, rb->next_p2l + o, rb->next_share + o);
  if (rt->dev) {
    eplb_status_t fs = eplb__device_flip(rt, l);
    *flip_st = *flip_st != EPLB_OK ? *flip_st : fs;
  }
  eplb__batch_reset_layer(rt, l);
  rt->m.layers_switched++;
  rt->m.slots_moved += b - a;
  for (size_t m = a; m < b; m++)
    rt->m.bytes_moved[rb->moves[m].link] += B;
}

/* After the second agreement: every layer switches or, failed somewhere,
 * keeps its plan (logged). Returns st, or when it is EPLB_OK the round's
 * status (round_status). */
static eplb_status_t round_apply(eplb_runtime_t *rt, const round_t *rd, eplb_status_t st) {
  eplb__rebal_t *rb = rt->rb;
  bool switched = false, timed_out = false, dev_failed = false;
  eplb_status_t flip_st = EPLB_OK;
  char failed[256] = "";
  size_t flen = 0, j = 0;
  for (uint32_t i = 0; i < rd->count; i++) {
    uint32_t l = rb->mig_layers[rd->first + i];
    size_t jl = j;
    for (size_t m = rb->mig_off[rd->first + i]; m < rb->mig_off[rd->first + i + 1]; m++)
      j += rb->moves[m].dst_slot / rt->g.S == rt->g.rank;
    uint64_t code = rd->fail[i];
    if (!code) {
      switch_layer(rt, rd, i, jl, j, &flip_st);
      switched = true;
      continue;
    }
    rt->m.layers_failed++;
    timed_out |= code == 4;
    dev_failed |= code == 5;
    eplb__log(EPLB_LOG_ERROR, "runtime", "layer %u: migration failed (%s); it keeps its plan", l,
              code == 1   ? "a weight buffer is not registered or no memory"
              : code == 4 ? "a transfer timed out"
              : code == 5 ? "a device table upload failed"
                          : "a transfer failed");
    if (flen < sizeof failed - 16)
      flen += (size_t)snprintf(failed + flen, sizeof failed - flen, "%s%u", flen ? "," : "", l);
  }
  if (switched)
    rt->m.epoch++;
  if (st != EPLB_OK)
    return st;
  return round_status(rt, failed, dev_failed ? 5 : timed_out ? 4 : flen ? 2 : 0, flip_st);
}

/* The round's buffers go; after the last round the migration ends. */
static void round_end(eplb_runtime_t *rt, round_t *rd) {
  eplb__rebal_t *rb = rt->rb;
  if (rb->mig_next_round >= rb->mig_rounds) {
    rb->mig_n = rb->mig_rounds = rb->mig_next_round = 0;
    rb->nmoves = 0;
    eplb__mbox_ack(rt->mbox);
  }
  eplb__free(rd->sends);
  eplb__free(rd->recvs);
  eplb__free(rd->xfail);
  eplb__free(rd->xlayer);
  eplb__free(rd->rmove);
  eplb__free(rd->packed);
}

/* Executes round `mig_next_round`: transfers into staging, agreement on
 * failures, then staging into live slots and table switches. */
static eplb_status_t run_round(eplb_runtime_t *rt) {
  eplb__rebal_t *rb = rt->rb;
  round_t rd = {.round = rb->mig_next_round++,
                .B = rt->cfg.expert_bytes,
                .how = {rb->xfer_seq++, rt->cfg.transfer_timeout_ms, 0}};
  rt->m.migration_rounds++;
  round_span(rt, &rd);
  eplb_status_t st = round_prepare(rt, &rd);
  /* First agreement: which layers every rank can move. */
  eplb_status_t cs = eplb__comm_allreduce_u64(rt->comm, rd.fail, rd.count, EPLB_REDUCE_MAX);
  if (cs == EPLB_OK) {
    round_post(rt, &rd);
    eplb_status_t xs =
        eplb__comm_exchange(rt->comm, &rd.how, rd.sends, rd.nsend, rd.recvs, rd.nrecv, rd.xfail);
    round_attribute(rt, &rd, xs);
    stage_tables(rt, rd.first, rd.count, rd.fail);
    /* Second agreement: which layers moved everywhere. */
    cs = eplb__comm_allreduce_u64(rt->comm, rd.fail, rd.count, EPLB_REDUCE_MAX);
  }
  if (cs != EPLB_OK)
    st = cs;
  else
    st = round_apply(rt, &rd, st);
  round_end(rt, &rd);
  return st;
}

/* Rank 0's plan reaches every rank; every rank derives the same moves. */
static eplb_status_t apply_plan(eplb_runtime_t *rt) {
  eplb__rebal_t *rb = rt->rb;
  eplb_status_t st = EPLB_OK;
  uint32_t L = rt->g.L, R = rt->g.R;
  stop_plan(rt->rb);
  rb->planning = false;
  double head[2] = {(double)rb->plan_status, rb->plan_seconds};
  st = eplb__comm_bcast(rt->comm, head, sizeof head);
  if (st != EPLB_OK)
    return st;
  rt->m.plans++;
  rt->m.last_plan_seconds = head[1];
  if ((int)head[0] != EPLB_OK) {
    rt->m.plans_failed++;
    return eplb__error((eplb_status_t)(int)head[0], "runtime",
                       "plan on rank 0 failed; the current plan stays");
  }
  if ((st = eplb__comm_bcast(rt->comm, rb->next_flag, L)) != EPLB_OK ||
      (st = eplb__comm_bcast(rt->comm, rb->next_p2l, (size_t)L * R * sizeof(int32_t))) != EPLB_OK ||
      (st = eplb__comm_bcast(rt->comm, rb->next_share, (size_t)L * R * sizeof(double))) != EPLB_OK)
    return st;
  rb->mig_n = 0;
  rb->nmoves = 0;
  for (uint32_t l = 0; l < L; l++) {
    if (!rb->next_flag[l])
      continue;
    rb->mig_off[rb->mig_n] = rb->nmoves;
    eplb__mig_geom_t geom = {R, rt->g.P, rb->slot_gpu, rb->gpu_node};
    st = eplb__migration_layer(&geom, l, eplb__live_p2l(rt->live, l), rb->next_p2l + (size_t)l * R,
                               &rb->moves, &rb->nmoves, &rb->moves_cap, rb->mig_used);
    if (st != EPLB_OK)
      break;
    rb->mig_layers[rb->mig_n++] = l;
  }
  rb->mig_off[rb->mig_n] = rb->nmoves;
  uint64_t *work = NULL;
  if (st == EPLB_OK && !(work = eplb__malloc_array(2 * (size_t)rt->g.P, sizeof *work)))
    st = eplb__error(EPLB_ENOMEM, "runtime", "schedule");
  /* The diff is the same everywhere unless an allocation failed somewhere. */
  uint64_t agree = st != EPLB_OK;
  eplb_status_t cs = eplb__comm_allreduce_u64(rt->comm, &agree, 1, EPLB_REDUCE_MAX);
  if (cs != EPLB_OK || agree) {
    eplb__free(work);
    if (st == EPLB_OK)
      st = cs != EPLB_OK
               ? cs
               : eplb__error(EPLB_ENOMEM, "runtime", "migration diff failed on another rank");
    goto fail;
  }
  if (rb->mig_n == 0) {
    eplb__free(work);
    return EPLB_OK;
  }
  uint64_t B = rt->cfg.expert_bytes;
  uint64_t per_rank = B ? rt->cfg.policy.staging_bytes / B : UINT64_MAX;
  eplb__mig_geom_t geom = {R, rt->g.P, rb->slot_gpu, rb->gpu_node};
  rb->mig_rounds =
      eplb__migration_rounds(&geom, rb->mig_n, rb->mig_off, rb->moves,
                             rt->cfg.policy.layers_per_step, per_rank, rb->mig_round, work);
  eplb__free(work);
  rb->mig_next_round = 0;
  rt->m.rebalances++;
  return run_round(rt);
fail:
  rb->mig_n = 0;
  rb->nmoves = 0;
  return st;
}

eplb_status_t eplb__rebalance_step(eplb_runtime_t *rt) {
  eplb__rebal_t *rb = rt->rb;
  eplb_status_t st = EPLB_OK;
  const eplb_runtime_policy_t *p = &rt->cfg.policy;
  if (rb->mig_n > 0)
    st = run_round(rt);
  else if (rb->planning && rt->m.steps >= rb->apply_step)
    st = apply_plan(rt);
  else if (rb->mailbox_ready) {
    rb->mailbox_ready = false;
    if (rt->g.rank == 0)
      take_mailbox_plan(rt);
    st = apply_plan(rt);
    if (rb->mig_n == 0)
      eplb__mbox_ack(rt->mbox);
  }
  if (p->interval_steps && !rb->planning && rb->mig_n == 0 &&
      (rt->m.steps + 1) % p->interval_steps == 0) {
    eplb_status_t s2 = start_plan(rt);
    st = st != EPLB_OK ? st : s2;
  }
  rt->m.migrating = rb->planning || rb->mig_n > 0;
  return st;
}
