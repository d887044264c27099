/* lp/mip_place.c — the placement MIP (see lp/lp.h "placement MIP"). GLPK
 * runs inside eplb__glpk_call, so everything is allocated before the call. */
#include "lp/lp.h"

#include <glpk.h>
#include <math.h>
#include <string.h>

typedef struct {
  const eplb__mip_place_problem_t *pb;
  uint32_t E, G;
  double scale, ub; /* loads are divided by scale; ub: warm start's max (scaled) */
  double tlow;      /* lower bound of T (scaled) */
  int integral_t;   /* T is an integer variable (see eplb__mip_place) */
  int *ia, *ja;     /* [nnz+1] */
  double *ar;       /* [nnz+1] */
  double *start;    /* [ncols+1] warm start, GLPK indexing */
  double *sol;      /* [ncols+1] result */
  int start_given;
  double bound;    /* best bound seen (scaled) */
  int mip_status;  /* glp_mip_status */
  double deadline; /* eplb__now() limit, or 0 */
  int stopped;     /* the callback terminated the search at the deadline */
} mip_t;

/* GLPK's tm_lim for the time left before m's deadline (INT_MAX: none; 0
 * when it has passed). GLPK reads its clock between simplex iterations and
 * overran 1 s by 22-27 ms on a 256 x 32 root LP: it gets 97% of what is
 * left, so that the layer's limit holds with what follows GLPK. */
static int ms_left(const mip_t *m) {
  if (!(m->deadline > 0))
    return eplb__glpk_time_limit_ms(0);
  double left = m->deadline - eplb__now();
  return left > 0 ? eplb__glpk_time_limit_ms(0.97 * left) : 0;
}

static int col_y(const mip_t *m, uint32_t e, uint32_t g) { return 1 + (int)(e * m->G + g); }
static int col_x(const mip_t *m, uint32_t e, uint32_t g) {
  return 1 + (int)(m->E * m->G + e * m->G + g);
}
static int col_t(const mip_t *m) { return 1 + (int)(2 * m->E * m->G); }

static void callback(glp_tree *tree, void *info) {
  mip_t *m = info;
  /* GLPK checks tm_lim only between nodes; the callback runs several times
   * per node (selection, preprocessing, cuts, heuristics, branching), so a
   * long root or cut round still stops close to the deadline. */
  if (m->deadline > 0 && eplb__now() >= m->deadline) {
    m->stopped = 1;
    glp_ios_terminate(tree);
    return;
  }
  if (glp_ios_reason(tree) == GLP_IHEUR && !m->start_given) {
    m->start_given = 1;
    glp_ios_heur_sol(tree, m->start);
  }
  int best = glp_ios_best_node(tree);
  if (best) {
    double b = glp_ios_node_bound(tree, best);
    if (b > m->bound)
      m->bound = b;
  }
}

