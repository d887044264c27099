"""The GPU path (eplb.cuda) without torch and without a GPU: tensor-like fakes
route to the CUDA entry points (which answer ENODEVICE, or EUNSUPPORTED in a
build without CUDA), host tensors to the CPU ones, bad arguments raise before
any C call, and the step boundary's bookkeeping (count feed, ring step, table
upload and switch) is checked against host emulations of the kernels."""

import ctypes
import unittest

import eplb
from eplb import _lib

FL = eplb._arrays.flat_list
CUDA_FNS = ("eplb_cuda_count", "eplb_cuda_step", "eplb_cuda_map", "eplb_cuda_table_upload",
            "eplb_cuda_switch")


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


class FakeEvent:
    def __init__(self, backend):
        self.backend, self.done = backend, backend.ready

    def query(self):
        return self.done

    def synchronize(self):
        self.backend.waits += 1
        self.done = True


class FakeBuffer:
    def __init__(self, n):
        self.mem = (ctypes.c_uint32 * max(n, 1))()
        self.ptr = ctypes.addressof(self.mem)


class FakeBackend:
    """Host memory standing for device memory; copies happen at once, their
    events report done only when `ready` (else when waited for)."""

    def __init__(self, stream=0):
        self.stream, self.ready, self.waits, self.copies = stream, True, 0, 0

    def device_index(self, device):
        return 0 if device is None else getattr(device, "index", device)

    def zeros(self, nwords, index, pinned=False):
        return FakeBuffer(nwords)

    def current_stream(self, index):
        return self.stream

    def copy_async(self, dst, dst_off, src, src_off, n, stream, index):
        ctypes.memmove(dst.ptr + 4 * dst_off, src.ptr + 4 * src_off, 4 * n)
        self.copies += 1
        return FakeEvent(self)

    def empty_like(self, t, stream, index):
        return FakeTensor([[0] * t.shape[1]] * t.shape[0])

    def read(self, buf, n, stream, index):
        return list(buf.mem)[:n]


