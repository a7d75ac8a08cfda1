"""SGLang's ``update_weights_from_tensor`` path: a custom weight loader over weightsync.

SGLang (the commit read is named in docs/python_engines.md) lets a server name import
paths with ``--custom-weight-loader``; ``update_weights_from_tensor(named_tensors,
load_format="weightsync.sglang_loader.load")`` then calls, in every tensor-parallel
scheduler process, ``load(self.model, named_tensors)``, and on success sets the
server's ``weight_version`` to the request's ``weight_version``. The trainer's tensors
never travel through SGLang: the request carries only a tiny instruction, made by
:func:`request` on the driver::

    engine.update_weights_from_tensor(                      # or POST /update_weights_from_tensor
        named_tensors=weightsync.sglang_loader.request(address, version=v),
        load_format="weightsync.sglang_loader.load")        # HTTP: also "weight_version": str(v)

:func:`load` connects once per model (a Subscriber and a host staging buffer), pulls
exactly version ``v`` (or the newest, without one) whole into staging, then feeds
``model.load_weights`` one decoder layer per call (``in_place=True``: copies into the
parameters of the same names) and returns the version installed. So the
``weight_version`` the driver sets names the version the model holds. A failed pull
raises (SGLang reports ``success=False`` and keeps its old ``weight_version``) and the
model keeps its weights. The secret: ``request(secret=...)`` or WEIGHTSYNC_SECRET in
the scheduler's environment (recommended: the request then carries none).

The instruction is checked as input from a peer: only the names below, each a 1-D
tensor of the expected dtype and bounded size, else ValueError. Thread-safety: SGLang
calls a loader from the scheduler thread; one call at a time per process.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ._staging import StagingReceiver, check_version, check_wait

ADDRESS = "weightsync.address"      # uint8: the publisher's address, UTF-8 (addresses joined by ",")
VERSION = "weightsync.version"      # int64, one element: the version to install
WAIT = "weightsync.wait_ms"         # int64, one element: how long to wait for it
SECRET = "weightsync.secret"        # uint8: the shared secret, UTF-8 (prefer WEIGHTSYNC_SECRET)
IN_PLACE = "weightsync.in_place"    # uint8, one element: 1 copies into same-named parameters
MAX_TEXT_BYTES = 4096
DEFAULT_WAIT_SECONDS = 30.0

_receivers: "weakref.WeakKeyDictionary[Any, Tuple[str, Optional[str], StagingReceiver]]" = \
    weakref.WeakKeyDictionary()


def _text(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    data = value.encode()
    if len(data) > MAX_TEXT_BYTES:
        raise ValueError(f"{what} is over {MAX_TEXT_BYTES} bytes")
    return data


def request(address: Union[str, Sequence[str]], version: Optional[int] = None, *,
            wait: float = DEFAULT_WAIT_SECONDS, secret: Optional[str] = None,
            in_place: bool = False) -> List[Tuple[str, Any]]:
    """The ``named_tensors`` of an update_weights_from_tensor call that makes :func:`load`
    install ``version`` (None: the newest) from the publisher at ``address`` (or the
    first of a list that connects: a trainer and its relays). ValueError on bad input."""
    import torch

    if not isinstance(address, str):
        if not isinstance(address, (list, tuple)) or not all(isinstance(a, str) and a for a in address):
            raise ValueError("address must be 'host:port' or a list of them")
        address = ",".join(address)
    check_version(version, "version")
    wait = check_wait(wait, "wait")
    out = [(ADDRESS, torch.tensor(list(_text(address, "address")), dtype=torch.uint8)),
           (WAIT, torch.tensor([int(wait * 1000)], dtype=torch.int64))]
    if version is not None:
        out.append((VERSION, torch.tensor([version], dtype=torch.int64)))
    if secret is not None:
        out.append((SECRET, torch.tensor(list(_text(secret, "secret")), dtype=torch.uint8)))
    if in_place:
        out.append((IN_PLACE, torch.tensor([1], dtype=torch.uint8)))
    return out


def _parse(named_tensors: Sequence[Tuple[str, Any]]) -> Dict[str, Any]:
    import torch

    expect = {ADDRESS: (torch.uint8, MAX_TEXT_BYTES), SECRET: (torch.uint8, MAX_TEXT_BYTES),
              VERSION: (torch.int64, 1), WAIT: (torch.int64, 1), IN_PLACE: (torch.uint8, 1)}
    found: Dict[str, Any] = {}
    for item in named_tensors:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError("weightsync loader: named_tensors must be (name, tensor) pairs")
        name, tensor = item
        if name not in expect:
            raise ValueError(f"weightsync loader: unexpected tensor name {name!r} (use weightsync.sglang_loader."
                             "request() to make the call's named_tensors)")
        if name in found:
            raise ValueError(f"weightsync loader: {name} given twice")
        dtype, limit = expect[name]
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tensor.dim() != 1 \
                or not 0 < tensor.numel() <= limit or (limit == 1 and tensor.numel() != 1):
            raise ValueError(f"weightsync loader: {name} must be a 1-D {dtype} tensor of "
                             f"{'one element' if limit == 1 else f'1 to {limit} elements'}")
        found[name] = tensor.detach().cpu()
    if ADDRESS not in found:
        raise ValueError(f"weightsync loader: {ADDRESS} is missing (make the call with sglang_loader.request())")
    out: Dict[str, Any] = {}
    for key, name in (("address", ADDRESS), ("secret", SECRET)):
        if name in found:
            try:
                out[key] = bytes(found[name].tolist()).decode()
            except UnicodeDecodeError:
                raise ValueError(f"weightsync loader: {name} is not UTF-8") from None
    out["version"] = check_version(int(found[VERSION].item()), "version") if VERSION in found else None
    out["wait"] = check_wait(found[WAIT].item() / 1000.0, "wait") if WAIT in found else DEFAULT_WAIT_SECONDS
    out["in_place"] = bool(found[IN_PLACE].item()) if IN_PLACE in found else False
    return out


def _receiver(model: Any, address: str, secret: Optional[str]) -> StagingReceiver:
    cached = _receivers.get(model)
    if cached is not None and cached[0] == address and cached[1] == secret:
        return cached[2]
    receiver = StagingReceiver(address.split(","), secret=secret)
    if cached is not None:
        cached[2].close()
    _receivers[model] = (address, secret, receiver)
    return receiver


def load(model: Any, named_tensors: Sequence[Tuple[str, Any]]) -> int:
    """SGLang's custom loader: installs the version :func:`request` asked for and returns it."""
    call = _parse(named_tensors)
    receiver = _receiver(model, call["address"], call.get("secret"))
    version = receiver.pull(call["version"], call["wait"])
    if call["in_place"]:
        receiver.scatter(model)
    else:
        receiver.feed(model.load_weights)
    return version


def close(model: Any = None) -> None:
    """Closes the connection kept for ``model`` (None: every model's)."""
    for key in ([model] if model is not None else list(_receivers.keys())):
        cached = _receivers.pop(key, None)
        if cached is not None:
            cached[2].close()
