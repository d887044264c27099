"""The exact token-split solver over a fixed placement (eplb/split.h)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Optional

from . import _arrays as A
from ._lib import Handle, SplitOptionsC, SplitProblemC, SplitResultC, lib

MODES = ("fractional", "integer")
GRAPHS = ("ring", "cube", "hypercube")


@dataclass
class SplitResult:
    share: object  # [R] float64
    gpu_load: object  # [G] float64
    t_star: float
    max_load: float
    iterations: int
    num_bottleneck_experts: int
    num_bottleneck_gpus: int
    amount: Optional[object] = None  # [R] float64
    bottleneck_experts: Optional[object] = None  # [E] uint8
    bottleneck_gpus: Optional[object] = None  # [G] uint8


class SplitSolver(Handle):
    """A split solver (eplb_split_t) with its workspace and warm-start state.

    solve(loads [E], phy2log [R], slots_per_gpu [G]) finds the shares that
    minimise the busiest GPU's load. phy2log may be uint32 or int32 (a plan's
    phy2log); arrays are read in place."""

    _kind = "split solver"

    def __init__(self, mode: str = "fractional", warm_start: bool = True, glpk_time_limit: float = 0.0):
        o = SplitOptionsC()
        lib.eplb_split_options_default(ctypes.byref(o))
        if mode not in MODES:
            raise ValueError(f"mode: unknown value {mode!r} (one of {', '.join(MODES)})")
        o.mode = MODES.index(mode)
        o.warm_start = int(bool(warm_start))
        o.glpk_time_limit_s = glpk_time_limit
        h = ctypes.c_void_p()
        lib.eplb_split_create(ctypes.byref(o), ctypes.byref(h))
        self._own(h.value, lib.eplb_split_destroy)

    def reset(self):
        """Forgets the warm-start state."""
        lib.eplb_split_reset(self._p)

    def solve(
        self,
        loads,
        phy2log,
        slots_per_gpu,
        *,
        num_experts: Optional[int] = None,
        method: str = "exact",
        amounts: bool = False,
        bottleneck: bool = False,
        share_out=None,
        gpu_load_out=None,
    ) -> SplitResult:
        """Solves one layer. method "exact" (max-flow) or "glpk" (reference LP).
        share_out [R] / gpu_load_out [G] float64 may be given to reuse arrays."""
        ld = A.carray(loads, "f8", "loads", (None,))
        E = ld.shape[0] if num_experts is None else num_experts
        if ld.shape[0] != E:
            raise ValueError(f"loads: expected shape ({E},) of float64, got {ld.shape}")
        p2l = A.carray(phy2log, "u4", "phy2log", (None,), also=("i4",))
        spg = A.carray(slots_per_gpu, "u4", "slots_per_gpu", (None,), also=("i4",))
        R, G = p2l.shape[0], spg.shape[0]
        prob = SplitProblemC(E, G, R, p2l.ptr, spg.ptr)
        res = SplitResultC()
        if share_out is None:
            share, res.share = A.empty("f8", (R,))
        else:
            share, res.share = share_out, A.carray(share_out, "f8", "share_out", (R,), writable=True).ptr
        if gpu_load_out is None:
            gl, res.gpu_load = A.empty("f8", (G,))
        else:
            gl = gpu_load_out
            res.gpu_load = A.carray(gpu_load_out, "f8", "gpu_load_out", (G,), writable=True).ptr
        amount = be = bg = None
        if amounts:
            amount, res.amount = A.empty("f8", (R,))
        if bottleneck:
            be, res.bottleneck_experts = A.empty("u1", (E,))
            bg, res.bottleneck_gpus = A.empty("u1", (G,))
        if method == "exact":
            lib.eplb_split_solve(self._p, ctypes.byref(prob), ld.ptr, ctypes.byref(res))
        elif method == "glpk":
            lib.eplb_split_solve_glpk(self._p, ctypes.byref(prob), ld.ptr, ctypes.byref(res))
        else:
            raise ValueError(f"method: unknown value {method!r} (exact, glpk)")
        return SplitResult(
            share,
            gl,
            res.t_star,
            res.max_load,
            res.iterations,
            res.num_bottleneck_experts,
            res.num_bottleneck_gpus,
            amount,
            be,
            bg,
        )


def split_graph_place(kind: str, group_size: int, num_gpus: int, experts_per_gpu: int, redundant_per_gpu: int):
    """An LPLB-like placement: returns (phy2log [G*(S)] uint32, slots_per_gpu [G] uint32)."""
    if kind not in GRAPHS:
        raise ValueError(f"kind: unknown value {kind!r} (one of {', '.join(GRAPHS)})")
    p2l, pa = A.empty("u4", (num_gpus * (experts_per_gpu + redundant_per_gpu),))
    spg, sa = A.empty("u4", (num_gpus,))
    lib.eplb_split_graph_place(
        GRAPHS.index(kind), group_size, num_gpus, experts_per_gpu, redundant_per_gpu, pa, sa
    )
    return p2l, spg
