/* sim/sim.c — trace replay: per-step balance, all-to-all traffic and time
 * estimates for a fixed plan or a rebalancing policy (model in eplb/sim.h). */
#include "sim/sim.h"

#include "eplb/split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One plan, laid out for the hot loop: replica lists per expert and the share
 * mass of each expert per node, built once per plan (and per layer and step
 * when the per-batch split changes the shares). */
typedef struct layout {
  const eplb_plan_t *plan;
  uint32_t *p2l;      /* [L][R] expert of each slot */
  uint32_t *rep_beg;  /* [L][E+1] replicas of e: rep_slot[rep_beg[e] .. rep_beg[e+1]) */
  uint32_t *rep_slot; /* [L][R] */
  uint32_t *nm_beg;   /* [L][E+1] node masses of e: nm_*[nm_beg[e] .. nm_beg[e+1]) */
  uint32_t *nm_node;  /* [L][R] */
  double *nm_mass;    /* [L][R] */
} layout_t;

typedef struct sim {
  const eplb_cost_model_t *cost;
  const eplb_sim_options_t *opts;
  uint32_t L, E, G, N, R, k;
  uint32_t *slot_gpu; /* [R] */
  uint32_t *gpu_node; /* [G] */
  double *node_gpus;  /* [N] GPUs of each node */
  double *bw_intra;   /* [G] bytes per µs */
  double *bw_inter;   /* [G] */
  layout_t lay;
  /* Per-layer scratch. */
  double *share;                                             /* [R] shares in force */
  double *slot_tok;                                          /* [R] */
  double *gpu_tok, *gpu_comp, *node_tok;                     /* [G], [G], [N] */
  double *send_intra, *send_inter, *recv_intra, *recv_inter; /* [G] */
  double *prod;                                              /* [N] */
  uint64_t *stamp;                                           /* [N] */
  uint32_t *touched;                                         /* [N] */
  uint64_t stamp_now;
  double *wbuf;      /* [E] */
  double *split_gpu; /* [G] */
  eplb_split_t *split;
  /* Per-step output. */
  double *step_gpu_tok, *step_gpu_active; /* [G] */
  double *bal;                            /* [steps] step balancedness */
  /* Plans with node shares: demand per (source node, expert) of the layer. */
  double *ns_dem;  /* [N][E] */
  double *ns_rows; /* [N][E] rows from each node picking e */
  /* Plans without node shares under local-first routing: the per-node shares
   * that routing amounts to, so that the node-share paths cost them. */
  double *lf_ns; /* [N][R] */
} sim_t;

static eplb_status_t oom(void) { return eplb__error(EPLB_ENOMEM, "sim", "out of memory"); }

void eplb_sim_options_default(eplb_sim_options_t *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->step_end = UINT64_MAX;
  eplb_plan_options_default(&o->plan);
  o->local_first = 1;
  o->split_tolerance = 0.01;
  o->gain_threshold = 0.01;
}

static void layout_free(layout_t *y) {
  eplb__free(y->p2l);
  eplb__free(y->rep_beg);
  eplb__free(y->rep_slot);
  eplb__free(y->nm_beg);
  eplb__free(y->nm_node);
  eplb__free(y->nm_mass);
  memset(y, 0, sizeof *y);
}

static eplb_status_t layout_alloc(sim_t *s) {
  layout_t *y = &s->lay;
  size_t LR = (size_t)s->L * s->R, LE1 = (size_t)s->L * (s->E + 1);
  y->p2l = eplb__malloc_array(LR, sizeof *y->p2l);
  y->rep_beg = eplb__malloc_array(LE1, sizeof *y->rep_beg);
  y->rep_slot = eplb__malloc_array(LR, sizeof *y->rep_slot);
  y->nm_beg = eplb__malloc_array(LE1, sizeof *y->nm_beg);
  y->nm_node = eplb__malloc_array(LR, sizeof *y->nm_node);
  y->nm_mass = eplb__malloc_array(LR, sizeof *y->nm_mass);
  if (!y->p2l || !y->rep_beg || !y->rep_slot || !y->nm_beg || !y->nm_node || !y->nm_mass)
    return oom();
  return EPLB_OK;
}

/* Node masses of layer l from the shares in force. Replicas of an expert are
 * listed in slot order, so replicas on one node are merged with a scan of
 * the (few) entries already written for that expert. */
static void layout_node_mass(sim_t *s, uint32_t l, const double *share) {
  layout_t *y = &s->lay;
  const uint32_t *rb = y->rep_beg + (size_t)l * (s->E + 1), *rs = y->rep_slot + (size_t)l * s->R;
  uint32_t *nb = y->nm_beg + (size_t)l * (s->E + 1), *nn = y->nm_node + (size_t)l * s->R;
  double *nmass = y->nm_mass + (size_t)l * s->R;
  uint32_t w = 0;
  for (uint32_t e = 0; e < s->E; e++) {
    nb[e] = w;
    for (uint32_t i = rb[e]; i < rb[e + 1]; i++) {
      uint32_t node = s->gpu_node[s->slot_gpu[rs[i]]], j = nb[e];
      while (j < w && nn[j] != node)
        j++;
      if (j == w) {
        nn[w] = node;
        nmass[w++] = 0;
      }
      nmass[j] += share[rs[i]];
    }
  }
  nb[s->E] = w;
}

