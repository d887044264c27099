"""The vLLM and SGLang plugins against the real packages (pinned in
scripts/real_stacks.txt, installed by scripts/real_stacks.sh into a venv
over Debian's CPU torch), each loaded by the stack's own plugin loader in a
fresh interpreter of that venv (real_stacks.py). Skipped when the venv is
missing ($EPLB_REAL_STACKS unset, or not installed: offline, no
python3-torch), unless $EPLB_REAL_STACKS_REQUIRED=1 (scripts/test.sh sets
it after installing): then a stack that does not import fails."""

import json
import os
import pathlib
import re
import subprocess
import unittest

import standins
from support import REPO, TempDirCase

import eplb

HERE = pathlib.Path(__file__).resolve().parent
VENV = os.environ.get("EPLB_REAL_STACKS")
PYTHON = pathlib.Path(VENV) / "venv" / "bin" / "python" if VENV else None
REQUIRED = os.environ.get("EPLB_REAL_STACKS_REQUIRED") == "1"
PINS = dict(re.findall(r"^([\w-]+)==(\S+)", (REPO / "scripts" / "real_stacks.txt").read_text(),
                       re.M))
L, E, G, R, K, N = 4, 16, 4, 24, 4, 2  # real_stacks.SHAPE
EPS = 1e-9


def run(scenario, env, args=None, timeout=120):
    """(result dict, output) of `real_stacks.py scenario` under the venv."""
    p = subprocess.run([str(PYTHON), str(HERE / "real_stacks.py"), scenario,
                        json.dumps(args or {})], capture_output=True, text=True, env=env,
                       timeout=timeout)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        raise AssertionError(f"{scenario}: exit {p.returncode}\n{out}")
    line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[7:]), out


_probe = None


def probe():
    """{stack: {"version"} or {"error"}}, or a str: why nothing can run."""
    global _probe
    if _probe is None:
        if PYTHON is None:
            _probe = "EPLB_REAL_STACKS is not set (meson sets it)"
        elif not PYTHON.exists():
            _probe = f"no venv at {PYTHON.parent.parent} (scripts/real_stacks.sh installs it)"
        else:
            _probe = run("probe", standins.env(HERE, {"EPLB_LIBRARY": eplb.library_path}))[0]
    return _probe


class Case(TempDirCase):
    stack = None

    def setUp(self):
        super().setUp()
        p = probe()
        why = p if isinstance(p, str) else p[self.stack].get("error")
        if why:
            if REQUIRED:
                self.fail(f"real {self.stack}: {why}")
            self.skipTest(f"real {self.stack} not available: {why}")
        standins.write_dist_info(self.tmp)  # eplb's entry points, as pip installs them

    def env(self, **extra):
        e = standins.env(self.tmp, dict(extra, EPLB_LIBRARY=eplb.library_path))
        # the pinned wheels' own plugins need packages left out (msgspec)
        e.update(VLLM_PLUGINS="eplb", SGLANG_PLUGINS="eplb")
        return e

    def same_kind(self, a, b):
        self.assertEqual((a["type"], a["dtype"], a["device"]), (b["type"], b["dtype"], b["device"]))


