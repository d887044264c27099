/* lp/lp.h — internal header of the lp module: guarded GLPK use, the
 * max-flow kernel of the exact split solver, and helpers shared by the split
 * solvers. It does not include glpk.h (only the lp sources do), so the
 * planner's MIP can declare what it needs here without leaking GLPK. */
#ifndef EPLB_LP_H
#define EPLB_LP_H

#include "core/core.h"
#include "eplb/split.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- GLPK environment (lp/glpk_env.c) ---------------------------------- */

/* Body of a guarded GLPK call. It must not allocate through eplb__malloc or
 * own any other resource that outlives a GLPK error: when GLPK raises an
 * error the body is abandoned by longjmp and the thread's whole GLPK
 * environment (every glp_prob included) is freed. Allocate before the call,
 * free after it. */
typedef eplb_status_t (*eplb__glpk_body)(void *ctx);

/* Runs body(ctx) with GLPK made safe: an error hook (setjmp/longjmp) so GLPK
 * never aborts, and a terminal hook that sends GLPK's output to eplb__log at
 * DEBUG under "lp" (never stdout). On a GLPK error returns EPLB_ESOLVER with
 * the detail "<what>: GLPK error: <GLPK's last message>", after
 * glp_free_env(); otherwise returns the body's status. Not reentrant (a body
 * must not call eplb__glpk_call). */
eplb_status_t eplb__glpk_call(const char *what, eplb__glpk_body body, void *ctx);

/* GLPK's tm_lim (ms) for a limit in seconds: 0 means none (INT_MAX); any
 * positive limit is at least 1 ms. */
int eplb__glpk_time_limit_ms(double seconds);

/* ---- max-flow (lp/maxflow.c) ------------------------------------------- */

/* Dinic's max-flow on a reusable arc arena. Edge k is arcs 2k (forward) and
 * 2k+1 (reverse); res[] is the residual capacity the caller sets before each
 * run (HUGE_VAL allowed for "infinite"). After eplb__flow_run, level[v] >= 0
 * marks the source side of a minimum cut. */
typedef struct eplb__flow {
  uint32_t n, m;       /* nodes, arcs (2 * edges) */
  uint32_t *to;        /* [m] head of each arc */
  double *res;         /* [m] residual capacity */
  uint32_t *adj_start; /* [n + 1] CSR offsets into adj */
  uint32_t *adj;       /* [m] arcs leaving each node */
  uint32_t *adj_to;    /* [m] head of each arc of adj, in adj's order */
  int32_t *level;      /* [n] BFS level, -1 unreachable */
  uint32_t *cur;       /* [n] current-arc pointers */
  uint32_t *queue;     /* [n] BFS queue */
  uint32_t *stack;     /* [n] DFS path (arcs) */
  uint32_t *tmp;       /* [2m] scratch of eplb__flow_move_heads and of a run (the source's arcs) */
  size_t cap_n, cap_m; /* allocated sizes */
  /* Undo log: while log is set, every residual a run changes is first
   * recorded (arc and old value) in log [log_n], up to log_cap entries
   * (past them log_over is set and nothing more is recorded); log_mem is
   * the log's storage, owned by the arena. */
  struct eplb__flow_undo_entry {
    uint32_t arc;
    double res;
  } * log, *log_mem;
  size_t log_n, log_cap;
  bool log_over;
} eplb__flow_t;

/* Records arcs a and a ^ 1 in the undo log (see log). */
void eplb__flow_log(eplb__flow_t *f, uint32_t a);
/* Restores every residual the log recorded, newest first; empties it. */
void eplb__flow_undo(eplb__flow_t *f);

/* Sizes the arena for n nodes and e edges (grows only; keeps nothing).
 * Returns EPLB_OK or EPLB_ENOMEM (the arena stays valid). */
eplb_status_t eplb__flow_reserve(eplb__flow_t *f, uint32_t n, uint32_t edges);

/* Sets edge k to go from u to v (after reserve, before build). */
void eplb__flow_edge(eplb__flow_t *f, uint32_t k, uint32_t u, uint32_t v);

