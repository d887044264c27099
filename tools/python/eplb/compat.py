"""Drop-in replacements for the EPLB algorithm calls of DeepSeek's EPLB,
vLLM and SGLang (docs/compat.md).

    from eplb.compat import rebalance_experts
    phy2log, log2phy, logcnt = rebalance_experts(weight, num_replicas, num_groups,
                                                 num_nodes, num_gpus)

rebalance_experts has the signature and the semantics of DeepSeek's
``eplb.rebalance_experts`` (github.com/deepseek-ai/EPLB): weight [layers,
experts] (a torch tensor on any device, a numpy array or nested lists; any
integer or float dtype) in, (phy2log [L, R], log2phy [L, E, maxlogcnt] padded
with -1, logcnt [L, E]) int64 out: torch tensors on the input's device for a
tensor, numpy arrays otherwise (nested lists without numpy). Hierarchical
placement (groups packed to nodes, replicas kept on their group's node) when
num_groups % num_nodes == 0, else global placement, exactly as DeepSeek
chooses; its argument checks raise what DeepSeek's raise (AssertionError,
ZeroDivisionError), in the same order, and where DeepSeek's code would fail
later inside a torch op (an empty weight, a negative group, node or GPU
count) a ValueError naming the argument. Nothing is planned before every
argument has passed.

policy="deepseek" returns DeepSeek's arrays exactly (the library's port of
its algorithm, float32 arithmetic and sort order included; log2phy in
DeepSeek's replica order). policy="balanced" (the default) plans the same
placement constraints for what these stacks execute, every replica of an
expert getting an even share of its tokens (eplb's uniform-shares objective),
so it is never worse than "deepseek" in busiest-GPU load.

VllmEplbPolicy mirrors vLLM's EPLB policy class (a rebalance_experts
classmethod) and sglang_rebalance_experts SGLang's algorithm hook
(sglang.srt.eplb.eplb_algorithms.rebalance_experts). The plugins that install
eplb into a running vLLM or SGLang are eplb.vllm and eplb.sglang.
"""

from __future__ import annotations

import math
import operator
from typing import Optional

from . import _arrays as A
from ._lib import Error
from .plan import Plan

__all__ = [
    "rebalance_experts",
    "log2phy_from",
    "VllmEplbPolicy",
    "VllmEplbPolicyPhy2Log",
    "sglang_rebalance_experts",
    "COMPAT_POLICIES",
]

#: The policies rebalance_experts takes.
COMPAT_POLICIES = ("balanced", "deepseek")

_FLOAT32_MAX = 3.4028234663852886e38
_TORCH_OK = {
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "uint16", "uint32", "uint64", "bool",
}


def _np():
    return A.np


def _is_tensor(x) -> bool:
    return A.is_torch(x) and hasattr(x, "detach")


def _host_matrix(weight, name="weight"):
    """(float64 host matrix [L][E] as a numpy array or nested lists, L, E)
    from a tensor, an array or nested lists. Wrong dimensions raise
    ValueError, as DeepSeek's `num_layers, num_logical_experts = weight.shape`
    does."""
    np = _np()
    if _is_tensor(weight):
        dt = str(weight.dtype).replace("torch.", "")
        if dt not in _TORCH_OK:
            raise TypeError(f"{name}: expected an integer or float tensor, got {weight.dtype}")
        shape = tuple(weight.shape)
        if len(shape) != 2:
            raise ValueError(
                f"{name}: expected 2 dimensions (layers, experts), got shape {shape}"
            )
        t = weight.detach().cpu().double().contiguous()
        host = t.numpy() if np is not None else t.tolist()
        return host, shape[0], shape[1]
    if np is not None and not isinstance(weight, (list, tuple)):
        try:
            arr = np.asarray(weight)
        except Exception as e:  # e.g. a ragged object
            raise TypeError(f"{name}: not an array of numbers: {e}") from None
        if arr.dtype.kind not in "iufb":
            raise TypeError(f"{name}: expected an integer or float array, got dtype {arr.dtype}")
        if arr.ndim != 2:
            raise ValueError(
                f"{name}: expected 2 dimensions (layers, experts), got shape {arr.shape}"
            )
        return np.ascontiguousarray(arr, dtype=np.float64), arr.shape[0], arr.shape[1]
    if isinstance(weight, (list, tuple)):
        try:
            flat, shape = A._flatten(weight)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        if len(shape) != 2:
            raise ValueError(
                f"{name}: expected 2 dimensions (layers, experts), got shape {shape}"
            )
        for i, v in enumerate(flat):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                if not hasattr(v, "__float__") or isinstance(v, (str, bytes)):
                    raise TypeError(
                        f"{name}: layer {i // max(shape[1], 1)} expert {i % max(shape[1], 1)}: "
                        f"{v!r} is not a number"
                    )
        L, E = shape
        if np is not None:
            return np.asarray(flat, dtype=np.float64).reshape(L, E), L, E
        return [[float(flat[l * E + e]) for e in range(E)] for l in range(L)], L, E
    raise TypeError(
        f"{name}: expected a torch tensor, a numpy array or nested lists, got {type(weight).__name__}"
    )