static eplb_status_t layout_build(sim_t *s, const eplb_plan_t *plan) {
  layout_t *y = &s->lay;
  y->plan = plan;
  for (uint32_t l = 0; l < s->L; l++) {
    const int32_t *p2l = eplb_plan_phy2log(plan, l);
    uint32_t *q = y->p2l + (size_t)l * s->R, *rb = y->rep_beg + (size_t)l * (s->E + 1);
    uint32_t *rs = y->rep_slot + (size_t)l * s->R;
    memset(rb, 0, (s->E + 1) * sizeof *rb);
    for (uint32_t r = 0; r < s->R; r++) {
      if (p2l[r] < 0 || (uint32_t)p2l[r] >= s->E)
        return eplb__error(EPLB_ERANGE, "sim", "plan layer %u slot %u: expert %d out of range", l,
                           r, (int)p2l[r]);
      q[r] = (uint32_t)p2l[r];
      rb[q[r] + 1]++;
    }
    for (uint32_t e = 0; e < s->E; e++)
      rb[e + 1] += rb[e];
    /* Counting sort of slots by expert, slot order kept (wbuf as a cursor). */
    for (uint32_t e = 0; e < s->E; e++)
      s->wbuf[e] = rb[e];
    for (uint32_t r = 0; r < s->R; r++)
      rs[(uint32_t)s->wbuf[q[r]]++] = r;
    layout_node_mass(s, l, eplb_plan_share(plan, l));
  }
  return EPLB_OK;
}

static eplb_status_t sim_init(sim_t *s, const eplb_cluster_t *cl) {
  uint32_t G = s->G, N = s->N, R = s->R;
  s->slot_gpu = eplb__malloc_array(R, sizeof *s->slot_gpu);
  s->gpu_node = eplb__malloc_array(G, sizeof *s->gpu_node);
  s->node_gpus = eplb__calloc(N, sizeof *s->node_gpus);
  s->bw_intra = eplb__malloc_array(G, sizeof(double));
  s->bw_inter = eplb__malloc_array(G, sizeof(double));
  s->share = eplb__malloc_array(R, sizeof(double));
  s->slot_tok = eplb__malloc_array(R, sizeof(double));
  s->gpu_tok = eplb__malloc_array(G, sizeof(double));
  s->gpu_comp = eplb__malloc_array(G, sizeof(double));
  s->node_tok = eplb__malloc_array(N, sizeof(double));
  s->send_intra = eplb__malloc_array(G, sizeof(double));
  s->send_inter = eplb__malloc_array(G, sizeof(double));
  s->recv_intra = eplb__malloc_array(G, sizeof(double));
  s->recv_inter = eplb__malloc_array(G, sizeof(double));
  s->prod = eplb__malloc_array(N, sizeof(double));
  s->stamp = eplb__calloc(N, sizeof *s->stamp);
  s->touched = eplb__malloc_array(N, sizeof *s->touched);
  s->wbuf = eplb__malloc_array(s->E, sizeof(double));
  s->split_gpu = eplb__malloc_array(G, sizeof(double));
  s->step_gpu_tok = eplb__malloc_array(G, sizeof(double));
  s->step_gpu_active = eplb__malloc_array(G, sizeof(double));
  if (!s->slot_gpu || !s->gpu_node || !s->node_gpus || !s->bw_intra || !s->bw_inter || !s->share ||
      !s->slot_tok || !s->gpu_tok || !s->gpu_comp || !s->node_tok || !s->send_intra ||
      !s->send_inter || !s->recv_intra || !s->recv_inter || !s->prod || !s->stamp || !s->touched ||
      !s->wbuf || !s->split_gpu || !s->step_gpu_tok || !s->step_gpu_active)
    return oom();
  for (uint32_t g = 0; g < G; g++) {
    eplb_node_info_t ni;
    s->gpu_node[g] = eplb_cluster_node_of(cl, g);
    if (s->gpu_node[g] >= N || eplb_cluster_node(cl, s->gpu_node[g], &ni) != EPLB_OK)
      return eplb__error(EPLB_EINVAL, "sim", "cluster: GPU %u has no node", g);
    s->node_gpus[s->gpu_node[g]] += 1;
    double intra = s->cost->intra_node_gbps > 0 ? s->cost->intra_node_gbps : ni.intra_node_gbps;
    double inter = s->cost->inter_node_gbps > 0 ? s->cost->inter_node_gbps : ni.inter_node_gbps;
    if (!(intra > 0) || !(inter > 0))
      return eplb__error(EPLB_EINVAL, "sim", "cluster: node %u has no bandwidth", s->gpu_node[g]);
    s->bw_intra[g] = intra * EPLB__GBPS_TO_BYTES_PER_US;
    s->bw_inter[g] = inter * EPLB__GBPS_TO_BYTES_PER_US;
  }
  return layout_alloc(s);
}

/* Slot GPUs of a plan (GPU-major slots). Plans of one run share R and G. */
static void slot_gpus(sim_t *s, const eplb_plan_t *plan) {
  const uint32_t *spg = eplb_plan_slots_per_gpu(plan);
  uint32_t r = 0;
  for (uint32_t g = 0; g < s->G; g++)
    for (uint32_t i = 0; i < spg[g] && r < s->R; i++)
      s->slot_gpu[r++] = g;
}

