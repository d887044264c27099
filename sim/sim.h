/* sim/sim.h — internal header of the simulator module (cost model and
 * replay). Nothing here is exported. */
#ifndef EPLB_SIM_INTERNAL_H
#define EPLB_SIM_INTERNAL_H

#include "core/core.h"
#include "eplb/sim.h"

/* GB/s to bytes per microsecond. */
#define EPLB__GBPS_TO_BYTES_PER_US 1e3

#endif
