"""Peers and ceilings for the quantized-format benchmark (tests/gpu/run_formats.sh), one run.

Reads the routing bench_suite used (routing.csv: model,gemm,tokens,count_0..count_{E-1}) and times
on exactly those group sizes: torch._grouped_mm (bf16; the 4-bit formats' peer, issue 4 asks ~3x
faster at decode) and torch._scaled_grouped_mm (FP8 e4m3 with row-wise scales; the FP8 peer).
Ceilings: a large bf16 GEMM (cuBLAS), a large FP8 GEMM (torch._scaled_mm), a device copy.
Prints CSV: kind,model,gemm,tokens,ms,value (the form of tests/gpu/peers.py).
"""
import sys

import torch

from peers import median_ms, routing_cases  # tests/gpu/peers.py: the suite's cases and timing


def ceilings():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b)
    print(f"ceiling,bf16_gemm,,,{ms:.4f},{2 * 8192**3 / ms / 1e9:.1f}", flush=True)
    try:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.ones((), device="cuda")
        ms = median_ms(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16))
        print(f"ceiling,fp8_gemm,,,{ms:.4f},{2 * 8192**3 / ms / 1e9:.1f}", flush=True)
    except Exception as e:  # noqa: BLE001 - report and go on: the table then lacks the FP8 ceiling
        print("fp8 ceiling failed:", repr(e)[:200], file=sys.stderr)
    del a, b
    x = torch.randn(1024**3, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x))
    print(f"ceiling,copy_gbps,,,{ms:.4f},{2 * x.numel() * 2 / ms / 1e6:.1f}", flush=True)
    del x, y
    torch.cuda.empty_cache()


def main(routing_path):
    torch.manual_seed(0)
    ceilings()
    def make_weights(E, n, k):
        w = torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        return w, w.to(torch.float8_e4m3fn), torch.rand(E, n, device="cuda") + 0.5

    for model, gemm, tokens, counts, n, k, (w, w8, sb) in routing_cases(routing_path, make_weights):
        rows = sum(counts)
        a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
        wt = w.transpose(-2, -1)
        ms = median_ms(lambda: torch._grouped_mm(a, wt, offs=offs, out_dtype=torch.bfloat16))
        print(f"torch_grouped_mm,{model},{gemm},{tokens},{ms:.4f},", flush=True)
        try:
            a8 = a.to(torch.float8_e4m3fn)
            sa = torch.rand(rows, device="cuda") + 0.5
            w8t = w8.transpose(-2, -1)
            ms = median_ms(lambda: torch._scaled_grouped_mm(a8, w8t, sa, sb, offs=offs, out_dtype=torch.bfloat16))
            print(f"torch_scaled_grouped_mm,{model},{gemm},{tokens},{ms:.4f},", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{model},{gemm},{tokens}: torch._scaled_grouped_mm failed: {repr(e)[:300]}", file=sys.stderr)
        del a


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    main(sys.argv[1] if len(sys.argv) > 1 else "routing.csv")