static void sim_free(sim_t *s) {
  layout_free(&s->lay);
  void *bufs[] = {s->slot_gpu,        s->gpu_node,   s->node_gpus,  s->bw_intra,   s->bw_inter,
                  s->share,           s->slot_tok,   s->gpu_tok,    s->gpu_comp,   s->node_tok,
                  s->send_intra,      s->send_inter, s->recv_intra, s->recv_inter, s->prod,
                  s->stamp,           s->touched,    s->wbuf,       s->split_gpu,  s->step_gpu_tok,
                  s->step_gpu_active, s->bal};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    eplb__free(bufs[i]);
  eplb__free(s->ns_dem);
  eplb__free(s->ns_rows);
  eplb__free(s->lf_ns);
  eplb_split_destroy(s->split);
}

/* The balancedness of the layer in gpu_tok: mean over max (1 when idle). */
static double gpu_balance(const sim_t *s) {
  double sum = 0, max = 0;
  for (uint32_t g = 0; g < s->G; g++) {
    sum += s->gpu_tok[g];
    max = s->gpu_tok[g] > max ? s->gpu_tok[g] : max;
  }
  return max > 0 ? sum / s->G / max : 1.0;
}

/* Tokens a row on GPU src sends to a replica on GPU g; returns whether
 * they stay on the node. */
static bool add_copy(sim_t *s, uint32_t src, uint32_t g, bool same_node, double amount) {
  if (same_node) {
    s->send_intra[src] += amount;
    s->recv_intra[g] += amount;
  } else {
    s->send_inter[src] += amount;
    s->recv_inter[g] += amount;
  }
  return same_node;
}

/* Node m receives the row's copy of an expert with probability mass:
 * the row's chance of not sending to m shrinks by (1 - mass). */
static void touch_node(sim_t *s, uint32_t m, uint32_t *nt, double mass) {
  if (s->stamp[m] != s->stamp_now) {
    s->stamp[m] = s->stamp_now;
    s->prod[m] = 1;
    s->touched[(*nt)++] = m;
  }
  s->prod[m] *= 1 - mass;
}

/* GPU tokens of layer l under `share`; returns the layer's balancedness. */
static double gpu_loads(sim_t *s, const uint32_t *p2l, const uint32_t *counts,
                        const double *share) {
  memset(s->gpu_tok, 0, s->G * sizeof(double));
  for (uint32_t r = 0; r < s->R; r++) {
    s->slot_tok[r] = counts[p2l[r]] * share[r];
    s->gpu_tok[s->slot_gpu[r]] += s->slot_tok[r];
  }
  return gpu_balance(s);
}

/* Row i's source GPU: its recorded source rank, or rows dealt round-robin
 * over the GPUs when the trace has none (or an unknown one). */
static uint32_t row_source(const sim_t *s, const eplb_trace_step_t *st, uint32_t i) {
  int32_t sr = st->source_rank ? st->source_rank[i] : -1;
  return sr >= 0 && (uint32_t)sr < s->G ? (uint32_t)sr : i % s->G;
}

/* Expected traffic of layer l from top-k rows. Adds to *cross and *dedup. */
static void traffic_rows(sim_t *s, uint32_t l, const eplb_trace_step_t *st, double *cross,
                         double *dedup) {
  const layout_t *y = &s->lay;
  const uint32_t *rb = y->rep_beg + (size_t)l * (s->E + 1), *rs = y->rep_slot + (size_t)l * s->R;
  const uint32_t *nb = y->nm_beg + (size_t)l * (s->E + 1), *nn = y->nm_node + (size_t)l * s->R;
  const double *nmass = y->nm_mass + (size_t)l * s->R;
  double scale = st->num_tokens > 0 ? (double)st->num_tokens / st->num_rows : 1.0;
  double c = 0, d = 0;
  for (uint32_t i = 0; i < st->num_rows; i++) {
    uint32_t src = row_source(s, st, i);
    uint32_t sn = s->gpu_node[src], nt = 0;
    const uint16_t *ids = st->topk + ((size_t)i * s->L + l) * s->k;
    s->stamp_now++;
    for (uint32_t j = 0; j < s->k; j++) {
      uint32_t e = ids[j];
      if (e >= s->E)
        continue; /* the reader validates ids; never trust it blindly */
      for (uint32_t q = rb[e]; q < rb[e + 1]; q++) {
        uint32_t r = rs[q], g = s->slot_gpu[r];
        double w = s->share[r];
        if (g == src || w <= 0)
          continue;
        if (!add_copy(s, src, g, s->gpu_node[g] == sn, w * scale))
          c += w;
      }
      for (uint32_t q = nb[e]; q < nb[e + 1]; q++) {
        uint32_t m = nn[q];
        if (m == sn)
          continue;
        touch_node(s, m, &nt, nmass[q]);
      }
    }
    for (uint32_t q = 0; q < nt; q++)
      d += 1 - s->prod[s->touched[q]];
  }
  *cross += c * scale;
  *dedup += d * scale;
}

