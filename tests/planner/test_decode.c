/* tests/planner/test_decode.c — the deployment cost model (presets, files,
 * expert time, the deployment of a run) and the decode policy and split
 * (eplb/model.h). */
#include "tests/support.h"

#include <eplb/model.h>
#include <eplb/plan.h>
#include <eplb/split.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- presets and files --------------------------------------------------- */

START_TEST(presets_load) {
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  for (uint32_t i = 0; eplb_model_preset_name(i); i++) {
    ck_assert_int_eq(eplb_model_preset(eplb_model_preset_name(i), &m), EPLB_OK);
    ck_assert_int_eq(eplb_model_check(&m), EPLB_OK);
  }
  for (uint32_t i = 0; eplb_gpu_preset_name(i); i++) {
    ck_assert_int_eq(eplb_gpu_preset(eplb_gpu_preset_name(i), &g), EPLB_OK);
    ck_assert_int_eq(eplb_gpu_check(&g), EPLB_OK);
  }
  ck_assert_ptr_null(eplb_model_preset_name(5));
  ck_assert_ptr_null(eplb_gpu_preset_name(4));
  /* A trace's META names a model as its Hugging Face id. */
  ck_assert_int_eq(eplb_model_preset("deepseek-ai/DeepSeek-V2-Lite-Chat", &m), EPLB_OK);
  ck_assert_str_eq(m.name, "deepseek-v2-lite");
  ck_assert_double_eq(m.num_experts, 64);
  ck_assert_double_eq(m.topk, 6);
  ck_assert_int_eq(eplb_model_load("DeepSeek-V3", &m), EPLB_OK);
  /* One V3 expert in FP8: 3 x 7168 x 2048 bytes; DeepEP's dispatch and combine copies. */
  ck_assert_double_eq(eplb_model_expert_bytes(&m), 44040192);
  ck_assert_double_eq(eplb_model_dispatch_bytes(&m), 7392);
  ck_assert_double_eq(eplb_model_combine_bytes(&m), 14336);
  ck_assert_int_eq(eplb_model_preset("llama-3", &m), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "deepseek-v3"));
  ck_assert_int_eq(eplb_gpu_load("b200", &g), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "h800"));
}
END_TEST

static const char *write_tmp(const char *name, const char *text) {
  const char *p = eplb_test_tmp(name);
  eplb_test_write_file(p, text, strlen(text));
  return p;
}

START_TEST(file_errors_name_the_field) {
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  const char *ok = write_tmp("m.json", "{\"format\": \"eplb-model\", \"hidden_size\": 4096, "
                                       "\"moe_intermediate_size\": 1024, \"num_experts\": 32, "
                                       "\"topk\": 4, \"shared_experts\": 0, \"weight_bytes\": 2, "
                                       "\"moe_layers\": 24}");
  ck_assert_int_eq(eplb_model_load(ok, &m), EPLB_OK);
  ck_assert_str_eq(m.name, "m"); /* the file's stem */
  ck_assert_double_eq(m.num_experts, 32);
  const char *missing = write_tmp("m2.json", "{\"hidden_size\": 4096, \"moe_intermediate_size\": "
                                             "1024, \"num_experts\": 32, \"shared_experts\": 0, "
                                             "\"weight_bytes\": 2, \"moe_layers\": 24}");
  ck_assert_int_eq(eplb_model_read(missing, &m), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "topk"));
  const char *zero = write_tmp("m3.json", "{\"hidden_size\": 0, \"moe_intermediate_size\": 1024, "
                                          "\"num_experts\": 32, \"topk\": 4, \"shared_experts\": "
                                          "0, \"weight_bytes\": 2, \"moe_layers\": 24}");
  ck_assert_int_eq(eplb_model_read(zero, &m), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "hidden_size"));
  const char *gbad = write_tmp("g.json", "{\"name\": \"x\", \"hbm_gbps\": 3000, \"fp8_tflops\": "
                                         "1000, \"bf16_tflops\": 500, \"nvlink_gbps\": 100, "
                                         "\"rdma_gbps\": 40, \"launch_us\": 2, "
                                         "\"hbm_efficiency\": 1.5, \"mma_efficiency\": 0.6}");
  ck_assert_int_eq(eplb_gpu_load(gbad, &g), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "hbm_efficiency"));
  const char *gneg = write_tmp("g2.json", "{\"hbm_gbps\": -1}");
  ck_assert_int_eq(eplb_gpu_read(gneg, &g), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "hbm_gbps"));
  const char *unk = write_tmp("g3.json", "{\"hbm_gbs\": 1}");
  ck_assert_int_eq(eplb_gpu_read(unk, &g), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "hbm_gbs"));
  ck_assert_int_eq(eplb_gpu_read(eplb_test_tmp("none.json"), &g), EPLB_EIO);
  /* The all-to-all latency is a required GPU field like the others. */
  const char *gfull = "{\"hbm_gbps\": 3000, \"fp8_tflops\": 1000, \"bf16_tflops\": 500, "
                      "\"nvlink_gbps\": 100, \"rdma_gbps\": 40, \"launch_us\": 2, "
                      "\"hbm_efficiency\": 0.7, \"mma_efficiency\": 0.6";
  char text[512];
  snprintf(text, sizeof text, "%s}", gfull);
  ck_assert_int_eq(eplb_gpu_read(write_tmp("g4.json", text), &g), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "missing field a2a_latency_us"));
  snprintf(text, sizeof text, "%s, \"a2a_latency_us\": 0}", gfull);
  ck_assert_int_eq(eplb_gpu_read(write_tmp("g5.json", text), &g), EPLB_EFORMAT);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "a2a_latency_us"));
  snprintf(text, sizeof text, "%s, \"a2a_latency_us\": 18.5}", gfull);
  ck_assert_int_eq(eplb_gpu_load(write_tmp("g6.json", text), &g), EPLB_OK);
  ck_assert_double_eq(g.a2a_latency_us, 18.5);
  g.a2a_latency_us = -1;
  ck_assert_int_eq(eplb_gpu_check(&g), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "a2a_latency_us"));
  /* Checks of a description built in code name the field too. */
  eplb_model_preset("mixtral-8x7b", &m);
  m.topk = 0;
  ck_assert_int_eq(eplb_model_check(&m), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "topk"));
}
END_TEST

