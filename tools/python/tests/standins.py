"""Stand-ins for vLLM, SGLang and torch, written into a temporary directory,
for the plugin tests (test_plugins.py): no GPU, no torch, no vLLM needed.

Each stand-in reproduces the documented interface of the real package, as
read in its source (docs/compat.md cites the files):

* vLLM: vllm.plugins.load_general_plugins (entry point group
  "vllm.general_plugins", VLLM_PLUGINS filter, each plugin loaded under a
  try and called without one), vllm.distributed.eplb.policy with
  AbstractEplbPolicy, DefaultEplbPolicy and the table EPLB_POLICIES; the
  policy's classmethod rebalance_experts(weight, num_replicas, num_groups,
  num_nodes, num_ranks, old_global_expert_indices=None) -> torch.Tensor
  (phy2log, CPU int64) in the current flavour, -> tuple[Tensor, Tensor,
  Tensor] without old_global_expert_indices in the "tuple" flavour, no
  annotation in "bare", and an extra abstract method in "unknown".
* SGLang: sglang.srt.eplb.eplb_algorithms (EplbAlgorithm, compute_algorithm,
  rebalance_experts(tokens_per_expert, num_physical_experts,
  num_local_physical_experts, num_groups, num_nodes, algorithm, ...newer
  keywords) and sglang.srt.plugins.load_plugins (group "sglang.srt.plugins",
  SGLANG_PLUGINS filter).
* torch: a tiny numpy-backed Tensor (cpu and "cuda" devices; numpy() of a
  cuda tensor fails as torch's does), from_numpy, tensor, zeros, dtypes.

The package's entry points come from tools/python/pyproject.toml: a
dist-info directory (METADATA, entry_points.txt) written next to the
stand-ins makes importlib.metadata find them as pip would install them.

Run as a script, this file is one rank or one scenario of test_plugins.py
(a fresh interpreter: `python3 standins.py <scenario> <json args>`); it
prints one JSON line.
"""

import json
import os
import pathlib
import re
import sys
import textwrap
import time

HERE = pathlib.Path(__file__).resolve().parent
PYPROJECT = HERE.parent / "pyproject.toml"

