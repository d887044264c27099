/* eplb bench plan --scale: the growth table of planning time and quality
 * over experts x GPUs x slots per GPU, per policy. */
#include "bench.h"
#include "cli.h"

#include <eplb/plan.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const scale_policy_names[SP_COUNT] = {"deepseek", "balanced", "uniform", "incremental",
                                                  "locality"};

typedef struct {
  uint32_t E, G, S;
} scale_row_t;

static int scale_row_cmp(const void *a, const void *b) {
  const scale_row_t *x = a, *y = b;
  uint64_t wx = (uint64_t)x->G * x->G * x->S, wy = (uint64_t)y->G * y->G * y->S;
  if (wx != wy)
    return wx < wy ? -1 : 1;
  return (x->E > y->E) - (x->E < y->E);
}

/* Median wall ms of `repeat` plans; *plan keeps the last one. */
static eplb_status_t scale_time(const eplb_loads_t *ld, const eplb_plan_options_t *o,
                                uint32_t repeat, double *ms, eplb_plan_t **plan) {
  double *t = calloc(repeat, sizeof *t);
  if (!t)
    return EPLB_ENOMEM;
  eplb_status_t st = EPLB_OK;
  for (uint32_t i = 0; i < repeat && !st; i++) {
    eplb_plan_destroy(*plan);
    *plan = NULL;
    double t0 = bench_now();
    st = eplb_plan_create(ld, o, plan);
    t[i] = (bench_now() - t0) * 1e3;
  }
  *ms = st ? NAN : bench_quantile(t, repeat, 0.5);
  free(t);
  return st;
}

/* One synthetic trace per expert count (with top-k rows, for locality's
 * co-activation): loads of steps [0, 4) make the plan in force for
 * incremental, every policy plans steps [4, 8). */
typedef struct {
  uint32_t E;
  char path[4096];
  eplb_trace_t *tr;
  eplb_loads_t *old_loads, *loads;
} scale_input_t;

static eplb_status_t scale_input(scale_input_t *in, uint32_t L, uint32_t E) {
  const char *dir = getenv("TMPDIR");
  snprintf(in->path, sizeof in->path, "%s/eplb-bench-scale-%ld-%u.eplbt",
           dir && *dir ? dir : "/tmp", (long)getpid(), E);
  in->E = E;
  eplb_synth_options_t so;
  eplb_synth_options_default(&so);
  so.num_layers = L;
  so.num_experts = E;
  so.topk = E >= 16 ? 8 : E / 2;
  so.num_steps = 8;
  so.tokens_per_step = 2048;
  so.num_ranks = 0; /* rows spread round-robin over whatever cluster */
  so.seed = 16 + E;
  eplb_status_t st = eplb_synth_generate(in->path, &so);
  if (!st)
    st = eplb_trace_open(in->path, NULL, &in->tr);
  if (!st)
    st = eplb_loads_create(L, E, &in->old_loads);
  if (!st)
    st = eplb_loads_create(L, E, &in->loads);
  if (!st)
    st = eplb_trace_window_sum(in->tr, 0, 4, in->old_loads->values);
  if (!st)
    st = eplb_trace_window_sum(in->tr, 4, 8, in->loads->values);
  return st;
}

static void scale_input_free(scale_input_t *in) {
  eplb_trace_close(in->tr);
  eplb_loads_destroy(in->old_loads);
  eplb_loads_destroy(in->loads);
  if (in->path[0])
    remove(in->path);
}

