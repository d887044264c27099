/* lp/split_robust.c — static shares that hedge over many steps (see split.h
 * "robust static shares"). The LP is the split LP repeated per step with
 * one share vector shared by every step. Loads are divided by each step's
 * mean GPU load, so every T column is a 1/balancedness near 1 and the
 * objective is a plain weighted sum: well scaled whatever the token counts.
 * Only replicated experts with load get columns; every other slot is a
 * constant on its GPU's rows, and a GPU without a column only bounds T from
 * below. */
#include "lp/lp.h"

#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <string.h>

typedef struct robust_ctx {
  uint32_t nvar, nexp, nstep, ngrow; /* x columns, equality rows, steps, GPU rows per step */
  const uint32_t *col_expert_row;    /* [nvar] equality row of each x column */
  const uint32_t *gfirst, *gcols;    /* columns of each GPU row: gcols[gfirst[h] .. gfirst[h+1]) */
  const double *col_w;               /* [nstep][nvar] normalised load of the column's expert */
  const double *cst;                 /* [nstep][ngrow] normalised constant load */
  const double *tlo;                 /* [nstep] lower bound of T'_s */
  const double *coef;                /* [nstep] objective weights */
  uint8_t *in_lp;                    /* [nstep][ngrow] 1 once the GPU row is in the LP */
  int tm_lim;
  int *ia, *ja; /* >= nvar + 2 entries each */
  double *ar;
  double *x; /* [nvar] start (uniform shares) on entry, the optimum on return */
} robust_ctx_t;

static double row_load(const robust_ctx_t *c, uint32_t k, uint32_t h) {
  double l = c->cst[(size_t)k * c->ngrow + h];
  for (uint32_t q = c->gfirst[h]; q < c->gfirst[h + 1]; q++)
    l += c->col_w[(size_t)k * c->nvar + c->gcols[q]] * c->x[c->gcols[q]];
  return l;
}

static void add_row(robust_ctx_t *c, glp_prob *lp, uint32_t k, uint32_t h) {
  int i = glp_add_rows(lp, 1), len = 0;
  glp_set_row_bnds(lp, i, GLP_UP, 0.0, -c->cst[(size_t)k * c->ngrow + h]);
  for (uint32_t q = c->gfirst[h]; q < c->gfirst[h + 1]; q++) {
    double a = c->col_w[(size_t)k * c->nvar + c->gcols[q]];
    if (a != 0) {
      c->ia[++len] = (int)c->gcols[q] + 1;
      c->ar[len] = a;
    }
  }
  c->ia[++len] = (int)(c->nvar + k) + 1;
  c->ar[len] = -1.0;
  glp_set_mat_row(lp, i, len, c->ia, c->ar);
  c->in_lp[(size_t)k * c->ngrow + h] = 1;
}

/* Most GPU rows never bind (only the busiest GPUs of a step do), so rows
 * are generated lazily: start with each step's busiest GPU under the start
 * shares, solve, add every violated row, re-solve from the previous basis
 * (new rows enter basic, so it stays dual feasible) until none is violated.
 * The result is the optimum of the full LP. */
