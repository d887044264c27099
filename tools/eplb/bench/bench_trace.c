/* eplb bench trace — append latency and read throughput of the native format. */
#include "bench.h"
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Counts shaped like a real decode step: zipf popularity per layer, a slow
 * random walk between steps, and sampling noise of ~sqrt(mean). */
static void make_counts(uint32_t *out, uint32_t L, uint32_t E, uint64_t steps, uint32_t tokens,
                        uint32_t k, uint64_t seed) {
  double *logp = malloc(sizeof(double) * L * E);
  for (size_t i = 0; i < (size_t)L * E; i++)
    logp[i] = -log((double)(i % E + 1)) + 0.5 * (bench_unit(&seed) - 0.5);
  for (uint64_t s = 0; s < steps; s++) {
    for (uint32_t l = 0; l < L; l++) {
      double *lp = logp + (size_t)l * E, z = 0;
      for (uint32_t e = 0; e < E; e++) {
        lp[e] += 0.05 * (bench_unit(&seed) - 0.5);
        z += exp(lp[e]);
      }
      for (uint32_t e = 0; e < E; e++) {
        double mean = (double)tokens * k * exp(lp[e]) / z;
        double noise =
            (bench_unit(&seed) + bench_unit(&seed) + bench_unit(&seed) - 1.5) * 2.0 * sqrt(mean);
        double v = floor(mean + noise + 0.5);
        out[(s * L + l) * E + e] = v > 0 ? (uint32_t)v : 0;
      }
    }
  }
  free(logp);
}

/* One repetition's inputs. */
typedef struct run {
  const char *path;
  const eplb_trace_meta_t *meta;
  const eplb_trace_writer_options_t *wo;
  const uint32_t *counts;
  size_t per_step;
  uint64_t steps;
  uint32_t tokens;
  double *lat, *sums; /* [steps], [per_step] scratch */
} run_t;

/* Writes the trace step by step (latency per append and amortised), then
 * reads it back streaming and as a window sum. Returns an exit code. */
static int bench_round(const run_t *u, double *amort, double *p50, double *p99, double *read_gbs,
                       double *win_gbs) {
  eplb_trace_writer_t *w = NULL;
  eplb_status_t s = eplb_trace_writer_create(u->path, u->meta, u->wo, &w);
  if (s != EPLB_OK)
    return cli_status_error(s, u->path);
  double t0 = bench_now();
  for (uint64_t i = 0; i < u->steps && s == EPLB_OK; i++) {
    eplb_trace_step_t st = {.num_tokens = u->tokens, .counts = u->counts + i * u->per_step};
    double a = bench_now();
    s = eplb_trace_writer_append(w, &st);
    u->lat[i] = (bench_now() - a) * 1e6;
  }
  if (s == EPLB_OK)
    s = eplb_trace_writer_finish(w);
  double t1 = bench_now();
  eplb_trace_writer_destroy(w);
  if (s != EPLB_OK)
    return cli_status_error(s, u->path);
  *amort = (t1 - t0) * 1e6 / (double)u->steps;
  *p50 = bench_quantile(u->lat, u->steps, 0.5);
  *p99 = bench_quantile(u->lat, u->steps, 0.99);

  eplb_trace_t *t = NULL;
  double a = bench_now();
  s = eplb_trace_open(u->path, NULL, &t);
  uint64_t check = 0;
  eplb_trace_step_t st;
  while (s == EPLB_OK && (s = eplb_trace_next(t, &st)) == EPLB_OK)
    check += st.counts[(st.index * 7) % u->per_step];
  double b = bench_now();
  if (s != EPLB_EOF) {
    eplb_trace_close(t);
    return cli_status_error(s, u->path);
  }
  *read_gbs = (double)u->steps * u->per_step * 4 / (b - a) / 1e9;
  a = bench_now();
  s = eplb_trace_window_sum(t, 0, u->steps, u->sums);
  b = bench_now();
  eplb_trace_close(t);
  if (s != EPLB_OK)
    return cli_status_error(s, u->path);
  *win_gbs = (double)u->steps * u->per_step * 4 / (b - a) / 1e9;
  if (check == UINT64_MAX)
    fputs("", stderr); /* keeps the read loop observable */
  return CLI_OK;
}

typedef struct shape {
  uint32_t L, E;
  uint64_t steps;
  uint32_t chunk, repeat;
} shape_t;

