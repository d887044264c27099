"""Integers that their C type cannot hold are refused, named, before any C
call (issue 33, N4): ctypes alone stores 2**32 + 8 into a uint32_t as 8."""

import ctypes
import re
import unittest

import eplb
from eplb import _cint, _lib
from eplb._cnames import ARGNAMES
from eplb.compat import rebalance_experts
from support import REPO, TempDirCase

RT = dict(num_layers=2, num_experts=8, topk=2, slots_per_rank=8)
IDS = [[0, 1], [2, 3], [4, 5], [6, 7]]


class IntRange(TempDirCase):
    def assert_refused(self, fn, *names):
        with self.assertRaises(eplb.IntRangeError) as cm:
            fn()
        e = cm.exception
        self.assertIsInstance(e, ValueError)
        self.assertIsInstance(e, OverflowError)
        for n in names:
            self.assertIn(n, str(e))

    def test_rebalance_experts(self):
        w = [[float(i + 1) for i in range(8)]]
        self.assert_refused(lambda: rebalance_experts(w, 2**32 + 8, 1, 1, 2), "num_replicas",
                            "4294967304")
        self.assert_refused(lambda: eplb.plan(w, num_gpus=2**32 + 2, num_replicas=8), "num_gpus")
        self.assert_refused(lambda: eplb.plan(w, num_gpus=2, num_replicas=8, num_groups=2**32 + 1),
                            "num_groups")
        # In range: planned as asked.
        p2l, _, cnt = rebalance_experts(w, 8, 1, 1, 2)
        self.assertEqual(len(p2l[0]), 8)

    @unittest.skipUnless(eplb.HAVE_RUNTIME, "no runtime module")
    def test_runtime(self):
        for key, v in (("topk", 2**32 + 2), ("slots_per_rank", 2**32 + 8),
                       ("world_size", 2**32 + 1), ("num_layers", -1), ("interval_steps", 2**32)):
            self.assert_refused(lambda: eplb.Runtime(**{**RT, key: v}), key, str(v))
        with eplb.Runtime(**RT) as rt:
            self.assert_refused(lambda: rt.record(2**32, IDS), "eplb_runtime_record", "layer",
                                "4294967296")
            self.assert_refused(lambda: rt.record(-1, IDS), "layer", "-1")
            self.assert_refused(lambda: rt.map(0, IDS, token_base=2**64), "token_base")
            rt.record(1, IDS)  # in range: recorded
            rt.step_end()

    def test_functions_and_fields(self):
        self.assert_refused(lambda: eplb.Cluster.uniform(2**32 + 1, 2), "nodes")
        with eplb.plan([[1.0] * 8], num_gpus=2, num_replicas=8) as p:
            self.assert_refused(lambda: _lib.lib.eplb_plan_layer_metrics(p._p, 2**32, None),
                                "eplb_plan_layer_metrics", "layer")
        self.assert_refused(lambda: setattr(_lib.SplitOptionsC(), "threads", 2**32), "threads")
        self.assert_refused(lambda: _lib.TraceMetaC(num_layers=2**32), "num_layers")
        self.assert_refused(lambda: _lib.PlanOptionsC(policy=2**31), "policy", "int32_t")
        self.assertEqual(_lib.PlanOptionsC(num_gpus=2**32 - 1).num_gpus, 2**32 - 1)

    def test_every_integer_parameter_is_checked(self):
        # Every prototype with an integer parameter goes through the check,
        # every field of a mirror too.
        for name in dir(_lib.lib):
            f = getattr(_lib.lib, name)
            argtypes = getattr(getattr(f, "foreign", f), "argtypes", None) or []
            if name.startswith("eplb_") and any(t in _cint.RANGES for t in argtypes):
                self.assertTrue(hasattr(f, "foreign"), name)
        for cls in _lib._MIRRORS.values():
            self.assertTrue(issubclass(cls, _cint.CStruct), cls.__name__)

    def test_argnames_match_the_headers(self):
        text = " ".join(p.read_text() for p in (REPO / "include" / "eplb").glob("*.h"))
        text = re.sub(r"\s+", " ", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))
        for fn, names in ARGNAMES.items():
            m = re.search(r"\beplb_" + fn + r"\s*\(([^)]*)\)", text)
            self.assertIsNotNone(m, fn)
            params = [re.findall(r"(\w+)\s*(?:\[\w*\])?$", p.strip())[0]
                      for p in m.group(1).split(",")]
            self.assertEqual(params, names.split(), fn)
            self.assertEqual(len(getattr(_lib.lib, "eplb_" + fn).foreign.argtypes), len(params))

    def test_limits(self):
        self.assertEqual(_cint.RANGES[ctypes.c_uint32][:2], (0, 2**32 - 1))
        self.assertEqual(_cint.RANGES[ctypes.c_int32][:2], (-(2**31), 2**31 - 1))
        self.assertEqual(_cint.RANGES[ctypes.c_uint64][:2], (0, 2**64 - 1))
