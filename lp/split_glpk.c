/* lp/split_glpk.c — the split LP as a GLPK model: the reference the exact
 * solver is tested against. Columns x_r (one per replica) and T; rows: each
 * expert's replicas sum to its load, each GPU's replicas minus T <= 0. The
 * bottleneck set is read from the dual: at a basic optimum the GPU duals are
 * 1/|S| on a set S and 0 elsewhere, and the experts with a positive dual are
 * those with every replica in S. */
#include "lp/lp.h"

#include <glpk.h>
#include <math.h>
#include <string.h>

typedef struct glpk_ctx {
  const eplb_split_problem_t *p;
  const double *loads;
  bool integer;
  int tm_lim;
  int *ia, *ja;
  double *ar;
  double *amount; /* [R] */
  double *dual;   /* [E + G] */
  double t_star;
} glpk_ctx_t;

static eplb_status_t glpk_body(void *arg) {
  glpk_ctx_t *c = arg;
  const eplb_split_problem_t *p = c->p;
  int E = (int)p->num_experts, G = (int)p->num_gpus, R = (int)p->num_slots;
  eplb_status_t st = EPLB_OK;
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_rows(lp, E + G);
  glp_add_cols(lp, R + 1);
  for (int e = 0; e < E; e++)
    glp_set_row_bnds(lp, e + 1, GLP_FX, c->loads[e], c->loads[e]);
  for (int g = 0; g < G; g++)
    glp_set_row_bnds(lp, E + 1 + g, GLP_UP, 0.0, 0.0);
  int nz = 0;
  for (int g = 0, r = 0; g < G; g++) {
    for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++) {
      glp_set_col_bnds(lp, r + 1, GLP_LO, 0.0, 0.0);
      if (c->integer)
        glp_set_col_kind(lp, r + 1, GLP_IV);
      nz++;
      c->ia[nz] = (int)p->phy2log[r] + 1;
      c->ja[nz] = r + 1;
      c->ar[nz] = 1.0;
      nz++;
      c->ia[nz] = E + 1 + g;
      c->ja[nz] = r + 1;
      c->ar[nz] = 1.0;
    }
    nz++;
    c->ia[nz] = E + 1 + g;
    c->ja[nz] = R + 1;
    c->ar[nz] = -1.0;
  }
  glp_set_col_bnds(lp, R + 1, GLP_LO, 0.0, 0.0);
  glp_set_obj_coef(lp, R + 1, 1.0);
  glp_load_matrix(lp, nz, c->ia, c->ja, c->ar);

  glp_smcp sm;
  glp_init_smcp(&sm);
  sm.msg_lev = GLP_MSG_OFF;
  sm.tm_lim = c->tm_lim;
  int ret = glp_simplex(lp, &sm);
  if (ret == GLP_ETMLIM) {
    st = eplb__error(EPLB_ETIMEOUT, "lp", "split_glpk: simplex reached the time limit (%d ms)",
                     c->tm_lim);
    goto done;
  }
  if (ret || glp_get_status(lp) != GLP_OPT) {
    st = eplb__error(EPLB_ESOLVER, "lp", "split_glpk: simplex returned %d, status %d", ret,
                     glp_get_status(lp));
    goto done;
  }
  c->t_star = glp_get_obj_val(lp);
  for (int i = 0; i < E + G; i++)
    c->dual[i] = glp_get_row_dual(lp, i + 1);
  if (c->integer) {
    /* Fixing T at ceil(T*) leaves a transportation polytope (totally
     * unimodular): the root LP is integral, no branching needed. */
    double cap = ceil(c->t_star - 1e-9 * c->t_star);
    glp_set_col_kind(lp, R + 1, GLP_IV);
    glp_set_col_bnds(lp, R + 1, GLP_FX, cap, cap);
    glp_iocp io;
    glp_init_iocp(&io);
    io.msg_lev = GLP_MSG_OFF;
    io.tm_lim = c->tm_lim;
    ret = glp_intopt(lp, &io);
    if (ret == GLP_ETMLIM || (ret == 0 && glp_mip_status(lp) != GLP_OPT)) {
      st = eplb__error(EPLB_ETIMEOUT, "lp", "split_glpk: MIP stopped before an optimum (%d ms)",
                       c->tm_lim);
      goto done;
    }
    if (ret) {
      st = eplb__error(EPLB_ESOLVER, "lp", "split_glpk: intopt returned %d", ret);
      goto done;
    }
    for (int r = 0; r < R; r++)
      c->amount[r] = round(glp_mip_col_val(lp, r + 1));
  } else {
    for (int r = 0; r < R; r++)
      c->amount[r] = glp_get_col_prim(lp, r + 1);
  }
done:
  glp_delete_prob(lp);
  return st;
}

