/* tests/reference/reference.h — references the tests check the library
 * against, built into the test support library (tests/meson.build) and
 * never into libeplb: the transportation LP of the locality split and the
 * reference MoE decode layer of the GPU check. Not installed. */
#ifndef EPLB_TESTS_REFERENCE_H
#define EPLB_TESTS_REFERENCE_H

#include "eplb/common.h"
#include "eplb/kernels.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- transportation LP (transport.c): the reference the tests check the
 * locality split (eplb_split_solve_local) against ---- */
/* Variables x[n][r] >= 0: tokens of expert rep_expert[r] from source node n
 * sent to replica r. sum_r x[n][r] = demand[n][e] over e's replicas; every
 * GPU's sum of its replicas' x <= cap; minimise the tokens with
 * rep_node[r] != n. */
typedef struct eplb_test_transport_problem {
  uint32_t num_sources, num_experts, num_replicas, num_gpus; /* N, E, R, G */
  const uint32_t *rep_expert;                                /* [R] expert of each replica */
  const uint32_t *rep_gpu;                                   /* [R] its GPU */
  const uint32_t *rep_node;                                  /* [R] its node */
  const double *demand;                                      /* [N][E] >= 0 */
  double cap;                                                /* max GPU load */
} eplb_test_transport_problem_t;

/* x [N][R] receives the optimum, *cross (or NULL) its cross-node volume.
 * Returns EPLB_OK, EPLB_EINFEASIBLE (the capacity cannot be met, or an
 * expert with demand has no replica; x is then undefined), EPLB_ESOLVER,
 * EPLB_EINVAL, EPLB_ENOMEM. Never aborts, never prints. */
eplb_status_t eplb_test_transport_solve(const eplb_test_transport_problem_t *pb, double *x,
                                        double *cross);

/* ---- the reference MoE decode layer (moe_ref.c / moe_ref.cu) ---- */

/* Shapes of one MoE layer. Weights per expert: w1, w3 [F][H] (gate, up),
 * w2 [H][F] (down); router wr [E][H]; activations x [B][H]. Row-major. */
typedef struct eplb_test_moe_shape {
  uint32_t batch, hidden, ffn, experts, topk;
} eplb_test_moe_shape_t;

/* CPU reference in fp32: scores = x wr^T; top-k by score (ties: lower id);
 * weights = softmax of the k scores; y = sum_j w_j * FFN_e(x) with
 * FFN_e(x) = w2 (silu(w1 x) * (w3 x)). topk_out [B][k] may be NULL. */
void eplb_test_moe_ref(const eplb_test_moe_shape_t *sh, const float *x, const float *wr,
                       const float *w1, const float *w3, const float *w2, float *y,
                       int32_t *topk_out);

/* GPU version (moe_ref.cu, built only into the GPU check with cuBLAS).
 * Functions return a cudaError_t, or 1000 + a cublasStatus_t. Weights are
 * uploaded as bf16 when bf16 is set (fp32 otherwise); NULL weights are
 * filled on the device with values in [-scale, scale). route() runs the
 * layer once and copies the per-expert counts to the host (a sync: setup
 * only); forward() is then the timed layer, without host synchronisation,
 * on the tokens given to set_input (the routing must not change between
 * route() and forward()). d may be NULL (no map step). */
typedef struct eplb_test_moe_gpu eplb_test_moe_gpu_t;
int eplb_test_moe_gpu_create(const eplb_test_moe_shape_t *sh, int bf16, const float *wr,
                             const float *w1, const float *w3, const float *w2, float scale,
                             eplb_test_moe_gpu_t **out);
int eplb_test_moe_gpu_set_input(eplb_test_moe_gpu_t *m, const float *x);
int eplb_test_moe_gpu_route(eplb_test_moe_gpu_t *m);
int eplb_test_moe_gpu_forward(eplb_test_moe_gpu_t *m, const eplb_cuda_dispatch_t *d, void *stream);
int eplb_test_moe_gpu_output(eplb_test_moe_gpu_t *m, float *y, int32_t *topk);
void eplb_test_moe_gpu_destroy(eplb_test_moe_gpu_t *m);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_TESTS_REFERENCE_H */
