#!/usr/bin/env bash
# ctest helper: the GPU check's report (scripts/gpu_check_report.py) and its
# stage list. Checks: scripts/gpu-check.sh runs exactly the stages the report
# expects, in order; a dry-run report and a full one composed from bench JSON
# (GPU rows, a 2-reader compute-loop run and a trainer-step run, written
# below) validate, with
# each figure judged against its limit from the right rows; and the validator
# refuses a missing or renamed stage, a misspelt status, a figure whose limit
# or verdict is wrong or that is missing, a dry-run figure in a full run, and
# an $OUT with an unexpected file or more than 8.
# Usage: gpu_check_report_test.sh SOURCE_DIR WORKDIR [PYTHON]
set -euo pipefail
source="$1" work="$2" python="${3:-python3}"
report="$source/scripts/gpu_check_report.py"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

# The script and the report agree on the stages.
diff <("$source/scripts/gpu-check.sh" --list-stages) <("$python" "$report" stages) ||
  fail "gpu-check.sh --list-stages differs from gpu_check_report.py stages"

stages_tsv() {  # stages_tsv STATUS
  local logs=(setup.log setup.log setup.log build.log tests.log tests.log figures.log rl.log sanitizer.log) i=0
  for s in $("$python" "$report" stages); do
    printf '%s\t%s\t%s\t%s\t%s\t\n' "$s" "$1" 3 60 "${logs[$i]}"
    i=$((i + 1))
  done
}
stages_tsv dry-run >"$work/dry.tsv"
stages_tsv pass >"$work/full.tsv"
echo "device=NVIDIA H200, 143771 MiB, 580.159.04" >"$work/facts.env"
mkdir -p "$work/out"
for f in setup.log build.log tests.log sanitizer.log figures.log rl.log summary.txt; do : >"$work/out/$f"; done

"$python" "$report" compose --mode dry-run --stages "$work/dry.tsv" --facts "$work/facts.env" --out "$work/out/gpu-check.json"
"$python" "$report" validate "$work/out/gpu-check.json" --out-dir "$work/out" || fail "the dry-run report does not validate"
cp "$work/out/gpu-check.json" "$work/dry.json"

# A full run: GPU rows at 64 MiB (one below 64 MiB that must be ignored) and a compute-loop run.
cat >"$work/bench-gpu.json" <<'EOF'
{"gpu": {"mode": "on", "measured": true, "not_measured": null, "device": "NVIDIA H200",
 "records": [
  {"gpu_mode": "publish_from_device", "transport": "shm", "detail": "", "size_bytes": 67108864, "gbps_median": 45.0, "limit": "D2H pinned", "limit_gbps": 50.0, "ratio_to_limit": 0.9},
  {"gpu_mode": "staged", "transport": "shm", "detail": "", "size_bytes": 67108864, "gbps_median": 9.0, "limit": "shm host pull", "limit_gbps": 10.0, "ratio_to_limit": 0.9},
  {"gpu_mode": "staged", "transport": "tcp", "detail": "", "size_bytes": 67108864, "gbps_median": 2.1, "limit": "tcp host pull", "limit_gbps": 3.0, "ratio_to_limit": 0.7},
  {"gpu_mode": "staged", "transport": "tcp", "detail": "", "size_bytes": 1048576, "gbps_median": 0.1, "limit": "tcp host pull", "limit_gbps": 3.0, "ratio_to_limit": 0.03},
  {"gpu_mode": "cuda_ipc", "transport": "cuda_ipc", "detail": "", "size_bytes": 67108864, "gbps_median": 1500.0, "limit": "D2D", "limit_gbps": 2000.0, "ratio_to_limit": 0.75}]}}
EOF
cat >"$work/bench-compute.json" <<'EOF'
{"records": [
  {"transport": "shm", "detail": "", "size_bytes": 67108864, "readers": 2, "compute_slowdown": 0.01},
  {"transport": "tcp", "detail": "", "size_bytes": 67108864, "readers": 2, "compute_slowdown": 0.03},
  {"transport": "tcp", "detail": "", "size_bytes": 67108864, "readers": 1, "compute_slowdown": 0.5}]}