/* Shares, loads and the dual's bottleneck set from the raw amounts. */
static void finish(const eplb_split_problem_t *p, const double *loads, glpk_ctx_t *c, double *sum,
                   uint8_t *set, uint8_t *gmark, eplb_split_result_t *out) {
  uint32_t E = p->num_experts, G = p->num_gpus, R = p->num_slots;
  memset(sum, 0, (size_t)E * sizeof *sum);
  for (uint32_t r = 0; r < R; r++) {
    if (!(c->amount[r] > 0))
      c->amount[r] = 0.0;
    sum[p->phy2log[r]] += c->amount[r];
  }
  for (uint32_t g = 0; g < G; g++)
    out->gpu_load[g] = 0.0;
  for (uint32_t g = 0, r = 0; g < G; g++)
    for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++) {
      uint32_t e = p->phy2log[r];
      double share = sum[e] > 0 ? c->amount[r] / sum[e] : -1.0;
      out->share[r] = share;
    }
  /* Experts with nothing routed (zero load) get uniform shares. */
  memset(sum, 0, (size_t)E * sizeof *sum);
  for (uint32_t r = 0; r < R; r++)
    if (out->share[r] < 0)
      sum[p->phy2log[r]] += 1.0;
  for (uint32_t g = 0, r = 0; g < G; g++)
    for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++) {
      uint32_t e = p->phy2log[r];
      if (out->share[r] < 0)
        out->share[r] = 1.0 / sum[e];
      double x = c->integer ? c->amount[r] : out->share[r] * loads[e];
      if (out->amount)
        out->amount[r] = x;
      out->gpu_load[g] += x;
    }
  out->max_load = 0.0;
  for (uint32_t g = 0; g < G; g++)
    if (out->gpu_load[g] > out->max_load)
      out->max_load = out->gpu_load[g];

  uint32_t ns = 0;
  for (uint32_t g = 0; g < G; g++)
    ns += fabs(c->dual[E + g]) > 1e-9;
  for (uint32_t e = 0; e < E; e++)
    set[e] = ns && c->dual[e] > 0.5 / ns;
  double t = c->t_star;
  eplb__split_certificate(p, loads, set, gmark, out);
  if (!(fabs(out->t_star - t) <= 1e-9 * fmax(fabs(t), 1e-300)) || t <= 0) {
    memset(set, 0, E);
    eplb__split_certificate(p, loads, set, gmark, out);
  }
  out->t_star = t;
}

eplb_status_t eplb_split_solve_glpk(eplb_split_t *split, const eplb_split_problem_t *p,
                                    const double *loads, eplb_split_result_t *out) {
  if (!split)
    return eplb__error(EPLB_EINVAL, "lp", "split_solve_glpk: handle is NULL");
  const eplb_split_options_t *o = eplb__split_options(split);
  glpk_ctx_t c = {.p = p, .loads = loads, .integer = o->mode == EPLB_SPLIT_INTEGER};
  uint32_t *count = NULL;
  double *sum = NULL;
  uint8_t *set = NULL, *gmark = NULL;
  eplb_status_t st = eplb__split_check(p, loads, out, c.integer);
  if (st)
    return st;
  size_t E = p->num_experts, G = p->num_gpus, R = p->num_slots, nz = 2 * R + G + 1;
  c.tm_lim = eplb__glpk_time_limit_ms(o->glpk_time_limit_s);
  count = eplb__malloc_array(E, sizeof *count);
  sum = eplb__malloc_array(E, sizeof *sum);
  set = eplb__malloc(E);
  gmark = eplb__malloc(G);
  c.ia = eplb__malloc_array(nz, sizeof *c.ia);
  c.ja = eplb__malloc_array(nz, sizeof *c.ja);
  c.ar = eplb__malloc_array(nz, sizeof *c.ar);
  c.amount = eplb__malloc_array(R, sizeof *c.amount);
  c.dual = eplb__malloc_array(E + G, sizeof *c.dual);
  if (!count || !sum || !set || !gmark || !c.ia || !c.ja || !c.ar || !c.amount || !c.dual) {
    st = eplb__error(EPLB_ENOMEM, "lp", "split_glpk: out of memory for %zu slots", R);
    goto done;
  }
  if ((st = eplb__split_count_replicas(p, count)))
    goto done;
  if ((st = eplb__glpk_call("split_glpk", glpk_body, &c)))
    goto done;
  out->iterations = 1;
  finish(p, loads, &c, sum, set, gmark, out);
done:
  eplb__free(count);
  eplb__free(sum);
  eplb__free(set);
  eplb__free(gmark);
  eplb__free(c.ia);
  eplb__free(c.ja);
  eplb__free(c.ar);
  eplb__free(c.amount);
  eplb__free(c.dual);
  return st;
}
