/* lp/split_layers.c — eplb_split_solve_layers: every layer of a model in
 * one call, on the worker pool (core/pool.c) when options.threads asks for
 * more than one thread. Each extra worker solves on a child handle of its
 * own (workspace, built graph), all of them reading and updating the
 * calling handle's per-layer warm-start states, so a layer's result cannot
 * depend on which worker solved it. */
#include "lp/lp.h"

typedef struct {
  eplb_split_t *s;
  const eplb_split_problem_t *problems;
  const double *loads;
  const size_t *offset; /* [L] layer l's loads start at loads + offset[l] */
  eplb_split_result_t *results;
} job_t;

static eplb_status_t solve_item(void *arg, uint32_t worker, uint32_t l) {
  const job_t *j = arg;
  eplb_split_t *h = worker ? j->s->kids[worker - 1] : j->s;
  eplb_status_t st =
      eplb__split_solve_one(h, &j->problems[l], j->loads + j->offset[l], &j->results[l], l);
  return st ? eplb__error_wrap(st, "lp", "layer %u", l) : EPLB_OK;
}

/* The handles of workers 1 .. n-1, lent the warm-start array (grown first
 * to every layer, so that no worker reallocates it; each layer's own state
 * is touched by the one worker solving it). */
static eplb_status_t lend(eplb_split_t *s, uint32_t n, uint32_t L) {
  if (s->num_kids < n - 1) {
    eplb_split_t **k = eplb__realloc_array(s->kids, n - 1, sizeof *k);
    if (!k)
      return eplb__error(EPLB_ENOMEM, "lp", "split_solve_layers: out of memory");
    s->kids = k;
    eplb_split_options_t o = s->opt;
    o.threads = 1;
    for (; s->num_kids < n - 1; s->num_kids++)
      if (eplb_split_create(&o, &s->kids[s->num_kids]))
        return eplb__error(EPLB_ENOMEM, "lp", "split_solve_layers: out of memory");
  }
  eplb__warm_state_t *w;
  if (s->opt.warm_start && eplb__split_warm_slot(s, L - 1, 0, &w))
    return eplb__error(EPLB_ENOMEM, "lp", "split: out of memory for warm-start state");
  for (uint32_t i = 0; i + 1 < n; i++)
    s->kids[i]->warm = s->warm, s->kids[i]->num_warm = s->num_warm;
  return EPLB_OK;
}

eplb_status_t eplb_split_solve_layers(eplb_split_t *s, uint32_t num_layers,
                                      const eplb_split_problem_t *problems, const double *loads,
                                      eplb_split_result_t *results) {
  if (!s || (num_layers && (!problems || !loads || !results)))
    return eplb__error(EPLB_EINVAL, "lp", "split_solve_layers: NULL %s",
                       !s          ? "handle"
                       : !problems ? "problems"
                       : !loads    ? "loads"
                                   : "results");
  if (!num_layers)
    return EPLB_OK;
  uint32_t n = eplb__pool_workers(s->opt.threads, num_layers, EPLB_SPLIT_MAX_THREADS, 0);
  size_t *offset = eplb__malloc_array(num_layers, sizeof *offset);
  if (!offset)
    return eplb__error(EPLB_ENOMEM, "lp", "split_solve_layers: out of memory");
  size_t o = 0;
  for (uint32_t l = 0; l < num_layers; o += problems[l++].num_experts)
    offset[l] = o;
  job_t j = {s, problems, loads, offset, results};
  eplb_status_t st = EPLB_OK;
  /* Without memory for the other workers' handles one thread does it all
   * (the same results). */
  if (n > 1 && lend(s, n, num_layers) != EPLB_OK)
    n = 1;
  if (n > 1)
    st = eplb__pool_run(n, num_layers, solve_item, &j, NULL, NULL);
  for (uint32_t l = 0; n <= 1 && !st && l < num_layers; l++)
    st = solve_item(&j, 0, l);
  for (uint32_t i = 0; i < s->num_kids; i++) /* given back */
    s->kids[i]->warm = NULL, s->kids[i]->num_warm = 0;
  eplb__free(offset);
  return st;
}
