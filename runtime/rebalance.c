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

/* Balancedness (mean / max GPU load) of one layer's placement on loads w. */
static double layer_balancedness(const eplb_runtime_t *rt, const int32_t *p2l, const double *share,
                                 const double *w, double *gpu) {
  double total = 0, max = 0;
  memset(gpu, 0, rt->P * sizeof *gpu);
  for (uint32_t r = 0; r < rt->R; r++)
    gpu[r / rt->S] += share[r] * w[p2l[r]];
  for (uint32_t g = 0; g < rt->P; g++) {
    total += gpu[g];
    max = gpu[g] > max ? gpu[g] : max;
  }
  return max > 0 ? total / rt->P / max : 1.0;
}

double eplb__runtime_balancedness(const eplb_runtime_t *rt, const double *loads) {
  double *gpu = eplb__malloc_array(rt->P, sizeof *gpu);
  double sum = 0;
  if (!gpu)
    return 0;
  for (uint32_t l = 0; l < rt->L; l++)
    sum += layer_balancedness(rt, rt->phy2log + (size_t)l * rt->R, rt->share + (size_t)l * rt->R,
                              loads + (size_t)l * rt->E, gpu);
  eplb__free(gpu);
  return sum / rt->L;
}

/* Plans from the window snapshot, then picks the layers worth switching by
 * the planner's rule (eplb_plan_switch_select: the simulator's too). */
static eplb_status_t plan_and_select(eplb_runtime_t *rt) {
  eplb_status_t st = EPLB_OK;
  eplb_plan_t *plan = NULL, *cur = NULL;
  uint32_t L = rt->L, R = rt->R;
  memset(rt->next_flag, 0, L);
  double total = 0;
  for (size_t i = 0; i < rt->LE; i++)
    total += rt->plan_loads[i];
  if (total == 0)
    return EPLB_OK;
  eplb_loads_t loads = {L, rt->E, rt->plan_loads};
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = rt->cfg.policy.plan_policy;
  o.num_gpus = rt->P;
  o.num_nodes = rt->P / rt->K;
  o.num_replicas = R;
  /* The thread owns nothing the serving thread writes while planning: the
   * live plan only changes after the join. */
  if ((st = eplb__plan_alloc(L, rt->E, rt->P, rt->P / rt->K, R, NULL, &cur)) != EPLB_OK)
    goto done;
  memcpy(cur->phy2log, rt->phy2log, (size_t)L * R * sizeof *rt->phy2log);
  memcpy(cur->share, rt->share, (size_t)L * R * sizeof *rt->share);
  if (o.policy == EPLB_POLICY_INCREMENTAL)
    o.from = cur;
  if ((st = eplb_plan_create(&loads, &o, &plan)) != EPLB_OK)
    goto done;
  for (uint32_t l = 0; l < L; l++) {
    memcpy(rt->next_p2l + (size_t)l * R, eplb_plan_phy2log(plan, l), R * sizeof *rt->next_p2l);
    memcpy(rt->next_share + (size_t)l * R, eplb_plan_share(plan, l), R * sizeof *rt->next_share);
  }
  eplb_plan_switch_options_t so;
  eplb_plan_switch_options_default(&so);
  so.gain_threshold = rt->cfg.policy.gain_threshold;
  so.move_budget = rt->cfg.policy.move_budget;
  st = eplb_plan_switch_select(cur, plan, &loads, &so, rt->next_flag, NULL);
done:
  eplb_plan_destroy(plan);
  eplb_plan_destroy(cur);
  return st;
}

static void *plan_main(void *arg) {
  eplb_runtime_t *rt = arg;
  double t0 = eplb__now();
  rt->plan_status = plan_and_select(rt);
  if (rt->plan_status != EPLB_OK)
    eplb__log(EPLB_LOG_ERROR, "runtime", "plan failed: %s", eplb_error_detail());
  rt->plan_seconds = eplb__now() - t0;
  eplb_split_glpk_thread_done(); /* the mip policy uses GLPK's per-thread state */
  return NULL;
}

static eplb_status_t start_plan(eplb_runtime_t *rt) {
  rt->planning = true;
  rt->apply_step = rt->m.steps + rt->cfg.policy.plan_lag_steps;
  if (rt->rank != 0)
    return EPLB_OK;
  for (size_t i = 0; i < rt->LE; i++)
    rt->plan_loads[i] = (double)rt->wsum[i];
  if (pthread_create(&rt->thread, NULL, plan_main, rt) != 0) {
    /* Planning inline keeps ranks in step; only latency suffers. */
    plan_main(rt);
    return EPLB_OK;
  }
  rt->thread_running = true;
  return EPLB_OK;
}

