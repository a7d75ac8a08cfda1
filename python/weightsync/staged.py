"""StagedUpdates: pull the next version in the background, install it between steps.

A plain pull writes into the engine's weights while it runs, so the engine
cannot use them meanwhile, and a failed pull leaves them undefined.
:class:`StagedUpdates` (the library's ``weightsync::StagedUpdates``) keeps the
engine serving through both: a background thread pulls each new version into
a staging buffer the library owns, checks it (the publisher's checksum, the
trainer's signature if the Subscriber has a ``trusted_key``), and holds it;
the engine calls :meth:`StagedUpdates.install` between steps, which makes the
staged version live in microseconds:

``"swap"``
    The library owns two buffers laid out like the layout; one is live, the
    other the staging buffer, and install() exchanges them. The engine reads
    the live one (:meth:`StagedUpdates.tensors`: typed torch views over it)
    and re-points its tensors after each install.

``"copy"``
    The engine's weights stay where they are (``live=``: its module, its
    tensors or one packed buffer; CUDA graphs stay valid); install() copies the
    staged bytes into them (one memcpy, or a device-to-device copy).

A failed or half-pulled version is never installed: install() returns None
and the live weights keep the version they hold. ``docs/consistency.md``
("Staged updates") has the guarantees, ``docs/python_engines.md`` the engine
side (:class:`~weightsync.EngineAdapter` with ``staged=``).
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from . import _weightsync, errors
from ._tensors import layout_views
from .layout import Layout
from .subscriber import PullResult, Subscriber

InstallResult = _weightsync.InstallResult

MODES = ("swap", "copy")


def _bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, "invalid_argument", "fix_call")


class StagedInstall(NamedTuple):
    """What :meth:`EngineAdapter.install_update` did (staged mode).

    ``blocked_seconds`` is the whole time the engine was held: the install
    (swap or copy) and what the adapter did after it (re-pointing the
    parameters, or the engine's load_weights), the part the engine cannot
    generate. ``install_seconds`` and ``apply_seconds`` split it; the
    background pull's own time (``pull_seconds``, never part of the pause)
    and ``staged_seconds`` (how long the version waited staged) are apart.
    ``pull`` is the background PullResult (None when a failed load_weights
    was repaired from the live buffer, with no new version).
    """

    version: int
    previous: int
    blocked_seconds: float
    install_seconds: float
    apply_seconds: float
    staged_seconds: float
    pull_seconds: float
    bytes: int
    tensors_loaded: int
    pull: Optional[PullResult]


class StagedUpdates:
    """A background pull into library buffers; :meth:`install` between steps.

    ::

        sub = weightsync.Subscriber("trainer:7000", secret=secret)
        staged = weightsync.StagedUpdates(sub, mode="copy", live=model)  # takes sub over
        while serving:
            step(model)                        # reads the live weights, never touched by the pull
            result = staged.install()          # an InstallResult, or None: nothing new staged

    ``subscriber``: a connected :class:`Subscriber`. The StagedUpdates takes
    it over (its background thread must be the only caller): the Subscriber
    object is closed from here on, also if this raises.

    ``mode``: ``"swap"`` (two library buffers; read them with
    :meth:`tensors` and re-point after each install) or ``"copy"`` (``live``:
    the engine's weights, anything :meth:`Subscriber.bind` takes: an
    nn.Module, a state_dict, (name, tensor) pairs or one packed tensor of
    layout.total_bytes, all on the CPU or all on one CUDA device; install()
    copies into them, so they must keep their memory: install() raises
    StaleBinding and copies nothing if one was re-allocated).

    ``device``: where the library's buffers live, ``"cpu"`` (default) or
    ``"cuda"`` (the current CUDA device); copy mode takes the live weights'.
    ``require_checksum``: stage only versions whose bytes matched the
    publisher's checksum (the publisher must compute them: ``checksum=True``
    or ``WEIGHTSYNC_CHECKSUM=1``). ``deltas``: ask a publisher with deltas for
    the difference from the version the staging buffer holds.
    ``every_version``: stage each version in turn, not the newest. ``poll``:
    seconds each background wait lasts before it checks whether it is being
    stopped; ``retry_backoff``: seconds between a failed pull and the next.
    ``lock_host``: lock the host buffers in memory (mlock).

    Threads: install(), :meth:`buffer`, :meth:`tensors` and the live
    accessors from one thread at a time (the engine's); staged_version,
    live_version, :meth:`wait_staged`, :meth:`status`, :meth:`stats` and
    :meth:`cancel` from any thread. Every call releases the GIL.
    """

    def __init__(self, subscriber: Subscriber, *, mode: str = "swap", live: Any = None,
                 device: Optional[str] = None, require_checksum: bool = True, deltas: bool = True,
                 every_version: bool = False, poll: float = 0.1, retry_backoff: float = 0.02,
                 lock_host: bool = False):
        if mode not in MODES:
            raise _bad(f"mode must be 'swap' or 'copy', not {mode!r}")
        if not isinstance(subscriber, Subscriber):
            raise _bad(f"StagedUpdates takes a weightsync.Subscriber, not a {type(subscriber).__name__}")
        if subscriber.closed:
            raise _bad("this Subscriber is closed")
        self._guard = None
        entries: List[Tuple[str, int, int]] = []
        contiguous = False
        if mode == "copy":
            if live is None:
                raise _bad("copy mode needs live=: the engine's weights (an nn.Module, a state_dict or one "
                           "packed tensor), which install() copies into")
            self._guard, live_device, contiguous = subscriber._guard(live)
            entries = [(r.name, r.address, r.nbytes) for r in self._guard._refs]
            if device is not None and device != live_device:
                raise _bad(f"the live weights are on {live_device}, not {device}: copy mode stages on their device")
            device = live_device
        elif live is not None:
            raise _bad("swap mode takes no live=: the library owns both buffers (read them with tensors()); "
                       "use mode='copy' to keep the engine's weights where they are")
        if require_checksum and not subscriber.publisher_checksums:
            raise errors.InvalidConfig(
                "the publisher computes no checksums, so no staged version could be verified: turn them on "
                "(Publisher(checksum=True), or WEIGHTSYNC_CHECKSUM=1 on the trainer), or pass "
                "require_checksum=False", "invalid_config", "fix_configuration")
        self._layout: Layout = subscriber.layout
        self._views: Dict[int, Dict[str, Any]] = {}
        self._core = _weightsync._StagedUpdates(
            subscriber._core, mode, entries, contiguous, device or "cpu", require_checksum, deltas,
            every_version, float(poll), float(retry_backoff), lock_host)

    # ---- what it is ------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """The publisher's :class:`~weightsync.Layout`."""
        return self._layout

    @property
    def mode(self) -> str:
        """``"swap"`` or ``"copy"``."""
        return self._core.mode

    @property
    def device(self) -> str:
        """Where the library's buffers live: ``"cpu"`` or ``"cuda"``."""
        return self._core.device

    @property
    def transport(self) -> str:
        """The data transport the Subscriber negotiated."""
        return self._core.transport

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def live_version(self) -> int:
        """The version the live weights hold (0: none installed yet)."""
        return self._core.live_version

    @property
    def staged_version(self) -> int:
        """The version staged and verified, waiting for install() (0: none)."""
        return self._core.staged_version

    # ---- the swap buffers ----------------------------------------------------------

    @property
    def live_index(self) -> Optional[int]:
        """Swap mode: which buffer (0 or 1) is live; None in copy mode."""
        return self._core.live_index

    @property
    def live_address(self) -> Optional[int]:
        """Swap mode: the live buffer's address (device memory too); None in copy mode."""
        return self._core.live_address

    @property
    def buffer_bytes(self) -> int:
        """Swap mode: the size of each buffer (layout.total_bytes); 0 in copy mode."""
        return self._core.buffer_bytes

    def buffer(self, index: Optional[int] = None) -> Optional[memoryview]:
        """Swap mode, host memory: buffer ``index`` (default: the live one) as a writable
        memoryview, or None for buffer 1 before the first install (its address is learnt
        then). The view keeps the memory alive, also after :meth:`close`. Read it, never
        write it (a delta against it would fail its check and be pulled in full)."""
        return self._core.buffer(self.live_index if index is None else index)

    def tensors(self, index: Optional[int] = None) -> Optional[Dict[str, Any]]:
        """Swap mode, host memory: ``{name: tensor}``, a typed zero-copy torch view of every
        tensor of the layout in buffer ``index`` (default: the live one), made once per
        buffer; None while that buffer's address is unknown (buffer 1 before the first
        install). After the next install() the live buffer is the library's again: stop
        reading these views (take :meth:`tensors` again)."""
        index = self.live_index if index is None else index
        views = self._views.get(index)
        if views is None:
            memory = self._core.buffer(index)
            if memory is None:
                return None
            views = self._views[index] = _typed_views(self._layout, memory)
        return views

    # ---- installing ------------------------------------------------------------------

    def install(self) -> Optional[InstallResult]:
        """Makes the staged version live; returns an InstallResult, or None with nothing
        staged (no newer version yet, a pull in progress, the last pull failed, the
        background thread stopped): the live weights are then untouched.

        Copy mode first checks that the live weights still use the memory given
        (StaleBinding, nothing copied, if not). InvalidArgument after close()."""
        if self._guard is not None:
            self._guard._check()
        return self._core.install()

    def wait_staged(self, timeout: float = 0.0) -> Optional[int]:
        """Waits up to ``timeout`` seconds until a version is staged; returns it, or None.
        Raises the background thread's error once it stopped (a connection error: make a
        new Subscriber), and Cancelled after :meth:`cancel`. Ctrl-C interrupts it on the
        main thread. Any thread."""
        return self._core.wait_staged(float(timeout))

    def cancel(self) -> None:
        """Makes the wait_staged() in progress (or, if none is, the next) raise Cancelled. Any thread."""
        self._core.cancel()

    # ---- health --------------------------------------------------------------------------

    def status(self) -> None:
        """Raises the background thread's error once it stopped (it stops on a connection
        error; failed pulls it retries are in :meth:`last_failure`). Any thread."""
        self._core.status()

    def last_failure(self) -> Optional[errors.WeightsyncError]:
        """The last failed background pull's error (not raised), or None. Any thread."""
        return self._core.last_failure()

    def stats(self) -> Dict[str, Any]:
        """``staged``, ``installs``, ``failed_pulls``, ``not_ready`` (install() calls with
        nothing staged), ``pull_seconds`` (background transfer time), the pauses install()
        caused (``blocked_count``, ``blocked_median_seconds``, ``blocked_p99_seconds`` over
        the last 4096, ``blocked_max_seconds``, ``blocked_total_seconds``) and
        ``subscriber`` (the Subscriber's stats). Any thread."""
        return self._core.stats()

    def close(self) -> None:
        """Stops the background pull and frees the buffers. Views of them (:meth:`buffer`,
        :meth:`tensors`, torch tensors over those) keep the library object, its buffers and
        its background thread, until the last of them goes: drop them first."""
        self._views = {}
        self._core.close()

    def __enter__(self) -> "StagedUpdates":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "StagedUpdates(closed)"
        return (f"StagedUpdates({self.mode}, live version {self.live_version}, "
                f"staged version {self.staged_version})")


def _typed_views(layout: Layout, memory: memoryview) -> Dict[str, Any]:
    """{name: tensor}: typed torch views of every tensor of ``layout`` in ``memory``."""
    import torch

    return layout_views(layout, torch.frombuffer(memory, dtype=torch.uint8))
