"""Placement plans: policies, planning, metrics, plan files and exports
(eplb/plan.h)."""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass
from typing import Optional, Sequence

from . import _arrays as A
from ._lib import (
    GpuDescC,
    Handle,
    ModelDescC,
    PlanLayerMetricsC,
    PlanOptionsC,
    PlanSummaryC,
    cstr,
    lib,
    status_name,
)
from .trace import loads_struct


def _names(fn):
    out, i = [], 0
    while True:
        s = fn(i)
        if not s:
            return tuple(out)
        out.append(s.decode())
        i += 1


#: Every policy the library knows, in enum order ("deepseek", "balanced", "mip", ...).
POLICIES = _names(lib.eplb_plan_policy_str)
#: Every shares mode ("exact", "uniform", "robust"), in enum order.
SHARES = _names(lib.eplb_plan_shares_str)
#: Every search effort ("full", "online"), in enum order.
EFFORTS = _names(lib.eplb_plan_effort_str)
#: Every export format ("deepseek-csv", "sglang", "trtllm", ...).
EXPORT_FORMATS = _names(lib.eplb_plan_export_format_str)


def _code(parse, value) -> int:
    """An enum's value from its name through the library's parser (an int passes)."""
    if isinstance(value, int):
        return value
    v = ctypes.c_int()
    parse(cstr(value), ctypes.byref(v))
    return v.value


def policy_code(policy) -> int:
    return _code(lib.eplb_plan_policy_parse, policy)


def shares_code(shares) -> int:
    return _code(lib.eplb_plan_shares_parse, shares)


def effort_code(effort) -> int:
    return _code(lib.eplb_plan_effort_parse, effort)


def policy_name(code: int) -> str:
    s = lib.eplb_plan_policy_str(code)
    return s.decode() if s else str(code)


@dataclass
class LayerMetrics:
    total_load: float
    mean_load: float
    max_load: float
    lower_bound: float
    balancedness: float
    mip_gap: float
    mip_status: str
    fallback: bool
    slots_moved: int


@dataclass
class PlanSummary:
    policy: str
    seconds: float
    mean_balancedness: float
    min_balancedness: float
    mean_ratio: float
    max_ratio: float
    fallback_layers: int
    slots_moved: int


