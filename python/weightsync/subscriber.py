"""Subscriber: the generator's side. Pulls the newest version into your tensors."""

from __future__ import annotations

import asyncio
import contextlib
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _weightsync, errors
from ._tensors import TensorRef, describe
from .layout import Layout

PullResult = _weightsync.PullResult


class Binding:
    """Destination memory checked against the layout and registered once.

    Made by :meth:`Subscriber.bind`; every later ``pull(binding)`` writes
    straight into the same tensors (zero copy). The binding keeps the tensors
    and their storage alive, so the memory it writes is never freed under it.
    Before each pull it checks, in well under a microsecond a tensor, that
    every bound tensor still uses that memory (same address, dtype, shape and
    contiguity and, for an nn.Module, the same Parameter or buffer of the same
    submodule):
    after ``param.data = ...``, ``module.to()`` / ``half()`` / ``_apply()``, a
    Parameter or submodule replaced, or an engine's post-load processing, the
    pull raises :class:`~weightsync.errors.StaleBinding` naming the tensor and
    writes nothing; bind() again for the new memory. Call :meth:`release`
    before dropping a binding whose tensors you free (RDMA registrations).
    """

    def __init__(self, subscriber: "Subscriber", plan: Optional["_weightsync._Plan"], keep: List[Any],
                 refs: List[TensorRef], tensors: Optional[Dict[str, Any]] = None, module: Any = None):
        self._subscriber = subscriber
        self._plan = plan
        self._keep = keep  # the tensors: alive as long as the binding
        self._refs = refs
        # What each bound tensor was at bind time, checked before every pull;
        # and its storage, so that memory a pull may still write (one already
        # in flight on another thread) is never freed while the binding lives.
        # (Its device is not compared: another device means another address.)
        self._names: List[str] = []
        self._tensors: List[Any] = []        # torch tensors
        self._addresses: List[int] = []
        self._meta: List[Tuple[Any, Any]] = []  # (dtype, shape)
        self._others: List[Tuple[str, Any, TensorRef]] = []  # NumPy arrays
        self._storages: List[Any] = []
        for ref in refs:
            tensor = (tensors or {}).get(ref.name)
            if tensor is None:
                continue  # a buffer whose memory is pinned by its own object (bytearray, memoryview)
            storage = _storage_of(tensor)
            if storage is not None:
                self._storages.append(storage)
                self._names.append(ref.name)
                self._tensors.append(tensor)
                self._addresses.append(ref.address)
                self._meta.append(_dtype_shape(tensor))
            else:
                self._others.append((ref.name, tensor, ref))
        self._module_guards = _ModuleGuards(module, refs, tensors) if module is not None else None

    @property
    def nbytes(self) -> int:
        """Bytes one pull writes."""
        return self._plan.nbytes if self._plan is not None else sum(r.nbytes for r in self._refs)

    @property
    def tensors(self) -> List[TensorRef]:
        return list(self._refs)

    def release(self) -> None:
        """Drops the transport's registrations of this memory (before freeing it)."""
        for ref in self._refs:
            self._subscriber._core.release_memory(ref.address, ref.nbytes)

    def _check(self) -> None:
        """Raises StaleBinding if a bound tensor no longer uses the memory bound for it.

        About 0.4 us a tensor (map() over the tensors, no Python
        loop, in the common case that nothing changed)."""
        ts = self._tensors
        if ts and (list(map(_data_ptr, ts)) != self._addresses or list(map(_dtype_shape, ts)) != self._meta
                   or not all(map(_is_contiguous, ts))):
            for name, t, address, (dtype, shape) in zip(self._names, ts, self._addresses, self._meta):
                if t.data_ptr() != address or t.dtype != dtype or t.shape != shape or not t.is_contiguous():
                    self._stale(name, _torch_change(t, address, dtype, shape))
        for name, obj, ref in self._others:
            now = describe(name, obj)
            if now.address != ref.address or now.nbytes != ref.nbytes or not now.contiguous:
                self._stale(name, f"its memory is now {now.nbytes} bytes at {now.address:#x}, "
                                  f"not {ref.nbytes} at {ref.address:#x}")
        if self._module_guards is not None:
            changed = self._module_guards.check()
            if changed is not None:
                self._stale(*changed)

    def _repointed(self) -> None:
        """Takes the tensors' memory now as the bound memory, after the caller re-pointed them
        on purpose (EngineAdapter, staged swap mode); nothing writes the old memory any more,
        so the binding stops keeping it alive."""
        self._addresses = list(map(_data_ptr, self._tensors))
        self._storages = []

    def _stale(self, name: str, why: str) -> None:
        # The memory bound for it may be freed once this binding goes: drop its
        # RDMA registrations now (a no-op for shm and tcp; a later pull would
        # register again), so that memory reused at the same address is never
        # written through a stale registration.
        for ref in self._refs:
            if ref.name == name:
                with contextlib.suppress(errors.WeightsyncError):
                    self._subscriber._core.release_memory(ref.address, ref.nbytes)
        raise stale_binding(name, why, "call bind() again (sub.bind(model)) for its new memory")


