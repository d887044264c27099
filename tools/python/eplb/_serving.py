"""What the serving-stack plugins (eplb.vllm, eplb.sglang) share: the policy
setting, the planner's threads, and results as the stack's tensors."""

from __future__ import annotations

import os
from typing import Optional

from . import _arrays as A

#: The policies the plugins take. Both are deterministic: the same loads give
#: the same map, byte for byte, on every rank and with any thread count.
#: "mip" is refused: it stops at a time limit, so two ranks could disagree.
ADAPTER_POLICIES = ("balanced", "deepseek")

_ON = {"1", "true", "on", "yes"}
_OFF = {"", "0", "false", "off", "no"}

#: Threads of each plan (0: the online cores, the library's default).
ENV_THREADS = "EPLB_PLAN_THREADS"


def policy_setting(value: Optional[str], var: str) -> Optional[str]:
    """The policy a plugin setting names: None when off (unset, "", "0",
    "off", "false", "no"), "balanced" for "1"/"on"/"true"/"yes", else the
    name itself when it is one of ADAPTER_POLICIES; ValueError otherwise
    (mip included: its time limit makes the map depend on the machine)."""
    v = (value or "").strip().lower()
    if v in _OFF:
        return None
    if v in _ON:
        return "balanced"
    if v == "mip":
        raise ValueError(
            f"{var}=mip: refused: the mip policy stops at a time limit, so ranks planning the "
            "same loads could get different maps; use balanced"
        )
    if v not in ADAPTER_POLICIES:
        raise ValueError(f"{var}={value!r}: expected 1, {' or '.join(ADAPTER_POLICIES)} "
                         "(unset or 0: off)")
    return v


def check_policy(policy: str) -> str:
    if policy == "mip":
        raise ValueError("policy: 'mip' is refused: it stops at a time limit, so ranks planning "
                         "the same loads could get different maps; use balanced")
    if policy not in ADAPTER_POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(ADAPTER_POLICIES)}")
    return policy


def env_int(var: str, default, lo: int = 0, environ=None, words=()):
    """An integer >= lo from the environment (default when unset or empty);
    a word of `words` is returned as is. ValueError naming the variable."""
    env = os.environ if environ is None else environ
    raw = env.get(var, "").strip()
    if not raw:
        return default
    if raw.lower() in words:
        return raw.lower()
    try:
        v = int(raw, 10)
    except ValueError:
        raise ValueError(f"{var}={raw!r}: expected an integer >= {lo}"
                         + (f" or {' / '.join(words)}" if words else "")) from None
    if v < lo:
        raise ValueError(f"{var}={raw!r}: expected an integer >= {lo}")
    return v


def env_float(var: str, default, environ=None):
    env = os.environ if environ is None else environ
    raw = env.get(var, "").strip()
    if not raw:
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r}: expected a number >= 0") from None
    if not v >= 0 or v == float("inf"):
        raise ValueError(f"{var}={raw!r}: expected a finite number >= 0")
    return v


def plan_threads(environ=None) -> Optional[int]:
    return env_int(ENV_THREADS, None, 0, environ)


def host(x):
    """A tensor on any device as a CPU tensor (detached); anything else as is."""
    if A.is_torch(x) and hasattr(x, "cpu"):
        x = x.detach() if hasattr(x, "detach") else x
        return x.cpu()
    return x


def torch_or_none():
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    return torch


def as_tensor(arr, want_tensor: bool):
    """arr (numpy int64, or nested lists) as a CPU int64 torch tensor when
    want_tensor (the stack passed tensors and torch is importable), else
    as is."""
    if not want_tensor:
        return arr
    torch = torch_or_none()
    if torch is None:
        return arr
    np = A.np
    if np is not None and isinstance(arr, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.int64))
    return torch.tensor(arr, dtype=torch.int64)
