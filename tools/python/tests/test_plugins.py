"""The vLLM and SGLang plugins (eplb.vllm, eplb.sglang), loaded through their
real entry-point mechanism in fresh interpreters against stand-ins of vLLM,
SGLang and torch (standins.py: no GPU, torch or vLLM needed): the interface
detected from the installed classes, nothing half-installed, bad input
refused before anything is planned, and an EPLB loop over several
processes whose maps agree byte for byte and move at most the budget."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import unittest

import eplb
import eplb.sglang
import eplb.vllm
import standins
from eplb import compat
from support import REPO, TempDirCase, needs_numpy, np

ENV = {"EPLB_LIBRARY": eplb.library_path}


def run(scenario, args=None, env=None, timeout=120):
    """(result dict, output) of `standins.py scenario args` in a fresh
    interpreter; AssertionError with its output when it fails."""
    p = subprocess.run([sys.executable, str(standins.HERE / "standins.py"), scenario,
                        json.dumps(args or {})], capture_output=True, text=True, env=env,
                       timeout=timeout)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise AssertionError(f"{scenario}: exit {p.returncode}\n{out}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    return json.loads(lines[-1][7:]), out


def start(scenario, args, env):
    return subprocess.Popen([sys.executable, str(standins.HERE / "standins.py"), scenario,
                             json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def finish(procs, timeout=120):
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise AssertionError(f"rank exit {p.returncode}\n{out}")
        outs.append(json.loads([l for l in out.splitlines() if l.startswith("RESULT ")][-1][7:]))
    return outs


def uniform_max(w, p2l, G):
    """Busiest GPU per layer when every replica gets 1/c of its expert."""
    out = []
    for l in range(p2l.shape[0]):
        c = np.bincount(p2l[l], minlength=w.shape[1])
        out.append((w[l, p2l[l]] / c[p2l[l]]).reshape(G, -1).sum(1).max())
    return np.array(out)


class Packaging(unittest.TestCase):
    def test_entry_points_declared(self):
        version, groups = standins.project_metadata()
        self.assertEqual(groups["vllm.general_plugins"], {"eplb": "eplb.vllm:register"})
        self.assertEqual(groups["sglang.srt.plugins"], {"eplb": "eplb.sglang:register"})
        meson = (REPO / "meson.build").read_text()
        self.assertEqual(version, re.search(r"version\s*:\s*'([^']+)'", meson).group(1))
        for value in ("eplb.vllm:register", "eplb.sglang:register"):
            mod, fn = value.split(":")
            self.assertTrue(callable(getattr(sys.modules[mod], fn)))

    def test_settings(self):
        from eplb import _serving as S

        for v, want in ((None, None), ("", None), ("0", None), ("off", None), ("1", "balanced"),
                        ("ON", "balanced"), ("balanced", "balanced"), ("deepseek", "deepseek")):
            self.assertEqual(S.policy_setting(v, "X"), want, v)
        for v in ("mip", "locality", "2", "incremental"):
            with self.assertRaises(ValueError) as cm:
                S.policy_setting(v, "X")
            self.assertIn("X", str(cm.exception))
        for pol in ("mip", "decode"):  # refused before vLLM or SGLang is even imported
            with self.assertRaises(ValueError):
                eplb.vllm.install(pol)
            with self.assertRaises(ValueError):
                eplb.sglang.install(pol)
        with self.assertRaises(ValueError):
            S.env_int("B", None, 0, {"B": "-1"})
        self.assertEqual(S.env_int("B", None, 0, {"B": "unlimited"}, ("unlimited",)), "unlimited")
        with self.assertRaises(ValueError):
            S.env_float("W", None, {"W": "nan"})


@needs_numpy
class VllmPolicy(TempDirCase):
    """eplb.vllm.rebalance, the plan the installed policy returns."""

    L, E, G, R, K, N = 6, 32, 8, 48, 4, 2

    def loads(self, seed):
        rng = np.random.default_rng(seed)
        return rng.integers(0, 60, (self.L, self.E)) + \
            (rng.random((self.L, self.E)) < 0.2) * rng.integers(100, 900, (self.L, self.E))

    def initial(self):
        return np.array([list(range(self.E)) + [i % self.E for i in range(self.R - self.E)]] * self.L)

    def test_budget_and_never_worse_than_keeping(self):
        L, E, G, R, K, N = self.L, self.E, self.G, self.R, self.K, self.N
        for budget in (0, 1, 2, 5, 12):
            cur = self.initial()
            for rnd in range(3):
                w = self.loads(rnd)
                p2l, rank, cnt = eplb.vllm.rebalance(w, R, K, N, G, cur, move_budget=budget)
                moved = (p2l != cur).sum(1)
                self.assertTrue((moved <= budget).all(), (budget, moved))
                if budget == 0:
                    self.assertTrue(np.array_equal(p2l, cur))
                # what vLLM serves: never worse than keeping the map
                self.assertTrue((uniform_max(w, p2l, G) <= uniform_max(w, cur, G) + 1e-9).all())
                self.assertTrue((cnt >= 1).all() and (cnt.sum(1) == R).all())
                l2p = compat.log2phy_from(p2l, rank, cnt)
                for l in range(L):
                    self.assertEqual(sorted(x for x in l2p[l].ravel().tolist() if x >= 0),
                                     list(range(R)))
                cur = p2l
        # A few rounds under the default budget (the ranks: 8 slots) come close
        # to the fresh plan, which moves nearly every slot.
        cur, w = self.initial(), self.loads(7)
        for _ in range(4):
            cur = eplb.vllm.rebalance(w, R, K, N, G, cur)[0]
        fresh = eplb.vllm.rebalance(w, R, K, N, G)[0]
        self.assertLess(uniform_max(w, cur, G).mean(), 1.1 * uniform_max(w, fresh, G).mean())
        self.assertLess(uniform_max(w, cur, G).mean(), 0.8 * uniform_max(w, self.initial(), G).mean())

    def test_same_bytes_any_thread_count(self):
        L, E, G, R, K, N = self.L, self.E, self.G, self.R, self.K, self.N
        w, cur = self.loads(3), self.initial()
        for old in (None, cur):
            outs = [eplb.vllm.rebalance(w, R, K, N, G, old, threads=t) for t in (1, 2, 3, 0)]
            for o in outs[1:]:
                self.assertEqual([a.tobytes() for a in o], [a.tobytes() for a in outs[0]])

    def test_unlimited_and_deepseek(self):
        L, E, G, R, K, N = self.L, self.E, self.G, self.R, self.K, self.N
        w, cur = self.loads(4), self.initial()
        fresh = eplb.vllm.rebalance(w, R, K, N, G)
        unl = eplb.vllm.rebalance(w, R, K, N, G, cur, move_budget="unlimited")
        # the same plan, experts that stay on a GPU keeping their slot
        self.assertTrue(np.array_equal(np.sort(unl[0].reshape(L, G, -1), -1),
                                       np.sort(fresh[0].reshape(L, G, -1), -1)))
        self.assertLessEqual(int((unl[0] != cur).sum()), int((fresh[0] != cur).sum()))
        ds = eplb.vllm.rebalance(w, R, K, N, G, cur, policy="deepseek")

        class DS(compat.VllmEplbPolicy):
            policy = "deepseek"

        ref = DS.rebalance_experts(w, R, K, N, G, old_global_expert_indices=cur)
        self.assertTrue(np.array_equal(ds[0], ref[0]))
        with self.assertRaises(ValueError):
            eplb.vllm.rebalance(w, R, K, N, G, cur, policy="mip")
        with self.assertRaises(ValueError):
            eplb.vllm.rebalance(w, R, K, N, G, cur, move_weight=float("nan"))
        with self.assertRaises(eplb.IntRangeError):
            eplb.vllm.rebalance(w, R, K, N, G, cur, move_budget=-1)


class Stacks(TempDirCase):
    """The plugins in fresh interpreters, loaded through their entry points."""

    def standins(self, name="si", **kw):
        return standins.write(self.tmp / name, **kw)

    def test_vllm_current_interface(self):
        root = self.standins()
        r, out = run("vllm_checks", {}, standins.env(root, dict(ENV, EPLB_VLLM_POLICY="1")))
        self.assertTrue(r["replaced"], out)
        self.assertEqual(r["keys"], ["default", "eplb"])
        self.assertTrue(r["same_in_every_entry"] and r["subclass"])
        self.assertEqual((r["returns"], r["shape"], r["dtype"], r["device"]),
                         ("Tensor", [4, 24], "torch.int64", "cpu"))
        bad = r["bad"]
        want = {
            "nan": ("ValueError", "layer 1 expert 3"),
            "inf": ("ValueError", "layer 2 expert 0"),
            "negative": ("ValueError", "layer 0 expert 5"),
            "rank3": ("ValueError", "2 dimensions"),
            "rank1": ("ValueError", "2 dimensions"),
            "replicas_below_experts": ("AssertionError", "num_replicas"),
            "replicas_not_multiple": ("AssertionError", "num_replicas"),
            "mip_setting": ("ValueError", "mip"),
            "old_rank1": ("ValueError", "old_global_expert_indices"),
            "old_rank3": ("ValueError", "old_global_expert_indices"),
            "old_layers": ("ValueError", "2 layers"),
            "old_out_of_range": ("ValueError", "layer 2 slot 7: expert 16"),
            "old_negative": ("ValueError", "layer 1 slot 0: expert -1"),
            "old_missing_expert": ("ValueError", "has no replica"),
            "old_float": ("TypeError", "old_global_expert_indices"),
        }
        self.assertEqual(sorted(bad), sorted(want))
        for k, (typ, text) in want.items():
            self.assertIsNotNone(bad[k], k)
            self.assertEqual(bad[k][0], typ, (k, bad[k]))
            self.assertIn(text, bad[k][1], k)
        self.assertEqual(r["planned_on_bad_input"], 0, "bad input refused before planning")
        self.assertEqual(r["elastic"], [4, 24])  # another slot count: planned afresh
        self.assertTrue(r["restored"], "uninstall() puts vLLM's table back")

    def test_vllm_tuple_and_unannotated_interfaces(self):
        for flavour, old in (("tuple", True), ("tuple013", False)):  # vLLM 0.14-0.18, 0.13
            with self.subTest(flavour=flavour):
                root = self.standins(flavour, vllm=flavour, sglang=False)
                r, out = run("vllm_checks", {"old": old},
                             standins.env(root, dict(ENV, EPLB_VLLM_POLICY="1")))
                self.assertTrue(r["replaced"], out)
                self.assertEqual(r["returns"], "tuple")
                self.assertEqual(r["shapes"][:2], [[4, 24], [4, 16, r["shapes"][1][2]]])
                self.assertEqual(r["shapes"][2], [4, 16])
                self.assertEqual(r["planned_on_bad_input"], 0)
                if old:
                    self.assertEqual(r["bad"]["old_out_of_range"][0], "ValueError")
        root = self.standins("bare", vllm="bare", sglang=False)
        r, out = run("vllm_checks", {}, standins.env(root, dict(ENV, EPLB_VLLM_POLICY="deepseek")))
        self.assertTrue(r["replaced"], out)
        self.assertEqual(r["returns"], "Tensor")  # asked the default policy once

    def test_vllm_nothing_half_installed(self):
        root = self.standins("unknown", vllm="unknown", sglang=False)
        r, out = run("vllm_checks", {}, standins.env(root, dict(ENV, EPLB_VLLM_POLICY="1")))
        self.assertFalse(r["replaced"])
        self.assertTrue(r["unchanged"], "the table is as vLLM made it")
        self.assertIn("not installed", out)
        root = self.standins()
        for extra, text in (({}, None),
                            ({"EPLB_VLLM_POLICY": "mip"}, "mip"),
                            ({"EPLB_VLLM_POLICY": "1", "EPLB_VLLM_MOVE_BUDGET": "-2"},
                             "EPLB_VLLM_MOVE_BUDGET"),
                            ({"EPLB_VLLM_POLICY": "1", "EPLB_PLAN_THREADS": "x"},
                             "EPLB_PLAN_THREADS"),
                            ({"EPLB_VLLM_POLICY": "1", "VLLM_PLUGINS": "other"}, None)):
            with self.subTest(env=extra):
                r, out = run("vllm_checks", {}, standins.env(root, dict(ENV, **extra)))
                self.assertFalse(r["replaced"])
                self.assertTrue(r["unchanged"])
                if text:
                    self.assertIn(text, out)

    def test_stacks_not_importable(self):
        root = self.standins("none", vllm=None, sglang=False, torch=False)
        for module, var, what in (("eplb.vllm", "EPLB_VLLM_POLICY", "vLLM"),
                                  ("eplb.sglang", "EPLB_SGLANG_POLICY", "SGLang")):
            r, out = run("register_only", {"module": module}, standins.env(root, dict(ENV, **{var: "1"})))
            self.assertIsNone(r["returned"])
            self.assertIn(f"{what}'s EPLB", out)
            self.assertIn("cannot be imported", out)

    def test_sglang_hook(self):
        root = self.standins()
        r, out = run("sglang_checks", {}, standins.env(root, dict(ENV, EPLB_SGLANG_POLICY="1")))
        self.assertTrue(r["installed"], out)
        for name, res in r["falls_through"].items():
            self.assertIsNone(res["error"], (name, res))
            self.assertTrue(res["original_called"], name)
        for name, shapes in r["eplb_planned"].items():
            self.assertEqual(shapes[0], [4, 24], name)
            self.assertEqual(shapes[2], [4, 16], name)
        self.assertEqual(r["original_calls_for_eplb_cases"], 0)
        want = {"nan": ("ValueError", "step 2 layer 1 expert 3"),
                "inf": ("ValueError", "step 0 layer 3 expert 2"),
                "negative": ("ValueError", "step 4 layer 0 expert 0"),
                "rank4": ("ValueError", "tokens_per_expert"),
                "rank1": ("ValueError", "tokens_per_expert"),
                "replicas_below_experts": ("AssertionError", "num_replicas"),
                "groups_not_dividing_nodes": ("AssertionError", "num_groups")}
        for k, (typ, text) in want.items():
            self.assertEqual(r["bad"][k][0], typ, (k, r["bad"][k]))
            self.assertIn(text, r["bad"][k][1])
        self.assertEqual(r["planned_on_bad_input"], 0)
        self.assertTrue(r["restored"])
        r, out = run("sglang_checks", {}, standins.env(root, dict(ENV, EPLB_SGLANG_POLICY="mip")))
        self.assertFalse(r["installed"])
        self.assertIn("mip", out)

    @needs_numpy
    def test_vllm_ranks_agree_and_move_within_budget(self):
        """An EPLB loop over 4 processes (one per EP rank, each with another
        planner thread count): record a window, all-reduce it, call the
        policy on every rank from the current map. Every rank's map is the
        same, byte for byte, and the same as this process plans; each
        rebalance changes at most the budget of slots per layer."""
        root = self.standins()
        d = self.tmp / "loop"
        d.mkdir()
        world, rounds, budget = 4, 3, 3
        procs = [start("vllm_rank", {"rank": k, "world": world, "dir": str(d), "rounds": rounds},
                       standins.env(root, dict(ENV, EPLB_VLLM_POLICY="1",
                                               EPLB_VLLM_MOVE_BUDGET=str(budget),
                                               EPLB_PLAN_THREADS=str(t))))
                 for k, t in zip(range(world), (1, 2, 3, 0))]
        res = finish(procs)
        self.assertEqual({r["policy"] for r in res}, {"eplb.vllm.EplbVllmPolicy"})
        sh = standins.SHAPE
        L, E, G, R, K, N = (sh[k] for k in "L E G R K N".split())
        cur = np.array([list(range(E)) + [i % E for i in range(R - E)]] * L)
        first = uniform_max(np.load(d / "load0.npy"), cur, G)
        moved_any = 0
        for rnd in range(rounds):
            blobs = [(d / f"map{rnd}.k{k}.bin").read_bytes() for k in range(world)]
            self.assertEqual(len(set(blobs)), 1, f"round {rnd}: ranks disagree")
            new = np.frombuffer(blobs[0], dtype=np.int64).reshape(L, R)
            load = np.load(d / f"load{rnd}.npy")
            mine = eplb.vllm.rebalance(load, R, K, N, G, cur, move_budget=budget)[0]
            self.assertEqual(mine.tobytes(), blobs[0], f"round {rnd}: not this process's plan")
            moved = (new != cur).sum(1)
            self.assertTrue((moved <= budget).all(), f"round {rnd}: moved {moved.tolist()}")
            moved_any += int(moved.sum())
            self.assertTrue((uniform_max(load, new, G) <= uniform_max(load, cur, G) + 1e-9).all())
            cur = new
        self.assertGreater(moved_any, 0)
        self.assertLess(uniform_max(np.load(d / "load0.npy"), cur, G).mean(), first.mean())

    @needs_numpy
    def test_sglang_ranks_agree(self):
        root = self.standins()
        d = self.tmp / "loop"
        d.mkdir()
        world, rounds = 4, 2
        procs = [start("sglang_rank", {"rank": k, "world": world, "dir": str(d), "rounds": rounds},
                       standins.env(root, dict(ENV, EPLB_SGLANG_POLICY="1",
                                               EPLB_PLAN_THREADS=str(t))))
                 for k, t in zip(range(world), (1, 2, 3, 0))]
        res = finish(procs)
        self.assertEqual({r["calls_to_original"] for r in res}, {0})
        self.assertEqual({r["hook"] for r in res}, {"balanced"})
        sh = standins.SHAPE
        for rnd in range(rounds):
            blobs = [(d / f"smap{rnd}.k{k}.bin").read_bytes() for k in range(world)]
            self.assertEqual(len(set(blobs)), 1, f"round {rnd}: ranks disagree")
            counts = sum(standins.window(k, rnd) for k in range(world))
            mine = eplb.sglang.rebalance_experts(counts, sh["R"], sh["R"] // sh["G"], sh["K"],
                                                 sh["N"], "deepseek_hierarchical")
            self.assertEqual(b"".join(np.asarray(x).tobytes() for x in mine), blobs[0])

    def test_pip_install(self):
        """`pip install tools/python` installs the package and both entry
        points; the installed copy finds libeplb ($EPLB_LIBRARY) and vLLM
        loads its plugin. Skipped without pip and setuptools >= 61 (nothing
        is downloaded: --no-index --no-build-isolation)."""
        p = subprocess.run([sys.executable, "-c", "import setuptools, pip; "
                            "print(setuptools.__version__)"], capture_output=True, text=True)
        if p.returncode != 0:
            self.skipTest("needs pip and setuptools")
        if int(p.stdout.strip().split(".")[0]) < 61:
            self.skipTest("needs setuptools >= 61 (pyproject.toml [project])")
        src = self.tmp / "src"
        shutil.copytree(standins.HERE.parent, src,
                        ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
        site = self.tmp / "site"
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                            "--no-build-isolation", "--disable-pip-version-check", "-q",
                            "--target", str(site), str(src)],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, PIP_NO_INPUT="1"))
        if p.returncode != 0:
            self.skipTest(f"pip install failed here: {p.stderr.strip()[-300:]}")
        eps = (next(site.glob("eplb-*.dist-info")) / "entry_points.txt").read_text()
        self.assertIn("[vllm.general_plugins]", eps)
        self.assertIn("eplb = eplb.vllm:register", eps)
        self.assertIn("[sglang.srt.plugins]", eps)
        for f in ("vllm.py", "sglang.py", "_plan_arrays.py", "compat.py"):
            self.assertTrue((site / "eplb" / f).exists(), f)
        root = self.standins(dist_info=False)  # the installed dist-info only
        e = standins.env(root, dict(ENV, EPLB_VLLM_POLICY="1"), binding=False)
        e["PYTHONPATH"] = os.pathsep.join([str(root), str(site)])
        r, out = run("vllm_checks", {}, e)
        self.assertTrue(r["replaced"], out)
        self.assertEqual(r["planned_on_bad_input"], 0)


if __name__ == "__main__":
    unittest.main()
