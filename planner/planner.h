/* planner/planner.h — internal header of the planner module. */
#ifndef EPLB_PLANNER_H
#define EPLB_PLANNER_H

#include "core/core.h"
#include "eplb/topo.h"
#include "eplb/plan.h"
#include "eplb/split.h"

#include <stdbool.h>

struct eplb_plan {
  eplb_plan_policy_t policy;
  uint32_t num_layers, num_experts, num_gpus, num_nodes, num_slots, num_groups;
  int keep_groups;
  uint32_t *slots_per_gpu;            /* [G] */
  uint32_t *gpu_first;                /* [G+1] first slot of each GPU */
  int32_t *phy2log;                   /* [L][R] */
  double *share;                      /* [L][R] */
  double *gpu_load;                   /* [L][G] */
  eplb_plan_layer_metrics_t *metrics; /* [L] */
  double seconds;
  double *node_share; /* [L][ns_nodes][R] per-source-node shares, or NULL (locality) */
  uint32_t ns_nodes;
  /* [L][R] which copy of its expert each slot is, in DeepSeek's replica order
   * (deepseek plans, so that log2phy matches the reference); NULL: slot order. */
  uint32_t *replica_rank;
  /* Lower bounds are eplb__uniform_bound's (balanced planned for uniform
   * shares): valid only for plans that split evenly, and tighter there. */
  bool uniform_bound;
};

/* One layer's problem: loads w[E], GPUs with their slot ranges. */
typedef struct eplb__layer_ctx {
  const double *w;
  uint32_t num_experts, num_gpus, num_nodes, num_slots, num_groups;
  const uint32_t *slots_per_gpu; /* [G] */
  const uint32_t *gpu_first;     /* [G+1] */
  int keep_groups;
  bool online;       /* EPLB_EFFORT_ONLINE: uniform.c skips its deep search */
  bool bound_unused; /* the caller drops a lower_bound uniform.c raises: it is
                        computed only where the count start aims from it */
  /* Served by the plan's own shares (EPLB_SERVE_SHARES, robust shares), not
   * split per batch: balanced_line.c's start is for the split. */
  bool static_shares;
  uint32_t improve_iterations;
  eplb_split_t *split; /* exact split solver (lp/), required for exact shares */
  /* eplb__lower_bound of this context, set by whoever builds it once the
   * fields above are (under keep_groups it costs a search, so the policies
   * read it here instead of recomputing it). */
  double lower_bound;
} eplb__layer_ctx_t;

/* ---- plan_core.c: the plan object the policies share (they call these,
 * plan.c calls them: kept out of plan.c so that no call cycle runs through
 * it) ---- */
/* The layer context of plan p for loads w[E] (lower_bound 0, no split). */
void eplb__plan_layer_ctx(const eplb_plan_t *p, const double *w, eplb__layer_ctx_t *c);
/* Allocates a plan of the given shape (arrays zeroed) with slots copied (or
 * R/G each when slots is NULL). */
eplb_status_t eplb__plan_alloc(uint32_t L, uint32_t E, uint32_t G, uint32_t N, uint32_t R,
                               const uint32_t *slots, eplb_plan_t **out);

/* Recomputes gpu_load and metrics of one layer from loads w[E]; lower_bound
 * is the layer's eplb__lower_bound (it depends only on w and the plan's
 * shape, not on the placement). */
void eplb__plan_layer_metrics(eplb_plan_t *plan, uint32_t layer, const double *w,
                              double lower_bound);

/* Checks phy2log/share of one layer (ids in range, every expert has a
 * replica, shares >= 0 and summing to 1 per expert). */
eplb_status_t eplb__plan_check_layer(const eplb_plan_t *plan, uint32_t layer, const char *what);

/* ---- plans from arrays: how the runtime (its live plan, eplbd's mailbox
 * block) gets a plan without writing the plan struct itself (#19). ---- */
