#!/usr/bin/env python3
"""The Python binding's figures, measured in one run (docs/perf/python.md).

(a) Pull bandwidth. One Python Publisher serves a model of --size bytes (16
    tensors: 14 float32, 2 bfloat16; every byte changes every version). Per
    transport, a Python subscriber process (torch tensors, bound once) and a
    C++ subscriber process (bench/python_pull_reader.cc: its own per-tensor
    buffers, prepared once) pull the same versions, interleaved: each version
    is pulled by both, and the order alternates every version (Python first,
    then C++ first), so drift hits both. Each side times its own call: the
    library's PullResult.seconds (transfer time, waiting excluded) and the
    wall time around the call (perf_counter in Python, steady_clock in C++).
    The Python side's bytes are checked bit-exact against the expected tensors
    for the first and the last measured version; the C++ side's by word sums.
(b) A pull with nothing new: --noop-calls calls of ``sub.pull(binding)``
    returning None, each timed, in blocks alternating with the same loop in
    C++; plus two diagnostic Python loops (the pybind11 core called directly,
    and the public call from a worker thread, which has no Ctrl-C poll).
(c) Ctrl-C: a Python child waits in ``pull(binding, wait=60)``; after a random
    delay the parent sends SIGINT and notes CLOCK_MONOTONIC (time.monotonic,
    shared by processes); the child notes it when it catches
    KeyboardInterrupt. Then the parent publishes a new version and the child
    pulls it (checked bit-exact): the subscriber is still usable.

Run with the Python the package was built for and the package on PYTHONPATH::

    PYTHONPATH=build/python /usr/bin/python3 bench/python/python_figures.py --json out.json

The C++ reader is <build>/bench/weightsync-python-pull-reader (built with the
bench); if it is missing, it is compiled from bench/python_pull_reader.cc (and
the role loop it serves with: bench/role_loop.cc, tools/common/line_stream.cc)
with c++ against <build>'s libweightsync (the same shared library the package
loads). Progress goes to stderr; the table to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import queue
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_TENSORS = 16
BF16_EVERY = 8  # tensors 7 and 15 are bfloat16, the rest float32


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 256MiB, 8MiB, 1GiB)")
    unit = (m.group(2) or "B").upper().rstrip("B").rstrip("I")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[unit]
    size = int(float(m.group(1)) * scale)
    if size % (N_TENSORS * 4096) != 0 or size <= 0:
        raise argparse.ArgumentTypeError(f"--size must be a positive multiple of {N_TENSORS * 4096} bytes")
    return size


def human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def log(message: str) -> None:
    print(f"# {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the model

def model_specs(size: int) -> List[Tuple[str, str, Tuple[int, ...]]]:
    """(name, dtype, shape) of the 16 tensors: size / 16 bytes each, rows of 1024 elements."""
    per = size // N_TENSORS
    specs = []
    for i in range(N_TENSORS):
        dtype = "bfloat16" if i % BF16_EVERY == BF16_EVERY - 1 else "float32"
        elsize = 2 if dtype == "bfloat16" else 4
        specs.append((f"layers.{i}.weight", dtype, (per // elsize // 1024, 1024)))
    return specs


def base_tensor(index: int, dtype: str, shape: Sequence[int]):
    """Tensor `index`'s fixed random part (the same in every process: seeded CPU randn)."""
    import torch

    g = torch.Generator().manual_seed(1000 + index)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float32).to(getattr(torch, dtype))


def fill_version(out, base, version: int) -> None:
    """Version v of a tensor: base + v, computed in the tensor's dtype (bit-for-bit reproducible)."""
    import torch

    torch.add(base, version, out=out)


