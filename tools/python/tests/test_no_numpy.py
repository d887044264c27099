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
    from eplb.compat import rebalance_experts                         # lists in, lists out
    w = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
         [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
    p2l, l2p, cnt = rebalance_experts(w, 16, 4, 2, 8, policy="deepseek")
    assert p2l == [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                   [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]], p2l
    assert l2p[0][1] == [15, 13] and l2p[1][11] == [5, -1], l2p
    assert cnt[1] == [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1], cnt
    p2l, l2p, cnt = rebalance_experts(w, 16, 3, 2, 8)                  # global, balanced
    assert [sum(c) for c in cnt] == [16, 16] and all(len(r) == 16 for r in p2l)
    try:
        rebalance_experts([[1.0, float("nan")]], 2, 1, 1, 1)
        raise SystemExit("nan accepted")
    except ValueError as e:
        assert "layer 0 expert 1" in str(e), e
    for bad in (float("inf"), -1):
        try:
            rebalance_experts([[1.0, 1.0], [1.0, bad]], 2, 1, 1, 1)
            raise SystemExit(f"{bad} accepted")
        except ValueError as e:
            assert "layer 1 expert 1" in str(e), e
    q = array.array("q", [5, 1, 1, 1, 2, 2, 2, 2])                     # int64 buffer as [2, 4]
    p = eplb.plan(memoryview(q).cast("B").cast("q", [2, 4]), num_gpus=2, num_replicas=6)
    assert p.num_layers == 2 and p.num_experts == 4
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