typedef struct eplb__plan_shape {
  uint32_t layers, experts, gpus, nodes, slots;
  const uint32_t *slots_per_gpu; /* [gpus]; NULL: slots / gpus each */
} eplb__plan_shape_t;
/* A plan of `shape` and `policy` whose placement and shares are copies of
 * phy2log and share [layers][slots]; metrics stay zero until
 * eplb_plan_evaluate. With `check` non-NULL every layer is validated as a
 * plan file's is (eplb__plan_check_layer, its detail naming `check`). */
eplb_status_t eplb__plan_from_arrays(const eplb__plan_shape_t *shape, eplb_plan_policy_t policy,
                                     const int32_t *phy2log, const double *share, const char *check,
                                     eplb_plan_t **out);

/* Max of a layer's GPU loads for the given phy2log/share. */
double eplb__layer_max_load(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                            const double *share, double *gpu_load);

/* A value with its index, sorted by eplb__ranked_desc: value descending,
 * ties by index ascending (a total order, so the same on every libc). */
typedef struct eplb__ranked {
  double v;
  uint32_t i;
} eplb__ranked_t;
int eplb__ranked_desc(const void *a, const void *b);

/* ---- gpu_heap.c ---- */
/* GPUs in a min-heap on (load, index) (load is read, not owned), with
 * their places: heap [ng] and pos [ng] (UINT32_MAX: not in it) are the
 * caller's. The top, heap[0], is what a scan for the least load, first by
 * index, finds; n GPUs are in it. */
typedef struct eplb__gpu_heap {
  const double *load;
  uint32_t *heap, *pos, n;
} eplb__gpu_heap_t;
bool eplb__gpu_heap_less(const double *load, uint32_t a, uint32_t b);
void eplb__gpu_heap_init(eplb__gpu_heap_t *h, const double *load, uint32_t *heap, uint32_t *pos,
                         uint32_t ng);
void eplb__gpu_heap_push(eplb__gpu_heap_t *h, uint32_t g);
void eplb__gpu_heap_remove(eplb__gpu_heap_t *h, uint32_t g);
uint32_t eplb__gpu_heap_pop(eplb__gpu_heap_t *h); /* the top, removed; n > 0 */
/* After load[g] of a GPU in the heap rose. */
void eplb__gpu_heap_raised(eplb__gpu_heap_t *h, uint32_t g);

/* ---- bounds.c ---- */
/* Min-max replication: cnt[i] (>= 1, sum = slots) minimising max w[i]/cnt[i]
 * over the n experts of `ids` (NULL: 0..n-1). Returns that max. work needs n
 * uint32. */
double eplb__replicate(const double *w, const uint32_t *ids, uint32_t n, uint32_t slots,
                       uint32_t *cnt, uint32_t *work);
/* The replicas of the experts ids[0..n) (not NULL) with counts cnt [n],
 * each weighing w / cnt, in reps heaviest first (eplb__ranked_desc), the
 * order the packings place them in. Returns their number (the sum of cnt;
 * reps holds that many). */
uint32_t eplb__ranked_replicas(const double *w, const uint32_t *ids, uint32_t n,
                               const uint32_t *cnt, eplb__ranked_t *reps);
/* keep_groups: ctx's K = num_groups groups of gs = E/K consecutive experts
 * and N = num_nodes nodes of gpn = G/N GPUs, with an assignment of groups to
 * nodes. Shared by balanced's group placement and the bound's search. */
typedef struct eplb__groups {
  const eplb__layer_ctx_t *ctx;
  uint32_t K, N, gs, gpn;
  double *gload;              /* [K] each group's load, summed in expert order */
  uint32_t *order;            /* [K] groups heaviest first, ties by index */
  uint32_t *node_of;          /* [K] each group's node, UINT32_MAX: none */
  uint32_t *ids, *cnt, *work; /* [E] scratch */
} eplb__groups_t;
/* Allocates g's arrays and fills gload and order (node_of all UINT32_MAX).
 * false: no memory (nothing left to free). */
