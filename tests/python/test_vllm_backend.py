"""vLLM's weight-transfer contract and SGLang's custom-loader path, in a harness (issue 35, part 1).

NOT RUN INSIDE vLLM OR SGLANG: neither can be installed here. This harness makes the
calls vLLM makes, in vLLM's order, as its source defines them (the commits are named in
docs/python_engines.md): ``VllmWorker`` below reproduces the worker's state machine
(``init_weight_transfer_engine`` -> ``parse_init_info`` + ``init_transfer_engine``; per
update ``start_weight_update`` -> ``update_weights`` (parse, receive, synchronize; a
failure ends the session) -> ``finish_weight_update``; ``shutdown``), and ``WorkerClient``
is the trainer's ``VLLMWeightSyncClient`` to it (what vLLM's Ray client does through its
actors, ``weight_version`` set after finish as ``AsyncLLM.finish_weight_update`` does).
``sglang_update`` reproduces SGLang's ``ModelRunner.update_weights_from_tensor`` custom
loader branch and the tokenizer manager's ``weight_version`` rule. The engines'
weights are real ``torch.nn.Module`` parameters; the trainer engine's Publisher is a
real weightsync publisher on loopback (shm or tcp). Without vLLM the backend is
defined against weightsync's stand-ins of vLLM's base classes (same names and
signatures); ``test_defined_against`` records which.
"""

import copy
import ctypes
import importlib

import pytest

from test_engine import _models, assert_fused_equal

TRANSPORTS = ("shm", "tcp")


@pytest.fixture
def mods(torch):
    torch.manual_seed(3)
    TinyLM, FusedEngineLM = _models(torch)

    class InPlaceLM(TinyLM):
        def load_weights(self, weights):  # in-place mode must never call it
            raise AssertionError("in_place mode called load_weights")

    return TinyLM, FusedEngineLM, InPlaceLM


class VllmWorker:
    """vLLM's Worker weight-transfer methods (vllm/v1/worker/gpu_worker.py), against our engine."""

    def __init__(self, model, device="cpu"):
        from weightsync.vllm_backend import WeightsyncWeightTransferEngine

        # create_engine(config, vllm_config, device, model), as WeightTransferEngineFactory does
        self.engine = WeightsyncWeightTransferEngine(config=object(), vllm_config=_VllmConfig(), device=_Device(device),
                                                     model=model)
        self.active = False
        self.weight_version = None  # the engine-level version string (AsyncLLM.update_weight_version)

    def init_weight_transfer_engine(self, init_info):
        self.engine.init_transfer_engine(self.engine.parse_init_info(init_info))

    def start_weight_update(self):
        if self.active:
            raise RuntimeError("start_weight_update called while a weight update is already active")
        self.engine.start_weight_update()
        self.active = True

    def update_weights(self, update_info):
        if not self.active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        try:
            self.engine.update_weights(update_info)
        except BaseException:
            self.active = False
            raise

    def finish_weight_update(self):
        if not self.active:
            raise RuntimeError("finish_weight_update called without a matching start_weight_update.")
        self.engine.finish_weight_update()
        self.active = False

    def shutdown(self):
        self.engine.shutdown()


class _VllmConfig:
    parallel_config = None
    model_config = "model-config"


class _Device:
    def __init__(self, kind):
        self.type = kind


class WorkerClient:
    """The trainer's VLLMWeightSyncClient to one worker (four methods, plain dicts)."""

    def __init__(self, worker):
        self.worker = worker
        self.calls = []

    def init_weight_transfer_engine(self, init_info):
        self.calls.append("init")
        self.worker.init_weight_transfer_engine(init_info)

    def start_weight_update(self):
        self.calls.append("start")
        self.worker.start_weight_update()

    def update_weights(self, update_info):
        self.calls.append("update")
        self.worker.update_weights(update_info)

    def finish_weight_update(self, weight_version=None):
        self.calls.append("finish")
        self.worker.finish_weight_update()
        if weight_version is not None:
            self.worker.weight_version = weight_version


