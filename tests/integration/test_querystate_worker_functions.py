"""`pulsar-state functions querystate` for a function `pulsar-state worker` runs.

On the real broker (Pulsar's admin API knows no such function): the word count
runs on a worker group with a state topic of its own (`userConfig.stateTopic`);
`querystate --group G` finds it through the group's records and prints its
count, as does the group named by the environment (the documented default's
way); another group, which does not record it, leaves it not found (exit 3).
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, pulsar_state_cli, pulsar_state_worker, unique_name, wait_until

from pulsar_state import PulsarMap


@pytest.mark.timeout(600)
def test_querystate_finds_a_worker_functions_own_state_topic(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    name = unique_name("pqs")
    source = f"persistent://public/default/{name}-in"
    state_topic = f"persistent://public/default/{name}-own-state"
    with pulsar_state_worker(pulsar_endpoint, name, tmp_path / "worker.log") as env:
        py = str(resources.files("pulsar_state.functions") / "wordcount_entry.py")
        user_config = json.dumps({"stateTopic": state_topic, "adminUrl": pulsar_endpoint.admin_url})
        create = ["functions", "create", "--name", name, "--py", py]
        create += ["--classname", "wordcount_entry.WordCount", "--inputs", source]
        create += ["--retain-ordering", "--subs-position", "Earliest", "--user-config", user_config]
        done = pulsar_state_cli(*create, env=env)
        assert done.returncode == 0, done.stderr
        producer = client.create_producer(source)
        for i in range(3):
            producer.send(f"alpha beta{i}".encode())
        producer.close()
        with PulsarMap[str, Any](client, state_topic, admin_url=pulsar_endpoint.admin_url) as state:
            wait_until(
                lambda: state.get("counter/alpha", latest=True).result(60) == 3,
                timeout_s=120,
                interval_s=0.5,
                message="counted",
            )

        query = ["functions", "querystate", "--name", name, "--key", "alpha"]
        query += ["--output", "json", "--timeout", "60"]
        cluster = {k: env[k] for k in ("PULSAR_SERVICE_URL", "PULSAR_ADMIN_URL")}
        no_group = "PULSAR_STATE_FUNCTIONS_GROUP"
        assert no_group not in os.environ
        by_option = pulsar_state_cli(*query, "--group", name, env=cluster)
        assert by_option.returncode == 0, by_option.stderr
        found = json.loads(by_option.stdout)
        assert (found["key"], found["numberValue"]) == ("alpha", 3)
        assert found["version"] > 0
        by_env = pulsar_state_cli(*query, env=env)  # the group of the environment
        assert json.loads(by_env.stdout)["numberValue"] == 3, by_env.stderr
        other = pulsar_state_cli(*query, "--group", unique_name("none"), env=cluster)
        assert other.returncode == 3, (other.stdout, other.stderr)
        assert f"Function {name} doesn't exist" in other.stderr