/* Expected traffic of a layer when sources are uniform over the GPUs. */
static void traffic_uniform(sim_t *s, double *cross, double *dedup) {
  double G = s->G, total = 0, c = 0;
  memset(s->node_tok, 0, s->N * sizeof(double));
  for (uint32_t g = 0; g < s->G; g++) {
    s->node_tok[s->gpu_node[g]] += s->gpu_tok[g];
    total += s->gpu_tok[g];
  }
  for (uint32_t n = 0; n < s->N; n++)
    c += s->node_tok[n] * (1 - s->node_gpus[n] / G);
  for (uint32_t g = 0; g < s->G; g++) {
    uint32_t n = s->gpu_node[g];
    s->send_intra[g] = (s->node_tok[n] - s->gpu_tok[g]) / G;
    s->send_inter[g] = (total - s->node_tok[n]) / G;
    s->recv_intra[g] = s->gpu_tok[g] * (s->node_gpus[n] - 1) / G;
    s->recv_inter[g] = s->gpu_tok[g] * (G - s->node_gpus[n]) / G;
  }
  *cross += c;
  *dedup += c;
}

/* ---- plans with node shares (locality) ----
 * A token of expert e from node n goes to replica r with node_share[n][r];
 * demand[n][e] = count[e] x the fraction of e's rows from node n (rows'
 * sources, round-robin when unrecorded), or x gpus_on(n) / G without rows. */

/* Node demand of layer l into ns_dem. */
static void ns_demand(sim_t *s, uint32_t l, const eplb_trace_step_t *st, const uint32_t *counts,
                      int rows) {
  uint32_t E = s->E, N = s->N;
  memset(s->ns_rows, 0, (size_t)N * E * sizeof(double));
  for (uint32_t i = 0; rows && i < st->num_rows; i++) {
    uint32_t src = row_source(s, st, i);
    const uint16_t *ids = st->topk + ((size_t)i * s->L + l) * s->k;
    for (uint32_t j = 0; j < s->k; j++)
      if (ids[j] < E)
        s->ns_rows[(size_t)s->gpu_node[src] * E + ids[j]] += 1;
  }
  for (uint32_t e = 0; e < E; e++) {
    double tot = 0;
    for (uint32_t n = 0; n < N; n++)
      tot += s->ns_rows[(size_t)n * E + e];
    for (uint32_t n = 0; n < N; n++)
      s->ns_dem[(size_t)n * E + e] =
          counts[e] * (tot > 0 ? s->ns_rows[(size_t)n * E + e] / tot : s->node_gpus[n] / s->G);
  }
}

/* GPU tokens of a layer from the demand in ns_dem routed by node shares ns;
 * returns the layer's balancedness. */
static double ns_loads(sim_t *s, const uint32_t *p2l, const double *ns) {
  uint32_t E = s->E, N = s->N, R = s->R;
  memset(s->gpu_tok, 0, s->G * sizeof(double));
  for (uint32_t r = 0; r < R; r++) {
    double t = 0;
    for (uint32_t n = 0; n < N; n++)
      t += s->ns_dem[(size_t)n * E + p2l[r]] * ns[(size_t)n * R + r];
    s->slot_tok[r] = t;
    s->gpu_tok[s->slot_gpu[r]] += t;
  }
  return gpu_balance(s);
}

/* The runtime's local-first rule (eplb_runtime_map) as node shares of layer
 * l: a token of expert e from node n goes to e's replicas on n with a
 * positive share, those shares renormalised to sum 1, and only when there
 * are none to every replica by `share`. Costing it through the node-share
 * paths keeps one routing rule for every policy: without it the simulator
 * would route a locality plan by node and the others globally, and credit
 * locality with traffic the runtime saves for any plan. */
static void local_first_shares(const sim_t *s, uint32_t l, const double *share, double *ns) {
  const layout_t *y = &s->lay;
  const uint32_t *rb = y->rep_beg + (size_t)l * (s->E + 1), *rs = y->rep_slot + (size_t)l * s->R;
  for (uint32_t n = 0; n < s->N; n++) {
    double *row = ns + (size_t)n * s->R;
    for (uint32_t e = 0; e < s->E; e++) {
      double local = 0;
      for (uint32_t q = rb[e]; q < rb[e + 1]; q++)
        if (s->gpu_node[s->slot_gpu[rs[q]]] == n && share[rs[q]] > 0)
          local += share[rs[q]];
      for (uint32_t q = rb[e]; q < rb[e + 1]; q++) {
        uint32_t r = rs[q];
        bool here = s->gpu_node[s->slot_gpu[r]] == n && share[r] > 0;
        row[r] = local > 0 ? (here ? share[r] / local : 0) : share[r];
      }
    }
  }
}

/* traffic_rows with each row's source node's shares. Replicas of an expert
 * are in slot order, so those on one node are consecutive. */
