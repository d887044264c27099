#include "core/core.h"
#include "eplb_config.h"
#include "kernels/kernels.h"

eplb_status_t eplb_cuda_device_count(int *count) {
  if (!count)
    return eplb__error(EPLB_EINVAL, "kernels", "cuda_device_count: count is NULL");
  *count = 0;
#if EPLB_HAVE_CUDA
  int n = 0;
  /* Without a driver cudaGetDeviceCount fails (error 35) and leaves n unset. */
  int err = eplb__cuda_device_count_raw(&n);
  if (err != 0 || n <= 0)
    return eplb__error(EPLB_ENODEVICE, "kernels", "no CUDA device (cuda error %d)", err);
  *count = n;
  return EPLB_OK;
#else
  return eplb__error(EPLB_EUNSUPPORTED, "kernels", "built without CUDA");
#endif
}
