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
Use: python3 tests/gpu/read_floor.py MB[,MB...]  (decimal MB). Prints CSV. docs/perf.md v36."""
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


sizes = [float(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "32,64,128,256").split(",")]
print("MB,clear,policy,best_us,GBps,best_cfg")
for mb in sizes:
    n = int(mb * 1e6) // 16 * 4  # int32 elements, a whole number of 16-byte vectors
    x = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device=dev)
    for dirty, evict_first in ((True, False), (True, True), (False, False)):
        best = None
        for ctas_per_sm, block, warps in ((4, 2048, 8), (8, 1024, 4), (8, 2048, 8), (16, 1024, 4), (2, 4096, 8)):
            grid = sms * ctas_per_sm
            out = torch.empty(grid * block, dtype=torch.int32, device=dev)
            us = time_us(lambda: read_kernel[(grid,)](x, out, n, BLOCK=block, EVICT_FIRST=evict_first, num_warps=warps), dirty)
            if best is None or us < best[0]:
                best = (us, f"{ctas_per_sm}/SM {block} {warps}w")
        print(f"{mb},{'memset' if dirty else 'read'},{'evict_first' if evict_first else 'normal'},{best[0]:.2f},"
              f"{mb * 1e6 / best[0] / 1e3:.0f},{best[1]}", flush=True)
    del x
