#!/usr/bin/env bash
# ctest helper: --metrics-address on the trainer and the generators, scraped
# over HTTP while the RL loop runs (real processes, loopback):
#  - the trainer's publisher: versions published, and the slowest reader;
#  - generator 0 (in-flight updates, and a relay for generator 1): its
#    StagedUpdates' installs, background pulls and blocked time under
#    source="generator-inflight", its relay's forwarding under "relay";
#  - generator 1 (--in-flight-updates off, pulling from generator 0's relay): its
#    foreground pulls and the time generation stood still for them under
#    source="generator";
#  - each series once per scrape (no source exposed twice);
#  - a bad --metrics-address is refused at start with the flag named.
# Usage: rl_loop_metrics.sh BUILD_DIR WORKDIR
set -euo pipefail
build="$1" work="$2"
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

# metrics_url LOG: the address a process printed ("...: metrics on http://H:P/metrics"), waiting up to 60 s.
metrics_at() {
  for _ in $(seq 1 600); do
    at=$(sed -n 's|.*: metrics on http://\([0-9.]*:[0-9]*\)/metrics$|\1|p' "$1" | head -n 1)
    [ -n "$at" ] && { echo "$at"; return 0; }
    sleep 0.1
  done
  fail "$1 never said where its metrics are: $(tail -n 3 "$1")"
}
# scrape HOST:PORT: the body of GET /metrics (bash's /dev/tcp, bounded by timeout).
scrape() {
  timeout 10 bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1#*:}"; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' _ "$1" |
    tr -d '\r' | sed '1,/^$/d'
}
# value FILE SERIES: the sample's value (SERIES is the name with its labels, exactly).
value() { awk -v s="$2" '$1 == s { print $2 }' "$1"; }
at_least() {  # at_least FILE SERIES MIN
  local v
  v=$(value "$1" "$2")
  [ -n "$v" ] || fail "$1: no series $2"
  awk -v v="$v" -v m="$3" 'BEGIN { exit !(v + 0 >= m + 0) }' || fail "$1: $2 is $v, expected at least $3"
}
unique_series() {  # every sample line once
  local dup
  dup=$(grep -v '^#' "$1" | awk '{ print $1 }' | sort | uniq -d | head -n 3)
  [ -z "$dup" ] || fail "$1: series exposed twice: $dup"
}

"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 2 >"$work/sft.log"

# A bad address: refused before anything runs, the flag named.
set +e
"$build/bin/trainer" --start "$work/start" --out "$work/bad" --mode async --steps 1 --threads 1 \
  --metrics-address 300.1.2.3:9 >"$work/bad.log" 2>&1
bad_rc=$?
set -e
[ "$bad_rc" -ne 0 ] && grep -q -- "--metrics-address 300.1.2.3:9" "$work/bad.log" ||
  fail "a bad --metrics-address: rc $bad_rc, $(tail -n 2 "$work/bad.log")"

"$build/bin/trainer" --start "$work/start" --out "$work/run" --mode async --batch-groups 2 --keep-zero-variance \
  --idle-timeout 60 --threads 1 --steps 200 --address-file "$work/address.json" --metrics-address 127.0.0.1:0 \
  >"$work/trainer.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do [ -s "$work/address.json" ] && break; sleep 0.1; done
[ -s "$work/address.json" ] || fail "the trainer wrote no address file: $(tail -n 3 "$work/trainer.log")"
weights=$(sed -n 's/.*"weights":"\([^"]*\)".*/\1/p' "$work/address.json")
trajectories=$(sed -n 's/.*"trajectories":"\([^"]*\)".*/\1/p' "$work/address.json")
common=(--trajectories "$trajectories" --checkpoint "$work/start" --prompts 1 --group-size 3 --trainer-timeout 60
        --threads 1 --dynamic-filter off --mode async --metrics-address 127.0.0.1:0)
"$build/bin/generator" --trainer "$weights" --id 0 "${common[@]}" --relay 127.0.0.1:0 \
  --relay-address-file "$work/relay.address" >"$work/generator-0.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do [ -s "$work/relay.address" ] && break; sleep 0.1; done
[ -s "$work/relay.address" ] || fail "generator 0 wrote no relay address: $(tail -n 3 "$work/generator-0.log")"
"$build/bin/generator" --trainer "$(cat "$work/relay.address")" --id 1 "${common[@]}" --in-flight-updates off \
  >"$work/generator-1.log" 2>&1 &
pids+=($!)

trainer_at=$(metrics_at "$work/trainer.log")
g0_at=$(metrics_at "$work/generator-0.log")
g1_at=$(metrics_at "$work/generator-1.log")
for _ in $(seq 1 900); do
  [ "$(grep -c '"event":"step"' "$work/run/trainer.jsonl" 2>/dev/null || true)" -ge 4 ] && break
  sleep 0.1
done
[ "$(grep -c '"event":"step"' "$work/run/trainer.jsonl" 2>/dev/null || true)" -ge 4 ] ||
  fail "the trainer did not reach 4 steps in 90 s: $(tail -n 3 "$work/trainer.log")"
# Generator 1 pulls through the relay: wait (bounded) until it has pulled twice.
for _ in $(seq 1 300); do
  scrape "$g1_at" >"$work/generator-1.prom"
  n=$(grep '^weightsync_subscriber_pulls_total{source="generator"' "$work/generator-1.prom" | awk '{ print $2 }')
  [ "${n:-0}" -ge 2 ] && break
  sleep 0.2
done
scrape "$trainer_at" >"$work/trainer.prom"
scrape "$g0_at" >"$work/generator-0.prom"
for f in trainer generator-0 generator-1; do unique_series "$work/$f.prom"; done

at_least "$work/trainer.prom" 'weightsync_publisher_latest_version{source="trainer"}' 4
at_least "$work/trainer.prom" 'weightsync_publisher_versions_published_total{source="trainer"}' 4
grep -q '^weightsync_publisher_slowest_reader_seconds{source="trainer"}' "$work/trainer.prom" ||
  fail "trainer: no slowest reader"
at_least "$work/generator-0.prom" 'weightsync_staged_installs_total{source="generator-inflight"}' 1
at_least "$work/generator-0.prom" 'weightsync_generation_blocks_total{source="generator-inflight"}' 1
grep -q '^weightsync_generation_blocked_seconds_total{source="generator-inflight"}' "$work/generator-0.prom" ||
  fail "generator 0: no blocked time of its in-flight installs"
grep -q '^weightsync_subscriber_pull_duration_seconds_count{source="generator-inflight",transport="' \
  "$work/generator-0.prom" || fail "generator 0: no pull latency of its background pulls"
at_least "$work/generator-0.prom" 'weightsync_relay_versions_forwarded_total{source="relay"}' 2
at_least "$work/generator-0.prom" 'weightsync_relay_upstream_connected{source="relay"}' 1
at_least "$work/generator-1.prom" 'weightsync_subscriber_pulls_total{source="generator"}' 2
at_least "$work/generator-1.prom" 'weightsync_generation_blocked_seconds_total{source="generator"}' 0.000001
! grep -q 'source="generator-inflight"' "$work/generator-1.prom" || fail "generator 1 (--in-flight-updates off) shows in-flight series"
echo "rl loop metrics: ok"
