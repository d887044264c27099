/* tools/eplb/bench_split.c — `eplb bench split` (`eplb split` is in cmd_split.c):
 * solver timings on synthetic batches, or with --trace the per-batch gain of
 * re-splitting over a fixed placement (see bench_gain).
 *
 * The benchmark's placement: expert e's home is GPU e mod G (each expert once);
 * the remaining slots take the hottest experts of the first batch, hottest
 * first, round-robin over GPUs with a free slot, skipping a GPU that already
 * holds that expert. Batches mimic decode: log-popularity follows an AR(1)
 * with correlation 0.9 between batches (stationary standard deviation 1), and
 * each batch routes 256 tokens to 8 distinct experts drawn in proportion to
 * exp(log-popularity). */
#include "bench.h"
#include "cli.h"

#include <eplb/plan.h>
#include <eplb/split.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH_TOKENS = 256, TOPK = 8 };

static double now_us(void) { return bench_now() * 1e6; }

/* One batch's loads: 256 tokens x top-8 distinct experts. */
static void draw_batch(uint64_t *r, uint32_t E, double *logpop, double *cdf, double *loads) {
  const double rho = 0.9, sd = sqrt(1.0 - rho * rho);
  double acc = 0.0;
  for (uint32_t e = 0; e < E; e++) {
    logpop[e] = rho * logpop[e] + sd * bench_normal(r);
    acc += exp(logpop[e]);
    cdf[e] = acc;
    loads[e] = 0.0;
  }
  uint32_t k = TOPK < E ? TOPK : E;
  for (int t = 0; t < BATCH_TOKENS; t++) {
    uint32_t chosen[TOPK];
    for (uint32_t j = 0; j < k;) {
      double x = bench_unit(r) * acc;
      uint32_t lo = 0, hi = E - 1;
      while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (cdf[mid] > x)
          hi = mid;
        else
          lo = mid + 1;
      }
      int dup = 0;
      for (uint32_t i = 0; i < j; i++)
        dup |= chosen[i] == lo;
      if (!dup)
        chosen[j++] = lo;
    }
    for (uint32_t j = 0; j < k; j++)
      loads[chosen[j]] += 1.0;
  }
}

static const double *sorted_loads;
static int cmp_hot(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  double lx = sorted_loads[x], ly = sorted_loads[y];
  if (lx != ly)
    return lx < ly ? 1 : -1;
  return (x > y) - (x < y);
}

/* The placement described at the top of the file. Needs E <= G * S and
 * S <= E (so a free slot always fits some expert). Returns 0 or -1. */
static int build_placement(uint32_t E, uint32_t G, uint32_t S, const double *first,
                           uint32_t *phy2log, uint32_t *slots, uint32_t *order) {
  uint32_t *fill = slots; /* slots[g] counts the GPU's filled slots */
  if ((uint64_t)G * S < E || S > E)
    return -1;
  memset(fill, 0, (size_t)G * sizeof *fill);
  for (uint32_t e = 0; e < E; e++) {
    uint32_t g = e % G;
    phy2log[(size_t)g * S + fill[g]++] = e;
  }
  for (uint32_t e = 0; e < E; e++)
    order[e] = e;
  sorted_loads = first;
  qsort(order, E, sizeof *order, cmp_hot);
  uint32_t cursor = 0, placed = 0, redundant = G * S - E;
  for (uint32_t i = 0; placed < redundant; i = (i + 1) % E) {
    uint32_t e = order[i];
    uint32_t tries = 0;
    for (; tries < G; tries++, cursor = (cursor + 1) % G) {
      uint32_t g = cursor;
      if (fill[g] == S)
        continue;
      int has = 0;
      for (uint32_t k = 0; k < fill[g]; k++)
        has |= phy2log[(size_t)g * S + k] == e;
      if (!has)
        break;
    }
    if (tries == G)
      continue; /* every free slot holds e already; a colder expert fits */
    phy2log[(size_t)cursor * S + fill[cursor]++] = e;
    cursor = (cursor + 1) % G;
    placed++;
  }
  return 0;
}