def plan_options(
    num_gpus: int,
    num_replicas: int,
    *,
    policy="balanced",
    num_nodes: int = 1,
    num_groups: int = 1,
    slots_per_gpu: Optional[Sequence[int]] = None,
    keep_groups_on_nodes: bool = False,
    time_limit: Optional[float] = None,
    improve_iterations: Optional[int] = None,
    from_plan: Optional["Plan"] = None,
    move_budget: Optional[int] = None,
    move_weight: Optional[float] = None,
    cluster=None,
    coact: Optional["Coactivation"] = None,
    locality_tolerance: Optional[float] = None,
    shares=None,
    shares_trace=None,
    shares_step_begin: Optional[int] = None,
    shares_step_end: Optional[int] = None,
    robust_steps: Optional[int] = None,
    robust_aggregate_weight: Optional[float] = None,
    threads: Optional[int] = None,
    model: Optional[str] = None,
    gpu: Optional[str] = None,
    decode_steps: Optional[float] = None,
    effort=None,
):
    """(PlanOptionsC, keep-alive) from keyword options (eplb_plan_options_t).
    from_plan: the current plan (incremental); cluster (a Cluster) and coact
    (eplb.Coactivation) for locality. shares: "exact" (default: the policy's
    own), "uniform" (1/c per replica: what DeepSeek, vLLM and SGLang serve;
    balanced then plans for it) or "robust" (needs shares_trace, an
    eplb.Trace of per-step loads; robust_steps, robust_aggregate_weight and
    the step range tune it). model and gpu (preset names or files, eplb/model.h)
    and decode_steps (steps the loads sum) for the decode policy."""
    o = PlanOptionsC()
    lib.eplb_plan_options_default(ctypes.byref(o))
    o.policy = policy_code(policy)
    o.num_gpus, o.num_replicas = num_gpus, num_replicas
    o.num_nodes, o.num_groups = num_nodes, num_groups
    o.keep_groups_on_nodes = int(bool(keep_groups_on_nodes))
    # Options left None keep the library's defaults (threads 0 = online cores).
    for field, value in (
        ("time_limit", time_limit),
        ("improve_iterations", improve_iterations),
        ("move_budget", move_budget),
        ("move_weight", move_weight),
        ("locality_tolerance", locality_tolerance),
        ("threads", threads),
        ("shares_step_begin", shares_step_begin),
        ("shares_step_end", shares_step_end),
        ("robust_steps", robust_steps),
        ("robust_aggregate_weight", robust_aggregate_weight),
    ):
        if value is not None:
            setattr(o, field, value)
    if shares is not None:
        o.shares = shares_code(shares)
    if effort is not None:  # "full" (default) or "online" (eplb.compat's)
        o.effort = effort_code(effort)
    o.shares_trace = shares_trace._p if shares_trace is not None else None
    keep = [from_plan, cluster, coact, shares_trace]
    o.from_ = from_plan._p if from_plan is not None else None
    o.cluster = cluster._p if cluster is not None else None
    o.coact = coact._p if coact is not None else None
    # decode: the deployment, a preset name or a file (eplb/model.h); the GPU defaults to h800.
    if model is not None or gpu is not None:
        m, g = ModelDescC(), GpuDescC()
        lib.eplb_model_load(cstr(model if model is not None else "deepseek-v3"), ctypes.byref(m))
        lib.eplb_gpu_load(cstr(gpu if gpu is not None else "h800"), ctypes.byref(g))
        o.model, o.gpu = ctypes.addressof(m), ctypes.addressof(g)
        keep += [m, g]
    if decode_steps is not None:
        o.decode_steps = decode_steps
    if slots_per_gpu is not None:
        spg = A.carray(slots_per_gpu, "u4", "slots_per_gpu", (num_gpus,))
        o.slots_per_gpu = spg.ptr
        keep.append(spg)
    return o, keep


