"""The embedded runtime: record, map, step_end, current plan and metrics
(eplb/runtime.h)."""

from __future__ import annotations

import ctypes
from typing import Optional

from . import _arrays as A
from ._lib import (
    EPLB_EUNSUPPORTED,
    HAVE_RUNTIME,
    Error,
    GpuDescC,
    Handle,
    ModelDescC,
    RuntimeConfigC,
    RuntimeMetricsC,
    cstr,
    lib,
    struct_dict,
)
from .plan import Plan, policy_code

COMMS = ("none", "mpi", "nccl")
WINDOWS = ("sum", "ema")
REDUCE_OPS = ("sum", "max", "min")

_CONFIG_KEYS = (
    "num_layers", "num_experts", "topk", "slots_per_rank", "rank", "world_size",
    "ranks_per_node", "local_first", "expert_bytes", "count_thread", "split_per_batch",
    "split_whole_tokens",
)
_CONFIG_REALS = ("split_tolerance",)
_POLICY_KEYS = (
    "interval_steps", "window_steps", "ema_decay", "gain_threshold", "layers_per_step",
    "move_budget", "allreduce_period", "plan_lag_steps", "plan_policy", "staging_bytes",
)


def _need_runtime():
    if not HAVE_RUNTIME:
        raise Error(EPLB_EUNSUPPORTED, "this libeplb has no runtime module", "eplb.Runtime")


