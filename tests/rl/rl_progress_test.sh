#!/usr/bin/env bash
# scripts/rl-progress.sh, the filter scripts/demo.sh shows RL runs through: each trainer step line
# must come out while the run is still writing (not when the pipe closes), with the time left,
# other trainer lines pass through, and the generators' chatter is dropped.
# Usage: rl_progress_test.sh PATH-TO-rl-progress.sh
set -euo pipefail
filter="$1"
dir="$(mktemp -d)"
trap 'exec 3>&- 2>/dev/null; rm -rf "$dir"' EXIT
mkfifo "$dir/in"
"$filter" run < "$dir/in" > "$dir/out" &
exec 3> "$dir/in"

# Waits (at most 5 s) for a line with $1 in the output, the writer still open.
shows() {
  for _ in $(seq 1 50); do
    grep -qF -- "$1" "$dir/out" && return 0
    sleep 0.1
  done
  echo "FAIL: '$1' did not appear while the run was going; output so far:"
  cat "$dir/out"
  exit 1
}

echo "generator 1: version 2 pulled in 0.004 s" >&3
echo "trainer: step   1/4  version 2  groups 8  reward 0.500  correct 0.40  loss +0.0100  staleness 0.0/0  wait 1.0s train 2.0s  elapsed 10s" >&3
shows "run: step 1/4  reward 0.500  correct 0.40  10s elapsed, about 30s left"
echo "trainer: refusing trajectories: generator 1 sampled at temperature 0.7 but the trainer trains at 1" >&3
shows "run: trainer: refusing trajectories: generator 1 sampled at temperature 0.7"
echo "trainer: step   3/4  version 4  groups 8  reward 0.750  correct 0.70 (all 0.81)  loss -0.0200  staleness 0.5/1  wait 1.0s train 2.0s  elapsed 95s" >&3
shows "run: step 3/4  reward 0.750  correct 0.70 (all 0.81)  1m35s elapsed, about 31s left"
echo "trainer: done after 4 steps (version 5): 64 trajectories trained on (of 80 sampled), 80 received, 120 s" >&3
exec 3>&-
wait
grep -qF "run: trainer: done after 4 steps" "$dir/out" || { echo "FAIL: the final line is missing"; cat "$dir/out"; exit 1; }
if grep -q "generator 1: version" "$dir/out"; then echo "FAIL: generator chatter passed"; cat "$dir/out"; exit 1; fi
[ "$(wc -l < "$dir/out")" -eq 4 ] || { echo "FAIL: expected 4 lines"; cat "$dir/out"; exit 1; }
echo "rl-progress: every line shown as it arrived"
