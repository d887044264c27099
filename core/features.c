#include "core/core.h"
#include "eplb_config.h"

int eplb_feature_enabled(eplb_feature_t feature) {
  switch (feature) {
  case EPLB_FEATURE_CUDA: return EPLB_HAVE_CUDA;
  case EPLB_FEATURE_NCCL: return EPLB_HAVE_NCCL;
  case EPLB_FEATURE_MPI: return EPLB_HAVE_MPI;
  }
  return 0;
}

const char *eplb_version(void) { return EPLB_VERSION; }
