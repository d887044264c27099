/* eplb/model.h — what a deployment costs: a description of the MoE model and
 * of the GPU, the modelled time of one expert replica, and the decode-aware
 * per-batch split built on it (sources of every preset: docs/costmodel.md).
 *
 * Thread rules: the functions keep no state; any thread may call them on
 * distinct outputs, except that a split handle (eplb_decode_split) is used by
 * one thread at a time (eplb/split.h). Descriptions are plain structs owned
 * by the caller.
 *
 * ---- Expert time -----------------------------------------------------------
 * One routed expert is a gated FFN: gate and up (hidden -> 2 x moe_intermediate)
 * and down (moe_intermediate -> hidden), so per replica
 *   weight bytes  W = 3 x hidden x moe_intermediate x weight_bytes
 *   FLOPs/token   F = 2 x 3 x hidden x moe_intermediate
 * and for x > 0 tokens routed to it
 *   m = W / (hbm_gbps x hbm_efficiency)            (reading its weights)
 *   c = F x / (peak x mma_efficiency)              (peak: fp8_tflops when
 *                                                   weight_bytes <= 1, else bf16)
 *   t(x) = (m^2 + c^2)^(1/2)
 * and t(0) = 0: a replica that gets no token is not read. The blend is a
 * smoothed roofline, max(m, c) within a factor sqrt(2) at the knee and equal to
 * it far from the knee: DeepGEMM's measured grouped GEMMs sit between the two
 * roofs near the knee (256 tokens: 25.4 µs where max() says 19.6), and the
 * blend reproduces them within 5% (docs/costmodel.md). A GPU whose layer has
 * any active replica also pays launch_us once (one grouped-GEMM launch).
 *
 * In memory-bound decode a GPU's MoE time is thus about m x (its active
 * replicas), not its token count: the decode policy and eplb_decode_split
 * minimise it.
 *
 * ---- All-to-all ----------------------------------------------------------
 * Each (token, destination GPU) copy moves dispatch bytes hidden x 1 + hidden
 * / 128 x 4 (FP8 with one float scale per 128 values, DeepEP's dispatch) and
 * combine bytes hidden x 2 (BF16), over NVLink within a node (nvlink_gbps)
 * and RDMA between nodes (rdma_gbps, per GPU). The two links run at once, so
 * a GPU's side (send or receive) of a dispatch or combine takes
 *   a2a_latency_us + max(NVLink bytes / nvlink_gbps, RDMA bytes / rdma_gbps),
 * the latency being what a kernel costs however few copies it moves (DeepEP's
 * low-latency kernels: 128 tokens take 77 µs on one node where the bytes alone
 * take 50). Fitted together to DeepEP's published tables (docs/costmodel.md).
 *
 * ---- Files -----------------------------------------------------------------
 * Model file (JSON; every field required and > 0 except shared_experts >= 0):
 *   {"format": "eplb-model", "name": "my-moe", "hidden_size": 7168,
 *    "moe_intermediate_size": 2048, "num_experts": 256, "topk": 8,
 *    "shared_experts": 1, "weight_bytes": 1, "moe_layers": 58}
 * GPU file (every field required and > 0, efficiencies in (0, 1]):
 *   {"format": "eplb-gpu", "name": "my-gpu", "hbm_gbps": 3350,
 *    "fp8_tflops": 1979, "bf16_tflops": 989, "nvlink_gbps": 160,
 *    "rdma_gbps": 45, "launch_us": 2, "hbm_efficiency": 0.67,
 *    "mma_efficiency": 0.58, "a2a_latency_us": 23}
 * "format" is optional; "name" optional (the file name's stem otherwise);
 * unknown keys are EPLB_EFORMAT. A missing or non-positive field is
 * EPLB_EFORMAT with the detail naming the file and the field.
 */
#ifndef EPLB_MODEL_H
#define EPLB_MODEL_H

#include "eplb/common.h"
#include "eplb/split.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eplb_model_desc {
  char name[64];
  double hidden_size;           /* model dimension */
  double moe_intermediate_size; /* one routed expert's FFN width */
  double num_experts;           /* routed experts per MoE layer */
  double topk;                  /* routed experts per token */
  double shared_experts;        /* >= 0, always active (not placed by eplb) */
  double weight_bytes;          /* bytes per expert weight: 1 = FP8, 2 = BF16 */
  double moe_layers;            /* MoE layers */
} eplb_model_desc_t;

