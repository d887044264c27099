#include "kernels/kernels.h"

#include <cuda_runtime.h>

extern "C" int eplb__cuda_device_count_raw(int *count) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky error so later calls start clean */
    return (int)err;
  }
  *count = n;
  return 0;
}

extern "C" const char *eplb__cuda_error_string(int err) {
  return cudaGetErrorString((cudaError_t)err);
}

extern "C" int eplb__cuda_error_is_nodevice(int err) {
  return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
         err == cudaErrorInvalidDevice;
}

extern "C" int eplb__cuda_h2d_async(void *dst, const void *src, size_t bytes, void *stream) {
  return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream);
}

extern "C" int eplb__cuda_d2h_async(void *dst, const void *src, size_t bytes, void *stream) {
  return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
}

extern "C" int eplb__cuda_malloc(void **ptr, size_t bytes) { return (int)cudaMalloc(ptr, bytes); }

extern "C" void eplb__cuda_free(void *ptr) {
  if (ptr)
    (void)cudaFree(ptr);
}

extern "C" int eplb__cuda_stream_query(void *stream) {
  cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
  if (e == cudaErrorNotReady)
    return EPLB__CUDA_NOT_READY;
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  return (int)e;
}

extern "C" int eplb__cuda_is_device_ptr(const void *ptr) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    (void)cudaGetLastError(); /* a plain host pointer: not an error worth keeping */
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
