"""Session-wide fixtures: one real broker for the whole test session."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from harness import PulsarEndpoint, start_endpoint, stop_endpoint

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    # tests that restart or kill the broker run last
    items.sort(key=lambda item: item.get_closest_marker("fault") is not None)


@pytest.fixture
def admin_url(pulsar_endpoint: PulsarEndpoint) -> str:
    return pulsar_endpoint.admin_url


@pytest.fixture
def make_client(pulsar_endpoint: PulsarEndpoint) -> Iterator[Callable[[], pulsar.Client]]:
    """Extra clients (one per simulated process); all closed at teardown."""
    clients: list[pulsar.Client] = []

    def make() -> pulsar.Client:
        c = pulsar.Client(
            pulsar_endpoint.service_url,
            operation_timeout_seconds=15,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


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