typedef struct eplb_gpu_desc {
  char name[64];
  double hbm_gbps;       /* HBM bandwidth, GB/s (datasheet) */
  double fp8_tflops;     /* dense FP8 tensor TFLOPS (datasheet, without sparsity) */
  double bf16_tflops;    /* dense BF16 tensor TFLOPS */
  double nvlink_gbps;    /* usable NVLink bandwidth per GPU and direction, GB/s */
  double rdma_gbps;      /* usable RDMA bandwidth per GPU, GB/s */
  double launch_us;      /* kernel launch latency paid once per GPU and layer */
  double hbm_efficiency; /* fraction of hbm_gbps a grouped GEMM reaches, (0, 1] */
  double mma_efficiency; /* fraction of the peak a grouped GEMM reaches, (0, 1] */
  /* Appended (ABI: fields only ever go at the end). */
  double a2a_latency_us; /* fixed time of one dispatch or one combine kernel, µs, > 0 */
} eplb_gpu_desc_t;

/* Presets: models "deepseek-v2-lite", "deepseek-v3", "qwen3-235b-a22b", "kimi-k2",
 * "mixtral-8x7b"; GPUs "h100", "h200", "h800", "h20". Names match case-insensitively;
 * for models also a Hugging Face id ("deepseek-ai/DeepSeek-V2-Lite": the part after the
 * last '/') and the suffixes -chat, -instruct, -base. EPLB_EINVAL for NULL or an unknown
 * name (the detail lists the known ones). */
EPLB_API eplb_status_t eplb_model_preset(const char *name, eplb_model_desc_t *out);
EPLB_API eplb_status_t eplb_gpu_preset(const char *name, eplb_gpu_desc_t *out);

/* The i-th preset name (NULL past the end), for help texts: static strings. */
EPLB_API const char *eplb_model_preset_name(uint32_t i);
EPLB_API const char *eplb_gpu_preset_name(uint32_t i);

/* Reads a model or GPU file (see the file comment). EPLB_EIO (cannot read),
 * EPLB_EFORMAT (bad JSON, unknown key, missing or out-of-range field: the detail
 * names the file and the field), EPLB_EINVAL (NULL). *out is written on success. */
EPLB_API eplb_status_t eplb_model_read(const char *path, eplb_model_desc_t *out);
EPLB_API eplb_status_t eplb_gpu_read(const char *path, eplb_gpu_desc_t *out);

/* A preset name, else a file path (a name with '/' or ending in ".json" is a
 * file; otherwise a preset when there is one, else a file). */
EPLB_API eplb_status_t eplb_model_load(const char *name_or_path, eplb_model_desc_t *out);
EPLB_API eplb_status_t eplb_gpu_load(const char *name_or_path, eplb_gpu_desc_t *out);

/* ---- the deployment of a run ------------------------------------------------
 * The rule `eplb sim` and `eplb plan --policy decode` share for the model and GPU a run
 * is costed on: the model given (a preset name or model file, eplb_model_load), else the
 * preset of the model the data names (a trace's eplb_trace_meta_t.model); the GPU given
 * (eplb_gpu_load), else "h800". The model must have the data's experts per layer. */
typedef struct eplb_deployment_request {
  const char *model;       /* preset name or model file; NULL: the preset of data_model */
  const char *gpu;         /* preset name or GPU file; NULL: "h800" */
  const char *data_model;  /* the model the data names; NULL or "": none */
  const char *source;      /* names the data in details (e.g. the trace's path) */
  uint32_t num_experts;    /* the data's experts per layer */
  int required;            /* nonzero: a model is needed (the decode policy) */
  const char *model_label; /* names `model` in details (e.g. "--model"; NULL: "model") */
  const char *gpu_label;   /* names `gpu` in details (e.g. "--gpu"; NULL: "gpu") */
} eplb_deployment_request_t;

