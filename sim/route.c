/* sim/route.c — how a layer's tokens are routed to replicas and what they
 * move: a plan's layout (replica lists, node masses), GPU loads under global
 * or per-node shares, the local-first rule as node shares, and the expected
 * all-to-all traffic from top-k rows or from uniform sources (model in
 * eplb/sim.h, "Routing" and "Traffic"). */
#include "sim/sim.h"

#include <string.h>

/* Node masses of layer l from the shares in force. Replicas of an expert are
 * listed in slot order, so replicas on one node are merged with a scan of
 * the (few) entries already written for that expert. */
void eplb__sim_node_mass(sim_t *s, uint32_t l, const double *share) {
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

/* Here rather than in sim.c: continuous.c lays out the plans it switches
 * to as well, and sim.c calls continuous.c. */
eplb_status_t eplb__sim_layout_build(sim_t *s, const eplb_plan_t *plan) {
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
    eplb__sim_node_mass(s, l, eplb_plan_share(plan, l));
  }
  return EPLB_OK;
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
double eplb__sim_gpu_loads(sim_t *s, const uint32_t *p2l, const uint32_t *counts,
                           const double *share) {
  memset(s->gpu_tok, 0, s->G * sizeof(double));
  for (uint32_t r = 0; r < s->R; r++) {
    s->slot_tok[r] = counts[p2l[r]] * share[r];
    s->gpu_tok[s->slot_gpu[r]] += s->slot_tok[r];
  }
  return eplb__balancedness_of(s->gpu_tok, s->G);
}

/* Row i's source GPU: its recorded source rank, or rows dealt round-robin
 * over the GPUs when the trace has none (or an unknown one). */
static uint32_t row_source(const sim_t *s, const eplb_trace_step_t *st, uint32_t i) {
  int32_t sr = st->source_rank ? st->source_rank[i] : -1;
  return sr >= 0 && (uint32_t)sr < s->G ? (uint32_t)sr : i % s->G;
}

/* Expected traffic of layer l from top-k rows. Adds to *cross and *dedup. */
void eplb__sim_traffic_rows(sim_t *s, uint32_t l, const eplb_trace_step_t *st, double *cross,
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
void eplb__sim_traffic_uniform(sim_t *s, double *cross, double *dedup) {
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
void eplb__sim_ns_demand(sim_t *s, uint32_t l, const eplb_trace_step_t *st, const uint32_t *counts,
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
double eplb__sim_ns_loads(sim_t *s, const uint32_t *p2l, const double *ns) {
  uint32_t E = s->E, N = s->N, R = s->R;
  memset(s->gpu_tok, 0, s->G * sizeof(double));
  for (uint32_t r = 0; r < R; r++) {
    double t = 0;
    for (uint32_t n = 0; n < N; n++)
      t += s->ns_dem[(size_t)n * E + p2l[r]] * ns[(size_t)n * R + r];
    s->slot_tok[r] = t;
    s->gpu_tok[s->slot_gpu[r]] += t;
  }
  return eplb__balancedness_of(s->gpu_tok, s->G);
}

/* The runtime's local-first rule (eplb_runtime_map) as node shares of layer
 * l: a token of expert e from node n goes to e's replicas on n with a
 * positive share, those shares renormalised to sum 1, and only when there
 * are none to every replica by `share`. Costing it through the node-share
 * paths keeps one routing rule for every policy: without it the simulator
 * would route a locality plan by node and the others globally, and credit
 * locality with traffic the runtime saves for any plan. */
void eplb__sim_local_first(const sim_t *s, uint32_t l, const double *share, double *ns) {
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
void eplb__sim_ns_traffic_rows(sim_t *s, uint32_t l, const eplb_trace_step_t *st, const double *ns,
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
void eplb__sim_ns_traffic_uniform(sim_t *s, const uint32_t *p2l, const double *ns, double *cross,
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
