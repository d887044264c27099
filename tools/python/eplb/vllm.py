"""vLLM plugin: eplb plans vLLM's expert-parallel rebalancing (docs/compat.md).

    pip install tools/python                # installs eplb and its entry point
    EPLB_VLLM_POLICY=1 EPLB_LIBRARY=/path/to/libeplb.so \\
        vllm serve ... --enable-eplb ...

`pip install` registers ``register`` below as the ``vllm.general_plugins``
entry point "eplb". vLLM calls every general plugin in every process it
starts (engine and workers, vllm.plugins.load_general_plugins). When
EPLB_VLLM_POLICY is set, register() puts one eplb policy class into every
entry of vLLM's policy table (vllm.distributed.eplb.policy.EPLB_POLICIES,
whose entry vLLM's EplbState looks up when it adds a model), and under the
key "eplb" for vLLM versions whose --eplb-config accepts it, so whatever
``policy`` vLLM is configured with, eplb plans. Unset (or 0), nothing is
touched.

Settings (environment):

* EPLB_VLLM_POLICY: "1" (or on/true/yes) or "balanced": eplb's planner for
  the even split vLLM serves (never worse than vLLM's default in busiest-GPU
  load on the planned window); "deepseek": vLLM's default arrays, from eplb's
  port of DeepSeek's algorithm. "mip" is refused (a time-limited search:
  ranks could disagree). Unset, "", "0", "off": the plugin does nothing.
* EPLB_VLLM_MOVE_BUDGET (balanced, when vLLM passes the current map
  ``old_global_expert_indices``): the most slots per layer whose expert may
  change in one rebalance (default: the number of EP ranks, one slot per
  rank per layer on average; 0: keep the current map; "unlimited": the best
  fresh plan, experts that stay on a GPU keeping their slot).
* EPLB_VLLM_MOVE_WEIGHT: the price of one moved slot in mean GPU loads
  (default 0.005, the library's incremental default): a move is made only
  when it lowers the busiest GPU by more than that.
* EPLB_PLAN_THREADS: the planner's threads (default: the online cores); the
  map is the same, byte for byte, whatever the count.

The interface is read from the installed classes, not from the user or a
version number: AbstractEplbPolicy.rebalance_experts's return annotation
says whether a policy returns phy2log only (a tensor: vLLM 0.19 to 0.34,
the latest checked) or (phy2log, log2phy, logcnt) (a tuple: vLLM 0.13 to
0.18); without an annotation the default policy is asked once on a
2-expert input. vLLM 0.12 and older have no policy classes (eplb_state
calls rebalance_algo.rebalance_experts): nothing is installed there, see
docs/compat.md for the manual patch. Whether rebalance_experts
is a classmethod and whether the table holds classes or instances is copied
too. An abstract class that declares another abstract method is an
interface this module does not know: nothing is installed. Installing is
one dict.update of the table after everything is built, so a failure leaves
vLLM as it was; register() never raises (vLLM does not catch a plugin's
exceptions): it logs and returns.

Every rank plans the same all-reduced window with the same map, and eplb's
plans are deterministic, so every rank gets the same bytes.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import threading
import typing
from dataclasses import dataclass
from typing import Any, Optional

from . import _arrays as A
from . import _serving as S
from . import compat
from ._lib import Error
from ._plan_arrays import first_out_of_range, int_matrix
from .plan import Plan

__all__ = ["register", "install", "uninstall", "installed", "detect", "rebalance", "Interface",
           "ENV_POLICY", "ENV_MOVE_BUDGET", "ENV_MOVE_WEIGHT", "DEFAULT_MOVE_WEIGHT", "POLICY_KEY"]

ENV_POLICY = "EPLB_VLLM_POLICY"
ENV_MOVE_BUDGET = "EPLB_VLLM_MOVE_BUDGET"
ENV_MOVE_WEIGHT = "EPLB_VLLM_MOVE_WEIGHT"
#: The library's incremental default (include/eplb/plan.h, move_weight).
DEFAULT_MOVE_WEIGHT = 0.005
#: The extra key of vLLM's policy table that names eplb's policy.
POLICY_KEY = "eplb"
POLICY_MODULE = "vllm.distributed.eplb.policy"

# A child of vLLM's "vllm" logger, so vLLM's handler prints it.
logger = logging.getLogger("vllm.eplb_plugin")

_lock = threading.Lock()
_state: Optional[dict] = None  # what install() changed: table, originals, class


# ---- planning -------------------------------------------------------------------


def _rows(a):
    """numpy int64 [L, R] or nested lists -> list of lists of ints."""
    if hasattr(a, "tolist"):  # a numpy array, or a shaped memoryview without numpy
        return [list(map(int, r)) for r in a.tolist()]
    return [list(map(int, r)) for r in a]


def _out(rows):
    np = A.np
    return np.asarray(rows, dtype=np.int64) if np is not None else rows


def _slot_rank_and_counts(rows, E):
    """(rank [L][R] in slot order, logcnt [L][E]) of a phy2log."""
    ranks, cnts = [], []
    for row in rows:
        c = [0] * E
        rk = []
        for e in row:
            rk.append(c[e])
            c[e] += 1
        ranks.append(rk)
        cnts.append(c)
    return ranks, cnts


def _check_old(old, L, E, R, G, N):
    """The current map as lists (ValueError or TypeError, naming what is
    wrong, before anything is planned), with the Plan it makes (checked as
    a plan file: every expert with a replica); (None, None) when its slot
    count differs from num_replicas (vLLM's elastic EP changes it; vLLM's own
    policy then plans afresh too)."""
    name = "old_global_expert_indices"
    rows, L2, R2 = int_matrix(S.host(old), name)
    if L2 != L:
        raise ValueError(f"{name}: shape ({L2}, {R2}): {L2} layers, the weight has {L}")
    if R2 != R:
        logger.info("eplb: the current map has %d slots per layer, this plan %d: planned afresh",
                    R2, R)
        return None, None
    bad = first_out_of_range(rows, E)
    if bad is not None:
        l, r, v = bad
        raise ValueError(f"{name}: layer {l} slot {r}: expert {v} not in [0, {E})")
    try:
        cur = Plan.from_arrays(rows, num_gpus=G, num_nodes=N, num_experts=E)
    except Error as e:  # an expert without a replica (EFORMAT), ...
        raise ValueError(f"{name}: {e.detail or e}") from None
    return _rows(rows), cur


def rebalance(weight, num_replicas: int, num_groups: int, num_nodes: int, num_ranks: int,
              old_global_expert_indices=None, *, policy: str = "balanced", move_budget=None,
              move_weight: Optional[float] = None, threads: Optional[int] = None):
    """The plan eplb's vLLM policy returns: (phy2log [L, R], rank [L, R],
    logcnt [L, E]), int64 numpy arrays (nested lists without numpy); rank
    numbers each expert's replicas (log2phy = compat.log2phy_from(phy2log,
    rank, logcnt)).

    Without old_global_expert_indices: the best fresh plan (compat's
    rebalance_experts with `policy`). With it (the map vLLM serves, [L, R]):
    policy "balanced" re-plans incrementally: per layer the best, for what
    vLLM serves (every replica 1/c of its expert), of keeping the map, eplb's
    incremental policies from it (at most move_budget changed slots: the
    exact-share walk and a descent that changes a slot or swaps two at a
    time, planner/incremental_even.c) and the fresh plan when it changes no
    more than move_budget
    slots, scored as busiest GPU + move_weight x mean GPU load x changed
    slots; experts that stay on a GPU keep their slot (vLLM's
    preserve_intragpu_slots). It never serves worse than keeping the map.
    move_budget: None (the number of ranks), an int >= 0 (0: keep the map)
    or "unlimited" (the fresh plan). policy "deepseek": DeepSeek's plan,
    slots preserved, as vLLM's default policy.

    Every argument is checked before anything is planned, with DeepSeek's
    exceptions (compat.rebalance_experts) and, for the current map,
    ValueError naming it: not 2-D or another layer count, an id outside
    [0, experts) (naming layer and slot), an expert without a replica; a
    non-integer map is a TypeError. A map with another slot count (vLLM's
    elastic EP) is planned afresh."""
    S.check_policy(policy)
    if move_budget is not None and move_budget != "unlimited":
        from ._plan_arrays import _dim

        move_budget = _dim(move_budget, "move_budget")
    mw = DEFAULT_MOVE_WEIGHT if move_weight is None else float(move_weight)
    if not mw >= 0 or mw == float("inf"):
        raise ValueError(f"move_weight: {move_weight!r} must be finite and >= 0")
    host, L, E, R, K, N, G = compat._checked(S.host(weight), num_replicas, num_groups, num_nodes,
                                             num_ranks, policy)
    old, cur = (None, None)
    if old_global_expert_indices is not None:
        old, cur = _check_old(old_global_expert_indices, L, E, R, G, N)
    try:
        budget = G if move_budget is None else move_budget
        if old is None or policy == "deepseek" or budget == "unlimited":
            p2l, rank, cnt = compat._plan_maps(host, L, E, R, K, N, G, policy, threads)
            if old is not None:
                p2l, rank = compat._preserve_slots(p2l, rank, old, G)
            return p2l, rank, cnt
        if budget == 0:  # the library reads 0 as no limit
            rank, cnt = _slot_rank_and_counts(old, E)
            return _out(old), _out(rank), _out(cnt)
        return _incremental(host, L, E, R, K, N, G, cur, budget, mw, threads)
    finally:
        if cur is not None:
            cur.close()


def _incremental(host, L, E, R, K, N, G, cur, budget, mw, threads):
    """The library's incremental policy served by even shares
    (planner/incremental_even.c): per layer the best, as vLLM serves it, of
    keeping the map, the exact-share walk, the fresh even-share plan
    relabelled onto the map and a walk of single changes and swaps, within
    the budget; experts that stay on a GPU keep their slot. Groups are not
    kept on nodes: a move may put an expert on any GPU (vLLM serves any map;
    keeping them would leave most of the walk out)."""
    with Plan.create(host, G, R, policy="incremental", num_nodes=N, num_groups=K,
                     from_plan=cur, move_budget=budget,
                     move_weight=mw, shares="uniform", effort="online", threads=threads) as p:
        rows = _rows(p.phy2log())
    rank, cnt = _slot_rank_and_counts(rows, E)
    return _out(rows), _out(rank), _out(cnt)


# ---- vLLM's interface -----------------------------------------------------------


@dataclass(frozen=True)
class Interface:
    """What the installed vLLM expects of a policy (see detect)."""

    module: Any          # vllm.distributed.eplb.policy
    table: dict          # EPLB_POLICIES
    abstract: type       # AbstractEplbPolicy
    returns: str         # "phy2log" (a tensor) or "maps" (phy2log, log2phy, logcnt)
    is_classmethod: bool  # rebalance_experts is a classmethod
    instances: bool      # the table holds instances (else classes)
    takes_old: bool      # rebalance_experts has old_global_expert_indices


def _returns_from_annotation(ann) -> Optional[str]:
    if ann is inspect.Signature.empty or ann is None:
        return None
    if isinstance(ann, str):
        s = ann.replace(" ", "")
        if s.lower().startswith(("tuple[", "typing.tuple[")):
            return "maps"
        if "Tensor" in s or "ndarray" in s:
            return "phy2log"
        return None
    if typing.get_origin(ann) is tuple or ann is tuple:
        return "maps"
    if isinstance(ann, type) and ann.__name__ in ("Tensor", "ndarray"):
        return "phy2log"
    return None


def _probe(table) -> Optional[str]:
    """Asks vLLM's default policy once, on 1 layer of 2 experts, what it
    returns (only when the annotation does not say)."""
    torch = S.torch_or_none()
    pol = table.get("default") or next(iter(table.values()))
    if torch is None or pol is None:
        return None
    try:
        out = pol.rebalance_experts(torch.tensor([[2, 1]], dtype=torch.int64), 2, 1, 1, 1)
    except Exception as e:  # noqa: BLE001 - an unknown interface
        logger.debug("eplb: probing vLLM's default policy failed: %s", e)
        return None
    return "maps" if isinstance(out, tuple) else "phy2log"


def detect(policy_module=None) -> Interface:
    """vLLM's policy interface, read from the installed classes (module
    vllm.distributed.eplb.policy unless given). ImportError when vLLM (or
    that module) cannot be imported; RuntimeError for an interface this
    module does not implement."""
    pol = policy_module if policy_module is not None else importlib.import_module(POLICY_MODULE)
    table = getattr(pol, "EPLB_POLICIES", None)
    abstract = getattr(pol, "AbstractEplbPolicy", None)
    if not isinstance(table, dict) or not table:
        raise RuntimeError(f"{POLICY_MODULE} has no EPLB_POLICIES table: a vLLM without policy "
                           "classes (0.12 or older; see docs/compat.md)")
    if not isinstance(abstract, type):
        raise RuntimeError(f"{POLICY_MODULE} has no AbstractEplbPolicy class")
    extra = set(getattr(abstract, "__abstractmethods__", ())) - {"rebalance_experts"}
    if extra:
        raise RuntimeError(f"AbstractEplbPolicy declares {', '.join(sorted(extra))}: an interface "
                           "this eplb does not implement")
    static = inspect.getattr_static(abstract, "rebalance_experts", None)
    if static is None:
        raise RuntimeError("AbstractEplbPolicy has no rebalance_experts")
    is_cm = isinstance(static, classmethod)
    try:
        sig = inspect.signature(abstract.rebalance_experts)
    except (TypeError, ValueError) as e:
        raise RuntimeError(f"AbstractEplbPolicy.rebalance_experts: no signature ({e})") from None
    names = [p for p in sig.parameters if p not in ("self", "cls")]
    want = ["weight", "num_replicas", "num_groups", "num_nodes", "num_ranks"]
    if names[:5] != want and names[:5] != want[:4] + ["num_gpus"]:
        raise RuntimeError(f"AbstractEplbPolicy.rebalance_experts{sig}: not the parameters "
                           f"({', '.join(want)}, ...) this eplb implements")
    returns = _returns_from_annotation(sig.return_annotation) or _probe(table)
    if returns is None:
        raise RuntimeError("cannot tell whether vLLM's policies return phy2log or "
                           "(phy2log, log2phy, logcnt): no return annotation, no probe")
    instances = not all(isinstance(v, type) for v in table.values())
    return Interface(pol, table, abstract, returns, is_cm, instances,
                     "old_global_expert_indices" in sig.parameters)


@dataclass(frozen=True)
class _Config:
    policy: str
    move_budget: Any
    move_weight: Optional[float]
    threads: Optional[int]
    returns: str
    fallback: Any       # vLLM's policy this one replaced (used on a library error)
    fallback_old: bool  # the fallback takes old_global_expert_indices


def _call(cfg: _Config, weight, num_replicas, num_groups, num_nodes, num_ranks, old=None):
    want_tensor = S.torch_or_none() is not None  # vLLM's policies return CPU tensors
    try:
        p2l, rank, cnt = rebalance(weight, num_replicas, num_groups, num_nodes, num_ranks, old,
                                   policy=cfg.policy, move_budget=cfg.move_budget,
                                   move_weight=cfg.move_weight, threads=cfg.threads)
    except Error as e:  # a library limit, not bad input: vLLM's own policy plans
        if cfg.fallback is None:
            raise
        logger.warning("eplb: %s: vLLM's policy plans this rebalance", e)
        args = (weight, num_replicas, num_groups, num_nodes, num_ranks)
        return cfg.fallback.rebalance_experts(*args, old) if cfg.fallback_old else \
            cfg.fallback.rebalance_experts(*args)
    if cfg.returns == "phy2log":
        return S.as_tensor(p2l, want_tensor)
    l2p = compat.log2phy_from(p2l, rank, cnt)
    return tuple(S.as_tensor(x, want_tensor) for x in (p2l, l2p, cnt))


def _make_class(iface: Interface, cfg: _Config):
    def rebalance_experts(_owner, weight, num_replicas, num_groups, num_nodes, num_ranks,
                          old_global_expert_indices=None):
        return _call(cfg, weight, num_replicas, num_groups, num_nodes, num_ranks,
                     old_global_expert_indices)

    rebalance_experts.__doc__ = (
        f"eplb's {cfg.policy} plan (eplb.vllm.rebalance), returning "
        + ("phy2log [layers, replicas]" if cfg.returns == "phy2log"
           else "(phy2log, log2phy, logcnt)") + " as CPU int64 tensors.")
    ns = {
        "__module__": __name__,
        "__doc__": f"eplb's {cfg.policy} policy for vLLM (installed by eplb.vllm).",
        "rebalance_experts": classmethod(rebalance_experts) if iface.is_classmethod
        else rebalance_experts,
        "eplb_policy": cfg.policy,
        "eplb_config": cfg,
    }
    cls = type("EplbVllmPolicy", (iface.abstract,), ns)
    if getattr(cls, "__abstractmethods__", None):
        raise RuntimeError(f"AbstractEplbPolicy still abstract: {sorted(cls.__abstractmethods__)}")
    return cls


def install(policy: str = "balanced", *, move_budget=None, move_weight: Optional[float] = None,
            threads: Optional[int] = None, policy_module=None):
    """Puts eplb's policy into every entry of vLLM's EPLB_POLICIES (and under
    POLICY_KEY); returns the class. A second install replaces the first.
    Raises (changing nothing) ValueError for a bad setting, ImportError when
    vLLM cannot be imported, RuntimeError for an interface this module does
    not implement."""
    global _state
    S.check_policy(policy)
    if move_budget is not None and move_budget != "unlimited":
        from ._plan_arrays import _dim

        move_budget = _dim(move_budget, "move_budget")
    if move_weight is not None and (not float(move_weight) >= 0 or float(move_weight) == float("inf")):
        raise ValueError(f"move_weight: {move_weight!r} must be finite and >= 0")
    iface = detect(policy_module)
    with _lock:
        # Installed before: vLLM's own policies are the ones kept then.
        prev = _state if _state is not None and _state["table"] is iface.table else None
        originals = dict(prev["originals"]) if prev else dict(iface.table)
        fallback = originals.get("default") or next(iter(originals.values()))
        fb_old = False
        try:
            fb_old = "old_global_expert_indices" in inspect.signature(fallback.rebalance_experts).parameters
        except (TypeError, ValueError, AttributeError):
            pass
        cfg = _Config(policy, move_budget, move_weight, threads, iface.returns, fallback, fb_old)
        cls = _make_class(iface, cfg)
        value = cls() if iface.instances else cls
        new = {k: value for k in originals}
        new[POLICY_KEY] = value
        iface.table.update(new)  # the one change: every entry at once
        _state = {"table": iface.table, "originals": originals, "class": cls}
    logger.info("eplb: vLLM's EPLB policies %s now plan with eplb's %s policy (returns %s%s)",
                sorted(originals), policy, iface.returns,
                "" if policy != "balanced" else
                f", move budget {'the EP ranks' if move_budget is None else move_budget} slots/layer")
    return cls


def uninstall() -> bool:
    """Puts vLLM's policies back; False when nothing was installed."""
    global _state
    with _lock:
        if _state is None:
            return False
        table, originals = _state["table"], _state["originals"]
        table.update(originals)
        if POLICY_KEY not in originals:
            table.pop(POLICY_KEY, None)
        _state = None
    return True


