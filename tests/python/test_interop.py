"""Interop both ways with the C++ RL executables (issue 17, item 4).

- The C++ `trainer` publishes its starting policy as version 1
  (trainer/trainer_loop.cc: version_ starts at 1 and start() publishes the
  loaded policy before any step); a Python Subscriber pulls it into a
  torch.nn.Module's own parameters, and every parameter must be bit-identical
  to the policy file the trainer started from (read here with a small
  pure-Python safetensors reader, not with weightsync or libtorch code).
- A Python trainer publishes a perturbed copy of that policy with
  weightsync.Publisher in the C++ layout (rl/loop/policy_weights.cc:
  float32 tensors in parameter_specs() order, alignment 4, so one packed
  buffer); the C++ `generator` pulls it and logs the XXH3-64 of its flat
  parameter buffer (loop::weights_digest) in generator-0.jsonl, which must be
  the hash of the bytes Python published, for the newest version.

The policy comes from a one-step SFT run of `zorplex-sft` on a small model
(shared by the module's tests). Skipped when the RL executables are not built
(a build without libtorch): WEIGHTSYNC_BIN_TRAINER, WEIGHTSYNC_BIN_GENERATOR,
WEIGHTSYNC_BIN_SFT.
"""

import json
import os
import socket
import struct
import subprocess

import pytest

from conftest import executable, wait_until

# A small policy keeps the SFT step and the generator's rollouts cheap on 2
# cores; two layers still give the nested names (layers.1.attn.qkv.weight).
SMALL_MODEL = ["--d-model", "64", "--layers", "2", "--heads", "2", "--d-ff", "128"]
START_TIMEOUT = 120.0  # seconds for an executable to load, warm up and serve


# ---- independent sources of truth ---------------------------------------

def read_safetensors(torch, path):
    """(name -> float32 tensor in data order, __metadata__, the raw data bytes).

    The format: 8 bytes little-endian header length N, N bytes of JSON
    ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {}}),
    then the data (offsets relative to its start). Nothing of weightsync's.
    """
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    end_of_last = 0
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert entry["dtype"] == "F32", f"{name}: {entry['dtype']} (a policy is all float32)"
        begin, end = entry["data_offsets"]
        assert begin == end_of_last, f"{name}: a hole or overlap in the data at {begin}"
        end_of_last = end
        chunk = bytearray(data[begin:end])
        tensors[name] = torch.frombuffer(chunk, dtype=torch.float32).reshape(entry["shape"])
    assert end_of_last == len(data), "trailing bytes after the last tensor"
    return tensors, metadata, data


def _xxh3_64():
    """An XXH3-64 of bytes computed outside weightsync, or None: the xxhash
    module, else libxxhash itself through ctypes (libweightsync's dependency)."""
    try:
        import xxhash

        return xxhash.xxh3_64_intdigest
    except ImportError:
        pass
    import ctypes
    import ctypes.util

    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            fn = ctypes.CDLL(name).XXH3_64bits
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        return lambda data: int(fn(bytes(data), len(data)))
    return None


XXH3_64 = _xxh3_64()


def flat_bytes(torch, tensors):
    """The tensors' bytes back to back, in order: the C++ flat parameter buffer."""
    return b"".join(t.detach().contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
                    for t in tensors.values())


def bits(torch, t):
    """The float32 tensor's bit patterns, so NaNs and -0.0 compare exactly."""
    return t.detach().contiguous().view(torch.int32)


def module_from_layout(torch, layout, fill=float("nan")):
    """A torch.nn.Module whose parameters have the layout's dotted names and
    shapes (a tree of plain Modules), every value `fill`."""
    root = torch.nn.Module()
    for info in layout:
        *path, leaf = info.name.split(".")
        node = root
        for part in path:
            child = node._modules.get(part)
            if child is None:
                child = torch.nn.Module()
                node.add_module(part, child)
            node = child
        values = torch.full(info.shape, fill, dtype=getattr(torch, info.dtype))
        node.register_parameter(leaf, torch.nn.Parameter(values))
    return root


def jsonl_events(path, event):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if line.endswith("\n"):  # skip a line still being written
                record = json.loads(line)
                if record.get("event") == event:
                    out.append(record)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- fixtures --------------------------------------------------------------

@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """An SFT checkpoint folder (policy.safetensors) after one SFT step."""
    for variable in ("WEIGHTSYNC_BIN_TRAINER", "WEIGHTSYNC_BIN_GENERATOR"):
        executable(variable)
    sft = executable("WEIGHTSYNC_BIN_SFT")
    out = tmp_path_factory.mktemp("sft")
    try:
        done = subprocess.run([sft, "--out", str(out), "--steps", "1", "--batch", "2", "--warmup", "0",
                               "--save-every", "0", "--log-every", "1", "--threads", "2", *SMALL_MODEL],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"zorplex-sft took over 180 s:\n{e.output}")
    assert done.returncode == 0, done.stdout
    assert os.path.exists(out / "policy.safetensors"), done.stdout
    return out