/* Builds the adjacency of the n nodes and `edges` edges set so far. */
void eplb__flow_build(eplb__flow_t *f, uint32_t n, uint32_t edges);

/* After eplb__flow_edge gave the n edges `edges` new heads (their old
 * ones in old_head; tails unchanged) on a built graph, updates the
 * adjacency to what eplb__flow_build lays out, in time linear in the
 * span of nodes between the old and new heads rather than in the arcs.
 * scratch [n]. */
void eplb__flow_move_heads(eplb__flow_t *f, const uint32_t *edges, const uint32_t *old_head,
                           uint32_t n, uint32_t *scratch);

/* Augments from s to t while a path of arcs with residual > eps exists;
 * returns the flow added. */
double eplb__flow_run(eplb__flow_t *f, uint32_t s, uint32_t t, double eps);

/* The same on the tight arcs only, a from u to v with dist[u] + cost[a] ==
 * dist[v] (dist below INT32_MAX / 2, cost [m]), the others as absent:
 * identical to a run on a graph of just those arcs, added in arc order. */
double eplb__flow_run_tight(eplb__flow_t *f, uint32_t s, uint32_t t, double eps, const int8_t *cost,
                            const int32_t *dist);

void eplb__flow_free(eplb__flow_t *f);

/* ---- split helpers (lp/split_check.c) ---------------------------------- */

/* Validates a problem, its loads and the result's required arrays, with the
 * statuses documented in split.h. `integer` adds the integral-load check. */
eplb_status_t eplb__split_check(const eplb_split_problem_t *p, const double *loads,
                                const eplb_split_result_t *out, bool integer);

/* Counts each expert's replicas into count [E] (after eplb__split_check);
 * EPLB_EINVAL naming the first expert with none. */
eplb_status_t eplb__split_count_replicas(const eplb_split_problem_t *p, uint32_t *count);

/* Grows *ptr to hold n elements of `size` bytes if *cap < n (contents are not
 * kept). Returns EPLB_OK or EPLB_ENOMEM (then *ptr and *cap are unchanged). */
eplb_status_t eplb__grow(void **ptr, size_t *cap, size_t n, size_t size);

/* One array of a set that shares a capacity: where its pointer lives and its
 * element size. */
typedef struct eplb__array_ref {
  void **p;
  size_t size;
} eplb__array_ref_t;

/* Grows the n (<= 8) arrays of `list` to `need` elements each if *cap < need
 * (contents are not kept), all or nothing: on EPLB_ENOMEM every pointer and
 * *cap are unchanged. */
eplb_status_t eplb__grow_all(size_t *cap, size_t need, const eplb__array_ref_t *list, size_t n);

/* The ratio w(A)/|N(A)| of the expert mask `set` [E] (0 when N(A) is
 * empty), summing w in expert order: marks N(A) in gmark [G], *na = |A|,
 * *ng = |N(A)|. */
double eplb__split_ratio(const eplb_split_problem_t *p, const double *loads, const uint8_t *set,
                         uint8_t *gmark, uint32_t *na, uint32_t *ng);

/* Fills out's bottleneck fields from the expert mask `set` [E]: marks N(A)
 * in gmark [G] (scratch), computes t_star by eplb__split_ratio, and copies
 * the masks where out has them. */
void eplb__split_certificate(const eplb_split_problem_t *p, const double *loads, const uint8_t *set,
                             uint8_t *gmark, eplb_split_result_t *out);

/* What the locality stage (split_local.c) reads of the exact solver's
 * contracted graph, valid after a successful eplb_split_solve on the handle:
 * multi [M] the experts on several GPUs, their GPU pairs pair_start [M+1]
 * into pair_gpu/pair_cnt [P] (replicas of the expert on that GPU), each
 * expert's replicas rep_list[rep_start[e] .. rep_start[e+1]), rep_pair [R]
 * (NONE = UINT32_MAX for experts on one GPU), sgpu [E] (that GPU, or NONE),
 * gpu_of [R], base [G] (the fixed load of one-GPU experts, for the last
 * loads), wmax (the last loads' largest), hash of the placement. */
