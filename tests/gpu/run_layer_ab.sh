#!/usr/bin/env bash
# On the GPU machine: examples/moe_layer (the fused GEMMs of a whole MoE layer) on two template
# folders of one binary, in alternating processes (base/new/new/base per round), for a change to
# the fused kernels that the host does not take part in. Results in $OUT: layer_ab_<i>_<side>.csv
# and layer_ab_summary.txt (new/base per model, tokens and stage: medians over the processes,
# [min-max] of each side). Each process also checks the layer against the CPU reference ("matches").
#   BASE_TEMPLATES  kernel_templates folder of the base, carried (e.g. git archive HEAD kernel_templates)
#   NEW_TEMPLATES   the change's (default: the binary's own)
#   or BASE_BUILD   a build folder of the base (its examples/moe_layer), for a change the host takes
#                   part in (a shared-memory formula: other templates would not compile with this host)
#   or NEW_ARGS     moe_layer flags of the new side alone, e.g. "--gemm2-spec stages=6": a config
#                   against the heuristic's, one binary and one template folder
#   ARGS            moe_layer flags of both sides, e.g. "--fp8-gather gemm" (with NEW_ARGS: a config
#                   against the heuristic's in a mode other than the default)
#   MODELS (default gpt-oss-120b), TOKENS (default 4096,16384), WEIGHTS (default mxfp4), REPS (default 50)
#   ROUNDS          rounds of base/new/new/base (default 1)
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
BUILD=${BUILD:-build}
[ -n "${BASE_TEMPLATES:-}" ] || [ -n "${BASE_BUILD:-}" ] || [ -n "${NEW_ARGS:-}" ] ||
  { echo "BASE_TEMPLATES, BASE_BUILD or NEW_ARGS needed" >&2; exit 2; }
mkdir -p "$OUT"
status=0
i=0
for side in $(for r in $(seq 1 "${ROUNDS:-1}"); do echo base new new base; done); do
  i=$((i + 1))
  templates=()
  extra=()
  [ -n "${ARGS:-}" ] && read -r -a extra <<< "$ARGS"
  new_args=()
  [ "$side" = new ] && [ -n "${NEW_ARGS:-}" ] && read -r -a new_args <<< "$NEW_ARGS"
  extra+=("${new_args[@]}")
  bin="$BUILD/examples/moe_layer"
  [ "$side" = base ] && [ -n "${BASE_TEMPLATES:-}" ] && templates=(MOEJIT_TEMPLATE_DIR="$BASE_TEMPLATES")
  [ "$side" = base ] && [ -n "${BASE_BUILD:-}" ] && bin="$BASE_BUILD/examples/moe_layer"
  [ "$side" = new ] && [ -n "${NEW_TEMPLATES:-}" ] && templates=(MOEJIT_TEMPLATE_DIR="$NEW_TEMPLATES")
  # Separate caches: the two sides' kernels share specs but not sources.
  env "${templates[@]}" MOEJIT_CACHE_DIR=/tmp/moejit-cache-layer-$side "$bin" \
    --model "${MODELS:-gpt-oss-120b}" --weights "${WEIGHTS:-mxfp4}" --tokens "${TOKENS:-4096,16384}" --reps "${REPS:-50}" "${extra[@]}" \
    > "$OUT/layer_ab_${i}_${side}.csv" 2> "$OUT/layer_ab_${i}_${side}.txt" || status=1
  grep -E "matches|DOES NOT" "$OUT/layer_ab_${i}_${side}.txt" | sed "s/^/$side $i: /"
done
python3 - "$OUT" <<'PY' | tee "$OUT/layer_ab_summary.txt"
import csv, glob, os, statistics, sys
out = sys.argv[1]
times = {}
for path in sorted(glob.glob(os.path.join(out, "layer_ab_*_*.csv"))):
    side = path.rsplit("_", 1)[1][:-4]
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) != 4 or row[0] == "model":
                continue
            times.setdefault((row[0], int(row[1]), row[2]), {}).setdefault(side, []).append(float(row[3]))
print("## new/base, medians over each side's processes [min-max], ms base | new")
for key in sorted(times):
    t = times[key]
    if "base" in t and "new" in t:
        b, n = statistics.median(t["base"]), statistics.median(t["new"])
        print(f"{key[0]:14} {key[1]:6} {key[2]:12} {b:.4f} | {n:.4f}  {n / b:.3f}  "
              f"[{min(t['base']):.4f}-{max(t['base']):.4f} | {min(t['new']):.4f}-{max(t['new']):.4f}]")
PY
exit $status
