"""Integers on their way to C, checked against what the C type holds.

ctypes stores an integer into a c_uint32 field or argument modulo 2**32 without
a word: 2**32 + 8 replicas would plan 8, layer 2**32 would record layer 0, -1
would become 4294967295. Every structure mirror (_structs_*.py) derives from
CStruct, whose field assignment checks here, and _lib.proto wraps each
prototype with an integer parameter, so no integer reaches C through the
binding unchecked: one that its C type cannot hold raises IntRangeError (a
ValueError and an OverflowError) naming the field or parameter.
"""

from __future__ import annotations

import ctypes
import operator


class IntRangeError(ValueError, OverflowError):
    """An integer that its C field or argument cannot hold (also negative into
    unsigned): raised before the call, naming it."""

    __module__ = "eplb"


def _limits(ctype):
    bits = 8 * ctypes.sizeof(ctype)
    signed = ctype(-1).value < 0
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    return lo, hi, f"{'' if signed else 'u'}int{bits}_t"


# Keyed by the ctypes class: c_uint32 is c_uint, c_size_t is c_ulong (LP64),
# so each alias finds its range here.
RANGES = {
    t: _limits(t)
    for t in (
        ctypes.c_int8, ctypes.c_uint8, ctypes.c_int16, ctypes.c_uint16, ctypes.c_int32,
        ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint,
        ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong, ctypes.c_size_t,
        ctypes.c_ssize_t,
    )
}


def check(value, ctype, name: str):
    """value unchanged when it is no integer (ctypes then decides) or fits
    ctype; else IntRangeError naming `name`."""
    r = RANGES.get(ctype)
    if r is None or isinstance(value, float):
        return value
    try:
        v = operator.index(value)
    except TypeError:
        return value
    lo, hi, cname = r
    if v < lo or v > hi:
        raise IntRangeError(f"{name}: {v} does not fit {cname} ({lo} to {hi})")
    return value


class CStruct(ctypes.Structure):
    """A ctypes.Structure whose integer fields refuse what they cannot hold
    (constructor keywords and positional values go through here too)."""

    def __setattr__(self, name, value):
        t = type(self)._int_fields().get(name)
        if t is not None:
            check(value, t, f"{type(self).__name__.removesuffix('C')}.{name}")
        super().__setattr__(name, value)

    @classmethod
    def _int_fields(cls):
        f = cls.__dict__.get("_cint_fields")
        if f is None:
            f = {n: t for n, t, *_ in cls._fields_ if t in RANGES}
            cls._cint_fields = f
        return f


def wrap(fn, name: str, argtypes, argnames=None):
    """fn (a foreign function) behind a check of its integer arguments, or fn
    itself when it takes none. argnames: the C parameters' names (else
    "argument N")."""
    names = argnames or [f"argument {i + 1}" for i in range(len(argtypes))]
    ints = [(i, *RANGES[t][:2], t, f"{name}: {names[i]}")
            for i, t in enumerate(argtypes) if t in RANGES]
    if not ints:
        return fn

    def call(*args):
        n = len(args)
        for i, lo, hi, t, label in ints:
            # A plain int in range (nearly every call) costs two comparisons.
            if i < n and not (type(args[i]) is int and lo <= args[i] <= hi):
                check(args[i], t, label)
        return fn(*args)

    call.__name__ = name
    call.__doc__ = f"{name} (integer arguments checked against their C types)"
    call.foreign = fn
    return call
