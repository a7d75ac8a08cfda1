#!/usr/bin/env bash
# Runs ws_conformance across two hosts of the test bed (scripts/testbed.sh):
# its peer publishers (ws_test_peer publish) in host 0, bound to host 0's
# address, and ws_conformance itself, the subscriber, in host 1. Both sides get
# a per-run secret (a publisher refuses non-loopback addresses without one).
# Publishers that a case creates in-process (dead-subscriber, checksum) run in
# host 1, bound to host 1's address (WEIGHTSYNC_BIND).
#
# Usage: cross_host_conformance.sh TESTBED_SH WS_CONFORMANCE --transport T [Catch2 arguments]
# Exits 77 with "SKIPPED: <reason>" where no bed can be made here, or where
# ws_conformance skips (transport not built or not viable).
# Environment passes through (UCX_TLS, WEIGHTSYNC_UCX_ALLOW_EMULATED_RMA, ...).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 TESTBED_SH WS_CONFORMANCE --transport T [Catch2 arguments]" >&2; exit 2; }
testbed="$1" conformance="$2"
shift 2

if [ -z "${WS_TESTBED:-}" ]; then
  rc=0
  "$testbed" check >/dev/null || rc=$?
  if [ "$rc" -ne 0 ]; then "$testbed" check; exit "$rc"; fi  # prints SKIPPED: <reason>, 77
  [[ "$testbed" != *" "* ]] || { echo "cross-host: the path of testbed.sh must have no spaces" >&2; exit 2; }
  # The bed exists while this script runs again inside it, and is removed on
  # every exit path (testbed.sh run).
  exec "$testbed" run 2 -- "$0" "$testbed" "$conformance" "$@"
fi

h0="$("$testbed" addr "$WS_TESTBED" 0)"
h1="$("$testbed" addr "$WS_TESTBED" 1)"
if [ -z "${WEIGHTSYNC_SECRET:-}" ]; then
  WEIGHTSYNC_SECRET="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
  export WEIGHTSYNC_SECRET
fi
export WS_PEER_PREFIX="$testbed exec $WS_TESTBED 0" WS_PEER_BIND="$h0" WEIGHTSYNC_BIND="$h1"
echo "cross-host: bed $WS_TESTBED, publishers in host 0 ($h0), subscriber in host 1 ($h1)"
# Bounded here, so that the bed is always removed (a ctest timeout kills with
# SIGKILL, which leaves no chance to clean up).
rc=0
timeout --kill-after=5 "${WS_CROSS_HOST_TIMEOUT_S:-150}" "$testbed" exec "$WS_TESTBED" 1 "$conformance" "$@" || rc=$?
[ "$rc" -ne 124 ] || echo "cross-host: ws_conformance ran past ${WS_CROSS_HOST_TIMEOUT_S:-150} s" >&2
exit "$rc"
