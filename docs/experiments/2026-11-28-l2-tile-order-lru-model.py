"""LRU model of L2 traffic for grouped GEMM tile orders (docs/perf.md v55 section 7; a sketch, not a tool).
With an effective L2 of 25 MB it gives FP8 Mixtral-8x7B up 16384 5.0 GB of DRAM reads for our 128x256
order (M fastest over a whole group) and 3.9 GB for DeepGEMM's 128x192 bands of 16 M blocks; Nsight
Compute measured 6.8 and 4.4 (v50). At 40-50 MB the model gives ours the minimum, 1.1 GB: the lockstep
waves and LRU flatter us. v31 measured bands in time and they bought nothing on Mixtral.
Units: A (group-row block of `bm` rows x one K block), B (bn rows x one K block), C tile writes.
CTAs run in lockstep: round r, K block kb: every active CTA touches its tile's A and B units."""
import collections

def simulate(order, K, bm, bn, kblock, elem, l2_bytes, c_bytes_per_tile, ctas=132):
    lru = collections.OrderedDict(); size = 0; miss = 0
    def touch(key, nbytes, write=False):
        nonlocal size, miss
        if key in lru:
            lru.move_to_end(key); return
        if not write: miss += nbytes
        lru[key] = nbytes; size += nbytes
        while size > l2_bytes:
            _, b = lru.popitem(last=False); size -= b
    kbs = (K + kblock - 1) // kblock
    a_unit = bm * kblock * elem; b_unit = bn * kblock * elem
    for r in range(0, len(order), ctas):
        wave = order[r:r + ctas]
        for kb in range(kbs):
            for (g, m, n, rows_a, rows_b) in wave:
                for i in range(rows_a):   # A units this CTA loads (its M tiles)
                    touch(("A", g, m + i, kb), a_unit)
                for j in range(rows_b):
                    touch(("B", g, n + j, kb), b_unit)
        for idx, (g, m, n, rows_a, rows_b) in enumerate(wave):
            touch(("C", r, idx), c_bytes_per_tile, write=True)
    return miss

def ours_single(groups_rows, N, bm, bn):
    out = []
    for g, rows in enumerate(groups_rows):
        mt = (rows + bm - 1) // bm; nt = (N + bn - 1) // bn
        for t in range(mt * nt):
            out.append((g, t % mt, t // mt, 1, 1))
    return out

def dg_order(groups_rows, N, bm, bn, band=16, pairs=True):
    # padded M over all groups; bands of `band` M blocks, N sweeping; m -> its group
    mgroup = []
    for g, rows in enumerate(groups_rows):
        mt = (rows + bm - 1) // bm
        mgroup += [(g, i) for i in range(mt)]
    M = len(mgroup); nt = (N + bn - 1) // bn
    out = []
    for first in range(0, M, band):
        nb = min(band, M - first)
        for idx in range(nb * nt):
            m = first + idx % nb; n = idx // nb
            g, mi = mgroup[m]
            out.append((g, mi, n, 1, 1))
    return out

if __name__ == "__main__":
    import random
    random.seed(1)
    # Mixtral-8x7B up 16384 FP8: 8 groups ~4096 rows, N 28672, K 4096, 1-byte elements
    rows = [4096 + random.randint(-60, 60) for _ in range(8)]
    K, N = 4096, 28672
    for l2_mb in (25, 50):
        for name, order, bm, bn in [("ours 128x256 single", ours_single(rows, N, 128, 256), 128, 256),
                                    ("DG 128x192 band16", dg_order(rows, N, 128, 192), 128, 192)]:
            miss = simulate(order, K, bm, bn, 128, 1, l2_mb << 20, bm * bn * 2)
            print(f"L2 {l2_mb} MB  {name:20s} tiles {len(order):6d} DRAM read {miss/1e9:.2f} GB")
