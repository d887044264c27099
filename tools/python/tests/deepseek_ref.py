"""An independent model of DeepSeek EPLB's rebalance_experts (deepseek-ai/EPLB
eplb.py) in numpy, written step for step after the reference, float32
arithmetic included, to check the library's port where the reference's
order is unambiguous.

torch.sort on CPU runs std::sort, an insertion sort (stable) below 17
items; this model sorts stably, so it agrees with the reference only where
every sort has at most 16 items (group counts, and physical experts per
node). Callers keep to such shapes (small()).
"""

import numpy as np


def small(num_groups, num_nodes, num_replicas):
    """True when every sort of the reference has <= 16 items."""
    if num_groups % num_nodes:
        num_groups, num_nodes = 1, 1
    return num_groups <= 16 and num_replicas // num_nodes <= 16


def _packing(weight, num_packs):
    X, n = weight.shape
    per = n // num_packs
    assert n % num_packs == 0
    if per == 1:
        return np.tile(np.arange(n), (X, 1)), np.zeros((X, n), dtype=np.int64)
    pack = np.full((X, n), -1, dtype=np.int64)
    rank = np.full((X, n), -1, dtype=np.int64)
    for i in range(X):
        pw = [np.float32(0)] * num_packs
        items = [0] * num_packs
        for g in np.argsort(-weight[i], kind="stable"):
            avail = [p for p in range(num_packs) if items[p] < per]
            p = min(avail, key=lambda q: pw[q])  # the first lightest, as Python's min
            pack[i, g] = p
            rank[i, g] = items[p]
            pw[p] = np.float32(pw[p] + weight[i, g])
            items[p] += 1
    return pack, rank


def _replicate(weight, num_phy):
    X, num_log = weight.shape
    assert num_phy >= num_log
    phy2log = np.tile(np.arange(num_phy), (X, 1))
    rank = np.zeros((X, num_phy), dtype=np.int64)
    cnt = np.ones((X, num_log), dtype=np.int64)
    rows = np.arange(X)
    for i in range(num_log, num_phy):
        best = np.argmax(weight / cnt.astype(np.float32), axis=-1)  # the first maximum
        phy2log[:, i] = best
        rank[:, i] = cnt[rows, best]
        cnt[rows, best] += 1
    return phy2log, rank, cnt


def _inverse(perm):
    inv = np.empty_like(perm)
    for r in range(perm.shape[0]):
        inv[r, perm[r]] = np.arange(perm.shape[1])
    return inv


def _hierarchical(weight, R, K, N, G):
    L, E = weight.shape
    assert E % K == 0 and K % N == 0 and G % N == 0 and R % G == 0
    gs, gpn, S = E // K, K // N, R // G
    tokens_per_group = weight.reshape(L, K, gs).sum(-1, dtype=np.float32)
    gpack, grank = _packing(tokens_per_group, N)
    log2mlog = (((gpack * gpn + grank) * gs)[..., None] + np.arange(gs)).reshape(L, E)
    mlog2log = _inverse(log2mlog)
    tokens_per_mlog = np.take_along_axis(weight, mlog2log, -1).reshape(-1, E // N)
    phy2mlog, phyrank, mlogcnt = _replicate(tokens_per_mlog, R // N)
    tokens_per_phy = np.take_along_axis(tokens_per_mlog / mlogcnt.astype(np.float32), phy2mlog, -1)
    pack, rank = _packing(tokens_per_phy.astype(np.float32), G // N)
    pphy2phy = _inverse(pack * S + rank)
    pphy2mlog = np.take_along_axis(phy2mlog, pphy2phy, -1)
    pphy2mlog = (pphy2mlog.reshape(L, N, -1) + np.arange(0, E, E // N)[None, :, None]).reshape(L, -1)
    pphy2log = np.take_along_axis(mlog2log, pphy2mlog, -1)
    pphyrank = np.take_along_axis(phyrank, pphy2phy, -1).reshape(L, -1)
    logcnt = np.take_along_axis(mlogcnt.reshape(L, -1), log2mlog, -1)
    return pphy2log, pphyrank, logcnt


def rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus):
    weight = np.asarray(weight).astype(np.float32)
    L, E = weight.shape
    if num_groups % num_nodes == 0:
        p2l, rank, cnt = _hierarchical(weight, num_replicas, num_groups, num_nodes, num_gpus)
    else:
        p2l, rank, cnt = _hierarchical(weight, num_replicas, 1, 1, num_gpus)
    maxc = int(cnt.max())
    log2phy = np.full((L, E * maxc), -1, dtype=np.int64)
    for l in range(L):
        log2phy[l, p2l[l] * maxc + rank[l]] = np.arange(num_replicas)
    return p2l.astype(np.int64), log2phy.reshape(L, E, maxc), cnt.astype(np.int64)