def train_step(torch, model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def trainer_engine(ws_vllm_trainer, trainer, client, **info):
    info.setdefault("wait_seconds", 5.0)
    init = ws_vllm_trainer.WeightsyncTrainerInitInfo(rank=0, **info)
    return ws_vllm_trainer.WeightsyncTrainerEngine.trainer_init(init, client=client,
                                                                source=ws_vllm_trainer.ModuleSource(trainer))


@pytest.fixture
def vt(torch, ws):
    return importlib.import_module("weightsync.vllm_trainer")


def layer_of(name):
    for part in name.split("."):
        if part.isdigit():
            return int(part)
    return None


def test_defined_against(ws):
    from weightsync import _vllm_api, vllm_backend

    try:
        importlib.import_module("vllm")
        have_vllm = True
    except ImportError:
        have_vllm = False
    assert vllm_backend.describe()["vllm"] == have_vllm == _vllm_api.VLLM
    if not have_vllm:
        from weightsync import _vllm_standin
        assert vllm_backend.WeightsyncWeightTransferEngine.__mro__[1] is _vllm_standin.WeightTransferEngine


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_checkpoint_mode_in_vllm_order_two_replicas(torch, mods, vt, transport):
    """init, then per version start -> update -> finish on two replicas; load_weights fed one
    decoder layer per call in layer order; every parameter checked after each version."""
    TinyLM, FusedEngineLM, _ = mods
    trainer = TinyLM()
    engines = [FusedEngineLM(), FusedEngineLM()]
    workers = [VllmWorker(m) for m in engines]
    clients = [WorkerClient(w) for w in workers]
    eng = trainer_engine(vt, trainer, vt.FanOutClient(clients), transport=transport)
    try:
        assert workers[0].engine._receiver.subscriber.transport == transport
        groups = [[n for n in g] for g in vt.layerwise_groups(list(eng.publisher.layout.names))]
        for version in (1, 2, 3):
            sd = train_step(torch, trainer)
            for m in engines:
                m.received.clear()
                m.calls = 0
            eng.send_weights()
            assert eng.publisher.latest_version == version
            for m, w in zip(engines, workers):
                assert_fused_equal(torch, m, sd)
                assert w.engine.version == version and w.weight_version == str(version)
                assert m.calls == len(groups)  # one load_weights call per decoder layer group
                names = [r[0] for r in m.received]
                assert names == [n for g in groups for n in g]  # checkpoint names, layer order
                layers = [layer_of(n) for n in names if layer_of(n) is not None]
                assert layers == sorted(layers)
            assert not any(w.active for w in workers)
        assert clients[0].calls == ["init"] + ["start", "update", "finish"] * 3
    finally:
        eng.shutdown()
        for w in workers:
            w.shutdown()


def test_layout_is_in_layer_order_and_out_of_order_sources_are_refused(torch, mods, vt):
    """A trainer whose parameters come out of layer order (lm_head first, layer 1 before 0):
    the publisher's layout is in layer order (vLLM's layerwise_groups, flattened), and
    iterating such a source raises before anything is published, as vLLM's default
    WeightSource.iter_groups does (iteration must follow the per-layer groups)."""
    TinyLM, FusedEngineLM, _ = mods
    source_model = TinyLM()
    nn = torch.nn

    class Shuffled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lm_head = source_model.lm_head
            self.layers = nn.ModuleDict({"1": source_model.layers[1], "0": source_model.layers[0]})
            self.embed_tokens = source_model.embed_tokens
            self.norm = source_model.norm

    trainer = Shuffled()
    declared = [n for n, _ in trainer.named_parameters()]
    names = list(vt.layer_ordered_layout(vt.ModuleSource(trainer).metadata()).names)
    assert sorted(names) == sorted(declared) and names != declared
    layers = [layer_of(n) for n in names]
    indexed = [x for x in layers if x is not None]
    assert indexed == sorted(indexed)
    first, last = layers.index(0), len(layers) - 1 - layers[::-1].index(1)
    assert None not in layers[first:last + 1]  # each layer's tensors contiguous, layer 0 first
    worker = VllmWorker(FusedEngineLM())
    client = WorkerClient(worker)
    eng = trainer_engine(vt, trainer, client)
    try:
        with pytest.raises(RuntimeError, match="order"):
            eng.send_weights()
        assert eng.publisher.latest_version == 0 and client.calls == ["init"]
    finally:
        eng.shutdown()
        worker.shutdown()


def test_in_place_mode_scatters_into_the_same_memory(torch, mods, vt):
    TinyLM, _, InPlaceLM = mods
    trainer, engine = TinyLM(), InPlaceLM()
    ptrs = {n: p.data_ptr() for n, p in engine.named_parameters()}
    worker = VllmWorker(engine)
    eng = trainer_engine(vt, trainer, WorkerClient(worker), mode="in_place")
    try:
        for version in (1, 2, 3):
            sd = train_step(torch, trainer)
            eng.send_weights()
            for n, t in engine.state_dict().items():
                assert torch.equal(t, sd[n]), n
            assert {n: p.data_ptr() for n, p in engine.named_parameters()} == ptrs
            assert worker.engine.version == version
    finally:
        eng.shutdown()
        worker.shutdown()


def snapshot(model):
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def assert_same(torch, model, snap):
    now = model.state_dict()
    assert set(now) == set(snap)
    for n, t in snap.items():
        assert torch.equal(now[n], t), n


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_publisher_gone_raises_and_the_previous_weights_serve(torch, mods, vt, transport):
    TinyLM, FusedEngineLM, _ = mods
    trainer, engine = TinyLM(), FusedEngineLM()
    worker = VllmWorker(engine)
    eng = trainer_engine(vt, trainer, WorkerClient(worker), transport=transport)
    train_step(torch, trainer)
    eng.send_weights()
    before = snapshot(engine)
    eng.shutdown()  # the trainer's publisher is gone
    worker.start_weight_update()
    with pytest.raises(Exception) as failed:
        worker.update_weights({"version": 2, "wait_seconds": 2})
    assert not isinstance(failed.value, (AssertionError, RuntimeError)), failed.value
    assert_same(torch, engine, before)
    assert worker.engine.version == 1 and not worker.active
    with pytest.raises(RuntimeError):  # the session ended with the failure, as in vLLM's worker
        worker.finish_weight_update()
    worker.shutdown()


@pytest.mark.parametrize("mode", ["checkpoint", "in_place"])
def test_a_version_failing_its_checksum_after_the_transfer_is_never_installed(torch, ws, mods, mode):
    """The bytes arrive, then the whole-version checksum fails: the pull raises after the
    transfer, and the model still holds the previous version (the network wrote staging only)."""
    TinyLM, FusedEngineLM, InPlaceLM = mods
    trainer = TinyLM()
    engine = InPlaceLM() if mode == "in_place" else FusedEngineLM()
    pub = ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1", checksum=True)
    worker = VllmWorker(engine)
    try:
        sd = train_step(torch, trainer)
        pub.publish(trainer.state_dict(), 1)
        worker.init_weight_transfer_engine({"address": pub.address, "mode": mode})
        worker.start_weight_update()
        worker.update_weights({"version": 1})
        worker.finish_weight_update()
        before = snapshot(engine)
        train_step(torch, trainer)
        with pub.writing(2) as slot:
            slot.copy_from(trainer.state_dict())
            address, size = slot._core.address, slot._core.size
        ctypes.memset(address, 0x5A, size)  # scribbled over after the commit
        worker.start_weight_update()
        with pytest.raises(ws.ChecksumMismatch):
            worker.update_weights({"version": 2, "wait_seconds": 2})
        assert_same(torch, engine, before)
        assert worker.engine.version == 1
        if mode == "checkpoint":
            assert_fused_equal(torch, engine, sd)
    finally:
        worker.shutdown()
        pub.close()


def test_staging_forgets_a_failed_pull(torch, ws, mods):
    """After a failed pull the staging buffer holds no version: nothing can be installed from it."""
    from weightsync._staging import StagingReceiver

    trainer = mods[0]()
    pub = ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1")
    receiver = StagingReceiver(pub.address)
    try:
        pub.publish(trainer.state_dict(), 1)
        assert receiver.pull(None, 2) == 1 and receiver.staged_version == 1
        with pytest.raises(ws.NotReady):
            receiver.pull(5, 0.1)
        assert receiver.staged_version == 0
        with pytest.raises(ws.InvalidArgument):
            receiver.feed(lambda weights: None)
        with pytest.raises(ws.InvalidArgument):
            receiver.scatter(trainer)
    finally:
        receiver.close()
        pub.close()


def test_version_never_published_raises_not_ready_and_touches_nothing(torch, ws, mods, vt):
    TinyLM, FusedEngineLM, _ = mods
    trainer, engine = TinyLM(), FusedEngineLM()
    worker = VllmWorker(engine)
    eng = trainer_engine(vt, trainer, WorkerClient(worker))
    try:
        train_step(torch, trainer)
        eng.send_weights()
        before = snapshot(engine)
        worker.start_weight_update()
        with pytest.raises(ws.NotReady):
            worker.update_weights({"version": 7, "wait_seconds": 0.3})
        assert_same(torch, engine, before)
        assert worker.engine.version == 1
        eng.send_weights()  # the next round works
        assert worker.engine.version == 2
    finally:
        eng.shutdown()
        worker.shutdown()


def test_wrong_secret_raises_and_keeps_the_working_connection(torch, ws, mods, vt):
    TinyLM, FusedEngineLM, _ = mods
    trainer, engine = TinyLM(), FusedEngineLM()
    worker = VllmWorker(engine)
    eng = trainer_engine(vt, trainer, WorkerClient(worker), secret="the right secret", forward_secret=True)
    try:
        sd = train_step(torch, trainer)
        eng.send_weights()
        with pytest.raises(ws.AuthFailed):
            worker.init_weight_transfer_engine({"address": eng.publisher.address, "secret": "a wrong secret"})
        assert_fused_equal(torch, engine, sd)
        sd = train_step(torch, trainer)
        eng.send_weights()  # the connection made with the right secret still serves
        assert_fused_equal(torch, engine, sd)
        fresh = VllmWorker(FusedEngineLM())
        with pytest.raises(ws.AuthFailed):
            fresh.init_weight_transfer_engine({"address": eng.publisher.address, "secret": "a wrong secret"})
        with pytest.raises(RuntimeError, match="not initialized"):
            fresh.start_weight_update()
    finally:
        eng.shutdown()
        worker.shutdown()


@pytest.mark.parametrize("info", [
    {"address": "127.0.0.1:1", "unknown": 1},
    {"address": 5},
    {"address": []},
    {"address": ["h:1"] * 65},
    {"address": "x" * 1025},
    {"address": "127.0.0.1:1", "mode": "sideways"},
    {"address": "127.0.0.1:1", "wait_seconds": float("nan")},
    {"address": "127.0.0.1:1", "wait_seconds": -1},
    {"address": "127.0.0.1:1", "wait_seconds": 1e9},
    {"address": "127.0.0.1:1", "secret": 42},
    "not a dict",
])
def test_hostile_init_info_is_refused(torch, mods, info):
    worker = VllmWorker(mods[1]())
    with pytest.raises(ValueError):
        worker.init_weight_transfer_engine(info)
    assert worker.engine._receiver is None


@pytest.mark.parametrize("update", [
    {"version": 0}, {"version": -3}, {"version": 2 ** 63}, {"version": True}, {"version": "2"},
    {"version": 1.5}, {"wait_seconds": "soon"}, {"wait_seconds": float("inf")}, {"surprise": 1}, [1, 2],
])
def test_hostile_update_info_is_refused_and_touches_nothing(torch, mods, vt, update):
    TinyLM, FusedEngineLM, _ = mods
    trainer, engine = TinyLM(), FusedEngineLM()
    worker = VllmWorker(engine)
    eng = trainer_engine(vt, trainer, WorkerClient(worker))
    try:
        eng.send_weights()
        before = snapshot(engine)
        worker.start_weight_update()
        with pytest.raises(ValueError):
            worker.update_weights(update)
        assert_same(torch, engine, before)
        assert worker.engine.version == 1 and not worker.active
    finally:
        eng.shutdown()
        worker.shutdown()


def test_calls_out_of_order_raise(torch, mods, vt):
    TinyLM, FusedEngineLM, _ = mods
    worker = VllmWorker(FusedEngineLM())
    eng = trainer_engine(vt, TinyLM(), WorkerClient(worker))
    try:
        e = worker.engine
        with pytest.raises(RuntimeError):
            e.receive_weights(e.parse_update_info({}))
        with pytest.raises(RuntimeError):
            e.finish_weight_update()
        e.start_weight_update()
        with pytest.raises(RuntimeError):
            e.start_weight_update()
    finally:
        eng.shutdown()
        worker.shutdown()


def test_layerwise_reload_begins_only_after_a_whole_pull(torch, mods, vt, monkeypatch):
    """vLLM's initialize/finalize_layerwise_reload: initialized after the version is staged,
    finalized at finish; a failed pull calls neither (the model is never unwrapped)."""
    from weightsync import _vllm_api

    TinyLM, FusedEngineLM, _ = mods
    trainer, engine = TinyLM(), FusedEngineLM()
    events = []

    def initialize(model):
        events.append(("initialize", model.calls))

    def finalize(model, model_config):
        events.append(("finalize", model.calls, model_config))

    monkeypatch.setattr(_vllm_api, "reload_hooks", lambda: (initialize, finalize))
    worker = VllmWorker(engine)
    eng = trainer_engine(vt, trainer, WorkerClient(worker))
    try:
        eng.send_weights()
        groups = len(worker.engine._receiver.groups)
        assert events == [("initialize", 0), ("finalize", groups, "model-config")]
        events.clear()
        worker.start_weight_update()
        with pytest.raises(Exception):
            worker.update_weights({"version": 9, "wait_seconds": 0.2})
        assert events == []
    finally:
        eng.shutdown()
        worker.shutdown()


def test_a_non_sender_rank_iterates_and_touches_nothing(torch, mods, vt):
    """Trainer ranks other than 0 drive the source's iteration (the collectives) but make no
    publisher and never call the client."""
    TinyLM = mods[0]
    seen = []

    class CountingSource(vt.ModuleSource):
        def __iter__(self):
            for name, tensor in super().__iter__():
                seen.append(name)
                yield name, tensor

    client = WorkerClient(None)
    eng = vt.WeightsyncTrainerEngine.trainer_init(vt.WeightsyncTrainerInitInfo(rank=1), client=client,
                                                  source=CountingSource(TinyLM()))
    assert eng.publisher is None and not eng.is_sender
    eng.send_weights()
    eng.send_weights()
    assert client.calls == [] and eng.version == 2
    assert len(seen) == 2 * len(list(TinyLM().parameters()))


def test_worker_init_refuses_a_model_that_does_not_fit_its_mode(torch, ws, mods, vt):
    TinyLM, FusedEngineLM, _ = mods
    pub = ws.Publisher(ws.Layout.from_state_dict(TinyLM().state_dict()), bind="127.0.0.1")
    try:
        with pytest.raises(ws.InvalidArgument, match="in-place"):  # fused names are not the trainer's
            VllmWorker(FusedEngineLM()).init_weight_transfer_engine({"address": pub.address, "mode": "in_place"})
        plain = torch.nn.Linear(2, 2)
        with pytest.raises(ValueError, match="load_weights"):
            VllmWorker(plain).init_weight_transfer_engine({"address": pub.address})
    finally:
        pub.close()


def test_older_static_trainer_send_weights_publishes_a_version(torch, ws, mods):
    from weightsync.vllm_backend import WeightsyncWeightTransferEngine

    trainer = mods[0]()
    pub = ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1")
    try:
        WeightsyncWeightTransferEngine.trainer_send_weights(iter(trainer.state_dict().items()),
                                                            {"publisher": pub, "version": 4})
        assert pub.latest_version == 4
        with pytest.raises(ValueError):
            WeightsyncWeightTransferEngine.trainer_send_weights(iter([]), {"version": 5})
    finally:
        pub.close()


class LyingSource:
    """A WeightSource whose iteration breaks its metadata() (the trainer side's attack surface)."""

    def __init__(self, module, how):
        from weightsync.vllm_trainer import ModuleSource

        self.inner = ModuleSource(module)
        self.how = how

    def metadata(self):
        return self.inner.metadata()

    def __iter__(self):
        items = list(self.inner)
        if self.how == "shape":
            items[1] = (items[1][0], items[1][1][:1])
        elif self.how == "missing":
            items = items[:-1]
        elif self.how == "dtype":
            items[0] = (items[0][0], items[0][1].double())
        for item in items:
            yield item


@pytest.mark.parametrize("how", ["shape", "missing", "dtype"])
def test_a_source_that_breaks_its_metadata_is_never_published(torch, mods, vt, how):
    TinyLM, FusedEngineLM, _ = mods
    trainer, engine = TinyLM(), FusedEngineLM()
    worker = VllmWorker(engine)
    client = WorkerClient(worker)
    eng = vt.WeightsyncTrainerEngine.trainer_init(vt.WeightsyncTrainerInitInfo(rank=0), client=client,
                                                  source=LyingSource(trainer, how))
    try:
        with pytest.raises((ValueError, RuntimeError, StopIteration)):
            eng.send_weights()
        assert eng.publisher.latest_version == 0 and eng.version == 0
        assert client.calls == ["init"]  # no start, no update: the workers never see it
    finally:
        eng.shutdown()
        worker.shutdown()


def test_fan_out_reaches_every_replica_then_raises(torch, mods, vt):
    TinyLM, FusedEngineLM, _ = mods
    trainer = TinyLM()
    good, broken = FusedEngineLM(), FusedEngineLM()
    workers = [VllmWorker(broken), VllmWorker(good)]
    eng = trainer_engine(vt, trainer, vt.FanOutClient([WorkerClient(w) for w in workers]))
    try:
        eng.send_weights()
        workers[0].shutdown()  # replica 0 lost its connection (its weights stay at version 1)
        sd = train_step(torch, trainer)
        with pytest.raises(RuntimeError, match="1 of 2 replicas.*replica 0"):
            eng.send_weights()
        assert_fused_equal(torch, good, sd)  # replica 1 was reached and finished
        assert workers[1].engine.version == 2 and workers[1].weight_version == "2"
        assert not workers[1].active
    finally:
        eng.shutdown()
        workers[1].shutdown()


def test_plugin_registers_once_with_a_vllm_shaped_factory(torch, mods, ws):
    """register() against factories with vLLM's registry semantics (duplicate names raise);
    create_engine then builds our engine by module path, lazily."""
    from weightsync import vllm_plugin

    class Factory:
        _registry = {}

        @classmethod
        def register_engine(cls, name, module_path_or_cls, class_name=None):
            if name in cls._registry:
                raise ValueError(f"Weight transfer engine '{name}' is already registered.")
            cls._registry[name] = lambda: getattr(importlib.import_module(module_path_or_cls), class_name)

        @classmethod
        def create_engine(cls, config, vllm_config, device, model):
            return cls._registry[config.backend]()(config, vllm_config, device, model)

    class TrainerFactory(Factory):
        _registry = {}

    class Config:
        backend = "weightsync"

    assert vllm_plugin.register(Factory, TrainerFactory)
    assert vllm_plugin.register(Factory, TrainerFactory)  # loaded again in the same process: no error
    assert list(Factory._registry) == ["weightsync"] and list(TrainerFactory._registry) == ["weightsync"]
    from weightsync.vllm_backend import WeightsyncWeightTransferEngine
    from weightsync.vllm_trainer import WeightsyncTrainerEngine

    engine = Factory.create_engine(Config(), _VllmConfig(), _Device("cpu"), mods[1]())
    assert isinstance(engine, WeightsyncWeightTransferEngine)
    assert TrainerFactory._registry["weightsync"]() is WeightsyncTrainerEngine
    assert vllm_plugin.BACKEND == WeightsyncTrainerEngine.init_info_cls.backend


def test_entry_point_is_declared(ws):
    """vllm.general_plugins lists weightsync.vllm_plugin:register (the dist-info beside the package)."""
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="vllm.general_plugins") if e.name == "weightsync"]
    assert [e.value for e in found] == ["weightsync.vllm_plugin:register"]
    from weightsync import vllm_plugin

    assert found[0].load() is vllm_plugin.register