def _check_values(host, L, E, float32, name="weight"):
    """One ValueError naming the first negative, NaN or infinite weight (and,
    for DeepSeek's float32 arithmetic, one that overflows float32)."""
    np = _np()
    lim = _FLOAT32_MAX if float32 else float("inf")
    if np is not None and isinstance(host, np.ndarray):
        bad = ~(np.isfinite(host) & (host >= 0) & (host <= lim))
        if not bad.any():
            return
        l, e = (int(i) for i in np.argwhere(bad)[0])
        v = float(host[l, e])
    else:
        bad = next(((l, e) for l in range(L) for e in range(E)
                    if not (math.isfinite(host[l][e]) and 0 <= host[l][e] <= lim)), None)
        if bad is None:
            return
        l, e = bad
        v = host[l][e]
    why = "overflows float32 (DeepSeek's arithmetic)" if v == v and 0 <= v < float("inf") else (
        "must be finite and >= 0"
    )
    raise ValueError(f"{name}: layer {l} expert {e}: weight {v!r} {why}")


def _index(v, name):
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{name}: expected an integer, got {type(v).__name__} {v!r}") from None


def _shape_checks(E, num_replicas, num_groups, num_nodes, num_gpus, mode="auto"):
    """DeepSeek's choice of mode and its checks, in its order, with its
    exceptions: `num_groups % num_nodes` (ZeroDivisionError for 0 nodes),
    then the asserts of rebalance_experts_hierarchical (ZeroDivisionError
    for 0 groups or 0 GPUs, where its `%` divides by zero) and
    replicate_experts (AssertionError for fewer replicas than experts: 0 or
    negative replicas included). A negative group, node or GPU count that
    passes those asserts is a ValueError naming it (DeepSeek's code fails
    later, inside a min() of an empty range or a torch op). mode: "auto"
    (DeepSeek's rebalance_experts), "global" or "hierarchical" (SGLang's
    enable_hierarchical). Returns (replicas, groups, nodes, gpus) as
    planned."""
    R = _index(num_replicas, "num_replicas")
    G = _index(num_gpus, "num_gpus")
    if mode == "global":
        K, N = 1, 1
    else:
        K = _index(num_groups, "num_groups")
        N = _index(num_nodes, "num_nodes")
        if mode == "auto" and K % N != 0:  # DeepSeek's global policy: one group, one node
            K, N = 1, 1
    if E % K != 0:
        raise AssertionError(f"num_groups: {E} experts are not a multiple of {K} groups")
    if K % N != 0:
        raise AssertionError(f"num_groups: {K} groups are not a multiple of {N} nodes")
    if G % N != 0:
        raise AssertionError(f"num_gpus: {G} GPUs are not a multiple of {N} nodes")
    if R % G != 0:
        raise AssertionError(f"num_replicas: {R} replicas are not a multiple of {G} GPUs")
    for v, what in ((K, "num_groups"), (N, "num_nodes"), (G, "num_gpus")):
        if v < 1:
            raise ValueError(f"{what}: {v} must be >= 1")
    if R // N < E // N:  # replicate_experts: assert num_redundant >= 0
        raise AssertionError(f"num_replicas: {R} replicas are fewer than the {E} experts")
    return R, K, N, G


