"""Code run in separate processes by the state core's tests (spawned, not forked)."""

from __future__ import annotations

import pulsar

from pulsar_state import PulsarMap


def increment_worker(service_url: str, admin_url: str, topic: str, key: str, times: int) -> int:
    """Open a map in this process and increment ``key`` ``times`` times."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with PulsarMap[str, int](client, topic, admin_url=admin_url) as m:
            for _ in range(times):
                m.update(key, lambda v: (v or 0) + 1).result(timeout=120)
            return times
    finally:
        client.close()
