/* planner/generalise.c — plans that generalise (plan.h "Planning from a trace
 * window"): balanced's planning loads and shares are chosen by holding out
 * the window's last quarter, so that the plan is made for the traffic that
 * follows rather than fitted to the window. */
#include "planner/planner.h"

#include "eplb/split.h"

#include <math.h>
#include <string.h>

static const double POWERS[] = {1.0, 0.5, 0.25};
/* Scenario evaluations a layer's refinement may spend (scenario.c): a few
 * rounds in each fold, where it only has to rank the candidates (measured
 * on ESFT: the same choices as refining to the end, at a tenth of the
 * time), and enough to converge on ESFT-sized plans for the plan made,
 * bounded at 1,024 GPUs. */
#define FOLD_REFINE (UINT64_C(1) << 14)
#define FINAL_REFINE (UINT64_C(1) << 22)

/* loads^p of src into dst, each layer rescaled to its own total. */
static void flatten(const eplb_loads_t *src, double p, eplb_loads_t *dst) {
  uint32_t E = src->num_experts;
  for (uint32_t l = 0; l < src->num_layers; l++) {
    const double *w = src->values + (size_t)l * E;
    double *v = dst->values + (size_t)l * E, a = 0, b = 0;
    for (uint32_t e = 0; e < E; e++) {
      v[e] = p == 1.0 ? w[e] : pow(w[e], p);
      a += w[e], b += v[e];
    }
    for (uint32_t e = 0; b > 0 && e < E; e++)
      v[e] *= a / b;
  }
}

/* Scratch of the scoring: one layer's split. */
typedef struct scorer {
  eplb_split_t *split;
  const eplb__scenarios_t *scen; /* static serving: the window's steps, else NULL */
  double *w, *share, *gpu;       /* [E], [R], [G] */
  uint32_t *p2l;                 /* [R] */
} scorer_t;

/* Mean over the layers of steps [b, e) of balancedness (mean / max GPU load)
 * as the plan is served: the exact split of each step, or its own shares. */
static eplb_status_t score(scorer_t *sc, eplb_trace_t *trace, uint64_t b, uint64_t e,
                           const eplb_plan_t *plan, eplb_plan_serve_t serve, double *out) {
  uint32_t L = eplb_plan_num_layers(plan), E = eplb_plan_num_experts(plan);
  uint32_t G = eplb_plan_num_gpus(plan), R = eplb_plan_num_slots(plan);
  const uint32_t *spg = eplb_plan_slots_per_gpu(plan);
  double sum = 0;
  size_t n = 0;
  for (uint64_t t = b; t < e; t++) {
    eplb_trace_step_t ts;
    eplb_status_t st = eplb_trace_read_step(trace, t, &ts);
    if (st != EPLB_OK)
      return st;
    for (uint32_t l = 0; l < L; l++) {
      const int32_t *p2l = eplb_plan_phy2log(plan, l);
      double total = 0, max = 0;
      for (uint32_t x = 0; x < E; x++)
        total += sc->w[x] = ts.counts[(size_t)l * E + x];
      if (!(total > 0))
        continue;
      if (serve == EPLB_SERVE_SPLIT) {
        for (uint32_t r = 0; r < R; r++)
          sc->p2l[r] = (uint32_t)p2l[r];
        eplb_split_problem_t pb = {E, G, R, sc->p2l, spg};
        eplb_split_result_t res = {.share = sc->share, .gpu_load = sc->gpu};
        if ((st = eplb_split_solve(sc->split, &pb, sc->w, &res)) != EPLB_OK)
          return st;
        max = res.max_load;
      } else {
        const double *share = eplb_plan_share(plan, l);
        memset(sc->gpu, 0, G * sizeof *sc->gpu);
        for (uint32_t g = 0, r = 0; g < G; g++)
          for (uint32_t j = 0; j < spg[g]; j++, r++)
            sc->gpu[g] += share[r] * sc->w[p2l[r]];
        for (uint32_t g = 0; g < G; g++)
          max = sc->gpu[g] > max ? sc->gpu[g] : max;
      }
      sum += eplb__balancedness(total, G, max);
      n++;
    }
  }
  *out = n ? sum / (double)n : 1.0;
  return EPLB_OK;
}

