"""The runtime's GPU path (eplb/kernels.h): CUDA top-k tensors are counted and
mapped on the device, in the caller's stream, with no host synchronisation.

    rt = eplb.Runtime(num_layers=58, num_experts=256, topk=8, slots_per_rank=36, ...)
    rt.record(layer, topk_ids)            # topk_ids: CUDA int32 [tokens, 8]
    slots = rt.map(layer, topk_ids)       # CUDA int32 [tokens, 8], same stream
    rt.step_end()                         # feeds the device counts to the runtime

The first CUDA tensor a Runtime sees creates a DeviceDispatch for its device
(or create one yourself to choose the window). It owns the device memory: a
ring of per-step counters [window][layers][experts] and the double-buffered
dispatch tables of every layer. This module needs torch: the binding has no
compiled part, so device memory, pinned host memory, events and streams come
from torch (torch.zeros(..., device=...), torch.cuda.Event, ...), and only
their addresses reach libeplb.

Streams: `stream=` takes a torch.cuda.Stream (or anything with .cuda_stream)
or a raw cudaStream_t address; by default torch's current stream of the
tensor's device. Use one stream per DeviceDispatch (the compute stream): the
table switch and the ring step are ordered in it.

Counts reach the runtime late, without waiting: at step_end each step's row is
copied (async, to pinned memory) and fed into the runtime's step once the copy
has completed, at most `window - 1` steps later; only when `window` copies are
outstanding does step_end wait for the oldest. flush() feeds everything (it
waits). When the runtime switches plans (its epoch changes), the next
step_end or map uploads every layer's new table into the idle buffer and
switches buffers on the stream.
"""

from __future__ import annotations

import collections
import ctypes

from . import _lib
from ._lib import CudaDispatchC, CudaRingC, CudaTableC

_EPLB_ERANGE = -7
_WORD = 4  # every device array here is 32-bit (uint32 / int32)


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
    """Device memory, pinned memory, async copies and streams through torch."""

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

    def zeros(self, nwords, index, pinned=False):
        t = self.torch
        if pinned:
            buf = t.zeros(max(nwords, 1), dtype=t.int32, pin_memory=True)
        else:
            buf = t.zeros(max(nwords, 1), dtype=t.int32, device=t.device("cuda", index))
        buf.ptr = buf.data_ptr()  # tensors accept new attributes
        return buf

    def current_stream(self, index) -> int:
        return self.torch.cuda.current_stream(index).cuda_stream

    def _stream(self, stream, index):
        c = self.torch.cuda
        return c.default_stream(index) if not stream else c.ExternalStream(stream, device=index)

    def copy_async(self, dst, dst_off, src, src_off, n, stream, index):
        """dst[dst_off:+n] = src[src_off:+n] in stream order; returns an event
        with query() and synchronize()."""
        c = self.torch.cuda
        s = self._stream(stream, index)
        with c.stream(s):
            dst[dst_off : dst_off + n].copy_(src[src_off : src_off + n], non_blocking=True)
            ev = c.Event()
            ev.record(s)
        return ev

    def empty_like(self, t, stream, index):
        with self.torch.cuda.stream(self._stream(stream, index)):
            return self.torch.empty_like(t)

    def read(self, buf, n, stream, index):
        """The first n words of a device buffer (waits for the stream)."""
        with self.torch.cuda.stream(self._stream(stream, index)):
            return [v & 0xFFFFFFFF for v in buf[:n].cpu().tolist()]


