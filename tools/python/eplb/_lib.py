"""Loads libeplb, checks the C structures' mirrors (_structs_plan, _structs_sim,
_structs_runtime: re-exported here) against it, declares its prototypes, and
turns status codes into exceptions.

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

from ._cint import IntRangeError, wrap  # noqa: F401 (re-exported: _lib.IntRangeError)
from ._cnames import ARGNAMES
from ._structs_plan import (  # noqa: F401 (re-exported: _lib.X)
    TraceMetaC,
    TraceStepC,
    TraceOpenOptionsC,
    TraceWriterOptionsC,
    TraceRecoverReportC,
    TraceConvertOptionsC,
    LoadsC,
    SynthOptionsC,
    PlanOptionsC,
    PlanLayerMetricsC,
    PlanSummaryC,
    PlanStepOptionsC,
    PlanMoveC,
    SplitOptionsC,
    SplitProblemC,
    SplitResultC,
)
from ._structs_sim import (  # noqa: F401 (re-exported: _lib.X)
    NodeInfoC,
    GpuInfoC,
    COST_MAX_POINTS,
    ModelDescC,
    GpuDescC,
    CostModelC,
    SimStepC,
    SimStepFn,
    SimOptionsC,
    SimSummaryC,
)
from ._structs_runtime import (  # noqa: F401 (re-exported: _lib.X)
    RuntimeCommC,
    RuntimePolicyC,
    RuntimeDeviceC,
    RuntimeDeviceStatsC,
    RuntimeConfigC,
    RuntimeMetricsC,
    CudaRingC,
    CudaTableC,
    CudaDispatchC,
    CudaSampleRingC,
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
    """Declares a prototype; check=True raises Error on a negative status.
    lib.<name> becomes a wrapper that refuses an integer argument its C type
    cannot hold (IntRangeError naming the parameter) when there is one."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        if optional:
            return None
        raise
    fn = getattr(fn, "foreign", fn)
    fn.restype = restype
    fn.argtypes = argtypes
    if check:
        fn.errcheck = _errcheck
    names = ARGNAMES.get(name[5:] if name.startswith("eplb_") else name)
    wrapped = wrap(fn, name, argtypes, names.split() if names else None)
    setattr(lib, name, wrapped)
    return wrapped


def sized_default(name, ptr_type):
    """lib.eplb_<name>_default(ref): the header's static inline around the
    exported eplb_<name>_init(p, size) (eplb/common.h, "Struct sizes"), here
    with the size of the mirror that ref points to (a byref or an instance)."""
    init = proto(f"eplb_{name}_init", c_status, [ptr_type, c_size_t], True)

    def default(ref):
        init(ref, ctypes.sizeof(getattr(ref, "_obj", ref)))

    setattr(lib, f"eplb_{name}_default", default)
    return default


proto("eplb_status_str", c_char_p, [c_status])
proto("eplb_status_name", c_char_p, [c_status])
proto("eplb_error_detail", c_char_p, [])
proto("eplb_error_clear", None, [])


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
# The mirrors live in _structs_*.py by area, imported above: _lib.X still names
# every one of them.

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
    "eplb_plan_step_options": PlanStepOptionsC,
    "eplb_plan_move": PlanMoveC,
    "eplb_split_problem": SplitProblemC,
    "eplb_split_result": SplitResultC,
    "eplb_node_info": NodeInfoC,
    "eplb_gpu_info": GpuInfoC,
    "eplb_cost_model": CostModelC,
    "eplb_model_desc": ModelDescC,
    "eplb_gpu_desc": GpuDescC,
    "eplb_sim_step": SimStepC,
    "eplb_sim_options": SimOptionsC,
    "eplb_sim_summary": SimSummaryC,
    "eplb_runtime_comm": RuntimeCommC,
    "eplb_runtime_policy": RuntimePolicyC,
    "eplb_runtime_config": RuntimeConfigC,
    "eplb_runtime_metrics": RuntimeMetricsC,
    "eplb_runtime_device": RuntimeDeviceC,
    "eplb_runtime_device_stats": RuntimeDeviceStatsC,
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
            + "): rebuild the library or update tools/python/eplb/_structs_*.py"
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
sized_default("trace_meta", POINTER(TraceMetaC))
sized_default("trace_open_options", POINTER(TraceOpenOptionsC))
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
sized_default("trace_writer_options", POINTER(TraceWriterOptionsC))
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
sized_default("trace_convert_options", POINTER(TraceConvertOptionsC))
proto("eplb_trace_convert", S, [c_char_p, c_char_p, POINTER(TraceConvertOptionsC)], True)
proto("eplb_loads_read", S, [c_char_p, c_uint64, c_uint64, POINTER(POINTER(LoadsC))], True)
proto("eplb_loads_write_csv", S, [POINTER(LoadsC), c_char_p], True)
proto("eplb_loads_destroy", None, [POINTER(LoadsC)])
sized_default("synth_options", POINTER(SynthOptionsC))
proto("eplb_synth_generate", S, [c_char_p, POINTER(SynthOptionsC)], True)

