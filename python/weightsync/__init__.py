"""weightsync: move model weights from an RL trainer to its inference engines.

The trainer publishes each new version of its weights; every engine pulls the
newest complete version straight into its own parameters, over RDMA, UCX,
shared memory or TCP, never a torn or mixed version, every peer
authenticated. This package wraps libweightsync; it does not link libtorch
(tensors are taken by address, dtype and shape), so any torch version works.

Trainer::

    layout = weightsync.Layout.from_state_dict(model.state_dict())
    pub = weightsync.Publisher(layout, bind="0.0.0.0", secret=secret)
    pub.publish(model.state_dict(), version=step)

Engine::

    sub = weightsync.Subscriber(address, secret=secret)
    binding = sub.bind(model)            # the model's own parameters, zero copy
    sub.pull(binding, wait=30)           # the newest version, or None

LoRA adapters, each its own version stream, on one address::

    ap = weightsync.AdapterPublisher(bind="0.0.0.0", secret=secret)
    ap.add_adapter("math", adapter_state_dict).publish(adapter_state_dict, version=step)
    sub = weightsync.Subscriber(ap.address, secret=secret, adapter="math")

Engine that never stops generating (a background pull, installed between steps)::

    adapter = weightsync.EngineAdapter(address, model, staged="copy", secret=secret)
    adapter.install_update()             # between steps: the staged version, or None

Errors are grouped by what to do about them (weightsync.errors); the
library's log messages go to the ``weightsync`` logger; ``python -m
weightsync.info`` shows what this build can do here.
"""

from . import _weightsync, errors
from ._logbridge import flush as flush_logs
from ._logbridge import start as _start_log_bridge
from ._weightsync import cuda_info, log_level, set_log_level, settings, transports, version
from .adapters import AdapterPublisher
from .engine import EngineAdapter
from .errors import (AuthFailed, Busy, CallError, Cancelled, ChecksumMismatch, ConfigurationError,
                     ConnectionLost, InternalError, InvalidArgument, InvalidConfig, NotReady,
                     ProtocolError, ReconnectError, RetryError, StaleBinding, Timeout,
                     VersionRevoked, WeightsyncError)
from .layout import Layout, TensorInfo
from .publisher import Publisher, PublishResult, Slot
from .staged import InstallResult, StagedInstall, StagedUpdates
from .subscriber import Binding, PullResult, Subscriber

__version__ = _weightsync.version()

__all__ = [
    "Layout", "TensorInfo", "Publisher", "PublishResult", "Slot", "Subscriber", "Binding", "PullResult",
    "AdapterPublisher",
    "StagedUpdates", "InstallResult", "StagedInstall", "EngineAdapter",
    "errors", "WeightsyncError", "RetryError", "ReconnectError", "ConfigurationError",
    "CallError", "Timeout", "NotReady", "VersionRevoked", "ChecksumMismatch", "Busy", "ConnectionLost",
    "ProtocolError", "InternalError", "AuthFailed", "InvalidConfig", "InvalidArgument", "StaleBinding",
    "Cancelled",
    "version", "transports", "settings", "cuda_info", "set_log_level", "log_level", "flush_logs",
]

_start_log_bridge()
