#!/usr/bin/env bash
# scripts/sft-control.sh on a tiny policy: --steps N continues the start's
# supervised run by N steps in a copy (the start untouched) and evaluates
# it; --seconds S buys S over the start's median seconds a step; bad usage
# is refused with the reason.
# Usage: sft_control_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
source_dir="$1" build="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1 WEIGHTSYNC_BUILD_DIR="$build"
fail() { echo "FAIL: $*" >&2; exit 1; }
control="$source_dir/scripts/sft-control.sh"

"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 4 --log-every 4 >"$work/start.log"
start_digest=$(sha256sum "$work/start/policy.safetensors")

"$control" --start "$work/start" --out "$work/control" --steps 3 --eval-tasks 4 >"$work/control.log" 2>&1 ||
  fail "sft-control --steps failed: $(tail -n 3 "$work/control.log")"
[ "$(wc -l <"$work/control/train_log.jsonl")" -eq 7 ] || fail "the control should have trained to step 4 + 3"
tail -n 1 "$work/control/train_log.jsonl" | grep -q '"step":7' || fail "the control's last step is not 7"
[ "$(sha256sum "$work/start/policy.safetensors")" = "$start_digest" ] || fail "the start was changed"
[ "$(wc -l <"$work/start/train_log.jsonl")" -eq 4 ] || fail "the start's log was changed"
grep -q '"more_steps": 3' "$work/control/control.json" || fail "control.json: $(cat "$work/control/control.json")"
for difficulty in easy medium; do
  grep -q '"tasks": 4' "$work/control/eval-$difficulty.json" || fail "no $difficulty evaluation of 4 tasks"
  grep -Eq "^sft-control: 3 more SFT steps \([0-9]+ s\): [0-9.]+% $difficulty \(4 held-out tasks, greedy\)$" \
    "$work/control.log" || fail "no $difficulty line: $(cat "$work/control.log")"
done

# --seconds: the steps are the seconds over the start's median step time,
# here made 0.5 s a step by hand: 2.6 s buys 5 steps (rounded).
sed -i 's/"seconds":[0-9.e-]*/"seconds":0.5/' "$work/start/train_log.jsonl"
"$control" --start "$work/start" --out "$work/timed" --seconds 2.6 --eval-tasks 2 >"$work/timed.log" 2>&1 ||
  fail "sft-control --seconds failed: $(tail -n 3 "$work/timed.log")"
grep -q "2.6 s at the start's median 0.5 s a step: 5 more SFT steps" "$work/timed.log" ||
  fail "--seconds: $(head -n 2 "$work/timed.log")"
tail -n 1 "$work/timed/train_log.jsonl" | grep -q '"step":9' || fail "--seconds 2.6 should train to step 4 + 5"

# Usage errors name the problem.
set +e
"$control" --start "$work/start" --out "$work/x" >"$work/e1.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "give one of --seconds and --steps" "$work/e1.log" || fail "no budget: rc $rc"
"$control" --start "$work/nothing" --out "$work/x" --steps 1 >"$work/e2.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "is not a zorplex-sft checkpoint" "$work/e2.log" || fail "no start: rc $rc"
set -e
echo "sft control: ok"