/* Resolves req into *model and *gpu and sets *have to 1; or, when no model is given nor
 * has the data's model a preset, req->required is 0 and no GPU is given, loads nothing
 * and sets *have to 0 (no deployment: the caller keeps its cost model). Returns EPLB_OK;
 * the statuses of eplb_model_load / eplb_gpu_load (detail "<label>: <their detail>");
 * EPLB_EINVAL: the data's model has no preset ("<source>: model 'X' has no preset: give
 * <model label> NAME|FILE (<presets>, or a model file)") or names none ("<source> names
 * no model: ..."), or a NULL argument; EPLB_ESHAPE: the model's experts per layer differ
 * from num_experts ("<model label> NAME has X experts per layer, <source> has Y"). These
 * details quote the source and model names with control characters as \n, \r, \t or \xNN
 * (one line, as a tool prints input). *model and *gpu (the caller's) are complete only
 * when *have is 1. Any thread. */
EPLB_API eplb_status_t eplb_deployment_resolve(const eplb_deployment_request_t *req,
                                               eplb_model_desc_t *model, eplb_gpu_desc_t *gpu,
                                               int *have);

/* Field checks (the file rules): EPLB_OK or EPLB_EINVAL naming the field. */
EPLB_API eplb_status_t eplb_model_check(const eplb_model_desc_t *model);
EPLB_API eplb_status_t eplb_gpu_check(const eplb_gpu_desc_t *gpu);

/* Derived figures (0 for NULL arguments). */
EPLB_API double eplb_model_expert_bytes(const eplb_model_desc_t *model);
EPLB_API double eplb_model_dispatch_bytes(const eplb_model_desc_t *model);
EPLB_API double eplb_model_combine_bytes(const eplb_model_desc_t *model);
/* m: µs to read one replica's weights. */
EPLB_API double eplb_model_memory_us(const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu);
/* µs of compute per token at the reachable peak. */
EPLB_API double eplb_model_us_per_token(const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu);
/* t(tokens) of the file comment, launch latency excluded (tokens <= 0 -> 0). */
EPLB_API double eplb_model_expert_time(const eplb_model_desc_t *model, const eplb_gpu_desc_t *gpu,
                                       double tokens);

/* ---- decode-aware per-batch split ------------------------------------------
 * Over a fixed placement (eplb/split.h's problem: E experts, G GPUs, R slots GPU-major),
 * amounts x_r >= 0 with sum over e's replicas = w_e that minimise the modelled time of
 * the slowest GPU,
 *   f_g = launch_us [g has an active replica] + sum over g's replicas with x_r > 0 of
 *         t(x_r) + a2a_us_per_token x (tokens on g),
 * so that where an expert's tokens are few they go to one replica (one weight read), and
 * where they are many they spread (token balance). The search starts from the
 * token-balanced split (eplb_split_solve's T*) and never raises the slowest GPU: first it
 * gathers each replicated expert's tokens on fewer replicas wherever both GPUs involved
 * stay at or below the slowest and their total time drops (passes repeat while anything
 * moves, at most 8), then it lowers the slowest GPU one move at a time, moving all or part of one
 * of its replicas' tokens to another replica of the same expert (whole moves free a weight read;
 * partial moves even out two GPUs), at most max_moves moves. The result is never worse than the
 * token-balanced split under f_g. */
typedef struct eplb_decode_split_options {
  uint32_t struct_size;    /* the caller's sizeof (common.h, "Struct sizes") */
  double a2a_us_per_token; /* >= 0: µs per token landing on a GPU (all-to-all receive) */
  double launch_us;        /* >= 0: paid once by a GPU with any active replica */
  uint32_t max_moves;      /* moves of the second stage (default 0 = 4 x G + 16) */
} eplb_decode_split_options_t;

/* Defaults: a2a 0, launch 0, max_moves 0. init: EPLB_OK, or
 * EPLB_EINVAL (NULL, a size out of range; common.h, "Struct sizes"). */
EPLB_API eplb_status_t eplb_decode_split_options_init(eplb_decode_split_options_t *opts,
                                                      size_t size);
/* The defaults at the caller's sizeof, through eplb_decode_split_options_init. */
static inline void eplb_decode_split_options_default(eplb_decode_split_options_t *opts) {
  (void)eplb_decode_split_options_init(opts, sizeof *opts);
}

/* The options of a deployment: the defaults, a2a_us_per_token of
 * eplb_model_a2a_us_per_token for num_gpus GPUs of gpus_per_node each (0 or more than
 * num_gpus: one node), launch_us the GPU's. What the decode policy, the simulator and
 * the runtime's per-batch split all use. A NULL model or GPU gives the defaults. *out
 * is set up by eplb_decode_split_options_default first: at most its struct_size bytes
 * are written (common.h, "Struct sizes"). EPLB_OK, or EPLB_EINVAL (NULL out, a size out
 * of range). Appended (ABI). */
