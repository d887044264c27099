/* eplb replay — the runtime's test harness: drive the embedded runtime with a
 * recorded trace across MPI ranks, migrating real host buffers, and check
 * every mapped token (tests/runtime/replay.sh runs it under mpirun). */
#include "bench.h"
#include "cli.h"

#include <eplb/plan.h>
#include <eplb/runtime.h>
#include <eplb/runtime_testing.h>
#include <eplb/sim.h>

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char replay_usage[] =
    "usage: mpirun -np P eplb replay --trace T --slots-per-gpu S --ranks-per-node K\n"
    "                   [--policy P] [--rebalance-every N] [--expert-bytes B] [--window W]\n"
    "                   [--layers-per-step N] [--inject-failure LAYER] [--no-local-first]\n"
    "                   [--count-thread] [--split-per-batch | --no-split-per-batch]\n"
    "                   [--split-tolerance X] [--plan-steps A:B] [--json]\n"
    "\n"
    "  A test harness of the runtime (not a serving tool): it checks that migration never\n"
    "  maps a token to a slot without its expert's weights, and fails (exit 1) if one does.\n"
    "  Each rank (one per GPU) feeds its share of every step's top-k rows (a contiguous\n"
    "  block) through the runtime's record and map. The runtime replans every N steps\n"
    "  (policy P: deepseek, balanced, mip; default balanced, N = 16, window W = N) and\n"
    "  migrates host buffers of B bytes per expert slot (default 4096) whose contents name\n"
    "  their logical expert. Every step every rank checks that each token it mapped lands\n"
    "  on a slot whose buffer (gathered from its owner) holds that expert: violations.\n"
    "  Both runtimes start from one plan of steps A..B-1 (--plan-steps, default the first\n"
    "  half); the replay scores the other steps only (held out), saying which.\n"
    "  Balancedness is mean/max tokens per GPU, averaged over layers and scored steps;\n"
    "  mean_balancedness_static is the same replay with the first plan kept throughout\n"
    "  and mapped by its static shares.\n"
    "  --split-per-batch   re-split every layer of every batch inside the runtime (the\n"
    "                      default with more than one rank; eplb/runtime.h): route\n"
    "                      all-reduces the batch's counts, splits them exactly (with the\n"
    "                      locality stage over nodes unless --no-local-first) and maps by\n"
    "                      quotas; --no-split-per-batch maps by the plans' static shares\n"
    "  --split-tolerance X the locality stage's slack over T* (default 0.01)\n"
    "  --inject-failure LAYER  rank P-1 fails its first migration of LAYER (the layer must\n"
    "                      keep its old plan everywhere; violations stay 0)\n"
    "  --inject-stall MS   rank P-1 posts the sends of its next migration MS ms late (past\n"
    "                      the runtime's transfer deadline: the moves time out)\n"
    "  --no-local-first    map by the plan's global shares (default: a replica on the\n"
    "                      token's node first, see eplb/runtime.h)\n"
    "  --count-thread      count recorded ids on the runtime's counting thread\n"
    "                      (eplb_runtime_config_t.count_thread)\n"
    "  --json              rank 0 prints {\"steps\", \"rebalances\", \"slots_moved\",\n"
    "                      \"bytes_moved\", \"bytes_moved_by_link\", \"violations\",\n"
    "                      \"mean_balancedness\", \"mean_balancedness_split\" (null when\n"
    "                      off), \"mean_balancedness_static\", \"cross_node_copies\",\n"
    "                      \"split_us_median\", \"allreduce_us_median\" (per layer call),\n"
    "                      \"plan_steps\": [A, B], \"scored_steps\", \"per_step\":\n"
    "                      [{\"step\", \"scored\", \"balancedness\", ...}], ...}\n"
    "  Without MPI (or run without mpirun) it runs as one rank.\n";

typedef struct opts {
  const char *trace;
  uint32_t slots, rpn, rebalance, window, lps;
  uint64_t bytes;
  int64_t fail_layer;
  uint32_t stall_ms; /* --inject-stall */
  eplb_plan_policy_t policy;
  int json, no_local_first, count_thread;
  int32_t split;   /* eplb_runtime_config_t.split_per_batch */
  double tol;      /* split_tolerance */
  uint64_t pa, pb; /* plan steps [pa, pb); pb 0: the first half */
  /* continuous re-placement: window (0 off), lag, in place, its options */
  uint32_t cwin, clag;
  int cin_place, have_cwin, have_rebalance, no_continuous;
  eplb_plan_step_options_t step;
} opts_t;

/* Byte b of the buffer of (layer, expert): a pattern no other expert has. */
static inline uint8_t pattern(uint32_t layer, int32_t expert, uint64_t b) {
  return (uint8_t)(expert * 131u + layer * 7u + (uint32_t)(b % 251));
}