/* ---- expert time ----------------------------------------------------------- */

START_TEST(expert_time_formula) {
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  eplb_model_preset("deepseek-v3", &m);
  eplb_gpu_preset("h800", &g);
  double mem = 44040192 / (3350 * 0.76 * 1e3);
  double cpt = 6.0 * 7168 * 2048 / (1979 * 0.59 * 1e6);
  ck_assert_double_eq_tol(eplb_model_memory_us(&m, &g), mem, 1e-9);
  ck_assert_double_eq_tol(eplb_model_us_per_token(&m, &g), cpt, 1e-12);
  ck_assert_double_eq(eplb_model_expert_time(&m, &g, 0), 0);
  ck_assert_double_eq(eplb_model_expert_time(&m, &g, -3), 0);
  for (double x = 0.5; x < 1e5; x *= 3.7)
    ck_assert_double_eq_tol(eplb_model_expert_time(&m, &g, x), hypot(mem, cpt * x), 1e-9);
  /* DeepGEMM on H800 (docs/costmodel.md): one expert's two GEMMs, launch included. */
  static const double tok[] = {64, 128, 1024}, us[] = {19.5, 21.5, 81.3};
  for (int i = 0; i < 3; i++) {
    double t = g.launch_us + eplb_model_expert_time(&m, &g, tok[i]);
    ck_assert_msg(fabs(t / us[i] - 1) < 0.10, "%g tokens: %g us, published %g", tok[i], t, us[i]);
  }
  /* BF16 weights use the BF16 peak. */
  eplb_model_preset("mixtral-8x7b", &m);
  ck_assert_double_eq_tol(eplb_model_us_per_token(&m, &g), 6.0 * 4096 * 14336 / (989 * 0.59 * 1e6),
                          1e-12);
}
END_TEST

/* ---- all-to-all: DeepEP's published tables (docs/costmodel.md) --------------- */

/* Per token of a source GPU, what DeepEP's normal-kernel benchmark routes
 * (tests/test_internode.py: 256 experts, top-8 among the top min(nodes, 4)
 * node groups by their best score, scores i.i.d., so only their order
 * matters): the (token, node) pairs the published bandwidth counts (the own
 * node included; (token, rank) pairs on one node, tests/test_intranode.py),
 * remote nodes (one RDMA copy each) and
 * NVLink copies (to each rank hit other than the forwarder, the rank with the
 * source's local index). */
typedef struct ep_traffic {
  double counted, rdma, nvlink;
} ep_traffic_t;