bool eplb__groups_init(eplb__groups_t *g, const eplb__layer_ctx_t *ctx);
void eplb__groups_free(eplb__groups_t *g);
/* Slots of node n. */
uint32_t eplb__groups_node_slots(const eplb__groups_t *g, uint32_t n);
/* f(n): no plan's busiest GPU of node n (holding the groups with node_of ==
 * n) is below its mean GPU load nor below the min-max per-replica load of
 * its experts over its slots (0 for a node without groups). */
double eplb__groups_node_bound(eplb__groups_t *g, uint32_t n);
/* keep_groups: the group-to-node assignment minimising the max over nodes
 * of a node's bound (mean GPU load, min-max per-replica load over its
 * slots), by depth-first search with a budget; seed [K] (or NULL) is a
 * known assignment. out [K] (or NULL) receives the best found. *exact: the
 * search finished, so the value bounds every plan that keeps groups on
 * nodes. Returns -1 when nothing was found (no memory, K < N). */
double eplb__group_search(const eplb__layer_ctx_t *ctx, const uint32_t *seed, uint32_t *out,
                          bool *exact);
/* The layer's lower bound (see plan.h). */
double eplb__lower_bound(const eplb__layer_ctx_t *ctx);

/* The largest total load of one layer: sums, products with replica counts
 * (<= 2^16) and the split's flows stay finite below it (2^1000, 1.07e301). */
#define EPLB__MAX_LAYER_LOAD 0x1p1000
/* EPLB_EFORMAT naming the first layer whose loads sum above
 * EPLB__MAX_LAYER_LOAD (or overflow): every metric is then finite. */
eplb_status_t eplb__check_layer_sums(const eplb_loads_t *loads, const char *what);
/* k such that 2^k x the largest of w[n] is about 1 when that is tiny (below
 * 2^-900, subnormal loads), else 0: metrics of such a layer are computed
 * scaled, so that share x load does not underflow. */
int eplb__load_scale(const double *w, uint32_t n);

/* ---- deepseek.c ---- */
/* DeepSeek EPLB for one layer: phy2log[R] exactly as rebalance_experts
 * (float32 arithmetic). Uniform slots required. */
eplb_status_t eplb__deepseek_layer(const eplb__layer_ctx_t *ctx, int32_t *phy2log);
/* The same, also writing replica_rank[R] (or NULL): the reference's phyrank,
 * the order in which replicate_experts made each expert's replicas. */
eplb_status_t eplb__deepseek_layer_rank(const eplb__layer_ctx_t *ctx, int32_t *phy2log,
                                        uint32_t *replica_rank);

/* ---- share.c ---- */
/* Exact token shares over a fixed placement (min max GPU load). Returns the
 * optimal max GPU load and fills share[R]. */
eplb_status_t eplb__split_shares(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                                 double *share, double *max_load);
/* The same with lp/'s solver (ctx->split required), also returning the GPU
 * loads [G] and the bottleneck set: GPUs [G] and experts [E] (1 = in it).
 * share NULL: the loads, max load and set only (a search's kept steps). */
eplb_status_t eplb__split_bottleneck(const eplb__layer_ctx_t *ctx, const int32_t *phy2log,
                                     double *share, double *max_load, double *gpu_load,
                                     uint8_t *gpus, uint8_t *experts);
/* Uniform shares 1/logcnt. */
void eplb__uniform_shares(uint32_t E, uint32_t R, const int32_t *phy2log, double *share);

/* ---- balanced.c ---- */
eplb_status_t eplb__balanced_layer(const eplb__layer_ctx_t *ctx, int32_t *phy2log, double *share,
                                   int *fallback);

/* ---- balanced_line.c: balanced's start on GPUs of two slots ---- */
/* Whether the layer is one it plans: every GPU two slots, 2 <= E <= 2G,
 * groups not kept on nodes, served split per batch. */
