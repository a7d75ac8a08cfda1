"""Stand-ins for vLLM's weight-transfer base classes, used when vLLM is not installed.

vLLM defines the contract in ``vllm/distributed/weight_transfer/base.py`` (moved to
``vllm/backends/distributed/weight_transfer/base.py`` later, the old path kept as an
alias). When vLLM can be imported, :mod:`weightsync._vllm_api` takes its classes and
this module is not used. Without vLLM, weightsync's backend is defined against these
classes instead, so that ``import weightsync.vllm_backend`` works and the backend can be
exercised by a harness that makes vLLM's calls in vLLM's order.

Each class here has the method names, signatures and the behaviour the engines rely on
of the vLLM commit matched (a8f1d79812aa51e1036eba41286879eb09bd1635 for base.py; see
docs/python_engines.md): ``parse_init_info`` / ``parse_update_info`` turn a dict into
the typed dataclass and raise ValueError for unknown or missing keys;
``update_weights(dict)`` parses, calls ``receive_weights`` and synchronizes the device;
``WeightSource`` has ``metadata()``, ``__iter__``, ``held_names()``, ``groups()`` and
``iter_groups()``, the last two over the per-decoder-layer partition
(:func:`layerwise_groups`). This is weightsync's own code written to that contract, not
a copy of vLLM's. Thread-safety: none of these classes is thread-safe; vLLM calls an
engine from one worker thread.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Collection, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar

TInitInfo = TypeVar("TInitInfo")
TUpdateInfo = TypeVar("TUpdateInfo")
TTrainerInitInfo = TypeVar("TTrainerInitInfo")


def _stack_key(name: str) -> Optional[Tuple[str, int]]:
    """(prefix, index) of the first all-digit dotted segment of ``name``, or None."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i]), int(part)
    return None


def layerwise_groups(names: List[str]) -> List[List[str]]:
    """Partitions parameter names into one group per decoder layer, as vLLM's
    ``layerwise_groups``: keyed on the outermost integer segment (``model.layers.3.``
    groups with every name of layer 3, experts included); names without an index go
    to a leading group (those before the first indexed name: embeddings) or a trailing
    one (those after: final norm, lm_head). Stacks come out in the order their prefix
    first appears, ascending index within a prefix."""
    pre: List[str] = []
    post: List[str] = []
    stacks: Dict[Tuple[str, int], List[str]] = {}
    for name in names:
        key = _stack_key(name)
        if key is None:
            (post if stacks else pre).append(name)
        else:
            stacks.setdefault(key, []).append(name)
    prefix_rank: Dict[str, int] = {}
    for prefix, _ in stacks:
        prefix_rank.setdefault(prefix, len(prefix_rank))
    ordered = sorted(stacks, key=lambda k: (prefix_rank[k[0]], k[1]))
    groups = [pre] if pre else []
    groups.extend(stacks[k] for k in ordered)
    if post:
        groups.append(post)
    return groups


@dataclass(frozen=True)
class ParamMeta:
    """Name, wire dtype (a torch.dtype) and full shape of one parameter."""

    name: str
    dtype: Any
    shape: Tuple[int, ...]


class WeightSource(abc.ABC):
    """The trainer's weights: ``metadata()`` describes them without transferring,
    iteration yields ``(name, tensor)`` in metadata order (a fresh pass each time)."""

    @abc.abstractmethod
    def metadata(self) -> List[ParamMeta]:
        raise NotImplementedError

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        raise NotImplementedError

    def held_names(self) -> Optional[Collection[str]]:
        """The names this rank holds, or None for all."""
        return None

    def groups(self) -> List[List[str]]:
        """The per-layer groups of ``metadata()`` that hold a name this rank holds."""
        groups = layerwise_groups([m.name for m in self.metadata()])
        held = self.held_names()
        if held is None:
            return groups
        held = set(held)
        return [g for g in groups if any(n in held for n in g)]

    def iter_groups(self) -> Iterator[Tuple[List[str], List[Any]]]:
        """One ``(names, tensors)`` batch per group of ``groups()``; raises RuntimeError
        when iteration does not follow metadata order."""
        it = iter(self)
        for group in self.groups():
            names: List[str] = []
            tensors: List[Any] = []
            for expected in group:
                try:
                    name, tensor = next(it)
                except StopIteration:
                    raise RuntimeError(f"WeightSource ended before {expected!r} (metadata() names it)") from None
                if name != expected:
                    raise RuntimeError(f"WeightSource yielded {name!r} where metadata() order has {expected!r}")
                names.append(name)
                tensors.append(tensor)
            yield names, tensors