static eplb_status_t robust_body(void *arg) {
  robust_ctx_t *c = arg;
  uint32_t nv = c->nvar, ns = c->nstep, ng = c->ngrow;
  eplb_status_t st = EPLB_OK;
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_rows(lp, (int)c->nexp);
  glp_add_cols(lp, (int)(nv + ns));
  for (uint32_t i = 0; i < c->nexp; i++)
    glp_set_row_bnds(lp, (int)i + 1, GLP_FX, 1.0, 1.0);
  for (uint32_t j = 0; j < nv; j++) {
    glp_set_col_bnds(lp, (int)j + 1, GLP_DB, 0.0, 1.0);
    c->ia[j + 1] = (int)c->col_expert_row[j] + 1;
    c->ja[j + 1] = (int)j + 1;
    c->ar[j + 1] = 1.0;
  }
  glp_load_matrix(lp, (int)nv, c->ia, c->ja, c->ar);
  for (uint32_t k = 0; k < ns; k++) {
    glp_set_col_bnds(lp, (int)(nv + k) + 1, GLP_LO, c->tlo[k], 0.0);
    glp_set_obj_coef(lp, (int)(nv + k) + 1, c->coef[k]);
    uint32_t best = 0;
    double bl = -1;
    for (uint32_t h = 0; h < ng; h++) {
      double l = row_load(c, k, h);
      if (l > bl) {
        bl = l;
        best = h;
      }
    }
    add_row(c, lp, k, best);
  }
  glp_smcp sm;
  glp_init_smcp(&sm);
  sm.msg_lev = GLP_MSG_OFF;
  sm.tm_lim = c->tm_lim;
  sm.meth = GLP_DUALP;
  glp_std_basis(lp);
  for (;;) {
    int ret = glp_simplex(lp, &sm);
    if (ret == GLP_ETMLIM) {
      st = eplb__error(EPLB_ETIMEOUT, "lp", "split_robust: simplex reached the time limit (%d ms)",
                       c->tm_lim);
      goto done;
    }
    if (ret || glp_get_status(lp) != GLP_OPT) {
      st = eplb__error(EPLB_ESOLVER, "lp", "split_robust: simplex returned %d, status %d", ret,
                       glp_get_status(lp));
      goto done;
    }
    for (uint32_t j = 0; j < nv; j++)
      c->x[j] = glp_get_col_prim(lp, (int)j + 1);
    uint32_t added = 0;
    for (uint32_t k = 0; k < ns; k++) {
      double t = glp_get_col_prim(lp, (int)(nv + k) + 1), tol = 1e-9 * (t > 1 ? t : 1);
      for (uint32_t h = 0; h < ng; h++)
        if (!c->in_lp[(size_t)k * ng + h] && row_load(c, k, h) > t + tol) {
          add_row(c, lp, k, h);
          added++;
        }
    }
    if (!added)
      break;
  }
done:
  glp_delete_prob(lp);
  return st;
}

/* Checks what eplb__split_check does not: the steps and their weights. */
static eplb_status_t check_steps(const eplb_split_problem_t *p, const double *w, const double *v,
                                 uint32_t S) {
  for (uint32_t s = 0; s < S; s++) {
    if (v && (!(v[s] >= 0) || !isfinite(v[s])))
      return eplb__error(EPLB_EINVAL, "lp",
                         "split_robust: step_weights[%u] = %g: must be finite and >= 0", s, v[s]);
    for (uint32_t e = 0; e < p->num_experts; e++) {
      double x = w[(size_t)s * p->num_experts + e];
      if (!(x >= 0) || !isfinite(x))
        return eplb__error(EPLB_EINVAL, "lp",
                           "split_robust: step %u expert %u: load %g must be finite and >= 0", s, e,
                           x);
    }
  }
  return EPLB_OK;
}

/* Fills the result's arrays and scalars from the shares. */
static void finish(const eplb_split_problem_t *p, const double *w, uint32_t S, const uint8_t *used,
                   double *mean, double *gl, eplb_split_result_t *out) {
  uint32_t E = p->num_experts, G = p->num_gpus;
  memset(mean, 0, (size_t)E * sizeof *mean);
  for (uint32_t s = 0; s < S; s++)
    for (uint32_t e = 0; e < E; e++)
      mean[e] += w[(size_t)s * E + e];
  for (uint32_t e = 0; e < E; e++)
    mean[e] /= S;
  out->max_load = 0;
  for (uint32_t g = 0, r = 0; g < G; g++) {
    double l = 0;
    for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++) {
      double a = out->share[r] * mean[p->phy2log[r]];
      if (out->amount)
        out->amount[r] = a;
      l += a;
    }
    out->gpu_load[g] = l;
    out->max_load = l > out->max_load ? l : out->max_load;
  }
  double tsum = 0;
  uint32_t nused = 0;
  for (uint32_t s = 0; s < S; s++) {
    if (!used[s])
      continue;
    const double *ws = w + (size_t)s * E;
    double t = 0;
    memset(gl, 0, (size_t)G * sizeof *gl);
    for (uint32_t g = 0, r = 0; g < G; g++)
      for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++)
        gl[g] += out->share[r] * ws[p->phy2log[r]];
    for (uint32_t g = 0; g < G; g++)
      t = gl[g] > t ? gl[g] : t;
    tsum += t;
    nused++;
  }
  out->t_star = nused ? tsum / nused : 0.0;
  out->num_bottleneck_experts = 0;
  out->num_bottleneck_gpus = 0;
  if (out->bottleneck_experts)
    memset(out->bottleneck_experts, 0, E);
  if (out->bottleneck_gpus)
    memset(out->bottleneck_gpus, 0, G);
}

