"""MetadataCache freshness on the Pulsar-backed store, against the real broker:
writers and readers in threads over three sessions, a bounded number of rounds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from cache_model import check_caches_converge
from harness import PulsarEndpoint, unique_name, unique_topic

from pulsar_state import MetadataStore


@pytest.fixture
def stores(pulsar_endpoint: PulsarEndpoint) -> Iterator[list[MetadataStore]]:
    client = pulsar.Client(
        pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    topic = unique_topic("cache")
    opened = [MetadataStore(client, topic, admin_url=pulsar_endpoint.admin_url) for _ in range(3)]
    yield opened
    for s in opened:
        s.close()
    client.close()


@pytest.mark.parametrize("round_", range(2))
def test_caches_converge_under_concurrent_writes(stores: list[MetadataStore], round_: int) -> None:
    base = f"/{unique_name('cache')}"

    def stored(path: str) -> Any:
        got = stores[0].get(path, latest=True).result(30)
        return None if got is None else json.loads(got.value)

    reads = check_caches_converge(
        stores=list(stores),
        stored_value=stored,
        paths=[f"{base}/{i}" for i in range(3)],
        writers=3,
        ops_per_writer=25,
        readers=3,
        seed=round_,
        settle_s=20.0,
    )
    assert reads > 0