class ModuleSource(WeightSource):
    """A WeightSource over ``module.named_parameters()`` (``full_tensor()`` for DTensors)."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def metadata(self) -> List[ParamMeta]:
        return [ParamMeta(n, p.dtype, tuple(p.shape)) for n, p in self._module.named_parameters()]

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        for name, param in self._module.named_parameters():
            full = getattr(param, "full_tensor", None)
            yield name, full() if callable(full) else param


@dataclass
class WeightTransferInitInfo:
    """Base of a backend's worker-side init info."""


@dataclass
class WeightTransferUpdateInfo:
    """Base of a backend's per-update info."""


@dataclass
class TrainerInitInfo:
    """Base of a backend's trainer-side init info: ``rank`` (keyword-only; rank 0 sends)
    and a class-level ``backend`` name (the factory key)."""

    backend: ClassVar[str]
    rank: int = field(kw_only=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not getattr(cls, "backend", None):
            raise TypeError(f"{cls.__name__} must set a class-level `backend` string")

    @property
    def is_sender(self) -> bool:
        return self.rank == 0


def _parse(cls: type, what: str, owner: str, values: Dict[str, Any]) -> Any:
    if not isinstance(values, dict):
        raise ValueError(f"Invalid {what} for {owner}: expected a dict, got {type(values).__name__}")
    try:
        return cls(**values)
    except TypeError as e:
        raise ValueError(f"Invalid {what} for {owner}: {e}") from e


class WeightTransferEngine(abc.ABC, Generic[TInitInfo, TUpdateInfo]):
    """Worker side: built with (config, vllm_config, device, model); vLLM then calls
    ``init_transfer_engine`` once, and per update ``start_weight_update``,
    ``update_weights`` (one or more), ``finish_weight_update``; ``shutdown`` at the end."""

    init_info_cls: type
    update_info_cls: type
    supports_draft_weight_update: bool = True
    defers_processing: bool = False

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        self.config = config
        self.vllm_config = vllm_config
        self.parallel_config = getattr(vllm_config, "parallel_config", None)
        self.model_config = getattr(vllm_config, "model_config", None)
        self.device = device
        self.model = model
        self._default_model = model
        self._default_model_config = self.model_config

    def set_weight_update_target(self, model: Any, model_config: Any) -> None:
        self.model = model
        self.model_config = model_config

    def reset_weight_update_target(self) -> None:
        self.model = self._default_model
        self.model_config = self._default_model_config

    def drain_pending(self) -> None:
        """Nothing deferred by default."""

    def parse_init_info(self, init_dict: Dict[str, Any]) -> Any:
        return _parse(self.init_info_cls, "init_info", type(self).__name__, init_dict)

    def parse_update_info(self, update_dict: Dict[str, Any]) -> Any:
        return _parse(self.update_info_cls, "update_info", type(self).__name__, update_dict)

    @abc.abstractmethod
    def init_transfer_engine(self, init_info: Any) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def start_weight_update(self) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def finish_weight_update(self) -> None:
        raise NotImplementedError

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        self.receive_weights(self.parse_update_info(update_info))
        _synchronize()

    @abc.abstractmethod
    def receive_weights(self, update_info: Any) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def shutdown(self) -> None:
        raise NotImplementedError


class TrainerWeightTransferEngine(abc.ABC, Generic[TTrainerInitInfo]):
    """Trainer side: ``trainer_init(init_info, client=, source=)`` on every trainer rank,
    then ``send_weights()`` per round (start, update(s), finish through ``client``)."""

    init_info_cls: type

    def __init__(self, *, client: Any, source: Optional[WeightSource] = None, is_sender: bool = True) -> None:
        self.is_sender = is_sender
        self.client = client
        self.source = source

    @classmethod
    @abc.abstractmethod
    def trainer_init(cls, init_info: Any, *, client: Any, source: Optional[WeightSource] = None) -> Any:
        raise NotImplementedError

    @abc.abstractmethod
    def send_weights(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        """Default: nothing to tear down."""


def _synchronize() -> None:
    """torch.accelerator.synchronize() where torch has it and a device is present."""
    try:
        import torch
    except ImportError:
        return
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        accelerator.synchronize()
    elif torch.cuda.is_available():
        torch.cuda.synchronize()