def stale_binding(name: str, why: str, todo: str) -> errors.StaleBinding:
    err = errors.StaleBinding(
        f"'{name}' was re-allocated or replaced after bind(): {why}. The pull wrote nothing "
        "(the memory bound for it is no longer the tensor's: param.data = ..., module.to() / half() / "
        f"_apply(), a new Parameter or submodule, an engine's post-load processing); {todo}",
        "invalid_argument", "fix_call", name=name)
    err.why = why
    return err


def _storage_of(tensor: Any) -> Any:
    """A torch tensor's storage (what keeps its memory alive), or None for anything else."""
    untyped = getattr(tensor, "untyped_storage", None)  # torch >= 2.0
    if callable(untyped):
        return untyped()
    if hasattr(tensor, "data_ptr") and callable(getattr(tensor, "storage", None)):
        return tensor.storage()  # torch < 2.0: a TypedStorage, holding the same memory
    return None


_data_ptr = operator.methodcaller("data_ptr")
_dtype_shape = operator.attrgetter("dtype", "shape")
_is_contiguous = operator.methodcaller("is_contiguous")


def _torch_change(t: Any, address: int, dtype: Any, shape: Any) -> str:
    if t.dtype != dtype:
        return f"it is {str(t.dtype).replace('torch.', '')} now, not {str(dtype).replace('torch.', '')}"
    if t.shape != shape:
        return f"its shape is {list(t.shape)} now, not {list(shape)}"
    if not t.is_contiguous():
        return "it is not contiguous any more"
    return f"its memory moved from {address:#x} to {t.data_ptr():#x}"


class _ModuleGuards:
    """For a bound nn.Module: each bound tensor is still the Parameter or buffer of
    the same submodule, and each of those submodules still sits where it sat (a
    new Parameter or submodule leaves the old one, still bound, orphaned: the
    engine would never see the pulls). Names whose owner is not found that way
    (a module with its own state_dict hooks) are checked by their tensors only."""

    def __init__(self, module: Any, refs: List[TensorRef], tensors: Optional[Dict[str, Any]]):
        self._edges: List[Tuple[Any, str, Any, str]] = []   # (parent, child name, child, a tensor under it)
        self._leaves: List[Tuple[Any, Any, str, Any, str]] = []  # (owner's dict, owner, key, tensor, name)
        seen = set()
        for ref in refs:
            tensor = (tensors or {}).get(ref.name)
            *path, key = ref.name.split(".")
            owner, chain = module, []
            for part in path:
                child = getattr(owner, "_modules", {}).get(part)
                if child is None:
                    break
                chain.append((owner, part, child))
                owner = child
            else:
                table = None
                for attr in ("_parameters", "_buffers"):
                    d = getattr(owner, attr, None)
                    if isinstance(d, dict) and d.get(key) is tensor and tensor is not None:
                        table = d
                        break
                if table is None:
                    continue
                for parent, part, child in chain:
                    if (id(parent), part) not in seen:
                        seen.add((id(parent), part))
                        self._edges.append((parent._modules, part, child, ref.name))
                self._leaves.append((table, owner, key, tensor, ref.name))

        # Columns, for the fast check (map(), no Python loop).
        self._edge_cols = [list(c) for c in zip(*self._edges)] or [[], [], []]
        self._leaf_cols = [list(c) for c in zip(*self._leaves)] or [[], [], [], []]

    def check(self) -> Optional[Tuple[str, str]]:
        """(name, what changed) for the first bound tensor the module no longer uses, or None."""
        dicts, parts, children = self._edge_cols[:3]
        tables, _, keys, tensors = self._leaf_cols[:4]
        if all(map(operator.is_, map(dict.get, dicts, parts), children)) and \
                all(map(operator.is_, map(dict.get, tables, keys), tensors)):
            return None
        for modules, part, child, name in self._edges:
            if modules.get(part) is not child:
                return name, f"the submodule '{part}' holding it was replaced"
        for table, owner, key, tensor, name in self._leaves:
            if table.get(key) is not tensor:
                return name, f"the module's '{key}' is another tensor now (a new Parameter or buffer)"
        return None