# ---- SGLang: update_weights_from_tensor with a custom loader and weight_version ----------------------


class SglangServer:
    """SGLang's ModelRunner.update_weights_from_tensor (custom loader branch) and the tokenizer
    manager's weight_version rule (set only when the update succeeded)."""

    def __init__(self, model, custom_weight_loader):
        self.model = model
        self.custom_weight_loader = list(custom_weight_loader)
        self.weight_version = "default"

    def update_weights_from_tensor(self, named_tensors, load_format=None, weight_version=None):
        try:
            if load_format not in self.custom_weight_loader:
                raise NotImplementedError(f"Unknown load_format={load_format}")
            module, _, attr = load_format.rpartition(".")
            custom_loader = getattr(importlib.import_module(module), attr)  # SGLang's dynamic_import
            self.returned = custom_loader(self.model, named_tensors)
            success, message = True, "Success"
        except Exception as e:
            success, message = False, f"Failed to update weights: {e}"
        if success and weight_version is not None:
            self.weight_version = weight_version
        return success, message


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sglang_custom_loader_installs_the_version_it_names(torch, ws, mods, transport, monkeypatch):
    from weightsync import sglang_loader

    monkeypatch.setenv("WEIGHTSYNC_TRANSPORT", transport)
    TinyLM, FusedEngineLM, _ = mods
    trainer, engine = TinyLM(), FusedEngineLM()
    pub = ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1", slots=3)
    server = SglangServer(engine, ["weightsync.sglang_loader.load"])
    try:
        for version in (1, 2, 3):
            sd = train_step(torch, trainer)
            pub.publish(trainer.state_dict(), version)
            ok, message = server.update_weights_from_tensor(
                sglang_loader.request(pub.address, version=version, wait=5),
                load_format="weightsync.sglang_loader.load", weight_version=str(version))
            assert ok, message
            assert server.returned == version and server.weight_version == str(version)
            assert_fused_equal(torch, engine, sd)
        assert sglang_loader._receivers[engine][2].subscriber.transport == transport
        before = snapshot(engine)
        ok, _ = server.update_weights_from_tensor(sglang_loader.request(pub.address, version=9, wait=0.2),
                                                  load_format="weightsync.sglang_loader.load", weight_version="9")
        assert not ok and server.weight_version == "3"
        assert_same(torch, engine, before)
        address = pub.address
        pub.close()  # the trainer is gone
        ok, _ = server.update_weights_from_tensor(sglang_loader.request(address, version=4, wait=1),
                                                  load_format="weightsync.sglang_loader.load", weight_version="4")
        assert not ok and server.weight_version == "3"
        assert_same(torch, engine, before)
    finally:
        sglang_loader.close()
        pub.close()


