"""Merges bench_suite.csv (moejit) and peers.csv (torch + ceilings) of one run into a markdown
table: time, TFLOP/s, GB/s, fraction of roofline for moejit and torch._grouped_mm, and geomeans.
Roofline floor = max(FLOPs / bf16 GEMM ceiling, minimum bytes / copy bandwidth), both measured
in the same run; minimum bytes = active experts' weights + A + C."""
import csv
import math
import sys

ours = list(csv.DictReader(open(sys.argv[1])))
peers = [r for r in csv.reader(open(sys.argv[2])) if r]
ceil = {r[1]: float(r[5]) for r in peers if r[0] == "ceiling"}
torch_ms = {(r[1], r[2], r[3]): float(r[4]) for r in peers if r[0] == "torch_grouped_mm"}
dense_ms = {(r[1], r[2], r[3]): float(r[4]) for r in peers if r[0] == "dense_mm"}
peak_tflops, bw_gbps = ceil["bf16_gemm"], ceil["copy_gbps"]
print(f"Ceilings measured in this run: bf16 GEMM {peak_tflops:.0f} TFLOP/s, copy {bw_gbps / 1000:.2f} TB/s\n")
print("| model | gemm | tokens | ΣM | active | moejit ms | TFLOP/s | GB/s | weights GB/s ÷ copy | roofline | torch ms | torch roofline | speedup |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
fr_ours, fr_torch, worst = [], [], []
for r in ours:
    rows, n, k, active = int(r["sumM"]), int(r["N"]), int(r["K"]), int(r["active"])
    flops = 2.0 * rows * n * k
    bytes_ = 2.0 * (active * n * k + rows * k + rows * n)
    floor_ms = max(flops / peak_tflops / 1e9, bytes_ / bw_gbps / 1e6)
    ms = float(r["ms"])
    tms = torch_ms.get((r["model"], r["gemm"], r["tokens"]))
    f_ours = floor_ms / ms
    fr_ours.append(f_ours)
    f_torch = floor_ms / tms if tms else float("nan")
    if tms:
        fr_torch.append(f_torch)
        worst.append((ms / tms, r["model"], r["gemm"], r["tokens"]))
    weights_share = 2.0 * active * n * k / ms / 1e6 / bw_gbps
    print(f"| {r['model']} | {r['gemm']} | {r['tokens']} | {rows} | {active} | {ms:.4f} | {flops / ms / 1e9:.0f} | "
          f"{bytes_ / ms / 1e6:.0f} | {weights_share:.2f} | {f_ours:.2f} | {tms if tms else float('nan'):.4f} | {f_torch:.2f} | "
          f"{(tms / ms) if tms else float('nan'):.2f}x |")
g = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
print(f"\nGeomean fraction of roofline: moejit {g(fr_ours):.3f}, torch._grouped_mm {g(fr_torch):.3f} over {len(fr_ours)} cases")
worst.sort(reverse=True)
if worst:
    print("Slowest relative to torch: " + ", ".join(f"{m} {gm} {t}: {x:.2f}x torch time" for x, m, gm, t in worst[:5]))
dense = [(r, dense_ms[(r["model"], r["gemm"], r["tokens"])]) for r in ours if (r["model"], r["gemm"], r["tokens"]) in dense_ms]
if dense:
    print("\nOne dense cuBLAS GEMM of the same ΣM x N x K in this run (one weight matrix: a ceiling, not an MoE):\n")
    print("| model | gemm | tokens | dense cuBLAS ms | TFLOP/s | moejit TFLOP/s | moejit speed ÷ dense |")
    print("|---|---|---|---|---|---|---|")
    for r, dms in dense:
        flops = 2.0 * int(r["sumM"]) * int(r["N"]) * int(r["K"])
        ms = float(r["ms"])
        print(f"| {r['model']} | {r['gemm']} | {r['tokens']} | {dms:.4f} | {flops / dms / 1e9:.0f} | {flops / ms / 1e9:.0f} | {dms / ms:.2f} |")
