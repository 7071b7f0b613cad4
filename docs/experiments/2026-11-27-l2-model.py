#!/usr/bin/env python3
"""An L2 model of the 16-bit Hopper kernel's DRAM reads (session 50, docs/perf.md v44 §2).

Each CTA advances one k-block per event, oldest clock first (a time-ordered access stream);
a k-block touches its A block (rows x 64 x 2 bytes) and B block (BN x 64 x 2) in an LRU of
`cap_mb`; a step costs max(the MMA's time, missed bytes / the CTA's share of DRAM). Tiles
come in the kernel's order (plain: group by group, M fastest; mix=R: two class streams
interleaved as MixedTileCursor does).

Calibrated at cap 20 MB on skewed DeepSeek-V3 4096 (Nsight Compute, one launch, v43):
  up   plain 15.81 GB modelled / 15.82 measured; mix=256 18.13 / 18.01
  down plain  6.83 / 6.78;                        mix=256  7.95 / 7.65
Its attribution: the plain order's excess is the hot groups' A, re-read per N column
(1.6 of 2.2 GB; their M tiles span more starts than L2 keeps lines).
It MISPREDICTED CTA pairs sharing B (2x1): 14.47 GB modelled, 16.01 measured (v44), so
it is not a guide to structural changes. Usage: l2-model.py ROUTING_CSV MODEL GEMM TOKENS
"""
import collections, heapq, random, sys

SHAPES = {'gpt-oss-120b': (2880, 5760, 2880), 'mixtral-8x7b': (4096, 28672, 14336),
          'deepseek-v3': (7168, 4096, 2048), 'qwen3-30b-a3b': (2048, 1536, 768)}

def load(path, model, gemm, tokens):
    for line in open(path):
        f = line.strip().split(',')
        if f[0] == model and f[1] == gemm and int(f[2]) == tokens:
            return [int(x) for x in f[3:]]
    raise SystemExit(f'{model} {gemm} {tokens} not in {path}')

def group_tiles(g, rows, bm, bn, n, band=0):
    mt, nt = (rows + bm - 1) // bm, (n + bn - 1) // bn
    out = []
    for b0 in range(0, mt, band or mt):
        for j in range(nt):
            for i in range(b0, min(mt, b0 + (band or mt))):
                out.append((g, i, j, min(bm, rows - i * bm)))
    return out

def plain(groups, bm, bn, n, band=0):
    return [t for g, r in enumerate(groups) if r for t in group_tiles(g, r, bm, bn, n, band)]

def mixed(groups, bm, bn, n, heavy_rows):
    heavy = [t for g, r in enumerate(groups) if r >= heavy_rows for t in group_tiles(g, r, bm, bn, n)]
    light = [t for g, r in enumerate(groups) if 0 < r < heavy_rows for t in group_tiles(g, r, bm, bn, n)]
    h, total = len(heavy), len(heavy) + len(light)
    return [heavy[t * h // total] if (t + 1) * h // total > t * h // total else light[t - t * h // total] for t in range(total)]

def dram_bytes(tiles, k, bm=128, bn=256, ctas=132, cap_mb=20, copy_bps=2.8e12, mma_flops=700e12, seed=1):
    cap, lru, used, dram = cap_mb << 20, collections.OrderedDict(), 0, 0
    def touch(key, size):
        nonlocal used, dram
        if key in lru:
            lru.move_to_end(key)
            return 0
        dram += size
        lru[key] = size
        used += size
        while used > cap:
            used -= lru.popitem(last=False)[1]
        return size
    rnd, heap, nxt = random.Random(seed), [], 0
    for c in range(min(ctas, len(tiles))):
        heapq.heappush(heap, (rnd.random() * 1e-7, c, nxt, 0))
        nxt += 1
    k_blocks = (k + 63) // 64
    while heap:
        t, c, i, kb = heapq.heappop(heap)
        g, m, j, rows = tiles[i]
        missed = touch(('A', g, m, kb), rows * 128) + touch(('B', g, j, kb), bn * 128)
        t += max(2 * bm * bn * 64 / (mma_flops / ctas), missed / (copy_bps / ctas))
        if kb + 1 < k_blocks:
            heapq.heappush(heap, (t, c, i, kb + 1))
        elif nxt < len(tiles):
            heapq.heappush(heap, (t, c, nxt, 0))
            nxt += 1
    return dram

if __name__ == '__main__':
    path, model, gemm, tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    groups = load(path, model, gemm, tokens)
    hidden, up_n, inter = SHAPES[model]
    n, k = (up_n, hidden) if gemm == 'up' else (hidden, inter)
    floor = sum(1 for r in groups if r) * n * k * 2 + sum(groups) * k * 2
    print(f'minimum {floor / 1e9:.2f} GB')
    for name, tiles in [('plain', plain(groups, 128, 256, n)), ('band=8', plain(groups, 128, 256, n, 8)),
                        ('mix=256', mixed(groups, 128, 256, n, 256))]:
        print(f'{name:8s} {dram_bytes(tiles, k) / 1e9:.2f} GB')
