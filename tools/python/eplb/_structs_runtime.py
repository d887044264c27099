"""ctypes mirrors of the runtime and kernel structures (eplb/runtime.h,
eplb/kernels.h): field for field, checked by size at import
(_lib.check_abi)."""

from __future__ import annotations

import ctypes
from ctypes import (
    c_char_p,
    c_double,
    c_int,
    c_uint32,
    c_uint64,
    c_void_p,
)

from ._cint import CStruct
from ._structs_plan import PlanStepOptionsC

c_int32 = ctypes.c_int32


class RuntimeCommC(CStruct):
    _fields_ = [
        ("kind", c_int),
        ("mpi_comm", c_void_p),
        ("nccl_comm", c_void_p),
        ("cuda_stream", c_void_p),
    ]


class RuntimePolicyC(CStruct):
    _fields_ = [
        ("interval_steps", c_uint32),
        ("window_steps", c_uint32),
        ("ema_decay", c_double),
        ("gain_threshold", c_double),
        ("layers_per_step", c_uint32),
        ("move_budget", c_uint32),
        ("allreduce_period", c_uint32),
        ("plan_lag_steps", c_uint32),
        ("plan_policy", c_int),
        ("staging_bytes", c_uint64),
    ]


class RuntimeDeviceC(CStruct):
    _fields_ = [
        ("kind", c_int),
        ("ordinal", c_int32),
        ("stream", c_void_p),
        ("window", c_uint32),
    ]


class RuntimeDeviceStatsC(CStruct):
    _fields_ = [
        (n, c_uint64)
        for n in ("steps", "steps_fed", "steps_late", "ring_waits", "uploads", "uploads_failed",
                  "flips", "errors")
    ]


class RuntimeConfigC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("num_layers", c_uint32),
        ("num_experts", c_uint32),
        ("topk", c_uint32),
        ("slots_per_rank", c_uint32),
        ("rank", c_uint32),
        ("world_size", c_uint32),
        ("ranks_per_node", c_uint32),
        ("local_first", c_int),
        ("expert_bytes", c_uint64),
        ("trace_path", c_char_p),
        ("comm", RuntimeCommC),
        ("policy", RuntimePolicyC),
        ("sample_rows", c_uint32),
        ("shm_name", c_char_p),
        ("transfer_timeout_ms", c_uint32),
        ("count_thread", c_uint32),
        ("split_per_batch", c_int32),
        ("split_tolerance", c_double),
        ("device", RuntimeDeviceC),
        ("split_model", c_void_p),  # const eplb_model_desc_t * (ModelDescC)
        ("split_gpu", c_void_p),  # const eplb_gpu_desc_t * (GpuDescC)
        ("split_whole_tokens", c_uint32),
        ("continuous_window", c_uint32),
        ("continuous_lag", c_uint32),
        ("continuous_in_place", c_int32),
        ("continuous", PlanStepOptionsC),
    ]


class RuntimeMetricsC(CStruct):
    _fields_ = [
        ("steps", c_uint64),
        ("global_steps", c_uint64),
        ("epoch", c_uint64),
        ("plans", c_uint64),
        ("plans_failed", c_uint64),
        ("rebalances", c_uint64),
        ("layers_switched", c_uint64),
        ("layers_failed", c_uint64),
        ("slots_moved", c_uint64),
        ("bytes_moved", c_uint64 * 3),
        ("tokens_recorded", c_uint64),
        ("last_plan_seconds", c_double),
        ("window_balancedness", c_double),
        ("migrating", c_int),
        ("splits", c_uint64),
        ("splits_failed", c_uint64),
        ("split_seconds", c_double),
        ("allreduce_seconds", c_double),
        ("split_cross_tokens", c_double),
        ("migration_rounds", c_uint64),
        ("splits_decode", c_uint64),
        ("continuous_moves", c_uint64),
        ("continuous_failed", c_uint64),
        ("continuous_abandoned", c_uint64),
        ("continuous_waits", c_uint64),
    ]


# kernels.h: plain structs of device addresses (the caller owns the memory).
class CudaRingC(CStruct):
    _fields_ = [
        ("counts", c_void_p),
        ("step", c_void_p),
        ("dropped", c_void_p),
        ("window", c_uint32),
        ("num_layers", c_uint32),
        ("num_experts", c_uint32),
    ]


class CudaTableC(CStruct):
    _fields_ = [
        ("off", c_void_p),
        ("slot", c_void_p),
        ("alias", c_void_p),
        ("prob", c_void_p),
    ]


class CudaDispatchC(CStruct):
    _fields_ = [
        ("buf", CudaTableC * 2),
        ("epoch", c_void_p),
        ("num_experts", c_uint32),
        ("num_slots", c_uint32),
    ]


class CudaSampleRingC(CStruct):
    _fields_ = [
        ("ids", c_void_p),
        ("src", c_void_p),
        ("token", c_void_p),
        ("capacity", c_uint32),
        ("num_layers", c_uint32),
        ("topk", c_uint32),
        ("every", c_uint32),
        ("rank", c_int32),
    ]
