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