class Subscriber:
    """Connects to a Publisher (or a relay) and pulls versions into your memory.

    ::

        sub = weightsync.Subscriber("trainer:7000", secret=secret)
        binding = sub.bind(model)                # model's own parameters, checked and registered once
        while True:
            result = sub.pull(binding, wait=30)  # newest version, straight into the parameters
            if result is not None:
                print("now at version", result.version)

    ``address`` may be a list (a trainer and its relays): the first that
    connects is used. ``transport`` picks one ("shm", "tcp", "ucx",
    "verbs"); None negotiates the best. ``integrity`` and ``encryption``
    must match the publisher's (docs/security.md). ``trusted_key``: the path
    of the trainer's Ed25519 public key (PEM); every whole pull is then
    accepted only with the trainer's signature and bytes that match it
    (docs/security.md, "Versions the trainer signs"). ``adapter``: the LoRA
    adapter to pull from an :class:`AdapterPublisher` (its own layout and
    versions); None pulls its base model. Timeouts are in milliseconds; None
    takes the WEIGHTSYNC_* environment variable or the default.

    Thread-safety: one call runs at a time (others wait); :meth:`cancel` may
    be called from any thread at any time. Every blocking call releases the
    GIL, and on the main thread Ctrl-C interrupts a waiting pull within about
    10 ms (KeyboardInterrupt), leaving the subscriber usable.
    """

    def __init__(self, address: Union[str, Sequence[str]], *, secret: Optional[str] = None,
                 transport: Optional[str] = None, connect_timeout_ms: Optional[int] = None,
                 io_timeout_ms: Optional[int] = None, verify_checksum: bool = True,
                 max_retries: int = 16, name: str = "python", accept_streaming: bool = False,
                 integrity: Optional[bool] = None, encryption: Optional[bool] = None,
                 trusted_key: Optional[str] = None, adapter: Optional[str] = None):
        addresses = [address] if isinstance(address, str) else list(address)
        self._core = _weightsync._Subscriber(
            addresses, secret=secret, transport=transport, connect_timeout_ms=connect_timeout_ms,
            io_timeout_ms=io_timeout_ms, verify_checksum=verify_checksum, max_retries=max_retries,
            client_name=name, accept_streaming=accept_streaming, integrity=integrity,
            encryption=encryption, trusted_key=trusted_key, adapter=adapter or "")
        self._layout = Layout._from_core(self._core.layout)
        self._last_binding: Optional[Binding] = None

    @property
    def layout(self) -> Layout:
        """The publisher's layout."""
        return self._layout

    @property
    def transport(self) -> str:
        """The data transport negotiated: "verbs", "ucx", "cuda_ipc", "shm" or "tcp"."""
        return self._core.transport

    @property
    def held_version(self) -> int:
        """The version the last successful pull delivered; 0 before the first."""
        return self._core.held_version

    @property
    def publisher_checksums(self) -> bool:
        return self._core.publisher_checksums

    @property
    def encrypted(self) -> bool:
        """Whether this session is encrypted (encryption=True)."""
        return self._core.encrypted

    @property
    def publisher_deltas(self) -> bool:
        """Whether the publisher serves delta versions (pull(delta_base=...))."""
        return self._core.publisher_deltas

    @property
    def closed(self) -> bool:
        return self._core.closed

    def bind(self, target: Any, *, allow_extra: bool = True) -> Binding:
        """Checks ``target`` against the layout and prepares pulls straight into it.

        ``target`` is an nn.Module (its parameters and buffers by state_dict
        name), a state_dict / mapping of name -> tensor, (name, tensor) pairs,
        or one tensor / buffer of layout.total_bytes bytes (a packed image).
        Every tensor of the layout must be there with the layout's dtype and
        shape, contiguous, all on the CPU or all on CUDA; names the layout
        does not have are ignored when ``allow_extra``. Bind again after
        re-allocating any of them (a pull with the old binding raises
        StaleBinding and writes nothing).
        """
        single = _single_buffer(target)
        if single is not None:
            ref, keep = single
            if ref.nbytes != self._layout.total_bytes:
                raise errors.InvalidArgument(
                    f"a packed destination must be layout.total_bytes = {self._layout.total_bytes} bytes, "
                    f"not {ref.nbytes}", "invalid_argument", "fix_call")
            plan = self._core.prepare([(ref.name, ref.address, ref.nbytes)], ref.device, True)
            guarded = None if isinstance(keep, memoryview) else {ref.name: keep}  # a memoryview pins its memory
            binding = Binding(self, plan, [keep], [ref], guarded)
        else:
            keep, refs, device = self._match(target, allow_extra)
            plan = self._core.prepare([(r.name, r.address, r.nbytes) for r in refs], device, False)
            module = target if _is_module(target) else None
            binding = Binding(self, plan, list(keep.values()), refs, keep, module)
        self._last_binding = binding
        return binding

    def _match(self, target: Any, allow_extra: bool = True) -> Tuple[Dict[str, Any], List[TensorRef], str]:
        """(name -> tensor, the layout's tensors in order, "cpu" or "cuda") for bind()'s targets."""
        keep = dict(_pairs(target))
        refs = self._layout.match(keep, ordered=False, allow_extra=allow_extra, devices=("cpu", "cuda"))
        devices = {r.device for r in refs}
        if len(devices) != 1:
            raise errors.InvalidArgument("the destination tensors must all be on the CPU or all on CUDA",
                                         "invalid_argument", "fix_call")
        return keep, refs, devices.pop()

    def _guard(self, target: Any) -> Tuple[Binding, str, bool]:
        """(binding, device, contiguous) for ``target`` (anything bind() takes), preparing no pull:
        the binding's _check() guards memory a StagedUpdates copies into or re-points;
        contiguous: ``target`` is one packed buffer of layout.total_bytes."""
        single = _single_buffer(target)
        if single is not None:
            ref, keep = single
            if ref.nbytes != self._layout.total_bytes:
                raise errors.InvalidArgument(
                    f"a packed destination must be layout.total_bytes = {self._layout.total_bytes} bytes, "
                    f"not {ref.nbytes}", "invalid_argument", "fix_call")
            guarded = None if isinstance(keep, memoryview) else {ref.name: keep}
            return Binding(self, None, [keep], [ref], guarded), ref.device, True
        keep, refs, device = self._match(target)
        module = target if _is_module(target) else None
        return Binding(self, None, list(keep.values()), refs, keep, module), device, False

    def pull(self, into: Any = None, *, wait: float = 0.0, newer_than: Optional[int] = None,
             version: Optional[int] = None, delta_base: Optional[int] = None) -> Optional[PullResult]:
        """Pulls the newest version newer than ``newer_than`` (default: held_version) into ``into``.

        ``into``: a Binding (fast: only a check that its tensors still use
        the bound memory, else StaleBinding), anything :meth:`bind` takes
        (bound now), or None for the last binding. ``wait``: seconds to wait
        for such a version (0: do not wait; ``math.inf``: until one comes).
        ``version``: exactly this one (NotReady if it does not come within
        ``wait``, VersionRevoked if it is gone). ``delta_base``: the version
        ``into`` holds now, byte for byte (host memory, every tensor): a
        publisher with deltas then sends only the difference, applied in place
        and checked (result.delta); anything else is a full pull.

        Returns the PullResult, or None when there is nothing newer (within
        ``wait``). On an error the destination's bytes are undefined (a
        retried pull repairs them); the result is never a mix of versions.
        """
        binding = self._binding_for(into)
        return self._core.pull(binding._plan, float(wait), newer_than, version, delta_base)

    def wait_for_version(self, newer_than: Optional[int] = None, timeout: float = 0.0) -> Optional[int]:
        """Waits up to ``timeout`` seconds for a version newer than ``newer_than``
        (default: held_version); returns it, or None."""
        base = self.held_version if newer_than is None else newer_than
        return self._core.wait_for_version(base, float(timeout))

    def latest_version(self) -> int:
        """The publisher's newest committed version (one round trip); 0 if none yet."""
        return self._core.latest_version()

    def cancel(self) -> None:
        """Makes the pull or wait in progress, or else the next one, raise Cancelled. Any thread."""
        self._core.cancel()

    async def pull_async(self, into: Any = None, *, wait: float = 0.0, newer_than: Optional[int] = None,
                         version: Optional[int] = None, delta_base: Optional[int] = None) -> Optional[PullResult]:
        """pull() on a worker thread; cancelling the task cancels the pull."""
        binding = self._binding_for(into)
        return await self._run_cancellable(self._core.pull, binding._plan, float(wait), newer_than, version,
                                           delta_base)

    async def wait_for_version_async(self, newer_than: Optional[int] = None,
                                     timeout: float = 0.0) -> Optional[int]:
        """wait_for_version() on a worker thread; cancelling the task cancels the wait."""
        base = self.held_version if newer_than is None else newer_than
        return await self._run_cancellable(self._core.wait_for_version, base, float(timeout))

    async def _run_cancellable(self, fn: Any, *args: Any) -> Any:
        return await run_cancellable(self._core, fn, *args)

    def stats(self) -> Dict[str, Any]:
        """Counters: pulls, retries, bytes, registrations, ..."""
        return self._core.stats()

    def check(self) -> None:
        """Raises the connection's sticky error, if it has one (then reconnect)."""
        self._core.status()

    def close(self) -> None:
        """Cancels what is in flight, waits for it, and closes the connection."""
        self._core.close()

    def __enter__(self) -> "Subscriber":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "Subscriber(closed)"
        return f"Subscriber({self.transport}, {len(self._layout)} tensors, held version {self.held_version})"

    def _binding_for(self, into: Any) -> Binding:
        if isinstance(into, Binding):
            if into._subscriber is not self:
                raise errors.InvalidArgument("this Binding belongs to another Subscriber",
                                             "invalid_argument", "fix_call")
            into._check()
            return into
        if into is None:
            if self._last_binding is None:
                raise errors.InvalidArgument("pull() needs a destination: call bind(model) first, or pass one",
                                             "invalid_argument", "fix_call")
            self._last_binding._check()
            return self._last_binding
        return self.bind(into)


