"""`pulsar-state functions create/update/delete/get/list/status` with a `pulsar-state worker`.

The installed commands, on the real broker (no functions worker of Pulsar's):
a record goes through the group's metadata manager, versioned; a stale update
or delete is refused; the worker runs what is created (the word count counts),
an update restarts it with the new parallelism, a delete stops it.
"""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, pulsar_state_cli, pulsar_state_worker, unique_name, wait_until
from test_functions_worker import subscription_consumers

from pulsar_state import PulsarMap


@pytest.mark.timeout(600)
def test_functions_commands_manage_what_the_worker_runs(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    name = unique_name("pfc")
    fqn = f"public/default/{name}"
    source = f"persistent://public/default/{name}-in"
    state_topic = f"persistent://public/default/{name}-state"
    created = pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=2
    )
    assert created.status_code in (200, 204), created.text
    with pulsar_state_worker(pulsar_endpoint, name, tmp_path / "worker.log") as env:

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return pulsar_state_cli("functions", *args, "--timeout", "60", env=env)

        py = str(resources.files("pulsar_state.functions") / "wordcount_entry.py")
        user_config = json.dumps({"stateTopic": state_topic, "adminUrl": pulsar_endpoint.admin_url})
        create = ["create", "--name", name, "--py", py, "--classname", "wordcount_entry.WordCount"]
        create += ["--inputs", source, "--output", f"{source}-out", "--parallelism", "2"]
        create += ["--retain-ordering", "--subs-position", "Earliest", "--user-config", user_config]
        done = cli(*create)
        assert f"Created {fqn} (version 0)" in done.stdout, done.stderr
        again = cli(*create)
        assert again.returncode == 1 and "exists" in again.stderr, again.stderr

        listed = cli("list", "--output", "json")
        assert json.loads(listed.stdout) == [fqn], listed.stderr
        got = json.loads(cli("get", "--fqfn", fqn, "--output", "json").stdout)
        assert got["version"] == 0 and got["config"]["parallelism"] == 2

        def status() -> dict[str, Any]:
            out = cli("status", "--name", name, "--output", "json")
            assert out.returncode == 0, out.stderr
            return dict(json.loads(out.stdout))

        wait_until(
            lambda: status()["numRunning"] == 2,
            timeout_s=120,
            interval_s=1,
            message="two instances on the live worker",
        )
        producer = client.create_producer(source)
        for i in range(10):
            producer.send(f"alpha w{i}".encode())
        with PulsarMap[str, Any](client, state_topic, admin_url=pulsar_endpoint.admin_url) as state:
            wait_until(
                lambda: state.get("counter/alpha", latest=True).result(60) == 10,
                timeout_s=120,
                interval_s=0.5,
                message="counted",
            )

        # a stale update is refused; one on the current version goes through
        stale = cli("update", "--name", name, "--parallelism", "1", "--expected-version", "5")
        assert stale.returncode == 1 and "stale" in stale.stderr, stale.stderr
        updated = cli("update", "--name", name, "--parallelism", "1")
        assert f"Updated {fqn} (version 1)" in updated.stdout, updated.stderr
        wait_until(
            lambda: subscription_consumers(pulsar_endpoint, source, fqn) == [f"{fqn}:0"] * 2,
            timeout_s=120,
            interval_s=0.5,
            message="one instance after the update",
        )
        assert json.loads(cli("get", "--fqfn", fqn, "--output", "json").stdout)["version"] == 1

        old = cli("delete", "--name", name, "--expected-version", "0")
        assert old.returncode == 1 and "stale" in old.stderr, old.stderr
        assert cli("delete", "--name", name).returncode == 0
        wait_until(
            lambda: subscription_consumers(pulsar_endpoint, source, fqn) == [],
            timeout_s=120,
            interval_s=0.5,
            message="no instance after the delete",
        )
        assert cli("status", "--name", name).returncode == 3
        assert json.loads(cli("list", "--output", "json").stdout) == []
