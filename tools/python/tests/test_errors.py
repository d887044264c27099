import array

import eplb
from support import TempDirCase, needs_numpy, np


class Errors(TempDirCase):
    def test_bad_file(self):
        with self.assertRaises(eplb.Error) as cm:
            eplb.Trace(self.tmp / "missing.eplbt")
        e = cm.exception
        self.assertEqual(e.name, "EPLB_EIO")
        self.assertLess(e.status, 0)
        self.assertIn("missing.eplbt", e.detail)
        bad = self.tmp / "bad.eplbt"
        bad.write_bytes(b"not a trace at all, certainly not" * 4)
        with self.assertRaises(eplb.Error) as cm:
            eplb.Trace(bad)
        self.assertEqual(cm.exception.name, "EPLB_EFORMAT")
        bad_csv = self.tmp / "bad.csv"
        bad_csv.write_text("1,2\n3,-4\n")
        with self.assertRaises(eplb.Error) as cm:
            eplb.read_loads(bad_csv)
        self.assertEqual(cm.exception.name, "EPLB_EFORMAT")
        self.assertIn("bad.csv", str(cm.exception))
        with self.assertRaises(eplb.Error):
            eplb.Plan.read(bad_csv)

    @needs_numpy
    def test_wrong_dtype(self):
        # Loads: integer and float dtypes are converted to float64 once; others refused.
        with self.assertRaises(TypeError) as cm:
            eplb.plan(np.ones((2, 8), dtype=np.complex128), num_gpus=2, num_replicas=8)
        self.assertIn("float64", str(cm.exception))
        eplb.plan(np.ones((2, 8), dtype=np.float32), num_gpus=2, num_replicas=8).close()
        s = eplb.SplitSolver()
        with self.assertRaises(TypeError):
            s.solve(np.ones(4, dtype=np.int64), [0, 1, 2, 3], [2, 2])
        with self.assertRaises(TypeError):
            s.solve([1.0] * 4, np.array([0, 1, 2, 3], dtype=np.float64), [2, 2])
        s.close()

    def test_wrong_dtype_buffer(self):
        with self.assertRaises(TypeError) as cm:
            eplb.plan(memoryview(b"\0" * 8).cast("c"), num_gpus=2, num_replicas=8)
        self.assertIn("float64", str(cm.exception))
        with self.assertRaises(ValueError):  # float32 is converted, but 1-D has no shape
            eplb.plan(array.array("f", [1.0] * 8), num_gpus=2, num_replicas=8)
        with self.assertRaises(TypeError):
            eplb.plan("loads", num_gpus=2, num_replicas=8)

    @needs_numpy
    def test_wrong_shape(self):
        with self.assertRaises(ValueError) as cm:
            eplb.plan(np.ones(16), num_gpus=2, num_replicas=8)
        self.assertIn("(layers, experts)", str(cm.exception))
        p = eplb.plan(np.ones((2, 8)), num_gpus=2, num_replicas=8)
        with self.assertRaises(ValueError) as cm:
            p.set_shares(0, np.ones(7))
        self.assertIn("(8,)", str(cm.exception))
        with self.assertRaises(eplb.Error) as cm:
            p.evaluate(np.ones((3, 8)))
        self.assertEqual(cm.exception.name, "EPLB_ESHAPE")
        with self.assertRaises(IndexError):
            p.phy2log(2)
        meta = eplb.TraceMeta(2, 8)
        with eplb.TraceWriter(self.tmp / "t.eplbt", meta) as w:
            with self.assertRaises(ValueError):
                w.append(np.ones((8, 2), dtype=np.uint32))
            w.append(np.ones((2, 8), dtype=np.uint32))
        p.close()

    def test_list_values_checked(self):
        with self.assertRaises(ValueError):
            eplb.SplitSolver().solve([1.0, 1.0], [0, -1], [1, 1])
        with self.assertRaises(ValueError):
            eplb.plan([[1.0, 2.0], [3.0]], num_gpus=1, num_replicas=2)

    def test_closed_handle(self):
        p = eplb.plan([[1.0, 2.0, 3.0, 4.0]], num_gpus=2, num_replicas=4)
        p.close()
        self.assertTrue(p.closed)
        with self.assertRaises(ValueError) as cm:
            p.summary()
        self.assertIn("closed", str(cm.exception))
        p.close()  # twice is fine
        with eplb.Cluster("1x2") as c:
            pass
        with self.assertRaises(ValueError):
            c.num_gpus
        s = eplb.SplitSolver()
        s.close()
        with self.assertRaises(ValueError):
            s.solve([1.0], [0], [1])

    def test_library_error_detail(self):
        with self.assertRaises(eplb.Error) as cm:
            eplb.plan([[1.0] * 8], num_gpus=3, num_replicas=8)
        self.assertEqual(cm.exception.name, "EPLB_EINVAL")
        self.assertTrue(cm.exception.detail)
        with self.assertRaises(eplb.Error) as cm:
            eplb.plan([[1.0] * 8], num_gpus=2, num_replicas=8, policy="nope")
        self.assertIn("nope", str(cm.exception))
        with self.assertRaises(eplb.Error) as cm:
            eplb.plan([[1.0, float("nan")]], num_gpus=1, num_replicas=2)
        self.assertEqual(cm.exception.name, "EPLB_EFORMAT")