TORCH = '''
"""A numpy-backed stand-in for the slice of torch the eplb plugins use."""
import numpy as _np


class dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name

    __str__ = __repr__

    def __eq__(self, other):
        return isinstance(other, dtype) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


_DType = dtype
int64 = long = dtype("int64")
int32 = dtype("int32")
float32 = dtype("float32")
float64 = double = dtype("float64")
bool_ = dtype("bool")


class device:
    def __init__(self, type_="cpu", index=None):
        if isinstance(type_, device):
            type_, index = type_.type, type_.index
        if ":" in type_:
            type_, index = type_.split(":")[0], int(type_.split(":")[1])
        self.type, self.index = type_, index

    def __eq__(self, other):
        other = device(other) if isinstance(other, str) else other
        return (self.type, self.index) == (other.type, other.index)

    def __repr__(self):
        return f"device(type={self.type!r})"


def _np_dtype(d):
    return None if d is None else _np.dtype(d.name if isinstance(d, dtype) else d)


class Tensor:
    def __init__(self, a, dev="cpu"):
        self._a = _np.asarray(a)
        self.device = device(dev)

    # -- what eplb's binding looks at (eplb._arrays.is_torch) --
    @property
    def dtype(self):
        return dtype(str(self._a.dtype))

    @property
    def shape(self):
        return tuple(self._a.shape)

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def data_ptr(self):
        return self._a.ctypes.data

    def is_contiguous(self):
        return self._a.flags.c_contiguous

    def dim(self):
        return self._a.ndim

    ndim = property(dim)

    def size(self, i=None):
        return self.shape if i is None else self.shape[i]

    def numel(self):
        return int(self._a.size)

    # -- conversions --
    def detach(self):
        return self

    def cpu(self):
        return Tensor(self._a, "cpu")

    def cuda(self, index=0):
        return Tensor(self._a, device("cuda", index))

    def to(self, where=None, dtype=None):
        if isinstance(where, _DType):
            where, dtype = None, where
        a = self._a if dtype is None else self._a.astype(_np_dtype(dtype))
        return Tensor(a, self.device if where is None else where)

    def numpy(self):
        if self.device.type != "cpu":
            raise TypeError(f"can't convert {self.device.type}:0 device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        return self._a

    def tolist(self):
        return self._a.tolist()

    def item(self):
        return self._a.item()

    def double(self):
        return Tensor(self._a.astype(_np.float64), self.device)

    def float(self):
        return Tensor(self._a.astype(_np.float32), self.device)

    def long(self):
        return Tensor(self._a.astype(_np.int64), self.device)

    def contiguous(self):
        return Tensor(_np.ascontiguousarray(self._a), self.device)

    def clone(self):
        return Tensor(self._a.copy(), self.device)

    # -- arithmetic the stand-ins and tests use --
    def sum(self, dim=None):
        return Tensor(self._a.sum(axis=dim), self.device)

    def any(self):
        return Tensor(self._a.any(), self.device)

    def __bool__(self):
        return bool(self._a)

    def __len__(self):
        return len(self._a)

    def __getitem__(self, i):
        return Tensor(self._a[i], self.device)

    def __repr__(self):
        return f"tensor({self._a.tolist()}, device={self.device.type!r}, dtype={self.dtype})"


def from_numpy(a):
    return Tensor(a, "cpu")


def tensor(data, dtype=None, device="cpu"):
    return Tensor(_np.array(data, dtype=_np_dtype(dtype)), device)


def zeros(*shape, dtype=None, device="cpu"):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return Tensor(_np.zeros(shape, dtype=_np_dtype(dtype) or _np.float32), device)


def equal(a, b):
    return a.shape == b.shape and bool((a._a == b._a).all())


class cuda:
    @staticmethod
    def is_available():
        return False
'''

ENTRY_POINTS_LOADER = '''
def _entry_points(group):
    from importlib.metadata import entry_points
    try:
        return list(entry_points(group=group))
    except TypeError:  # Python 3.9: a dict of groups
        return list(entry_points().get(group, []))
'''

VLLM_PLUGINS = ENTRY_POINTS_LOADER + '''
# vllm/plugins/__init__.py: load_plugins_by_group and load_general_plugins.
import logging
import os

logger = logging.getLogger(__name__)

DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
plugins_loaded = False


def load_plugins_by_group(group):
    allowed = os.environ.get("VLLM_PLUGINS")
    allowed = None if allowed is None else [p.strip() for p in allowed.split(",")]
    plugins = {}
    for plugin in _entry_points(group):
        if allowed is None or plugin.name in allowed:
            try:
                plugins[plugin.name] = plugin.load()
            except Exception:
                logger.exception("Failed to load plugin %s", plugin.name)
    return plugins


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()  # vLLM calls a plugin without a try
'''