void eplb__rebalance_stop(eplb_runtime_t *rt) {
  if (rt->thread_running)
    pthread_join(rt->thread, NULL);
  rt->thread_running = false;
}

/* Builds each layer's next table into its idle host buffer (the map reads
 * only the live one) and, with a device, uploads it into the layer's idle
 * device buffer, before the round's agreement: a failed upload (code 5)
 * then keeps the layer's plan on every rank, host and device alike. */
static void stage_tables(eplb_runtime_t *rt, uint32_t first, uint32_t count, uint64_t *fail) {
  for (uint32_t i = 0; i < count; i++) {
    uint32_t l = rt->mig_layers[first + i];
    size_t o = (size_t)l * rt->R;
    if (fail[i])
      continue;
    eplb__dtab_t *t = &rt->tab[l][!rt->active[l]];
    eplb__dtab_build(t, rt->E, rt->R, rt->next_p2l + o, rt->next_share + o, rt->S, rt->K, rt->node,
                     rt->cfg.local_first);
    if (rt->dev && eplb__device_stage(rt, l, t, rt->next_p2l + o, rt->next_share + o) != EPLB_OK) {
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
  uint64_t *fail;               /* [count] codes agreed by MAX (rt->round_fail) */
  eplb__xfer_t *sends, *recvs;
  uint8_t *xfail;
  uint32_t *xlayer; /* round-local layer of each transfer: receives, then sends */
  size_t *rmove;    /* [nin] the move of each staged slot */
  eplb__xchg_t how;
} round_t;

/* The round's layers and moves, and how many slots this rank receives. */
static void round_span(const eplb_runtime_t *rt, round_t *rd) {
  uint32_t first = 0, count = 0;
  while (first < rt->mig_n && rt->mig_round[first] != rd->round)
    first++;
  while (first + count < rt->mig_n && rt->mig_round[first + count] == rd->round)
    count++;
  rd->first = first;
  rd->count = count;
  rd->m0 = rt->mig_off[first];
  rd->m1 = rt->mig_off[first + count];
  for (size_t m = rd->m0; m < rd->m1; m++)
    rd->nin += rt->moves[m].dst_slot / rt->S == rt->rank;
}

/* Allocates the round's lists and staging, and checks the weight buffers
 * before any transfer. A local failure must still reach the agreements, or
 * peers would wait forever: it marks every layer of the round (code 1)
 * instead, and a missing buffer marks its layer, so that no peer waits for
 * a send that never comes. Returns the local error, if any. */
static eplb_status_t round_prepare(eplb_runtime_t *rt, round_t *rd) {
  eplb_status_t st = EPLB_OK;
  size_t nin = rd->nin, nm = rd->m1 - rd->m0;
  uint64_t B = rd->B;
  uint64_t *fail = rd->fail = rt->round_fail;
  memset(fail, 0, rd->count * sizeof *fail);
  rd->sends = eplb__calloc(nm + 1, sizeof *rd->sends);
  rd->recvs = eplb__calloc(nin + 1, sizeof *rd->recvs);
  rd->xfail = eplb__calloc(nin + nm + 1, 1);
  rd->xlayer = eplb__calloc(nin + nm + 1, sizeof *rd->xlayer);
  rd->rmove = eplb__calloc(nin + 1, sizeof *rd->rmove);
  bool local_fail = !rd->sends || !rd->recvs || !rd->xfail || !rd->xlayer || !rd->rmove;
  if (local_fail)
    st = eplb__error(EPLB_ENOMEM, "runtime", "migration round %u", rd->round);
  else if ((st = eplb__comm_reserve(rt->comm, nin + nm)) != EPLB_OK)
    local_fail = true;
  if (!local_fail && B > 0 && nin > 0 && nin * B > rt->staging_cap) {
    uint8_t *grown = nin > SIZE_MAX / B ? NULL : eplb__realloc(rt->staging, nin * B);
    if (grown) {
      rt->staging = grown;
      rt->staging_cap = nin * B;
    } else {
      local_fail = true;
      st = eplb__error(EPLB_ENOMEM, "runtime", "staging of %zu x %" PRIu64 " bytes", nin, B);
    }
  }
  for (uint32_t i = 0; local_fail && i < rd->count; i++)
    fail[i] = 1;
  for (uint32_t i = 0; B > 0 && i < rd->count; i++) {
    uint32_t l = rt->mig_layers[rd->first + i];
    for (size_t m = rt->mig_off[rd->first + i]; m < rt->mig_off[rd->first + i + 1]; m++) {
      const eplb__migration_t *mv = &rt->moves[m];
      bool mine_src = mv->src_slot / rt->S == rt->rank, mine_dst = mv->dst_slot / rt->S == rt->rank;
      if ((mine_src && !rt->weights[(size_t)l * rt->S + mv->src_slot % rt->S].ptr) ||
          (mine_dst && !rt->weights[(size_t)l * rt->S + mv->dst_slot % rt->S].ptr))
        fail[i] = 1;
    }
  }
  return st;
}

/* After the first agreement: the transfers of the layers every rank can
 * move (local copies straight into staging), receives then sends. */
static void round_post(eplb_runtime_t *rt, round_t *rd) {
  uint64_t B = rd->B;
  size_t j = 0;
  for (uint32_t i = 0; B > 0 && i < rd->count; i++) {
    uint32_t l = rt->mig_layers[rd->first + i];
    for (size_t m = rt->mig_off[rd->first + i]; m < rt->mig_off[rd->first + i + 1]; m++) {
      const eplb__migration_t *mv = &rt->moves[m];
      uint32_t srank = mv->src_slot / rt->S, drank = mv->dst_slot / rt->S;
      void *src = rt->weights[(size_t)l * rt->S + mv->src_slot % rt->S].ptr;
      if (drank == rt->rank) {
        if (!rd->fail[i]) {
          uint8_t *stage = rt->staging + j * B;
          rd->rmove[j] = m;
          if (srank == rt->rank) {
            memcpy(stage, src, B);
          } else {
            rd->xlayer[rd->nrecv] = i;
            rd->recvs[rd->nrecv++] = (eplb__xfer_t){srank, (int)(l & 0x7fff), stage, B};
          }
        }
        j++;
      } else if (srank == rt->rank && !rd->fail[i]) {
        rd->xlayer[rd->nin + rd->nsend] = i;
        rd->sends[rd->nsend++] = (eplb__xfer_t){drank, (int)(l & 0x7fff), src, B};
      }
    }
  }
  if (rd->nsend > 0 && rt->inject_stall_ms) {
    rd->how.send_delay_ms = rt->inject_stall_ms;
    rt->inject_stall_ms = 0;
  }
  /* The exchange wants receives then sends in one array. */
  if (rd->nsend > 0 && rd->nrecv < rd->nin) /* nsend == 0 also covers a failed allocation */
    memmove(rd->xlayer + rd->nrecv, rd->xlayer + rd->nin, rd->nsend * sizeof *rd->xlayer);
}

/* The exchange's outcome as layer codes (2 a transfer failed, 4 one timed
 * out; an error no transfer names fails every layer of the round), then
 * the injected failures (3). */
static void round_attribute(eplb_runtime_t *rt, round_t *rd, eplb_status_t xs) {
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
    if (rt->inject_fail[rt->mig_layers[rd->first + i]]) {
      rt->inject_fail[rt->mig_layers[rd->first + i]] = 0;
      fail[i] = 3;
    }
}

/* Layer i of the round moved everywhere: staging into its live slots
 * (staged slots [j0, j1)), then its plan and table switch. */
static void switch_layer(eplb_runtime_t *rt, const round_t *rd, uint32_t i, size_t j0, size_t j1,
                         eplb_status_t *flip_st) {
  uint32_t l = rt->mig_layers[rd->first + i];
  size_t a = rt->mig_off[rd->first + i], b = rt->mig_off[rd->first + i + 1];
  uint64_t B = rd->B;
  for (size_t q = j0; B > 0 && q < j1; q++) {
    const eplb__migration_t *mv = &rt->moves[rd->rmove[q]];
    memcpy(rt->weights[(size_t)l * rt->S + mv->dst_slot % rt->S].ptr, rt->staging + q * B, B);
  }
  size_t o = (size_t)l * rt->R;
  memcpy(rt->phy2log + o, rt->next_p2l + o, rt->R * sizeof *rt->phy2log);
  memcpy(rt->share + o, rt->next_share + o, rt->R * sizeof *rt->share);
  rt->has_ns[l] = 0; /* the runtime's plans and eplbd's carry no node shares */
  /* stage_tables built the idle table before the agreement. */
  rt->active[l] = (uint8_t)!rt->active[l];
  if (rt->dev) {
    eplb_status_t fs = eplb__device_flip(rt, l);
    *flip_st = *flip_st != EPLB_OK ? *flip_st : fs;
  }
  eplb__batch_reset_layer(rt, l);
  rt->m.layers_switched++;
  rt->m.slots_moved += b - a;
  for (size_t m = a; m < b; m++)
    rt->m.bytes_moved[rt->moves[m].link] += B;
}

/* After the second agreement: every layer switches or, failed somewhere,
 * keeps its plan (logged). Returns st, or when it is EPLB_OK the round's
 * status (round_status). */
static eplb_status_t round_apply(eplb_runtime_t *rt, const round_t *rd, eplb_status_t st) {
  bool switched = false, timed_out = false, dev_failed = false;
  eplb_status_t flip_st = EPLB_OK;
  char failed[256] = "";
  size_t flen = 0, j = 0;
  for (uint32_t i = 0; i < rd->count; i++) {
    uint32_t l = rt->mig_layers[rd->first + i];
    size_t jl = j;
    for (size_t m = rt->mig_off[rd->first + i]; m < rt->mig_off[rd->first + i + 1]; m++)
      j += rt->moves[m].dst_slot / rt->S == rt->rank;
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
  if (rt->mig_next_round >= rt->mig_rounds) {
    rt->mig_n = rt->mig_rounds = rt->mig_next_round = 0;
    rt->nmoves = 0;
    eplb__shm_ack(rt);
  }
  eplb__free(rd->sends);
  eplb__free(rd->recvs);
  eplb__free(rd->xfail);
  eplb__free(rd->xlayer);
  eplb__free(rd->rmove);
}

/* Executes round `mig_next_round`: transfers into staging, agreement on
 * failures, then staging into live slots and table switches. */
static eplb_status_t run_round(eplb_runtime_t *rt) {
  round_t rd = {.round = rt->mig_next_round++,
                .B = rt->cfg.expert_bytes,
                .how = {rt->xfer_seq++, rt->cfg.transfer_timeout_ms, 0}};
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
  eplb_status_t st = EPLB_OK;
  uint32_t L = rt->L, R = rt->R;
  eplb__rebalance_stop(rt);
  rt->planning = false;
  double head[2] = {(double)rt->plan_status, rt->plan_seconds};
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
  if ((st = eplb__comm_bcast(rt->comm, rt->next_flag, L)) != EPLB_OK ||
      (st = eplb__comm_bcast(rt->comm, rt->next_p2l, (size_t)L * R * sizeof(int32_t))) != EPLB_OK ||
      (st = eplb__comm_bcast(rt->comm, rt->next_share, (size_t)L * R * sizeof(double))) != EPLB_OK)
    return st;
  rt->mig_n = 0;
  rt->nmoves = 0;
  for (uint32_t l = 0; l < L; l++) {
    if (!rt->next_flag[l])
      continue;
    rt->mig_off[rt->mig_n] = rt->nmoves;
    eplb__mig_geom_t geom = {R, rt->P, rt->slot_gpu, rt->batch.gpu_node};
    st = eplb__migration_layer(&geom, l, rt->phy2log + (size_t)l * R, rt->next_p2l + (size_t)l * R,
                               &rt->moves, &rt->nmoves, &rt->moves_cap, rt->mig_used);
    if (st != EPLB_OK)
      break;
    rt->mig_layers[rt->mig_n++] = l;
  }
  rt->mig_off[rt->mig_n] = rt->nmoves;
  uint64_t *work = NULL;
  if (st == EPLB_OK && !(work = eplb__malloc_array(2 * (size_t)rt->P, sizeof *work)))
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
  if (rt->mig_n == 0) {
    eplb__free(work);
    return EPLB_OK;
  }
  uint64_t B = rt->cfg.expert_bytes;
  uint64_t per_rank = B ? rt->cfg.policy.staging_bytes / B : UINT64_MAX;
  eplb__mig_geom_t geom = {R, rt->P, rt->slot_gpu, rt->batch.gpu_node};
  rt->mig_rounds =
      eplb__migration_rounds(&geom, rt->mig_n, rt->mig_off, rt->moves,
                             rt->cfg.policy.layers_per_step, per_rank, rt->mig_round, work);
  eplb__free(work);
  rt->mig_next_round = 0;
  rt->m.rebalances++;
  return run_round(rt);
fail:
  rt->mig_n = 0;
  rt->nmoves = 0;
  return st;
}

eplb_status_t eplb__rebalance_step(eplb_runtime_t *rt) {
  eplb_status_t st = EPLB_OK;
  const eplb_runtime_policy_t *p = &rt->cfg.policy;
  if (rt->mig_n > 0)
    st = run_round(rt);
  else if (rt->planning && rt->m.steps >= rt->apply_step)
    st = apply_plan(rt);
  else if (rt->mailbox_ready) {
    rt->mailbox_ready = false;
    if (rt->rank == 0)
      eplb__shm_take_plan(rt);
    st = apply_plan(rt);
    if (rt->mig_n == 0)
      eplb__shm_ack(rt);
  }
  if (p->interval_steps && !rt->planning && rt->mig_n == 0 &&
      (rt->m.steps + 1) % p->interval_steps == 0) {
    eplb_status_t s2 = start_plan(rt);
    st = st != EPLB_OK ? st : s2;
  }
  rt->m.migrating = rt->planning || rt->mig_n > 0;
  return st;
}
