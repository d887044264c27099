"""The runtime's GPU path: CUDA top-k tensors are counted and mapped on the
device, in the caller's stream, with no host synchronisation.

    rt = eplb.Runtime(num_layers=58, num_experts=256, topk=8, slots_per_rank=36, ...)
    rt.record(layer, topk_ids)            # topk_ids: CUDA int32 [tokens, 8]
    slots = rt.map(layer, topk_ids)       # CUDA int32 [tokens, 8], same stream
    rt.step_end()                         # feeds the device counts to the runtime

A thin wrapper over the C runtime's device backend (include/eplb/runtime.h,
"Device backend"; docs/gpu.md): the first CUDA tensor a Runtime sees creates
a DeviceDispatch for its device (or create one yourself to choose the
window), which attaches the device to the C runtime
(eplb_runtime_device_attach). The C runtime then owns the device memory (a
ring of per-step counters [window][layers][experts], every layer's
double-buffered dispatch tables, pinned host rows and events), counts and
maps with eplb_runtime_device_record / _map, and at step_end copies each
step's counts back asynchronously and feeds them into the statistics once
their event has completed (at most `window - 1` steps later; only when
`window` copies are in flight does it wait for the oldest). Plan switches
upload the new tables into the idle buffers and flip the epoch on the
stream, inside step_end. torch is needed only to find the device and its
current stream and to allocate output tensors.

Streams: `stream=` takes a torch.cuda.Stream (or anything with .cuda_stream)
or a raw cudaStream_t value; by default torch's current stream of the
tensor's device. The runtime orders its work on one stream at a time: a call
on another stream than the last one first waits for the last one's work
(eplb_runtime_device_set_stream), so keep to one stream (the compute
stream) in the decode step.

backend: TorchBackend (kind "cuda"), or a stand-in with `kind = "emulated"`
whose "device" memory is host memory: the C runtime's emulated device then
runs the same protocol with the kernels' CPU references (the tests do this).
"""

from __future__ import annotations

import ctypes

from . import _lib
from ._lib import RuntimeDeviceC, RuntimeDeviceStatsC

_KINDS = {"cuda": 1, "emulated": 2}


def is_cuda_tensor(obj) -> bool:
    """True for a tensor-like object in device memory (torch: t.is_cuda)."""
    return getattr(obj, "is_cuda", False) is True and hasattr(obj, "data_ptr")


def _stream_value(stream) -> int:
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    v = getattr(stream, "cuda_stream", None)
    if isinstance(v, int):
        return v
    raise TypeError(f"stream: expected a torch.cuda.Stream or a cudaStream_t address, got {type(stream).__name__}")


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


