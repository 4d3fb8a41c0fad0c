"""How ``pulsar-state sink run`` groups received records into batches, one transaction each.

A batch closes when it holds ``batchMaxRecords`` records (default 500), when
their payloads reach ``batchMaxBytes`` (default 1 MiB; its last record may take
it over), or ``batchMaxDelayMs`` (default 100) after its first record was
received, whichever comes first; records already received close it at once,
and a batch is never empty. ``batchMaxRecords: 1`` is
one record a transaction, as before batches. The batch is then written in one
database transaction (:mod:`.sink_batch_write`) and its records acknowledged
only after the commit (:mod:`.sink_runner`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pulsar_state.errors import ConfigurationError

__all__ = ["BATCH_KEYS", "BatchLimits", "collect"]

M = TypeVar("M")

#: the config keys of the batch limits
BATCH_KEYS = ("batchMaxRecords", "batchMaxBytes", "batchMaxDelayMs")


@dataclass(frozen=True)
class BatchLimits:
    """When a batch of received records closes (see the module docstring)."""

    max_records: int = 500
    max_bytes: int = 1 << 20
    max_delay_ms: int = 100

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BatchLimits:
        """The limits of the sink config's ``batchMaxRecords``, ``batchMaxBytes`` and
        ``batchMaxDelayMs``, each defaulting as above.

        Raises:
            ConfigurationError: a value that is not a whole number >= 1.
        """
        defaults = cls()
        found = []
        for key, default, least in zip(
            BATCH_KEYS,
            (defaults.max_records, defaults.max_bytes, defaults.max_delay_ms),
            (1, 1, 1),
            strict=True,
        ):
            value = config.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigurationError(
                    f"sink config {key!r} must be a whole number >= {least}, got {value!r}"
                )
            found.append(value)
        return cls(*found)


def collect(
    receive: Callable[[int], M | None],
    size: Callable[[M], int],
    limits: BatchLimits,
    *,
    first_timeout_ms: int = 500,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[M]:
    """The next batch: ``receive(timeout_ms)`` (``None`` on a timeout) until a limit
    closes it. Waits up to ``first_timeout_ms`` for its first record (``[]`` when
    none came), then up to ``max_delay_ms`` from that one for the rest.

    Returns:
        The records received, in order; never more than ``max_records``, and over
        ``max_bytes`` only by its last record.
    """
    first = receive(first_timeout_ms)
    if first is None:
        return []
    batch, used = [first], size(first)
    deadline = clock() + limits.max_delay_ms / 1000
    while len(batch) < limits.max_records and used < limits.max_bytes:
        if stop is not None and stop.is_set():
            break
        remaining_ms = int((deadline - clock()) * 1000)
        if remaining_ms <= 0:
            break
        got = receive(remaining_ms)
        if got is None:
            break
        batch.append(got)
        used += size(got)
    return batch
