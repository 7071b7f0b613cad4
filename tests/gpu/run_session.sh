#!/usr/bin/env bash
# On the GPU machine: the stages of a verification session, chosen with STAGES, each writing its
# logs under $OUT/<stage>/. One device call runs at most 10 minutes, so a session is a few calls:
#   STAGES="tests example"        every GPU test (grouped GEMM, fusion, routing, formats, tuning,
#                                 graph), then the mixtral example: ~9.5 min on the H100, more than
#                                 one call; split with GPU_TEST_FILTER (tests/gpu/README.md)
#   STAGES="bench layer"          the 40-case suite with torch + ceilings (~20 s); the fused MoE
#                                 layer and its torch composition (~4 min)
#   STAGES="formats"              FP8 / MXFP4 / NVFP4 on the suite with their peers (~5 min)
#   STAGES="sanitize-all"         memcheck + racecheck over every kernel kind at once (~2.5 min);
#                                 "sanitize" / "sanitize-fused": the unfused / fused groups alone
#   STAGES="tune"                 heuristic vs autotuner table, launch overhead (25 s in v6)
#   STAGES="ncu"                  Nsight Compute on gpt-oss's fused and plain GEMM1 (bf16, MXFP4)
# tests/gpu/README.md gives the order and the device calls. Exit status: 1 if any stage failed.
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
export BUILD=${BUILD:-build}
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
export PATH=/usr/local/cuda/bin:$PATH
here=$(dirname "$0")
status=0
stage() {  # name, command...
  local name=$1; shift
  local start=$SECONDS
  echo "== stage $name"
  OUT="$OUT/$name" "$@"
  local rc=$?
  echo "== stage $name: exit $rc after $((SECONDS - start)) s"
  [ $rc = 0 ] || status=1
}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
for s in ${STAGES:-tests example}; do
  case $s in
    tests)    stage tests env SKIP_EXAMPLE=1 "$here/run_on_device.sh" ;;
    example)  stage example env SKIP_TESTS=1 "$here/run_on_device.sh" ;;
    bench)    stage bench "$here/run_bench.sh" ;;
    layer)    stage layer "$here/run_moe_layer.sh" ;;
    formats)  stage formats env SKIP_TESTS=1 "$here/run_formats.sh" ;;
    # memcheck + racecheck (SANITIZE_TOOLS) over job groups of the GPU tests, concurrently
    # (run_sanitizers_all.sh): every kernel kind, or the unfused / fused groups alone.
    sanitize-all)   stage sanitize-all "$here/run_sanitizers_all.sh" ;;
    sanitize)       stage sanitize env SANITIZE_ONLY='^unfused$' "$here/run_sanitizers_all.sh" ;;
    sanitize-fused) stage sanitize-fused env SANITIZE_ONLY='^fused$' "$here/run_sanitizers_all.sh" ;;
    tune)     stage tune "$here/run_tune_bench.sh" ;;
    ncu)      stage ncu "$here/run_ncu_fused.sh" ;;
    *) echo "unknown stage '$s'"; status=1 ;;
  esac
done
# The device tool brings back at most 8 files: everything goes into logs.tgz; each stage's tables
# (*.md, summary.txt) stay beside it for a quick look.
if [ "${KEEP_FILES:-0}" != 1 ]; then
  archive=$(mktemp /tmp/moejit-logs.XXXXXX)
  (cd "$OUT" && tar czf "$archive" --exclude=logs.tgz . && mv "$archive" logs.tgz && find . -mindepth 1 -type f \
     ! -name logs.tgz ! -name '*.md' ! -name summary.txt -delete && find . -mindepth 1 -type d -empty -delete)
fi
exit $status
