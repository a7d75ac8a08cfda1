"""EngineAdapter: weight updates for an inference engine, in one call.

An inference engine (vLLM, SGLang, your own) holds the model as an
``nn.Module``. :class:`EngineAdapter` connects a :class:`~weightsync.Subscriber`
to it and gives the engine one method, :meth:`EngineAdapter.update_weights`,
that pulls the newest version the trainer published. It works in one of two
modes, chosen once when the adapter is built:

``"direct"``
    The publisher's layout names the engine's own parameters (same names,
    dtypes and shapes, contiguous): every pull writes straight into the
    parameters' memory, zero copy, no engine code runs. The parameters are
    written while the pull runs, so call ``update_weights`` between forward
    passes (vLLM and SGLang run such calls between steps). If the engine
    later gives a parameter new memory (``param.data = ...``, a new
    Parameter from post-load processing, ``model.to()``), an update raises
    StaleBinding and writes nothing: call :meth:`EngineAdapter.rebind`.

``"load_weights"``
    The engine's parameters differ from what the trainer publishes (fused
    ``qkv_proj`` / ``gate_up_proj``, a ``model.`` prefix, tensor-parallel
    shards, another dtype): every pull goes into one packed host buffer
    (allocated and registered once), then the engine's own
    ``load_weights(iterable of (name, tensor))`` (vLLM's and SGLang's model
    classes have it) maps the trainer's tensors onto its parameters. The
    tensors it gets are zero-copy views into that buffer, valid only during
    the call: the loader must copy them (vLLM's and SGLang's weight loaders
    do), never keep them.

``"auto"`` (the default) takes ``"direct"`` when the engine's parameters fit
the layout, else ``"load_weights"`` when the engine has a loader, else raises
InvalidArgument saying why neither fits. See docs/python_engines.md for the
vLLM and SGLang hooks to call it from.

``staged="copy"`` or ``"swap"`` never stops the engine for the network: a
background thread pulls each new version into buffers the library owns
(:class:`~weightsync.StagedUpdates`), and the engine calls
:meth:`EngineAdapter.install_update` between steps, which installs the staged
version (a copy into the parameters' fixed addresses, or a re-pointing of the
parameters at the new live buffer, or the engine's load_weights from it) or
returns None at once. A failed background pull never touches the engine.

This module imports torch only when an adapter is built, so ``import
weightsync`` works without torch.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import errors
from ._staged_engine import StagedPath, check_options
from ._tensors import layout_views
from .staged import InstallResult, StagedInstall, StagedUpdates
from .subscriber import Binding, PullResult, Subscriber, run_cancellable, stale_binding

logger = logging.getLogger("weightsync.engine")

MODES = ("auto", "direct", "load_weights")
STAGED = (None, "swap", "copy")
_WINDOW = 4096  # installs kept for the blocked-time median and p99, as the library's

LoadWeights = Callable[[Iterable[Tuple[str, Any]]], Any]


def _bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, "invalid_argument", "fix_call")


class EngineAdapter:
    """Keeps an inference engine's weights at the trainer's newest version.

    ::

        adapter = weightsync.EngineAdapter("trainer:7000", model, secret=secret)
        print(adapter.mode)                   # "direct" or "load_weights"
        while serving:
            result = adapter.update_weights()  # newest version, or None if none newer
            ...                                # forward passes on the new weights

    ``source``: a :class:`Subscriber` (the caller keeps ownership) or the
    publisher's address (or a list of addresses: a trainer and its relays);
    then ``secret``, ``transport`` and ``subscriber_options`` (any other
    :class:`Subscriber` keyword) make the Subscriber, which the adapter
    closes on :meth:`close`.

    ``model``: the engine's ``nn.Module`` (vLLM:
    ``worker.model_runner.model``; SGLang: ``model_runner.model``), or None
    with ``load_weights`` given. ``load_weights``: a callable taking an
    iterable of ``(name, tensor)``; default ``model.load_weights`` if the
    model has one. ``before_load`` and ``after_load``: called with no
    arguments before and after each ``load_weights`` call, for engines that
    prepare for and post-process loaded weights (vLLM:
    ``initialize_layerwise_reload`` / ``finalize_layerwise_reload``, or
    ``process_weights_after_loading``); after_load is not called when
    load_weights raised. Not needed for plain models.

    ``mode``: ``"auto"``, ``"direct"`` or ``"load_weights"`` (see the module
    docstring). ``pin_memory``: allocate the host buffer of load_weights mode
    in pinned memory (faster copies to a GPU; needs CUDA; not with staged).

    ``staged``: None (each update pulls while the engine waits), ``"copy"`` or
    ``"swap"``: a background pull stages each new version and
    :meth:`install_update` installs it between steps (docs/python_engines.md,
    "Staged updates"). Direct mode: ``"copy"`` copies into the parameters
    (fixed addresses: CUDA graphs stay valid; CPU or CUDA), ``"swap"``
    re-points them at the library's live host buffer (host parameters only;
    no copy). load_weights mode: either value stages into two library
    buffers and calls load_weights on the live one. The adapter must make
    the Subscriber (``source`` an address), since the staged pull takes it
    over. ``staged_options``: keywords for :class:`~weightsync.StagedUpdates`
    (``require_checksum``, default True: the publisher must compute
    checksums; ``deltas``, ``every_version``, ``poll``, ``retry_backoff``,
    ``lock_host``).

    Errors at construction are InvalidArgument (a ValueError) naming what does
    not fit. Thread-safety: updates are serialised; :meth:`cancel` may be
    called from any thread.
    """

    def __init__(self, source: Union[Subscriber, str, Sequence[str]], model: Any = None, *,
                 load_weights: Optional[LoadWeights] = None, mode: str = "auto",
                 secret: Optional[str] = None, transport: Optional[str] = None,
                 before_load: Optional[Callable[[], Any]] = None,
                 after_load: Optional[Callable[[], Any]] = None, pin_memory: bool = False,
                 staged: Optional[str] = None, staged_options: Optional[Mapping[str, Any]] = None,
                 **subscriber_options: Any):
        if mode not in MODES:
            raise _bad(f"mode must be one of {', '.join(repr(m) for m in MODES)}, not {mode!r}")
        if staged not in STAGED:
            raise _bad(f"staged must be None, 'swap' or 'copy', not {staged!r}")
        if staged is None and staged_options:
            raise _bad("staged_options apply only with staged='copy' or 'swap'")
        options = check_options(staged_options)
        if staged is not None:
            if isinstance(source, Subscriber):
                raise _bad("staged mode needs EngineAdapter to make its own Subscriber: pass the publisher's "
                           "address, not a Subscriber (the background pull takes the Subscriber over, as it "
                           "must be its only caller, and a Subscriber passed in stays the caller's)")
            if pin_memory:
                raise _bad("pin_memory is for the host buffer of load_weights mode without staging; staged "
                           "mode pulls into buffers the library owns")
        if model is None and load_weights is None:
            raise _bad("EngineAdapter needs the engine's model (an nn.Module) or a load_weights callable")
        if load_weights is None and model is not None:
            load_weights = getattr(model, "load_weights", None)
        if load_weights is not None and not callable(load_weights):
            raise _bad(f"load_weights must be callable, not a {type(load_weights).__name__}")
        for hook, what in ((before_load, "before_load"), (after_load, "after_load")):
            if hook is not None and not callable(hook):
                raise _bad(f"{what} must be callable, not a {type(hook).__name__}")

        if isinstance(source, Subscriber):
            if secret is not None or transport is not None or subscriber_options:
                raise _bad("secret, transport and Subscriber options apply only when EngineAdapter "
                           "makes the Subscriber (pass an address, not a Subscriber)")
            self._subscriber, self._owns_subscriber = source, False
        else:
            self._subscriber = Subscriber(source, secret=secret, transport=transport, **subscriber_options)
            self._owns_subscriber = True
        self._connect = (source, dict(secret=secret, transport=transport, **subscriber_options))

        self._model = model
        self._load_weights = load_weights
        self._before_load = before_load
        self._after_load = after_load
        self._lock = threading.Lock()
        self._pin_memory = pin_memory
        self._closed = False
        self._version = 0          # the version the engine's weights hold; 0: none or unknown
        self._buffer: Any = None   # load_weights mode: the packed host buffer
        self._views: List[Tuple[str, Any]] = []
        self._stats: Dict[str, Any] = {
            "updates": 0, "failures": 0, "bytes": 0, "pull_seconds": 0.0, "wait_seconds": 0.0,
            "load_seconds": 0.0, "last_pull_seconds": 0.0, "last_wait_seconds": 0.0, "last_load_seconds": 0.0,
            "last_tensors_loaded": 0,
        }
        if staged is not None:
            self._stats.update(blocked_seconds=0.0, last_blocked_seconds=0.0, blocked_max_seconds=0.0)
        self._staged_kind = staged
        self._staged_options = options
        self._staged: Optional[StagedPath] = None
        self._device: Optional[str] = None  # staged direct mode: where the parameters are
        self._blocked: collections.deque = collections.deque(maxlen=_WINDOW)
        try:
            self._mode, self._binding, self._direct_mismatch = self._choose(mode, pin_memory)
            if staged is not None:
                self._staged = self._start_staged(self._subscriber, self._binding)
                self._binding = None
        except BaseException:
            if self._owns_subscriber:
                self._subscriber.close()
            raise
        logger.info("EngineAdapter: %s mode%s, %d tensors, %d bytes per version%s", self._mode,
                    f", staged ({staged})" if staged else "", len(self.layout), self.layout.payload_bytes,
                    f" (not direct: {self._direct_mismatch})" if self._direct_mismatch else "")

    # ---- construction -------------------------------------------------------

    def _choose(self, mode: str, pin_memory: bool) -> Tuple[str, Optional[Binding], Optional[str]]:
        """(mode, binding, why not direct) for the requested mode. Staged: the direct binding
        prepares no pull (a guard of the parameters), and load_weights mode has none."""
        why_not_direct: Optional[str] = None
        if mode in ("auto", "direct"):
            if self._model is None:
                why_not_direct = "no model was given (only a load_weights callable)"
            else:
                try:
                    if self._staged_kind is not None:
                        binding, self._device, _ = self._subscriber._guard(self._model)
                        return "direct", binding, None
                    return "direct", self._subscriber.bind(self._model), None
                except errors.InvalidArgument as e:
                    why_not_direct = e.message
            if mode == "direct":
                raise _bad(f"direct mode: the engine's parameters do not fit the publisher's layout: "
                           f"{why_not_direct}")
        if self._load_weights is None:
            if why_not_direct is None:  # mode "load_weights" asked for
                raise _bad("load_weights mode: the model has no load_weights(weights) method; pass load_weights=")
            raise _bad(f"the engine's parameters do not fit the publisher's layout ({why_not_direct}), and "
                       "the model has no load_weights(weights) method to map the trainer's tensors onto "
                       "them: pass load_weights=, or publish the engine's own names, dtypes and shapes")
        if self._staged_kind is not None:
            return "load_weights", None, why_not_direct
        return "load_weights", self._bind_buffer(pin_memory), why_not_direct

    def _start_staged(self, subscriber: Subscriber, guard: Optional[Binding]) -> StagedPath:
        """The StagedUpdates for this mode; takes ``subscriber`` over."""
        return StagedPath(subscriber, self._mode, self._staged_kind, self._model, guard, self._device,
                          self._staged_options)

    def _bind_buffer(self, pin_memory: bool) -> Binding:
        """Allocates the packed host buffer, binds it once and makes a typed view per tensor."""
        import torch

        layout = self.layout
        self._buffer = torch.empty(layout.total_bytes, dtype=torch.uint8, pin_memory=pin_memory)
        binding = self._subscriber.bind(self._buffer)
        self._views = list(layout_views(layout, self._buffer).items())
        return binding

    # ---- what it is -----------------------------------------------------------

    @property
    def mode(self) -> str:
        """``"direct"`` or ``"load_weights"``: what this adapter does on each update."""
        return self._mode

    @property
    def version(self) -> int:
        """The version the engine's weights hold: 0 before the first update, and
        after an update that may have left them partly written."""
        return self._version

    @property
    def direct_mismatch(self) -> Optional[str]:
        """load_weights mode: why the engine's parameters do not fit the layout
        for direct mode (the first difference found); None in direct mode."""
        return self._direct_mismatch

    @property
    def subscriber(self) -> Subscriber:
        """The Subscriber the adapter pulls with (staged mode: closed, taken over by
        :attr:`staged_updates`)."""
        return self._subscriber

    @property
    def staged(self) -> Optional[str]:
        """``"copy"`` or ``"swap"`` as asked for at construction; None without staging."""
        return self._staged_kind

    @property
    def staged_updates(self) -> Optional[StagedUpdates]:
        """Staged mode: the :class:`~weightsync.StagedUpdates` pulling in the background
        (read it, do not install through it: install_update() does); else None."""
        return self._staged.updates if self._staged is not None else None

    @property
    def layout(self):
        """The publisher's :class:`~weightsync.Layout`."""
        return self._subscriber.layout

    @property
    def buffer(self) -> Any:
        """load_weights mode without staging: the packed host buffer (a uint8
        tensor of layout.total_bytes) the pulls write; None otherwise."""
        return self._buffer

    def stats(self) -> Dict[str, Any]:
        """Counters of the successful updates: ``updates``, ``bytes``, seconds
        spent transferring (``pull_seconds``), waiting for a version to be
        published (``wait_seconds``) and in the engine's load_weights and
        after_load (``load_seconds``), totals and ``last_*`` for the last
        update; ``last_tensors_loaded``: tensors the engine's loader took last
        time; ``failures``: updates that raised; ``version``; ``mode``.

        Staged mode adds ``installs`` (= ``updates``); the time the engine was
        held by each install_update() (the install plus the re-pointing or
        load_weights, which ``load_seconds`` counts): ``blocked_seconds``
        (total), ``last_blocked_seconds``, ``blocked_median_seconds`` and
        ``blocked_p99_seconds`` (over the last 4096), ``blocked_max_seconds``;
        from the background pull: ``staged_version``, ``live_version``,
        ``failed_pulls``, ``not_ready``, ``last_failure`` (the last failed
        pull's error as a string, or None), ``background_error`` (why the
        background pull stopped, or None); ``library``: the StagedUpdates'
        own stats(). ``pull_seconds`` counts the installed versions' background
        pulls (never part of the engine's pause)."""
        out = dict(self._stats)
        out["version"] = self._version
        out["mode"] = self._mode
        if self._staged_kind is not None:
            out.update(self._staged_stats())
        return out

    def _staged_stats(self) -> Dict[str, Any]:
        window = sorted(self._blocked)
        out: Dict[str, Any] = {
            "staged": self._staged_kind, "installs": self._stats["updates"],
            "blocked_median_seconds": _quantile(window, 0.5), "blocked_p99_seconds": _quantile(window, 0.99),
        }
        updates = self._staged.updates if self._staged is not None else None
        if updates is None or updates.closed:
            return out
        library = updates.stats()
        failure = updates.last_failure()
        try:
            updates.status()
            stopped = None
        except errors.WeightsyncError as e:
            stopped = str(e)
        out.update(staged_version=updates.staged_version, live_version=updates.live_version,
                   failed_pulls=library["failed_pulls"], not_ready=library["not_ready"],
                   last_failure=None if failure is None else str(failure), background_error=stopped,
                   library=library)
        return out

    def status(self) -> None:
        """Raises what keeps updates from coming: staged mode, the background
        pull's error once it stopped (a connection error: make a new adapter, or
        :meth:`rebind` to reconnect); else the Subscriber's sticky connection
        error. Returns None when healthy."""
        if self._staged is not None:
            self._staged.updates.status()
        else:
            self._subscriber.check()

    # ---- updates ------------------------------------------------------------------

    def update_weights(self, version: Optional[int] = None,
                       wait: float = 0.0) -> Union[PullResult, StagedInstall, None]:
        """Brings the engine to a newer version; returns the PullResult, or None.

        ``version`` None: the newest version newer than :attr:`version` (None
        when there is none within ``wait`` seconds; the engine is untouched).
        ``version`` N: exactly N (NotReady if it does not come within
        ``wait``, VersionRevoked if the publisher no longer has it).

        Pull errors are those of :meth:`Subscriber.pull`; an error raised by
        the engine's load_weights propagates. When an error may have left the
        engine's weights partly written (a failed pull in direct mode, a
        failed load_weights), :attr:`version` becomes 0, so the next
        ``update_weights()`` brings the newest version again in full; a failed
        pull in load_weights mode leaves the engine untouched.

        Staged mode: waits up to ``wait`` seconds for a staged version (none
        staged yet), then installs it as :meth:`install_update` does, and
        returns its :class:`~weightsync.StagedInstall` or None; a wait raises
        the background pull's error once it stopped (a connection error).
        ``version=`` is refused (InvalidArgument): the background pull stages
        the newest version, not a chosen one.
        """
        if self._staged_kind is not None:
            return self._update_staged(version, wait)
        with self._lock:
            if self._closed:
                raise _bad("this EngineAdapter is closed")
            newer_than = None if version is not None else self._version
            try:
                result = self._subscriber.pull(self._binding, wait=wait, newer_than=newer_than, version=version)
            except errors.StaleBinding as e:
                # Nothing was written, but the engine's weights are in memory we
                # did not bind (its own re-allocation): their version is unknown.
                self._stats["failures"] += 1
                self._version = 0
                raise stale_binding(e.name, e.why, "call adapter.rebind() after the engine re-allocates its weights "
                                                   "(or make a new EngineAdapter)") from None
            except errors.NotReady:
                self._stats["failures"] += 1  # that version never came: nothing was written
                raise
            except BaseException:
                self._stats["failures"] += 1
                if self._mode == "direct":
                    self._version = 0  # the parameters' bytes are undefined now
                raise
            if result is None:
                return None
            pulled = time.perf_counter()
            loaded = 0
            if self._mode == "load_weights":
                self._version = 0  # the engine's weights change from here on
                try:
                    loaded = self._load(result.version)
                except BaseException:
                    self._stats["failures"] += 1
                    raise
            done = time.perf_counter()
            self._version = result.version
            s = self._stats
            s["updates"] += 1
            s["bytes"] += result.bytes
            for key, seconds in (("pull", result.seconds), ("wait", result.wait_seconds), ("load", done - pulled)):
                s[f"last_{key}_seconds"] = seconds
                s[f"{key}_seconds"] += seconds
            s["last_tensors_loaded"] = loaded
            return result

    # ---- staged updates ----------------------------------------------------------------

    def install_update(self) -> Optional[StagedInstall]:
        """Staged mode: installs the version pulled in the background, if one is staged, and
        never waits for the network. Call it between steps.

        Returns a :class:`~weightsync.StagedInstall` (``version``; ``blocked_seconds``: the
        whole time the engine was held, the install plus re-pointing the parameters or
        the engine's load_weights; ``pull_seconds``: the background pull's own time), or
        None when nothing newer is staged (a pull in progress or failed, no new version,
        the background pull stopped: :meth:`status` says): the engine is then untouched.

        Direct mode first checks that the parameters still use the memory the adapter
        copies into or re-pointed (else StaleBinding, nothing touched, :attr:`version` 0:
        call :meth:`rebind`). An error raised by the engine's load_weights propagates and
        sets :attr:`version` to 0; the next install_update() then loads the live version
        again (the library never writes the live buffer).
        """
        with self._lock:
            if self._closed:
                raise _bad("this EngineAdapter is closed")
            if self._staged is None:
                raise _bad("install_update() is for staged mode (EngineAdapter(..., staged='copy' or 'swap')); "
                           "without it, call update_weights()")
            return self._install_staged()

    def _update_staged(self, version: Optional[int], wait: float) -> Optional[StagedInstall]:
        if version is not None:
            raise _bad(f"update_weights(version={version}) is not offered in staged mode: the background pull "
                       "stages the newest version and install_update() installs it; to install chosen "
                       "versions, make the adapter without staged=")
        if self._closed:
            raise _bad("this EngineAdapter is closed")
        waited = 0.0
        updates = self._staged.updates
        if wait > 0 and updates.staged_version == 0:
            t0 = time.perf_counter()
            updates.wait_staged(wait)  # None on timeout; raises once the background pull stopped
            waited = time.perf_counter() - t0
        result = self.install_update()
        if result is not None:
            self._stats["last_wait_seconds"] = waited
            self._stats["wait_seconds"] += waited
        return result

    def _install_staged(self) -> Optional[StagedInstall]:
        """install_update() with the lock held."""
        path = self._staged
        start = time.perf_counter()
        previous = self._version
        if self._mode == "load_weights" and previous == 0 and path.updates.staged_version == 0 \
                and path.updates.live_version > 0:
            return self._reload_live(start)  # a load_weights that raised: the live buffer is intact
        try:
            result = path.install()
        except errors.StaleBinding as e:
            self._stats["failures"] += 1
            self._version = 0  # the parameters are in memory the adapter does not know: version unknown
            raise stale_binding(e.name, e.why, "call adapter.rebind() after the engine re-allocates its weights "
                                               "(or make a new EngineAdapter)") from None
        except BaseException:
            self._stats["failures"] += 1
            if path.copy:
                self._version = 0  # a device copy that failed part-way leaves the parameters undefined
            raise
        if result is None:
            return None
        installed = time.perf_counter()
        loaded = 0
        if self._mode == "load_weights":
            self._version = 0  # the engine's weights change from here on
            try:
                loaded = self._load(result.version, path.live_weights())
            except BaseException:
                self._stats["failures"] += 1
                raise
        else:
            path.apply()
        self._version = result.version
        return self._record_install(result.version, previous, start, installed, result, loaded)

    def _reload_live(self, start: float) -> StagedInstall:
        """load_weights mode: the live version again, after a load_weights that raised."""
        version = self._staged.updates.live_version
        try:
            loaded = self._load(version, self._staged.live_weights())
        except BaseException:
            self._stats["failures"] += 1
            raise
        self._version = version
        return self._record_install(version, 0, start, start, None, loaded)

    def _record_install(self, version: int, previous: int, start: float, installed: float,
                        result: Optional[InstallResult], loaded: int) -> StagedInstall:
        done = time.perf_counter()
        pull = result.pull if result is not None else None
        out = StagedInstall(version=version, previous=previous, blocked_seconds=done - start,
                            install_seconds=installed - start, apply_seconds=done - installed,
                            staged_seconds=result.staged_seconds if result is not None else 0.0,
                            pull_seconds=pull.seconds if pull is not None else 0.0,
                            bytes=pull.bytes if pull is not None else 0, tensors_loaded=loaded, pull=pull)
        s = self._stats
        s["updates"] += 1
        s["bytes"] += out.bytes
        for key, seconds in (("pull", out.pull_seconds), ("load", out.apply_seconds),
                             ("blocked", out.blocked_seconds)):
            s[f"last_{key}_seconds"] = seconds
            s[f"{key}_seconds"] += seconds
        s["blocked_max_seconds"] = max(s["blocked_max_seconds"], out.blocked_seconds)
        s["last_tensors_loaded"] = loaded
        self._blocked.append(out.blocked_seconds)
        return out

    def rebind(self) -> None:
        """Binds the engine's parameters again, after the engine re-allocated them.

        Direct mode writes into the memory the parameters had when the adapter
        was built (or last rebound); an update after the engine gave a parameter
        new memory (``param.data = ...``, ``model.to()`` / ``half()``, a new
        Parameter from post-load processing) raises StaleBinding and writes
        nothing. Call this after such a change; the next update then brings the
        newest version in full (:attr:`version` is 0). InvalidArgument if the
        parameters no longer fit the layout (the adapter keeps its old binding).
        load_weights mode: allocates and binds a new host buffer.

        Staged mode reconnects: a new Subscriber (from the address and options
        the adapter was made with) and a new StagedUpdates for the parameters'
        memory now; the background pull then brings the newest version. Also
        the way back after the background pull stopped (:meth:`status`).
        """
        with self._lock:
            if self._closed:
                raise _bad("this EngineAdapter is closed")
            if self._staged is not None:
                self._restage()
                return
            old = self._binding
            if self._mode == "direct":
                self._binding = self._subscriber.bind(self._model)
            else:
                self._binding = self._bind_buffer(self._pin_memory)
            self._version = 0
            # The old memory may be freed once the old binding goes: drop its
            # RDMA registrations (the new binding registers on its next pull).
            with contextlib.suppress(errors.WeightsyncError):
                old.release()

    def _restage(self) -> None:
        """rebind() in staged mode, lock held: a new Subscriber and StagedPath; the old ones
        are closed only once the new ones exist (else the adapter keeps them)."""
        address, options = self._connect
        subscriber = Subscriber(address, **options)
        try:
            guard = None
            if self._mode == "direct":
                subscriber._guard(self._model)  # they still fit (else InvalidArgument, the old path kept)
            self._staged.close()  # swap: the parameters get their own copy of the live weights first
            if self._mode == "direct":
                guard, self._device, _ = subscriber._guard(self._model)  # that memory, now
            self._subscriber = subscriber
            self._staged = self._start_staged(subscriber, guard)
        except BaseException:
            subscriber.close()
            raise
        self._version = 0

    def _load(self, version: int, views: Optional[List[Tuple[str, Any]]] = None) -> int:
        """Hands every tensor of the buffer (``views``: of the live staged buffer) to the
        engine's loader once; returns how many it took."""
        taken = 0
        views = self._views if views is None else views

        def weights() -> Iterator[Tuple[str, Any]]:
            nonlocal taken
            for pair in views:
                taken += 1
                yield pair

        if self._before_load is not None:
            self._before_load()
        self._load_weights(weights())
        if taken < len(views):
            logger.warning("EngineAdapter: the engine's load_weights took %d of the %d tensors of version %d "
                           "(it stopped iterating early)", taken, len(views), version)
        if self._after_load is not None:
            self._after_load()
        return taken

    async def update_weights_async(self, version: Optional[int] = None,
                                   wait: float = 0.0) -> Union[PullResult, StagedInstall, None]:
        """:meth:`update_weights` on a worker thread, for asyncio code.

        Cancelling the task cancels a pull in progress (the engine's weights
        are then as after a failed update); a load_weights call in progress
        is let finish first. Staged mode: it cancels the wait for a staged
        version (the background pull goes on).
        """
        if self._staged is not None:
            return await run_cancellable(self._staged.updates._core, self.update_weights, version, wait)
        return await self._subscriber._run_cancellable(self.update_weights, version, wait)

    def cancel(self) -> None:
        """Makes the pull in progress (or else the next) raise Cancelled; staged mode: the
        wait of update_weights(wait=...). Any thread."""
        if self._staged is not None:
            self._staged.updates.cancel()
        else:
            self._subscriber.cancel()

    def close(self) -> None:
        """Closes the Subscriber if the adapter made it, and drops the host buffer.

        A Subscriber passed in stays open (its registration of the buffer is
        released). Staged mode: stops the background pull and frees the
        library's buffers; in direct swap mode the parameters first get their
        own copy of the live weights, so the model stays usable. Updates after
        close() fail."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._staged is not None:
                self._staged.close()
            if self._owns_subscriber:
                self._subscriber.close()
            elif self._buffer is not None and not self._subscriber.closed:
                self._binding.release()  # the buffer is ours: drop its registrations
            self._views = []
            self._buffer = None

    def __enter__(self) -> "EngineAdapter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        staged = f", staged {self._staged_kind}" if self._staged_kind else ""
        return f"EngineAdapter({self._mode}{staged}, {len(self.layout)} tensors, version {self._version})"


def _quantile(ordered: List[float], q: float) -> float:
    """The sample at rank q * (n - 1), rounded up, as the library's PauseSummary; 0 if none."""
    if not ordered:
        return 0.0
    rank = q * (len(ordered) - 1)
    index = int(rank)
    if index < rank:
        index += 1
    return ordered[min(index, len(ordered) - 1)]
