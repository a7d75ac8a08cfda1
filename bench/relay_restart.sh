#!/usr/bin/env bash
# The restart figure of weightsync-relay (docs/relays.md, "The relay daemon"):
# an engine process started fresh on a node (connect + first pull, a real new
# process: ws_test_peer subscribe, which also checks every byte) takes the
# newest version from the node's relay daemon over shm, against the same fresh
# process pulling it from the trainer across a test-bed link (tcp).
# Trainer in host 0, daemon and engine in host 1 (scripts/testbed.sh, links
# capped with tbf at RATE). The two arms alternate, RUNS times each; prints
# every run and the medians. Needs root (network namespaces).
#
# Usage: bench/relay_restart.sh [BUILD_DIR] [RUNS] [SIZE_MIB] [RATE]
#        (defaults: build 5 256 1gbit)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
runs="${2:-5}"
size_mib="${3:-256}"
rate="${4:-1gbit}"
if [ -z "${WS_TESTBED:-}" ]; then
  "$root/scripts/testbed.sh" check >/dev/null || exit 77  # prints SKIPPED: why
  exec "$root/scripts/testbed.sh" run 2 --rate "$rate" -- "$0" "$build" "$runs" "$size_mib" "$rate"
fi
tb="$WS_TESTBED_SCRIPT"
bed="$WS_TESTBED"
peer="$build/tests/ws_test_peer"
relay="$build/tools/relay/weightsync-relay"
h0="$("$tb" addr "$bed" 0)"
h1="$("$tb" addr "$bed" 1)"
WEIGHTSYNC_SECRET="relay-restart-$$-$RANDOM"
export WEIGHTSYNC_SECRET
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits up to 120 s for a line matching $2 in file $1; prints it.
await() {
  for _ in $(seq 1 1200); do
    if grep -m1 -E "$2" "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "relay_restart: no '$2' in $1:" >&2
  cat "$1" >&2
  return 1
}

# The trainer: one version of SIZE_MIB in 8 tensors, served until stdin closes.
mkfifo "$work/trainer.in"
"$tb" exec "$bed" 0 "$peer" publish --size $((size_mib << 20)) --tensors 8 --versions 1 --bind "$h0" \
  <"$work/trainer.in" >"$work/trainer.out" 2>&1 &
pids+=($!)
exec 7>"$work/trainer.in"
trainer="$(await "$work/trainer.out" '^ADDRESS ' | cut -d' ' -f2)"
await "$work/trainer.out" '^PUBLISHED 1' >/dev/null

# The node's daemon in host 1.
"$tb" exec "$bed" 1 "$relay" --upstream "$trainer" --listen "$h1:0" >"$work/relay.out" 2>&1 &
pids+=($!)
serving="$(await "$work/relay.out" 'serving on ' | sed -E 's/.*serving on ([^ ]+).*/\1/')"
await "$work/relay.out" 'forwarded version 1' >/dev/null

now() { date +%s%N; }
# A fresh engine process in host 1: prints its wall time from start to exit (s).
engine() {
  local address="$1" transport="$2" t0 t1 out
  t0="$(now)"
  out="$("$tb" exec "$bed" 1 "$peer" subscribe --address "$address" --transport "$transport" 2>&1)"
  t1="$(now)"
  case "$out" in *"PULLED 1"*) ;; *) echo "relay_restart: $transport pull failed: $out" >&2; return 1 ;; esac
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }'
}

local_times=()
remote_times=()
for i in $(seq 1 "$runs"); do
  l="$(engine "$serving" shm)"
  r="$(engine "$trainer" tcp)"
  local_times+=("$l")
  remote_times+=("$r")
  echo "run $i: from the local daemon (shm) $l s, from the trainer across the link (tcp, $rate) $r s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ml="$(median "${local_times[@]}")"
mr="$(median "${remote_times[@]}")"
echo "median of $runs: local daemon $ml s, trainer across the link $mr s ($size_mib MiB, $rate);" \
  "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
exec 7>&-