class TorchBackend:
    """The device index, its current stream and output tensors through torch."""

    kind = "cuda"

    def __init__(self):
        try:
            import torch
        except ImportError:
            raise RuntimeError(
                "eplb.cuda: the GPU path needs torch (it allocates device memory with torch); "
                "pass host arrays to use the CPU entry points"
            ) from None
        if not torch.cuda.is_available():
            raise RuntimeError("eplb.cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
        self.torch = torch

    def device_index(self, device) -> int:
        t = self.torch
        if device is None:
            return t.cuda.current_device()
        d = t.device("cuda", device) if isinstance(device, int) else t.device(device)
        if d.type != "cuda":
            raise ValueError(f"device: expected a CUDA device, got {d}")
        return d.index if d.index is not None else t.cuda.current_device()

    def current_stream(self, index) -> int:
        return self.torch.cuda.current_stream(index).cuda_stream

    def empty_like(self, t, stream, index):
        c = self.torch.cuda
        s = c.default_stream(index) if not stream else c.ExternalStream(stream, device=index)
        with c.stream(s):
            return self.torch.empty_like(t)


class DeviceDispatch:
    """The device side of a Runtime on one CUDA device.

    DeviceDispatch(runtime, device=None (torch's current device), window=4,
    backend=None (TorchBackend)). Attaches the device to the C runtime (one
    device per runtime); Runtime.record/map route CUDA tensors of this
    device here, and Runtime.step_end() runs the device's step boundary in
    C. Not thread-safe (like the Runtime)."""

    def __init__(self, runtime, device=None, window: int = 4, backend=None):
        if not _lib.HAVE_KERNELS:
            raise _lib.Error(_lib.EPLB_EUNSUPPORTED, "this libeplb has no kernels module", "eplb.cuda")
        window = int(window)
        if window < 1:
            raise ValueError(f"window: must be >= 1, got {window}")
        self._backend = backend if backend is not None else TorchBackend()
        self.device = self._backend.device_index(device)
        kind = getattr(self._backend, "kind", "cuda")
        if kind not in _KINDS:
            raise ValueError(f"backend.kind: {kind!r} (one of {', '.join(_KINDS)})")
        if self.device in runtime._devices or runtime._devices:
            raise ValueError(f"device: cuda:{self.device}: this runtime has a DeviceDispatch already")
        self.window = window
        self.num_layers, self.num_experts = runtime.num_layers, runtime.num_experts
        self.num_slots, self.topk = runtime.num_slots, runtime.topk
        self._stream = self._backend.current_stream(self.device)
        cfg = RuntimeDeviceC(_KINDS[kind], self.device, self._stream, window)
        _lib.lib.eplb_runtime_device_attach(runtime._p, ctypes.byref(cfg))
        self._rt = runtime
        runtime._attach_device(self)

    # ---- argument checks (all before any C call) ---------------------------

    def _check(self, t, name):
        if not is_cuda_tensor(t):
            raise TypeError(f"{name}: expected a CUDA tensor, got {type(t).__name__}")
        idx = getattr(t.device, "index", None)
        if idx != self.device:
            raise ValueError(f"{name}: tensor on cuda:{idx}, this DeviceDispatch's tables on cuda:{self.device}")
        if _dtype_name(t) != "int32":
            raise TypeError(f"{name}: expected dtype torch.int32, got {t.dtype}")
        shape = tuple(t.shape)
        if len(shape) != 2 or shape[1] != self.topk:
            raise ValueError(f"{name}: expected shape (?, {self.topk}) of int32, got {shape}")
        if shape[0] >= 2**32:
            raise ValueError(f"{name}: {shape[0]} tokens > 2^32 - 1")
        if not t.is_contiguous():
            raise ValueError(f"{name}: tensor must be contiguous (call .contiguous())")
        return t.data_ptr(), shape[0]

    def _stream_value(self, stream):
        return self._backend.current_stream(self.device) if stream is None else _stream_value(stream)

    def _use(self, s):
        """Makes s the runtime's stream (waits for the last one's work)."""
        if s != self._stream:
            _lib.lib.eplb_runtime_device_set_stream(self._rt._p, s)
            self._stream = s
        return s

    # ---- the decode step ---------------------------------------------------

    def record(self, layer: int, topk_ids, stream=None):
        """Counts a layer's CUDA int32 ids [tokens, k] into the ring (async)."""
        ptr, n = self._check(topk_ids, "topk_ids")
        s = self._stream_value(stream)
        self._use(s)
        _lib.lib.eplb_runtime_device_record(self._rt._p, layer, ptr, n)

    def map(self, layer: int, topk_ids, token_base: int = 0, out=None, stream=None):
        """Physical slots (CUDA int32 [tokens, k]) of CUDA int32 ids; out:
        a tensor of the same shape to reuse. Ids out of range give -1."""
        ptr, n = self._check(topk_ids, "topk_ids")
        if out is not None:
            optr, on = self._check(out, "out")
            if on != n:
                raise ValueError(f"out: expected shape {tuple(topk_ids.shape)} like topk_ids, got {tuple(out.shape)}")
        s = self._stream_value(stream)
        if out is None:
            out = self._backend.empty_like(topk_ids, s, self.device)
            optr = out.data_ptr()
        self._use(s)
        _lib.lib.eplb_runtime_device_map(self._rt._p, layer, ptr, n, token_base, optr)
        return out

    # ---- step boundary (the work is in the C step_end) ---------------------

    def step_end_begin(self, stream=None):
        """Before the runtime's step_end: its device work goes on `stream`
        (default: the stream of the last record/map)."""
        if stream is not None:
            self._use(_stream_value(stream))

    def step_end_finish(self, stream=None):
        """After the runtime's step_end: nothing left (kept for callers)."""

    def flush(self):
        """Feeds every outstanding copy into the runtime's current step (waits)."""
        _lib.lib.eplb_runtime_device_flush(self._rt._p)

    def stats(self) -> dict:
        """Host-side counters of the device path (eplb_runtime_device_stats)."""
        st = RuntimeDeviceStatsC()
        _lib.lib.eplb_runtime_device_stats(self._rt._p, ctypes.byref(st))
        return {name: getattr(st, name) for name, _ in RuntimeDeviceStatsC._fields_}

    def counters(self, stream=None) -> dict:
        """{"step", "dropped", "bad"} read from the device (waits for the stream)."""
        if stream is not None:
            self._use(_stream_value(stream))
        out = (ctypes.c_uint32 * 3)()
        _lib.lib.eplb_runtime_device_counters(self._rt._p, out)
        return {"step": out[0], "dropped": out[1], "bad": out[2]}