/* Times every selected policy on one row; appends JSON rows to out. */
static int scale_row(const scale_cfg_t *cfg, scale_input_t *in, const scale_row_t *row,
                     double deadline, json_t *out, json_t *skipped) {
  uint32_t E = row->E, G = row->G, R = G * row->S, N = G >= 8 ? G / 8 : 1;
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.num_gpus = G;
  o.num_nodes = N;
  o.num_replicas = R;
  eplb_plan_t *from = NULL, *plan = NULL;
  eplb_cluster_t *cl = NULL;
  eplb_coact_t *co = NULL;
  eplb_status_t st = EPLB_OK;
  const char *what = "balanced";
  if (cfg->policies & (1u << SP_INCREMENTAL)) {
    o.threads = cfg->threads;
    st = eplb_plan_create(in->old_loads, &o, &from);
  }
  if (!st && (cfg->policies & (1u << SP_LOCALITY))) {
    what = "locality inputs";
    st = eplb_cluster_create_uniform(N, G / N, &cl);
    if (!st)
      st = eplb_coact_from_trace(in->tr, 4, 8, cl, &co);
  }
  for (int p = 0; p < SP_COUNT && !st; p++) {
    if (!(cfg->policies & (1u << p)))
      continue;
    what = scale_policy_names[p];
    /* Checked per policy: one policy of one row can take minutes (locality's
     * transport LP at 128 GPUs x 16 slots: seconds per layer). */
    if (bench_now() > deadline) {
      json_array_append_new(skipped, json_pack("{s:i,s:i,s:i,s:s}", "experts", E, "gpus", G,
                                               "slots_per_gpu", row->S, "policy", what));
      if (!cfg->json)
        printf("%7u %5u %9u %6u  %-11s skipped: over the --budget of %g s\n", E, G, row->S, R, what,
               cfg->budget_s);
      continue;
    }
    eplb_plan_options_t q = o;
    q.policy = p == SP_DEEPSEEK      ? EPLB_POLICY_DEEPSEEK
               : p == SP_INCREMENTAL ? EPLB_POLICY_INCREMENTAL
               : p == SP_LOCALITY    ? EPLB_POLICY_LOCALITY
                                     : EPLB_POLICY_BALANCED;
    q.shares = p == SP_UNIFORM ? EPLB_SHARES_UNIFORM : EPLB_SHARES_EXACT;
    q.from = from;
    q.cluster = cl;
    q.coact = co;
    double ms1 = 0, msn = 0;
    q.threads = 1;
    if ((st = scale_time(in->loads, &q, cfg->repeat, &ms1, &plan)))
      break;
    eplb_plan_summary_t sum;
    eplb_plan_summary(plan, &sum);
    q.threads = cfg->threads;
    if ((st = scale_time(in->loads, &q, cfg->repeat, &msn, &plan)))
      break;
    double L = cfg->layers;
    if (cfg->json) {
      json_t *j = json_object();
      json_object_set_new(j, "experts", json_integer(E));
      json_object_set_new(j, "gpus", json_integer(G));
      json_object_set_new(j, "slots_per_gpu", json_integer(row->S));
      json_object_set_new(j, "replicas", json_integer(R));
      json_object_set_new(j, "policy", json_string(scale_policy_names[p]));
      json_object_set_new(j, "ms_per_layer_1_thread", cli_real(ms1 / L));
      json_object_set_new(j, "ms_per_layer_threaded", cli_real(msn / L));
      json_object_set_new(j, "mean_max_over_lower_bound", cli_real(sum.mean_ratio));
      json_object_set_new(j, "max_max_over_lower_bound", cli_real(sum.max_ratio));
      json_array_append_new(out, j);
    } else {
      printf("%7u %5u %9u %6u  %-11s %11.3f %11.3f %7.2fx %11.6f %11.6f\n", E, G, row->S, R,
             scale_policy_names[p], ms1 / L, msn / L, msn > 0 ? ms1 / msn : 0.0, sum.mean_ratio,
             sum.max_ratio);
      fflush(stdout);
    }
  }
  eplb_plan_destroy(plan);
  eplb_plan_destroy(from);
  eplb_coact_destroy(co);
  eplb_cluster_destroy(cl);
  if (st) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "bench plan --scale: %s, %u experts, %u GPUs, %u slots", what, E, G,
             R);
    return cli_status_error(st, ctx);
  }
  return CLI_OK;
}