# ---- C++ trainer -> Python module ------------------------------------------

def test_cpp_trainer_publishes_and_a_python_module_pulls_bit_exact(torch, ws, child, policy_dir, tmp_path):
    policy_file = policy_dir / "policy.safetensors"
    expected, metadata, data = read_safetensors(torch, policy_file)
    assert metadata.get("format") == "weightsync-policy/1" and metadata.get("d_model") == "64"

    address_file = tmp_path / "address.json"
    out = tmp_path / "trainer-out"
    # WEIGHTSYNC_CHECKSUM=1: the trainer's publisher hashes every version, so
    # the pull is verified and its checksum can be compared.
    trainer = child([executable("WEIGHTSYNC_BIN_TRAINER"), "--start", policy_dir, "--out", out,
                     "--mode", "sync", "--generators", "1", "--steps", "1", "--threads", "1",
                     "--idle-timeout", "600", "--address-file", address_file],
                    env={**os.environ, "WEIGHTSYNC_CHECKSUM": "1"})

    def address():
        if trainer.proc.poll() is not None:
            pytest.fail(f"the trainer exited ({trainer.proc.returncode}):\n{trainer.output()}")
        return address_file.exists() and json.loads(address_file.read_text())

    served = wait_until(address, START_TIMEOUT, "the trainer's address file")
    assert served["version"] == 1  # the starting policy, published before any step

    with ws.Subscriber(served["weights"]) as sub:
        layout = sub.layout
        # The C++ layout: the file's tensors, in its order, float32, packed.
        assert layout.names == list(expected)
        assert all(t.dtype == "float32" and t.shape == tuple(expected[t.name].shape) for t in layout)
        assert layout.alignment == 4 and layout.total_bytes == layout.payload_bytes == len(data)
        assert layout == ws.Layout.from_state_dict(expected, alignment=4)
        assert sub.publisher_checksums

        model = module_from_layout(torch, layout)
        pointers = {name: p.data_ptr() for name, p in model.named_parameters()}
        binding = sub.bind(model)
        result = sub.pull(binding, wait=30)
        assert result is not None, "nothing to pull from the trainer within 30 s"
        assert result.version == 1 and sub.held_version == 1
        assert result.bytes == len(data)
        assert result.checksum_verified and result.checksum != 0

        params = dict(model.named_parameters())
        assert sorted(params) == sorted(expected)
        for name, tensor in expected.items():
            assert params[name].data_ptr() == pointers[name], f"{name} was reallocated, not pulled in place"
            assert torch.equal(bits(torch, params[name]), bits(torch, tensor)), f"{name} differs from the file"
        assert flat_bytes(torch, {name: params[name] for name in layout.names}) == data

    # The checksum the subscriber verified is the XXH3-64 of the file's data
    # (its tensors back to back = the flat buffer), and the trainer's own
    # digest of version 1 (trainer.jsonl) agrees.
    if XXH3_64 is not None:
        assert result.checksum == XXH3_64(data)
    published = wait_until(lambda: jsonl_events(out / "trainer.jsonl", "publish"), 30, "trainer.jsonl's publish")
    assert published[0]["version"] == 1 and published[0]["bytes"] == len(data)
    assert published[0]["xxh3"] == f"{result.checksum:016x}"

    code, output = trainer.stop(timeout=30)
    assert code == 130, output  # stopped by the signal (after checkpointing)


# ---- Python trainer -> C++ generator ---------------------------------------

def perturbed(torch, tensors, version):
    """The policy as a Python trainer's version `version`: every value + 0.001 * version."""
    return {name: (t + 0.001 * version).contiguous() for name, t in tensors.items()}


def generator_args(policy_file, address, out, extra=()):
    return [executable("WEIGHTSYNC_BIN_GENERATOR"), "--trainer", address, "--checkpoint", policy_file,
            "--trajectories", f"tcp://127.0.0.1:{free_port()}", "--out", out, "--id", "0",
            "--prompts", "1", "--group-size", "1", "--threads", "1", "--trainer-timeout", "60", *extra]


