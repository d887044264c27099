"""Arrays across the ctypes boundary.

Inputs are taken without a copy when the data allows it: a C-contiguous
numpy array of the exact dtype (its buffer), a CPU torch tensor (its data
pointer), or any writable object with the buffer protocol of the right item
type (array.array, bytearray, memoryview). Other inputs are copied: read-only
buffers without numpy, non-contiguous arrays, and Python lists/tuples (whose
values are range-checked for the dtype). A numpy array or tensor of the wrong
dtype is a TypeError (never converted silently: the caller should know that a
copy happens).

Outputs are numpy arrays when numpy is importable, else memoryviews over a
bytearray with the right format and shape (index with m[i, j], .tolist()).
"""

from __future__ import annotations

import array
import ctypes
import os
import struct

try:  # numpy is optional
    if os.environ.get("EPLB_NO_NUMPY"):
        raise ImportError
    import numpy as np
except ImportError:  # pragma: no cover - depends on the machine
    np = None

# dtype code -> (struct format char, ctypes type, numpy name)
DTYPES = {
    "u1": ("B", ctypes.c_uint8, "uint8"),
    "u2": ("H", ctypes.c_uint16, "uint16"),
    "i4": ("i", ctypes.c_int32, "int32"),
    "u4": ("I", ctypes.c_uint32, "uint32"),
    "i8": ("q", ctypes.c_int64, "int64"),
    "f8": ("d", ctypes.c_double, "float64"),
}

_LIMITS = {
    "u1": (0, 255),
    "u2": (0, 65535),
    "i4": (-(2**31), 2**31 - 1),
    "u4": (0, 2**32 - 1),
    "i8": (-(2**63), 2**63 - 1),
}

_NP_DTYPES = {code: np.dtype(v[2]) for code, v in DTYPES.items()} if np is not None else {}


def use_numpy() -> bool:
    return np is not None


def _fmt_kind(fmt: str):
    """(kind, itemsize) of a buffer format: 'i' signed, 'u' unsigned, 'f' float."""
    f = fmt.lstrip("@=<>!")
    if len(f) != 1 or fmt[:1] in (">", "!"):
        return None
    try:
        size = struct.calcsize(f)
    except struct.error:
        return None
    if f in "bhilq":
        return ("i", size)
    if f in "BHILQ":
        return ("u", size)
    if f in "fd":
        return ("f", size)
    return None


def _code_kind(code: str):
    return (code[0], int(code[1]))


def _check_shape(name, got, shape, dtype_name):
    if shape is None:
        return got
    ok = len(got) == len(shape) and all(w is None or w == g for w, g in zip(shape, got))
    if not ok:
        # A flat buffer of the right size stands for the expected matrix.
        size = 1
        for g in got:
            size *= g
        want = 1
        for w in shape:
            want = None if (w is None or want is None) else want * w
        if len(got) == 1 and want is not None and size == want:
            return tuple(shape)
        exp = "(" + ", ".join("?" if w is None else str(w) for w in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"{name}: expected shape {exp} of {dtype_name}, got {tuple(got)}")
    return tuple(got)


def _flatten(obj, depth=0):
    """Flattens nested lists/tuples; returns (flat list, shape)."""
    if not isinstance(obj, (list, tuple)):
        return [obj], ()
    if not obj:
        return [], (0,)
    flat, inner = [], None
    for item in obj:
        f, s = _flatten(item, depth + 1)
        if inner is None:
            inner = s
        elif s != inner:
            raise ValueError("ragged nested sequence")
        flat.extend(f)
    return flat, (len(obj),) + inner


_TENSOR_ATTRS = ("data_ptr", "is_cuda", "dtype", "shape", "device", "is_contiguous")


def is_torch(obj) -> bool:
    """A torch tensor, or an object with the same protocol (data_ptr(),
    is_cuda, dtype, shape, device, is_contiguous())."""
    if type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "data_ptr"):
        return True
    return all(hasattr(obj, a) for a in _TENSOR_ATTRS)


class CArray:
    """An input/output array resolved to an address; `keep` holds the memory."""

    __slots__ = ("ptr", "shape", "keep")

    def __init__(self, ptr, shape, keep):
        self.ptr = ptr
        self.shape = shape
        self.keep = keep

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n


