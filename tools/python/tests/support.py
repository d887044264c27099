"""Shared test helpers: paths from the environment, a temp dir, the CLI."""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[3]
SAMPLES = pathlib.Path(os.environ.get("EPLB_SAMPLES", REPO / "traces" / "samples"))
CLI = os.environ.get("EPLB_CLI") or shutil.which("eplb")

try:
    import numpy as np
except ImportError:  # the binding works without it; some tests need it
    np = None

needs_numpy = unittest.skipIf(np is None, "numpy is not installed")
needs_cli = unittest.skipIf(not CLI, "the eplb CLI was not found (set EPLB_CLI)")


def cli(*args, check=True):
    """Runs the CLI; returns stdout (parsed when --json is among args)."""
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"eplb {' '.join(map(str, args))}: exit {p.returncode}: {p.stderr}")
    if "--json" in args:
        return json.loads(p.stdout)
    return p


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="eplb-py-", dir=os.environ.get("TMPDIR"))
        self.tmp = pathlib.Path(self._tmp.name)

    def tearDown(self):
        self._tmp.cleanup()
