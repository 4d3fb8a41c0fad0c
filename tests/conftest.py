"""Session-wide fixtures: one real broker for the whole test session."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import (
    PulsarEndpoint,
    session_data_dir,
    start_endpoint,
    start_fencing_endpoint,
    stop_endpoint,
    unless_broker_deadlocked,
)
from postgres_server import PostgresServer, start_server

from pulsar_state.runtime.instance_metrics import unlabel_instance_metrics
from pulsar_state.scheduling.in_order import InOrderGate

INTEGRATION_DIR = Path(__file__).parent / "integration"
CLUSTER_DIR = Path(__file__).parent / "cluster"


#: the CLI's and the library's connection variables: exported in a user's shell
#: they name the user's cluster. The suite never reads them (its own broker
#: comes from PULSAR_STATE_TEST_*) and drops them, so that no CLI or function
#: the suite starts inherits them: a test writes to the user's cluster only
#: when pointed there on purpose.
USER_CLUSTER_VARIABLES = (
    "PULSAR_SERVICE_URL",
    "PULSAR_ADMIN_URL",
    "PULSAR_AUTH_TOKEN",
    "PULSAR_AUTH_PLUGIN",
    "PULSAR_AUTH_PARAMS",
    "PULSAR_TLS_TRUST_CERT_PATH",
    "PULSAR_TLS_ALLOW_INSECURE",
    "PULSAR_TLS_ENABLE_HOSTNAME_VERIFICATION",
    "PULSAR_CLIENT_CONF",
    "PULSAR_STATE_FUNCTION_ADMIN_URL",
    "PULSAR_STATE_FUNCTION_AUTH_TOKEN",
    "PULSAR_STATE_FUNCTION_TLS_TRUST_CERT_PATH",
)


def pytest_configure(config: pytest.Config) -> None:
    dropped = [name for name in USER_CLUSTER_VARIABLES if os.environ.pop(name, None) is not None]
    if dropped:
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"ignoring {', '.join(dropped)} (a cluster of yours?): the suite uses its own "
                "broker, or PULSAR_STATE_TEST_SERVICE_URL and PULSAR_STATE_TEST_ADMIN_URL"
            ),
            stacklevel=2,
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parents = Path(str(item.fspath)).parents
        if INTEGRATION_DIR in parents:
            item.add_marker(pytest.mark.integration)
        if CLUSTER_DIR in parents:
            item.add_marker(pytest.mark.cluster)
    # tests that restart or kill the broker run last, then those of the local
    # cluster (started on first use: its four JVMs idle through nothing else)
    items.sort(
        key=lambda item: (
            item.get_closest_marker("cluster") is not None,
            item.get_closest_marker("fault") is not None,
        )
    )


@pytest.fixture(autouse=True)
def _plain_metrics() -> Iterator[None]:
    """A function run in-process labels this process's metrics with its instance
    (once per process, as in a worker): undo it after each test, so that every
    test reads the plain series whatever ran before it."""
    yield
    unlabel_instance_metrics()


@pytest.fixture(autouse=True)
def _gates_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every in-order gate a test made (most unit tests leave theirs open):
    a gate holding a message asks for its redelivery on a timer, doubling to
    every 30 s, for as long as it is open; left open, its timers ran for the
    rest of the session, calling the test's fake consumers and logging "still
    held" into every later test's output."""
    made: list[InOrderGate] = []
    init = InOrderGate.__init__

    def recorded(self: InOrderGate, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(InOrderGate, "__init__", recorded)
    yield
    for gate in made:
        gate.close()


#: the broker of a test marked ``fencing`` (set by ``_fencing_broker``)
_FENCING_BROKER = pytest.StashKey[PulsarEndpoint]()


@pytest.fixture(autouse=True)
def _fencing_broker(request: pytest.FixtureRequest) -> None:
    """A test marked ``fencing`` takes the topic from a live producer with
    ``ExclusiveWithFencing``, which can deadlock a Pulsar 4.0.8 broker
    (``docs/findings/pulsar-4.0.8-fencing-deadlock.md``): it runs on the
    fencing broker (:func:`harness.start_fencing_endpoint`), so that a deadlock
    stops no other test, and :func:`pytest_pyfunc_call` runs it once more on a
    fresh one if the broker's JVM reports that deadlock."""
    if request.node.get_closest_marker("fencing") is not None:
        request.node.stash[_FENCING_BROKER] = request.getfixturevalue("fencing_endpoint")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    endpoint = pyfuncitem.stash.get(_FENCING_BROKER, None)
    if endpoint is None:
        return None  # pytest calls the test as usual
    args = {
        name: pyfuncitem.funcargs[name] for name in inspect.signature(pyfuncitem.obj).parameters
    }
    unless_broker_deadlocked(endpoint, lambda: pyfuncitem.obj(**args), what=pyfuncitem.nodeid)
    return True


@pytest.fixture
def broker_endpoint(
    request: pytest.FixtureRequest, pulsar_endpoint: PulsarEndpoint, _fencing_broker: None
) -> PulsarEndpoint:
    """The broker this test runs on: the session's, or the fencing broker for a
    test marked ``fencing``."""
    endpoint: PulsarEndpoint = request.node.stash.get(_FENCING_BROKER, pulsar_endpoint)
    return endpoint


@pytest.fixture
def admin_url(broker_endpoint: PulsarEndpoint) -> str:
    return broker_endpoint.admin_url


@pytest.fixture
def make_client(broker_endpoint: PulsarEndpoint) -> Iterator[Callable[[], pulsar.Client]]:
    """Extra clients (one per simulated process); all closed at teardown."""
    clients: list[pulsar.Client] = []

    def make() -> pulsar.Client:
        c = pulsar.Client(
            broker_endpoint.service_url,
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
def client(broker_endpoint: PulsarEndpoint) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        broker_endpoint.service_url,
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
    server = start_server(session_data_dir().name)
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