static void fill(uint8_t *buf, uint64_t n, uint32_t layer, int32_t expert) {
  for (uint64_t b = 0; b < n; b++)
    buf[b] = pattern(layer, expert, b);
}

/* Which expert the buffer holds, or -1 if it is no expert's pattern. */
static int32_t identify(const uint8_t *buf, uint64_t n, uint32_t layer, uint32_t E) {
  for (uint32_t e = 0; e < E; e++) {
    if (buf[0] != pattern(layer, (int32_t)e, 0))
      continue;
    uint64_t b = 1;
    while (b < n && buf[b] == pattern(layer, (int32_t)e, b))
      b++;
    if (b == n)
      return (int32_t)e;
  }
  return -1;
}

static int parse(int argc, char **argv, opts_t *o) {
  int c, have_fail = 0;
  uint32_t fail = 0;
  memset(o, 0, sizeof *o);
  o->rebalance = 16;
  o->lps = 4;
  o->bytes = 4096;
  o->policy = EPLB_POLICY_BALANCED;
  o->tol = 0.01;
  o->pb = 0;     /* unset: the first half */
  o->split = -1; /* unset: the runtime's default (on with several ranks) */
  eplb_plan_step_options_default(&o->step);
  const cli_opt_t opts[] = {
      {"trace", CLI_STR, .field = &o->trace},
      {"slots-per-gpu", CLI_U32, .field = &o->slots},
      {"ranks-per-node", CLI_U32, .field = &o->rpn},
      {"policy", CLI_ARG, .val = 'p'},
      {"rebalance-every", CLI_U32, .field = &o->rebalance, .given = &o->have_rebalance},
      {"continuous", CLI_U32, .field = &o->cwin, .given = &o->have_cwin},
      {"no-continuous", CLI_FLAG, .field = &o->no_continuous},
      {"continuous-lag", CLI_U32, .field = &o->clag},
      {"continuous-in-place", CLI_FLAG, .field = &o->cin_place},
      {"continuous-slots", CLI_U32, .field = &o->step.slots_per_gpu},
      {"moves-per-layer", CLI_U32, .field = &o->step.max_per_layer},
      {"move-weight", CLI_DOUBLE, .field = &o->step.move_weight},
      {"expert-bytes", CLI_U64, .field = &o->bytes},
      {"window", CLI_U32, .field = &o->window},
      {"layers-per-step", CLI_U32, .field = &o->lps},
      {"inject-failure", CLI_U32, .field = &fail, .given = &have_fail},
      {"inject-stall", CLI_U32, .field = &o->stall_ms},
      {"json", CLI_FLAG, .field = &o->json},
      {"no-local-first", CLI_FLAG, .field = &o->no_local_first},
      {"count-thread", CLI_FLAG, .field = &o->count_thread},
      {"split-per-batch", CLI_NOARG, .val = 's'},
      {"no-split-per-batch", CLI_NOARG, .val = 'n'},
      {"split-tolerance", CLI_DOUBLE, .field = &o->tol},
      {"plan-steps", CLI_RANGE, .field = &o->pa, .given = &o->pb},
      {"help", CLI_NOARG, .val = 'h'},
      {NULL}};
  optind = 1;
  while ((c = cli_getopt(argc, argv, "h", opts)) != -1) {
    switch (c) {
    case 'h': return -2;
    case 's': o->split = 1; break; /* the last of the two wins */
    case 'n': o->split = 0; break;
    case 'p':
      if (eplb_plan_policy_parse(optarg, &o->policy) != EPLB_OK)
        return cli_usage_error("--policy: unknown policy '%s'", optarg), -1;
      break;
    default: return -1;
    }
  }
  o->fail_layer = have_fail ? (int64_t)fail : -1;
  if (!(o->tol >= 0 && o->tol <= 1))
    return cli_usage_error("--split-tolerance: %g not in [0, 1]", o->tol), -1;
  if (optind < argc)
    return cli_usage_error("replay: unexpected argument '%s'", argv[optind]), -1;
  if (!o->trace || !o->slots || !o->rpn)
    return cli_usage_error("replay: --trace, --slots-per-gpu and --ranks-per-node are required "
                           "(--slots-per-gpu and --ranks-per-node >= 1)"),
           -1;
  if (o->have_cwin && (o->have_rebalance || o->no_continuous))
    return cli_usage_error("replay: --continuous replaces --rebalance-every and --no-continuous"),
           -1;
  if (!o->window)
    o->window = o->rebalance ? o->rebalance : 16;
  if (o->bytes == 0 || o->bytes > (1u << 30))
    return cli_usage_error("--expert-bytes: %" PRIu64 " not in [1, 2^30]", o->bytes), -1;
  return 0;
}

