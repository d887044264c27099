"""eplb.compat: DeepSeek EPLB's rebalance_experts, vLLM's policy class and
SGLang's algorithm hook. DeepSeek's arrays are checked against its README
example and the conformance vectors of traces/samples/eplb-reference, and
against deepseek_ref (an independent numpy model of eplb.py) on random
shapes; the properties are those vLLM's and SGLang's tests check."""

import json
import sys
import types
import unittest

import eplb
from eplb import compat
from eplb.compat import VllmEplbPolicy, VllmEplbPolicyPhy2Log, rebalance_experts, sglang_rebalance_experts
from support import SAMPLES, needs_numpy, np

try:
    import deepseek_ref
except ImportError:  # needs numpy
    deepseek_ref = None

README_W = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
            [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
# DeepSeek EPLB's README output (also vLLM's test_basic_rebalance).
README_P2L = [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
              [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]
README_CNT = [[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1], [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1]]
# log2phy in DeepSeek's replica order (phyrank); deepseek_ref gives the same.
README_L2P = [[[12, -1], [15, 13], [11, -1], [6, -1], [7, 5], [0, 2], [1, -1], [3, -1], [4, -1],
               [9, -1], [8, 10], [14, -1]],
              [[13, -1], [15, 11], [8, -1], [14, -1], [9, -1], [10, 12], [2, 4], [0, -1], [6, 3],
               [7, -1], [1, -1], [5, -1]]]

REF = SAMPLES / "eplb-reference"


def ref_cases():
    """(name, weight, (R, K, N, G), phy2log or None, logcnt or None)."""
    out = []
    for c in json.loads((REF / "cases.json").read_text()):
        args = (c["num_replicas"], c["num_groups"], c["num_nodes"], c["num_gpus"])
        if c["loads"] is None:
            out.append((c["case"], np.array(c["weight"]), args, np.array(c["eplb_phy2log"]),
                        np.array(c["eplb_logcnt"])))
        else:
            rd = lambda n, dt: np.loadtxt(REF / n, delimiter=",", dtype=dt, ndmin=2)
            out.append((c["case"], rd(c["loads"], np.float64), args,
                        rd(c["case"] + "_eplb_phy2log.csv", np.int64),
                        rd(c["case"] + "_eplb_logcnt.csv", np.int64)))
    return out


def gpu_max(w, p2l, cnt, G):
    """Busiest GPU per layer when every replica gets 1/c of its expert."""
    L, R = p2l.shape
    per = np.take_along_axis(np.asarray(w, dtype=np.float64), p2l, 1) / np.take_along_axis(cnt, p2l, 1)
    return per.reshape(L, G, R // G).sum(-1).max(-1)


class Checks(unittest.TestCase):
    def check_maps(self, w, R, K, N, G, out):
        """vLLM's and SGLang's properties of (phy2log, log2phy, logcnt)."""
        p2l, l2p, cnt = out
        w = np.asarray(w)
        L, E = w.shape
        for a in out:
            self.assertEqual(a.dtype, np.int64)
        self.assertEqual(p2l.shape, (L, R))
        self.assertEqual(cnt.shape, (L, E))
        self.assertEqual(l2p.shape, (L, E, int(cnt.max())))
        self.assertTrue(((p2l >= 0) & (p2l < E)).all())
        self.assertTrue((cnt >= 1).all(), "every expert placed")
        self.assertTrue((cnt.sum(1) == R).all(), "counts sum to the replicas")
        for l in range(L):
            self.assertEqual(np.bincount(p2l[l], minlength=E).tolist(), cnt[l].tolist())
            seen = []
            for e in range(E):
                row = l2p[l, e].tolist()
                c = int(cnt[l, e])
                self.assertTrue(all(v == -1 for v in row[c:]), "-1 padding")
                self.assertTrue(all(p2l[l, s] == e for s in row[:c]), "log2phy matches phy2log")
                seen += row[:c]
            self.assertEqual(sorted(seen), list(range(R)), "each slot once in log2phy")
        if K % N == 0 and N > 1:  # hierarchical: every replica of a group on its node
            gs, ppn = E // K, R // N
            for l in range(L):
                node_of = {}
                for s in range(R):
                    g = int(p2l[l, s]) // gs
                    self.assertEqual(node_of.setdefault(g, s // ppn), s // ppn, f"group {g}")


@needs_numpy
class DeepSeekExact(Checks):
    def test_readme_example(self):
        for w in (README_W, np.array(README_W), np.array(README_W, dtype=np.float32),
                  np.array(README_W, dtype=np.int32), np.array(README_W, dtype=np.uint8)):
            p2l, l2p, cnt = rebalance_experts(w, 16, 4, 2, 8, policy="deepseek")
            self.assertEqual(p2l.tolist(), README_P2L)
            self.assertEqual(cnt.tolist(), README_CNT)
            self.assertEqual(l2p.tolist(), README_L2P)
        got = deepseek_ref.rebalance_experts(np.array(README_W), 16, 4, 2, 8)
        self.assertEqual([a.tolist() for a in got], [README_P2L, README_L2P, README_CNT])

    def test_conformance_vectors(self):
        for name, w, args, want_p2l, want_cnt in ref_cases():
            with self.subTest(case=name):
                out = rebalance_experts(w, *args, policy="deepseek")
                self.assertEqual(out[0].tolist(), want_p2l.tolist())
                self.assertEqual(out[2].tolist(), want_cnt.tolist())
                self.check_maps(w, *args, out)
                # counts as int64 (what a recorder holds) give the same arrays
                if np.array_equal(w, np.round(w)):
                    again = rebalance_experts(w.astype(np.int64), *args, policy="deepseek")
                    self.assertTrue(all(np.array_equal(a, b) for a, b in zip(out, again)))

    def test_random_against_model(self):
        """phy2log, log2phy (replica order) and logcnt equal to the
        independent model on shapes where its stable sort is DeepSeek's."""
        rng = np.random.default_rng(7)
        n = 0
        while n < 120:
            N = int(rng.choice([1, 2, 4]))
            G = N * int(rng.integers(1, 4))
            K = int(rng.choice([1, 2, 3, 4, 8]))
            E = K * int(rng.integers(1, 4))
            R = G * int(rng.integers(1, 5))
            if R < E or not deepseek_ref.small(K, N, R):
                continue
            if K % N == 0 and (E % K or G % N):
                continue
            L = int(rng.integers(1, 4))
            w = rng.integers(0, 40, (L, E)) if n % 2 else (rng.random((L, E)) * 100).astype(np.float32)
            want = deepseek_ref.rebalance_experts(w, R, K, N, G)
            got = rebalance_experts(w, R, K, N, G, policy="deepseek")
            for a, b, what in zip(want, got, ("phy2log", "log2phy", "logcnt")):
                self.assertEqual(a.tolist(), b.tolist(), f"{what}: E={E} R={R} K={K} N={N} G={G} w={w.tolist()}")
            n += 1

    def test_replica_rank_is_deepseeks(self):
        with eplb.plan(np.array(README_W, dtype=np.float64), num_gpus=8, num_replicas=16,
                       num_groups=4, num_nodes=2, policy="deepseek") as p:
            rank = p.replica_rank()
            self.assertEqual(rank.shape, (2, 16))
            l2p = compat.log2phy_from(p.phy2log().astype(np.int64), rank)
            self.assertEqual(l2p.tolist(), README_L2P)
            self.assertEqual(p.replica_rank(1).tolist(), rank[1].tolist())


@needs_numpy
class Properties(Checks):
    """vLLM's test_eplb_algo and SGLang's shapes, for both policies."""

    SHAPES = [
        ([[10, 20, 30, 40]], (4, 1, 1, 1)),
        ([[50] * 8], (8, 2, 2, 4)),
        ([[1000, 1, 1, 1, 1, 1, 1, 1]], (12, 2, 2, 4)),
        ([[10, 20, 30, 40, 50, 60], [60, 50, 40, 30, 20, 10], [25] * 6], (8, 2, 2, 4)),
        ([[100, 50, 200, 75, 150, 25, 300, 80]], (12, 4, 2, 4)),
        ([[10, 20, 30, 40, 50, 60]], (8, 3, 2, 4)),  # global fallback
        ([[10, 20, 30, 40]], (8, 3, 2, 4)),  # vLLM test_parameter_validation
        ([[50, 100, 75, 120, 90, 60, 80, 110, 40, 70, 95, 85, 65, 55, 45, 35]], (24, 8, 4, 8)),
        ([[200, 150, 100, 50, 25, 12], [12, 25, 50, 100, 150, 200]], (10, 3, 1, 2)),
        ([[10, 20, 30, 40]], (6, 2, 1, 2)),
        ([[0, 0, 0, 0]], (8, 2, 2, 4)),  # no load at all
        (README_W, (16, 4, 2, 8)),
    ]

    def test_properties(self):
        for pol in compat.COMPAT_POLICIES:
            for w, args in self.SHAPES:
                with self.subTest(policy=pol, w=w, args=args):
                    out = rebalance_experts(w, *args, policy=pol)
                    self.check_maps(w, *args, out)
                    again = rebalance_experts(w, *args, policy=pol)
                    self.assertTrue(all(np.array_equal(a, b) for a, b in zip(out, again)),
                                    "deterministic")

    def test_vllm_expectations(self):
        for pol in compat.COMPAT_POLICIES:
            _, _, cnt = rebalance_experts([[50] * 8], 8, 2, 2, 4, policy=pol)
            self.assertTrue((cnt == 1).all())
            _, _, cnt = rebalance_experts([[1000, 1, 1, 1, 1, 1, 1, 1]], 12, 2, 2, 4, policy=pol)
            if pol == "deepseek":
                self.assertGreater(cnt[0, 0], cnt[0, 1])
            else:
                # Two GPUs of 3 slots on expert 0's node: 2 replicas (one per GPU, 502
                # each) beat DeepSeek's 3 (two on one GPU: 667); the spare slot may go
                # to any light expert, so vLLM's "more than expert 1" need not hold.
                self.assertGreaterEqual(cnt[0, 0], 2)
            _, _, cnt = rebalance_experts([[100, 50, 200, 75, 150, 25, 300, 80]], 12, 4, 2, 4,
                                          policy=pol)
            self.assertGreaterEqual(cnt[0, 6], 2)
            w = [[200, 150, 100, 50, 25, 12], [12, 25, 50, 100, 150, 200]]
            _, _, cnt = rebalance_experts(w, 10, 3, 1, 2, policy=pol)
            for l in range(2):
                self.assertGreaterEqual(cnt[l, int(np.argmax(w[l]))], 2)

    def test_global_fallback_is_deepseeks(self):
        """groups % nodes != 0: global placement, no experts % groups check
        (6 experts, 4 groups, 3 nodes), identical to one group on one node."""
        w = [[10, 20, 30, 40, 50, 60]]
        for pol in compat.COMPAT_POLICIES:
            a = rebalance_experts(w, 8, 4, 3, 4, policy=pol)
            b = rebalance_experts(w, 8, 1, 1, 4, policy=pol)
            self.assertTrue(all(np.array_equal(x, y) for x, y in zip(a, b)))
            self.check_maps(w, 8, 1, 1, 4, a)

    def test_balanced_never_worse_than_deepseek(self):
        """Max per-GPU load under uniform shares (w/c per replica), layer by
        layer: hierarchical and global on every reference case, and random
        ones."""
        cases = [(name, w, args) for name, w, args, _, _ in ref_cases()]
        cases += [(name + "/global", w, (args[0], 3, args[2], args[3]))
                  for name, w, args, _, _ in ref_cases()]
        rng = np.random.default_rng(11)
        for i in range(12):
            E, G, N = 32, 8, 2
            w = rng.zipf(1.3, (3, E)).astype(np.float64) if i % 2 else rng.lognormal(0, 1.5, (3, E))
            cases.append((f"random{i}", w, (G * int(rng.integers(4, 7)), 8 if i % 3 else 3, N, G)))
        worse = []
        for name, w, args in cases:
            d = rebalance_experts(w, *args, policy="deepseek")
            b = rebalance_experts(w, *args, policy="balanced")
            md, mb = gpu_max(w, d[0], d[2], args[3]), gpu_max(w, b[0], b[2], args[3])
            for l in np.nonzero(mb > md * (1 + 1e-9))[0]:
                worse.append(f"{name} layer {l}: balanced {mb[l]:.6g} > deepseek {md[l]:.6g}")
        self.assertEqual(worse, [])


@needs_numpy
class BadInput(unittest.TestCase):
    W = [[10, 20, 30, 40]]

    def test_deepseek_asserts(self):
        for pol in compat.COMPAT_POLICIES:
            with self.subTest(policy=pol):
                with self.assertRaises(AssertionError) as cm:  # vLLM test_parameter_validation
                    rebalance_experts(self.W, 7, 2, 2, 4, policy=pol)
                self.assertIn("num_replicas", str(cm.exception))
                with self.assertRaises(AssertionError) as cm:  # hierarchical: experts % groups
                    rebalance_experts([[1] * 6], 8, 4, 2, 4, policy=pol)
                self.assertIn("num_groups", str(cm.exception))
                with self.assertRaises(AssertionError) as cm:  # hierarchical: GPUs % nodes
                    rebalance_experts(self.W, 6, 2, 2, 3, policy=pol)
                self.assertIn("num_gpus", str(cm.exception))
                with self.assertRaises(AssertionError) as cm:  # fewer replicas than experts
                    rebalance_experts([[1] * 8], 4, 1, 1, 2, policy=pol)
                self.assertIn("num_replicas", str(cm.exception))
                with self.assertRaises(ZeroDivisionError):
                    rebalance_experts(self.W, 8, 2, 0, 4, policy=pol)
                with self.assertRaises(ZeroDivisionError):
                    rebalance_experts(self.W, 8, 2, 2, 0, policy=pol)

    def test_bad_weights(self):
        for pol in compat.COMPAT_POLICIES:
            for where, bad in (((0, 2), float("nan")), ((1, 0), float("inf")), ((1, 3), -1.0)):
                w = np.ones((2, 4))
                w[where] = bad
                with self.assertRaises(ValueError) as cm:
                    rebalance_experts(w, 8, 1, 1, 2, policy=pol)
                self.assertIn(f"layer {where[0]} expert {where[1]}", str(cm.exception))
                wl = w.tolist()
                with self.assertRaises(ValueError) as cm:
                    rebalance_experts(wl, 8, 1, 1, 2, policy=pol)
                self.assertIn(f"layer {where[0]} expert {where[1]}", str(cm.exception))
        w = np.ones((1, 4))
        w[0, 1] = 1e39  # finite in float64, inf in DeepSeek's float32
        with self.assertRaises(ValueError) as cm:
            rebalance_experts(w, 4, 1, 1, 2, policy="deepseek")
        self.assertIn("layer 0 expert 1", str(cm.exception))

    def test_bad_shapes_and_types(self):
        for w in ([1, 2, 3, 4], np.ones(4), np.ones((1, 2, 4)), [[1, 2], [3]]):
            with self.assertRaises(ValueError):
                rebalance_experts(w, 4, 1, 1, 2)
        for w in ("weights", np.array([["a", "b"]]), [[1, "x"]]):
            with self.assertRaises(TypeError):
                rebalance_experts(w, 4, 1, 1, 2)
        with self.assertRaises(TypeError):
            rebalance_experts(self.W, 8.5, 1, 1, 2)
        with self.assertRaises(ValueError) as cm:
            rebalance_experts(self.W, 8, 1, 1, 2, policy="mip")
        self.assertIn("policy", str(cm.exception))
        for w in (np.ones((0, 4)), np.ones((2, 0))):  # vLLM's numpy port: np.max of nothing
            with self.assertRaises(ValueError) as cm:
                rebalance_experts(w, 4, 1, 1, 2)
            self.assertIn("weight", str(cm.exception))

    def test_zero_and_negative_counts(self):
        """DeepSeek's exception where DeepSeek's code raises one in Python
        (its asserts: AssertionError; its `%`: ZeroDivisionError), else a
        ValueError naming the argument (DeepSeek fails inside torch there):
        never a RuntimeError, and nothing planned before."""
        w = [[10, 20, 30, 40]]
        cases = [
            ((0, 1, 1, 2), AssertionError, "num_replicas"),    # fewer replicas than experts
            ((-8, 1, 1, 2), AssertionError, "num_replicas"),
            ((-6, 1, 1, 2), AssertionError, "num_replicas"),   # -6 % 2 == 0: replicate_experts
            ((8, 1, 1, 0), ZeroDivisionError, None),            # num_replicas % num_gpus
            ((8, 2, 0, 4), ZeroDivisionError, None),            # num_groups % num_nodes
            ((8, 0, 1, 4), ZeroDivisionError, None),            # experts % num_groups
            ((8, 1, 1, -4), ValueError, "num_gpus"),            # 8 % -4 == 0: then torch fails
            ((8, 1, 1, -3), AssertionError, "num_replicas"),    # 8 % -3 != 0: DeepSeek's assert
            ((8, -2, 1, 4), ValueError, "num_groups"),          # hierarchical, 4 % -2 == 0
            ((8, 4, -2, 4), ValueError, "num_nodes"),           # hierarchical, all asserts pass
            ((8, 4, -3, 4), ValueError, "num_groups"),          # 4 % -3 != 0: global, K = N = 1
        ]
        planned = []
        real = compat._plan_maps
        compat._plan_maps = lambda *a, **k: planned.append(a) or real(*a, **k)
        try:
            for pol in compat.COMPAT_POLICIES:
                for args, exc, name in cases:
                    with self.subTest(policy=pol, args=args):
                        if args == (8, 4, -3, 4):  # global placement: plans fine
                            rebalance_experts(w, *args, policy=pol)
                            continue
                        with self.assertRaises(exc) as cm:
                            rebalance_experts(w, *args, policy=pol)
                        self.assertNotIsInstance(cm.exception, RuntimeError)
                        if name:
                            self.assertIn(name, str(cm.exception))
        finally:
            compat._plan_maps = real
        self.assertEqual(len(planned), 2, "only the valid global case planned")
        with self.assertRaises(ValueError):  # SGLang's hook: the same rules
            sglang_rebalance_experts([[[1, 2, 3, 4]]], 8, 2, 4, -2, "deepseek_hierarchical")
        with self.assertRaises(AssertionError):
            sglang_rebalance_experts([[[1, 2, 3, 4]]], 2, 1, None, 1, "deepseek")


class FakeDevice:
    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return (self.type, self.index) == (other.type, other.index)


class FakeTensor:
    """The slice of torch.Tensor eplb.compat uses, over a numpy array."""

    def __init__(self, a, device=("cuda", 0)):
        self.a = np.asarray(a)
        self.device = FakeDevice(*device)
        self.is_cuda = self.device.type == "cuda"
        self.shape = self.a.shape
        self.dtype = "torch." + str(self.a.dtype)

    def data_ptr(self):
        return self.a.ctypes.data

    def is_contiguous(self):
        return self.a.flags.c_contiguous

    def dim(self):
        return self.a.ndim

    def detach(self):
        return self

    def cpu(self):
        return FakeTensor(self.a, ("cpu", None))

    def to(self, device):
        return FakeTensor(self.a, (device.type, device.index))

    def double(self):
        return FakeTensor(self.a.astype(np.float64), (self.device.type, self.device.index))

    def contiguous(self):
        return FakeTensor(np.ascontiguousarray(self.a), (self.device.type, self.device.index))

    def numpy(self):
        assert self.device.type == "cpu", "numpy() of a device tensor"
        return self.a

    def sum(self, dim):
        return FakeTensor(self.a.sum(axis=dim), (self.device.type, self.device.index))


@needs_numpy
class TorchInput(unittest.TestCase):
    """torch is optional: a stand-in module checks the tensor path (CPU copy
    in, int64 tensors back on the input's device)."""

    def setUp(self):
        self._saved = sys.modules.get("torch")
        fake = types.ModuleType("torch")
        fake.int64 = "torch.int64"
        fake.from_numpy = lambda a: FakeTensor(a, ("cpu", None))
        sys.modules["torch"] = fake

    def tearDown(self):
        if self._saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self._saved

    def test_cuda_tensor_in_and_out(self):
        for dt in (np.int64, np.float32, np.float16):
            t = FakeTensor(np.array(README_W, dtype=dt), ("cuda", 1))
            p2l, l2p, cnt = rebalance_experts(t, 16, 4, 2, 8, policy="deepseek")
            for x in (p2l, l2p, cnt):
                self.assertIsInstance(x, FakeTensor)
                self.assertEqual(x.dtype, "torch.int64")
                self.assertEqual((x.device.type, x.device.index), ("cuda", 1))
            self.assertEqual(p2l.a.tolist(), README_P2L)
            self.assertEqual(l2p.a.tolist(), README_L2P)
        with self.assertRaises(ValueError):
            rebalance_experts(FakeTensor(np.ones(4)), 4, 1, 1, 2)

    def test_plan_takes_int_tensors(self):
        w = np.array(README_W, dtype=np.int64)
        with eplb.plan(FakeTensor(w, ("cpu", None)), num_gpus=8, num_replicas=16) as p, \
                eplb.plan(w.astype(np.float64), num_gpus=8, num_replicas=16) as q:
            self.assertEqual(p.phy2log().tolist(), q.phy2log().tolist())
        with self.assertRaises(TypeError):  # device memory is for compat, not eplb.plan
            eplb.plan(FakeTensor(w), num_gpus=8, num_replicas=16)

    def test_vllm_and_sglang_take_tensors(self):
        t = FakeTensor(np.array(README_W), ("cuda", 0))
        out = VllmEplbPolicy.rebalance_experts(t, 16, 4, 2, 8)
        self.assertEqual(len(out), 3)
        self.assertEqual(out[0].device.type, "cuda")
        steps = FakeTensor(np.stack([np.array(README_W)] * 3), ("cuda", 0))
        out = sglang_rebalance_experts(steps, 16, 2, 4, 2, "deepseek_hierarchical", policy="deepseek")
        self.assertEqual(out[0].a.tolist(), README_P2L)


@needs_numpy
class Vllm(Checks):
    def test_policy_class(self):
        class DeepSeekPolicy(VllmEplbPolicy):
            policy = "deepseek"

        p2l, l2p, cnt = DeepSeekPolicy.rebalance_experts(np.array(README_W), 16, 4, 2, 8)
        self.assertEqual(p2l.tolist(), README_P2L)
        out = VllmEplbPolicy.rebalance_experts(README_W, 16, 4, 2, 8)
        self.check_maps(README_W, 16, 4, 2, 8, out)
        only = VllmEplbPolicyPhy2Log.rebalance_experts(README_W, 16, 4, 2, 8)
        self.assertEqual(only.tolist(), out[0].tolist())
        with self.assertRaises(AssertionError):  # vLLM's test_parameter_validation
            VllmEplbPolicy.rebalance_experts([[10, 20, 30, 40]], 7, 2, 2, 4)
        p2l = VllmEplbPolicyPhy2Log.rebalance_experts([[10, 20, 30, 40]], 8, 3, 2, 4)
        self.assertEqual(p2l.shape, (1, 8))

    def test_preserve_intragpu_slots(self):
        rng = np.random.default_rng(3)
        w0, w1 = rng.integers(1, 100, (2, 16)), rng.integers(1, 100, (2, 16))
        R, G = 32, 4
        old, _, _ = VllmEplbPolicy.rebalance_experts(w0, R, 4, 2, G)
        plain = VllmEplbPolicy.rebalance_experts(w1, R, 4, 2, G)
        kept = VllmEplbPolicy.rebalance_experts(w1, R, 4, 2, G, old_global_expert_indices=old)
        self.check_maps(w1, R, 4, 2, G, kept)
        self.assertTrue(np.array_equal(kept[2], plain[2]))
        S = R // G
        for l in range(2):
            for g in range(G):
                seg = slice(g * S, (g + 1) * S)
                self.assertEqual(sorted(kept[0][l, seg].tolist()), sorted(plain[0][l, seg].tolist()))
                for s in range(g * S, (g + 1) * S):  # an expert still on the GPU keeps a slot
                    e = int(old[l, s])
                    if e in plain[0][l, seg].tolist():
                        self.assertIn(e, kept[0][l, seg].tolist())
                first = {}
                for s in range(g * S, (g + 1) * S):
                    first.setdefault(int(old[l, s]), s)
                for e, s in first.items():
                    if e in plain[0][l, seg].tolist():
                        self.assertEqual(int(kept[0][l, s]), e, f"expert {e} keeps slot {s}")


@needs_numpy
class Sglang(Checks):
    def test_hook(self):
        steps = np.stack([np.array(README_W)] * 2 + [np.zeros((2, 12), dtype=np.int64)])
        # num_gpus = 16 // 2 = 8
        for alg, want in (("deepseek_hierarchical", (16, 4, 2, 8)), ("deepseek", (16, 1, 1, 8)),
                          ("auto", (16, 4, 2, 8)), ("deepseek_vec", (16, 1, 1, 8))):
            with self.subTest(algorithm=alg):
                got = sglang_rebalance_experts(steps, 16, 2, 4, 2, alg, policy="deepseek")
                ref = rebalance_experts(np.array(README_W) * 2, *want, policy="deepseek")
                self.assertTrue(all(np.array_equal(a, b) for a, b in zip(got, ref)))
        got = sglang_rebalance_experts(steps, 16, 2, 4, 2, types.SimpleNamespace(name="auto"))
        self.check_maps(README_W, 16, 4, 2, 8, got)
        got = sglang_rebalance_experts(np.array(README_W), 16, 2, None, 2, "auto")  # 2-D, no groups
        self.check_maps(README_W, 16, 1, 1, 8, got)
        with self.assertRaises(AssertionError):  # SGLang's hierarchical path asserts groups % nodes
            sglang_rebalance_experts(steps, 16, 2, 3, 2, "deepseek_hierarchical")
        with self.assertRaises(ValueError):
            sglang_rebalance_experts(steps, 16, 2, 4, 2, "elasticity_aware")


class Binding(unittest.TestCase):
    @needs_numpy
    def test_shares_option(self):
        w = np.array([[10.0, 1, 1, 1], [4, 3, 2, 1]])
        self.assertEqual(eplb.SHARES[:3], ("exact", "uniform", "robust"))
        with eplb.plan(w, num_gpus=2, num_replicas=6, shares="uniform") as p:
            for l in range(2):
                cnt = p.logcnt(l)
                want = [1.0 / cnt[e] for e in p.phy2log(l)]
                self.assertTrue(np.allclose(p.share(l), want))
        with self.assertRaises(eplb.Error) as cm:
            eplb.plan(w, num_gpus=2, num_replicas=6, shares="even")
        self.assertEqual(cm.exception.name, "EPLB_EINVAL")

    @needs_numpy
    def test_loads_dtypes(self):
        w = np.array([[9, 1, 1, 3, 5, 2, 2, 1]] * 2, dtype=np.int64)
        with eplb.plan(w.astype(np.float64), num_gpus=2, num_replicas=12) as ref:
            want = ref.phy2log().tolist()
        for dt in (np.int64, np.float32, np.int32, np.uint16):
            with eplb.plan(w.astype(dt), num_gpus=2, num_replicas=12) as p:
                self.assertEqual(p.phy2log().tolist(), want, dt)
        f64 = w.astype(np.float64)
        s, keep = eplb.trace.loads_struct(f64)
        self.assertEqual(s.values, f64.ctypes.data)  # float64: no copy

    def test_replica_rank_slot_order(self):
        loads = [[8.0, 1, 1, 1], [1.0, 1, 1, 5]]
        with eplb.plan(loads, num_gpus=2, num_replicas=8) as p:
            for l in range(2):
                seen = {}
                want = []
                for e in eplb._arrays.flat_list(p.phy2log(l)):
                    want.append(seen.get(e, 0))
                    seen[e] = want[-1] + 1
                self.assertEqual(eplb._arrays.flat_list(p.replica_rank(l)), want)
            with self.assertRaises(IndexError):
                p.replica_rank(5)

    def test_replica_rank_after_read(self):
        import tempfile, os
        with eplb.plan(README_W, num_gpus=8, num_replicas=16, num_groups=4, num_nodes=2,
                       policy="deepseek") as p, tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.json")
            p.write(path)
            with eplb.Plan.read(path) as q:  # the file carries no ranks: slot order
                fl = eplb._arrays.flat_list
                self.assertEqual(fl(q.phy2log()), fl(p.phy2log()))
                seen, want = {}, []
                for e in fl(q.phy2log(0)):
                    want.append(seen.get(e, 0))
                    seen[e] = want[-1] + 1
                self.assertEqual(fl(q.replica_rank(0)), want)
                self.assertNotEqual(fl(p.replica_rank(0)), want)  # expert 1: slots 13, 15
