"""EngineAdapter against small stand-in engines (issue 17, item 3).

Two stand-ins for an inference engine, both serving the trainer's TinyLM:
``TinyLM`` itself (the engine's parameters are the trainer's: direct mode)
and ``FusedEngineLM``, shaped like a vLLM model class: names prefixed
``model.``, ``qkv_proj`` = cat(q, k, v) with fewer k/v heads than q heads,
``gate_up_proj`` = cat(gate, up), and a ``load_weights(weights)`` that maps
the trainer's names onto them with vLLM's ``stacked_params_mapping`` and
per-parameter ``weight_loader(param, weight, shard_id)``. Every publisher
here listens on loopback.
"""

import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

VOCAB, HIDDEN, HEADS, KV_HEADS, FFN = 32, 16, 4, 2, 24
HEAD_DIM = HIDDEN // HEADS
KV = KV_HEADS * HEAD_DIM


def _models(torch):
    """The trainer's model and the fused stand-in engine (classes made on demand: torch is optional)."""
    nn = torch.nn
    F = torch.nn.functional

    def attention(x, q, k, v):
        # Causal attention with grouped k/v heads, the same maths for both models.
        t = x.shape[0]
        q = q.view(t, HEADS, HEAD_DIM).transpose(0, 1)
        k = k.view(t, KV_HEADS, HEAD_DIM).transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
        v = v.view(t, KV_HEADS, HEAD_DIM).transpose(0, 1).repeat_interleave(HEADS // KV_HEADS, 0)
        scores = q @ k.transpose(1, 2) / HEAD_DIM ** 0.5
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return (scores.softmax(-1) @ v).transpose(0, 1).reshape(t, HIDDEN)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.k_proj = nn.Linear(HIDDEN, KV, bias=False)
            self.v_proj = nn.Linear(HIDDEN, KV, bias=False)
            self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(HIDDEN, FFN, bias=False)
            self.up_proj = nn.Linear(HIDDEN, FFN, bias=False)
            self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = Attention()
            self.mlp = MLP()

    class TinyLM(nn.Module):
        """The trainer's model (Hugging Face style names); also the direct-mode engine."""

        def __init__(self, layers=2):
            super().__init__()
            self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = nn.LayerNorm(HIDDEN)
            self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
            self.load_weights_calls = 0

        def load_weights(self, weights):  # present so that auto mode has a choice to make
            self.load_weights_calls += 1
            raise AssertionError("direct mode must not call load_weights")

        def forward(self, tokens):
            x = self.embed_tokens(tokens)
            for layer in self.layers:
                a = layer.self_attn
                x = x + a.o_proj(attention(x, a.q_proj(x), a.k_proj(x), a.v_proj(x)))
                m = layer.mlp
                x = x + m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))
            return self.lm_head(self.norm(x))

    def sharded_param(shape, shards):
        """A Parameter with a vLLM-style weight_loader(param, weight, shard_id) copying into its slice."""
        param = nn.Parameter(torch.zeros(shape), requires_grad=False)

        def weight_loader(p, weight, shard_id):
            start, size = shards[shard_id]
            assert weight.shape[0] == size, (shard_id, tuple(weight.shape))
            p.data.narrow(0, start, size).copy_(weight)

        param.weight_loader = weight_loader
        return param

    class FusedAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv_proj = nn.Module()
            self.qkv_proj.weight = sharded_param(
                (HIDDEN + 2 * KV, HIDDEN), {"q": (0, HIDDEN), "k": (HIDDEN, KV), "v": (HIDDEN + KV, KV)})
            self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    class FusedMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up_proj = nn.Module()
            self.gate_up_proj.weight = sharded_param((2 * FFN, HIDDEN), {0: (0, FFN), 1: (FFN, FFN)})
            self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)

    class FusedLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = FusedAttention()
            self.mlp = FusedMLP()

    class FusedBody(nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
            self.layers = nn.ModuleList(FusedLayer() for _ in range(layers))
            self.norm = nn.LayerNorm(HIDDEN)

    class FusedEngineLM(nn.Module):
        """Shaped like a vLLM model class: model.* prefix, fused qkv_proj and gate_up_proj."""

        stacked_params_mapping = [
            # (param_name, shard_name, shard_id), as in vLLM's LlamaModel.load_weights
            (".qkv_proj", ".q_proj", "q"),
            (".qkv_proj", ".k_proj", "k"),
            (".qkv_proj", ".v_proj", "v"),
            (".gate_up_proj", ".gate_proj", 0),
            (".gate_up_proj", ".up_proj", 1),
        ]

        def __init__(self, layers=2):
            super().__init__()
            self.model = FusedBody(layers)
            self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
            self.received = []  # (trainer name, data_ptr, a copy of the tensor) per tensor given
            self.calls = 0

        @torch.no_grad()
        def load_weights(self, weights):
            self.calls += 1
            params = dict(self.named_parameters())
            loaded = set()
            for name, weight in weights:
                self.received.append((name, weight.data_ptr(), weight.clone()))
                name = name if name.startswith("lm_head.") else "model." + name
                for param_name, shard_name, shard_id in self.stacked_params_mapping:
                    if shard_name not in name:
                        continue
                    name = name.replace(shard_name, param_name)
                    param = params[name]
                    param.weight_loader(param, weight, shard_id)
                    break
                else:
                    params[name].data.copy_(weight)
                loaded.add(name)
            return loaded

        def forward(self, tokens):
            x = self.model.embed_tokens(tokens)
            for layer in self.model.layers:
                a = layer.self_attn
                q, k, v = a.qkv_proj.weight.split([HIDDEN, KV, KV], 0)
                x = x + a.o_proj(attention(x, x @ q.t(), x @ k.t(), x @ v.t()))
                gate, up = layer.mlp.gate_up_proj.weight.split([FFN, FFN], 0)
                x = x + layer.mlp.down_proj(F.silu(x @ gate.t()) * (x @ up.t()))
            return self.lm_head(self.model.norm(x))

    return TinyLM, FusedEngineLM


@pytest.fixture
def models(torch):
    torch.manual_seed(1)
    return _models(torch)


@pytest.fixture
def trainer(torch, ws, models):
    """(trainer model, publisher, publish(step)) with version 1 published; publish(step)
    perturbs every weight (a training step) and publishes the next version."""
    TinyLM, _ = models
    model = TinyLM()
    pub = ws.Publisher(ws.Layout.from_state_dict(model.state_dict()), bind="127.0.0.1", slots=3)

    def publish(version):
        if version > 1:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.1)
        pub.publish(model.state_dict(), version)
        return {n: t.detach().clone() for n, t in model.state_dict().items()}

    publish(1)
    yield model, pub, publish
    pub.close()


