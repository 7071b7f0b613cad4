#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in their own build folder and runs each
# for a bounded time, starting from the committed seeds in tests/fuzz/corpus/<target>/.
#
#   tests/fuzz/run.sh [SECONDS_PER_TARGET]      default 30; MOEJIT_FUZZ_BUILD_DIR (default build-fuzz)
#
# Inputs the fuzzer finds interesting go to <build>/fuzz/<target>/corpus (the committed seeds are
# only read); a crashing input is written to <build>/fuzz/<target>/ and the script fails. Replay
# one with: <build>/tests/fuzz/fuzz_<target> FILE. Seeds: corpus/spec/*.txt are spec texts;
# corpus/cache_entry/*.mjk are encode_cache_entry outputs (one is a real entry written by
# `moejit compile` for sm_80).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
build=${MOEJIT_FUZZ_BUILD_DIR:-build-fuzz}
cxx=${MOEJIT_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}
[ -n "$cxx" ] || { echo "run.sh: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEJIT_BUILD_FUZZERS=ON \
      -DMOEJIT_BUILD_TESTS=OFF -DMOEJIT_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j2 --target fuzz_spec fuzz_cache_entry

status=0
for target in spec cache_entry; do
  work="$build/fuzz/$target"
  mkdir -p "$work/corpus"
  dict=()
  [ -f "tests/fuzz/$target.dict" ] && dict=(-dict="tests/fuzz/$target.dict")
  echo "== fuzz_$target for ${seconds}s"
  if "$build/tests/fuzz/fuzz_$target" "${dict[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "tests/fuzz/corpus/$target" >"$work/log.txt" 2>&1; then
    grep -E "^stat::(number_of_executed_units|new_units_added|peak_rss_mb)|^Done" "$work/log.txt" || true
  else
    status=1
    echo "fuzz_$target FAILED; the input that failed is in $work/ (log: $work/log.txt):"
    tail -n 60 "$work/log.txt"
  fi
done
exit $status
