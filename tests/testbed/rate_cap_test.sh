#!/usr/bin/env bash
# testbed: a rate cap holds. With `up --rate 200mbit`, iperf3 measures 0.7..1.05
# of the cap (TCP goodput: about 0.95, the rest is headers) between two hosts,
# and into and out of one host from the root namespace (each direction of one
# link on its own); without a cap the same link carries well over twice as much.
# Usage: rate_cap_test.sh TESTBED_SH. Exits 77 (SKIPPED) where no bed can be
# made or iperf3/tc are missing.
set -euo pipefail
testbed="$1"
rc=0
"$testbed" check >/dev/null || rc=$?
if [ "$rc" -ne 0 ]; then "$testbed" check; exit "$rc"; fi
command -v iperf3 >/dev/null || { echo "SKIPPED: iperf3 is not installed"; exit 77; }
command -v tc >/dev/null || { echo "SKIPPED: tc (iproute2) is not installed"; exit 77; }
cap_mbit=200
name="tbt-rate-$$"
trap '"$testbed" down "$name" >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

# Mbit/s received over $2 seconds by an iperf3 client in host $1 ("root": the
# root namespace, through the bridge's address) from a server in host 0;
# $3 = -R: the other way.
measure() {
  local from="$1" args=(-c "" -p 5311 -t "$2" -f m) a0 out
  a0="$("$testbed" addr "$name" 0)"
  args[1]="$a0"
  if [ "${3:-}" = -R ]; then args+=(-R); fi
  "$testbed" exec "$name" 0 timeout 30 iperf3 -s -1 -B "$a0" -p 5311 >/dev/null 2>&1 &
  for _ in $(seq 1 50); do
    "$testbed" exec "$name" 0 bash -c "ss -ltn | grep -q ':5311 '" && break
    sleep 0.1
  done
  if [ "$from" = root ]; then
    out="$(timeout 30 iperf3 "${args[@]}")" || fail "iperf3 failed: $out"
  else
    out="$("$testbed" exec "$name" "$from" timeout 30 iperf3 "${args[@]}")" || fail "iperf3 failed: $out"
  fi
  wait
  echo "$out" | awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Mbits/sec") v = $i } END { print v }'
}
within() {  # within VALUE LOW HIGH (Mbit/s, fractions of the cap)
  awk -v v="$1" -v c="$cap_mbit" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo * c && v <= hi * c) }'
}

"$testbed" up "$name" 2 --rate "${cap_mbit}mbit" >/dev/null
# Host to host (host 1's uplink, host 0's downlink), then each direction of
# host 0's link alone (from and to the root namespace, which has no cap).
between="$(measure 1 2)"
into="$(measure root 2)"
out_of="$(measure root 2 -R)"
echo "capped at ${cap_mbit} Mbit/s: host 1 -> host 0 ${between}, root -> host 0 ${into}, host 0 -> root ${out_of} Mbit/s"
within "$between" 0.7 1.05 || fail "host 1 -> host 0 at ${between} Mbit/s, not within [0.7, 1.05] x ${cap_mbit}"
within "$into" 0.7 1.05 || fail "root -> host 0 at ${into} Mbit/s, not within [0.7, 1.05] x ${cap_mbit}"
within "$out_of" 0.7 1.05 || fail "host 0 -> root at ${out_of} Mbit/s, not within [0.7, 1.05] x ${cap_mbit}"
"$testbed" down "$name"

"$testbed" up "$name" 2 >/dev/null
free_rate="$(measure 1 1)"
echo "uncapped: host 1 -> host 0 ${free_rate} Mbit/s"
within "$free_rate" 2 1000000 || fail "uncapped only ${free_rate} Mbit/s: the cap test above proves nothing"
echo "testbed rate cap: ok"
