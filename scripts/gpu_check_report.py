#!/usr/bin/env python3
"""The JSON of scripts/gpu-check.sh: compose it from the stages' results and
the figures' sources, and validate it (the dry run in CI validates its own,
so a renamed stage, a typo in a status or a figure without its limit fails
there, not on the GPU machine). Standard library only: it runs under
Debian's /usr/bin/python3 and under the GPU machine's python3 alike.

  compose  --mode full|dry-run --stages TSV --facts FILE [--bench-gpu JSON]
           [--bench-compute JSON] [--trainer-step JSON] [--rl-dir DIR ...] --out JSON
  validate JSON [--out-dir DIR]     exit 1, naming each problem
  stages                            the stage names, in order, one a line

The stages TSV has one line per stage: name, status, seconds, bound seconds,
log file, note. Facts: KEY=VALUE lines (the device, the versions found).
Contract: reads only the files named; writes only --out; never raises on bad
input files (a missing or unreadable source makes that figure
"not-measured" with the reason).
"""
import json
import math
import os
import re
import statistics
import sys

STAGES = ["preflight", "unpack", "configure", "build", "cuda-tests", "conformance-device",
          "figures", "rl-loop", "sanitizer"]
LOGS = ["setup.log", "build.log", "tests.log", "sanitizer.log", "figures.log", "rl.log"]
OUT_FILES = set(LOGS) | {"summary.txt", "gpu-check.json"}
MAX_OUT_FILES = 8
STAGE_STATUS = {"full": {"pass", "fail", "timeout", "not-run"},
                "dry-run": {"dry-run", "fail", "timeout", "not-run"}}
# name: (compare, limit, what)
FIGURES = {
    "publish_from_device": (">=", 0.8, "publish_from_device into host slots / pinned D2H cudaMemcpy"),
    "staged_pull": (">=", 0.8, "staged pull into cudaMalloc memory / min(that transport's host pull, pinned H2D); "
                               "the lowest over the transports"),
    "cuda_ipc": (">=", 0.8, "cuda_ipc pull from device slots / D2D cudaMemcpy"),
    "trainer_step": ("<=", 1.05, "the trainer's step (train + publish, --synthetic-groups) with 2 readers "
                                 "pulling every version over tcp / the same step with none, medians of runs in "
                                 "ABBA order (scripts/trainer_step_figure.py)"),
}
FIGURE_STATUS = {"pass", "fail", "not-measured", "dry-run"}
MIN_GPU_ROW_BYTES = 64 << 20


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return None, f"{path}: {e}"


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def figure(name, status, value=None, why=None, detail=None):
    compare, limit, what = FIGURES[name]
    f = {"status": status, "value": value, "compare": compare, "limit": limit, "method": what}
    if why:
        f["why"] = why
    if detail is not None:
        f["detail"] = detail
    return f


def judged(name, value, detail):
    compare, limit, _ = FIGURES[name]
    ok = value >= limit if compare == ">=" else value <= limit
    return figure(name, "pass" if ok else "fail", value, detail=detail)


def gpu_figures(path):
    names = ["publish_from_device", "staged_pull", "cuda_ipc"]
    if not path:
        return {n: figure(n, "not-measured", why="no bench JSON (the figures stage did not write one)") for n in names}
    bench, err = load_json(path)
    gpu = bench.get("gpu") if isinstance(bench, dict) else None
    if not isinstance(gpu, dict):
        why = err or f"{path}: no 'gpu' object"
        return {n: figure(n, "not-measured", why=why) for n in names}
    rows = {"publish_from_device": [], "staged": [], "cuda_ipc": []}
    for r in gpu.get("records") or []:
        if not isinstance(r, dict) or r.get("gpu_mode") not in rows:
            continue
        if not finite(r.get("size_bytes")) or r["size_bytes"] < MIN_GPU_ROW_BYTES:
            continue
        rows[r["gpu_mode"]].append(r)
    out = {}
    for name, mode in (("publish_from_device", "publish_from_device"), ("staged_pull", "staged"),
                       ("cuda_ipc", "cuda_ipc")):
        detail = [{"transport": r.get("transport"), "detail": r.get("detail"), "size_bytes": r.get("size_bytes"),
                   "gbps": r.get("gbps_median"), "limit": r.get("limit"), "limit_gbps": r.get("limit_gbps"),
                   "ratio": r.get("ratio_to_limit"), "not_measured": r.get("not_measured"),
                   "error": r.get("error")} for r in rows[mode]]
        ratios = [d["ratio"] for d in detail if finite(d["ratio"])]
        if not detail:
            out[name] = figure(name, "not-measured", why=gpu.get("not_measured") or f"no {mode} row >= 64 MiB")
        elif len(ratios) < len(detail):
            reasons = [d["not_measured"] or d["error"] for d in detail if not finite(d["ratio"])]
            why = gpu.get("not_measured") or next((r for r in reasons if r), "a row has no ratio to its limit")
            out[name] = figure(name, "not-measured", why=why, detail=detail)
        else:
            out[name] = judged(name, min(ratios), detail)
    return out