/* This rank's checks before any collective: the trace opens, has top-k
 * rows, and fits the options. */
static int start(opts_t *o, uint32_t P, eplb_trace_t **trace) {
  eplb_status_t st = eplb_trace_open(o->trace, NULL, trace);
  if (st != EPLB_OK)
    return cli_status_error(st, o->trace);
  const eplb_trace_meta_t *meta = eplb_trace_meta(*trace);
  if (!meta->topk || !eplb_trace_has_topk(*trace))
    return cli_usage_error("%s: the trace has no top-k rows (replay needs tokens)", o->trace);
  if (o->fail_layer >= (int64_t)meta->num_layers)
    return cli_usage_error("--inject-failure: layer %" PRId64 " >= %u layers", o->fail_layer,
                           meta->num_layers);
  if (P % o->rpn)
    return cli_usage_error("--ranks-per-node %u does not divide %u ranks", o->rpn, P);
  /* The default with several ranks and the per-batch split: continuous
   * re-placement from the last step (what wins the held-out replay). */
  if (!o->have_cwin && !o->have_rebalance && !o->no_continuous && P > 1 && o->split != 0)
    o->cwin = 1;
  uint64_t steps = eplb_trace_num_steps(*trace);
  if (o->pb == 0)
    o->pb = steps / 2;
  else if (o->pb == UINT64_MAX) /* "A:" */
    o->pb = steps;
  if (o->pb > steps || o->pa >= o->pb || (o->pa == 0 && o->pb == steps))
    return cli_usage_error("--plan-steps %" PRIu64 ":%" PRIu64 ": the trace has %" PRIu64
                           " steps; planning needs at least one and scoring at least one other",
                           o->pa, o->pb, steps);
  uint64_t R64 = (uint64_t)o->slots * P;
  if (R64 < meta->num_experts || R64 > INT32_MAX)
    return cli_usage_error("--slots-per-gpu %u x %u ranks cannot hold %u experts", o->slots, P,
                           meta->num_experts);
  return CLI_OK;
}

/* The exit code every rank agrees on: the largest of the ranks' codes
 * (CLI_BADINPUT > CLI_FAIL > CLI_OK), so that a problem only one rank sees
 * stops every rank instead of leaving them in the next collective. */
static int agree(int mpi, int rc) {
  double v = rc;
  if (!mpi)
    return rc;
  if (eplb_runtime_mpi_allreduce(&v, 1, EPLB_REDUCE_MAX) != EPLB_OK)
    return rc ? rc : CLI_FAIL;
  return (int)v;
}

/* Until the ranks agree on how the start went, stderr goes to a temporary
 * file; then only the lowest rank that failed prints it: a problem every
 * rank sees is reported once, one that a single rank sees by that rank. */
typedef struct capture {
  FILE *tmp;
  int saved;
} capture_t;

static void capture_begin(capture_t *c) {
  fflush(stderr);
  c->saved = -1;
  c->tmp = tmpfile();
  if (c->tmp && (c->saved = dup(STDERR_FILENO)) >= 0 && dup2(fileno(c->tmp), STDERR_FILENO) >= 0)
    return;
  if (c->saved >= 0)
    close(c->saved);
  if (c->tmp)
    fclose(c->tmp);
  c->tmp = NULL; /* unable: messages go straight to stderr */
}

static void capture_end(capture_t *c, int print) {
  char buf[4096];
  size_t n;
  if (!c->tmp)
    return;
  fflush(stderr);
  dup2(c->saved, STDERR_FILENO);
  close(c->saved);
  rewind(c->tmp);
  while (print && (n = fread(buf, 1, sizeof buf, c->tmp)) > 0)
    fwrite(buf, 1, n, stderr);
  fclose(c->tmp);
  c->tmp = NULL;
}

/* A plan of steps [pa, pb) by the replay's policy (incremental, with no
 * plan to change from, starts as balanced). */
static eplb_status_t first_plan(eplb_trace_t *trace, const opts_t *o, uint32_t P, uint32_t R,
                                eplb_plan_t **out) {
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.num_gpus = P;
  po.num_nodes = P / o->rpn;
  po.num_replicas = R;
  po.policy = o->policy;
  return eplb_plan_create_from_trace(trace, o->pa, o->pb, &po, NULL, NULL, out);
}

