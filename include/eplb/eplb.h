/* eplb.h — umbrella header: include this to get the whole public API. */
#ifndef EPLB_EPLB_H
#define EPLB_EPLB_H

#include "eplb/common.h"
#include "eplb/topo.h"
#include "eplb/trace.h"

#endif
