"""Staged updates from Python: EngineAdapter(staged=...) and StagedUpdates (issue 32, item 5).

A background thread pulls each new version into buffers the library owns while
the "engine" keeps stepping on its parameters; install_update() between steps
installs the staged version (a copy into the parameters, a re-pointing of them
at the live buffer, or the engine's load_weights from it) or returns None at
once. Three engine shapes, as in test_engine.py: direct + "copy" (the trainer's
TinyLM, addresses fixed), direct + "swap" (TinyLM, parameters re-pointed) and
load_weights (the vLLM-shaped FusedEngineLM). Each is checked against a real
Publisher: in process while the engine steps, with a version whose slot was
corrupted after its commit (its checksum fails), and (a 16 MiB model) in a child
process killed with SIGKILL while versions stream. Also: re-allocated
parameters, a failing load_weights, waiting and cancelling, the refusals,
StagedUpdates itself, and, where CUDA is present, copy mode into CUDA
parameters. Every publisher listens on loopback.
"""

import asyncio
import ctypes
import inspect
import os
import signal
import sys
import threading
import time

import pytest

from conftest import wait_until
from test_engine import VOCAB, _models, assert_fused_equal, assert_same

# (adapter mode, staged): the three staged paths
PATHS = [("direct", "copy"), ("direct", "swap"), ("load_weights", "swap")]
IDS = ["direct-copy", "direct-swap", "load_weights"]


@pytest.fixture
def models(torch):
    torch.manual_seed(1)
    return _models(torch)


@pytest.fixture
def trainer(torch, ws, models):
    """(trainer model, publisher with checksums and no version yet, publish(version) -> snapshot);
    publish() keeps each version's snapshot in publish.versions, before publishing it."""
    TinyLM, _ = models
    model = TinyLM()
    pub = ws.Publisher(ws.Layout.from_state_dict(model.state_dict()), bind="127.0.0.1", slots=3, checksum=True)

    def publish(version):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        sd = publish.versions[version] = {n: t.detach().clone() for n, t in model.state_dict().items()}
        pub.publish(model.state_dict(), version)
        return sd

    publish.versions = {}

    yield model, pub, publish
    pub.close()


def engine_for(models, kind):
    TinyLM, FusedEngineLM = models
    return TinyLM() if kind == "direct" else FusedEngineLM()


def snapshot(engine):
    return {n: t.detach().clone() for n, t in engine.state_dict().items()}


def assert_holds(torch, engine, kind, sd):
    """The engine's parameters are exactly the trainer's state_dict ``sd``."""
    if kind == "direct":
        assert_same(torch, engine, sd)
    else:
        assert_fused_equal(torch, engine, sd)


def assert_unchanged(torch, engine, before):
    now = engine.state_dict()
    for name, t in before.items():
        assert torch.equal(now[name], t), f"{name} changed outside install_update()"


def pointers(engine):
    return {n: t.data_ptr() for n, t in engine.state_dict(keep_vars=True).items()}


# ---- the engine loop ------------------------------------------------------------------


