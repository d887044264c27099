/* runtime/abi.c — sizes of the public structs, for bindings that mirror them
 * (tools/python): a binding compares its own layout with these at load time
 * and refuses to run on a mismatch instead of corrupting memory. It lives in
 * runtime/, the top library module, because only it may see every header. */
#include "core/core.h"
#include "eplb/kernels.h"
#include "eplb/model.h"
#include "eplb/plan.h"
#include "eplb/abi.h"
#include "eplb/runtime.h"
#include "eplb/runtime_device.h"
#include "eplb/shm.h"
#include "eplb/sim.h"
#include "eplb/split.h"
#include "eplb/topo.h"
#include "eplb/trace.h"

#include <string.h>

static const struct {
  const char *name;
  size_t size;
} abi_structs[] = {
    {"eplb_allocator", sizeof(struct eplb_allocator)},
    {"eplb_trace_meta", sizeof(struct eplb_trace_meta)},
    {"eplb_trace_step", sizeof(struct eplb_trace_step)},
    {"eplb_trace_open_options", sizeof(struct eplb_trace_open_options)},
    {"eplb_trace_writer_options", sizeof(struct eplb_trace_writer_options)},
    {"eplb_trace_recover_report", sizeof(struct eplb_trace_recover_report)},
    {"eplb_trace_convert_options", sizeof(struct eplb_trace_convert_options)},
    {"eplb_loads", sizeof(struct eplb_loads)},
    {"eplb_synth_options", sizeof(struct eplb_synth_options)},
    {"eplb_plan_options", sizeof(struct eplb_plan_options)},
    {"eplb_plan_layer_metrics", sizeof(struct eplb_plan_layer_metrics)},
    {"eplb_plan_summary", sizeof(struct eplb_plan_summary)},
    {"eplb_plan_diff_stats", sizeof(struct eplb_plan_diff_stats)},
    {"eplb_plan_diff_options", sizeof(struct eplb_plan_diff_options)},
    {"eplb_plan_switch_options", sizeof(struct eplb_plan_switch_options)},
    {"eplb_plan_step_options", sizeof(struct eplb_plan_step_options)},
    {"eplb_plan_move", sizeof(struct eplb_plan_move)},
    {"eplb_plan_arrays", sizeof(struct eplb_plan_arrays)},
    {"eplb_runtime_tensor", sizeof(struct eplb_runtime_tensor)},
    {"eplb_split_options", sizeof(struct eplb_split_options)},
    {"eplb_split_problem", sizeof(struct eplb_split_problem)},
    {"eplb_split_result", sizeof(struct eplb_split_result)},
    {"eplb_node_info", sizeof(struct eplb_node_info)},
    {"eplb_gpu_info", sizeof(struct eplb_gpu_info)},
    {"eplb_cost_model", sizeof(struct eplb_cost_model)},
    {"eplb_model_desc", sizeof(struct eplb_model_desc)},
    {"eplb_gpu_desc", sizeof(struct eplb_gpu_desc)},
    {"eplb_plan_resplit_options", sizeof(struct eplb_plan_resplit_options)},
    {"eplb_sim_step", sizeof(struct eplb_sim_step)},
    {"eplb_sim_options", sizeof(struct eplb_sim_options)},
    {"eplb_sim_summary", sizeof(struct eplb_sim_summary)},
    {"eplb_runtime_comm", sizeof(struct eplb_runtime_comm)},
    {"eplb_runtime_policy", sizeof(struct eplb_runtime_policy)},
    {"eplb_runtime_config", sizeof(struct eplb_runtime_config)},
    {"eplb_runtime_metrics", sizeof(struct eplb_runtime_metrics)},
    {"eplb_runtime_device", sizeof(struct eplb_runtime_device)},
    {"eplb_runtime_device_stats", sizeof(struct eplb_runtime_device_stats)},
    {"eplb_shm_header", sizeof(struct eplb_shm_header)},
    {"eplb_shm_plan_block", sizeof(struct eplb_shm_plan_block)},
    {"eplb_shm_stats_info", sizeof(struct eplb_shm_stats_info)},
    {"eplb_cuda_ring", sizeof(struct eplb_cuda_ring)},
    {"eplb_cuda_table", sizeof(struct eplb_cuda_table)},
    {"eplb_cuda_dispatch", sizeof(struct eplb_cuda_dispatch)},
    {"eplb_cuda_sample_ring", sizeof(struct eplb_cuda_sample_ring)},
};

size_t eplb_abi_struct_size(const char *name) {
  if (!name)
    return 0;
  for (size_t i = 0; i < sizeof abi_structs / sizeof abi_structs[0]; i++)
    if (!strcmp(abi_structs[i].name, name))
      return abi_structs[i].size;
  return 0;
}
