import json
import os
import shutil
import subprocess
import sys
import unittest

import eplb
from support import REPO, TempDirCase, needs_numpy

EXAMPLE = REPO / "tools" / "python" / "examples" / "serving_loop.py"
ARGS = ["--steps", "40", "--interval", "10", "--window", "10", "--layers", "8", "--json"]


def run(cmd):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if p.returncode != 0:
        raise AssertionError(f"{cmd}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


@needs_numpy
class ExampleLoop(TempDirCase):
    def test_planner_mode_improves(self):
        r = run([sys.executable, str(EXAMPLE), "--mode", "planner", *ARGS])
        self.assertGreater(r["balancedness_after"], r["balancedness_before"] + 0.05)

    @unittest.skipUnless(eplb.HAVE_RUNTIME and eplb.feature_enabled("mpi") and shutil.which("mpirun"),
                         "needs the runtime, MPI and mpirun")
    def test_runtime_mode_improves(self):
        r = run(["mpirun", "--oversubscribe", "-np", "4", sys.executable, str(EXAMPLE),
                 "--mode", "runtime", *ARGS])
        self.assertEqual(r["ranks"], 4)
        self.assertGreaterEqual(r["rebalances"], 1)
        self.assertEqual(r["slots_with_wrong_weights"], 0)
        self.assertGreater(r["balancedness_after"], r["balancedness_before"])