def expected_fused(torch, sd):
    """What the fused engine's parameters must be for the trainer's state_dict ``sd``."""
    out = {"lm_head.weight": sd["lm_head.weight"]}
    for name, t in sd.items():
        if name.startswith("lm_head."):
            continue
        if ".self_attn.q_proj." in name:
            p = name.replace(".q_proj.", ".")
            out["model." + name.replace(".q_proj.", ".qkv_proj.")] = torch.cat(
                [t, sd[p.replace(".self_attn.", ".self_attn.k_proj.")],
                 sd[p.replace(".self_attn.", ".self_attn.v_proj.")]])
        elif ".mlp.gate_proj." in name:
            out["model." + name.replace(".gate_proj.", ".gate_up_proj.")] = torch.cat(
                [t, sd[name.replace(".gate_proj.", ".up_proj.")]])
        elif any(s in name for s in (".k_proj.", ".v_proj.", ".up_proj.")):
            continue
        else:
            out["model." + name] = t
    return out


def assert_fused_equal(torch, engine, sd):
    want = expected_fused(torch, sd)
    have = dict(engine.named_parameters())
    assert set(have) == set(want)
    for name, t in want.items():
        assert torch.equal(have[name], t), name


def assert_same(torch, model, sd):
    have = model.state_dict()
    assert set(have) == set(sd)
    for name, t in sd.items():
        assert torch.equal(have[name], t), name


