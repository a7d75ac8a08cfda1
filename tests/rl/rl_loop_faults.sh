#!/usr/bin/env bash
# ctest helper: the RL loop's fault handling with real processes.
#  1. A trainer (async, checkpoint every 2 steps) and two generators.
#  2. Generator 1 is killed (SIGKILL) mid-run: the trainer keeps training on
#     generator 0's trajectories.
#  3. The trainer is killed (SIGKILL) and restarted with --resume on the same
#     ports: it continues from its checkpoint's step and version, and
#     generator 0, which survived, reconnects and carries on; the resumed
#     run finishes.
#  4. Sync mode: a generator killed mid-run; after the round timeout the
#     trainer trains on the survivor's groups and finishes.
#  5. A generator stopped after 2 rounds and started again with --resume
#     draws the next tasks of its stream (no repeats, no gaps: its
#     transcripts' task seeds run on), and a corrupt or mismatched state file
#     is refused with the reason and what to do.
# Usage: rl_loop_faults.sh BUILD_DIR WORKDIR
set -euo pipefail
build="$1" work="$2"
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
steps_logged() { grep -c '"event":"step"' "$work/run/trainer.jsonl" 2>/dev/null || true; }
wait_for_steps() {  # wait_for_steps N SECONDS
  for _ in $(seq 1 $(($2 * 10))); do [ "$(steps_logged)" -ge "$1" ] && return 0; sleep 0.1; done
  fail "the trainer did not reach $1 logged steps within $2 s (has $(steps_logged)): $(tail -n 3 "$work/trainer.log")"
}

# Waits for the trainer's address file and sets $weights and $trajectories.
read_addresses() {
  for _ in $(seq 1 300); do [ -s "$work/address.json" ] && break; sleep 0.1; done
  [ -s "$work/address.json" ] || fail "the trainer wrote no address file"
  weights=$(sed -n 's/.*"weights":"\([^"]*\)".*/\1/p' "$work/address.json")
  trajectories=$(sed -n 's/.*"trajectories":"\([^"]*\)".*/\1/p' "$work/address.json")
}
# start_generator ID LOG [generator options...]: in the background; its pid in $last_pid.
# The trainers here keep zero-variance groups (--keep-zero-variance) and so
# refuse filtered ones: the generators' dynamic filter is off.
start_generator() {
  local id=$1 log=$2
  shift 2
  "$build/bin/generator" --trainer "$weights" --trajectories "$trajectories" --checkpoint "$work/start" --id "$id" \
    --prompts 1 --group-size 3 --trainer-timeout 60 --threads 1 --dynamic-filter off "$@" >"$log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
}

"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 2 >"$work/sft.log"
trainer_args=(--start "$work/start" --out "$work/run" --mode async --batch-groups 2 --keep-zero-variance
              --checkpoint-every 2 --idle-timeout 60 --threads 1 --address-file "$work/address.json")

"$build/bin/trainer" "${trainer_args[@]}" --steps 200 >"$work/trainer.log" 2>&1 &
trainer=$!
pids+=("$trainer")
read_addresses
start_generator 0 "$work/generator-0.log" --mode async --groups-per-version 1 --out "$work/run"
generator0=$last_pid
start_generator 1 "$work/generator-1.log" --mode async --groups-per-version 1 --out "$work/run"
generator1=$last_pid

wait_for_steps 3 90
kill -9 "$generator1"
after_kill=$(steps_logged)
wait_for_steps $((after_kill + 4)) 90
kill -0 "$trainer" 2>/dev/null || fail "the trainer died with generator 1"

