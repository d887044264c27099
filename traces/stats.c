/* traces/stats.c — what a trace says about imbalance and drift
 * (eplb_trace_stats, `eplb trace stats`). */
#include "traces/traces.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static const uint32_t default_ep[] = {8, 16, 32};

static void trace_stats_options_defaults(eplb_trace_stats_options_t *opts) {
  if (!opts)
    return;
  memset(opts, 0, sizeof *opts);
  opts->step_end = UINT64_MAX;
}

eplb_status_t eplb_trace_stats_options_init(eplb_trace_stats_options_t *opts, size_t size) {
  eplb_trace_stats_options_t d;
  trace_stats_options_defaults(&d);
  return eplb__opts_init(opts, size, &d, sizeof d, "eplb_trace_stats_options_t");
}

void eplb_trace_stats_destroy(eplb_trace_stats_t *s) {
  if (!s)
    return;
  eplb__free(s->ep);
  eplb__free(s->expert_over_mean);
  eplb__free(s->gpu_over_mean);
  eplb__free(s->gpu_over_mean_per_step);
  eplb__free(s->step_correlation);
  eplb__free(s->mean_gpu_over_mean);
  eplb__free(s->mean_gpu_over_mean_per_step);
  eplb__free(s);
}

/* Busiest GPU / mean GPU when experts are laid out contiguously over `ep`
 * GPUs (expert e on GPU e * ep / E), the layout of an unbalanced deployment. */
static double contiguous_imbalance(const double *w, uint32_t E, uint32_t ep, double *gpu) {
  double total = 0, max = 0;
  memset(gpu, 0, sizeof *gpu * ep);
  for (uint32_t e = 0; e < E; e++)
    gpu[(uint64_t)e * ep / E] += w[e];
  for (uint32_t g = 0; g < ep; g++) {
    total += gpu[g];
    if (gpu[g] > max)
      max = gpu[g];
  }
  return total > 0 ? max / (total / ep) : 1.0;
}

static double busiest_expert_ratio(const double *w, uint32_t E) {
  double total = 0, max = 0;
  for (uint32_t e = 0; e < E; e++) {
    total += w[e];
    if (w[e] > max)
      max = w[e];
  }
  return total > 0 ? max / (total / E) : 1.0;
}

static double pearson(const uint32_t *a, const uint32_t *b, uint32_t n) {
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
  for (uint32_t i = 0; i < n; i++) {
    sa += a[i];
    sb += b[i];
    saa += (double)a[i] * a[i];
    sbb += (double)b[i] * b[i];
    sab += (double)a[i] * b[i];
  }
  double cov = sab - sa * sb / n, va = saa - sa * sa / n, vb = sbb - sb * sb / n;
  return va > 0 && vb > 0 ? cov / sqrt(va * vb) : NAN;
}

/* Checks the options against the trace; fills s's shape, steps and EP list. */
static eplb_status_t stats_setup(eplb_trace_t *t, const eplb_trace_stats_options_t *o,
                                 eplb_trace_stats_t *s) {
  const eplb_trace_meta_t *m = eplb_trace_meta(t);
  const uint32_t *ep = o->num_ep ? o->ep : default_ep;
  uint32_t n_ep = o->num_ep ? o->num_ep : 3;
  /* The defaults that fit the trace (Mixtral-8x7B has 8 experts), or E
   * itself below 8. */
  uint32_t fit[3];
  if (!o->num_ep) {
    n_ep = 0;
    for (uint32_t i = 0; i < 3; i++)
      if (default_ep[i] <= m->num_experts)
        fit[n_ep++] = default_ep[i];
    if (!n_ep)
      fit[n_ep++] = m->num_experts;
    ep = fit;
  }
  if (!ep)
    return eplb__error(EPLB_EINVAL, "traces", "trace stats: NULL ep with num_ep %" PRIu32,
                       o->num_ep);
  s->num_layers = m->num_layers;
  s->num_experts = m->num_experts;
  for (uint32_t i = 0; i < n_ep; i++)
    if (ep[i] == 0 || ep[i] > m->num_experts)
      return eplb__error(EPLB_ERANGE, "traces",
                         "ep %" PRIu32 ": must be within 1..%" PRIu32 " (experts)", ep[i],
                         m->num_experts);
  uint64_t steps = eplb_trace_num_steps(t);
  s->step_begin = o->step_begin;
  s->step_end = o->step_end > steps ? steps : o->step_end;
  if (s->step_begin >= s->step_end)
    return eplb__error(EPLB_ERANGE, "traces",
                       "step_begin %" PRIu64 ": selects no step (the range ends at %" PRIu64
                       ", the trace has %" PRIu64 " steps)",
                       o->step_begin, s->step_end, steps);
  s->num_ep = n_ep;
  if (!(s->ep = eplb__malloc(sizeof *s->ep * n_ep)))
    return eplb__error(EPLB_ENOMEM, "traces", "trace stats: out of memory");
  memcpy(s->ep, ep, sizeof *s->ep * n_ep);
  return EPLB_OK;
}