# ---- direct mode ---------------------------------------------------------------


def test_direct_mode_writes_into_the_engines_parameters(torch, ws, models, trainer):
    TinyLM, _ = models
    model, pub, _ = trainer
    engine = TinyLM()
    before = {n: (p.data_ptr(), p) for n, p in engine.state_dict(keep_vars=True).items()}
    assert not all(torch.equal(engine.state_dict()[n], t) for n, t in model.state_dict().items())

    with ws.EngineAdapter(pub.address, engine) as adapter:
        assert adapter.mode == "direct"
        assert adapter.buffer is None and adapter.direct_mismatch is None
        result = adapter.update_weights(wait=10)
        assert result is not None and result.version == 1 and adapter.version == 1
        assert result.bytes == adapter.layout.payload_bytes

    assert engine.load_weights_calls == 0
    after = engine.state_dict(keep_vars=True)
    for name, (ptr, param) in before.items():
        assert after[name] is param and after[name].data_ptr() == ptr, name  # same memory, written in place
    assert_same(torch, engine, model.state_dict())
    tokens = torch.arange(12) % VOCAB
    assert torch.equal(engine(tokens), model(tokens))


def test_direct_mode_names_the_mismatch(ws, models, trainer):
    _, FusedEngineLM = models
    _, pub, _ = trainer
    with pytest.raises(ws.InvalidArgument, match=r"direct mode: .*missing: embed_tokens\.weight"):
        ws.EngineAdapter(pub.address, FusedEngineLM(), mode="direct")


# ---- load_weights mode ---------------------------------------------------------


def test_load_weights_mode_gives_every_tensor_once_as_views_into_one_buffer(torch, ws, models, trainer):
    _, FusedEngineLM = models
    model, pub, _ = trainer
    engine = FusedEngineLM()
    params_before = {n: p.data_ptr() for n, p in engine.named_parameters()}

    with ws.EngineAdapter(pub.address, engine) as adapter:
        assert adapter.mode == "load_weights"
        assert "embed_tokens.weight" in adapter.direct_mismatch
        buf = adapter.buffer
        assert buf.dtype == torch.uint8 and buf.numel() == adapter.layout.total_bytes
        result = adapter.update_weights(wait=10)
        assert result.version == 1 and adapter.version == 1
        stats = adapter.stats()

    assert engine.calls == 1
    names = [n for n, _, _ in engine.received]
    assert sorted(names) == sorted(adapter.layout.names) and len(names) == len(set(names))
    sd = model.state_dict()
    lo, hi = buf.data_ptr(), buf.data_ptr() + buf.numel()
    for name, ptr, value in engine.received:
        info = adapter.layout[name]
        assert ptr == lo + info.offset and lo <= ptr < hi, name  # a view into the one buffer
        assert value.dtype == sd[name].dtype and torch.equal(value, sd[name]), name
    assert_fused_equal(torch, engine, sd)
    assert {n: p.data_ptr() for n, p in engine.named_parameters()} == params_before
    tokens = torch.arange(12) % VOCAB
    assert torch.allclose(engine(tokens), model(tokens), atol=1e-5)
    assert stats["updates"] == 1 and stats["mode"] == "load_weights" and stats["version"] == 1
    assert stats["last_tensors_loaded"] == len(adapter.layout)
    assert stats["pull_seconds"] > 0 and stats["load_seconds"] > 0


