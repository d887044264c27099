/* eplb bench runtime — the serving thread's per-step CPU cost: record and map
 * of every layer's top-k ids on one rank.
 *
 * What is measured: the public API allows a communicator-less runtime only
 * with world_size 1, so the rank owns all world * slots_per_rank slots of a
 * one-GPU plan (balanced policy on zipf loads, uniform shares: every replica
 * is a candidate of map). That is the upper bound of a real rank's map cost:
 * with local_first a rank of a larger world sees at most as many candidates.
 * record does not depend on the plan. */
#include "bench.h"
#include "cli.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { POOL_STEPS = 8 }; /* distinct batches cycled through, so caches see fresh ids */

/* The timed figures: their JSON names (<name>_median_us, _p99_us,
 * _ns_per_id) and their labels in the text report. */
enum { F_RECORD, F_MAP, F_TOTAL, F_INTER, F_ROUTE, F_COUNTS_MAP, F_STEP_END, F_ROUTE_END, NFIG };
static const char *const fig_name[NFIG] = {"record", "map",        "total",    "interleaved",
                                           "route",  "counts_map", "step_end", "route_step_end"};
static const char *const fig_label[NFIG] = {"record (all layers)",
                                            "map (all layers)",
                                            "record + map, all records first",
                                            "record + map, layer by layer",
                                            "route, layer by layer",
                                            "record_counts + map, layer by layer (counts given)",
                                            "step_end after the first order",
                                            "step_end after route"};

/* Expert popularity of each layer: zipf(0.8) over a random permutation. */
static void make_popularity(double *cdf, uint32_t L, uint32_t E, uint64_t *seed) {
  uint32_t *perm = malloc(sizeof *perm * E);
  for (uint32_t l = 0; l < L && perm; l++) {
    for (uint32_t e = 0; e < E; e++)
      perm[e] = e;
    for (uint32_t e = E - 1; e > 0; e--) {
      uint32_t j = (uint32_t)(bench_rand(seed) % (e + 1)), t = perm[e];
      perm[e] = perm[j], perm[j] = t;
    }
    double *c = cdf + (size_t)l * E;
    for (uint32_t r = 0; r < E; r++)
      c[perm[r]] = pow(r + 1.0, -0.8);
    double z = 0;
    for (uint32_t e = 0; e < E; e++)
      z += c[e], c[e] = z;
    for (uint32_t e = 0; e < E; e++)
      c[e] /= z;
  }
  free(perm);
}

