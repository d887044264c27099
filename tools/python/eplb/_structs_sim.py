"""ctypes mirrors of the cluster, deployment and simulator structures
(eplb/topo.h, eplb/model.h, eplb/sim.h): field for field, checked by size at
import (_lib.check_abi)."""

from __future__ import annotations

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    c_char,
    c_double,
    c_int,
    c_uint32,
    c_uint64,
    c_void_p,
)

from ._cint import CStruct
from ._structs_plan import PlanOptionsC, PlanStepOptionsC

c_int32 = ctypes.c_int32


class NodeInfoC(CStruct):
    _fields_ = [
        ("name", c_char * 64),
        ("source", c_char * 16),
        ("first_gpu", c_uint32),
        ("num_gpus", c_uint32),
        ("slots_per_gpu", c_uint32),
        ("num_numa", c_uint32),
        ("num_pus", c_uint32),
        ("num_nics", c_uint32),
        ("intra_node_gbps", c_double),
        ("inter_node_gbps", c_double),
    ]


class GpuInfoC(CStruct):
    _fields_ = [
        ("node", c_uint32),
        ("local_index", c_uint32),
        ("numa", c_int32),
        ("nic", c_int32),
        ("nic_affinity", c_int),
        ("name", c_char * 32),
        ("pci_busid", c_char * 16),
        ("nic_name", c_char * 32),
    ]


COST_MAX_POINTS = 64


class ModelDescC(CStruct):
    """eplb_model_desc_t (eplb/model.h): a deployment's MoE model."""

    _fields_ = [("name", ctypes.c_char * 64)] + [
        (k, c_double)
        for k in ("hidden_size", "moe_intermediate_size", "num_experts", "topk",
                  "shared_experts", "weight_bytes", "moe_layers")
    ]


class GpuDescC(CStruct):
    """eplb_gpu_desc_t (eplb/model.h): a deployment's GPU."""

    _fields_ = [("name", ctypes.c_char * 64)] + [
        (k, c_double)
        for k in ("hbm_gbps", "fp8_tflops", "bf16_tflops", "nvlink_gbps", "rdma_gbps",
                  "launch_us", "hbm_efficiency", "mma_efficiency", "a2a_latency_us")
    ]


class CostModelC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("num_points", c_uint32),
        ("tokens", c_double * COST_MAX_POINTS),
        ("time_us", c_double * COST_MAX_POINTS),
        ("dispatch_bytes_per_copy", c_double),
        ("combine_bytes_per_copy", c_double),
        ("bytes_per_expert", c_double),
        ("intra_node_gbps", c_double),
        ("inter_node_gbps", c_double),
        ("launch_us", c_double),
    ]


class SimStepC(CStruct):
    _fields_ = [
        ("step", c_uint64),
        ("num_tokens", c_uint32),
        ("used_rows", c_int),
        ("balancedness", c_double),
        ("min_balancedness", c_double),
        ("plan_balancedness", c_double),
        ("cross_node_copies", c_double),
        ("dedup_copies", c_double),
        ("cross_node_bytes", c_double),
        ("dedup_bytes", c_double),
        ("step_time_us", c_double),
        ("compute_us", c_double),
        ("a2a_us", c_double),
        ("migrated_bytes", c_double),
        ("migration_us", c_double),
        ("num_gpus", c_uint32),
        ("gpu_tokens", c_void_p),
        ("gpu_active", c_void_p),
        ("max_active", c_double),
        ("migration_exposed_us", c_double),
    ]


SimStepFn = CFUNCTYPE(None, POINTER(SimStepC), c_void_p)


class SimOptionsC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("cost", POINTER(CostModelC)),
        ("step_begin", c_uint64),
        ("step_end", c_uint64),
        ("split_per_batch", c_int),
        ("plan", PlanOptionsC),
        ("rebalance_every", c_uint64),
        ("window", c_uint64),
        ("on_step", SimStepFn),
        ("user", c_void_p),
        ("local_first", c_int),
        ("plan_step_begin", c_uint64),
        ("plan_step_end", c_uint64),
        ("split_tolerance", c_double),
        ("gain_threshold", c_double),
        ("move_budget", c_uint64),
        ("model", c_void_p),
        ("gpu", c_void_p),
        ("continuous_window", c_uint32),
        ("continuous_lag", c_uint32),
        ("continuous_in_place", c_int),
        ("continuous_copy_steps", c_uint32),
        ("step_moves", PlanStepOptionsC),
    ]


class SimSummaryC(CStruct):
    _fields_ = [
        ("num_steps", c_uint64),
        ("mean_balancedness", c_double),
        ("p5_balancedness", c_double),
        ("min_balancedness", c_double),
        ("mean_plan_balancedness", c_double),
        ("cross_node_copies", c_double),
        ("dedup_copies", c_double),
        ("cross_node_bytes", c_double),
        ("dedup_bytes", c_double),
        ("mean_step_time_us", c_double),
        ("total_step_time_us", c_double),
        ("migrated_bytes", c_double),
        ("migration_us", c_double),
        ("num_plans", c_uint32),
        ("used_rows_steps", c_uint64),
        ("p99_step_time_us", c_double),
        ("mean_max_active", c_double),
        ("bound_step_time_us", c_double),
        ("migration_exposed_us", c_double),
    ]
