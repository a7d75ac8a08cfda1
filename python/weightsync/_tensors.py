"""What weightsync needs to know about a tensor, without linking libtorch.

A tensor is anything with torch's interface (``data_ptr()``, ``dtype``,
``shape``, ``element_size()``, ``numel()``, ``is_contiguous()``, ``device``),
so any torch version works, or a NumPy array (host memory). weightsync reads
and writes the tensor's memory through its address; it never copies through
Python.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, Mapping, NamedTuple, Tuple

from . import errors


class TensorRef(NamedTuple):
    """One tensor as weightsync sees it."""

    name: str
    dtype: str            # torch's name: "float32", "bfloat16", ...
    shape: Tuple[int, ...]
    address: int          # data_ptr()
    nbytes: int
    device: str           # "cpu" or "cuda"
    contiguous: bool


def _numpy_dtype_name(dtype: Any) -> str:
    name = str(dtype)
    return {"bool": "bool", "float32": "float32", "float16": "float16", "float64": "float64",
            "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32",
            "int64": "int64"}.get(name, name)


def describe(name: str, tensor: Any) -> TensorRef:
    """A TensorRef for a torch tensor (or anything shaped like one) or a NumPy array."""
    if hasattr(tensor, "data_ptr"):
        dtype = str(tensor.dtype)
        if dtype.startswith("torch."):
            dtype = dtype[len("torch."):]
        device = getattr(tensor.device, "type", str(tensor.device))
        return TensorRef(name, dtype, tuple(int(d) for d in tensor.shape), int(tensor.data_ptr()),
                         int(tensor.numel()) * int(tensor.element_size()), device,
                         bool(tensor.is_contiguous()))
    if hasattr(tensor, "__array_interface__"):
        address = tensor.__array_interface__["data"][0]
        return TensorRef(name, _numpy_dtype_name(tensor.dtype), tuple(int(d) for d in tensor.shape),
                         int(address), int(tensor.nbytes), "cpu", bool(tensor.flags["C_CONTIGUOUS"]))
    raise errors.InvalidArgument(
        f"'{name}' is a {type(tensor).__name__}, not a tensor: pass torch tensors (or NumPy arrays)",
        "invalid_argument", "fix_call")


def named_tensors(source: Any) -> Iterator[Tuple[str, Any]]:
    """(name, tensor) pairs from a state_dict, an nn.Module, or an iterable of pairs."""
    if hasattr(source, "state_dict") and callable(source.state_dict) and not isinstance(source, Mapping):
        # An nn.Module: its own parameters and buffers, by their state_dict names
        # (keep_vars: the Parameters themselves, same memory, no detach).
        yield from source.state_dict(keep_vars=True).items()
        return
    if isinstance(source, Mapping):
        yield from source.items()
        return
    if isinstance(source, Iterable):
        for item in source:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise errors.InvalidArgument(
                    "expected (name, tensor) pairs, a state_dict or an nn.Module",
                    "invalid_argument", "fix_call")
            yield item
        return
    raise errors.InvalidArgument(
        f"a {type(source).__name__} is not a state_dict, an nn.Module or (name, tensor) pairs",
        "invalid_argument", "fix_call")


def layout_views(layout: Any, base: Any) -> Dict[str, Any]:
    """{name: tensor} in layout order: a typed torch view of each tensor of ``layout``
    inside ``base``, a uint8 torch tensor of at least ``layout.total_bytes`` (a packed
    buffer: what a pull writes). Raises InvalidArgument for a dtype this torch lacks."""
    import torch

    views: Dict[str, Any] = {}
    for info in layout:
        dtype = getattr(torch, info.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise errors.InvalidArgument(
                f"'{info.name}' is {info.dtype}, which this torch ({torch.__version__}) does not have",
                "invalid_argument", "fix_call")
        views[info.name] = base[info.offset:info.offset + info.nbytes].view(dtype).view(info.shape)
    return views