def installed():
    """The installed class, or None."""
    return _state["class"] if _state is not None else None


def register():
    """The vllm.general_plugins entry point: installs eplb's policy when
    EPLB_VLLM_POLICY asks for it; never raises (vLLM calls it unguarded in
    every process): a bad setting, a vLLM that cannot be imported or an
    interface this module does not implement is logged and nothing is
    changed."""
    try:
        policy = S.policy_setting(os.environ.get(ENV_POLICY), ENV_POLICY)
        if policy is None:
            logger.debug("eplb: %s is not set: vLLM's EPLB policies unchanged", ENV_POLICY)
            return None
        budget = S.env_int(ENV_MOVE_BUDGET, None, 0, words=("unlimited",))
        weight = S.env_float(ENV_MOVE_WEIGHT, None)
        threads = S.plan_threads()
        return install(policy, move_budget=budget, move_weight=weight, threads=threads)
    except ImportError as e:
        logger.warning("eplb: vLLM's EPLB policies cannot be imported (%s): nothing installed "
                       "(vLLM 0.12 and older have none: docs/compat.md)", e)
    except Exception as e:  # noqa: BLE001 - a plugin must not stop vLLM
        logger.error("eplb: eplb's policy not installed, vLLM's stays: %s: %s",
                     type(e).__name__, e)
    return None