def int_view(t):
    import torch

    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def word_sums(t) -> Tuple[int, int]:
    """The C++ reader's check of one tensor: wrapping sums of its 64-bit words, plain and index-weighted."""
    import numpy as np

    words = int_view(t).reshape(-1).numpy().view(np.uint64)
    weights = np.arange(1, words.size + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(words.sum(dtype=np.uint64)), int((words * weights).sum(dtype=np.uint64))


# ---------------------------------------------------------------- statistics

def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    rank = max(1, math.ceil(q / 100.0 * len(s)))
    return s[rank - 1]


# ---------------------------------------------------------------- child processes

class Child:
    """A child process answering one line per command line (stdout), read by a thread."""

    def __init__(self, name: str, argv: List[str], env: Optional[Dict[str, str]] = None):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1, env=env)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, word: str, timeout: float = 120.0) -> List[str]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.name}: no answer within {timeout:.0f} s (expected {word})") from None
        if line is None:
            raise RuntimeError(f"{self.name}: exited (code {self.proc.wait()}) while {word} was expected")
        fields = line.split()
        if not fields or fields[0] != word:
            raise RuntimeError(f"{self.name}: expected {word}, got: {line[:500]}")
        return fields[1:]

    def ask(self, line: str, word: str, timeout: float = 120.0) -> List[str]:
        self.send(line)
        return self.expect(word, timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("QUIT")
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()


def find_cxx_reader(build: str, explicit: Optional[str]) -> str:
    if explicit:
        return explicit
    built = os.path.join(build, "bench", "weightsync-python-pull-reader")
    if os.access(built, os.X_OK):
        return built
    # Not built with the bench: compile it against the build's shared library.
    out_dir = os.path.join(build, "python-figures")
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "weightsync-python-pull-reader")
    bench, common = os.path.join(REPO, "bench"), os.path.join(REPO, "tools", "common")
    sources = [os.path.join(bench, "python_pull_reader.cc"), os.path.join(bench, "role_loop.cc"),
               os.path.join(common, "line_stream.cc")]
    headers = [os.path.join(bench, "role_loop.h"), os.path.join(bench, "role_support.h"),
               os.path.join(common, "line_stream.h")]
    if os.path.exists(out) and os.path.getmtime(out) >= max(os.path.getmtime(f) for f in sources + headers):
        return out
    libdir = os.path.join(build, "libweightsync")
    cmd = [os.environ.get("CXX", "c++"), "-std=c++17", "-O2", "-I", os.path.join(REPO, "libweightsync", "include"),
           "-I", os.path.join(build, "generated", "include"), "-I", bench, "-I", common, *sources, "-o", out,
           "-L", libdir, "-lweightsync", f"-Wl,-rpath,{libdir}", "-pthread"]
    log("compiling the C++ reader: " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    return out


# ---------------------------------------------------------------- child roles

def _connect(address: str, transport: str):
    import weightsync

    sub = weightsync.Subscriber(address, transport=transport, name="python-figures")
    return sub


def _destination(sub):
    """Zeroed torch tensors shaped like the publisher's layout (an engine's parameters)."""
    import torch

    return {t.name: torch.zeros(t.shape, dtype=getattr(torch, t.dtype)) for t in sub.layout}


class _Expected:
    """The expected tensors of a version, regenerated from the seeds (bases cached)."""

    def __init__(self, sub):
        self.specs = [(t.name, t.dtype, t.shape) for t in sub.layout]
        self.bases = None

    def check(self, tensors: Dict[str, Any], version: int) -> Tuple[int, int]:
        """(mismatched elements, elements), comparing bit patterns."""
        import torch

        if self.bases is None:
            self.bases = [base_tensor(i, d, s) for i, (_, d, s) in enumerate(self.specs)]
        bad = total = 0
        for (name, _, _), base in zip(self.specs, self.bases):
            want = torch.empty_like(base)
            fill_version(want, base, version)
            bad += int((int_view(tensors[name]) != int_view(want)).sum())
            total += want.numel()
        return bad, total


def role_py_reader(args: argparse.Namespace) -> int:
    """The Python subscriber of (a) and (b): PULL, NOOP n mode, VERIFY v, QUIT."""
    sub = _connect(args.address, args.transport)
    tensors = _destination(sub)
    binding = sub.bind(tensors)
    expected = _Expected(sub)
    print(f"READY {sub.transport} {sub.layout.total_bytes} {len(sub.layout)} {int(sub.publisher_checksums)}",
          flush=True)
    for line in sys.stdin:
        fields = line.split()
        if not fields:
            continue
        command = fields[0]
        try:
            if command == "PULL":
                t0 = time.perf_counter()
                r = sub.pull(binding, wait=30)
                t1 = time.perf_counter()
                if r is None:
                    print("ERROR pull returned None (no version within 30 s)", flush=True)
                    continue
                print(f"PULLED {r.version} {r.bytes} {r.seconds!r} {r.wait_seconds!r} {t1 - t0!r} {r.retries}",
                      flush=True)
            elif command == "NOOP":
                n, mode = int(fields[1]), fields[2]
                samples = _noop_loop(sub, binding, n, mode)
                print("NOOP " + " ".join(map(str, samples)), flush=True)
            elif command == "VERIFY":
                bad, total = expected.check(tensors, int(fields[1]))
                print(f"VERIFIED {sub.held_version} {bad} {total}", flush=True)
            elif command == "QUIT":
                break
            else:
                print(f"ERROR unknown command {command!r}", flush=True)
        except Exception as e:  # report, keep serving
            print(f"ERROR {type(e).__name__}: {e}".replace("\n", " "), flush=True)
    sub.close()
    return 0


def _noop_loop(sub, binding, n: int, mode: str) -> List[int]:
    """n timed pulls that find nothing new. mode: api (sub.pull on this thread), core (the pybind11
    core directly), thread (sub.pull on a worker thread: no Ctrl-C poll)."""
    clock = time.perf_counter_ns
    samples = [0] * n
    errors: List[str] = []

    def api() -> None:
        pull = sub.pull
        for i in range(n):
            t0 = clock()
            r = pull(binding)
            samples[i] = clock() - t0
            if r is not None:
                errors.append(f"a pull with nothing new delivered version {r.version}")
                return

    if mode == "api":
        api()
    elif mode == "core":
        pull, plan = sub._core.pull, binding._plan
        for i in range(n):
            t0 = clock()
            r = pull(plan, 0.0, None, None)
            samples[i] = clock() - t0
            if r is not None:
                raise RuntimeError(f"a pull with nothing new delivered version {r.version}")
    elif mode == "thread":
        worker = threading.Thread(target=api)
        worker.start()
        worker.join()
    else:
        raise ValueError(f"unknown NOOP mode {mode!r}")
    if errors:
        raise RuntimeError(errors[0])
    return samples


def role_py_sigint(args: argparse.Namespace) -> int:
    """The Python subscriber of (c): WAIT (pull(wait=60) until SIGINT), PULL v, QUIT."""
    sub = _connect(args.address, args.transport)
    tensors = _destination(sub)
    binding = sub.bind(tensors)
    expected = _Expected(sub)
    first = sub.pull(binding, wait=30)
    print(f"READY {sub.transport} {first.version if first else 0}", flush=True)
    try:
        for line in sys.stdin:
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "WAIT":
                print("WAITING", flush=True)
                t_enter = time.monotonic()
                try:
                    r = sub.pull(binding, wait=60)
                    print(f"ERROR the pull returned ({r!r}) instead of being interrupted", flush=True)
                except KeyboardInterrupt:
                    t_caught = time.monotonic()
                    print(f"INTERRUPTED {t_caught!r} {t_enter!r}", flush=True)
            elif fields[0] == "PULL":
                want = int(fields[1])
                t0 = time.perf_counter()
                r = sub.pull(binding, wait=10)
                t1 = time.perf_counter()
                if r is None:
                    print(f"ERROR no version within 10 s after the interrupt (wanted {want})", flush=True)
                    continue
                bad, total = expected.check(tensors, r.version)
                print(f"PULLED {r.version} {bad} {total} {t1 - t0!r}", flush=True)
            elif fields[0] == "QUIT":
                break
    except KeyboardInterrupt:
        print("ERROR SIGINT arrived outside the pull", flush=True)
        return 1
    sub.close()
    return 0


# ---------------------------------------------------------------- the orchestrator

class Model:
    """The publisher's side: the tensors, their bases, the Publisher."""

    def __init__(self, size: int, slots: int):
        import weightsync

        self.specs = model_specs(size)
        self.bases = [base_tensor(i, d, s) for i, (_, d, s) in enumerate(self.specs)]
        self.current = {name: base.clone() for (name, _, _), base in zip(self.specs, self.bases)}
        self.layout = weightsync.Layout.from_state_dict(self.current)
        self.pub = weightsync.Publisher(self.layout, slots=slots)
        self.version = 0
        self.publish_seconds: List[float] = []

    def publish_next(self) -> int:
        self.version += 1
        for (name, _, _), base in zip(self.specs, self.bases):
            fill_version(self.current[name], base, self.version)
        r = self.pub.publish(self.current, self.version)
        self.publish_seconds.append(r.seconds)
        return self.version

    def sums(self) -> List[int]:
        out: List[int] = []
        for name, _, _ in self.specs:
            out.extend(word_sums(self.current[name]))
        return out


def child_env(build_python: str) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = build_python + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def py_child(args, role: str, address: str, transport: str, build_python: str) -> Child:
    argv = [sys.executable, os.path.abspath(__file__), "--role", role, "--address", address,
            "--transport-one", transport]
    return Child(f"python {role} ({transport})", argv, child_env(build_python))


LABELS = {"python": "Python", "cxx": "C++", "a": "A", "b": "B"}


def _pull(child: Child) -> Dict[str, Any]:
    """One PULL: the child's own timing of its pull call."""
    f = child.ask("PULL", "PULLED", 120)
    version, nbytes = int(f[0]), int(f[1])
    seconds, wait_s, wall = float(f[2]), float(f[3]), float(f[4])
    return {"version": version, "bytes": nbytes, "seconds": seconds, "wait_seconds": wait_s,
            "wall_seconds": wall, "retries": int(f[5]), "gbps": nbytes / seconds / 1e9,
            "gbps_wall": nbytes / wall / 1e9}


def _interleave(args, model: "Model", transport: str, sides: List[Tuple[str, Child]],
                verify=None) -> Dict[str, List[Dict[str, Any]]]:
    """--warmup + --runs versions, each pulled by both sides, the order alternating every version.
    verify(v) runs after the first and the last measured version (outside the timed calls)."""
    samples: Dict[str, List[Dict[str, Any]]] = {key: [] for key, _ in sides}
    rounds = args.warmup + args.runs
    for r in range(rounds):
        v = model.publish_next()
        order = sides if r % 2 == 0 else list(reversed(sides))
        got = {}
        for position, (key, child) in enumerate(order):
            sample = _pull(child)
            if sample["version"] != v:
                raise RuntimeError(f"{LABELS[key]} pulled version {sample['version']}, expected {v}")
            sample["order"] = position
            got[key] = sample
        measured = r >= args.warmup
        if measured:
            for key, _ in sides:
                samples[key].append(got[key])
        log(f"{transport} {'run ' + str(r - args.warmup + 1) if measured else 'warmup ' + str(r + 1)}: v{v}  " +
            "  ".join(f"{LABELS[key]} {got[key]['gbps']:.2f} GB/s ({got[key]['wall_seconds'] * 1e3:.1f} ms wall)"
                      for key, _ in sides) +
            f"  [{' then '.join(LABELS[key] for key, _ in order)}]")
        if verify is not None and measured and r in (args.warmup, rounds - 1):
            verify(v)
    return samples


def _cxx_child(args, reader: str, model: "Model", transport: str, name: str = "C++ reader") -> Child:
    return Child(f"{name} ({transport})", [reader, model.pub.address, "--transport", transport,
                                           "--memory", args.cxx_memory])


def measure_transport(args, model: "Model", transport: str, reader: str, build_python: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {"transport": transport}
    py = py_child(args, "py-reader", model.pub.address, transport, build_python)
    cxx = _cxx_child(args, reader, model, transport)
    try:
        py_ready = py.expect("READY", 120)
        cxx_ready = cxx.expect("READY", 120)
        if py_ready[0] != transport or cxx_ready[0] != transport:
            raise RuntimeError(f"negotiated {py_ready[0]} (Python) and {cxx_ready[0]} (C++), not {transport}")
        total = int(py_ready[1])
        out["publisher_checksums"] = bool(int(py_ready[3]))
        checks: List[Dict[str, Any]] = []
        samples = _interleave(args, model, transport, [("python", py), ("cxx", cxx)],
                              verify=lambda v: _verify(py, cxx, model, v, checks))
        out["pull"] = _pull_summary(samples, total, "python", "cxx")
        out["pull"]["checks"] = checks
        log(f"{transport}: pull medians python {out['pull']['python']['gbps_median']:.2f} GB/s, "
            f"C++ {out['pull']['cxx']['gbps_median']:.2f} GB/s, ratio {out['pull']['ratio']:.3f}")

        # (b) nothing new: alternating blocks, then the diagnostic Python loops.
        blocks = max(1, args.noop_blocks)
        per_block = max(1, args.noop_calls // blocks)
        noop: Dict[str, List[int]] = {"python": [], "cxx": [], "python_core": [], "python_thread": []}
        for b in range(blocks):
            pair = [("python", py, "NOOP %d api" % per_block), ("cxx", cxx, "NOOP %d" % per_block)]
            if b % 2:
                pair.reverse()
            for side, child, line in pair:
                noop[side].extend(int(x) for x in child.ask(line, "NOOP", 600))
        if args.noop_diagnostics:
            for mode in ("core", "thread"):
                noop["python_" + mode].extend(int(x) for x in py.ask(f"NOOP {per_block} {mode}", "NOOP", 600))
        out["noop"] = {k: _noop_summary(v) for k, v in noop.items() if v}
        log(f"{transport}: nothing-new pull median python {out['noop']['python']['median_us']:.1f} us "
            f"(p99 {out['noop']['python']['p99_us']:.1f}), C++ {out['noop']['cxx']['median_us']:.1f} us "
            f"(p99 {out['noop']['cxx']['p99_us']:.1f})")
    finally:
        py.close()
        cxx.close()
    return out


def measure_a_a(args, model: "Model", transport: str, reader: str, build_python: str) -> Dict[str, Any]:
    """The method's noise floor: two readers of the same kind (--a-a), measured as (a) measures Python
    against C++. Their ratio would be 1.000 on a quiet machine."""
    if args.a_a == "cxx":
        a, b = (_cxx_child(args, reader, model, transport, f"C++ reader {x}") for x in "AB")
    else:
        a, b = (py_child(args, "py-reader", model.pub.address, transport, build_python) for _ in "AB")
    try:
        ready = [a.expect("READY", 120), b.expect("READY", 120)]
        if any(r[0] != transport for r in ready):
            raise RuntimeError(f"negotiated {ready[0][0]} and {ready[1][0]}, not {transport}")
        samples = _interleave(args, model, transport, [("a", a), ("b", b)])
        summary = _pull_summary(samples, int(ready[0][1]), "a", "b")
        summary["kind"] = args.a_a
        log(f"{transport}: A/A ({args.a_a}) medians A {summary['a']['gbps_median']:.2f} GB/s, "
            f"B {summary['b']['gbps_median']:.2f} GB/s, ratio {summary['ratio']:.3f}")
        return summary
    finally:
        a.close()
        b.close()


def _verify(py: Child, cxx: Child, model: "Model", v: int, checks: List[Dict[str, Any]]):
    f = py.ask(f"VERIFY {v}", "VERIFIED", 300)
    held, bad, count = int(f[0]), int(f[1]), int(f[2])
    want = model.sums()
    got = [int(x) for x in cxx.ask("SUMS", "SUMS", 300)]
    check = {"version": v, "python_held": held, "python_mismatched_elements": bad, "python_elements": count,
             "python_bit_exact": held == v and bad == 0, "cxx_sums_match": got == want}
    checks.append(check)
    log(f"check v{v}: python bit-exact {check['python_bit_exact']} ({bad} of {count} elements differ), "
        f"C++ word sums match {check['cxx_sums_match']}")
    if not check["python_bit_exact"] or not check["cxx_sums_match"]:
        raise RuntimeError(f"the bytes of version {v} are wrong: {check}")


def _pull_summary(samples: Dict[str, List[Dict[str, Any]]], total: int, first: str, second: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {"bytes": total}
    for side in (first, second):
        s = samples[side]
        out[side] = {
            "runs": len(s),
            "gbps_median": median([x["gbps"] for x in s]),
            "gbps_wall_median": median([x["gbps_wall"] for x in s]),
            "seconds_median": median([x["seconds"] for x in s]),
            "wall_seconds_median": median([x["wall_seconds"] for x in s]),
            "wall_minus_seconds_median_us": median([(x["wall_seconds"] - x["seconds"]) * 1e6 for x in s]),
            "gbps_min": min(x["gbps"] for x in s),
            "gbps_max": max(x["gbps"] for x in s),
            "samples": s,
        }
    x, y = out[first], out[second]
    out["ratio"] = x["gbps_median"] / y["gbps_median"]
    out["ratio_wall"] = x["gbps_wall_median"] / y["gbps_wall_median"]
    out["ratio_paired_median"] = median([p["gbps"] / c["gbps"] for p, c in zip(samples[first], samples[second])])
    return out


def _noop_summary(ns: List[int]) -> Dict[str, Any]:
    us = [x / 1000.0 for x in ns]
    return {"calls": len(us), "median_us": median(us), "p99_us": percentile(us, 99), "p90_us": percentile(us, 90),
            "mean_us": statistics.fmean(us), "max_us": max(us), "samples_ns": ns}


def measure_sigint(args, model: "Model", transport: str, build_python: str) -> Dict[str, Any]:
    rng = random.Random(args.seed)
    child = py_child(args, "py-sigint", model.pub.address, transport, build_python)
    trials: List[Dict[str, Any]] = []
    try:
        ready = child.expect("READY", 120)
        if ready[0] != transport:
            raise RuntimeError(f"negotiated {ready[0]}, not {transport}")
        for i in range(args.runs):
            child.ask("WAIT", "WAITING", 60)
            delay = rng.uniform(args.sigint_min_delay, args.sigint_max_delay)
            time.sleep(delay)
            t_send = time.monotonic()
            os.kill(child.proc.pid, signal.SIGINT)
            f = child.expect("INTERRUPTED", 30)
            t_caught, t_enter = float(f[0]), float(f[1])
            v = model.publish_next()
            p = child.ask(f"PULL {v}", "PULLED", 120)
            trial = {"delay_s": delay, "t_enter": t_enter, "t_send": t_send, "t_caught": t_caught,
                     "latency_ms": (t_caught - t_send) * 1e3, "waited_before_signal_s": t_send - t_enter,
                     "next_version": v, "pulled_version": int(p[0]), "mismatched_elements": int(p[1]),
                     "elements": int(p[2]), "next_pull_wall_s": float(p[3])}
            trial["usable"] = trial["pulled_version"] == v and trial["mismatched_elements"] == 0
            trials.append(trial)
            log(f"{transport} Ctrl-C trial {i + 1}: signal after {delay * 1e3:.0f} ms in the pull, "
                f"KeyboardInterrupt {trial['latency_ms']:.2f} ms later; next pull v{trial['pulled_version']} "
                f"{'bit-exact' if trial['usable'] else 'WRONG'}")
    finally:
        child.close()
    lat = [t["latency_ms"] for t in trials]
    return {"trials": trials, "median_ms": median(lat), "max_ms": max(lat) if lat else float("nan"),
            "usable": sum(t["usable"] for t in trials), "count": len(trials)}


def machine_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {"hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            info["mem_total_kib"] = int(f.readline().split()[1])
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            info["transparent_hugepage"] = f.read().strip()
    except OSError:
        pass
    return info


def _library_stamps(build_python: str) -> Dict[str, str]:
    """The shared objects both sides load, with their modification times (a rebuild mid-run shows)."""
    import glob

    out = {}
    pattern_ext = os.path.join(build_python, "weightsync", "_weightsync*.so")
    pattern_lib = os.path.join(os.path.dirname(build_python), "libweightsync", "libweightsync.so.*.*")
    for path in glob.glob(pattern_ext) + glob.glob(pattern_lib):
        out[path] = datetime.datetime.fromtimestamp(os.path.getmtime(path)).isoformat(timespec="seconds")
    return out


def print_table(result: Dict[str, Any]) -> None:
    size = human(result["config"]["size"])
    runs = result["config"]["runs"]
    if result["config"].get("a_a"):
        kind = LABELS[result["config"]["a_a"]]
        print(f"\n(A/A) Pull {size}: two {kind} readers A and B interleaved as in (a), {runs} runs each; medians")
        print(f"{'transport':<10}{'A GB/s':>9}{'B GB/s':>9}{'A/B':>8}   {'A wall':>8}{'B wall':>8}{'A/B':>8}   "
              f"{'paired':>7}")
        for t in result["transports"]:
            if "error" in t:
                print(f"{t['transport']:<10}  error: {t['error']}")
                continue
            p = t["a_a"]
            print(f"{t['transport']:<10}{p['a']['gbps_median']:>9.2f}{p['b']['gbps_median']:>9.2f}{p['ratio']:>8.3f}   "
                  f"{p['a']['gbps_wall_median']:>8.2f}{p['b']['gbps_wall_median']:>8.2f}{p['ratio_wall']:>8.3f}   "
                  f"{p['ratio_paired_median']:>7.3f}")
        return
    print(f"\n(a) Pull {size} into torch tensors (Python) vs its own buffers (C++), interleaved, "
          f"{runs} runs each; medians")
    print(f"{'transport':<10}{'Python GB/s':>13}{'C++ GB/s':>11}{'ratio':>8}   {'Python wall':>12}"
          f"{'C++ wall':>10}{'ratio':>8}   {'paired':>7}  target")
    for t in result["transports"]:
        if "error" in t:
            print(f"{t['transport']:<10}  error: {t['error']}")
            continue
        p = t["pull"]
        print(f"{t['transport']:<10}{p['python']['gbps_median']:>13.2f}{p['cxx']['gbps_median']:>11.2f}"
              f"{p['ratio']:>8.3f}   {p['python']['gbps_wall_median']:>12.2f}{p['cxx']['gbps_wall_median']:>10.2f}"
              f"{p['ratio_wall']:>8.3f}   {p['ratio_paired_median']:>7.3f}  >= 0.95: "
              f"{'yes' if p['ratio'] >= 0.95 else 'NO'}")
    print("    (GB/s = PullResult.bytes / PullResult.seconds; 'wall' = the same bytes / the time around the call)")
    print("\n(b) A pull with nothing new (returns None / kNotReady), per call")
    print(f"{'transport':<10}{'loop':<34}{'calls':>7}{'median us':>11}{'p99 us':>9}{'mean us':>9}  target")
    labels = {"python": "Python sub.pull(binding)", "cxx": "C++ Subscriber::pull(plan)",
              "python_core": "Python _core.pull (diagnostic)", "python_thread": "Python, worker thread (diag.)"}
    for t in result["transports"]:
        if "error" in t:
            continue
        for key, label in labels.items():
            if key not in t["noop"]:
                continue
            n = t["noop"][key]
            target = ("< 50 us: " + ("yes" if n["median_us"] < 50 else "NO")) if key == "python" else ""
            print(f"{t['transport']:<10}{label:<34}{n['calls']:>7}{n['median_us']:>11.2f}{n['p99_us']:>9.2f}"
                  f"{n['mean_us']:>9.2f}  {target}")
    print("\n(c) Ctrl-C during pull(wait=60): SIGINT sent -> KeyboardInterrupt caught (CLOCK_MONOTONIC)")
    print(f"{'transport':<10}{'trials':>7}{'median ms':>11}{'max ms':>9}{'usable after':>14}  target")
    for t in result["transports"]:
        s = t.get("sigint")
        if not s:
            continue
        print(f"{t['transport']:<10}{s['count']:>7}{s['median_ms']:>11.2f}{s['max_ms']:>9.2f}"
              f"{str(s['usable']) + '/' + str(s['count']):>14}  < 100 ms: {'yes' if s['max_ms'] < 100 else 'NO'}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Measure the Python binding's figures in one run: pull bandwidth into torch tensors "
                    "vs a C++ subscriber (interleaved), the cost of a pull with nothing new, and Ctrl-C "
                    "during a waiting pull. See docs/perf/python.md.")
    parser.add_argument("--runs", type=int, default=11, help="measured pulls per side and transport, and "
                        "Ctrl-C trials per transport (default 11)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="unmeasured interleaved pulls first (default: --slots, one per slot, so that both "
                             "readers have touched every slot: a reader's first pull from a shm slot faults its "
                             "pages in)")
    parser.add_argument("--size", type=parse_size, default=parse_size("256MiB"),
                        help="model bytes, 16 tensors (default 256MiB)")
    parser.add_argument("--transports", default="tcp,shm", help="comma-separated (default tcp,shm)")
    parser.add_argument("--json", metavar="OUT", help="write every sample here")
    parser.add_argument("--noop-calls", type=int, default=20000,
                        help="nothing-new pulls per side and transport (default 20000)")
    parser.add_argument("--noop-blocks", type=int, default=4,
                        help="alternating Python/C++ blocks the nothing-new calls are split in (default 4)")
    parser.add_argument("--no-noop-diagnostics", dest="noop_diagnostics", action="store_false",
                        help="skip the diagnostic Python nothing-new loops (core call, worker thread)")
    parser.add_argument("--no-sigint", dest="sigint", action="store_false", help="skip (c), the Ctrl-C trials")
    parser.add_argument("--sigint-min-delay", type=float, default=0.05, help="seconds (default 0.05)")
    parser.add_argument("--sigint-max-delay", type=float, default=0.5, help="seconds (default 0.5)")
    parser.add_argument("--seed", type=int, default=1, help="for the Ctrl-C delays (default 1)")
    parser.add_argument("--slots", type=int, default=3, help="publisher slots (default 3)")
    parser.add_argument("--cxx-memory", choices=("malloc", "hostbuffer"), default="malloc",
                        help="the C++ reader's buffers: posix_memalign like torch's allocator (default), or "
                             "weightsync::HostBuffer (2 MiB aligned, huge pages advised)")
    parser.add_argument("--a-a", choices=("cxx", "python"), dest="a_a",
                        help="instead of the figures, the method's noise floor: two C++ (or two Python) readers "
                             "interleaved exactly as (a) interleaves Python and C++; their ratio should be 1")
    parser.add_argument("--build", help="the build directory (default: the one the weightsync package on the "
                        "path was built in)")
    parser.add_argument("--reader", help="the C++ reader (default: <build>/bench/weightsync-python-pull-reader, "
                        "compiled if missing)")
    # Child roles (internal).
    parser.add_argument("--role", choices=("py-reader", "py-sigint"), help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--transport-one", dest="transport", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.role == "py-reader":
        return role_py_reader(args)
    if args.role == "py-sigint":
        return role_py_sigint(args)

    if args.runs < 1:
        parser.error("--runs must be >= 1")
    if args.warmup is None:
        args.warmup = args.slots
    try:
        import torch
        import weightsync
    except ImportError as e:
        parser.error(f"{e}: run with the Python weightsync was built for, with <build>/python on PYTHONPATH")
    build_python = os.path.dirname(os.path.dirname(os.path.abspath(weightsync.__file__)))
    build = args.build or os.path.dirname(build_python)
    reader = find_cxx_reader(build, args.reader)
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]

    load_before = os.getloadavg()
    if load_before[0] > 0.5:
        log(f"warning: the machine is not idle (load average {load_before[0]:.2f}): figures will be noisy")
    log(f"weightsync {weightsync.version()} from {build_python}; C++ reader {reader}")
    log(f"model: {human(args.size)} in {N_TENSORS} tensors; transports {', '.join(transports)}; "
        f"{args.runs} runs + {args.warmup} warmup")
    started = time.time()
    model = Model(args.size, args.slots)
    result: Dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": [sys.executable] + sys.argv,
        "config": {"size": args.size, "tensors": [list(s) for s in model.specs], "runs": args.runs,
                   "warmup": args.warmup, "transports": transports, "noop_calls": args.noop_calls,
                   "noop_blocks": args.noop_blocks, "slots": args.slots, "cxx_memory": args.cxx_memory,
                   "seed": args.seed, "a_a": args.a_a,
                   "sigint_delay_s": [args.sigint_min_delay, args.sigint_max_delay]},
        "versions": {"weightsync": weightsync.version(), "python": platform.python_version(),
                     "torch": torch.__version__, "python_executable": sys.executable, "package": build_python,
                     "cxx_reader": reader, "libraries": _library_stamps(build_python)},
        "machine": machine_info(),
        "load_before": load_before,
        "transports": [],
    }
    try:
        for transport in transports:
            try:
                if args.a_a:
                    log(f"--- {transport}: A/A calibration, two {LABELS[args.a_a]} readers")
                    entry = {"transport": transport, "a_a": measure_a_a(args, model, transport, reader, build_python)}
                else:
                    log(f"--- {transport}: pull bandwidth and nothing-new pulls")
                    entry = measure_transport(args, model, transport, reader, build_python)
            except Exception as e:  # a transport that is not viable here: say so, go on
                log(f"{transport}: {e}")
                result["transports"].append({"transport": transport, "error": str(e)})
                continue
            result["transports"].append(entry)
        if args.sigint and not args.a_a:
            for entry in result["transports"]:
                if "error" in entry:
                    continue
                log(f"--- {entry['transport']}: Ctrl-C during a waiting pull")
                entry["sigint"] = measure_sigint(args, model, entry["transport"], build_python)
    finally:
        model.pub.close()
    result["publish_seconds_median"] = median(model.publish_seconds)
    result["load_after"] = os.getloadavg()
    if _library_stamps(build_python) != result["versions"]["libraries"]:
        log("warning: the libraries were rebuilt during the run")
        result["libraries_changed_during_run"] = True
    result["elapsed_s"] = time.time() - started
    print_table(result)
    print(f"\n{result['date']}  load average before {load_before[0]:.2f}, after {result['load_after'][0]:.2f}; "
          f"{result['elapsed_s']:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        log(f"wrote {args.json}")
    return 1 if any("error" in t for t in result["transports"]) else 0


if __name__ == "__main__":
    sys.exit(main())
