/* sim/sim.c — trace replay: per-step balance, all-to-all traffic and time
 * estimates for a fixed plan or a rebalancing policy (model in eplb/sim.h). */
#include "sim/sim.h"

#include "eplb/split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static eplb_status_t oom(void) { return eplb__error(EPLB_ENOMEM, "sim", "out of memory"); }

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
  s->gpu_act = eplb__malloc_array(G, sizeof(double));
  s->save_tok = eplb__malloc_array(G, sizeof(double));
  s->save_act = eplb__malloc_array(G, sizeof(double));
  s->ns_dem = eplb__malloc_array((size_t)N * s->E, sizeof(double));
  s->ns_rows = eplb__malloc_array((size_t)N * s->E, sizeof(double));
  s->lf_ns = eplb__malloc_array((size_t)N * R, sizeof(double));
  s->rx_intra = eplb__calloc(G, sizeof(double));
  s->rx_inter = eplb__calloc(G, sizeof(double));
  if (!s->ns_dem || !s->ns_rows || !s->lf_ns || !s->rx_intra || !s->rx_inter)
    return oom();
  if (!s->slot_gpu || !s->gpu_node || !s->node_gpus || !s->bw_intra || !s->bw_inter || !s->share ||
      !s->slot_tok || !s->gpu_tok || !s->gpu_comp || !s->node_tok || !s->send_intra ||
      !s->send_inter || !s->recv_intra || !s->recv_inter || !s->prod || !s->stamp || !s->touched ||
      !s->wbuf || !s->split_gpu || !s->step_gpu_tok || !s->step_gpu_active || !s->gpu_act ||
      !s->save_tok || !s->save_act)
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
  void *bufs[] = {s->slot_gpu,        s->gpu_node,   s->node_gpus,  s->bw_intra,
                  s->bw_inter,        s->share,      s->slot_tok,   s->gpu_tok,
                  s->gpu_comp,        s->node_tok,   s->send_intra, s->send_inter,
                  s->recv_intra,      s->recv_inter, s->prod,       s->stamp,
                  s->touched,         s->wbuf,       s->split_gpu,  s->step_gpu_tok,
                  s->step_gpu_active, s->bal,        s->gpu_act,    s->save_tok,
                  s->save_act,        s->times};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    eplb__free(bufs[i]);
  eplb__free(s->ns_dem);
  eplb__free(s->ns_rows);
  eplb__free(s->lf_ns);
  eplb__free(s->ecount);
  eplb__free(s->rx_intra);
  eplb__free(s->rx_inter);
  eplb__sim_cont_destroy(s->cont);
  eplb_split_destroy(s->split);
}

/* The runtime's token-balanced per-batch split of layer l: s->share, and
 * *ns / *bal for the routing it is served with. */
static eplb_status_t split_balanced(sim_t *s, uint32_t l, const uint32_t *counts, int rows,
                                    const double **ns, double *bal) {
  const uint32_t *p2l = s->lay.p2l + (size_t)l * s->R;
  const uint8_t *busy = eplb__sim_cont_busy(s->cont, l); /* slots in flight carry nothing */
  int lf = s->opts->local_first;
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
    rc = busy ? eplb_split_solve_in_service(s->split, &pb, busy, &loc, NULL, &res, s->lf_ns, NULL)
              : eplb_split_solve_local(s->split, &pb, &loc, &res, s->lf_ns, NULL);
  } else {
    rc = busy ? eplb_split_solve_in_service(s->split, &pb, busy, NULL, s->wbuf, &res, NULL, NULL)
              : eplb_split_solve(s->split, &pb, s->wbuf, &res);
  }
  if (rc != EPLB_OK)
    return rc;
  if (lf) {
    if (s->N <= 1)
      eplb__sim_local_first(s, l, s->share, s->lf_ns);
    *ns = s->lf_ns;
    *bal = eplb__sim_ns_loads(s, p2l, *ns);
  } else {
    *ns = NULL;
    *bal = eplb__sim_gpu_loads(s, p2l, counts, s->share);
    if (rows) /* the node masses serve only traffic_rows */
      eplb__sim_node_mass(s, l, s->share);
  }
  return EPLB_OK;
}

