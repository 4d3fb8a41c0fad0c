"""Tests that take a topic from a live producer run on a broker of their own.

Pulsar 4.0.8 can deadlock when a producer is fenced while it closes or its
publishes complete (``docs/findings/pulsar-4.0.8-fencing-deadlock.md``). A
clean-clone run of the suite hit it in the fenced direct-write test
(2026-11-26): the session's broker wedged and every later test failed. Tests
marked ``fencing`` get the fencing broker through the ``broker_endpoint``,
``admin_url``, ``client`` and ``make_client`` fixtures (see ``conftest.py``).
"""

from __future__ import annotations

import pulsar
import pytest
import requests
from harness import PulsarEndpoint, unique_topic


@pytest.mark.fencing
def test_a_fencing_test_runs_on_the_fencing_broker(
    pulsar_endpoint: PulsarEndpoint,
    broker_endpoint: PulsarEndpoint,
    admin_url: str,
    client: pulsar.Client,
) -> None:
    if pulsar_endpoint.broker is None:
        pytest.skip("a broker by URL or a container: fencing tests share it")
    assert broker_endpoint.service_url != pulsar_endpoint.service_url
    assert admin_url == broker_endpoint.admin_url
    topic = unique_topic("fencing-broker")
    producer = client.create_producer(topic)
    producer.send(b"x")
    producer.close()
    path = f"/admin/v2/persistent/{topic.split('://', 1)[1]}/stats"
    # the client fixture's message reached the fencing broker, not the session's
    assert requests.get(admin_url + path, timeout=30).json()["msgInCounter"] == 1
    assert requests.get(pulsar_endpoint.admin_url + path, timeout=30).status_code == 404


def test_other_tests_run_on_the_sessions_broker(
    pulsar_endpoint: PulsarEndpoint, broker_endpoint: PulsarEndpoint, admin_url: str
) -> None:
    assert broker_endpoint is pulsar_endpoint
    assert admin_url == pulsar_endpoint.admin_url