def test_sglang_loader_wrong_secret_fails_and_in_place_works(torch, ws, mods):
    from weightsync import sglang_loader

    TinyLM, _, InPlaceLM = mods
    trainer, engine = TinyLM(), InPlaceLM()
    pub = ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1", secret="right")
    server = SglangServer(engine, ["weightsync.sglang_loader.load"])
    try:
        sd = train_step(torch, trainer)
        pub.publish(trainer.state_dict(), 1)
        before = snapshot(engine)
        ok, message = server.update_weights_from_tensor(
            sglang_loader.request(pub.address, version=1, secret="wrong", in_place=True),
            load_format="weightsync.sglang_loader.load", weight_version="1")
        assert not ok and "uthentic" in message and server.weight_version == "default"
        assert_same(torch, engine, before)
        ok, message = server.update_weights_from_tensor(
            sglang_loader.request(pub.address, version=1, secret="right", in_place=True),
            load_format="weightsync.sglang_loader.load", weight_version="1")
        assert ok, message
        assert server.weight_version == "1"
        for n, t in engine.state_dict().items():
            assert torch.equal(t, sd[n]), n
    finally:
        sglang_loader.close()
        pub.close()


@pytest.mark.parametrize("bad", [
    [], [("weightsync.address", "127.0.0.1:1")], [("model.layers.0.q_proj.weight", None)],
    "address", [("weightsync.address", [1])],
    [("weightsync.address", "u8:" + "a" * 4097)],
    [("weightsync.address", "u8:h:1"), ("weightsync.address", "u8:h:1")],
    [("weightsync.address", "u8:h:1"), ("weightsync.version", "i64:0")],
    [("weightsync.address", "u8:h:1"), ("weightsync.version", "i64:-5")],
    [("weightsync.address", "u8:h:1"), ("weightsync.wait_ms", "i64:-1")],
    [("weightsync.address", "u8:h:1"), ("weightsync.wait_ms", "i64:99999999999")],
    [("weightsync.address", "f32:1")],
    [("weightsync.address", "bytes:\xff\xfe")],
    [("weightsync.address", "u8:127.0.0.1:1"), ("model.embed_tokens.weight", "i64:1")],
])
def test_sglang_loader_refuses_hostile_requests(torch, mods, bad):
    from weightsync import sglang_loader

    def tensor(spec):
        if not isinstance(spec, str) or ":" not in spec:
            return spec
        kind, _, text = spec.partition(":")
        if kind == "u8":
            return torch.tensor(list(text.encode()), dtype=torch.uint8)
        if kind == "bytes":
            return torch.tensor(list(text.encode("latin-1")), dtype=torch.uint8)
        if kind == "i64":
            return torch.tensor([int(text)], dtype=torch.int64)
        return torch.tensor([float(text)], dtype=torch.float32)

    named = bad if isinstance(bad, str) else [(n, tensor(t)) for n, t in bad]
    engine = mods[1]()
    before = snapshot(engine)
    with pytest.raises(ValueError):
        sglang_loader.load(engine, named)
    assert_same(torch, engine, before)