static void ns_traffic_rows(sim_t *s, uint32_t l, const eplb_trace_step_t *st, const double *ns,
                            double *cross, double *dedup) {
  const layout_t *y = &s->lay;
  const uint32_t *rb = y->rep_beg + (size_t)l * (s->E + 1), *rs = y->rep_slot + (size_t)l * s->R;
  double scale = st->num_tokens > 0 ? (double)st->num_tokens / st->num_rows : 1.0;
  double c = 0, d = 0;
  for (uint32_t i = 0; i < st->num_rows; i++) {
    uint32_t src = row_source(s, st, i);
    uint32_t sn = s->gpu_node[src], nt = 0;
    const double *w_of = ns + (size_t)sn * s->R;
    const uint16_t *ids = st->topk + ((size_t)i * s->L + l) * s->k;
    s->stamp_now++;
    for (uint32_t j = 0; j < s->k; j++) {
      uint32_t e = ids[j];
      if (e >= s->E)
        continue;
      uint32_t run_node = UINT32_MAX;
      double run = 0;
      for (uint32_t q = rb[e]; q <= rb[e + 1]; q++) {
        uint32_t r = q < rb[e + 1] ? rs[q] : 0, g = s->slot_gpu[r];
        uint32_t m = q < rb[e + 1] ? s->gpu_node[g] : UINT32_MAX;
        if (m != run_node && run_node != UINT32_MAX && run_node != sn && run > 0) {
          touch_node(s, run_node, &nt, run < 1 ? run : 1);
        }
        if (m != run_node) {
          run_node = m;
          run = 0;
        }
        if (q == rb[e + 1])
          break;
        double w = w_of[r];
        run += w;
        if (g == src || w <= 0)
          continue;
        if (!add_copy(s, src, g, m == sn, w * scale))
          c += w;
      }
    }
    for (uint32_t q = 0; q < nt; q++)
      d += 1 - s->prod[s->touched[q]];
  }
  *cross += c * scale;
  *dedup += d * scale;
}

/* Traffic without rows: each node's demand leaves evenly from its GPUs. */
static void ns_traffic_uniform(sim_t *s, const uint32_t *p2l, const double *ns, double *cross,
                               double *dedup) {
  uint32_t E = s->E, N = s->N, R = s->R;
  double c = 0, *out_intra = s->node_tok, *out_inter = s->prod; /* [N] scratch */
  memset(out_intra, 0, N * sizeof(double));
  memset(out_inter, 0, N * sizeof(double));
  memset(s->recv_intra, 0, s->G * sizeof(double));
  memset(s->recv_inter, 0, s->G * sizeof(double));
  for (uint32_t r = 0; r < R; r++) {
    uint32_t g = s->slot_gpu[r], m = s->gpu_node[g];
    for (uint32_t n = 0; n < N; n++) {
      double t = s->ns_dem[(size_t)n * E + p2l[r]] * ns[(size_t)n * R + r];
      if (t <= 0)
        continue;
      if (n == m) {
        double moved = t * (s->node_gpus[n] - 1) / s->node_gpus[n];
        out_intra[n] += moved;
        s->recv_intra[g] += moved;
      } else {
        out_inter[n] += t;
        s->recv_inter[g] += t;
        c += t;
      }
    }
  }
  for (uint32_t g = 0; g < s->G; g++) {
    uint32_t n = s->gpu_node[g];
    s->send_intra[g] = out_intra[n] / s->node_gpus[n];
    s->send_inter[g] = out_inter[n] / s->node_gpus[n];
  }
  *cross += c;
  *dedup += c;
}