static int bench_print(const shape_t *h, int json, double m_amort, double m_p50, double m_p99,
                       double m_read, double m_win, long file_bytes) {
  double raw = (double)h->steps * h->L * h->E * 4;
  if (json) {
    json_t *j = json_pack(
        "{s:i, s:i, s:I, s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:I, s:f}", "layers", (int)h->L,
        "experts", (int)h->E, "steps", (json_int_t)h->steps, "steps_per_chunk", (int)h->chunk,
        "repeat", (int)h->repeat, "append_amortised_us", m_amort, "append_median_us", m_p50,
        "append_p99_us", m_p99, "read_gb_per_s", m_read, "window_sum_gb_per_s", m_win, "file_bytes",
        (json_int_t)file_bytes, "compression_ratio", file_bytes ? raw / (double)file_bytes : 0.0);
    return cli_print_json_flags(j, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
  }
  printf("trace bench: %" PRIu32 " layers x %" PRIu32 " experts, %" PRIu64 " steps, %" PRIu32
         " steps/chunk, median of %" PRIu32 " runs\n",
         h->L, h->E, h->steps, h->chunk, h->repeat);
  printf("  append   amortised %.2f us/step (target <= 50), per call median %.2f us, "
         "p99 %.2f us\n",
         m_amort, m_p50, m_p99);
  printf("  read     %.2f GB/s of decoded counts (target >= 1), window sum %.2f GB/s\n", m_read,
         m_win);
  printf("  file     %.1f MB for %.1f MB of counts (%.1fx)\n", (double)file_bytes / 1e6, raw / 1e6,
         file_bytes ? raw / (double)file_bytes : 0.0);
  return CLI_OK;
}

int cli_bench_trace(int argc, char **argv) {
  uint32_t L = 61, E = 256, tokens = 4096, k = 8, chunk = 16, repeat = 5;
  uint64_t steps = 1000;
  int level = 0; /* 0: the writer's default */
  const char *dir = NULL;
  int json = 0, c;
  const cli_opt_t opts[] = {
      {"layers", CLI_U32, .field = &L},      {"experts", CLI_U32, .field = &E},
      {"steps", CLI_U64, .field = &steps},   {"tokens-per-step", CLI_U32, .field = &tokens},
      {"topk", CLI_U32, .field = &k},        {"steps-per-chunk", CLI_U32, .field = &chunk},
      {"repeat", CLI_U32, .field = &repeat}, {"level", CLI_ARG, .val = 'l'},
      {"dir", CLI_STR, .field = &dir},       {"json", CLI_FLAG, .field = &json},
      {"help", CLI_NOARG, .val = 'h'},       {NULL}};
  optind = 1;
  while ((c = cli_getopt(argc, argv, "h", opts)) != -1) {
    uint32_t level_u = 0;
    int neg;
    switch (c) {
    case 'l':
      neg = optarg[0] == '-';
      if (cli_parse_u32("--level", optarg + neg, &level_u))
        return CLI_BADINPUT;
      if (level_u > 22)
        return cli_usage_error("--level: zstd levels are -22..22");
      level = neg ? -(int)level_u : (int)level_u;
      break;
    case 'h':
      puts("usage: eplb bench trace [--layers 61] [--experts 256] [--steps 1000]\n"
           "       [--tokens-per-step 4096] [--topk 8] [--steps-per-chunk 16] [--repeat 5]\n"
           "       [--level ZSTD_LEVEL]\n"
           "       [--dir DIR] [--json]");
      return CLI_OK;
    default: return CLI_BADINPUT;
    }
  }
  if (optind < argc)
    return cli_usage_error("bench trace: unexpected argument '%s'", argv[optind]);
  if (!L || !E || !steps || !chunk || !repeat || steps > 100000 || (uint64_t)L * E > (1u << 22))
    return cli_usage_error("bench trace: sizes must be >= 1 (steps <= 100000, L*E <= 4M)");

  char path[4096];
  snprintf(path, sizeof path, "%s/eplb-bench-%ld.eplbt", dir ? dir : "/tmp", (long)getpid());
  size_t per_step = (size_t)L * E;
  uint32_t *counts = malloc(sizeof(uint32_t) * per_step * steps);
  double *lat = malloc(sizeof(double) * steps);
  double *amort = calloc(repeat, sizeof(double)), *read_gbs = calloc(repeat, sizeof(double));
  double *win_gbs = calloc(repeat, sizeof(double)), *p50 = calloc(repeat, sizeof(double));
  double *p99 = calloc(repeat, sizeof(double));
  double *sums = malloc(sizeof(double) * per_step);
  int rc = CLI_OK;
  long file_bytes = 0;
  if (!counts || !lat || !amort || !read_gbs || !win_gbs || !p50 || !p99 || !sums) {
    rc = cli_out_of_memory("bench trace");
    goto done;
  }
  make_counts(counts, L, E, steps, tokens, k, 42);
  eplb_trace_meta_t meta;
  eplb_trace_meta_default(&meta);
  meta.num_layers = L;
  meta.num_experts = E;
  meta.topk = k;
  meta.phase = EPLB_PHASE_DECODE;
  snprintf(meta.model, sizeof meta.model, "bench");
  eplb_trace_writer_options_t wo;
  eplb_trace_writer_options_default(&wo);
  wo.steps_per_chunk = chunk;
  wo.atomic = 0;
  if (level)
    wo.compression_level = level;

  for (uint32_t r = 0; r < repeat; r++) {
    run_t run = {path, &meta, &wo, counts, per_step, steps, tokens, lat, sums};
    if ((rc = bench_round(&run, &amort[r], &p50[r], &p99[r], &read_gbs[r], &win_gbs[r])))
      goto done;
  }
  FILE *f = fopen(path, "rb");
  if (f) {
    fseek(f, 0, SEEK_END);
    file_bytes = ftell(f);
    fclose(f);
  }
  double m_amort = bench_quantile(amort, repeat, 0.5), m_p50 = bench_quantile(p50, repeat, 0.5);
  double m_p99 = bench_quantile(p99, repeat, 0.5), m_read = bench_quantile(read_gbs, repeat, 0.5);
  double m_win = bench_quantile(win_gbs, repeat, 0.5);
  shape_t sh = {L, E, steps, chunk, repeat};
  rc = bench_print(&sh, json, m_amort, m_p50, m_p99, m_read, m_win, file_bytes);
done:
  unlink(path);
  free(counts);
  free(lat);
  free(amort);
  free(read_gbs);
  free(win_gbs);
  free(p50);
  free(p99);
  free(sums);
  return rc;
}
