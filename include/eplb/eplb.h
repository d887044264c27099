/* eplb.h — umbrella header: include this to get the whole public API.
 *
 *   common.h   status codes, error details, logging, allocation hooks, features
 *   trace.h    traces (native format, interchange, loads, synthetic generator)
 *   topo.h     the cluster model (nodes, GPUs, NUMA/NIC locality, link classes)
 *   split.h    the exact token-split solver over a fixed placement
 *   plan.h     placement plans, policies, certificates, plan files and exports
 *   sim.h      the decode-step simulator and its cost model
 *   runtime.h  the embedded runtime: record, map, rebalance and migrate across ranks
 *   runtime_device.h  the runtime's device backend (counts, maps, split on the GPU)
 *   abi.h      public struct sizes, for bindings that mirror them
 *   coact.h    co-activation of a trace's experts (the locality policy's input)
 *   reshare.h  other shares on a plan's placement (even shares, re-split)
 *   kernels.h  the layout of the runtime's device memory
 *   shm.h      the shared-memory segment between a runtime and eplbd
 * Not included (not installed): runtime_testing.h, the runtime's test hooks;
 * common_tooling.h, the tools' output staging; trace_tooling.h, plan_tooling.h
 * and sim_tooling.h, the reports as jansson trees for the project's tools.
 */
#ifndef EPLB_EPLB_H
#define EPLB_EPLB_H

#include "eplb/coact.h"
#include "eplb/common.h"
#include "eplb/kernels.h"
#include "eplb/model.h"
#include "eplb/plan.h"
#include "eplb/reshare.h"
#include "eplb/abi.h"
#include "eplb/runtime.h"
#include "eplb/runtime_device.h"
#include "eplb/shm.h"
#include "eplb/sim.h"
#include "eplb/split.h"
#include "eplb/topo.h"
#include "eplb/trace.h"

#endif