/* Per-run state. */
typedef struct replay {
  opts_t o;
  eplb_trace_t *trace;
  int mpi, split_on;
  uint32_t rank, P, L, E, k, S, R;
  eplb_plan_t *plan;        /* the first plan */
  double *split_us, *ar_us; /* [steps] per layer call */
  eplb_runtime_t *rt, *rt_static;
  eplb_runtime_t *rt_first; /* the first plan re-split per batch, never moved (split on) */
  uint8_t *bufs;            /* [L][S][B] */
  double *red;  /* [3 * L * P + 4] per-step reduction: GPU tokens (dynamic, static, first
                   plan re-split),
                   violations, cross-node copies (dynamic, static) */
  double *tags; /* [L][R] */
  int32_t *ids, *slots;
  uint32_t cap_rows;
  json_t *per_step;
  /* Totals over the steps. */
  uint64_t token_base, violations, failures, scored, timed;
  double sum_bal, sum_static, cross, cross_static, sum_first, cross_first;
} replay_t;

/* Both runtimes (the dynamic one and one that keeps the first plan with its
 * static shares), and this rank's expert buffers registered with the
 * dynamic one. Returns the exit code the ranks agree on. */
static int replay_setup(replay_t *r) {
  const opts_t *o = &r->o;
  eplb_status_t st;
  int rc = CLI_OK;
  eplb_runtime_config_t c;
  eplb_runtime_config_default(&c);
  c.num_layers = r->L, c.num_experts = r->E, c.topk = r->k, c.slots_per_rank = r->S;
  c.rank = r->rank, c.world_size = r->P, c.ranks_per_node = o->rpn;
  if (r->mpi) {
    c.comm.kind = EPLB_COMM_MPI;
    c.comm.mpi_comm = eplb_runtime_mpi_world();
  }
  c.local_first = !o->no_local_first;
  c.count_thread = (uint32_t)o->count_thread;
  c.policy.plan_policy = o->policy;
  c.policy.window_steps = o->window;
  c.policy.layers_per_step = o->lps ? o->lps : 1;
  c.split_tolerance = o->tol;
  c.expert_bytes = 0;
  c.split_per_batch = 0;
  c.continuous_window = 0; /* the first plan's runtimes never move a slot */
  /* The first plan, from the planned steps; every rank makes the same one
   * (create checks that they agree). */
  if ((st = first_plan(r->trace, o, r->P, r->R, &r->plan)) != EPLB_OK)
    rc = cli_status_error(st, "first plan");
  if ((rc = agree(r->mpi, rc)) != CLI_OK)
    return rc;
  if ((st = eplb_runtime_create(&c, r->plan, &r->rt_static)) != EPLB_OK)
    return cli_status_error(st, "runtime");
  r->split_on = o->split > 0 || (o->split < 0 && r->P > 1);
  /* The first plan re-split per batch and never moved: the split's gain and the
   * placement's apart (the same scored steps, the same split). */
  c.split_per_batch = 1;
  if (r->split_on && (st = eplb_runtime_create(&c, r->plan, &r->rt_first)) != EPLB_OK)
    return cli_status_error(st, "runtime");
  c.split_per_batch = 0;
  c.policy.interval_steps = o->rebalance;
  c.expert_bytes = o->bytes;
  c.split_per_batch = o->split;
  if (o->cwin) {
    c.policy.interval_steps = 0;
    c.continuous_window = o->cwin;
    c.continuous_lag = o->clag;
    c.continuous_in_place = o->cin_place;
    c.continuous = o->step;
    if (c.policy.window_steps < o->cwin)
      c.policy.window_steps = o->cwin;
  }
  if ((st = eplb_runtime_create(&c, r->plan, &r->rt)) != EPLB_OK)
    return cli_status_error(st, "runtime");
  size_t nbuf = (size_t)r->L * r->S;
  uint64_t steps = eplb_trace_num_steps(r->trace);
  r->bufs = malloc(nbuf * o->bytes);
  r->red = malloc((3 * (size_t)r->L * r->P + 4) * sizeof *r->red);
  r->tags = malloc((size_t)r->L * r->R * sizeof *r->tags);
  r->per_step = json_array();
  r->split_us = malloc((steps ? steps : 1) * sizeof *r->split_us);
  r->ar_us = malloc((steps ? steps : 1) * sizeof *r->ar_us);
  if (!r->bufs || !r->red || !r->tags || !r->per_step || !r->split_us || !r->ar_us)
    rc = cli_status_error(EPLB_ENOMEM, "replay buffers");
  for (uint32_t l = 0; rc == CLI_OK && l < r->L; l++) {
    const int32_t *p2l;
    eplb_runtime_layer_plan(r->rt, l, &p2l, NULL);
    for (uint32_t s = 0; s < r->S; s++) {
      uint8_t *b = r->bufs + ((size_t)l * r->S + s) * o->bytes;
      fill(b, o->bytes, l, p2l[r->rank * r->S + s]);
      if ((st = eplb_runtime_register_weights(r->rt, l, s, b, o->bytes)) != EPLB_OK) {
        rc = cli_status_error(st, "register");
        break;
      }
    }
  }
  if ((rc = agree(r->mpi, rc)) != CLI_OK)
    return rc;
  if (o->fail_layer >= 0 && r->rank == r->P - 1)
    eplb_runtime_inject_transfer_failure(r->rt, (uint32_t)o->fail_layer);
  if (o->stall_ms && r->rank == r->P - 1)
    eplb_runtime_inject_transfer_stall(r->rt, o->stall_ms);
  return CLI_OK;
}

