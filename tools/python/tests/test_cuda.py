"""The GPU path (eplb.cuda) without torch and without a GPU: tensor-like fakes
over host memory route to the C runtime's device calls on its emulated
device (a backend of kind "cuda" answers ENODEVICE, or EUNSUPPORTED in a
build without CUDA), host tensors to the CPU ones, bad arguments raise before
any C call, and the step boundary (count feed, ring step, table uploads and
flips, all in C) gives the host runtime's slots and counts."""

import ctypes
import sys
import unittest
from unittest import mock

import eplb
from eplb import _lib

FL = eplb._arrays.flat_list
DEVICE_FNS = ("eplb_runtime_device_attach", "eplb_runtime_device_record",
              "eplb_runtime_device_map", "eplb_runtime_device_set_stream",
              "eplb_runtime_device_flush")


def _have_device():
    n = ctypes.c_int()
    try:
        _lib.lib.eplb_cuda_device_count(ctypes.byref(n))
    except eplb.Error:
        return False
    return n.value > 0


# With a real device the fakes' host pointers would reach a kernel.
needs_no_device = unittest.skipIf(_have_device(), "a CUDA device is present")
EXPECTED = "EPLB_ENODEVICE" if eplb.feature_enabled("cuda") else "EPLB_EUNSUPPORTED"


class FakeDevice:
    def __init__(self, kind, index):
        self.type, self.index = kind, index

    def __str__(self):
        return f"{self.type}:{self.index}"


class FakeTensor:
    """The slice of torch.Tensor the binding uses, over host memory."""

    def __init__(self, rows, shape=None, dtype="torch.int32", device=("cuda", 0), contiguous=True):
        flat = [v for r in rows for v in r]
        self.shape = tuple(shape) if shape is not None else (len(rows), len(rows[0]) if rows else 0)
        self._buf = (ctypes.c_int32 * max(len(flat), 1))(*flat)
        self.dtype = dtype
        self.device = FakeDevice(*device)
        self.is_cuda = device[0] == "cuda"
        self._contiguous = contiguous

    def data_ptr(self):
        return ctypes.addressof(self._buf)

    def is_contiguous(self):
        return self._contiguous

    def values(self):
        return list(self._buf)[: self.shape[0] * self.shape[1]]


class FakeBackend:
    """Host memory standing for device memory: the C runtime's emulated
    device (kind "emulated") runs the device protocol on it."""

    kind = "emulated"

    def __init__(self, stream=0):
        self.stream = stream

    def device_index(self, device):
        return 0 if device is None else getattr(device, "index", device)

    def current_stream(self, index):
        return self.stream

    def empty_like(self, t, stream, index):
        return FakeTensor([[0] * t.shape[1]] * t.shape[0])


class Spy:
    """Replaces libeplb functions by recorders (forwarding, or a stand-in)."""

    def __init__(self, test, **stand_ins):
        self.calls = []
        for name in DEVICE_FNS + ("eplb_runtime_record", "eplb_runtime_map"):
            real = getattr(_lib.lib, name)
            fn = stand_ins.get(name, real)

            def wrapper(*args, _n=name, _fn=fn):
                self.calls.append((_n, args))
                return _fn(*args)

            setattr(_lib.lib, name, wrapper)
            test.addCleanup(setattr, _lib.lib, name, real)

    def names(self):
        return [n for n, _ in self.calls]


def ok(*args):
    return 0


