"""Session-wide fixtures: one real broker for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from harness import PulsarEndpoint, start_endpoint, start_fencing_endpoint, stop_endpoint
from postgres_server import PostgresServer, start_server

from pulsar_state.instance_metrics import unlabel_instance_metrics

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
    # tests that restart or kill the broker run last
    items.sort(key=lambda item: item.get_closest_marker("fault") is not None)


@pytest.fixture(autouse=True)
def _plain_metrics() -> Iterator[None]:
    """A function run in-process labels this process's metrics with its instance
    (once per process, as in a worker): undo it after each test, so that every
    test reads the plain series whatever ran before it."""
    yield
    unlabel_instance_metrics()


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


@pytest.fixture(scope="session")
def fencing_endpoint(pulsar_endpoint: PulsarEndpoint) -> Iterator[PulsarEndpoint]:
    """A broker for tests whose writers fence each other densely (see
    :func:`harness.start_fencing_endpoint`); started on first use."""
    endpoint = start_fencing_endpoint(pulsar_endpoint)
    try:
        yield endpoint
    finally:
        if endpoint is not pulsar_endpoint:
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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (see ``postgres_server.py``), started once if a test asks."""
    data_dir = os.environ.get("PULSAR_STATE_TEST_DATA_DIR")
    server = start_server(Path(data_dir).name if data_dir else "test")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The SQL sink's ``database``: a SQLite file, or a fresh database on the real server."""
    if request.param == "sqlite":
        return str(tmp_path / "sink.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()
