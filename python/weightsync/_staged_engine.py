"""The staged half of an EngineAdapter: a StagedUpdates and what an install does to the engine.

EngineAdapter (engine.py) keeps the engine's version, the locking and the
counters; a :class:`StagedPath` owns the :class:`~weightsync.StagedUpdates`
and knows, for the adapter's mode, how a staged version reaches the engine:

- direct + ``"copy"``: the live weights are the model's own parameters (kCopy
  scattered over their data_ptr, CPU or CUDA); install() copies into them and
  their addresses never move (CUDA graphs stay valid).
- direct + ``"swap"`` (host parameters): the library owns two buffers; after
  each install every parameter is re-pointed (``param.data = view``) at its
  typed view in the new live buffer, the views made once per buffer.
- load_weights (either value): kSwap over the whole layout; after each
  install the adapter calls the engine's load_weights with the views of the
  new live buffer.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import errors
from .staged import InstallResult, StagedUpdates
from .subscriber import Binding, Subscriber

OPTIONS = ("require_checksum", "deltas", "every_version", "poll", "retry_backoff", "lock_host")


def _bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, "invalid_argument", "fix_call")


def check_options(options: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """staged_options as StagedUpdates keywords; InvalidArgument for a name it does not take."""
    out = dict(options or {})
    unknown = sorted(set(out) - set(OPTIONS))
    if unknown:
        raise _bad(f"staged_options takes {', '.join(OPTIONS)}, not {', '.join(unknown)}")
    return out


class StagedPath:
    """One StagedUpdates for an EngineAdapter in ``mode`` ("direct" or "load_weights").

    ``guard``: direct mode, the parameters checked against the layout
    (Subscriber._guard(model)), with their ``device``. Takes ``subscriber``
    over (it is closed afterwards)."""

    def __init__(self, subscriber: Subscriber, mode: str, staged: str, model: Any, guard: Optional[Binding],
                 device: Optional[str], options: Dict[str, Any]):
        self.copy = mode == "direct" and staged == "copy"
        self._cuda: Any = None  # copy mode on CUDA: the parameters' torch.device
        self._guard: Optional[Binding] = None  # direct swap: the parameters, re-pointed at each install
        self._targets: List[Any] = []
        self._repoint_views: Dict[int, List[Any]] = {}
        self._load_views: Dict[int, List[Tuple[str, Any]]] = {}
        self._repointed = False
        if self.copy:
            context: Any = contextlib.nullcontext()
            if device == "cuda" and guard is not None and guard._tensors:
                import torch

                self._cuda = guard._tensors[0].device
                context = torch.cuda.device(self._cuda)  # the staging buffer goes on the parameters' GPU
            with context:
                self.updates = StagedUpdates(subscriber, mode="copy", live=model, **options)
            return
        if mode == "direct":
            if device != "cpu":
                raise _bad(f"staged='swap' in direct mode re-points the parameters at the library's host "
                           f"buffers, so it needs host parameters, and these are on {device}: use "
                           "staged='copy' (one device copy into the parameters, whose addresses never move)")
            self._guard = guard
            self._targets = list(guard._tensors) if guard is not None else []
        self.updates = StagedUpdates(subscriber, mode="swap", **options)

    # ---- an install, in steps the adapter times ---------------------------------------

    def install(self) -> Optional[InstallResult]:
        """Checks the parameters (StaleBinding: nothing touched) and installs the staged version, or None."""
        if self._guard is not None:
            self._guard._check()  # the parameters re-pointed last time (or bound at first) are still the model's
        if self._cuda is not None:
            import torch

            torch.cuda.synchronize(self._cuda)  # the engine's kernels reading the parameters are done
        return self.updates.install()

    def apply(self) -> None:
        """After an install in direct mode: re-point the parameters (swap), or wait for the device copy."""
        if self._guard is not None:
            index = self.updates.live_index
            views = self._repoint_views.get(index)
            if views is None:
                tensors = self.updates.tensors(index)
                views = self._repoint_views[index] = [tensors[name] for name in self._guard._names]
            for tensor, view in zip(self._targets, views):
                tensor.data = view
            self._guard._repointed()
            self._repointed = True
        elif self._cuda is not None:
            import torch

            torch.cuda.synchronize(self._cuda)  # the copy is done before the next step reads the parameters

    def live_weights(self) -> List[Tuple[str, Any]]:
        """load_weights mode: (name, typed view) of every tensor in the live buffer, in layout order."""
        index = self.updates.live_index
        pairs = self._load_views.get(index)
        if pairs is None:
            tensors = self.updates.tensors(index)
            pairs = self._load_views[index] = list(tensors.items())
        return pairs

    def close(self) -> None:
        """Direct swap: gives every re-pointed parameter its own copy of the live weights (the
        library's buffers go); then stops the background pull and frees the buffers."""
        if self._repointed:
            seen = set()
            for tensor in self._targets:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    tensor.data = tensor.data.clone()
        self._targets = []
        self._guard = None
        self._repoint_views = {}
        self._load_views = {}
        self.updates.close()
