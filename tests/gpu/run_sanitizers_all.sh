#!/usr/bin/env bash
# On the GPU machine: compute-sanitizer memcheck and racecheck over every kernel kind the GPU tests
# launch — unfused (mixed sizes), fused bf16 and quantized, FP8 and 4-bit of both families, routing
# and combine — as concurrent processes, so that the whole sweep fits one device call (each job
# under its own timeout). Kernels are compiled with -lineinfo so reports name source lines.
# SANITIZE_TOOLS (memcheck racecheck; synccheck, initcheck too) and SANITIZE_ONLY (a regex on the
# job names) narrow it; SANITIZE_FULL=1 drops MOEJIT_TEST_QUICK (f16 and f32 C variants too).
# Writes one log per job and summary.txt (one line per job: tool, cases, family, result);
# the logs travel back as one logs.tgz ($OUT returns at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/moejit-out}
mkdir -p "$OUT/logs"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-cache}
export PATH=/usr/local/cuda/bin:$PATH
export MOEJIT_LINEINFO=1
test_bin=${BUILD:-build}/tests/moejit_gpu_tests
limit=${SANITIZE_TIMEOUT:-480}

# name | family (empty: both) | quick (bf16 / contiguous only) | Catch2 test spec
jobs_table=(
  "unfused|hopper|1|every variant: mixed*,every variant: epilogue edges*,2x1 CTA pairs*"
  "unfused|portable|1|every variant: mixed*,every variant: epilogue edges*"
  "fused|hopper|1|fusion: random top-k*,quant fusion: random*"
  "fused|portable|1|fusion: random top-k*,quant fusion: random*"
  "formats||0|fp8: every variant*,fp8: every portable*,w4: every variant*,w4: every portable*,w4: short last tiles*"
  "routing||0|[routing]"
  "split||1|split=tail: the last round*,fp8: split=tail*"
  "tail|hopper|1|[tail]"
)

# Fill the kernel cache first, outside the sanitizers, so that no job spends its time in NVRTC
# while another holds the GPU (compiles are the same with MOEJIT_LINEINFO=1 in every job).
"$test_bin" "formats: compile every*,quant fusion: variants under test*,fusion: variants under test,device and candidates" \
  > "$OUT/logs/precompile.txt" 2>&1

pids=()
names=()
for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
  for row in "${jobs_table[@]}"; do
    IFS='|' read -r name family quick spec <<< "$row"
    [[ "$name" =~ ${SANITIZE_ONLY:-.} ]] || continue   # e.g. SANITIZE_ONLY='^(formats|fused)$'
    log="$OUT/logs/${tool}_${name}_${family:-both}.txt"
    (
      [ -n "$family" ] && export MOEJIT_TEST_FAMILY=$family
      [ "$quick" = 1 ] && [ "${SANITIZE_FULL:-0}" != 1 ] && export MOEJIT_TEST_QUICK=1
      timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 3 "$test_bin" "$spec" > "$log" 2>&1
      echo "exit code $?" >> "$log"
    ) &
    pids+=($!)
    names+=("$log")
  done
done
wait "${pids[@]}"

status=0
: > "$OUT/summary.txt"
for log in "${names[@]}"; do
  rc=$(tail -1 "$log" | sed 's/exit code //')
  verdict=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|All tests passed|test cases failed|assertions.*failed|No test cases matched" "$log" | tr '\n' ' ')
  echo "$(basename "$log" .txt): rc=$rc $verdict" | tee -a "$OUT/summary.txt"
  [ "$rc" = 0 ] || status=1
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
exit $status
