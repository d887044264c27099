import eplb
from support import TempDirCase, needs_numpy, np

FL = eplb._arrays.flat_list


class Split(TempDirCase):
    def test_exact_matches_glpk(self):
        loads = [9.0, 1.0, 4.0, 2.0, 0.0, 7.0]
        p2l = [0, 1, 0, 2, 3, 4, 5, 0]
        spg = [2, 3, 3]
        with eplb.SplitSolver() as s:
            a = s.solve(loads, p2l, spg, bottleneck=True, amounts=True)
            b = s.solve(loads, p2l, spg, method="glpk")
        self.assertAlmostEqual(a.t_star, b.t_star, places=9)
        self.assertAlmostEqual(max(FL(a.gpu_load)), a.max_load, places=9)
        self.assertAlmostEqual(sum(FL(a.amount)), sum(loads), places=9)
        self.assertEqual(sum(FL(a.bottleneck_experts)), a.num_bottleneck_experts)

    def test_integer_mode_and_out_arrays(self):
        with eplb.SplitSolver(mode="integer") as s:
            share, gl = eplb._arrays.empty("f8", (4,))[0], eplb._arrays.empty("f8", (2,))[0]
            r = s.solve([5.0, 3.0], [0, 1, 0, 1], [2, 2], share_out=share, gpu_load_out=gl)
            self.assertIs(r.share, share)
            self.assertEqual(r.max_load, 4.0)
            self.assertEqual(sorted(FL(gl)), [4.0, 4.0])
        with self.assertRaises(eplb.Error) as cm:
            eplb.SplitSolver(mode="integer").solve([1.5], [0], [1])
        self.assertEqual(cm.exception.name, "EPLB_EINVAL")

    def test_graph_place(self):
        p2l, spg = eplb.split_graph_place("cube", 8, 8, 4, 2)
        self.assertEqual(FL(spg), [6] * 8)
        self.assertEqual(len(FL(p2l)), 48)
        with self.assertRaises(eplb.Error):
            eplb.split_graph_place("cube", 16, 16, 4, 2)


class ClusterSim(TempDirCase):
    def test_cluster(self):
        with eplb.Cluster("2x4") as c:
            self.assertEqual((c.num_nodes, c.num_gpus), (2, 4 * 2))
            self.assertEqual(c.node_of(5), 1)
            self.assertEqual(c.link(0, 1), "intra-node")
            self.assertEqual(c.link(0, 5), "inter-node")
            self.assertEqual(c.node(1)["first_gpu"], 4)
            self.assertEqual(len(c.info()["gpus"]), 8)
            with self.assertRaises(eplb.Error):
                c.gpu(8)
            with self.assertRaises(IndexError):
                c.node_of(8)
        with eplb.Cluster.uniform(1, 2) as c:
            self.assertEqual(c.num_gpus, 2)
        with self.assertRaises(eplb.Error):
            eplb.Cluster("2y4")

    def test_simulate_plan_and_policy(self):
        path = self.tmp / "s.eplbt"
        eplb.synth_trace(path, num_layers=2, num_experts=16, topk=2, num_steps=12, tokens_per_step=64)
        loads = eplb.read_loads(path)
        with eplb.Trace(path) as t, eplb.Cluster("2x2") as c, \
                eplb.plan(loads, num_gpus=4, num_nodes=2, num_replicas=20) as p:
            a = eplb.simulate(t, c, p)
            self.assertEqual(a.num_steps, 12)
            self.assertEqual(a.num_plans, 1)
            seen = []
            b = eplb.simulate(t, c, p, split_per_batch=True, on_step=seen.append)
            self.assertEqual([d["step"] for d in seen], list(range(12)))
            self.assertEqual(len(FL(seen[0]["gpu_tokens"])), 4)
            self.assertGreaterEqual(b.mean_balancedness, b.mean_plan_balancedness - 1e-12)
        r = eplb.simulate(path, "2x2", num_replicas=20, policy="deepseek", rebalance_every=4)
        self.assertEqual(r.num_plans, 3)

    def test_simulate_callback_error_propagates(self):
        path = self.tmp / "s.eplbt"
        eplb.synth_trace(path, num_layers=1, num_experts=4, topk=1, num_steps=3, tokens_per_step=8)

        def boom(_):
            raise KeyError("from the callback")

        with self.assertRaises(KeyError):
            eplb.simulate(path, "1x2", num_replicas=4, on_step=boom)

    def test_cost_model(self):
        m = eplb.CostModel()
        self.assertEqual(m.expert_time(64), m.expert_time_us[0][1])
        f = self.tmp / "cost.json"
        f.write_text('{"format": "eplb-cost", "version": 1, "expert_time_us": [[10, 5]]}')
        self.assertEqual(eplb.CostModel.read(f).expert_time(1000), 5.0)
        with self.assertRaises(eplb.Error):
            eplb.CostModel(expert_time_us=[(10, 1), (5, 2)]).expert_time(1)
