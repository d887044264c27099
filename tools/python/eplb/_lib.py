"""Loads libeplb, declares its C structures and prototypes, and turns status
codes into exceptions.

Every call goes through ctypes.CDLL, which releases the GIL for the duration
of each foreign call: planning, simulation and trace conversion run without
holding it, so other Python threads keep running.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import weakref
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)

c_int32 = ctypes.c_int32
c_status = c_int

# ---- library discovery -----------------------------------------------------


def _candidates():
    env = os.environ.get("EPLB_LIBRARY")
    if env:
        return [env]
    repo = pathlib.Path(__file__).resolve().parents[3]
    found = []
    built = repo / "build" / "libeplb.so"
    if built.exists():
        found.append(str(built))
    lib = ctypes.util.find_library("eplb")
    if lib:
        found.append(lib)
    return found


def _load():
    tried = _candidates()
    errors = []
    for path in tried:
        try:
            # RTLD_GLOBAL: OpenMPI's plugins (loaded by MPI_Init inside the library)
            # resolve libmpi's symbols globally, as under mpi4py.
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "eplb: cannot load libeplb.so (set EPLB_LIBRARY to its path, or build it into "
        "<repo>/build): " + ("; ".join(errors) if errors else "not found")
    )


lib, library_path = _load()

# ---- status and errors -----------------------------------------------------

EPLB_OK = 0
EPLB_EOF = -17
EPLB_EUNSUPPORTED = -9

lib.eplb_status_str.restype = c_char_p
lib.eplb_status_str.argtypes = [c_status]
lib.eplb_status_name.restype = c_char_p
lib.eplb_status_name.argtypes = [c_status]
lib.eplb_error_detail.restype = c_char_p
lib.eplb_error_detail.argtypes = []
lib.eplb_error_clear.restype = None
lib.eplb_error_clear.argtypes = []


class Error(Exception):
    """A libeplb call failed.

    Attributes: status (the negative eplb_status_t), name ("EPLB_EINVAL"),
    text (the status's short text) and detail (the library's one-line detail
    naming the file, field or value at fault; may be empty)."""

    def __init__(self, status: int, detail: str = "", call: str = ""):
        self.status = int(status)
        self.name = lib.eplb_status_name(status).decode()
        self.text = lib.eplb_status_str(status).decode()
        self.detail = detail
        self.call = call
        msg = f"{self.name} ({self.text})"
        if detail:
            msg += f": {detail}"
        if call:
            msg = f"{call}: {msg}"
        super().__init__(msg)


def status_name(status: int) -> str:
    return lib.eplb_status_name(status).decode()


def status_str(status: int) -> str:
    return lib.eplb_status_str(status).decode()


def raise_error(status: int, call: str = ""):
    raw = lib.eplb_error_detail()
    raise Error(status, raw.decode(errors="replace") if raw else "", call)


def _errcheck(result, func, args):
    if result < 0:
        raw = lib.eplb_error_detail()
        raise Error(result, raw.decode(errors="replace") if raw else "", func.__name__)
    return result


def proto(name, restype, argtypes, check=False, optional=False):
    """Declares a prototype; check=True raises Error on a negative status."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        if optional:
            return None
        raise
    fn.restype = restype
    fn.argtypes = argtypes
    if check:
        fn.errcheck = _errcheck
    return fn


def cstr(s) -> bytes:
    if isinstance(s, bytes):
        return s
    return os.fsencode(s)


# ---- handles -----------------------------------------------------------------


def _destroy(destroy, ptr, keep):
    destroy(ptr)


class Handle:
    """An owned C handle: closed by close(), a with-block, or the finalizer."""

    _kind = "handle"

    def _own(self, ptr, destroy, keep=None):
        """Takes ownership of ptr; keep (e.g. buffers the handle borrows)
        stays alive until destroy has run."""
        self._ptr = ptr
        self._finalizer = weakref.finalize(self, _destroy, destroy, ptr, keep)

    @property
    def _p(self):
        p = getattr(self, "_ptr", None)
        if not p:
            raise ValueError(f"I/O operation on a closed {self._kind}")
        return p

    @property
    def closed(self) -> bool:
        return not getattr(self, "_ptr", None)

    def close(self):
        fin = getattr(self, "_finalizer", None)
        self._ptr = None
        if fin is not None:
            fin()

    def __enter__(self):
        self._p
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# ---- structures (must match include/eplb/*.h field for field) ----------------