def log2phy_from(phy2log, rank, logcnt=None):
    """DeepSeek's log2phy [L, E, maxlogcnt] (-1 padded) from phy2log [L, R]
    and the replica rank [L, R] (log2phy[l, phy2log[l, i], rank[l, i]] = i).
    numpy in, numpy int64 out; nested lists in, nested lists out."""
    np = _np()
    if np is not None and isinstance(phy2log, np.ndarray):
        p2l = phy2log.astype(np.int64)
        rk = np.asarray(rank, dtype=np.int64)
        L, R = p2l.shape
        if logcnt is None:
            E = int(p2l.max()) + 1 if p2l.size else 0
            maxc = int(rk.max()) + 1 if rk.size else 1
        else:
            lc = np.asarray(logcnt)
            E, maxc = lc.shape[1], int(lc.max()) if lc.size else 1
        out = np.full((L, E * maxc), -1, dtype=np.int64)
        out[np.arange(L)[:, None], p2l * maxc + rk] = np.arange(R, dtype=np.int64)
        return out.reshape(L, E, maxc)
    p2l = [list(map(int, row)) for row in phy2log]
    rk = [list(map(int, row)) for row in rank]
    if logcnt is None:
        E = max((max(r) for r in p2l if r), default=-1) + 1
        maxc = max((max(r) for r in rk if r), default=0) + 1
    else:
        E = len(logcnt[0]) if logcnt else 0
        maxc = max((max(r) for r in logcnt if r), default=1)
    out = []
    for row, rrow in zip(p2l, rk):
        m = [[-1] * maxc for _ in range(E)]
        for i, (e, k) in enumerate(zip(row, rrow)):
            m[e][k] = i
        out.append(m)
    return out


def _plan_maps(host, L, E, R, K, N, G, policy, threads=None):
    """Plans with the library; returns (phy2log, rank, logcnt) as numpy int64
    or nested lists. threads: the planner's threads (None: the library's
    default, the online cores); the plan is the same byte for byte whatever
    the count."""
    np = _np()
    opts = dict(num_gpus=G, num_replicas=R, num_nodes=N, num_groups=K, policy=policy,
                threads=threads)
    if policy == "balanced":
        # Served evenly: plan for per-replica load w/c, with DeepSeek's
        # hierarchical constraint (every replica of a group on its node).
        # The online search: held out, the deep one's in-window gain does not
        # carry over, and it cost up to 18x as much (eplb/plan.h, "effort").
        opts.update(shares="uniform", keep_groups_on_nodes=K > 1 or N > 1, effort="online")
    try:
        with Plan.create(host, **opts) as p:
            p2l = p.phy2log()
            rank = p.replica_rank()
            cnt = p.logcnt()
    except Error as e:
        if e.name == "EPLB_EFORMAT":  # a bad load: the detail names layer and expert
            raise ValueError(f"weight: {e.detail}") from None
        raise
    if np is not None:
        return p2l.astype(np.int64), rank.astype(np.int64), cnt.astype(np.int64)
    p2l, rank, cnt = A.flat_list(p2l), A.flat_list(rank), A.flat_list(cnt)
    return ([p2l[l * R:(l + 1) * R] for l in range(L)], [rank[l * R:(l + 1) * R] for l in range(L)],
            [cnt[l * E:(l + 1) * E] for l in range(L)])


def _checked(weight, num_replicas, num_groups, num_nodes, num_gpus, policy, mode="auto"):
    """(host, L, E, R, K, N, G): weight as a float64 host matrix and the
    counts as planned, every argument checked as DeepSeek checks it, before
    anything is planned."""
    if policy not in COMPAT_POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(COMPAT_POLICIES)}")
    host, L, E = _host_matrix(weight)
    R, K, N, G = _shape_checks(E, num_replicas, num_groups, num_nodes, num_gpus, mode)
    if L == 0 or E == 0:
        # DeepSeek fails in logcnt.max() of an empty tensor (vLLM's numpy
        # port in np.max: a ValueError).
        raise ValueError(f"weight: shape ({L}, {E}): no layers or no experts")
    _check_values(host, L, E, policy == "deepseek")
    return host, L, E, R, K, N, G


def _maps(weight, num_replicas, num_groups, num_nodes, num_gpus, policy, mode="auto",
          threads=None):
    """(phy2log, rank, logcnt, gpus) of weight, checked as DeepSeek checks."""
    host, L, E, R, K, N, G = _checked(weight, num_replicas, num_groups, num_nodes, num_gpus,
                                      policy, mode)
    return _plan_maps(host, L, E, R, K, N, G, policy, threads) + (G,)


