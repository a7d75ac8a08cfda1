#!/usr/bin/env bash
# Measures weightsync's TCP pull bandwidth and the loopback limit (iperf3, one
# stream) in the same run, alternating them, and prints medians.
# Usage: scripts/tcp-vs-iperf3.sh [--rounds N] [--size-mib N]
# The stand-in until weightsync-bench (issue #4) does this for every transport.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
rounds=5 size_mib=256
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --size-mib) size_mib="$2"; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
"$root/scripts/install-deps.sh" iperf3 python3
"$root/scripts/build.sh" --target ws-example-publisher ws-example-subscriber >/dev/null

work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
iperf3 -s -B 127.0.0.1 -p 5299 >/dev/null 2>&1 &
pids+=($!)
sleep 0.5

median() { python3 -c 'import sys,statistics; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.2f}")' "$@"; }
ws=() ip=()
for r in $(seq 1 "$rounds"); do
  # iperf3: one stream, 3 s, loopback.
  g=$(iperf3 -c 127.0.0.1 -p 5299 -t 3 -J | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"]/8e9))')
  ip+=("$g")
  # weightsync: 4 versions; the median of versions 2..4 (the first pull faults its pages in).
  rm -f "$work/address"
  "$build/examples/ws-example-publisher" --size-mib "$size_mib" --versions 4 --interval-ms 1200 --linger-s 30 \
    --address-file "$work/address" >/dev/null &
  pub=$!
  for _ in $(seq 1 200); do [ -s "$work/address" ] && break; sleep 0.05; done
  out=$("$build/examples/ws-example-subscriber" "$(cat "$work/address")" --versions 4 --contiguous)
  kill "$pub"; wait "$pub" 2>/dev/null || true
  w=$(echo "$out" | grep -o '([0-9]* bytes in [0-9.]* s, [0-9.]* GB/s)' | tail -n +2 | sed 's/.*, \([0-9.]*\) GB\/s)/\1/' | xargs -n1 | sort -n | sed -n 2p)
  ws+=("$w")
  echo "round $r: weightsync tcp ${w} GB/s, iperf3 ${g} GB/s"
done
mw=$(median "${ws[@]}") mi=$(median "${ip[@]}")
echo "median over $rounds rounds ($size_mib MiB pulls, one reader; GB = 1e9 bytes): weightsync tcp $mw GB/s, iperf3 one stream $mi GB/s, ratio $(python3 -c "print(f'{$mw/$mi:.2f}')")"