typedef struct bench_stats {
  double median, p99, warm_median, warm_p99, glpk_median;
  double cold_iters, warm_iters;
  uint32_t glpk_solves, mismatches;
} bench_stats_t;

static int bench_config(uint32_t E, uint32_t G, uint32_t S, uint32_t batches, uint64_t seed,
                        bench_stats_t *st) {
  int rc = CLI_FAIL;
  size_t R = (size_t)G * S;
  uint64_t rng = seed;
  uint32_t *phy2log = malloc(R * sizeof *phy2log), *slots = malloc(G * sizeof *slots),
           *order = malloc(E * sizeof *order);
  double *logpop = malloc(E * sizeof(double)), *cdf = malloc(E * sizeof(double)),
         *loads = malloc(E * sizeof(double)), *share = malloc(R * sizeof(double)),
         *gpu_load = malloc(G * sizeof(double)), *cold_us = malloc(batches * sizeof(double)),
         *warm_us = malloc(batches * sizeof(double)), *glpk_us = malloc(batches * sizeof(double));
  eplb_split_t *cold = NULL, *warm = NULL;
  eplb_split_options_t o;
  eplb_status_t s;
  if (!phy2log || !slots || !order || !logpop || !cdf || !loads || !share || !gpu_load ||
      !cold_us || !warm_us || !glpk_us) {
    cli_out_of_memory("bench split");
    goto done;
  }
  for (uint32_t e = 0; e < E; e++)
    logpop[e] = bench_normal(&rng);
  draw_batch(&rng, E, logpop, cdf, loads);
  if (build_placement(E, G, S, loads, phy2log, slots, order)) {
    rc = cli_usage_error("bench split: cannot place %u experts on %u GPUs x %u slots", E, G, S);
    goto done;
  }
  eplb_split_options_default(&o);
  o.warm_start = 0;
  if ((s = eplb_split_create(&o, &cold)))
    goto fail;
  o.warm_start = 1;
  if ((s = eplb_split_create(&o, &warm)))
    goto fail;
  eplb_split_problem_t p = {E, G, (uint32_t)R, phy2log, slots};
  eplb_split_result_t res = {.share = share, .gpu_load = gpu_load};
  uint32_t glpk_every = batches >= 40 ? batches / 40 : 1;
  memset(st, 0, sizeof *st);
  for (uint32_t b = 0; b < batches; b++) {
    draw_batch(&rng, E, logpop, cdf, loads);
    double t0 = now_us();
    s = eplb_split_solve(cold, &p, loads, &res);
    double t1 = now_us();
    if (s)
      goto fail;
    double t_cold = res.t_star;
    st->cold_iters += res.iterations;
    cold_us[b] = t1 - t0;
    t0 = now_us();
    s = eplb_split_solve(warm, &p, loads, &res);
    t1 = now_us();
    if (s)
      goto fail;
    warm_us[b] = t1 - t0;
    st->warm_iters += res.iterations;
    st->mismatches += res.t_star != t_cold;
    if (b % glpk_every == 0) {
      t0 = now_us();
      s = eplb_split_solve_glpk(cold, &p, loads, &res);
      t1 = now_us();
      if (s)
        goto fail;
      glpk_us[st->glpk_solves++] = t1 - t0;
      st->mismatches += fabs(res.t_star - t_cold) > 1e-9 * t_cold;
    }
  }
  st->cold_iters /= batches;
  st->warm_iters /= batches;
  st->median = bench_quantile(cold_us, batches, 0.5);
  st->p99 = bench_quantile(cold_us, batches, 0.99);
  st->warm_median = bench_quantile(warm_us, batches, 0.5);
  st->warm_p99 = bench_quantile(warm_us, batches, 0.99);
  st->glpk_median = bench_quantile(glpk_us, st->glpk_solves, 0.5);
  rc = CLI_OK;
  goto done;
fail:
  rc = cli_status_error(s, "bench split");
done:
  eplb_split_destroy(cold);
  eplb_split_destroy(warm);
  eplb_split_glpk_thread_done();
  free(phy2log);
  free(slots);
  free(order);
  free(logpop);
  free(cdf);
  free(loads);
  free(share);
  free(gpu_load);
  free(cold_us);
  free(warm_us);
  free(glpk_us);
  return rc;
}

