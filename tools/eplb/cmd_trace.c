/* eplb trace gen | info | stats | convert | recover */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char trace_usage[] =
    "usage: eplb trace <command> [options]\n"
    "\n"
    "  gen --layers L --experts E --topk K --steps T --tokens-per-step N --seed S\n"
    "      [--skew zipf:1.0|lognormal:1.2] [--drift 0.9] [--switch-every N] [--ranks G]\n"
    "      [--coactivation C] [--layer-variation V] [--rows-per-step N] [--model NAME]\n"
    "      [--rank-affinity A] [--tenants N]\n"
    "      -o FILE.eplbt                       write a synthetic trace\n"
    "                                          (--rank-affinity: 0..1, how much a token's\n"
    "                                          experts depend on its source's tenant; the\n"
    "                                          ranks form N tenants, default one per 8)\n"
    "  info FILE [--json]                      shape and metadata of a native trace\n"
    "  stats FILE [--ep 8,16,32] [--steps A:B] [--json]\n"
    "                                          per-layer skew, GPU imbalance, drift\n"
    "  convert IN OUT [--from topk-npy|counts-npy|csv|csv-matrix|eplbt] [--experts E]\n"
    "      [--tokens-per-step N] [--rows-per-step N] [--model NAME] [--phase P]\n"
    "                                          formats from the suffixes (.eplbt .npy .csv);\n"
    "                                          aliases: native, npy-topk, npy-counts, npy\n"
    "  recover IN OUT                          copy every complete step of a damaged file\n";

/* ---- gen ----------------------------------------------------------------- */

static int parse_skew(const char *s, eplb_synth_options_t *o) {
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  if (n == 4 && !strncmp(s, "zipf", 4))
    o->skew = EPLB_SKEW_ZIPF;
  else if (n == 9 && !strncmp(s, "lognormal", 9))
    o->skew = EPLB_SKEW_LOGNORMAL;
  else
    return cli_usage_error("--skew: expected zipf:S or lognormal:SIGMA, got '%s'", s), -1;
  return colon && cli_parse_double("--skew", colon + 1, &o->skew_param) ? -1 : 0;
}

static int trace_gen(int argc, char **argv) {
  eplb_synth_options_t o;
  eplb_synth_options_default(&o);
  const char *out = NULL;
  const cli_opt_t opts[] = {{"layers", CLI_U32, .field = &o.num_layers},
                            {"experts", CLI_U32, .field = &o.num_experts},
                            {"topk", CLI_U32, .field = &o.topk},
                            {"steps", CLI_U64, .field = &o.num_steps},
                            {"tokens-per-step", CLI_U32, .field = &o.tokens_per_step},
                            {"seed", CLI_U64, .field = &o.seed},
                            {"skew", CLI_ARG, .val = 's'},
                            {"drift", CLI_DOUBLE, .field = &o.drift},
                            {"switch-every", CLI_U64, .field = &o.switch_every},
                            {"ranks", CLI_U32, .field = &o.num_ranks},
                            {"coactivation", CLI_DOUBLE, .field = &o.coactivation},
                            {"layer-variation", CLI_DOUBLE, .field = &o.layer_variation},
                            {"rows-per-step", CLI_U32, .field = &o.topk_rows_per_step},
                            {"model", CLI_ARG, .val = 'm'},
                            {"rank-affinity", CLI_DOUBLE, .field = &o.rank_affinity},
                            {"tenants", CLI_U32, .field = &o.num_tenants},
                            {"output", CLI_STR, .field = &out, .val = 'o'},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  int c;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "o:h", opts)) != -1) {
    switch (c) {
    case 's':
      if (parse_skew(optarg, &o))
        return CLI_BADINPUT;
      break;
    case 'm': snprintf(o.model, sizeof o.model, "%s", optarg); break;
    case 'h': fputs(trace_usage, stdout); return CLI_OK;
    default: return CLI_BADINPUT;
    }
  }
  if (optind != argc)
    return cli_usage_error("trace gen: unexpected argument '%s'", argv[optind]);
  if (!out)
    return cli_usage_error("trace gen: -o FILE.eplbt is required");
  eplb_status_t s = eplb_synth_options_check(&o);
  if (s != EPLB_OK)
    return cli_option_error(s, NULL);
  /* Before the work: a directory or a missing one is found after it else. */
  if (cli_check_output("-o", out, 0))
    return CLI_BADINPUT;
  if ((s = eplb_synth_generate(out, &o)) != EPLB_OK)
    return cli_status_error(s, "trace gen");
  return CLI_OK;
}

/* ---- info ---------------------------------------------------------------- */

static int open_trace(const char *path, eplb_trace_t **t) {
  eplb_status_t s = eplb_trace_open(path, NULL, t);
  if (s != EPLB_OK)
    return cli_status_error(s, path);
  return CLI_OK;
}

