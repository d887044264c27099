"""Plans from a serving stack's arrays (eplb/plan.h eplb_plan_from_arrays):
the binding of Plan.from_arrays, and the integer-matrix helpers the vLLM and
SGLang adapters share.

The struct and the two prototypes are declared here, on the library handle
_lib exposes (the mirrors of _structs_*.py are checked against
eplb_abi_struct_size at import; eplb_plan_arrays is checked the same way when
the library reports its size).
"""

from __future__ import annotations

import ctypes
import operator
from ctypes import POINTER, c_int, c_uint32, c_void_p

from . import _arrays as A
from ._cint import wrap
from ._lib import Error, lib

EPLB_ERANGE = -7
_INT32 = (-(2**31), 2**31 - 1)
_UINT32_MAX = 2**32 - 1


class PlanArraysC(ctypes.Structure):
    """eplb_plan_arrays_t (include/eplb/plan.h), field for field."""

    _fields_ = [
        ("struct_size", c_uint32),  # the mirror's size (eplb/common.h, "Struct sizes")
        ("num_layers", c_uint32),
        ("num_experts", c_uint32),
        ("num_gpus", c_uint32),
        ("num_nodes", c_uint32),
        ("num_slots", c_uint32),
        ("slots_per_gpu", c_void_p),
        ("phy2log", c_void_p),
        ("shares", c_void_p),
        ("policy", c_int),
    ]


def _check_abi():
    fn = getattr(lib, "eplb_abi_struct_size", None)
    if fn is None:
        return
    size = fn(b"eplb_plan_arrays")
    if size and size != ctypes.sizeof(PlanArraysC):  # 0: not in the library's table
        raise ImportError(
            f"eplb: eplb_plan_arrays: C {size} bytes, Python {ctypes.sizeof(PlanArraysC)}: "
            "rebuild the library or update tools/python/eplb/_plan_arrays.py"
        )


def _declare(name, restype, argtypes):
    """The foreign function (None when this libeplb lacks it), declared
    here rather than in _lib so that the two stay independent."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        return None
    fn = getattr(fn, "foreign", fn)
    fn.restype, fn.argtypes = restype, argtypes
    return fn


_check_abi()
_INIT_ARGS = [POINTER(PlanArraysC), ctypes.c_size_t]
_init = _declare("eplb_plan_arrays_init", c_int, _INIT_ARGS)
if _init is not None:
    _init = wrap(_init, "eplb_plan_arrays_init", _INIT_ARGS, ["arrays", "size"])
    setattr(lib, "eplb_plan_arrays_init", _init)


def _default():
    """eplb_plan_arrays_default (a static inline of the header) at this
    mirror's size: eplb_plan_arrays_init (eplb/common.h, "Struct sizes")."""
    a = PlanArraysC()
    st = _init(ctypes.byref(a), ctypes.sizeof(a))
    if st < 0:
        raw = lib.eplb_error_detail()
        raise Error(st, raw.decode(errors="replace") if raw else "", "eplb_plan_arrays_init")
    return a
_from_arrays_raw = _declare("eplb_plan_from_arrays", c_int, [POINTER(PlanArraysC), POINTER(c_void_p)])


def _from_arrays(arrays, out):
    st = _from_arrays_raw(arrays, out)
    if st < 0:
        raw = lib.eplb_error_detail()
        raise Error(st, raw.decode(errors="replace") if raw else "", "eplb_plan_from_arrays")
    return st


def available() -> bool:
    """True when the loaded libeplb has eplb_plan_from_arrays."""
    return _from_arrays_raw is not None and _init is not None


def _dim(v, name, lo=1):
    """A non-negative count that fits uint32_t (IntRangeError otherwise:
    a ValueError and an OverflowError), or TypeError for a non-integer."""
    from ._lib import IntRangeError

    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(v).__name__} {v!r}") from None
    if v < 0 or v > _UINT32_MAX:
        raise IntRangeError(f"{name}: {v} does not fit uint32_t (0 to {_UINT32_MAX})")
    return v


def int_matrix(obj, name):
    """(rows, L, R) of a 2-D integer array: a torch tensor on any device, a
    numpy array, a buffer or nested lists. rows is a numpy int64 array when
    numpy is importable, else a list of lists of ints. A float, bool or
    other non-integer dtype is a TypeError; not 2-D (or ragged) a
    ValueError. Values are not range-checked here."""
    np = A.np
    if A.is_torch(obj):
        dt = str(obj.dtype).replace("torch.", "")
        if not dt.startswith(("int", "uint")):
            raise TypeError(f"{name}: expected an integer tensor, got {obj.dtype}")
        shape = tuple(obj.shape)
        if len(shape) != 2:
            raise ValueError(f"{name}: expected 2 dimensions [layers, slots], got shape {shape}")
        t = obj.detach().cpu() if hasattr(obj, "detach") else obj.cpu()
        obj = t.numpy() if np is not None else t.tolist()
        if np is None:
            return [list(map(int, r)) for r in obj], shape[0], shape[1]
    if np is not None and not isinstance(obj, (list, tuple)):
        try:
            arr = np.asarray(obj)
        except Exception as e:
            raise TypeError(f"{name}: not an array of integers: {e}") from None
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name}: expected an integer array, got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(f"{name}: expected 2 dimensions [layers, slots], got shape {arr.shape}")
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) > 2**63 - 1:
            bad = np.argwhere(arr > 2**63 - 1)[0]
            raise _range_error(name, int(bad[0]), int(bad[1]), int(arr[tuple(bad)]), None)
        return np.ascontiguousarray(arr, dtype=np.int64), arr.shape[0], arr.shape[1]
    if isinstance(obj, (list, tuple)):
        try:
            flat, shape = A._flatten(obj)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        if len(shape) != 2:
            raise ValueError(f"{name}: expected 2 dimensions [layers, slots], got shape {shape}")
        for i, v in enumerate(flat):
            if isinstance(v, bool) or not isinstance(v, int):
                try:
                    v = operator.index(v)
                except TypeError:
                    raise TypeError(f"{name}: layer {i // shape[1]} slot {i % shape[1]}: "
                                    f"{v!r} is not an integer") from None
        L, R = shape
        if np is not None:
            return np.asarray([operator.index(v) for v in flat], dtype=np.int64).reshape(L, R), L, R
        return [[operator.index(flat[l * R + r]) for r in range(R)] for l in range(L)], L, R
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{name}: expected a tensor, an array or nested lists of integers, "
                        f"got {type(obj).__name__}") from None
    if A._fmt_kind(mv.format) is None or A._fmt_kind(mv.format)[0] == "f":
        raise TypeError(f"{name}: expected integers, got buffer format {mv.format!r}")
    if mv.ndim != 2:
        raise ValueError(f"{name}: expected 2 dimensions [layers, slots], got shape {mv.shape}")
    return int_matrix(mv.tolist(), name)


