#!/usr/bin/env bash
# Configures and builds weightsync in ${WEIGHTSYNC_BUILD_DIR:-build}.
# Extra configure arguments come from WEIGHTSYNC_CMAKE_ARGS
# (e.g. "-DWEIGHTSYNC_SANITIZE=address,undefined").
# RelWithDebInfo here means -O2 -g1: line tables (backtraces, perf and the
# sanitizers keep file:line) without the full variable info of -g, which
# doubled the compile time of the libtorch code (docs/build.md). For a gdb
# session configure with CMAKE_BUILD_TYPE=Debug, or set the flags with
# WEIGHTSYNC_OPT_FLAGS="-O2 -g -DNDEBUG" (scripts/test.sh does, per sanitizer).
# Usage: scripts/build.sh [cmake --build arguments, e.g. --target X]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
# shellcheck disable=SC2086  # WEIGHTSYNC_CMAKE_ARGS is a list of arguments
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="${WEIGHTSYNC_OPT_FLAGS:--O2 -g1 -DNDEBUG}" ${WEIGHTSYNC_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" --parallel "$(nproc)" "$@"
