"""A function run by `pulsar-state worker` gets its secrets from the worker's environment.

The record names an environment variable per secret (``--secrets``), never the
value: the token stays off the metadata topic, and ``context.get_secret`` in
the instance gives the value the worker has.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pulsar
import pytest
from harness import PulsarEndpoint, pulsar_state_cli, pulsar_state_worker, unique_name, wait_until

FUNCTION = textwrap.dedent(
    """
    from pulsar import Function

    class Tell(Function):
        def process(self, input, context):
            return f"{input}:{context.get_secret('token')}:{context.get_secret('absent')}"
    """
)


@pytest.mark.timeout(600)
def test_a_secret_comes_from_the_workers_environment_not_the_record(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    name = unique_name("psec")
    source = f"persistent://public/default/{name}-in"
    output = f"{source}-out"
    code = tmp_path / "tell.py"
    code.write_text(FUNCTION)
    with pulsar_state_worker(
        pulsar_endpoint, name, tmp_path / "worker.log", worker_env={"TELL_TOKEN": "s3cret-value"}
    ) as env:
        earliest = pulsar.InitialPosition.Earliest
        results = client.subscribe(output, "check", initial_position=earliest)
        refused = pulsar_state_cli(
            "functions", "create", "--name", name, "--py", str(code), "--classname", "tell.Tell",
            "--inputs", source, "--secrets", json.dumps({"token": "eyJ.a.token"}), env=env,
        )  # fmt: skip
        assert refused.returncode != 0 and "environment variable" in refused.stderr
        created = pulsar_state_cli(
            "functions", "create", "--name", name, "--py", str(code), "--classname", "tell.Tell",
            "--inputs", source, "--output", output, "--subs-position", "Earliest",
            "--secrets", json.dumps({"token": "TELL_TOKEN", "absent": "TELL_NOT_SET"}),
            "--timeout", "60", env=env,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        record = pulsar_state_cli(
            "functions", "get", "--name", name, "--output", "json", env=env
        )  # fmt: skip
        assert "s3cret-value" not in record.stdout
        assert json.loads(record.stdout)["config"]["secrets"]["token"] == "TELL_TOKEN"

        producer = client.create_producer(source)
        wait_until(
            lambda: json.loads(
                pulsar_state_cli(
                    "functions", "status", "--name", name, "--output", "json", env=env
                ).stdout
                or "{}"
            ).get("numRunning") == 1,
            timeout_s=120,
            interval_s=1,
            message="the instance runs",
        )  # fmt: skip
        producer.send(b"ping")
        message = results.receive(timeout_millis=120_000)
        assert message.data().decode() == "ping:s3cret-value:None"
