#!/usr/bin/env bash
# ctest helper: the trainer's token-budget batcher end to end (real
# processes, scripts/rl-run.sh): bad --token-budget, --env-fractions and
# --spill-wait values are refused at start naming the flag (exit 2); then a
# short async run of a trainer and two generators sampling easy and medium
# tasks prompt by prompt, with --token-budget and --env-fractions (and
# --keep-zero-variance, so that the tiny policy's groups are trained on): every step
# line of trainer.jsonl carries the "environments" object with both
# environments and every metric, and its tokens_used never exceed the budget.
# Usage: rl_loop_batcher.sh BUILD_DIR SOURCE_DIR WORKDIR PYTHON
set -euo pipefail
build="$1" source="$2" work="$3" python="$4"
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1 WEIGHTSYNC_BUILD_DIR="$build"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 2 --log-every 1 >"$work/sft.log"

# Refused at start, each naming its flag (exit 2, before any training).
refused() {  # expected-text trainer-flags...
  local says="$1" out rc
  shift
  set +e
  out="$("$build/bin/trainer" --start "$work/start" --out "$work/refused" --idle-timeout 5 "$@" 2>&1)"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] && [[ "$out" == *"$says"* ]] || fail "trainer $*: rc $rc, '$out' (expected exit 2 and '$says')"
}
refused "--token-budget -5: must be a number of tokens >= 0" --token-budget -5
refused "--env-fractions: the fractions in" --token-budget 2000 --env-fractions compositional:easy=0.7,compositional:medium=0.7
refused "--env-fractions: 'puzzles=1': unknown task kind 'puzzles'" --token-budget 2000 --env-fractions puzzles=1
refused "--env-fractions: 'compositional:easy' has no '='" --token-budget 2000 --env-fractions compositional:easy
refused "--env-fractions needs --token-budget" --env-fractions simple=1
refused "--spill-wait: must be a number of seconds >= 0" --token-budget 2000 --spill-wait -1
refused "--token-budget: the token budget (100) is below the policy's max_seq_len (384)" --token-budget 100
[ ! -e "$work/refused/trainer.jsonl" ] || fail "a refused trainer wrote trainer.jsonl"

budget=1500
run="$work/async"
"$source/scripts/rl-run.sh" --start "$work/start" --out "$run" --mode async --steps 3 --prompts 2 --group-size 3 \
  --batch-groups 6 --temperature 0.7 --task compositional:easy,compositional:medium -- --keep-zero-variance \
  --token-budget "$budget" --env-fractions compositional:easy=0.4,compositional:medium=0.6 --spill-wait 3 \
  --idle-timeout 60 >"$work/async.log" 2>&1 || fail "async: rl-run.sh failed: $(tail -n 5 "$work/async.log")"
grep -q "done after 3 steps (version 4)" "$run/trainer.log" || fail "async: the trainer did not finish at version 4"
grep -q "correct by env: easy [0-9.-]* medium [0-9.-]*" "$run/trainer.log" ||
  fail "async: the console step line has no per-environment part: $(grep 'step ' "$run/trainer.log" | head -n 1)"
"$python" - "$run/trainer.jsonl" "$budget" <<'EOF' || fail "async: trainer.jsonl's environments objects"
import json, sys
path, budget = sys.argv[1], int(sys.argv[2])
keys = ["rollouts_in_buffer", "tokens_in_buffer", "frac_on_policy", "new_rollouts", "new_tokens",
        "new_generated_tokens", "reward_mean", "reward_std", "correct_rate", "frac_truncated",
        "rollouts_used", "tokens_used", "frac_used", "spilled_tokens"]
steps = [json.loads(l) for l in open(path) if '"event":"step"' in l]
assert len(steps) == 3, f"{len(steps)} step lines"
arrived = 0
for s in steps:
    assert s["token_budget"] == budget, s["token_budget"]
    envs = s["environments"]
    assert set(envs) == {"compositional:easy", "compositional:medium"}, sorted(envs)
    for name, e in envs.items():
        missing = [k for k in keys if k not in e]
        assert not missing, f"step {s['step']} {name}: missing {missing}"
        assert 0.0 <= e["frac_used"] <= 1.0 and 0.0 <= e["frac_on_policy"] <= 1.0
    used = sum(e["tokens_used"] for e in envs.values())
    assert 0 < used <= budget, f"step {s['step']}: {used} tokens used, budget {budget}"
    assert sum(e["rollouts_used"] for e in envs.values()) == s["trajectories"], s["step"]
    assert abs(sum(e["frac_used"] for e in envs.values()) - 1.0) < 1e-9
    arrived += sum(e["new_rollouts"] for e in envs.values())
    print(f"step {s['step']}: " + ", ".join(f"{n} {e['tokens_used']} used, {e['spilled_tokens']} spilled"
                                            for n, e in envs.items()))
assert arrived > 0
EOF
echo "rl loop batcher: ok"
