"""Publisher: the trainer's side. Publishes each new version of the weights."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Dict, Iterator, Optional

from . import _weightsync, errors
from .layout import Layout

PublishResult = _weightsync.PublishResult


class Slot:
    """A slot reserved for one version, written in place (see Publisher.writing).

    ``tensors()`` gives a torch tensor per layout entry that *is* the slot's
    memory: copy into them (``t.copy_(param)``), and the version commits when
    the ``with`` block ends. Do not keep these tensors past the block: the
    slot is reused for later versions.
    """

    def __init__(self, core: "_weightsync._SlotWriter", layout: Layout):
        self._core = core
        self._layout = layout

    @property
    def version(self) -> int:
        return self._core.version

    def memoryview(self) -> memoryview:
        """The whole slot (layout.total_bytes bytes), writable."""
        return self._core.memoryview()

    def tensors(self) -> Dict[str, Any]:
        """name -> a torch tensor over the slot's bytes for that entry (needs torch)."""
        import torch  # only here: the package itself never needs torch

        whole = torch.frombuffer(self._core.memoryview(), dtype=torch.uint8)
        out = {}
        for t in self._layout:
            dtype = getattr(torch, t.dtype)
            out[t.name] = whole[t.offset:t.offset + t.nbytes].view(dtype).view(t.shape)
        return out

    def copy_from(self, state_dict: Any) -> None:
        """Copies every tensor of ``state_dict`` (layout order and dtypes checked) into the slot."""
        refs = self._layout.match(state_dict, ordered=False, allow_extra=False, devices=("cpu",))
        view = self._core.memoryview()
        import ctypes

        for info, ref in zip(self._layout, refs):
            ctypes.memmove(ctypes.addressof(ctypes.c_char.from_buffer(view, info.offset)), ref.address, ref.nbytes)