class TraceMetaC(Structure):
    _fields_ = [
        ("num_layers", c_uint32),
        ("num_experts", c_uint32),
        ("topk", c_uint32),
        ("num_ranks", c_uint32),
        ("phase", c_int),
        ("model", c_char * 64),
        ("origin", c_char * 256),
    ]


class TraceStepC(Structure):
    _fields_ = [
        ("index", c_uint64),
        ("num_tokens", c_uint32),
        ("counts", c_void_p),
        ("num_rows", c_uint32),
        ("topk", c_void_p),
        ("source_rank", c_void_p),
    ]


class TraceOpenOptionsC(Structure):
    _fields_ = [("allow_torn_tail", c_int)]


class TraceWriterOptionsC(Structure):
    _fields_ = [
        ("steps_per_chunk", c_uint32),
        ("compression_level", c_int),
        ("fsync_chunks", c_int),
        ("atomic", c_int),
    ]


class TraceRecoverReportC(Structure):
    _fields_ = [
        ("steps_recovered", c_uint64),
        ("chunks_ok", c_uint64),
        ("chunks_bad", c_uint64),
        ("bytes_skipped", c_uint64),
    ]


class TraceConvertOptionsC(Structure):
    _fields_ = [
        ("from_", c_int),
        ("to", c_int),
        ("num_experts", c_uint32),
        ("tokens_per_step", c_uint32),
        ("topk_rows_per_step", c_uint32),
        ("meta", POINTER(TraceMetaC)),
    ]


class LoadsC(Structure):
    _fields_ = [("num_layers", c_uint32), ("num_experts", c_uint32), ("values", c_void_p)]


class SynthOptionsC(Structure):
    _fields_ = [
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


class PlanOptionsC(Structure):
    _fields_ = [
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
    ]


class PlanLayerMetricsC(Structure):
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


class PlanSummaryC(Structure):
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


class SplitOptionsC(Structure):
    _fields_ = [("mode", c_int), ("warm_start", c_int), ("glpk_time_limit_s", c_double)]


class SplitProblemC(Structure):
    _fields_ = [
        ("num_experts", c_uint32),
        ("num_gpus", c_uint32),
        ("num_slots", c_uint32),
        ("phy2log", c_void_p),
        ("slots_per_gpu", c_void_p),
    ]


class SplitResultC(Structure):
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


class NodeInfoC(Structure):
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


class GpuInfoC(Structure):
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


class CostModelC(Structure):
    _fields_ = [
        ("num_points", c_uint32),
        ("tokens", c_double * COST_MAX_POINTS),
        ("time_us", c_double * COST_MAX_POINTS),
        ("dispatch_bytes_per_copy", c_double),
        ("combine_bytes_per_copy", c_double),
        ("bytes_per_expert", c_double),
        ("intra_node_gbps", c_double),
        ("inter_node_gbps", c_double),
    ]


class SimStepC(Structure):
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
    ]


SimStepFn = CFUNCTYPE(None, POINTER(SimStepC), c_void_p)


class SimOptionsC(Structure):
    _fields_ = [
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
    ]


class SimSummaryC(Structure):
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
    ]


class RuntimeCommC(Structure):
    _fields_ = [
        ("kind", c_int),
        ("mpi_comm", c_void_p),
        ("nccl_comm", c_void_p),
        ("cuda_stream", c_void_p),
    ]


class RuntimePolicyC(Structure):
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


class RuntimeConfigC(Structure):
    _fields_ = [
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
    ]


class RuntimeMetricsC(Structure):
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
    ]


# kernels.h: plain structs of device addresses (the caller owns the memory).
class CudaRingC(Structure):
    _fields_ = [
        ("counts", c_void_p),
        ("step", c_void_p),
        ("dropped", c_void_p),
        ("window", c_uint32),
        ("num_layers", c_uint32),
        ("num_experts", c_uint32),
    ]


class CudaTableC(Structure):
    _fields_ = [
        ("off", c_void_p),
        ("slot", c_void_p),
        ("alias", c_void_p),
        ("prob", c_void_p),
    ]


class CudaDispatchC(Structure):
    _fields_ = [
        ("buf", CudaTableC * 2),
        ("epoch", c_void_p),
        ("num_experts", c_uint32),
        ("num_slots", c_uint32),
    ]


class CudaSampleRingC(Structure):
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