static ep_traffic_t deepep_routing(uint32_t nodes, uint32_t tokens, uint64_t *rng) {
  enum { E = 256, K = 8, GPN = 8 };
  uint32_t G = nodes * GPN, epg = E / G, epn = E / nodes, kg = nodes < 4 ? nodes : 4;
  ep_traffic_t t = {0, 0, 0};
  double sc[E];
  for (uint32_t n = 0; n < tokens; n++) {
    for (uint32_t e = 0; e < E; e++) {
      *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
      sc[e] = (double)(*rng >> 11);
    }
    double best[8] = {0};
    uint8_t group[8] = {0}, hit_rank[64] = {0}, hit_node[8] = {0};
    for (uint32_t m = 0; m < nodes; m++)
      for (uint32_t e = m * epn; e < (m + 1) * epn; e++)
        best[m] = sc[e] > best[m] ? sc[e] : best[m];
    for (uint32_t k = 0; k < kg; k++) { /* the kg best groups */
      uint32_t b = nodes;
      for (uint32_t m = 0; m < nodes; m++)
        if (!group[m] && (b == nodes || best[m] > best[b]))
          b = m;
      group[b] = 1;
    }
    for (uint32_t k = 0; k < K; k++) { /* top-K experts of those groups */
      uint32_t b = E;
      for (uint32_t e = 0; e < E; e++)
        if (group[e / epn] && sc[e] >= 0 && (b == E || sc[e] > sc[b]))
          b = e;
      sc[b] = -1;
      hit_rank[b / epg] = 1;
      hit_node[b / epg / GPN] = 1;
    }
    uint32_t src = n % G;
    for (uint32_t r = 0; r < G; r++) {
      t.nvlink += hit_rank[r] && r % GPN != src % GPN;
      t.counted += nodes == 1 && hit_rank[r]; /* intranode: (token, rank) pairs */
    }
    for (uint32_t m = 0; m < nodes; m++) {
      t.counted += nodes > 1 && hit_node[m];
      t.rdma += hit_node[m] && m != src / GPN;
    }
  }
  t.counted /= tokens, t.rdma /= tokens, t.nvlink /= tokens;
  return t;
}

START_TEST(all_to_all_reproduces_deepep) {
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  eplb_model_preset("deepseek-v3", &m);
  eplb_gpu_preset("h800", &g);
  const double bytes[2] = {eplb_model_dispatch_bytes(&m), eplb_model_combine_bytes(&m)};
  /* Normal kernels, 4096 tokens per GPU: published "bottleneck bandwidth" =
   * counted pairs x bytes / time (dispatch, combine) for EP8, 16, 32, 64. */
  static const double normal[4][2] = {{153, 158}, {43, 43}, {58, 57}, {51, 50}};
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (uint32_t i = 0; i < 4; i++) {
    ep_traffic_t t = deepep_routing(1u << i, 4096, &rng);
    for (int k = 0; k < 2; k++) {
      double pub = 4096 * t.counted * bytes[k] / (normal[i][k] * 1e3);
      double mod = eplb_gpu_a2a_time_us(&g, 4096 * t.nvlink * bytes[k], 4096 * t.rdma * bytes[k]);
      ck_assert_msg(fabs(mod / pub - 1) < 0.10, "normal EP%u %s: %g us, published %g", 8u << i,
                    k ? "combine" : "dispatch", mod, pub);
    }
  }
  /* Low-latency kernels, 128 tokens x top-8 = 1,024 copies per GPU, one per
   * (token, expert): (8 - 1) / G of them to this node's other GPUs over NVLink,
   * (G - 8) / G over RDMA; published latencies (µs) for EP8 .. EP256. */
  static const double ll[6][2] = {{77, 114},  {118, 195}, {155, 273},
                                  {173, 314}, {192, 369}, {194, 360}};
  for (uint32_t i = 0; i < 6; i++) {
    double G = 8u << i;
    for (int k = 0; k < 2; k++) {
      double mod = eplb_gpu_a2a_time_us(&g, 1024 * 7 / G * bytes[k], 1024 * (G - 8) / G * bytes[k]);
      ck_assert_msg(fabs(mod / ll[i][k] - 1) < 0.10, "low-latency EP%g %s: %g us, published %g", G,
                    k ? "combine" : "dispatch", mod, ll[i][k]);
    }
  }
  /* The rule itself: latency + the slower link; bad GPUs cost nothing. */
  ck_assert_double_eq_tol(eplb_gpu_a2a_time_us(&g, 132e3, 0), g.a2a_latency_us + 1, 1e-9);
  ck_assert_double_eq_tol(eplb_gpu_a2a_time_us(&g, 132e3, 85e3), g.a2a_latency_us + 2, 1e-9);
  ck_assert_double_eq(eplb_gpu_a2a_time_us(NULL, 1, 1), 0);
  /* Per token, the split's all-to-all term takes the slower link too. */
  double per = eplb_model_a2a_us_per_token(&m, &g, 32, 8);
  ck_assert_double_eq_tol(per, (bytes[0] + bytes[1]) * 24.0 / 32 / (g.rdma_gbps * 1e3), 1e-12);
}
END_TEST