async def run_cancellable(core: Any, fn: Any, *args: Any) -> Any:
    """fn(*args) on the event loop's executor; cancelling the task calls
    core.cancel(), lets the call end, then core._reset_cancel()."""
    future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        # The task was cancelled: stop the call on its thread and let it
        # end before the task does (the object is then free again).
        core.cancel()
        with contextlib.suppress(Exception):
            await future
        core._reset_cancel()  # if the call ended before it saw the cancel
        raise


def _is_module(target: Any) -> bool:
    """An nn.Module (what named_tensors reads by state_dict), not a Mapping."""
    from collections.abc import Mapping

    return (callable(getattr(target, "state_dict", None)) and not isinstance(target, Mapping)
            and isinstance(getattr(target, "_modules", None), dict))


def _pairs(target: Any):
    from ._tensors import named_tensors

    return named_tensors(target)


def _single_buffer(target: Any):
    """(TensorRef, object to keep alive) when ``target`` is one packed buffer, else None."""
    if hasattr(target, "data_ptr") and hasattr(target, "numel"):
        return describe("<packed>", target), target
    if isinstance(target, (bytearray, memoryview)) or hasattr(target, "__array_interface__"):
        if hasattr(target, "__array_interface__"):
            return describe("<packed>", target), target
        import ctypes

        view = memoryview(target)
        if view.readonly or not view.c_contiguous:
            raise errors.InvalidArgument("a packed destination must be writable, contiguous memory",
                                         "invalid_argument", "fix_call")
        address = ctypes.addressof(ctypes.c_char.from_buffer(view))
        return TensorRef("<packed>", "uint8", (view.nbytes,), address, view.nbytes, "cpu", True), view
    return None