/* The decode split of layer l (eplb_decode_split), routed like the plan's. */
static eplb_status_t split_decode(sim_t *s, uint32_t l, const uint32_t *counts, int rows,
                                  const double **ns, double *bal) {
  const uint32_t *p2l = s->lay.p2l + (size_t)l * s->R;
  for (uint32_t e = 0; e < s->E; e++)
    s->wbuf[e] = counts[e];
  eplb_split_problem_t pb = {s->E, s->G, s->R, p2l, eplb_plan_slots_per_gpu(s->lay.plan)};
  eplb_status_t rc = eplb_decode_split(s->split, &pb, s->wbuf, s->opts->model, s->opts->gpu,
                                       &s->dopts, s->share, NULL, NULL);
  if (rc != EPLB_OK)
    return rc;
  if (s->opts->local_first) {
    eplb__sim_local_first(s, l, s->share, s->lf_ns);
    *ns = s->lf_ns;
    *bal = eplb__sim_ns_loads(s, p2l, *ns);
  } else {
    *ns = NULL;
    *bal = eplb__sim_gpu_loads(s, p2l, counts, s->share);
    if (rows)
      eplb__sim_node_mass(s, l, s->share);
  }
  return EPLB_OK;
}

/* The GPU of a deployment (a cost model made from descriptions, costed as
 * eplb/model.h does), or NULL for a cost table's additive rule. */
static const eplb_gpu_desc_t *deployment_gpu(const sim_t *s) {
  return s->opts->cost || !s->opts->model ? NULL : s->opts->gpu;
}

/* What one layer costs under the loads in slot_tok/gpu_tok and the routing
 * ns (NULL: s->share): compute, traffic and time; gpu_act gets the active
 * replicas of each GPU. */
typedef struct layer_cost {
  double bal, cross, dedup, t, comp, a2a, max_active;
} layer_cost_t;

static void cost_layer(sim_t *s, uint32_t l, const eplb_trace_step_t *st, int rows,
                       const double *ns, layer_cost_t *o) {
  const eplb_cost_model_t *cm = s->cost;
  const uint32_t *p2l = s->lay.p2l + (size_t)l * s->R;
  double bytes = cm->dispatch_bytes_per_copy + cm->combine_bytes_per_copy;
  memset(s->gpu_comp, 0, s->G * sizeof(double));
  memset(s->gpu_act, 0, s->G * sizeof(double));
  for (uint32_t r = 0; r < s->R; r++)
    if (s->slot_tok[r] > 0) {
      uint32_t g = s->slot_gpu[r];
      s->gpu_comp[g] += eplb__cost_time(cm, s->slot_tok[r]);
      s->gpu_act[g] += 1;
    }
  o->cross = o->dedup = 0;
  if (rows) {
    memset(s->send_intra, 0, s->G * sizeof(double));
    memset(s->send_inter, 0, s->G * sizeof(double));
    memset(s->recv_intra, 0, s->G * sizeof(double));
    memset(s->recv_inter, 0, s->G * sizeof(double));
    if (ns)
      eplb__sim_ns_traffic_rows(s, l, st, ns, &o->cross, &o->dedup);
    else
      eplb__sim_traffic_rows(s, l, st, &o->cross, &o->dedup);
  } else if (ns) {
    eplb__sim_ns_traffic_uniform(s, p2l, ns, &o->cross, &o->dedup);
  } else {
    eplb__sim_traffic_uniform(s, &o->cross, &o->dedup);
  }
  /* Prefill: DeepEP's normal kernels send one copy per (token, remote node)
   * and forward it over NVLink there. */
  double keep = s->prefill && o->cross > 0 ? o->dedup / o->cross : 1;
  /* A deployment (the cost model built from a model and GPU) costs its links
   * as eplb/model.h does, fitted to DeepEP: NVLink and the NIC at once (each
   * side takes the longer of the two), plus the GPU's fixed latency once for
   * the dispatch and once for the combine. A cost table or file keeps the
   * additive rule of eplb/sim.h. */
  const eplb_gpu_desc_t *gd = deployment_gpu(s);
  double lat = gd ? 2 * gd->a2a_latency_us : 0;
  o->t = o->comp = o->a2a = o->max_active = 0;
  for (uint32_t g = 0; g < s->G; g++) {
    if (s->gpu_act[g] > 0)
      s->gpu_comp[g] += cm->launch_us;
    double fwd = s->recv_inter[g] * (1 - keep);
    double si = s->send_intra[g] / s->bw_intra[g], se = s->send_inter[g] * keep / s->bw_inter[g];
    double ri = (s->recv_intra[g] + fwd) / s->bw_intra[g];
    double re = (s->recv_inter[g] - fwd) / s->bw_inter[g];
    double snd = gd ? fmax(si, se) : si + se, rcv = gd ? fmax(ri, re) : ri + re;
    double a2a = lat + bytes * (snd > rcv ? snd : rcv);
    double t = s->gpu_comp[g] + a2a;
    o->t = t > o->t ? t : o->t;
    o->comp = s->gpu_comp[g] > o->comp ? s->gpu_comp[g] : o->comp;
    o->a2a = a2a > o->a2a ? a2a : o->a2a;
    o->max_active = s->gpu_act[g] > o->max_active ? s->gpu_act[g] : o->max_active;
  }
}

