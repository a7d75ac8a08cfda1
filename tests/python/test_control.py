"""Stopping a pull: cancel() from another thread, Ctrl-C (a real SIGINT to a
real process) during a pull that waits, close() while a pull waits, and
asyncio cancellation; each returns promptly and leaves the subscriber usable.
And the library's log messages arriving in Python's logging."""

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest


def small_pair(torch, ws, transport="tcp"):
    model = torch.nn.Linear(16, 4)
    pub = ws.Publisher(ws.Layout.from_state_dict(model.state_dict()))
    sub = ws.Subscriber(pub.address, transport=transport)
    return model, pub, sub


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_cancel_from_another_thread_stops_a_waiting_pull(torch, ws, transport):
    model, pub, sub = small_pair(torch, ws, transport)
    with pub, sub:
        binding = sub.bind(torch.nn.Linear(16, 4))
        cancelled_at = []

        def cancel_later():
            time.sleep(0.2)
            cancelled_at.append(time.monotonic())
            sub.cancel()

        t = threading.Thread(target=cancel_later)
        t.start()
        start = time.monotonic()
        with pytest.raises(ws.Cancelled) as info:
            sub.pull(binding, wait=30)
        returned = time.monotonic()
        t.join()
        assert info.value.code == "cancelled"
        assert returned - cancelled_at[0] < 0.1, f"returned {returned - cancelled_at[0]:.3f} s after cancel()"
        assert returned - start < 5
        # The cancel was consumed: the subscriber works on.
        pub.publish(model.state_dict(), 1)
        assert sub.pull(binding, wait=5).version == 1
        # A cancel with no pull in flight stops the next one at once.
        sub.cancel()
        with pytest.raises(ws.Cancelled):
            sub.wait_for_version(timeout=30)
        assert sub.wait_for_version(timeout=0.05) is None  # nothing newer: None after the timeout


CTRL_C_CHILD = textwrap.dedent("""
    import sys, time, torch, weightsync as ws
    model = torch.nn.Linear(16, 4)
    pub = ws.Publisher(ws.Layout.from_state_dict(model.state_dict()))
    sub = ws.Subscriber(pub.address, transport=sys.argv[1])
    binding = sub.bind(torch.nn.Linear(16, 4))
    print("WAITING", flush=True)
    try:
        sub.pull(binding, wait=60)
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        print("INTERRUPTED", repr(time.monotonic()), flush=True)
    pub.publish(model.state_dict(), 1)
    r = sub.pull(binding, wait=5)
    print("PULLED", r.version, flush=True)
""")


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_ctrl_c_interrupts_a_waiting_pull_within_100_ms_and_the_subscriber_stays_usable(torch, ws, transport):
    env = dict(os.environ)
    child = subprocess.Popen([sys.executable, "-c", CTRL_C_CHILD, transport], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line.strip() == "WAITING", line + child.stderr.read()
        time.sleep(0.3)  # well inside the 60 s wait
        sent = time.monotonic()  # CLOCK_MONOTONIC: the same clock in both processes
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    lines = out.split("\n")
    interrupted = [l for l in lines if l.startswith("INTERRUPTED")]
    assert interrupted, out + err
    latency = float(interrupted[0].split()[1]) - sent
    assert latency < 0.1, f"KeyboardInterrupt {latency * 1000:.1f} ms after SIGINT"
    assert "PULLED 1" in lines, out + err
    assert child.returncode == 0


def test_close_from_another_thread_ends_a_waiting_pull(torch, ws):
    model, pub, sub = small_pair(torch, ws)
    with pub:
        binding = sub.bind(torch.nn.Linear(16, 4))
        outcome = []

        def puller():
            try:
                outcome.append(sub.pull(binding, wait=30))
            except ws.Cancelled as e:
                outcome.append(e)

        t = threading.Thread(target=puller)
        t.start()
        time.sleep(0.2)
        start = time.monotonic()
        sub.close()
        t.join(timeout=5)
        assert not t.is_alive()
        assert time.monotonic() - start < 1.0
        assert isinstance(outcome[0], ws.Cancelled)
        assert sub.closed
        with pytest.raises(ws.InvalidArgument, match="closed"):
            sub.pull(binding)


def test_asyncio_pull_publish_and_task_cancellation(torch, ws):
    model, pub, sub = small_pair(torch, ws)
    engine = torch.nn.Linear(16, 4)

    async def main():
        binding = sub.bind(engine)
        waiting = asyncio.create_task(sub.pull_async(binding, wait=30))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # the event loop runs while the pull waits on its thread
        await pub.publish_async(model.state_dict(), 1)
        result = await asyncio.wait_for(waiting, timeout=5)
        assert result.version == 1
        # Cancelling the task cancels the pull on its thread, promptly.
        task = asyncio.create_task(sub.pull_async(binding, wait=30))
        await asyncio.sleep(0.1)
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - start < 0.5
        # asyncio.wait_for's timeout does the same.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sub.wait_for_version_async(timeout=30), timeout=0.2)
        # ... and the subscriber is free and usable afterwards.
        await pub.publish_async(model.state_dict(), 2)
        assert (await sub.pull_async(binding, wait=5)).version == 2

    with pub, sub:
        asyncio.run(main())
    assert torch.equal(engine.weight, model.weight)


def test_library_logs_reach_python_logging(torch, ws, caplog):
    caplog.set_level(logging.DEBUG, logger="weightsync")
    before = ws.log_level()
    ws.set_log_level("info")
    try:
        model = torch.nn.Linear(4, 4)
        with ws.Publisher(ws.Layout.from_state_dict(model.state_dict())) as pub:
            with ws.Subscriber(pub.address, name="log-test-subscriber"):
                pass
        ws.flush_logs()
    finally:
        ws.set_log_level(before)
    records = [r for r in caplog.records if r.name == "weightsync"]
    assert records, "no library message reached logging"
    assert any(r.levelno == logging.INFO for r in records)
    assert any("log-test-subscriber" in r.getMessage() for r in records)
    assert all(not r.getMessage().startswith("[weightsync") for r in records)
    with pytest.raises(ValueError, match="log level"):
        ws.set_log_level("loud")