/* The model into P: columns y (replica), x (amount) and T, the rows below. */
static void build_model(mip_t *m, glp_prob *P) {
  const eplb__mip_place_problem_t *pb = m->pb;
  uint32_t E = m->E, G = m->G;
  glp_set_obj_dir(P, GLP_MIN);
  int ncols = col_t(m);
  glp_add_cols(P, ncols);
  for (uint32_t e = 0; e < E; e++) {
    double w = pb->loads[e] / m->scale, big = w < m->ub ? w : m->ub;
    for (uint32_t g = 0; g < G; g++) {
      int y = col_y(m, e, g), x = col_x(m, e, g);
      glp_set_col_kind(P, y, GLP_BV);
      if (pb->allowed && !pb->allowed[(size_t)e * G + g])
        glp_set_col_bnds(P, y, GLP_FX, 0, 0);
      glp_set_col_bnds(P, x, big > 0 ? GLP_DB : GLP_FX, 0, big);
    }
  }
  glp_set_col_bnds(P, col_t(m), GLP_LO, m->tlow, 0);
  if (m->integral_t)
    glp_set_col_kind(P, col_t(m), GLP_IV);
  glp_set_obj_coef(P, col_t(m), 1);
  int row = 0, k = 0;
  /* Each expert's load is served: sum_g x = w_e. */
  for (uint32_t e = 0; e < E; e++) {
    glp_add_rows(P, 1);
    row++;
    double w = pb->loads[e] / m->scale;
    glp_set_row_bnds(P, row, GLP_FX, w, w);
    for (uint32_t g = 0; g < G; g++)
      k++, m->ia[k] = row, m->ja[k] = col_x(m, e, g), m->ar[k] = 1;
  }
  /* GPU load <= T; slots; symmetry (load order within a class). */
  for (uint32_t g = 0; g < G; g++) {
    glp_add_rows(P, 2);
    glp_set_row_bnds(P, row + 1, GLP_UP, 0, 0);
    glp_set_row_bnds(P, row + 2, GLP_UP, 0, pb->slots_per_gpu[g]);
    for (uint32_t e = 0; e < E; e++) {
      k++, m->ia[k] = row + 1, m->ja[k] = col_x(m, e, g), m->ar[k] = 1;
      k++, m->ia[k] = row + 2, m->ja[k] = col_y(m, e, g), m->ar[k] = 1;
    }
    k++, m->ia[k] = row + 1, m->ja[k] = col_t(m), m->ar[k] = -1;
    row += 2;
    if (pb->gpu_class && g + 1 < G && pb->gpu_class[g] == pb->gpu_class[g + 1]) {
      glp_add_rows(P, 1);
      row++;
      glp_set_row_bnds(P, row, GLP_LO, 0, 0);
      for (uint32_t e = 0; e < E; e++) {
        k++, m->ia[k] = row, m->ja[k] = col_x(m, e, g), m->ar[k] = 1;
        k++, m->ia[k] = row, m->ja[k] = col_x(m, e, g + 1), m->ar[k] = -1;
      }
    }
  }
  /* Every expert has a replica; x only where y. */
  for (uint32_t e = 0; e < E; e++) {
    glp_add_rows(P, 1);
    row++;
    glp_set_row_bnds(P, row, GLP_LO, 1, 0);
    double w = pb->loads[e] / m->scale, big = w < m->ub ? w : m->ub;
    for (uint32_t g = 0; g < G; g++) {
      k++, m->ia[k] = row, m->ja[k] = col_y(m, e, g), m->ar[k] = 1;
      glp_add_rows(P, 1);
      glp_set_row_bnds(P, row + 1 + (int)g, GLP_UP, 0, 0);
    }
    for (uint32_t g = 0; g < G; g++) {
      int r = row + 1 + (int)g;
      k++, m->ia[k] = r, m->ja[k] = col_x(m, e, g), m->ar[k] = 1;
      k++, m->ia[k] = r, m->ja[k] = col_y(m, e, g), m->ar[k] = -big;
    }
    row += (int)G;
  }
  glp_load_matrix(P, k, m->ia, m->ja, m->ar);
}

static eplb_status_t body(void *arg) {
  mip_t *m = arg;
  glp_prob *P = glp_create_prob();
  int ncols = col_t(m);
  build_model(m, P);
  glp_smcp sm;
  glp_init_smcp(&sm);
  sm.msg_lev = GLP_MSG_OFF;
  sm.meth = GLP_DUALP;
  eplb_status_t st = EPLB_OK;
  /* The root LP alone can outlast the limit on large layers: bounded too. */
  sm.tm_lim = ms_left(m);
  if (sm.tm_lim == 0) {
    st = eplb__error(EPLB_ETIMEOUT, "lp", "mip: time limit before the root LP");
    goto done;
  }
  int ret = glp_simplex(P, &sm);
  if (ret == GLP_ETMLIM || (m->deadline > 0 && eplb__now() >= m->deadline)) {
    st = eplb__error(EPLB_ETIMEOUT, "lp", "mip: time limit in the root LP, no solution");
    goto done;
  }
  if (ret || glp_get_status(P) != GLP_OPT) {
    st = glp_get_status(P) == GLP_NOFEAS
             ? eplb__error(EPLB_EINFEASIBLE, "lp", "mip: the placement constraints are infeasible")
             : eplb__error(EPLB_ESOLVER, "lp", "mip: root LP failed (glp_simplex %d, status %d)",
                           ret, glp_get_status(P));
    goto done;
  }
  m->bound = glp_get_obj_val(P);
  glp_iocp io;
  glp_init_iocp(&io);
  io.msg_lev = GLP_MSG_OFF;
  io.presolve = GLP_OFF; /* the callback's warm start uses the original columns */
  io.tm_lim = ms_left(m);
  if (io.tm_lim == 0) {
    st = eplb__error(EPLB_ETIMEOUT, "lp", "mip: time limit after the root LP, no solution");
    goto done;
  }
  io.mip_gap = 1e-6;
  io.mir_cuts = GLP_ON;
  io.cb_func = callback;
  io.cb_info = m;
  ret = glp_intopt(P, &io);
  /* Decide on the MIP status, not the return code (NOTES.md). */
  m->mip_status = glp_mip_status(P);
  if (m->mip_status == GLP_OPT || m->mip_status == GLP_FEAS) {
    for (int j = 1; j <= ncols; j++)
      m->sol[j] = glp_mip_col_val(P, j);
    if (m->mip_status == GLP_OPT)
      m->bound = m->sol[ncols];
    st = m->mip_status == GLP_OPT ? EPLB_OK : EPLB_ETIMEOUT;
  } else if (m->mip_status == GLP_NOFEAS) {
    st = eplb__error(EPLB_EINFEASIBLE, "lp", "mip: no placement satisfies the constraints");
  } else {
    st = ret == GLP_ETMLIM || m->stopped
             ? eplb__error(EPLB_ETIMEOUT, "lp", "mip: time limit, no solution")
             : eplb__error(EPLB_ESOLVER, "lp", "mip: glp_intopt returned %d", ret);
  }
done:
  glp_delete_prob(P);
  return st;
}