@pytest.mark.parametrize("kind,staged", PATHS, ids=IDS)
def test_install_update_between_steps_while_versions_are_published(torch, ws, models, trainer, kind, staged):
    _, pub, publish = trainer
    engine = engine_for(models, kind)
    initial, initial_ptrs = snapshot(engine), pointers(engine)
    tokens = torch.arange(12) % VOCAB
    last = 12
    with ws.EngineAdapter(pub.address, engine, mode=kind, staged=staged) as adapter:
        assert adapter.mode == kind and adapter.staged == staged and adapter.subscriber.closed
        # Nothing published: nothing staged, the engine untouched.
        for _ in range(5):
            assert adapter.install_update() is None
            time.sleep(0.01)
        assert adapter.version == 0
        assert_unchanged(torch, engine, initial)
        assert pointers(engine) == initial_ptrs

        published = publish.versions

        def train():
            for version in range(1, last + 1):
                publish(version)
                time.sleep(0.03)

        thread = threading.Thread(target=train)
        thread.start()
        installed, nones, swap_addresses = [], 0, set()
        deadline = time.monotonic() + 30
        try:
            while (not installed or installed[-1] < last) and time.monotonic() < deadline:
                before = snapshot(engine)
                with torch.no_grad():
                    engine(tokens)  # a step: reads every parameter
                time.sleep(0.004)
                assert_unchanged(torch, engine, before)  # the background pull never wrote them
                result = adapter.install_update()
                if result is None:
                    nones += 1
                    assert_unchanged(torch, engine, before)
                    continue
                assert result.version > (installed[-1] if installed else 0)
                assert result.previous == (installed[-1] if installed else 0)
                assert result.pull.checksum_verified and result.bytes == adapter.layout.payload_bytes
                assert 0 < result.blocked_seconds < 5 and result.pull_seconds > 0
                assert result.blocked_seconds >= result.install_seconds + result.apply_seconds - 1e-9
                installed.append(result.version)
                assert adapter.version == result.version
                assert_holds(torch, engine, kind, published[result.version])
                if staged == "copy":
                    assert pointers(engine) == initial_ptrs  # copied into the same memory: CUDA graphs hold
                elif kind == "direct":  # re-pointed into the live buffer of the library
                    live = adapter.staged_updates.live_address
                    for info in adapter.layout:
                        assert engine.state_dict(keep_vars=True)[info.name].data_ptr() == live + info.offset
                    swap_addresses.add(live)
                else:
                    live = adapter.staged_updates.live_address
                    got = engine.received[-len(adapter.layout):]  # this load's tensors: views of the live buffer
                    assert [n for n, _, _ in got] == adapter.layout.names
                    assert all(ptr == live + adapter.layout[n].offset for n, ptr, _ in got)
        finally:
            thread.join()
        assert installed and installed[-1] == last, installed
        assert len(installed) >= 3 and nones > 0, (installed, nones)
        if staged == "swap" and kind == "direct":
            assert len(swap_addresses) == 2  # the two library buffers take turns being live
        if kind == "load_weights":
            assert engine.calls == len(installed)

        # Nothing newer: None, and the engine keeps the last version.
        assert adapter.install_update() is None
        assert_holds(torch, engine, kind, published[last])
        stats = adapter.stats()
        assert stats["installs"] == stats["updates"] == len(installed) and stats["version"] == last
        assert stats["staged"] == staged and stats["failed_pulls"] == 0 and stats["background_error"] is None
        assert 0 < stats["blocked_median_seconds"] <= stats["blocked_p99_seconds"] <= stats["blocked_max_seconds"]
        assert stats["last_blocked_seconds"] > 0 and stats["blocked_seconds"] >= stats["blocked_max_seconds"]
        assert stats["library"]["installs"] == len(installed)
        with torch.no_grad():
            out = engine(tokens)
        buffers = [(adapter.staged_updates.live_address, adapter.layout.total_bytes)]
    if kind == "direct" and staged == "swap":
        # close() gave the parameters their own copy of the live weights: still the last version,
        # no longer in the library's buffers.
        assert_holds(torch, engine, kind, published[last])
        for name, ptr in pointers(engine).items():
            assert all(not start <= ptr < start + size for start, size in buffers), name
        with torch.no_grad():
            assert torch.equal(engine(tokens), out)


# ---- failed pulls never reach the engine ------------------------------------------------


