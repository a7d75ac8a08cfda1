#!/usr/bin/env bash
# Installs what is needed, builds everything, and runs every test (ctest).
# Usage: scripts/test.sh [ctest arguments, e.g. -R auth]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cd "$build"
# Serial on purpose: several tests assert time bounds (timeouts, dead peers).
ctest --output-on-failure --timeout 600 "$@"
