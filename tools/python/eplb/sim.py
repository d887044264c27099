"""The decode-step simulator and its cost model (eplb/sim.h)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable, Optional

from . import _arrays as A
from ._lib import (
    COST_MAX_POINTS,
    CostModelC,
    SimOptionsC,
    SimStepC,
    SimStepFn,
    SimSummaryC,
    cstr,
    lib,
    struct_dict,
)
from .cluster import Cluster
from .plan import Plan, plan_options
from .trace import U64_MAX, Trace


class CostModel:
    """The simulator's cost model (eplb_cost_model_t). CostModel() gives the
    defaults, CostModel.read(path) a cost file; fields are attributes:
    expert_time_us [(tokens, µs), ...], dispatch_bytes_per_copy,
    combine_bytes_per_copy, bytes_per_expert, intra_node_gbps,
    inter_node_gbps."""

    _SCALARS = (
        "dispatch_bytes_per_copy",
        "combine_bytes_per_copy",
        "bytes_per_expert",
        "intra_node_gbps",
        "inter_node_gbps",
    )

    def __init__(self, **fields):
        c = CostModelC()
        lib.eplb_cost_model_default(ctypes.byref(c))
        self._load(c)
        for k, v in fields.items():
            if k != "expert_time_us" and k not in self._SCALARS:
                raise TypeError(f"CostModel: unknown field {k!r}")
            setattr(self, k, v)

    def _load(self, c):
        self.expert_time_us = [(c.tokens[i], c.time_us[i]) for i in range(c.num_points)]
        for k in self._SCALARS:
            setattr(self, k, getattr(c, k))

    @classmethod
    def read(cls, path) -> "CostModel":
        c = CostModelC()
        lib.eplb_cost_model_default(ctypes.byref(c))  # the read fills struct_size bytes
        lib.eplb_cost_model_read(cstr(path), ctypes.byref(c))
        m = cls()
        m._load(c)
        return m

    def _c(self) -> CostModelC:
        c = CostModelC()
        lib.eplb_cost_model_default(ctypes.byref(c))
        pts = list(self.expert_time_us)
        if not 1 <= len(pts) <= COST_MAX_POINTS:
            raise ValueError(f"expert_time_us: 1..{COST_MAX_POINTS} points, got {len(pts)}")
        c.num_points = len(pts)
        for i, (t, us) in enumerate(pts):
            c.tokens[i], c.time_us[i] = t, us
        for k in self._SCALARS:
            setattr(c, k, getattr(self, k))
        lib.eplb_cost_model_check(ctypes.byref(c))
        return c

    def expert_time(self, tokens: float) -> float:
        """t(tokens) in µs."""
        c = self._c()
        return lib.eplb_cost_model_expert_time(ctypes.byref(c), tokens)

    def __repr__(self):
        return f"CostModel({self.expert_time_us!r}, " + ", ".join(
            f"{k}={getattr(self, k)!r}" for k in self._SCALARS
        ) + ")"


@dataclass
class SimSummary:
    num_steps: int
    mean_balancedness: float
    p5_balancedness: float
    min_balancedness: float
    mean_plan_balancedness: float
    cross_node_copies: float
    dedup_copies: float
    cross_node_bytes: float
    dedup_bytes: float
    mean_step_time_us: float
    total_step_time_us: float
    migrated_bytes: float
    migration_us: float
    num_plans: int
    used_rows_steps: int
    p99_step_time_us: float = 0.0
    mean_max_active: float = 0.0
    bound_step_time_us: float = 0.0
    migration_exposed_us: float = 0.0


def simulate(
    trace,
    cluster,
    plan: Optional[Plan] = None,
    *,
    cost: Optional[CostModel] = None,
    step_begin: int = 0,
    step_end: Optional[int] = None,
    split_per_batch: bool = False,
    rebalance_every: int = 0,
    window: int = 0,
    on_step: Optional[Callable[[dict], None]] = None,
    continuous: int = 0,
    continuous_lag: int = 0,
    **plan_opts,
) -> SimSummary:
    """Replays a trace (Trace or path) on a cluster (Cluster or spec such as
    "4x8") with a fixed plan, or, when plan is None, with plans made by a
    policy: pass plan options (policy, num_replicas, num_groups,
    keep_groups_on_nodes, ...) and rebalance_every/window.
    on_step(dict) is called after every step (arrays copied); an exception it
    raises is re-raised when the run ends. The GIL is released while the
    library replays, except inside on_step. continuous=W (with
    split_per_batch) moves a few slots after every step towards the last W
    steps, as the runtime's continuous re-placement does (eplb/sim.h)."""
    own = []
    try:
        if not isinstance(trace, Trace):
            trace = Trace(trace)
            own.append(trace)
        if not isinstance(cluster, Cluster):
            cluster = Cluster(cluster)
            own.append(cluster)
        o = SimOptionsC()
        lib.eplb_sim_options_default(ctypes.byref(o))
        cc = cost._c() if cost is not None else None
        if cc is not None:
            o.cost = ctypes.pointer(cc)
        o.step_begin = step_begin
        o.step_end = U64_MAX if step_end is None else step_end
        o.split_per_batch = int(bool(split_per_batch))
        o.rebalance_every, o.window = rebalance_every, window
        o.continuous_window, o.continuous_lag = continuous, continuous_lag
        keep = None
        if plan is None:
            if "num_replicas" not in plan_opts:
                raise ValueError("simulate: without a plan, num_replicas (and a policy) are needed")
            num_replicas = plan_opts.pop("num_replicas")
            po, keep = plan_options(cluster.num_gpus, num_replicas, **plan_opts)
            o.plan = po
        elif plan_opts:
            raise TypeError(f"simulate: plan options {sorted(plan_opts)} need plan=None")
        errors = []
        cb = None
        if on_step is not None:

            def _cb(p, _user):
                try:
                    s = p.contents
                    d = struct_dict(s)
                    d["gpu_tokens"] = A.copy_from(s.gpu_tokens, "f8", (s.num_gpus,))
                    d["gpu_active"] = A.copy_from(s.gpu_active, "f8", (s.num_gpus,))
                    d["used_rows"] = bool(s.used_rows)
                    on_step(d)
                except BaseException as e:  # cannot unwind through C
                    if not errors:
                        errors.append(e)

            cb = SimStepFn(_cb)
            o.on_step = cb
        out = SimSummaryC()
        lib.eplb_sim_run(
            trace._p, cluster._p, plan._p if plan is not None else None, ctypes.byref(o), ctypes.byref(out)
        )
        del keep, cb
        if errors:
            raise errors[0]
        return SimSummary(**struct_dict(out))
    finally:
        for h in own:
            h.close()