int bench_plan_scale(const scale_cfg_t *cfg) {
  size_t nrows = 0, cap = (size_t)cfg->n_experts * cfg->n_gpus * cfg->n_slots;
  scale_row_t *rows = calloc(cap ? cap : 1, sizeof *rows);
  scale_input_t *ins = calloc(cfg->n_experts, sizeof *ins);
  json_t *out = json_array(), *skipped = json_array();
  int rc = CLI_OK;
  if (!rows || !ins || !out || !skipped) {
    rc = cli_status_error(EPLB_ENOMEM, "bench plan --scale");
    goto done;
  }
  /* Rows the planner accepts, smallest work (G^2 S) first: the budget cuts
   * the largest ones. */
  for (uint32_t i = 0; i < cfg->n_experts; i++)
    for (uint32_t j = 0; j < cfg->n_gpus; j++)
      for (uint32_t k = 0; k < cfg->n_slots; k++) {
        uint64_t R = (uint64_t)cfg->gpus[j] * cfg->slots[k];
        if (R >= cfg->experts[i] && R <= EPLB_MAX_SLOTS && R * cfg->gpus[j] <= EPLB_MAX_PLAN_WORK)
          rows[nrows++] = (scale_row_t){cfg->experts[i], cfg->gpus[j], cfg->slots[k]};
      }
  qsort(rows, nrows, sizeof *rows, scale_row_cmp);
  if (!cfg->json) {
    printf("plan scale: %u layers per instance, median of %u, threaded column: %u threads "
           "(0 = online cores: %ld); synthetic zipf-like trace, top-8\n",
           cfg->layers, cfg->repeat, cfg->threads, sysconf(_SC_NPROCESSORS_ONLN));
    printf("%7s %5s %9s %6s  %-11s %11s %11s %8s %11s %11s\n", "experts", "gpus", "slots/gpu",
           "slots", "policy", "ms/layer 1t", "ms/layer Nt", "speedup", "max/LB mean", "max/LB max");
  }
  double t0 = bench_now();
  for (size_t r = 0; r < nrows && !rc; r++) {
    if (bench_now() - t0 > cfg->budget_s) {
      json_array_append_new(skipped,
                            json_pack("{s:i,s:i,s:i,s:s}", "experts", rows[r].E, "gpus", rows[r].G,
                                      "slots_per_gpu", rows[r].S, "policy", "all"));
      if (!cfg->json)
        printf("%7u %5u %9u %6u  skipped: over the --budget of %g s\n", rows[r].E, rows[r].G,
               rows[r].S, rows[r].G * rows[r].S, cfg->budget_s);
      continue;
    }
    uint32_t i = 0;
    while (cfg->experts[i] != rows[r].E)
      i++;
    if (!ins[i].tr) {
      eplb_status_t st = scale_input(&ins[i], cfg->layers, rows[r].E);
      if (st) {
        rc = cli_status_error(st, "bench plan --scale: synthetic trace");
        break;
      }
    }
    rc = scale_row(cfg, &ins[i], &rows[r], t0 + cfg->budget_s, out, skipped);
  }
  if (!rc && cfg->json) {
    json_t *root = json_object();
    json_object_set_new(root, "benchmark", json_string("plan-scale"));
    json_object_set_new(root, "layers", json_integer(cfg->layers));
    json_object_set_new(root, "repeat", json_integer(cfg->repeat));
    json_object_set_new(root, "threads", json_integer(cfg->threads));
    json_object_set_new(root, "budget_seconds", cli_real(cfg->budget_s));
    json_object_set_new(root, "rows", out);
    json_object_set_new(root, "skipped", skipped);
    out = skipped = NULL;
    rc = cli_print_json(root);
  }
done:
  for (uint32_t i = 0; ins && i < cfg->n_experts; i++)
    scale_input_free(&ins[i]);
  free(ins);
  free(rows);
  json_decref(out);
  json_decref(skipped);
  return rc;
}
