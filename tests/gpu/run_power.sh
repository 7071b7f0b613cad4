#!/usr/bin/env bash
# On the GPU machine: power draw and SM clock under sustained load (the H100 here caps at 700 W, and
# the compute-bound cases run at that cap: docs/perf.md v14, v16). nvidia-smi logs every 20 ms while
#   1. bench_suite times MODEL's 16384-token cases (up, then down) after BENCH_WARMUP_MS (default
#      4000) of warm-up launches each, FORMAT as in bench_suite (bf16 when unset);
#   2. tests/gpu/power_peers.py runs cuBLAS bf16 / FP8 8192^3 and torch's grouped GEMM on the same
#      cases (bench_suite's group sizes), SECONDS_PER_PHASE (default 4) seconds back to back each.
# Prints per phase the mean power and SM clock once the load is on (from the first sample at 90% of
# the phase's peak power, and past its first second). Results in $OUT: smi.csv, phases.csv,
# bench.csv, power.txt. Example: run(command="FORMAT=e4m3 tests/gpu/run_power.sh", carry=["build"]).
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
BUILD=${BUILD:-build}
MODEL=${MODEL:-mixtral-8x7b}
FORMAT=${FORMAT:-bf16}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu --format=csv,noheader,nounits -lms 20 > "$OUT/smi.csv" &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT
sleep 1
format=(FORMAT="$FORMAT")
[ "$FORMAT" = bf16 ] && format=()
t0=$(date +%s.%N)
env "${format[@]}" MODELS="$MODEL" TOKENS=16384 BENCH_WARMUP_MS=${BENCH_WARMUP_MS:-4000} \
  "$BUILD/examples/bench_suite" "$OUT/routing.csv" > "$OUT/bench.csv" || exit 1
t1=$(date +%s.%N)
echo "phase,moejit_${FORMAT}_${MODEL}_16384_up_then_down,$t0,$t1,bench.csv" > "$OUT/phases.csv"
sleep 1
peer_format=$FORMAT
[ "$FORMAT" = e4m3 ] || peer_format=bf16  # the 4-bit formats' peer is bf16 torch._grouped_mm
routing=$(cd "$OUT" && pwd)/routing.csv
(cd tests/gpu && PYTHONUNBUFFERED=1 python3 power_peers.py "$MODEL" "$peer_format" "${SECONDS_PER_PHASE:-4}" "$routing") \
  >> "$OUT/phases.csv" || exit 1
kill $smi
cut -d, -f1-3,10-11 "$OUT/bench.csv"
python3 - "$OUT" <<'PY' | tee "$OUT/power.txt"
import csv, datetime, sys
out = sys.argv[1]
samples = []
for row in csv.reader(open(f"{out}/smi.csv")):
    try:
        t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(row[1]), float(row[2])))
    except (ValueError, IndexError):
        pass  # a truncated last line
for _, name, t0, t1, ms in csv.reader(open(f"{out}/phases.csv")):
    s = [x for x in samples if float(t0) <= x[0] <= float(t1)]
    if s:
        # The sustained state: from the first sample at 90% of the phase's peak power on (bench_suite
        # compiles and sets up for ~2 s first), and at least one second into the phase.
        peak = max(x[1] for x in s)
        begin = next(x[0] for x in s if x[1] >= 0.9 * peak)
        s = [x for x in s if x[0] >= max(begin, float(t0) + 1.0)]
        print(f"{name:52} ms/launch {ms:>9}  power {sum(x[1] for x in s) / len(s):6.1f} W"
              f"  sm clock {sum(x[2] for x in s) / len(s):6.0f} MHz  ({len(s)} samples)")
PY