class Spy:
    """Replaces libeplb functions by recorders (forwarding, or a stand-in)."""

    def __init__(self, test, **stand_ins):
        self.calls = []
        for name in CUDA_FNS + ("eplb_runtime_record", "eplb_runtime_map"):
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
                         ("eplb_cuda_sample_ring", _lib.CudaSampleRingC)):
            self.assertGreater(size(name.encode()), 0, name)
            self.assertEqual(size(name.encode()), ctypes.sizeof(py), name)

    @needs_no_device
    def test_record_goes_to_cuda_count(self):
        rt, dev, be = self.make(stream=0)
        spy = Spy(self)
        ids = FakeTensor([[0, 1], [2, 3], [4, 5]])
        with self.assertRaises(eplb.Error) as cm:
            rt.record(1, ids)
        self.assertEqual(cm.exception.name, EXPECTED)
        self.assertEqual(spy.names(), ["eplb_cuda_count"])
        _, args = spy.calls[0]
        self.assertEqual(args[1:], (1, ids.data_ptr(), 3, 2, 0))
        ring = args[0]._obj
        self.assertEqual((ring.window, ring.num_layers, ring.num_experts), (4, 2, 8))

    @needs_no_device
    def test_map_goes_to_cuda_map_on_the_stream(self):
        rt, dev, be = self.make()
        spy = Spy(self, eplb_cuda_table_upload=ok, eplb_cuda_switch=ok)
        ids, out = FakeTensor([[0, 1], [2, 3]]), FakeTensor([[0, 0], [0, 0]])

        class Stream:
            cuda_stream = 0

        with self.assertRaises(eplb.Error) as cm:
            rt.map(0, ids, token_base=7, out=out, stream=Stream())
        self.assertEqual(cm.exception.name, EXPECTED)
        # The first map uploads every layer's table into buffer 0, no switch.
        self.assertEqual(spy.names(), ["eplb_cuda_table_upload"] * 2 + ["eplb_cuda_map"])
        self.assertEqual([a[1] for _, a in spy.calls[:2]], [0, 1])
        self.assertEqual([a[3] for _, a in spy.calls[:2]], [0, 0])
        args = spy.calls[2][1]
        self.assertEqual(args[1:7], (0, ids.data_ptr(), 2, 2, 7, out.data_ptr()))
        self.assertEqual(args[8], 0)

    @needs_no_device
    def test_map_uploads_tables_first(self):
        rt, dev, be = self.make()
        ids, out = FakeTensor([[0, 1], [2, 3]]), FakeTensor([[0, 0], [0, 0]])
        for _ in range(2):  # a failed upload is retried by the next map
            with self.assertRaises(eplb.Error) as cm:
                rt.map(0, ids, out=out)
            self.assertEqual(cm.exception.name, EXPECTED)
            self.assertEqual(cm.exception.call, "eplb_cuda_table_upload")
            self.assertIsNone(dev._table_epoch)

    def test_host_tensors_use_the_cpu_entry_points(self):
        spy = Spy(self)  # first: the runtime keeps its map function
        rt, dev, be = self.make()
        rows = [[0, 1], [0, 2], [3, 0]]
        ids = FakeTensor(rows, device=("cpu", None))
        out = FakeTensor([[0, 0]] * 3, device=("cpu", None))
        rt.record(0, ids, stream=123)  # stream: ignored for host memory
        self.assertIs(rt.map(0, ids, out=out), out)
        self.assertEqual(spy.names(), ["eplb_runtime_record", "eplb_runtime_map"])
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
            (eplb.Error, lambda: rt.map(2, good)),
        ]
        for i, (exc, fn) in enumerate(cases):
            with self.subTest(case=i):
                with self.assertRaises(exc):
                    fn()
        self.assertEqual(spy.calls, [])
        with self.assertRaises(ValueError):  # one DeviceDispatch per device and runtime
            eplb.cuda.DeviceDispatch(rt, device=0, backend=FakeBackend())
        with self.assertRaises(ValueError):
            eplb.cuda.DeviceDispatch(rt, device=1, window=0, backend=FakeBackend())

    def test_without_torch_the_gpu_path_says_so(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            pass
        else:
            self.skipTest("torch is installed")
        with eplb.Runtime(num_layers=1, num_experts=4, topk=2, slots_per_rank=4) as rt:
            with self.assertRaises(RuntimeError) as cm:
                rt.record(0, FakeTensor([[0, 1]]))
            self.assertIn("torch", str(cm.exception))

    def emulate(self, dev):
        """Host stand-ins for count and step over the fake device memory."""
        L, E, W = dev.num_layers, dev.num_experts, dev.window
        counts = dev._counts.mem
        step = dev._scalars.mem

        def count(ring, layer, ptr, n, k, stream):
            ids = ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int32))
            row = step[0] % W
            for i in range(n * k):
                e = ids[i]
                if 0 <= e < E:
                    counts[(row * L + layer) * E + e] += 1
                else:
                    step[1] += 1
            return 0

        def advance(ring, stream):
            step[0] += 1
            row = step[0] % W
            for i in range(L * E):
                counts[row * L * E + i] = 0
            return 0

        return count, advance

    def test_step_end_feeds_counts_steps_ring_and_switches_tables(self):
        rt, dev, be = self.make(window=3)
        count, advance = self.emulate(dev)
        spy = Spy(self, eplb_cuda_count=count, eplb_cuda_step=advance, eplb_cuda_table_upload=ok,
                  eplb_cuda_switch=ok)
        hot = FakeTensor([[0, 1], [0, 2], [0, 3], [1, 0], [9, 0]])  # 9: out of range, dropped
        be.ready = False  # copies complete only when waited for
        epochs = []
        for s in range(8):
            for layer in range(2):
                rt.record(layer, hot)
            rt.step_end()
            epochs.append(rt.epoch)
        self.assertEqual(dev.counters()["step"], 8)
        self.assertEqual(dev.counters()["dropped"], 8 * 2)
        self.assertEqual(be.copies, 8)
        self.assertEqual(be.waits, 8 - 2)  # only when the window's copies are all in flight
        self.assertEqual(len(dev._pending), 2)
        dev.flush()
        self.assertEqual(len(dev._pending), 0)
        self.assertEqual(rt.metrics()["steps"], 8)
        w = FL(rt.window())  # the runtime's window (4 steps) holds fed device counts
        self.assertEqual(w[0] + w[1] + w[2] + w[3], 4 * 9.0)
        self.assertEqual(w[8], w[0])  # layer 1 like layer 0
        # Tables: uploaded into buffer 0 at the first step boundary, then into
        # the idle buffer plus a switch for every runtime epoch change.
        ups = [a for n, a in spy.calls if n == "eplb_cuda_table_upload"]
        switches = [a for n, a in spy.calls if n == "eplb_cuda_switch"]
        changes = len(set(epochs)) - 1 + (epochs[0] != 0)
        self.assertGreaterEqual(changes, 1)  # the hot expert made the runtime replan
        self.assertEqual(len(ups), 2 * (1 + changes))
        self.assertEqual(len(switches), 2 * changes)
        self.assertEqual([a[3] for a in ups[::2]], [0] + [(i + 1) & 1 for i in range(changes)])
        self.assertEqual(dev._dev_epoch, [changes, changes])

    def test_explicit_stream_and_default_stream(self):
        rt, dev, be = self.make(stream=0x5000)
        count, advance = self.emulate(dev)
        spy = Spy(self, eplb_cuda_count=count, eplb_cuda_step=advance, eplb_cuda_table_upload=ok,
                  eplb_cuda_switch=ok)
        ids = FakeTensor([[0, 1]])
        rt.record(0, ids)  # the backend's current stream
        rt.record(1, ids, stream=0x6000)
        rt.step_end()  # the last stream used
        streams = [(n, a[-1]) for n, a in spy.calls]
        self.assertEqual(streams[0], ("eplb_cuda_count", 0x5000))
        self.assertEqual(streams[1], ("eplb_cuda_count", 0x6000))
        self.assertTrue(all(s == 0x6000 for _, s in streams[2:]), streams)


if __name__ == "__main__":
    unittest.main()