/* The layer's index: which experts, GPUs and slots the LP sees, and which
 * steps count. */
typedef struct robust_index {
  const uint32_t *count; /* [E] replicas */
  const uint32_t *erow;  /* [E] equality row of an expert (UINT32_MAX: fixed) */
  const uint32_t *grow;  /* [G] GPU row of a GPU (UINT32_MAX: none) */
  const uint32_t *rcol;  /* [R] x column of a slot (UINT32_MAX: fixed) */
  const uint32_t *sidx;  /* [nstep] step of a counted step */
  const double *mstep;   /* [S] mean GPU load of each step */
  double *gl;            /* [G] scratch */
  double *msum;          /* [E] scratch */
} robust_index_t;

/* Builds the LP's per-step data, solves it (GLPK) and writes the shares of
 * the LP's slots (the others keep the fixed ones already in out->share). */
static eplb_status_t robust_lp(robust_ctx_t *c, const eplb_split_problem_t *p, const double *w,
                               const double *v, const robust_index_t *ix,
                               eplb_split_result_t *out) {
  uint32_t E = p->num_experts, G = p->num_gpus, R = p->num_slots;
  size_t nv = c->nvar, ns = c->nstep, ng = c->ngrow;
  /* GLPK counts rows, columns and non-zeros in int. */
  size_t nz = nv + ns + 2; /* the equality rows, then one GPU row at a time */
  if (ns * ng + c->nexp >= (size_t)INT_MAX / 2 || nz >= (size_t)INT_MAX / 2)
    return eplb__error(EPLB_ERANGE, "lp",
                       "split_robust: %zu steps x %zu GPUs x %zu columns: LP too large", ns, ng,
                       nv);
  eplb_status_t st = EPLB_OK;
  const uint32_t *rcol = ix->rcol, *grow = ix->grow;
  double *gl = ix->gl, *msum = ix->msum;
  uint32_t *cexp = eplb__malloc_array(nv, sizeof *cexp);
  uint32_t *cgrow = eplb__malloc_array(nv, sizeof *cgrow);
  uint32_t *gfirst = eplb__calloc(ng + 1, sizeof *gfirst);
  uint32_t *gcols = eplb__malloc_array(nv, sizeof *gcols);
  uint8_t *in_lp = eplb__calloc(ns * ng, 1);
  double *colw = eplb__calloc(ns * nv, sizeof *colw);
  double *cst = eplb__calloc(ns * ng, sizeof *cst);
  double *tlo = eplb__calloc(ns, sizeof *tlo);
  double *coef = eplb__malloc_array(ns, sizeof *coef);
  c->ia = eplb__malloc_array(nz + 1, sizeof *c->ia);
  c->ja = eplb__malloc_array(nz + 1, sizeof *c->ja);
  c->ar = eplb__malloc_array(nz + 1, sizeof *c->ar);
  c->x = eplb__malloc_array(nv, sizeof *c->x);
  if (!cexp || !cgrow || !gfirst || !gcols || !in_lp || !colw || !cst || !tlo || !coef || !c->ia ||
      !c->ja || !c->ar || !c->x) {
    st = eplb__error(EPLB_ENOMEM, "lp", "split_robust: out of memory for %zu columns", nv);
    goto done;
  }
  for (uint32_t k = 0; k < c->nstep; k++) {
    uint32_t s = ix->sidx[k];
    const double *ws = w + (size_t)s * E;
    double inv = 1.0 / ix->mstep[s];
    coef[k] = v ? v[s] : 1.0;
    memset(gl, 0, (size_t)G * sizeof *gl);
    for (uint32_t g = 0, r = 0; g < G; g++)
      for (uint32_t q = 0; q < p->slots_per_gpu[g]; q++, r++) {
        double a = ws[p->phy2log[r]] * inv;
        if (rcol[r] == UINT32_MAX)
          gl[g] += out->share[r] * a;
        else
          colw[(size_t)k * nv + rcol[r]] = a;
      }
    for (uint32_t g = 0; g < G; g++) {
      if (grow[g] != UINT32_MAX)
        cst[(size_t)k * ng + grow[g]] = gl[g];
      else if (gl[g] > tlo[k])
        tlo[k] = gl[g];
    }
  }
  for (uint32_t g = 0, r = 0; g < G; g++)
    for (uint32_t q = 0; q < p->slots_per_gpu[g]; q++, r++)
      if (rcol[r] != UINT32_MAX) {
        cexp[rcol[r]] = ix->erow[p->phy2log[r]];
        cgrow[rcol[r]] = grow[g];
      }
  /* Columns grouped by GPU row (a CSR by counting), then the uniform start. */
  for (uint32_t j = 0; j < c->nvar; j++)
    gfirst[cgrow[j] + 1]++;
  for (size_t h = 0; h < ng; h++)
    gfirst[h + 1] += gfirst[h];
  for (uint32_t j = 0; j < c->nvar; j++)
    gcols[gfirst[cgrow[j]]++] = j;
  for (size_t h = ng; h > 0; h--)
    gfirst[h] = gfirst[h - 1];
  gfirst[0] = 0;
  for (uint32_t r = 0; r < R; r++)
    if (rcol[r] != UINT32_MAX)
      c->x[rcol[r]] = 1.0 / ix->count[p->phy2log[r]];
  c->col_expert_row = cexp;
  c->gfirst = gfirst;
  c->gcols = gcols;
  c->in_lp = in_lp;
  c->col_w = colw;
  c->cst = cst;
  c->tlo = tlo;
  c->coef = coef;
  if ((st = eplb__glpk_call("split_robust", robust_body, c)))
    goto done;
  out->iterations = 1;
  /* Clip the simplex's rounding and renormalise each expert. */
  memset(msum, 0, (size_t)E * sizeof *msum);
  for (uint32_t r = 0; r < R; r++)
    if (rcol[r] != UINT32_MAX) {
      double x = c->x[rcol[r]];
      out->share[r] = x > 0 ? x : 0.0;
      msum[p->phy2log[r]] += out->share[r];
    }
  for (uint32_t r = 0; r < R; r++)
    if (rcol[r] != UINT32_MAX) {
      uint32_t e = p->phy2log[r];
      out->share[r] = msum[e] > 0 ? out->share[r] / msum[e] : 1.0 / ix->count[e];
    }
done:
  eplb__free(cexp);
  eplb__free(cgrow);
  eplb__free(gfirst);
  eplb__free(gcols);
  eplb__free(in_lp);
  eplb__free(colw);
  eplb__free(cst);
  eplb__free(tlo);
  eplb__free(coef);
  eplb__free(c->ia);
  eplb__free(c->ja);
  eplb__free(c->ar);
  eplb__free(c->x);
  c->ia = c->ja = NULL, c->ar = c->x = NULL;
  return st;
}