class Publisher:
    """Serves versions of a model's weights to any number of subscribers.

    ::

        layout = weightsync.Layout.from_state_dict(model.state_dict())
        with weightsync.Publisher(layout, bind="0.0.0.0", secret=secret) as pub:
            print("weights at", pub.address)
            for step in range(1, steps + 1):
                train_step()
                pub.publish(model.state_dict(), version=step)

    ``publish`` copies the tensors into a free slot of a ring of ``slots``
    pre-allocated, pre-registered regions and commits the version; it never
    waits for readers. Versions must increase. ``bind`` without a ``secret``
    must be a loopback address. Other options (``checksum``, timeouts in
    milliseconds, ``skip_when_full``) are those of the C++ PublisherOptions;
    None takes the WEIGHTSYNC_* environment variable or the default.
    For slow or untrusted links (docs/slow_links.md): ``deltas`` computes a
    delta per version in the background for subscribers that hold an older
    one; ``integrity`` keys the version checksums with the secret and seals
    the control frames (every subscriber must ask for it too); ``encryption``
    adds AES-GCM encryption of every TCP connection (implies integrity; UCX
    and verbs are then not offered). ``signing_key``: the path of an Ed25519
    private key (PEM) that signs every version off the publishing thread, so
    subscribers holding the public key accept only bytes this trainer
    published, through any relay (docs/security.md).

    Thread-safety: every method may be called from any thread; publishes are
    serialised. The GIL is released while a publish copies.
    """

    def __init__(self, layout: Layout, *, bind: Optional[str] = None, port: int = 0,
                 secret: Optional[str] = None, slots: int = 3, checksum: Optional[bool] = None,
                 skip_when_full: bool = False, io_timeout_ms: Optional[int] = None,
                 lease_timeout_ms: Optional[int] = None, idle_timeout_ms: Optional[int] = None,
                 max_connections: int = 256, slot_allocator: Optional[str] = None,
                 lock_memory: bool = False, slot_memory: str = "host",
                 deltas: Optional[bool] = None, integrity: Optional[bool] = None,
                 encryption: Optional[bool] = None, signing_key: Optional[str] = None):
        if not isinstance(layout, Layout):
            layout = Layout.from_state_dict(layout)
        self._layout = layout
        self._core = _weightsync._Publisher(
            layout._core, bind=bind, port=port, secret=secret, slots=slots, checksum=checksum,
            skip_when_full=skip_when_full, io_timeout_ms=io_timeout_ms,
            lease_timeout_ms=lease_timeout_ms, idle_timeout_ms=idle_timeout_ms,
            max_connections=max_connections, slot_allocator=slot_allocator,
            lock_memory=lock_memory, slot_memory=slot_memory, deltas=deltas, integrity=integrity,
            encryption=encryption, signing_key=signing_key)

    @classmethod
    def _from_core(cls, core: "_weightsync._Publisher", layout: Layout) -> "Publisher":
        """A Publisher over a core made elsewhere (an AdapterPublisher's adapter or base model)."""
        pub = cls.__new__(cls)
        pub._layout = layout
        pub._core = core
        return pub

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def address(self) -> str:
        """"host:port" for Subscriber(address)."""
        return self._core.address

    @property
    def port(self) -> int:
        return self._core.port

    @property
    def latest_version(self) -> int:
        """The newest committed version; 0 before the first."""
        return self._core.latest_version

    @property
    def slot_count(self) -> int:
        return self._core.slot_count

    @property
    def closed(self) -> bool:
        return self._core.closed

    def publish(self, state_dict: Any, version: int) -> PublishResult:
        """Copies ``state_dict`` (or an nn.Module's, or (name, tensor) pairs) and commits ``version``.

        Every tensor of the layout must be there with its dtype and shape (in
        any order; extra names are an error). CPU tensors are copied on the
        calling thread with the GIL released; CUDA tensors on the publisher's
        stream after the current stream's work (this call waits for the commit).
        """
        refs = self._layout.match(state_dict, ordered=False, devices=("cpu", "cuda"))
        entries = [(r.name, r.address, r.nbytes) for r in refs]
        if any(r.device == "cuda" for r in refs):
            if not all(r.device == "cuda" for r in refs):
                raise errors.InvalidArgument("a version's tensors must all be on the CPU or all on CUDA",
                                             "invalid_argument", "fix_call")
            import torch

            stream = torch.cuda.current_stream().cuda_stream
            return self._core.publish_from_device(version, entries, stream)
        return self._core.publish_tensors(version, entries)

    def publish_bytes(self, buffer: Any, version: int) -> PublishResult:
        """Publishes one packed image of the layout (layout.total_bytes bytes): a buffer or a uint8 tensor."""
        if hasattr(buffer, "data_ptr"):
            return self._core.publish_bytes(version, int(buffer.data_ptr()),
                                            int(buffer.numel()) * int(buffer.element_size()))
        return self._core.publish_buffer(version, buffer)

    @contextlib.contextmanager
    def writing(self, version: int) -> Iterator[Slot]:
        """Reserves a slot for ``version`` to be written in place; commits when the block ends.

        An exception in the block abandons the version (the slot returns to
        the ring; subscribers never see it) and propagates::

            with pub.writing(step) as slot:
                for name, t in slot.tensors().items():
                    t.copy_(params[name])
            print(slot.result)  # the PublishResult, once committed
        """
        slot = Slot(self._core.begin(version), self._layout)
        try:
            yield slot
        except BaseException:
            slot._core.abandon()
            raise
        slot.result = slot._core.commit()

    async def publish_async(self, state_dict: Any, version: int) -> PublishResult:
        """publish() on a worker thread, for asyncio code."""
        return await asyncio.get_running_loop().run_in_executor(None, self.publish, state_dict, version)

    def stats(self) -> Dict[str, Any]:
        """Counters: versions published, leases, connections, bytes served, auth failures, ..."""
        return self._core.stats()

    def close(self) -> None:
        """Stops serving (subscribers' pulls fail with ConnectionLost) and frees the slots."""
        self._core.close()

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "Publisher(closed)"
        return f"Publisher({self.address}, {len(self._layout)} tensors, latest version {self.latest_version})"
