#!/usr/bin/env python3
"""The trainer's step with readers pulling every version, against the same step
with none, in the same run (issue 36's fourth GPU figure; it runs on a CPU too).

Runs `trainer --synthetic-groups G` (no generators: each step trains on groups
made up on the trainer, then publishes) PAIRS times per arm, in ABBA order so
drift hits both arms alike:
  A  the trainer alone;
  B  the trainer with R `weightsync-relay` daemons pulling every version it
     publishes. WEIGHTSYNC_TRANSPORT=tcp by default: the trainer's publisher
     threads send every byte, the costliest case for the trainer.
A run's step time is the median over its measured steps of train_seconds +
publish_seconds (trainer.jsonl; a synthetic step waits for nothing), the first
step of every run left out as a warm-up. In B the trainer takes its first step
once every relay has pulled its starting version (--synthetic-wait-readers).
The figure is median(B runs) / median(A runs).

  trainer_step_figure.py --build BUILD --start POLICY_DIR --out DIR
                         [--device cpu|cuda] [--steps 16] [--groups 8]
                         [--group-size 8] [--readers 2] [--transport tcp]
                         [--pairs 2] [--threads 0] [--run-timeout 300]

Writes DIR/trainer-step.json: {"ratio", "alone_seconds", "readers_seconds",
"runs": [...per run: arm, steps measured, median, versions published, per
relay the versions it forwarded]}, and prints one line per run. Exit 0 when
every run completed (whatever the ratio: the caller judges it), 1 otherwise.
Standard library only.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--build", required=True, help="build folder (bin/trainer, tools/relay/weightsync-relay)")
    p.add_argument("--start", required=True, help="a folder with the policy (zorplex-sft --out)")
    p.add_argument("--out", required=True, help="folder for the runs and trainer-step.json")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--groups", type=int, default=8, help="synthetic groups per step")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--readers", type=int, default=2)
    p.add_argument("--transport", default="tcp", choices=["tcp", "shm"], help="the readers' transport")
    p.add_argument("--pairs", type=int, default=2, help="runs per arm (ABBA order)")
    p.add_argument("--threads", type=int, default=0, help="the trainer's torch threads (0: all CPUs)")
    p.add_argument("--run-timeout", type=float, default=300.0, help="seconds a run may take")
    a = p.parse_args()
    if a.steps < 3 or a.pairs < 1 or a.readers < 1:
        p.error("--steps >= 3, --pairs >= 1, --readers >= 1")
    return a


def find(build, *candidates):
    for c in candidates:
        path = os.path.join(build, c)
        if os.access(path, os.X_OK):
            return path
    raise SystemExit(f"trainer_step_figure: none of {candidates} under {build}: build them first")


def read_jsonl(path):
    events = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return events


def wait_for(predicate, deadline, what):
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


SUMMARY = re.compile(r"summary: version (\d+), (\d+) forwarded")


def relay_forwarded(log):
    """Versions a relay forwarded, from its last summary line (0 before any)."""
    try:
        with open(log) as f:
            text = f.read()
    except OSError:
        return 0
    forwarded = [int(m.group(2)) for m in SUMMARY.finditer(text)]
    return forwarded[-1] if forwarded else 0


def one_run(a, trainer, relay, arm, index):
    run_dir = os.path.join(a.out, f"run{index}-{arm}")
    subprocess.run(["rm", "-rf", run_dir], check=True)
    os.makedirs(run_dir)
    address_file = os.path.join(run_dir, "address.json")
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    cmd = [trainer, "--start", a.start, "--out", run_dir, "--steps", str(a.steps), "--synthetic-groups",
           str(a.groups), "--synthetic-group-size", str(a.group_size), "--threads", str(a.threads),
           "--device", a.device, "--address-file", address_file, "--checkpoint-every", "0"]
    if arm == "B":  # the trainer steps once every reader has pulled its starting version
        cmd += ["--synthetic-wait-readers", str(a.readers)]
    deadline = time.monotonic() + a.run_timeout
    relays, relay_logs = [], []
    with open(os.path.join(run_dir, "trainer.log"), "w") as tlog:
        proc = subprocess.Popen(cmd, stdout=tlog, stderr=subprocess.STDOUT, env=env)
        try:
            if arm == "B":
                def trainer_address():
                    if proc.poll() is not None:
                        raise TimeoutError(f"the trainer exited ({proc.returncode}) before writing its address")
                    if not os.path.exists(address_file):
                        return None
                    with open(address_file) as f:  # written whole (temporary file + rename)
                        return json.load(f).get("weights")
                address = wait_for(trainer_address, deadline, "the trainer never wrote its address file")
                renv = dict(env, WEIGHTSYNC_TRANSPORT=a.transport)
                for r in range(a.readers):
                    log = os.path.join(run_dir, f"relay{r}.log")
                    relay_logs.append(log)
                    with open(log, "w") as rlog:
                        relays.append(subprocess.Popen([relay, "--upstream", address, "--summary-seconds", "0.2"],
                                                       stdout=rlog, stderr=subprocess.STDOUT, env=renv))
            remaining = max(1.0, deadline - time.monotonic())
            rc = proc.wait(timeout=remaining)
        except (TimeoutError, subprocess.TimeoutExpired) as e:
            proc.kill()
            proc.wait()
            for r in relays:
                r.kill()
            return {"arm": arm, "dir": run_dir, "error": f"timed out: {e}"}
        finally:
            time.sleep(0.5 if relays else 0)  # let the relays log the last versions
            for r in relays:
                if r.poll() is None:
                    r.send_signal(signal.SIGTERM)
            for r in relays:
                try:
                    r.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    r.kill()
    if rc != 0:
        return {"arm": arm, "dir": run_dir, "error": f"trainer exit {rc}; see {run_dir}/trainer.log"}
    events = read_jsonl(os.path.join(run_dir, "trainer.jsonl"))
    steps = [e for e in events if e.get("event") == "step"][1:]  # the first is a warm-up
    times = [e["train_seconds"] + e["publish_seconds"] for e in steps]
    publishes = [e for e in events if e.get("event") == "publish"]
    out = {"arm": arm, "dir": run_dir, "steps_measured": len(times),
           "versions_published": len(publishes),
           "median_seconds": statistics.median(times) if times else None,
           "relays_forwarded": [relay_forwarded(log) for log in relay_logs]}
    if len(times) < 2:
        out["error"] = f"only {len(times)} steps measured: raise --steps"
    return out


def main():
    a = parse_args()
    trainer = find(a.build, "bin/trainer", "trainer/trainer")
    relay = find(a.build, "bin/weightsync-relay", "tools/relay/weightsync-relay")
    os.makedirs(a.out, exist_ok=True)
    order = []
    for p in range(a.pairs):
        order += ["A", "B"] if p % 2 == 0 else ["B", "A"]
    runs = []
    for i, arm in enumerate(order):
        r = one_run(a, trainer, relay, arm, i)
        runs.append(r)
        med = r.get("median_seconds")
        print(f"trainer step run {i} {arm}: "
              + (f"median {1000 * med:.2f} ms over {r['steps_measured']} steps" if med else "no median")
              + (f", relays forwarded {r['relays_forwarded']} of {r['versions_published']} versions"
                 if arm == "B" else "")
              + (f"; ERROR {r['error']}" if "error" in r else ""), flush=True)

    def arm_median(arm):
        v = [r["median_seconds"] for r in runs if r["arm"] == arm and r.get("median_seconds")]
        return statistics.median(v) if v else None
    alone, readers = arm_median("A"), arm_median("B")
    result = {"ratio": readers / alone if alone and readers else None, "alone_seconds": alone,
              "readers_seconds": readers, "readers": a.readers, "transport": a.transport, "device": a.device,
              "groups": a.groups, "group_size": a.group_size, "steps": a.steps, "pairs": a.pairs, "runs": runs}
    with open(os.path.join(a.out, "trainer-step.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    if result["ratio"] is not None:
        print(f"trainer step: {1000 * readers:.2f} ms with {a.readers} readers ({a.transport}) against "
              f"{1000 * alone:.2f} ms alone = {result['ratio']:.3f}x (median of {a.pairs} runs each)")
    return 0 if all("error" not in r for r in runs) and result["ratio"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