/* ---- --trace: per-batch gain of re-splitting over a fixed placement ------ */

/* Per-step re-split against the plan's static shares: the plan is made once
 * from the first `window` steps (all when 0), then every step of the trace is
 * balanced twice over the same placement. Steps at or after the window are
 * also reported alone (held out: the plan never saw them). */
typedef struct gain_cfg {
  const char *path;
  uint32_t gpus, slots, nodes, window;
  eplb_plan_policy_t policy;
  int integer;
} gain_cfg_t;

typedef struct gain_acc {
  double stat, split, stat_min, split_min;
  uint64_t n;
} gain_acc_t;

static void gain_add(gain_acc_t *a, double stat, double split) {
  if (!a->n)
    a->stat_min = a->split_min = 1.0;
  a->stat += stat;
  a->split += split;
  a->stat_min = fmin(a->stat_min, stat);
  a->split_min = fmin(a->split_min, split);
  a->n++;
}

static json_t *gain_json(const gain_acc_t *a) {
  json_t *o = json_object();
  double n = a->n ? (double)a->n : 1.0;
  json_object_set_new(o, "layer_steps", json_integer((json_int_t)a->n));
  json_object_set_new(o, "static_mean_balancedness", json_real(a->stat / n));
  json_object_set_new(o, "resplit_mean_balancedness", json_real(a->split / n));
  json_object_set_new(o, "gain", json_real((a->split - a->stat) / n));
  json_object_set_new(o, "gain_relative", json_real(a->stat > 0 ? a->split / a->stat - 1 : 0));
  json_object_set_new(o, "static_min_balancedness", json_real(a->stat_min));
  json_object_set_new(o, "resplit_min_balancedness", json_real(a->split_min));
  return o;
}

static double static_balancedness(const eplb_plan_t *plan, uint32_t l, const double *w, uint32_t G,
                                  double *gl) {
  const int32_t *p2l = eplb_plan_phy2log(plan, l);
  const double *share = eplb_plan_share(plan, l);
  const uint32_t *spg = eplb_plan_slots_per_gpu(plan);
  for (uint32_t g = 0, r = 0; g < G; g++) {
    gl[g] = 0;
    for (uint32_t k = 0; k < spg[g]; k++, r++)
      gl[g] += share[r] * w[p2l[r]];
  }
  return bench_balancedness_of(gl, G);
}

/* What bench_gain measured, for gain_print. */
typedef struct gain_out {
  uint32_t L, E;
  uint64_t steps, wend;
  double window_balancedness, med, p99;
} gain_out_t;

