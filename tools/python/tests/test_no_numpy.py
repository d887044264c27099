import os
import subprocess
import sys
import textwrap

from support import REPO, TempDirCase

SCRIPT = textwrap.dedent(
    """
    import array, eplb
    assert not eplb.have_numpy()
    loads = array.array("d", [5, 1, 1, 1, 2, 2, 2, 2])      # flat buffer for [2, 4]
    try:
        eplb.plan(loads, num_gpus=2, num_replicas=6)
    except ValueError:
        pass                                             # 1-D: shape unknown
    p = eplb.plan([[5.0, 1, 1, 1], [2.0, 2, 2, 2]], num_gpus=2, num_replicas=6)
    m = p.phy2log()
    assert isinstance(m, memoryview) and m.shape == (2, 6) and m.format == "i"
    assert sorted(set(m.tolist()[0])) == [0, 1, 2, 3]
    s = eplb.SplitSolver().solve(array.array("d", [5, 1, 1, 1]), p.phy2log(0), p.slots_per_gpu)
    assert abs(max(s.gpu_load.tolist()) - s.max_load) < 1e-9
    ro = memoryview(array.array("d", [1, 1, 1, 1])).toreadonly()     # read-only: copied
    r = eplb.SplitSolver().solve(ro, [0, 1, 2, 3], [2, 2])
    assert r.max_load == 2.0
    try:
        eplb.SplitSolver().solve(bytes(32), [0, 1, 2, 3], [2, 2])     # untyped bytes
        raise SystemExit("bytes accepted")
    except TypeError:
        pass
    gl = array.array("d", [0.0, 0.0])                                  # output in place
    eplb.SplitSolver().solve([1.0, 3.0], [0, 1, 0, 1], [2, 2], gpu_load_out=gl)
    assert all(abs(v - 2.0) < 1e-9 for v in gl), gl
    print("ok")
    """
)


class NoNumpy(TempDirCase):
    def test_core_without_numpy(self):
        env = dict(os.environ, EPLB_NO_NUMPY="1", PYTHONPATH=str(REPO / "tools" / "python"))
        p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                           timeout=60, cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "ok")