typedef struct eplb__split_view {
  uint32_t E, G, R, M, P;
  uint64_t hash;
  const uint32_t *multi, *pair_start, *pair_gpu, *pair_cnt, *rep_start, *rep_list, *rep_pair;
  const uint32_t *sgpu, *gpu_of;
  const double *base;
  double wmax;
} eplb__split_view_t;
void eplb__split_view(const eplb_split_t *split, eplb__split_view_t *v);

/* The locality stage's workspace, owned by the handle (freed with it). */
struct eplb__split_local;
struct eplb__split_local **eplb__split_local_ws(eplb_split_t *split);
/* split_mask.c (eplb_split_solve_in_service): its workspace hangs off the handle. */
struct eplb__split_mask **eplb__split_mask_ws(eplb_split_t *split);
void eplb__split_mask_free(struct eplb__split_mask *w);
void eplb__split_local_free(struct eplb__split_local *w);
/* The locality stage builds its hub graph from 8 nodes on where the pair
 * graph would have `arcs` or more node-to-pair arcs, N x P (default 2^16);
 * the tests set 0 to
 * check the hub graph on instances the reference LP solves quickly. */
eplb_status_t eplb__split_local_hub_arcs(eplb_split_t *split, uint64_t arcs);

/* Whether the exact split of p has T* > cap: *above = 1 when a max-flow
 * with every GPU capped at cap leaves a set A' of experts with
 * w(A') / |N(A')| > cap (computed; T* >= that ratio), 0 when the flow fits
 * (up to the solver's rounding tolerance) — one max-flow instead of a
 * solve's several. The handle's warm-start memory is not touched; its graph
 * is kept for the placement. p and loads must pass eplb_split_solve's checks
 * (ids < E, slot counts summing to R, finite loads >= 0): they are not
 * checked again here (the planner probes swaps of a placement it solved).
 * eplb__split_view describes the probed placement's graph with stale loads
 * until the next solve. Statuses as eplb_split_solve. */
eplb_status_t eplb__split_above(eplb_split_t *split, const eplb_split_problem_t *p,
                                const double *loads, double cap, bool *above);

/* ---- the exact split handle (lp/split_handle.c, split_build.c, split_flow.c,
 * split_probe.c) ---- */

typedef struct eplb__warm_state {
  uint64_t hash; /* placement the mask belongs to; 0 = none */
  uint32_t num_experts;
  size_t cap;
  uint8_t *mask;
} eplb__warm_state_t;

/* A maximum flow copied per pair with its expert and GPU, to start the
 * max-flow of a nearby placement from (split_probe.c): per multi expert its
 * index k [E], pairs pstart [M+1], their GPUs and flows pgpu/pflow [P]; e
 * experts, every GPU capped at cap. */
typedef struct eplb__flow_snap {
  bool ok;
  uint32_t e;
  double cap;
  uint32_t *k, *pstart, *pgpu;
  double *pflow;
  double *base;  /* [G] the fixed loads then */
  double *loads; /* [e] the loads then */
  size_t cap_e, cap_r, cap_g;
} eplb__flow_snap_t;

/* split_sub.c's workspace: the multi experts k [na] and GPUs g [nga] of
 * the last cut (indices on the built graph, ascending), and best_part's
 * parts (union-find), their GPU counts and loads [G]. */
typedef struct eplb__split_sub {
  uint32_t na, nga, norder;
  uint32_t *k, *g;
  uint32_t *order; /* [norder] the first cut's experts by GPU count, then k */
  uint32_t *part, *pn;
  double *pw;
  size_t cap_k, cap_g;
} eplb__split_sub_t;

