"""Shared fixtures for the weightsync Python tests (run from ctest by run_pytest.py).

Environment (set by tests/CMakeLists.txt): PYTHONPATH names <build>/python;
WEIGHTSYNC_BUILD_DIR is the build tree (for the C++ executables); the
WEIGHTSYNC_BIN_* variables give paths of executables the interop tests run.
"""

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is not installed (apt-get install python3-torch)")


@pytest.fixture
def ws():
    import weightsync

    return weightsync


def executable(variable: str) -> str:
    """Path of a C++ executable from the environment, or skip."""
    path = os.environ.get(variable, "")
    if not path or not os.path.exists(path):
        pytest.skip(f"{variable} is not set or not built (the C++ side of this test)")
    return path


class Child:
    """A child process with a bounded life (stopped at the end of the test); its
    stdout and stderr go to a file, read with output()."""

    def __init__(self, args, **kwargs):
        import tempfile

        self.args = [str(a) for a in args]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="ws-child-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, **kwargs)

    def output(self) -> str:
        with open(self.log.name) as f:
            return f.read()

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after `timeout`; returns (exit code, output)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=timeout)
        return self.proc.returncode, self.output()


@pytest.fixture
def child():
    children = []

    def start(args, **kwargs):
        c = Child(args, **kwargs)
        children.append(c)
        return c

    yield start
    for c in children:
        c.stop()
        os.unlink(c.log.name)


def wait_until(predicate, timeout, what):
    """Polls predicate() until it is truthy or `timeout` seconds pass (then fails the test)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")
