"""The plugins against the real vLLM and SGLang packages (scripts/real_stacks.sh
installs them into a venv over Debian's CPU torch): one scenario per fresh
interpreter of that venv, run by test_real_stacks.py as
`<venv>/bin/python real_stacks.py <scenario> <json args>`; it prints one
JSON line ("RESULT {...}").

Each stack is imported as it is when that works (a torch recent enough).
With Debian bookworm's torch 1.13 two package __init__s on the way fail,
and only those are bypassed (their directories are made bare packages, so
every module the plugins touch is still the installed one):

* vllm/distributed/__init__.py: parallel_state.py L42 imports
  torch.distributed._functional_collectives (torch >= 2.1);
* vllm/config/__init__.py: cache.py -> utils/torch_utils.py L15 imports
  torch.library.infer_schema (torch >= 2.5), and parallel.py -> distributed/
  utils.py L24 imports distributed_c10d._get_default_timeout. The policy
  package needs only parallel.py's EPLBPolicyOption (a Literal), evaluated
  here from the installed parallel.py's own source;
* sglang/__init__.py (the frontend language API and HF patches, nothing of
  EPLB): srt/utils/common.py imports triton (a 1 GB wheel) and, L97,
  torch.utils._contextlib (torch >= 2.0).
"""

import ast
import importlib
import importlib.util
import inspect
import json
import pathlib
import sys
import types
import typing

CPU_ALGORITHMS = ("deepseek", "deepseek_hierarchical", "deepseek_vec", "deepseek_vec_hierarchical")
SHAPE = dict(L=4, E=16, G=4, R=24, K=4, N=2)  # 2 nodes x 2 GPUs, 6 slots a GPU, 4 groups


def _drop(prefix):
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]


def _bare(name, path):
    m = types.ModuleType(name)
    m.__path__ = [str(path)]
    m.__file__ = None
    sys.modules[name] = m
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, m)
    return m


def _root(top):
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise ImportError(f"{top} is not installed")
    return pathlib.Path(spec.origin).parent


def entry_points(group):
    """eplb's entry points of `group`, as importlib.metadata finds them."""
    from importlib.metadata import entry_points as eps

    return {ep.name: ep.value for ep in eps(group=group) if ep.value.startswith("eplb.")}


def _version(dist):
    from importlib.metadata import version

    return version(dist)


