"""The function metadata manager, deployed from its config file with pulsar-admin."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import pytest
import yaml
from harness import PulsarEndpoint, function_instance_pids, unique_name, wait_until

from pulsar_state import PulsarMap
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.deploy.standalone import StandaloneBroker

REPO = Path(__file__).resolve().parents[2]


ENTRY = "metadata_manager_entry.py"


@dataclass(frozen=True)
class _Deployment:
    name: str
    fqn: tuple[str, str, str]
    config_file: Path
    requests_topic: str
    answers_topic: str
    records_topic: str


def _render(endpoint: PulsarEndpoint, tmp_path: Path, prefix: str, **overrides: Any) -> _Deployment:
    """The shipped config file with a unique name, topics and the admin URL."""
    name = unique_name(prefix)
    config = yaml.safe_load((REPO / "deploy" / "functions" / "metadata-manager.yaml").read_text())
    topics = [
        f"persistent://public/default/{name}-{part}" for part in ("requests", "answers", "records")
    ]
    config.update({"name": name, "inputs": [topics[0]], "output": topics[1], **overrides})
    config["userConfig"] = {"metadataTopic": topics[2], "adminUrl": endpoint.admin_url}
    config_file = tmp_path / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    return _Deployment(name, ("public", "default", name), config_file, *topics)


def _entry() -> Path:
    return Path(str(resources.files("pulsar_state.functions") / ENTRY))


def test_metadata_manager_versions_records(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    d = _render(pulsar_endpoint, tmp_path, "fmm")
    fqn, requests_topic, records_topic = d.fqn, d.requests_topic, d.records_topic
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    answers = client.subscribe(
        d.answers_topic, "test", initial_position=pulsar.InitialPosition.Earliest
    )
    admin.create_function(fqn=fqn, config_file=d.config_file, py=_entry())
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


def test_metadata_manager_survives_instance_kills_an_update_and_a_delete(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """Parallelism 2 (one active consumer, the other standing by), each instance
    SIGKILLed in turn mid-stream, ``functions update`` to 1, ``functions delete``:
    every record ends with exactly the versions its acknowledged requests made."""
    if pulsar_endpoint.broker is None:
        pytest.skip("needs the embedded broker (kills function instance processes)")
    d = _render(pulsar_endpoint, tmp_path, "fmm-ha", parallelism=2)
    name, fqn, requests_topic, records_topic = d.name, d.fqn, d.requests_topic, d.records_topic
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    answers = client.subscribe(
        d.answers_topic, "test", initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(requests_topic)
    seen: dict[int, dict[str, Any]] = {}
    request_ids = iter(range(1_000_000))

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        """Send and wait for this request's answer (redelivered duplicates are skipped)."""
        rid = next(request_ids)
        producer.send(json.dumps({**request, "requestId": rid}).encode())
        while rid not in seen:
            msg = answers.receive(timeout_millis=120_000)
            answers.acknowledge(msg)
            answer = dict(json.loads(msg.data()))
            seen.setdefault(answer["requestId"], answer)
        return seen[rid]

    def running(n: int) -> bool:
        status = admin.function_status(fqn)
        return status["numInstances"] == n and status["numRunning"] == n

    spec = {"className": "enrich.Enrich", "inputs": ["persistent://acme/prod/raw"]}
    versions: dict[str, int] = {}

    def work(round_: str, count: int) -> None:
        for i in range(count):
            target = f"acme/{round_}/f{i}"
            assert ask({"op": "create", "fqn": target, "config": spec})["ok"]
            versions[target] = 0
            for v in range(2):
                updated = ask(
                    {
                        "op": "update",
                        "fqn": target,
                        "config": {**spec, "parallelism": v + 2},
                        "expectedVersion": v,
                    }
                )
                assert updated["ok"] and updated["version"] == v + 1, updated
                versions[target] = v + 1

    admin.create_function(fqn=fqn, config_file=d.config_file, py=_entry())
    try:
        wait_until(lambda: running(2), timeout_s=180, interval_s=1, message="2 instances")
        work("before", 3)
        for victim in (0, 1):  # kill each instance in turn: the active one dies at least once
            pids = function_instance_pids(name)
            assert len(pids) == 2, pids
            os.kill(pids[victim], signal.SIGKILL)
            work(f"after-kill-{victim}", 3)
            wait_until(lambda: running(2), timeout_s=180, interval_s=1, message="restarted")
        admin.update_parallelism(fqn, 1)
        wait_until(lambda: running(1), timeout_s=180, interval_s=1, message="updated to 1")
        work("after-update", 3)
        assert ask({"op": "delete", "fqn": "acme/before/f0", "expectedVersion": 2})["ok"]
        del versions["acme/before/f0"]
    finally:
        admin.delete_function(fqn)
    listed = admin.run("functions", "list", "--tenant", "public", "--namespace", "default")
    assert name not in listed.split()
    wait_until(lambda: not function_instance_pids(name), timeout_s=60, message="instances gone")
    # the records outlive the function: exactly the acknowledged versions, nothing else
    with PulsarMap[str, Any](client, records_topic, admin_url=pulsar_endpoint.admin_url) as m:
        records = m.items(latest=True).result(60)
    assert {k: r["version"] for k, r in records.items()} == versions
