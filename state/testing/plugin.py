"""A pytest plugin with a real broker for your own tests (registered when the
package is installed; ``-p no:pulsar_state`` turns it off).

Its fixtures start nothing until a test asks for one:

- ``pulsar_state_broker`` (session): an :class:`~pulsar_state.testing.EmbeddedPulsar`,
  the embedded standalone on a temporary directory, started once per test
  session (or the cluster of ``PULSAR_STATE_TEST_SERVICE_URL`` and
  ``PULSAR_STATE_TEST_ADMIN_URL``, never the CLI's ``PULSAR_SERVICE_URL``);
- ``pulsar_state_client``: a ``pulsar.Client`` of it, closed after the test;
- ``pulsar_state_topic``: a topic name of its own for each test::

    from pulsar_state import PulsarMap

    def test_feature_flags(pulsar_state_broker, pulsar_state_client, pulsar_state_topic):
        with PulsarMap(
            pulsar_state_client, pulsar_state_topic, admin_url=pulsar_state_broker.admin_url
        ) as flags:
            flags.put("dark-mode", True).result(30)
            assert flags.get("dark-mode", latest=True).result(30) is True
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from pulsar_state.testing import EmbeddedPulsar
from pulsar_state.topic_names import namespace_topic

__all__ = ["pulsar_state_broker", "pulsar_state_client", "pulsar_state_topic"]


@pytest.fixture(scope="session")
def pulsar_state_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPulsar]:
    """A real broker for the session (see the module docstring)."""
    broker = EmbeddedPulsar(data_dir=tmp_path_factory.mktemp("pulsar"), functions=False)
    with broker:
        yield broker


@pytest.fixture
def pulsar_state_client(pulsar_state_broker: EmbeddedPulsar) -> Iterator[pulsar.Client]:
    """A client of :func:`pulsar_state_broker`, closed after the test."""
    client = pulsar.Client(
        pulsar_state_broker.service_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def pulsar_state_topic(request: pytest.FixtureRequest) -> str:
    """``persistent://public/default/<test name>-<random>``: a topic of the test's own."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return namespace_topic("public", "default", f"{name}-{uuid.uuid4().hex[:8]}")