def test_load_weights_callable_without_a_model_and_dtype_conversion(torch, ws, models, trainer):
    """Same names but another dtype (a float64 engine): not direct; an explicit
    load_weights callable converts; before_load and after_load run around each load."""
    TinyLM, _ = models
    model, pub, publish = trainer
    engine = TinyLM().double()
    events = []

    @torch.no_grad()
    def load(weights):
        params = engine.state_dict()
        for name, t in weights:
            params[name].copy_(t)
            events.append(name)

    with ws.EngineAdapter(pub.address, engine, load_weights=load, before_load=lambda: events.append("before"),
                          after_load=lambda: events.append("after")) as a:
        assert a.mode == "load_weights" and "float64" in a.direct_mismatch
        assert a.update_weights(wait=10).version == 1
        assert events == ["before"] + a.layout.names + ["after"]
        sd = publish(2)
        assert a.update_weights(wait=10).version == 2
    for name, t in sd.items():
        assert torch.equal(engine.state_dict()[name], t.double()), name
    assert engine.load_weights_calls == 0


# ---- auto, versions ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["direct", "load_weights"])
def test_several_versions_in_a_row(torch, ws, models, trainer, kind):
    TinyLM, FusedEngineLM = models
    model, pub, publish = trainer
    engine = TinyLM() if kind == "direct" else FusedEngineLM()
    with ws.EngineAdapter(pub.address, engine) as adapter:
        assert adapter.mode == kind  # auto picked it
        ptr = adapter.buffer.data_ptr() if kind == "load_weights" else None
        sd = model.state_dict()
        for version in range(1, 6):
            if version > 1:
                sd = publish(version)
            result = adapter.update_weights(wait=10)
            assert result.version == version and adapter.version == version
            if kind == "direct":
                assert_same(torch, engine, sd)
            else:
                assert_fused_equal(torch, engine, sd)
                assert adapter.buffer.data_ptr() == ptr  # one buffer, allocated once
            assert adapter.update_weights() is None  # nothing newer
        assert adapter.stats()["updates"] == 5
    if kind == "load_weights":
        assert engine.calls == 5 and len(engine.received) == 5 * len(adapter.layout)


def test_nothing_new_returns_none_and_leaves_the_engine_alone(torch, ws, models, trainer):
    _, FusedEngineLM = models
    _, pub, _ = trainer
    engine = FusedEngineLM()
    with ws.EngineAdapter(pub.address, engine) as adapter:
        assert adapter.update_weights(wait=10).version == 1
        t0 = time.monotonic()
        assert adapter.update_weights(wait=0.3) is None
        assert time.monotonic() - t0 >= 0.25  # it waited for a newer version
        assert adapter.update_weights() is None
        assert engine.calls == 1 and adapter.stats()["updates"] == 1 and adapter.version == 1


def test_exact_version(torch, ws, models, trainer):
    TinyLM, _ = models
    _, pub, publish = trainer
    v2 = publish(2)
    v3 = publish(3)
    engine = TinyLM()
    with ws.EngineAdapter(pub.address, engine) as adapter:
        assert adapter.update_weights(version=2, wait=10).version == 2
        assert adapter.version == 2
        assert_same(torch, engine, v2)
        assert adapter.update_weights().version == 3  # then the newest
        assert_same(torch, engine, v3)
        assert adapter.update_weights(version=2, wait=10).version == 2  # back to an older one
        assert_same(torch, engine, v2)
        with pytest.raises(ws.NotReady):
            adapter.update_weights(version=9, wait=0.2)
        assert adapter.version == 2  # nothing was written


def test_waiting_update_gets_a_version_published_meanwhile(torch, ws, models, trainer):
    _, FusedEngineLM = models
    _, pub, publish = trainer
    engine = FusedEngineLM()
    with ws.EngineAdapter(pub.address, engine) as adapter:
        adapter.update_weights(wait=10)
        published = {}
        timer = threading.Timer(0.3, lambda: published.setdefault(2, publish(2)))
        timer.start()
        try:
            result = adapter.update_weights(wait=10)
        finally:
            timer.join()
        assert result.version == 2
        assert_fused_equal(torch, engine, published[2])