def test_python_trainer_publishes_and_the_cpp_generator_pulls_the_newest(torch, ws, child, policy_dir,
                                                                           tmp_path):
    policy_file = policy_dir / "policy.safetensors"
    start, _, data = read_safetensors(torch, policy_file)
    # Data order = parameter_specs() order (save_model), float32, alignment 4:
    # equal to loop::policy_weight_layout, or the generator refuses it.
    layout = ws.Layout.from_state_dict(start, alignment=4)
    assert layout.total_bytes == layout.payload_bytes == len(data)
    assert [t.offset for t in layout] == [sum(t.nbytes for t in list(layout)[:i]) for i in range(len(layout))]

    # The generator logs XXH3-64 of its flat buffer. What it must equal: the
    # XXH3-64 of the bytes published, computed here when xxhash or libxxhash
    # is at hand, and in any case the publisher's checksum, which a Python
    # Subscriber gets and verifies. That checksum is the same hash of the same
    # bytes: the publisher (libweightsync/src/publisher/publisher.cc, publish()
    # and checksum_of_slot()) feeds each tensor's bytes, in layout order and
    # without padding, to an XXH3-64 streaming state (common/checksum.cc), and
    # streaming XXH3 over consecutive pieces equals one-shot XXH3 over their
    # concatenation; with float32 tensors at alignment 4 there is no padding
    # (offsets checked just above), so that concatenation is exactly the
    # packed slot, which is the generator's flat parameter buffer.
    def expected_hash(payload, pulled):
        assert pulled.checksum_verified
        if XXH3_64 is not None:
            assert pulled.checksum == XXH3_64(payload)
        return f"{pulled.checksum:016x}"

    gen_out = tmp_path / "generator-out"
    log = gen_out / "generator-0.jsonl"
    hashes = {}
    with ws.Publisher(layout, checksum=True) as pub, ws.Subscriber(pub.address, transport="tcp") as sub:
        packed = torch.zeros(layout.total_bytes, dtype=torch.uint8)
        binding = sub.bind(packed)
        for version in (1, 2):
            weights = perturbed(torch, start, version)
            payload = flat_bytes(torch, weights)
            assert payload != data
            assert pub.publish(weights, version).version == version
            pulled = sub.pull(binding, wait=10)
            assert pulled.version == version and packed.numpy().tobytes() == payload
            hashes[version] = expected_hash(payload, pulled)
        assert hashes[1] != hashes[2]

        # Sync mode: the generator's first pull takes the newest version (2);
        # after its round it waits for a newer one.
        gen = child(generator_args(policy_file, pub.address, gen_out, ["--mode", "sync"]))

        def pulls(count):
            def check():
                if gen.proc.poll() is not None:
                    pytest.fail(f"the generator exited ({gen.proc.returncode}):\n{gen.output()}")
                events = jsonl_events(log, "pull")
                return len(events) >= count and events
            return check

        first = wait_until(pulls(1), START_TIMEOUT, f"a pull in {log}")[0]
        assert first["version"] == 2, first
        assert first["bytes"] == layout.payload_bytes
        assert first["xxh3"] == hashes[2], (first, hashes)

        # A version published while the generator runs reaches it too.
        weights = perturbed(torch, start, 3)
        payload = flat_bytes(torch, weights)
        pub.publish(weights, 3)
        hashes[3] = expected_hash(payload, sub.pull(binding, wait=10))
        second = wait_until(pulls(2), START_TIMEOUT, f"a second pull in {log}")[1]
        assert second["version"] == 3 and second["xxh3"] == hashes[3], (second, hashes)

        code, output = gen.stop(timeout=30)
        assert code == 0, output
        assert "generator 0: connected to the trainer at " + pub.address in output


def test_cpp_generator_refuses_a_python_layout_that_is_not_the_policys(torch, ws, child, policy_dir, tmp_path):
    """The same tensors at the default alignment (256) are not the C++ layout
    (WeightLayout equality includes the alignment, even where, as for this
    small model, every offset happens to be the same): the generator exits 1
    naming the mismatch rather than pulling into its buffer."""
    policy_file = policy_dir / "policy.safetensors"
    start, _, _ = read_safetensors(torch, policy_file)
    layout = ws.Layout.from_state_dict(start)
    assert layout.alignment == 256 and layout != ws.Layout.from_state_dict(start, alignment=4)
    with ws.Publisher(layout) as pub:
        pub.publish(start, 1)
        gen = child(generator_args(policy_file, pub.address, tmp_path / "generator-out"))
        try:
            code = gen.proc.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the generator did not refuse the layout within {START_TIMEOUT} s:\n{gen.output()}")
        output = gen.output()
        assert code == 1, output
        assert "the generator's --checkpoint is not the trainer's model" in output
        assert not jsonl_events(tmp_path / "generator-out" / "generator-0.jsonl", "pull")
