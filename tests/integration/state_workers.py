"""Code run in separate processes by the state core's tests (spawned, not forked)."""

from __future__ import annotations

import pulsar

from pulsar_state import CoordinationService, MetadataStore, PulsarMap


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


def counter_worker(
    service_url: str, admin_url: str, topic: str, path: str, times: int
) -> list[int]:
    """Take ``times`` values from a metadata counter in this process."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        with MetadataStore(client, topic, admin_url=admin_url) as store:
            service: CoordinationService[int] = CoordinationService(store)
            values = [service.get_next_counter_value(path).result(120) for _ in range(times)]
            service.close()
            return values
    finally:
        client.close()
