"""vLLM's weight-transfer contract, trainer side: ``WeightsyncTrainerEngine``.

vLLM's trainer side (``TrainerWeightTransferEngine``; the commit matched is named in
docs/python_engines.md) is built on every trainer rank with
``trainer_init(init_info, client=, source=)`` and replays its ``WeightSource`` each
round with ``send_weights()``. Here:

- ``trainer_init`` (rank 0, the sender): makes a weightsync Publisher whose layout is
  the source's ``metadata()`` in decoder-layer order (vLLM's ``layerwise_groups``
  partition, flattened), then calls ``client.init_weight_transfer_engine`` with the
  worker init info (the publisher's address; the secret only if
  ``forward_secret=True``). Other ranks make no publisher and touch no client.
- ``send_weights()``: every rank iterates the source group by group (``iter_groups()``;
  materializing is a collective on sharded trainers); the sender copies each tensor
  into a slot of the ring and commits it as the next version, then drives
  ``start_weight_update``, ``update_weights({"version": v})`` and
  ``finish_weight_update(weight_version=str(v))`` through the client. A tensor that
  does not match the metadata (name, dtype, shape, a name missing or repeated) raises
  before anything is committed: the workers never see that version.

``client`` is vLLM's ``VLLMWeightSyncClient`` (four methods; its HTTP and Ray clients,
or any object with them). :class:`FanOutClient` drives several replicas as one: it
reaches every replica at every step, then raises naming those that failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Sequence

from . import _vllm_api
from ._staging import check_version, check_wait
from ._vllm_api import TrainerInitInfo, TrainerWeightTransferEngine
from ._vllm_standin import layerwise_groups
from .layout import Layout
from .publisher import Publisher
from .vllm_backend import BACKEND, MODES

logger = logging.getLogger("weightsync.vllm")


@dataclass
class WeightsyncTrainerInitInfo(TrainerInitInfo):
    """Trainer-side init info. ``rank`` (keyword-only, from vLLM's base): this trainer
    process's rank; rank 0 publishes. ``bind`` / ``port``: where the publisher listens
    (default loopback, any port); ``advertise``: the address workers connect to (default
    the publisher's own). ``secret``: the publisher's (None: WEIGHTSYNC_SECRET);
    ``forward_secret``: also put it in the worker init info (it then crosses vLLM's
    control plane; off by default: workers read WEIGHTSYNC_SECRET). ``slots``: the
    ring's size. ``transport``, ``mode`` and ``wait_seconds``: passed to the workers."""

    backend: ClassVar[str] = BACKEND
    bind: str = "127.0.0.1"
    port: int = 0
    advertise: Optional[str] = None
    secret: Optional[str] = None
    forward_secret: bool = False
    slots: int = 3
    transport: Optional[str] = None
    mode: str = "checkpoint"
    wait_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0 to 65535, not {self.port!r}")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or not 2 <= self.slots <= 64:
            raise ValueError(f"slots must be 2 to 64, not {self.slots!r}")
        self.wait_seconds = check_wait(self.wait_seconds, "wait_seconds")


def _dtype_name(dtype: Any) -> str:
    name = str(dtype)
    return name[len("torch."):] if name.startswith("torch.") else name


def layer_ordered_layout(metadata: Sequence[Any]) -> Layout:
    """The Layout of a source's ``metadata()`` (ParamMeta: name, dtype, shape), its
    names in decoder-layer order (``layerwise_groups``, flattened). Duplicate names
    raise ValueError."""
    by_name: Dict[str, Any] = {}
    for meta in metadata:
        if meta.name in by_name:
            raise ValueError(f"the source's metadata() names '{meta.name}' twice")
        by_name[meta.name] = meta
    order = [name for group in layerwise_groups(list(by_name)) for name in group]
    return Layout([(n, _dtype_name(by_name[n].dtype), tuple(by_name[n].shape)) for n in order])


class WeightsyncTrainerEngine(TrainerWeightTransferEngine[WeightsyncTrainerInitInfo]):
    """Trainer-side engine over a weightsync Publisher (see the module docstring).

    One thread calls it. ``version``: the last version sent (0 before the first).
    ``shutdown()`` closes the publisher (workers' pulls then fail; they keep serving
    the version they hold).
    """

    init_info_cls = WeightsyncTrainerInitInfo

    def __init__(self, *, client: Any, source: Any, is_sender: bool = True,
                 publisher: Optional[Publisher] = None) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.publisher = publisher
        self.version = 0

    @classmethod
    def trainer_init(cls, init_info: WeightsyncTrainerInitInfo, *, client: Any, source: Any = None
                     ) -> "WeightsyncTrainerEngine":
        if source is None:
            raise ValueError("the weightsync trainer engine needs a WeightSource (it publishes whole versions)")
        if not init_info.is_sender:
            return cls(client=client, source=source, is_sender=False)
        layout = layer_ordered_layout(source.metadata())
        publisher = Publisher(layout, bind=init_info.bind, port=init_info.port, secret=init_info.secret,
                              slots=init_info.slots)
        try:
            worker_info: Dict[str, Any] = {"address": init_info.advertise or publisher.address,
                                           "mode": init_info.mode, "wait_seconds": init_info.wait_seconds}
            if init_info.transport is not None:
                worker_info["transport"] = init_info.transport
            if init_info.forward_secret and init_info.secret is not None:
                worker_info["secret"] = init_info.secret
            client.init_weight_transfer_engine(worker_info)
        except BaseException:
            publisher.close()
            raise
        logger.info("weightsync trainer engine: %d tensors, %d bytes per version, at %s", len(layout),
                    layout.payload_bytes, worker_info["address"])
        return cls(client=client, source=source, is_sender=True, publisher=publisher)

    def send_weights(self, version: Optional[int] = None) -> None:
        """Publishes the source as the next version (or ``version``, which must be newer
        than the last), then drives start / update / finish through the client. Raises
        what the client or the source raised; a version not committed is never sent."""
        version = check_version(version, "version") if version is not None else self.version + 1
        if version <= self.version:
            raise ValueError(f"version {version} is not newer than the last sent ({self.version})")
        if not self.is_sender:
            for _ in _batches(self.source):  # the collectives, in lockstep with the sender
                pass
            self.version = version
            return
        self._publish(version)
        self.client.start_weight_update()
        self.client.update_weights({"version": version})
        self.client.finish_weight_update(weight_version=str(version))
        self.version = version

    def _publish(self, version: int) -> None:
        import torch

        layout = self.publisher.layout
        seen = set()
        with self.publisher.writing(version) as slot:
            targets = slot.tensors()
            with torch.no_grad():
                for names, tensors in _batches(self.source):
                    for name, tensor in zip(names, tensors):
                        target = targets.get(name)
                        if target is None or name in seen:
                            raise ValueError(f"the source yielded '{name}', which metadata() does not name "
                                             "or which it yielded before")
                        if tensor is None or tensor.dtype != target.dtype or tuple(tensor.shape) != tuple(
                                target.shape):
                            raise ValueError(f"the source's '{name}' does not match its metadata() "
                                             f"({target.dtype} {tuple(target.shape)})")
                        target.copy_(tensor.detach())
                        seen.add(name)
            if len(seen) != len(layout):
                missing = [n for n in layout.names if n not in seen]
                raise ValueError(f"the source did not yield {len(missing)} of its metadata() names, "
                                 f"first '{missing[0]}'")

    def shutdown(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None


def _batches(source: Any):
    """The source's ``iter_groups()`` when it has one (vLLM's newer WeightSource), else
    its plain iteration one tensor at a time."""
    iter_groups = getattr(source, "iter_groups", None)
    if callable(iter_groups):
        yield from iter_groups()
        return
    for name, tensor in source:
        yield [name], [tensor]


class FanOutClient:
    """A VLLMWeightSyncClient over several replicas (each a VLLMWeightSyncClient).

    Every call goes to every replica still healthy in this round; a replica that raised
    is skipped for the rest of the round, and ``finish_weight_update`` (after finishing
    the healthy ones) raises RuntimeError naming each replica that failed and why. The
    next ``start_weight_update`` starts a new round with all replicas. So one broken
    replica never keeps the others from a version, and the trainer still learns of it.
    ``init_weight_transfer_engine`` raises at once after reaching every replica.
    """

    def __init__(self, clients: Sequence[Any]):
        if not clients:
            raise ValueError("FanOutClient needs at least one client")
        self.clients = list(clients)
        self._failed: Dict[int, str] = {}

    def _each(self, method: str, *args: Any, **kwargs: Any) -> None:
        for i, client in enumerate(self.clients):
            if i in self._failed:
                continue
            try:
                getattr(client, method)(*args, **kwargs)
            except Exception as e:  # reach the others first; raised at the end of the round
                self._failed[i] = f"{method}: {type(e).__name__}: {e}"

    def _raise_failures(self, what: str) -> None:
        if self._failed:
            failed, self._failed = self._failed, {}
            details = "; ".join(f"replica {i}: {why}" for i, why in sorted(failed.items()))
            raise RuntimeError(f"{what} failed on {len(failed)} of {len(self.clients)} replicas ({details})")

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        self._failed = {}
        self._each("init_weight_transfer_engine", init_info)
        self._raise_failures("init_weight_transfer_engine")

    def start_weight_update(self) -> None:
        self._failed = {}
        self._each("start_weight_update")

    def update_weights(self, update_info: Any) -> None:
        self._each("update_weights", update_info)

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        self._each("finish_weight_update", weight_version=weight_version)
        self._raise_failures("the weight update")


ModuleSource = _vllm_api.ModuleSource
WeightSource = _vllm_api.WeightSource
__all__: List[str] = ["WeightsyncTrainerInitInfo", "WeightsyncTrainerEngine", "FanOutClient",
                      "layer_ordered_layout", "ModuleSource", "WeightSource"]