def _publish_corrupt(torch, pub, model, version):
    """Publishes ``version`` in place, then scribbles over its slot after the commit: every
    read of it fails the checksum the publisher computed at the commit."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    with pub.writing(version) as slot:
        slot.copy_from(model.state_dict())
        address, size = slot._core.address, slot._core.size
    ctypes.memset(address, 0x5A, size)


@pytest.mark.parametrize("kind,staged", PATHS, ids=IDS)
def test_a_version_that_fails_its_checksum_is_never_installed(torch, ws, models, trainer, kind, staged):
    model, pub, publish = trainer
    engine = engine_for(models, kind)
    with ws.EngineAdapter(pub.address, engine, mode=kind, staged=staged) as adapter:
        publish(1)
        assert adapter.update_weights(wait=10).version == 1
        v2 = publish(2)
        wait_until(lambda: adapter.stats()["staged_version"] == 2, 10, "version 2 to be staged")
        # The background pull holds version 2 until it is installed, so version 3 is
        # corrupted before anyone reads it.
        _publish_corrupt(torch, pub, model, 3)
        assert adapter.install_update().version == 2
        assert_holds(torch, engine, kind, v2)
        ptrs = pointers(engine)

        wait_until(lambda: adapter.stats()["failed_pulls"] >= 2, 15, "the corrupt version's pulls to fail")
        for _ in range(5):
            assert adapter.install_update() is None
            time.sleep(0.01)
        assert adapter.version == 2 and pointers(engine) == ptrs
        assert_holds(torch, engine, kind, v2)
        stats = adapter.stats()
        assert "checksum" in stats["last_failure"] and stats["staged_version"] == 0
        assert stats["background_error"] is None
        adapter.status()  # a failed pull is retried, not a stopped background thread

        v4 = publish(4)  # the next good version is installed
        result = adapter.update_weights(wait=10)
        assert result is not None and result.version == 4 and adapter.version == 4
        assert_holds(torch, engine, kind, v4)


# The model of the killed-publisher test, the same in both processes (the child runs
# these two functions' source): 16 MiB, so that a pull takes a while; version v is the
# seed weights plus v, exactly.
def big_model(torch):
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(2048, 2048, bias=False))


def big_version(torch, model, version):
    return {n: t.detach() + float(version) for n, t in model.state_dict().items()}


_KILLED_PUBLISHER = inspect.getsource(big_model) + inspect.getsource(big_version) + r"""
import os, sys, time, torch, weightsync as ws
model = big_model(torch)
pub = ws.Publisher(ws.Layout.from_state_dict(model.state_dict()), bind="127.0.0.1", slots=3, checksum=True)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(pub.address)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
version = 0
while True:
    version += 1
    pub.publish(big_version(torch, model, version), version)