EOF
# The trainer's step alone and with 2 relays pulling (scripts/trainer_step_figure.py's JSON).
cat >"$work/trainer-step.json" <<'EOF'
{"ratio": 1.03, "alone_seconds": 0.100, "readers_seconds": 0.103, "readers": 2, "transport": "tcp",
 "device": "cuda", "groups": 8, "group_size": 8, "steps": 16, "pairs": 1,
 "runs": [{"arm": "A", "median_seconds": 0.100, "steps_measured": 15, "versions_published": 17, "relays_forwarded": []},
          {"arm": "B", "median_seconds": 0.103, "steps_measured": 15, "versions_published": 17, "relays_forwarded": [17, 17]}]}
EOF
mkdir -p "$work/rl-async"
printf '%s\n' '{"event":"publish","version":1,"device":"cuda"}' \
  '{"event":"step","step":1,"train_seconds":0.2,"step_seconds":0.5,"publish_seconds":0.01}' \
  '{"event":"step","step":2,"train_seconds":0.4,"step_seconds":0.7,"publish_seconds":0.01}' >"$work/rl-async/trainer.jsonl"
"$python" "$report" compose --mode full --stages "$work/full.tsv" --facts "$work/facts.env" \
  --bench-gpu "$work/bench-gpu.json" --bench-compute "$work/bench-compute.json" \
  --trainer-step "$work/trainer-step.json" --rl-dir "$work/rl-async" --out "$work/out/gpu-check.json"
"$python" "$report" validate "$work/out/gpu-check.json" --out-dir "$work/out" || fail "the full report does not validate"
cp "$work/out/gpu-check.json" "$work/full.json"
"$python" - "$work/full.json" <<'EOF' || fail "the full report's figures are not what the rows say"
import json, sys
f = json.load(open(sys.argv[1]))["figures"]
r = json.load(open(sys.argv[1]))["rl_runs"]["rl-async"]
want = {"publish_from_device": ("pass", 0.9), "staged_pull": ("fail", 0.7), "cuda_ipc": ("fail", 0.75),
        "trainer_step": ("pass", 1.03)}
for name, (status, value) in want.items():
    got = f[name]
    assert got["status"] == status and abs(got["value"] - value) < 1e-9, (name, got)
assert len(f["staged_pull"]["detail"]) == 2, f["staged_pull"]  # the 1 MiB row is left out
# The bench's compute loop rides along as information: its 2-reader rows only.
assert [d["compute_slowdown"] for d in f["trainer_step"]["detail"]["bench_compute_loop"]] == [0.01, 0.03], f
assert f["trainer_step"]["detail"]["runs"][1]["relays_forwarded"] == [17, 17], f
assert r["steps"] == 2 and abs(r["train_seconds_median"] - 0.3) < 1e-9 and r["publish_devices"] == ["cuda"], r
EOF

# A GPU JSON without rows: figures not measured, with the reason, and still valid.
echo '{"gpu": {"measured": false, "not_measured": "no CUDA driver", "records": []}}' >"$work/none.json"
"$python" "$report" compose --mode full --stages "$work/full.tsv" --facts "$work/facts.env" \
  --bench-gpu "$work/none.json" --out "$work/none-report.json"
"$python" "$report" validate "$work/none-report.json" >/dev/null || fail "a not-measured report does not validate"
grep -q '"why": "no CUDA driver"' "$work/none-report.json" || fail "the not-measured reason is lost"

# A trainer-step run that failed: not measured, with the run's error; no JSON at all: the reason.
"$python" - "$work/trainer-step.json" "$work/step-failed.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
r["runs"][1]["error"] = "timed out: the relays never connected"
json.dump(r, open(sys.argv[2], "w"))
EOF
for input in step-failed none; do
  args=()
  [ "$input" = step-failed ] && args=(--trainer-step "$work/step-failed.json")
  "$python" "$report" compose --mode full --stages "$work/full.tsv" --facts "$work/facts.env" \
    --bench-gpu "$work/bench-gpu.json" "${args[@]}" --out "$work/$input-step.json"
  "$python" "$report" validate "$work/$input-step.json" >/dev/null || fail "$input: the report does not validate"
