"""Exceptions raised by weightsync, grouped by what to do about them.

Every error the library reports is a :class:`WeightsyncError` carrying
``code`` (the library's ErrorCode, e.g. ``"connection_lost"``), ``action``
(what to do: ``"retry"``, ``"take_newer_version"``, ``"reconnect"``,
``"fix_configuration"``, ``"fix_call"``) and the library's message, which says
what went wrong and what to do next. Catch a group to handle a whole kind:

=====================  ==============================  =====================
group                  members                         also a built-in
=====================  ==============================  =====================
:class:`RetryError`    Timeout, NotReady, Busy,        Timeout: TimeoutError
                       VersionRevoked, ChecksumMismatch
:class:`ReconnectError` ConnectionLost, ProtocolError,  ConnectionError
                       InternalError
:class:`ConfigurationError` AuthFailed, InvalidConfig   AuthFailed: PermissionError;
                                                       InvalidConfig: ValueError
:class:`CallError`     InvalidArgument,                ValueError
                       StaleBinding (an InvalidArgument)
:class:`Cancelled`     (a pull or wait stopped by cancel())
=====================  ==============================  =====================

A pull that finds nothing new returns ``None``; it does not raise.
"""

from __future__ import annotations

__all__ = [
    "WeightsyncError", "RetryError", "ReconnectError", "ConfigurationError", "CallError",
    "Timeout", "NotReady", "VersionRevoked", "ChecksumMismatch", "Busy",
    "ConnectionLost", "ProtocolError", "InternalError", "AuthFailed", "InvalidConfig",
    "InvalidArgument", "StaleBinding", "Cancelled", "ERROR_CLASSES",
]


class WeightsyncError(Exception):
    """Base of every weightsync error: ``code``, ``action`` and ``message``."""

    def __init__(self, message: str, code: str = "internal", action: str = "reconnect"):
        super().__init__(message)
        self.message = message
        self.code = code
        self.action = action

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class RetryError(WeightsyncError):
    """Transient: call again (maybe after a wait, or for a newer version)."""


class ReconnectError(WeightsyncError, ConnectionError):
    """The connection is unusable: close it and connect a new Subscriber."""


class ConfigurationError(WeightsyncError):
    """Operator error (secrets, addresses, environment): retrying will not help."""


class CallError(WeightsyncError, ValueError):
    """Programmer error: the arguments are wrong (layout, sizes, versions)."""


class Timeout(RetryError, TimeoutError):
    """An operation did not finish within its deadline."""


class NotReady(RetryError):
    """The version asked for is not published (yet)."""


class VersionRevoked(RetryError):
    """The publisher took the version back while it was read; pull again for a newer one."""


class ChecksumMismatch(RetryError):
    """The bytes did not hash to the trainer's checksum; pull again."""


class Busy(RetryError):
    """Every slot is leased and the publisher skips versions when full; publish the next one."""


class ConnectionLost(ReconnectError):
    """The peer closed or reset the connection, or could not be reached."""


class ProtocolError(ReconnectError):
    """The peer broke the protocol (incompatible versions, or a hostile peer)."""


class InternalError(ReconnectError):
    """A bug in weightsync: reconnect, and please report it."""


class AuthFailed(ConfigurationError, PermissionError):
    """Authentication failed: the two sides do not share the same secret."""


class InvalidConfig(ConfigurationError, ValueError):
    """An option or WEIGHTSYNC_* environment variable is invalid."""


class InvalidArgument(CallError):
    """The call's arguments do not fit (layout, destination, version)."""


class StaleBinding(InvalidArgument):
    """A tensor of a Binding no longer uses the memory it had at bind() (``param.data = ...``,
    ``module.to()`` / ``half()`` / ``_apply()``, a Parameter or submodule replaced, an
    engine's post-load processing). The pull wrote nothing: bind() again (EngineAdapter:
    rebind()). ``name`` is the first such tensor."""

    def __init__(self, message: str, code: str = "invalid_argument", action: str = "fix_call",
                 name: str = ""):
        super().__init__(message, code, action)
        self.name = name
        self.why = ""  # what changed (the message says it too)


class Cancelled(WeightsyncError):
    """The pull or wait was cancelled by Subscriber.cancel() (the subscriber is still usable)."""


# The library's ErrorCode names -> classes (used by the C++ core).
ERROR_CLASSES = {
    "timeout": Timeout,
    "not_ready": NotReady,
    "version_revoked": VersionRevoked,
    "checksum_mismatch": ChecksumMismatch,
    "busy": Busy,
    "connection_lost": ConnectionLost,
    "protocol_error": ProtocolError,
    "auth_failed": AuthFailed,
    "invalid_config": InvalidConfig,
    "invalid_argument": InvalidArgument,
    "internal": InternalError,
    "cancelled": Cancelled,
}
