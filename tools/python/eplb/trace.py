"""Traces: reading, writing/appending, conversion, recovery, synthetic traces
and load matrices (eplb/trace.h)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Optional

from . import _arrays as A
from ._cint import CStruct
from ._lib import (
    EPLB_EOF,
    Error,
    Handle,
    LoadsC,
    SynthOptionsC,
    TraceConvertOptionsC,
    TraceMetaC,
    TraceOpenOptionsC,
    TraceRecoverReportC,
    TraceStepC,
    TraceWriterOptionsC,
    cstr,
    lib,
    raise_error,
    struct_dict,
)

PHASES = ("unknown", "prefill", "decode", "mixed")
U64_MAX = 2**64 - 1


def _format_names():
    out, i = [], 0
    while True:
        s = lib.eplb_trace_format_str(i)
        if not s:
            return tuple(out)
        out.append(s.decode())
        i += 1


#: The canonical name of each trace format, in enum order ("auto", "eplbt",
#: "counts-npy", "topk-npy", "csv", "csv-matrix"), as the library and the CLI
#: name them; format arguments also take the aliases eplb_trace_format_parse
#: accepts ("native", "npy-counts", "npy", "npy-topk").
FORMATS = _format_names()


def format_code(value, what: str = "format") -> int:
    """The eplb_trace_format_t of a name (canonical or alias) or an int."""
    if isinstance(value, int):
        return value
    v = ctypes.c_int()
    try:
        lib.eplb_trace_format_parse(cstr(value), ctypes.byref(v))
    except Error:
        raise ValueError(
            f"{what}: unknown value {value!r} (one of {', '.join(FORMATS)}, or an alias: "
            "native, npy-counts, npy, npy-topk)"
        ) from None
    return v.value


def _enum(value, names, what):
    if isinstance(value, int):
        return value
    try:
        return names.index(value)
    except ValueError:
        raise ValueError(f"{what}: unknown value {value!r} (one of {', '.join(names)})") from None


@dataclass
class TraceMeta:
    """Shape and provenance of a trace (eplb_trace_meta_t)."""

    num_layers: int
    num_experts: int
    topk: int = 0
    num_ranks: int = 0
    phase: str = "unknown"
    model: str = ""
    origin: str = ""

    def _c(self) -> TraceMetaC:
        m = TraceMetaC()
        lib.eplb_trace_meta_default(ctypes.byref(m))
        m.num_layers, m.num_experts = self.num_layers, self.num_experts
        m.topk, m.num_ranks = self.topk, self.num_ranks
        m.phase = _enum(self.phase, PHASES, "phase")
        m.model = self.model.encode()[:63]
        m.origin = self.origin.encode()[:255]
        return m

    @classmethod
    def _from_c(cls, m: TraceMetaC) -> "TraceMeta":
        ph = m.phase
        return cls(
            m.num_layers,
            m.num_experts,
            m.topk,
            m.num_ranks,
            PHASES[ph] if 0 <= ph < len(PHASES) else str(ph),
            m.model.decode(errors="replace"),
            m.origin.decode(errors="replace"),
        )


@dataclass
class Step:
    """One step of a trace (copied out of the reader)."""

    index: int
    num_tokens: int
    counts: object  # [L, E] uint32
    topk: Optional[object] = None  # [rows, L, k] uint16
    source_rank: Optional[object] = None  # [rows] int32


class TraceStatsOptionsC(CStruct):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("step_begin", ctypes.c_uint64),
        ("step_end", ctypes.c_uint64),
        ("ep", ctypes.POINTER(ctypes.c_uint32)),
        ("num_ep", ctypes.c_uint32),
    ]


class TraceStatsC(CStruct):
    _D = ctypes.POINTER(ctypes.c_double)
    _fields_ = [
        ("step_begin", ctypes.c_uint64),
        ("step_end", ctypes.c_uint64),
        ("num_layers", ctypes.c_uint32),
        ("num_experts", ctypes.c_uint32),
        ("num_ep", ctypes.c_uint32),
        ("ep", ctypes.POINTER(ctypes.c_uint32)),
        ("expert_over_mean", _D),
        ("gpu_over_mean", _D),
        ("gpu_over_mean_per_step", _D),
        ("step_correlation", _D),
        ("mean_expert_over_mean", ctypes.c_double),
        ("mean_gpu_over_mean", _D),
        ("mean_gpu_over_mean_per_step", _D),
        ("mean_step_correlation", ctypes.c_double),
    ]


def _stats_dict(c: TraceStatsC) -> dict:
    """eplb_trace_stats_t as a dict: per-layer lists, and per-EP dicts keyed
    by the EP size (None for an undefined correlation)."""
    L, n = c.num_layers, c.num_ep
    ep = [c.ep[k] for k in range(n)]

    def corr(v):
        return None if v != v else v

    def by_ep(arr, base):
        return {ep[k]: arr[base + k] for k in range(n)}

    return {
        "steps": (c.step_begin, c.step_end),
        "layers": L,
        "experts": c.num_experts,
        "ep": ep,
        "busiest_expert_over_mean": [c.expert_over_mean[l] for l in range(L)],
        "busiest_gpu_over_mean": [by_ep(c.gpu_over_mean, l * n) for l in range(L)],
        "busiest_gpu_over_mean_per_step": [by_ep(c.gpu_over_mean_per_step, l * n) for l in range(L)],
        "step_correlation": [corr(c.step_correlation[l]) for l in range(L)],
        "mean_busiest_expert_over_mean": c.mean_expert_over_mean,
        "mean_busiest_gpu_over_mean": by_ep(c.mean_gpu_over_mean, 0),
        "mean_busiest_gpu_over_mean_per_step": by_ep(c.mean_gpu_over_mean_per_step, 0),
        "mean_step_correlation": corr(c.mean_step_correlation),
    }


class Trace(Handle):
    """A native trace opened for reading (eplb_trace_open).

    len(t), t[i] / t.read_step(i), iteration (streaming, from the start),
    window_sum(begin, end) -> [L, E] float64. Close with close() or a
    with-block; the finalizer closes it otherwise."""

    _kind = "trace"

    def __init__(self, path, allow_torn_tail: bool = False):
        o = TraceOpenOptionsC()
        lib.eplb_trace_open_options_default(ctypes.byref(o))
        o.allow_torn_tail = 1 if allow_torn_tail else 0
        h = ctypes.c_void_p()
        lib.eplb_trace_open(cstr(path), ctypes.byref(o), ctypes.byref(h))
        self._own(h.value, lib.eplb_trace_close)
        self.path = path
        self.meta = TraceMeta._from_c(lib.eplb_trace_meta(self._ptr).contents)

    @property
    def num_steps(self) -> int:
        return lib.eplb_trace_num_steps(self._p)

    @property
    def num_tokens(self) -> int:
        return lib.eplb_trace_num_tokens(self._p)

    @property
    def has_topk(self) -> bool:
        return bool(lib.eplb_trace_has_topk(self._p))

    def __len__(self):
        return self.num_steps

    def _step(self, s: TraceStepC) -> Step:
        L, E, k = self.meta.num_layers, self.meta.num_experts, self.meta.topk
        counts = A.copy_from(s.counts, "u4", (L, E))
        topk = rank = None
        if s.num_rows:
            topk = A.copy_from(s.topk, "u2", (s.num_rows, L, k))
            rank = A.copy_from(s.source_rank, "i4", (s.num_rows,))
        return Step(s.index, s.num_tokens, counts, topk, rank)

    def read_step(self, index: int) -> Step:
        if index < 0:
            index += self.num_steps
        s = TraceStepC()
        lib.eplb_trace_read_step(self._p, index, ctypes.byref(s))
        return self._step(s)

    __getitem__ = read_step

    def rewind(self):
        lib.eplb_trace_rewind(self._p)

    def next(self) -> Optional[Step]:
        """The next step of the stream, None at the end."""
        s = TraceStepC()
        st = lib.eplb_trace_next(self._p, ctypes.byref(s))
        if st == EPLB_EOF:
            return None
        if st < 0:
            raise_error(st, "eplb_trace_next")
        return self._step(s)

    def __iter__(self):
        self.rewind()
        while True:
            s = self.next()
            if s is None:
                return
            yield s

    def refresh(self) -> int:
        """Indexes chunks appended since open; returns the number of new steps."""
        n = ctypes.c_uint64()
        lib.eplb_trace_refresh(self._p, ctypes.byref(n))
        return n.value

    def window_sum(self, begin: int = 0, end: Optional[int] = None, out=None):
        """Counts summed over steps [begin, end) as [L, E] float64."""
        L, E = self.meta.num_layers, self.meta.num_experts
        if out is None:
            out, addr = A.empty("f8", (L, E))
        else:
            addr = A.carray(out, "f8", "out", (L, E), writable=True).ptr
        lib.eplb_trace_window_sum(self._p, begin, U64_MAX if end is None else end, addr)
        return out

    def stats(self, begin: int = 0, end: Optional[int] = None, ep=None) -> dict:
        """eplb_trace_stats over steps [begin, end): skew of the experts, GPU
        imbalance of a contiguous placement over each EP size in `ep`
        (default 8, 16, 32), and step-to-step correlation (what `eplb trace
        stats` prints)."""
        o = TraceStatsOptionsC()
        lib.eplb_trace_stats_options_default(ctypes.byref(o))
        o.step_begin = begin
        o.step_end = U64_MAX if end is None else end
        if ep:
            arr = (ctypes.c_uint32 * len(ep))(*ep)
            o.ep, o.num_ep = ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint32)), len(ep)
        out = ctypes.c_void_p()
        lib.eplb_trace_stats(self._p, ctypes.byref(o), ctypes.byref(out))
        try:
            return _stats_dict(ctypes.cast(out, ctypes.POINTER(TraceStatsC)).contents)
        finally:
            lib.eplb_trace_stats_destroy(out)

    def __repr__(self):
        if self.closed:
            return "<eplb.Trace closed>"
        return f"<eplb.Trace {self.path!s} steps={self.num_steps} {self.meta}>"


class TraceWriter(Handle):
    """Writes (or appends to) a native trace.

    append=False creates a new file (atomically by default: nothing appears
    at path until finish()); append=True continues an existing file (meta may
    be None then) or creates it. In a with-block, a clean exit finishes the
    file and an exception discards it (atomic mode)."""

    _kind = "trace writer"

    def __init__(
        self,
        path,
        meta: Optional[TraceMeta] = None,
        *,
        append: bool = False,
        steps_per_chunk: Optional[int] = None,
        compression_level: Optional[int] = None,
        fsync_chunks: bool = False,
        atomic: bool = True,
    ):
        o = TraceWriterOptionsC()
        lib.eplb_trace_writer_options_default(ctypes.byref(o))
        if steps_per_chunk is not None:  # else the library's default
            o.steps_per_chunk = steps_per_chunk
        if compression_level is not None:
            o.compression_level = compression_level
        o.fsync_chunks = int(bool(fsync_chunks))
        o.atomic = int(bool(atomic))
        mc = meta._c() if meta is not None else None
        h = ctypes.c_void_p()
        if append:
            lib.eplb_trace_writer_open_append(
                cstr(path), ctypes.byref(mc) if mc else None, ctypes.byref(o), ctypes.byref(h)
            )
        else:
            if meta is None:
                raise ValueError("TraceWriter: meta is required to create a trace")
            lib.eplb_trace_writer_create(cstr(path), ctypes.byref(mc), ctypes.byref(o), ctypes.byref(h))
        self._own(h.value, lib.eplb_trace_writer_destroy)
        self.path = path
        if meta is None:
            with Trace(path, allow_torn_tail=True) as t:
                meta = t.meta
        self.meta = meta
        self._finished = False

    @property
    def num_steps(self) -> int:
        return lib.eplb_trace_writer_num_steps(self._p)

    def append(self, counts, num_tokens: Optional[int] = None, topk=None, source_rank=None):
        """Appends one step: counts [L, E] uint32; optional top-k rows
        [rows, L, k] uint16 and their source ranks [rows] int32. num_tokens
        defaults to the busiest layer's total over k (or the row count)."""
        L, E, k = self.meta.num_layers, self.meta.num_experts, self.meta.topk
        c = A.carray(counts, "u4", "counts", (L, E))
        s = TraceStepC()
        s.counts = c.ptr
        keep = [c]
        rows = 0
        if topk is not None:
            if k == 0:
                raise ValueError("topk: the trace's meta.topk is 0 (unknown)")
            t = A.carray(topk, "u2", "topk", (None, L, k))
            rows = t.shape[0] if len(t.shape) == 3 else t.size // (L * k)
            s.topk, s.num_rows = t.ptr, rows
            keep.append(t)
            if source_rank is not None:
                r = A.carray(source_rank, "i4", "source_rank", (rows,))
                s.source_rank = r.ptr
                keep.append(r)
            else:
                r = A.carray([-1] * rows, "i4", "source_rank", (rows,))
                s.source_rank = r.ptr
                keep.append(r)
        elif source_rank is not None:
            raise ValueError("source_rank: needs topk rows")
        if num_tokens is None:
            flat = A.flat_list(A.copy_from(c.ptr, "u4", (L * E,)))
            busiest = max(sum(flat[l * E : (l + 1) * E]) for l in range(L))
            num_tokens = busiest // k if k else rows
        s.num_tokens = num_tokens
        lib.eplb_trace_writer_append(self._p, ctypes.byref(s))

    def flush(self):
        lib.eplb_trace_writer_flush(self._p)

    def finish(self):
        lib.eplb_trace_writer_finish(self._p)
        self._finished = True
        self.close()

    def __exit__(self, exc_type, *rest):
        if exc_type is None and not self.closed:
            self.finish()
        self.close()
        return False


