#!/usr/bin/env bash
# rl-report's issue-33 targets from made-up run folders and evaluation files
# whose verdicts are known by hand:
#   start: medium 70.0% (error 30%), easy 96.0%; SFT-only control medium 78.0%.
#   sync, 3 seeds: medium 92/95/90 (mean 92.33: meets 90%; errors 8/5/10%, each
#     at most 15%: halved in every seed), easy 97/96/98 (mean 97: no lower),
#     lead 92.33 - 78 = +14.3 (meets +10). All met.
#   async, 3 seeds: medium 95/95/84 (mean 91.33: meets 90%; seed 2's error 16%
#     > 15%: NOT halved), easy 95/96/96 (mean 95.67 < 96: LOWER), lead +13.3.
#   rloo, 1 seed: medium 86 (MISSES 90%), no easy evaluation (MISSES), lead +8.0
#     (MISSES +10).
# Usage: rl_report_targets_test.sh RL_REPORT WORK_DIR
set -euo pipefail
report_tool="$1" work="$2"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

eval_file() {  # eval_file PATH DIFFICULTY ACCURACY
  printf '{"accuracy": %s, "tasks": 200, "settings": {"kind": "compositional", "difficulty": "%s", "seed": "42", "temperature": "0.000000"}}\n' \
    "$3" "$2" >"$1"
}
run_folder() {  # run_folder DIR: a trainer that published version 1 and took one step
  mkdir -p "$1"
  printf '%s\n' '{"event":"publish","version":1,"xxh3":"ab","time":100.0}' \
    '{"event":"step","step":1,"time":110.0,"trajectories":64,"trajectories_sampled":96,"trajectories_filtered":32,"trajectories_trained":64,"step_seconds":10.0,"train_seconds":5.0,"environments":{"compositional:medium":{"new_rollouts":48,"new_tokens":9600,"correct_rate":0.5,"reward_mean":0.6,"frac_truncated":0,"rollouts_used":48,"tokens_used":9600,"spilled_tokens":0},"compositional:easy":{"new_rollouts":16,"new_tokens":1600,"correct_rate":1.0,"reward_mean":1.2,"frac_truncated":0,"rollouts_used":16,"tokens_used":2400,"spilled_tokens":0}}}' \
    '{"event":"step","step":2,"time":120.0,"trajectories":0,"trajectories_sampled":0,"trajectories_filtered":0,"trajectories_trained":0,"step_seconds":10.0,"train_seconds":5.0,"environments":{"compositional:medium":{"new_rollouts":16,"new_tokens":3200,"correct_rate":0.75,"reward_mean":0.9,"frac_truncated":0,"rollouts_used":0,"tokens_used":0,"spilled_tokens":0}}}' \
    >"$1/trainer.jsonl"
}

eval_file "$work/before-medium.json" medium 0.70
eval_file "$work/before-easy.json" easy 0.96
eval_file "$work/control-medium.json" medium 0.78
args=(--before "$work/before-medium.json" --before "$work/before-easy.json" --control "$work/control-medium.json")
add_run() {  # add_run NAME MEDIUM [EASY]
  local dir="$work/runs/${1//\//-}"
  run_folder "$dir"
  eval_file "$dir/medium.json" medium "$2"
  args+=(--run "$1=$dir" --eval "$1=$dir/medium.json")
  if [ $# -ge 3 ]; then
    eval_file "$dir/easy.json" easy "$3"
    args+=(--eval "$1=$dir/easy.json")
  fi
}
add_run sync/0 0.92 0.97
add_run sync/1 0.95 0.96
add_run sync/2 0.90 0.98
add_run async/0 0.95 0.95
add_run async/1 0.95 0.96
add_run async/2 0.84 0.96
add_run rloo 0.86

"$report_tool" "${args[@]}" --out "$work/report.json" >"$work/report.log" 2>&1 ||
  fail "rl-report failed: $(tail -n 3 "$work/report.log")"
"$report_tool" --summarize "$work/report.json" >"$work/summary.txt" || fail "--summarize failed"
expect() {  # expect LINE: a line of the summary, exactly
  grep -qxF -- "$1" "$work/summary.txt" || fail "the summary lacks \"$1\":
$(cat "$work/summary.txt")"
}
expect "targets on compositional:medium (greedy, held-out; means over seeds):"
expect "  start  70.0% medium, SFT-only control 78.0%"
expect "  sync   medium 92.3% (3 seeds: 92.0 95.0 90.0): meets the required 90%"
expect "  sync   medium error 30.0% -> 8.0% 5.0% 10.0%: at least halved in every seed"
expect "  sync   easy 97.0% against 96.0% at the start: no lower"
expect "  sync   +14.3 points over the SFT-only control on medium: meets the required +10"
expect "  async  medium 91.3% (3 seeds: 95.0 95.0 84.0): meets the required 90%"
expect "  async  medium error 30.0% -> 5.0% 5.0% 16.0%: NOT halved in every seed"
expect "  async  easy 95.7% against 96.0% at the start: LOWER"
expect "  rloo   medium 86.0% (1 seed: 86.0): MISSES the required 90%"
expect "  rloo   easy: MISSES: no evaluation of every seed (start 96.0%)"
expect "  rloo   +8.0 points over the SFT-only control on medium: MISSES the required +10"
expect "  sync/1   trajectories: 96 sampled, 32 filtered at the source, 64 trained on"
# Per environment, summed over the steps: medium 48 + 16 arrived, correct
# (0.5 x 48 + 0.75 x 16) / 64 = 56.25%, reward (0.6 x 48 + 0.9 x 16) / 64 =
# 0.675; 9600 of the 12000 tokens trained on are medium's (80%).
expect "  sync/1   compositional:medium: 64 rollouts arrived (56.2% correct, reward 0.675), 48 trained on (9600 tokens, 80% of the tokens trained on)"
expect "  sync/1   compositional:easy: 16 rollouts arrived (100.0% correct, reward 1.200), 16 trained on (2400 tokens, 20% of the tokens trained on)"
expect "targets: NOT all met"

# Sync alone meets every target.
sync_args=()
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --run|--eval) case "${args[i + 1]}" in sync/*) sync_args+=("${args[i]}" "${args[i + 1]}") ;; esac; i=$((i + 1)) ;;
    *) sync_args+=("${args[i]}") ;;
  esac
done
"$report_tool" "${sync_args[@]}" --out "$work/sync-report.json" >"$work/sync-report.log" 2>&1 ||
  fail "rl-report (sync alone) failed: $(tail -n 3 "$work/sync-report.log")"
"$report_tool" --summarize "$work/sync-report.json" >"$work/summary.txt"
expect "targets: all met"

# A mistyped --eval name is refused, not silently ignored.
if "$report_tool" "${args[@]}" --eval "sinc/0=$work/runs/sync-0/medium.json" --out "$work/bad.json" \
  >"$work/bad.log" 2>&1; then
  fail "an --eval naming no run was accepted"
fi
grep -q "names no --run" "$work/bad.log" || fail "the refusal does not say why: $(cat "$work/bad.log")"
echo "rl-report targets: ok"