def load_vllm():
    """(policy module, vllm.plugins, how): the installed modules."""
    try:
        pol = importlib.import_module("vllm.distributed.eplb.policy")
        return pol, importlib.import_module("vllm.plugins"), "as installed"
    except ImportError as e:
        why = f"{type(e).__name__}: {e}"
    _drop("vllm")
    root = _root("vllm")
    importlib.import_module("vllm")
    _bare("vllm.distributed", root / "distributed")
    cfg = _bare("vllm.config", root / "config")
    src = (root / "config" / "parallel.py").read_text()
    node = next(n for n in ast.parse(src).body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", None) == "EPLBPolicyOption")
    par = types.ModuleType("vllm.config.parallel")
    where = str(root / "config" / "parallel.py")
    par.EPLBPolicyOption = eval(compile(ast.Expression(node.value), where, "eval"),
                                {"Literal": typing.Literal})
    sys.modules["vllm.config.parallel"] = cfg.parallel = par
    pol = importlib.import_module("vllm.distributed.eplb.policy")
    return pol, importlib.import_module("vllm.plugins"), f"package __init__s bypassed ({why})"


def load_sglang():
    """(eplb_algorithms, sglang.srt.plugins, how): the installed modules."""
    try:
        alg = importlib.import_module("sglang.srt.eplb.eplb_algorithms")
        return alg, importlib.import_module("sglang.srt.plugins"), "as installed"
    except ImportError as e:
        why = f"{type(e).__name__}: {e}"
    _drop("sglang")
    root = _root("sglang")
    _bare("sglang", root)
    _bare("sglang.srt", root / "srt")
    alg = importlib.import_module("sglang.srt.eplb.eplb_algorithms")
    return alg, importlib.import_module("sglang.srt.plugins"), f"package __init__s bypassed ({why})"


# ---- checks shared by both stacks ------------------------------------------------


def loads(L, E, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    hot = (torch.rand(L, E, generator=g) < 0.2).long() * torch.randint(100, 900, (L, E),
                                                                       generator=g)
    return torch.randint(0, 60, (L, E), generator=g) + hot


def busiest(w, p2l, G):
    """Busiest GPU per layer when every replica gets 1/c of its expert (what
    vLLM and SGLang serve)."""
    import numpy as np

    w, p2l = np.asarray(w, dtype=float), np.asarray(p2l)
    out = []
    for l in range(p2l.shape[0]):
        c = np.bincount(p2l[l], minlength=w.shape[1])
        out.append(float((w[l, p2l[l]] / c[p2l[l]]).reshape(G, -1).sum(1).max()))
    return out


def describe(t):
    """What a stack promises about a returned map: type, dtype, device, shape."""
    return {"type": type(t).__name__, "dtype": str(getattr(t, "dtype", None)),
            "device": str(getattr(t, "device", None)), "shape": list(getattr(t, "shape", ()))}


def map_problems(p2l, E, l2p=None, cnt=None):
    """What is wrong with a map (an empty list: nothing)."""
    import numpy as np

    p2l = np.asarray(p2l)
    bad = []
    if p2l.min() < 0 or p2l.max() >= E:
        return [f"ids outside [0, {E})"]
    for l in range(p2l.shape[0]):
        c = np.bincount(p2l[l], minlength=E)
        if (c == 0).any():
            bad.append(f"layer {l}: expert {int(np.argmin(c))} has no replica")
        if cnt is not None and not np.array_equal(np.asarray(cnt)[l], c):
            bad.append(f"layer {l}: logcnt is not the replica count")
        if l2p is not None:
            row = np.asarray(l2p)[l]
            for e in range(E):
                slots = sorted(int(s) for s in row[e] if s >= 0)
                if slots != sorted(np.flatnonzero(p2l[l] == e).tolist()):
                    bad.append(f"layer {l} expert {e}: log2phy {slots} is not its slots")
                    break
    return bad


def outcome(fn):
    """("ok", shapes) or (exception type, message) of fn()."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - compared, not handled
        return [type(e).__name__, str(e)]
    return ["ok", [list(x.shape) for x in out]]


def counted(fn):
    """fn, counting its calls: SGLang's own function, as eplb finds it, so a
    test sees whether it planned a call (argument errors included)."""
    import functools

    @functools.wraps(fn)
    def spy(*args, **kwargs):
        spy.calls += 1
        return fn(*args, **kwargs)

    spy.calls = 0
    return spy


def calls_of(spy, fn):
    """(fn()'s outcome, how many times spy ran)."""
    n = spy.calls
    res = outcome(fn)
    return res, spy.calls - n


# ---- the scenarios ---------------------------------------------------------------


def vllm_checks(a):
    """vLLM's own load_general_plugins loads eplb's entry point (from the
    dist-info on sys.path); eplb's policy then answers vLLM's calls as the
    default policy's signature promises."""
    import eplb.vllm

    pol, plugins, how = load_vllm()
    L, E, G, R, K, N = (SHAPE[k] for k in "L E G R K N".split())
    before = dict(pol.EPLB_POLICIES)
    default = before["default"]
    sig = inspect.signature(pol.AbstractEplbPolicy.rebalance_experts)
    out = {"version": _version("vllm"), "how": how, "signature": str(sig),
           "keys_before": sorted(before), "entry_points": entry_points("vllm.general_plugins")}
    plugins.load_general_plugins()
    table = pol.EPLB_POLICIES
    cls = table["default"]
    out["keys"] = sorted(table)
    out["installed"] = cls is not default and cls is eplb.vllm.installed()
    if not out["installed"]:
        out["unchanged"] = table == before
        return out
    out["every_entry"] = all(v is cls for v in table.values())
    out["subclass"] = isinstance(cls, type) and issubclass(cls, pol.AbstractEplbPolicy)
    out["classmethod"] = isinstance(inspect.getattr_static(cls, "rebalance_experts"), classmethod)
    iface = eplb.vllm.detect()
    out["detected"] = {"returns": iface.returns, "classmethod": iface.is_classmethod,
                       "instances": iface.instances, "takes_old": iface.takes_old}

    w = loads(L, E, 1)
    # As eplb_state.py calls it: the all-reduced window, then the current map.
    ref = default.rebalance_experts(w, R, K, N, G)
    mine = table["default"].rebalance_experts(w, R, K, N, G)
    out["fresh"] = {"default": describe(ref), "eplb": describe(mine),
                    "problems": map_problems(mine, E) + map_problems(ref, E),
                    "busiest_eplb": busiest(w, mine, G), "busiest_default": busiest(w, ref, G)}
    budget = int(a.get("budget", 3))
    cur, rounds = ref.clone(), []
    for rnd in range(3):
        w = loads(L, E, 10 + rnd)
        ref_old = default.rebalance_experts(w, R, K, N, G, cur)
        new = table["default"].rebalance_experts(w, R, K, N, G, cur)
        rounds.append({"default": describe(ref_old), "eplb": describe(new),
                       "problems": map_problems(new, E),
                       "moved": (new != cur).sum(1).tolist(),
                       "busiest_new": busiest(w, new, G), "busiest_kept": busiest(w, cur, G)})
        cur = new
    out["incremental"] = rounds
    out["budget"] = budget
    eplb.vllm.uninstall()
    out["restored"] = pol.EPLB_POLICIES == before
    return out


def sglang_checks(a):
    """SGLang's own load_plugins loads eplb's entry point; the module
    attribute SGLang calls then plans [steps, layers, experts] counts, and
    what eplb does not implement reaches SGLang's function unchanged."""
    import torch

    import eplb.sglang

    alg, plugins, how = load_sglang()
    L, E, G, R, K, N = (SHAPE[k] for k in "L E G R K N".split())
    real = alg.rebalance_experts
    out = {"version": _version("sglang"), "how": how,
           "parameters": list(inspect.signature(real).parameters),
           "algorithms": [m.name for m in alg.EplbAlgorithm],
           "entry_points": entry_points("sglang.srt.plugins")}
    original = alg.rebalance_experts = counted(real)
    plugins.load_plugins()
    rep = alg.rebalance_experts
    out["installed"] = rep is not original and getattr(rep, "eplb_original", None) is original
    if not out["installed"]:
        out["unchanged"] = rep is original
        alg.rebalance_experts = real
        return out

    g = torch.Generator().manual_seed(3)
    steps = torch.stack([loads(L, E, s) for s in range(5)]) + torch.randint(0, 5, (5, L, E),
                                                                             generator=g)
    w = steps.sum(0)
    planned = {}
    names = list(CPU_ALGORITHMS) + ["auto"]
    for name in names:
        algo = alg.compute_algorithm(name, K, N)
        call = lambda f, algo=algo: f(steps, R, R // G, K, N, algo)  # noqa: E731
        res, n = calls_of(original, lambda: call(rep))
        p2l, l2p, cnt = call(rep)
        ref = outcome(lambda: call(original))
        planned[name] = {"algorithm": algo.name, "outcome": res, "original_calls": n,
                         "described": [describe(x) for x in (p2l, l2p, cnt)],
                         "problems": map_problems(p2l, E, l2p, cnt),
                         "busiest_eplb": busiest(w, p2l, G), "original": ref}
        if ref[0] == "ok":
            planned[name]["busiest_original"] = busiest(w, call(original)[0], G)
    out["planned"] = planned
    kw = dict(zip(out["parameters"], (steps, R, R // G, K, N, alg.EplbAlgorithm.deepseek)))
    res, n = calls_of(original, lambda: rep(**kw))
    out["by_keyword"] = {"outcome": res, "original_calls": n}

    # What eplb hands to SGLang's function: the outcome must be that
    # function's own (a result or its exception), and it must have run.
    broken = torch.zeros(G, dtype=torch.int32)
    broken[1] = 1
    cases = {
        "elasticity_aware": ((alg.EplbAlgorithm.elasticity_aware,), {}),
        "elasticity_aware_hierarchical": ((alg.EplbAlgorithm.elasticity_aware_hierarchical,), {}),
        "extra_positional": ((alg.EplbAlgorithm.deepseek, "extra"), {}),
        "broken_ranks": ((alg.EplbAlgorithm.deepseek,), {"broken_ranks": broken}),
        "compute_cost": ((alg.EplbAlgorithm.deepseek,), {"compute_cost_per_expert": w.double()}),
    }
    through = {}
    for name, (extra, kwargs) in cases.items():
        def f(fn, extra=extra, kwargs=kwargs):
            return fn(steps, R, R // G, K, N, *extra, **kwargs)

        res, n = calls_of(original, lambda: f(rep))
        through[name] = {"outcome": res, "original_calls": n,
                         "original": outcome(lambda: f(original))}
    out["falls_through"] = through
    eplb.sglang.uninstall()
    out["restored"] = alg.rebalance_experts is original
    alg.rebalance_experts = real
    return out


def probe(a):
    """Which of the real modules import (the test skips the others)."""
    out = {}
    for name, load in (("vllm", load_vllm), ("sglang", load_sglang)):
        try:
            load()
            out[name] = {"version": _version(name)}
        except Exception as e:  # noqa: BLE001 - reported, the test decides
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    return out


SCENARIOS = {"vllm_checks": vllm_checks, "sglang_checks": sglang_checks, "probe": probe}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
    print("RESULT " + json.dumps(result), flush=True)