# Each mirrored structure and the C struct it copies. The library reports the
# C sizes (eplb_abi_struct_size): a layout that drifted from the headers fails
# loudly at import instead of corrupting memory at the first call.
_MIRRORS = {
    "eplb_trace_meta": TraceMetaC,
    "eplb_trace_step": TraceStepC,
    "eplb_trace_open_options": TraceOpenOptionsC,
    "eplb_trace_writer_options": TraceWriterOptionsC,
    "eplb_trace_recover_report": TraceRecoverReportC,
    "eplb_trace_convert_options": TraceConvertOptionsC,
    "eplb_loads": LoadsC,
    "eplb_synth_options": SynthOptionsC,
    "eplb_plan_options": PlanOptionsC,
    "eplb_plan_layer_metrics": PlanLayerMetricsC,
    "eplb_plan_summary": PlanSummaryC,
    "eplb_split_options": SplitOptionsC,
    "eplb_split_problem": SplitProblemC,
    "eplb_split_result": SplitResultC,
    "eplb_node_info": NodeInfoC,
    "eplb_gpu_info": GpuInfoC,
    "eplb_cost_model": CostModelC,
    "eplb_sim_step": SimStepC,
    "eplb_sim_options": SimOptionsC,
    "eplb_sim_summary": SimSummaryC,
    "eplb_runtime_comm": RuntimeCommC,
    "eplb_runtime_policy": RuntimePolicyC,
    "eplb_runtime_config": RuntimeConfigC,
    "eplb_runtime_metrics": RuntimeMetricsC,
    "eplb_cuda_ring": CudaRingC,
    "eplb_cuda_table": CudaTableC,
    "eplb_cuda_dispatch": CudaDispatchC,
    "eplb_cuda_sample_ring": CudaSampleRingC,
}


def check_abi():
    """Raises ImportError naming every structure whose size differs from C's."""
    lib.eplb_abi_struct_size.restype = ctypes.c_size_t
    lib.eplb_abi_struct_size.argtypes = [c_char_p]
    bad = []
    for cname, py in _MIRRORS.items():
        size = lib.eplb_abi_struct_size(cname.encode())
        if size != ctypes.sizeof(py):
            bad.append(f"{cname}: C {size} bytes, Python {ctypes.sizeof(py)}")
    if bad:
        raise ImportError(
            f"eplb: {library_path} does not match this binding's structures ("
            + "; ".join(bad)
            + "): rebuild the library or update tools/python/eplb/_lib.py"
        )


check_abi()


def struct_dict(s) -> dict:
    """A plain dict of a ctypes structure's scalar fields (bytes decoded)."""
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        elif isinstance(v, ctypes.Array):
            v = list(v)
        out[name] = v
    return out


# ---- prototypes --------------------------------------------------------------

P = c_void_p  # opaque handles and array pointers travel as plain addresses
S = c_status

# common.h
proto("eplb_version", c_char_p, [])
proto("eplb_feature_enabled", c_int, [c_int])
proto("eplb_cuda_device_count", S, [POINTER(c_int)])
LogFn = CFUNCTYPE(None, c_int, c_char_p, c_char_p, c_void_p)
proto("eplb_log_set_callback", None, [LogFn, c_void_p, c_int])

# trace.h
proto("eplb_trace_phase_str", c_char_p, [c_int])
proto("eplb_trace_meta_default", None, [POINTER(TraceMetaC)])
proto("eplb_trace_open_options_default", None, [POINTER(TraceOpenOptionsC)])
proto("eplb_trace_open", S, [c_char_p, POINTER(TraceOpenOptionsC), POINTER(P)], True)
proto("eplb_trace_close", None, [P])
proto("eplb_trace_meta", POINTER(TraceMetaC), [P])
proto("eplb_trace_num_steps", c_uint64, [P])
proto("eplb_trace_num_tokens", c_uint64, [P])
proto("eplb_trace_has_topk", c_int, [P])
proto("eplb_trace_read_step", S, [P, c_uint64, POINTER(TraceStepC)], True)
proto("eplb_trace_next", S, [P, POINTER(TraceStepC)])  # EOF is not an error
proto("eplb_trace_rewind", None, [P])
proto("eplb_trace_refresh", S, [P, POINTER(c_uint64)], True)
proto("eplb_trace_window_sum", S, [P, c_uint64, c_uint64, P], True)
proto("eplb_trace_writer_options_default", None, [POINTER(TraceWriterOptionsC)])
proto(
    "eplb_trace_writer_create",
    S,
    [c_char_p, POINTER(TraceMetaC), POINTER(TraceWriterOptionsC), POINTER(P)],
    True,
)
proto(
    "eplb_trace_writer_open_append",
    S,
    [c_char_p, POINTER(TraceMetaC), POINTER(TraceWriterOptionsC), POINTER(P)],
    True,
)
proto("eplb_trace_writer_append", S, [P, POINTER(TraceStepC)], True)
proto("eplb_trace_writer_flush", S, [P], True)
proto("eplb_trace_writer_finish", S, [P], True)
proto("eplb_trace_writer_num_steps", c_uint64, [P])
proto("eplb_trace_writer_destroy", None, [P])
proto("eplb_trace_recover", S, [c_char_p, c_char_p, POINTER(TraceRecoverReportC)], True)
proto("eplb_trace_convert_options_default", None, [POINTER(TraceConvertOptionsC)])
proto("eplb_trace_convert", S, [c_char_p, c_char_p, POINTER(TraceConvertOptionsC)], True)
proto("eplb_loads_read", S, [c_char_p, c_uint64, c_uint64, POINTER(POINTER(LoadsC))], True)
proto("eplb_loads_write_csv", S, [POINTER(LoadsC), c_char_p], True)
proto("eplb_loads_destroy", None, [POINTER(LoadsC)])
proto("eplb_synth_options_default", None, [POINTER(SynthOptionsC)])
proto("eplb_synth_generate", S, [c_char_p, POINTER(SynthOptionsC)], True)

