#!/usr/bin/env bash
# The figures of docs/results.md, measured on this machine in one run:
#   1. the untrained policy (zorplex-sft --steps 0), evaluated as a baseline;
#   2. the SFT warm start with the default budget, timed;
#   3. greedy evaluation on 200 held-out compositional-easy tasks (seed 42),
#      3 runs at batch 16 and 3 runs at batch 1 (generation tokens/s).
# Usage: scripts/policy-figures.sh [OUTDIR]   (default runs/figures; needs a built tree)
# Prints a summary with medians; every JSON and log stays in OUTDIR.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,8p' "$0"
  exit 0
fi
root=$(cd "$(dirname "$0")/.." && pwd)
bin="${WEIGHTSYNC_BUILD_DIR:-$root/build}/rl"
out="${1:-runs/figures}"
for tool in zorplex-sft zorplex-eval; do
  [ -x "$bin/$tool" ] || { echo "policy-figures: $bin/$tool is missing; run ./scripts/test.sh or ./scripts/demo.sh first" >&2; exit 2; }
done
rm -rf "$out" && mkdir -p "$out"
field() { grep -o "\"$2\": [0-9.e+-]*" "$1" | head -1 | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "== untrained baseline"
"$bin/zorplex-sft" --out "$out/untrained" --steps 0 >"$out/untrained.log"
"$bin/zorplex-eval" --checkpoint "$out/untrained" --json "$out/eval_untrained.json" >"$out/eval_untrained.log" 2>&1

echo "== SFT, default budget"
start=$(date +%s.%N)
"$bin/zorplex-sft" --out "$out/sft" --log-every 100 | tee "$out/sft.log"
end=$(date +%s.%N)
sft_seconds=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')

for batch in 16 1; do
  for run in 1 2 3; do
    echo "== eval batch $batch, run $run"
    "$bin/zorplex-eval" --checkpoint "$out/sft" --batch "$batch" --json "$out/eval_b${batch}_r${run}.json" \
      >"$out/eval_b${batch}_r${run}.log" 2>&1
  done
done

echo
echo "SUMMARY (this machine: $(nproc) CPUs, $(date -u +%F))"
echo "untrained: accuracy $(field "$out/eval_untrained.json" accuracy), format_rate $(field "$out/eval_untrained.json" format_rate)"
echo "SFT wall time: ${sft_seconds} s ($(grep -o 'done: .*' "$out/sft.log"))"
echo "SFT policy (batch 16, run 1):"
grep -v " episodes$" "$out/eval_b16_r1.log" | sed -n '/  tasks/,/wall time/p'
for batch in 16 1; do
  tps=$(for run in 1 2 3; do field "$out/eval_b${batch}_r${run}.json" tokens_per_second; done | median)
  echo "generation tokens/s at batch $batch: median $(printf "%.0f" "$tps") over 3 runs ($(for run in 1 2 3; do printf '%.0f ' "$(field "$out/eval_b${batch}_r${run}.json" tokens_per_second)"; done))"
done