def _range_error(name, l, r, v, E):
    want = f"not in [0, {E})" if E is not None else "out of range"
    return Error(EPLB_ERANGE, f"{name}: layer {l} slot {r}: expert {v} {want}", "eplb_plan_from_arrays")


def first_out_of_range(rows, E):
    """(layer, slot, value) of the first id outside [0, E), or None."""
    np = A.np
    if np is not None and isinstance(rows, np.ndarray):
        bad = (rows < 0) | (rows >= E)
        if not bad.any():
            return None
        l, r = (int(i) for i in np.argwhere(bad)[0])
        return l, r, int(rows[l, r])
    for l, row in enumerate(rows):
        for r, v in enumerate(row):
            if not 0 <= v < E:
                return l, r, v
    return None


def _float_matrix(obj, L, R):
    """float64 [L][R] shares as a C array (any integer or float dtype is
    converted once; a tensor is copied to the host)."""
    np = A.np
    if A.is_torch(obj):
        t = obj.detach().cpu() if hasattr(obj, "detach") else obj.cpu()
        obj = t.double().contiguous() if hasattr(t, "double") else t
        obj = obj.numpy() if np is not None and hasattr(obj, "numpy") else obj
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "iuf":
            raise TypeError(f"shares: expected a float array, got dtype {obj.dtype}")
        obj = np.ascontiguousarray(obj, dtype=np.float64)
    elif isinstance(obj, (list, tuple)):
        try:
            flat, shape = A._flatten(obj)
        except ValueError as e:
            raise ValueError(f"shares: {e}") from None
        for v in flat:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"shares: {v!r} is not a number")
        obj = [[float(flat[l * R + r]) for r in range(R)] for l in range(L)] if shape == (L, R) else obj
    return A.carray(obj, "f8", "shares", (L, R))


def plan_arrays_handle(phy2log, shares=None, *, num_gpus, num_nodes=1, slots_per_gpu=None,
                       num_experts=None, policy="deepseek"):
    """The eplb_plan_t address of eplb_plan_from_arrays (see Plan.from_arrays)."""
    if not available():
        raise NotImplementedError("this libeplb has no eplb_plan_from_arrays")
    from .plan import policy_code

    rows, L, R = int_matrix(phy2log, "phy2log")
    np = A.np
    if num_experts is None:
        if np is not None and isinstance(rows, np.ndarray):
            E = int(rows.max()) + 1 if rows.size else 0
        else:
            E = max((max(r) for r in rows if r), default=-1) + 1
        E = max(E, 0)
    else:
        E = _dim(num_experts, "num_experts")
    G = _dim(num_gpus, "num_gpus")
    N = _dim(num_nodes, "num_nodes")
    _dim(L, "phy2log layers")
    _dim(R, "phy2log slots")
    # Ids that int32_t cannot hold are refused here (a cast would wrap them
    # into range); the library checks the rest against [0, E).
    if E <= _INT32[1]:
        bad = None
        if np is not None and isinstance(rows, np.ndarray):
            if rows.size and (int(rows.min()) < _INT32[0] or int(rows.max()) > _INT32[1]):
                bad = first_out_of_range(rows, E)
        else:
            bad = next(((l, r, v) for l, row in enumerate(rows) for r, v in enumerate(row)
                        if not _INT32[0] <= v <= _INT32[1]), None)
        if bad is not None:
            raise _range_error("plan from arrays", *bad, E)
    if np is not None and isinstance(rows, np.ndarray):
        p2l = A.carray(rows.astype(np.int32), "i4", "phy2log", (L, R))
    else:
        p2l = A.carray(rows, "i4", "phy2log", (L, R))
    a = _default()
    a.num_layers, a.num_experts, a.num_gpus, a.num_nodes, a.num_slots = L, E, G, N, R
    a.phy2log = p2l.ptr
    keep = [p2l]
    if shares is not None:
        sh = _float_matrix(shares, L, R)
        a.shares = sh.ptr
        keep.append(sh)
    if slots_per_gpu is not None:
        spg = A.carray(slots_per_gpu, "u4", "slots_per_gpu", (G,))
        a.slots_per_gpu = spg.ptr
        keep.append(spg)
    a.policy = policy_code(policy)
    h = c_void_p()
    _from_arrays(ctypes.byref(a), ctypes.byref(h))
    del keep
    return h.value
