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

This module imports torch only when an adapter is built, so ``import
weightsync`` works without torch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from . import errors
from .subscriber import Binding, PullResult, Subscriber, stale_binding

logger = logging.getLogger("weightsync.engine")

MODES = ("auto", "direct", "load_weights")

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
    in pinned memory (faster copies to a GPU; needs CUDA).

    Errors at construction are InvalidArgument (a ValueError) naming what does
    not fit. Thread-safety: updates are serialised; :meth:`cancel` may be
    called from any thread.
    """

    def __init__(self, source: Union[Subscriber, str, Sequence[str]], model: Any = None, *,
                 load_weights: Optional[LoadWeights] = None, mode: str = "auto",
                 secret: Optional[str] = None, transport: Optional[str] = None,
                 before_load: Optional[Callable[[], Any]] = None,
                 after_load: Optional[Callable[[], Any]] = None, pin_memory: bool = False,
                 **subscriber_options: Any):
        if mode not in MODES:
            raise _bad(f"mode must be one of {', '.join(repr(m) for m in MODES)}, not {mode!r}")
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
        try:
            self._mode, self._binding, self._direct_mismatch = self._choose(mode, pin_memory)
        except BaseException:
            if self._owns_subscriber:
                self._subscriber.close()
            raise
        logger.info("EngineAdapter: %s mode, %d tensors, %d bytes per version%s", self._mode,
                    len(self.layout), self.layout.payload_bytes,
                    f" (not direct: {self._direct_mismatch})" if self._direct_mismatch else "")

    # ---- construction -------------------------------------------------------

    def _choose(self, mode: str, pin_memory: bool) -> Tuple[str, Binding, Optional[str]]:
        """(mode, binding, why not direct) for the requested mode."""
        why_not_direct: Optional[str] = None
        if mode in ("auto", "direct"):
            if self._model is None:
                why_not_direct = "no model was given (only a load_weights callable)"
            else:
                try:
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
        return "load_weights", self._bind_buffer(pin_memory), why_not_direct

    def _bind_buffer(self, pin_memory: bool) -> Binding:
        """Allocates the packed host buffer, binds it once and makes a typed view per tensor."""
        import torch

        layout = self.layout
        self._buffer = torch.empty(layout.total_bytes, dtype=torch.uint8, pin_memory=pin_memory)
        binding = self._subscriber.bind(self._buffer)
        views = []
        for info in layout:
            dtype = getattr(torch, info.dtype, None)
            if not isinstance(dtype, torch.dtype):
                raise _bad(f"'{info.name}' is {info.dtype}, which this torch ({torch.__version__}) does not have")
            raw = self._buffer[info.offset:info.offset + info.nbytes]
            views.append((info.name, raw.view(dtype).view(info.shape)))
        self._views = views
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
        """The Subscriber the adapter pulls with."""
        return self._subscriber

    @property
    def layout(self):
        """The publisher's :class:`~weightsync.Layout`."""
        return self._subscriber.layout

    @property
    def buffer(self) -> Any:
        """load_weights mode: the packed host buffer (a uint8 tensor of
        layout.total_bytes) the pulls write; None in direct mode."""
        return self._buffer

    def stats(self) -> Dict[str, Any]:
        """Counters of the successful updates: ``updates``, ``bytes``, seconds
        spent transferring (``pull_seconds``), waiting for a version to be
        published (``wait_seconds``) and in the engine's load_weights and
        after_load (``load_seconds``), totals and ``last_*`` for the last
        update; ``last_tensors_loaded``: tensors the engine's loader took last
        time; ``failures``: updates that raised; ``version``; ``mode``."""
        out = dict(self._stats)
        out["version"] = self._version
        out["mode"] = self._mode
        return out

    # ---- updates ------------------------------------------------------------------

    def update_weights(self, version: Optional[int] = None, wait: float = 0.0) -> Optional[PullResult]:
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
        """
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
        """
        with self._lock:
            if self._closed:
                raise _bad("this EngineAdapter is closed")
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

    def _load(self, version: int) -> int:
        """Hands every tensor of the buffer to the engine's loader once; returns how many it took."""
        taken = 0

        def weights() -> Iterator[Tuple[str, Any]]:
            nonlocal taken
            for pair in self._views:
                taken += 1
                yield pair

        if self._before_load is not None:
            self._before_load()
        self._load_weights(weights())
        if taken < len(self._views):
            logger.warning("EngineAdapter: the engine's load_weights took %d of the %d tensors of version %d "
                           "(it stopped iterating early)", taken, len(self._views), version)
        if self._after_load is not None:
            self._after_load()
        return taken

    async def update_weights_async(self, version: Optional[int] = None,
                                   wait: float = 0.0) -> Optional[PullResult]:
        """:meth:`update_weights` on a worker thread, for asyncio code.

        Cancelling the task cancels a pull in progress (the engine's weights
        are then as after a failed update); a load_weights call in progress
        is let finish first.
        """
        return await self._subscriber._run_cancellable(self.update_weights, version, wait)

    def cancel(self) -> None:
        """Makes the pull in progress (or else the next) raise Cancelled. Any thread."""
        self._subscriber.cancel()

    def close(self) -> None:
        """Closes the Subscriber if the adapter made it, and drops the host buffer.

        A Subscriber passed in stays open (its registration of the buffer is
        released). Updates after close() fail."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
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
        return f"EngineAdapter({self._mode}, {len(self.layout)} tensors, version {self._version})"
