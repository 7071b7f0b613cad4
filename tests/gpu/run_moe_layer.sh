#!/usr/bin/env bash
# On the GPU machine (the device tool), from the repository root, with the build folder carried
# over: the routing GPU tests, then the fused MoE layer (on a cache folder prewarmed from the
# models' presets, checking that the layer compiles nothing more) (examples/moe_layer) and the same layer
# composed of torch operations around torch._grouped_mm (tests/gpu/moe_layer_peers.py), at the
# same models and token counts. Both print CSV "model,tokens,what,ms"; everything lands in $OUT.
# gpt-oss-120b runs again with MXFP4 and NVFP4 weights (moe_layer_{mxfp4,nvfp4}.csv/txt).
#   MODELS   (default gpt-oss-120b,qwen3-30b-a3b; add deepseek-v3 for the third: 22 GB of weights)
#   TOKENS   (default 16,1024,16384)
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
export PATH=/usr/local/cuda/bin:$PATH
MODELS=${MODELS:-gpt-oss-120b,qwen3-30b-a3b}
TOKENS=${TOKENS:-16,1024,16384}
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
status=0

echo "== routing GPU tests"
"$BUILD"/tests/moejit_gpu_tests "[routing]" 2>&1 | tee "$OUT/gpu_routing_tests.txt" | tail -25
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== moejit fused layer, after prewarming the models' presets into a fresh cache folder"
# Prewarm must build every kernel the layer requests (issue 6): run the layer on a cache folder
# that holds only the prewarmed kernels and check that it added none. --sms 132: the H100 SXM
# (the layer's runtime uses the device's SM count; a different GPU can request other specs).
PREWARM_CACHE=$(mktemp -d /tmp/moejit-prewarm.XXXXXX)
for m in ${MODELS//,/ }; do
  MOEJIT_CACHE_DIR=$PREWARM_CACHE "$BUILD"/moejit prewarm --model "$m" --arch sm_90a --sms 132 2>/dev/null \
    | grep -v '^not available' | tee -a "$OUT/prewarm.txt" || status=1
done
MOEJIT_CACHE_DIR=$PREWARM_CACHE "$BUILD"/moejit cache ls | awk '{print $4}' | sort > "$OUT/prewarm_before.txt"
MOEJIT_CACHE_DIR=$PREWARM_CACHE "$BUILD"/examples/moe_layer --model "$MODELS" --tokens "$TOKENS" > "$OUT/moe_layer.csv" \
  2> "$OUT/moe_layer.txt" || status=1
cat "$OUT/moe_layer.txt"
MOEJIT_CACHE_DIR=$PREWARM_CACHE "$BUILD"/moejit cache ls | awk '{print $4}' | sort > "$OUT/prewarm_after.txt"
# The layer's unfused reference GEMMs (the fusion-overhead columns) are not part of the served layer:
# qwen3-30b-a3b.preset has plain=no, so new fuse=none entries are not counted as misses.
diff "$OUT/prewarm_before.txt" "$OUT/prewarm_after.txt" | grep '^>' | grep -v 'fuse=none,act=none' > "$OUT/prewarm_missed.txt"
if [ ! -s "$OUT/prewarm_missed.txt" ]; then
  echo "prewarm covered the layer: no route, combine or fused GEMM kernel compiled after it"
else
  echo "FAILED: the layer compiled kernels prewarm did not build:"; cat "$OUT/prewarm_missed.txt"; status=1
fi

echo "== moejit fused layer, gpt-oss-120b with MXFP4 and NVFP4 weights (Hopper 4-bit kernel with its fusions)"
for w in mxfp4 nvfp4; do
  "$BUILD"/examples/moe_layer --model gpt-oss-120b --weights $w --tokens "$TOKENS" > "$OUT/moe_layer_$w.csv" \
    2> "$OUT/moe_layer_$w.txt" || status=1
  cat "$OUT/moe_layer_$w.txt"
done

echo "== gpt-oss-120b fused GEMM1 with its rows gathered by TMA (gather_by=tma) instead of cp.async, bf16 and MXFP4"
for w in bf16 mxfp4; do
  "$BUILD"/examples/moe_layer --model gpt-oss-120b --weights $w --gather-by tma --tokens "$TOKENS" \
    > "$OUT/moe_layer_tma_$w.csv" 2> "$OUT/moe_layer_tma_$w.txt" || status=1
  grep -E "gemm1|matches|DOES NOT" "$OUT/moe_layer_tma_$w.txt"
done

echo "== routing alone at DeepSeek-V3's shape (256 experts, top-8, 8 groups)"
"$BUILD"/examples/moe_layer --model deepseek-v3 --tokens "$TOKENS" --route-only >> "$OUT/moe_layer.csv" \
  2>> "$OUT/moe_layer.txt" || status=1
tail -4 "$OUT/moe_layer.txt"

echo "== torch composed layer"
PYTHONUNBUFFERED=1 TOKENS="$TOKENS" MODELS="$MODELS" python3 tests/gpu/moe_layer_peers.py > "$OUT/moe_layer_peers.csv" \
  2> "$OUT/moe_layer_peers.txt" || status=1
tail -5 "$OUT/moe_layer_peers.txt"

echo "== side by side (ms)"
python3 - "$OUT/moe_layer.csv" "$OUT/moe_layer_peers.csv" <<'PY' | tee "$OUT/moe_layer_compare.md"
import csv, sys
def load(path):
    out = {}
    try:
        for row in csv.reader(open(path)):
            try:
                out[(row[0], int(row[1]), row[2])] = float(row[3])
            except (IndexError, ValueError):
                pass  # header lines (the route-only run repeats it)
    except OSError:
        pass
    return out
ours, torch = load(sys.argv[1]), load(sys.argv[2])
print("| model | tokens | moejit layer | torch layer | speed-up | moejit route (alone) | torch route+permute | moejit gemm1 (plain) | moejit gemm2 (plain) | combine |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (model, tokens) in sorted({(m, t) for (m, t, _) in ours} | {(m, t) for (m, t, _) in torch}):
    g = lambda d, w: d.get((model, tokens, w))
    f = lambda v: "-" if v is None else f"{v:.4f}"
    o, p = g(ours, "layer"), g(torch, "layer")
    speed = f"{p / o:.2f}x" if o and p else "-"
    print(f"| {model} | {tokens} | {f(o)} | {f(p)} | {speed} | {f(g(ours, 'route'))} ({f(g(ours, 'route_only'))}) | {f(g(torch, 'route_permute'))} | "
          f"{f(g(ours, 'gemm1'))} ({f(g(ours, 'gemm1_plain'))}) | {f(g(ours, 'gemm2'))} ({f(g(ours, 'gemm2_plain'))}) | "
          f"{f(g(ours, 'combine'))} |")
PY
exit $status
