#!/usr/bin/env bash
# ctest helper: the RL loop end to end with real processes on localhost. A
# tiny SFT policy; then scripts/rl-run.sh runs a trainer and two generators
# for a few steps in sync mode and in async mode. Checks: every step is
# logged; every version a generator pulled has exactly the bytes the trainer
# published (xxHash3 of the parameter buffer, computed by each process on its
# own memory); the RL checkpoint is written; generators were stopped cleanly;
# the periodic greedy evaluation (--eval-every 2: after steps 2 and 3) is
# logged; groups carry the generators' temperature (0.7 here) and the trainer,
# left without --temperature, trains at it; every step of both modes stands
# for the same number of sampled trajectories; the async run is pinned
# (--trainer-cpus, --generator-cpus) and the trainer's affinity checked, and
# both sample easy and medium tasks prompt by prompt (--task with two kinds:
# the generators say so, and medium prompts with - or * show in their rounds),
# and the async run's prompts are weighted towards carries
# (--carry-candidates 4: from the same task streams, every round of it takes
# at least as many carries in as the sync run's round of that number, and
# some more);
# rl-report's accuracy figures over both runs. Those two runs keep
# zero-variance groups (--keep-zero-variance), so rl-run.sh turns the
# generators' dynamic filter off; a third, short sync run has it on: every
# sampled group is sent or filtered, each step's trajectories_filtered is
# what its round's generators filtered, and sampled = trained + filtered +
# the zero-variance groups the trainer's safety net dropped.
# Usage: rl_loop_smoke.sh BUILD_DIR SOURCE_DIR WORKDIR
set -euo pipefail
build="$1" source="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1 WEIGHTSYNC_BUILD_DIR="$build"
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([0-9a-z.]*\).*/\1/p"; }

"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 2 --log-every 1 >"$work/sft.log"

# Pinning is both lists or neither, each one this machine has.
set +e
half="$("$source/scripts/rl-run.sh" --start "$work/start" --out "$work/x" --trainer-cpus 0 2>&1)"; half_rc=$?
bad="$("$source/scripts/rl-run.sh" --start "$work/start" --out "$work/x" --trainer-cpus 0 --generator-cpus 100000 2>&1)"
bad_rc=$?
task="$("$source/scripts/rl-run.sh" --start "$work/start" --out "$work/x" --task compositional:tricky 2>&1)"; task_rc=$?
carries="$("$source/scripts/rl-run.sh" --start "$work/start" --out "$work/x" --carry-candidates 0 2>&1)"; carries_rc=$?
filter="$("$source/scripts/rl-run.sh" --start "$work/start" --out "$work/x" --dynamic-filter on -- --baseline running 2>&1)"; filter_rc=$?
set -e
[ "$task_rc" -eq 2 ] && [[ "$task" == *"--task must be"* ]] || fail "--task compositional:tricky: rc $task_rc, '$task'"
[ "$carries_rc" -eq 2 ] && [[ "$carries" == *"--carry-candidates must be"* ]] || fail "--carry-candidates 0: rc $carries_rc, '$carries'"
[ "$filter_rc" -eq 2 ] && [[ "$filter" == *"refuses filtered ones"* ]] || fail "--dynamic-filter on with --baseline running: rc $filter_rc, '$filter'"
[ "$half_rc" -eq 2 ] && [[ "$half" == *"go together"* ]] || fail "--trainer-cpus alone: rc $half_rc, '$half'"
[ "$bad_rc" -eq 2 ] && [[ "$bad" == *"not a CPU list of this machine"* ]] || fail "CPU 100000: rc $bad_rc, '$bad'"

