"""A Binding must never write memory its tensors no longer use (issue 30, finding 8).

``Subscriber.bind()`` registers the destination's memory once and every later
pull writes straight into it. When the engine re-allocates a bound tensor after
bind (``param.data = ...``, ``module._apply`` / ``half()`` / ``to()``, an
engine's post-load processing that replaces Parameters or submodules), a pull
must not write the memory the tensor had at bind time (freed memory: SIGSEGV
over shm, heap corruption over tcp; or an orphaned copy: a silently stale engine
while pulls report new versions). It must raise StaleBinding, naming the
tensor and saying to bind again, and write nothing; after a new bind() the pull
lands in the new memory. EngineAdapter's direct mode likewise (rebind()).

Every attack runs in a child process (run_attack): on a library without these
checks a pull into freed memory may crash the interpreter, and the test must
report that rather than take the suite down. Publishers listen on loopback.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the attacks (run in a child process) ----------------------------------------


def _setup(transport):
    import torch

    import weightsync as ws

    def make(seed):
        torch.manual_seed(seed)
        # Big enough (4 MiB) that a freed weight goes back to the OS (munmap).
        return torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.LayerNorm(1024),
                                   torch.nn.Linear(1024, 16), torch.nn.BatchNorm1d(16))

    trainer, engine = make(1), make(2)
    pub = ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1", slots=3)

    def publish(version):
        with torch.no_grad():
            for p in trainer.parameters():
                p.add_(0.125 * version)
        pub.publish(trainer.state_dict(), version)

    return torch, ws, trainer, engine, pub, publish


def _snapshot(module):
    return {n: t.detach().clone() for n, t in module.state_dict().items()}


def _assert_equal(torch, module, expected, what):
    have = module.state_dict()
    assert set(have) == set(expected), what
    for n, t in expected.items():
        assert have[n].dtype == t.dtype and torch.equal(have[n], t), f"{what}: {n} differs"


def _expect_stale(ws, pull, name):
    """Runs pull(); it must raise StaleBinding naming ``name`` and saying to bind again."""
    try:
        result = pull()
    except ws.WeightsyncError as e:
        assert type(e).__name__ == "StaleBinding", f"expected StaleBinding, got {type(e).__name__}: {e}"
        assert isinstance(e, ws.InvalidArgument) and isinstance(e, ValueError)
        assert f"'{name}'" in str(e) and "bind" in str(e), str(e)
        return e
    raise AssertionError(
        f"STALE: the pull returned {result!r} after the bound tensor '{name}' was re-allocated: it wrote "
        "the memory the tensor had at bind time (freed or orphaned), not the engine's")


def _attack_data_swap(transport):
    """param.data = new memory: the bound memory is freed (old code: written anyway)."""
    torch, ws, trainer, engine, pub, publish = _setup(transport)
    with pub, ws.Subscriber(pub.address, transport=transport) as sub:
        binding = sub.bind(engine)
        publish(1)
        assert sub.pull(binding, wait=10).version == 1
        _assert_equal(torch, engine, trainer.state_dict(), "version 1")
        victim = engine[0].weight
        victim.data = torch.full_like(victim, 7.0)  # the old 4 MiB is freed here (unless kept alive)
        before = _snapshot(engine)
        publish(2)
        for _ in range(3):  # every pull refuses, not just the first
            _expect_stale(ws, lambda: sub.pull(binding, wait=10), "0.weight")
        _assert_equal(torch, engine, before, "a refused pull wrote the engine")
        assert sub.held_version == 1
        with pytest.raises(ws.WeightsyncError):  # pull() with the last binding: the same check
            sub.pull(wait=0)
        binding = sub.bind(engine)  # re-bind: the new memory
        assert sub.pull(binding, wait=10).version == 2
        _assert_equal(torch, engine, trainer.state_dict(), "version 2 after re-binding")


def _attack_apply_clone(transport):
    """module._apply(clone): every tensor gets new memory (the old freed)."""
    torch, ws, trainer, engine, pub, publish = _setup(transport)
    with pub, ws.Subscriber(pub.address, transport=transport) as sub:
        binding = sub.bind(engine)
        publish(1)
        assert sub.pull(binding, wait=10).version == 1
        engine._apply(lambda t: t.clone())
        before = _snapshot(engine)
        publish(2)
        _expect_stale(ws, lambda: sub.pull(binding, wait=10), "0.weight")
        _assert_equal(torch, engine, before, "a refused pull wrote the engine")
        assert sub.pull(sub.bind(engine), wait=10).version == 2
        _assert_equal(torch, engine, trainer.state_dict(), "version 2 after re-binding")


def _attack_half(transport):
    """module.half(): new memory and another dtype (the old freed); bind() then refuses the dtype."""
    torch, ws, trainer, engine, pub, publish = _setup(transport)
    with pub, ws.Subscriber(pub.address, transport=transport) as sub:
        binding = sub.bind(engine)
        publish(1)
        assert sub.pull(binding, wait=10).version == 1
        engine.half()
        before = _snapshot(engine)
        publish(2)
        _expect_stale(ws, lambda: sub.pull(binding, wait=10), "0.weight")
        _assert_equal(torch, engine, before, "a refused pull wrote the engine")
        with pytest.raises(ws.InvalidArgument, match="float16"):
            sub.bind(engine)


def _attack_replace_parameter(transport):
    """Post-load processing that puts a new Parameter in the module: the old one lives on
    (the binding holds it), so old code pulls into it: a silently stale engine."""
    torch, ws, trainer, engine, pub, publish = _setup(transport)
    with pub, ws.Subscriber(pub.address, transport=transport) as sub:
        binding = sub.bind(engine)
        publish(1)
        assert sub.pull(binding, wait=10).version == 1
        engine[2].weight = torch.nn.Parameter(engine[2].weight.detach().clone())
        before = _snapshot(engine)
        publish(2)
        _expect_stale(ws, lambda: sub.pull(binding, wait=10), "2.weight")
        _assert_equal(torch, engine, before, "a refused pull wrote the engine")
        assert sub.pull(sub.bind(engine), wait=10).version == 2
        _assert_equal(torch, engine, trainer.state_dict(), "version 2 after re-binding")


def _attack_replace_submodule(transport):
    """A submodule swapped for a new one (its tensors are new memory)."""
    torch, ws, trainer, engine, pub, publish = _setup(transport)
    with pub, ws.Subscriber(pub.address, transport=transport) as sub:
        binding = sub.bind(engine)
        publish(1)
        assert sub.pull(binding, wait=10).version == 1
        engine[1] = torch.nn.LayerNorm(1024)
        before = _snapshot(engine)
        publish(2)
        _expect_stale(ws, lambda: sub.pull(binding, wait=10), "1.weight")
        _assert_equal(torch, engine, before, "a refused pull wrote the engine")
        assert sub.pull(sub.bind(engine), wait=10).version == 2
        _assert_equal(torch, engine, trainer.state_dict(), "version 2 after re-binding")


def _attack_packed(transport):
    """One packed buffer whose .data is swapped."""
    torch, ws, trainer, engine, pub, publish = _setup(transport)
    with pub, ws.Subscriber(pub.address, transport=transport) as sub:
        buffer = torch.zeros(sub.layout.total_bytes, dtype=torch.uint8)
        binding = sub.bind(buffer)
        publish(1)
        assert sub.pull(binding, wait=10).version == 1
        buffer.data = torch.zeros_like(buffer)
        publish(2)
        _expect_stale(ws, lambda: sub.pull(binding, wait=10), "<packed>")
        assert int(buffer.count_nonzero()) == 0, "a refused pull wrote the buffer"
        assert sub.pull(sub.bind(buffer), wait=10).version == 2
        assert int(buffer.count_nonzero()) > 0


def _attack_numpy_resize(transport):
    """A NumPy destination re-allocated in place (resize without the reference check)."""
    import numpy as np

    import weightsync as ws

    n = 1 << 20
    layout = ws.Layout([("w", "float32", [n])])
    with ws.Publisher(layout, bind="127.0.0.1") as pub, ws.Subscriber(pub.address, transport=transport) as sub:
        arr = np.zeros(n, dtype=np.float32)
        binding = sub.bind({"w": arr})
        pub.publish({"w": np.full(n, 2, dtype=np.float32)}, 1)
        assert sub.pull(binding, wait=10).version == 1 and arr[0] == 2
        arr.resize(2 * n, refcheck=False)  # new memory; the old is freed
        arr[:] = 5
        pub.publish({"w": np.full(n, 3, dtype=np.float32)}, 2)
        _expect_stale(ws, lambda: sub.pull(binding, wait=10), "w")
        assert (arr == 5).all(), "a refused pull wrote the array"


def _attack_adapter_direct(transport):
    """EngineAdapter in direct mode, then the engine's post-load processing re-allocates
    its weights (.data of one, a new Parameter for another)."""
    torch, ws, trainer, engine, pub, publish = _setup(transport)
    with pub, ws.EngineAdapter(pub.address, engine, mode="direct", transport=transport) as adapter:
        publish(1)
        assert adapter.update_weights(wait=10).version == 1 and adapter.version == 1
        engine[0].weight.data = engine[0].weight.data.clone()
        engine[2].bias = torch.nn.Parameter(engine[2].bias.detach().clone())
        before = _snapshot(engine)
        publish(2)
        e = _expect_stale(ws, lambda: adapter.update_weights(wait=10), "0.weight")
        assert "rebind()" in str(e), str(e)
        assert adapter.version == 0  # unknown now: the next update brings the newest in full
        _assert_equal(torch, engine, before, "a refused update wrote the engine")
        _expect_stale(ws, lambda: adapter.update_weights(wait=10), "0.weight")
        adapter.rebind()
        assert adapter.update_weights(wait=10).version == 2 and adapter.version == 2
        _assert_equal(torch, engine, trainer.state_dict(), "version 2 after rebind()")


ATTACKS = {
    "data_swap": _attack_data_swap,
    "apply_clone": _attack_apply_clone,
    "half": _attack_half,
    "replace_parameter": _attack_replace_parameter,
    "replace_submodule": _attack_replace_submodule,
    "packed": _attack_packed,
    "numpy_resize": _attack_numpy_resize,
    "adapter_direct": _attack_adapter_direct,
}


def run_attack(name, transport):
    """Runs one attack in a child process; fails the test with what happened."""
    code = (f"import sys; sys.path.insert(0, {HERE!r})\n"
            "import test_binding_lifetime as t\n"
            f"t.ATTACKS[{name!r}]({transport!r})\n"
            "print('ATTACK REFUSED: ok')\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the attack '{name}' over {transport} hung for {e.timeout} s")
    text = out.stdout + out.stderr
    if out.returncode < 0:
        pytest.fail(f"the attack '{name}' over {transport} crashed the process (signal {-out.returncode}): "
                    f"a pull wrote freed memory\n{text[-3000:]}")
    assert out.returncode == 0 and "ATTACK REFUSED: ok" in out.stdout, \
        f"the attack '{name}' over {transport} (exit {out.returncode}):\n{text[-3000:]}"


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_param_data_swap_is_refused_and_rebind_works(torch, transport):
    run_attack("data_swap", transport)


@pytest.mark.parametrize("attack,transport", [("apply_clone", "shm"), ("half", "tcp")])
def test_module_reallocation_is_refused(torch, attack, transport):
    run_attack(attack, transport)


@pytest.mark.parametrize("attack,transport", [("replace_parameter", "shm"), ("replace_submodule", "tcp")])
def test_replaced_parameters_and_submodules_are_refused(torch, attack, transport):
    run_attack(attack, transport)


def test_a_packed_buffer_swapped_is_refused(torch):
    run_attack("packed", "shm")


def test_a_numpy_destination_reallocated_is_refused():
    pytest.importorskip("numpy")
    run_attack("numpy_resize", "tcp")


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_engine_adapter_direct_mode_refuses_and_rebinds(torch, transport):
    run_attack("adapter_direct", transport)


def test_the_binding_keeps_the_bound_memory_alive(torch, ws):
    """The binding holds each tensor's storage: memory it may still write (a pull on
    another thread while the tensor is re-allocated) is never freed under it."""
    import gc

    layout = ws.Layout.from_state_dict({"w": torch.zeros(1 << 20)})
    with ws.Publisher(layout, bind="127.0.0.1") as pub, ws.Subscriber(pub.address, transport="tcp") as sub:
        t = torch.zeros(1 << 20)
        binding = sub.bind({"w": t})
        address = t.data_ptr()
        assert [s.data_ptr() for s in binding._storages] == [address]
        t.data = torch.ones(1 << 20)  # the binding's reference is now the only one
        gc.collect()
        assert binding._storages[0].data_ptr() == address  # still allocated, not freed
        with pytest.raises(ws.StaleBinding, match="'w'"):
            sub.pull(binding)


def test_an_unchanged_binding_pulls_as_before(torch, ws):
    """In-place writes (optimizer-style add_, copy_, zero_) keep the memory: no error."""
    trainer = torch.nn.Linear(8, 4)
    engine = torch.nn.Linear(8, 4)
    with ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1") as pub, \
            ws.Subscriber(pub.address) as sub:
        binding = sub.bind(engine)
        for version in (1, 2, 3):
            pub.publish(trainer.state_dict(), version)
            with torch.no_grad():
                engine.weight.zero_()
                engine.bias.copy_(torch.ones(4))
            assert sub.pull(binding, wait=10).version == version
            assert torch.equal(engine.weight, trainer.weight) and torch.equal(engine.bias, trainer.bias)


def test_engine_adapter_rebind_in_load_weights_mode_takes_a_new_buffer(torch, ws):
    """rebind() in load_weights mode: a new host buffer, bound; updates go on."""
    trainer = torch.nn.Linear(8, 4)
    loaded = {}

    def load_weights(weights):
        for name, t in weights:
            loaded[name] = t.clone()

    with ws.Publisher(ws.Layout.from_state_dict(trainer.state_dict()), bind="127.0.0.1") as pub, \
            ws.EngineAdapter(pub.address, load_weights=load_weights) as adapter:
        assert adapter.mode == "load_weights"
        pub.publish(trainer.state_dict(), 1)
        assert adapter.update_weights(wait=10).version == 1
        old = adapter.buffer
        adapter.rebind()
        assert adapter.buffer is not old and adapter.version == 0
        assert adapter.update_weights(wait=10).version == 1  # the newest again, in full
        assert torch.equal(loaded["weight"], trainer.weight.detach())
        adapter.close()
        with pytest.raises(ws.InvalidArgument, match="closed"):
            adapter.rebind()
