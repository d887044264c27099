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