struct eplb_split {
  eplb_split_options_t opt;
  /* The placement the graph was built for (copied to detect changes). */
  bool built;
  uint32_t E, G, R, M, P, Gs;
  uint64_t hash, hash_raw; /* hash_raw: eplb__split_placement_hash */
  uint32_t *c_phy2log, *c_slots;
  uint32_t *count, *rep_start, *rep_list, *gpu_of, *ndist, *sgpu, *multi, *pair_start;
  uint32_t *pair_gpu, *pair_cnt, *rep_pair;
  eplb__flow_t flow;
  /* Per-solve scratch; wmax is the last solve's largest load (the locality
   * stage's rounding scale, so it need not scan the loads again). */
  double *base, *gin, *pamt;
  double wmax;
  uint8_t *gmark, *set;
  /* Growth capacities of the arrays above. */
  size_t cap_r, cap_e, cap_g;
  eplb__warm_state_t *warm;
  size_t num_warm;
  struct eplb__split_local *local; /* split_local.c's workspace, NULL until used */
  struct eplb__split_mask *mask;   /* split_mask.c's workspace, NULL until used */
  /* split_layers.c's other workers' handles (threads > 1), kept for reuse;
   * during a call they borrow warm (never grown then), else it is NULL. */
  struct eplb_split **kids;
  uint32_t num_kids;
  /* The arena's flow is a from-zero run at memo_cap (eps memo_eps) on the
   * built graph for the loads memo_loads [E]: a run with the same inputs
   * is deterministic, so it is not repeated (the planner solves a
   * placement again right after solving it, to read its bottleneck). */
  bool memo_ok;
  double memo_cap, memo_eps, memo_total;
  double *memo_loads;
  /* fresh: the arena holds the final flow of the last solve, on the built
   * graph. split_probe.c snapshots it (snap) to warm-start the probes of
   * nearby placements; tstar snapshots its first flow (low), below T*, to
   * warm-start the next one's. */
  bool fresh;
  eplb__flow_snap_t snap, low;
  /* The arena holds snap's flow, on the graph numbered as then (set when a
   * probe takes snap; probes change only logged residuals and restore
   * them; anything else that writes the arena clears it). */
  bool base_ok;
  /* The planner's local search's record on this handle (balanced_refine.c:
   * swaps it probed or solved and those it rejected), over every layer
   * the handle planned: it decides whether probing pays. */
  uint64_t swaps, rejected;
  eplb__split_sub_t sub;
  bool sub_used; /* the last tstar's Newton went on in sub */
  /* The last tstar's stop (with its margin; read only inside tstar), and
   * whether a set's ratio reached it */
  double stop;
  bool stopped;
  /* The GPU cap of the arena's flow while fresh (0 unknown): a probe's
   * snapshot is cut to it rather than below it. */
  double fresh_cap;
};

/* One layer's solve with warm-start state `warm_index` (split_flow.c; the
 * public solve uses 0, the multi-layer call the layer's index). */
eplb_status_t eplb__split_solve_one(eplb_split_t *s, const eplb_split_problem_t *p,
                                    const double *loads, eplb_split_result_t *out,
                                    size_t warm_index);
/* The arena's flow written out for loads (split_write.c): per replica
 * its share (out->share may be NULL: loads only) and amount (out->amount
 * or NULL), per GPU its load, and out->max_load; whatever rounding left
 * unrouted goes where the most room is. */
void eplb__split_write(eplb_split_t *s, const double *loads, bool integer,
                       eplb_split_result_t *out);
/* eplb_split_solve without eplb__split_check, for a planner's own
 * placements (valid by construction: the check passes over every slot and
 * load on every solve), and with out->share allowed NULL: the GPU loads,
 * max load and certificate only, the loads bit for bit a full solve's
 * (shares are divisions for every replica of a replicated expert, and a
 * local search reads only the loads of the placements it keeps). */
eplb_status_t eplb__split_solve_unchecked(eplb_split_t *s, const eplb_split_problem_t *p,
                                          const double *loads, eplb_split_result_t *out);
/* The warm-start state `index` (the array grown to it, its mask to E). */
eplb_status_t eplb__split_warm_slot(eplb_split_t *s, size_t index, uint32_t E,
                                    eplb__warm_state_t **out);

/* The graph (split_build.c), which the solve and the probes share: whether
 * the built graph is p's placement, (re)building it, the fixed loads base [G]
 * of one-GPU experts (with the total, the largest load and the load in the
 * graph), a from-zero max-flow with every GPU capped at cap_t (returns the
 * flow), and the ratio of the last flow's minimum cut. */