class RealVllm(Case):
    stack = "vllm"

    def test_policy_through_load_general_plugins(self):
        budget = 3
        r, out = run("vllm_checks", self.env(EPLB_VLLM_POLICY="1",
                                              EPLB_VLLM_MOVE_BUDGET=str(budget)),
                     {"budget": budget})
        self.assertEqual(r["version"], PINS["vllm"])
        self.assertEqual(r["entry_points"], {"eplb": "eplb.vllm:register"})
        self.assertTrue(r["installed"], out)
        self.assertEqual(r["keys"], sorted(r["keys_before"] + ["eplb"]))
        self.assertTrue(r["every_entry"] and r["subclass"] and r["classmethod"])
        self.assertIn("old_global_expert_indices", r["signature"])
        self.assertTrue(r["signature"].endswith("-> torch.Tensor"), r["signature"])
        self.assertEqual(r["detected"], {"returns": "phy2log", "classmethod": True,
                                         "instances": False, "takes_old": True})
        f = r["fresh"]
        self.same_kind(f["eplb"], f["default"])
        self.assertEqual((f["eplb"]["type"], f["eplb"]["dtype"], f["eplb"]["device"]),
                         ("Tensor", "torch.int64", "cpu"))
        self.assertEqual(f["eplb"]["shape"], [L, R])
        self.assertEqual(f["default"]["shape"], [L, R])
        self.assertEqual(f["problems"], [])
        for mine, theirs in zip(f["busiest_eplb"], f["busiest_default"]):
            self.assertLessEqual(mine, theirs + EPS, "busiest GPU above vLLM's default policy")
        moved = 0
        for rnd in r["incremental"]:
            self.same_kind(rnd["eplb"], rnd["default"])
            self.assertEqual(rnd["eplb"]["shape"], rnd["default"]["shape"])
            self.assertEqual(rnd["problems"], [])
            self.assertLessEqual(max(rnd["moved"]), budget)
            for new, kept in zip(rnd["busiest_new"], rnd["busiest_kept"]):
                self.assertLessEqual(new, kept + EPS, "worse than keeping the map")
            moved += sum(rnd["moved"])
        self.assertGreater(moved, 0)
        self.assertTrue(r["restored"])

    def test_unset_changes_nothing(self):
        r, out = run("vllm_checks", self.env())
        self.assertFalse(r["installed"], out)
        self.assertTrue(r["unchanged"])


class RealSglang(Case):
    stack = "sglang"

    def test_hook_through_load_plugins(self):
        r, out = run("sglang_checks", self.env(EPLB_SGLANG_POLICY="1"))
        self.assertEqual(r["version"], PINS["sglang"])
        self.assertEqual(r["entry_points"], {"eplb": "eplb.sglang:register"})
        # the positional parameters the replacement takes, by these names
        self.assertEqual(r["parameters"], ["tokens_per_expert", "num_physical_experts",
                                           "num_local_physical_experts", "num_groups",
                                           "num_nodes", "algorithm"])
        self.assertTrue(r["installed"], out)
        for name, p in r["planned"].items():
            with self.subTest(algorithm=name):
                self.assertEqual(p["outcome"][0], "ok", p["outcome"])
                self.assertEqual(p["original_calls"], 0)
                for d in p["described"]:
                    self.assertEqual((d["type"], d["dtype"], d["device"]),
                                     ("Tensor", "torch.int64", "cpu"))
                shapes = [d["shape"] for d in p["described"]]
                self.assertEqual((shapes[0], shapes[1][:2], shapes[2]), ([L, R], [L, E], [L, E]))
                if p["original"][0] == "ok":
                    ref = p["original"][1]
                    self.assertEqual((ref[0], ref[1][:2], ref[2]), ([L, R], [L, E], [L, E]))
                self.assertEqual(p["problems"], [])
                for mine, theirs in zip(p["busiest_eplb"], p.get("busiest_original", [])):
                    self.assertLessEqual(mine, theirs + EPS, "busiest GPU above SGLang's")
        self.assertIn("busiest_original", r["planned"]["deepseek_hierarchical"])
        self.assertEqual(r["by_keyword"], {"outcome": r["planned"]["deepseek"]["outcome"],
                                           "original_calls": 0})
        self.assertEqual(sorted(r["falls_through"]),
                         sorted(["elasticity_aware", "elasticity_aware_hierarchical",
                                 "extra_positional", "broken_ranks", "compute_cost"]))
        for name, c in r["falls_through"].items():
            with self.subTest(falls_through=name):
                self.assertEqual(c["original_calls"], 1)
                self.assertEqual(c["outcome"], c["original"])
        self.assertTrue(r["restored"])

    def test_unset_changes_nothing(self):
        r, out = run("sglang_checks", self.env())
        self.assertFalse(r["installed"], out)
        self.assertTrue(r["unchanged"])


if __name__ == "__main__":
    unittest.main()