/* Replays layer l of a step into *o (gpu_tok and gpu_act hold its GPUs'
 * tokens and active replicas; *pbal the balancedness of the plan's shares). */
static eplb_status_t replay_layer(sim_t *s, uint32_t l, const eplb_trace_step_t *st, int rows,
                                  double *pbal, layer_cost_t *o) {
  const uint32_t *counts = st->counts + (size_t)l * s->E;
  const double *pshare = eplb_plan_share(s->lay.plan, l);
  const uint32_t *p2l = s->lay.p2l + (size_t)l * s->R;
  /* The plan's routing: its node shares, else local-first, else global. */
  const double *ns = eplb_plan_node_share(s->lay.plan, l);
  int lf = s->opts->local_first;
  if (ns || lf)
    eplb__sim_ns_demand(s, l, st, counts, rows);
  if (!ns && lf) {
    eplb__sim_local_first(s, l, pshare, s->lf_ns);
    ns = s->lf_ns;
  }
  *pbal = ns ? eplb__sim_ns_loads(s, p2l, ns) : eplb__sim_gpu_loads(s, p2l, counts, pshare);
  double bal = *pbal;
  eplb_status_t rc;
  if (s->split && (rc = split_balanced(s, l, counts, rows, &ns, &bal)) != EPLB_OK)
    return rc;
  if (!s->split)
    memcpy(s->share, pshare, s->R * sizeof(double));
  cost_layer(s, l, st, rows, ns, o);
  o->bal = bal;
  if (!s->split || !s->decode)
    return EPLB_OK;
  /* Decode: the decode split where it models faster than the balanced one. */
  layer_cost_t d;
  memcpy(s->save_tok, s->gpu_tok, s->G * sizeof(double));
  memcpy(s->save_act, s->gpu_act, s->G * sizeof(double));
  if ((rc = split_decode(s, l, counts, rows, &ns, &bal)) != EPLB_OK)
    return rc;
  cost_layer(s, l, st, rows, ns, &d);
  d.bal = bal;
  if (d.t < o->t) {
    *o = d;
  } else {
    memcpy(s->gpu_tok, s->save_tok, s->G * sizeof(double));
    memcpy(s->gpu_act, s->save_act, s->G * sizeof(double));
  }
  return EPLB_OK;
}

/* Decode: a decode plan re-split per batch needs the deployment; the split's
 * all-to-all term is the model's per-token receive time for this cluster
 * (nodes of G / nodes GPUs). */
static eplb_status_t decode_setup(sim_t *s, const eplb_plan_t *plan, uint32_t nodes) {
  const eplb_trace_meta_t *m = s->meta;
  s->prefill = m && m->phase == EPLB_PHASE_PREFILL;
  s->decode = s->split && eplb_plan_policy(plan) == EPLB_POLICY_DECODE;
  if (!s->decode)
    return EPLB_OK;
  if (!s->opts->model || !s->opts->gpu)
    return eplb__error(EPLB_EINVAL, "sim", "the decode split needs a model and a GPU");
  uint32_t gpn = nodes && s->G % nodes == 0 ? s->G / nodes : s->G;
  eplb_decode_split_options_default(&s->dopts);
  eplb_decode_split_options_for(s->opts->model, s->opts->gpu, s->G, gpn, &s->dopts);
  s->dopts.launch_us = s->cost->launch_us; /* a cost file's, when one is given */
  return EPLB_OK;
}