static int trace_info(int argc, char **argv) {
  int json = 0, c;
  const cli_opt_t opts[] = {
      {"json", CLI_FLAG, .field = &json}, {"help", CLI_NOARG, .val = 'h'}, {NULL}};
  optind = 1;
  if ((c = cli_getopt(argc, argv, "h", opts)) != -1) /* the table takes all but --help */
    return c == 'h' ? (fputs(trace_usage, stdout), CLI_OK) : CLI_BADINPUT;
  if (optind + 1 != argc)
    return cli_usage_error("trace info: expected one FILE");
  eplb_trace_t *t = NULL;
  int rc = open_trace(argv[optind], &t);
  if (rc)
    return rc;
  const eplb_trace_meta_t *m = eplb_trace_meta(t);
  const char *phase = eplb_trace_phase_str(m->phase);
  if (json) {
    json_t *j;
    eplb_trace_info_tree(t, argv[optind], &j);
    rc = cli_print_json(j);
  } else {
    printf("file      %s\nmodel     %s\nphase     %s\nlayers    %" PRIu32 "\nexperts   %" PRIu32
           "\ntopk      %" PRIu32 "\nranks     %" PRIu32 "\nsteps     %" PRIu64
           "\ntokens    %" PRIu64 "\nhas_topk  %s\norigin    %s\n",
           argv[optind], m->model[0] ? m->model : "-", phase ? phase : "unknown", m->num_layers,
           m->num_experts, m->topk, m->num_ranks, eplb_trace_num_steps(t), eplb_trace_num_tokens(t),
           eplb_trace_has_topk(t) ? "yes" : "no", m->origin[0] ? m->origin : "-");
  }
  eplb_trace_close(t);
  return rc;
}

/* ---- stats --------------------------------------------------------------- */

static int stats_print_json(const char *path, const eplb_trace_stats_t *s) {
  json_t *j;
  eplb_trace_stats_tree(s, path, &j);
  return cli_print_json(j);
}

static void stats_print_text(const char *path, const eplb_trace_stats_t *s) {
  uint32_t n_ep = s->num_ep;
  printf("%s: %" PRIu64 " steps [%" PRIu64 ", %" PRIu64 "), %" PRIu32 " layers x %" PRIu32
         " experts\n",
         path, s->step_end - s->step_begin, s->step_begin, s->step_end, s->num_layers,
         s->num_experts);
  printf("busiest/mean: expert over the window; GPU (contiguous placement) over the window "
         "and per step (mean)\n");
  printf("%5s %8s", "layer", "expert");
  for (uint32_t k = 0; k < n_ep; k++)
    printf("   EP%-3" PRIu32 " win/step", s->ep[k]);
  printf(" %8s\n", "corr");
  for (uint32_t l = 0; l < s->num_layers; l++) {
    printf("%5" PRIu32 " %8.2f", l, s->expert_over_mean[l]);
    for (uint32_t k = 0; k < n_ep; k++)
      printf("   %6.2f/%-6.2f", s->gpu_over_mean[l * n_ep + k],
             s->gpu_over_mean_per_step[l * n_ep + k]);
    if (isnan(s->step_correlation[l]))
      printf(" %8s\n", "-");
    else
      printf(" %8.3f\n", s->step_correlation[l]);
  }
  printf("%5s %8.2f", "mean", s->mean_expert_over_mean);
  for (uint32_t k = 0; k < n_ep; k++)
    printf("   %6.2f/%-6.2f", s->mean_gpu_over_mean[k], s->mean_gpu_over_mean_per_step[k]);
  if (isnan(s->mean_step_correlation))
    printf(" %8s\n", "-");
  else
    printf(" %8.3f\n", s->mean_step_correlation);
}