ABSTRACT = {
    # vLLM >= 0.19 (0.34 checked): phy2log only, the current map passed in.
    "current": '''
from abc import ABC, abstractmethod
from typing import Optional

import torch


class AbstractEplbPolicy(ABC):
    @classmethod
    @abstractmethod
    def rebalance_experts(
        cls,
        weight: torch.Tensor,
        num_replicas: int,
        num_groups: int,
        num_nodes: int,
        num_ranks: int,
        old_global_expert_indices: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        raise NotImplementedError
''',
    # vLLM 0.14-0.18: three maps, the current map passed in.
    "tuple": '''
from abc import ABC, abstractmethod
from typing import Optional

import torch


class AbstractEplbPolicy(ABC):
    @classmethod
    @abstractmethod
    def rebalance_experts(
        cls,
        weight: torch.Tensor,
        num_replicas: int,
        num_groups: int,
        num_nodes: int,
        num_ranks: int,
        old_global_expert_indices: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError
''',
    # vLLM 0.13: the first policy classes, three maps, no current map.
    "tuple013": '''
from abc import ABC, abstractmethod

import torch


class AbstractEplbPolicy(ABC):
    @classmethod
    @abstractmethod
    def rebalance_experts(
        cls,
        weight: torch.Tensor,
        num_replicas: int,
        num_groups: int,
        num_nodes: int,
        num_ranks: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError
''',
    # No annotation: the plugin asks the default policy.
    "bare": '''
from abc import ABC, abstractmethod


class AbstractEplbPolicy(ABC):
    @classmethod
    @abstractmethod
    def rebalance_experts(cls, weight, num_replicas, num_groups, num_nodes, num_ranks,
                          old_global_expert_indices=None):
        raise NotImplementedError
''',
    # An interface the plugin does not implement.
    "unknown": '''
from abc import ABC, abstractmethod

import torch


class AbstractEplbPolicy(ABC):
    @abstractmethod
    def plan_rebalance(self, context, policy_state):
        raise NotImplementedError

    @classmethod
    def rebalance_experts(cls, weight: torch.Tensor, num_replicas: int, num_groups: int,
                          num_nodes: int, num_ranks: int,
                          old_global_expert_indices=None) -> torch.Tensor:
        raise NotImplementedError
''',
}

DEFAULT_POLICY = '''
import numpy as np
import torch

from .abstract import AbstractEplbPolicy

CALLS = []


class DefaultEplbPolicy(AbstractEplbPolicy):
    """Round-robin: slot i serves expert i % E (a stand-in, not DeepSeek's)."""

    @classmethod
    def rebalance_experts(cls, weight, num_replicas, num_groups, num_nodes, num_ranks,
                          *old):
        CALLS.append(tuple(weight.shape))
        L, E = weight.shape
        p2l = np.tile(np.arange(num_replicas, dtype=np.int64) % E, (L, 1))
        if {three}:
            cnt = np.stack([np.bincount(r, minlength=E) for r in p2l]).astype(np.int64)
            l2p = np.full((L, E, int(cnt.max())), -1, dtype=np.int64)
            for l in range(L):
                seen = [0] * E
                for s, e in enumerate(p2l[l]):
                    l2p[l, e, seen[e]] = s
                    seen[e] += 1
            return torch.from_numpy(p2l), torch.from_numpy(l2p), torch.from_numpy(cnt)
        return torch.from_numpy(p2l)
'''

POLICY_INIT = '''
from .abstract import AbstractEplbPolicy
from .default import DefaultEplbPolicy

EPLB_POLICIES = {"default": DefaultEplbPolicy}

__all__ = ["AbstractEplbPolicy", "DefaultEplbPolicy", "EPLB_POLICIES"]
'''

SGLANG_ALGORITHMS = '''
from enum import Enum, auto
from typing import Optional

import numpy as np
import torch

CALLS = []


class EplbAlgorithm(Enum):
    deepseek = auto()
    deepseek_hierarchical = auto()
    deepseek_vec = auto()
    deepseek_vec_hierarchical = auto()
    elasticity_aware = auto()
    elasticity_aware_hierarchical = auto()


def rebalance_experts(
    tokens_per_expert: torch.Tensor,
    num_physical_experts: int,
    num_local_physical_experts: int,
    num_groups: Optional[int],
    num_nodes: int,
    algorithm: EplbAlgorithm,
    broken_ranks: Optional[torch.Tensor] = None,
    compute_cost_per_expert: Optional[torch.Tensor] = None,
    compute_cost_alpha: float = 0.5,
    **newer,
):
    """SGLang's algorithm dispatch (a stand-in: round-robin maps)."""
    CALLS.append(algorithm.name)
    L, E = tokens_per_expert.shape[1:]
    p2l = np.tile(np.arange(num_physical_experts, dtype=np.int64) % E, (L, 1))
    cnt = np.stack([np.bincount(r, minlength=E) for r in p2l]).astype(np.int64)
    l2p = np.full((L, E, int(cnt.max())), -1, dtype=np.int64)
    for l in range(L):
        seen = [0] * E
        for s, e in enumerate(p2l[l]):
            l2p[l, e, seen[e]] = s
            seen[e] += 1
    return torch.from_numpy(p2l), torch.from_numpy(l2p), torch.from_numpy(cnt)


def compute_algorithm(raw_algorithm: str, num_groups: Optional[int], num_nodes: int):
    if raw_algorithm != "auto":
        return EplbAlgorithm[raw_algorithm]
    if (num_groups is not None) and (num_groups % num_nodes == 0):
        return EplbAlgorithm.deepseek_hierarchical
    return EplbAlgorithm.deepseek
'''