bool eplb__balanced_line_apply(const eplb__layer_ctx_t *ctx);
/* Experts laid end to end on a line cut into GPUs, the light ones on GPUs
 * inside a heavy one's stretch, into p2l[2G] (*ok: they fit at a max load
 * within 6.4% of the mean; shares are the caller's split). */
eplb_status_t eplb__balanced_line(const eplb__layer_ctx_t *ctx, int32_t *p2l, bool *ok);

/* ---- balanced_refine.c ---- */
/* Local search on the placement p2l [R] under exact shares, guided by the
 * split's bottleneck set, within ctx's improve_iterations budget of
 * solves; share [R] and *mx (the max GPU load) are the placement's exact
 * shares before and after. Needs ctx->split (none: nothing done). */
eplb_status_t eplb__balanced_refine(const eplb__layer_ctx_t *ctx, int32_t *p2l, double *share,
                                    double *mx);
/* The load of the expert mask set [E] (summed in expert order, as
 * eplb__split_ratio sums it, so w / ng is its ratio to the bit) and the
 * number of GPUs of p2l holding one of its experts. */
void eplb__set_sums(const eplb__layer_ctx_t *ctx, const int32_t *p2l, const uint8_t *set, double *w,
                    uint32_t *ng);
/* That GPU count after slots a (on GPU g) and b (on GPU h) of p2l were
 * swapped, from ng before: only g's and h's membership can change, so a
 * search trying swaps corrects its sets' counts instead of recounting.
 * p2l holds the swap; it is read, and restored, with the swap undone. */
uint32_t eplb__set_gpus_after_swap(const eplb__layer_ctx_t *ctx, int32_t *p2l, const uint8_t *set,
                                   uint32_t ng, uint32_t g, uint32_t h, uint32_t a, uint32_t b);

/* ---- uniform.c ---- */
/* balanced under uniform shares: counts and placement for per-replica load
 * w/c, never worse than DeepSeek's placement where its algorithm applies
 * (*fallback = 1 when the result grew from DeepSeek's placement). share
 * receives 1/c. A layer more than 0.1% above ctx->lower_bound raises it to
 * eplb__uniform_bound (the certificate of a uniform-share plan). */
eplb_status_t eplb__uniform_layer(eplb__layer_ctx_t *ctx, int32_t *phy2log, double *share,
                                  int *fallback);

/* ---- uniform_pack.c: uniform.c's start placements ---- */
/* Experts ids[0..n) with counts (NULL: min-max counts of their loads) packed
 * heaviest replica first onto the least-loaded of GPUs g0..g0+ng-1 into p2l;
 * *max_load the busiest GPU's load. */
eplb_status_t eplb__uniform_pack(const eplb__layer_ctx_t *ctx, const uint32_t *ids, uint32_t n,
                                 uint32_t g0, uint32_t ng, const uint32_t *counts, int32_t *p2l,
                                 double *max_load);
/* The best of the starts from counts aimed at loads from the bound up into
 * p2l (*ok: one was found); ids, cnt, tmp are scratch. */
eplb_status_t eplb__uniform_count_start(const eplb__layer_ctx_t *ctx, uint32_t *ids, uint32_t *cnt,
                                        int32_t *tmp, int32_t *p2l, bool *ok);
/* Groups kept on nodes, then packed per node (*ok: the layer can keep them). */
eplb_status_t eplb__uniform_pack_grouped(const eplb__layer_ctx_t *ctx, int32_t *p2l, bool *ok);

/* ---- uniform_pairs.c: the start for GPUs of two slots ---- */
/* Whether the layer is one it plans: every GPU two slots, E <= 2G. */
bool eplb__uniform_pairs_apply(const eplb__layer_ctx_t *ctx);
/* Counts grown and polished for the sorted pairing of replicas, paired into
 * p2l[2G] (*ok: every GPU holds two experts). */