static int trace_stats(int argc, char **argv) {
  int json = 0, c, rc = CLI_OK;
  uint32_t *ep = NULL, n_ep = 0;
  eplb_trace_stats_options_t so;
  eplb_trace_stats_options_default(&so);
  const cli_opt_t opts[] = {{"ep", CLI_ARG, .val = 'e'},
                            {"steps", CLI_RANGE, .field = &so.step_begin, .given = &so.step_end},
                            {"json", CLI_FLAG, .field = &json},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  optind = 1;
  while (rc == CLI_OK && (c = cli_getopt(argc, argv, "h", opts)) != -1) {
    if (c == 'e')
      free(ep), rc = cli_parse_u32_list("--ep", optarg, &ep, &n_ep) ? CLI_BADINPUT : CLI_OK;
    else
      rc = c == 'h' ? (fputs(trace_usage, stdout), -1) : CLI_BADINPUT;
  }
  if (rc == CLI_OK && optind + 1 != argc)
    rc = cli_usage_error("trace stats: expected one FILE");
  const char *path = argv[optind];
  eplb_trace_t *t = NULL;
  eplb_trace_stats_t *s = NULL;
  if (rc || (rc = open_trace(path, &t)))
    goto done;
  so.ep = ep, so.num_ep = ep ? n_ep : 0; /* without --ep: the defaults that fit */
  eplb_status_t st = eplb_trace_stats(t, &so, &s);
  if (st == EPLB_ENOMEM)
    rc = cli_out_of_memory("trace stats");
  else if (st) /* --ep or --steps out of range, or a damaged file */
    rc = cli_option_error(st, path);
  else if (json)
    rc = stats_print_json(path, s);
  else
    stats_print_text(path, s);
done:
  eplb_trace_stats_destroy(s);
  free(ep);
  eplb_trace_close(t);
  return rc == -1 ? CLI_OK : rc;
}

/* ---- convert / recover ---------------------------------------------------- */

static int parse_format(const char *s, eplb_trace_format_t *f) {
  if (eplb_trace_format_parse(s, f) == EPLB_OK)
    return 0;
  cli_usage_error("--from/--to: %s", eplb_error_detail());
  return -1;
}

static int parse_phase(const char *s, eplb_trace_phase_t *p) {
  if (eplb_trace_phase_parse(s, p) == EPLB_OK)
    return 0;
  cli_usage_error("--phase: expected prefill, decode, mixed or unknown, got '%s'", s);
  return -1;
}

static int trace_convert(int argc, char **argv) {
  eplb_trace_convert_options_t o;
  eplb_trace_convert_options_default(&o);
  eplb_trace_meta_t meta;
  eplb_trace_meta_default(&meta);
  const cli_opt_t opts[] = {{"from", CLI_ARG, .val = 'f'},
                            {"to", CLI_ARG, .val = 't'},
                            {"experts", CLI_U32, .field = &o.num_experts},
                            {"tokens-per-step", CLI_U32, .field = &o.tokens_per_step},
                            {"rows-per-step", CLI_U32, .field = &o.topk_rows_per_step},
                            {"model", CLI_ARG, .val = 'm'},
                            {"phase", CLI_ARG, .val = 'p'},
                            {"help", CLI_NOARG, .val = 'h'},
                            {NULL}};
  int have_meta = 0, c, bad = 0;
  optind = 1;
  while (!bad && (c = cli_getopt(argc, argv, "h", opts)) != -1) {
    switch (c) {
    case 'f': bad = parse_format(optarg, &o.from); break;
    case 't': bad = parse_format(optarg, &o.to); break;
    case 'm':
      snprintf(meta.model, sizeof meta.model, "%s", optarg);
      have_meta = 1;
      break;
    case 'p':
      bad = parse_phase(optarg, &meta.phase);
      have_meta = 1;
      break;
    case 'h': fputs(trace_usage, stdout); return CLI_OK;
    default: return CLI_BADINPUT;
    }
  }
  if (bad)
    return CLI_BADINPUT;
  if (optind + 2 != argc)
    return cli_usage_error("trace convert: expected IN OUT");
  if (have_meta)
    o.meta = &meta;
  if (cli_check_output("trace convert", argv[optind + 1], 0))
    return CLI_BADINPUT;
  eplb_status_t s = eplb_trace_convert(argv[optind], argv[optind + 1], &o);
  if (s != EPLB_OK) /* --tokens-per-step 0, or the files' */
    return cli_option_error(s, "trace convert");
  return CLI_OK;
}

static int trace_recover(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
    return fputs(trace_usage, stdout), CLI_OK;
  if (argc != 3)
    return cli_usage_error("trace recover: expected IN OUT");
  if (cli_check_output("trace recover", argv[2], 0))
    return CLI_BADINPUT;
  eplb_trace_recover_report_t rep;
  eplb_status_t s = eplb_trace_recover(argv[1], argv[2], &rep);
  if (s != EPLB_OK)
    return cli_status_error(s, "trace recover");
  fprintf(stderr,
          "eplb: recovered %" PRIu64 " steps (%" PRIu64 " chunks); skipped %" PRIu64
          " damaged chunks, %" PRIu64 " bytes\n",
          rep.steps_recovered, rep.chunks_ok, rep.chunks_bad, rep.bytes_skipped);
  return CLI_OK;
}

int cli_trace(int argc, char **argv) {
  if (argc < 2) {
    fputs(trace_usage, stderr);
    return CLI_BADINPUT;
  }
  const char *sub = argv[1];
  if (!strcmp(sub, "--help") || !strcmp(sub, "-h"))
    return fputs(trace_usage, stdout), CLI_OK;
  if (!strcmp(sub, "gen"))
    return trace_gen(argc - 1, argv + 1);
  if (!strcmp(sub, "info"))
    return trace_info(argc - 1, argv + 1);
  if (!strcmp(sub, "stats"))
    return trace_stats(argc - 1, argv + 1);
  if (!strcmp(sub, "convert"))
    return trace_convert(argc - 1, argv + 1);
  if (!strcmp(sub, "recover"))
    return trace_recover(argc - 1, argv + 1);
  return cli_usage_error("trace: unknown command '%s' (gen, info, stats, convert, recover)", sub);
}
