/* kernels/kernels.h — internal header of the kernels module: CUDA entry
 * points (defined in *.cu, compiled only when CUDA is enabled) and their CPU
 * references (*.c, always compiled) with the same contract. */
#ifndef EPLB_KERNELS_H
#define EPLB_KERNELS_H

#include "eplb/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raw cudaGetDeviceCount: returns the cudaError_t value (0 = success) and
 * writes *count only on success. Defined in device.cu. */
int eplb__cuda_device_count_raw(int *count);

#ifdef __cplusplus
}
#endif
#endif