def _rebalance(weight, num_replicas, num_groups, num_nodes, num_gpus, policy, mode="auto",
               threads=None):
    p2l, rank, cnt, _ = _maps(weight, num_replicas, num_groups, num_nodes, num_gpus, policy, mode,
                              threads)
    return _wrap(weight, (p2l, log2phy_from(p2l, rank, cnt), cnt))


def _wrap(weight, arrays):
    """Outputs in the input's kind: int64 tensors on the input's device for
    a tensor, else numpy int64 arrays (nested lists without numpy)."""
    if not _is_tensor(weight):
        return arrays
    import torch  # a tensor came in, so torch is importable

    np = _np()
    out = []
    for a in arrays:
        t = torch.from_numpy(a) if np is not None else torch.tensor(a, dtype=torch.int64)
        out.append(t.to(weight.device))
    return tuple(out)


def rebalance_experts(weight, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int,
                      *, policy: str = "balanced"):
    """DeepSeek EPLB's rebalance_experts: (phy2log [L, R], log2phy
    [L, E, maxlogcnt] padded with -1, logcnt [L, E]), int64.

    weight: [layers, experts] loads (tensor on any device, numpy array, nested
    lists; any integer or float dtype). num_replicas: physical experts per
    layer, a multiple of num_gpus. Hierarchical when num_groups % num_nodes
    == 0 (groups packed to nodes; num_groups must divide the experts and
    num_nodes the GPUs), else global (no group check, as DeepSeek).
    policy: "balanced" (eplb's planner for even per-replica shares; never
    worse than DeepSeek's busiest GPU) or "deepseek" (DeepSeek's arrays
    exactly).

    Raises what DeepSeek raises for a bad shape (AssertionError, fewer
    replicas than experts included, 0 or negative; ZeroDivisionError for 0
    nodes, groups or GPUs; ValueError for wrong dimensions), ValueError for
    an empty weight or a negative group, node or GPU count (DeepSeek fails
    inside torch there), ValueError naming the layer and expert of a
    negative, NaN or infinite weight, and eplb.Error for a library limit;
    all of them before anything is planned."""
    return _rebalance(weight, num_replicas, num_groups, num_nodes, num_gpus, policy)


# ---- vLLM ---------------------------------------------------------------------


def _preserve_slots(p2l, rank, old, num_ranks):
    """vLLM's preserve_intragpu_slots: per GPU, an expert the GPU already
    held stays in its old slot; the other replicas fill the free slots in
    order. The replica rank travels with its replica, so log2phy stays
    consistent. Only when the shapes agree (else unchanged)."""
    np = _np()
    L, R = len(p2l), len(p2l[0]) if len(p2l) else 0
    if num_ranks <= 0 or R % num_ranks or old is None:
        return p2l, rank
    old = old.cpu().numpy() if _is_tensor(old) else old
    old = [list(map(int, row)) for row in old]
    if len(old) != L or any(len(r) != R for r in old):
        return p2l, rank
    S = R // num_ranks
    new_p = [list(map(int, r)) for r in p2l]
    new_r = [list(map(int, r)) for r in rank]
    for l in range(L):
        for g in range(num_ranks):
            lo = g * S
            seg = list(zip(new_p[l][lo:lo + S], new_r[l][lo:lo + S]))
            used, placed = [False] * S, [None] * S
            for s in range(S):
                for j in range(S):
                    if not used[j] and seg[j][0] == old[l][lo + s]:
                        used[j], placed[s] = True, seg[j]
                        break
            rest = iter(seg[j] for j in range(S) if not used[j])
            for s in range(S):
                if placed[s] is None:
                    placed[s] = next(rest)
            for s in range(S):
                new_p[l][lo + s], new_r[l][lo + s] = placed[s]
    if np is not None:
        return np.asarray(new_p, dtype=np.int64), np.asarray(new_r, dtype=np.int64)
    return new_p, new_r