for mode in sync async; do
  run="$work/$mode"
  pin=()  # async runs pinned (all on CPU 0: any machine has it)
  [ "$mode" = sync ] || pin=(--trainer-cpus 0 --generator-cpus 0)
  task=compositional:easy,compositional:medium said="compositional:easy and compositional:medium" carries=1
  [ "$mode" = sync ] || carries=4  # async: weighted towards carries
  "$source/scripts/rl-run.sh" --start "$work/start" --out "$run" --mode "$mode" --steps 3 --prompts 2 "${pin[@]}" --task "$task" \
    --carry-candidates "$carries" \
    --group-size 3 --batch-groups 4 --temperature 0.7 -- --keep-zero-variance --idle-timeout 60 --round-timeout 30 \
    --eval-every 2 --eval-tasks 2 \
    >"$work/$mode.log" 2>&1 || fail "$mode: rl-run.sh failed: $(tail -n 5 "$work/$mode.log")"
  [ "$(grep -c '"event":"step"' "$run/trainer.jsonl")" -eq 3 ] || fail "$mode: trainer.jsonl should log 3 steps"
  [ "$mode" = sync ] || grep -q "rl-run: pinned: trainer on CPUs 0 with 1 torch threads" "$work/$mode.log" ||
    fail "async: the trainer should run pinned to CPU 0 with 1 torch thread"
  grep -q "done after 3 steps (version 4)" "$run/trainer.log" || fail "$mode: the trainer did not finish at version 4"
  [ "$(grep -c '"event":"eval"' "$run/trainer.jsonl")" -eq 2 ] || fail "$mode: expected evals after steps 2 and 3"
  grep '"event":"eval"' "$run/trainer.jsonl" | grep -q '"tasks":2' || fail "$mode: an eval line without its 2 tasks"
  [ "$(grep '"event":"step"' "$run/trainer.jsonl" | grep -c '"temperature":0.7')" -eq 3 ] ||
    fail "$mode: every step should train at the groups' temperature 0.7"
  grep -q '"correct_rate_before_filter"' "$run/trainer.jsonl" || fail "$mode: no accuracy before the filter"
  # A fair comparison: a step of either mode stands for 12 sampled
  # trajectories (sync: 2 generators x 2 prompts x 3; async: 4 groups x 3).
  [ "$(grep '"event":"step"' "$run/trainer.jsonl" | grep -c '"trajectories_sampled":12,')" -eq 3 ] ||
    fail "$mode: every step should stand for 12 sampled trajectories"
  grep '"event":"publish"' "$run/trainer.jsonl" | while read -r line; do
    echo "$(echo "$line" | field version) $(echo "$line" | field xxh3)"
  done >"$run/published.txt"
  [ "$(wc -l <"$run/published.txt")" -eq 4 ] || fail "$mode: expected versions 1-4 published"
  for g in 0 1; do
    pulls=0
    while read -r line; do
      pulled="$(echo "$line" | field version) $(echo "$line" | field xxh3)"
      grep -qx "$pulled" "$run/published.txt" || fail "$mode: generator $g pulled '$pulled', not what was published"
      pulls=$((pulls + 1))
    done < <(grep '"event":"pull"' "$run/generator-$g.jsonl")
    [ "$pulls" -ge 2 ] || fail "$mode: generator $g made $pulls pulls (expected at least 2)"
    [ "$mode" = async ] || [ "$pulls" -ge 3 ] || fail "sync: generator $g should pull every version it trained on"
    grep -q '"event":"round"' "$run/generator-$g.jsonl" || fail "$mode: generator $g logged no round"
    grep -q "generator $g: stopped after" "$run/generator-$g.log" || fail "$mode: generator $g did not stop cleanly"
    grep -q "generator $g: sampling $said tasks" "$run/generator-$g.log" || fail "$mode: generator $g did not sample $said"
    grep -q "generator $g: dynamic filter off" "$run/generator-$g.log" ||
      fail "$mode: with --keep-zero-variance rl-run.sh should turn generator $g's dynamic filter off"
  done
  [ -s "$run/policy.safetensors" ] && [ -s "$run/optimizer-step3.safetensors" ] || fail "$mode: no RL checkpoint at step 3"
  "$build/rl/zorplex-eval" --checkpoint "$run" --count 2 --batch 2 >"$run/eval.log" 2>&1 ||
    fail "$mode: zorplex-eval cannot read the RL checkpoint"
  for t in trainer generator-0 generator-1; do
    grep -q '"event":"' "$run/timeline-$t.jsonl" || fail "$mode: empty timeline for $t"
  done
done
! grep -q '"staleness_max":[1-9]' "$work/sync/trainer.jsonl" || fail "sync: a step trained on a stale group"
# The mix and the carries: the same task streams (no --seed) in both runs.
grep -h '"event":"round"' "$work"/sync/generator-*.jsonl | sed -n 's/.*"operators":"\([^"]*\)".*/\1/p' | grep -q '[-*]' ||
  fail "sync: no medium prompt with - or * in any round"
more=0
for g in 0 1; do
  for round in 0 1 2; do
    plain="$(grep '"event":"round"' "$work/sync/generator-$g.jsonl" | grep "\"round\":$round," | field carries_in)"
    weighted="$(grep '"event":"round"' "$work/async/generator-$g.jsonl" | grep "\"round\":$round," | field carries_in)"
    [ -n "$plain" ] && [ -n "$weighted" ] || continue
    [ "$weighted" -ge "$plain" ] || fail "generator $g round $round: $weighted carries weighted, $plain without"
    [ "$weighted" -eq "$plain" ] || more=$((more + 1))
  done
done
[ "$more" -gt 0 ] || fail "--carry-candidates 4 never chose a task with more carries in"
# The dynamic filter on (the default without --keep-zero-variance): sync, 2
# steps of 2 generators x 2 prompts x 3 episodes, at most 4 x 2 prompts a round.
run="$work/filter"
"$source/scripts/rl-run.sh" --start "$work/start" --out "$run" --mode sync --steps 2 --prompts 2 --group-size 3 \
  --temperature 0.7 -- --idle-timeout 60 --round-timeout 30 >"$work/filter.log" 2>&1 ||
  fail "filter: rl-run.sh failed: $(tail -n 5 "$work/filter.log")"