eplb_status_t eplb__uniform_pairs_start(const eplb__layer_ctx_t *ctx, int32_t *p2l, bool *ok);

/* ---- bounds_uniform.c ---- */
/* A lower bound on the max GPU load of every plan with uniform shares (any
 * counts, any placement within the slots; so also those keeping groups on
 * nodes), given a bound lo and a load hi some uniform plan reaches: the
 * largest L in [lo, hi) at which a bisection to 1e-6 relative refuted a
 * relaxation of "every GPU load <= L" (lo when none was). */
double eplb__uniform_bound(const eplb__layer_ctx_t *ctx, double lo, double hi);
/* The same with the integer knapsack over counts switched on or off (off:
 * the LP relaxation alone, the bound before #15; for the tests). */
double eplb__uniform_bound_ex(const eplb__layer_ctx_t *ctx, double lo, double hi, bool integral);

/* ---- mip.c: the placement MIP of lp/mip_place.c on one layer ---- */
/* Improves the plan phy2log/share (balanced's) until eplb__now() reaches
 * deadline (0: none), which bounds every stage (exact search, swaps, root LP,
 * branch and cut); returns EPLB_ETIMEOUT when the result is not proven. */
eplb_status_t eplb__mip_layer(const eplb__layer_ctx_t *ctx, double deadline, int32_t *phy2log,
                              double *share, double *gap);

/* ---- partition.c: exact makespan without spare slots (R == E) ---- */
/* Min-max partition of items w[E] into G bins holding exactly card[g] items
 * each (sum = E), by bin completion. assign [E] holds on entry a valid
 * assignment (the items of bin 0, then bin 1, ...; each item once) and
 * receives the best one found; *best_max is its max bin sum. *proven: no
 * assignment has a max below it (below by more than 1e-9 relative for
 * fractional loads; integral loads: none below it at all). time_limit_s <= 0:
 * none; past it the best found so far is returned with *proven false.
 * Returns EPLB_OK, EPLB_EINVAL (bad card sum or assign), EPLB_ENOMEM. */
eplb_status_t eplb__partition_exact(const double *w, uint32_t E, uint32_t G, const uint32_t *card,
                                    double time_limit_s, int32_t *assign, double *best_max,
                                    bool *proven);

/* ---- incremental.c ---- */
/* Checks opts->from against the loads and options (EPLB_EINVAL naming the
 * field that differs). */
eplb_status_t eplb__incremental_check(const eplb_loads_t *loads, const eplb_plan_options_t *opts);
/* One layer of the incremental policy (see plan.h) from the current
 * placement cur[R]: fills phy2log[R], share[R], *moved (slots differing
 * from cur) and *fallback (1 when cur re-split was kept because nothing
 * else was better). */
eplb_status_t eplb__incremental_layer(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                                      const int32_t *cur, int32_t *phy2log, double *share,
                                      uint32_t *moved, int *fallback);
/* tgt [R] (a plan of the same layer) with its GPUs renumbered to keep as
 * many of cur's experts where they are as a max-overlap assignment finds
 * (nodes first under keep_groups; O(G^3)), each GPU's experts in the slots
 * they occupy in cur. */
eplb_status_t eplb__relabel(const eplb__layer_ctx_t *ctx, const int32_t *cur, int32_t *tgt);
/* incremental_even.c: the incremental policy with shares UNIFORM (the same
 * contract as eplb__incremental_layer; share gets 1/c). */
eplb_status_t eplb__incremental_even_layer(const eplb__layer_ctx_t *ctx,
                                           const eplb_plan_options_t *opts, const int32_t *cur,
                                           int32_t *phy2log, double *share, uint32_t *moved,
                                           int *fallback);

/* ---- migration.c: the transfers that turn one plan into another ---- */
typedef struct eplb__migration {
  uint32_t layer;
  uint32_t dst_slot, dst_gpu; /* the slot that changes, in the new plan */
  uint32_t src_slot, src_gpu; /* a slot holding `expert` in the old plan */
  uint32_t expert;
  uint8_t link;   /* eplb_link_class_t */
  uint32_t round; /* transfer round: per round no GPU receives more than the staging budget */
} eplb__migration_t;

