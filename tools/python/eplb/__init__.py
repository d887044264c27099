"""eplb — expert-parallel load balancing for MoE inference (Python binding).

A pure-Python (ctypes) binding of libeplb. The library is found through
$EPLB_LIBRARY, else <repo>/build/libeplb.so, else the system search path.

    import eplb
    loads = eplb.read_loads("trace.eplbt")                 # [L, E] float64
    with eplb.plan(loads, num_gpus=32, num_replicas=288) as p:
        print(p.summary().mean_balancedness)
        p.write("plan.json"); p.export("sglang", "out/")

Errors raise eplb.Error (status, name, detail); an integer that its C type
cannot hold raises eplb.IntRangeError (a ValueError and an OverflowError). Handles close with close(),
a with-block, or their finalizer. Every C call releases the GIL (ctypes.CDLL).
"""

from __future__ import annotations

import ctypes
import logging
from typing import Callable, Optional

from . import _arrays
from ._lib import Error, IntRangeError, lib, library_path, status_name, status_str
from .cluster import Cluster
from .plan import EFFORTS, EXPORT_FORMATS, POLICIES, SHARES, Coactivation, LayerMetrics, Plan, PlanSummary, plan
from .runtime import Runtime, mpi_finalize, mpi_init
from .sim import CostModel, SimSummary, simulate
from .split import SplitResult, SplitSolver, split_graph_place
from .trace import (
    FORMATS,
    Step,
    Trace,
    TraceMeta,
    TraceWriter,
    convert_trace,
    read_loads,
    recover_trace,
    synth_trace,
    write_loads,
)
from ._lib import HAVE_KERNELS, HAVE_RUNTIME, LogFn
from . import cuda
from . import compat

__version__ = lib.eplb_version().decode()

_FEATURES = {"cuda": 1, "nccl": 2, "mpi": 3}
_LEVELS = {"error": 0, "warn": 1, "info": 2, "debug": 3}


def version() -> str:
    return __version__


def feature_enabled(name: str) -> bool:
    """True when the library was built with the feature ("cuda", "nccl", "mpi")."""
    if name not in _FEATURES:
        raise ValueError(f"feature: unknown value {name!r} (one of {', '.join(_FEATURES)})")
    return bool(lib.eplb_feature_enabled(_FEATURES[name]))


def have_numpy() -> bool:
    """True when arrays are returned as numpy arrays (else memoryviews)."""
    return _arrays.use_numpy()


_log_cb = None  # the installed C callback; kept alive while installed


def set_log_handler(handler: Optional[Callable[[str, str, str], None]], level: str = "info"):
    """Installs handler(level, module, message) as the library's log callback
    (None removes it). It may be called from the library's planning threads."""
    global _log_cb
    if handler is None:
        lib.eplb_log_set_callback(LogFn(), None, 0)
        _log_cb = None
        return
    names = {v: k for k, v in _LEVELS.items()}

    def _cb(lv, module, message, _user):
        try:
            handler(names.get(lv, str(lv)), module.decode(errors="replace"), message.decode(errors="replace"))
        except Exception:  # never unwind into C
            logging.getLogger("eplb").exception("log handler failed")

    cb = LogFn(_cb)
    lib.eplb_log_set_callback(cb, None, _LEVELS[level])
    _log_cb = cb


def log_to_logging(level: str = "info"):
    """Forwards library messages to the standard logging module (logger "eplb.<module>")."""
    py = {"error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}
    set_log_handler(lambda lv, mod, msg: logging.getLogger(f"eplb.{mod}").log(py.get(lv, 20), msg), level)


__all__ = [
    "Error", "IntRangeError", "Trace", "TraceMeta", "TraceWriter", "Step", "convert_trace", "recover_trace", "FORMATS",
    "synth_trace", "read_loads", "write_loads", "Plan", "plan", "POLICIES", "SHARES", "EFFORTS", "EXPORT_FORMATS",
    "LayerMetrics", "Coactivation", "PlanSummary", "SplitSolver", "SplitResult", "split_graph_place", "Cluster",
    "CostModel", "SimSummary", "simulate", "Runtime", "mpi_init", "mpi_finalize", "HAVE_RUNTIME",
    "HAVE_KERNELS", "cuda", "compat", "version",
    "feature_enabled", "have_numpy", "set_log_handler", "log_to_logging", "status_name",
    "status_str", "library_path",
]