static void gain_print(const gain_cfg_t *c, const gain_out_t *g, const gain_acc_t *all,
                       const gain_acc_t *held, json_t *configs, int json) {
  if (json) {
    json_t *o = json_object();
    json_object_set_new(o, "trace", json_string(c->path));
    json_object_set_new(o, "layers", json_integer(g->L));
    json_object_set_new(o, "experts", json_integer(g->E));
    json_object_set_new(o, "steps", json_integer((json_int_t)g->steps));
    json_object_set_new(o, "gpus", json_integer(c->gpus));
    json_object_set_new(o, "slots_per_gpu", json_integer(c->slots));
    json_object_set_new(o, "nodes", json_integer(c->nodes));
    json_object_set_new(o, "policy", json_string(eplb_plan_policy_str(c->policy)));
    json_object_set_new(o, "window", json_integer((json_int_t)g->wend));
    json_object_set_new(o, "integer", json_boolean(c->integer));
    json_object_set_new(o, "plan_window_balancedness", json_real(g->window_balancedness));
    json_object_set_new(o, "all_steps", gain_json(all));
    if (held->n)
      json_object_set_new(o, "held_out_steps", gain_json(held));
    json_object_set_new(o, "resplit_median_us_per_layer", json_real(g->med));
    json_object_set_new(o, "resplit_p99_us_per_layer", json_real(g->p99));
    json_array_append_new(configs, o);
    return;
  }
  double n = (double)all->n;
  printf("%s: %u layers x %u experts, %llu steps | %s plan on %u GPUs x %u slots from %llu "
         "steps (window balancedness %.4f)\n"
         "  per-step mean balancedness: static shares %.4f, re-split %.4f, gain %+.4f (%+.1f%%); "
         "min %.4f -> %.4f\n",
         c->path, g->L, g->E, (unsigned long long)g->steps, eplb_plan_policy_str(c->policy),
         c->gpus, c->slots, (unsigned long long)g->wend, g->window_balancedness, all->stat / n,
         all->split / n, (all->split - all->stat) / n, 100.0 * (all->split / all->stat - 1),
         all->stat_min, all->split_min);
  if (held->n)
    printf("  held-out steps (%llu): static %.4f, re-split %.4f, gain %+.4f\n",
           (unsigned long long)(g->steps - g->wend), held->stat / (double)held->n,
           held->split / (double)held->n, (held->split - held->stat) / (double)held->n);
  printf("  re-split time per layer: median %.2f us, p99 %.2f us\n", g->med, g->p99);
}

static int bench_gain(const gain_cfg_t *c, json_t *configs, int json) {
  int rc = CLI_FAIL;
  eplb_status_t s = EPLB_OK;
  eplb_trace_t *tr = NULL;
  eplb_loads_t *win = NULL;
  eplb_plan_t *plan = NULL;
  eplb_split_t *solver = NULL;
  eplb_split_problem_t *probs = NULL;
  eplb_split_result_t *res = NULL;
  uint32_t *p2l = NULL;
  double *w = NULL, *share = NULL, *gl = NULL, *us = NULL, *scratch = NULL;
  gain_acc_t all = {0}, held = {0};
  const char *what = c->path;
  if ((s = eplb_trace_open(c->path, NULL, &tr)))
    goto fail;
  const eplb_trace_meta_t *meta = eplb_trace_meta(tr);
  uint32_t L = meta->num_layers, E = meta->num_experts, G = c->gpus;
  uint64_t steps = eplb_trace_num_steps(tr);
  uint64_t wend = c->window && c->window < steps ? c->window : steps;
  size_t R = (size_t)G * c->slots;
  if (!steps) {
    rc = cli_usage_error("bench split: %s has no steps", c->path);
    goto done;
  }
  if ((s = eplb_loads_create(L, E, &win)) || (s = eplb_trace_window_sum(tr, 0, wend, win->values)))
    goto fail;
  eplb_plan_options_t po;
  eplb_plan_options_default(&po);
  po.policy = c->policy;
  po.num_gpus = G;
  po.num_nodes = c->nodes;
  po.num_replicas = (uint32_t)R;
  what = "bench split: plan";
  if ((s = eplb_plan_create(win, &po, &plan)))
    goto fail;
  eplb_split_options_t so;
  eplb_split_options_default(&so);
  so.mode = c->integer ? EPLB_SPLIT_INTEGER : EPLB_SPLIT_FRACTIONAL;
  what = "bench split";
  if ((s = eplb_split_create(&so, &solver)))
    goto fail;
  probs = calloc(L, sizeof *probs);
  res = calloc(L, sizeof *res);
  p2l = malloc((size_t)L * R * sizeof *p2l);
  w = malloc((size_t)L * E * sizeof *w);
  share = malloc((size_t)L * R * sizeof *share);
  gl = malloc((size_t)L * G * sizeof *gl);
  us = malloc(steps * sizeof *us);
  scratch = malloc((size_t)G * sizeof *scratch);
  if (!probs || !res || !p2l || !w || !share || !gl || !us || !scratch) {
    cli_out_of_memory("bench split");
    goto done;
  }
  for (uint32_t l = 0; l < L; l++) {
    const int32_t *src = eplb_plan_phy2log(plan, l);
    for (size_t r = 0; r < R; r++)
      p2l[l * R + r] = (uint32_t)src[r];
    probs[l] =
        (eplb_split_problem_t){E, G, (uint32_t)R, p2l + l * R, eplb_plan_slots_per_gpu(plan)};
    res[l] = (eplb_split_result_t){.share = share + l * R, .gpu_load = gl + (size_t)l * G};
  }
  for (uint64_t t = 0; t < steps; t++) {
    eplb_trace_step_t st;
    what = c->path;
    if ((s = eplb_trace_read_step(tr, t, &st)))
      goto fail;
    for (size_t i = 0; i < (size_t)L * E; i++)
      w[i] = st.counts[i];
    what = "bench split: re-split";
    double t0 = now_us();
    if ((s = eplb_split_solve_layers(solver, L, probs, w, res)))
      goto fail;
    us[t] = (now_us() - t0) / L;
    for (uint32_t l = 0; l < L; l++) {
      double *wl = w + (size_t)l * E, total = 0;
      for (uint32_t e = 0; e < E; e++)
        total += wl[e];
      double split_bal = bench_balancedness(total, G, res[l].max_load);
      double stat_bal = static_balancedness(plan, l, wl, G, scratch);
      gain_add(&all, stat_bal, split_bal);
      if (t >= wend)
        gain_add(&held, stat_bal, split_bal);
    }
  }
  eplb_plan_summary_t ps;
  eplb_plan_summary(plan, &ps);
  gain_out_t out = {L,
                    E,
                    steps,
                    wend,
                    ps.mean_balancedness,
                    bench_quantile(us, steps, 0.5),
                    bench_quantile(us, steps, 0.99)};
  gain_print(c, &out, &all, &held, configs, json);
  rc = CLI_OK;
  goto done;
fail:
  rc = cli_status_error(s, what);
done:
  eplb_split_destroy(solver);
  eplb_plan_destroy(plan);
  eplb_loads_destroy(win);
  eplb_trace_close(tr);
  free(probs);
  free(res);
  free(p2l);
  free(w);
  free(share);
  free(gl);
  free(us);
  free(scratch);
  return rc;
}

