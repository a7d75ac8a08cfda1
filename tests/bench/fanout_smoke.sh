#!/usr/bin/env bash
# ctest helper: `weightsync-bench fanout` on a small test bed (4 hosts, 200 Mbit/s
# links, 4 MiB, flat and tree2 (host 1 a relay for host 3), the raw stream baseline), then checks its JSON:
# every row measured, time-to-all > 0, the fields the report needs. Exits 77
# ("SKIPPED: <reason>") where scripts/testbed.sh cannot make network namespaces.
# Usage: fanout_smoke.sh BENCH_EXE TESTBED_SCRIPT WORKDIR CMAKE
set -euo pipefail
bench="$1" testbed="$2" work="$3" cmake="${4:-cmake}"
rc=0
out="$("$testbed" check 2>&1)" || rc=$?
if [ "$rc" -ne 0 ]; then
  if [ "$rc" -eq 77 ]; then
    echo "SKIPPED: ${out#*SKIPPED: }"
    exit 77
  fi
  echo "fanout smoke: $testbed check failed ($rc): $out" >&2
  exit 1
fi
rm -rf "$work" && mkdir -p "$work"
timeout 60 "$bench" fanout --subscribers 3 --sizes 4MiB --rate 200mbit --topologies flat,tree2 --runs 1 \
  --baselines stream --testbed-script "$testbed" --out "$work" >"$work/log" 2>&1 || {
  rc=$?
  cat "$work/log"
  if [ "$rc" -eq 77 ]; then exit 77; fi
  echo "fanout smoke: weightsync-bench fanout exited $rc" >&2
  exit 1
}
# 4 MiB through a 200 Mbit/s link takes 0.168 s; host 0's link carries it at least twice.
"$cmake" -DFILE="$work/fanout.json" -DHOSTS=4 "-DROWS=flat;tree2;baseline:stream" -DMIN_SECONDS=0.3 \
  -P "$(dirname "$0")/check_fanout_json.cmake"
test -s "$work/fanout.txt" && test -s "$work/fanout.png"
grep -q "time-to-all" "$work/fanout.txt"
echo "fanout smoke: ok"