def convert_trace(
    src,
    dst,
    *,
    from_format: str = "auto",
    to_format: str = "auto",
    num_experts: int = 0,
    tokens_per_step: int = 256,
    topk_rows_per_step: int = 0,
    meta: Optional[TraceMeta] = None,
):
    """eplb_trace_convert: formats are the names of FORMATS (auto, eplbt,
    counts-npy, topk-npy, csv, csv-matrix) or their aliases (native,
    npy-counts, npy, npy-topk). The output is written atomically."""
    o = TraceConvertOptionsC()
    lib.eplb_trace_convert_options_default(ctypes.byref(o))
    o.from_ = format_code(from_format, "from_format")
    o.to = format_code(to_format, "to_format")
    o.num_experts = num_experts
    o.tokens_per_step = tokens_per_step
    o.topk_rows_per_step = topk_rows_per_step
    mc = meta._c() if meta is not None else None
    if mc is not None:
        o.meta = ctypes.pointer(mc)
    lib.eplb_trace_convert(cstr(src), cstr(dst), ctypes.byref(o))


def recover_trace(src, dst) -> dict:
    """Copies every intact step of a damaged trace to dst; returns the report."""
    r = TraceRecoverReportC()
    lib.eplb_trace_recover(cstr(src), cstr(dst), ctypes.byref(r))
    return struct_dict(r)