@unittest.skipUnless(eplb.HAVE_KERNELS, "libeplb without the kernels")
class CudaPath(unittest.TestCase):
    def make(self, window=4, stream=0, **kw):
        cfg = dict(num_layers=2, num_experts=8, topk=2, slots_per_rank=10, interval_steps=2,
                   window_steps=4, layers_per_step=2, gain_threshold=0.0)
        cfg.update(kw)
        rt = eplb.Runtime(**cfg)
        self.addCleanup(rt.close)
        be = FakeBackend(stream)
        dev = eplb.cuda.DeviceDispatch(rt, device=0, window=window, backend=be)
        return rt, dev, be

    def test_abi_mirrors(self):
        size = _lib.lib.eplb_abi_struct_size
        for name, py in (("eplb_cuda_ring", _lib.CudaRingC), ("eplb_cuda_table", _lib.CudaTableC),
                         ("eplb_cuda_dispatch", _lib.CudaDispatchC),
                         ("eplb_cuda_sample_ring", _lib.CudaSampleRingC),
                         ("eplb_runtime_device", _lib.RuntimeDeviceC),
                         ("eplb_runtime_device_stats", _lib.RuntimeDeviceStatsC)):
            self.assertGreater(size(name.encode()), 0, name)
            self.assertEqual(size(name.encode()), ctypes.sizeof(py), name)

    @needs_no_device
    def test_cuda_device_is_attached_to_the_c_runtime(self):
        rt = eplb.Runtime(num_layers=2, num_experts=8, topk=2, slots_per_rank=10)
        self.addCleanup(rt.close)
        be = FakeBackend(0x5000)
        be.kind = "cuda"
        spy = Spy(self)
        with self.assertRaises(eplb.Error) as cm:
            eplb.cuda.DeviceDispatch(rt, device=0, window=3, backend=be)
        self.assertEqual(cm.exception.name, EXPECTED)
        self.assertEqual(spy.names(), ["eplb_runtime_device_attach"])
        cfg = spy.calls[0][1][1]._obj
        self.assertEqual((cfg.kind, cfg.ordinal, cfg.stream, cfg.window), (1, 0, 0x5000, 3))
        self.assertEqual(rt._devices, {})  # nothing attached: host calls go on
        rt.record(0, [[0, 1]])

    def test_record_and_map_go_to_the_device_runtime(self):
        rt, dev, be = self.make()
        host = eplb.Runtime(num_layers=2, num_experts=8, topk=2, slots_per_rank=10)
        self.addCleanup(host.close)
        spy = Spy(self)
        rows = [[0, 1], [2, 3], [4, 5]]
        ids, out = FakeTensor(rows), FakeTensor([[0, 0]] * 3)
        rt.record(1, ids)
        self.assertIs(rt.map(1, ids, token_base=7, out=out), out)
        self.assertEqual(spy.names(), ["eplb_runtime_device_record", "eplb_runtime_device_map"])
        self.assertEqual(spy.calls[0][1][1:], (1, ids.data_ptr(), 3))
        self.assertEqual(spy.calls[1][1][1:], (1, ids.data_ptr(), 3, 7, out.data_ptr()))
        self.assertEqual(out.values(), FL(host.map(1, rows, token_base=7)))
        fresh = rt.map(0, ids)  # out allocated by the backend
        self.assertEqual(fresh.values(), FL(host.map(0, rows)))

    def test_host_tensors_use_the_cpu_entry_points(self):
        spy = Spy(self)  # first: the runtime keeps its map function
        rt, dev, be = self.make()
        rows = [[0, 1], [0, 2], [3, 0]]
        ids = FakeTensor(rows, device=("cpu", None))
        out = FakeTensor([[0, 0]] * 3, device=("cpu", None))
        rt.record(0, ids, stream=123)  # stream: ignored for host memory
        self.assertIs(rt.map(0, ids, out=out), out)
        self.assertEqual(spy.names(), ["eplb_runtime_device_attach", "eplb_runtime_record",
                                       "eplb_runtime_map"])
        self.assertEqual(out.values(), FL(rt.map(0, rows)))
        with self.assertRaises(TypeError):  # a CUDA tensor where host memory is needed
            rt.record_counts(0, FakeTensor([[0] * 8], dtype="torch.uint32"))

    def test_bad_arguments_raise_before_any_c_call(self):
        rt, dev, be = self.make()
        spy = Spy(self)
        good = FakeTensor([[0, 1]])
        cases = [
            (TypeError, lambda: rt.record(0, FakeTensor([[0, 1]], dtype="torch.int64"))),
            (ValueError, lambda: rt.record(0, FakeTensor([[0, 1, 2]]))),
            (ValueError, lambda: rt.record(0, FakeTensor([[0, 1]], shape=(2,)))),
            (ValueError, lambda: rt.record(0, FakeTensor([[0, 1]], contiguous=False))),
            (ValueError, lambda: dev.record(0, FakeTensor([[0, 1]], device=("cuda", 1)))),
            (TypeError, lambda: dev.record(0, FakeTensor([[0, 1]], device=("cpu", None)))),
            (TypeError, lambda: rt.record(0, good, stream="s0")),
            (TypeError, lambda: rt.map(0, good, out=FakeTensor([[0, 0]], dtype="torch.int64"))),
            (ValueError, lambda: rt.map(0, good, out=FakeTensor([[0, 0], [0, 0]]))),
            (ValueError, lambda: rt.map(0, good, out=FakeTensor([[0, 0]], device=("cuda", 1)))),
            (TypeError, lambda: rt.map(0, good, out=FakeTensor([[0, 0]], device=("cpu", None)))),
            (TypeError, lambda: rt.map(0, good, out=[[0, 0]])),
        ]
        for i, (exc, fn) in enumerate(cases):
            with self.subTest(case=i):
                with self.assertRaises(exc):
                    fn()
        self.assertEqual(spy.calls, [])
        with self.assertRaises(eplb.Error) as cm:  # the layer: checked by C, nothing enqueued
            rt.map(2, good)
        self.assertEqual(cm.exception.name, "EPLB_ERANGE")
        with self.assertRaises(ValueError):  # one DeviceDispatch per runtime
            eplb.cuda.DeviceDispatch(rt, device=0, backend=FakeBackend())
        with self.assertRaises(ValueError):
            eplb.cuda.DeviceDispatch(rt, device=1, window=0, backend=FakeBackend())

    def test_without_torch_the_gpu_path_says_so(self):
        # torch hidden (None in sys.modules: its import raises ImportError),
        # so this runs where CI installs Debian's torch too
        with mock.patch.dict(sys.modules, {"torch": None}):
            with eplb.Runtime(num_layers=1, num_experts=4, topk=2, slots_per_rank=4) as rt:
                with self.assertRaises(RuntimeError) as cm:
                    rt.record(0, FakeTensor([[0, 1]]))
                self.assertIn("needs torch", str(cm.exception))

    def test_step_end_feeds_counts_and_switches_tables(self):
        rt, dev, be = self.make(window=3)
        host = eplb.Runtime(num_layers=2, num_experts=8, topk=2, slots_per_rank=10,
                            interval_steps=2, window_steps=4, layers_per_step=2,
                            gain_threshold=0.0)
        self.addCleanup(host.close)
        rows = [[0, 1], [0, 2], [0, 3], [1, 0]]
        hot = FakeTensor(rows)
        out = FakeTensor([[0, 0]] * 4)
        epochs = []
        for s in range(8):
            for layer in range(2):
                rt.record(layer, hot)
                host.record(layer, rows)
                rt.map(layer, hot, token_base=4 * s, out=out)
                self.assertEqual(out.values(), FL(host.map(layer, rows, token_base=4 * s)))
            rt.step_end()
            host.step_end()
            epochs.append(rt.epoch)
            self.assertEqual(FL(rt.window()), FL(host.window()))  # fed at once here
        self.assertGreaterEqual(rt.epoch, 1)  # the hot expert made the runtime replan
        self.assertEqual(rt.epoch, host.epoch)
        st = dev.stats()
        self.assertEqual((st["steps"], st["steps_fed"], st["ring_waits"]), (8, 8, 0))
        self.assertEqual(st["flips"], rt.metrics()["layers_switched"])
        c = dev.counters()
        self.assertEqual(c, {"step": 8, "dropped": 0, "bad": 0})
        # Ids out of range: dropped by the count, -1 from the map.
        bad = FakeTensor([[0, 9]])
        rt.record(0, bad)
        self.assertEqual(rt.map(0, bad).values(), [FL(host.map(0, [[0, 1]]))[0], -1])
        self.assertEqual(dev.counters(), {"step": 8, "dropped": 1, "bad": 1})
        dev.flush()

    def test_late_copies_wait_only_when_the_ring_is_full(self):
        rt, dev, be = self.make(window=3, interval_steps=0)
        _lib.lib.eplb_runtime_device_inject(rt._p, 10**6, 0, 0)  # copies never finish alone
        hot = FakeTensor([[0, 1]] * 4)
        for _ in range(5):
            rt.record(0, hot)
            rt.step_end()
        st = dev.stats()
        self.assertEqual((st["steps"], st["ring_waits"], st["steps_fed"]), (5, 2, 2))
        dev.flush()  # rows 2..4 join the open step
        rt.step_end()
        # The window's 4 steps: nothing, row 0, row 1, rows 2..4 (8 ids each).
        self.assertEqual(sum(FL(rt.window())[:8]), 40.0)

    def test_explicit_stream_and_default_stream(self):
        rt, dev, be = self.make(stream=0x5000)
        spy = Spy(self)
        ids = FakeTensor([[0, 1]])
        rt.record(0, ids)  # the backend's current stream: the runtime's already
        rt.record(1, ids, stream=0x6000)  # another: the runtime moves to it
        rt.step_end()  # the last stream used
        rt.step_end(stream=0x5000)
        self.assertEqual(spy.names(), ["eplb_runtime_device_record", "eplb_runtime_device_set_stream",
                                       "eplb_runtime_device_record", "eplb_runtime_device_set_stream"])
        self.assertEqual(spy.calls[1][1][1], 0x6000)
        self.assertEqual(spy.calls[3][1][1], 0x5000)


if __name__ == "__main__":
    unittest.main()