/* The expert each slot of layer l holds, from its owner's buffer (-1: none,
 * e.g. half written), gathered on every rank. Collective. */
static eplb_status_t layer_tags(replay_t *r, uint32_t l) {
  uint32_t S = r->S, R = r->R;
  double *t = r->tags + (size_t)l * R;
  memset(t, 0, R * sizeof *t);
  for (uint32_t s = 0; s < S; s++)
    t[r->rank * S + s] = identify(r->bufs + ((size_t)l * S + s) * r->o.bytes, r->o.bytes, l, r->E);
  return eplb_runtime_allreduce(r->rt, t, R, EPLB_REDUCE_SUM);
}

/* Routes this rank's rows [lo, lo + n) of the step through both runtimes,
 * layer by layer, into r->red: tokens per GPU, tokens mapped to a slot
 * whose buffer holds another expert (violations), cross-node copies. */
static int replay_route(replay_t *r, const eplb_trace_step_t *ts, uint32_t lo, uint32_t n) {
  uint32_t L = r->L, P = r->P, S = r->S, R = r->R, k = r->k, rpn = r->o.rpn, rank = r->rank;
  double *viol = r->red + 3 * (size_t)L * P;
  eplb_status_t st;
  for (uint32_t l = 0; l < L; l++) {
    for (uint32_t i = 0; i < n; i++)
      for (uint32_t j = 0; j < k; j++)
        r->ids[(size_t)i * k + j] = ts->topk[((size_t)(lo + i) * L + l) * k + j];
    /* route: record + map in one call (with the per-batch split, a
     * collective one that every rank makes for every layer). */
    if ((st = eplb_runtime_route(r->rt, l, r->ids, n, r->token_base + lo, r->slots)) != EPLB_OK)
      return cli_status_error(st, "runtime");
    /* What each slot of the layer holds now, when its tokens would be
     * dispatched (continuous re-placement may have switched slots of this
     * layer inside the route call), as read from its owner's buffer. */
    if ((st = layer_tags(r, l)) != EPLB_OK)
      return cli_status_error(st, "all-reduce");
    double *gpu = r->red + (size_t)l * P;
    for (size_t i = 0; i < (size_t)n * k; i++) {
      gpu[(uint32_t)r->slots[i] / S] += 1;
      viol[0] += r->tags[(size_t)l * R + (uint32_t)r->slots[i]] != r->ids[i];
      viol[1] += (uint32_t)r->slots[i] / S / rpn != rank / rpn;
    }
    st = eplb_runtime_map(r->rt_static, l, r->ids, n, r->token_base + lo, r->slots);
    if (st != EPLB_OK)
      return cli_status_error(st, "runtime");
    gpu = r->red + (size_t)(L + l) * P;
    for (size_t i = 0; i < (size_t)n * k; i++) {
      gpu[(uint32_t)r->slots[i] / S] += 1;
      viol[2] += (uint32_t)r->slots[i] / S / rpn != rank / rpn;
    }
    if (!r->rt_first)
      continue;
    st = eplb_runtime_route(r->rt_first, l, r->ids, n, r->token_base + lo, r->slots);
    if (st != EPLB_OK)
      return cli_status_error(st, "runtime");
    gpu = r->red + (size_t)(2 * L + l) * P;
    for (size_t i = 0; i < (size_t)n * k; i++) {
      gpu[(uint32_t)r->slots[i] / S] += 1;
      viol[3] += (uint32_t)r->slots[i] / S / rpn != rank / rpn;
    }
  }
  return CLI_OK;
}

/* One step on every rank. A rank-local failure (read, memory, a bad id in
 * this rank's rows) skips this rank's work but not the step's collectives;
 * the ranks then agree and stop together. Returns the agreed exit code. */
