import os
import unittest

import eplb
from support import TempDirCase, needs_numpy, np

FL = eplb._arrays.flat_list


@unittest.skipUnless(eplb.HAVE_RUNTIME, "libeplb without the runtime")
class RuntimeOneProcess(TempDirCase):
    def make(self, **kw):
        cfg = dict(num_layers=2, num_experts=8, topk=2, slots_per_rank=10, interval_steps=2,
                   window_steps=4, layers_per_step=2, gain_threshold=0.0)
        cfg.update(kw)
        return eplb.Runtime(**cfg)

    def test_record_map_step(self):
        with self.make(trace_path=self.tmp / "rt.eplbt") as rt:
            ids = [[0, 1], [0, 2], [0, 3], [1, 0]]
            for step in range(6):
                for l in range(2):
                    rt.record(l, ids)
                    slots = rt.map(l, ids, token_base=step * 4)
                    p2l, share = rt.layer_plan(l)
                    got = [FL(p2l)[s] for s in FL(slots)]
                    self.assertEqual(got, [e for row in ids for e in row])
                rt.step_end()
            m = rt.metrics()
            self.assertEqual(m["steps"], 6)
            self.assertGreaterEqual(m["plans"], 1)
            w = rt.window()
            self.assertEqual(FL(w)[0], 4 * 4.0)  # expert 0 of layer 0: 4 per step, 4 steps
            with rt.plan() as p:
                self.assertEqual(p.num_slots, 10)
                self.assertEqual(FL(p.logcnt(0))[0] >= 2, True)  # the hot expert got replicas
        with eplb.Trace(self.tmp / "rt.eplbt") as t:
            self.assertEqual(len(t), 6)

    def test_config_message_names_the_field(self):
        # Issue 33, F16: a NaN tolerance blamed split_per_batch.
        with self.assertRaises(eplb.Error) as cm:
            self.make(split_tolerance=float("nan"))
        self.assertIn("split_tolerance nan", cm.exception.detail)
        self.assertNotIn("split_per_batch", cm.exception.detail)
        with self.assertRaises(eplb.Error) as cm:
            self.make(split_per_batch=2)
        self.assertIn("split_per_batch 2", cm.exception.detail)
        self.assertNotIn("split_tolerance", cm.exception.detail)

    def test_per_batch_split(self):
        # A standalone rank of an 8-GPU world on 2 nodes (comm none): route re-splits each
        # call, every token lands on a replica of its expert, and split() takes counts the
        # caller all-reduced itself.
        with eplb.Runtime(num_layers=1, num_experts=8, topk=2, slots_per_rank=2, world_size=8,
                          ranks_per_node=4, rank=5) as rt:
            ids = [[0, 1]] * 30 + [[2, 3]] * 2
            slots = FL(rt.route(0, ids))
            p2l, _ = rt.layer_plan(0)
            self.assertEqual([FL(p2l)[s] for s in slots], [e for row in ids for e in row])
            share, node, t_star = rt.layer_split(0)
            self.assertIsNotNone(node)
            self.assertGreater(t_star, 0)
            counts = [0] * 16
            counts[8 + 7] = 100
            rt.split(0, counts)
            self.assertGreater(rt.layer_split(0)[2], 0)
            self.assertEqual(rt.metrics()["splits"], 2)
            with self.assertRaises(ValueError):
                rt.split(0, [1, 2, 3])
            with self.assertRaises(eplb.Error):
                rt.layer_split(1)

    def test_decode_objective(self):
        # split_model / split_gpu: the per-batch split keeps decode shares where they model
        # faster (a light batch on replicated experts); both or neither, and no locality.
        kw = dict(num_layers=1, num_experts=16, topk=2, slots_per_rank=6, world_size=4,
                  ranks_per_node=2, rank=1, local_first=False)
        with eplb.Runtime(split_model="deepseek-v3", split_gpu="h800", **kw) as rt:
            for call in range(6):
                ids = [[(i + call) % 3, 3 + (i * 5 + call * 7) % 13] for i in range(6)]
                slots = FL(rt.route(0, ids))
                p2l, _ = rt.layer_plan(0)
                self.assertEqual([FL(p2l)[s] for s in slots], [e for row in ids for e in row])
                share, node, _ = rt.layer_split(0)
                self.assertIsNone(node)
                sums = [0.0] * 16
                for r, e in enumerate(FL(p2l)):
                    sums[e] += FL(share)[r]
                for v in sums:
                    self.assertAlmostEqual(v, 1.0, places=12)
            m = rt.metrics()
            self.assertEqual(m["splits"], 6)
            self.assertGreater(m["splits_decode"], 0)
        with self.assertRaises(eplb.Error) as cm:
            eplb.Runtime(split_gpu="h800", **kw)
        self.assertEqual(cm.exception.name, "EPLB_EINVAL")
        with self.assertRaises(eplb.Error):
            eplb.Runtime(split_model="deepseek-v3", split_gpu="h800", **dict(kw, local_first=True))

    def test_count_thread_same_window(self):
        ids = [[0, 1], [0, 2], [0, 3], [1, 0], [7, 6]]
        windows = []
        for count_thread in (False, True):
            with self.make(count_thread=count_thread) as rt:
                for step in range(5):
                    for l in range(2):
                        rt.record(l, ids[: step + 1])
                    rt.step_end()
                windows.append(FL(rt.window()))
        self.assertEqual(windows[0], windows[1])
        # route = record + map: the same slots and the same window
        with self.make(count_thread=True) as a, self.make() as b:
            for step in range(3):
                for l in range(2):
                    got = FL(a.route(l, ids, token_base=10 * step))
                    b.record(l, ids)
                    self.assertEqual(got, FL(b.map(l, ids, token_base=10 * step)))
                a.step_end()
                b.step_end()
            self.assertEqual(FL(a.window()), FL(b.window()))
        self.assertEqual(windows[0][0], 2 + 3 + 4 + 4)  # expert 0, layer 0: steps 1-4

    @needs_numpy
    def test_register_tensors_moves_them_together(self):
        # An expert as two tensors (16 + 8 bytes, apart), as stacks keep it:
        # after the plan switches, every slot's two tensors hold its expert.
        with self.make(expert_bytes=24) as rt:
            bufs = {}
            for l in range(2):
                p2l, _ = rt.layer_plan(l)
                for s in range(10):
                    e = int(FL(p2l)[s])
                    bufs[l, s] = (np.full(16, e, np.uint8), np.full(8, 100 + e, np.uint8))
                    rt.register_tensors(l, s, bufs[l, s])
            with self.assertRaises(eplb.Error) as cm:  # another layout
                rt.register_tensors(0, 0, (np.zeros(8, np.uint8), np.zeros(16, np.uint8)))
            self.assertEqual(cm.exception.name, "EPLB_EINVAL")
            with self.assertRaises(eplb.Error):  # the sum is not expert_bytes
                rt.register_tensors(0, 0, (np.zeros(16, np.uint8), np.zeros(4, np.uint8)))
            with self.assertRaises(ValueError):
                rt.register_tensors(0, 0, ())
            ids = [[0, 1], [0, 2], [0, 3], [0, 4]] * 8
            before = [FL(rt.layer_plan(l)[0]) for l in range(2)]
            for step in range(12):
                for l in range(2):
                    rt.record(l, ids)
                rt.step_end()
            after = [FL(rt.layer_plan(l)[0]) for l in range(2)]
            self.assertNotEqual(before, after)  # something moved
            for l in range(2):
                for s in range(10):
                    e = after[l][s]
                    a, b = bufs[l, s]
                    self.assertTrue((a == e).all() and (b == 100 + e).all(), (l, s, e))

    def test_errors(self):
        rt = self.make()
        with self.assertRaises(eplb.Error) as cm:
            rt.record(0, [[0, 8]])
        self.assertEqual(cm.exception.name, "EPLB_ERANGE")
        with self.assertRaises(ValueError):
            rt.map(0, [[0, 1, 2]])
        with self.assertRaises(eplb.Error):
            rt.map(5, [[0, 1]])
        rt.close()
        with self.assertRaises(ValueError):
            rt.map(0, [[0, 1]])
        with self.assertRaises(eplb.Error):
            eplb.Runtime(num_layers=1, num_experts=8, topk=2, slots_per_rank=4)  # 4 < 8 slots

    @needs_numpy
    def test_numpy_fast_path_and_out(self):
        with self.make() as rt:
            ids = np.array([[3, 4], [5, 6]], dtype=np.int32)
            out = np.empty((2, 2), dtype=np.int32)
            self.assertIs(rt.map(0, ids, out=out), out)
            with self.assertRaises(TypeError):
                rt.map(0, ids.astype(np.int64))
            rt.record_counts(1, np.arange(8, dtype=np.uint32))
            buf = np.zeros(4, dtype=np.float64)
            self.assertIs(rt.allreduce(buf), buf)
