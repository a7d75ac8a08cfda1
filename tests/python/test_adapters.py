"""LoRA adapters from Python: an AdapterPublisher serves named adapters, each
its own layout and version stream, beside a base model on one address; a
subscriber pulls the adapter it names, bit-exact; the bounds and refusals of
the C++ AdapterPublisher reach Python as errors; removing an adapter or
closing the publisher closes every handle to it, so no call reaches a freed
ring."""

import threading

import pytest


def make_base(torch, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(48, 32), torch.nn.Linear(32, 8, bias=False))


def make_lora(torch, rank, seed=0):
    class LoRA(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.A = torch.nn.Parameter(torch.randn(rank, 48))
            self.B = torch.nn.Parameter(torch.randn(32, rank))

    torch.manual_seed(seed)
    return LoRA()


def same(torch, a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def bump(torch, module, by):
    with torch.no_grad():
        for p in module.parameters():
            p.add_(by)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_each_adapter_and_the_base_have_their_own_layout_and_versions(torch, ws, transport):
    base, math, code = make_base(torch, 1), make_lora(torch, 8, 2), make_lora(torch, 4, 3)
    with ws.AdapterPublisher(base.state_dict(), checksum=True) as ap:
        math_pub = ap.add_adapter("math", math.state_dict())
        code_pub = ap.add_adapter("code", ws.Layout.from_state_dict(code.state_dict()))
        assert ap.adapter_names() == ["code", "math"]
        assert math_pub.layout != code_pub.layout
        ap.base.publish(base.state_dict(), 1)
        for version in (1, 2, 3):
            bump(torch, math, 0.5)
            math_pub.publish(math.state_dict(), version)
        code_pub.publish(code.state_dict(), 7)  # its own stream: not after math's 3
        engines = {"math": make_lora(torch, 8, 9), "code": make_lora(torch, 4, 9), None: make_base(torch, 9)}
        trained = {"math": math, "code": code, None: base}
        want = {"math": 3, "code": 7, None: 1}
        for name, engine in engines.items():
            with ws.Subscriber(ap.address, adapter=name, transport=transport) as sub:
                assert sub.transport == transport
                assert sub.layout == ws.Layout.from_state_dict(trained[name].state_dict())
                pulled = sub.pull(sub.bind(engine))
                assert pulled.version == want[name] and pulled.checksum_verified, (name, pulled)
                assert same(torch, engine, trained[name]), name
        assert ap.adapter("math").latest_version == 3 and ap.adapter("code").latest_version == 7
        assert ap.adapter("nope") is None


def test_a_subscriber_naming_an_unknown_adapter_or_no_adapter_without_a_base_is_refused(torch, ws):
    with ws.AdapterPublisher(secret="s3cret") as ap:
        ap.add_adapter("math", make_lora(torch, 8).state_dict())
        assert ap.base is None
        with pytest.raises(ws.InvalidConfig, match="math"):  # the error lists what is served
            ws.Subscriber(ap.address, secret="s3cret", adapter="nope")
        with pytest.raises(ws.InvalidConfig):
            ws.Subscriber(ap.address, secret="s3cret")  # the base model: there is none
        with pytest.raises(ws.AuthFailed):
            ws.Subscriber(ap.address, secret="wrong", adapter="math")


def test_adapters_are_bounded_in_number_size_and_name(torch, ws):
    lora = make_lora(torch, 8).state_dict()
    nbytes = ws.Layout.from_state_dict(lora).total_bytes
    with ws.AdapterPublisher(max_adapters=2, max_adapter_bytes=nbytes) as ap:
        ap.add_adapter("a", lora)
        with pytest.raises(ws.InvalidArgument):
            ap.add_adapter("a", lora)  # in use
        for bad in ("", "a/b", "x" * 65, "spaced name"):
            with pytest.raises(ws.InvalidArgument):
                ap.add_adapter(bad, lora)
        with pytest.raises(ws.InvalidArgument):
            ap.add_adapter("big", make_lora(torch, 16).state_dict())  # over max_adapter_bytes
        ap.add_adapter("b", lora)
        with pytest.raises(ws.Busy):
            ap.add_adapter("c", lora)  # past max_adapters
        assert ap.adapter_names() == ["a", "b"]
        with pytest.raises(ws.InvalidArgument):
            ap.remove_adapter("c")


def test_removing_an_adapter_closes_its_handles_and_fails_its_subscribers(torch, ws):
    math, code = make_lora(torch, 8, 1), make_lora(torch, 4, 2)
    with ws.AdapterPublisher() as ap:
        math_pub = ap.add_adapter("math", math.state_dict())
        code_pub = ap.add_adapter("code", code.state_dict())
        assert ap.adapter("math")._core is math_pub._core  # one handle per adapter
        math_pub.publish(math.state_dict(), 1)
        code_pub.publish(code.state_dict(), 1)
        sub = ws.Subscriber(ap.address, adapter="math", transport="tcp")
        engine = make_lora(torch, 8, 9)
        binding = sub.bind(engine)
        assert sub.pull(binding).version == 1
        writer = math_pub._core.begin(2)  # a version being written in place when the adapter goes
        ap.remove_adapter("math")
        assert math_pub.closed and ap.adapter("math") is None and ap.adapter_names() == ["code"]
        with pytest.raises(ws.InvalidArgument, match="closed"):
            math_pub.publish(math.state_dict(), 2)
        with pytest.raises(ws.InvalidArgument, match="spent"):
            writer.commit()
        bump(torch, math, 1.0)
        with pytest.raises(ws.ConnectionLost):
            sub.pull(binding, version=1)
        sub.close()
        assert same(torch, engine, make_lora(torch, 8, 1))  # the engine keeps version 1 whole
        # The other adapter goes on, and the name can be served again, from version 1.
        bump(torch, code, 1.0)
        assert code_pub.publish(code.state_dict(), 2).version == 2
        again = ap.add_adapter("math", math.state_dict())
        assert again.publish(math.state_dict(), 1).version == 1
        with ws.Subscriber(ap.address, adapter="math") as fresh:
            other = make_lora(torch, 8, 9)
            assert fresh.pull(fresh.bind(other)).version == 1 and same(torch, other, math)


def test_closing_a_handle_keeps_the_adapter_served_and_closing_the_publisher_closes_them_all(torch, ws):
    base, math = make_base(torch, 1), make_lora(torch, 8, 2)
    ap = ws.AdapterPublisher(base.state_dict())
    math_pub = ap.add_adapter("math", math.state_dict())
    math_pub.publish(math.state_dict(), 1)
    math_pub.close()  # this handle only
    assert math_pub.closed and ap.adapter_names() == ["math"]
    handle = ap.adapter("math")
    assert handle is not None and not handle.closed and handle.latest_version == 1
    handle.publish(math.state_dict(), 2)
    with ws.Subscriber(ap.address, adapter="math") as sub:
        assert sub.pull(sub.bind(make_lora(torch, 8, 9))).version == 2
    base_pub = ap.base
    base_pub.publish(base.state_dict(), 1)
    ap.close()
    assert ap.closed and handle.closed and base_pub.closed
    with pytest.raises(ws.InvalidArgument, match="closed"):
        handle.publish(math.state_dict(), 3)
    with pytest.raises(ws.InvalidArgument, match="closed"):
        base_pub.publish(base.state_dict(), 2)
    with pytest.raises(ws.InvalidArgument, match="closed"):
        ap.add_adapter("code", math.state_dict())
    ap.close()  # twice is fine


def test_adapters_publish_from_threads_while_one_is_removed(torch, ws):
    """Publishes on two adapters from two threads while a third adapter is
    added and removed over and over: no call reaches a removed ring (each
    either works or says the handle is closed), and the survivors' versions
    arrive whole."""
    loras = {name: make_lora(torch, 8, i) for i, name in enumerate(("a", "b", "c"))}
    with ws.AdapterPublisher() as ap:
        pubs = {name: ap.add_adapter(name, lora.state_dict()) for name, lora in loras.items()}
        errors = []
        stop = threading.Event()

        def publish(name):
            version = 0
            try:
                while not stop.is_set() and version < 200:
                    version += 1
                    pubs[name].publish(loras[name].state_dict(), version)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"{name}: {e!r}")

        threads = [threading.Thread(target=publish, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        closed = 0
        for _ in range(50):
            c = pubs["c"]
            ap.remove_adapter("c")
            try:
                c.publish(loras["c"].state_dict(), 1)
            except ws.InvalidArgument as e:
                closed += "closed" in str(e)
            pubs["c"] = ap.add_adapter("c", loras["c"].state_dict())
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert closed == 50
        for name in ("a", "b"):
            with ws.Subscriber(ap.address, adapter=name) as sub:
                engine = make_lora(torch, 8, 9)
                assert sub.pull(sub.bind(engine)).version == pubs[name].latest_version
                assert same(torch, engine, loras[name])