SGLANG_PLUGINS = ENTRY_POINTS_LOADER + '''
# sglang/srt/plugins/__init__.py: load_plugins (general plugins).
import logging
import os

logger = logging.getLogger(__name__)
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
_plugins_loaded = False


def load_plugins():
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    allowed = os.environ.get("SGLANG_PLUGINS")
    allowed = {x.strip() for x in allowed.split(",") if x.strip()} if allowed else None
    for ep in _entry_points(GENERAL_PLUGINS_GROUP):
        if allowed is not None and ep.name not in allowed:
            continue
        try:
            func = ep.load()
        except Exception:
            logger.exception("Failed to load plugin %s", ep.name)
            continue
        try:
            func()
        except Exception:
            logger.exception("Failed to execute general plugin: %s", ep.name)
'''


def _write(root, rel, text):
    p = pathlib.Path(root) / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())


def project_metadata(path=PYPROJECT):
    """(version, {group: {name: value}}) of pyproject.toml's [project]."""
    text = pathlib.Path(path).read_text()
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the two things needed, by hand
        version = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)
        groups, cur = {}, None
        for line in text.splitlines():
            m = re.match(r'^\[project\.entry-points\."([^"]+)"\]', line)
            if m:
                cur = groups.setdefault(m.group(1), {})
                continue
            if line.startswith("["):
                cur = None
                continue
            m = re.match(r'^\s*([\w.-]+)\s*=\s*"([^"]+)"', line)
            if cur is not None and m:
                cur[m.group(1)] = m.group(2)
        return version, groups
    data = tomllib.loads(text)
    return data["project"]["version"], data["project"].get("entry-points", {})


def write_dist_info(root):
    """eplb-<version>.dist-info with the pyproject's entry points, as pip
    installs it: importlib.metadata finds it on sys.path."""
    version, groups = project_metadata()
    d = pathlib.Path(root) / f"eplb-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: eplb\nVersion: {version}\n")
    lines = []
    for group, eps in groups.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in eps.items()]
        lines.append("")
    (d / "entry_points.txt").write_text("\n".join(lines))
    return d


def write(root, vllm="current", sglang=True, torch=True, dist_info=True):
    """Writes the stand-ins under root (vllm: a flavour of ABSTRACT or None)."""
    if torch:
        _write(root, "torch/__init__.py", TORCH)
    if vllm:
        _write(root, "vllm/__init__.py", '"""vLLM stand-in."""\n')
        _write(root, "vllm/plugins/__init__.py", VLLM_PLUGINS)
        _write(root, "vllm/distributed/__init__.py", "")
        _write(root, "vllm/distributed/eplb/__init__.py", "")
        _write(root, "vllm/distributed/eplb/policy/__init__.py", POLICY_INIT)
        _write(root, "vllm/distributed/eplb/policy/abstract.py", ABSTRACT[vllm])
        _write(root, "vllm/distributed/eplb/policy/default.py",
               DEFAULT_POLICY.replace("{three}", str(vllm.startswith("tuple"))))
    if sglang:
        for pkg in ("sglang", "sglang/srt", "sglang/srt/eplb"):
            _write(root, f"{pkg}/__init__.py", "")
        _write(root, "sglang/srt/eplb/eplb_algorithms/__init__.py", SGLANG_ALGORITHMS)
        _write(root, "sglang/srt/plugins/__init__.py", SGLANG_PLUGINS)
    if dist_info:
        write_dist_info(root)
    return pathlib.Path(root)


