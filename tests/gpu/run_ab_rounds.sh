#!/usr/bin/env bash
# On the GPU machine: a template change timed against a base over ROUNDS rounds of processes
# base/new/new/base (one binary; the base side gets MOEJIT_TEMPLATE_DIR=$BASE_TEMPLATES, the new
# side the binary's own templates or $NEW_TEMPLATES). Prints the median per case and side with the
# min-max range, and the geomean of the medians' ratio. For 2-3% effects at 16384 tokens, where one
# process moves ±5-10% under the 700 W cap (docs/perf.md v17), run_build_ab.sh's best of two is too
# few. bench_suite's variables (FORMAT, MODELS, TOKENS, BENCH_SPECS) pass through.
#   tests/gpu/run_ab_rounds.sh OUT_DIR      (BASE_TEMPLATES required; ROUNDS default 3)
set -uo pipefail
dir=${1:?output folder}
[ -n "${BASE_TEMPLATES:-}" ] || { echo "BASE_TEMPLATES needed" >&2; exit 2; }
mkdir -p "$dir"
i=0
status=0
for r in $(seq 1 "${ROUNDS:-3}"); do
  for side in base new new base; do
    i=$((i + 1))
    templates=()
    [ "$side" = base ] && templates=(MOEJIT_TEMPLATE_DIR="$BASE_TEMPLATES")
    [ "$side" = new ] && [ -n "${NEW_TEMPLATES:-}" ] && templates=(MOEJIT_TEMPLATE_DIR="$NEW_TEMPLATES")
    # Separate caches: the two sides' kernels share specs but not sources.
    env "${templates[@]}" MOEJIT_CACHE_DIR=/tmp/moejit-rounds-$side "${BUILD:-build}/examples/bench_suite" "$dir/routing.csv" \
      > "$dir/${i}_$side.csv" 2> "$dir/${i}_$side.log" || status=1
  done
done
python3 - "$dir" <<'PY' | tee "$dir/summary.txt"
import csv, glob, math, statistics as st, sys
times = {}
for path in glob.glob(sys.argv[1] + "/*_*.csv"):
    side = path.rsplit("_", 1)[1][:-4]
    rows = list(csv.reader(open(path)))
    for r in rows[1:]:
        spec = ",".join(r[12:])  # the spec column holds commas
        if "tile=" not in spec:
            continue
        config = spec.split("tile=")[1].split(",fuse")[0]
        times.setdefault((r[0], r[1], int(r[2]), config), {}).setdefault(side, []).append(float(r[9]))
ratios = []
for key in sorted(times):
    base, new = times[key].get("base", []), times[key].get("new", [])
    if not base or not new:
        continue
    ratios.append(st.median(new) / st.median(base))
    print(f"{key[0]:14} {key[1]:4} {key[2]:6} {key[3]:44} base {st.median(base):.4f} [{min(base):.4f}-{max(base):.4f}] "
          f"new {st.median(new):.4f} [{min(new):.4f}-{max(new):.4f}] {ratios[-1]:.3f}")
if ratios:
    print(f"geomean new/base of the medians {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} over {len(ratios)} cases")
PY
exit $status
