"""The library's log messages, forwarded to the ``weightsync`` logger.

libweightsync logs from its own threads; they only queue messages (they
never wait for the GIL). A daemon thread started at import drains the queue
into ``logging.getLogger("weightsync")`` within milliseconds; :func:`flush`
drains it at once. Which messages the library produces is set by
:func:`weightsync.set_log_level` (default: WEIGHTSYNC_LOG_LEVEL, else warn);
the logger's own level and handlers then filter and route them as usual.
"""

from __future__ import annotations

import atexit
import logging
import threading

from . import _weightsync

logger = logging.getLogger("weightsync")

_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG, 4: logging.DEBUG - 5}
_lock = threading.Lock()
_stop = threading.Event()
_thread = None


def _emit(batch) -> None:
    lines, dropped = batch
    for level, message in lines:
        logger.log(_LEVELS.get(level, logging.WARNING), "%s", message)
    if dropped:
        logger.warning("%d library log messages were dropped (the queue was full)", dropped)


def flush() -> None:
    """Forwards every queued library message now, on this thread."""
    with _lock:
        _emit(_weightsync._log_next_batch(0.0))


def _run() -> None:
    while not _stop.is_set():
        batch = _weightsync._log_next_batch(0.2)
        with _lock:
            _emit(batch)


def start() -> None:
    global _thread
    if _thread is not None:
        return
    _weightsync._log_bridge_install()
    _thread = threading.Thread(target=_run, name="weightsync-log", daemon=True)
    _thread.start()
    atexit.register(stop)


def stop() -> None:
    """Sends the library's messages to stderr again and stops the drain thread."""
    global _thread
    if _thread is None:
        return
    _stop.set()
    _weightsync._log_bridge_remove()
    _thread.join(timeout=2.0)
    _thread = None
    _stop.clear()
    flush()