static eplb_status_t stats_alloc(eplb_trace_stats_t *s) {
  size_t L = s->num_layers, n_ep = s->num_ep;
  s->expert_over_mean = eplb__calloc(L, sizeof(double));
  s->gpu_over_mean = eplb__calloc(L * n_ep, sizeof(double));
  s->gpu_over_mean_per_step = eplb__calloc(L * n_ep, sizeof(double));
  s->step_correlation = eplb__calloc(L, sizeof(double));
  s->mean_gpu_over_mean = eplb__calloc(n_ep, sizeof(double));
  s->mean_gpu_over_mean_per_step = eplb__calloc(n_ep, sizeof(double));
  if (!s->expert_over_mean || !s->gpu_over_mean || !s->gpu_over_mean_per_step ||
      !s->step_correlation || !s->mean_gpu_over_mean || !s->mean_gpu_over_mean_per_step)
    return eplb__error(EPLB_ENOMEM, "traces", "trace stats: out of memory");
  return EPLB_OK;
}

/* The pass over the steps: window sums, the per-step GPU imbalance summed
 * into gpu_over_mean_per_step, correlations summed into step_correlation
 * (corr_n[l] of them). */
static eplb_status_t stats_pass(eplb_trace_t *t, eplb_trace_stats_t *s, double *window,
                                uint32_t *prev, uint64_t *corr_n) {
  uint32_t L = s->num_layers, E = s->num_experts, n_ep = s->num_ep, max_ep = 0;
  for (uint32_t k = 0; k < n_ep; k++)
    max_ep = s->ep[k] > max_ep ? s->ep[k] : max_ep;
  double *gpu = eplb__calloc(max_ep, sizeof *gpu), *stepw = eplb__calloc(E, sizeof *stepw);
  eplb_status_t st = gpu && stepw ? EPLB_OK : EPLB_ENOMEM;
  if (st)
    eplb__error(st, "traces", "trace stats: out of memory");
  for (uint64_t i = s->step_begin; !st && i < s->step_end; i++) {
    eplb_trace_step_t step;
    if ((st = eplb_trace_read_step(t, i, &step)))
      break;
    for (uint32_t l = 0; l < L; l++) {
      const uint32_t *row = step.counts + (size_t)l * E;
      for (uint32_t e = 0; e < E; e++) {
        window[(size_t)l * E + e] += row[e];
        stepw[e] = row[e];
      }
      for (uint32_t k = 0; k < n_ep; k++)
        s->gpu_over_mean_per_step[(size_t)l * n_ep + k] +=
            contiguous_imbalance(stepw, E, s->ep[k], gpu);
      if (i > s->step_begin) {
        double r = pearson(prev + (size_t)l * E, row, E);
        if (!isnan(r)) {
          s->step_correlation[l] += r;
          corr_n[l]++;
        }
      }
      memcpy(prev + (size_t)l * E, row, sizeof *row * E);
    }
  }
  /* Over the window, and the means of the per-step figures. */
  for (uint32_t l = 0; !st && l < L; l++)
    for (uint32_t k = 0; k < n_ep; k++)
      s->gpu_over_mean[(size_t)l * n_ep + k] =
          contiguous_imbalance(window + (size_t)l * E, E, s->ep[k], gpu);
  eplb__free(gpu);
  eplb__free(stepw);
  return st;
}