/* The candidates: each power, and with static serving of the policy's own
 * shares, uniform shares too. */
typedef struct cand {
  double p;
  eplb_plan_shares_t shares;
  eplb_plan_policy_t policy; /* balanced, or deepseek's placement for static serving */
} cand_t;

/* Plans `part` (the window less the steps [sb, se)) with candidate k and
 * scores it on [sb, se); *out gets the score added. */
static eplb_status_t fold(eplb_trace_t *trace, uint64_t sb, uint64_t se,
                          const eplb_plan_options_t *o, const cand_t *k, scorer_t *sc,
                          const eplb_loads_t *part, eplb_loads_t *flat, double *out) {
  eplb_plan_options_t po = *o;
  po.shares = k->shares;
  po.policy = k->policy;
  eplb_plan_t *plan = NULL;
  double s = 0;
  flatten(part, k->p, flat);
  eplb_status_t st = eplb_plan_create(flat, &po, &plan);
  if (st == EPLB_OK && sc->scen)
    st = eplb__plan_refine_scenarios(plan, sc->scen, sb, se, FOLD_REFINE);
  if (st == EPLB_OK)
    st = score(sc, trace, sb, se, plan, o->serve, &s);
  eplb_plan_destroy(plan);
  *out += s;
  return st;
}

/* The four folds' planning loads, once for every candidate: the window's
 * sums less each quarter's [b + j q, ...). */
static eplb_status_t fold_loads(eplb_trace_t *trace, uint64_t b, uint64_t e, uint64_t q,
                                const eplb_loads_t *window, eplb_loads_t *part[4]) {
  size_t n = (size_t)window->num_layers * window->num_experts;
  eplb_status_t st = EPLB_OK;
  for (uint64_t j = 0; st == EPLB_OK && j < 4; j++) {
    st = eplb_loads_create(window->num_layers, window->num_experts, &part[j]);
    if (st == EPLB_OK)
      st = eplb_trace_window_sum(trace, b + j * q, j == 3 ? e : b + (j + 1) * q, part[j]->values);
    for (size_t i = 0; st == EPLB_OK && i < n; i++)
      part[j]->values[i] = fmax(window->values[i] - part[j]->values[i], 0.0);
  }
  return st;
}

/* Each candidate plans three quarters of the window and is scored on the
 * quarter left out, each quarter in turn (the mix moves both ways, and one
 * or two folds picked by noise), as it will be served; the best mean wins,
 * ties to the window as it is. */