bool eplb__split_same_placement(const eplb_split_t *s, const eplb_split_problem_t *p);
eplb_status_t eplb__split_build(eplb_split_t *s, const eplb_split_problem_t *p);
void eplb__split_set_base(eplb_split_t *s, const double *loads, double *total, double *wmax,
                          double *wm);
double eplb__split_run_flow(eplb_split_t *s, const double *loads, double cap_t, double eps);
double eplb__split_cut_ratio(const eplb_split_t *s, const double *loads);
/* The placement's hash (0 allowed; the handle keeps 1 for 0) and the term
 * of slot r holding expert e in it (a sum of such terms). */
uint64_t eplb__split_placement_hash(const eplb_split_problem_t *p);
uint64_t eplb__split_slot_hash(uint32_t r, uint32_t e);

/* When the built graph's placement and p differ in at most 8 slots and
 * every expert keeps its replica count (a local search's swap, with the
 * undo of the last one), updates the graph in place to exactly what a build
 * for p lays out (same arrays, same edge numbering, same adjacency order)
 * and returns true. False otherwise, or when an expert's number of GPUs
 * changes (the numbering moves): the caller builds. split_build.c. */
bool eplb__split_swap_update(eplb_split_t *s, const eplb_split_problem_t *p);

/* Copies the arena's flow (a maximum flow at cap on the built graph for
 * loads [E]) into snap; false without memory (snap then unset). */
bool eplb__split_snap_take(eplb_split_t *s, eplb__flow_snap_t *snap, const double *loads,
                           double cap);
/* A maximum flow at cap on the built graph for loads, started from snap
 * mapped by (expert, GPU) and cut back to fit; returns the flow. The
 * source side of its minimum cut is a cold run's in exact arithmetic (that
 * of any maximum flow); in floating point a residual within eps of zero
 * could tip an expert across it, so callers whose result must not depend
 * on the start read only what survives that (a set's ratio, compared). */
double eplb__split_warm_flow(eplb_split_t *s, const eplb__flow_snap_t *snap, const double *loads,
                             double cap, double eps);
void eplb__split_snap_free(eplb__flow_snap_t *snap);
/* eplb__split_above, warm-started: the max-flow starts from the last
 * solve's flow (snapshot at the first probe after a solve) mapped onto p's
 * graph by (expert, GPU) and cut back to fit, instead of from zero. Same
 * contract, except that the flow found may differ from a cold probe's by
 * rounding, so a probe at the margin may answer otherwise: *above = 1 still
 * only when a set with a computed ratio above cap was found. For the
 * planner's searches, whose decisions do not depend on the answer (a probe
 * only skips a solve that could not pass their test). */
eplb_status_t eplb__split_above_warm(eplb_split_t *split, const eplb_split_problem_t *p,
                                     const double *loads, double cap, bool *above);

/* T* of p and its bottleneck set only, for a search that compares
 * placements: Newton starts from the best of eplb_split_solve's bounds and
 * the ratios on p of the expert masks hints[0 .. nhints) (each [E]), say
 * the bottlenecks of placements the search saw: hint_ratio [nhints] when
 * the caller has them (each eplb__split_ratio's value on p, to the bit),
 * else NULL. Its first flow starts from the first flow of the last call
 * that ran one on this handle since eplb_split_reset (any placement with
 * the same experts), when that was at a cap no higher; the steps after
 * the first run on that flow's cut only (eplb__split_newton_sub), without
 * the from-zero run on the whole graph that makes a solve's shares
 * canonical.
 * *t_star: the ratio of the set found (computed as eplb_split_solve's
 * certificate: equal to its T* to rounding), the set in experts [E] and
 * gpus [G] (either NULL), the GPU loads of the flow found in gpu_load [G]
 * (or NULL; a maximum flow at T*, not the solve's). The warm-start state 0
 * then holds the set for p, so a solve of p starts at T*.
 * stop (HUGE_VAL: none) is for a caller that asks only whether T* < stop:
 * once a set's ratio reaches stop (1 + 1e-12) the search ends there, with
 * *t_star that ratio (a lower bound on T*, at or above stop, on the same
 * side of stop as T* since the margin dwarfs the rounding), experts, gpus
 * and gpu_load not written and no warm-start state for p. Deterministic for
 * the handle's history (no check of p, as eplb__split_above). Statuses as
 * eplb_split_solve. */