/* eplb_sim_summary_t's bound_step_time_us, per run: a GPU that holds
 * ceil(A / G) of a layer's A experts with tokens reads that many weights.
 * The fewest tokens an active replica gets is above 0, and a table whose
 * times fall somewhere as tokens rise bounds nothing below its first point:
 * the weight reads then count 0. */
static void bound_setup(sim_t *s) {
  const eplb_cost_model_t *cm = s->cost;
  bool rising = true;
  for (uint32_t i = 1; i < cm->num_points; i++)
    rising = rising && cm->time_us[i] >= cm->time_us[i - 1];
  const eplb_gpu_desc_t *gd = deployment_gpu(s);
  s->bound_read_us = rising ? cm->time_us[0] : 0;
  s->bound_fixed_us = cm->launch_us + (gd ? 2 * gd->a2a_latency_us : 0);
}

/* The bound's share of layer l of a step (counts of the layer). */
static double layer_bound(const sim_t *s, const uint32_t *counts) {
  uint32_t A = 0;
  for (uint32_t e = 0; e < s->E; e++)
    A += counts[e] > 0;
  return A ? (double)((A + s->G - 1) / s->G) * s->bound_read_us + s->bound_fixed_us : 0;
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
  s->step_bound = 0;
  for (uint32_t l = 0; l < s->L; l++) {
    s->step_bound += layer_bound(s, st->counts + (size_t)l * s->E);
    layer_cost_t o;
    double pbal;
    eplb_status_t rc = replay_layer(s, l, st, rows, &pbal, &o);
    if (rc != EPLB_OK)
      return rc;
    rec->plan_balancedness += pbal;
    rec->balancedness += o.bal;
    rec->min_balancedness = o.bal < rec->min_balancedness ? o.bal : rec->min_balancedness;
    for (uint32_t g = 0; g < s->G; g++) {
      s->step_gpu_tok[g] += s->gpu_tok[g];
      s->step_gpu_active[g] += s->gpu_act[g];
    }
    rec->cross_node_copies += o.cross;
    rec->dedup_copies += o.dedup;
    rec->step_time_us += o.t;
    rec->compute_us += o.comp;
    rec->a2a_us += o.a2a;
    rec->max_active += o.max_active;
  }
  rec->balancedness /= s->L;
  rec->plan_balancedness /= s->L;
  rec->max_active /= s->L;
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
  if (o->rebalance_every && pe > scored[0])
    return eplb__error(EPLB_EINVAL, "sim",
                       "plan steps %llu:%llu and rebalancing every %llu steps: replans are made "
                       "from the steps before them, so the first plan's steps must come before "
                       "the scored ones",
                       pb, pe, (unsigned long long)o->rebalance_every);
  return EPLB_OK;
}

eplb_status_t eplb_sim_steps(const eplb_sim_options_t *opts, uint64_t num_steps, int fixed_plan,
                             uint64_t plan_steps[2], uint64_t scored_steps[2]) {
  uint64_t p[2], c[2];
  if (!opts || !plan_steps || !scored_steps)
    return eplb__error(EPLB_EINVAL, "sim", "NULL options or output");
  eplb_sim_options_t o;
  eplb_status_t st = eplb__sim_options_take(&o, NULL, opts);
  if (st != EPLB_OK)
    return st;
  opts = &o;
  st = resolve_steps(opts, num_steps, fixed_plan, p, c);
  if (st == EPLB_OK) {
    memcpy(plan_steps, p, sizeof p);
    memcpy(scored_steps, c, sizeof c);
  }
  return st;
}