SKEWS = ("zipf", "lognormal")


def synth_trace(path, **options):
    """eplb_synth_generate with keyword options named as in eplb_synth_options_t
    (num_layers, num_experts, topk, num_steps, tokens_per_step, seed, skew
    ('zipf'/'lognormal'), skew_param, layer_variation, drift, switch_every,
    coactivation, num_ranks, topk_rows_per_step, phase, model)."""
    o = SynthOptionsC()
    lib.eplb_synth_options_default(ctypes.byref(o))
    names = {n for n, _ in SynthOptionsC._fields_}
    for key, value in options.items():
        if key not in names:
            raise TypeError(f"synth_trace: unknown option {key!r}")
        if key == "skew":
            value = _enum(value, SKEWS, "skew")
        elif key == "phase":
            value = _enum(value, PHASES, "phase")
        elif key == "model":
            value = value.encode()[:63]
        setattr(o, key, value)
    lib.eplb_synth_generate(cstr(path), ctypes.byref(o))


def read_loads(path, step_begin: int = 0, step_end: Optional[int] = None):
    """A load matrix [L, E] float64 from a trace, CSV or NPY file (eplb_loads_read)."""
    p = ctypes.POINTER(LoadsC)()
    lib.eplb_loads_read(cstr(path), step_begin, U64_MAX if step_end is None else step_end, ctypes.byref(p))
    try:
        ld = p.contents
        return A.copy_from(ld.values, "f8", (ld.num_layers, ld.num_experts))
    finally:
        lib.eplb_loads_destroy(p)


def loads_struct(loads, name="loads"):
    """(LoadsC, keep-alive) over a [L, E] float64 array without copying it
    (other integer or float dtypes are converted to float64 once)."""
    c = A.carray(A.as_float64(loads, name), "f8", name)
    if len(c.shape) != 2:
        raise ValueError(f"{name}: expected shape (layers, experts) of float64, got {c.shape}")
    s = LoadsC(c.shape[0], c.shape[1], c.ptr)
    return s, c


def write_loads(loads, path):
    """Writes a [L, E] load matrix as a CSV matrix (atomically)."""
    s, keep = loads_struct(loads)
    lib.eplb_loads_write_csv(ctypes.byref(s), cstr(path))
    del keep