grep -q "done after 2 steps (version 3)" "$run/trainer.log" || fail "filter: the trainer did not finish at version 3"
for g in 0 1; do
  grep -q "generator $g: dynamic filter on" "$run/generator-$g.log" || fail "filter: generator $g's filter is not on"
  while read -r line; do
    sampled=$(echo "$line" | field prompts_sampled) filtered=$(echo "$line" | field groups_filtered)
    sent=$(echo "$line" | field groups_sent) cap=$(echo "$line" | field cap_hit)
    [ "$((sent + filtered))" -eq "$sampled" ] || fail "filter: generator $g sent $sent + filtered $filtered != $sampled sampled"
    [ "$sampled" -ge 2 ] && [ "$sampled" -le 8 ] || fail "filter: generator $g sampled $sampled prompts (2..8)"
    [ "$sent" -eq 2 ] || { [ "$cap" = true ] && [ "$sampled" -eq 8 ]; } ||
      fail "filter: generator $g sent $sent groups without reaching its cap ($sampled prompts)"
  done < <(grep '"event":"round"' "$run/generator-$g.jsonl" | grep '"version":[12],')  # a stopped round may not send
done
zero_before=0
while read -r line; do
  version=$(echo "$line" | field trained_on_version)
  at_source=0
  for g in 0 1; do
    n=$(grep '"event":"round"' "$run/generator-$g.jsonl" | grep "\"version\":$version," | field trajectories_filtered)
    at_source=$((at_source + ${n:-0}))
  done
  sampled=$(echo "$line" | field trajectories_sampled) trained=$(echo "$line" | field trajectories_trained)
  filtered=$(echo "$line" | field trajectories_filtered)
  zero=$(echo "$line" | sed -n 's/.*"zero_variance_groups":\([0-9]*\).*/\1/p')
  [ "$filtered" -eq "$at_source" ] || fail "filter: step at version $version: $filtered filtered, its generators filtered $at_source"
  [ "$sampled" -eq "$((trained + filtered + 3 * (zero - zero_before)))" ] ||
    fail "filter: step at version $version: sampled $sampled != trained $trained + filtered $filtered + zero-variance"
  zero_before=$zero
done < <(grep '"event":"step"' "$run/trainer.jsonl")
grep -q "trainer: step   1/2 .* sampled [0-9]* filtered [0-9]* trained [0-9]*" "$run/trainer.log" ||
  fail "filter: the trainer's step line does not say sampled, filtered and trained"

# rl-report over both runs: the figures are issue 19's (at least 90% after
# RL, the start's error at least halved). Start 80%: sync's 92% meets both,
# async's 88% neither (error 20% -> 12% is not halved).
echo '{"accuracy": 0.80, "tasks": 200}' >"$work/eval-before.json"
echo '{"accuracy": 0.92, "tasks": 200}' >"$work/eval-sync.json"
echo '{"accuracy": 0.88, "tasks": 200}' >"$work/eval-async.json"
"$build/rl/rl-report" --before "$work/eval-before.json" --run sync="$work/sync" --eval sync="$work/eval-sync.json" \
  --run async="$work/async" --eval async="$work/eval-async.json" --out "$work/report.json" >"$work/report.log" 2>&1 ||
  fail "rl-report failed: $(tail -n 3 "$work/report.log")"
"$build/rl/rl-report" --summarize "$work/report.json" >"$work/summary.txt"
grep -q "sync   accuracy +12.0 points: 92.0% (meets the required 90%), error 20.0% -> 8.0% (at least halved)" \
  "$work/summary.txt" || fail "rl-report: sync's figures: $(cat "$work/summary.txt")"
grep -q "async  accuracy  +8.0 points: 88.0% (MISSES the required 90%), error 20.0% -> 12.0% (NOT halved)" \
  "$work/summary.txt" || fail "rl-report: async's figures: $(cat "$work/summary.txt")"
# The pause per update (issue 32): async installs in flight, sync pulls in the
# foreground; a report of runs alone (no --before) says both.
"$build/rl/rl-report" --run sync="$work/sync" --run async="$work/async" --out "$work/runs-report.json" \
  >"$work/runs-report.log" 2>&1 || fail "rl-report without --before failed: $(tail -n 3 "$work/runs-report.log")"
"$build/rl/rl-report" --summarize "$work/runs-report.json" >"$work/runs-summary.txt"
grep -Eq "^  sync   generation blocked per update \(foreground pulls\): median [0-9.]+ ms" "$work/runs-summary.txt" ||
  fail "rl-report: sync's blocked time: $(cat "$work/runs-summary.txt")"
grep -Eq "^  async  generation blocked per update \(in-flight installs\): median [0-9.]+ ms, .* over [1-9]" \
  "$work/runs-summary.txt" || fail "rl-report: async's blocked time: $(cat "$work/runs-summary.txt")"
grep -Eq "^  async  generation ran through an update in [0-9]+ of [1-9][0-9]* rounds" "$work/runs-summary.txt" ||
  fail "rl-report: async's rounds through an update: $(cat "$work/runs-summary.txt")"
echo "rl loop smoke: ok"
