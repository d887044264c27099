import ctypes
import json

import eplb
from support import SAMPLES, TempDirCase, cli, needs_cli, needs_numpy, np

FL = eplb._arrays.flat_list


class PlanVsCli(TempDirCase):
    def _loads(self):
        src = SAMPLES / "esft-dsv2lite" / "topk_ids.npy"
        path = self.tmp / "esft.eplbt"
        eplb.convert_trace(src, path, from_format="npy-topk", tokens_per_step=2048)
        return path

    @needs_cli
    def test_planner_identical_to_cli(self):
        path = self._loads()
        loads = eplb.read_loads(path)
        for policy, extra in (("balanced", {}), ("deepseek", {"num_groups": 8}),
                              ("balanced", {"num_groups": 8, "keep_groups_on_nodes": True})):
            with self.subTest(policy=policy, **extra):
                args = ["plan", "--loads", path, "--gpus", 8, "--nodes", 2, "--replicas", 80,
                        "--policy", policy, "-o", self.tmp / "cli.json"]
                if "num_groups" in extra:
                    args += ["--groups", extra["num_groups"]]
                if extra.get("keep_groups_on_nodes"):
                    args += ["--keep-groups-on-nodes"]
                cli(*args)
                with eplb.plan(loads, num_gpus=8, num_nodes=2, num_replicas=80, policy=policy,
                               **extra) as p, eplb.Plan.read(self.tmp / "cli.json") as q:
                    self.assertEqual(p.policy, policy)
                    self.assertEqual(FL(p.phy2log()), FL(q.phy2log()))
                    for a, b in zip(FL(p.share()), FL(q.share())):
                        self.assertAlmostEqual(a, b, places=12)
                    q.evaluate(loads)
                    self.assertAlmostEqual(p.summary().mean_balancedness,
                                           q.summary().mean_balancedness, places=12)

    @needs_cli
    def test_python_plan_read_by_cli(self):
        path = self._loads()
        loads = eplb.read_loads(path)
        p = eplb.plan(loads, num_gpus=8, num_replicas=72)
        out = self.tmp / "py.json"
        p.write(out)
        doc = json.loads(out.read_text())
        self.assertEqual(doc["format"], "eplb-plan")
        ev = cli("plan", "eval", "--plan", out, "--loads", path, "--json")
        s = p.summary()
        self.assertAlmostEqual(ev["summary"]["mean_balancedness"], s.mean_balancedness, places=8)
        for l, layer in enumerate(ev["layers"]):
            self.assertAlmostEqual(layer["max_load"] / p.layer_metrics(l).max_load, 1.0, places=8)
        self.assertEqual(FL(eplb.Plan.read(out).phy2log()), FL(p.phy2log()))
        # One summary object: the library's, the plan file's and the CLI's.
        sj = p.summary_json()
        self.assertEqual(sj["policy"], s.policy)
        self.assertEqual(sj["layers"], len(loads))
        self.assertEqual(sj["mean_balancedness"], s.mean_balancedness)
        self.assertEqual(doc["summary"], sj)
        ev_sum = dict(sj)
        del ev_sum["seconds"]
        self.assertEqual(set(ev["summary"]), set(ev_sum))
        # snprintf-like: the full length always, a truncated copy that ends in NUL.
        n = ctypes.c_size_t()
        eplb.lib.eplb_plan_summary_json(p._p, None, 0, ctypes.byref(n))
        small = ctypes.create_string_buffer(b"x" * 10)
        eplb.lib.eplb_plan_summary_json(p._p, small, 6, ctypes.byref(n))
        self.assertEqual(small.value, json.dumps(sj, separators=(",", ":")).encode()[:5])
        self.assertGreater(n.value, 5)

    def test_every_policy_and_export(self):
        loads = [[float((7 * e + l) % 13 + 1) for e in range(8)] for l in range(2)]
        self.assertEqual(set(eplb.POLICIES), {"deepseek", "balanced", "mip"} | set(eplb.POLICIES))
        base = eplb.plan(loads, num_gpus=2, num_replicas=10, policy="deepseek")
        path = self.tmp / "co.eplbt"
        eplb.synth_trace(path, num_layers=2, num_experts=8, topk=2, num_steps=2, tokens_per_step=32)
        cl = eplb.Cluster("2x1")
        extra = {"incremental": {"from_plan": base}, "decode": {"model": "deepseek-v3", "gpu": "h20"}}
        if "locality" in eplb.POLICIES:
            with eplb.Trace(path) as t:
                extra["locality"] = {"cluster": cl, "coact": eplb.Coactivation(t, cl), "num_nodes": 2}
        for pol in eplb.POLICIES:
            with self.subTest(policy=pol):
                with eplb.plan(loads, num_gpus=2, num_replicas=10, policy=pol, time_limit=2,
                               **extra.get(pol, {})) as p:
                    self.assertEqual(p.policy, pol)
                    self.assertEqual(sum(FL(p.logcnt(0))), 10)
                    m = p.layer_metrics(1)
                    self.assertGreaterEqual(m.max_load, m.lower_bound - 1e-9)
                    self.assertLessEqual(p.summary().max_ratio, 1.5)
        with eplb.plan(loads, num_gpus=2, num_replicas=10) as p:
            for fmt in eplb.EXPORT_FORMATS:
                d = self.tmp / fmt
                d.mkdir()
                p.export(fmt, d)
                self.assertTrue(any(d.iterdir()), fmt)
            sg = json.loads((self.tmp / "sglang" / "expert_location.json").read_text())
            self.assertEqual(sg["physical_to_logical_map"], [FL(p.phy2log(l)) for l in range(2)])

    def test_uneven_slots_and_set_shares(self):
        loads = [[10.0, 1.0, 1.0, 1.0]]
        with eplb.plan(loads, num_gpus=2, num_replicas=6, slots_per_gpu=[2, 4]) as p:
            self.assertEqual(FL(p.slots_per_gpu), [2, 4])
            with eplb.SplitSolver() as s:
                r = s.solve(loads[0], p.phy2log(0), p.slots_per_gpu)
            p.set_shares(0, r.share)
            p.evaluate(loads)
            self.assertAlmostEqual(p.layer_metrics(0).max_load, r.max_load, places=9)

    def test_effort(self):
        # eplb.compat's online search against the default, by name; an unknown one refused.
        loads = [[float((7 * e) % 11 + 1) for e in range(12)]]
        self.assertEqual(eplb.EFFORTS, ("full", "online"))
        for effort in ("full", "online"):
            with eplb.plan(loads, num_gpus=4, num_replicas=16, shares="uniform",
                           effort=effort) as p:
                self.assertEqual(len(FL(p.phy2log(0))), 16)
        with self.assertRaises(eplb.Error) as cm:
            eplb.plan(loads, num_gpus=4, num_replicas=16, shares="uniform", effort="fast")
        self.assertIn("effort", str(cm.exception))

    @needs_numpy
    def test_loads_zero_copy(self):
        loads = np.arange(16, dtype=np.float64).reshape(2, 8) + 1
        s, keep = eplb.trace.loads_struct(loads)
        self.assertEqual(s.values, loads.ctypes.data)
        sliced = np.ones((2, 16))[:, ::2]  # not contiguous: copied, still correct
        with eplb.plan(sliced, num_gpus=2, num_replicas=8) as p:
            self.assertEqual(p.num_experts, 8)
