#!/usr/bin/env bash
# The SFT-only control of an RL run (issue 33): spend the RL run's time on
# more supervised steps from the same warm start instead, then evaluate it
# as the RL runs are evaluated. It says whether RL earned its gain.
#
# Usage: scripts/sft-control.sh --start SFT_DIR --out DIR (--seconds S | --steps N) [--eval-tasks N]
#   --seconds S: the RL run's wall time; the steps are S over the start's own
#                median seconds per step (its last 100 steps of train_log.jsonl),
#                so the control gets the machine for as long as RL had it.
#   --steps N:   N more steps instead.
#   --eval-tasks N: held-out tasks of each evaluation (default 200, the demo's).
# DIR gets a copy of SFT_DIR continued by zorplex-sft --resume to the start's
# steps + N (the same recipe and data stream, its cosine schedule stretched
# over the longer run), then eval-easy.json and eval-medium.json (200
# held-out tasks each, greedy, as demo.sh evaluates). control.json says
# what was run: the steps, the seconds asked for and the seconds taken.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${WEIGHTSYNC_BUILD_DIR:-$root/build}"
start="" out="" seconds="" steps="" eval_tasks=200
while [ $# -gt 0 ]; do
  case "$1" in
    --start) start="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --eval-tasks) eval_tasks="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "sft-control: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$start" ] && [ -n "$out" ] || { echo "sft-control: --start and --out are required (see --help)" >&2; exit 2; }
[ -n "$seconds$steps" ] && [ -z "$seconds" -o -z "$steps" ] ||
  { echo "sft-control: give one of --seconds and --steps (see --help)" >&2; exit 2; }
[ -f "$start/policy.safetensors" ] && [ -f "$start/train_log.jsonl" ] ||
  { echo "sft-control: $start is not a zorplex-sft checkpoint (policy.safetensors, train_log.jsonl)" >&2; exit 2; }
for tool in zorplex-sft zorplex-eval; do
  [ -x "$build/rl/$tool" ] || { echo "sft-control: $build/rl/$tool is missing; run scripts/build.sh --target $tool" >&2; exit 2; }
done

start_steps=$(tail -n 1 "$start/train_log.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
[ -n "$start_steps" ] || { echo "sft-control: cannot read the last step of $start/train_log.jsonl" >&2; exit 2; }
if [ -n "$seconds" ]; then
  step_seconds=$(tail -n 100 "$start/train_log.jsonl" | sed -n 's/.*"seconds":\([0-9.e-]*\).*/\1/p' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  steps=$(awk -v s="$seconds" -v p="$step_seconds" 'BEGIN { n = int(s / p + 0.5); print (n < 1) ? 1 : n }')
  echo "sft-control: $seconds s at the start's median $step_seconds s a step: $steps more SFT steps"
fi
rm -rf "$out"
mkdir -p "$out"
cp "$start/policy.safetensors" "$start/optimizer.safetensors" "$start/train_log.jsonl" "$out/"
for extra in "$start"/*.json; do [ -f "$extra" ] && cp "$extra" "$out/"; done
began=$(date +%s.%N)
"$build/rl/zorplex-sft" --out "$out" --resume --steps $((start_steps + steps)) --log-every 100
took=$(awk -v a="$began" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
for difficulty in easy medium; do
  "$build/rl/zorplex-eval" --checkpoint "$out" --batch 64 --count "$eval_tasks" --difficulty "$difficulty" \
    --json "$out/eval-$difficulty.json" >"$out/eval-$difficulty.log" 2>&1
done
printf '{"start": "%s", "start_steps": %s, "more_steps": %s, "seconds_asked": %s, "seconds_taken": %s}\n' \
  "$start" "$start_steps" "$steps" "${seconds:-null}" "$took" >"$out/control.json"
for difficulty in easy medium; do
  accuracy=$(sed -n 's/.*"accuracy": \([0-9.]*\).*/\1/p' "$out/eval-$difficulty.json" | head -n 1)
  awk -v d="$difficulty" -v a="$accuracy" -v n="$steps" -v t="$took" -v k="$eval_tasks" 'BEGIN {
    printf "sft-control: %d more SFT steps (%.0f s): %.1f%% %s (%d held-out tasks, greedy)\n", n, t, 100 * a, d, k }'
done
