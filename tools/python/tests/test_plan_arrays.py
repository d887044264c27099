"""Plan.from_arrays (eplb_plan_from_arrays): a plan from a serving stack's
phy2log, checked as a plan file is, and incremental planning from it."""

import json
import os
import subprocess
import sys
import textwrap
import unittest

import eplb
from eplb import Plan
from eplb._plan_arrays import PlanArraysC, available
from support import REPO, TempDirCase, needs_numpy, np

fl = eplb._arrays.flat_list

# 3 layers, 8 experts, 4 GPUs of 3 slots on 2 nodes: experts 0-3 twice, 4-7 once.
L, E, G, S = 3, 8, 4, 3
R = G * S
P2L = [[(r % E) for r in range(R)] for _ in range(L)]


@unittest.skipUnless(available(), "this libeplb has no eplb_plan_from_arrays")
class FromArrays(TempDirCase):
    def test_layout(self):
        import ctypes

        # The header's layout: 5 uint32, 3 pointers (8-aligned), an enum.
        self.assertEqual(PlanArraysC.phy2log.offset, 32)
        self.assertEqual(ctypes.sizeof(PlanArraysC), 56 if ctypes.sizeof(ctypes.c_void_p) == 8
                         else ctypes.sizeof(PlanArraysC))

    def test_uniform_shares_and_file_round_trip(self):
        for p2l in (P2L, *( [np.array(P2L, dtype=dt) for dt in (np.int64, np.int32, np.uint8)]
                            if np is not None else [])):
            with Plan.from_arrays(p2l, num_gpus=G, num_nodes=2, num_experts=E) as p:
                self.assertEqual((p.num_layers, p.num_experts, p.num_gpus, p.num_nodes,
                                  p.num_slots), (L, E, G, 2, R))
                self.assertEqual(p.policy, "deepseek")
                self.assertEqual(fl(p.phy2log()), sum(P2L, []))
                self.assertEqual(fl(p.share(0)), [0.5 if e < 4 else 1.0 for e in P2L[0]])
                path = self.tmp / "p.json"
                p.write(path)
                with Plan.read(path) as q:  # the same plan as the file that says the same
                    self.assertEqual(fl(q.phy2log()), fl(p.phy2log()))
                    self.assertEqual(fl(q.share()), fl(p.share()))

    def test_file_equivalent(self):
        """A plan file with the same phy2log reads to the same plan."""
        doc = {"format": "eplb-plan", "version": 1, "num_layers": L, "num_logical_experts": E,
               "num_gpus": G, "num_nodes": 2, "slots_per_gpu": S,
               "layers": [{"phy2log": row} for row in P2L]}
        path = self.tmp / "min.json"
        path.write_text(json.dumps(doc))
        with Plan.read(path) as f, Plan.from_arrays(P2L, num_gpus=G, num_nodes=2) as a:
            self.assertEqual(fl(f.phy2log()), fl(a.phy2log()))
            self.assertEqual(fl(f.share()), fl(a.share()))
            self.assertEqual(fl(f.slots_per_gpu), fl(a.slots_per_gpu))

    def test_shares_slots_policy(self):
        sh = [[0.75 if (e < 4 and r < E) else 0.25 if e < 4 else 1.0 for r, e in enumerate(row)]
              for row in P2L]
        spg = [4, 2, 3, 3]
        with Plan.from_arrays(P2L, sh, num_gpus=G, slots_per_gpu=spg, policy="balanced") as p:
            self.assertEqual(fl(p.share(1))[0], 0.75)
            self.assertEqual(fl(p.slots_per_gpu), spg)
            self.assertEqual(p.policy, "balanced")

    def test_errors_like_a_plan_file(self):
        bad = [row[:] for row in P2L]
        bad[2][5] = E  # an id out of range: EPLB_ERANGE naming layer and slot
        with self.assertRaises(eplb.Error) as cm:
            Plan.from_arrays(bad, num_gpus=G, num_experts=E)
        self.assertEqual(cm.exception.name, "EPLB_ERANGE")
        self.assertIn("layer 2 slot 5", cm.exception.detail)
        bad[2][5] = -1
        with self.assertRaises(eplb.Error) as cm:
            Plan.from_arrays(bad, num_gpus=G, num_experts=E)
        self.assertEqual(cm.exception.name, "EPLB_ERANGE")
        bad[2][5] = 2**40  # would wrap into range as int32: refused before the cast
        with self.assertRaises(eplb.Error) as cm:
            Plan.from_arrays(bad, num_gpus=G, num_experts=E)
        self.assertEqual(cm.exception.name, "EPLB_ERANGE")
        self.assertIn("layer 2 slot 5", cm.exception.detail)
        # An expert without a replica (expert 8 of 9): EPLB_EFORMAT.
        with self.assertRaises(eplb.Error) as cm:
            Plan.from_arrays(P2L, num_gpus=G, num_experts=E + 1)
        self.assertIn(cm.exception.name, ("EPLB_EFORMAT", "EPLB_ESHAPE"))
        with self.assertRaises(eplb.Error) as cm:
            Plan.from_arrays(P2L, num_gpus=G, num_experts=E + 1 + R)  # more experts than slots
        self.assertEqual(cm.exception.name, "EPLB_ESHAPE")
        for g, n in ((5, 1), (0, 1), (4, 3)):  # slots do not split; no GPU; GPUs % nodes
            with self.assertRaises(eplb.Error) as cm:
                Plan.from_arrays(P2L, num_gpus=g, num_nodes=n)
            self.assertEqual(cm.exception.name, "EPLB_ESHAPE")
        sh = [[1.0] * R for _ in range(L)]
        sh[1][3] = float("nan")
        with self.assertRaises(eplb.Error) as cm:
            Plan.from_arrays(P2L, sh, num_gpus=G)
        self.assertEqual(cm.exception.name, "EPLB_EFORMAT")
        self.assertIn("layer 1 slot 3", cm.exception.detail)
        with self.assertRaises(eplb.Error):  # shares of an expert not summing to 1
            Plan.from_arrays(P2L, [[1.0] * R for _ in range(L)], num_gpus=G)
        # The binding's own types, before any C call.
        with self.assertRaises(ValueError):
            Plan.from_arrays([1, 2, 3], num_gpus=1)
        with self.assertRaises(ValueError):
            Plan.from_arrays([[0, 1], [2]], num_gpus=1)
        with self.assertRaises(TypeError):
            Plan.from_arrays([[0, 1.5]], num_gpus=1)
        with self.assertRaises(TypeError):
            Plan.from_arrays("0 1", num_gpus=1)
        with self.assertRaises(eplb.IntRangeError):
            Plan.from_arrays(P2L, num_gpus=-1)
        with self.assertRaises(eplb.IntRangeError):
            Plan.from_arrays(P2L, num_gpus=2**32 + G)
        with self.assertRaises(ValueError):  # slots_per_gpu of the wrong length
            Plan.from_arrays(P2L, num_gpus=G, slots_per_gpu=[6, 6])

    @needs_numpy
    def test_numpy_dtypes(self):
        with self.assertRaises(TypeError):
            Plan.from_arrays(np.array(P2L, dtype=np.float64), num_gpus=G)
        with self.assertRaises(ValueError):
            Plan.from_arrays(np.array(P2L)[None], num_gpus=G)
        a = np.array(P2L, dtype=np.int64)[:, ::-1]  # not contiguous: copied
        with Plan.from_arrays(a, num_gpus=G) as p:
            self.assertEqual(p.phy2log().tolist(), a.tolist())

    def test_incremental_from_a_stack_map(self):
        """The map a stack serves is where incremental starts: a hot expert
        with one replica gains one, at most move_budget slots a layer."""
        loads = [[10.0] * 4 + [100.0] * 4 for _ in range(L)]
        with Plan.from_arrays(P2L, num_gpus=G, num_nodes=2) as cur:
            for budget in (1, 2, 4):
                with eplb.plan(loads, G, R, num_nodes=2, policy="incremental", from_plan=cur,
                               move_budget=budget) as nxt:
                    for l in range(L):
                        moved = sum(a != b for a, b in zip(fl(nxt.phy2log(l)), P2L[l]))
                        self.assertLessEqual(moved, budget)
                        if budget >= 2:  # one slot alone may not pay (the C test's case)
                            self.assertGreaterEqual(moved, 1)
                    self.assertLessEqual(nxt.summary().slots_moved, budget * L)