class Runtime(Handle):
    """An embedded runtime (eplb_runtime_t).

    Runtime(num_layers=, num_experts=, topk=, slots_per_rank=, world_size=1,
    rank=0, ranks_per_node=1, local_first=True, expert_bytes=0,
    count_thread=False, split_per_batch=-1 (on when world_size > 1: record, route and
    record_counts then re-split each batch and are collective), split_tolerance=0.01,
    split_whole_tokens=0 (1: split in whole tokens, the device's solver),
    split_model=None, split_gpu=None (the per-batch split's decode objective:
    a preset name or a file each, both or neither, eplb/model.h; kept per layer
    only where it models faster than the token-balanced split),
    trace_path=None, comm="none" | "mpi", mpi_comm=None (address of an
    MPI_Comm; default MPI_COMM_WORLD), initial_plan=None, plus the policy
    keys interval_steps, window_steps, ema_decay, gain_threshold,
    layers_per_step, move_budget, allreduce_period, plan_lag_steps,
    plan_policy, staging_bytes.)

    Per step: record(layer, topk_ids) for every layer, map(layer, topk_ids)
    to get physical slots, step_end() at the boundary. Top-k ids are
    [tokens, k] int32 arrays, read in place. CUDA tensors (torch) go to the
    device path (eplb.cuda.DeviceDispatch of their device, created on first
    use; needs torch), host arrays and tensors to the CPU entry points."""

    _kind = "runtime"

    def __init__(self, *, initial_plan: Optional[Plan] = None, trace_path=None, comm: str = "none",
                 mpi_comm=None, split_model=None, split_gpu=None, **config):
        _need_runtime()
        c = RuntimeConfigC()
        lib.eplb_runtime_config_default(ctypes.byref(c))
        for k, v in config.items():
            if k in _CONFIG_KEYS:
                setattr(c, k, int(v))
            elif k in _CONFIG_REALS:
                setattr(c, k, float(v))
            elif k in _POLICY_KEYS:
                setattr(c.policy, k, policy_code(v) if k == "plan_policy" else v)
            else:
                raise TypeError(f"Runtime: unknown option {k!r}")
        self._trace_path = cstr(trace_path) if trace_path is not None else None
        c.trace_path = self._trace_path
        if comm not in COMMS:
            raise ValueError(f"comm: unknown value {comm!r} (one of {', '.join(COMMS)})")
        c.comm.kind = COMMS.index(comm)
        if comm == "mpi":
            c.comm.mpi_comm = mpi_comm if mpi_comm is not None else lib.eplb_runtime_mpi_world()
        # Copied by create: the descriptions only need to live through the call.
        descs = []
        if split_model is not None:
            descs.append(ModelDescC())
            lib.eplb_model_load(cstr(split_model), ctypes.byref(descs[-1]))
            c.split_model = ctypes.addressof(descs[-1])
        if split_gpu is not None:
            descs.append(GpuDescC())
            lib.eplb_gpu_load(cstr(split_gpu), ctypes.byref(descs[-1]))
            c.split_gpu = ctypes.addressof(descs[-1])
        h = ctypes.c_void_p()
        lib.eplb_runtime_create(ctypes.byref(c), initial_plan._p if initial_plan is not None else None,
                                ctypes.byref(h))
        self._weights = {}  # registered buffers: alive until destroy has run
        self._devices = {}  # CUDA device index -> eplb.cuda.DeviceDispatch
        self._own(h.value, lib.eplb_runtime_destroy, self._weights)
        self.num_layers, self.num_experts, self.topk = c.num_layers, c.num_experts, c.topk
        self.world_size, self.slots_per_rank = c.world_size, c.slots_per_rank
        self.num_slots = c.world_size * c.slots_per_rank
        self._map = lib.eplb_runtime_map
        np = A.np
        self._np_i4 = np.dtype("int32") if np is not None else None
        self._ndarray = np.ndarray if np is not None else ()

    def _ids(self, topk_ids, name="topk_ids"):
        a = topk_ids
        # Fast path: a C-contiguous int32 numpy array [n, k].
        if (type(a) is self._ndarray and a.dtype is self._np_i4 and a.ndim == 2
                and a.shape[1] == self.topk and a.flags.c_contiguous):
            return a.ctypes.data, a.shape[0], a
        c = A.carray(a, "i4", name, (None, self.topk))
        n = c.shape[0] if len(c.shape) == 2 else c.size // self.topk
        return c.ptr, n, c

    def _attach_device(self, dev):
        self._p
        if dev.device in self._devices:
            raise ValueError(f"device: cuda:{dev.device} already has a DeviceDispatch on this runtime")
        self._devices[dev.device] = dev

    def device(self, device=None, window: int = 4, backend=None):
        """The DeviceDispatch of a CUDA device (created with `window` if new)."""
        from .cuda import DeviceDispatch, TorchBackend

        b = backend if backend is not None else TorchBackend()
        idx = b.device_index(device)
        dev = self._devices.get(idx)
        return dev if dev is not None else DeviceDispatch(self, idx, window, b)

    def _device_of(self, t):
        self._p
        dev = self._devices.get(getattr(t.device, "index", None))
        return dev if dev is not None else self.device(t.device)

    def record(self, layer: int, topk_ids, stream=None):
        """Counts one layer's top-k ids [tokens, k] int32. A CUDA tensor is
        counted on the device, enqueued on `stream` (default: the current
        stream of its device); stream is ignored for host arrays."""
        if type(topk_ids) is not self._ndarray and getattr(topk_ids, "is_cuda", False) is True:
            return self._device_of(topk_ids).record(layer, topk_ids, stream)
        ptr, n, keep = self._ids(topk_ids)
        lib.eplb_runtime_record(self._p, layer, ptr, n)

    def record_counts(self, layer: int, counts):
        """Adds ready-made counts [E] uint32 to a layer's step."""
        c = A.carray(counts, "u4", "counts", (self.num_experts,))
        lib.eplb_runtime_record_counts(self._p, layer, c.ptr)

    def map(self, layer: int, topk_ids, token_base: int = 0, out=None, stream=None):
        """Physical slots [tokens, k] int32 for top-k ids [tokens, k] int32.
        out: an int32 array of the same shape to reuse (no allocation). CUDA
        ids map on the device (out, if given, a CUDA int32 tensor of the same
        shape) on `stream`, bit-identical to the host map."""
        if type(topk_ids) is not self._ndarray and getattr(topk_ids, "is_cuda", False) is True:
            return self._device_of(topk_ids).map(layer, topk_ids, token_base, out, stream)
        ptr, n, keep = self._ids(topk_ids)
        if out is None:
            out, optr = A.empty("i4", (n, self.topk))
        elif (type(out) is self._ndarray and out.dtype is self._np_i4 and out.shape == (n, self.topk)
              and out.flags.c_contiguous and out.flags.writeable):
            optr = out.ctypes.data
        else:
            optr = A.carray(out, "i4", "out", (n, self.topk), writable=True).ptr
        self._map(self._p, layer, ptr, n, token_base, optr)
        return out

    def route(self, layer: int, topk_ids, token_base: int = 0, out=None):
        """record then map of the same host ids in one call
        (eplb_runtime_route: one pass over the ids with count_thread)."""
        ptr, n, keep = self._ids(topk_ids)
        if out is None:
            out, optr = A.empty("i4", (n, self.topk))
        else:
            optr = A.carray(out, "i4", "out", (n, self.topk), writable=True).ptr
        lib.eplb_runtime_route(self._p, layer, ptr, n, token_base, optr)
        return out

    def step_end(self, stream=None):
        """Closes the step (collective with MPI); may apply a new plan. With
        device dispatchers: feeds their finished count copies into this step
        first, then advances their rings and uploads new tables (on `stream`,
        default the stream of their last record/map)."""
        devs = list(self._devices.values())
        for d in devs:
            d.step_end_begin(stream)
        lib.eplb_runtime_step_end(self._p)
        for d in devs:
            d.step_end_finish(stream)

    def close(self):
        # Device memory belongs to the dispatchers (torch tensors): released
        # when they are collected. Synchronise the stream before closing.
        self._devices = {}
        super().close()

    @staticmethod
    def _host_buffer(buffer, name="buffer"):
        """(address, bytes, what keeps it alive) of a writable host buffer."""
        if A.np is not None and isinstance(buffer, A.np.ndarray):
            if not buffer.flags.c_contiguous or not buffer.flags.writeable:
                raise ValueError(f"{name}: must be a writable C-contiguous array")
            return buffer.ctypes.data, buffer.nbytes, buffer
        if A.is_torch(buffer):
            if buffer.device.type != "cpu":
                raise TypeError(f"{name}: device tensors need the NCCL communicator (not built)")
            return buffer.data_ptr(), buffer.numel() * buffer.element_size(), buffer
        mv = memoryview(buffer)
        if mv.readonly or not mv.c_contiguous:
            raise ValueError(f"{name}: must be a writable contiguous buffer")
        arr = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
        return ctypes.addressof(arr), mv.nbytes, (arr, buffer)

    def register_weights(self, layer: int, slot: int, buffer, nbytes: Optional[int] = None):
        """Registers this rank's weight buffer of (layer, local slot). The
        buffer (writable buffer, numpy array or host tensor) is kept alive
        by the runtime until close()."""
        ptr, size, keep = self._host_buffer(buffer)
        lib.eplb_runtime_register_weights(self._p, layer, slot, ptr, size if nbytes is None else nbytes)
        self._weights[(layer, slot)] = keep

    def register_tensors(self, layer: int, slot: int, tensors):
        """Registers (layer, local slot)'s expert as several host buffers (a
        stack's w13, w2, scales), their bytes summing to expert_bytes, the
        same layout in every slot; migrations move them together and a slot
        switches only when all have landed (eplb_runtime_register_tensors).
        Each buffer is kept alive until close()."""
        tensors = list(tensors)
        if not tensors:
            raise ValueError("tensors: at least one buffer")

        class _Tensor(ctypes.Structure):
            _fields_ = [("ptr", ctypes.c_void_p), ("bytes", ctypes.c_size_t)]

        arr = (_Tensor * len(tensors))()
        keep = []
        for i, t in enumerate(tensors):
            ptr, size, k = self._host_buffer(t, f"tensors[{i}]")
            arr[i].ptr, arr[i].bytes = ptr, size
            keep.append(k)
        lib.eplb_runtime_register_tensors(self._p, layer, slot, ctypes.addressof(arr), len(tensors))
        self._weights[(layer, slot)] = keep

    def window(self, kind: str = "sum"):
        """Window statistics [L, E] float64 ("sum" over the window, or "ema")."""
        if kind not in WINDOWS:
            raise ValueError(f"kind: unknown value {kind!r} (sum, ema)")
        out, addr = A.empty("f8", (self.num_layers, self.num_experts))
        lib.eplb_runtime_window(self._p, WINDOWS.index(kind), addr)
        return out

    @property
    def epoch(self) -> int:
        return lib.eplb_runtime_epoch(self._p)

    def layer_plan(self, layer: int):
        """(phy2log [R] int32, share [R] float64) of a layer's current plan (copies)."""
        p, s = ctypes.c_void_p(), ctypes.c_void_p()
        lib.eplb_runtime_layer_plan(self._p, layer, ctypes.byref(p), ctypes.byref(s))
        return A.copy_from(p.value, "i4", (self.num_slots,)), A.copy_from(s.value, "f8", (self.num_slots,))

    def layer_split(self, layer: int):
        """(share [R], node_share [R] or None, t_star) of the layer's last per-batch split
        (eplb_runtime_layer_split; the plan's shares before any). Copies."""
        s, ns, t = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_double()
        lib.eplb_runtime_layer_split(self._p, layer, ctypes.byref(s), ctypes.byref(ns),
                                     ctypes.byref(t))
        share = A.copy_from(s.value, "f8", (self.num_slots,))
        node = A.copy_from(ns.value, "f8", (self.num_slots,)) if ns.value else None
        return share, node, t.value

    def split(self, layer: int, node_counts):
        """Re-splits a layer from global per-source-node counts [nodes, experts] (uint32)
        that the caller all-reduced itself (eplb_runtime_split; not collective)."""
        c = A.carray(node_counts, "u4", "node_counts")
        if c.size % self.num_experts:
            raise ValueError(f"node_counts: {c.size} values is not nodes x {self.num_experts}")
        lib.eplb_runtime_split(self._p, layer, c.ptr)

    def plan(self) -> Plan:
        """A copy of the current plan, evaluated on the window."""
        h = ctypes.c_void_p()
        lib.eplb_runtime_plan(self._p, ctypes.byref(h))
        return Plan(h.value)

    def metrics(self) -> dict:
        m = RuntimeMetricsC()
        lib.eplb_runtime_metrics(self._p, ctypes.byref(m))
        d = struct_dict(m)
        d["migrating"] = bool(d["migrating"])
        return d

    def inject_transfer_failure(self, layer: int):
        lib.eplb_runtime_inject_transfer_failure(self._p, layer)

    def allreduce(self, values, op: str = "sum"):
        """All-reduces a float64 buffer in place over the communicator."""
        if op not in REDUCE_OPS:
            raise ValueError(f"op: unknown value {op!r} (sum, max, min)")
        c = A.carray(values, "f8", "values", writable=True)
        lib.eplb_runtime_allreduce(self._p, c.ptr, c.size, REDUCE_OPS.index(op))
        return values



def mpi_init():
    """Initialises MPI (MPI_THREAD_FUNNELED) unless it already is; returns
    (rank, size) in MPI_COMM_WORLD. Error EPLB_EUNSUPPORTED without MPI."""
    _need_runtime()
    r, n = ctypes.c_uint32(), ctypes.c_uint32()
    lib.eplb_runtime_mpi_init(None, None, ctypes.byref(r), ctypes.byref(n))
    return r.value, n.value


def mpi_finalize():
    """Finalises MPI if the library initialised it."""
    if HAVE_RUNTIME:
        lib.eplb_runtime_mpi_finalize()
