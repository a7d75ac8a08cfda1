#!/usr/bin/env bash
# Installs what is needed, builds everything, and runs every test (ctest).
# With --sanitizers, or when CI=true, it then runs the whole suite again under
# ASan+UBSan (build-asan/) and under TSan (build-tsan/).
# Usage: scripts/test.sh [--sanitizers] [ctest arguments, e.g. -R auth]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sanitizers=0
[ "${CI:-}" = "true" ] && sanitizers=1
if [ "${1:-}" = "--sanitizers" ]; then sanitizers=1; shift; fi

"$root/scripts/install-deps.sh"

run_suite() {  # run_suite NAME BUILD_DIR CMAKE_ARGS [ctest args...]
  local name="$1" dir="$2" args="$3"
  shift 3
  echo "== $name: building in $dir"
  WEIGHTSYNC_BUILD_DIR="$dir" WEIGHTSYNC_CMAKE_ARGS="$args" "$root/scripts/build.sh"
  echo "== $name: running the tests"
  # Serial on purpose: several tests assert time bounds (timeouts, dead peers).
  (cd "$dir" && ctest --output-on-failure --timeout 900 "$@")
}

run_suite "tests" "${WEIGHTSYNC_BUILD_DIR:-$root/build}" "" "$@"
if [ "$sanitizers" = 1 ]; then
  # tests/tsan.supp: libzmq is not instrumented (see the file).
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  export TSAN_OPTIONS="halt_on_error=1 suppressions=$root/tests/tsan.supp"
  # Without libtorch: it is not instrumented (its OpenMP threads are invisible
  # to TSan) and it would triple the build time; the plain run covers it.
  # Without the Python package: an instrumented extension cannot load into an
  # uninstrumented interpreter (it would need the sanitizer runtime preloaded);
  # the plain run covers it, and the library it wraps is tested here.
  run_suite "tests under ASan+UBSan" "$root/build-asan" \
    "-DWEIGHTSYNC_SANITIZE=address,undefined -DWEIGHTSYNC_WITH_TORCH=OFF -DWEIGHTSYNC_WITH_PYTHON=OFF" "$@"
  # Without UCX: its memory hooks (libucm interposes madvise) crash the TSan
  # runtime at thread exit, and UCX itself is not TSan-instrumented.
  run_suite "tests under TSan" "$root/build-tsan" \
    "-DWEIGHTSYNC_SANITIZE=thread -DWEIGHTSYNC_WITH_UCX=OFF -DWEIGHTSYNC_WITH_TORCH=OFF -DWEIGHTSYNC_WITH_PYTHON=OFF" "$@"
fi
