"""moejit against DeepGEMM on the suite, one run: bench_suite's CSV (bf16, or FORMAT=e4m3) and
deepgemm_peer.py's CSV from the same call and routing. Per case the faster of DeepGEMM's contiguous
(groups padded to 128 rows) and masked (16 / 128 tokens) layouts. Usage:
deepgemm_report.py BENCH_CSV DEEPGEMM_CSV fp8|bf16
"""
import csv
import math
import sys
from collections import defaultdict

bench_path, dg_path, kind = sys.argv[1], sys.argv[2], sys.argv[3]
ours = {}
for r in csv.DictReader(open(bench_path)):
    ours[(r["model"], r["gemm"], r["tokens"])] = float(r["ms"])
peer, errs = defaultdict(dict), {}
for r in csv.reader(open(dg_path)):
    peer[(r[1], r[2], r[3])][r[0]] = float(r[4])
    if len(r) > 5 and r[5]:
        errs[(r[1], r[2], r[3])] = r[5]

print(f"| model | gemm | tokens | moejit ms | DeepGEMM contiguous ms | DeepGEMM masked ms | DeepGEMM / moejit | DeepGEMM rel_err |")
print("|---|---|---|---|---|---|---|---|")
ratios = []
for key, ms in ours.items():
    times = peer.get(key, {})
    contiguous, masked = times.get(f"deepgemm_{kind}_contiguous"), times.get(f"deepgemm_{kind}_masked")
    best = min([t for t in (contiguous, masked) if t], default=None)
    if best:
        ratios.append(best / ms)
    fmt = lambda t: f"{t:.4f}" if t else "-"
    print(f"| {' | '.join(key)} | {ms:.4f} | {fmt(contiguous)} | {fmt(masked)} | "
          f"{best / ms if best else float('nan'):.2f} | {errs.get(key, '-')} |")
if ratios:
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    faster = sum(r < 1 for r in ratios)
    print(f"\n{kind}: DeepGEMM takes {geo:.3f}x moejit's time in geomean over {len(ratios)} cases "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}); DeepGEMM faster on {faster}")
