#!/usr/bin/env bash
# The weight-sync example alone, on localhost: a publisher and a subscriber as two processes.
# The publisher writes several versions of synthetic weights into its slot
# ring; the subscriber pulls each new one straight into per-tensor buffers,
# checks every byte, and prints a summary line (versions, bytes, GB/s).
# Usage: scripts/weights-demo.sh [--size-mib N] [--versions N] [--tensors N]
# Unless WEIGHTSYNC_SECRET is set, both processes share a random per-run
# secret, written (mode 0600) to the run's temporary folder while it runs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"

size_mib=256 versions=5 tensors=64
while [ $# -gt 0 ]; do
  case "$1" in
    --size-mib) size_mib="$2"; shift 2 ;;
    --versions) versions="$2"; shift 2 ;;
    --tensors) tensors="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

"$root/scripts/install-deps.sh"
echo "demo: building (first time takes a minute)..."
"$root/scripts/build.sh" --target ws-example-publisher ws-example-subscriber >/dev/null

work="$(mktemp -d)"
publisher_pid=""
cleanup() {
  if [ -n "$publisher_pid" ]; then kill "$publisher_pid" 2>/dev/null || true; wait "$publisher_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
. "$root/scripts/run-secret.sh"
ws_run_secret "$work" demo  # exported: the publisher and the subscriber use it

"$build/examples/ws-example-publisher" --size-mib "$size_mib" --tensors "$tensors" --versions "$versions" \
  --interval-ms 1000 --linger-s 120 --address-file "$work/address" &
publisher_pid=$!
for _ in $(seq 1 200); do [ -s "$work/address" ] && break; sleep 0.05; done
[ -s "$work/address" ] || { echo "demo: the publisher did not start" >&2; exit 1; }

"$build/examples/ws-example-subscriber" "$(cat "$work/address")" --versions "$versions" --timeout-s 60