def bench_compute_rows(path):
    """The bench's compute-loop slowdowns with 2 readers (information beside trainer_step)."""
    bench, _ = load_json(path) if path else (None, None)
    if not isinstance(bench, dict) or not isinstance(bench.get("records"), list):
        return []
    return [{"transport": r.get("transport"), "detail": r.get("detail"), "size_bytes": r.get("size_bytes"),
             "compute_slowdown": r.get("compute_slowdown")}
            for r in bench["records"] if isinstance(r, dict) and r.get("readers") == 2]


def step_figure(step_path, bench_path=None):
    name = "trainer_step"
    if not step_path:
        return figure(name, "not-measured", why="no trainer-step JSON (the rl-loop stage did not write one)")
    step, err = load_json(step_path)
    if not isinstance(step, dict):
        return figure(name, "not-measured", why=err or f"{step_path}: not a JSON object")
    runs = step.get("runs") if isinstance(step.get("runs"), list) else []
    detail = {k: step.get(k) for k in ("alone_seconds", "readers_seconds", "readers", "transport", "device",
                                        "groups", "group_size", "steps", "pairs")}
    detail["runs"] = [{k: r.get(k) for k in ("arm", "median_seconds", "steps_measured", "versions_published",
                                             "relays_forwarded", "error")}
                      for r in runs if isinstance(r, dict)]
    detail["bench_compute_loop"] = bench_compute_rows(bench_path)
    errors = [r["error"] for r in detail["runs"] if r.get("error")]
    ratio = step.get("ratio")
    if errors or not finite(ratio):
        return figure(name, "not-measured", why=(errors[0] if errors else "no ratio (a run has no median)"),
                      detail=detail)
    return judged(name, ratio, detail)


def rl_summary(dirs):
    """Per RL run: steps, and the trainer's median train/step/publish seconds (information, no limit)."""
    runs = {}
    for d in dirs or []:
        steps, publishes = [], []
        try:
            with open(os.path.join(d, "trainer.jsonl")) as f:
                for line in f:
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    if e.get("event") == "step":
                        steps.append(e)
                    elif e.get("event") == "publish":
                        publishes.append(e)
        except OSError as e:
            runs[os.path.basename(d)] = {"error": str(e)}
            continue

        def med(key, events):
            v = [e[key] for e in events if finite(e.get(key))]
            return statistics.median(v) if v else None
        runs[os.path.basename(d)] = {
            "steps": len(steps), "train_seconds_median": med("train_seconds", steps),
            "step_seconds_median": med("step_seconds", steps),
            "publish_seconds_median": med("publish_seconds", steps),
            "publish_devices": sorted({str(e.get("device")) for e in publishes}),
        }
    return runs


def read_stages(path):
    stages = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t") + [""] * 6
            name, status, secs, bound, log, note = cols[:6]
            try:
                secs_v, bound_v = float(secs), float(bound)
            except ValueError:
                secs_v, bound_v = None, None
            stages.append({"name": name, "status": status, "seconds": secs_v, "bound_seconds": bound_v,
                           "log": log, "note": note})
    return stages


def read_facts(path):
    facts = {}
    try:
        with open(path) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep and k:
                    facts[k] = v
    except OSError:
        pass
    return facts