# plan.h
proto("eplb_plan_policy_str", c_char_p, [c_int])
proto("eplb_plan_policy_parse", S, [c_char_p, POINTER(c_int)], True)
sized_default("plan_options", POINTER(PlanOptionsC))
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
proto("eplb_plan_effort_str", c_char_p, [c_int])
proto("eplb_plan_effort_parse", S, [c_char_p, POINTER(c_int)], True)
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
sized_default("split_options", POINTER(SplitOptionsC))
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
sized_default("cost_model", POINTER(CostModelC))
proto("eplb_model_load", S, [c_char_p, POINTER(ModelDescC)], True)
proto("eplb_gpu_load", S, [c_char_p, POINTER(GpuDescC)], True)
proto("eplb_cost_model_read", S, [c_char_p, POINTER(CostModelC)], True)
proto("eplb_cost_model_check", S, [POINTER(CostModelC)], True)
proto("eplb_cost_model_expert_time", c_double, [POINTER(CostModelC), c_double])
sized_default("sim_options", POINTER(SimOptionsC))
proto("eplb_sim_run", S, [P, P, P, POINTER(SimOptionsC), POINTER(SimSummaryC)], True)

# runtime.h (optional: a library built before the runtime module lacks it)
HAVE_RUNTIME = hasattr(lib, "eplb_runtime_create")
if HAVE_RUNTIME:
    sized_default("runtime_config", POINTER(RuntimeConfigC))
    proto("eplb_runtime_create", S, [POINTER(RuntimeConfigC), P, POINTER(P)], True)
    proto("eplb_runtime_destroy", None, [P])
    proto("eplb_runtime_register_weights", S, [P, c_uint32, c_uint32, P, c_size_t], True)
    proto("eplb_runtime_register_tensors", S, [P, c_uint32, c_uint32, P, c_uint32], True,
          optional=True)
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
    # The device backend (#17): device pointers and the config's stream.
    proto("eplb_runtime_device_attach", S, [P, POINTER(RuntimeDeviceC)], True)
    proto("eplb_runtime_device_counters", S, [P, P], True)
    proto("eplb_runtime_device_record", S, [P, c_uint32, P, c_uint32], True)
    proto("eplb_runtime_device_map", S, [P, c_uint32, P, c_uint32, c_uint64, P], True)
    proto("eplb_runtime_device_route", S, [P, c_uint32, P, c_uint32, c_uint64, P], True)
    proto("eplb_runtime_device_flush", S, [P], True)
    proto("eplb_runtime_device_set_stream", S, [P, P], True)
    proto("eplb_runtime_device_tables", S, [P, c_uint32, POINTER(P), POINTER(P)], True)
    proto("eplb_runtime_device_stats", S, [P, POINTER(RuntimeDeviceStatsC)], True)
    proto("eplb_runtime_device_inject", S, [P, c_uint32, c_uint32, c_uint32], True)

# The device backend (optional: a library built before the kernels module
# lacks it). The kernels themselves are internal (kernels/kernels.h): the
# runtime's device calls reach them. The stream is the cudaStream_t value
# itself, passed as an address.
HAVE_KERNELS = hasattr(lib, "eplb_cuda_table_upload") and HAVE_RUNTIME
if HAVE_KERNELS:
    proto("eplb_cuda_table_upload", S, [P, c_uint32, POINTER(CudaDispatchC), c_uint32, P], True)

__all__ = ["lib", "Error", "Handle", "c_uint8", "c_uint16"]

# trace.h and plan.h additions of issue #19: format and phase names, trace
# statistics (struct pointers travel as addresses; eplb.trace mirrors the
# struct), the plan summary as JSON.
proto("eplb_trace_format_str", c_char_p, [c_int])
proto("eplb_trace_format_parse", S, [c_char_p, POINTER(c_int)], True)
proto("eplb_trace_phase_parse", S, [c_char_p, POINTER(c_int)], True)
sized_default("trace_stats_options", P)
proto("eplb_trace_stats", S, [P, P, POINTER(P)], True)
proto("eplb_trace_stats_destroy", None, [P])
proto("eplb_plan_summary_json", S, [P, c_char_p, c_size_t, POINTER(c_size_t)], True)
