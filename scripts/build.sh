#!/usr/bin/env bash
# Configures and builds weightsync in ${WEIGHTSYNC_BUILD_DIR:-build}.
# Extra configure arguments come from WEIGHTSYNC_CMAKE_ARGS
# (e.g. "-DWEIGHTSYNC_SANITIZE=address,undefined").
# Usage: scripts/build.sh [cmake --build arguments, e.g. --target X]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
# shellcheck disable=SC2086  # WEIGHTSYNC_CMAKE_ARGS is a list of arguments
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  ${WEIGHTSYNC_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" --parallel "$(nproc)" "$@"