eplb_status_t eplb_split_solve_robust_weighted(eplb_split_t *split, const eplb_split_problem_t *p,
                                               const double *w, const double *v, uint32_t S,
                                               eplb_split_result_t *out) {
  if (!split || !w)
    return eplb__error(EPLB_EINVAL, "lp", "split_robust: %s is NULL",
                       !split ? "handle" : "step_loads");
  if (!S)
    return eplb__error(EPLB_EINVAL, "lp", "split_robust: num_steps is 0");
  eplb_status_t st = eplb__split_check(p, w, out, false);
  if (st)
    return st;
  if ((st = check_steps(p, w, v, S)))
    return st;
  uint32_t E = p->num_experts, G = p->num_gpus, R = p->num_slots;
  robust_ctx_t c = {.tm_lim =
                        eplb__glpk_time_limit_ms(eplb__split_options(split)->glpk_time_limit_s)};
  uint32_t *count = eplb__malloc_array(E, sizeof *count);
  uint32_t *erow = eplb__malloc_array(E, sizeof *erow);
  uint32_t *grow = eplb__malloc_array(G, sizeof *grow);
  uint32_t *rcol = eplb__malloc_array(R, sizeof *rcol);
  uint32_t *sidx = eplb__malloc_array(S, sizeof *sidx);
  uint8_t *used = eplb__calloc(S, 1);
  double *msum = eplb__calloc(E, sizeof *msum); /* load over counted steps */
  double *mstep = eplb__malloc_array(S, sizeof *mstep);
  double *gl = eplb__malloc_array(G, sizeof *gl);
  if (!count || !erow || !grow || !rcol || !sidx || !used || !msum || !mstep || !gl) {
    st = eplb__error(EPLB_ENOMEM, "lp", "split_robust: out of memory for %u slots", R);
    goto done;
  }
  if ((st = eplb__split_count_replicas(p, count)))
    goto done;
  for (uint32_t s = 0; s < S; s++) {
    double tot = 0;
    for (uint32_t e = 0; e < E; e++)
      tot += w[(size_t)s * E + e];
    mstep[s] = tot / G;
    used[s] = mstep[s] > 0 && (!v || v[s] > 0);
    if (used[s]) {
      sidx[c.nstep++] = s;
      for (uint32_t e = 0; e < E; e++)
        msum[e] += w[(size_t)s * E + e];
    }
  }
  for (uint32_t e = 0; e < E; e++)
    erow[e] = count[e] > 1 && msum[e] > 0 ? c.nexp++ : UINT32_MAX;
  for (uint32_t g = 0; g < G; g++)
    grow[g] = UINT32_MAX;
  for (uint32_t g = 0, r = 0; g < G; g++)
    for (uint32_t k = 0; k < p->slots_per_gpu[g]; k++, r++) {
      uint32_t e = p->phy2log[r];
      rcol[r] = UINT32_MAX;
      out->share[r] = 1.0 / count[e]; /* fixed experts: 1 or uniform */
      if (erow[e] == UINT32_MAX)
        continue;
      rcol[r] = c.nvar++;
      if (grow[g] == UINT32_MAX)
        grow[g] = c.ngrow++;
    }
  out->iterations = 0;
  robust_index_t ix = {count, erow, grow, rcol, sidx, mstep, gl, msum};
  if (c.nvar && c.nstep && (st = robust_lp(&c, p, w, v, &ix, out)))
    goto done;
  finish(p, w, S, used, msum, gl, out);
done:
  eplb__free(count);
  eplb__free(erow);
  eplb__free(grow);
  eplb__free(rcol);
  eplb__free(sidx);
  eplb__free(used);
  eplb__free(msum);
  eplb__free(mstep);
  eplb__free(gl);
  return st;
}

eplb_status_t eplb_split_solve_robust(eplb_split_t *split, const eplb_split_problem_t *p,
                                      const double *step_loads, uint32_t num_steps,
                                      eplb_split_result_t *out) {
  return eplb_split_solve_robust_weighted(split, p, step_loads, NULL, num_steps, out);
}