def env(root, extra=None, binding=True):
    """The environment of a fresh interpreter that sees the stand-ins under
    root first, and the binding (tools/python) when `binding`."""
    e = dict(os.environ)
    paths = [str(root)] + ([str(HERE.parent)] if binding else [])
    e["PYTHONPATH"] = os.pathsep.join(paths)
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    for k in ("EPLB_VLLM_POLICY", "EPLB_SGLANG_POLICY", "EPLB_VLLM_MOVE_BUDGET",
              "EPLB_VLLM_MOVE_WEIGHT", "EPLB_PLAN_THREADS", "VLLM_PLUGINS", "SGLANG_PLUGINS"):
        e.pop(k, None)
    e.update(extra or {})
    return e


# ---- the ranks and scenarios (run in a fresh interpreter) ---------------------------

SHAPE = dict(L=4, E=16, G=4, R=24, K=4, N=2)  # 2 nodes x 2 GPUs, 6 slots a GPU, 4 groups


def window(rank, rnd, steps=5):
    """This rank's recorded window [steps, layers, experts]: a drifting hot
    set, different on every rank and round."""
    import numpy as np

    L, E = SHAPE["L"], SHAPE["E"]
    rng = np.random.default_rng(1000 * rnd + rank)
    base = rng.integers(0, 20, (steps, L, E))
    hot = (np.arange(E)[None, :] + 5 * rnd + np.arange(L)[:, None]) % E < 3
    return base + hot[None] * rng.integers(50, 200, (steps, L, E))


def all_reduce(d, tag, rank, world, local):
    """Sums `local` over the ranks through files in d (an all-reduce)."""
    import numpy as np

    tmp = d / f"{tag}.k{rank}.tmp.npy"
    np.save(tmp, local)
    os.replace(tmp, d / f"{tag}.k{rank}.npy")
    deadline = time.time() + 60
    while not all((d / f"{tag}.k{k}.npy").exists() for k in range(world)):
        if time.time() > deadline:
            raise TimeoutError(f"all-reduce {tag}: ranks missing")
        time.sleep(0.01)
    return sum(np.load(d / f"{tag}.k{k}.npy") for k in range(world))


def vllm_rank(a):
    """One vLLM rank: load the general plugins (entry points), then per
    round record a window, all-reduce it, plan with the configured policy
    from the current map, write the new map."""
    import numpy as np
    import torch
    import vllm.plugins
    from vllm.distributed.eplb.policy import EPLB_POLICIES

    vllm.plugins.load_general_plugins()
    d = pathlib.Path(a["dir"])
    rank, world = a["rank"], a["world"]
    L, E, G, R, K, N = (SHAPE[k] for k in "L E G R K N".split())
    policy = EPLB_POLICIES["default"]  # EplbState: EPLB_POLICIES[eplb_config.policy]
    p2l = torch.tensor([list(range(E)) + [i % E for i in range(R - E)]] * L, dtype=torch.int64)
    out = {"policy": f"{policy.__module__}.{policy.__name__}", "keys": sorted(EPLB_POLICIES)}
    for rnd in range(a["rounds"]):
        load = all_reduce(d, f"v{rnd}", rank, world, window(rank, rnd).sum(0))
        new = policy.rebalance_experts(torch.from_numpy(load).cuda(), R, K, N, G,
                                       p2l.cuda().cpu())
        assert isinstance(new, torch.Tensor) and new.device.type == "cpu", type(new)
        assert str(new.dtype) == "torch.int64" and new.shape == (L, R), (new.dtype, new.shape)
        (d / f"map{rnd}.k{rank}.bin").write_bytes(new.numpy().tobytes())
        np.save(d / f"load{rnd}.npy", load) if rank == 0 else None
        p2l = new
    return out