static uint32_t draw(const double *cdf, uint32_t E, uint64_t *seed) {
  double u = bench_unit(seed);
  uint32_t lo = 0, hi = E - 1;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (cdf[mid] > u)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* ids [POOL_STEPS][L][T][k]: distinct experts per token, like a router's top-k. */
static void make_ids(int32_t *ids, const double *cdf, uint32_t L, uint32_t E, uint32_t k,
                     uint32_t T, uint64_t *seed) {
  for (uint32_t s = 0; s < POOL_STEPS; s++)
    for (uint32_t l = 0; l < L; l++)
      for (uint32_t t = 0; t < T; t++) {
        int32_t *row = ids + (((size_t)s * L + l) * T + t) * k;
        for (uint32_t j = 0; j < k; j++) {
          uint32_t e, dup;
          do {
            e = draw(cdf + (size_t)l * E, E, seed);
            dup = 0;
            for (uint32_t i = 0; i < j; i++)
              dup |= (uint32_t)row[i] == e;
          } while (dup);
          row[j] = (int32_t)e;
        }
      }
}

static eplb_status_t make_plan(const double *cdf, uint32_t L, uint32_t E, uint32_t R,
                               eplb_plan_t **out) {
  eplb_loads_t *loads = NULL;
  eplb_status_t st = eplb_loads_create(L, E, &loads);
  if (st != EPLB_OK)
    return st;
  for (size_t i = 0; i < (size_t)L * E; i++)
    loads->values[i] = cdf[i] - (i % E ? cdf[i - 1] : 0);
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = 1;
  o.num_nodes = 1;
  o.num_replicas = R;
  o.shares = EPLB_SHARES_UNIFORM;
  st = eplb_plan_create(loads, &o, out);
  eplb_loads_destroy(loads);
  return st;
}

/* Adds <name>_median_us and <name>_p99_us of n figures to j (and
 * <name>_ns_per_id when per_id > 0: microseconds per step to ns per id). */
static void set_figures(json_t *j, const char *const *name, const double *med, const double *p99,
                        int n, double per_id) {
  for (int f = 0; j && f < n; f++) {
    char key[64];
    snprintf(key, sizeof key, "%s_median_us", name[f]);
    json_object_set_new(j, key, json_real(med[f]));
    snprintf(key, sizeof key, "%s_p99_us", name[f]);
    json_object_set_new(j, key, json_real(p99[f]));
    if (per_id > 0) {
      snprintf(key, sizeof key, "%s_ns_per_id", name[f]);
      json_object_set_new(j, key, json_real(med[f] * per_id));
    }
  }
}

/* The per-batch split's cost per layer, on a standalone rank of the whole
 * world (comm none: its counts stand for the world's, so no all-reduce is
 * timed): eplb_runtime_split (the split, with and without the locality
 * stage, and the dispatch table build; without it also in whole tokens,
 * cfg.split_whole_tokens, each on its own runtime in the same loop, so the
 * figures share the run's conditions) and route with the split (count,
 * split, quotas, map). The plan spreads G GPUs x S slots over G / K nodes. */
static int bench_split(uint32_t L, uint32_t E, uint32_t k, uint32_t T, uint32_t S, uint32_t G,
                       uint32_t K, uint32_t repeat, const double *cdf, const int32_t *ids,
                       const uint32_t *counts, int json) {
  enum { B_LOCAL, B_GLOBAL, B_WHOLE, B_ROUTE, NB };
  static const char *const bname[NB] = {"split_table_local", "split_table_global",
                                        "split_table_whole", "route_split"};
  static const char *const blabel[NB] = {
      "split + locality stage + table build (per layer)",
      "split + table build, no locality stage (per layer)",
      "the same in whole tokens (split_whole_tokens, per layer)",
      "route with the split: count + split + quotas (per layer)"};
  uint32_t N = G / K, R = S * G;
  int rc = CLI_OK;
  eplb_status_t st;
  eplb_plan_t *plan = NULL;
  eplb_loads_t *loads = NULL;
  eplb_runtime_t *rt[3] = {NULL, NULL, NULL}; /* locality, global, global in whole tokens */
  size_t nsamp = (size_t)repeat * L;
  double *sample = malloc(sizeof *sample * NB * nsamp);
  uint32_t *nc = malloc(sizeof *nc * (size_t)N * E);
  int32_t *out = malloc(sizeof *out * (size_t)T * k);
  if (!sample || !nc || !out || (st = eplb_loads_create(L, E, &loads)) != EPLB_OK) {
    rc = cli_out_of_memory("bench runtime");
    goto done;
  }
  for (size_t i = 0; i < (size_t)L * E; i++)
    loads->values[i] = cdf[i] - (i % E ? cdf[i - 1] : 0);
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = G, o.num_nodes = N, o.num_replicas = R;
  if ((st = eplb_plan_create(loads, &o, &plan)) != EPLB_OK) {
    rc = cli_status_error(st, "bench runtime: plan");
    goto done;
  }
  for (int v = 0; v < 3; v++) {
    eplb_runtime_config_t cfg;
    eplb_runtime_config_default(&cfg);
    cfg.num_layers = L, cfg.num_experts = E, cfg.topk = k, cfg.slots_per_rank = S;
    cfg.world_size = G, cfg.ranks_per_node = K, cfg.split_per_batch = 1;
    cfg.local_first = v == 0;
    cfg.split_whole_tokens = v == 2;
    if ((st = eplb_runtime_create(&cfg, plan, &rt[v])) != EPLB_OK) {
      rc = cli_status_error(st, "bench runtime: create");
      goto done;
    }
  }
  uint32_t warm = repeat / 10 < 20 ? repeat / 10 : 20;
  for (uint32_t s = 0; s < warm + repeat; s++) {
    for (uint32_t l = 0; l < L; l++) {
      /* Node n's counts: its K ranks' batches, a different pool step per node. */
      for (uint32_t n = 0; n < N; n++)
        for (uint32_t e = 0; e < E; e++)
          nc[(size_t)n * E + e] = K * counts[(((s + n) % POOL_STEPS) * L + l) * E + e];
      double t[NB + 1];
      t[0] = bench_now();
      st = eplb_runtime_split(rt[0], l, nc);
      t[1] = bench_now();
      if (st == EPLB_OK)
        st = eplb_runtime_split(rt[1], l, nc);
      t[2] = bench_now();
      if (st == EPLB_OK)
        st = eplb_runtime_split(rt[2], l, nc);
      t[3] = bench_now();
      if (st == EPLB_OK)
        st = eplb_runtime_route(rt[0], l, ids + ((s % POOL_STEPS) * L + l) * (size_t)T * k, T,
                                (uint64_t)s * T, out);
      t[4] = bench_now();
      if (st != EPLB_OK) {
        rc = cli_status_error(st, "bench runtime: split");
        goto done;
      }
      if (s >= warm)
        for (int b = 0; b < NB; b++)
          sample[b * nsamp + (size_t)(s - warm) * L + l] = (t[b + 1] - t[b]) * 1e6;
    }
    if ((st = eplb_runtime_step_end(rt[0])) != EPLB_OK ||
        (st = eplb_runtime_step_end(rt[1])) != EPLB_OK ||
        (st = eplb_runtime_step_end(rt[2])) != EPLB_OK) {
      rc = cli_status_error(st, "bench runtime: step_end");
      goto done;
    }
  }
  double med[NB], p99[NB];
  for (int b = 0; b < NB; b++) {
    med[b] = bench_quantile(sample + b * nsamp, nsamp, 0.5);
    p99[b] = bench_quantile(sample + b * nsamp, nsamp, 0.99);
  }
  if (json) {
    json_t *j = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}", "layers", (int)L,
                          "experts", (int)E, "topk", (int)k, "tokens", (int)T, "slots_per_rank",
                          (int)S, "world", (int)G, "ranks_per_node", (int)K, "nodes", (int)N,
                          "repeat", (int)repeat, "split_per_batch", 1);
    set_figures(j, bname, med, p99, NB, 0);
    rc = cli_print_json_flags(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  } else {
    printf("runtime bench, per-batch split: %u experts, %u GPUs x %u slots on %u nodes, %u "
           "tokens x top-%u per rank, %u layers x %u steps (one core, a standalone rank)\n",
           E, G, S, N, T, k, L, repeat);
    for (int b = 0; b < NB; b++)
      printf("  %-58s median %7.2f us  p99 %7.2f us\n", blabel[b], med[b], p99[b]);
    printf("  target: split + table build <= 10 us per layer (<= 25 us with the locality stage; "
           "no target in whole tokens)\n");
  }
done:
  eplb_runtime_destroy(rt[0]);
  eplb_runtime_destroy(rt[1]);
  eplb_runtime_destroy(rt[2]);
  eplb_plan_destroy(plan);
  eplb_loads_destroy(loads);
  free(sample), free(nc), free(out);
  return rc;
}

