#!/usr/bin/env bash
# ctest helper: zorplex-sft trains a tiny policy, is resumed and extended,
# zorplex-eval evaluates the checkpoint and writes JSON; then the usage
# errors: resume without a checkpoint, overwriting one, a corrupt file, SFT
# options this build cannot read.
# Usage: sft_eval_cli.sh SFT_EXE EVAL_EXE WORKDIR
set -euo pipefail
sft="$1" eval="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1
tiny=(--d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 --batch 4 --system-prompt "Use LOOKUP.")
fail() { echo "FAIL: $*" >&2; exit 1; }

"$sft" --out "$work/run" "${tiny[@]}" --steps 4 --save-every 2 --log-every 1 >"$work/first.log"
grep -q "step     4/4" "$work/first.log" || fail "no progress line for step 4"
grep -q "evaluate it with: zorplex-eval --checkpoint $work/run" "$work/first.log" || fail "no next step printed"
[ -s "$work/run/policy.safetensors" ] && [ -s "$work/run/optimizer.safetensors" ] || fail "checkpoint files missing"

"$sft" --out "$work/run" --resume --steps 6 --log-every 1 >"$work/resume.log"
grep -q "resuming $work/run at step 4 of 6" "$work/resume.log" || fail "resume did not start at step 4"
grep -q "step     6/6" "$work/resume.log" || fail "resume did not reach step 6"
[ "$(wc -l <"$work/run/train_log.jsonl")" -eq 6 ] || fail "train_log.jsonl should hold 6 steps"

"$eval" --checkpoint "$work/run" --count 4 --batch 2 --show 1 --json "$work/eval.json" >"$work/eval.log" 2>&1
grep -q "accuracy" "$work/eval.log" || fail "no table"
grep -q -- "--- task 0:" "$work/eval.log" || fail "--show printed no transcript"
for key in accuracy format_rate avg_turns avg_tool_calls failure_modes tokens_per_second wrong_format; do
  grep -q "\"$key\"" "$work/eval.json" || fail "eval JSON lacks $key"
done
grep -q '"tasks": 4' "$work/eval.json" || fail "eval JSON should count 4 tasks"
grep -q '"sft_step": "6"' "$work/eval.json" || fail "eval JSON should record the SFT step"

set +e
"$sft" --out "$work/empty" --resume >"$work/e1.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "no checkpoint in" "$work/e1.log" || fail "resume without a checkpoint: rc $rc"
"$sft" --out "$work/run" "${tiny[@]}" --steps 2 >"$work/e2.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "already holds a checkpoint; pass --resume" "$work/e2.log" || fail "overwrite: rc $rc"
head -c 100 "$work/run/policy.safetensors" >"$work/corrupt.safetensors"
"$eval" --checkpoint "$work/corrupt.safetensors" --count 1 >"$work/e3.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "corrupt.safetensors" "$work/e3.log" || fail "corrupt checkpoint: rc $rc"
"$eval" --checkpoint "$work/run" --kind cooking >"$work/e4.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "unknown task kind 'cooking'" "$work/e4.log" || fail "bad kind: rc $rc"
# SFT options this build cannot read (a newer zorplex-sft's): evaluating
# with the built-in prompt instead would score a prompt the policy never saw
# (it did: 25% for a 98.6% policy), so it is an error unless --system-prompt
# says which prompt to use.
python3 - "$work/run/policy.safetensors" "$work/future.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
options = json.loads(header["__metadata__"]["sft.options"])
options["data"]["arithmetic"] = "from-the-future"
header["__metadata__"]["sft.options"] = json.dumps(options)
encoded = json.dumps(header).encode()
encoded += b" " * (-len(encoded) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(encoded)) + encoded + data[8 + n:])
PY
"$eval" --checkpoint "$work/future.safetensors" --count 1 >"$work/e5.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "from-the-future" "$work/e5.log" && grep -q -- "--system-prompt" "$work/e5.log" ||
  fail "unreadable SFT options: rc $rc, $(cat "$work/e5.log")"
"$eval" --checkpoint "$work/future.safetensors" --count 1 --batch 1 --system-prompt "Use LOOKUP." >"$work/e6.log" 2>&1 ||
  fail "--system-prompt should evaluate it anyway: $(tail -n 2 "$work/e6.log")"
set -e
echo "sft/eval cli: ok"