/* Adds a scored step to the summary. */
static void sum_add(eplb_sim_summary_t *sum, const eplb_sim_step_t *rec) {
  sum->mean_max_active += rec->max_active;
  sum->mean_balancedness += rec->balancedness;
  sum->mean_plan_balancedness += rec->plan_balancedness;
  sum->min_balancedness =
      rec->min_balancedness < sum->min_balancedness ? rec->min_balancedness : sum->min_balancedness;
  sum->cross_node_copies += rec->cross_node_copies;
  sum->dedup_copies += rec->dedup_copies;
  sum->cross_node_bytes += rec->cross_node_bytes;
  sum->dedup_bytes += rec->dedup_bytes;
  sum->total_step_time_us += rec->step_time_us;
  sum->migrated_bytes += rec->migrated_bytes;
  sum->migration_us += rec->migration_us;
  sum->migration_exposed_us += rec->migration_exposed_us;
  sum->used_rows_steps += (uint32_t)rec->used_rows;
}

/* Means and percentiles (nearest rank) over the n scored steps. */
static void sum_finish(eplb_sim_summary_t *sum, sim_t *s, uint64_t n) {
  sum->num_steps = n;
  sum->mean_balancedness /= (double)n;
  sum->mean_plan_balancedness /= (double)n;
  sum->mean_step_time_us = sum->total_step_time_us / (double)n;
  sum->mean_max_active /= (double)n;
  sum->bound_step_time_us /= (double)n;
  qsort(s->bal, (size_t)n, sizeof(double), cmp_double);
  uint64_t rank = (uint64_t)ceil(0.05 * (double)n);
  sum->p5_balancedness = s->bal[rank > 0 ? rank - 1 : 0];
  qsort(s->times, (size_t)n, sizeof(double), cmp_double);
  rank = (uint64_t)ceil(0.99 * (double)n);
  sum->p99_step_time_us = s->times[rank > 0 ? rank - 1 : 0];
}

/* A replan from steps [begin, end) of the trace, switched layer by layer by
 * the runtime's rule; *own becomes the plan in force and the next step
 * receives the weights it moves. */
typedef struct replan {
  eplb_trace_t *trace;
  eplb_plan_options_t *po;
  eplb_plan_switch_options_t *sw;
  eplb_loads_t *loads;
  uint8_t *take;
  uint64_t begin, end;
} replan_t;

static eplb_status_t replan(sim_t *s, const replan_t *rp, eplb_plan_t **own) {
  eplb_plan_t *np = NULL;
  eplb_plan_switch_summary_t ss;
  eplb_status_t st;
  rp->po->decode_steps = rp->sw->decode_steps = (double)(rp->end - rp->begin);
  if ((st = eplb_plan_create_from_trace(rp->trace, rp->begin, rp->end, rp->po, *own, rp->loads,
                                        &np)) != EPLB_OK ||
      (st = eplb_plan_switch_select(*own, np, rp->loads, rp->sw, rp->take, &ss)) != EPLB_OK ||
      (st = eplb_plan_switch_apply(np, *own, rp->take)) != EPLB_OK) {
    eplb_plan_destroy(np);
    return st;
  }
  /* The switched slots' bytes, by link class, spread over the GPUs. */
  eplb_plan_diff_stats_t ds;
  if ((st = eplb_plan_diff(*own, np, 1, 0, &ds)) != EPLB_OK) {
    eplb_plan_destroy(np);
    return st;
  }
  for (uint32_t g = 0; g < s->G; g++) {
    s->rx_intra[g] += (double)ds.moves[EPLB_LINK_INTRA_NODE] * s->cost->bytes_per_expert / s->G;
    s->rx_inter[g] += (double)ds.moves[EPLB_LINK_INTER_NODE] * s->cost->bytes_per_expert / s->G;
  }
  eplb_plan_destroy(*own);
  *own = np;
  return eplb__sim_layout_build(s, np);
}

/* The options' own checks, and the cost model: opts->cost, else the
 * deployment's (model and GPU), else the default table, into *dcost. */
