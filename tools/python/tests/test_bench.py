"""tools/python/bench/vs_deepseek.py needs torch, which CI does not have: it
must say so and exit 0 (the benchmark itself is run by hand, see
tools/python/README.md)."""

import os
import subprocess
import sys

from support import REPO, TempDirCase

BENCH = REPO / "tools" / "python" / "bench" / "vs_deepseek.py"


class BenchWithoutTorch(TempDirCase):
    def test_skips_with_a_message(self):
        # A torch that fails to import, first on the path, whether or not
        # this interpreter has the real one.
        stand_in = os.path.join(self.tmp, "torch")
        os.mkdir(stand_in)
        with open(os.path.join(stand_in, "__init__.py"), "w") as f:
            f.write("raise ImportError('no torch here (test stand-in)')\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.tmp), env.get("PYTHONPATH")) if p)
        p = subprocess.run([sys.executable, str(BENCH), "--runs", "1"], capture_output=True,
                           text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        lines = p.stdout.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stdout)
        self.assertRegex(lines[0], r"^vs_deepseek: skipped: (torch|numpy) is not installed")