/* GPU order for the warm start: within a run of one class, by load
 * descending (the symmetry rows require it). order[i] = source GPU. */
static void start_order(const eplb__mip_place_problem_t *pb, const double *gl, uint32_t *order) {
  uint32_t G = pb->num_gpus;
  for (uint32_t g = 0; g < G; g++)
    order[g] = g;
  if (!pb->gpu_class)
    return;
  for (uint32_t i = 1; i < G; i++)
    for (uint32_t j = i;
         j > 0 && pb->gpu_class[j - 1] == pb->gpu_class[j] && gl[order[j - 1]] < gl[order[j]];
         j--) {
      uint32_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
}

/* The solution back into the plan: y picks the experts of each GPU, x the
 * shares, normalised per expert (rounding; zero-load experts uniform). */
static void write_solution(const mip_t *m, const uint32_t *first, int32_t *phy2log, double *share) {
  const eplb__mip_place_problem_t *pb = m->pb;
  uint32_t E = m->E, G = m->G, R = first[G];
  for (uint32_t g = 0; g < G; g++) {
    uint32_t r = first[g];
    for (uint32_t e = 0; e < E && r < first[g + 1]; e++)
      if (m->sol[col_y(m, e, g)] > 0.5) {
        double w = pb->loads[e] / m->scale;
        phy2log[r] = (int32_t)e;
        share[r++] = w > 0 ? fmax(0, m->sol[col_x(m, e, g)]) / w : -1; /* -1: fixed below */
      }
    int32_t fill = r > first[g] ? phy2log[first[g]] : 0;
    for (; r < first[g + 1]; r++) {
      phy2log[r] = fill;
      share[r] = 0;
    }
  }
  /* Normalise shares per expert (rounding; zero-load experts uniform). */
  for (uint32_t e = 0; e < E; e++) {
    double s = 0;
    uint32_t c = 0;
    for (uint32_t r = 0; r < R; r++)
      if ((uint32_t)phy2log[r] == e) {
        s += share[r] > 0 ? share[r] : 0;
        c += share[r] != 0;
      }
    for (uint32_t r = 0; r < R; r++)
      if ((uint32_t)phy2log[r] == e)
        share[r] = s > 0 ? (share[r] > 0 ? share[r] / s : 0) : (share[r] != 0 ? 1.0 / c : 0);
  }
}

eplb_status_t eplb__mip_place(const eplb__mip_place_problem_t *pb, int32_t *phy2log, double *share,
                              double *max_load, double *gap) {
  if (!pb || !phy2log || !share || !max_load || !gap || !pb->loads || !pb->slots_per_gpu ||
      !pb->num_experts || !pb->num_gpus)
    return eplb__error(EPLB_EINVAL, "lp", "mip: bad arguments");
  uint32_t E = pb->num_experts, G = pb->num_gpus;
  if ((uint64_t)E * G > (1u << 22))
    return eplb__error(EPLB_EINVAL, "lp", "mip: %u experts x %u GPUs is too large", E, G);
  uint32_t R = 0, *first = NULL, *order = NULL;
  for (uint32_t g = 0; g < G; g++)
    R += pb->slots_per_gpu[g];
  mip_t m = {.pb = pb, .E = E, .G = G};
  m.deadline = pb->deadline > 0     ? pb->deadline
               : pb->time_limit > 0 ? eplb__now() + pb->time_limit
                                    : 0;
  size_t EG = (size_t)E * G, nnz = 9 * EG + 2 * G + 8, ncols = 2 * EG + 1;
  double *gl = NULL, total = 0;
  m.ia = eplb__malloc_array(nnz + 1, sizeof *m.ia);
  m.ja = eplb__malloc_array(nnz + 1, sizeof *m.ja);
  m.ar = eplb__malloc_array(nnz + 1, sizeof *m.ar);
  m.start = eplb__calloc(ncols + 1, sizeof *m.start);
  m.sol = eplb__calloc(ncols + 1, sizeof *m.sol);
  gl = eplb__calloc(G, sizeof *gl);
  first = eplb__malloc_array((size_t)G + 1, sizeof *first);
  order = eplb__malloc_array(G, sizeof *order);
  eplb_status_t st = EPLB_OK;
  if (!m.ia || !m.ja || !m.ar || !m.start || !m.sol || !gl || !first || !order) {
    st = eplb__error(EPLB_ENOMEM, "lp", "mip: out of memory");
    goto done;
  }
  /* With one slot per expert (R == E) every expert sits whole on one GPU,
   * so with integral loads every GPU load is an integer: T may be an
   * integer variable, which rounds GLPK's bound up and proves optimality as
   * soon as the incumbent reaches it (the LP relaxation of this pure
   * makespan problem is otherwise too weak to close within the limit). The
   * loads then stay unscaled so that integrality means tokens. */
  int integral = R == E;
  for (uint32_t e = 0; e < E; e++) {
    total += pb->loads[e];
    integral &= pb->loads[e] == floor(pb->loads[e]);
  }
  m.integral_t = integral && total < 0x1p40;
  m.scale = m.integral_t ? 1 : total > 0 ? total / G : 1;
  first[0] = 0;
  for (uint32_t g = 0; g < G; g++)
    first[g + 1] = first[g] + pb->slots_per_gpu[g];
  /* Warm start: the given plan, GPUs reordered within classes. */
  double ws_max = 0;
  for (uint32_t g = 0; g < G; g++) {
    for (uint32_t r = first[g]; r < first[g + 1]; r++) {
      if (phy2log[r] < 0 || (uint32_t)phy2log[r] >= E) {
        st = eplb__error(EPLB_ERANGE, "lp", "mip: warm start slot %u: expert %d", r, phy2log[r]);
        goto done;
      }
      gl[g] += share[r] * pb->loads[phy2log[r]] / m.scale;
    }
    ws_max = gl[g] > ws_max ? gl[g] : ws_max;
  }
  start_order(pb, gl, order);
  m.ub = ws_max * (1 + 1e-9) + 1e-12;
  for (uint32_t g = 0; g < G; g++)
    for (uint32_t r = first[order[g]]; r < first[order[g] + 1]; r++) {
      uint32_t e = (uint32_t)phy2log[r];
      m.start[col_y(&m, e, g)] = 1;
      m.start[col_x(&m, e, g)] += share[r] * pb->loads[e] / m.scale;
    }
  m.start[col_t(&m)] = ws_max;
  /* A bound a hair above the start (rounding) would reject the start. */
  m.tlow = fmin(m.integral_t ? ceil(pb->lower_bound - 1e-9) : pb->lower_bound / m.scale, ws_max);
  st = eplb__glpk_call("mip", body, &m);
  if (st && st != EPLB_ETIMEOUT)
    goto done;
  if (m.mip_status != GLP_OPT && m.mip_status != GLP_FEAS)
    goto done;
  double best = m.sol[col_t(&m)];
  double bound = m.bound > pb->lower_bound / m.scale ? m.bound : pb->lower_bound / m.scale;
  *gap = best > 0 ? fmax(0, (best - bound) / best) : 0;
  if (st == EPLB_OK)
    *gap = 0;
  write_solution(&m, first, phy2log, share);
  double mx = 0;
  for (uint32_t g = 0; g < G; g++) {
    double l = 0;
    for (uint32_t r = first[g]; r < first[g + 1]; r++)
      l += share[r] * pb->loads[phy2log[r]];
    mx = l > mx ? l : mx;
  }
  *max_load = mx;
  if (st == EPLB_ETIMEOUT)
    eplb__error(EPLB_ETIMEOUT, "lp", "mip: time limit, gap %.3g", *gap);
done:
  eplb__free(m.ia);
  eplb__free(m.ja);
  eplb__free(m.ar);
  eplb__free(m.start);
  eplb__free(m.sol);
  eplb__free(gl);
  eplb__free(first);
  eplb__free(order);
  return st;
}