eplb_status_t eplb_sim_options_check(const eplb_sim_options_t *opts) {
  if (!opts)
    return eplb__error(EPLB_EINVAL, "sim", "sim options: NULL");
  eplb_sim_options_t o;
  eplb_cost_model_t cost;
  eplb_status_t st = eplb__sim_options_take(&o, &cost, opts);
  if (st != EPLB_OK)
    return st;
  opts = &o;
  if (!(opts->split_tolerance >= 0 && opts->split_tolerance <= 1))
    return eplb__error(EPLB_EINVAL, "sim", "split_tolerance %g: must be in [0, 1]",
                       opts->split_tolerance);
  if (isnan(opts->gain_threshold))
    return eplb__error(EPLB_EINVAL, "sim", "gain_threshold %g: must be a number",
                       opts->gain_threshold);
  if (opts->continuous_window &&
      (!opts->split_per_batch || opts->rebalance_every || opts->continuous_lag > 1 ||
       opts->continuous_copy_steps > 1 || opts->plan.policy == EPLB_POLICY_DECODE))
    return eplb__error(EPLB_EINVAL, "sim",
                       "continuous_window %u: needs split_per_batch, no rebalance_every, "
                       "continuous_lag and continuous_copy_steps 0 or 1 and a policy other "
                       "than decode",
                       opts->continuous_window);
  if (!(opts->step_moves.move_weight >= 0))
    return eplb__error(EPLB_EINVAL, "sim", "step_moves.move_weight %g: must be >= 0",
                       opts->step_moves.move_weight);
  return eplb_plan_options_check(&opts->plan);
}

static eplb_status_t check_options(const eplb_sim_options_t *opts, const eplb_cluster_t *cl,
                                   eplb_cost_model_t *dcost) {
  eplb_status_t st;
  eplb_cost_model_default(dcost);
  if (!opts->cost && opts->model && opts->gpu &&
      (st = eplb_cost_model_from_desc(opts->model, opts->gpu, dcost)) != EPLB_OK)
    return st;
  if ((st = eplb_cost_model_check(opts->cost ? opts->cost : dcost)) != EPLB_OK)
    return st;
  if ((st = eplb_sim_options_check(opts)) != EPLB_OK)
    return st;
  if (eplb_cluster_num_gpus(cl) == 0 || eplb_cluster_num_nodes(cl) == 0)
    return eplb__error(EPLB_EINVAL, "sim", "cluster has no GPUs");
  return EPLB_OK;
}

/* The options of the plans the simulator makes itself: the cluster's GPUs
 * and nodes, the deployment, the plan window's steps; a decode plan's layers
 * switch on its own objective, modelled time. */
static void own_plan_options(const sim_t *s, const eplb_cluster_t *cluster,
                             const uint64_t prange[2], eplb_plan_options_t *po,
                             eplb_plan_switch_options_t *sw) {
  po->num_gpus = s->G;
  po->model = s->opts->model;
  po->gpu = s->opts->gpu;
  po->decode_steps = (double)(prange[1] - prange[0]);
  po->num_nodes = nodes_alike(cluster) ? s->N : 1;
  /* The plans are made for the way this run serves them. */
  po->serve = s->opts->split_per_batch ? EPLB_SERVE_SPLIT : EPLB_SERVE_SHARES;
  if (po->policy == EPLB_POLICY_DECODE) {
    sw->model = s->opts->model;
    sw->gpu = s->opts->gpu;
    sw->gpus_per_node = s->G / po->num_nodes;
  }
  if (!po->cluster)
    po->cluster = cluster;
}

/* Replays step t into *rec: the migration continuous re-placement started
 * before it, then, after it, the next moves. */
static eplb_status_t run_step(sim_t *s, eplb_trace_t *trace, uint64_t t, eplb_plan_t **own,
                              eplb_sim_step_t *rec) {
  eplb_trace_step_t ts;
  eplb_status_t st = eplb_trace_read_step(trace, t, &ts);
  if (st != EPLB_OK)
    return st;
  rec->step = t;
  rec->num_tokens = ts.num_tokens;
  if ((st = replay_step(s, &ts, rec)) != EPLB_OK)
    return st;
  eplb__sim_migration(s, rec);
  return s->cont ? eplb__sim_cont_after(s, ts.counts, own) : EPLB_OK;
}

