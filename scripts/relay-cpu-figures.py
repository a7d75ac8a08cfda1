#!/usr/bin/python3
"""The figures of docs/perf/relay_cpu.md: a relay's CPU-s per GiB forwarded and the
N-hop chain's time-to-all, with a relay switch off (A) and on (B) in the same run.

Runs `weightsync-bench fanout --topologies chain` PAIRS times per arm in ABBA order
(A B, B A, A B, ...), so drift on a shared machine hits both arms alike. The switch
reaches every relay through the environment (the bench's roles inherit it):
  --switch prefault   WSBENCH_RELAY_PREFAULT=0 (A) / 1 (B): RelayOptions::prefault_slots
  --switch rcvlowat   WEIGHTSYNC_TCP_RCVLOWAT=0 (A) / 1 (B): tcp receives wake once 1 MiB is
                      queued (relays and the leaf; the relays' slots are prefaulted in both)
  --switch all        both: A is the relay as it was before either change

Per run it reads fanout.json (the bench's own accounting: each process's user+sys over
the measured versions, time-to-all, L from iperf3) and, from /proc, the relay processes'
threads over the same versions (after the warm-up line, until the last version's line):
  forwarding = the thread named ws-relay-fwd (upstream receive, verify, watermark),
  serving    = the other threads but the main one (the relay's Publisher: downstream send),
so CPU-s per GiB = relay process CPU / (relays x R x S). Medians over the runs of an arm.

Needs root (network namespaces, tc), like the bench. Example (the issue's figure):
  scripts/relay-cpu-figures.py --pairs 3 --out build/relay-cpu
  scripts/relay-cpu-figures.py --pairs 3 --size 64MiB --subscribers 4 --rate 1gbit
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
# --switch: the environment variable, its value for arm A (off) and for arm B (on).
SWITCHES = {
    "prefault": [("WSBENCH_RELAY_PREFAULT", "0", "1")],
    "rcvlowat": [("WEIGHTSYNC_TCP_RCVLOWAT", "0", "1")],
    "all": [("WSBENCH_RELAY_PREFAULT", "0", "1"), ("WEIGHTSYNC_TCP_RCVLOWAT", "0", "1")],
}


def relay_threads():
    """{tid: (pid, comm, cpu_s)} of every fanout-relay process's threads."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"fanout-relay" not in f.read():
                    continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2:].split()
                cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    status = f.read()
                wakes = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
                out[int(tid)] = (int(pid), comm, cpu, wakes)
        except (OSError, ValueError):
            continue
    return out


def split(before, after):
    """CPU-s by category between two snapshots (threads that ended are lost: none should)."""
    cats = {"forwarding": 0.0, "serving": 0.0, "main": 0.0, "forwarding_wakeups": 0, "serving_wakeups": 0}
    for tid, (pid, comm, cpu, wakes) in after.items():
        base = before.get(tid, (pid, comm, 0.0, 0))
        cat = "forwarding" if comm == "ws-relay-fwd" else "main" if tid == pid else "serving"
        cats[cat] += cpu - base[2]
        if cat != "main":
            cats[cat + "_wakeups"] += wakes - base[3]
    return cats


def size_bytes(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * scale)
    return int(text)


