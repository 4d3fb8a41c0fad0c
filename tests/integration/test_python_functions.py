"""A Python function deployed with the distribution's own pulsar-admin runs on the broker."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, wait_until

from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli


def test_smoke_function_runs_on_the_worker(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client
) -> None:
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("smoke")
    fqn = ("public", "default", name)
    source = f"persistent://public/default/{name}-in"
    sink = f"persistent://public/default/{name}-out"
    consumer = client.subscribe(sink, "it", initial_position=pulsar.InitialPosition.Earliest)
    py = Path(str(resources.files("pulsar_state.functions") / "smoke.py"))
    admin.create_function(fqn=fqn, py=py, classname="smoke.Exclaim", inputs=[source], output=sink)
    try:
        # running and subscribed: the subscription starts at the latest position,
        # so a message sent before the instance subscribed would never reach it
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as deployed:
            deployed.wait_ready(inputs=[source], instances=1, timeout_s=120)
        producer = client.create_producer(source)
        for word in ("a", "b", "c"):
            producer.send(word.encode())
        got = []
        for _ in range(3):
            msg = consumer.receive(timeout_millis=60_000)
            got.append(msg.data().decode())
            consumer.acknowledge(msg)
        assert got == ["a!", "b!", "c!"]
        status = wait_until(
            lambda: (
                (s := admin.function_status(fqn))["instances"][0]["status"][
                    "numSuccessfullyProcessed"
                ]
                == 3
                and s
            ),
            timeout_s=60,
            message="function status reports 3 processed",
        )
        assert status["instances"][0]["status"]["numUserExceptions"] == 0
    finally:
        admin.delete_function(fqn)


def _ports(log_dir: Path) -> list[tuple[str, str]]:
    """(control port, metrics port) of each start of the instance, from its log."""
    text = "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("*.log")))
    control = re.findall(r"Serving InstanceCommunication on port (\d+)", text)
    metrics = re.findall(r"metrics_port=(\d+)", text)
    return list(zip(control, metrics, strict=False))


def test_an_instance_restarted_through_the_admin_api_gets_new_ports(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    """What ``DeployedFunction.wait_ready`` relies on to unstick an instance
    that was given a port already taken: the worker's own restarts reuse an
    instance's ports, a restart through the admin API picks new ones."""
    if pulsar_endpoint.broker is None:
        pytest.skip("reads the instance's log on the worker's machine")
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("ports")
    fqn = ("public", "default", name)
    source = f"persistent://public/default/{name}-in"
    py = Path(str(resources.files("pulsar_state.functions") / "smoke.py"))
    admin.create_function(fqn=fqn, py=py, classname="smoke.Exclaim", inputs=[source])
    log_dir = pulsar_endpoint.broker.data_dir / "logs" / "functions" / "public" / "default" / name
    try:
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as deployed:
            deployed.wait_ready(inputs=[source], instances=1, timeout_s=120)
            [first] = wait_until(lambda: _ports(log_dir), message="the instance's ports logged")
            assert deployed.restart_instance(0)
            starts = wait_until(
                lambda: _ports(log_dir)[1:] and _ports(log_dir),
                timeout_s=120,
                message="the instance started again",
            )
            deployed.wait_ready(inputs=[source], instances=1, timeout_s=120)
        assert starts[0] == first
        assert starts[1][0] != first[0] and starts[1][1] != first[1], starts
    finally:
        admin.delete_function(fqn)
