"""SGLang plugin: eplb plans SGLang's EPLB rebalancing (docs/compat.md).

    import eplb.sglang; eplb.sglang.install()        # or, installed with pip:
    EPLB_SGLANG_POLICY=1 python -m sglang.launch_server ... --enable-eplb ...

install() replaces the module attribute
sglang.srt.eplb.eplb_algorithms.rebalance_experts, which SGLang's
ExpertLocationMetadata.init_by_eplb calls (as
``eplb_algorithms.rebalance_experts(...)``, by attribute, on every rank) for
--enable-eplb rebalancing and for --init-expert-location with a
logical_count file. `pip install tools/python` also registers ``register``
as the ``sglang.srt.plugins`` entry point "eplb" (SGLang versions with
sglang.srt.plugins.load_plugins, called in each of its processes), which
installs when EPLB_SGLANG_POLICY is set:

* EPLB_SGLANG_POLICY: "1" (on/true/yes) or "balanced": eplb's planner for the
  even split SGLang serves; "deepseek": SGLang's deepseek arrays from eplb's
  port. "mip" is refused (time-limited: ranks could disagree). Unset or 0:
  nothing is changed.
* EPLB_PLAN_THREADS: the planner's threads (default: the online cores; the
  map is the same whatever the count).

The replacement takes SGLang's arguments (tokens_per_expert [steps, layers,
experts] on any device: a CUDA tensor is copied to the host and summed over
the steps; num_physical_experts, num_local_physical_experts, num_groups,
num_nodes, algorithm) and returns SGLang's (physical_to_logical_map,
logical_to_all_physical_map, expert_count) as CPU int64 tensors, as SGLang's
deepseek algorithm does. What eplb does not implement goes to the original
function, unchanged and without an error: an algorithm other than
deepseek, deepseek_hierarchical, deepseek_vec, deepseek_vec_hierarchical
(elasticity_aware, compute_aware..., any later one), extra positional
arguments, and any keyword a newer SGLang adds unless it asks for nothing
(None, or broken_ranks with no rank marked broken). So does a library limit
(eplb.Error). Bad input raises before anything is planned, with DeepSeek's
exceptions (eplb.compat): ValueError for a NaN, infinite or negative count
(naming layer and expert) or a count tensor that is not 2-D or 3-D,
AssertionError for fewer physical experts than logical ones and the
hierarchical asserts.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from typing import Optional

from . import _arrays as A
from . import _serving as S
from . import compat
from ._lib import Error

__all__ = ["register", "install", "uninstall", "installed", "rebalance_experts", "HANDLED",
           "ENV_POLICY", "ALGORITHMS_MODULE"]

ENV_POLICY = "EPLB_SGLANG_POLICY"
ALGORITHMS_MODULE = "sglang.srt.eplb.eplb_algorithms"
#: SGLang's algorithms eplb plans; the others go to SGLang's function.
HANDLED = ("deepseek", "deepseek_hierarchical", "deepseek_vec", "deepseek_vec_hierarchical",
           "auto")

logger = logging.getLogger("sglang.eplb_plugin")

_lock = threading.Lock()
_state: Optional[dict] = None  # module, original, replacement


def _neutral(name, value) -> bool:
    """A keyword that asks for nothing eplb would have to do."""
    if value is None:
        return True
    if name == "broken_ranks":  # SGLang's elastic EP: a rank marked broken is not eplb's
        try:
            if A.is_torch(value):
                return not bool(value.any())
            if A.np is not None and isinstance(value, A.np.ndarray):
                return not bool(value.any())
            return not any(value)
        except Exception:  # noqa: BLE001 - unknown form: the original decides
            return False
    return False


def _unsupported(algorithm, args, kwargs) -> Optional[str]:
    """Why eplb does not plan this call (None: it does)."""
    name = getattr(algorithm, "name", algorithm)
    if name not in HANDLED:
        return f"algorithm {name!r}"
    if args:
        return f"{len(args)} extra positional argument(s)"
    if "compute_cost_per_expert" not in kwargs or kwargs["compute_cost_per_expert"] is None:
        kwargs = {k: v for k, v in kwargs.items() if k != "compute_cost_alpha"}
    for k, v in kwargs.items():
        if not _neutral(k, v):
            return f"keyword {k}"
    return None


def _check_counts(t):
    """ValueError naming the first NaN, infinite or negative count, per step
    (a sum over steps could hide a negative one)."""
    import math

    np = A.np
    if A.is_torch(t):
        t = t.numpy() if np is not None and hasattr(t, "numpy") else t.tolist()
    if np is not None and not isinstance(t, (list, tuple)):
        a = np.asarray(t)
        if a.dtype.kind not in "iufb":
            raise TypeError(f"tokens_per_expert: expected integer or float counts, got {a.dtype}")
        if a.dtype.kind in "iub":
            bad = a < 0
        else:
            bad = ~(np.isfinite(a) & (a >= 0))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            v = a[where].item()
            raise ValueError(f"tokens_per_expert: {_where(where)}: count {v!r} must be finite and >= 0")
        return
    flat, shape = A._flatten(t) if isinstance(t, (list, tuple)) else ([], ())
    for i, v in enumerate(flat):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not (
                math.isfinite(v) and v >= 0):
            idx, rest = [], i
            for d in reversed(shape):
                idx.append(rest % d)
                rest //= d
            raise ValueError(f"tokens_per_expert: {_where(tuple(reversed(idx)))}: count {v!r} "
                             "must be finite and >= 0")


def _where(idx):
    names = ("step", "layer", "expert") if len(idx) == 3 else ("layer", "expert")
    return " ".join(f"{n} {i}" for n, i in zip(names, idx))


def rebalance_experts(tokens_per_expert, num_physical_experts, num_local_physical_experts,
                      num_groups, num_nodes, algorithm="auto", *, policy: str = "balanced",
                      threads: Optional[int] = None):
    """eplb's plan for SGLang's call (see the module): (phy2log [L, P],
    log2phy [L, E, max count] -1 padded, logcnt [L, E]) int64, CPU torch
    tensors when torch is importable, else numpy arrays."""
    S.check_policy(policy)
    t = S.host(tokens_per_expert)
    dims = len(t.shape) if hasattr(t, "shape") else None
    if dims is not None and dims not in (2, 3):
        raise ValueError(f"tokens_per_expert: expected [steps, layers, experts] (or [layers, "
                         f"experts]), got shape {tuple(t.shape)}")
    name = getattr(algorithm, "name", algorithm)
    n_local = compat._index(num_local_physical_experts, "num_local_physical_experts")
    if n_local < 1:
        raise ValueError(f"num_local_physical_experts: {n_local} must be >= 1")
    num_gpus = compat._index(num_physical_experts, "num_physical_experts") // n_local
    if name == "auto":
        hier = num_groups is not None and num_groups % num_nodes == 0
    else:
        hier = name.endswith("_hierarchical")
    if hier and num_groups is None:
        raise TypeError("num_groups: a hierarchical algorithm needs the number of groups")
    _check_counts(t)
    weight = compat._sum_steps(t)
    p2l, rank, cnt, _ = compat._maps(weight, num_physical_experts, num_groups, num_nodes, num_gpus,
                                     policy, "hierarchical" if hier else "global", threads)
    l2p = compat.log2phy_from(p2l, rank, cnt)
    want = S.torch_or_none() is not None
    return tuple(S.as_tensor(x, want) for x in (p2l, l2p, cnt))


def _replacement(original, policy, threads):
    @functools.wraps(original)
    def replacement(tokens_per_expert, num_physical_experts, num_local_physical_experts,
                    num_groups, num_nodes, algorithm, *args, **kwargs):
        why = _unsupported(algorithm, args, kwargs)
        if why is None:
            try:
                return rebalance_experts(tokens_per_expert, num_physical_experts,
                                         num_local_physical_experts, num_groups, num_nodes,
                                         algorithm, policy=policy, threads=threads)
            except Error as e:  # a library limit, not bad input
                why = f"eplb: {e}"
        logger.info("eplb: %s: SGLang's rebalance_experts plans this call", why)
        return original(tokens_per_expert, num_physical_experts, num_local_physical_experts,
                        num_groups, num_nodes, algorithm, *args, **kwargs)

    replacement.eplb_original = original
    replacement.eplb_policy = policy
    return replacement


def install(policy: str = "balanced", *, threads: Optional[int] = None, module=None):
    """Sets sglang.srt.eplb.eplb_algorithms.rebalance_experts (or module's)
    to eplb's; returns the replacement. A second install replaces the first
    (over SGLang's original). ValueError for a bad policy (mip included),
    ImportError when SGLang cannot be imported, RuntimeError when the module
    has no rebalance_experts; nothing is changed then."""
    global _state
    S.check_policy(policy)
    mod = module if module is not None else importlib.import_module(ALGORITHMS_MODULE)
    current = getattr(mod, "rebalance_experts", None)
    if not callable(current):
        raise RuntimeError(f"{mod.__name__} has no rebalance_experts")
    with _lock:
        original = getattr(current, "eplb_original", current)
        rep = _replacement(original, policy, threads)
        mod.rebalance_experts = rep  # the one change
        _state = {"module": mod, "original": original, "replacement": rep}
    logger.info("eplb: %s.rebalance_experts now plans with eplb's %s policy", mod.__name__, policy)
    return rep


def uninstall() -> bool:
    """Puts SGLang's function back; False when nothing was installed."""
    global _state
    with _lock:
        if _state is None:
            return False
        if getattr(_state["module"], "rebalance_experts", None) is _state["replacement"]:
            _state["module"].rebalance_experts = _state["original"]
        _state = None
    return True


def installed():
    """The installed replacement, or None."""
    return _state["replacement"] if _state is not None else None


def register():
    """The sglang.srt.plugins entry point: installs when EPLB_SGLANG_POLICY
    asks for it; never raises (logs, changes nothing)."""
    try:
        policy = S.policy_setting(os.environ.get(ENV_POLICY), ENV_POLICY)
        if policy is None:
            logger.debug("eplb: %s is not set: SGLang's EPLB algorithms unchanged", ENV_POLICY)
            return None
        return install(policy, threads=S.plan_threads())
    except ImportError as e:
        logger.warning("eplb: SGLang's EPLB algorithms cannot be imported (%s): nothing installed",
                       e)
    except Exception as e:  # noqa: BLE001 - a plugin must not stop SGLang
        logger.error("eplb: eplb's algorithm not installed, SGLang's stays: %s: %s",
                     type(e).__name__, e)
    return None
