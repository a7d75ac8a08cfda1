"""vLLM's weight-transfer base classes, or weightsync's stand-ins when vLLM is absent.

Imported only by :mod:`weightsync.vllm_backend` and :mod:`weightsync.vllm_trainer`
(never by ``import weightsync``), so vLLM is imported only when one of them is. The
classes come from ``vllm.distributed.weight_transfer.base`` (the path every vLLM with
the weight-transfer API has; newer trees alias it to
``vllm.backends.distributed.weight_transfer.base``). When vLLM is not installed, or its
base module lacks a class, the one from :mod:`weightsync._vllm_standin` is used and
:data:`MISSING` names it. ``VLLM`` is True when vLLM's own classes were found.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, List, Optional, Tuple

from . import _vllm_standin

_BASE_MODULES = ("vllm.distributed.weight_transfer.base", "vllm.backends.distributed.weight_transfer.base")


def _vllm_base() -> Optional[Any]:
    for name in _BASE_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


_base = _vllm_base()
VLLM = _base is not None and hasattr(_base, "WeightTransferEngine")
MISSING: List[str] = []


def _pick(name: str) -> Any:
    if _base is not None and hasattr(_base, name):
        return getattr(_base, name)
    MISSING.append(name)
    return getattr(_vllm_standin, name)


WeightTransferEngine = _pick("WeightTransferEngine")
WeightTransferInitInfo = _pick("WeightTransferInitInfo")
WeightTransferUpdateInfo = _pick("WeightTransferUpdateInfo")
TrainerInitInfo = _pick("TrainerInitInfo")
TrainerWeightTransferEngine = _pick("TrainerWeightTransferEngine")
WeightSource = _pick("WeightSource")
ModuleSource = _pick("ModuleSource")
ParamMeta = _pick("ParamMeta")


def reload_hooks() -> Tuple[Optional[Callable[..., Any]], Optional[Callable[..., Any]]]:
    """vLLM's (initialize_layerwise_reload, finalize_layerwise_reload), or (None, None)
    without vLLM (a plain nn.Module needs neither)."""
    try:
        reload = importlib.import_module("vllm.model_executor.model_loader.reload")
    except ImportError:
        return None, None
    return (getattr(reload, "initialize_layerwise_reload", None),
            getattr(reload, "finalize_layerwise_reload", None))