static int replay_step(replay_t *r, uint64_t step) {
  uint32_t L = r->L, P = r->P, k = r->k;
  eplb_status_t st;
  int rc = CLI_OK;
  eplb_trace_step_t ts;
  memset(&ts, 0, sizeof ts);
  if ((st = eplb_trace_read_step(r->trace, step, &ts)) != EPLB_OK) {
    rc = cli_status_error(st, r->o.trace);
    memset(&ts, 0, sizeof ts);
  }
  uint32_t lo = (uint32_t)((uint64_t)ts.num_rows * r->rank / P);
  uint32_t hi = (uint32_t)((uint64_t)ts.num_rows * (r->rank + 1) / P);
  uint32_t n = hi - lo;
  if (n > r->cap_rows) {
    free(r->ids), free(r->slots);
    r->ids = malloc((size_t)n * k * sizeof *r->ids);
    r->slots = malloc((size_t)n * k * sizeof *r->slots);
    r->cap_rows = r->ids && r->slots ? n : 0;
    if (!r->cap_rows)
      rc = cli_status_error(EPLB_ENOMEM, "replay rows");
  }
  const size_t nred = 3 * (size_t)L * P + 4;
  memset(r->red, 0, nred * sizeof *r->red);
  eplb_runtime_metrics_t m_in;
  eplb_runtime_metrics(r->rt, &m_in);
  if (rc == CLI_OK)
    rc = replay_route(r, &ts, lo, n);
  eplb_runtime_metrics_t m_out;
  eplb_runtime_metrics(r->rt, &m_out);
  if (r->split_on && L) {
    r->split_us[r->timed] = (m_out.split_seconds - m_in.split_seconds) * 1e6 / L;
    r->ar_us[r->timed++] = (m_out.allreduce_seconds - m_in.allreduce_seconds) * 1e6 / L;
  }
  r->token_base += ts.num_rows;
  if ((st = eplb_runtime_allreduce(r->rt, r->red, nred, EPLB_REDUCE_SUM)) != EPLB_OK)
    return cli_status_error(st, "all-reduce");
  double bal = 0, bal_static = 0, bal_first = 0;
  for (uint32_t l = 0; l < L; l++) {
    bal += bench_balancedness_of(r->red + (size_t)l * P, P) / L;
    bal_static += bench_balancedness_of(r->red + (size_t)(L + l) * P, P) / L;
    bal_first += bench_balancedness_of(r->red + (size_t)(2 * L + l) * P, P) / L;
  }
  const double *tail = r->red + 3 * (size_t)L * P;
  r->violations += (uint64_t)tail[0];
  int is_scored = step < r->o.pa || step >= r->o.pb;
  if (is_scored) {
    r->sum_bal += bal;
    r->sum_static += bal_static;
    r->sum_first += bal_first;
    r->cross += tail[1];
    r->cross_static += tail[2];
    r->cross_first += tail[3];
    r->scored++;
  }
  eplb_runtime_metrics_t before;
  eplb_runtime_metrics(r->rt, &before);
  st = eplb_runtime_step_end(r->rt);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(r->rt, &m);
  if (st == EPLB_ECOMM || st == EPLB_ETIMEOUT ||
      (st != EPLB_OK && m.plans_failed > before.plans_failed)) {
    r->failures++; /* the runtime keeps serving with the plan it has */
    if (r->rank == 0)
      fprintf(stderr, "eplb: replay: step %" PRIu64 ": %s\n", step, eplb_error_detail());
  } else if (st != EPLB_OK && rc == CLI_OK) {
    rc = cli_status_error(st, "step_end");
  }
  if ((st = eplb_runtime_step_end(r->rt_static)) != EPLB_OK && rc == CLI_OK)
    rc = cli_status_error(st, "step_end");
  if (r->rt_first && (st = eplb_runtime_step_end(r->rt_first)) != EPLB_OK && rc == CLI_OK)
    rc = cli_status_error(st, "step_end");
  if ((rc = agree(r->mpi, rc)) != CLI_OK)
    return rc;
  /* Per step: what this step boundary moved and switched. */
  json_array_append_new(
      r->per_step,
      json_pack(
          "{sI sb sf sf sI sI sI sI}", "step", (json_int_t)step, "scored", is_scored,
          "balancedness", bal, "balancedness_static", bal_static, "epoch", (json_int_t)m.epoch,
          "slots_moved", (json_int_t)(m.slots_moved - before.slots_moved), "layers_switched",
          (json_int_t)(m.layers_switched - before.layers_switched), "bytes_moved",
          (json_int_t)(m.bytes_moved[0] + m.bytes_moved[1] + m.bytes_moved[2] -
                       before.bytes_moved[0] - before.bytes_moved[1] - before.bytes_moved[2])));
  return CLI_OK;
}

/* Rank 0's report (text or JSON). Returns CLI_FAIL when it cannot be
 * written. */