/* Where slots and GPUs are: slot r on GPU slot_gpu[r], GPU g on node
 * gpu_node[g]. Plans and the runtime describe the same geometry. */
typedef struct eplb__mig_geom {
  uint32_t R, G;
  const uint32_t *slot_gpu; /* [R] */
  const uint32_t *gpu_node; /* [G] */
} eplb__mig_geom_t;

/* Appends one layer's transfers from old [R] to nw [R] to *mv (grown; *n
 * used of *cap): for every slot whose expert changes, the source slot
 * holding that expert in `old` on the same GPU, else the same node, else
 * any; ties to the source slot used least so far in this layer (a hot
 * expert's replication spreads over its holders), then the lowest slot.
 * used [R] is scratch. round is left 0. EPLB_EFORMAT when an expert of nw
 * is in no slot of old; EPLB_ENOMEM. */
eplb_status_t eplb__migration_layer(const eplb__mig_geom_t *g, uint32_t layer, const int32_t *old,
                                    const int32_t *nw, eplb__migration_t **mv, size_t *n,
                                    size_t *cap, uint32_t *used);

/* Groups nlayers layers, in order (layer i's transfers are mv[off[i] ..
 * off[i+1])), into rounds: at most layers_per_round layers and at most
 * max_per_gpu receives on any GPU per round, a round holding at least one
 * layer (whole layers: a layer switches when its transfers are done).
 * Writes round_of[i] and each transfer's round; work needs 2 * G. Returns
 * the number of rounds. */
uint32_t eplb__migration_rounds(const eplb__mig_geom_t *g, uint32_t nlayers, const size_t *off,
                                eplb__migration_t *mv, uint32_t layers_per_round,
                                uint64_t max_per_gpu, uint32_t *round_of, uint64_t *work);

/* The transfers from `from` to `to` for layers [layer_begin, layer_end) (same
 * shape, else EPLB_ESHAPE), every layer that differs, in layer order: what
 * the runtime executes when it switches them (eplb__migration_layer, then
 * eplb__migration_rounds with staging_bytes / expert_bytes receives per
 * GPU, staging_bytes 0 = unlimited). *out is eplb__malloc'ed (NULL when
 * *count is 0; caller eplb__free's it); *rounds is the number of rounds. */
eplb_status_t eplb__migration_plan(const eplb_plan_t *from, const eplb_plan_t *to,
                                   uint32_t layer_begin, uint32_t layer_end, uint64_t expert_bytes,
                                   uint64_t staging_bytes, uint32_t layers_per_round,
                                   eplb__migration_t **out, size_t *count, uint32_t *rounds);

/* ---- coact.c / locality.c ---- */
struct eplb_coact {
  uint32_t num_layers, num_experts, num_nodes;
  uint64_t num_rows;
  double *pairs;       /* [L][E][E] */
  double *node_tokens; /* [L][N][E] */
};

/* The locality policy on layer `layer` of the loads (plan p already holds
 * the shape; fills p's phy2log/share/node_share of the layer). */
eplb_status_t eplb__locality_layer(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                                   uint32_t layer, int32_t *phy2log, double *share,
                                   double *node_share, int *fallback);

/* Checks the locality inputs (cluster, coact) against the loads' shape. */
eplb_status_t eplb__locality_check(const eplb_loads_t *loads, const eplb_plan_options_t *opts);

/* ---- shares.c: the shares mode (plan.h "Shares") ---- */
/* Checks opts' shares fields against the loads (EPLB_EINVAL naming the field). */
eplb_status_t eplb__shares_check(const eplb_loads_t *loads, const eplb_plan_options_t *opts);
/* Replaces every layer's shares by uniform or robust ones (opts->shares != exact) and
 * recomputes the layers' metrics from the loads. */
