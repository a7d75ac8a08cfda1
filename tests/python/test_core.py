"""The weightsync package's core: layouts, publish and pull into a module's
own parameters (zero copy, bit-exact), in-place publishes that commit or
abandon, and errors grouped by what to do about them."""

import pytest


def make_model(torch, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(48, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8, bias=False))


def same(torch, a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_layout_from_state_dict_keeps_order_dtypes_shapes_and_alignment(torch, ws):
    sd = {"emb": torch.zeros(10, 4, dtype=torch.bfloat16), "w": torch.zeros(3, dtype=torch.float16),
          "flag": torch.zeros(5, dtype=torch.bool), "ids": torch.zeros(2, 2, dtype=torch.int64)}
    layout = ws.Layout.from_state_dict(sd)
    assert layout.names == ["emb", "w", "flag", "ids"]
    assert [t.dtype for t in layout] == ["bfloat16", "float16", "bool", "int64"]
    assert layout["emb"].shape == (10, 4) and layout["emb"].nbytes == 80
    assert [t.offset % 256 for t in layout] == [0, 0, 0, 0]
    assert layout.payload_bytes == 80 + 6 + 5 + 32
    packed = ws.Layout.from_state_dict(sd, alignment=8)
    assert packed.total_bytes < layout.total_bytes and packed != layout
    assert ws.Layout.from_state_dict(sd) == layout
    with pytest.raises(ws.InvalidArgument):
        ws.Layout.from_state_dict({})
    with pytest.raises(ValueError):  # a CallError is a ValueError
        ws.Layout([("a", "complex64", [2])])
    with pytest.raises(ValueError, match="alignment"):
        ws.Layout.from_state_dict(sd, alignment=3)


def test_layout_match_names_the_first_difference(torch, ws):
    model = make_model(torch)
    layout = ws.Layout.from_state_dict(model.state_dict())
    sd = dict(model.state_dict())
    refs = layout.match(sd)
    assert [r.name for r in refs] == layout.names
    assert refs[0].address == model[0].weight.data_ptr()
    reordered = dict(reversed(list(sd.items())))
    with pytest.raises(ws.InvalidArgument, match="order changed"):
        layout.match(reordered)
    assert len(layout.match(reordered, ordered=False)) == len(layout)
    with pytest.raises(ws.InvalidArgument, match="float16"):
        layout.match({**sd, "0.weight": sd["0.weight"].half()})
    with pytest.raises(ws.InvalidArgument, match="shape"):
        layout.match({**sd, "0.weight": torch.zeros(32, 47)})
    with pytest.raises(ws.InvalidArgument, match="missing: 2.weight"):
        layout.match({k: v for k, v in sd.items() if k != "2.weight"})
    with pytest.raises(ws.InvalidArgument, match="not in the layout"):
        layout.match({**sd, "extra": torch.zeros(1)})
    assert len(layout.match({**sd, "extra": torch.zeros(1)}, allow_extra=True)) == len(layout)
    with pytest.raises(ws.InvalidArgument, match="not contiguous"):
        layout.match({**sd, "0.weight": torch.zeros(64, 48)[::2]})


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_pull_lands_in_the_modules_own_parameters_bit_exact(torch, ws, transport):
    trainer = make_model(torch, seed=1)
    engine = make_model(torch, seed=2)
    assert not same(torch, trainer, engine)
    pointers = [p.data_ptr() for p in engine.state_dict().values()]
    layout = ws.Layout.from_state_dict(trainer.state_dict())
    with ws.Publisher(layout, checksum=True) as pub, ws.Subscriber(pub.address, transport=transport) as sub:
        assert sub.transport == transport
        assert sub.layout == layout
        binding = sub.bind(engine)
        assert binding.nbytes == layout.payload_bytes
        assert sub.pull(binding) is None  # nothing published yet
        for version in (1, 2, 5):
            with torch.no_grad():
                for p in trainer.parameters():
                    p.add_(0.25 * version)
            result = pub.publish(trainer.state_dict(), version)
            assert result.version == version
            pulled = sub.pull(binding)
            assert pulled.version == version and sub.held_version == version
            assert pulled.bytes == layout.payload_bytes
            assert pulled.checksum_verified and pulled.checksum != 0
            assert same(torch, trainer, engine)
            assert sub.pull(binding) is None
        assert [p.data_ptr() for p in engine.state_dict().values()] == pointers  # zero copy, in place
        stats = sub.stats()
        assert stats["pulls"] == 3 and stats["bytes"] == 3 * layout.payload_bytes


def test_pull_options_exact_version_newer_than_and_packed_destination(torch, ws):
    trainer = make_model(torch, seed=3)
    layout = ws.Layout.from_state_dict(trainer.state_dict())
    with ws.Publisher(layout, slots=4) as pub, ws.Subscriber(pub.address, transport="tcp") as sub:
        images = {}
        for version in (1, 2, 3):
            with torch.no_grad():
                trainer[0].weight.fill_(float(version))
            pub.publish(trainer.state_dict(), version)
            images[version] = trainer[0].weight.clone()
        packed = torch.zeros(layout.total_bytes, dtype=torch.uint8)
        binding = sub.bind(packed)
        got = sub.pull(binding, version=2)  # exactly version 2, not the newest
        assert got.version == 2
        entry = layout["0.weight"]
        view = packed[entry.offset:entry.offset + entry.nbytes].view(torch.float32).view(entry.shape)
        assert torch.equal(view, images[2])
        assert sub.pull(binding).version == 3  # newest newer than held (2)
        assert sub.pull(binding, newer_than=0).version == 3
        with pytest.raises(ws.NotReady):
            sub.pull(binding, version=9)
        with pytest.raises(ws.InvalidArgument, match="total_bytes"):
            sub.bind(torch.zeros(layout.total_bytes - 1, dtype=torch.uint8))


def test_publish_checks_the_state_dict_and_versions(torch, ws):
    model = make_model(torch)
    layout = ws.Layout.from_state_dict(model.state_dict())
    with ws.Publisher(layout) as pub:
        pub.publish(model, 3)  # a module is taken as its state_dict
        with pytest.raises(ws.InvalidArgument, match="version"):
            pub.publish(model.state_dict(), 3)  # versions strictly increase
        with pytest.raises(ws.InvalidArgument, match="missing"):
            pub.publish({k: v for k, v in model.state_dict().items() if k != "1.bias"}, 4)
        with pytest.raises(ws.CallError):
            pub.publish({**model.state_dict(), "1.bias": torch.zeros(31)}, 4)
        assert pub.latest_version == 3
        assert pub.publish(model.state_dict(), 4).version == 4
    with pytest.raises(ws.InvalidArgument, match="closed"):
        pub.publish(model.state_dict(), 5)


def test_in_place_publish_commits_on_success_and_abandons_on_exception(torch, ws):
    model = make_model(torch)
    layout = ws.Layout.from_state_dict(model.state_dict())
    engine = make_model(torch, seed=9)
    with ws.Publisher(layout) as pub, ws.Subscriber(pub.address) as sub:
        binding = sub.bind(engine)
        with pub.writing(1) as slot:
            tensors = slot.tensors()
            assert list(tensors) == layout.names
            for name, t in model.state_dict().items():
                tensors[name].copy_(t)
            assert pub.latest_version == 0  # not visible before the block ends
        assert slot.result.version == 1 and pub.latest_version == 1
        assert sub.pull(binding).version == 1 and same(torch, model, engine)

        with pytest.raises(RuntimeError, match="optimizer blew up"):
            with pub.writing(2) as slot:
                for t in slot.tensors().values():
                    t.fill_(float("nan"))
                raise RuntimeError("optimizer blew up")
        assert pub.latest_version == 1
        assert sub.pull(binding) is None  # the abandoned version never reaches anyone
        assert same(torch, model, engine)

        with pub.writing(2) as slot:  # the same version can be written again
            slot.copy_from(model.state_dict())
        assert sub.pull(binding).version == 2 and same(torch, model, engine)


def test_publish_bytes_takes_a_packed_image(torch, ws):
    layout = ws.Layout([("a", "float32", [4]), ("b", "int32", [3])], alignment=4)
    assert layout.total_bytes == 28
    with ws.Publisher(layout) as pub, ws.Subscriber(pub.address) as sub:
        image = bytearray(range(28))
        pub.publish_bytes(image, 1)
        out = bytearray(28)
        assert sub.pull(out).version == 1
        assert out == image
        pub.publish_bytes(bytes(reversed(image)), 2)  # read-only buffers are fine to publish from
        assert sub.pull(out).version == 2 and out == bytes(reversed(image))


def test_errors_are_grouped_by_action_and_subclass_builtins(torch, ws):
    assert issubclass(ws.Timeout, TimeoutError) and issubclass(ws.Timeout, ws.RetryError)
    assert issubclass(ws.ConnectionLost, ConnectionError) and issubclass(ws.ProtocolError, ws.ReconnectError)
    assert issubclass(ws.AuthFailed, PermissionError) and issubclass(ws.AuthFailed, ws.ConfigurationError)
    assert issubclass(ws.InvalidArgument, ValueError) and issubclass(ws.InvalidArgument, ws.CallError)
    assert issubclass(ws.VersionRevoked, ws.RetryError) and issubclass(ws.Busy, ws.RetryError)
    model = make_model(torch)
    layout = ws.Layout.from_state_dict(model.state_dict())
    with ws.Publisher(layout, secret="right secret") as pub:
        address = pub.address
        with pytest.raises(PermissionError) as wrong:
            ws.Subscriber(pub.address, secret="wrong secret")
        assert wrong.value.code == "auth_failed" and wrong.value.action == "fix_configuration"
        assert "secret" in str(wrong.value)
        with ws.Subscriber(pub.address, secret="right secret") as sub:
            pub.publish(model.state_dict(), 1)
            assert sub.pull(sub.bind(make_model(torch, seed=4))).version == 1
    with pytest.raises(ConnectionError) as gone:
        ws.Subscriber(address, connect_timeout_ms=500)  # the publisher is closed
    assert gone.value.action == "reconnect"
    with pytest.raises(ws.InvalidConfig):
        ws.Publisher(layout, bind="0.0.0.0")  # no secret: loopback only


def test_a_dead_publisher_is_a_connection_error_not_a_hang(torch, ws):
    model = make_model(torch)
    layout = ws.Layout.from_state_dict(model.state_dict())
    pub = ws.Publisher(layout)
    pub.publish(model.state_dict(), 1)
    shm = ws.Subscriber(pub.address, transport="shm", io_timeout_ms=2000)
    tcp = ws.Subscriber(pub.address, transport="tcp", io_timeout_ms=2000)
    bindings = [s.bind(make_model(torch, seed=6)) for s in (shm, tcp)]
    for s, b in zip((shm, tcp), bindings):
        assert s.pull(b).version == 1 and s.pull(b) is None
    pub.close()
    for s, b in zip((shm, tcp), bindings):
        # shm answers "nothing new" from its mapped stamps without a round
        # trip, but only while the control connection is alive.
        with pytest.raises(ws.ReconnectError):
            s.pull(b)
        with pytest.raises(ws.ReconnectError):
            s.check()
        s.close()
