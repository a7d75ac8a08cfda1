#!/usr/bin/env bash
# ctest helper: weightsync-slowlink trainer and generator on loopback (no test bed), 3 syncs of
# synthetic random-walk versions (100,000 elements), then checks the generator's JSON
# (check_json.cmake): four paths, every byte exact, every bf16 delta pull a delta.
# Usage: smoke.sh SLOWLINK_EXE WORKDIR [CMAKE]
set -euo pipefail
exe="$1" work="$2" cmake="${3:-cmake}"
rm -rf "$work" && mkdir -p "$work"
export WEIGHTSYNC_SECRET="${WEIGHTSYNC_SECRET:-slowlink-smoke-secret-0123456789abcdef}"
"$exe" --help >/dev/null
"$exe" trainer --synthetic --elements 100000 --count 3 --bind 127.0.0.1 --dir "$work/sync" --timeout 30 \
  >"$work/trainer.log" 2>&1 &
trainer=$!
rc=0
timeout 90 "$exe" generator --dir "$work/sync" --out "$work/results.json" --label loopback --timeout 30 \
  >"$work/generator.log" 2>&1 || rc=$?
trc=0
wait "$trainer" || trc=$?
if [ "$rc" -ne 0 ] || [ "$trc" -ne 0 ]; then
  cat "$work/trainer.log" "$work/generator.log"
  echo "slowlink smoke: generator exited $rc, trainer $trc" >&2
  exit 1
fi
cat "$work/generator.log"
"$cmake" -DFILE="$work/results.json" -DSYNCS=3 -P "$(dirname "$0")/check_json.cmake"
echo "slowlink smoke: ok"
