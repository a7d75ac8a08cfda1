#!/usr/bin/env bash
# Coverage-guided fuzzing of the wire decoders with libFuzzer (clang), under
# ASan and UBSan. Builds in build-fuzz/, seeds a corpus with valid messages,
# runs for the given time, and reports executions and crashes.
# Usage: scripts/fuzz.sh [seconds per harness, default 60]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-60}"
"$root/scripts/install-deps.sh" clang libclang-rt-14-dev
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWEIGHTSYNC_SANITIZE=address,undefined,fuzzer-no-link -DWEIGHTSYNC_BUILD_FUZZERS=ON \
  -DWEIGHTSYNC_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target ws_fuzz_wire ws_fuzz_corpus ws_fuzz_group
corpus="$build/fuzz-corpus"
mkdir -p "$corpus" "$build/fuzz-findings" "$build/group-corpus" "$build/group-findings"
"$build/tests/ws_fuzz_corpus" "$corpus"
# The wire decoders, then the trajectory channel's decoder, `seconds` each.
for target in wire group; do
  if [ "$target" = wire ]; then dir="$build/fuzz-findings" seeds="$corpus"; else dir="$build/group-findings" seeds="$build/group-corpus"; fi
  echo "fuzz: ws_fuzz_$target"
  (cd "$dir" && UBSAN_OPTIONS=halt_on_error=1 "$build/tests/ws_fuzz_$target" -max_total_time="$seconds" -max_len=8192 \
    -print_final_stats=1 "$seeds" 2>&1 | tee fuzz.log | grep -E "(DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)" || true)
  if ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* >/dev/null 2>&1; then
    echo "fuzz: findings in $dir" >&2
    exit 1
  fi
done
echo "fuzz: no crashes in ${seconds} s per harness"
