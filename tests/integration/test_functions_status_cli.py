"""`pulsar-state functions status` reports each instance's counters, as `pulsar-admin` does.

A `pulsar-state worker` runs a function that raises on some messages; the
worker publishes its instances' counters into the group's status map and the
CLI, another process, prints them: messages received, processed, user
exceptions with the latest exceptions' text and time, restarts, the worker
running it and whether it runs.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, pulsar_state_cli, pulsar_state_worker, unique_name, wait_until

from pulsar_state.functions.function_admin import FunctionAdmin
from pulsar_state.functions.worker_config import WorkerTopics

FUNCTION = textwrap.dedent(
    """
    from pulsar import Function

    class Picky(Function):
        def process(self, input, context):
            if input.startswith("bad"):
                raise ValueError(f"refused {input}")
            return input.upper()
    """
)
BAD = ("bad-2", "bad-5", "bad-8")


@pytest.mark.timeout(600)
def test_status_counts_what_each_instance_did(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    name = unique_name("pst")
    source = f"persistent://public/default/{name}-in"
    code = tmp_path / "picky.py"
    code.write_text(FUNCTION)
    with pulsar_state_worker(pulsar_endpoint, name, tmp_path / "worker.log") as env:

        def status() -> dict[str, Any]:
            out = pulsar_state_cli(
                "functions", "status", "--name", name, "--output", "json", env=env
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            return dict(json.loads(out.stdout))

        created = pulsar_state_cli(
            "functions", "create", "--name", name, "--py", str(code),
            "--classname", "picky.Picky", "--inputs", source, "--output", f"{source}-out",
            "--processing-guarantees", "ATMOST_ONCE", "--subs-position", "Earliest",
            "--timeout", "60", env=env,
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        wait_until(
            lambda: status()["numRunning"] == 1,
            timeout_s=120,
            interval_s=1,
            message="the instance runs",
        )
        producer = client.create_producer(source)
        lines = [BAD[(i - 2) // 3] if i % 3 == 2 else f"good-{i}" for i in range(10)]
        assert sorted(line for line in lines if line.startswith("bad")) == sorted(BAD)
        for line in lines:
            producer.send(line.encode())
        producer.close()

        done = wait_until(
            lambda: (s := status())["instances"][0]["status"]["numReceived"] == len(lines) and s,
            timeout_s=120,
            interval_s=1,
            message="the worker reported every message received",
        )
        workers = FunctionAdmin(client, WorkerTopics.of(name), timeout_s=60).members()
    assert done["numInstances"] == 1 and done["numRunning"] == 1
    (instance,) = done["instances"]
    counters = instance["status"]
    assert instance["instanceId"] == 0
    assert counters["running"] is True and [counters["workerId"]] == workers
    assert counters["numReceived"] == 10
    assert counters["numSuccessfullyProcessed"] == 7
    assert counters["numUserExceptions"] == 3
    assert counters["numSystemExceptions"] == 0 and counters["numRestarts"] == 0
    latest = counters["latestUserExceptions"]
    assert [e["exceptionString"].splitlines()[-1] for e in latest] == [
        f"ValueError: refused {bad}" for bad in BAD
    ]
    assert all(e["timestampMs"] > 0 for e in latest)
    assert counters["lastInvocationTime"] >= latest[-1]["timestampMs"]
