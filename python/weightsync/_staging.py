"""StagingReceiver: pull one whole version into a host staging buffer, then install it.

Shared by the vLLM backend (:mod:`weightsync.vllm_backend`) and the SGLang loader
(:mod:`weightsync.sglang_loader`). The engine's weights are never written by the
network: a pull goes into one packed host buffer (a uint8 tensor of the layout's
``total_bytes``, allocated and bound once), and only a pull that completed (the library
verified the whole version) is installed, either

- by the engine's ``load_weights`` fed one decoder layer per call, in the
  checkpoint's names (:meth:`StagingReceiver.feed`), or
- by copying each tensor into the engine's parameter of the same name, dtype and shape
  (:meth:`StagingReceiver.scatter`; the parameters keep their addresses, so CUDA graphs
  captured on them stay valid).

So a failed pull (publisher gone, wrong secret, version revoked, timeout) raises and
leaves the engine's weights as they were. The tensors given to ``load_weights`` are
views into the buffer, valid during the call only: the loader copies them (vLLM's and
SGLang's weight loaders do).

Ownership: the receiver owns its Subscriber and buffer; :meth:`close` releases both.
Thread-safety: none; one caller at a time (vLLM and SGLang call from one thread).
Errors: pulls raise weightsync's errors (:mod:`weightsync.errors`); a layout that does
not fit the engine's parameters raises InvalidArgument naming the first mismatch.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import errors
from ._tensors import layout_views
from ._vllm_standin import layerwise_groups
from .subscriber import Subscriber

MAX_WAIT_SECONDS = 3600.0


def _bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, "invalid_argument", "fix_call")


def check_wait(value: Any, what: str) -> float:
    """``value`` as seconds to wait: a finite number in [0, 3600] (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or not 0.0 <= value <= MAX_WAIT_SECONDS:
        raise ValueError(f"{what} must be between 0 and {MAX_WAIT_SECONDS:g} seconds, not {value}")
    return value


def check_version(value: Any, what: str) -> Optional[int]:
    """``value`` as a version: None, or an int in [1, 2**63 - 1] (bools refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer version, not {type(value).__name__}")
    if not 1 <= value < 2 ** 63:
        raise ValueError(f"{what} must be between 1 and 2**63 - 1, not {value}")
    return value


class StagingReceiver:
    """A Subscriber with one bound host staging buffer and the layout's per-layer groups.

    ``address``: the publisher's "host:port" or a list (a trainer and its relays);
    ``secret``: None takes WEIGHTSYNC_SECRET (the library reads it); ``transport``:
    None negotiates. ``pin_memory``: pinned staging (faster copies to a GPU; needs CUDA).
    """

    def __init__(self, address: Union[str, Sequence[str]], *, secret: Optional[str] = None,
                 transport: Optional[str] = None, pin_memory: bool = False):
        import torch

        self.subscriber = Subscriber(address, secret=secret, transport=transport, name="engine-staging")
        try:
            layout = self.subscriber.layout
            self.buffer = torch.empty(layout.total_bytes, dtype=torch.uint8, pin_memory=pin_memory)
            self._binding = self.subscriber.bind(self.buffer)
            views = layout_views(layout, self.buffer)
        except BaseException:
            self.subscriber.close()
            raise
        self.views = views
        self.groups: List[List[Tuple[str, Any]]] = [
            [(name, views[name]) for name in group] for group in layerwise_groups(layout.names)]
        self.staged_version = 0  # the version the buffer holds whole; 0: none, or undefined bytes

    @property
    def layout(self):
        return self.subscriber.layout

    def pull(self, version: Optional[int], wait: float) -> int:
        """Pulls ``version`` (None: the newest published) into the staging buffer, waiting
        up to ``wait`` seconds for it; returns the version staged. Raises NotReady when it
        does not come, and the library's error when the pull fails (the buffer is then
        undefined and :attr:`staged_version` 0; the engine is untouched)."""
        self.staged_version = 0
        newer_than = 0 if version is None else None
        result = self.subscriber.pull(self._binding, wait=wait, newer_than=newer_than, version=version)
        if result is None:
            raise errors.NotReady(f"no version was published within {wait:g} s", "not_ready", "retry")
        self.staged_version = int(result.version)
        return self.staged_version

    def feed(self, load_weights: Callable[[List[Tuple[str, Any]]], Any]) -> int:
        """Calls ``load_weights(list of (name, tensor))`` once per decoder layer, in layer
        order, with views of the staged version; returns how many tensors were given."""
        self._require_staged()
        given = 0
        for group in self.groups:
            load_weights(list(group))
            given += len(group)
        return given

    def check_in_place(self, model: Any) -> None:
        """Raises InvalidArgument unless every staged tensor has a parameter or buffer of
        ``model`` with its name, dtype and shape (extra model tensors are fine)."""
        self._targets(model)

    def scatter(self, model: Any) -> int:
        """Copies every staged tensor into ``model``'s tensor of the same name (in place:
        addresses kept); returns how many were copied."""
        self._require_staged()
        import torch

        targets = self._targets(model)
        with torch.no_grad():
            for name, view in self.views.items():
                targets[name].copy_(view)
        return len(targets)

    def _targets(self, model: Any) -> Dict[str, Any]:
        tensors = model.state_dict(keep_vars=True)
        out = {}
        for name, view in self.views.items():
            t = tensors.get(name)
            if t is None:
                raise _bad(f"in-place update: the model has no parameter or buffer '{name}' (the publisher's "
                           "names must be the engine's own; use checkpoint mode for the checkpoint's names)")
            if t.dtype != view.dtype or tuple(t.shape) != tuple(view.shape):
                raise _bad(f"in-place update: '{name}' is {t.dtype} {tuple(t.shape)} in the model but "
                           f"{view.dtype} {tuple(view.shape)} in the publisher's layout")
            out[name] = t.data if hasattr(t, "data") else t
        return out

    def _require_staged(self) -> None:
        if self.staged_version == 0:
            raise _bad("no whole version is staged (the last pull failed or none was made)")

    def close(self) -> None:
        self.staged_version = 0
        self.views = {}
        self.groups = []
        self.subscriber.close()
        self.buffer = None
