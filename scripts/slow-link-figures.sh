#!/usr/bin/env bash
# The issue-18 figure "seconds per sync across a capped link" (docs/perf/slow_link_sync.md).
# Per rate: a 2-host test bed (scripts/testbed.sh run 2 --rate RATE), weightsync-slowlink trainer in
# host 0 and generator in host 1, N syncs of the recorded RL versions, the four paths interleaved per
# version (fp32 full pull, bf16 full pull, bf16 delta pull, checkpoint file). Then one combined table.
#
# Usage: scripts/slow-link-figures.sh [--rates "100mbit 1gbit"] [--modes "plain encrypted"] [--count N]
#          [--out DIR] [--versions DIR | --synthetic] [--burst BYTES] [--timeout S] [--exe PATH]
#   --rates     tc rates, one bed each, in this order; "none" is an uncapped bed (default "100mbit 1gbit")
#   --modes     per rate, one bed per mode: "plain", and "encrypted" (WEIGHTSYNC_ENCRYPTION=1 on both
#               sides: every weightsync connection encrypted; the checkpoint file is copied as is)
#               (default "plain")
#   --count     syncs per rate (versions 2..N+1; version 1 is the warm-up) (default 20)
#   --out       results folder: RATE/results.json, RATE/*.log, summary.md (default $BUILD/slow-link)
#   --versions  packed float32 versions v0001.bin.. (default /tmp/i18/versions)
#   --synthetic random-walk versions instead (892,288 elements)
#   --burst     tbf bucket in bytes (default: testbed.sh's, 4 ms at the rate and at least 128 KiB)
#   --timeout   bound of every wait inside the tool, seconds (default 120)
#   --exe       weightsync-slowlink (default $WEIGHTSYNC_BUILD_DIR/bench/weightsync-slowlink, build/ if unset)
# Needs root (network namespaces, tc). Each bed is removed on every exit path (testbed.sh run).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
rates="100mbit 1gbit"
modes="plain"
count=20
out="$build/slow-link"
versions=/tmp/i18/versions
synthetic=0
burst=""
timeout_s=120
exe="$build/bench/weightsync-slowlink"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "slow-link-figures: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --rates) [ $# -ge 2 ] || die "--rates needs a value"; rates="$2"; shift 2 ;;
    --modes) [ $# -ge 2 ] || die "--modes needs a value"; modes="$2"; shift 2 ;;
    --count) [ $# -ge 2 ] || die "--count needs a value"; count="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; out="$2"; shift 2 ;;
    --versions) [ $# -ge 2 ] || die "--versions needs a value"; versions="$2"; shift 2 ;;
    --synthetic) synthetic=1; shift ;;
    --burst) [ $# -ge 2 ] || die "--burst needs a value"; burst="$2"; shift 2 ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs a value"; timeout_s="$2"; shift 2 ;;
    --exe) [ $# -ge 2 ] || die "--exe needs a value"; exe="$2"; shift 2 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[[ "$count" =~ ^[1-9][0-9]*$ ]] || die "--count must be a positive integer"
[ -x "$exe" ] || die "$exe not found: build it (cmake --build \$BUILD --target weightsync-slowlink) or pass --exe"
testbed="$root/scripts/testbed.sh"
"$testbed" check >/dev/null || die "scripts/testbed.sh check failed: this needs root, ip and tc"
if [ "$synthetic" -eq 1 ]; then
  source_args=(--synthetic)
else
  last=$(printf '%s/v%04d.bin' "$versions" $((count + 1)))
  [ -f "$last" ] || die "$last not found: $count syncs need versions 1..$((count + 1)) in $versions (or --synthetic)"
  source_args=(--versions "$versions")
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
# A per-run secret: the hosts are not loopback.
WEIGHTSYNC_SECRET="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
export WEIGHTSYNC_SECRET
# Bound of one bed: every wait inside is bounded by --timeout; this is the backstop.
bed_limit=$((300 + count * 30))

results=()
for mode in $modes; do
  case "$mode" in
    plain|encrypted) ;;
    *) die "--modes: '$mode' is not plain or encrypted" ;;
  esac
done
for rate in $rates; do
for mode in $modes; do
  label="$rate"
  bed_args=()
  if [ "$mode" = encrypted ]; then
    export WEIGHTSYNC_ENCRYPTION=1
  else
    export WEIGHTSYNC_ENCRYPTION=0
  fi
  if [ "$rate" = none ]; then
    label=uncapped
  else
    bed_args=(--rate "$rate")
    [ -z "$burst" ] || bed_args+=(--burst "$burst")
  fi
  [ "$mode" = plain ] || label="$label-$mode"
  dir="$out/$label"
  rm -rf "$dir" && mkdir -p "$dir"
  echo "== $label: $count syncs, trainer in host 0, generator in host 1 (log: $dir/*.log)"
  export SL_EXE="$exe" SL_DIR="$dir" SL_COUNT="$count" SL_LABEL="$label" SL_TIMEOUT="$timeout_s"
  export SL_SOURCE="${source_args[*]}"
  rc=0
  # shellcheck disable=SC2016  # expanded by the inner bash
  timeout "$bed_limit" "$testbed" run 2 "${bed_args[@]}" -- bash -c '
    set -uo pipefail
    h0=$("$WS_TESTBED_SCRIPT" addr "$WS_TESTBED" 0)
    # shellcheck disable=SC2086  # SL_SOURCE is a list of arguments
    "$WS_TESTBED_SCRIPT" exec "$WS_TESTBED" 0 "$SL_EXE" trainer $SL_SOURCE --bind "$h0" --count "$SL_COUNT" \
      --dir "$SL_DIR/sync" --timeout "$SL_TIMEOUT" >"$SL_DIR/trainer.log" 2>&1 &
    trainer=$!
    grc=0
    "$WS_TESTBED_SCRIPT" exec "$WS_TESTBED" 1 "$SL_EXE" generator --dir "$SL_DIR/sync" --out "$SL_DIR/results.json" \
      --label "$SL_LABEL" --timeout "$SL_TIMEOUT" 2>&1 | tee "$SL_DIR/generator.log" || grc=$?
    trc=0
    wait "$trainer" || trc=$?
    if [ "$grc" -ne 0 ] || [ "$trc" -ne 0 ]; then
      echo "trainer (exit $trc):"; cat "$SL_DIR/trainer.log"
      echo "generator exited $grc, trainer $trc" >&2
      exit 1
    fi
    tail -n 1 "$SL_DIR/trainer.log"
  ' || rc=$?
  [ "$rc" -eq 0 ] || die "$label: the run failed (exit $rc; logs in $dir)"
  results+=("$dir/results.json")
done
done

echo
echo "== seconds per sync of the RL policy (892,288 params): median of $count syncs, min-max"
"$exe" summarize "${results[@]}" | tee "$out/summary.md"
echo "results: $out (summary.md, */results.json)"
