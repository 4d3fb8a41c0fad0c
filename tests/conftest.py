"""Session-wide fixtures: one real broker for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from harness import PulsarEndpoint, start_endpoint, stop_endpoint

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def pulsar_endpoint() -> Iterator[PulsarEndpoint]:
    endpoint = start_endpoint()
    try:
        yield endpoint
    finally:
        stop_endpoint(endpoint)


@pytest.fixture
def client(pulsar_endpoint: PulsarEndpoint) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        pulsar_endpoint.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        yield c
    finally:
        c.close()