static int replay_print(replay_t *r) {
  const opts_t *o = &r->o;
  uint64_t steps = eplb_trace_num_steps(r->trace);
  eplb_runtime_metrics_t m;
  eplb_runtime_metrics(r->rt, &m);
  double mean = r->scored ? r->sum_bal / r->scored : 1;
  double mean_static = r->scored ? r->sum_static / r->scored : 1;
  double mean_first = r->scored ? r->sum_first / r->scored : 1;
  double split_med = r->timed ? bench_quantile(r->split_us, r->timed, 0.5) : 0;
  double ar_med = r->timed ? bench_quantile(r->ar_us, r->timed, 0.5) : 0;
  uint64_t bytes = m.bytes_moved[0] + m.bytes_moved[1] + m.bytes_moved[2];
  if (r->rank != 0)
    return CLI_OK;
  /* The per-step oracle of the scored steps (before and after the planned). */
  eplb_sim_oracle_t orc[2] = {{0}, {0}}, oracle = {0};
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.num_gpus = r->P, po.num_nodes = r->P / o->rpn, po.num_replicas = r->R;
  eplb_status_t os = o->pa ? eplb_sim_oracle(r->trace, 0, o->pa, &po, &orc[0]) : EPLB_OK;
  if (os == EPLB_OK && o->pb < steps)
    os = eplb_sim_oracle(r->trace, o->pb, steps, &po, &orc[1]);
  oracle.num_steps = orc[0].num_steps + orc[1].num_steps;
  for (int i = 0; os == EPLB_OK && i < 2 && oracle.num_steps; i++) {
    double w = (double)orc[i].num_steps / (double)oracle.num_steps;
    oracle.balancedness += w * orc[i].balancedness;
    oracle.ceiling += w * orc[i].ceiling;
  }
  if (os != EPLB_OK)
    return cli_status_error(os, "per-step oracle");
  if (o->json) {
    json_t *root = json_pack(
        "{sI sI sI sI sI sI sI sI sI s{sI sI sI} sI sI sf so sf s[II] sI sf sf so so sO}", "steps",
        (json_int_t)steps, "ranks", (json_int_t)r->P, "plans", (json_int_t)m.plans, "plans_failed",
        (json_int_t)m.plans_failed, "rebalances", (json_int_t)m.rebalances, "layers_switched",
        (json_int_t)m.layers_switched, "layers_failed", (json_int_t)m.layers_failed, "slots_moved",
        (json_int_t)m.slots_moved, "bytes_moved", (json_int_t)bytes, "bytes_moved_by_link",
        "same_gpu", (json_int_t)m.bytes_moved[0], "intra_node", (json_int_t)m.bytes_moved[1],
        "inter_node", (json_int_t)m.bytes_moved[2], "violations", (json_int_t)r->violations,
        "failed_steps", (json_int_t)r->failures, "mean_balancedness", mean,
        "mean_balancedness_split", r->split_on ? json_real(mean) : json_null(),
        "mean_balancedness_static", mean_static, "plan_steps", (json_int_t)o->pa, (json_int_t)o->pb,
        "scored_steps", (json_int_t)r->scored, "cross_node_copies", r->cross,
        "cross_node_copies_static", r->cross_static, "split_us_median",
        r->split_on ? json_real(split_med) : json_null(), "allreduce_us_median",
        r->split_on ? json_real(ar_med) : json_null(), "per_step", r->per_step);
    json_object_set_new(root, "oracle",
                        json_pack("{sI sf sf}", "steps", (json_int_t)oracle.num_steps,
                                  "balancedness", oracle.balancedness, "ceiling", oracle.ceiling));
    json_object_set_new(root, "mean_balancedness_first_plan_split",
                        r->rt_first ? json_real(mean_first) : json_null());
    json_object_set_new(root, "cross_node_copies_first_plan_split",
                        r->rt_first ? json_real(r->cross_first) : json_null());
    json_object_set_new(root, "continuous",
                        o->cwin ? json_pack("{sI sI sb sI sI sI sI}", "window", (json_int_t)o->cwin,
                                            "lag", (json_int_t)o->clag, "in_place", o->cin_place,
                                            "moves", (json_int_t)m.continuous_moves, "failed",
                                            (json_int_t)m.continuous_failed, "abandoned",
                                            (json_int_t)m.continuous_abandoned, "waits",
                                            (json_int_t)m.continuous_waits)
                                : json_null());
    return cli_print_json_flags(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) ? CLI_FAIL : CLI_OK;
  }
  printf("steps %" PRIu64 ", ranks %u, rebalances %" PRIu64 ", layers switched %" PRIu64
         " (failed %" PRIu64 "), slots moved %" PRIu64 ", bytes moved %" PRIu64
         " (same GPU %" PRIu64 ", intra-node %" PRIu64 ", inter-node %" PRIu64 ")\n"
         "first plan made on steps %" PRIu64 "-%" PRIu64 "; scored on the other %" PRIu64 " steps\n"
         "violations %" PRIu64 ", mean balancedness %.4f (%s; static shares of the first "
         "plan %.4f), cross-node copies %.0f (static %.0f)\n",
         steps, r->P, m.rebalances, m.layers_switched, m.layers_failed, m.slots_moved, bytes,
         m.bytes_moved[0], m.bytes_moved[1], m.bytes_moved[2], o->pa, o->pb - 1, r->scored,
         r->violations, mean, r->split_on ? "per-batch split" : "static shares", mean_static,
         r->cross, r->cross_static);
  if (r->rt_first)
    printf("the same steps, the first plan kept: static shares %.4f, re-split per batch %.4f; "
           "%s %.4f\n",
           mean_static, mean_first,
           o->cwin        ? "continuous re-placement"
           : o->rebalance ? "periodic replans"
                          : "no replans",
           mean);
  printf("per-step oracle %.4f, ceiling %.4f (each scored step planned on itself)\n",
         oracle.balancedness, oracle.ceiling);
  if (o->cwin)
    printf("continuous re-placement: window %u step(s), lag %u, %s copies: %" PRIu64
           " moves landed (%.2f slots a step), %" PRIu64 " failed, %" PRIu64 " abandoned, %" PRIu64
           " steps waited\n",
           o->cwin, o->clag, o->cin_place ? "in-place" : "staged", m.continuous_moves,
           (double)m.continuous_moves / (double)(steps ? steps : 1), m.continuous_failed,
           m.continuous_abandoned, m.continuous_waits);
  if (r->split_on)
    printf("per layer call: split + quotas %.2f us, all-reduce %.2f us (medians over steps)\n",
           split_med, ar_med);
  return CLI_OK;
}

