"""Sustained-load phases for tests/gpu/run_power.sh: cuBLAS bf16 and FP8 8192^3, then torch's grouped GEMMs
(torch._grouped_mm for bf16, torch._scaled_grouped_mm with row-wise scales for FP8) on one model's 16384-token
cases with the group sizes bench_suite drew (its routing file: random routing leaves partial tiles that even
routing would not). Each phase launches back to back for SECONDS seconds and prints
phase,<name>,<start epoch s>,<end epoch s>,<ms per launch>, so that the power log can be cut per phase."""
import csv
import sys
import time

import torch

from peers import SHAPES  # tests/gpu/peers.py: the suite's shapes


def phase(name, fn, seconds):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0, n = time.time(), 0
    while time.time() - t0 < seconds:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        n += 10
    t1 = time.time()
    print(f"phase,{name},{t0:.3f},{t1:.3f},{(t1 - t0) * 1e3 / n:.4f}", flush=True)


def group_sizes(routing_path, model, gemm):
    for row in csv.reader(open(routing_path)):
        if row[0] == model and row[1] == gemm and int(row[2]) == 16384:
            return [int(c) for c in row[3:]]
    raise SystemExit(f"{routing_path}: no {model} {gemm} 16384-token case")


def main(model, fmt, seconds, routing_path):
    torch.manual_seed(0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    phase("cublas_bf16_8192", lambda: a @ b, seconds)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t().contiguous().t()
    one = torch.ones((), device="cuda")
    phase("cublas_fp8_8192", lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), seconds)
    del a, b, a8, b8
    E, topk, hidden, inter, up_n = SHAPES[model]
    for gemm, n, k in (("up", up_n, hidden), ("down", hidden, inter)):
        counts = group_sizes(routing_path, model, gemm)
        rows = sum(counts)
        offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
        w = torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        if fmt == "e4m3":
            w8t, x8 = w.to(torch.float8_e4m3fn).transpose(-2, -1), x.to(torch.float8_e4m3fn)
            sa, sb = torch.rand(rows, device="cuda") + 0.5, torch.rand(E, n, device="cuda") + 0.5
            fn = lambda: torch._scaled_grouped_mm(x8, w8t, sa, sb, offs=offs, out_dtype=torch.bfloat16)  # noqa: E731
            phase(f"torch_scaled_grouped_mm_{model}_{gemm}_16384", fn, seconds)
        else:
            wt = w.transpose(-2, -1)
            phase(f"torch_grouped_mm_{model}_{gemm}_16384",
                  lambda: torch._grouped_mm(x, wt, offs=offs, out_dtype=torch.bfloat16), seconds)
        del w, x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4])
