/* tests/reference/transport.c — the transportation LP the tests check the
 * locality split against (reference.h). GLPK runs inside lp's
 * eplb__glpk_call, so everything is allocated before the call. */
#include "tests/reference/reference.h"

#include "lp/lp.h"

#include <glpk.h>
#include <math.h>
#include <string.h>

typedef struct {
  const eplb_test_transport_problem_t *pb;
  double scale;     /* demands and capacity are divided by it (GLPK's tolerances are absolute) */
  int *col_of;      /* [N*R] GLPK column of x[n][r], 0 when fixed at 0 */
  int *row_of;      /* [N*E] GLPK row of demand (n, e), 0 when no demand */
  int *ia, *ja;     /* [nnz+1] */
  double *ar;       /* [nnz+1] */
  double *x;        /* [N*R] result */
  double objective; /* scaled back */
} tp_t;

static eplb_status_t body(void *arg) {
  tp_t *t = arg;
  const eplb_test_transport_problem_t *pb = t->pb;
  uint32_t N = pb->num_sources, E = pb->num_experts, R = pb->num_replicas, G = pb->num_gpus;
  glp_prob *P = glp_create_prob();
  glp_set_obj_dir(P, GLP_MIN);
  int rows = 0, k = 0;
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t e = 0; e < E; e++)
      if (t->row_of[(size_t)n * E + e]) {
        double d = pb->demand[(size_t)n * E + e] / t->scale;
        rows++;
        glp_add_rows(P, 1);
        glp_set_row_bnds(P, rows, GLP_FX, d, d);
      }
  int gpu_row0 = rows;
  glp_add_rows(P, (int)G);
  for (uint32_t g = 0; g < G; g++)
    glp_set_row_bnds(P, gpu_row0 + 1 + (int)g, GLP_UP, 0, pb->cap / t->scale);
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t r = 0; r < R; r++) {
      int c = t->col_of[(size_t)n * R + r];
      if (!c)
        continue;
      glp_add_cols(P, 1);
      glp_set_col_bnds(P, c, GLP_LO, 0, 0);
      /* The objective counts cross-node tokens: a replica on the source
       * node costs nothing, whichever of its GPUs holds it. */
      glp_set_obj_coef(P, c, pb->rep_node[r] != n ? 1.0 : 0.0);
      k++, t->ia[k] = t->row_of[(size_t)n * E + pb->rep_expert[r]], t->ja[k] = c, t->ar[k] = 1;
      k++, t->ia[k] = gpu_row0 + 1 + (int)pb->rep_gpu[r], t->ja[k] = c, t->ar[k] = 1;
    }
  glp_load_matrix(P, k, t->ia, t->ja, t->ar);
  glp_smcp sm;
  glp_init_smcp(&sm);
  sm.msg_lev = GLP_MSG_OFF;
  sm.presolve = GLP_ON;
  eplb_status_t st = EPLB_OK;
  int ret = glp_simplex(P, &sm);
  if (ret == GLP_ENOPFS || (!ret && glp_get_status(P) == GLP_NOFEAS)) {
    st = eplb__error(EPLB_EINFEASIBLE, "lp", "transport: no split keeps every GPU <= %g", pb->cap);
    goto done;
  }
  if (ret || glp_get_status(P) != GLP_OPT) {
    st = eplb__error(EPLB_ESOLVER, "lp", "transport: glp_simplex %d, status %d", ret,
                     glp_get_status(P));
    goto done;
  }
  for (size_t i = 0; i < (size_t)N * R; i++) {
    int c = t->col_of[i];
    double v = c ? glp_get_col_prim(P, c) * t->scale : 0;
    t->x[i] = v > 0 ? v : 0;
  }
  t->objective = glp_get_obj_val(P) * t->scale;
done:
  glp_delete_prob(P);
  return st;
}

eplb_status_t eplb_test_transport_solve(const eplb_test_transport_problem_t *pb, double *x,
                                        double *cross) {
  if (!pb || !x || !pb->num_sources || !pb->num_experts || !pb->num_replicas || !pb->num_gpus ||
      !pb->rep_expert || !pb->rep_gpu || !pb->rep_node || !pb->demand || !(pb->cap >= 0))
    return eplb__error(EPLB_EINVAL, "lp", "transport: bad arguments");
  uint32_t N = pb->num_sources, E = pb->num_experts, R = pb->num_replicas;
  uint64_t NR = (uint64_t)N * R, NE = (uint64_t)N * E;
  if (NR > (1u << 24) || NE > (1u << 24))
    return eplb__error(EPLB_EINVAL, "lp", "transport: %u sources x %u replicas is too large", N, R);
  tp_t t = {.pb = pb, .x = x};
  eplb_status_t st = EPLB_OK;
  t.col_of = eplb__calloc((size_t)NR, sizeof *t.col_of);
  t.row_of = eplb__calloc((size_t)NE, sizeof *t.row_of);
  t.ia = eplb__malloc_array((size_t)(2 * NR + 1), sizeof *t.ia);
  t.ja = eplb__malloc_array((size_t)(2 * NR + 1), sizeof *t.ja);
  t.ar = eplb__malloc_array((size_t)(2 * NR + 1), sizeof *t.ar);
  if (!t.col_of || !t.row_of || !t.ia || !t.ja || !t.ar) {
    st = eplb__error(EPLB_ENOMEM, "lp", "transport: out of memory");
    goto done;
  }
  int rows = 0, cols = 0;
  double maxv = pb->cap;
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t e = 0; e < E; e++) {
      double d = pb->demand[(size_t)n * E + e];
      if (!isfinite(d) || d < 0) {
        st = eplb__error(EPLB_EINVAL, "lp", "transport: demand[%u][%u] = %g", n, e, d);
        goto done;
      }
      if (d > 0)
        t.row_of[(size_t)n * E + e] = ++rows;
      maxv = d > maxv ? d : maxv;
    }
  for (uint32_t r = 0; r < R; r++)
    if (pb->rep_expert[r] >= E || pb->rep_gpu[r] >= pb->num_gpus) {
      st = eplb__error(EPLB_EINVAL, "lp", "transport: replica %u: bad expert or GPU", r);
      goto done;
    }
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t r = 0; r < R; r++)
      if (t.row_of[(size_t)n * E + pb->rep_expert[r]])
        t.col_of[(size_t)n * R + r] = ++cols;
  /* Every demand needs a replica of its expert. */
  for (uint32_t n = 0; n < N; n++)
    for (uint32_t e = 0; e < E; e++)
      if (t.row_of[(size_t)n * E + e]) {
        bool any = false;
        for (uint32_t r = 0; r < R && !any; r++)
          any = pb->rep_expert[r] == e;
        if (!any) {
          st = eplb__error(EPLB_EINFEASIBLE, "lp", "transport: expert %u has no replica", e);
          goto done;
        }
      }
  t.scale = maxv > 0 ? maxv : 1;
  memset(x, 0, (size_t)NR * sizeof *x);
  if (rows == 0) {
    if (cross)
      *cross = 0;
    goto done;
  }
  if ((st = eplb__glpk_call("transport", body, &t)) == EPLB_OK && cross)
    *cross = t.objective;
done:
  eplb__free(t.col_of);
  eplb__free(t.row_of);
  eplb__free(t.ia);
  eplb__free(t.ja);
  eplb__free(t.ar);
  return st;
}
