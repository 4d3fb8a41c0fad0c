"""The SQL sink on the real broker: on its own and inside the functions runtime."""

from __future__ import annotations

import json
import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until

from pulsar_state import PulsarMap
from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli


def _rows(db: Path, table: str) -> dict[str, str]:
    if not db.exists():
        return {}
    with sqlite3.connect(db) as conn:
        try:
            return dict(conn.execute(f"SELECT key, value FROM {table}").fetchall())
        except sqlite3.OperationalError:
            return {}


def _send(client: pulsar.Client, topic: str) -> dict[str, str]:
    producer = client.create_producer(topic)
    expected: dict[str, str] = {}
    for i in range(30):
        key, value = f"k{i % 7}", json.dumps({"n": i})
        producer.send(value.encode(), partition_key=key)
        expected[key] = value
    producer.send(b"", partition_key="k3")  # a delete
    del expected["k3"]
    producer.close()
    return expected


def test_runner_is_effectively_once(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    topic = unique_topic("sink-in")
    expected = _send(client, topic)
    db = tmp_path / "sink.db"
    meta = unique_topic("sink-meta")
    config: dict[str, Any] = {
        "serviceUrl": pulsar_endpoint.service_url,
        "adminUrl": pulsar_endpoint.admin_url,
        "topic": topic,
        "subscription": "sink",
        "database": str(db),
        "table": "orders",
        "name": "orders-sink",
        "metadataTopic": meta,
    }
    first = run_sink(config, max_idle_s=1.5)
    assert first.written == 31 and _rows(db, "orders") == expected
    # replay everything (as after a crash before the acks): nothing changes
    consumer = client.subscribe(topic, "sink", consumer_type=pulsar.ConsumerType.Failover)
    consumer.seek(pulsar.MessageId.earliest)
    consumer.close()
    second = run_sink(config, max_idle_s=1.5)
    assert second.skipped == 31 and second.written == 0
    assert _rows(db, "orders") == expected
    with PulsarMap[str, Any](client, meta, admin_url=pulsar_endpoint.admin_url) as records:
        record = records.get("sink/orders-sink", latest=True).result()
        assert record["version"] == 0 and record["config"]["table"] == "orders"


def test_sink_inside_the_functions_runtime(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("sqlsink")
    fqn = ("public", "default", name)
    topic = f"persistent://public/default/{name}-in"
    db = tmp_path / "fn.db"
    entry = Path(str(resources.files("pulsar_state.functions") / "sink_entry.py"))
    user_config = {"database": str(db), "table": "kv"}
    admin.create_function(
        fqn=fqn,
        py=entry,
        classname="sink_entry.SinkFunction",
        inputs=[topic],
        extra=["--retain-ordering", "--user-config", json.dumps(user_config)],
    )
    try:
        wait_until(lambda: admin.function_status(fqn)["numRunning"] == 1, timeout_s=120)
        expected = _send(client, topic)
        wait_until(lambda: _rows(db, "kv") == expected, timeout_s=120, message="rows in SQLite")
    finally:
        admin.delete_function(fqn)