# plan.h
proto("eplb_plan_policy_str", c_char_p, [c_int])
proto("eplb_plan_policy_parse", S, [c_char_p, POINTER(c_int)], True)
proto("eplb_plan_options_default", None, [POINTER(PlanOptionsC)])
proto("eplb_plan_create", S, [POINTER(LoadsC), POINTER(PlanOptionsC), POINTER(P)], True)
proto("eplb_plan_destroy", None, [P])
for _n in ("layers", "experts", "gpus", "nodes", "slots"):
    proto(f"eplb_plan_num_{_n}", c_uint32, [P])
proto("eplb_plan_policy", c_int, [P])
proto("eplb_plan_slots_per_gpu", P, [P])
proto("eplb_plan_phy2log", P, [P, c_uint32])
proto("eplb_plan_share", P, [P, c_uint32])
proto("eplb_plan_gpu_load", P, [P, c_uint32])
proto("eplb_plan_logcnt", S, [P, c_uint32, P], True)
proto("eplb_plan_replica_rank", S, [P, c_uint32, P], True, optional=True)
proto("eplb_plan_shares_str", c_char_p, [c_int])
proto("eplb_plan_shares_parse", S, [c_char_p, POINTER(c_int)], True)
proto("eplb_plan_layer_metrics", S, [P, c_uint32, POINTER(PlanLayerMetricsC)], True)
proto("eplb_plan_summary", None, [P, POINTER(PlanSummaryC)])
proto("eplb_plan_evaluate", S, [P, POINTER(LoadsC)], True)
proto("eplb_plan_set_shares", S, [P, c_uint32, P], True)
proto("eplb_plan_write", S, [P, c_char_p], True)
proto("eplb_plan_read", S, [c_char_p, POINTER(P)], True)
proto("eplb_plan_export_format_str", c_char_p, [c_int])
proto("eplb_plan_export_format_parse", S, [c_char_p, POINTER(c_int)], True)
proto("eplb_plan_export", S, [P, c_int, c_char_p], True)
proto("eplb_coact_from_trace", S, [P, c_uint64, c_uint64, P, POINTER(P)], True, optional=True)
proto("eplb_coact_destroy", None, [P], optional=True)

# split.h
proto("eplb_split_options_default", None, [POINTER(SplitOptionsC)])
proto("eplb_split_create", S, [POINTER(SplitOptionsC), POINTER(P)], True)
proto("eplb_split_destroy", None, [P])
proto("eplb_split_reset", None, [P])
proto("eplb_split_solve", S, [P, POINTER(SplitProblemC), P, POINTER(SplitResultC)], True)
proto("eplb_split_solve_glpk", S, [P, POINTER(SplitProblemC), P, POINTER(SplitResultC)], True)
proto("eplb_split_glpk_thread_done", None, [])
proto(
    "eplb_split_graph_place",
    S,
    [c_int, c_uint32, c_uint32, c_uint32, c_uint32, P, P],
    True,
)

