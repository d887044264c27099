/* tests/reference/moe_ref.cu — the reference MoE decode layer the GPU
 * check times: router GEMM -> top-k -> map -> per-expert FFN (cuBLAS) ->
 * combine. Same contract as eplb_test_moe_ref (moe_ref.c). Not part of the
 * library. */
#include "tests/reference/reference.h"

#include "kernels/kernels.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct eplb_test_moe_gpu {
  eplb_test_moe_shape_t sh;
  int bf16;
  cublasHandle_t blas;
  void *wr, *w13, *w2, *x, *xg, *act; /* compute type */
  float *scores, *gu, *yg, *y, *topw;
  int32_t *topk, *pos, *slots;
  uint32_t *cursor, *expert_off; /* device [E], [E+1] */
  uint32_t *host_off;            /* [E+1] after route() */
};

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return (int)e_;                                                                              \
  } while (0)
#define CB(call)                                                                                   \
  do {                                                                                             \
    cublasStatus_t s_ = (call);                                                                    \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                               \
      return 1000 + (int)s_;                                                                       \
  } while (0)

namespace {

template <typename T> __device__ T from_f(float v);
template <> __device__ float from_f<float>(float v) { return v; }
template <> __device__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename T>
__global__ void fill(T *p, size_t n, const float *src, uint64_t seed, float scale) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v;
    if (src) {
      v = src[i];
    } else {
      uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
      z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
      v = ((float)(z >> 40) / 16777216.0f * 2 - 1) * scale;
    }
    p[i] = from_f<T>(v);
  }
}

/* One thread per token: the CPU reference's insertion top-k and softmax;
 * each copy gets a row of its expert's block. */
__global__ void topk_kernel(eplb_test_moe_shape_t sh, const float *scores, int32_t *topk, float *topw,
                            const uint32_t *expert_off, uint32_t *cursor, int32_t *pos) {
  uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= sh.batch)
    return;
  int32_t sel[16];
  float sc[16];
  uint32_t k = sh.topk < 16 ? sh.topk : 16;
  for (uint32_t j = 0; j < k; j++)
    sel[j] = -1, sc[j] = -INFINITY;
  for (uint32_t e = 0; e < sh.experts; e++) {
    float s = scores[(size_t)t * sh.experts + e];
    if (sel[k - 1] >= 0 && !(s > sc[k - 1]))
      continue;
    uint32_t p = k - 1;
    while (p > 0 && (sel[p - 1] < 0 || s > sc[p - 1])) {
      sel[p] = sel[p - 1], sc[p] = sc[p - 1];
      p--;
    }
    sel[p] = (int32_t)e, sc[p] = s;
  }
  float sum = 0, w[16];
  for (uint32_t j = 0; j < k; j++)
    sum += w[j] = expf(sc[j] - sc[0]);
  for (uint32_t j = 0; j < k; j++) {
    size_t x = (size_t)t * sh.topk + j;
    topk[x] = sel[j];
    topw[x] = w[j] / sum;
    if (expert_off)
      pos[x] = (int32_t)(expert_off[sel[j]] + atomicAdd(&cursor[sel[j]], 1u));
  }
}

__global__ void histogram(const int32_t *topk, size_t n, uint32_t *cnt) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    atomicAdd(&cnt[topk[i]], 1u);
}

template <typename T>
__global__ void gather(const T *x, const int32_t *pos, uint32_t H, uint32_t K, size_t n, T *xg) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * H)
    return;
  size_t c = i / H, h = i % H;
  xg[(size_t)pos[c] * H + h] = x[c / K * H + h];
}

template <typename T> __global__ void silu_mul(const float *gu, uint32_t F, size_t rows, T *act) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * F)
    return;
  size_t r = i / F, f = i % F;
  float g = gu[r * 2 * F + f], u = gu[r * 2 * F + F + f];
  act[i] = from_f<T>(g / (1 + expf(-g)) * u);
}

__global__ void combine(const float *yg, const int32_t *pos, const float *topw, uint32_t H,
                        uint32_t K, uint32_t B, float *y) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)B * H)
    return;
  size_t t = i / H, h = i % H;
  float acc = 0;
  for (uint32_t j = 0; j < K; j++)
    acc += topw[t * K + j] * yg[(size_t)pos[t * K + j] * H + h];
  y[i] = acc;
}

unsigned blocks(size_t n) { return (unsigned)((n + 255) / 256); }

