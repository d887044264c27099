/* sim/sim.h — internal header of the simulator module (cost model and
 * replay). Nothing here is exported. */
#ifndef EPLB_SIM_INTERNAL_H
#define EPLB_SIM_INTERNAL_H

#include "core/core.h"
#include "eplb/sim.h"
#include "planner/planner.h"

/* GB/s to bytes per microsecond. */
#define EPLB__GBPS_TO_BYTES_PER_US 1e3

#include <stdbool.h>

#include "eplb/split.h"

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

/* ---- continuous.c: the runtime's continuous re-placement ---- */
typedef struct eplb__sim_cont eplb__sim_cont_t;
eplb_status_t eplb__sim_cont_create(const eplb_sim_options_t *o, const eplb_plan_t *plan,
                                    eplb__sim_cont_t **out);
void eplb__sim_cont_destroy(eplb__sim_cont_t *c);
/* Layer's slots in flight [R], or NULL when none is. */
const uint8_t *eplb__sim_cont_busy(const eplb__sim_cont_t *c, uint32_t layer);
/* After a step with counts [L][E]: the moves in flight land, the next start
 * (*moved of them); *plan becomes the new target placement when it changed
 * (the caller rebuilds its layout). cnt: scratch [E]. */
eplb_status_t eplb__sim_cont_step(eplb__sim_cont_t *c, const uint32_t *counts, uint32_t *cnt,
                                  eplb_plan_t **plan, uint32_t *moved);
/* The slots the moves started by the last eplb__sim_cont_step receive, by
 * destination GPU (slot_gpu [R]) and link class (gpu_node [G]), as bytes. */
void eplb__sim_cont_rx(const eplb__sim_cont_t *c, const uint32_t *slot_gpu,
                       const uint32_t *gpu_node, double bytes, double *intra, double *inter);

/* cost.c: eplb_cost_model_expert_time of a model already taken (the hot
 * loop's, without its copy). */
double eplb__cost_time(const eplb_cost_model_t *m, double x);
/* setup.c: the caller's options (src; NULL: the defaults) as this library's
 * struct in *dst (common.h, "Struct sizes"). With cost, a copy of the cost
 * model src points to goes there and dst->cost points to it. */
eplb_status_t eplb__sim_options_take(eplb_sim_options_t *dst, eplb_cost_model_t *cost,
                                     const eplb_sim_options_t *src);

typedef struct sim sim_t;
/* route.c: a plan's layout for the hot loop (replica lists, node masses). */
eplb_status_t eplb__sim_layout_build(sim_t *s, const eplb_plan_t *plan);
/* Migration (eplb/sim.h): the bytes s->rx_intra/rx_inter the step receives
 * become rec's migrated bytes, time and exposed time (added to the step
 * time); then they are cleared. */
void eplb__sim_migration(sim_t *s, eplb_sim_step_t *rec);
/* Continuous re-placement from the plan in force *own, and after each step
 * (the moves' bytes go to rx_intra/rx_inter). */
eplb_status_t eplb__sim_cont_setup(sim_t *s, eplb_trace_t *trace, const uint64_t prange[2],
                                   uint64_t b, eplb_plan_t **own);
eplb_status_t eplb__sim_cont_after(sim_t *s, const uint32_t *counts, eplb_plan_t **own);

struct sim {
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
  eplb__sim_cont_t *cont;      /* continuous re-placement, or NULL */
  double *rx_intra, *rx_inter; /* [G] weights the next step receives (bytes) */
  uint32_t *ecount;            /* [E] its scratch */
  /* Per-step output. */
  double *step_gpu_tok, *step_gpu_active; /* [G] */
  double *bal;                            /* [steps] step balancedness */
  /* Plans with node shares: demand per (source node, expert) of the layer. */
  double *ns_dem;  /* [N][E] */
  double *ns_rows; /* [N][E] rows from each node picking e */
  /* Plans without node shares under local-first routing: the per-node shares
   * that routing amounts to, so that the node-share paths cost them. */
  double *lf_ns; /* [N][R] */
  /* Decode (opts->model and gpu; a decode plan with split_per_batch). */
  const eplb_trace_meta_t *meta;
  int decode;  /* re-split layers with eplb_decode_split too */
  int prefill; /* the trace's phase: DeepEP de-duplicates per node */
  eplb_decode_split_options_t dopts;
  double *gpu_act;             /* [G] active replicas of the layer */
  double *save_tok, *save_act; /* [G] the balanced split's, while the decode one is tried */
  double *times;               /* [steps] step times (p99) */
  double step_bound;           /* the last replayed step's bound_step_time_us */
  double bound_read_us;        /* its time of one weight read (0: reads bound nothing) */
  double bound_fixed_us;       /* its launch and kernel latency per layer */
};

/* ---- route.c ---- */
/* Node masses of layer l from the shares in force (traffic_rows' input). */
void eplb__sim_node_mass(sim_t *s, uint32_t l, const double *share);
/* GPU tokens of a layer under global shares into slot_tok/gpu_tok; returns
 * its balancedness. */
double eplb__sim_gpu_loads(sim_t *s, const uint32_t *p2l, const uint32_t *counts,
                           const double *share);
/* Expected traffic of layer l from top-k rows (s->share, node masses). */
void eplb__sim_traffic_rows(sim_t *s, uint32_t l, const eplb_trace_step_t *st, double *cross,
                            double *dedup);
/* Expected traffic when sources are uniform over the GPUs (from gpu_tok). */
void eplb__sim_traffic_uniform(sim_t *s, double *cross, double *dedup);
/* Demand per (source node, expert) of layer l into ns_dem. */
void eplb__sim_ns_demand(sim_t *s, uint32_t l, const eplb_trace_step_t *st, const uint32_t *counts,
                         int rows);
/* GPU tokens from ns_dem routed by node shares ns; returns the balancedness. */
double eplb__sim_ns_loads(sim_t *s, const uint32_t *p2l, const double *ns);
/* The runtime's local-first rule for `share` as node shares ns [N][R]. */
void eplb__sim_local_first(const sim_t *s, uint32_t l, const double *share, double *ns);
/* Traffic from rows (or uniform sources) routed by node shares ns. */
void eplb__sim_ns_traffic_rows(sim_t *s, uint32_t l, const eplb_trace_step_t *st, const double *ns,
                               double *cross, double *dedup);
void eplb__sim_ns_traffic_uniform(sim_t *s, const uint32_t *p2l, const double *ns, double *cross,
                                  double *dedup);

#endif