@pytest.mark.parametrize("args", [dict(address=""), dict(address=5), dict(address=["h:1", ""]),
                                  dict(address="h" * 5000), dict(address="h:1", version=0),
                                  dict(address="h:1", wait=-1), dict(address="h:1", secret="")])
def test_sglang_request_refuses_bad_arguments(torch, args):
    from weightsync import sglang_loader

    with pytest.raises(ValueError):
        sglang_loader.request(**args)


def test_sglang_request_round_trips_through_the_loader_parse(torch):
    from weightsync import sglang_loader

    parsed = sglang_loader._parse(sglang_loader.request(["a:1", "b:2"], version=7, wait=1.5, secret="s",
                                                        in_place=True))
    assert parsed == {"address": "a:1,b:2", "secret": "s", "version": 7, "wait": 1.5, "in_place": True}


def test_cuda_in_place_and_checkpoint_drain_before_returning(torch, mods, vt):
    """On a GPU: the update has landed in the CUDA parameters when update_weights returns."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    TinyLM, FusedEngineLM, InPlaceLM = mods
    trainer = TinyLM()
    in_place, fused = InPlaceLM().cuda(), FusedEngineLM().cuda()
    ptrs = {n: p.data_ptr() for n, p in in_place.named_parameters()}
    w1, w2 = VllmWorker(in_place, "cuda"), VllmWorker(fused, "cuda")
    eng1 = trainer_engine(vt, trainer, WorkerClient(w1), mode="in_place")
    eng2 = trainer_engine(vt, trainer, WorkerClient(w2))
    try:
        for _ in range(3):
            sd = train_step(torch, trainer)
            eng1.send_weights()
            eng2.send_weights()
            for n, t in in_place.state_dict().items():
                assert torch.equal(t.cpu(), sd[n]), n
            assert {n: p.data_ptr() for n, p in in_place.named_parameters()} == ptrs
            assert_fused_equal(torch, copy.deepcopy(fused).cpu(), sd)
    finally:
        eng1.shutdown()
        eng2.shutdown()
        w1.shutdown()
        w2.shutdown()