/* ---- decode split and policy ------------------------------------------------ */

/* The modelled time of the slowest GPU (the objective of eplb/model.h). */
static double model_time(const eplb_model_desc_t *m, const eplb_gpu_desc_t *g, double beta,
                         uint32_t G, uint32_t R, const uint32_t *spg, const uint32_t *p2l,
                         const double *share, const double *w) {
  double worst = 0;
  uint32_t r = 0;
  for (uint32_t q = 0; q < G; q++) {
    double f = 0;
    int act = 0;
    for (uint32_t i = 0; i < spg[q]; i++, r++) {
      double x = share[r] * w[p2l[r]];
      f += eplb_model_expert_time(m, g, x) + beta * x;
      act |= x > 0;
    }
    f += act ? g->launch_us : 0;
    worst = f > worst ? f : worst;
  }
  (void)R;
  return worst;
}

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

START_TEST(decode_split_is_feasible_and_never_worse) {
  enum { E = 16, G = 4, S = 6, R = G * S };
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  eplb_model_preset("deepseek-v3", &m);
  eplb_gpu_preset("h800", &g);
  eplb_split_t *sp = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &sp), EPLB_OK);
  uint32_t spg[G] = {S, S, S, S}, p2l[R];
  double w[E], share[R], base[R], gl[G], gt[G], mx;
  eplb_decode_split_options_t o;
  eplb_decode_split_options_default(&o);
  o.a2a_us_per_token = eplb_model_a2a_us_per_token(&m, &g, G, G);
  o.launch_us = g.launch_us;
  for (int trial = 0; trial < 200; trial++) {
    /* Every expert once, then 8 spare replicas of random experts. */
    for (uint32_t r = 0; r < R; r++)
      p2l[r] = r < E ? r : (uint32_t)(urand() * E);
    double scale = trial % 2 ? 20 : 2000; /* decode-sized and prefill-sized batches */
    for (uint32_t e = 0; e < E; e++)
      w[e] = floor(scale * urand() * urand() * 4);
    eplb_split_problem_t pb = {E, G, R, p2l, spg};
    ck_assert_int_eq(eplb_decode_split(sp, &pb, w, &m, &g, &o, share, gt, &mx), EPLB_OK);
    double sum[E] = {0};
    for (uint32_t r = 0; r < R; r++) {
      ck_assert(share[r] >= 0 && share[r] <= 1 + 1e-12);
      sum[p2l[r]] += share[r];
    }
    for (uint32_t e = 0; e < E; e++)
      ck_assert_double_eq_tol(sum[e], 1, 1e-9);
    /* A GPU reads an expert's weights once: of its replicas on one GPU one
     * at most gets tokens (an expert without any keeps its shares). */
    for (uint32_t r = 0; r < R; r++)
      for (uint32_t q = r + 1; q < R && share[r] > 0 && w[p2l[r]] > 0; q++)
        ck_assert_msg(!(p2l[q] == p2l[r] && q / S == r / S && share[q] > 0),
                      "trial %d: slots %u and %u of GPU %u both read expert %u", trial, r, q, r / S,
                      p2l[r]);
    eplb_split_result_t res = {base, NULL, gl, NULL, NULL, 0, 0, 0, 0, 0};
    ck_assert_int_eq(eplb_split_solve(sp, &pb, w, &res), EPLB_OK);
    double beta = o.a2a_us_per_token;
    double td = model_time(&m, &g, beta, G, R, spg, p2l, share, w);
    double tb = model_time(&m, &g, beta, G, R, spg, p2l, base, w);
    ck_assert_msg(td <= tb * (1 + 1e-9), "trial %d: decode %g > balanced %g", trial, td, tb);
    ck_assert_double_eq_tol(mx, td, 1e-6 * td + 1e-9);
  }
  /* The deployment's options are these. */
  eplb_decode_split_options_t dep;
  eplb_decode_split_options_default(&dep);
  eplb_decode_split_options_for(&m, &g, G, G, &dep);
  ck_assert_double_eq(dep.a2a_us_per_token, o.a2a_us_per_token);
  ck_assert_double_eq(dep.launch_us, o.launch_us);
  ck_assert_uint_eq(dep.max_moves, 0);
  eplb_decode_split_options_default(&dep);
  eplb_decode_split_options_for(NULL, &g, G, G, &dep);
  ck_assert_double_eq(dep.a2a_us_per_token, 0);
  /* Bad options. */
  o.a2a_us_per_token = -1;
  eplb_split_problem_t pb = {E, G, R, p2l, spg};
  ck_assert_int_eq(eplb_decode_split(sp, &pb, w, &m, &g, &o, share, NULL, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb_decode_split(sp, &pb, w, NULL, &g, NULL, share, NULL, NULL), EPLB_EINVAL);
  eplb_split_destroy(sp);
}
END_TEST