def sglang_rank(a):
    """One SGLang rank: load_plugins(), then per round all-reduce the
    [steps, layers, experts] counts and call
    eplb_algorithms.rebalance_experts as init_by_eplb does (keywords, a
    cuda tensor, broken_ranks of zeros)."""
    import torch
    from sglang.srt.eplb import eplb_algorithms
    from sglang.srt.plugins import load_plugins

    load_plugins()
    d = pathlib.Path(a["dir"])
    rank, world = a["rank"], a["world"]
    R, K, N, G = SHAPE["R"], SHAPE["K"], SHAPE["N"], SHAPE["G"]
    for rnd in range(a["rounds"]):
        counts = all_reduce(d, f"s{rnd}", rank, world, window(rank, rnd))
        p2l, l2p, cnt = eplb_algorithms.rebalance_experts(
            tokens_per_expert=torch.from_numpy(counts).cuda(),
            num_physical_experts=R,
            num_local_physical_experts=R // G,
            num_groups=K,
            num_nodes=N,
            algorithm=eplb_algorithms.compute_algorithm("auto", K, N),
            broken_ranks=torch.zeros(G, dtype=torch.int32, device="cuda"),
        )
        for x in (p2l, l2p, cnt):
            assert x.device.type == "cpu" and str(x.dtype) == "torch.int64", x
        blob = b"".join(x.numpy().tobytes() for x in (p2l, l2p, cnt))
        (d / f"smap{rnd}.k{rank}.bin").write_bytes(blob)
    return {"calls_to_original": len(eplb_algorithms.CALLS),
            "hook": getattr(eplb_algorithms.rebalance_experts, "eplb_policy", None)}


