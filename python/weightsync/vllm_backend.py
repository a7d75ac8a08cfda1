"""vLLM's weight-transfer contract, worker side: ``WeightsyncWeightTransferEngine``.

vLLM (the commit matched is named in docs/python_engines.md) builds one engine per
worker with ``WeightTransferEngineFactory.create_engine(config, vllm_config, device,
model)`` when ``WeightTransferConfig(backend="weightsync")`` is set (registered by
:func:`weightsync.vllm_plugin.register`, vLLM's ``vllm.general_plugins`` entry point).
The worker then calls, from its one thread:

- ``parse_init_info(dict)`` + ``init_transfer_engine(info)`` once
  (``/init_weight_transfer_engine``): connects a weightsync Subscriber to the trainer's
  publisher (``address``; ``secret``, else WEIGHTSYNC_SECRET from the environment) and
  allocates the staging buffer, once;
- per update, ``start_weight_update()``, ``update_weights(dict)`` (parse, then
  ``receive_weights``, then a device synchronize), ``finish_weight_update()``;
- ``shutdown()`` at the end.

``receive_weights`` pulls the version named in the update info (or the newest) whole
into the staging buffer, and only then installs it: ``mode="checkpoint"`` (default)
feeds the model's ``load_weights`` one decoder layer per call in the checkpoint's
names and layer order (vLLM's layerwise reload is initialized here, after the pull,
and finalized in ``finish_weight_update``); ``mode="in_place"`` copies each tensor into
the parameter of the same name (kernel format; addresses kept, CUDA graphs stay
valid). Every copy has ended when ``update_weights`` returns (drained). A failed pull
raises and leaves the model's weights as they were; an error from the model's loader
raises too (the weights may then be partly new: send the update again).

vLLM is imported only with this module (not by ``import weightsync``); without vLLM,
the engine is defined against :mod:`weightsync._vllm_standin`, classes with vLLM's
method names and signatures (``weightsync._vllm_api.VLLM`` says which).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Union

from . import _vllm_api
from ._staging import StagingReceiver, check_version, check_wait
from ._vllm_api import WeightTransferEngine, WeightTransferInitInfo, WeightTransferUpdateInfo

logger = logging.getLogger("weightsync.vllm")

BACKEND = "weightsync"
MODES = ("checkpoint", "in_place")
MAX_ADDRESS_CHARS = 1024
MAX_ADDRESSES = 64


def _check_address(value: Any) -> Union[str, List[str]]:
    addresses = [value] if isinstance(value, str) else value
    if not isinstance(addresses, (list, tuple)) or not addresses or len(addresses) > MAX_ADDRESSES:
        raise ValueError(f"address must be 'host:port' or a list of 1 to {MAX_ADDRESSES} of them")
    for a in addresses:
        if not isinstance(a, str) or not 0 < len(a) <= MAX_ADDRESS_CHARS:
            raise ValueError(f"every address must be a non-empty string of at most {MAX_ADDRESS_CHARS} characters")
    return value if isinstance(value, str) else list(addresses)


@dataclass
class WeightsyncInitInfo(WeightTransferInitInfo):
    """What ``init_weight_transfer_engine`` carries for this backend (a JSON-safe dict).

    ``address``: the publisher's "host:port" (or a list: a trainer and its relays).
    ``secret``: the shared secret; None (recommended: the secret then never crosses
    vLLM's HTTP routes) takes WEIGHTSYNC_SECRET from the worker's environment.
    ``transport``: None negotiates ("shm", "tcp", "ucx", "verbs", "cuda_ipc").
    ``mode``: "checkpoint" or "in_place" (module docstring). ``wait_seconds``: how long
    an update waits for its version to be published (0 to 3600).
    Unknown keys or wrong types raise ValueError (``parse_init_info``).
    """

    address: Union[str, List[str]] = ""
    secret: Optional[str] = None
    transport: Optional[str] = None
    mode: str = "checkpoint"
    wait_seconds: float = 30.0

    def __post_init__(self) -> None:
        self.address = _check_address(self.address)
        for name in ("secret", "transport"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name} must be a string or None, not {type(value).__name__}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        self.wait_seconds = check_wait(self.wait_seconds, "wait_seconds")


@dataclass
class WeightsyncUpdateInfo(WeightTransferUpdateInfo):
    """What each ``update_weights`` carries: ``version``, the version to install (the
    trainer engine sends the one it just published; None: the newest published), and
    ``wait_seconds`` (None: the init info's)."""

    version: Optional[int] = None
    wait_seconds: Optional[float] = None

    def __post_init__(self) -> None:
        self.version = check_version(self.version, "version")
        if self.wait_seconds is not None:
            self.wait_seconds = check_wait(self.wait_seconds, "wait_seconds")


class WeightsyncWeightTransferEngine(WeightTransferEngine[WeightsyncInitInfo, WeightsyncUpdateInfo]):
    """vLLM worker-side engine over a weightsync Subscriber (see the module docstring).

    Calls come from vLLM's worker thread, one at a time; not thread-safe. Order errors
    (an update outside start/finish, a second start) raise RuntimeError, as vLLM's own
    engines do; a failed ``update_weights`` ends the session (vLLM's worker then refuses
    ``finish_weight_update`` until the next ``start_weight_update``).
    """

    init_info_cls = WeightsyncInitInfo
    update_info_cls = WeightsyncUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self._receiver: Optional[StagingReceiver] = None
        self._info: Optional[WeightsyncInitInfo] = None
        self._active = False
        self._reloading = False   # vLLM's layerwise reload initialized for this session
        self.version = 0          # the version the model holds (0: none, or unknown after a failure)
        self.updates = 0

    # ---- init -------------------------------------------------------------------------

    def init_transfer_engine(self, init_info: WeightsyncInitInfo) -> None:
        """Connects to the publisher and allocates the staging buffer (pinned when the
        model is on CUDA). A second call replaces the connection."""
        pin = getattr(self.device, "type", None) == "cuda"
        receiver = StagingReceiver(init_info.address, secret=init_info.secret, transport=init_info.transport,
                                   pin_memory=pin)
        try:
            if init_info.mode == "in_place":
                receiver.check_in_place(self.model)
            elif not callable(getattr(self.model, "load_weights", None)):
                raise ValueError("checkpoint mode needs the model's load_weights(weights) method")
        except BaseException:
            receiver.close()
            raise
        self._close_receiver()
        self._receiver, self._info = receiver, init_info
        logger.info("weightsync engine: %s mode, %d tensors in %d layer groups, %d bytes per version, over %s",
                    init_info.mode, len(receiver.layout), len(receiver.groups), receiver.layout.payload_bytes,
                    receiver.subscriber.transport)

    # ---- one update ---------------------------------------------------------------------

    def start_weight_update(self) -> None:
        """Opens an update session. Nothing is touched yet: vLLM's layerwise reload is
        initialized only once a version is staged whole (receive_weights), so a failed
        pull leaves the model as it was."""
        self._require_init()
        if self._active:
            raise RuntimeError("A weightsync weight update is already active; call finish_weight_update first")
        self._active = True
        self._reloading = False

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        """vLLM's update_weights (parse, receive, synchronize); a failure ends the session."""
        try:
            super().update_weights(update_info)
        except BaseException:
            self._abort_session()
            raise

    def receive_weights(self, update_info: WeightsyncUpdateInfo) -> None:
        """Pulls the version whole into staging, then installs it (module docstring)."""
        if not self._active:
            raise RuntimeError("start_weight_update must be called before update_weights")
        receiver, info = self._receiver, self._info
        wait = info.wait_seconds if update_info.wait_seconds is None else update_info.wait_seconds
        staged = receiver.pull(update_info.version, wait)
        self.version = 0  # the model's weights change from here on
        if info.mode == "in_place":
            receiver.scatter(self.model)
        else:
            self._begin_reload()
            receiver.feed(self.model.load_weights)
        self.version = staged
        self.updates += 1

    def finish_weight_update(self) -> None:
        """Ends the session: finalizes vLLM's layerwise reload when it was initialized."""
        if not self._active:
            raise RuntimeError("finish_weight_update called without a matching start_weight_update")
        try:
            if self._reloading:
                _, finalize = _vllm_api.reload_hooks()
                if finalize is not None:
                    finalize(self.model, self.model_config)
        finally:
            self._active = False
            self._reloading = False

    # ---- end ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Ends a session left open and closes the connection; idempotent."""
        self._abort_session()
        self._close_receiver()

    @staticmethod
    def trainer_send_weights(iterator: Iterator[Any], trainer_args: Any) -> None:
        """Older vLLM's static trainer call: publishes ``iterator``'s (name, tensor) pairs as
        version ``trainer_args["version"]`` through ``trainer_args["publisher"]`` (a
        weightsync Publisher). Newer vLLM uses the trainer engine
        (:mod:`weightsync.vllm_trainer`) instead."""
        if not isinstance(trainer_args, dict) or "publisher" not in trainer_args or "version" not in trainer_args:
            raise ValueError("trainer_args must be a dict with 'publisher' (a weightsync Publisher) and 'version'")
        trainer_args["publisher"].publish(list(iterator), check_version(trainer_args["version"], "version"))

    # ---- internals -------------------------------------------------------------------------

    def _require_init(self) -> None:
        if self._receiver is None:
            raise RuntimeError("weightsync weight transfer not initialized: call init_transfer_engine() first")

    def _begin_reload(self) -> None:
        if self._reloading:
            return
        initialize, _ = _vllm_api.reload_hooks()
        if initialize is not None:
            initialize(self.model)
        self._reloading = True

    def _abort_session(self) -> None:
        if not self._active:
            return
        try:
            if self._reloading:
                _, finalize = _vllm_api.reload_hooks()
                if finalize is not None:
                    finalize(self.model, self.model_config)
        except Exception:
            logger.exception("weightsync engine: finalizing an aborted update failed")
        finally:
            self._active = False
            self._reloading = False

    def _close_receiver(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None


def describe() -> Dict[str, Any]:
    """Which base classes the engine was defined against: vLLM's, or the stand-ins."""
    return {"vllm": _vllm_api.VLLM, "stand_ins": list(_vllm_api.MISSING)}


__all__ = ["BACKEND", "WeightsyncInitInfo", "WeightsyncUpdateInfo", "WeightsyncWeightTransferEngine", "describe"]