/* Row-major C[m][n] = A[m][k] W[n][k]^T, i.e. column-major C^T = W^T A^T. */
cublasStatus_t gemm(eplb_test_moe_gpu_t *m, const void *A, const void *W, float *C, int rows, int n,
                    int k) {
  float one = 1, zero = 0;
  cudaDataType_t t = m->bf16 ? CUDA_R_16BF : CUDA_R_32F;
  return cublasGemmEx(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &one, W, t, k, A, t, k, &zero,
                      C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

} // namespace

extern "C" void eplb_test_moe_gpu_destroy(eplb_test_moe_gpu_t *m) {
  if (!m)
    return;
  void *bufs[] = {m->wr, m->w13, m->w2,   m->x,    m->xg,  m->act,   m->scores, m->gu,
                  m->yg, m->y,   m->topw, m->topk, m->pos, m->slots, m->cursor, m->expert_off};
  for (void *b : bufs)
    if (b)
      cudaFree(b);
  if (m->blas)
    cublasDestroy(m->blas);
  free(m->host_off);
  free(m);
}

extern "C" int eplb_test_moe_gpu_create(const eplb_test_moe_shape_t *sh, int bf16, const float *wr,
                                    const float *w1, const float *w3, const float *w2, float scale,
                                    eplb_test_moe_gpu_t **out) {
  *out = NULL;
  eplb_test_moe_gpu_t *m = (eplb_test_moe_gpu_t *)calloc(1, sizeof *m);
  if (!m)
    return (int)cudaErrorMemoryAllocation;
  *out = m; /* the caller destroys on failure */
  m->sh = *sh, m->bf16 = bf16;
  size_t B = sh->batch, H = sh->hidden, F = sh->ffn, E = sh->experts, K = sh->topk,
         es = bf16 ? 2 : 4;
  m->host_off = (uint32_t *)calloc(E + 1, sizeof *m->host_off);
  if (!m->host_off)
    return (int)cudaErrorMemoryAllocation;
  CB(cublasCreate(&m->blas));
  CK(cudaMalloc(&m->wr, E * H * es));
  CK(cudaMalloc(&m->w13, E * 2 * F * H * es));
  CK(cudaMalloc(&m->w2, E * H * F * es));
  CK(cudaMalloc(&m->x, B * H * es));
  CK(cudaMalloc(&m->xg, B * K * H * es));
  CK(cudaMalloc(&m->act, B * K * F * es));
  CK(cudaMalloc(&m->scores, B * E * 4));
  CK(cudaMalloc(&m->gu, B * K * 2 * F * 4));
  CK(cudaMalloc(&m->yg, B * K * H * 4));
  CK(cudaMalloc(&m->y, B * H * 4));
  CK(cudaMalloc(&m->topw, B * K * 4));
  CK(cudaMalloc(&m->topk, B * K * 4));
  CK(cudaMalloc(&m->pos, B * K * 4));
  CK(cudaMalloc(&m->slots, B * K * 4));
  CK(cudaMalloc(&m->cursor, E * 4));
  CK(cudaMalloc(&m->expert_off, (E + 1) * 4));
  /* w13 holds w1 then w3 per expert, so gate and up are one GEMM. */
  float *tmp = NULL;
  if (w1) {
    CK(cudaMalloc(&tmp, E * 2 * F * H * 4));
    for (size_t e = 0; e < E; e++) {
      CK(cudaMemcpy(tmp + e * 2 * F * H, w1 + e * F * H, F * H * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(tmp + (e * 2 + 1) * F * H, w3 + e * F * H, F * H * 4, cudaMemcpyHostToDevice));
    }
  }
  struct {
    void *dst;
    size_t n;
    const float *src;
  } w[] = {{m->wr, E * H, wr}, {m->w13, E * 2 * F * H, w1 ? tmp : NULL}, {m->w2, E * H * F, w2}};
  int err = 0;
  for (int i = 0; i < 3 && !err; i++) {
    const float *src = w[i].src;
    float *dsrc = NULL;
    if (src && src != tmp) {
      err = (int)cudaMalloc(&dsrc, w[i].n * 4);
      if (!err)
        err = (int)cudaMemcpy(dsrc, src, w[i].n * 4, cudaMemcpyHostToDevice);
      src = dsrc;
    }
    if (!err && bf16)
      fill<__nv_bfloat16>
          <<<1024, 256>>>((__nv_bfloat16 *)w[i].dst, w[i].n, src, 77 * (i + 1), scale);
    else if (!err)
      fill<float><<<1024, 256>>>((float *)w[i].dst, w[i].n, src, 77 * (i + 1), scale);
    if (!err)
      err = (int)cudaDeviceSynchronize();
    if (dsrc)
      cudaFree(dsrc);
  }
  if (tmp)
    cudaFree(tmp);
  return err;
}

extern "C" int eplb_test_moe_gpu_set_input(eplb_test_moe_gpu_t *m, const float *x) {
  size_t n = (size_t)m->sh.batch * m->sh.hidden;
  float *d = NULL;
  CK(cudaMalloc(&d, n * 4));
  cudaError_t e = cudaMemcpy(d, x, n * 4, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    if (m->bf16)
      fill<__nv_bfloat16><<<blocks(n), 256>>>((__nv_bfloat16 *)m->x, n, d, 0, 0);
    else
      fill<float><<<blocks(n), 256>>>((float *)m->x, n, d, 0, 0);
    e = cudaDeviceSynchronize();
  }
  cudaFree(d);
  return (int)e;
}

extern "C" int eplb_test_moe_gpu_route(eplb_test_moe_gpu_t *m) {
  const eplb_test_moe_shape_t &s = m->sh;
  CB(gemm(m, m->x, m->wr, m->scores, (int)s.batch, (int)s.experts, (int)s.hidden));
  topk_kernel<<<blocks(s.batch), 256>>>(s, m->scores, m->topk, m->topw, NULL, NULL, NULL);
  CK(cudaMemset(m->cursor, 0, s.experts * 4));
  histogram<<<blocks((size_t)s.batch * s.topk), 256>>>(m->topk, (size_t)s.batch * s.topk,
                                                       m->cursor);
  CK(cudaGetLastError());
  CK(cudaMemcpy(m->host_off + 1, m->cursor, s.experts * 4, cudaMemcpyDeviceToHost));
  m->host_off[0] = 0;
  for (uint32_t e = 0; e < s.experts; e++)
    m->host_off[e + 1] += m->host_off[e];
  CK(cudaMemcpy(m->expert_off, m->host_off, (s.experts + 1) * 4, cudaMemcpyHostToDevice));
  return 0;
}

extern "C" int eplb_test_moe_gpu_forward(eplb_test_moe_gpu_t *m, const eplb_cuda_dispatch_t *d,
                                     void *stream) {
  const eplb_test_moe_shape_t &s = m->sh;
  cudaStream_t st = (cudaStream_t)stream;
  size_t B = s.batch, H = s.hidden, F = s.ffn, K = s.topk, n = B * K, es = m->bf16 ? 2 : 4;
  CB(cublasSetStream(m->blas, st));
  CB(gemm(m, m->x, m->wr, m->scores, (int)B, (int)s.experts, (int)H));
  CK(cudaMemsetAsync(m->cursor, 0, s.experts * 4, st));
  topk_kernel<<<blocks(B), 256, 0, st>>>(s, m->scores, m->topk, m->topw, m->expert_off, m->cursor,
                                         m->pos);
  if (d)
    CK((cudaError_t)eplb__cuda_map_launch(d, 0, m->topk, s.batch, s.topk, 0, m->slots, NULL, st));
  if (m->bf16)
    gather<<<blocks(n * H), 256, 0, st>>>((const __nv_bfloat16 *)m->x, m->pos, s.hidden, s.topk, n,
                                          (__nv_bfloat16 *)m->xg);
  else
    gather<<<blocks(n * H), 256, 0, st>>>((const float *)m->x, m->pos, s.hidden, s.topk, n,
                                          (float *)m->xg);
  CK(cudaGetLastError());
  for (uint32_t e = 0; e < s.experts; e++) {
    uint32_t o = m->host_off[e], c = m->host_off[e + 1] - o;
    if (c)
      CB(gemm(m, (const char *)m->xg + (size_t)o * H * es,
              (const char *)m->w13 + e * 2 * F * H * es, m->gu + (size_t)o * 2 * F, (int)c,
              (int)(2 * F), (int)H));
  }
  if (m->bf16)
    silu_mul<<<blocks(n * F), 256, 0, st>>>(m->gu, s.ffn, n, (__nv_bfloat16 *)m->act);
  else
    silu_mul<<<blocks(n * F), 256, 0, st>>>(m->gu, s.ffn, n, (float *)m->act);
  CK(cudaGetLastError());
  for (uint32_t e = 0; e < s.experts; e++) {
    uint32_t o = m->host_off[e], c = m->host_off[e + 1] - o;
    if (c)
      CB(gemm(m, (const char *)m->act + (size_t)o * F * es, (const char *)m->w2 + e * H * F * es,
              m->yg + (size_t)o * H, (int)c, (int)H, (int)F));
  }
  combine<<<blocks(B * H), 256, 0, st>>>(m->yg, m->pos, m->topw, s.hidden, s.topk, s.batch, m->y);
  return (int)cudaGetLastError();
}

extern "C" int eplb_test_moe_gpu_output(eplb_test_moe_gpu_t *m, float *y, int32_t *topk) {
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(y, m->y, (size_t)m->sh.batch * m->sh.hidden * 4, cudaMemcpyDeviceToHost));
  if (topk)
    CK(cudaMemcpy(topk, m->topk, (size_t)m->sh.batch * m->sh.topk * 4, cudaMemcpyDeviceToHost));
  return 0;
}
