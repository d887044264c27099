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

/* Executes round `mig_next_round`: transfers into staging, agreement on
 * failures, then staging into live slots and table switches. */
static eplb_status_t run_round(eplb_runtime_t *rt) {
  eplb_status_t st = EPLB_OK, xs = EPLB_OK;
  uint32_t round = rt->mig_next_round++;
  rt->m.migration_rounds++;
  uint32_t first = 0, count = 0;
  eplb__xfer_t *sends = NULL, *recvs = NULL;
  uint8_t *xfail = NULL;
  uint32_t *xlayer = NULL; /* round-local layer of each transfer: receives, then sends */
  uint64_t *fail = NULL;
  size_t *rmove = NULL;
  eplb__xchg_t how = {rt->xfer_seq++, rt->cfg.transfer_timeout_ms, 0};
  while (first < rt->mig_n && rt->mig_round[first] != round)
    first++;
  while (first + count < rt->mig_n && rt->mig_round[first + count] == round)
    count++;
  size_t m0 = rt->mig_off[first], m1 = rt->mig_off[first + count];
  uint64_t B = rt->cfg.expert_bytes;
  size_t nin = 0, nsend = 0, nrecv = 0;
  for (size_t m = m0; m < m1; m++)
    nin += rt->moves[m].dst_slot / rt->S == rt->rank;
  /* A local failure must still reach the agreements below, or peers would
   * wait forever: it fails every layer of the round instead. */
  fail = rt->round_fail;
  memset(fail, 0, count * sizeof *fail);
  sends = eplb__calloc(m1 - m0 + 1, sizeof *sends);
  recvs = eplb__calloc(nin + 1, sizeof *recvs);
  xfail = eplb__calloc(nin + m1 - m0 + 1, 1);
  xlayer = eplb__calloc(nin + m1 - m0 + 1, sizeof *xlayer);
  rmove = eplb__calloc(nin + 1, sizeof *rmove);
  bool local_fail = !sends || !recvs || !xfail || !xlayer || !rmove;
  if (local_fail)
    st = eplb__error(EPLB_ENOMEM, "runtime", "migration round %u", round);
  else if ((st = eplb__comm_reserve(rt->comm, nin + (m1 - m0))) != EPLB_OK)
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
  for (uint32_t i = 0; local_fail && i < count; i++)
    fail[i] = 1;
  /* Local check before any transfer: a missing buffer must not leave a
   * peer waiting for a send that never comes. */
  for (uint32_t i = 0; B > 0 && i < count; i++) {
    uint32_t l = rt->mig_layers[first + i];
    for (size_t m = rt->mig_off[first + i]; m < rt->mig_off[first + i + 1]; m++) {
      const eplb__migration_t *mv = &rt->moves[m];
      bool mine_src = mv->src_slot / rt->S == rt->rank, mine_dst = mv->dst_slot / rt->S == rt->rank;
      if ((mine_src && !rt->weights[(size_t)l * rt->S + mv->src_slot % rt->S].ptr) ||
          (mine_dst && !rt->weights[(size_t)l * rt->S + mv->dst_slot % rt->S].ptr))
        fail[i] = 1;
    }
  }
  eplb_status_t cs = eplb__comm_allreduce_u64(rt->comm, fail, count, EPLB_REDUCE_MAX);
  if (cs != EPLB_OK) {
    st = cs;
    goto done;
  }
  size_t j = 0;
  for (uint32_t i = 0; B > 0 && i < count; i++) {
    uint32_t l = rt->mig_layers[first + i];
    for (size_t m = rt->mig_off[first + i]; m < rt->mig_off[first + i + 1]; m++) {
      const eplb__migration_t *mv = &rt->moves[m];
      uint32_t srank = mv->src_slot / rt->S, drank = mv->dst_slot / rt->S;
      void *src = rt->weights[(size_t)l * rt->S + mv->src_slot % rt->S].ptr;
      if (drank == rt->rank) {
        if (!fail[i]) {
          uint8_t *stage = rt->staging + j * B;
          rmove[j] = m;
          if (srank == rt->rank) {
            memcpy(stage, src, B);
          } else {
            xlayer[nrecv] = i;
            recvs[nrecv++] = (eplb__xfer_t){srank, (int)(l & 0x7fff), stage, B};
          }
        }
        j++;
      } else if (srank == rt->rank && !fail[i]) {
        xlayer[nin + nsend] = i;
        sends[nsend++] = (eplb__xfer_t){drank, (int)(l & 0x7fff), src, B};
      }
    }
  }
  if (nsend > 0 && rt->inject_stall_ms) {
    how.send_delay_ms = rt->inject_stall_ms;
    rt->inject_stall_ms = 0;
  }
  /* The exchange wants receives then sends in one array. */
  if (nsend > 0 && nrecv < nin) /* nsend == 0 also covers a failed allocation */
    memmove(xlayer + nrecv, xlayer + nin, nsend * sizeof *xlayer);
  xs = eplb__comm_exchange(rt->comm, &how, sends, nsend, recvs, nrecv, xfail);
  /* Codes agreed by MAX: 2 a transfer failed, 4 one timed out. */
  bool marked = false;
  for (size_t q = 0; q < nrecv + nsend; q++) {
    uint64_t code = xfail[q] == EPLB__XFER_TIMEOUT ? 4 : xfail[q] ? 2 : 0;
    if (code > fail[xlayer[q]])
      fail[xlayer[q]] = code;
    marked |= code > 0;
  }
  for (uint32_t i = 0; xs != EPLB_OK && !marked && i < count; i++)
    if (!fail[i])
      fail[i] = xs == EPLB_ETIMEOUT ? 4 : 2; /* unattributed: keep every layer of the round */
  for (uint32_t i = 0; i < count; i++)
    if (rt->inject_fail[rt->mig_layers[first + i]]) {
      rt->inject_fail[rt->mig_layers[first + i]] = 0;
      fail[i] = 3;
    }
  cs = eplb__comm_allreduce_u64(rt->comm, fail, count, EPLB_REDUCE_MAX);
  if (cs != EPLB_OK) {
    st = cs;
    goto done;
  }
  bool switched = false, timed_out = false;
  char failed[256] = "";
  size_t flen = 0;
  j = 0;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t l = rt->mig_layers[first + i];
    size_t a = rt->mig_off[first + i], b = rt->mig_off[first + i + 1];
    size_t jl = j;
    for (size_t m = a; m < b; m++)
      j += rt->moves[m].dst_slot / rt->S == rt->rank;
    if (fail[i]) {
      rt->m.layers_failed++;
      timed_out |= fail[i] == 4;
      eplb__log(EPLB_LOG_ERROR, "runtime", "layer %u: migration failed (%s); it keeps its plan", l,
                fail[i] == 1   ? "a weight buffer is not registered or no memory"
                : fail[i] == 4 ? "a transfer timed out"
                               : "a transfer failed");
      if (flen < sizeof failed - 16)
        flen += (size_t)snprintf(failed + flen, sizeof failed - flen, "%s%u", flen ? "," : "", l);
      continue;
    }
    for (size_t q = jl; B > 0 && q < j; q++) {
      const eplb__migration_t *mv = &rt->moves[rmove[q]];
      memcpy(rt->weights[(size_t)l * rt->S + mv->dst_slot % rt->S].ptr, rt->staging + q * B, B);
    }
    size_t o = (size_t)l * rt->R;
    memcpy(rt->phy2log + o, rt->next_p2l + o, rt->R * sizeof *rt->phy2log);
    memcpy(rt->share + o, rt->next_share + o, rt->R * sizeof *rt->share);
    rt->has_ns[l] = 0; /* the runtime's plans and eplbd's carry no node shares */
    uint8_t idle = (uint8_t)!rt->active[l];
    eplb__dtab_build(&rt->tab[l][idle], rt->E, rt->R, rt->phy2log + o, rt->share + o, rt->S, rt->K,
                     rt->node, rt->cfg.local_first);
    rt->active[l] = idle;
    eplb__batch_reset_layer(rt, l);
    rt->m.layers_switched++;
    rt->m.slots_moved += b - a;
    for (size_t m = a; m < b; m++)
      rt->m.bytes_moved[rt->moves[m].link] += B;
    switched = true;
  }
  if (switched)
    rt->m.epoch++;
  if (flen && st == EPLB_OK && timed_out)
    st = eplb__error(EPLB_ETIMEOUT, "runtime",
                     "migration: layers %s keep their old plan (a transfer was still pending "
                     "after %u ms)",
                     failed, rt->cfg.transfer_timeout_ms);
  else if (flen && st == EPLB_OK)
    st = eplb__error(EPLB_ECOMM, "runtime",
                     "migration: layers %s keep their old plan (a transfer failed)", failed);
done:
  if (rt->mig_next_round >= rt->mig_rounds) {
    rt->mig_n = rt->mig_rounds = rt->mig_next_round = 0;
    rt->nmoves = 0;
    eplb__shm_ack(rt);
  }
  eplb__free(sends);
  eplb__free(recvs);
  eplb__free(xfail);
  eplb__free(xlayer);
  eplb__free(rmove);
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