EPLB_API eplb_status_t eplb_decode_split_options_for(const eplb_model_desc_t *model,
                                                     const eplb_gpu_desc_t *gpu, uint32_t num_gpus,
                                                     uint32_t gpus_per_node,
                                                     eplb_decode_split_options_t *out);

/* a2a_us_per_token for G GPUs of gpus_per_node each (the copy of a token from a
 * uniformly random source: (gpn - 1) / G of them over NVLink, (G - gpn) / G over
 * RDMA, the two links at once: the larger of the two times), with the model's
 * dispatch + combine bytes; the fixed a2a_latency_us is no per-token cost and is
 * left out. 0 for bad arguments. */
EPLB_API double eplb_model_a2a_us_per_token(const eplb_model_desc_t *model,
                                            const eplb_gpu_desc_t *gpu, uint32_t num_gpus,
                                            uint32_t gpus_per_node);

/* One side (send or receive) of one dispatch or combine kernel on a GPU that moves
 * nvlink_bytes over NVLink and rdma_bytes over RDMA: a2a_latency_us + max(nvlink_bytes /
 * nvlink_gbps, rdma_bytes / rdma_gbps) in µs (the file comment's rule; what the simulator
 * charges a deployment). 0 for a NULL GPU or a GPU without positive bandwidths; negative
 * bytes count as 0. Appended (ABI). */
EPLB_API double eplb_gpu_a2a_time_us(const eplb_gpu_desc_t *gpu, double nvlink_bytes,
                                     double rdma_bytes);

/* Solves one layer: problem as eplb_split_solve (split is its handle, for the
 * token-balanced start), loads[E] >= 0 and finite; share[R] receives the shares (per
 * expert >= 0, summing to 1; uniform for an expert without tokens), gpu_time[G]
 * (optional) f_g, *max_time (optional) the largest f_g. Returns EPLB_OK, the statuses of
 * eplb_split_solve, EPLB_EINVAL (NULL model/gpu/share, bad options, bad model or GPU),
 * EPLB_ENOMEM. Allocates its workspace per call. */
EPLB_API eplb_status_t eplb_decode_split(eplb_split_t *split, const eplb_split_problem_t *problem,
                                         const double *loads, const eplb_model_desc_t *model,
                                         const eplb_gpu_desc_t *gpu,
                                         const eplb_decode_split_options_t *opts, double *share,
                                         double *gpu_time, double *max_time);

/* The modelled time f_g above of given shares share[R] (per expert >= 0, in [0, 1]) of
 * loads[E] on the problem's placement: gpu_time[G] (optional) and *max_time (optional)
 * the largest f_g. The figure eplb_decode_split minimises, for comparing splits (the
 * runtime keeps a decode split only where it is below the token-balanced split's).
 * EPLB_OK, EPLB_EINVAL (NULL problem/loads/share/model/gpu, a share outside [0, 1], bad
 * options, bad model or GPU), the problem statuses of eplb_split_solve, EPLB_ENOMEM. */
EPLB_API eplb_status_t eplb_decode_split_time(const eplb_split_problem_t *problem,
                                              const double *loads, const eplb_model_desc_t *model,
                                              const eplb_gpu_desc_t *gpu,
                                              const eplb_decode_split_options_t *opts,
                                              const double *share, double *gpu_time,
                                              double *max_time);

/* eplb_decode_split's search from given shares start[R] instead of the token-balanced
 * split it solves for itself (a caller that has just solved it, like the runtime's
 * per-batch split, saves the second solve): share[R] receives the result (may be start;
 * an expert without tokens keeps start's shares), *start_time (optional) start's largest
 * f_g and *max_time (optional) the result's, never above it. Statuses as
 * eplb_decode_split_time. Allocates its workspace per call. */
EPLB_API eplb_status_t eplb_decode_split_refine(const eplb_split_problem_t *problem,
                                                const double *loads, const eplb_model_desc_t *model,
                                                const eplb_gpu_desc_t *gpu,
                                                const eplb_decode_split_options_t *opts,
                                                const double *start, double *share,
                                                double *start_time, double *max_time);

#ifdef __cplusplus
}
#endif
#endif /* EPLB_MODEL_H */
