"""Functions deployed through the admin REST API (no Java), on the real worker.

:class:`PulsarAdminRest` creates, updates, inspects and deletes functions with
the multipart upload ``pulsar-admin`` makes; records go through what it
deployed. A stateful function with two instances, deployed that way with
function secrets, shows the project's metrics labelled by instance in the
worker's ``/metrics`` (without the labels both instances publish the same
series). ``pulsar-state deploy`` itself, without Java, is in ``test_deploy``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pulsar
import pytest
import requests
from harness import PulsarEndpoint, unique_name, wait_until

from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.rest_admin import PulsarAdminRest

pytestmark = pytest.mark.functions


def _code(name: str) -> Path:
    return Path(str(resources.files("pulsar_state.functions") / name))


@pytest.fixture
def rest(pulsar_endpoint: PulsarEndpoint) -> Iterator[PulsarAdminRest]:
    admin = PulsarAdminRest(admin_url=pulsar_endpoint.admin_url)
    try:
        yield admin
    finally:
        admin.close()


def _answers(
    function: DeployedFunction, consumer: pulsar.Consumer, count: int, what: str
) -> list[str]:
    got = []
    for i in range(count):
        msg = function.receive(consumer, what=f"{what}: answer {i + 1} of {count}", timeout_s=120)
        consumer.acknowledge(msg)
        got.append(msg.data().decode())
    return got


def test_rest_client_creates_updates_and_deletes_a_function(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, rest: PulsarAdminRest
) -> None:
    name = unique_name("rest-smoke")
    fqn = ("public", "default", name)
    source, sink = (f"persistent://public/default/{name}-{s}" for s in ("in", "out"))
    config = {
        "className": "smoke.Exclaim",
        "inputs": [source],
        "output": sink,
        "subscriptionPosition": "Earliest",
        "parallelism": 1,
    }
    assert not rest.function_exists(fqn)
    rest.create_function(fqn=fqn, config=config, code=_code("smoke.py"))
    try:
        assert rest.function_exists(fqn)
        consumer = client.subscribe(sink, "t", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(source)
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as function:
            function.wait_ready(inputs=[source], instances=1, timeout_s=180)
            producer.send(b"one")
            assert _answers(function, consumer, 1, "created") == ["one!"]
            # an update (here: a user config value) replaces the running instance
            rest.update_function(
                fqn=fqn, config={**config, "userConfig": {"v": "2"}}, code=_code("smoke.py")
            )
            wait_until(
                lambda: (
                    PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
                    .run_json(
                        "functions",
                        "get",
                        "--tenant",
                        "public",
                        "--namespace",
                        "default",
                        "--name",
                        name,
                    )
                    .get("userConfig")
                    == {"v": "2"}
                ),
                timeout_s=120,
                interval_s=2,
                message="pulsar-admin sees the updated config",
            )
            function.wait_ready(inputs=[source], instances=1, timeout_s=180)
            producer.send(b"two")
            assert _answers(function, consumer, 1, "updated") == ["two!"]
            status = rest.function_status(fqn)
            assert status["numRunning"] == 1
    finally:
        assert rest.delete_function(fqn)
    assert not rest.function_exists(fqn)
    assert not rest.delete_function(fqn)  # not there any more: False, no error
    assert rest.delete_packages(fqn)  # Pulsar 4.0 kept the code packages; now gone
    assert rest.delete_packages(fqn) == []


def test_function_metrics_carry_the_instance_id(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, rest: PulsarAdminRest
) -> None:
    name = unique_name("rest-wc")
    fqn = ("public", "default", name)
    source = f"persistent://public/default/{name}-in"
    sink = f"persistent://public/default/{name}-out"
    state = f"persistent://public/default/{name}-state"
    created = pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=2
    )
    assert created.status_code in (200, 204), created.text
    config = {
        "className": "wordcount_entry.WordCount",
        "inputs": [source],
        "output": sink,
        "parallelism": 2,  # one partition each (failover subscription per partition)
        "retainOrdering": True,
        "subscriptionPosition": "Earliest",
        "processingGuarantees": "ATLEAST_ONCE",
        "userConfig": {"adminUrl": pulsar_endpoint.admin_url, "stateTopic": state},
        # the broker has no authentication: the token is carried, not checked
        "secrets": {"adminToken": "unchecked"},
    }
    rest.create_function(fqn=fqn, config=config, code=_code("wordcount_entry.py"))
    try:
        consumer = client.subscribe(sink, "t", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(source, batching_enabled=False)
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as function:
            function.wait_ready(inputs=[source], instances=2, timeout_s=240)
            # keys spread over both partitions, so both instances write the state topic
            for i in range(12):
                producer.send(f"w{i % 3} x".encode(), partition_key=f"key-{i}")
            _answers(function, consumer, 12, "word count")
            processed = {
                i["instanceId"]: i["status"]["numSuccessfullyProcessed"]
                for i in rest.function_status(fqn)["instances"]
            }
            assert sorted(processed) == [0, 1] and all(processed.values()), processed

        def writes_by_instance() -> dict[str, float]:
            text = requests.get(f"{pulsar_endpoint.admin_url}/metrics/", timeout=30).text
            found = {}
            for line in text.splitlines():
                if (
                    line.startswith("pulsar_state_writes_total{")
                    and f'fqfn="{"/".join(fqn)}"' in line
                ):
                    instance = re.search(r'instance_id="(\d+)"', line)
                    assert instance is not None, line
                    assert f'topic="{state}"' in line, line
                    found[instance[1]] = float(line.rsplit(" ", 1)[1])
            return found

        # the worker gathers the instances' metrics on its own schedule
        seen = wait_until(
            lambda: (w := writes_by_instance()) and sorted(w) == ["0", "1"] and w,
            timeout_s=120,
            interval_s=2,
            message="pulsar_state_writes_total of both instances in the worker's /metrics",
        )
        assert sum(seen.values()) >= 12, seen
    finally:
        rest.delete_function(fqn)
        rest.delete_packages(fqn)