def test_a_failed_load_is_repaired_by_the_next_update(torch, ws, models, trainer):
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

    with ws.EngineAdapter(pub.address, engine, load_weights=flaky) as adapter:
        assert adapter.update_weights(wait=10).version == 1
        sd = publish(2)
        fail.append(1)
        with pytest.raises(RuntimeError, match="half way"):
            adapter.update_weights(wait=10)
        assert adapter.version == 0 and adapter.stats()["failures"] == 1  # the weights are partly written
        result = adapter.update_weights(wait=10)  # version 2 again, since the engine lacks it
        assert result is not None and result.version == 2 and adapter.version == 2
        assert adapter.update_weights() is None
    assert_fused_equal(torch, engine, sd)


def test_a_failed_direct_pull_is_repaired_by_the_next_update(torch, ws, models, trainer):
    TinyLM, _ = models
    model, pub, _ = trainer
    engine = TinyLM()
    with ws.EngineAdapter(pub.address, engine) as adapter:
        assert adapter.update_weights(wait=10).version == 1
        adapter.cancel()  # the next pull raises Cancelled: its bytes may be partly written
        with pytest.raises(ws.Cancelled):
            adapter.update_weights(version=1, wait=10)
        assert adapter.version == 0
        with torch.no_grad():
            engine.lm_head.weight.zero_()  # as a torn pull could have left it
        assert adapter.update_weights().version == 1  # the same version again, in full
    assert_same(torch, engine, model.state_dict())


def test_async_update(torch, ws, models, trainer):
    TinyLM, _ = models
    model, pub, publish = trainer
    engine = TinyLM()
    with ws.EngineAdapter(pub.address, engine) as adapter:
        assert asyncio.run(adapter.update_weights_async(wait=10)).version == 1
        assert asyncio.run(adapter.update_weights_async()) is None

        async def cancelled():
            task = asyncio.ensure_future(adapter.update_weights_async(wait=30))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        t0 = time.monotonic()
        asyncio.run(cancelled())
        assert time.monotonic() - t0 < 5
        sd = publish(2)
        assert adapter.update_weights(wait=10).version == 2  # usable after the cancel
        assert_same(torch, engine, sd)


# ---- construction errors -------------------------------------------------------------


def test_a_layout_that_fits_neither_mode_is_refused_at_construction(torch, ws, trainer):
    _, pub, _ = trainer
    other = torch.nn.Sequential(torch.nn.Linear(4, 4))  # other names, and no load_weights
    with pytest.raises(ws.InvalidArgument, match=r"do not fit .*no load_weights") as info:
        ws.EngineAdapter(pub.address, other)
    assert isinstance(info.value, ValueError) and "missing" in str(info.value)
    with pytest.raises(ws.InvalidArgument, match="load_weights mode: the model has no load_weights"):
        ws.EngineAdapter(pub.address, other, mode="load_weights")
    with pytest.raises(ws.InvalidArgument, match="mode must be one of"):
        ws.EngineAdapter(pub.address, other, mode="fast")
    with pytest.raises(ws.InvalidArgument, match="needs the engine's model"):
        ws.EngineAdapter(pub.address, None)


def test_a_given_subscriber_stays_open(torch, ws, models, trainer):
    TinyLM, FusedEngineLM = models
    _, pub, _ = trainer
    sub = ws.Subscriber(pub.address)
    try:
        with pytest.raises(ws.InvalidArgument, match="only when EngineAdapter makes"):
            ws.EngineAdapter(sub, TinyLM(), secret="x")
        adapter = ws.EngineAdapter(sub, FusedEngineLM())
        assert adapter.subscriber is sub and adapter.update_weights(wait=10).version == 1
        adapter.close()
        assert not sub.closed
        with pytest.raises(ws.InvalidArgument, match="closed"):
            adapter.update_weights()
        assert ws.EngineAdapter(sub, TinyLM()).update_weights(wait=10).version == 1
    finally:
        sub.close()


def test_the_package_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None  # any 'import torch' now raises ImportError\n"
            "import weightsync\n"
            "assert weightsync.EngineAdapter.__doc__\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