/* Plans one layer of loads w[E] with `pol` and returns its modelled time. */
static double plan_time(eplb_plan_policy_t pol, const double *w, uint32_t E, uint32_t G, uint32_t R,
                        const eplb_model_desc_t *m, const eplb_gpu_desc_t *g) {
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(1, E, &ld), EPLB_OK);
  memcpy(ld->values, w, E * sizeof *w);
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = pol;
  o.num_gpus = G;
  o.num_replicas = R;
  o.model = m;
  o.gpu = g;
  o.threads = 1;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_OK);
  uint32_t p2l[256];
  const int32_t *ph = eplb_plan_phy2log(p, 0);
  for (uint32_t r = 0; r < R; r++)
    p2l[r] = (uint32_t)ph[r];
  double beta = eplb_model_a2a_us_per_token(m, g, G, G);
  double t =
      model_time(m, g, beta, G, R, eplb_plan_slots_per_gpu(p), p2l, eplb_plan_share(p, 0), w);
  eplb_plan_destroy(p);
  eplb_loads_destroy(ld);
  return t;
}

START_TEST(decode_policy_beats_deepseek_and_keeps_up_with_balanced) {
  enum { E = 32, G = 8, R = 48 };
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  eplb_model_preset("deepseek-v3", &m);
  eplb_gpu_preset("h800", &g);
  double w[E];
  /* A decode step: a few dozen tokens per expert, skewed (memory-bound). */
  for (uint32_t e = 0; e < E; e++)
    w[e] = floor(80.0 / (1 + e % 11));
  double td = plan_time(EPLB_POLICY_DECODE, w, E, G, R, &m, &g);
  double tds = plan_time(EPLB_POLICY_DEEPSEEK, w, E, G, R, &m, &g);
  double tb = plan_time(EPLB_POLICY_BALANCED, w, E, G, R, &m, &g);
  ck_assert_msg(td < 0.95 * tds, "decode %g vs deepseek %g", td, tds);
  ck_assert_msg(td <= tb * (1 + 1e-9), "decode %g vs balanced %g", td, tb);
  /* A prefill-sized step (compute-bound): token balance is what counts. */
  for (uint32_t e = 0; e < E; e++)
    w[e] = floor(40000.0 / (1 + e % 11));
  td = plan_time(EPLB_POLICY_DECODE, w, E, G, R, &m, &g);
  tb = plan_time(EPLB_POLICY_BALANCED, w, E, G, R, &m, &g);
  ck_assert_msg(td <= tb * 1.01, "decode %g vs balanced %g on a large batch", td, tb);
  /* Without a model and GPU the policy cannot plan. */
  eplb_loads_t *ld = NULL;
  ck_assert_int_eq(eplb_loads_create(1, E, &ld), EPLB_OK);
  eplb_plan_options_t o;
  eplb_plan_options_default(&o);
  o.policy = EPLB_POLICY_DECODE;
  o.num_gpus = G;
  o.num_replicas = R;
  eplb_plan_t *p = NULL;
  ck_assert_int_eq(eplb_plan_create(ld, &o, &p), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "model"));
  eplb_plan_policy_t pol;
  ck_assert_int_eq(eplb_plan_policy_parse("decode", &pol), EPLB_OK);
  ck_assert_int_eq(pol, EPLB_POLICY_DECODE);
  ck_assert_str_eq(eplb_plan_policy_str(EPLB_POLICY_DECODE), "decode");
  eplb_loads_destroy(ld);
}
END_TEST