# topo.h
proto("eplb_cluster_open", S, [c_char_p, POINTER(P)], True)
proto("eplb_cluster_create_uniform", S, [c_uint32, c_uint32, POINTER(P)], True)
proto("eplb_cluster_destroy", None, [P])
proto("eplb_cluster_num_nodes", c_uint32, [P])
proto("eplb_cluster_num_gpus", c_uint32, [P])
proto("eplb_cluster_node_of", c_uint32, [P, c_uint32])
proto("eplb_cluster_node", S, [P, c_uint32, POINTER(NodeInfoC)], True)
proto("eplb_cluster_gpu", S, [P, c_uint32, POINTER(GpuInfoC)], True)
proto("eplb_cluster_link", c_int, [P, c_uint32, c_uint32])
proto("eplb_cluster_bandwidth_gbps", c_double, [P, c_uint32, c_uint32])
proto("eplb_link_class_str", c_char_p, [c_int])
proto("eplb_nic_affinity_str", c_char_p, [c_int])

# sim.h
proto("eplb_cost_model_default", None, [POINTER(CostModelC)])
proto("eplb_cost_model_read", S, [c_char_p, POINTER(CostModelC)], True)
proto("eplb_cost_model_check", S, [POINTER(CostModelC)], True)
proto("eplb_cost_model_expert_time", c_double, [POINTER(CostModelC), c_double])
proto("eplb_sim_options_default", None, [POINTER(SimOptionsC)])
proto("eplb_sim_run", S, [P, P, P, POINTER(SimOptionsC), POINTER(SimSummaryC)], True)

# runtime.h (optional: a library built before the runtime module lacks it)
HAVE_RUNTIME = hasattr(lib, "eplb_runtime_create")
if HAVE_RUNTIME:
    proto("eplb_runtime_config_default", None, [POINTER(RuntimeConfigC)])
    proto("eplb_runtime_create", S, [POINTER(RuntimeConfigC), P, POINTER(P)], True)
    proto("eplb_runtime_destroy", None, [P])
    proto("eplb_runtime_register_weights", S, [P, c_uint32, c_uint32, P, c_size_t], True)
    proto("eplb_runtime_record", S, [P, c_uint32, P, c_uint32], True)
    proto("eplb_runtime_record_counts", S, [P, c_uint32, P], True)
    proto("eplb_runtime_map", S, [P, c_uint32, P, c_uint32, c_uint64, P], True)
    proto("eplb_runtime_route", S, [P, c_uint32, P, c_uint32, c_uint64, P], True)
    proto("eplb_runtime_step_end", S, [P], True)
    proto("eplb_runtime_window", S, [P, c_int, P], True)
    proto("eplb_runtime_epoch", c_uint64, [P])
    proto("eplb_runtime_layer_plan", S, [P, c_uint32, POINTER(P), POINTER(P)], True)
    proto("eplb_runtime_layer_split", S,
          [P, c_uint32, POINTER(P), POINTER(P), POINTER(c_double)], True)
    proto("eplb_runtime_split", S, [P, c_uint32, P], True)
    proto("eplb_runtime_plan", S, [P, POINTER(P)], True)
    proto("eplb_runtime_metrics", None, [P, POINTER(RuntimeMetricsC)])
    proto("eplb_runtime_inject_transfer_failure", S, [P, c_uint32], True)
    proto("eplb_runtime_allreduce", S, [P, P, c_size_t, c_int], True)
    proto("eplb_runtime_mpi_world", c_void_p, [])
    proto("eplb_runtime_mpi_init", S, [P, P, POINTER(c_uint32), POINTER(c_uint32)], True)
    proto("eplb_runtime_mpi_finalize", None, [])

# kernels.h (optional: a library built before the kernels module lacks it).
# The stream is the cudaStream_t value itself, passed as an address.
HAVE_KERNELS = hasattr(lib, "eplb_cuda_count") and HAVE_RUNTIME
if HAVE_KERNELS:
    proto("eplb_cuda_count", S, [POINTER(CudaRingC), c_uint32, P, c_uint32, c_uint32, P], True)
    proto("eplb_cuda_step", S, [POINTER(CudaRingC), P], True)
    proto(
        "eplb_cuda_map",
        S,
        [POINTER(CudaDispatchC), c_uint32, P, c_uint32, c_uint32, c_uint64, P, P, P],
        True,
    )
    proto("eplb_cuda_table_upload", S, [P, c_uint32, POINTER(CudaDispatchC), c_uint32, P], True)
    proto("eplb_cuda_switch", S, [POINTER(CudaDispatchC), P], True)
    proto(
        "eplb_cuda_sample", S, [POINTER(CudaSampleRingC), c_uint32, P, c_uint32, c_uint64, P], True
    )

__all__ = ["lib", "Error", "Handle", "c_uint8", "c_uint16"]
