"""The function metadata manager, deployed from its config file with pulsar-admin."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import yaml
from harness import PulsarEndpoint, unique_name, wait_until

from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.standalone import StandaloneBroker

REPO = Path(__file__).resolve().parents[2]


def test_metadata_manager_versions_records(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    name = unique_name("fmm")
    config = yaml.safe_load((REPO / "deploy" / "functions" / "metadata-manager.yaml").read_text())
    requests_topic = f"persistent://public/default/{name}-requests"
    answers_topic = f"persistent://public/default/{name}-answers"
    records_topic = f"persistent://public/default/{name}-records"
    config.update({"name": name, "inputs": [requests_topic], "output": answers_topic})
    config["userConfig"] = {"metadataTopic": records_topic, "adminUrl": pulsar_endpoint.admin_url}
    config_file = tmp_path / "fmm.yaml"
    config_file.write_text(yaml.safe_dump(config))
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    fqn = ("public", "default", name)
    entry = Path(str(resources.files("pulsar_state.functions") / "metadata_manager_entry.py"))
    answers = client.subscribe(
        answers_topic, "test", initial_position=pulsar.InitialPosition.Earliest
    )
    admin.create_function(fqn=fqn, config_file=config_file, py=entry)
    try:
        wait_until(
            lambda: admin.function_status(fqn)["numRunning"] == 1,
            timeout_s=120,
            interval_s=1,
            message="metadata manager running",
        )
        producer = client.create_producer(requests_topic)

        def ask(request: dict[str, Any]) -> dict[str, Any]:
            producer.send(json.dumps(request).encode())
            msg = answers.receive(timeout_millis=60_000)
            answers.acknowledge(msg)
            return dict(json.loads(msg.data()))

        target = "acme/prod/enrich"
        spec = {"className": "enrich.Enrich", "inputs": ["persistent://acme/prod/raw"]}
        created = ask({"op": "create", "fqn": target, "config": spec})
        assert created["ok"] and created["version"] == 0
        assert not ask({"op": "create", "fqn": target, "config": spec})["ok"]
        updated = ask(
            {
                "op": "update",
                "fqn": target,
                "config": {**spec, "parallelism": 3},
                "expectedVersion": 0,
            }
        )
        assert updated["ok"] and updated["version"] == 1
        stale = ask({"op": "update", "fqn": target, "config": spec, "expectedVersion": 0})
        assert not stale["ok"] and "stale" in stale["error"]
        bad = ask({"op": "create", "fqn": "acme/x", "config": spec})
        assert not bad["ok"] and "tenant/namespace/name" in bad["error"]
        assert (
            "parallelism"
            in ask({"op": "create", "fqn": "acme/prod/y", "config": {**spec, "parallelism": 0}})[
                "error"
            ]
        )
        got = ask({"op": "get", "fqn": target})
        assert got["record"]["config"]["parallelism"] == 3
        ask({"op": "create", "fqn": "acme/prod/other", "config": spec})
        assert ask({"op": "delete", "fqn": "acme/prod/other", "expectedVersion": 0})["ok"]

        # Pulsar's own TableView reads the compacted record topic as it is
        view = client.create_table_view(records_topic)
        try:
            wait_until(lambda: view.get(target) is not None, timeout_s=30, message="TableView")
            record = json.loads(view.get(target))
            assert record["version"] == 1 and record["config"]["parallelism"] == 3
            keys: list[str] = []
            view.for_each(lambda k, v: keys.append(k))
            assert target in keys and "acme/prod/other" not in keys
        finally:
            view.close()
    finally:
        admin.delete_function(fqn)
    assert isinstance(pulsar_endpoint.broker, StandaloneBroker | None)
