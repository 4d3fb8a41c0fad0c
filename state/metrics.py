"""Prometheus metrics of the state core, labelled by topic.

Exposed through ``prometheus_client``'s default registry: serve them with
``prometheus_client.start_http_server(port)`` in the application.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

__all__ = [
    "APPLIED_OPS",
    "APPLIED_WRITES",
    "BOOTSTRAP_SECONDS",
    "FENCES",
    "COMMITTED_ON_ACK",
    "WRITES_IN_DOUBT",
    "CALLBACK_ERRORS",
    "TAKEOVERS",
    "TENURES_KEPT",
    "INVALID_MESSAGES",
    "LAG_MESSAGES",
    "WRITES",
    "WRITE_RETRIES",
    "WRITE_SECONDS",
]

APPLIED_WRITES = Counter("pulsar_state_applied_writes", "Writes applied to local state", ["topic"])
APPLIED_OPS = Counter("pulsar_state_applied_ops", "Ops applied to local state", ["topic"])
INVALID_MESSAGES = Counter(
    "pulsar_state_invalid_messages",
    "Messages skipped: foreign, undecodable or failing to apply",
    ["topic", "reason"],
)
LAG_MESSAGES = Gauge(
    "pulsar_state_lag_entries",
    "Entries between the last catch-up target and the applied position (same ledger)",
    ["topic"],
)
BOOTSTRAP_SECONDS = Gauge(
    "pulsar_state_bootstrap_seconds", "Time the last bootstrap took to catch up", ["topic"]
)
FENCES = Counter(
    "pulsar_state_fences", "Times this process's writer lost the topic to another", ["topic"]
)
COMMITTED_ON_ACK = Counter(
    "pulsar_state_committed_on_ack",
    "Writes completed at the broker's acknowledgement, applied by the writer itself",
    ["topic"],
)
WRITES_IN_DOUBT = Counter(
    "pulsar_state_writes_in_doubt",
    "Writes whose publish failed or timed out, settled from the log before anything else",
    ["topic"],
)
CALLBACK_ERRORS = Counter(
    "pulsar_state_callback_errors",
    "Users' done-callbacks and listeners that raised (logged; the callback thread goes on)",
)
TAKEOVERS = Counter(
    "pulsar_state_takeovers",
    "Times this process's adaptive writer fenced a holder that did not let go in time",
    ["topic"],
)
TENURES_KEPT = Counter(
    "pulsar_state_tenures_kept",
    "Times this process's writer held on to the topic past max_tenure_s: no other writer waited",
    ["topic"],
)
WRITES = Counter("pulsar_state_writes", "Writes published", ["topic"])
WRITE_RETRIES = Counter("pulsar_state_write_retries", "Write attempts re-run", ["topic"])
WRITE_SECONDS = Histogram(
    "pulsar_state_write_seconds",
    "From submit to applied locally",
    ["topic"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def _fresh_locks_in_child() -> None:
    """In a child forked from this process: every metric of the default
    registry gets new locks. A parent thread inside an ``inc`` or ``labels()``
    at the fork (the tail applies and counts all the time) leaves that lock
    held for good in the child, whose first use of the same series would wait
    forever: a worker pool forked from an application holding maps, whose
    children open the same maps, hung now and then. The values stay."""
    registry: Any = REGISTRY
    _relock(registry)
    for collector in list(getattr(registry, "_collector_to_names", {})):
        _relock(collector)


def _relock(metric: Any) -> None:
    """``metric``'s locks (its children's, for a labelled one) anew, each of its
    kind (``prometheus_client`` 0.21.0 used ``RLock``s); what this
    ``prometheus_client`` does not have is left alone."""
    values = [getattr(metric, name, None) for name in ("_value", "_sum", "_count")]
    for holder in [metric, *values, *getattr(metric, "_buckets", ())]:
        lock = getattr(holder, "_lock", None)
        if isinstance(lock, _LOCK | _RLOCK):
            holder._lock = threading.RLock() if isinstance(lock, _RLOCK) else threading.Lock()
    children = getattr(metric, "_metrics", None)
    if isinstance(children, dict):
        for child in list(children.values()):
            _relock(child)


_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())

os.register_at_fork(after_in_child=_fresh_locks_in_child)