eplb_status_t eplb_sim_run(eplb_trace_t *trace, const eplb_cluster_t *cluster,
                           const eplb_plan_t *plan, const eplb_sim_options_t *opts,
                           eplb_sim_summary_t *out) {
  eplb_sim_options_t taken;
  eplb_cost_model_t dcost, cost;
  sim_t s;
  memset(&s, 0, sizeof s);
  eplb_plan_t *own = NULL;
  eplb_loads_t *loads = NULL;
  uint8_t *take = NULL; /* layers of a new plan that switch */
  eplb_sim_summary_t sum;
  memset(&sum, 0, sizeof sum);
  eplb_status_t st = EPLB_OK;
  if (!trace || !cluster || !out || (!plan && !opts)) {
    st = eplb__error(EPLB_EINVAL, "sim", "NULL trace, cluster, summary or plan");
    goto done;
  }
  if ((st = eplb__sim_options_take(&taken, &cost, opts)) != EPLB_OK)
    goto done;
  opts = &taken;
  if ((st = check_options(opts, cluster, &dcost)) != EPLB_OK)
    goto done;
  s.cost = opts->cost ? opts->cost : &dcost;
  s.opts = opts;
  const eplb_trace_meta_t *meta = eplb_trace_meta(trace);
  s.meta = meta;
  s.L = meta->num_layers;
  s.E = meta->num_experts;
  s.k = meta->topk;
  s.G = eplb_cluster_num_gpus(cluster);
  s.N = eplb_cluster_num_nodes(cluster);
  uint64_t prange[2] = {0, 0}, srange[2] = {0, 0}; /* set on EPLB_OK; zeroed for -O2 -Werror */
  if ((st = resolve_steps(opts, eplb_trace_num_steps(trace), plan != NULL, prange, srange)) !=
      EPLB_OK)
    goto done;
  uint64_t b = srange[0], e = srange[1];

  eplb_plan_options_t po = opts->plan;
  uint64_t K = opts->rebalance_every, W = opts->window ? opts->window : K;
  eplb_plan_switch_options_t sw;
  eplb_plan_switch_options_default(&sw);
  sw.gain_threshold = opts->gain_threshold;
  sw.move_budget = opts->move_budget;
  replan_t rp = {trace, &po, &sw, NULL, NULL, 0, 0};
  if (!plan) {
    own_plan_options(&s, cluster, prange, &po, &sw);
    if ((st = eplb_loads_create(s.L, s.E, &loads)) != EPLB_OK)
      goto done;
    if (!(take = eplb__calloc(s.L, 1))) {
      st = oom();
      goto done;
    }
    rp.loads = loads;
    rp.take = take;
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
  slot_gpus(&s, plan);
  if ((st = eplb__sim_layout_build(&s, plan)) != EPLB_OK)
    goto done;
  if (opts->split_per_batch && (st = eplb_split_create(NULL, &s.split)) != EPLB_OK)
    goto done;
  if ((st = decode_setup(&s, plan, nodes_alike(cluster) ? s.N : 1)) != EPLB_OK)
    goto done;
  if (opts->continuous_window && (st = eplb__sim_cont_setup(&s, trace, prange, b, &own)) != EPLB_OK)
    goto done;
  bound_setup(&s);
  s.times = eplb__malloc_array((size_t)(e - b), sizeof(double));
  if (!s.times || !(s.bal = eplb__malloc_array((size_t)(e - b), sizeof(double)))) {
    st = oom();
    goto done;
  }
  sum.num_plans = 1;
  sum.min_balancedness = 1;
  for (uint64_t t = b; t < e; t++) {
    eplb_sim_step_t rec;
    memset(&rec, 0, sizeof rec);
    if (own && K > 0 && t > b && (t - b) % K == 0) {
      /* Held out, every step before t is the past; else the replayed range's. */
      uint64_t first = opts->plan_step_end ? 0 : b;
      rp.begin = t - first >= W ? t - W : first;
      rp.end = t;
      if ((st = replan(&s, &rp, &own)) != EPLB_OK)
        goto done;
      plan = own;
      sum.num_plans++;
    }
    if ((st = run_step(&s, trace, t, &own, &rec)) != EPLB_OK)
      goto done;
    s.bal[t - b] = rec.balancedness;
    s.times[t - b] = rec.step_time_us;
    sum_add(&sum, &rec);
    sum.bound_step_time_us += s.step_bound;
    if (opts->on_step)
      opts->on_step(&rec, opts->user);
  }
  sum_finish(&sum, &s, e - b);
  *out = sum;
done:
  sim_free(&s);
  eplb_plan_destroy(own);
  eplb_loads_destroy(loads);
  eplb__free(take);
  return st;
}