eplb_status_t eplb__split_tstar(eplb_split_t *split, const eplb_split_problem_t *p,
                                const double *loads, const uint8_t *const *hints,
                                const double *hint_ratio, uint32_t nhints, double stop,
                                double *t_star, uint8_t *experts, uint8_t *gpus, double *gpu_load);

/* Newton's steps after a first flow whose minimum cut (s->flow.level) was
 * violated at T = *t, on that cut's part of the graph (split_sub.c): each
 * step a flow from zero on the last cut's experts and GPUs, at *t (1 +
 * slack) or just below the ratio of the cut's best connected part when
 * that is higher, until one leaves no set above its cap (deficit within
 * dtol, or a ratio not above). On return *t is the ratio of the last
 * violated set, the one steps on the whole graph find in exact arithmetic,
 * summed in the same order, and s->set holds it as newton marks it (unless
 * a ratio reached s->stop: then s->stopped, *t that ratio, s->set unset);
 * s->gmark is overwritten, and the arena's flow is a partial one (no memo,
 * not fresh). Each step counts in *iterations, past max_iterations
 * EPLB_ESOLVER; EPLB_ENOMEM. */
eplb_status_t eplb__split_newton_sub(eplb_split_t *s, const double *loads, double eps, double dtol,
                                     double slack, uint32_t *iterations, uint32_t max_iterations,
                                     double *t);
void eplb__split_sub_free(eplb__split_sub_t *sub);

/* Handle internals the GLPK path needs (options). */
const eplb_split_options_t *eplb__split_options(const eplb_split_t *split);

/* ---- placement MIP ---- */
/* lp/mip_place.c: the placement MIP of one layer (planner's mip policy).
 * Binary y[e][g] (a replica of e on GPU g, at most one per GPU), amounts
 * x[e][g] <= min(w_e, incumbent) * y[e][g] with sum_g x[e][g] = w_e, GPU
 * load sum_e x[e][g] <= T, sum_e y[e][g] <= slots[g], sum_g y[e][g] >= 1;
 * minimise T >= lower_bound. Symmetry breaking: consecutive GPUs of one
 * class (same slots, same node) carry non-increasing loads. */
typedef struct eplb__mip_place_problem {
  uint32_t num_experts, num_gpus;
  const double *loads;           /* [E] >= 0 */
  const uint32_t *slots_per_gpu; /* [G]; their sum is the slot count R */
  const uint8_t *allowed;        /* [E*G] 1 where e may go on g, or NULL (everywhere) */
  const uint32_t *gpu_class;     /* [G] interchangeable GPUs share a class, or NULL (none) */
  double lower_bound;            /* valid lower bound on the max GPU load (0: none) */
  double time_limit;             /* seconds from the call; 0 = none */
  /* eplb__now() at which to stop (0: from time_limit). Held as wall time, model
   * building, root LP and branch-and-cut included: GLPK's own tm_lim is not a
   * hard deadline and does not cover the root LP, so the clock is checked in
   * GLPK's callback too (see mip_place.c). */
  double deadline;
} eplb__mip_place_problem_t;

/* phy2log/share [R] hold a feasible warm start on entry (given to GLPK as
 * its first incumbent, with its GPUs reordered within a class); they receive
 * the solver's best plan (slots a GPU does not need repeat one of its
 * experts with share 0). *max_load: that plan's max GPU load; *gap: the
 * proven relative gap (max - best bound) / max. Returns EPLB_OK (optimal),
 * EPLB_ETIMEOUT (time limit; the output is the best plan found, at least the
 * start), EPLB_EINFEASIBLE (no placement satisfies the constraints; output
 * unchanged), EPLB_ESOLVER (GLPK failed; output unchanged), EPLB_EINVAL,
 * EPLB_ENOMEM. Never aborts, never prints (eplb__glpk_call). */
eplb_status_t eplb__mip_place(const eplb__mip_place_problem_t *pb, int32_t *phy2log, double *share,
                              double *max_load, double *gap);

#endif /* EPLB_LP_H */
