#!/usr/bin/env python3
"""What any kernel can do with B bytes of DRAM under the peers' protocol: a triton streaming reader
(grid-stride, 16-byte loads, XOR-reduced so nothing is optimized away), best of five grid / block
configs, timed as do_bench times the peers (a 256 MB memset before each launch, CUDA events,
median of 60). Three ways per size:
  memset, normal       the protocol as the suite runs it: the memset's dirty lines in L2 are
                       written back while the reader's misses evict them
  memset, evict_first  the same with an L2 evict_first hint on the reader's loads (what the 4-bit
                       decode kernels do for small experts, heuristics/config.cpp)
  read, normal         L2 holds clean lines (a read of the 256 MB buffer instead of the memset)
Use: python3 tests/gpu/read_floor.py MB[,MB...]  (decimal MB). Prints CSV. docs/perf.md v36.

TILE_BYTES=49152[,...]: also a tiled reader shaped like the 4-bit decode kernels (docs/perf.md
v37): 2 or 4 programs per SM, persistent, program p reading tiles p, p + G, ... each TILE_BYTES
long in 4-16 KB steps. Two layouts of the same bytes: "tile-major" (a tile's bytes contiguous, as
pack_w4_sm90 stores a tile's k-blocks) and "step-major" (step s of the tiles of one round
contiguous, so the programs of a round read one window, as the flat reader does).
ALL_CONFIGS=1: a row per grid / block config instead of the best one's. FLAT=0: the tiled reader only.
ONE=tiled|flat with MB, TILE_BYTES, CTAS, BLOCK, WARPS (evict_first, after a memset): 20 launches
of that one config and nothing else (for Nsight Compute)."""
import os
import statistics
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def read_kernel(x, out, n, BLOCK: tl.constexpr, EVICT_FIRST: tl.constexpr):
    pid = tl.program_id(0)
    npg = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(pid * BLOCK, n, npg * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        if EVICT_FIRST:
            acc ^= tl.load(x + offs, mask=offs < n, other=0, eviction_policy="evict_first")
        else:
            acc ^= tl.load(x + offs, mask=offs < n, other=0, cache_modifier=".cg")
    tl.store(out + pid * BLOCK + tl.arange(0, BLOCK), acc)


@triton.jit
def tiled_kernel(x, out, n_tiles, tile, STEP_MAJOR: tl.constexpr, BLOCK: tl.constexpr, EVICT_FIRST: tl.constexpr):
    pid = tl.program_id(0)
    npg = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    lane = tl.arange(0, BLOCK)
    for t in range(pid, n_tiles, npg):
        round_base = (t - pid) * tile  # the first element of this round's tiles
        for c in range(0, tile, BLOCK):
            inside = c + lane < tile
            if STEP_MAJOR:
                offs = round_base + c * npg + pid * BLOCK + lane
            else:
                offs = t * tile + c + lane
            if EVICT_FIRST:
                acc ^= tl.load(x + offs, mask=inside, other=0, eviction_policy="evict_first")
            else:
                acc ^= tl.load(x + offs, mask=inside, other=0, cache_modifier=".cg")
    tl.store(out + pid * BLOCK + lane, acc)


dev = "cuda"
clear = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
sms = torch.cuda.get_device_properties(0).multi_processor_count


def time_us(fn, dirty, reps=60):
    for _ in range(5):
        fn()
    events = []
    for _ in range(reps):
        if dirty:
            clear.zero_()
        else:
            clear.sum()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3


if os.environ.get("ONE"):
    mb, ctas, block, warps = float(sys.argv[1]), int(os.environ["CTAS"]), int(os.environ["BLOCK"]), int(os.environ["WARPS"])
    tile = int(os.environ.get("TILE_BYTES", "49152")) // 4
    n_tiles = int(mb * 1e6) // (tile * 4)
    n = (n_tiles + 4 * sms) * tile if os.environ["ONE"] == "tiled" else int(mb * 1e6) // 16 * 4
    x = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device=dev)
    out = torch.empty(sms * ctas * block, dtype=torch.int32, device=dev)
    for _ in range(20):
        clear.zero_()
        if os.environ["ONE"] == "tiled":
            tiled_kernel[(sms * ctas,)](x, out, n_tiles, tile, STEP_MAJOR=False, BLOCK=block, EVICT_FIRST=True, num_warps=warps)
        else:
            read_kernel[(sms * ctas,)](x, out, n, BLOCK=block, EVICT_FIRST=True, num_warps=warps)
    torch.cuda.synchronize()
    sys.exit(0)