def run_once(args, arm, index):
    env = dict(os.environ)
    for name, off, on in SWITCHES[args.switch]:
        env[name] = off if arm == "A" else on
    out = os.path.join(args.out, f"{index:02d}-{arm}")
    cmd = [args.bench, "fanout", "--subscribers", str(args.subscribers), "--sizes", args.size,
           "--rate", args.rate, "--topologies", "chain", "--runs", str(args.runs),
           "--baselines", "iperf3", "--out", out]
    if args.relay_chunk:
        cmd += ["--relay-chunk", args.relay_chunk]
    latest = {}
    stop = threading.Event()

    def poll():  # keeps the newest snapshot: a fallback if a line is missed
        while not stop.is_set():
            snap = relay_threads()
            if snap:
                latest["snap"] = snap
            time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    before = after = None
    last = f"v{args.runs + 1}:"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if "[warm-up]" in line and before is None:
            before = relay_threads()
        elif last in line and before is not None and after is None:
            after = relay_threads()
    rc = proc.wait()
    stop.set()
    poller.join()
    if rc != 0:
        sys.exit(f"relay-cpu-figures: {' '.join(cmd)} failed (rc {rc})")
    with open(os.path.join(out, "fanout.json")) as f:
        result = json.load(f)
    row = next(r for r in result["rows"] if r["topology"] == "chain")
    if row.get("error"):
        sys.exit(f"relay-cpu-figures: chain row failed: {row['error']}")
    relays = [c["cpu_s"] for c in row["cpu"] if c["role"] == "relay"]
    size = row["size"]
    gib = len(relays) * row["runs"] * size / float(1 << 30)
    link = result["iperf3"]["bytes_per_s"]
    cats = split(before or {}, after or latest.get("snap", {}))
    return {
        "arm": arm,
        "relay_cpu_s_per_gib": sum(relays) / gib,
        "forwarding_s_per_gib": cats["forwarding"] / gib,
        "serving_s_per_gib": cats["serving"] / gib,
        # voluntary context switches (sleeps: waits for data or buffer space) per MiB
        "forwarding_wakeups_per_mib": cats["forwarding_wakeups"] / (gib * 1024),
        "serving_wakeups_per_mib": cats["serving_wakeups"] / (gib * 1024),
        "time_to_all_s": row["time_to_all_s"],
        "x_s_over_l": row["time_to_all_s"] / (size / link),
        "machine_busy": row["machine_busy"],
        "publisher_cpu_s": sum(c["cpu_s"] for c in row["cpu"] if c["role"] == "publisher"),
        "leaf_cpu_s": sum(c["cpu_s"] for c in row["cpu"] if c["role"] == "subscriber"),
        "out": out,
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default=os.path.join(here, "..", "build", "bench", "weightsync-bench"))
    p.add_argument("--pairs", type=int, default=3, help="runs per arm (ABBA order)")
    p.add_argument("--switch", choices=sorted(SWITCHES), default="prefault")
    p.add_argument("--subscribers", type=int, default=8)
    p.add_argument("--size", default="256MiB")
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--runs", type=int, default=3, help="measured versions per run (R)")
    p.add_argument("--relay-chunk", default="")
    p.add_argument("--out", default=os.path.join(here, "..", "build", "relay-cpu"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    order = []
    for i in range(args.pairs):
        order += ["A", "B"] if i % 2 == 0 else ["B", "A"]
    runs = []
    for index, arm in enumerate(order):
        r = run_once(args, arm, index)
        runs.append(r)
        print(f"run {index} {arm}: relay {r['relay_cpu_s_per_gib']:.3f} CPU-s/GiB (forwarding "
              f"{r['forwarding_s_per_gib']:.3f}, serving {r['serving_s_per_gib']:.3f}; wakeups/MiB "
              f"{r['forwarding_wakeups_per_mib']:.1f} / {r['serving_wakeups_per_mib']:.1f}); time-to-all "
              f"{r['time_to_all_s']:.3f} s = {r['x_s_over_l']:.2f} x S/L; machine busy "
              f"{100 * r['machine_busy']:.0f}%", flush=True)
    summary = {}
    for arm in ("A", "B"):
        mine = [r for r in runs if r["arm"] == arm]
        summary[arm] = {k: statistics.median(r[k] for r in mine)
                        for k in ("relay_cpu_s_per_gib", "forwarding_s_per_gib", "serving_s_per_gib",
                                  "forwarding_wakeups_per_mib", "serving_wakeups_per_mib",
                                  "time_to_all_s", "x_s_over_l", "machine_busy")}
        summary[arm]["n"] = len(mine)
    print(f"\nmedians ({args.subscribers} subscribers, chain, {args.size}, {args.rate}, R = {args.runs}; "
          f"switch {args.switch}: A = off, B = on):")
    print("| arm | runs | relay CPU-s/GiB | forwarding | serving | wakeups/MiB fwd / serve | time-to-all (s) "
          "| x S/L | machine busy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arm in ("A", "B"):
        s = summary[arm]
        print(f"| {arm} | {s['n']} | {s['relay_cpu_s_per_gib']:.3f} | {s['forwarding_s_per_gib']:.3f} | "
              f"{s['serving_s_per_gib']:.3f} | {s['forwarding_wakeups_per_mib']:.1f} / "
              f"{s['serving_wakeups_per_mib']:.1f} | {s['time_to_all_s']:.3f} | {s['x_s_over_l']:.2f} | "
              f"{100 * s['machine_busy']:.0f}% |")
    with open(os.path.join(args.out, "relay_cpu.json"), "w") as f:
        json.dump({"args": vars(args), "runs": runs, "medians": summary}, f, indent=1)
    print(f"wrote {os.path.join(args.out, 'relay_cpu.json')}")


if __name__ == "__main__":
    main()
