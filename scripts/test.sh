#!/usr/bin/env bash
# Installs what is needed, builds everything, and runs every test (ctest).
# With --sanitizers, or when CI=true, it then runs the whole suite again under
# ASan+UBSan (build-asan/) and under TSan (build-tsan/), less the benchmark
# harness (docs/build.md).
# Usage: scripts/test.sh [--sanitizers] [ctest arguments, e.g. -R auth]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sanitizers=0
[ "${CI:-}" = "true" ] && sanitizers=1
if [ "${1:-}" = "--sanitizers" ]; then sanitizers=1; shift; fi

"$root/scripts/install-deps.sh"

run_suite() {  # run_suite NAME BUILD_DIR CMAKE_ARGS OPT_FLAGS [ctest args...]
  local name="$1" dir="$2" args="$3" opt="$4" start
  shift 4
  start=$SECONDS
  echo "== $name: building in $dir (${opt:-the default flags of build.sh})"
  WEIGHTSYNC_BUILD_DIR="$dir" WEIGHTSYNC_CMAKE_ARGS="$args" WEIGHTSYNC_OPT_FLAGS="$opt" "$root/scripts/build.sh"
  echo "== $name: built in $((SECONDS - start)) s; running the tests"
  # Serial on purpose: several tests assert time bounds (timeouts, dead peers).
  (cd "$dir" && ctest --output-on-failure --timeout 900 "$@")
  echo "== $name: done in $((SECONDS - start)) s"
}

run_suite "tests" "${WEIGHTSYNC_BUILD_DIR:-$root/build}" "" "${WEIGHTSYNC_OPT_FLAGS:-}" "$@"
# The GPU check's dry run (docs/gpu.md): the carried packages fetched and
# unpacked, a configure against them with the CUDA objects compiled, and what
# needs no GPU run against the build above. Not with a ctest selection.
if [ $# -eq 0 ]; then
  start=$SECONDS
  echo "== GPU check, dry run (scripts/gpu-check.sh --dry-run)"
  "$root/scripts/fetch-gpu-packages.sh"
  WEIGHTSYNC_BUILD_DIR="${WEIGHTSYNC_BUILD_DIR:-$root/build}" OUT="${WEIGHTSYNC_BUILD_DIR:-$root/build}/gpu-check" \
    "$root/scripts/gpu-check.sh" --dry-run
  echo "== GPU check, dry run: done in $((SECONDS - start)) s"
fi
if [ "$sanitizers" = 1 ]; then
  # tests/tsan.supp: libzmq is not instrumented (see the file).
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  export TSAN_OPTIONS="halt_on_error=1 suppressions=$root/tests/tsan.supp"
  # Without libtorch: it is not instrumented (its OpenMP threads are invisible
  # to TSan) and it would triple the build time; the plain run covers it.
  # Without the Python package: an instrumented extension cannot load into an
  # uninstrumented interpreter (it would need the sanitizer runtime preloaded);
  # the plain run covers it, and the library it wraps is tested here.
  # Without the benchmark harness: it measures, and the library it drives is
  # tested here through the conformance and integration suites.
  # -O0 -g1: GCC's UBSan checks cost most when the optimizer runs over them
  # (a test file: 170 s at -O1, 45 s at -O0, 45 s for ASan alone at -O1;
  # docs/build.md), and -O0 keeps every check, alignment and vptr included.
  run_suite "tests under ASan+UBSan" "$root/build-asan" \
    "-DWEIGHTSYNC_SANITIZE=address,undefined -DWEIGHTSYNC_WITH_TORCH=OFF -DWEIGHTSYNC_WITH_PYTHON=OFF -DWEIGHTSYNC_BUILD_BENCH=OFF" \
    "-O0 -g1 -DNDEBUG" "$@"
  # Without UCX: its memory hooks (libucm interposes madvise) crash the TSan
  # runtime at thread exit, and UCX itself is not TSan-instrumented.
  run_suite "tests under TSan" "$root/build-tsan" \
    "-DWEIGHTSYNC_SANITIZE=thread -DWEIGHTSYNC_WITH_UCX=OFF -DWEIGHTSYNC_WITH_TORCH=OFF -DWEIGHTSYNC_WITH_PYTHON=OFF -DWEIGHTSYNC_BUILD_BENCH=OFF" \
    "-O2 -g1 -DNDEBUG" "$@"
fi
