"""Registers weightsync as vLLM weight-transfer backend "weightsync".

vLLM runs every function of the ``vllm.general_plugins`` entry-point group in each of
its processes (``vllm.plugins.load_general_plugins``, possibly more than once per
process). The package declares::

    [vllm.general_plugins]
    weightsync = weightsync.vllm_plugin:register

(``weightsync-<version>.dist-info/entry_points.txt``, installed beside the package;
``VLLM_PLUGINS`` may restrict which plugins vLLM loads). :func:`register` adds the
worker engine to ``WeightTransferEngineFactory`` and, where vLLM has it, the trainer
engine to ``WeightTransferTrainerFactory``, both by module path (lazy: vLLM imports
:mod:`weightsync.vllm_backend` only when ``WeightTransferConfig(backend="weightsync")``
builds an engine). Calling it again does nothing; without vLLM it returns False.
Errors: only an unexpected failure of vLLM's factory propagates.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Optional

logger = logging.getLogger("weightsync.vllm")

BACKEND = "weightsync"  # the same as weightsync.vllm_backend.BACKEND (not imported: it needs torch)
WORKER = ("weightsync.vllm_backend", "WeightsyncWeightTransferEngine")
TRAINER = ("weightsync.vllm_trainer", "WeightsyncTrainerEngine")
_FACTORY_MODULES = ("vllm.distributed.weight_transfer.factory", "vllm.backends.distributed.weight_transfer.factory")


def _factory_module() -> Optional[Any]:
    for name in _FACTORY_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _add(factory: Any, module_and_class: tuple) -> bool:
    """Registers once; True if this call added it."""
    registry = getattr(factory, "_registry", None)
    if isinstance(registry, dict) and BACKEND in registry:
        return False
    try:
        factory.register_engine(BACKEND, *module_and_class)
    except ValueError as e:  # "already registered": another process path got there first
        if "already registered" not in str(e):
            raise
        return False
    return True


def register(engine_factory: Any = None, trainer_factory: Any = None) -> bool:
    """Registers the backend with vLLM's factories (or the ones given, for tests).
    Returns True when the worker engine is registered (now or before), False when vLLM
    is not installed."""
    if engine_factory is None:
        module = _factory_module()
        if module is None:
            logger.debug("weightsync vLLM plugin: vLLM is not installed; nothing registered")
            return False
        engine_factory = getattr(module, "WeightTransferEngineFactory")
        trainer_factory = getattr(module, "WeightTransferTrainerFactory", None)
    if _add(engine_factory, WORKER):
        logger.info("weightsync vLLM plugin: weight-transfer backend %r registered", BACKEND)
    if trainer_factory is not None:
        _add(trainer_factory, TRAINER)
    return True