/* Every rank parses and opens the trace, then they agree before the first
 * collective of the runtime. Returns the agreed exit code; *help when
 * --help was asked (printed by rank 0). */
static int replay_start(replay_t *r, int argc, char **argv, int *help) {
  capture_t cap = {NULL, -1};
  capture_begin(&cap);
  int pr = parse(argc, argv, &r->o);
  int rc = pr == -1 ? CLI_BADINPUT : CLI_OK;
  if (pr == 0)
    rc = start(&r->o, r->P, &r->trace);
  double v[3] = {rc, rc ? r->P - r->rank : 0, pr == -2};
  if (r->mpi && eplb_runtime_mpi_allreduce(v, 3, EPLB_REDUCE_MAX) != EPLB_OK)
    v[0] = rc ? rc : CLI_FAIL, v[1] = 0;
  capture_end(&cap, rc != CLI_OK && (uint32_t)(r->P - v[1]) == r->rank);
  *help = v[0] == CLI_OK && v[2];
  if (*help && r->rank == 0)
    fputs(replay_usage, stdout);
  return (int)v[0];
}

int cli_replay(int argc, char **argv) {
  replay_t r = {0};
  r.P = 1;
  int rc, help = 0;
  eplb_status_t st = eplb_runtime_mpi_init(NULL, NULL, &r.rank, &r.P);
  if (st == EPLB_OK)
    r.mpi = 1;
  else if (st != EPLB_EUNSUPPORTED)
    return cli_status_error(st, "MPI");
  if ((rc = replay_start(&r, argc, argv, &help)) != CLI_OK || help)
    goto done;
  const eplb_trace_meta_t *meta = eplb_trace_meta(r.trace);
  r.L = meta->num_layers, r.E = meta->num_experts, r.k = meta->topk, r.S = r.o.slots;
  r.R = r.S * r.P;
  if ((rc = replay_setup(&r)) != CLI_OK)
    goto done;
  uint64_t steps = eplb_trace_num_steps(r.trace);
  for (uint64_t step = 0; step < steps; step++)
    if ((rc = replay_step(&r, step)) != CLI_OK)
      goto done;
  rc = replay_print(&r);
  if (r.violations > 0) {
    if (r.rank == 0)
      fprintf(stderr, "eplb: replay: %" PRIu64 " tokens mapped to a slot without their expert\n",
              r.violations);
    rc = CLI_FAIL;
  }
  rc = agree(r.mpi, rc); /* e.g. rank 0 could not write the report */
done:
  eplb_runtime_destroy(r.rt);
  eplb_runtime_destroy(r.rt_static);
  eplb_runtime_destroy(r.rt_first);
  eplb_trace_close(r.trace);
  json_decref(r.per_step);
  free(r.bufs), free(r.red), free(r.tags), free(r.ids), free(r.slots);
  free(r.split_us), free(r.ar_us);
  eplb_plan_destroy(r.plan);
  if (r.mpi)
    eplb_runtime_mpi_finalize();
  return rc;
}