static const char bench_split_usage[] =
    "usage: eplb bench split [--experts 256] [--gpus 32,64,144] [--slots-per-gpu 9,5,2]\n"
    "                        [--batches 2000] [--seed 1] [--json]\n"
    "       eplb bench split --trace T --gpus G[,G2...] --slots-per-gpu S[,S2...]\n"
    "                        [--policy balanced|deepseek|mip] [--window W] [--nodes N]\n"
    "                        [--integer] [--json]\n"
    "\n"
    "The first form times the exact split solver (cold and warm start) against GLPK\n"
    "on drifting 256-token x top-8 batches. The second measures the per-batch gain:\n"
    "it plans once from the first W steps of trace T (all when W is 0 or absent),\n"
    "then balances every step twice over that placement, with the plan's static\n"
    "shares and with an exact re-split of the step's loads, and prints the mean\n"
    "balancedness (mean / max GPU load, over steps and layers) of both, the gain,\n"
    "the same over the held-out steps >= W, and the re-split time per layer.";

/* What `eplb bench split` was asked. */
typedef struct bs_args {
  uint32_t E, batches, ng, ns;
  uint64_t seed;
  uint32_t *gpus, *slots;
  int json;
  gain_cfg_t gc;
} bs_args_t;

/* CLI_OK, an exit code, or -1 after --help. */
static int bs_parse(int argc, char **argv, bs_args_t *a) {
  const cli_opt_t opts[] = {{"experts", CLI_U32, .field = &a->E},
                            {"gpus", CLI_ARG, .val = 'g'},
                            {"slots-per-gpu", CLI_ARG, .val = 's'},
                            {"batches", CLI_U32, .field = &a->batches},
                            {"seed", CLI_U64, .field = &a->seed},
                            {"trace", CLI_STR, .field = &a->gc.path},
                            {"policy", CLI_ARG, .val = 'p'},
                            {"window", CLI_U32, .field = &a->gc.window},
                            {"nodes", CLI_U32, .field = &a->gc.nodes},
                            {"integer", CLI_FLAG, .field = &a->gc.integer},
                            {"json", CLI_FLAG, .field = &a->json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  int c;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "h", opts)) != -1) {
    int bad = 0;
    switch (c) {
    case 'g':
      free(a->gpus);
      a->gpus = NULL;
      bad = cli_parse_u32_list("--gpus", optarg, &a->gpus, &a->ng);
      break;
    case 's':
      free(a->slots);
      a->slots = NULL;
      bad = cli_parse_u32_list("--slots-per-gpu", optarg, &a->slots, &a->ns);
      break;
    case 'p':
      if (eplb_plan_policy_parse(optarg, &a->gc.policy))
        return cli_usage_error("--policy: %s", eplb_error_detail());
      break;
    case 'h': puts(bench_split_usage); return -1;
    default: return CLI_BADINPUT;
    }
    if (bad)
      return CLI_BADINPUT;
  }
  if (optind < argc)
    return cli_usage_error("bench split: unexpected argument '%s'", argv[optind]);
  return CLI_OK;
}