def compose(args):
    opts = {"--rl-dir": []}
    i = 0
    while i < len(args):
        key = args[i]
        if i + 1 >= len(args):
            raise SystemExit(f"gpu_check_report: {key} needs a value")
        if key == "--rl-dir":
            opts[key].append(args[i + 1])
        else:
            opts[key] = args[i + 1]
        i += 2
    mode = opts.get("--mode")
    if mode not in STAGE_STATUS:
        raise SystemExit("gpu_check_report: --mode full|dry-run")
    if mode == "dry-run":
        figures = {n: figure(n, "dry-run", why="dry run: no GPU") for n in FIGURES}
    else:
        figures = gpu_figures(opts.get("--bench-gpu"))
        figures["trainer_step"] = step_figure(opts.get("--trainer-step"), opts.get("--bench-compute"))
    report = {"mode": mode, "facts": read_facts(opts.get("--facts", "")),
              "stages": read_stages(opts["--stages"]), "figures": figures,
              "rl_runs": rl_summary(opts["--rl-dir"])}
    with open(opts["--out"], "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


def validate(path, out_dir=None):
    problems = []
    report, err = load_json(path)
    if not isinstance(report, dict):
        print(f"gpu_check_report: {err or 'not a JSON object'}", file=sys.stderr)
        return 1
    mode = report.get("mode")
    if mode not in STAGE_STATUS:
        problems.append(f"mode is {mode!r}, not full or dry-run")
        mode = "full"
    stages = report.get("stages")
    names = [s.get("name") for s in stages] if isinstance(stages, list) else []
    if names != STAGES:
        problems.append(f"stages are {names}, expected {STAGES}")
    for s in stages if isinstance(stages, list) else []:
        n = s.get("name")
        if s.get("status") not in STAGE_STATUS[mode]:
            problems.append(f"stage {n}: status {s.get('status')!r} is not one of {sorted(STAGE_STATUS[mode])}")
        if not finite(s.get("seconds")) or s["seconds"] < 0:
            problems.append(f"stage {n}: seconds {s.get('seconds')!r}")
        if not finite(s.get("bound_seconds")) or s["bound_seconds"] <= 0:
            problems.append(f"stage {n}: bound_seconds {s.get('bound_seconds')!r}")
        if s.get("log") not in LOGS:
            problems.append(f"stage {n}: log {s.get('log')!r} is not one of {LOGS}")
    figures = report.get("figures")
    if not isinstance(figures, dict) or sorted(figures) != sorted(FIGURES):
        problems.append(f"figures are {sorted(figures) if isinstance(figures, dict) else figures!r}, "
                        f"expected {sorted(FIGURES)}")
        figures = figures if isinstance(figures, dict) else {}
    for n, f in figures.items():
        if n not in FIGURES or not isinstance(f, dict):
            continue
        compare, limit, _ = FIGURES[n]
        st = f.get("status")
        if st not in FIGURE_STATUS:
            problems.append(f"figure {n}: status {st!r}")
        if f.get("compare") != compare or f.get("limit") != limit:
            problems.append(f"figure {n}: limit {f.get('compare')} {f.get('limit')}, expected {compare} {limit}")
        if mode == "dry-run" and st != "dry-run":
            problems.append(f"figure {n}: status {st!r} in a dry run")
        if mode == "full" and st == "dry-run":
            problems.append(f"figure {n}: marked dry-run in a full run")
        if st in ("pass", "fail"):
            v = f.get("value")
            if not finite(v):
                problems.append(f"figure {n}: {st} without a value")
            elif (st == "pass") != (v >= limit if compare == ">=" else v <= limit):
                problems.append(f"figure {n}: {st} but {v} {compare} {limit} says otherwise")
        if st == "not-measured" and not f.get("why"):
            problems.append(f"figure {n}: not measured, and no reason")
    if out_dir is not None:
        files = []
        for base, dirs, fs in os.walk(out_dir):
            files += [os.path.relpath(os.path.join(base, x), out_dir) for x in fs]
        if len(files) > MAX_OUT_FILES:
            problems.append(f"{out_dir} holds {len(files)} files, at most {MAX_OUT_FILES} come back: {sorted(files)}")
        for x in files:
            if x not in OUT_FILES:
                problems.append(f"{out_dir}: unexpected file {x} (expected only {sorted(OUT_FILES)})")
    for p in problems:
        print(f"gpu_check_report: {path}: {p}", file=sys.stderr)
    if not problems:
        print(f"gpu_check_report: {path}: ok ({mode}, {len(STAGES)} stages, {len(FIGURES)} figures)")
    return 1 if problems else 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "stages":
        print("\n".join(STAGES))
        return 0
    if len(argv) >= 2 and argv[1] == "compose":
        return compose(argv[2:])
    if len(argv) in (3, 5) and argv[1] == "validate":
        out_dir = argv[4] if len(argv) == 5 and argv[3] == "--out-dir" else None
        if len(argv) == 5 and out_dir is None:
            return 2
        return validate(argv[2], out_dir)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
