#!/usr/bin/env python3
"""A toy MoE decode loop that keeps its expert-parallel GPUs balanced with eplb.

The router is replaced by real routing decisions: the bundled ESFT trace
(DeepSeek-V2-Lite architecture, 26 MoE layers, 64 experts, top-6), read in
order, `--batch` tokens per step. Each MoE layer of the toy model:
  1. records the router's top-k ids          (Runtime.record)
  2. maps them to physical expert slots       (Runtime.map)
  3. runs the experts held in this rank's slots on the tokens mapped there
     (a small numpy matmul with the slot's registered weights)
and the step ends with Runtime.step_end(), which all-reduces the statistics,
replans every --interval steps on a background thread and migrates expert
weights between the ranks' registered buffers.

Two modes:
  runtime  one process per GPU under MPI:
             mpirun -np 8 python3 serving_loop.py
           (eplb's runtime with the MPI communicator; checks at the end that
           every slot's weights are the weights of the expert the plan puts
           there, i.e. migrations moved the right bytes).
  planner  one process standing in for all GPUs (no MPI): the same loop with
           the planner and split APIs: plan from the recorded window every
           --interval steps, re-split each batch's tokens over the placement
           (LPLB-style), per-GPU loads from the shares.
Both print the mean balancedness (mean GPU tokens / busiest GPU's tokens,
averaged over layers and steps) before the first rebalance and after it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the eplb package next to this folder

import eplb  # noqa: E402

DEFAULT_TRACE = HERE.parents[2] / "traces" / "samples" / "esft-dsv2lite" / "topk_ids.npy"
D = 16  # toy hidden size


def expert_weights(layer: int, expert: int) -> np.ndarray:
    """The 'true' weights of a logical expert (deterministic)."""
    rng = np.random.default_rng(layer * 100003 + expert)
    return rng.standard_normal((D, D), dtype=np.float32)


def batches(ids: np.ndarray, batch: int, steps: int):
    T = ids.shape[0]
    for s in range(steps):
        lo = (s * batch) % T
        idx = np.arange(lo, lo + batch) % T
        yield s, ids[idx]  # [batch, L, k]


def balancedness(gpu_tokens: np.ndarray) -> float:
    """Mean over layers of mean/max GPU tokens; gpu_tokens is [L, G]."""
    mx = gpu_tokens.max(axis=1)
    b = np.where(mx > 0, gpu_tokens.mean(axis=1) / np.maximum(mx, 1e-300), 1.0)
    return float(b.mean())


def report(args, before, after, extra):
    out = {
        "mode": args.mode,
        "steps": args.steps,
        "balancedness_before": float(np.mean(before)) if before else None,
        "balancedness_after": float(np.mean(after)) if after else None,
        **extra,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"mode {out['mode']}: {args.steps} steps of {args.batch} tokens")
        print(f"balancedness before rebalancing: {out['balancedness_before']:.4f}")
        print(f"balancedness after rebalancing:  {out['balancedness_after']:.4f}")
        for k, v in extra.items():
            print(f"{k}: {v}")


def run_runtime(args, ids):
    rank, world = eplb.mpi_init()
    L, k = ids.shape[1], ids.shape[2]
    E = args.experts
    S = max(args.slots, -(-E // world) + 2)  # a few spare slots per rank for replicas
    rpn = math.gcd(world, args.ranks_per_node)
    rt = eplb.Runtime(
        num_layers=L, num_experts=E, topk=k, slots_per_rank=S, world_size=world, rank=rank,
        ranks_per_node=rpn, comm="mpi", expert_bytes=D * D * 4,
        interval_steps=args.interval, window_steps=args.window, layers_per_step=L,
        gain_threshold=0.0,
    )
    # This rank's expert slots: one weight buffer per (layer, local slot),
    # filled with the expert the initial plan puts there.
    weights = np.zeros((L, S, D, D), dtype=np.float32)
    for l in range(L):
        p2l, _ = rt.layer_plan(l)
        for s in range(S):
            weights[l, s] = expert_weights(l, int(p2l[rank * S + s]))
            rt.register_weights(l, s, weights[l, s])
    x = np.random.default_rng(rank).standard_normal((args.batch, D), dtype=np.float32)
    slots = np.empty((args.batch // world + 1, k), dtype=np.int32)
    before, after = [], []
    for step, b in batches(ids, args.batch, args.steps):
        mine = b[rank::world]  # this rank's share of the batch (data-parallel attention)
        n = mine.shape[0]
        gpu_tokens = np.zeros((L, world), dtype=np.float64)
        epoch = rt.epoch
        for l in range(L):
            topk = np.ascontiguousarray(mine[:, l, :], dtype=np.int32)
            rt.record(l, topk)
            out = rt.map(l, topk, token_base=step * args.batch + rank * n, out=slots[:n])
            gpu_tokens[l] = np.bincount(out.ravel() // S, minlength=world)
            # The experts of this rank's slots run on the tokens mapped to them
            # (stand-in for the all-to-all dispatch and the grouped GEMM).
            local = out // S == rank
            for s in np.unique(out[local] % S):
                rows = np.nonzero((out == rank * S + s).any(axis=1))[0]
                np.tanh(x[rows] @ weights[l, s])
        rt.allreduce(gpu_tokens)  # every rank's tokens per GPU
        (after if epoch > 0 else before).append(balancedness(gpu_tokens))
        rt.step_end()
    # Migrations must have moved the right weights into every slot.
    bad = 0
    for l in range(L):
        p2l, _ = rt.layer_plan(l)
        for s in range(S):
            bad += not np.array_equal(weights[l, s], expert_weights(l, int(p2l[rank * S + s])))
    bad_all = np.array([float(bad)])
    rt.allreduce(bad_all)
    m = rt.metrics()
    rt.close()
    if rank == 0:
        report(args, before, after, {
            "ranks": world, "rebalances": m["rebalances"], "slots_moved": m["slots_moved"],
            "bytes_moved": sum(m["bytes_moved"]), "epoch": m["epoch"],
            "slots_with_wrong_weights": int(bad_all[0]),
        })
    eplb.mpi_finalize()
    return 1 if bad_all[0] else 0


def run_planner(args, ids):
    G, S = args.gpus, args.slots
    L, k = ids.shape[1], ids.shape[2]
    E = args.experts
    R = G * S
    # Before any statistics: the plan of uniform loads (what a fresh runtime uses).
    current = eplb.plan(np.ones((L, E)), num_gpus=G, num_replicas=R,
                        num_nodes=max(1, G // args.ranks_per_node))
    solver = eplb.SplitSolver()
    window = []  # ring of per-step counts [L, E]
    before, after = [], []
    rebalanced = False
    spg = current.slots_per_gpu
    for step, b in batches(ids, args.batch, args.steps):
        counts = np.zeros((L, E), dtype=np.float64)
        for l in range(L):  # record: count the router's choices
            counts[l] = np.bincount(b[:, l, :].ravel(), minlength=E)
        gpu_tokens = np.empty((L, G))
        for l in range(L):
            if rebalanced:  # map: re-split this batch over the placement
                r = solver.solve(counts[l], current.phy2log(l), spg)
                gpu_tokens[l] = r.gpu_load
            else:  # the plan's own shares
                p2l, share = current.phy2log(l), current.share(l)
                per_slot = counts[l][p2l] * share
                gpu_tokens[l] = per_slot.reshape(G, S).sum(axis=1)
        (after if rebalanced else before).append(balancedness(gpu_tokens))
        window.append(counts)
        window = window[-args.window:]
        if args.interval and (step + 1) % args.interval == 0:  # step_end: replan
            new = eplb.plan(np.sum(window, axis=0), num_gpus=G, num_replicas=R,
                            num_nodes=max(1, G // args.ranks_per_node))
            current.close()
            current = new
            rebalanced = True
    s = current.summary()
    current.close()
    solver.close()
    report(args, before, after, {"gpus": G, "last_plan_window_balancedness": round(s.mean_balancedness, 4)})
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["auto", "runtime", "planner"], default="auto",
                    help="auto: runtime under mpirun, else planner")
    ap.add_argument("--trace", default=str(DEFAULT_TRACE), help="top-k ids .npy [tokens, L, k]")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=256, help="tokens per step (all ranks)")
    ap.add_argument("--gpus", type=int, default=8, help="planner mode: GPUs simulated")
    ap.add_argument("--slots", type=int, default=10, help="expert slots per GPU")
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--interval", type=int, default=20, help="steps between plans")
    ap.add_argument("--window", type=int, default=20, help="steps in the statistics window")
    ap.add_argument("--layers", type=int, default=0, help="use the first N layers (0 = all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ids = np.load(args.trace, mmap_mode="r")
    if args.layers:
        ids = ids[:, : args.layers]
    args.experts = int(ids.max()) + 1
    if args.mode == "auto":
        args.mode = "runtime" if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ else "planner"
    if args.mode == "runtime":
        return run_runtime(args, ids)
    return run_planner(args, ids)


if __name__ == "__main__":
    sys.exit(main())