done
grep -q '"why": "timed out: the relays never connected"' "$work/step-failed-step.json" ||
  fail "a failed trainer-step run is not reported as not measured with its error"
grep -q '"why": "no trainer-step JSON' "$work/none-step.json" || fail "a missing trainer-step JSON has no reason"

# Rows present but not measured (the bench without a device): each row's reason.
echo '{"gpu": {"measured": false, "records": [{"gpu_mode": "cuda_ipc", "size_bytes": 67108864, "gbps_median": null, "ratio_to_limit": null, "not_measured": "no device here"}]}}' >"$work/rows.json"
"$python" "$report" compose --mode full --stages "$work/full.tsv" --facts "$work/facts.env" \
  --bench-gpu "$work/rows.json" --out "$work/rows-report.json"
"$python" "$report" validate "$work/rows-report.json" >/dev/null || fail "a report of unmeasured rows does not validate"
grep -q '"why": "no device here"' "$work/rows-report.json" || fail "a row's not-measured reason is lost"

# Mutations the validator must refuse (one interpreter for all of them).
"$python" - "$source/scripts" "$work" <<'EOF' || fail "the validator accepted a mutated report"
import copy, json, os, sys
sys.path.insert(0, sys.argv[1])
import gpu_check_report as g
work = sys.argv[2]
base = {k: json.load(open(os.path.join(work, k + ".json"))) for k in ("full", "dry")}
mutations = [
    ("a stage left out", "full", lambda r: r["stages"].pop(4)),
    ("a stage renamed", "full", lambda r: r["stages"][5].update(name="conformance")),
    ("a misspelt status", "full", lambda r: r["stages"][0].update(status="passed")),
    ("a dry-run status in a full run", "full", lambda r: r["stages"][1].update(status="dry-run")),
    ("a pass status in a dry run", "dry", lambda r: r["stages"][1].update(status="pass")),
    ("a stage without its bound", "full", lambda r: r["stages"][2].update(bound_seconds=None)),
    ("an unknown log", "full", lambda r: r["stages"][3].update(log="build.txt")),
    ("a figure left out", "full", lambda r: r["figures"].pop("cuda_ipc")),
    ("a figure's limit changed", "full", lambda r: r["figures"]["staged_pull"].update(limit=0.5)),
    ("a pass beyond the limit", "full", lambda r: r["figures"]["trainer_step"].update(value=1.2)),
    ("a fail within the limit", "full", lambda r: r["figures"]["staged_pull"].update(value=0.95)),
    ("a pass without a value", "full", lambda r: r["figures"]["publish_from_device"].update(value=None)),
    ("not measured without a reason", "full",
     lambda r: (r["figures"]["cuda_ipc"].update(status="not-measured"), r["figures"]["cuda_ipc"].pop("why", None))),
    ("a dry-run figure in a full run", "full", lambda r: r["figures"]["cuda_ipc"].update(status="dry-run")),
    ("a measured figure in a dry run", "dry", lambda r: r["figures"]["cuda_ipc"].update(status="pass", value=0.9)),
    ("an unknown mode", "full", lambda r: r.update(mode="partial")),
]
path = os.path.join(work, "m.json")
accepted = []
for name, which, change in mutations:
    r = copy.deepcopy(base[which])
    change(r)
    json.dump(r, open(path, "w"))
    if g.validate(path) == 0:
        accepted.append(name)
    else:
        print("refused:", name)
if accepted:
    print("accepted:", accepted)
    sys.exit(1)
EOF

# $OUT: an unexpected file, and more than 8.
cp "$work/full.json" "$work/out/gpu-check.json"
: >"$work/out/bench.json"
if "$python" "$report" validate "$work/out/gpu-check.json" --out-dir "$work/out" 2>/dev/null; then
  fail "validate accepted 9 files in OUT"
fi
rm "$work/out/bench.json" "$work/out/rl.log" && : >"$work/out/extra.log"
if "$python" "$report" validate "$work/out/gpu-check.json" --out-dir "$work/out" 2>/dev/null; then
  fail "validate accepted an unexpected file in OUT"
fi
echo "gpu check report: ok"
