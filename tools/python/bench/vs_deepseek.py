#!/usr/bin/env python3
"""In-process speed of the drop-in default against DeepSeek's EPLB (issue 35).

Times DeepSeek's ``rebalance_experts`` (github.com/deepseek-ai/EPLB eplb.py,
torch CPU tensors) against ``eplb.compat.rebalance_experts`` (policy
"balanced", uniform shares: the drop-in default) on the same weight, in one
process, on held-out cases: loads planned from one window of a trace.

    EPLB_LIBRARY=build/libeplb.so PYTHONPATH=tools/python \\
        python3 tools/python/bench/vs_deepseek.py [--runs 9] [--case NAME ...]

Needs torch (CPU is enough) and numpy; without them it prints why and exits
0. DeepSeek's eplb.py is read by file path (its module name is the same as
this package's): --deepseek PATH, else $DEEPSEEK_EPLB, else
deepseek_eplb.py next to this script.

Per case: the median of --runs timed calls (after --warmup untimed ones) of
each, both given the same weight (int64 counts as a CPU torch tensor, what
vLLM passes; --input numpy gives eplb a numpy array instead); DeepSeek with
torch.set_num_threads(1) (and with torch's default threads unless
--no-default-threads), eplb with one planner thread (what EPLB_PLAN_THREADS=1
asks of the plugins) and with the library's default (the online cores). The
ratio is DeepSeek's time over eplb's. Balancedness (mean GPU load / busiest
GPU load, averaged over layers) of both plans under even per-replica shares
(what the stacks serve), on the planning window and on the held-out window,
so that speed is not bought with quality.

The last line says whether every case is at least --target (5) times faster.
--dump FILE writes eplb's arrays of every case (npz), to check that a change
to the binding leaves them byte for byte the same (--check FILE).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]


def _skip(why):
    print(f"vs_deepseek: skipped: {why}")
    sys.exit(0)


def _deepseek_module(path):
    spec = importlib.util.spec_from_file_location("deepseek_eplb", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- cases --------------------------------------------------------------------


def _esft_counts(np):
    """Per-layer expert counts [26, 64] of the bundled ESFT DeepSeek-V2-Lite
    routing (traces/samples/esft-dsv2lite/topk_ids.npy, [tokens, 26, 6]):
    the first half of the tokens (the planning window) and the second half
    (held out)."""
    ids = np.load(REPO / "traces" / "samples" / "esft-dsv2lite" / "topk_ids.npy")
    T, L, _ = ids.shape
    half = T // 2

    def counts(part):
        return np.stack([np.bincount(part[:, l, :].ravel(), minlength=64) for l in range(L)])

    return counts(ids[:half]).astype(np.int64), counts(ids[half:]).astype(np.int64)


def _zipf_counts(np, L, E, tokens, seed, s=1.0, drift=0.1):
    """Zipf-like [L, E] counts (a shuffled 1/rank^s popularity per layer,
    multinomial draws of `tokens` routed slots), the planning window and a
    held-out window drawn from a popularity that drifted by `drift`."""
    rng = np.random.default_rng(seed)
    plan, held = [], []
    for _ in range(L):
        p = 1.0 / np.arange(1, E + 1) ** s
        p = p[rng.permutation(E)]
        p /= p.sum()
        q = p * np.exp(drift * rng.standard_normal(E))
        q /= q.sum()
        plan.append(rng.multinomial(tokens, p))
        held.append(rng.multinomial(tokens, q))
    return np.asarray(plan, dtype=np.int64), np.asarray(held, dtype=np.int64)


def cases(np):
    """(name, plan counts, held-out counts, replicas, groups, nodes, gpus)."""
    out = []
    esft, esft_held = _esft_counts(np)
    # DeepSeek-V2-Lite routes without groups (n_group 1): one group, which
    # 2 nodes do not divide, so DeepSeek (and eplb) plan globally.
    for nodes, per in ((2, 4), (2, 8)):
        for R in (80, 160):
            out.append((f"esft-v2lite {nodes}x{per} R{R}", esft, esft_held, R, 1, nodes,
                        nodes * per))
    # DeepSeek-V3: 58 MoE layers x 256 experts in 8 groups, 4 nodes x 8 GPUs, 288 replicas.
    v3, v3_held = _zipf_counts(np, 58, 256, 8 * 4096, seed=3)
    out.append(("dsv3 4x8 R288 g8", v3, v3_held, 288, 8, 4, 32))
    # Qwen3-235B-A22B: 94 layers x 128 experts (top-8), EP64 (8 nodes x 8), 192 replicas.
    qw, qw_held = _zipf_counts(np, 94, 128, 8 * 4096, seed=235)
    out.append(("qwen3-235b EP64 R192", qw, qw_held, 192, 1, 8, 64))
    # Mixtral-like: 32 layers x 8 experts (top-2), 8 GPUs, 16 replicas.
    mx, mx_held = _zipf_counts(np, 32, 8, 2 * 4096, seed=8, s=0.6)
    out.append(("mixtral-like 8e G8 R16", mx, mx_held, 16, 1, 1, 8))
    return out


# ---- measures -----------------------------------------------------------------


def balancedness(np, counts, phy2log, logcnt, gpus):
    """Mean over layers of mean GPU load / busiest GPU load when every
    replica gets 1/logcnt of its expert's tokens (slots GPU-major)."""
    w = np.asarray(counts, dtype=np.float64)
    p2l = np.asarray(phy2log, dtype=np.int64)
    cnt = np.asarray(logcnt, dtype=np.float64)
    L, R = p2l.shape
    per = np.take_along_axis(w / cnt, p2l, axis=1)  # [L, R] per-replica load
    gpu = per.reshape(L, gpus, R // gpus).sum(axis=2)
    mx = gpu.max(axis=1)
    return float(np.mean(np.where(mx > 0, gpu.mean(axis=1) / np.where(mx > 0, mx, 1), 1.0)))


def timed(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _ms(s):
    return f"{s * 1e3:9.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9, help="timed runs per call (median; default 9)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    ap.add_argument("--deepseek", help="DeepSeek's eplb.py (default: $DEEPSEEK_EPLB, else "
                    "deepseek_eplb.py beside this script)")
    ap.add_argument("--case", action="append", help="only cases whose name contains this")
    ap.add_argument("--input", choices=("torch", "numpy"), default="torch",
                    help="what eplb is given: the int64 CPU tensor DeepSeek gets (vLLM's "
                    "call), or the same counts as a numpy array")
    ap.add_argument("--target", type=float, default=5.0, help="speed-up every case needs")
    ap.add_argument("--no-default-threads", action="store_true",
                    help="time only the one-thread settings")
    ap.add_argument("--dump", help="write eplb's arrays of every case to this .npz")
    ap.add_argument("--check", help="compare eplb's arrays of every case with this .npz")
    args = ap.parse_args(argv)

    try:
        import numpy as np
    except ImportError:
        _skip("numpy is not installed")
    try:
        import torch
    except ImportError:
        _skip("torch is not installed (pip install torch; the CPU build is enough)")
    ds_path = args.deepseek or os.environ.get("DEEPSEEK_EPLB") or str(HERE / "deepseek_eplb.py")
    if not os.path.isfile(ds_path):
        _skip(f"DeepSeek's eplb.py not found at {ds_path} (github.com/deepseek-ai/EPLB; "
              "--deepseek PATH or $DEEPSEEK_EPLB)")
    sys.path.insert(0, str(REPO / "tools" / "python"))
    from eplb import compat

    ds = _deepseek_module(ds_path)

    default_threads = torch.get_num_threads()
    settings = [("1", 1, 1)]  # (label, torch threads, eplb planner threads)
    if not args.no_default_threads:
        settings.append((f"default (torch {default_threads}, eplb {os.cpu_count()})",
                         default_threads, None))

    selected = [c for c in cases(np)
                if not args.case or any(s in c[0] for s in args.case)]
    if not selected:
        _skip("no case matches --case")

    dumped, failures, mismatches = {}, [], []
    print(f"torch {torch.__version__}, numpy {np.__version__}, python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs; median of {args.runs} runs "
          f"after {args.warmup} warm-up; eplb input: {args.input}")
    print(f"DeepSeek: {ds_path}")
    for label, tthreads, ethreads in settings:
        torch.set_num_threads(tthreads)
        print(f"\nthreads: {label}")
        print(f"{'case':26} {'L':>3} {'E':>4} {'R':>4} {'K':>2} {'N':>2} {'G':>3}"
              f" {'DeepSeek ms':>11} {'eplb ms':>9} {'ratio':>7}"
              f" {'bal DS':>7} {'bal eplb':>8} {'held DS':>7} {'held eplb':>9}")
        for name, counts, held, R, K, N, G in selected:
            L, E = counts.shape
            w_t = torch.from_numpy(counts.copy())  # int64 CPU tensor
            w_e = w_t if args.input == "torch" else counts.copy()

            def run_ds():
                return ds.rebalance_experts(w_t, R, K, N, G)

            if ethreads is None:  # the drop-in itself: the library's default threads
                def run_eplb():
                    return compat.rebalance_experts(w_e, R, K, N, G)
            else:  # the same call with the planner's threads set (as EPLB_PLAN_THREADS does)
                def run_eplb():
                    return compat._rebalance(w_e, R, K, N, G, "balanced", threads=ethreads)

            t_ds = timed(run_ds, args.runs, args.warmup)
            t_ep = timed(run_eplb, args.runs, args.warmup)
            d_p2l, _, d_cnt = (x.numpy() if hasattr(x, "numpy") else x for x in run_ds())
            e_p2l, e_l2p, e_cnt = (x.numpy() if hasattr(x, "numpy") else x for x in run_eplb())
            ratio = t_ds / t_ep
            b = [balancedness(np, c, p, n, G) for c in (counts, held)
                 for p, n in ((d_p2l, d_cnt), (e_p2l, e_cnt))]
            print(f"{name:26} {L:3d} {E:4d} {R:4d} {K:2d} {N:2d} {G:3d} {_ms(t_ds):>11}"
                  f" {_ms(t_ep)} {ratio:6.1f}x {b[0]:7.4f} {b[1]:8.4f} {b[2]:7.4f} {b[3]:9.4f}")
            sys.stdout.flush()
            if ratio < args.target:
                failures.append(f"{name} [threads {label}]: {ratio:.2f}x")
            key = name.replace(" ", "_")
            for part, a in (("phy2log", e_p2l), ("log2phy", e_l2p), ("logcnt", e_cnt)):
                a = np.ascontiguousarray(a)
                prev = dumped.setdefault(f"{key}.{part}", a)
                if prev.dtype != a.dtype or prev.shape != a.shape or \
                        prev.tobytes() != a.tobytes():
                    mismatches.append(f"{key}.{part}: differs between thread settings")

    if args.dump:
        np.savez(args.dump, **dumped)
        print(f"\nwrote eplb's arrays of {len(selected)} cases to {args.dump}")
    if args.check:
        ref = np.load(args.check)
        for k, a in dumped.items():
            if k not in ref.files:
                mismatches.append(f"{k}: not in {args.check}")
            elif ref[k].dtype != a.dtype or ref[k].shape != a.shape or \
                    ref[k].tobytes() != a.tobytes():
                mismatches.append(f"{k}: differs from {args.check}")
        print(f"\nchecked eplb's arrays of {len(selected)} cases against {args.check}: "
              f"{'identical' if not mismatches else 'DIFFERENT'}")
    for m in mismatches:
        print(f"MISMATCH {m}")

    print()
    if failures:
        print(f"NOT every case is >= {args.target:g}x faster than DeepSeek's EPLB: "
              + "; ".join(failures))
    else:
        print(f"every case is >= {args.target:g}x faster than DeepSeek's EPLB "
              f"({len(selected)} cases x {len(settings)} thread settings)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
