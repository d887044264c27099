#include "core/core.h"
#include "eplb_config.h"

#include <stdio.h>

int eplb_feature_enabled(eplb_feature_t feature) {
  switch (feature) {
  case EPLB_FEATURE_CUDA: return EPLB_HAVE_CUDA;
  case EPLB_FEATURE_NCCL: return EPLB_HAVE_NCCL;
  case EPLB_FEATURE_MPI: return EPLB_HAVE_MPI;
  }
  return 0;
}

const char *eplb_version(void) { return EPLB_VERSION; }

int eplb_version_number(void) {
  /* From the build's version string, so the number always matches it. */
  int a = 0, b = 0, c = 0;
  if (sscanf(EPLB_VERSION, "%d.%d.%d", &a, &b, &c) != 3)
    return 0;
  return EPLB_VERSION_ENCODE(a, b, c);
}
