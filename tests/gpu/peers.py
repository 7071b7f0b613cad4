"""Peers and ceilings for the benchmark, measured in the same run as moejit's bench_suite.

Reads the routing bench_suite used (routing.csv: model,gemm,tokens,count_0..count_{E-1}) and times
torch._grouped_mm on exactly those group sizes; also measures the two roofline ceilings
(a large bf16 GEMM through cuBLAS, a device-to-device copy counting bytes read + written) and, from
4096 tokens, one dense cuBLAS GEMM of each case's ΣM x N x K (dense_mm).
Prints CSV: kind,model,gemm,tokens,ms,value
"""
import csv
import sys

import torch
from triton.testing import do_bench

SHAPES = {  # model: (experts, topk, hidden, intermediate, up_n)
    "gpt-oss-120b": (128, 4, 2880, 2880, 5760),
    "mixtral-8x7b": (8, 2, 4096, 14336, 28672),
    "deepseek-v3": (256, 8, 7168, 2048, 4096),
    "qwen3-30b-a3b": (128, 8, 2048, 768, 1536),
    # Beyond the suite (examples/moe_models.hpp, kMoreMoeModels; bench_suite BENCH_MORE_MODELS=1).
    "qwen3-235b-a22b": (128, 8, 4096, 1536, 3072),
    "kimi-k2": (384, 8, 7168, 2048, 4096),
    "glm-4.5": (160, 8, 5120, 1536, 3072),
    "llama4-maverick": (128, 1, 5120, 8192, 16384),
    "gpt-oss-20b": (32, 4, 2880, 2880, 5760),
    "mixtral-8x22b": (8, 2, 6144, 16384, 32768),
    "deepseek-v3-ep8": (32, 1, 7168, 2048, 4096),
    # Only in routing files (docs/results/2026-11-28-v58-routing-*.csv), not in bench_suite.
    "dbrx": (16, 4, 6144, 10752, 21504),
    "grok-1": (8, 2, 6144, 32768, 65536),
    "phi-3.5-moe": (16, 2, 4096, 6400, 12800),
    "jamba": (16, 2, 4096, 14336, 28672),
}


DENSE_MIN_TOKENS = 4096  # the compute-bound cases, where a dense GEMM of the same shape is a ceiling


def median_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def ceilings():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b)
    print(f"ceiling,bf16_gemm,,,{ms:.4f},{2 * 8192**3 / ms / 1e9:.1f}", flush=True)
    x = torch.randn(1024**3, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x))
    print(f"ceiling,copy_gbps,,,{ms:.4f},{2 * x.numel() * 2 / ms / 1e6:.1f}", flush=True)


def routing_cases(routing_path, make_weights):
    """The suite's cases in routing.csv (model,gemm,tokens,count_0..) as (model, gemm, tokens,
    counts, n, k, weights). make_weights(E, n, k) builds a GEMM's weights once per (model, gemm);
    the previous GEMM's are freed first (rows of one GEMM come together)."""
    key, weights = None, None
    for row in csv.reader(open(routing_path)):
        model, gemm, tokens, counts = row[0], row[1], int(row[2]), [int(c) for c in row[3:]]
        E, topk, hidden, inter, up_n = SHAPES[model]
        n, k = (up_n, hidden) if gemm == "up" else (hidden, inter)
        if key != (model, gemm):
            weights = None  # the previous GEMM's, freed before the next ones are built
            torch.cuda.empty_cache()
            key, weights = (model, gemm), make_weights(E, n, k)
        yield model, gemm, tokens, counts, n, k, weights


def main(routing_path):
    torch.manual_seed(0)
    ceilings()
    bf16_weights = lambda E, n, k: torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    for model, gemm, tokens, counts, n, k, w in routing_cases(routing_path, bf16_weights):
        rows = sum(counts)
        a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
        wt = w.transpose(-2, -1)
        ms = median_ms(lambda: torch._grouped_mm(a, wt, offs=offs, out_dtype=torch.bfloat16))
        print(f"torch_grouped_mm,{model},{gemm},{tokens},{ms:.4f},", flush=True)
        if tokens >= DENSE_MIN_TOKENS:
            # The same FLOPs as one dense cuBLAS GEMM (all ΣM rows against expert 0's weights; not a
            # valid MoE, as ../shared/bench/peers.py's dense_mm_ceiling): what a dense GEMM of this
            # shape reaches in this run, at the same clock and power as the grouped kernels.
            w0 = w[0].t()
            ms = median_ms(lambda: a @ w0)
            print(f"dense_mm,{model},{gemm},{tokens},{ms:.4f},", flush=True)
        del a


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    main(sys.argv[1] if len(sys.argv) > 1 else "routing.csv")