def carray(obj, code, name, shape=None, writable=False, also=()):
    """Resolves obj to a C array of dtype `code` ('u4', 'i4', 'f8', ...).

    shape: expected shape with None for any extent (None: any shape).
    also: other dtype codes of the same size accepted as is (reinterpreted,
    e.g. int32 ids where uint32 is declared).
    writable: the library writes into it (no copy is ever made then)."""
    fmt, ctype, npname = DTYPES[code]
    ok_codes = (code,) + tuple(also)
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype not in [_NP_DTYPES[c] for c in ok_codes]:
            raise TypeError(f"{name}: expected dtype {npname}, got {obj.dtype}")
        shp = _check_shape(name, obj.shape, shape, npname)
        if not obj.flags.c_contiguous:
            if writable:
                raise ValueError(f"{name}: output array must be C-contiguous")
            obj = np.ascontiguousarray(obj)
        if writable and not obj.flags.writeable:
            raise ValueError(f"{name}: output array is read-only")
        return CArray(obj.ctypes.data, shp, obj)
    if is_torch(obj):
        dt = str(obj.dtype).replace("torch.", "")
        if dt not in [DTYPES[c][2] for c in ok_codes]:
            raise TypeError(f"{name}: expected dtype torch.{npname}, got {obj.dtype}")
        if obj.device.type != "cpu":
            raise TypeError(
                f"{name}: a {obj.device.type} tensor: this entry point takes host memory "
                "(Runtime.record and Runtime.map take CUDA tensors; see eplb.cuda)"
            )
        shp = _check_shape(name, tuple(obj.shape), shape, npname)
        if not obj.is_contiguous():
            if writable:
                raise ValueError(f"{name}: output tensor must be contiguous")
            obj = obj.contiguous()
        return CArray(obj.data_ptr(), shp, obj)
    if isinstance(obj, (list, tuple)):
        if writable:
            raise TypeError(f"{name}: expected a writable {npname} buffer, got {type(obj).__name__}")
        try:
            flat, shp = _flatten(obj)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        if code in _LIMITS:
            lo, hi = _LIMITS[code]
            for v in flat:
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
                if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                    raise ValueError(f"{name}: value {v!r} is not a {npname}")
        shp = _check_shape(name, shp, shape, npname)
        buf = (ctype * max(len(flat), 1))(*flat)
        return CArray(ctypes.addressof(buf), shp, buf)
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{name}: expected a {npname} array (numpy array, buffer or list), "
            f"got {type(obj).__name__}"
        ) from None
    kind = _fmt_kind(mv.format)
    if kind not in [_code_kind(c) for c in ok_codes]:
        raise TypeError(f"{name}: expected item type {npname}, got buffer format {mv.format!r}")
    shp = _check_shape(name, mv.shape if mv.ndim else (1,), shape, npname)
    if not mv.c_contiguous:
        if writable:
            raise ValueError(f"{name}: output buffer must be C-contiguous")
        mv = memoryview(mv.tobytes()).cast(fmt)
    if mv.readonly:
        if writable:
            raise ValueError(f"{name}: output buffer is read-only")
        buf = (ctypes.c_char * max(mv.nbytes, 1)).from_buffer_copy(mv.cast("B") if mv.nbytes else b"\0")
        return CArray(ctypes.addressof(buf), shp, buf)
    if mv.nbytes == 0:
        buf = (ctypes.c_char * 1)()
        return CArray(ctypes.addressof(buf), shp, buf)
    buf = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))
    return CArray(ctypes.addressof(buf), shp, (buf, obj))


_NUMERIC_TORCH = {
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "uint16", "uint32", "uint64",
}


def as_float64(obj, name):
    """obj itself when it is float64 (or a list, a tuple or anything carray
    judges), else a float64 copy of an integer or float array: loads are
    doubles in C, so int64 counts and float32 averages are converted once.
    Other dtypes are left for carray to refuse (TypeError naming float64)."""
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype != np.float64 and obj.dtype.kind in "iuf":
            return obj.astype(np.float64, order="C")
        return obj
    if is_torch(obj):
        dt = str(obj.dtype).replace("torch.", "")
        if dt != "float64" and dt in _NUMERIC_TORCH and obj.device.type == "cpu":
            return obj.double().contiguous()
        return obj
    if isinstance(obj, (list, tuple)):
        return obj
    try:
        mv = memoryview(obj)
    except TypeError:
        return obj
    kind = _fmt_kind(mv.format)
    if kind is None or kind == ("f", 8) or mv.ndim == 0:
        return obj
    vals = mv.cast("B").cast(mv.format.lstrip("@=<")).tolist() if mv.c_contiguous else mv.tolist()
    if not mv.c_contiguous:  # nested lists: flatten them
        vals, _ = _flatten(vals)
    flat = array.array("d", vals)
    return memoryview(flat).cast("B").cast("d", list(mv.shape)) if mv.ndim > 1 else flat


def empty(code, shape):
    """A new zeroed output array; returns (array, address)."""
    fmt, _, npname = DTYPES[code]
    if np is not None:
        a = np.zeros(shape, dtype=_NP_DTYPES[code])
        return a, a.ctypes.data
    n = 1
    for s in shape:
        n *= s
    raw = bytearray(max(n, 1) * struct.calcsize(fmt))
    addr = ctypes.addressof((ctypes.c_char * len(raw)).from_buffer(raw))
    mv = memoryview(raw)[: n * struct.calcsize(fmt)]
    mv = mv.cast(fmt, list(shape)) if n else mv.cast(fmt)
    return mv, addr


def copy_from(ptr, code, shape):
    """A new array holding a copy of C memory at ptr."""
    out, addr = empty(code, shape)
    n = 1
    for s in shape:
        n *= s
    if n and ptr:
        ctypes.memmove(addr, ptr, n * struct.calcsize(DTYPES[code][0]))
    return out


def flat_list(a):
    """Python list of an output array's values (flattened)."""
    if np is not None and isinstance(a, np.ndarray):
        return a.ravel().tolist()
    if isinstance(a, memoryview):
        return a.cast("B").cast(a.format).tolist()
    return list(array.array(a))
