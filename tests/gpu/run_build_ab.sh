#!/usr/bin/env bash
# On the GPU machine: the same bench_suite cases from two builds, in alternating processes
# (base/new/new/base, so that a drift of the GPU's state over the call hits both sides alike), for
# a change that the host side takes part in (a packed layout: MOEJIT_TEMPLATE_DIR alone cannot A/B
# it). Results in $OUT: ab_<format>_<i>_<side>.csv and ab_summary.txt (new/base per case, best of
# each side's two processes, and the geomean per token count).
#   BASE_BUILD   build folder of the base commit (only examples/bench_suite is used), carried
#   BUILD        build folder of the change (default build)
#   or, for a template-only change, one binary: BASE_TEMPLATES / NEW_TEMPLATES, kernel_templates
#   folders given to $BUILD's bench_suite as MOEJIT_TEMPLATE_DIR (NEW_TEMPLATES unset: its own)
#   FORMATS      bench_suite FORMATs to compare (default "mxfp4 nvfp4"; "bf16" for the unquantized suite)
#   TOKENS, MODELS as in bench_suite (default TOKENS=16,128)
#   ROUNDS       rounds of base/new/new/base (default 1: best of each side's two processes). With more,
#                the summary compares medians and gives each side's min-max: at 16384 tokens one
#                process moves ±5-10% under the 700 W cap, so 2-3% needs several rounds (docs/perf.md v17).
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
BUILD=${BUILD:-build}
[ -n "${BASE_BUILD:-}" ] || [ -n "${BASE_TEMPLATES:-}" ] || { echo "BASE_BUILD or BASE_TEMPLATES needed" >&2; exit 2; }
export TOKENS=${TOKENS:-16,128}
mkdir -p "$OUT"
status=0
for fmt in ${FORMATS:-mxfp4 nvfp4}; do
  i=0
  for side in $(for r in $(seq 1 "${ROUNDS:-1}"); do echo base new new base; done); do
    i=$((i + 1))
    bin="$BUILD/examples/bench_suite"
    [ "$side" = base ] && [ -n "${BASE_BUILD:-}" ] && bin="$BASE_BUILD/examples/bench_suite"
    templates=()
    [ "$side" = base ] && [ -n "${BASE_TEMPLATES:-}" ] && templates=(MOEJIT_TEMPLATE_DIR="$BASE_TEMPLATES")
    [ "$side" = new ] && [ -n "${NEW_TEMPLATES:-}" ] && templates=(MOEJIT_TEMPLATE_DIR="$NEW_TEMPLATES")
    format=(FORMAT="$fmt")
    [ "$fmt" = bf16 ] && format=()
    # Separate caches: the two sides' kernels may share a spec but not a source.
    env "${format[@]}" "${templates[@]}" MOEJIT_CACHE_DIR=/tmp/moejit-cache-$side "$bin" "$OUT/ab_routing.csv" \
      > "$OUT/ab_${fmt}_${i}_${side}.csv" 2> "$OUT/ab_${fmt}_${i}_${side}.log" || status=1
  done
done
python3 - "$OUT" "${ROUNDS:-1}" ${FORMATS:-mxfp4 nvfp4} <<'PY' | tee "$OUT/ab_summary.txt"
import csv, math, sys, glob, os, statistics
out, rounds, fmts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for fmt in fmts:
    times = {}
    for path in sorted(glob.glob(os.path.join(out, f"ab_{fmt}_*_*.csv"))):
        side = path.rsplit("_", 1)[1][:-4]
        with open(path) as f:
            for row in csv.DictReader(f):
                key = (row["model"], row["gemm"], int(row["tokens"]))
                times.setdefault(key, {}).setdefault(side, []).append(float(row["ms"]))
    if rounds == 1:
        print(f"## {fmt}: new/base (best of two processes each), ms base | new")
    else:
        print(f"## {fmt}: new/base (medians of {2 * rounds} processes each, [min-max]), ms base | new")
    by_tokens = {}
    for key in sorted(times):
        t = times[key]
        if "base" not in t or "new" not in t:
            continue
        pick = min if rounds == 1 else statistics.median
        b, n = pick(t["base"]), pick(t["new"])
        by_tokens.setdefault(key[2], []).append(n / b)
        spread = "" if rounds == 1 else f"  [{min(t['base']):.4f}-{max(t['base']):.4f} | {min(t['new']):.4f}-{max(t['new']):.4f}]"
        print(f"{key[0]:14} {key[1]:5} {key[2]:6}  {b:.4f} | {n:.4f}  {n / b:.3f}{spread}")
    for tokens, r in sorted(by_tokens.items()):
        print(f"geomean new/base at {tokens} tokens: {math.exp(sum(map(math.log, r)) / len(r)):.3f} over {len(r)} cases")
PY
exit $status