NO_NUMPY = textwrap.dedent(
    """
    import array, eplb, eplb.vllm, eplb.sglang
    assert not eplb.have_numpy()
    p2l = [[r % 8 for r in range(12)] for _ in range(3)]
    with eplb.Plan.from_arrays(p2l, num_gpus=4, num_nodes=2) as p:
        assert p.phy2log().tolist() == p2l
    flat = memoryview(array.array("i", sum(p2l, []))).cast("B").cast("i", [3, 12])
    with eplb.Plan.from_arrays(flat, num_gpus=4) as p:
        assert p.phy2log().tolist() == p2l
    try:
        eplb.Plan.from_arrays([[0, 1, 2, 9]], num_gpus=2, num_experts=4)
        raise SystemExit("out of range accepted")
    except eplb.Error as e:
        assert e.name == "EPLB_ERANGE" and "layer 0 slot 3" in e.detail, e
    w = [[1, 2, 3, 40, 5, 6, 7, 80]] * 3
    new, rank, cnt = eplb.vllm.rebalance(w, 12, 2, 2, 4, p2l, move_budget=2)
    assert all(sum(a != b for a, b in zip(x, y)) <= 2 for x, y in zip(new, p2l)), new
    assert all(sum(c) == 12 for c in cnt)
    out = eplb.sglang.rebalance_experts([w, w], 12, 3, 2, 2, "deepseek_hierarchical")
    assert len(out[0]) == 3 and len(out[0][0]) == 12
    print("ok")
    """
)


class NoNumpy(TempDirCase):
    def test_without_numpy(self):
        env = dict(os.environ, EPLB_NO_NUMPY="1", PYTHONPATH=str(REPO / "tools" / "python"))
        p = subprocess.run([sys.executable, "-c", NO_NUMPY], capture_output=True, text=True,
                           env=env, timeout=60, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "ok")
