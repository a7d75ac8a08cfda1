#!/usr/bin/env bash
# ctest helper: trainer --synthetic-groups (real processes, loopback):
#  - with no generator at all the trainer takes every step (an idle timeout of
#    3 s would end a trainer that waited for one), each on the groups asked
#    for, applied, and every step publishes new weights (the digests differ);
#  - --synthetic-wait-readers with no reader ends with a clear error within
#    the idle timeout, not a hang;
#  - scripts/trainer_step_figure.py runs both arms, the relays of arm B pull
#    versions while the trainer steps, and its JSON has the ratio of the
#    medians it reports.
# Usage: trainer_synthetic.sh BUILD_DIR WORKDIR SOURCE_DIR
set -euo pipefail
build="$1" work="$2" source="$3"
rm -rf "$work" && mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3

"$build/rl/zorplex-sft" --out "$work/start" --d-model 32 --layers 1 --heads 2 --d-ff 64 --max-seq-len 384 \
  --batch 4 --steps 2 >"$work/sft.log"

# No generators: three steps on 3 groups of 4, each applied and published.
timeout 120 "$build/bin/trainer" --start "$work/start" --out "$work/alone" --steps 3 --threads 1 \
  --synthetic-groups 3 --synthetic-group-size 4 --idle-timeout 3 >"$work/alone.log" 2>&1 ||
  fail "the trainer without generators failed: $(tail -n 5 "$work/alone.log")"
"$py" - "$work/alone/trainer.jsonl" <<'EOF' || fail "the synthetic steps are not what was asked for"
import json, math, sys
events = [json.loads(l) for l in open(sys.argv[1])]
steps = [e for e in events if e["event"] == "step"]
publishes = [e for e in events if e["event"] == "publish"]
assert len(steps) == 3, steps
for i, s in enumerate(steps):
    assert s["groups"] == 3 and s["trajectories"] == 12 and s["trajectories_sampled"] == 12, s
    assert s["applied"] and math.isfinite(s["loss"]) and s["grad_norm"] > 0, s
    assert s["version"] == i + 2 and s["staleness_max"] == 0 and abs(s["reward_std"] - 0.5) < 1e-6, s
    assert s["wait_seconds"] < 1.0, s  # nothing to wait for
digests = [p["xxh3"] for p in publishes]
assert [p["version"] for p in publishes] == [1, 2, 3, 4], publishes
assert len(set(digests)) == 4, digests  # every step changed the weights
print("synthetic steps:", [round(s["train_seconds"] * 1000, 1) for s in steps], "ms")
EOF

# Waiting for readers that never come: an error naming the flag, within the idle timeout.
set +e
t0=$SECONDS
timeout 60 "$build/bin/trainer" --start "$work/start" --out "$work/noreader" --steps 2 --threads 1 \
  --synthetic-groups 1 --synthetic-wait-readers 2 --idle-timeout 2 >"$work/noreader.log" 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "waiting for absent readers: exit $rc, expected 1: $(tail -n 3 "$work/noreader.log")"
grep -q "only 0 of 2 readers pulled version 1 within 2 s (--synthetic-wait-readers)" "$work/noreader.log" ||
  fail "no clear error for absent readers: $(tail -n 3 "$work/noreader.log")"
[ $((SECONDS - t0)) -lt 30 ] || fail "the trainer took $((SECONDS - t0)) s to give up on its readers"

# The figure's script, one run per arm.
"$py" "$source/scripts/trainer_step_figure.py" --build "$build" --start "$work/start" --out "$work/figure" \
  --steps 5 --groups 2 --group-size 4 --pairs 1 --threads 1 --run-timeout 90 >"$work/figure.log" 2>&1 ||
  fail "trainer_step_figure.py failed: $(tail -n 5 "$work/figure.log")"
cat "$work/figure.log"
"$py" - "$work/figure/trainer-step.json" <<'EOF' || fail "the trainer-step JSON is not what its runs say"
import json, statistics, sys
r = json.load(open(sys.argv[1]))
runs = {x["arm"]: x for x in r["runs"]}
assert set(runs) == {"A", "B"} and not any("error" in x for x in r["runs"]), r
for x in runs.values():
    assert x["steps_measured"] == 4 and x["versions_published"] == 6, x  # 5 steps, the first left out
a, b = runs["A"], runs["B"]
assert a["relays_forwarded"] == [], a
# Both relays pulled while the trainer stepped: version 1 before the first step, and more after it.
assert len(b["relays_forwarded"]) == 2 and min(b["relays_forwarded"]) >= 2, b
assert abs(r["ratio"] - b["median_seconds"] / a["median_seconds"]) < 1e-9, r
# The medians are those of the steps in trainer.jsonl (the first step left out).
steps = [json.loads(l) for l in open(b["dir"] + "/trainer.jsonl")]
times = [s["train_seconds"] + s["publish_seconds"] for s in steps if s["event"] == "step"][1:]
assert abs(statistics.median(times) - b["median_seconds"]) < 1e-12, (times, b)
EOF
grep -q "waiting for 2 readers to pull version 1" "$work/figure/run1-B/trainer.log" ||
  fail "arm B's trainer did not wait for its readers"
echo "trainer synthetic: ok"