def _error(fn):
    """(exception type name, message) of fn(), or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return [type(e).__name__, str(e)]
    return None


def _count_planning():
    """Counts the planner's entries (nothing may be planned before the
    arguments are checked)."""
    import eplb.compat
    from eplb.plan import Plan

    n = {"plans": 0}
    real_maps, real_create = eplb.compat._plan_maps, Plan.create.__func__

    def maps(*a, **k):
        n["plans"] += 1
        return real_maps(*a, **k)

    def create(cls, *a, **k):
        n["plans"] += 1
        return real_create(cls, *a, **k)

    eplb.compat._plan_maps = maps
    Plan.create = classmethod(create)
    return n


def vllm_checks(a):
    """The plugin in one vLLM process: what register() did, and the
    installed policy on good and bad input."""
    import logging

    import numpy as np
    import torch
    import vllm.plugins
    from vllm.distributed.eplb import policy as P

    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    before = dict(P.EPLB_POLICIES)
    vllm.plugins.load_general_plugins()
    out = {"keys": sorted(P.EPLB_POLICIES), "replaced": P.EPLB_POLICIES["default"] is not before["default"]}
    if not out["replaced"]:
        out["unchanged"] = P.EPLB_POLICIES == before
        return out
    import eplb.vllm

    pol = P.EPLB_POLICIES["default"]
    out["same_in_every_entry"] = all(v is pol for v in P.EPLB_POLICIES.values())
    out["subclass"] = issubclass(pol, P.AbstractEplbPolicy)
    L, E, G, R, K, N = (SHAPE[k] for k in "L E G R K N".split())
    w = torch.tensor(np.random.default_rng(5).integers(0, 100, (L, E)), dtype=torch.int64)
    old = torch.tensor([list(range(E)) + [i % E for i in range(R - E)]] * L, dtype=torch.int64)
    res = pol.rebalance_experts(w, R, K, N, G, old) if a.get("old", True) else \
        pol.rebalance_experts(w, R, K, N, G)
    out["returns"] = "tuple" if isinstance(res, tuple) else type(res).__name__
    first = res[0] if isinstance(res, tuple) else res
    out["shape"] = list(first.shape)
    out["dtype"] = str(first.dtype)
    out["device"] = first.device.type
    if isinstance(res, tuple):
        out["shapes"] = [list(x.shape) for x in res]
    n = _count_planning()
    bad = {}
    f = lambda *args, **kw: pol.rebalance_experts(*args, **kw)  # noqa: E731
    wf = w.double()
    nan = wf.numpy().copy()
    nan[1, 3] = float("nan")
    inf = wf.numpy().copy()
    inf[2, 0] = float("inf")
    neg = w.numpy().copy()
    neg[0, 5] = -1
    bad["nan"] = _error(lambda: f(torch.from_numpy(nan).cuda(), R, K, N, G))
    bad["inf"] = _error(lambda: f(torch.from_numpy(inf), R, K, N, G))
    bad["negative"] = _error(lambda: f(torch.from_numpy(neg).cuda(), R, K, N, G))
    bad["rank3"] = _error(lambda: f(w[None], R, K, N, G))
    bad["rank1"] = _error(lambda: f(w[0], R, K, N, G))
    bad["replicas_below_experts"] = _error(lambda: f(w, E - G, K, N, G))
    bad["replicas_not_multiple"] = _error(lambda: f(w, R + 1, K, N, G))
    bad["mip_setting"] = _error(lambda: eplb.vllm.install("mip", policy_module=P))
    if a.get("old", True):
        o = old.numpy()
        oob = o.copy()
        oob[2, 7] = E
        neg_id = o.copy()
        neg_id[1, 0] = -1
        missing = o.copy()
        missing[:, :] = 0  # every other expert without a replica
        bad["old_rank1"] = _error(lambda: f(w, R, K, N, G, old[0]))
        bad["old_rank3"] = _error(lambda: f(w, R, K, N, G, old[None]))
        bad["old_layers"] = _error(lambda: f(w, R, K, N, G, old[:2]))
        bad["old_out_of_range"] = _error(lambda: f(w, R, K, N, G, torch.from_numpy(oob)))
        bad["old_negative"] = _error(lambda: f(w, R, K, N, G, torch.from_numpy(neg_id)))
        bad["old_missing_expert"] = _error(lambda: f(w, R, K, N, G, torch.from_numpy(missing)))
        bad["old_float"] = _error(lambda: f(w, R, K, N, G, old.double()))
        out["planned_on_bad_input"] = n["plans"]
        # vLLM's elastic EP: another slot count than num_replicas plans afresh.
        wide = torch.tensor([list(range(E)) + [i % E for i in range(R + G - E)]] * L,
                            dtype=torch.int64)
        res = f(w, R, K, N, G, wide)
        out["elastic"] = list((res[0] if isinstance(res, tuple) else res).shape)
    else:
        out["planned_on_bad_input"] = n["plans"]
    out["bad"] = bad
    eplb.vllm.uninstall()
    out["restored"] = P.EPLB_POLICIES == before
    return out


def sglang_checks(a):
    """The SGLang hook in one process: what falls through to SGLang's
    function, and bad input."""
    import numpy as np
    import torch
    from sglang.srt.eplb import eplb_algorithms as M
    from sglang.srt.plugins import load_plugins

    original = M.rebalance_experts
    load_plugins()
    out = {"installed": M.rebalance_experts is not original}
    if not out["installed"]:
        return out
    import eplb.sglang

    L, E, G, R, K, N = (SHAPE[k] for k in "L E G R K N".split())
    t = torch.from_numpy(window(0, 0)).cuda()
    kw = dict(num_physical_experts=R, num_local_physical_experts=R // G, num_groups=K,
              num_nodes=N)
    A = M.EplbAlgorithm
    falls = {}
    for name, call in (
        ("elasticity_aware", lambda: M.rebalance_experts(t, algorithm=A.elasticity_aware, **kw)),
        ("broken_rank", lambda: M.rebalance_experts(
            t, algorithm=A.deepseek, broken_ranks=torch.tensor([0, 1, 0, 0]), **kw)),
        ("compute_cost", lambda: M.rebalance_experts(
            t, algorithm=A.deepseek, compute_cost_per_expert=t.double(), **kw)),
        ("newer_keyword", lambda: M.rebalance_experts(t, algorithm=A.deepseek, future_knob=3,
                                                       **kw)),
        ("extra_positional", lambda: M.rebalance_experts(t, R, R // G, K, N, A.deepseek, None,
                                                          None, 0.7)),
    ):
        n0 = len(M.CALLS)
        res = _error(call)
        falls[name] = {"error": res, "original_called": len(M.CALLS) == n0 + 1}
    out["falls_through"] = falls
    n0 = len(M.CALLS)
    eplb_calls = {}
    for name, extra in (("plain", {}), ("zero_broken", {"broken_ranks": torch.zeros(G)}),
                        ("none_cost", {"compute_cost_per_expert": None,
                                       "compute_cost_alpha": 0.9})):
        res = M.rebalance_experts(t, algorithm=A.deepseek_hierarchical, **kw, **extra)
        eplb_calls[name] = [list(x.shape) for x in res]
    out["eplb_planned"] = eplb_calls
    out["original_calls_for_eplb_cases"] = len(M.CALLS) - n0
    n = _count_planning()
    bad = {}
    c = t.cpu().numpy().astype(np.float64)
    nan, inf, neg = c.copy(), c.copy(), c.copy()
    nan[2, 1, 3] = float("nan")
    inf[0, 3, 2] = float("inf")
    neg[4, 0, 0] = -7
    H = A.deepseek_hierarchical
    bad["nan"] = _error(lambda: M.rebalance_experts(torch.from_numpy(nan).cuda(), algorithm=H, **kw))
    bad["inf"] = _error(lambda: M.rebalance_experts(torch.from_numpy(inf), algorithm=H, **kw))
    bad["negative"] = _error(lambda: M.rebalance_experts(torch.from_numpy(neg), algorithm=H, **kw))
    bad["rank4"] = _error(lambda: M.rebalance_experts(t[None], algorithm=H, **kw))
    bad["rank1"] = _error(lambda: M.rebalance_experts(t[0][0], algorithm=H, **kw))
    kw_small = dict(kw, num_physical_experts=E - G, num_local_physical_experts=(E - G) // G)
    bad["replicas_below_experts"] = _error(lambda: M.rebalance_experts(t, algorithm=H, **kw_small))
    bad["groups_not_dividing_nodes"] = _error(lambda: M.rebalance_experts(
        t, algorithm=H, **dict(kw, num_groups=3)))
    out["bad"] = bad
    out["planned_on_bad_input"] = n["plans"]
    eplb.sglang.uninstall()
    out["restored"] = M.rebalance_experts is original
    return out


def register_only(a):
    """register() of a plugin with the given environment, vLLM or SGLang
    importable or not: what it returned and logged."""
    import importlib
    import logging

    logging.basicConfig(level=logging.DEBUG, format="%(name)s %(levelname)s %(message)s",
                        stream=sys.stdout)
    mod = importlib.import_module(a["module"])
    res = mod.register()
    return {"returned": None if res is None else getattr(res, "__name__", str(res))}


SCENARIOS = {"vllm_rank": vllm_rank, "sglang_rank": sglang_rank, "vllm_checks": vllm_checks,
             "sglang_checks": sglang_checks, "register_only": register_only}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
    print("RESULT " + json.dumps(result), flush=True)
