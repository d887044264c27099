"""ctypes mirrors of the trace, plan and split structures (eplb/trace.h,
eplb/plan.h, eplb/split.h): field for field, checked by size at import
(_lib.check_abi)."""

from __future__ import annotations

from ctypes import (
    POINTER,
    c_char,
    c_double,
    c_int,
    c_uint32,
    c_uint64,
    c_void_p,
)

from ._cint import CStruct


class TraceMetaC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("num_layers", c_uint32),
        ("num_experts", c_uint32),
        ("topk", c_uint32),
        ("num_ranks", c_uint32),
        ("phase", c_int),
        ("model", c_char * 64),
        ("origin", c_char * 256),
    ]


class TraceStepC(CStruct):
    _fields_ = [
        ("index", c_uint64),
        ("num_tokens", c_uint32),
        ("counts", c_void_p),
        ("num_rows", c_uint32),
        ("topk", c_void_p),
        ("source_rank", c_void_p),
    ]


class TraceOpenOptionsC(CStruct):
    _fields_ = [("struct_size", c_uint32), ("allow_torn_tail", c_int)]


class TraceWriterOptionsC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("steps_per_chunk", c_uint32),
        ("compression_level", c_int),
        ("fsync_chunks", c_int),
        ("atomic", c_int),
    ]


class TraceRecoverReportC(CStruct):
    _fields_ = [
        ("steps_recovered", c_uint64),
        ("chunks_ok", c_uint64),
        ("chunks_bad", c_uint64),
        ("bytes_skipped", c_uint64),
    ]


class TraceConvertOptionsC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("from_", c_int),
        ("to", c_int),
        ("num_experts", c_uint32),
        ("tokens_per_step", c_uint32),
        ("topk_rows_per_step", c_uint32),
        ("meta", POINTER(TraceMetaC)),
    ]


class LoadsC(CStruct):
    _fields_ = [("num_layers", c_uint32), ("num_experts", c_uint32), ("values", c_void_p)]


class SynthOptionsC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("num_layers", c_uint32),
        ("num_experts", c_uint32),
        ("topk", c_uint32),
        ("num_steps", c_uint64),
        ("tokens_per_step", c_uint32),
        ("seed", c_uint64),
        ("skew", c_int),
        ("skew_param", c_double),
        ("layer_variation", c_double),
        ("drift", c_double),
        ("switch_every", c_uint64),
        ("coactivation", c_double),
        ("num_ranks", c_uint32),
        ("topk_rows_per_step", c_uint32),
        ("phase", c_int),
        ("model", c_char * 64),
        ("rank_affinity", c_double),
        ("num_tenants", c_uint32),
    ]


class PlanOptionsC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("policy", c_int),
        ("num_gpus", c_uint32),
        ("num_nodes", c_uint32),
        ("num_replicas", c_uint32),
        ("num_groups", c_uint32),
        ("slots_per_gpu", c_void_p),
        ("keep_groups_on_nodes", c_int),
        ("time_limit", c_double),
        ("improve_iterations", c_uint32),
        ("from_", c_void_p),
        ("move_budget", c_uint32),
        ("move_weight", c_double),
        ("cluster", c_void_p),
        ("coact", c_void_p),
        ("locality_tolerance", c_double),
        ("shares", c_int),
        ("shares_trace", c_void_p),
        ("shares_step_begin", c_uint64),
        ("shares_step_end", c_uint64),
        ("robust_steps", c_uint32),
        ("robust_aggregate_weight", c_double),
        ("threads", c_uint32),
        ("model", c_void_p),
        ("gpu", c_void_p),
        ("decode_steps", c_double),
        ("window_loads", c_int),
        ("serve", c_int),
        ("effort", c_int),
    ]


class PlanLayerMetricsC(CStruct):
    _fields_ = [
        ("total_load", c_double),
        ("mean_load", c_double),
        ("max_load", c_double),
        ("lower_bound", c_double),
        ("balancedness", c_double),
        ("mip_gap", c_double),
        ("mip_status", c_int),
        ("fallback", c_int),
        ("slots_moved", c_uint32),
    ]


class PlanSummaryC(CStruct):
    _fields_ = [
        ("policy", c_int),
        ("seconds", c_double),
        ("mean_balancedness", c_double),
        ("min_balancedness", c_double),
        ("mean_ratio", c_double),
        ("max_ratio", c_double),
        ("fallback_layers", c_uint32),
        ("slots_moved", c_uint64),
    ]


class SplitOptionsC(CStruct):
    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("mode", c_int),
        ("warm_start", c_int),
        ("glpk_time_limit_s", c_double),
        ("threads", c_uint32),
    ]


class SplitProblemC(CStruct):
    _fields_ = [
        ("num_experts", c_uint32),
        ("num_gpus", c_uint32),
        ("num_slots", c_uint32),
        ("phy2log", c_void_p),
        ("slots_per_gpu", c_void_p),
    ]


class SplitResultC(CStruct):
    _fields_ = [
        ("share", c_void_p),
        ("amount", c_void_p),
        ("gpu_load", c_void_p),
        ("bottleneck_experts", c_void_p),
        ("bottleneck_gpus", c_void_p),
        ("t_star", c_double),
        ("max_load", c_double),
        ("num_bottleneck_experts", c_uint32),
        ("num_bottleneck_gpus", c_uint32),
        ("iterations", c_uint32),
    ]


class PlanStepOptionsC(CStruct):
    """eplb_plan_step_options_t: continuous re-placement's budget."""

    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("slots_per_gpu", c_uint32),
        ("bytes_per_gpu", c_uint64),
        ("expert_bytes", c_uint64),
        ("max_per_layer", c_uint32),
        ("move_weight", c_double),
        ("in_place", c_uint32),
    ]


class PlanMoveC(CStruct):
    """eplb_plan_move_t: one slot that changes expert."""

    _fields_ = [
        ("layer", c_uint32),
        ("slot", c_uint32),
        ("src_slot", c_uint32),
        ("from_expert", c_int),
        ("to_expert", c_int),
    ]