static void usage(FILE *f) {
  fputs("usage: eplb bench runtime [--layers 58] [--experts 256] [--topk 8] [--tokens 256]\n"
        "       [--slots-per-rank 9] [--world 32] [--ranks-per-node 8] [--repeat 2000]\n"
        "       [--count-thread] [--gap-us G] [--split-per-batch] [--json]\n"
        "  --split-per-batch  time the per-batch split per layer instead (split, locality\n"
        "              stage, table build, also in whole tokens; route with the split) on a\n"
        "              standalone rank\n"
        "  --gap-us G  after each layer of the layer-by-layer orders, wait G us (the\n"
        "              GPU's work on the layer; not timed): the counting thread's time\n",
        f);
}

/* What `eplb bench runtime` was asked. */
typedef struct rt_args {
  uint32_t L, E, k, T, S, G, K, repeat, gap;
  int json, count_thread, split;
} rt_args_t;

/* CLI_OK, an exit code, or -1 after --help. */
static int rt_parse(int argc, char **argv, rt_args_t *a) {
  const cli_opt_t opts[] = {{"layers", CLI_U32, .field = &a->L},
                            {"experts", CLI_U32, .field = &a->E},
                            {"topk", CLI_U32, .field = &a->k},
                            {"tokens", CLI_U32, .field = &a->T},
                            {"slots-per-rank", CLI_U32, .field = &a->S},
                            {"world", CLI_U32, .field = &a->G},
                            {"ranks-per-node", CLI_U32, .field = &a->K},
                            {"repeat", CLI_U32, .field = &a->repeat},
                            {"count-thread", CLI_FLAG, .field = &a->count_thread},
                            {"gap-us", CLI_U32, .field = &a->gap},
                            {"split-per-batch", CLI_FLAG, .field = &a->split},
                            {"json", CLI_FLAG, .field = &a->json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  int c;
  optind = 1;
  if ((c = cli_getopt(argc, argv, "h", opts)) != -1) { /* the table takes all but --help */
    if (c == 'h')
      return usage(stdout), -1;
    return CLI_BADINPUT;
  }
  if (optind < argc)
    return cli_usage_error("bench runtime: unexpected argument '%s'", argv[optind]);
  if (a->gap > 100000)
    return cli_usage_error("bench runtime: --gap-us %u: at most 100000", a->gap);
  if (!a->L || !a->E || !a->k || !a->T || !a->S || !a->G || !a->K || !a->repeat)
    return cli_usage_error("bench runtime: every size must be >= 1");
  if (a->k > a->E || a->G % a->K || (uint64_t)a->S * a->G < a->E ||
      (uint64_t)a->S * a->G > (1u << 20) || (uint64_t)a->L * a->T * a->k > (1u << 24) ||
      (uint64_t)a->L * a->E > (1u << 22) || a->repeat > 1000000)
    return cli_usage_error("bench runtime: need topk <= experts, ranks-per-node dividing world, "
                           "experts <= world x slots-per-rank <= 2^20, layers x tokens x topk "
                           "<= 2^24, layers x experts <= 2^22, repeat <= 10^6");
  return CLI_OK;
}

/* The timed steps. Warm-up steps are not timed: the first touches fault
 * pages in. Timed steps rotate three orders of the same work: every layer's
 * record, then every layer's map (what record and map cost apart); record
 * then map layer by layer (a serving loop's order: map finds the ids in
 * cache); eplb_runtime_route layer by layer (both in one call);
 * record_counts and map layer by layer (an engine that has the counts
 * already, e.g. from a bincount on the GPU: they are made here, untimed).
 * sample[f * repeat + i]: figure f of timed round i, in us. */
static int rt_steps(const rt_args_t *a, eplb_runtime_t *rt, const int32_t *ids,
                    const uint32_t *counts, int32_t *out, double *sample) {
  uint32_t L = a->L, E = a->E, T = a->T, k = a->k, repeat = a->repeat, gap = a->gap;
  size_t step_ids = (size_t)L * T * k;
  eplb_status_t st = EPLB_OK;
  uint32_t warm = repeat / 10 < 50 ? repeat / 10 : 50;
  for (uint32_t s = 0; s < warm + 4 * repeat; s++) {
    const int32_t *b = ids + (s % POOL_STEPS) * step_ids;
    uint64_t base = (uint64_t)s * T;
    uint32_t mode = s < warm ? 0 : (s - warm) % 4;
    double t0 = bench_now(), t1 = t0;
    double waited = 0; /* the gaps, taken out of the layer-by-layer times */
    for (uint32_t l = 0; l < L && st == EPLB_OK; l++) {
      const int32_t *x = b + (size_t)l * T * k;
      if (mode == 0)
        st = eplb_runtime_record(rt, l, x, T);
      else if (mode == 1 && (st = eplb_runtime_record(rt, l, x, T)) == EPLB_OK)
        st = eplb_runtime_map(rt, l, x, T, base, out);
      else if (mode == 2)
        st = eplb_runtime_route(rt, l, x, T, base, out);
      else if (mode == 3 && (st = eplb_runtime_record_counts(
                                 rt, l, counts + ((s % POOL_STEPS) * L + l) * E)) == EPLB_OK)
        st = eplb_runtime_map(rt, l, x, T, base, out);
      if (mode != 0 && gap) {
        double g0 = bench_now(), g1 = g0;
        while (g1 - g0 < gap * 1e-6)
          g1 = bench_now();
        waited += g1 - g0;
      }
    }
    if (mode == 0) {
      t1 = bench_now();
      for (uint32_t l = 0; l < L && st == EPLB_OK; l++)
        st = eplb_runtime_map(rt, l, b + (size_t)l * T * k, T, base, out);
    }
    double t2 = bench_now();
    if (st == EPLB_OK)
      st = eplb_runtime_step_end(rt);
    double t3 = bench_now();
    if (st != EPLB_OK)
      return cli_status_error(st, "bench runtime");
    if (s < warm)
      continue;
    double *at = sample + (s - warm) / 4; /* figure f's sample: at[f * repeat] */
    if (mode == 0) {
      at[F_RECORD * repeat] = (t1 - t0) * 1e6;
      at[F_MAP * repeat] = (t2 - t1) * 1e6;
      at[F_TOTAL * repeat] = (t2 - t0) * 1e6;
      at[F_STEP_END * repeat] = (t3 - t2) * 1e6;
    } else {
      static const int fig_of_mode[4] = {0, F_INTER, F_ROUTE, F_COUNTS_MAP};
      at[fig_of_mode[mode] * repeat] = (t2 - t0 - waited) * 1e6;
      if (mode == 2)
        at[F_ROUTE_END * repeat] = (t3 - t2) * 1e6;
    }
  }
  return CLI_OK;
}

static int rt_print(const rt_args_t *a, double *sample, double replicated) {
  uint32_t L = a->L, E = a->E, k = a->k, T = a->T, S = a->S, G = a->G, R = S * G;
  size_t step_ids = (size_t)L * T * k;
  double med[NFIG], p99[NFIG];
  for (int f = 0; f < NFIG; f++) {
    med[f] = bench_quantile(sample + (size_t)f * a->repeat, a->repeat, 0.5);
    p99[f] = bench_quantile(sample + (size_t)f * a->repeat, a->repeat, 0.99);
  }
  double per_id = 1e3 / (double)step_ids; /* us per step -> ns per id */
  if (a->json) {
    json_t *j = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:I, s:i, s:b, s:i}", "layers", (int)L,
        "experts", (int)E, "topk", (int)k, "tokens", (int)T, "slots_per_rank", (int)S, "world",
        (int)G, "ranks_per_node", (int)a->K, "runtime_slots", (int)R, "repeat", (int)a->repeat,
        "replicated_experts_per_layer", replicated / L, "ids_per_step", (json_int_t)step_ids,
        "world_size_measured", 1, "count_thread", a->count_thread, "gap_us", (int)a->gap);
    set_figures(j, fig_name, med, p99, NFIG, per_id);
    return cli_print_json_flags(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  }
  printf("runtime bench: %u layers x %u tokens x top-%u = %zu ids per step, %u experts,\n"
         "  %u slots (%u GPUs x %u) on one rank (world 1), %.1f replicated experts per "
         "layer, %u steps\n",
         L, T, k, step_ids, E, R, G, S, replicated / L, a->repeat);
  for (int f = 0; f < NFIG; f++)
    printf("  %-52s median %7.1f us  p99 %7.1f us  (%.2f ns/id)\n", fig_label[f], med[f], p99[f],
           med[f] * per_id);
  printf("  target: record + map <= 50 us per step; %s\n",
         a->count_thread ? "counting thread on (step_end closes the step's counts)"
                         : "counting in record");
  return CLI_OK;
}

int cli_bench_runtime(int argc, char **argv) {
  rt_args_t a = {.L = 58, .E = 256, .k = 8, .T = 256, .S = 9, .G = 32, .K = 8, .repeat = 2000};
  int rc = rt_parse(argc, argv, &a);
  if (rc)
    return rc == -1 ? CLI_OK : rc;
  uint32_t L = a.L, E = a.E, k = a.k, T = a.T, R = a.S * a.G, repeat = a.repeat;
  size_t step_ids = (size_t)L * T * k;
  eplb_status_t st;
  eplb_plan_t *plan = NULL;
  eplb_runtime_t *rt = NULL;
  double *cdf = malloc(sizeof *cdf * L * E);
  int32_t *ids = malloc(sizeof *ids * step_ids * POOL_STEPS);
  int32_t *out = malloc(sizeof *out * (size_t)T * k);
  double *sample = malloc(sizeof *sample * NFIG * repeat); /* [NFIG][repeat] in us */
  uint32_t *counts = calloc((size_t)POOL_STEPS * L * E, sizeof *counts);
  if (!cdf || !ids || !out || !sample || !counts) {
    rc = cli_out_of_memory("bench runtime");
    goto done;
  }
  uint64_t seed = 42;
  make_popularity(cdf, L, E, &seed);
  make_ids(ids, cdf, L, E, k, T, &seed);
  for (size_t x = 0; x < step_ids * POOL_STEPS; x++) /* [step][layer][expert] */
    counts[(x / ((size_t)T * k)) * E + (uint32_t)ids[x]]++;
  if (a.split) {
    rc = bench_split(L, E, k, T, a.S, a.G, a.K, repeat, cdf, ids, counts, a.json);
    goto done;
  }
  if ((st = make_plan(cdf, L, E, R, &plan)) != EPLB_OK) {
    rc = cli_status_error(st, "bench runtime: plan");
    goto done;
  }
  uint32_t replicated = 0; /* experts with more than one slot, mean over layers */
  for (uint32_t l = 0; l < L; l++) {
    uint32_t *cnt = calloc(E, sizeof *cnt);
    const int32_t *p2l = eplb_plan_phy2log(plan, l);
    for (uint32_t r = 0; cnt && r < R; r++)
      cnt[p2l[r]]++;
    for (uint32_t e = 0; cnt && e < E; e++)
      replicated += cnt[e] > 1;
    free(cnt);
  }
  eplb_runtime_config_t cfg;
  eplb_runtime_config_default(&cfg);
  cfg.num_layers = L, cfg.num_experts = E, cfg.topk = k, cfg.slots_per_rank = R;
  cfg.count_thread = (uint32_t)a.count_thread;
  if ((st = eplb_runtime_create(&cfg, plan, &rt)) != EPLB_OK) {
    rc = cli_status_error(st, "bench runtime: create");
    goto done;
  }
  if ((rc = rt_steps(&a, rt, ids, counts, out, sample)) == CLI_OK)
    rc = rt_print(&a, sample, (double)replicated);
done:
  eplb_runtime_destroy(rt);
  eplb_plan_destroy(plan);
  free(cdf);
  free(ids);
  free(out);
  free(sample);
  free(counts);
  return rc;
}