/* Per-layer ratios and correlations, then their means over layers (in the
 * order `eplb trace stats` has always summed them). */
static void stats_finish(eplb_trace_stats_t *s, const double *window, const uint64_t *corr_n) {
  uint32_t L = s->num_layers, E = s->num_experts, n_ep = s->num_ep;
  double nsteps = (double)(s->step_end - s->step_begin), mean_corr = 0;
  uint64_t corr_layers = 0;
  s->mean_expert_over_mean = 0;
  for (uint32_t l = 0; l < L; l++) {
    s->expert_over_mean[l] = busiest_expert_ratio(window + (size_t)l * E, E);
    s->mean_expert_over_mean += s->expert_over_mean[l] / L;
    for (uint32_t k = 0; k < n_ep; k++)
      s->gpu_over_mean_per_step[(size_t)l * n_ep + k] /= nsteps;
    if (corr_n[l]) {
      s->step_correlation[l] /= (double)corr_n[l];
      mean_corr += s->step_correlation[l];
      corr_layers++;
    } else {
      s->step_correlation[l] = NAN;
    }
  }
  s->mean_step_correlation = corr_layers ? mean_corr / (double)corr_layers : NAN;
  for (uint32_t k = 0; k < n_ep; k++) {
    double g = 0, gs = 0;
    for (uint32_t l = 0; l < L; l++) {
      g += s->gpu_over_mean[(size_t)l * n_ep + k] / L;
      gs += s->gpu_over_mean_per_step[(size_t)l * n_ep + k] / L;
    }
    s->mean_gpu_over_mean[k] = g;
    s->mean_gpu_over_mean_per_step[k] = gs;
  }
}

eplb_status_t eplb_trace_stats(eplb_trace_t *trace, const eplb_trace_stats_options_t *opts,
                               eplb_trace_stats_t **out) {
  if (out)
    *out = NULL;
  if (!trace || !out)
    return eplb__error(EPLB_EINVAL, "traces", "trace stats: NULL argument");
  eplb_trace_stats_options_t def;
  eplb_status_t take = EPLB__OPTS_TAKE(def, opts, eplb_trace_stats_options_default,
                                       "eplb_trace_stats_options_t", "traces");
  if (take != EPLB_OK)
    return take;
  opts = &def;
  eplb_trace_stats_t *s = eplb__calloc(1, sizeof *s);
  if (!s)
    return eplb__error(EPLB_ENOMEM, "traces", "trace stats: out of memory");
  double *window = NULL;
  uint32_t *prev = NULL;
  uint64_t *corr_n = NULL;
  eplb_status_t st = stats_setup(trace, opts, s);
  if (!st)
    st = stats_alloc(s);
  if (!st) {
    size_t LE = (size_t)s->num_layers * s->num_experts;
    window = eplb__calloc(LE, sizeof *window);
    prev = eplb__calloc(LE, sizeof *prev);
    corr_n = eplb__calloc(s->num_layers, sizeof *corr_n);
    if (!window || !prev || !corr_n)
      st = eplb__error(EPLB_ENOMEM, "traces", "trace stats: out of memory");
  }
  if (!st)
    st = stats_pass(trace, s, window, prev, corr_n);
  if (!st)
    stats_finish(s, window, corr_n);
  eplb__free(window);
  eplb__free(prev);
  eplb__free(corr_n);
  if (st) {
    eplb_trace_stats_destroy(s);
    return st;
  }
  *out = s;
  return EPLB_OK;
}
