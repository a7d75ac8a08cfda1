"""Layout: the named tensors of one model version, packed into one region."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _weightsync, errors
from ._tensors import TensorRef, describe, named_tensors

DEFAULT_ALIGNMENT = 256


class TensorInfo(NamedTuple):
    """One tensor of a Layout: where its bytes sit in every slot."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    nbytes: int


def _bad(message: str) -> errors.InvalidArgument:
    return errors.InvalidArgument(message, "invalid_argument", "fix_call")


class Layout:
    """An immutable list of (name, dtype, shape), each placed at an aligned offset.

    Build it from what the trainer publishes::

        layout = weightsync.Layout.from_state_dict(model.state_dict())

    The order is the state_dict's; every publisher and subscriber of one model
    must agree on it (a subscriber learns it from the publisher). ``alignment``
    (a power of two, default 256) places each tensor; use the element size
    (e.g. 4) for a layout that is one packed buffer.
    """

    __slots__ = ("_core", "_tensors", "_index")

    def __init__(self, tensors: Iterable[Union[Tuple[str, str, Sequence[int]], TensorInfo]],
                 alignment: int = DEFAULT_ALIGNMENT):
        specs = [(t[0], t[1], [int(d) for d in t[2]]) for t in tensors]
        self._init(_weightsync._Layout(specs, alignment))

    def _init(self, core: "_weightsync._Layout") -> None:
        self._core = core
        self._tensors = tuple(TensorInfo(n, d, tuple(s), o, b) for (n, d, s, o, b) in core.entries)
        self._index = {t.name: i for i, t in enumerate(self._tensors)}

    @classmethod
    def _from_core(cls, core: "_weightsync._Layout") -> "Layout":
        layout = cls.__new__(cls)
        layout._init(core)
        return layout

    @classmethod
    def from_state_dict(cls, state_dict: Any, alignment: int = DEFAULT_ALIGNMENT) -> "Layout":
        """The layout of a state_dict (or an nn.Module's, or (name, tensor) pairs), in its order."""
        refs = [describe(name, t) for name, t in named_tensors(state_dict)]
        if not refs:
            raise _bad("the state_dict is empty: nothing to publish")
        return cls(((r.name, r.dtype, r.shape) for r in refs), alignment)

    from_named_tensors = from_state_dict

    @property
    def tensors(self) -> Tuple[TensorInfo, ...]:
        return self._tensors

    @property
    def names(self) -> List[str]:
        return [t.name for t in self._tensors]

    @property
    def total_bytes(self) -> int:
        """Bytes per slot: the end of the last tensor, rounded up to the alignment."""
        return self._core.total_bytes

    @property
    def payload_bytes(self) -> int:
        """Sum of the tensors' bytes (no padding)."""
        return self._core.payload_bytes

    @property
    def alignment(self) -> int:
        return self._core.alignment

    def __len__(self) -> int:
        return len(self._tensors)

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __getitem__(self, name: str) -> TensorInfo:
        try:
            return self._tensors[self._index[name]]
        except KeyError:
            raise KeyError(f"no tensor named '{name}' in this layout") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Layout) and self._core == other._core

    def __hash__(self) -> int:
        return hash((self._tensors, self.alignment))

    def __repr__(self) -> str:
        return (f"Layout({len(self)} tensors, {self.payload_bytes} bytes, "
                f"alignment {self.alignment})")

    def match(self, state_dict: Any, *, ordered: bool = True, allow_extra: bool = False,
              devices: Optional[Sequence[str]] = None) -> List[TensorRef]:
        """The tensors of ``state_dict`` that fill this layout, in layout order.

        Checks that every tensor of the layout is there once, with its dtype,
        shape and contiguous memory; ``ordered``: in the same order (what
        publish needs to catch a model that changed); ``allow_extra``: names
        the layout does not have are ignored (a module's buffers, say).
        Raises InvalidArgument (a ValueError) naming the first difference.
        """
        refs: Dict[str, TensorRef] = {}
        order: List[str] = []
        for name, tensor in named_tensors(state_dict):
            if name in refs:
                raise _bad(f"'{name}' appears twice")
            if name not in self._index:
                if allow_extra:
                    continue
                raise _bad(f"'{name}' is not in the layout ({len(self)} tensors: "
                           f"{', '.join(self.names[:4])}{', ...' if len(self) > 4 else ''})")
            refs[name] = describe(name, tensor)
            order.append(name)
        missing = [t.name for t in self._tensors if t.name not in refs]
        if missing:
            raise _bad(f"{len(missing)} tensor(s) of the layout are missing: "
                       f"{', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}")
        if ordered and order != self.names:
            first = next(i for i, (a, b) in enumerate(zip(order, self.names)) if a != b)
            raise _bad(f"tensor {first} is '{order[first]}' but the layout has '{self.names[first]}' there: "
                       "the order changed (build the layout from this state_dict)")
        out = []
        for info in self._tensors:
            ref = refs[info.name]
            if ref.dtype != info.dtype:
                raise _bad(f"'{info.name}' is {ref.dtype}, the layout says {info.dtype}")
            if ref.shape != info.shape:
                raise _bad(f"'{info.name}' has shape {list(ref.shape)}, the layout says {list(info.shape)}")
            if not ref.contiguous:
                raise _bad(f"'{info.name}' is not contiguous: weightsync reads and writes tensors in place "
                           "(use .contiguous() for a copy, or fix the view)")
            if devices is not None and ref.device not in devices:
                raise _bad(f"'{info.name}' is on {ref.device}; weightsync handles {' and '.join(devices)}")
            out.append(ref)
        return out