"""


@pytest.mark.parametrize("kind,staged,transport", [p + (None,) for p in PATHS] + [("direct", "copy", "tcp")],
                         ids=IDS + ["direct-copy-tcp"])
def test_a_killed_publisher_leaves_the_last_installed_version(torch, ws, child, tmp_path, kind, staged, transport):
    seed = big_model(torch)
    engine = big_model(torch)
    with torch.no_grad():
        for p in engine.parameters():
            p.zero_()
    loads = []

    @torch.no_grad()
    def load_weights(weights):  # same names: a plain copying loader
        params = engine.state_dict()
        for name, t in weights:
            params[name].copy_(t)
        loads.append(1)

    where = tmp_path / "address"
    publisher = child([sys.executable, "-c", _KILLED_PUBLISHER, where], env=dict(os.environ))
    address = wait_until(lambda: where.exists() and where.read_text(), 30, "the publisher's address")
    extra = {"load_weights": load_weights} if kind == "load_weights" else {}
    with ws.EngineAdapter(address, engine, mode=kind, staged=staged, transport=transport, **extra) as adapter:
        ptrs = pointers(engine)
        versions = []

        def check(result):
            want = big_version(torch, seed, result.version)
            for name, t in engine.state_dict().items():
                assert torch.equal(t, want[name]), (name, result.version)
            if staged == "copy":
                assert pointers(engine) == ptrs

        while len(versions) < 3:
            result = adapter.update_weights(wait=20)
            assert result is not None, "no version came within 20 s"
            check(result)
            versions.append(result.version)
        # The publisher is ahead (it publishes back to back): the install above woke the
        # background pull for the newest version, so the kill lands as it starts to transfer.
        os.killpg(publisher.proc.pid, signal.SIGKILL)
        publisher.proc.wait(10)

        def stopped():
            result = adapter.install_update()  # a version staged whole before the kill may still go in
            if result is not None:
                check(result)
                versions.append(result.version)
            try:
                adapter.status()
                return False
            except ws.ReconnectError:
                return True

        wait_until(stopped, 20, "the background pull to stop after the kill")
        last = adapter.version
        assert last == versions[-1]
        for _ in range(5):
            assert adapter.install_update() is None
        want = big_version(torch, seed, last)
        for name, t in engine.state_dict().items():
            assert torch.equal(t, want[name]), name  # whole, and the last version installed
        stats = adapter.stats()
        assert stats["background_error"] and stats["failed_pulls"] >= 1
        with pytest.raises(ws.ReconnectError):
            adapter.update_weights(wait=1)


# ---- the engine re-allocating its parameters -----------------------------------------------


@pytest.mark.parametrize("staged", ["copy", "swap"])
def test_a_reallocated_parameter_is_refused_and_rebind_reconnects(torch, ws, models, trainer, staged):
    TinyLM, _ = models
    _, pub, publish = trainer
    engine = TinyLM()
    with ws.EngineAdapter(pub.address, engine, mode="direct", staged=staged) as adapter:
        publish(1)
        assert adapter.update_weights(wait=10).version == 1
        v2 = publish(2)
        wait_until(lambda: adapter.stats()["staged_version"] == 2, 10, "version 2 to be staged")
        fresh = torch.full_like(engine.lm_head.weight, 7.0)
        engine.lm_head.weight.data = fresh  # the engine's own re-allocation (post-load processing, say)
        with pytest.raises(ws.StaleBinding, match=r"lm_head\.weight.*rebind\(\)") as info:
            adapter.install_update()
        assert info.value.name == "lm_head.weight" and adapter.version == 0
        assert torch.equal(engine.lm_head.weight, torch.full_like(fresh, 7.0))  # nothing copied or re-pointed
        assert adapter.stats()["staged_version"] == 2  # still staged: nothing was installed
        adapter.rebind()  # a new Subscriber and StagedUpdates for the memory the parameters have now
        assert adapter.version == 0 and adapter.stats()["installs"] == 1
        ptrs = pointers(engine)
        result = adapter.update_weights(wait=10)
        assert result is not None and result.version == 2
        assert_same(torch, engine, v2)
        if staged == "copy":
            assert pointers(engine) == ptrs and engine.lm_head.weight.data_ptr() == fresh.data_ptr()


# ---- waiting, repair, refusals -------------------------------------------------------------------


def test_update_weights_waits_for_a_staged_version_and_refuses_exact_versions(torch, ws, models, trainer):
    _, pub, publish = trainer
    engine = engine_for(models, "direct")
    with ws.EngineAdapter(pub.address, engine, staged="copy") as adapter:
        t0 = time.monotonic()
        assert adapter.update_weights(wait=0.3) is None  # nothing published: it waited, then None
        assert 0.25 <= time.monotonic() - t0 < 5 and adapter.version == 0
        timer = threading.Timer(0.3, publish, args=(1,))
        timer.start()
        try:
            result = adapter.update_weights(wait=10)
        finally:
            timer.join()
        assert result.version == 1 and adapter.stats()["last_wait_seconds"] >= 0.1
        assert_same(torch, engine, publish.versions[1])
        with pytest.raises(ws.InvalidArgument, match=r"version=1\) is not offered in staged mode"):
            adapter.update_weights(version=1)

        async def cancelled():  # cancelling the task ends the wait for a staged version
            task = asyncio.ensure_future(adapter.update_weights_async(wait=30))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        t0 = time.monotonic()
        asyncio.run(cancelled())
        assert time.monotonic() - t0 < 5
        publish(2)
        assert asyncio.run(adapter.update_weights_async(wait=10)).version == 2  # usable after the cancel
        assert_same(torch, engine, publish.versions[2])


def test_a_failed_load_weights_is_repaired_from_the_live_buffer(torch, ws, models, trainer):
    _, FusedEngineLM = models
    _, pub, publish = trainer
    engine = FusedEngineLM()
    real = engine.load_weights
    fail = []

    def flaky(weights):
        if fail:
            fail.pop()
            next(iter(weights))
            raise RuntimeError("the engine's loader failed half way")
        return real(weights)

    with ws.EngineAdapter(pub.address, engine, load_weights=flaky, staged="swap") as adapter:
        publish(1)
        assert adapter.update_weights(wait=10).version == 1
        v2 = publish(2)
        wait_until(lambda: adapter.stats()["staged_version"] == 2, 10, "version 2 to be staged")
        fail.append(1)
        with pytest.raises(RuntimeError, match="half way"):
            adapter.install_update()
        assert adapter.version == 0 and adapter.stats()["failures"] == 1
        result = adapter.install_update()  # nothing new staged: version 2 again, from the live buffer
        assert result is not None and result.version == 2 and result.pull is None and adapter.version == 2
        assert_fused_equal(torch, engine, v2)
        assert adapter.install_update() is None


def test_staged_mode_refusals(torch, ws, models, trainer):
    TinyLM, _ = models
    _, pub, _ = trainer
    sub = ws.Subscriber(pub.address)
    try:
        with pytest.raises(ws.InvalidArgument, match="make its own Subscriber"):
            ws.EngineAdapter(sub, TinyLM(), staged="copy")
        assert not sub.closed
    finally:
        sub.close()
    with pytest.raises(ws.InvalidArgument, match="staged must be None, 'swap' or 'copy'"):
        ws.EngineAdapter(pub.address, TinyLM(), staged="fast")
    with pytest.raises(ws.InvalidArgument, match="staged_options takes"):
        ws.EngineAdapter(pub.address, TinyLM(), staged="copy", staged_options={"wait": 1})
    with pytest.raises(ws.InvalidArgument, match="staged_options apply only"):
        ws.EngineAdapter(pub.address, TinyLM(), staged_options={"deltas": False})
    with ws.EngineAdapter(pub.address, TinyLM()) as plain:
        with pytest.raises(ws.InvalidArgument, match="install_update\\(\\) is for staged mode"):
            plain.install_update()
    # A publisher without checksums: nothing could be verified, unless asked not to.
    model = TinyLM()
    with ws.Publisher(ws.Layout.from_state_dict(model.state_dict()), bind="127.0.0.1", checksum=False) as bare:
        with pytest.raises(ws.InvalidConfig, match="require_checksum=False"):
            ws.EngineAdapter(bare.address, TinyLM(), staged="copy")
        engine = TinyLM()
        with ws.EngineAdapter(bare.address, engine, staged="copy",
                              staged_options={"require_checksum": False}) as adapter:
            bare.publish(model.state_dict(), 1)
            assert adapter.update_weights(wait=10).version == 1
            assert_same(torch, engine, model.state_dict())


# ---- StagedUpdates itself --------------------------------------------------------------------


def test_staged_updates_swap_buffers_views_and_close(torch, ws, models, trainer):
    _, pub, publish = trainer
    sub = ws.Subscriber(pub.address)
    staged = ws.StagedUpdates(sub, mode="swap")
    assert sub.closed and staged.mode == "swap" and staged.device == "cpu"
    assert staged.live_index == 0 and staged.live_version == 0
    assert staged.buffer(0) is not None and staged.buffer(1) is None  # buffer 1: learnt at the first install
    assert staged.wait_staged(0.1) is None and staged.install() is None
    threading.Timer(0.2, staged.cancel).start()
    with pytest.raises(ws.Cancelled):
        staged.wait_staged(10)
    v1 = publish(1)
    assert staged.wait_staged(10) == 1 and staged.staged_version == 1
    result = staged.install()
    assert isinstance(result, ws.InstallResult) and result.version == 1 and result.mode == "swap"
    assert result.pull.checksum_verified and staged.live_index == 1 and staged.staged_version == 0
    live = staged.tensors()
    for name, t in v1.items():
        assert torch.equal(live[name], t), name
    memory = staged.buffer()
    assert not memory.readonly and memory.nbytes == staged.buffer_bytes == staged.layout.total_bytes
    stats = staged.stats()
    assert stats["installs"] == 1 and stats["blocked_count"] == 1 and stats["not_ready"] >= 1
    assert stats["subscriber"]["pulls"] >= 1 and staged.last_failure() is None
    staged.close()
    assert staged.closed
    with pytest.raises(ws.InvalidArgument, match="closed"):
        staged.install()
    for name, t in v1.items():  # the views keep the library's buffer alive after close()
        assert torch.equal(live[name], t), name
    del live, memory


def test_staged_updates_copy_mode_refusals(torch, ws, models, trainer):
    TinyLM, _ = models
    _, pub, _ = trainer
    with pytest.raises(ws.InvalidArgument, match="copy mode needs live="):
        ws.StagedUpdates(ws.Subscriber(pub.address), mode="copy")
    with pytest.raises(ws.InvalidArgument, match="swap mode takes no live="):
        ws.StagedUpdates(ws.Subscriber(pub.address), mode="swap", live=TinyLM())
    with pytest.raises(ws.InvalidArgument, match="missing"):
        ws.StagedUpdates(ws.Subscriber(pub.address), mode="copy", live=torch.nn.Linear(2, 2))
    with pytest.raises(ws.InvalidArgument, match="closed"):
        sub = ws.Subscriber(pub.address)
        sub.close()
        ws.StagedUpdates(sub)


# ---- GPU ----------------------------------------------------------------------------------------


def test_direct_copy_into_cuda_parameters(torch, ws, models, trainer):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    TinyLM, _ = models
    _, pub, publish = trainer
    engine = TinyLM().cuda()
    ptrs = pointers(engine)
    tokens = (torch.arange(12) % VOCAB).cuda()
    with ws.EngineAdapter(pub.address, engine, staged="copy") as adapter:
        assert adapter.staged_updates.device == "cuda"
        for version in range(1, 6):
            sd = publish(version)
            result = adapter.update_weights(wait=10)
            assert result is not None and result.version == version
            assert pointers(engine) == ptrs  # the same device memory: CUDA graphs stay valid
            for name, t in engine.state_dict().items():
                assert torch.equal(t.cpu(), sd[name]), name
            with torch.no_grad():
                engine.lm_head(engine.norm(engine.embed_tokens(tokens)))  # a step on the GPU
        assert adapter.install_update() is None
    with pytest.raises(ws.InvalidArgument, match="needs host parameters"):
        ws.EngineAdapter(pub.address, TinyLM().cuda(), staged="swap")
    # Swap buffers in device memory: their address, never a memoryview of them.
    staged = ws.StagedUpdates(ws.Subscriber(pub.address), mode="swap", device="cuda")
    try:
        assert staged.device == "cuda" and staged.live_address
        with pytest.raises(ws.InvalidArgument, match="device memory"):
            staged.buffer(0)
    finally:
        staged.close()


def test_load_weights_into_a_cuda_engine(torch, ws, models, trainer):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _, FusedEngineLM = models
    _, pub, publish = trainer
    engine = FusedEngineLM().cuda()
    with ws.EngineAdapter(pub.address, engine, staged="swap") as adapter:
        assert adapter.mode == "load_weights"
        for version in range(1, 4):
            sd = publish(version)
            assert adapter.update_weights(wait=10).version == version
            assert_fused_equal(torch, engine.cpu(), sd)
            engine.cuda()