class VllmEplbPolicy:
    """Shaped like vLLM's EPLB policy (vllm.distributed.eplb.policy,
    AbstractEplbPolicy / DefaultEplbPolicy): a rebalance_experts classmethod
    returning (phy2log, log2phy, logcnt), as the policy classes of vLLM
    before its policies returned phy2log only (VllmEplbPolicyPhy2Log). Set
    ``policy`` on a subclass to "deepseek" for vLLM's default arrays. The
    plugin eplb.vllm installs a policy into a running vLLM, choosing the
    interface from the installed classes. See docs/compat.md."""

    policy = "balanced"
    #: False: return phy2log only (current vLLM's interface).
    return_maps = True

    @classmethod
    def rebalance_experts(cls, weight, num_replicas: int, num_groups: int, num_nodes: int,
                          num_ranks: int, old_global_expert_indices=None):
        """weight [layers, logical experts] (vLLM's windowed expert load);
        num_ranks: EP ranks (GPUs). old_global_expert_indices [layers,
        replicas] (the current phy2log), when given, keeps experts that stay
        on a GPU in their slot (vLLM's preserve_intragpu_slots)."""
        p2l, rank, cnt, G = _maps(weight, num_replicas, num_groups, num_nodes, num_ranks,
                                  cls.policy)
        if old_global_expert_indices is not None:
            p2l, rank = _preserve_slots(p2l, rank, old_global_expert_indices, G)
        out = _wrap(weight, (p2l, log2phy_from(p2l, rank, cnt), cnt))
        return out if cls.return_maps else out[0]


class VllmEplbPolicyPhy2Log(VllmEplbPolicy):
    """VllmEplbPolicy returning phy2log only, as current vLLM's policies do
    (vLLM derives log2phy and logcnt itself)."""

    return_maps = False


# ---- SGLang -------------------------------------------------------------------


def sglang_rebalance_experts(tokens_per_expert, num_physical_experts: int,
                             num_local_physical_experts: int, num_groups: Optional[int],
                             num_nodes: int, algorithm="auto", *, policy: str = "balanced"):
    """Shaped like SGLang's sglang.srt.eplb.eplb_algorithms.rebalance_experts:
    tokens_per_expert [steps, layers, experts] (SGLang's recorded logical
    counts; a [layers, experts] matrix is taken as one step), summed over the
    steps; num_gpus = num_physical_experts // num_local_physical_experts.
    algorithm: an SGLang EplbAlgorithm or its name: a "*_hierarchical" one
    plans hierarchically (DeepSeek's asserts apply), "deepseek"/"deepseek_vec"
    globally, "auto" hierarchically when num_groups is given and divides by
    num_nodes (SGLang's compute_algorithm). Returns (phy2log, log2phy,
    logcnt) like rebalance_experts."""
    name = getattr(algorithm, "name", algorithm)
    if name not in ("auto", "deepseek", "deepseek_hierarchical", "deepseek_vec",
                    "deepseek_vec_hierarchical"):
        raise ValueError(f"algorithm: {name!r} is not an EPLB algorithm eplb replaces "
                         "(auto, deepseek, deepseek_hierarchical, deepseek_vec, "
                         "deepseek_vec_hierarchical)")
    n_local = _index(num_local_physical_experts, "num_local_physical_experts")
    if n_local < 1:
        raise ValueError(f"num_local_physical_experts: {n_local} must be >= 1")
    num_gpus = _index(num_physical_experts, "num_physical_experts") // n_local
    if name == "auto":
        hier = num_groups is not None and num_groups % num_nodes == 0
    else:
        hier = name.endswith("_hierarchical")
    weight = _sum_steps(tokens_per_expert)
    if hier and num_groups is None:
        raise TypeError("num_groups: a hierarchical algorithm needs the number of groups")
    return _rebalance(weight, num_physical_experts, num_groups, num_nodes, num_gpus, policy,
                      "hierarchical" if hier else "global")


def _sum_steps(t):
    """[steps, L, E] -> [L, E] (SGLang's tokens_per_expert.sum(dim=0)); a 2-D
    input is returned as is."""
    np = _np()
    if _is_tensor(t):
        return t.sum(dim=0) if t.dim() == 3 else t
    if np is not None and not isinstance(t, (list, tuple)):
        a = np.asarray(t)
        return a.sum(axis=0) if a.ndim == 3 else a
    if isinstance(t, (list, tuple)) and t and isinstance(t[0], (list, tuple)) and t[0] and \
            isinstance(t[0][0], (list, tuple)):
        L, E = len(t[0]), len(t[0][0])
        return [[sum(step[l][e] for step in t) for e in range(E)] for l in range(L)]
    return t
