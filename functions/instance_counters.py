"""What one instance has done, counted as Pulsar's runtime counts it: :class:`InstanceCounters`.

The fields of an instance's status in ``pulsar-admin functions status``
(``FunctionInstanceStatusData``): messages received, processed successfully,
user exceptions (``process`` raised) and system exceptions (the output could
not be sent), the latest of each with its time, the average processing
latency and the time of the last invocation. The instance's thread counts;
any other thread reads a consistent :meth:`InstanceCounters.snapshot`. A
message the stateful kit holds back (it waits for an earlier one, and comes
back) is received again but counted as no exception: nothing failed.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from typing import Any

__all__ = ["MAX_EXCEPTION_CHARS", "MAX_LATEST_EXCEPTIONS", "InstanceCounters"]

#: how many of the latest exceptions of each kind are kept (Pulsar keeps 10)
MAX_LATEST_EXCEPTIONS = 10
#: an exception's text is cut to its last this many characters (its message is at the end)
MAX_EXCEPTION_CHARS = 1000


def _exception_text(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc)).rstrip()
    return text[-MAX_EXCEPTION_CHARS:]


def _now_ms() -> int:
    return int(time.time() * 1000)


class InstanceCounters:
    """See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received = 0
        self.processed = 0
        self.user_exceptions = 0
        self.system_exceptions = 0
        self._latency_total_ms = 0.0
        self._last_invocation_ms = 0
        self._latest_user: deque[tuple[str, int]] = deque(maxlen=MAX_LATEST_EXCEPTIONS)
        self._latest_system: deque[tuple[str, int]] = deque(maxlen=MAX_LATEST_EXCEPTIONS)

    def on_received(self) -> None:
        with self._lock:
            self.received += 1
            self._last_invocation_ms = _now_ms()

    def on_processed(self, latency_s: float) -> None:
        """A message processed successfully in ``latency_s`` (its output sent, it acknowledged)."""
        with self._lock:
            self.processed += 1
            self._latency_total_ms += latency_s * 1000

    def on_user_exception(self, exc: BaseException) -> None:
        """The function raised ``exc`` on a message."""
        with self._lock:
            self.user_exceptions += 1
            self._latest_user.append((_exception_text(exc), _now_ms()))

    def on_system_exception(self, exc: BaseException) -> None:
        """The runtime failed on a message (its output could not be sent...)."""
        with self._lock:
            self.system_exceptions += 1
            self._latest_system.append((_exception_text(exc), _now_ms()))

    def snapshot(self) -> dict[str, Any]:
        """The counters, as the fields of ``pulsar-admin functions status`` name them.

        Returns:
            ``numReceived``, ``numSuccessfullyProcessed``, ``numUserExceptions``,
            ``latestUserExceptions`` (``[{"exceptionString", "timestampMs"}]``,
            oldest first), ``numSystemExceptions``, ``latestSystemExceptions``,
            ``averageLatency`` (ms), ``lastInvocationTime`` (ms since the epoch, 0: none).
        """
        with self._lock:
            return {
                "numReceived": self.received,
                "numSuccessfullyProcessed": self.processed,
                "numUserExceptions": self.user_exceptions,
                "latestUserExceptions": [
                    {"exceptionString": text, "timestampMs": ts} for text, ts in self._latest_user
                ],
                "numSystemExceptions": self.system_exceptions,
                "latestSystemExceptions": [
                    {"exceptionString": text, "timestampMs": ts} for text, ts in self._latest_system
                ],
                "averageLatency": (
                    self._latency_total_ms / self.processed if self.processed else 0.0
                ),
                "lastInvocationTime": self._last_invocation_ms,
            }
