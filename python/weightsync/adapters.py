"""AdapterPublisher: LoRA adapters as their own versions, many behind one address."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from . import _weightsync
from .layout import Layout
from .publisher import Publisher


def _layout_of(layout_or_state_dict: Any) -> Layout:
    if isinstance(layout_or_state_dict, Layout):
        return layout_or_state_dict
    return Layout.from_state_dict(layout_or_state_dict)


class AdapterPublisher:
    """Serves named LoRA adapters, each with its own layout and version stream,
    beside an optional base model, on one address (RL with LoRA syncs only the
    adapters: a few MiB every step, often several live at once).

    ::

        with weightsync.AdapterPublisher(bind="0.0.0.0", secret=secret) as ap:
            math = ap.add_adapter("math", lora_state_dict(model, "math"))
            for step in range(1, steps + 1):
                train_step()
                math.publish(lora_state_dict(model, "math"), version=step)

        # an engine serving that adapter
        sub = weightsync.Subscriber(ap.address, secret=secret, adapter="math")

    ``add_adapter`` returns a :class:`Publisher` for that adapter alone: its
    own ring of ``slots`` slots, never torn, never waiting for readers or for
    another adapter. A subscriber names the adapter it serves and sees nothing
    else; naming none gets the base model (``base``: a Layout or state dict;
    without one such a subscriber is refused). Adapters are made only here,
    never by a peer: at most ``max_adapters``, each at most
    ``max_adapter_bytes``; a name is 1-64 characters of ``[A-Za-z0-9._-]``.

    ``remove_adapter(name)`` stops serving it at once (its subscribers' next
    calls fail with ConnectionLost) and closes the Publisher handed out for
    it; ``close()`` does that for every adapter and the base model. Closing an
    adapter's Publisher yourself only drops that handle: the adapter is served
    until ``remove_adapter``. The other options are those of
    :class:`Publisher`; None takes the WEIGHTSYNC_* environment variable or
    the default.

    Thread-safety: every method may be called from any thread; each
    adapter's publishes are serialised, different adapters' run in parallel.
    """

    def __init__(self, base: Any = None, *, bind: Optional[str] = None, port: int = 0,
                 secret: Optional[str] = None, slots: int = 3, checksum: Optional[bool] = None,
                 skip_when_full: bool = False, io_timeout_ms: Optional[int] = None,
                 lease_timeout_ms: Optional[int] = None, idle_timeout_ms: Optional[int] = None,
                 max_connections: int = 256, max_adapters: int = 64, max_adapter_bytes: int = 1 << 30):
        self._base_layout = None if base is None else _layout_of(base)
        self._layouts: Dict[str, Layout] = {}
        self._core = _weightsync._AdapterPublisher(
            None if self._base_layout is None else self._base_layout._core, bind=bind, port=port,
            secret=secret, slots=slots, checksum=checksum, skip_when_full=skip_when_full,
            io_timeout_ms=io_timeout_ms, lease_timeout_ms=lease_timeout_ms, idle_timeout_ms=idle_timeout_ms,
            max_connections=max_connections, max_adapters=max_adapters, max_adapter_bytes=max_adapter_bytes)

    @property
    def address(self) -> str:
        """"host:port" for Subscriber(address, adapter=name)."""
        return self._core.address

    @property
    def port(self) -> int:
        return self._core.port

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def base(self) -> Optional[Publisher]:
        """The base model's Publisher; None without one."""
        core = self._core.base()
        return None if core is None else Publisher._from_core(core, self._base_layout)

    def add_adapter(self, name: str, layout: Any) -> Publisher:
        """Serves a new adapter (``layout``: a Layout or a state dict of its tensors), empty until its first
        publish; returns its Publisher. A name in use or invalid, or a layout over ``max_adapter_bytes``:
        InvalidArgument; past ``max_adapters``: Busy."""
        layout = _layout_of(layout)
        core = self._core.add_adapter(name, layout._core)
        self._layouts[name] = layout
        return Publisher._from_core(core, layout)

    def adapter(self, name: str) -> Optional[Publisher]:
        """The Publisher of adapter ``name``; None when none has that name."""
        core = self._core.adapter(name)
        return None if core is None else Publisher._from_core(core, self._layouts[name])

    def adapter_names(self) -> List[str]:
        """The adapters served, sorted."""
        return self._core.adapter_names()

    def remove_adapter(self, name: str) -> None:
        """Stops serving ``name`` and closes its Publisher (InvalidArgument if there is none)."""
        self._core.remove_adapter(name)
        self._layouts.pop(name, None)

    def close(self) -> None:
        """Stops serving every adapter and the base model; their Publishers are closed."""
        self._core.close()

    def __enter__(self) -> "AdapterPublisher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "AdapterPublisher(closed)"
        return f"AdapterPublisher({self.address}, adapters {self.adapter_names()})"