/* The second form: the per-batch gain on a trace, per (GPUs, slots). */
static int bs_trace(bs_args_t *a) {
  if (!a->gpus || !a->slots || a->ng != a->ns || !a->gc.nodes)
    return cli_usage_error("bench split: --trace needs --gpus and --slots-per-gpu with as many "
                           "entries, and --nodes >= 1");
  json_t *root = json_object(), *configs = json_array();
  int rc = CLI_OK;
  if (!root || !configs)
    rc = cli_out_of_memory("bench split");
  json_object_set(root, "configs", configs);
  for (uint32_t i = 0; rc == CLI_OK && i < a->ng; i++) {
    if (!a->gpus[i] || !a->slots[i] || (uint64_t)a->gpus[i] * a->slots[i] > (1u << 24)) {
      rc = cli_usage_error("bench split: %u GPUs x %u slots is out of range", a->gpus[i],
                           a->slots[i]);
      break;
    }
    a->gc.gpus = a->gpus[i];
    a->gc.slots = a->slots[i];
    rc = bench_gain(&a->gc, configs, a->json);
  }
  if (rc == CLI_OK && a->json) {
    rc = cli_print_json_flags(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    root = NULL; /* released by the call */
  }
  json_decref(configs);
  json_decref(root);
  return rc;
}

/* The first form's checks (default GPUs and slots filled in). */
static int bs_check(bs_args_t *a) {
  if (!a->gpus) {
    static const uint32_t dg[3] = {32, 64, 144}, ds[3] = {9, 5, 2};
    a->gpus = malloc(sizeof dg);
    a->slots = a->slots ? a->slots : malloc(sizeof ds);
    if (!a->gpus || !a->slots)
      return cli_out_of_memory("bench split");
    memcpy(a->gpus, dg, sizeof dg);
    if (!a->ns) {
      memcpy(a->slots, ds, sizeof ds);
      a->ns = 3;
    }
    a->ng = 3;
  } else if (!a->slots) {
    return cli_usage_error("bench split: --gpus needs --slots-per-gpu with as many entries");
  }
  if (a->ng != a->ns)
    return cli_usage_error("bench split: --gpus has %u entries, --slots-per-gpu %u", a->ng, a->ns);
  if (!a->E || a->E > (1u << 20) || !a->batches || a->batches > 1000000)
    return cli_usage_error(
        "bench split: --experts must be in [1, 1048576], --batches in [1, 1000000]");
  for (uint32_t i = 0; i < a->ng; i++)
    if (!a->gpus[i] || !a->slots[i] || (uint64_t)a->gpus[i] * a->slots[i] < a->E ||
        a->slots[i] > a->E || (uint64_t)a->gpus[i] * a->slots[i] > (1u << 24))
      return cli_usage_error("bench split: %u GPUs x %u slots cannot hold %u experts", a->gpus[i],
                             a->slots[i], a->E);
  return CLI_OK;
}

static void bs_print_config(const bs_args_t *a, uint32_t i, const bench_stats_t *st,
                            json_t *configs) {
  double speedup = st->glpk_median / st->median;
  if (a->json) {
    json_t *o = json_object();
    json_object_set_new(o, "gpus", json_integer(a->gpus[i]));
    json_object_set_new(o, "slots_per_gpu", json_integer(a->slots[i]));
    json_object_set_new(o, "median_us", json_real(st->median));
    json_object_set_new(o, "p99_us", json_real(st->p99));
    json_object_set_new(o, "warm_median_us", json_real(st->warm_median));
    json_object_set_new(o, "warm_p99_us", json_real(st->warm_p99));
    json_object_set_new(o, "glpk_median_us", json_real(st->glpk_median));
    json_object_set_new(o, "glpk_solves", json_integer(st->glpk_solves));
    json_object_set_new(o, "speedup", json_real(speedup));
    json_object_set_new(o, "cold_iterations", json_real(st->cold_iters));
    json_object_set_new(o, "warm_iterations", json_real(st->warm_iters));
    json_object_set_new(o, "mismatches", json_integer(st->mismatches));
    json_array_append_new(configs, o);
    return;
  }
  printf("experts %u, gpus %u x %u slots: cold median %.2f us p99 %.2f us | warm median %.2f "
         "us p99 %.2f us | glpk median %.1f us (%u solves) | %.0fx | iterations %.2f cold, "
         "%.2f warm%s\n",
         a->E, a->gpus[i], a->slots[i], st->median, st->p99, st->warm_median, st->warm_p99,
         st->glpk_median, st->glpk_solves, speedup, st->cold_iters, st->warm_iters,
         st->mismatches ? " | MISMATCH" : "");
}

/* The first form: the exact solver against GLPK, per (GPUs, slots). */
static int bs_solver(bs_args_t *a) {
  int rc = bs_check(a);
  if (rc)
    return rc;
  json_t *root = json_object(), *configs = json_array();
  if (!root || !configs)
    rc = cli_out_of_memory("bench split");
  json_object_set_new(root, "experts", json_integer(a->E));
  json_object_set_new(root, "batches", json_integer(a->batches));
  json_object_set_new(root, "tokens_per_batch", json_integer(BATCH_TOKENS));
  json_object_set_new(root, "topk", json_integer(TOPK));
  json_object_set(root, "configs", configs);
  for (uint32_t i = 0; rc == CLI_OK && i < a->ng; i++) {
    bench_stats_t st;
    if ((rc = bench_config(a->E, a->gpus[i], a->slots[i], a->batches, a->seed + i, &st)))
      break;
    bs_print_config(a, i, &st, configs);
    if (st.mismatches) {
      fprintf(stderr, "eplb: bench split: %u solves disagree on T*\n", st.mismatches);
      rc = CLI_FAIL;
    }
  }
  if (rc == CLI_OK && a->json) {
    rc = cli_print_json_flags(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    root = NULL; /* released by the call */
  }
  json_decref(configs);
  json_decref(root);
  return rc;
}

int cli_bench_split(int argc, char **argv) {
  bs_args_t a = {
      .E = 256, .batches = 2000, .seed = 1, .gc = {.nodes = 1, .policy = EPLB_POLICY_BALANCED}};
  int rc = bs_parse(argc, argv, &a);
  if (rc == -1)
    rc = CLI_OK;
  else if (rc == CLI_OK)
    rc = a.gc.path ? bs_trace(&a) : bs_solver(&a);
  free(a.gpus);
  free(a.slots);
  return rc;
}
