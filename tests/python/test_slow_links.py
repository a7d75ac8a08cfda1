"""Slow and untrusted links from Python (docs/slow_links.md): a publisher
with deltas serves a module bound in place by deltas, bit-exact; the
integrity layer's keyed tags, and its refusal of a subscriber that does not
ask for it; encryption, full and delta pulls over tcp and shm, and its refusals."""

import pytest


def make_model(torch, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.Linear(128, 64)).to(torch.bfloat16)


def same(torch, a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa)


def nudge(torch, model, step):
    # A sparse update, as bf16 RL steps are: about one element in twenty changes.
    with torch.no_grad():
        for p in model.parameters():
            mask = torch.rand(p.shape) < 0.05
            p[mask] = p[mask] + 0.01 * step


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_deltas_land_in_the_modules_parameters_bit_exact(torch, ws, transport):
    trainer, engine = make_model(torch, 1), make_model(torch, 2)
    layout = ws.Layout.from_state_dict(trainer.state_dict())
    with ws.Publisher(layout, secret="s", deltas=True) as pub, \
            ws.Subscriber(pub.address, secret="s", transport=transport) as sub:
        assert sub.publisher_deltas
        binding = sub.bind(engine)
        pub.publish(trainer.state_dict(), 1)
        first = sub.pull(binding, wait=5)
        assert first.version == 1 and not first.delta and first.wire_bytes == layout.payload_bytes
        for version in (2, 3, 4):
            nudge(torch, trainer, version)
            pub.publish(trainer.state_dict(), version)
            pulled = sub.pull(binding, wait=5, delta_base=sub.held_version)
            assert pulled.version == version and pulled.delta and pulled.checksum_verified
            assert pulled.wire_bytes < layout.payload_bytes // 2
            assert same(torch, trainer, engine)
        stats = sub.stats()
        assert stats["delta_pulls"] == 3 and stats["delta_fallbacks"] == 0


def test_a_wrong_delta_base_falls_back_to_a_full_pull(torch, ws):
    trainer, engine = make_model(torch, 3), make_model(torch, 4)
    layout = ws.Layout.from_state_dict(trainer.state_dict())
    with ws.Publisher(layout, secret="s", deltas=True) as pub, \
            ws.Subscriber(pub.address, secret="s", transport="tcp") as sub:
        binding = sub.bind(engine)
        pub.publish(trainer.state_dict(), 1)
        sub.pull(binding, wait=5)
        with torch.no_grad():
            engine[0].weight[0, 0] += 1  # no longer version 1
        nudge(torch, trainer, 2)
        pub.publish(trainer.state_dict(), 2)
        pulled = sub.pull(binding, wait=5, delta_base=1)
        assert pulled.version == 2 and not pulled.delta
        assert same(torch, trainer, engine)
        assert sub.stats()["delta_fallbacks"] == 1


def test_integrity_tags_and_refusals(torch, ws):
    trainer, engine = make_model(torch, 5), make_model(torch, 6)
    layout = ws.Layout.from_state_dict(trainer.state_dict())
    with ws.Publisher(layout, secret="s", integrity=True) as pub:
        pub.publish(trainer.state_dict(), 1)
        with ws.Subscriber(pub.address, secret="s", integrity=True, transport="tcp") as sub:
            assert sub.publisher_checksums
            pulled = sub.pull(sub.bind(engine), wait=5)
            assert pulled.checksum_verified and same(torch, trainer, engine)
        with pytest.raises(ws.ConfigurationError, match="WEIGHTSYNC_INTEGRITY"):
            ws.Subscriber(pub.address, secret="s", transport="tcp")
    with pytest.raises(ValueError, match="secret"):  # InvalidConfig is a ValueError
        ws.Publisher(layout, integrity=True)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_encryption_round_trip_and_refusals(torch, ws, transport):
    trainer, engine = make_model(torch, 7), make_model(torch, 8)
    layout = ws.Layout.from_state_dict(trainer.state_dict())
    with ws.Publisher(layout, secret="s", encryption=True, deltas=True) as pub:
        pub.publish(trainer.state_dict(), 1)
        with ws.Subscriber(pub.address, secret="s", encryption=True, transport=transport) as sub:
            assert sub.transport == transport and sub.publisher_checksums and sub.encrypted
            binding = sub.bind(engine)
            pulled = sub.pull(binding, wait=5)
            assert pulled.checksum_verified and same(torch, trainer, engine)
            nudge(torch, trainer, 2)
            pub.publish(trainer.state_dict(), 2)
            pulled = sub.pull(binding, wait=5, delta_base=1)
            assert pulled.version == 2 and pulled.delta and same(torch, trainer, engine)
        with pytest.raises(ws.ConfigurationError, match="WEIGHTSYNC_ENCRYPTION"):
            ws.Subscriber(pub.address, secret="s", transport="tcp")
    with pytest.raises(ValueError, match="secret"):
        ws.Publisher(layout, encryption=True)


def test_signatures_verified_and_a_foreign_key_refused(torch, ws, tmp_path):
    """Issue 30: the trainer signs, the engine checks with its public key."""
    import subprocess
    keys = {}
    for who in ("trainer", "other"):
        private, public = tmp_path / f"{who}-key.pem", tmp_path / f"{who}-pub.pem"
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)], check=True)
        subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)], check=True)
        keys[who] = (str(private), str(public))
    trainer, engine = make_model(torch, 9), make_model(torch, 10)
    layout = ws.Layout.from_state_dict(trainer.state_dict())
    with ws.Publisher(layout, secret="s", signing_key=keys["trainer"][0]) as pub:
        pub.publish(trainer.state_dict(), 1)
        with ws.Subscriber(pub.address, secret="s", transport="tcp", trusted_key=keys["trainer"][1]) as sub:
            pulled = sub.pull(sub.bind(engine), wait=5)
            assert pulled.signature_verified and same(torch, trainer, engine)
            assert sub.stats()["signatures_verified"] == 1
        with ws.Subscriber(pub.address, secret="s", transport="tcp", trusted_key=keys["other"][1]) as sub:
            with pytest.raises(ws.AuthFailed, match="not by the trainer's key"):
                sub.pull(sub.bind(make_model(torch, 11)), wait=5)
    with pytest.raises(ws.ConfigurationError, match="openssl genpkey"):
        ws.Publisher(layout, secret="s", signing_key=str(tmp_path / "missing.pem"))
