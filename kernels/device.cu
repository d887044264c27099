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
  /* Any error but success is the thread's last error, NotReady too: clear
   * it, or the next launcher's cudaGetLastError would report it. */
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  if (e == cudaErrorNotReady)
    return EPLB__CUDA_NOT_READY;
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

/* ---- the runtime's device backend (kernels.h, #17) ---------------------- */

extern "C" int eplb__cuda_get_device(int *ordinal) { return (int)cudaGetDevice(ordinal); }

extern "C" int eplb__cuda_set_device(int ordinal) { return (int)cudaSetDevice(ordinal); }

extern "C" int eplb__cuda_host_alloc(void **ptr, size_t bytes) {
  return (int)cudaMallocHost(ptr, bytes);
}

extern "C" void eplb__cuda_host_free(void *ptr) {
  if (ptr)
    (void)cudaFreeHost(ptr);
}

extern "C" int eplb__cuda_memset_async(void *dst, int value, size_t bytes, void *stream) {
  return (int)cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream);
}

extern "C" int eplb__cuda_event_create(void **event) {
  cudaEvent_t e = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  *event = err == cudaSuccess ? (void *)e : nullptr;
  return (int)err;
}

extern "C" void eplb__cuda_event_destroy(void *event) {
  if (event)
    (void)cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int eplb__cuda_event_record(void *event, void *stream) {
  return (int)cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
}

extern "C" int eplb__cuda_event_query(void *event) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  /* Any error but success is the thread's last error, NotReady too: clear
   * it, or the next launcher's cudaGetLastError would report it. */
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  if (e == cudaErrorNotReady)
    return EPLB__CUDA_NOT_READY;
  return (int)e;
}

extern "C" int eplb__cuda_event_sync(void *event) {
  return (int)cudaEventSynchronize((cudaEvent_t)event);
}

extern "C" int eplb__cuda_stream_sync(void *stream) {
  return (int)cudaStreamSynchronize((cudaStream_t)stream);
}