/* Replays one step; fills *rec (gpu arrays point into s). */
static eplb_status_t replay_step(sim_t *s, const eplb_trace_step_t *st, eplb_sim_step_t *rec) {
  const eplb_cost_model_t *cm = s->cost;
  double bytes = cm->dispatch_bytes_per_copy + cm->combine_bytes_per_copy;
  int rows = st->num_rows > 0 && st->topk && s->k > 0;
  memset(s->step_gpu_tok, 0, s->G * sizeof(double));
  memset(s->step_gpu_active, 0, s->G * sizeof(double));
  rec->used_rows = rows;
  rec->min_balancedness = 1;
  for (uint32_t l = 0; l < s->L; l++) {
    const uint32_t *counts = st->counts + (size_t)l * s->E;
    const double *pshare = eplb_plan_share(s->lay.plan, l);
    const uint32_t *p2l = s->lay.p2l + (size_t)l * s->R;
    /* The plan's routing: its node shares, else local-first, else global. */
    const double *ns = eplb_plan_node_share(s->lay.plan, l);
    int lf = s->opts->local_first;
    if (ns || lf)
      ns_demand(s, l, st, counts, rows);
    if (!ns && lf) {
      local_first_shares(s, l, pshare, s->lf_ns);
      ns = s->lf_ns;
    }
    double pbal = ns ? ns_loads(s, p2l, ns) : gpu_loads(s, p2l, counts, pshare);
    double bal = pbal;
    if (s->split) {
      for (uint32_t e = 0; e < s->E; e++)
        s->wbuf[e] = counts[e];
      eplb_split_problem_t pb = {s->E, s->G, s->R, p2l, eplb_plan_slots_per_gpu(s->lay.plan)};
      eplb_split_result_t res;
      memset(&res, 0, sizeof res);
      res.share = s->share;
      res.gpu_load = s->split_gpu;
      eplb_status_t rc;
      if (lf && s->N > 1) {
        /* The runtime's per-batch split: T*, then the fewest tokens off
         * their node within the tolerance, as per-node shares (one library
         * function for both, so the simulator scores what the runtime does). */
        eplb_split_local_t loc = {s->N, s->gpu_node, s->ns_dem, s->opts->split_tolerance};
        rc = eplb_split_solve_local(s->split, &pb, &loc, &res, s->lf_ns, NULL);
      } else {
        rc = eplb_split_solve(s->split, &pb, s->wbuf, &res);
      }
      if (rc != EPLB_OK)
        return rc;
      if (lf) {
        if (s->N <= 1)
          local_first_shares(s, l, s->share, s->lf_ns);
        ns = s->lf_ns;
        bal = ns_loads(s, p2l, ns);
      } else {
        ns = NULL;
        bal = gpu_loads(s, p2l, counts, s->share);
        if (rows) /* the node masses serve only traffic_rows */
          layout_node_mass(s, l, s->share);
      }
    } else {
      memcpy(s->share, pshare, s->R * sizeof(double));
    }
    rec->plan_balancedness += pbal;
    rec->balancedness += bal;
    rec->min_balancedness = bal < rec->min_balancedness ? bal : rec->min_balancedness;

    memset(s->gpu_comp, 0, s->G * sizeof(double));
    for (uint32_t r = 0; r < s->R; r++)
      if (s->slot_tok[r] > 0) {
        uint32_t g = s->slot_gpu[r];
        s->gpu_comp[g] += eplb_cost_model_expert_time(cm, s->slot_tok[r]);
        s->step_gpu_active[g] += 1;
      }
    for (uint32_t g = 0; g < s->G; g++)
      s->step_gpu_tok[g] += s->gpu_tok[g];

    double cross = 0, dedup = 0;
    if (rows) {
      memset(s->send_intra, 0, s->G * sizeof(double));
      memset(s->send_inter, 0, s->G * sizeof(double));
      memset(s->recv_intra, 0, s->G * sizeof(double));
      memset(s->recv_inter, 0, s->G * sizeof(double));
      if (ns)
        ns_traffic_rows(s, l, st, ns, &cross, &dedup);
      else
        traffic_rows(s, l, st, &cross, &dedup);
    } else if (ns) {
      ns_traffic_uniform(s, p2l, ns, &cross, &dedup);
    } else {
      traffic_uniform(s, &cross, &dedup);
    }
    rec->cross_node_copies += cross;
    rec->dedup_copies += dedup;

    double tmax = 0, cmax = 0, amax = 0;
    for (uint32_t g = 0; g < s->G; g++) {
      double snd = s->send_intra[g] / s->bw_intra[g] + s->send_inter[g] / s->bw_inter[g];
      double rcv = s->recv_intra[g] / s->bw_intra[g] + s->recv_inter[g] / s->bw_inter[g];
      double a2a = bytes * (snd > rcv ? snd : rcv);
      double t = s->gpu_comp[g] + a2a;
      tmax = t > tmax ? t : tmax;
      cmax = s->gpu_comp[g] > cmax ? s->gpu_comp[g] : cmax;
      amax = a2a > amax ? a2a : amax;
    }
    rec->step_time_us += tmax;
    rec->compute_us += cmax;
    rec->a2a_us += amax;
  }
  rec->balancedness /= s->L;
  rec->plan_balancedness /= s->L;
  rec->cross_node_bytes = rec->cross_node_copies * bytes;
  rec->dedup_bytes = rec->dedup_copies * bytes;
  rec->num_gpus = s->G;
  rec->gpu_tokens = s->step_gpu_tok;
  rec->gpu_active = s->step_gpu_active;
  return EPLB_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Plans from the window sum of steps [b, e). `current` is the plan in force
 * (NULL for the first): the incremental policy plans from it, and its first
 * plan is a balanced one. */
static eplb_status_t check_plan(const sim_t *s, const eplb_plan_t *p) {
  if (eplb_plan_num_layers(p) != s->L || eplb_plan_num_experts(p) != s->E)
    return eplb__error(EPLB_ESHAPE, "sim", "plan has %u layers x %u experts, trace %u x %u",
                       eplb_plan_num_layers(p), eplb_plan_num_experts(p), s->L, s->E);
  if (eplb_plan_num_gpus(p) != s->G)
    return eplb__error(EPLB_ESHAPE, "sim", "plan is for %u GPUs, the cluster has %u",
                       eplb_plan_num_gpus(p), s->G);
  if (eplb_plan_node_share(p, 0) && eplb_plan_node_share_nodes(p) != s->N)
    return eplb__error(EPLB_ESHAPE, "sim", "plan has node shares for %u nodes, the cluster has %u",
                       eplb_plan_node_share_nodes(p), s->N);
  return EPLB_OK;
}

static int nodes_alike(const eplb_cluster_t *cl) {
  uint32_t N = eplb_cluster_num_nodes(cl);
  eplb_node_info_t a, b;
  if (eplb_cluster_node(cl, 0, &a) != EPLB_OK)
    return 0;
  for (uint32_t n = 1; n < N; n++)
    if (eplb_cluster_node(cl, n, &b) != EPLB_OK || b.num_gpus != a.num_gpus)
      return 0;
  return 1;
}

/* Steps the first plan is made from and steps scored (see eplb_sim_steps). */
static eplb_status_t resolve_steps(const eplb_sim_options_t *o, uint64_t nsteps, int fixed,
                                   uint64_t plan[2], uint64_t scored[2]) {
  uint64_t b = o->step_begin, e = o->step_end < nsteps ? o->step_end : nsteps;
  if (b >= e)
    return eplb__error(EPLB_EINVAL, "sim", "empty step range [%llu, %llu) (trace has %llu steps)",
                       (unsigned long long)b, (unsigned long long)o->step_end,
                       (unsigned long long)nsteps);
  scored[0] = b;
  scored[1] = e;
  plan[0] = plan[1] = 0;
  if (!o->plan_step_begin && !o->plan_step_end) {
    if (!fixed) {
      uint64_t W = o->window ? o->window : o->rebalance_every;
      plan[0] = b;
      plan[1] = o->rebalance_every == 0 || W >= e - b ? e : b + W;
    }
    return EPLB_OK;
  }
  unsigned long long pb = o->plan_step_begin,
                     pe = o->plan_step_end == UINT64_MAX ? nsteps : o->plan_step_end;
  if (fixed)
    return eplb__error(EPLB_EINVAL, "sim",
                       "plan steps %llu:%llu with a fixed plan: nothing is planned", pb, pe);
  if (o->rebalance_every)
    return eplb__error(EPLB_EINVAL, "sim",
                       "plan steps %llu:%llu and rebalancing every %llu steps: replans are made "
                       "from the steps before them",
                       pb, pe, (unsigned long long)o->rebalance_every);
  if (pb >= pe)
    return eplb__error(EPLB_EINVAL, "sim", "plan steps %llu:%llu: empty range", pb, pe);
  if (pe > nsteps)
    return eplb__error(EPLB_EINVAL, "sim", "plan steps %llu:%llu: the trace has %llu steps", pb, pe,
                       (unsigned long long)nsteps);
  if (pb <= b && pe >= e)
    return eplb__error(EPLB_EINVAL, "sim",
                       "plan steps %llu:%llu leave none of the replayed steps %llu:%llu to score",
                       pb, pe, (unsigned long long)b, (unsigned long long)e);
  /* Scored steps form one range, so that results name them simply. */
  if (pb > b && pe < e)
    return eplb__error(EPLB_EINVAL, "sim",
                       "plan steps %llu:%llu split the replayed steps %llu:%llu in two; plan on "
                       "steps before, after, or at either end of them",
                       pb, pe, (unsigned long long)b, (unsigned long long)e);
  plan[0] = pb;
  plan[1] = pe;
  if (pb <= b)
    scored[0] = pe > b ? pe : b;
  else
    scored[1] = pb < e ? pb : e;
  return EPLB_OK;
}

eplb_status_t eplb_sim_steps(const eplb_sim_options_t *opts, uint64_t num_steps, int fixed_plan,
                             uint64_t plan_steps[2], uint64_t scored_steps[2]) {
  uint64_t p[2], c[2];
  if (!opts || !plan_steps || !scored_steps)
    return eplb__error(EPLB_EINVAL, "sim", "NULL options or output");
  eplb_status_t st = resolve_steps(opts, num_steps, fixed_plan, p, c);
  if (st == EPLB_OK) {
    memcpy(plan_steps, p, sizeof p);
    memcpy(scored_steps, c, sizeof c);
  }
  return st;
}

eplb_status_t eplb_sim_run(eplb_trace_t *trace, const eplb_cluster_t *cluster,
                           const eplb_plan_t *plan, const eplb_sim_options_t *opts,
                           eplb_sim_summary_t *out) {
  eplb_sim_options_t dflt;
  eplb_cost_model_t dcost;
  sim_t s;
  memset(&s, 0, sizeof s);
  eplb_plan_t *own = NULL;
  eplb_loads_t *loads = NULL;
  uint8_t *take = NULL; /* layers of a new plan that switch */
  eplb_sim_summary_t sum;
  memset(&sum, 0, sizeof sum);
  eplb_status_t st = EPLB_OK;
  if (!opts) {
    eplb_sim_options_default(&dflt);
    opts = &dflt;
  }
  if (!trace || !cluster || !out || (!plan && opts == &dflt)) {
    st = eplb__error(EPLB_EINVAL, "sim", "NULL trace, cluster, summary or plan");
    goto done;
  }
  eplb_cost_model_default(&dcost);
  s.cost = opts->cost ? opts->cost : &dcost;
  s.opts = opts;
  if ((st = eplb_cost_model_check(s.cost)) != EPLB_OK)
    goto done;
  const eplb_trace_meta_t *meta = eplb_trace_meta(trace);
  s.L = meta->num_layers;
  s.E = meta->num_experts;
  s.k = meta->topk;
  s.G = eplb_cluster_num_gpus(cluster);
  s.N = eplb_cluster_num_nodes(cluster);
  uint64_t prange[2], srange[2];
  if ((st = resolve_steps(opts, eplb_trace_num_steps(trace), plan != NULL, prange, srange)) !=
      EPLB_OK)
    goto done;
  uint64_t b = srange[0], e = srange[1];
  if (!(opts->split_tolerance >= 0 && opts->split_tolerance <= 1)) {
    st = eplb__error(EPLB_EINVAL, "sim", "split_tolerance %g not in [0, 1]", opts->split_tolerance);
    goto done;
  }
  if (s.G == 0 || s.N == 0) {
    st = eplb__error(EPLB_EINVAL, "sim", "cluster has no GPUs");
    goto done;
  }

  eplb_plan_options_t po = opts->plan;
  uint64_t K = opts->rebalance_every, W = opts->window ? opts->window : K;
  eplb_plan_switch_options_t sw;
  eplb_plan_switch_options_default(&sw);
  sw.gain_threshold = opts->gain_threshold;
  sw.move_budget = opts->move_budget;
  if (isnan(sw.gain_threshold)) {
    st = eplb__error(EPLB_EINVAL, "sim", "gain_threshold is NaN");
    goto done;
  }
  if (!plan) {
    po.num_gpus = s.G;
    po.num_nodes = nodes_alike(cluster) ? s.N : 1;
    if (!po.cluster)
      po.cluster = cluster;
    if ((st = eplb_loads_create(s.L, s.E, &loads)) != EPLB_OK)
      goto done;
    if (!(take = eplb__calloc(s.L, 1))) {
      st = oom();
      goto done;
    }
    if ((st = eplb_plan_create_from_trace(trace, prange[0], prange[1], &po, NULL, NULL, &own)) !=
        EPLB_OK)
      goto done;
    plan = own;
  }
  if ((st = check_plan(&s, plan)) != EPLB_OK)
    goto done;
  s.R = eplb_plan_num_slots(plan);
  if ((st = sim_init(&s, cluster)) != EPLB_OK)
    goto done;
  s.ns_dem = eplb__malloc_array((size_t)s.N * s.E, sizeof(double));
  s.ns_rows = eplb__malloc_array((size_t)s.N * s.E, sizeof(double));
  s.lf_ns = eplb__malloc_array((size_t)s.N * s.R, sizeof(double));
  if (!s.ns_dem || !s.ns_rows || !s.lf_ns) {
    st = oom();
    goto done;
  }
  slot_gpus(&s, plan);
  if ((st = layout_build(&s, plan)) != EPLB_OK)
    goto done;
  if (opts->split_per_batch && (st = eplb_split_create(NULL, &s.split)) != EPLB_OK)
    goto done;
  if (!(s.bal = eplb__malloc_array((size_t)(e - b), sizeof(double)))) {
    st = oom();
    goto done;
  }
  sum.num_plans = 1;
  sum.min_balancedness = 1;
  for (uint64_t t = b; t < e; t++) {
    eplb_sim_step_t rec;
    memset(&rec, 0, sizeof rec);
    if (own && K > 0 && t > b && (t - b) % K == 0) {
      eplb_plan_t *np = NULL;
      uint64_t wb = t - b >= W ? t - W : b;
      eplb_plan_switch_summary_t ss;
      if ((st = eplb_plan_create_from_trace(trace, wb, t, &po, own, loads, &np)) != EPLB_OK ||
          (st = eplb_plan_switch_select(own, np, loads, &sw, take, &ss)) != EPLB_OK ||
          (st = eplb_plan_switch_apply(np, own, take)) != EPLB_OK) {
        eplb_plan_destroy(np);
        goto done;
      }
      uint64_t moved = ss.slots_moved;
      rec.migrated_bytes = (double)moved * s.cost->bytes_per_expert;
      double bw = 0;
      for (uint32_t g = 0; g < s.G; g++)
        bw += s.bw_intra[g];
      rec.migration_us = rec.migrated_bytes / bw;
      eplb_plan_destroy(own);
      own = np;
      plan = np;
      if ((st = layout_build(&s, plan)) != EPLB_OK)
        goto done;
      sum.num_plans++;
    }
    eplb_trace_step_t ts;
    if ((st = eplb_trace_read_step(trace, t, &ts)) != EPLB_OK)
      goto done;
    rec.step = t;
    rec.num_tokens = ts.num_tokens;
    if ((st = replay_step(&s, &ts, &rec)) != EPLB_OK)
      goto done;
    s.bal[t - b] = rec.balancedness;
    sum.mean_balancedness += rec.balancedness;
    sum.mean_plan_balancedness += rec.plan_balancedness;
    sum.min_balancedness =
        rec.min_balancedness < sum.min_balancedness ? rec.min_balancedness : sum.min_balancedness;
    sum.cross_node_copies += rec.cross_node_copies;
    sum.dedup_copies += rec.dedup_copies;
    sum.cross_node_bytes += rec.cross_node_bytes;
    sum.dedup_bytes += rec.dedup_bytes;
    sum.total_step_time_us += rec.step_time_us;
    sum.migrated_bytes += rec.migrated_bytes;
    sum.migration_us += rec.migration_us;
    sum.used_rows_steps += (uint32_t)rec.used_rows;
    if (opts->on_step)
      opts->on_step(&rec, opts->user);
  }
  uint64_t n = e - b;
  sum.num_steps = n;
  sum.mean_balancedness /= (double)n;
  sum.mean_plan_balancedness /= (double)n;
  sum.mean_step_time_us = sum.total_step_time_us / (double)n;
  qsort(s.bal, (size_t)n, sizeof(double), cmp_double);
  uint64_t rank = (uint64_t)ceil(0.05 * (double)n);
  sum.p5_balancedness = s.bal[rank > 0 ? rank - 1 : 0];
  *out = sum;
done:
  sim_free(&s);
  eplb_plan_destroy(own);
  eplb_loads_destroy(loads);
  eplb__free(take);
  return st;
}
