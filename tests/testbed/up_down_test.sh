#!/usr/bin/env bash
# testbed: `up` makes K hosts that reach each other only through the bridge,
# and `down` removes everything (namespaces, links, bridge, processes).
# Usage: up_down_test.sh TESTBED_SH. Exits 77 (SKIPPED) where no bed can be made.
set -euo pipefail
testbed="$1"
rc=0
"$testbed" check >/dev/null || rc=$?
if [ "$rc" -ne 0 ]; then "$testbed" check; exit "$rc"; fi
command -v iperf3 >/dev/null || { echo "SKIPPED: iperf3 is not installed (the TCP exchange uses it)"; exit 77; }

name="tbt-updown-$$"
trap '"$testbed" down "$name" >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
# Connects from host $1 (or the root namespace: "root") to $2:$3 within $4
# seconds (default 3); 0 if it connected.
connects() {
  local from="$1" addr="$2" port="$3" limit="${4:-3}" cmd
  cmd="exec 3<>/dev/tcp/$addr/$port"
  if [ "$from" = root ]; then
    timeout "$limit" bash -c "$cmd" 2>/dev/null
  else
    timeout "$limit" "$testbed" exec "$name" "$from" bash -c "$cmd" 2>/dev/null
  fi
}
# An iperf3 server for one test in host $1 on $2 (an address), port $3.
serve() {
  "$testbed" exec "$name" "$1" timeout 20 iperf3 -s -1 -B "$2" -p "$3" >/dev/null 2>&1 &
  local i
  for i in $(seq 1 50); do
    "$testbed" exec "$name" "$1" bash -c "ss -ltn | grep -q ':$3 '" && return 0
    sleep 0.1
  done
  fail "the iperf3 server in host $1 did not start"
}

out="$("$testbed" up "$name" 3)"
echo "$out"
[ "$(echo "$out" | grep -c '^HOST ')" -eq 3 ] || fail "up printed no 3 HOST lines"
addr=()
for i in 0 1 2; do
  line="$(echo "$out" | sed -n "$((i + 1))p")"
  read -r word index ns address <<<"$line"
  [ "$word $index $ns" = "HOST $i $name-h$i" ] || fail "unexpected line '$line'"
  [ "$("$testbed" addr "$name" "$i")" = "$address" ] || fail "addr $i is not $address"
  addr+=("$address")
  # Each host has its loopback and one link, and routes only to the bed's subnet.
  links="$(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort | xargs)"
  [ "$links" = "eth0 lo" ] || fail "host $i has links '$links', not 'eth0 lo'"
  ip -n "$ns" -o link show lo | grep -q 'UP' || fail "host $i's loopback is down"
  routes="$(ip -n "$ns" -4 route show | awk '{print $1}' | xargs)"
  [ "$routes" = "${address%.*}.0/24" ] || fail "host $i routes '$routes'"
done
up_again=0
"$testbed" up "$name" 2 >/dev/null 2>/tmp/tbt-$$.err || up_again=$?
[ "$up_again" -ne 0 ] && grep -q "down $name" /tmp/tbt-$$.err || fail "a second up of $name did not fail naming down"
rm -f /tmp/tbt-$$.err

# A TCP exchange between two hosts (1 MiB from host 1 to host 0).
serve 0 "${addr[0]}" 5301
"$testbed" exec "$name" 1 timeout 20 iperf3 -c "${addr[0]}" -p 5301 -n 1M >/dev/null || fail "host 1 could not send to host 0"
wait
# The root namespace reaches every host (through the bridge's address).
serve 2 "${addr[2]}" 5302
connects root "${addr[2]}" 5302 || fail "the root namespace cannot reach host 2"
wait
# Loopback is per host: host 1 does not reach host 0's 127.0.0.1.
serve 0 127.0.0.1 5303
if connects 1 127.0.0.1 5303 1; then fail "host 1 reached host 0's loopback"; fi
"$testbed" exec "$name" 0 bash -c 'exec 3<>/dev/tcp/127.0.0.1/5303' || fail "host 0 cannot reach its own loopback"
wait
# Only through the bridge: with host 0's link taken off the bridge, host 1
# no longer reaches it.
bridge="$(ip -d -o link show type bridge | grep "alias wstestbed:$name" | awk -F': ' '{print $2}')"
[ -n "$bridge" ] || fail "no bridge of $name"
link0="$(ip -o link show master "$bridge" | awk -F': ' '{print $2}' | cut -d@ -f1 | sort | head -n 1)"
serve 0 "${addr[0]}" 5304
ip link set dev "$link0" nomaster
if connects 1 "${addr[0]}" 5304 1; then fail "host 1 reached host 0 with host 0 off the bridge"; fi
ip link set dev "$link0" master "$bridge"
connects 1 "${addr[0]}" 5304 || fail "host 1 does not reach host 0 back on the bridge"
wait

# down kills what runs in the hosts and removes everything of the bed.
"$testbed" exec "$name" 2 sleep 60 &
sleeper=$!
for i in $(seq 1 50); do [ -n "$(ip netns pids "$name-h2")" ] && break; sleep 0.1; done
start=$SECONDS
"$testbed" down "$name"
[ $((SECONDS - start)) -le 5 ] || fail "down took more than 5 s"
if kill -0 "$sleeper" 2>/dev/null; then fail "a process in host 2 survived down"; fi
wait "$sleeper" 2>/dev/null || true
if ip netns list | grep -q "^$name-h"; then fail "namespaces of $name are left: $(ip netns list | grep "^$name-h" | xargs)"; fi
if ip link show "$bridge" >/dev/null 2>&1; then fail "the bridge $bridge is left"; fi
if ip -o link show | grep -q "${bridge%br}h"; then fail "links of $name are left: $(ip -o link show | grep "${bridge%br}h")"; fi
if "$testbed" list | grep -q "BED $name "; then fail "list still shows $name"; fi
"$testbed" down "$name" || fail "down of a bed that is not there failed"
echo "testbed up/down: ok"
