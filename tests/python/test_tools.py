"""``python -m weightsync.info`` (and its C++ twin), and the example trainer and engine end to end.

The C++ tool comes from WEIGHTSYNC_BIN_INFO (set by ctest; the comparison is
skipped without it). The examples run as subprocesses of ``sys.executable``
with this process's environment (PYTHONPATH names the built package), on
loopback, each with a bounded timeout.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import executable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"
NO_PYC = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # no __pycache__ left in examples/python
# Not anchored to a line start: with --spawn-trainer the trainer shares the
# engine's stdout, and one of its lines can end inside an engine line.
VERSION_LINE = re.compile(r"engine: version (\d+) loss ([0-9.]+) ")


def run(args, timeout=60, **env):
    """Runs ``args`` (a list) with this environment plus ``env``; returns the CompletedProcess."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


def info_json(command, **env):
    out = run(command + ["--json"], **env)
    return out.returncode, json.loads(out.stdout), out.stderr


# ---- python -m weightsync.info ---------------------------------------------------


def test_info_json_lists_the_transports_and_exits_0(ws):
    code, report, stderr = info_json([sys.executable, "-m", "weightsync.info"])
    assert code == 0, stderr
    assert report["version"] == ws.version() == ws.__version__
    transports = {t["name"]: t for t in report["transports"]}
    assert {"tcp", "shm"} <= set(transports)
    for t in report["transports"]:
        assert isinstance(t["viable"], bool) and t["description"]
        assert t["viable"] == (t["reason"] == ""), t  # a reason exactly when not viable
    assert transports["tcp"]["viable"]  # loopback TCP works anywhere these tests run
    if sys.platform.startswith("linux"):
        assert transports["shm"]["viable"]
    assert report["python"]["executable"] == sys.executable
    assert Path(report["python"]["package"]) == Path(ws.__file__).parent
    names = {s["name"] for s in report["settings"]}
    assert {"secret", "io_timeout_ms", "transport", "log_level"} <= names
    assert all(s["error"] == "" for s in report["settings"])


def test_info_table(ws):
    out = run([sys.executable, "-m", "weightsync.info"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"# weightsync {ws.version()} ")
    assert "# Data transports" in out.stdout and "# Settings" in out.stdout
    for t in ws.transports():
        state = "viable" if t["viable"] else "not viable: "
        assert re.search(rf"^  {t['name']}\s+{re.escape(state)}", out.stdout, re.M), t["name"]
    help_ = run([sys.executable, "-m", "weightsync.info", "--help"])
    assert help_.returncode == 0 and "--json" in help_.stdout


def test_info_matches_the_cpp_tool():
    tool = executable("WEIGHTSYNC_BIN_INFO")
    code_py, py, err_py = info_json([sys.executable, "-m", "weightsync.info"])
    code_cc, cc, err_cc = info_json([tool])
    assert code_py == code_cc == 0, (err_py, err_cc)
    assert py["version"] == cc["version"]

    def transports(r):
        return [(t["name"], t["viable"], t["reason"]) for t in r["transports"]]

    def settings(r):
        return [(s["name"], s["environment"], s["value"], s["source"], s["error"]) for s in r["settings"]]

    assert transports(py) == transports(cc)  # same names, same order, same viability and reasons
    assert py["cuda"] == cc["cuda"]
    assert settings(py) == settings(cc)


def test_info_reports_a_malformed_setting_like_the_cpp_tool():
    env = {"WEIGHTSYNC_TIMEOUT_MS": "abc"}
    code_py, py, _ = info_json([sys.executable, "-m", "weightsync.info"], **env)
    errors_py = [(s["name"], s["error"]) for s in py["settings"] if s["error"]]
    assert code_py == 1 and len(errors_py) == 1 and "WEIGHTSYNC_TIMEOUT_MS" in errors_py[0][1]
    tool = os.environ.get("WEIGHTSYNC_BIN_INFO", "")
    if tool and os.path.exists(tool):
        code_cc, cc, _ = info_json([tool], **env)
        assert code_cc == 1 and [(s["name"], s["error"]) for s in cc["settings"] if s["error"]] == errors_py


# ---- the example trainer and engine ----------------------------------------------------


@pytest.fixture
def examples(torch):
    if not (EXAMPLES / "trainer.py").exists():
        pytest.skip(f"no examples in {EXAMPLES}")
    return EXAMPLES


def versions_and_losses(output):
    found = [(int(v), float(loss)) for v, loss in VERSION_LINE.findall(output)]
    return [v for v, _ in found], [loss for _, loss in found]


def test_example_pair_end_to_end(examples, child, tmp_path):
    address_file = tmp_path / "address"
    steps = 12
    # The trainer publishes its first version once the engine has connected
    # (--wait-for-subscribers 1: on a loaded machine the engine's start took
    # over 0.6 s, and it missed versions 1-4); the engine pulls each in turn.
    engine = child([sys.executable, examples / "engine.py", "--versions", steps, "--address-file", address_file,
                    "--every-version", "--timeout", "60"], env=NO_PYC)
    trainer = child([sys.executable, examples / "trainer.py", "--steps", steps, "--step-seconds", "0.15",
                     "--address-file", address_file, "--linger", "120", "--wait-for-subscribers", "1"],
                    env=NO_PYC)
    engine.proc.wait(timeout=120)
    stdout = engine.output()
    assert engine.proc.returncode == 0, stdout
    assert "engine: direct mode" in stdout
    versions, losses = versions_and_losses(stdout)
    assert versions == list(range(1, steps + 1)), stdout  # every version, in order
    assert losses[-1] < 0.8 * losses[0], losses  # the served model got better
    assert f"engine: received {steps} versions (1..{steps})" in stdout

    code, output = trainer.stop()
    assert code == 0, output  # stopped after its last step: a clean exit
    assert output.count("published in") == steps
    assert f"trainer: stopped after publishing {steps} of {steps} versions" in output
    assert not address_file.exists()  # removed at exit


def test_example_engine_spawns_the_trainer_in_load_weights_mode(examples):
    steps = 6
    engine = run([sys.executable, examples / "engine.py", "--spawn-trainer", "--versions", steps,
                  "--mode", "load_weights", "--every-version", "--timeout", "60"], timeout=120, **NO_PYC)
    assert engine.returncode == 0, engine.stdout + engine.stderr
    assert "engine: load_weights mode" in engine.stdout
    versions, losses = versions_and_losses(engine.stdout)
    assert versions == list(range(1, steps + 1)) and losses[-1] < losses[0], engine.stdout
    assert f"trainer: stopped after publishing {steps} of {steps} versions" in engine.stdout  # it stopped it


def test_example_help(examples):
    for script, option in (("trainer.py", "--steps"), ("engine.py", "--spawn-trainer")):
        out = run([sys.executable, examples / script, "--help"], **NO_PYC)
        assert out.returncode == 0 and option in out.stdout, out.stderr
    out = run([sys.executable, examples / "engine.py"], **NO_PYC)
    assert out.returncode == 2 and "--address-file" in out.stderr  # says what it needs
