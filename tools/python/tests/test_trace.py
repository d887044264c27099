import array
import gc

import eplb
from support import CLI, SAMPLES, TempDirCase, cli, needs_cli, needs_numpy, np


class TraceRoundTrip(TempDirCase):
    @needs_cli
    def test_cli_synth_read_by_python(self):
        path = self.tmp / "s.eplbt"
        cli("trace", "gen", "--layers", 3, "--experts", 16, "--topk", 4, "--steps", 7,
            "--tokens-per-step", 64, "--seed", 5, "-o", path)
        info = cli("trace", "info", path, "--json")
        with eplb.Trace(path) as t:
            self.assertEqual(len(t), 7)
            self.assertEqual((t.meta.num_layers, t.meta.num_experts, t.meta.topk), (3, 16, 4))
            self.assertEqual(t.num_tokens, 7 * 64)
            self.assertTrue(t.has_topk)
            self.assertEqual(info.get("steps", info.get("num_steps")), 7)
            steps = list(t)
            self.assertEqual([s.index for s in steps], list(range(7)))
            s0 = t[0]
            self.assertEqual(tuple(s0.counts.shape), (3, 16))
            self.assertEqual(tuple(s0.topk.shape), (64, 3, 4))
            # counts agree with the stored rows (every token is stored)
            if np is not None:
                for l in range(3):
                    self.assertTrue(np.array_equal(
                        np.bincount(s0.topk[:, l, :].ravel(), minlength=16), s0.counts[l]))
                total = t.window_sum()
                self.assertTrue(np.array_equal(total, sum(s.counts.astype(float) for s in steps)))

    @needs_cli
    @needs_numpy
    def test_python_writer_read_by_cli(self):
        meta = eplb.TraceMeta(2, 8, topk=2, model="py-test", phase="decode")
        rng = np.random.default_rng(1)
        counts = [rng.integers(0, 50, (2, 8), dtype=np.uint32) for _ in range(5)]
        path = self.tmp / "w.eplbt"
        with eplb.TraceWriter(path, meta, steps_per_chunk=2) as w:
            for c in counts:
                w.append(c)
            self.assertEqual(w.num_steps, 5)
        self.assertTrue(w.closed)
        npy = self.tmp / "w.npy"
        cli("trace", "convert", path, npy)
        back = np.load(npy)
        self.assertEqual(back.shape, (5, 2, 8))
        self.assertTrue(np.array_equal(back, np.stack(counts)))
        info = cli("trace", "info", path, "--json")
        self.assertIn("py-test", str(info))

    @needs_numpy
    def test_append_and_recover(self):
        meta = eplb.TraceMeta(1, 4, topk=1)
        path = self.tmp / "a.eplbt"
        with eplb.TraceWriter(path, meta) as w:
            w.append(np.array([[1, 2, 3, 4]], dtype=np.uint32))
        with eplb.TraceWriter(path, append=True) as w:
            w.append(np.array([[4, 3, 2, 1]], dtype=np.uint32))
            self.assertEqual(w.num_steps, 2)
        with eplb.Trace(path) as t:
            self.assertEqual(t.window_sum().tolist(), [[5.0, 5.0, 5.0, 5.0]])
        rep = eplb.recover_trace(path, self.tmp / "r.eplbt")
        self.assertEqual(rep["steps_recovered"], 2)

    def test_writer_discards_on_exception(self):
        meta = eplb.TraceMeta(1, 4)
        path = self.tmp / "x.eplbt"
        with self.assertRaises(RuntimeError):
            with eplb.TraceWriter(path, meta) as w:
                w.append([[1, 1, 1, 1]])
                raise RuntimeError("boom")
        self.assertFalse(path.exists())

    def test_topk_npy_convert_and_loads(self):
        src = SAMPLES / "esft-dsv2lite" / "topk_ids.npy"
        out = self.tmp / "esft.eplbt"
        eplb.convert_trace(src, out, from_format="npy-topk", tokens_per_step=4096, topk_rows_per_step=0)
        with eplb.Trace(out) as t:
            self.assertEqual((t.meta.num_layers, t.meta.num_experts, t.meta.topk), (26, 64, 6))
            self.assertEqual(t.num_tokens, 33279)
            w = t.window_sum()
        loads = eplb.read_loads(out)
        self.assertEqual(eplb._arrays.flat_list(loads), eplb._arrays.flat_list(w))
        csv = self.tmp / "l.csv"
        eplb.write_loads(loads, csv)
        self.assertEqual(eplb._arrays.flat_list(eplb.read_loads(csv)), eplb._arrays.flat_list(loads))

    def test_format_names_and_aliases(self):
        # One canonical name per format, from the library; the aliases parse too.
        self.assertEqual(eplb.trace.FORMATS,
                         ("auto", "eplbt", "counts-npy", "topk-npy", "csv", "csv-matrix"))
        code = eplb.trace.format_code
        self.assertEqual(code("npy-topk"), code("topk-npy"))
        self.assertEqual(code("npy-counts"), code("counts-npy"))
        self.assertEqual(code("npy"), code("counts-npy"))
        self.assertEqual(code("native"), code("eplbt"))
        with self.assertRaises(ValueError):
            code("topk")
        src = SAMPLES / "esft-dsv2lite" / "topk_ids.npy"
        a, b = self.tmp / "a.eplbt", self.tmp / "b.eplbt"
        eplb.convert_trace(src, a, from_format="topk-npy", to_format="eplbt", tokens_per_step=4096)
        eplb.convert_trace(src, b, from_format="npy-topk", to_format="native", tokens_per_step=4096)
        self.assertEqual(a.read_bytes(), b.read_bytes())

    @needs_cli
    def test_stats_equal_cli(self):
        path = self.tmp / "s.eplbt"
        eplb.synth_trace(path, num_layers=3, num_experts=32, topk=4, num_steps=12,
                         tokens_per_step=64, seed=4)
        j = cli("trace", "stats", path, "--ep", "4,8", "--steps", "2:9", "--json")
        with eplb.Trace(path) as t:
            s = t.stats(2, 9, ep=[4, 8])
            self.assertEqual(t.stats()["ep"], [8, 16, 32])
            with self.assertRaises(eplb.Error):
                t.stats(ep=[33])
            with self.assertRaises(eplb.Error):
                t.stats(12)
        self.assertEqual(s["steps"], (2, 9))
        self.assertEqual(j["steps"], 7)
        self.assertEqual(s["ep"], j["ep"])
        for l, jl in enumerate(j["layers"]):
            self.assertAlmostEqual(s["busiest_expert_over_mean"][l], jl["busiest_expert_over_mean"],
                                   places=8)
            for ep in (4, 8):
                self.assertAlmostEqual(s["busiest_gpu_over_mean"][l][ep],
                                       jl["busiest_gpu_over_mean"][str(ep)], places=8)
                self.assertAlmostEqual(s["busiest_gpu_over_mean_per_step"][l][ep],
                                       jl["busiest_gpu_over_mean_per_step"][str(ep)], places=8)
        self.assertAlmostEqual(s["mean_busiest_gpu_over_mean_per_step"][8],
                               j["summary"]["busiest_gpu_over_mean"]["8"]["per_step"], places=8)

    def test_synth_python_equals_cli(self):
        a = self.tmp / "a.eplbt"
        eplb.synth_trace(a, num_layers=2, num_experts=8, topk=2, num_steps=4, tokens_per_step=32, seed=9)
        with eplb.Trace(a) as t:
            self.assertEqual(len(t), 4)
            if CLI:
                b = self.tmp / "b.eplbt"
                cli("trace", "gen", "--layers", 2, "--experts", 8, "--topk", 2, "--steps", 4,
                    "--tokens-per-step", 32, "--seed", 9, "-o", b)
                with eplb.Trace(b) as u:
                    for i in range(4):
                        self.assertEqual(eplb._arrays.flat_list(t[i].counts),
                                         eplb._arrays.flat_list(u[i].counts))

    def test_finalizer_closes(self):
        a = self.tmp / "a.eplbt"
        eplb.synth_trace(a, num_layers=1, num_experts=4, topk=1, num_steps=1, tokens_per_step=8)
        t = eplb.Trace(a)
        fin = t._finalizer
        del t
        gc.collect()
        self.assertFalse(fin.alive)

    def test_array_array_counts(self):
        meta = eplb.TraceMeta(1, 3)
        path = self.tmp / "aa.eplbt"
        with eplb.TraceWriter(path, meta) as w:
            w.append(array.array("I", [7, 8, 9]), num_tokens=24)
        with eplb.Trace(path) as t:
            self.assertEqual(eplb._arrays.flat_list(t[0].counts), [7, 8, 9])
            self.assertEqual(t[0].num_tokens, 24)