/* eplb_decode_split_time is the objective (model_time above) of any shares;
 * eplb_decode_split_refine from the token-balanced split is
 * eplb_decode_split, reports the start's time and never ends above it. */
START_TEST(decode_split_time_and_refine) {
  enum { E = 16, G = 4, S = 6, R = G * S };
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  eplb_model_preset("deepseek-v3", &m);
  eplb_gpu_preset("h20", &g);
  eplb_split_t *sp = NULL;
  ck_assert_int_eq(eplb_split_create(NULL, &sp), EPLB_OK);
  uint32_t spg[G] = {S, S, S, S}, p2l[R];
  double w[E], base[R], share[R], again[R], gl[G], gt[G], ts, tr, tt, mx;
  eplb_decode_split_options_t o;
  eplb_decode_split_options_default(&o);
  o.a2a_us_per_token = eplb_model_a2a_us_per_token(&m, &g, G, 2);
  o.launch_us = g.launch_us;
  int gained = 0;
  for (int trial = 0; trial < 50; trial++) {
    for (uint32_t r = 0; r < R; r++)
      p2l[r] = r < E ? r : (uint32_t)(urand() * E);
    for (uint32_t e = 0; e < E; e++)
      w[e] = floor(12 * urand() * urand()); /* ESFT-like: a few tokens */
    eplb_split_problem_t pb = {E, G, R, p2l, spg};
    eplb_split_result_t res = {base, NULL, gl, NULL, NULL, 0, 0, 0, 0, 0};
    ck_assert_int_eq(eplb_split_solve(sp, &pb, w, &res), EPLB_OK);
    ck_assert_int_eq(eplb_decode_split_time(&pb, w, &m, &g, &o, base, gt, &tt), EPLB_OK);
    double want = model_time(&m, &g, o.a2a_us_per_token, G, R, spg, p2l, base, w);
    ck_assert_double_eq_tol(tt, want, 1e-9 * want + 1e-12);
    double gmax = 0;
    for (uint32_t q = 0; q < G; q++)
      gmax = fmax(gmax, gt[q]);
    ck_assert(gmax == tt);
    ck_assert_int_eq(eplb_decode_split_refine(&pb, w, &m, &g, &o, base, share, &ts, &tr), EPLB_OK);
    ck_assert(ts == tt && tr <= ts);
    gained += tr < ts;
    ck_assert_int_eq(eplb_decode_split(sp, &pb, w, &m, &g, &o, again, NULL, &mx), EPLB_OK);
    /* Its own (warm) solve of the same start: the same search. */
    ck_assert_double_eq_tol(mx, tr, 1e-9 * tr);
    for (uint32_t r = 0; r < R; r++)
      ck_assert_double_eq_tol(again[r], share[r], 1e-9);
    /* In place (share = start). */
    ck_assert_int_eq(eplb_decode_split_refine(&pb, w, &m, &g, &o, base, base, NULL, NULL), EPLB_OK);
    for (uint32_t r = 0; r < R; r++)
      ck_assert(base[r] == share[r]);
  }
  ck_assert_int_gt(gained, 10);
  eplb_split_problem_t pb = {E, G, R, p2l, spg};
  share[0] = 1.5;
  ck_assert_int_eq(eplb_decode_split_time(&pb, w, &m, &g, &o, share, NULL, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb_decode_split_time(&pb, w, NULL, &g, &o, base, NULL, NULL), EPLB_EINVAL);
  ck_assert_int_eq(eplb_decode_split_refine(&pb, w, &m, &g, &o, base, NULL, NULL, NULL),
                   EPLB_EINVAL);
  p2l[0] = E;
  ck_assert_int_eq(eplb_decode_split_time(&pb, w, &m, &g, &o, base, NULL, NULL), EPLB_ERANGE);
  eplb_split_destroy(sp);
}
END_TEST

/* ---- the deployment of a run (eplb sim, eplb plan --policy decode) -------- */

START_TEST(deployment_from_names_files_or_the_data) {
  eplb_model_desc_t m;
  eplb_gpu_desc_t g;
  int have = -1;
  /* The data's model when it has a preset; the GPU defaults to h800. */
  eplb_deployment_request_t q = {NULL, NULL, "deepseek-ai/DeepSeek-V2-Lite-Chat", "t.eplbt", 64, 1,
                                 NULL, NULL};
  ck_assert_int_eq(eplb_deployment_resolve(&q, &m, &g, &have), EPLB_OK);
  ck_assert_int_eq(have, 1);
  ck_assert_str_eq(m.name, "deepseek-v2-lite");
  ck_assert_str_eq(g.name, "h800");
  /* A name given wins over the data's; its experts must match the data's. */
  q.model = "deepseek-v3", q.gpu = "h20", q.num_experts = 256;
  ck_assert_int_eq(eplb_deployment_resolve(&q, &m, &g, &have), EPLB_OK);
  ck_assert_str_eq(m.name, "deepseek-v3");
  ck_assert_str_eq(g.name, "h20");
  q.num_experts = 64, q.model_label = "--model";
  ck_assert_int_eq(eplb_deployment_resolve(&q, &m, &g, &have), EPLB_ESHAPE);
  ck_assert_int_eq(have, 0);
  ck_assert_str_eq(eplb_error_detail(),
                   "--model deepseek-v3 has 256 experts per layer, t.eplbt has 64");
  /* Not needed and nothing asked for: no deployment, no error. */
  eplb_deployment_request_t none = {NULL, NULL, "my-moe", "t.eplbt", 64, 0, NULL, NULL};
  ck_assert_int_eq(eplb_deployment_resolve(&none, &m, &g, &have), EPLB_OK);
  ck_assert_int_eq(have, 0);
  /* Needed (or a GPU given) but the data's model has no preset, or there is none. */
  none.gpu = "h100";
  ck_assert_int_eq(eplb_deployment_resolve(&none, &m, &g, &have), EPLB_EINVAL);
  ck_assert_str_eq(eplb_error_detail(),
                   "t.eplbt: model 'my-moe' has no preset: give model NAME|FILE (deepseek-v2-lite, "
                   "deepseek-v3, qwen3-235b-a22b, kimi-k2, mixtral-8x7b, or a model file)");
  none.gpu = NULL, none.required = 1, none.data_model = "", none.model_label = "--model";
  ck_assert_int_eq(eplb_deployment_resolve(&none, &m, &g, &have), EPLB_EINVAL);
  ck_assert_str_eq(eplb_error_detail(), "t.eplbt names no model: give --model NAME|FILE");
  /* Names quoted from input keep their control characters readable, on one line. */
  none.source = "x\ny\x01.eplbt", none.data_model = "a\tb";
  ck_assert_int_eq(eplb_deployment_resolve(&none, &m, &g, &have), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "x\\ny\\x01.eplbt: model 'a\\tb' has no"));
  /* A load's failure is named by its label. */
  q.model = "no-such-model";
  ck_assert_int_eq(eplb_deployment_resolve(&q, &m, &g, &have), EPLB_EINVAL);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "--model: no model preset 'no-such-model'"));
  q.model = NULL, q.gpu = "/nonexistent/gpu.json", q.gpu_label = "--gpu";
  ck_assert_int_eq(eplb_deployment_resolve(&q, &m, &g, &have), EPLB_EIO);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "--gpu: /nonexistent/gpu.json: cannot read"));
  q.gpu_label = NULL;
  ck_assert_int_eq(eplb_deployment_resolve(&q, &m, &g, &have), EPLB_EIO);
  ck_assert_ptr_nonnull(strstr(eplb_error_detail(), "gpu: /nonexistent/gpu.json: cannot read"));
  ck_assert_int_eq(eplb_deployment_resolve(NULL, &m, &g, &have), EPLB_EINVAL);
  ck_assert_int_eq(eplb_deployment_resolve(&q, &m, NULL, &have), EPLB_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("planner-decode");
  TCase *tc = tcase_create("decode");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, presets_load);
  tcase_add_test(tc, file_errors_name_the_field);
  tcase_add_test(tc, deployment_from_names_files_or_the_data);
  tcase_add_test(tc, expert_time_formula);
  tcase_add_test(tc, all_to_all_reproduces_deepep);
  tcase_add_test(tc, decode_split_is_feasible_and_never_worse);
  tcase_add_test(tc, decode_split_time_and_refine);
  tcase_add_test(tc, decode_policy_beats_deepseek_and_keeps_up_with_balanced);
  suite_add_tcase(s, tc);
  return eplb_test_run(s);
}