# Kill the trainer right after a checkpoint and restart it on the same ports.
kill -9 "$trainer"
wait "$trainer" 2>/dev/null || true
checkpoint_step=$(head -c 65536 "$work/run/policy.safetensors" | LC_ALL=C grep -ao '"rl.step":"[0-9]*"' | tr -dc '0-9')
[ -n "$checkpoint_step" ] && [ "$checkpoint_step" -ge 2 ] || fail "no checkpoint step in policy.safetensors"
weights_port=${weights##*:}
trajectory_port=${trajectories##*:}
"$build/bin/trainer" "${trainer_args[@]}" --resume --steps $((checkpoint_step + 4)) --weights-port "$weights_port" \
  --trajectory-port "$trajectory_port" >"$work/trainer-resumed.log" 2>&1 &
resumed=$!
pids+=("$resumed")
status=0
wait "$resumed" || status=$?
[ "$status" -eq 0 ] || fail "the resumed trainer failed ($status): $(tail -n 5 "$work/trainer-resumed.log")"
grep -q "resuming from $work/run at step $checkpoint_step" "$work/trainer-resumed.log" || fail "did not resume at step $checkpoint_step"
grep -q "done after $((checkpoint_step + 4)) steps" "$work/trainer-resumed.log" || fail "the resumed run did not finish"
grep -q "generator 0: lost the trainer" "$work/generator-0.log" || fail "generator 0 did not notice the restart"
grep -q "generator 0: connected to the trainer" "$work/generator-0.log" || fail "generator 0 never connected"
[ "$(grep -c 'generator 0: connected to the trainer' "$work/generator-0.log")" -ge 2 ] || fail "generator 0 did not reconnect"
kill -9 "$generator0" 2>/dev/null || true

# 4. Sync mode with a generator killed mid-run.
rm -f "$work/address.json"
"$build/bin/trainer" --start "$work/start" --out "$work/sync" --mode sync --generators 2 --prompts-per-round 1 \
  --round-timeout 2 --keep-zero-variance --idle-timeout 60 --threads 1 --steps 8 \
  --address-file "$work/address.json" >"$work/trainer-sync.log" 2>&1 &
sync_trainer=$!
pids+=("$sync_trainer")
read_addresses
start_generator 0 "$work/sync-generator-0.log" --mode sync
start_generator 1 "$work/sync-generator-1.log" --mode sync
sync_generator1=$last_pid
for _ in $(seq 1 900); do
  [ "$(grep -c '"event":"step"' "$work/sync/trainer.jsonl" 2>/dev/null || true)" -ge 2 ] && break
  sleep 0.1
done
kill -9 "$sync_generator1"
status=0
wait "$sync_trainer" || status=$?
[ "$status" -eq 0 ] || fail "sync: the trainer failed ($status) after a generator died: $(tail -n 3 "$work/trainer-sync.log")"
grep -q "done after 8 steps" "$work/trainer-sync.log" || fail "sync: the trainer did not finish its 8 steps"
grep -q "1 of 2 generators delivered" "$work/trainer-sync.log" || fail "sync: the trainer never noticed the dead generator"

# 5. A generator resumed from its state file continues its task stream.
rm -f "$work/address.json"
"$build/bin/trainer" --start "$work/start" --out "$work/resume-trainer" --mode async --batch-groups 2 \
  --keep-zero-variance --idle-timeout 60 --threads 1 --steps 200 --address-file "$work/address.json" \
  >"$work/trainer-resume.log" 2>&1 &
resume_trainer=$!
pids+=("$resume_trainer")
read_addresses
run_rounds() {  # run_rounds LOG [generator options...]: 2 rounds of generator 0, in the foreground
  local log=$1
  shift
  "$build/bin/generator" --trainer "$weights" --trajectories "$trajectories" --checkpoint "$work/start" --id 0 \
    --prompts 1 --group-size 3 --trainer-timeout 60 --threads 1 --mode async --rounds 2 --task-seed-base 300000 \
    --out "$work/resume" --transcripts "$work/resume" --dynamic-filter off "$@" >"$log" 2>&1 ||
    fail "generator 0 ($*) failed: $(tail -n 3 "$log")"
}
run_rounds "$work/resume-first.log"
run_rounds "$work/resume-second.log" --resume
kill -9 "$resume_trainer" 2>/dev/null || true
grep -q "generator 0: resuming its task stream at task 2 (data epoch 0), round 2" "$work/resume-second.log" ||
  fail "the resumed generator did not start at task 2: $(head -n 5 "$work/resume-second.log")"
transcripts="$work/resume/transcripts-generator-0.jsonl"
[ "$(wc -l <"$transcripts")" -eq 12 ] || fail "expected 12 transcript lines (4 rounds of 3), got $(wc -l <"$transcripts")"
seeds=$(grep -o '"task_seed":[0-9]*' "$transcripts" | cut -d: -f2 | uniq | tr '\n' ' ')
[ "$seeds" = "300000 300001 300002 300003 " ] || fail "task seeds across the restart: $seeds (want 300000..300003)"
rounds=$(grep -o '"round":[0-9]*' "$transcripts" | cut -d: -f2 | uniq | tr '\n' ' ')
[ "$rounds" = "0 1 2 3 " ] || fail "rounds across the restart: $rounds (want 0..3)"
grep -q '"next_task": 4' "$work/resume/generator-0-state.json" || fail "the state file does not say task 4"
# A corrupt or mismatched state file: exit 1, the reason, and the way out; never a silent restart.
refused() {  # refused WHY [generator options...]
  local why=$1 status=0
  shift
  "$build/bin/generator" --trainer 127.0.0.1:9 --trajectories tcp://127.0.0.1:9 --checkpoint "$work/start" \
    --out "$work/resume" --resume "$@" >"$work/refused.log" 2>&1 || status=$?
  [ "$status" -eq 1 ] || fail "a generator resumed with ($*) exited $status, not 1: $(tail -n 2 "$work/refused.log")"
  grep -q "cannot resume from $work/resume/generator-0-state.json: .*$why.*without --resume" "$work/refused.log" ||
    fail "no clear refusal ($why): $(tail -n 2 "$work/refused.log")"
}
refused "another task stream (--task-seed-base 300000 in the file, 200000 now)"
refused "--task compositional:easy in the file, compositional:medium now" --task-seed-base 300000 \
  --task compositional:medium
head -c 40 "$work/resume/generator-0-state.json" >"$work/resume/truncated" &&
  mv "$work/resume/truncated" "$work/resume/generator-0-state.json"
refused "not JSON" --task-seed-base 300000
rm "$work/resume/generator-0-state.json"
refused "no state file" --task-seed-base 300000
echo "rl loop faults: ok"
