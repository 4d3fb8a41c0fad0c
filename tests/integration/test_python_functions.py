"""A Python function deployed with the distribution's own pulsar-admin runs on the broker."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pulsar
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
