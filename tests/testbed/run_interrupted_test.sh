#!/usr/bin/env bash
# testbed: a `run` interrupted by SIGINT leaves nothing behind (namespaces,
# bridge, the command it ran), within 10 s, and exits 130.
# Usage: run_interrupted_test.sh TESTBED_SH. Exits 77 (SKIPPED) where no bed can be made.
set -euo pipefail
testbed="$1"
rc=0
"$testbed" check >/dev/null || rc=$?
if [ "$rc" -ne 0 ]; then "$testbed" check; exit "$rc"; fi
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
marker="tbt-sigint-$$-$RANDOM"  # names the sleep, to find it afterwards
# Job control on: the run gets its own process group and SIGINT is not ignored
# in it (bash ignores SIGINT in background jobs otherwise, and a shell cannot
# trap a signal that was ignored when it started).
set -m
"$testbed" run 2 -- bash -c "exec -a $marker sleep 30" &
runner=$!
set +m
# If this test fails half-way, remove what the runner made.
cleanup() {
  local n p
  kill -KILL "$runner" 2>/dev/null || true
  for p in $(pgrep -f "^$marker"); do kill -KILL "$p" 2>/dev/null || true; done
  for n in $(ip netns list | awk '{print $1}' | sed -n "s/^\(wstb-$runner-[0-9]*\)-h[0-9]*$/\1/p" | sort -u); do
    "$testbed" down "$n" || true
  done
}
trap cleanup EXIT
bed=""
for _ in $(seq 1 100); do
  bed="$(ip netns list | awk '{print $1}' | sed -n "s/^\(wstb-$runner-[0-9]*\)-h1$/\1/p")"
  [ -n "$bed" ] && pgrep -f "^$marker" >/dev/null && break
  kill -0 "$runner" 2>/dev/null || fail "testbed.sh run exited early"
  sleep 0.1
done
[ -n "$bed" ] || fail "the bed of the run did not appear within 10 s"
pgrep -f "^$marker" >/dev/null || fail "the command of the run did not start within 10 s"
bridge="$(ip -d -o link show type bridge | grep "alias wstestbed:$bed" | awk -F': ' '{print $2}')"
[ -n "$bridge" ] || fail "no bridge of $bed"
echo "run $runner made bed $bed (bridge $bridge); sending SIGINT"
start=$(date +%s%N)
kill -INT "$runner"
code=""
for _ in $(seq 1 100); do
  if ! kill -0 "$runner" 2>/dev/null; then
    code=0
    wait "$runner" || code=$?
    break
  fi
  sleep 0.1
done
[ -n "$code" ] || fail "testbed.sh run still runs 10 s after SIGINT"
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "run exited $code after ${elapsed_ms} ms"
[ "$code" -eq 130 ] || fail "run exited $code after SIGINT, not 130"
if ip netns list | grep -q "^$bed-h"; then fail "namespaces left: $(ip netns list | grep "^$bed-h" | xargs)"; fi
if ip link show "$bridge" >/dev/null 2>&1; then fail "bridge $bridge left"; fi
if ip -o link show | grep -q "${bridge%br}h"; then fail "links left: $(ip -o link show | grep "${bridge%br}h")"; fi
if pgrep -f "^$marker" >/dev/null; then fail "the command of the run survived: $(pgrep -af "^$marker")"; fi
echo "testbed run interrupted: ok"
