#!/usr/bin/env bash
# The RL figures of docs/perf/pause.md ("In the RL loop"): async runs at the
# demo's settings with in-flight installs (generator --in-flight-updates on)
# and with foreground pulls (off), seed by seed in ABBA order, then one
# rl-report table per pair and the timeline of seed 1's pair.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/inflight-figures.sh [--out DIR] [--seeds N] [--steps N] [--start SFT_DIR]

For seeds 1..N (default 3), runs scripts/rl-run.sh --mode async at the demo's settings
(2 generators, compositional:easy,compositional:medium, --carry-candidates 4, periodic
evaluation every 10 steps) twice: --in-flight-updates on and off, the order alternating
(1 on, 1 off, 2 off, 2 on, 3 on, ...), so drift on a shared machine hits both alike.
About 2.5 minutes a run on 2 vCPUs. Then it prints each pair's rl-report table
(trajectories per second, generation blocked per update: median, p99, max; rounds that
ran through an install) and writes DIR/plots/timeline.png for seed 1 (off above on).

  --out DIR       where the runs go (default build/inflight)
  --seeds N       seeds per mode (default 3)
  --steps N       trainer steps per run (default 30, the demo's)
  --start DIR     the SFT warm start (default: the demo's cache,
                  ~/.cache/weightsync/sft-v3-1200; scripts/demo.sh makes it)
  --help          this text
Build first: scripts/build.sh --target trainer generator rl-report
Keep the machine otherwise quiet: the figures are wall-clock rates.
USAGE
}

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
out="$build/inflight" seeds=3 steps=30
start="${WEIGHTSYNC_CACHE_DIR:-$HOME/.cache/weightsync}/sft-v3-1200"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --start) start="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "inflight-figures: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$start/policy.safetensors" ] ||
  { echo "inflight-figures: no warm start in $start (run scripts/demo.sh once, or pass --start)" >&2; exit 2; }
for tool in bin/trainer bin/generator rl/rl-report; do
  [ -x "$build/$tool" ] || { echo "inflight-figures: $build/$tool is missing; run scripts/build.sh --target trainer generator rl-report" >&2; exit 2; }
done
mkdir -p "$out"
. "$root/scripts/run-secret.sh"
ws_run_secret "$out" inflight

for seed in $(seq 1 "$seeds"); do
  if [ $((seed % 2)) -eq 1 ]; then order="on off"; else order="off on"; fi
  for mode in $order; do
    dir="$out/seed$seed-$mode"
    rm -rf "$dir"
    echo "inflight-figures: $(date +%T) seed $seed, in-flight updates $mode (load $(cut -d' ' -f1 /proc/loadavg))"
    "$root/scripts/rl-run.sh" --start "$start" --out "$dir" --mode async --steps "$steps" --generators 2 \
      --task compositional:easy,compositional:medium --carry-candidates 4 --seed "$seed" \
      --in-flight-updates "$mode" -- --eval-every 10 --eval-tasks 50 >"$dir.console" 2>&1 ||
      { echo "inflight-figures: the run failed; see $dir.console and $dir/*.log" >&2; exit 1; }
  done
  "$build/rl/rl-report" --run off="$out/seed$seed-off" --run on="$out/seed$seed-on" \
    --out "$out/seed$seed-report.json" --plots "$out/seed$seed-plots"
  echo "inflight-figures: seed $seed"
  "$build/rl/rl-report" --summarize "$out/seed$seed-report.json"
done
mkdir -p "$out/plots"
cp "$out"/seed1-plots/timeline-*.dat "$out/plots/"
if command -v gnuplot >/dev/null; then
  gnuplot -e "dir='$out/plots'; runs='off on'" "$root/scripts/rl-plots.gp"
  echo "inflight-figures: $out/plots/timeline.png (pick a span with -e \"from=S; window=W\")"
fi