class Plan(Handle):
    """A placement plan (eplb_plan_t). Make one with Plan.create(loads, ...)
    (or eplb.plan(...)), Plan.read(path), or Runtime.plan()."""

    _kind = "plan"

    def __init__(self, _handle):
        if not _handle:
            raise ValueError("Plan: use Plan.create(), Plan.read() or Runtime.plan()")
        self._own(_handle, lib.eplb_plan_destroy)

    @classmethod
    def create(cls, loads, num_gpus: int, num_replicas: int, **options) -> "Plan":
        """Plans every layer of loads [L, E]: float64 is read without a copy;
        other integer or float dtypes (int64 counts, float32 averages) are
        converted to float64 once. Options: policy (a name of POLICIES),
        num_nodes, num_groups, slots_per_gpu, keep_groups_on_nodes,
        time_limit, improve_iterations, shares (a name of SHARES), ... (see
        plan_options). The GIL is released while the library plans."""
        ls, keep_l = loads_struct(loads)
        o, keep_o = plan_options(num_gpus, num_replicas, **options)
        h = ctypes.c_void_p()
        lib.eplb_plan_create(ctypes.byref(ls), ctypes.byref(o), ctypes.byref(h))
        del keep_l, keep_o
        return cls(h.value)

    @classmethod
    def from_arrays(cls, phy2log, shares=None, *, num_gpus: int, num_nodes: int = 1,
                    slots_per_gpu: Optional[Sequence[int]] = None,
                    num_experts: Optional[int] = None, policy="deepseek") -> "Plan":
        """A plan from a serving stack's arrays (eplb_plan_from_arrays), e.g.
        vLLM's physical_to_logical_map or SGLang's physical_to_logical_map,
        so that a policy (incremental: from_plan=) can start from the map a
        stack serves now.

        phy2log: [layers, slots] expert ids, slots GPU-major (any integer
        dtype: a tensor on any device, a numpy array, nested lists).
        shares: [layers, slots] float (None: 1/c over an expert's c
        replicas, what vLLM and SGLang serve). num_experts: the logical
        experts (default: the largest id + 1; give it, or a trailing expert
        without a replica goes unnoticed). slots_per_gpu: [num_gpus] (None:
        slots / num_gpus each). policy: recorded in the plan.

        Checked as a plan file is: eplb.Error EPLB_ERANGE for an id outside
        [0, num_experts) (the detail names layer and slot), EPLB_EFORMAT for
        an expert without a replica or a bad share, EPLB_ESHAPE for counts
        that do not add up (0 GPUs, GPUs not a multiple of nodes, slots that
        do not split over the GPUs); TypeError for a non-integer phy2log,
        ValueError for one that is not 2-D, eplb.IntRangeError for a count
        that uint32_t cannot hold. Metrics are zero until evaluate()."""
        from ._plan_arrays import plan_arrays_handle

        return cls(plan_arrays_handle(phy2log, shares, num_gpus=num_gpus, num_nodes=num_nodes,
                                      slots_per_gpu=slots_per_gpu, num_experts=num_experts,
                                      policy=policy))

    @classmethod
    def read(cls, path) -> "Plan":
        """Reads a plan file (metrics stay zero until evaluate())."""
        h = ctypes.c_void_p()
        lib.eplb_plan_read(cstr(path), ctypes.byref(h))
        return cls(h.value)

    def write(self, path):
        lib.eplb_plan_write(self._p, cstr(path))

    def export(self, format: str, directory):
        """Writes the export files of `format` (one of EXPORT_FORMATS) into an
        existing directory."""
        f = ctypes.c_int()
        lib.eplb_plan_export_format_parse(cstr(format), ctypes.byref(f))
        lib.eplb_plan_export(self._p, f.value, cstr(directory))

    def evaluate(self, loads):
        """Recomputes GPU loads and metrics for loads [L, E]."""
        ls, keep = loads_struct(loads)
        lib.eplb_plan_evaluate(self._p, ctypes.byref(ls))
        del keep

    def set_shares(self, layer: int, share):
        """Replaces a layer's shares with share [R] float64 (e.g. a split
        solver's result); metrics are zero until the next evaluate()."""
        s = A.carray(share, "f8", "share", (self.num_slots,))
        lib.eplb_plan_set_shares(self._p, self._layer(layer), s.ptr)

    # ---- shape ----
    @property
    def num_layers(self) -> int:
        return lib.eplb_plan_num_layers(self._p)

    @property
    def num_experts(self) -> int:
        return lib.eplb_plan_num_experts(self._p)

    @property
    def num_gpus(self) -> int:
        return lib.eplb_plan_num_gpus(self._p)

    @property
    def num_nodes(self) -> int:
        return lib.eplb_plan_num_nodes(self._p)

    @property
    def num_slots(self) -> int:
        return lib.eplb_plan_num_slots(self._p)

    @property
    def policy(self) -> str:
        return policy_name(lib.eplb_plan_policy(self._p))

    @property
    def slots_per_gpu(self):
        return A.copy_from(lib.eplb_plan_slots_per_gpu(self._p), "u4", (self.num_gpus,))

    def _layer(self, layer: int) -> int:
        L = self.num_layers
        if not isinstance(layer, int) or not -L <= layer < L:
            raise IndexError(f"layer {layer!r} out of range (plan has {L} layers)")
        return layer % L

    def _per_layer(self, fn, code, width, layer):
        if layer is not None:
            return A.copy_from(fn(self._p, self._layer(layer)), code, (width,))
        L, h = self.num_layers, self._p
        out, addr = A.empty(code, (L, width))
        size = width * ctypes.sizeof(A.DTYPES[code][1])
        fn = getattr(fn, "foreign", fn)  # 0 <= l < L: nothing for the wrapper to check
        for l in range(L):
            ctypes.memmove(addr + l * size, fn(h, l), size)
        return out

    # ---- per-layer arrays (copies) ----
    def phy2log(self, layer: Optional[int] = None):
        """Expert of each slot: [R] int32 for a layer, [L, R] for all."""
        return self._per_layer(lib.eplb_plan_phy2log, "i4", self.num_slots, layer)

    def share(self, layer: Optional[int] = None):
        """Share of its expert's tokens of each slot: [R] (or [L, R]) float64."""
        return self._per_layer(lib.eplb_plan_share, "f8", self.num_slots, layer)

    def gpu_load(self, layer: Optional[int] = None):
        """Load of each GPU: [G] (or [L, G]) float64."""
        return self._per_layer(lib.eplb_plan_gpu_load, "f8", self.num_gpus, layer)

    def _filled(self, fn, width, layer):
        """fn(plan, layer, out[width]) for one layer, or for every layer into [L, width]."""
        if layer is not None:
            out, addr = A.empty("u4", (width,))
            fn(self._p, self._layer(layer), addr)
            return out
        L, h = self.num_layers, self._p
        out, addr = A.empty("u4", (L, width))
        fn = getattr(fn, "foreign", fn)  # 0 <= l < L (its errcheck still raises eplb.Error)
        for l in range(L):
            fn(h, l, addr + l * width * 4)
        return out

    def logcnt(self, layer: Optional[int] = None):
        """Replica count of each expert: [E] (or [L, E]) uint32."""
        return self._filled(lib.eplb_plan_logcnt, self.num_experts, layer)

    def replica_rank(self, layer: Optional[int] = None):
        """Which copy of its expert each slot is: [R] (or [L, R]) uint32, an
        expert's replicas numbered 0..logcnt-1, so log2phy[e, rank[r]] = r for
        e = phy2log[r]. deepseek plans number them as DeepSeek's EPLB does
        (its phyrank); other plans in slot order."""
        if getattr(lib, "eplb_plan_replica_rank", None) is None:
            raise NotImplementedError("this libeplb has no eplb_plan_replica_rank")
        return self._filled(lib.eplb_plan_replica_rank, self.num_slots, layer)

    def layer_metrics(self, layer: int) -> LayerMetrics:
        m = PlanLayerMetricsC()
        lib.eplb_plan_layer_metrics(self._p, self._layer(layer), ctypes.byref(m))
        return LayerMetrics(
            m.total_load,
            m.mean_load,
            m.max_load,
            m.lower_bound,
            m.balancedness,
            m.mip_gap,
            status_name(m.mip_status),
            bool(m.fallback),
            m.slots_moved,
        )

    def summary_json(self) -> dict:
        """eplb_plan_summary_json: the summary object of the plan file and of
        `eplb plan --json` (policy, seconds, layers, balancedness, ...)."""
        n = ctypes.c_size_t()
        lib.eplb_plan_summary_json(self._p, None, 0, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value + 1)
        lib.eplb_plan_summary_json(self._p, buf, n.value + 1, None)
        return json.loads(buf.value.decode())

    def summary(self) -> PlanSummary:
        s = PlanSummaryC()
        lib.eplb_plan_summary(self._p, ctypes.byref(s))
        return PlanSummary(
            policy_name(s.policy),
            s.seconds,
            s.mean_balancedness,
            s.min_balancedness,
            s.mean_ratio,
            s.max_ratio,
            s.fallback_layers,
            s.slots_moved,
        )

    def __repr__(self):
        if self.closed:
            return "<eplb.Plan closed>"
        return (
            f"<eplb.Plan {self.policy} L={self.num_layers} E={self.num_experts} "
            f"G={self.num_gpus} N={self.num_nodes} R={self.num_slots}>"
        )


def plan(loads, num_gpus: int, num_replicas: int, **options) -> Plan:
    """Shorthand for Plan.create."""
    return Plan.create(loads, num_gpus, num_replicas, **options)


class Coactivation(Handle):
    """Co-activation statistics of a trace's top-k rows over a cluster's
    nodes (eplb_coact_t), for the locality policy."""

    _kind = "coactivation"

    def __init__(self, trace, cluster, begin: int = 0, end: Optional[int] = None):
        if not hasattr(lib, "eplb_coact_from_trace"):
            raise NotImplementedError("this libeplb has no eplb_coact_from_trace")
        h = ctypes.c_void_p()
        lib.eplb_coact_from_trace(trace._p, begin, 2**64 - 1 if end is None else end, cluster._p,
                                  ctypes.byref(h))
        self._own(h.value, lib.eplb_coact_destroy)