all_configs = os.environ.get("ALL_CONFIGS", "0") != "0"
flat = os.environ.get("FLAT", "1") != "0"
sizes = [float(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "32,64,128,256").split(",")]
if flat:
    print("MB,clear,policy,best_us,GBps,best_cfg")
for mb in sizes if flat else []:
    n = int(mb * 1e6) // 16 * 4  # int32 elements, a whole number of 16-byte vectors
    x = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device=dev)
    for dirty, evict_first in ((True, False), (True, True), (False, False)):
        best = None
        for ctas_per_sm, block, warps in ((4, 2048, 8), (8, 1024, 4), (8, 2048, 8), (16, 1024, 4), (2, 4096, 8)):
            grid = sms * ctas_per_sm
            out = torch.empty(grid * block, dtype=torch.int32, device=dev)
            us = time_us(lambda: read_kernel[(grid,)](x, out, n, BLOCK=block, EVICT_FIRST=evict_first, num_warps=warps), dirty)
            if all_configs:
                print(f"{mb},{'memset' if dirty else 'read'},{'evict_first' if evict_first else 'normal'},{us:.2f},"
                      f"{mb * 1e6 / us / 1e3:.0f},{ctas_per_sm}/SM {block} {warps}w")
            if best is None or us < best[0]:
                best = (us, f"{ctas_per_sm}/SM {block} {warps}w")
        print(f"{mb},{'memset' if dirty else 'read'},{'evict_first' if evict_first else 'normal'},{best[0]:.2f},"
              f"{mb * 1e6 / best[0] / 1e3:.0f},{best[1]}", flush=True)
    del x

for tile_bytes in [int(v) for v in os.environ.get("TILE_BYTES", "").split(",") if v]:
    print("MB,tile_bytes,layout,policy,best_us,GBps,best_cfg")
    for mb in sizes:
        assert tile_bytes % 16384 == 0, "TILE_BYTES: whole 16 KB steps"
        tile = tile_bytes // 4
        n_tiles = int(mb * 1e6) // tile_bytes
        n = (n_tiles + 4 * sms) * tile  # step-major's last round spans a whole round
        x = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device=dev)
        for step_major in (False, True):
            for evict_first in (False, True):
                best = None
                for ctas_per_sm, block, warps in ((2, 4096, 8), (2, 2048, 4), (2, 8192, 8), (4, 2048, 8), (4, 1024, 4)):
                    grid = sms * ctas_per_sm
                    out = torch.empty(grid * block, dtype=torch.int32, device=dev)
                    us = time_us(lambda: tiled_kernel[(grid,)](x, out, n_tiles, tile, STEP_MAJOR=step_major, BLOCK=block,
                                                                EVICT_FIRST=evict_first, num_warps=warps), True)
                    if all_configs:
                        print(f"{mb},{tile_bytes},{'step-major' if step_major else 'tile-major'},"
                              f"{'evict_first' if evict_first else 'normal'},{us:.2f},"
                              f"{n_tiles * tile_bytes / us / 1e3:.0f},{ctas_per_sm}/SM {block} {warps}w")
                    if best is None or us < best[0]:
                        best = (us, f"{ctas_per_sm}/SM {block} {warps}w")
                print(f"{mb},{tile_bytes},{'step-major' if step_major else 'tile-major'},"
                      f"{'evict_first' if evict_first else 'normal'},{best[0]:.2f},"
                      f"{n_tiles * tile_bytes / best[0] / 1e3:.0f},{best[1]}", flush=True)
        del x