class DeviceDispatch:
    """The device side of a Runtime on one CUDA device: count ring and tables.

    DeviceDispatch(runtime, device=None (torch's current device), window=4,
    backend=None (TorchBackend)). It attaches itself to the runtime:
    Runtime.record/map route CUDA tensors of this device here, and
    Runtime.step_end() calls step_end_begin / step_end_finish around the C
    step_end. Not thread-safe (like the Runtime)."""

    def __init__(self, runtime, device=None, window: int = 4, backend=None):
        if not _lib.HAVE_KERNELS:
            raise _lib.Error(_lib.EPLB_EUNSUPPORTED, "this libeplb has no kernels module", "eplb.cuda")
        window = int(window)
        if window < 1:
            raise ValueError(f"window: must be >= 1, got {window}")
        self._backend = backend if backend is not None else TorchBackend()
        self.device = self._backend.device_index(device)
        self.window = window
        L, E, S = runtime.num_layers, runtime.num_experts, runtime.num_slots
        self.num_layers, self.num_experts, self.num_slots, self.topk = L, E, S, runtime.topk
        z = lambda n: self._backend.zeros(n, self.device)  # noqa: E731
        self._counts = z(window * L * E)
        self._scalars = z(4)  # step, dropped, bad
        self._tabs = {k: z(2 * L * (n + 1 if k == "off" else n)) for k, n in
                      (("off", E), ("slot", S), ("alias", S), ("prob", S))}
        self._epochs = z(L)
        self._host = self._backend.zeros(window * L * E, self.device, pinned=True)
        sp = self._scalars.ptr
        self._ring = CudaRingC(self._counts.ptr, sp, sp + _WORD, window, L, E)
        self._bad = sp + 2 * _WORD
        self._disp = (CudaDispatchC * L)()
        for layer in range(L):
            d = self._disp[layer]
            for b in range(2):
                i = 2 * layer + b
                d.buf[b] = CudaTableC(self._tabs["off"].ptr + i * (E + 1) * _WORD,
                                      *(self._tabs[k].ptr + i * S * _WORD for k in ("slot", "alias", "prob")))
            d.epoch = self._epochs.ptr + layer * _WORD
            d.num_experts, d.num_slots = E, S
        self._dev_epoch = [0] * L  # the device's *epoch per layer, as enqueued
        self._table_epoch = None  # runtime epoch whose tables are on the device
        self._step = 0  # the device ring's step, as enqueued
        self._pending = collections.deque()  # (event, host row) not yet fed
        self._stream = None  # the last stream used: the step boundary's default
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

    def _stream_of(self, stream):
        s = self._backend.current_stream(self.device) if stream is None else _stream_value(stream)
        self._stream = s
        return s

    # ---- the decode step ---------------------------------------------------

    def record(self, layer: int, topk_ids, stream=None):
        """Counts a layer's CUDA int32 ids [tokens, k] into the ring (async)."""
        ptr, n = self._check(topk_ids, "topk_ids")
        _lib.lib.eplb_cuda_count(ctypes.byref(self._ring), layer, ptr, n, self.topk, self._stream_of(stream))

    def map(self, layer: int, topk_ids, token_base: int = 0, out=None, stream=None):
        """Physical slots (CUDA int32 [tokens, k]) of CUDA int32 ids; out:
        a tensor of the same shape to reuse. Ids out of range give -1."""
        ptr, n = self._check(topk_ids, "topk_ids")
        if not 0 <= layer < self.num_layers:  # the tables are per layer: C never sees the index
            raise _lib.Error(_EPLB_ERANGE, f"cuda_map: layer {layer} >= {self.num_layers}", "eplb_cuda_map")
        if out is not None:
            optr, on = self._check(out, "out")
            if on != n:
                raise ValueError(f"out: expected shape {tuple(topk_ids.shape)} like topk_ids, got {tuple(out.shape)}")
        s = self._stream_of(stream)
        if out is None:
            out = self._backend.empty_like(topk_ids, s, self.device)
            optr = out.data_ptr()
        self.sync_tables(s)
        _lib.lib.eplb_cuda_map(ctypes.byref(self._disp[layer]), layer, ptr, n, self.topk, token_base, optr,
                               self._bad, s)
        return out

    # ---- step boundary -----------------------------------------------------

    def sync_tables(self, stream=None):
        """Uploads every layer's current table when the runtime's epoch moved:
        into the idle buffer, then a switch, both on the stream (no host wait
        for the device; the host table is staged by CUDA)."""
        epoch = self._rt.epoch
        if epoch == self._table_epoch:
            return
        s = self._stream_of(stream) if stream is not None else (self._stream or 0)
        first = self._table_epoch is None
        lib, rt = _lib.lib, self._rt._p
        for layer in range(self.num_layers):
            d = ctypes.byref(self._disp[layer])
            if first:  # zeroed epochs: buffer 0 is in use and nothing was mapped yet
                lib.eplb_cuda_table_upload(rt, layer, d, 0, s)
            else:
                lib.eplb_cuda_table_upload(rt, layer, d, (self._dev_epoch[layer] + 1) & 1, s)
                lib.eplb_cuda_switch(d, s)
                self._dev_epoch[layer] += 1
        self._table_epoch = epoch

    def step_end_begin(self, stream=None):
        """Before the runtime's step_end: copies this step's counter row to
        pinned memory (async) and feeds finished copies into the runtime."""
        s = self._stream_of(stream) if stream is not None else (self._stream or 0)
        n = self.num_layers * self.num_experts
        row = (self._step % self.window) * n
        ev = self._backend.copy_async(self._host, row, self._counts, row, n, s, self.device)
        self._pending.append((ev, row))
        self._feed(lambda: len(self._pending) >= self.window)

    def step_end_finish(self, stream=None):
        """After the runtime's step_end: advances the ring (zeroing the row it
        enters) and uploads new tables if a plan was applied."""
        s = self._stream_of(stream) if stream is not None else (self._stream or 0)
        _lib.lib.eplb_cuda_step(ctypes.byref(self._ring), s)
        self._step += 1
        self.sync_tables(s)

    def _feed(self, must_wait):
        E = self.num_experts
        while self._pending:
            ev, row = self._pending[0]
            if not ev.query():
                if not must_wait():
                    return
                ev.synchronize()
            self._pending.popleft()
            base = self._host.ptr + row * _WORD
            for layer in range(self.num_layers):
                _lib.lib.eplb_runtime_record_counts(self._rt._p, layer, base + layer * E * _WORD)

    def flush(self):
        """Feeds every outstanding copy into the runtime's current step (waits)."""
        self._feed(lambda: True)

    def counters(self, stream=None) -> dict:
        """{"step", "dropped", "bad"} read from the device (waits for the stream)."""
        s = self._stream_of(stream) if stream is not None else (self._stream or 0)
        step, dropped, bad = self._backend.read(self._scalars, 3, s, self.device)
        return {"step": step, "dropped": dropped, "bad": bad}