eplb_status_t eplb__shares_apply(eplb_plan_t *plan, const eplb_loads_t *loads,
                                 const eplb_plan_options_t *opts);

/* ---- topology (cluster.c, topo_hwloc.c: the one file that includes hwloc.h) ---- */

typedef enum eplb__topo_source {
  EPLB__TOPO_XML = 1,
  EPLB__TOPO_SYNTHETIC = 2,
  EPLB__TOPO_LIVE = 3
} eplb__topo_source_t;

/* What hwloc tells about one node. gpus[] has num_gpus entries (owned,
 * eplb__free); node/local_index are left for the caller to fill. */
typedef struct eplb__topo_node {
  uint32_t num_gpus, num_numa, num_pus, num_nics;
  eplb_gpu_info_t *gpus;
} eplb__topo_node_t;

/* Loads a node description with hwloc (the only hwloc user in eplb).
 * want_gpus: the GPU count the cluster file gives (0 = take it from the
 * topology). GPUs found as PCI devices must agree with want_gpus; a topology
 * without GPUs gets want_gpus GPUs spread evenly over its NUMA nodes.
 * `what` names the node in error details. */
eplb_status_t eplb__topo_load(eplb__topo_source_t source, const char *arg, uint32_t want_gpus,
                              const char *what, eplb__topo_node_t *out);
/* The objects hwloc would build for a synthetic description (every level's
 * count times its parents') into *count (may be NULL); EPLB_ERANGE over
 * EPLB_MAX_SYNTHETIC_OBJECTS, named in `what`'s detail. */
eplb_status_t eplb__topo_synthetic_objects(const char *s, const char *what, uint64_t *count);

/* ---- decode.c: the decode policy (plan.h "Decode") ---- */
/* balanced's placement or decode.c's (a spare replica on every GPU), whichever
 * models faster with eplb_decode_split's shares on the mean step's loads
 * (opts->model and opts->gpu required, checked by the caller). */
eplb_status_t eplb__decode_layer(const eplb__layer_ctx_t *ctx, const eplb_plan_options_t *opts,
                                 int32_t *phy2log, double *share, int *fallback);

/* generalise.c (plan.h "Plans that generalise"): whether a window plan with
 * these options chooses its loads, and the plan made so from steps [b, e)
 * of the trace whose summed loads are `window`. */
bool eplb__window_loads_apply(const eplb_plan_options_t *o, uint64_t b, uint64_t e);
eplb_status_t eplb__plan_window_chosen(eplb_trace_t *trace, uint64_t b, uint64_t e,
                                       const eplb_plan_options_t *o, const eplb_loads_t *window,
                                       eplb_plan_t **out);

/* scenario.c: placements for the window's steps (static shares). The
 * steps [b, e) of a trace summed into at most 256 scenarios of consecutive
 * steps, each (scenario, layer) normalised to 1; and a plan's slots swapped
 * between GPUs while the sum over the scenarios outside [skip_b, skip_e) of
 * the busiest GPU's share falls (replica counts and shares kept; metrics
 * not recomputed: the caller evaluates), each layer stopping after `budget`
 * scenario evaluations (a fixed count, so the result never depends on the
 * machine). Plans with per-node shares or
 * groups kept on nodes are left as they are (scenarios_apply false). */
typedef struct eplb__scenarios eplb__scenarios_t;
eplb_status_t eplb__scenarios_read(eplb_trace_t *trace, uint64_t b, uint64_t e,
                                   eplb__scenarios_t **out);
void eplb__scenarios_destroy(eplb__scenarios_t *s);
bool eplb__scenarios_apply(const eplb_plan_t *p);
eplb_status_t eplb__plan_refine_scenarios(eplb_plan_t *p, const eplb__scenarios_t *s,
                                          uint64_t skip_b, uint64_t skip_e, uint64_t budget);

#endif