static eplb_status_t choose(eplb_trace_t *trace, uint64_t b, uint64_t e,
                            const eplb_plan_options_t *o, const eplb_loads_t *window,
                            const eplb__scenarios_t *scen, cand_t *best) {
  const eplb_trace_meta_t *m = eplb_trace_meta(trace);
  uint64_t q = (e - b) / 4;
  eplb_loads_t *part[4] = {NULL, NULL, NULL, NULL}, *flat = NULL;
  scorer_t sc = {.scen = scen};
  uint32_t R = o->num_replicas, G = o->num_gpus, E = m->num_experts;
  eplb_status_t st = fold_loads(trace, b, e, q, window, part);
  if (st == EPLB_OK)
    st = eplb_loads_create(m->num_layers, E, &flat);
  if (st == EPLB_OK)
    st = eplb_split_create(NULL, &sc.split);
  sc.w = eplb__malloc_array(E, sizeof *sc.w);
  sc.share = eplb__malloc_array(R, sizeof *sc.share);
  sc.gpu = eplb__malloc_array(G, sizeof *sc.gpu);
  sc.p2l = eplb__malloc_array(R, sizeof *sc.p2l);
  if (st == EPLB_OK && (!sc.w || !sc.share || !sc.gpu || !sc.p2l))
    st = eplb__error(EPLB_ENOMEM, "planner", "window loads: %u slots", R);
  /* Static serving of the policy's own shares also tries uniform shares and
   * DeepSeek's placement (uniform shares by design; even slots only). */
  int uniform_too = o->serve == EPLB_SERVE_SHARES && o->shares == EPLB_SHARES_EXACT;
  int deepseek_too = uniform_too && !o->slots_per_gpu;
  size_t np = sizeof POWERS / sizeof *POWERS;
  double top = -1;
  for (size_t i = 0; st == EPLB_OK && i < np + (size_t)deepseek_too; i++)
    for (int u = 0; st == EPLB_OK && u <= (i < np && uniform_too); u++) {
      cand_t k = {i < np ? POWERS[i] : 1.0, u || i == np ? EPLB_SHARES_UNIFORM : o->shares,
                  i < np ? EPLB_POLICY_BALANCED : EPLB_POLICY_DEEPSEEK};
      double s = 0;
      for (uint64_t j = 0; st == EPLB_OK && j < 4; j++)
        st = fold(trace, b + j * q, j == 3 ? e : b + (j + 1) * q, o, &k, &sc, part[j], flat, &s);
      if (st == EPLB_OK && s > top + 1e-12)
        top = s, *best = k;
    }
  eplb_split_destroy(sc.split);
  void *p[] = {sc.w, sc.share, sc.gpu, sc.p2l};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++)
    eplb__free(p[i]);
  for (int j = 0; j < 4; j++)
    eplb_loads_destroy(part[j]);
  eplb_loads_destroy(flat);
  return st;
}

bool eplb__window_loads_apply(const eplb_plan_options_t *o, uint64_t b, uint64_t e) {
  return o->window_loads == EPLB_WINDOW_LOADS_CHOSEN && o->policy == EPLB_POLICY_BALANCED &&
         o->shares != EPLB_SHARES_ROBUST && e >= b + 4;
}

eplb_status_t eplb__plan_window_chosen(eplb_trace_t *trace, uint64_t b, uint64_t e,
                                       const eplb_plan_options_t *o, const eplb_loads_t *window,
                                       eplb_plan_t **out) {
  cand_t best = {1.0, o->shares, EPLB_POLICY_BALANCED};
  eplb_loads_t *flat = NULL;
  eplb__scenarios_t *scen = NULL;
  eplb_status_t st = EPLB_OK;
  /* Served by static shares, a placement is also judged step by step
   * (scenario.c); the split follows each step itself. */
  if (o->serve == EPLB_SERVE_SHARES)
    st = eplb__scenarios_read(trace, b, e, &scen);
  if (st == EPLB_OK)
    st = choose(trace, b, e, o, window, scen, &best);
  if (st == EPLB_OK)
    st = eplb_loads_create(window->num_layers, window->num_experts, &flat);
  if (st != EPLB_OK) {
    eplb_loads_destroy(flat);
    eplb__scenarios_destroy(scen);
    return st;
  }
  flatten(window, best.p, flat);
  eplb_plan_options_t po = *o;
  po.shares = best.shares;
  po.policy = best.policy;
  st = eplb_plan_create(flat, &po, out);
  eplb_loads_destroy(flat);
  if (st == EPLB_OK && scen)
    st = eplb__plan_refine_scenarios(*out, scen, 0, 0, FINAL_REFINE);
  eplb__scenarios_destroy(scen);
  /* The plan's metrics describe the window, not the loads it was shaped on. */
  if (st == EPLB_OK)
    st = eplb_plan_evaluate(*out, window);
  if (st != EPLB_OK) {
    eplb_plan_destroy(*out);
    *out = NULL;
  }
  if (st == EPLB_OK)
    eplb__log(EPLB_LOG_INFO, "planner",
              "window steps %llu:%llu: planned on loads^%g by %s with %s shares",
              (unsigned long long)b, (unsigned long long)e, best.p,
              eplb_plan_policy_str(best.policy), eplb_plan_shares_str(best.shares));
  return st;
}
