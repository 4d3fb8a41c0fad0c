"""The SQL sink on the real broker, on SQLite and on a real PostgreSQL server.

On its own (``run_sink`` and the ``pulsar-state sink run`` process, SIGKILLed
mid-stream) and inside the functions runtime (deployed with ``pulsar-admin``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import yaml
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from postgres_server import sql_rows

from pulsar_state import PulsarMap
from pulsar_state.connectors.sink import SqlUpsertSink
from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.position import Position


def _send(client: pulsar.Client, topic: str, n: int = 30) -> tuple[dict[str, str], list[Position]]:
    """``n`` upserts over 7 keys and a delete (a tombstone); the expected rows, the positions."""
    producer = client.create_producer(topic, batching_enabled=False)
    expected: dict[str, str] = {}
    sent: list[Position] = []
    for i in range(n):
        key, value = f"k{i % 7}", json.dumps({"n": i})
        sent.append(Position.from_message_id(producer.send(value.encode(), partition_key=key)))
        expected[key] = value
    sent.append(Position.from_message_id(producer.send(b"", partition_key="k3")))  # a delete
    del expected["k3"]
    producer.close()
    return expected, sent


def _config(endpoint: PulsarEndpoint, topic: str, database: str) -> dict[str, Any]:
    return {
        "serviceUrl": endpoint.service_url,
        "adminUrl": endpoint.admin_url,
        "topic": topic,
        "subscription": "sink",
        "database": database,
        "table": "orders",
        "name": "orders-sink",
    }


def test_runner_is_effectively_once(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str
) -> None:
    topic = unique_topic("sink-in")
    expected, _ = _send(client, topic)
    meta = unique_topic("sink-meta")
    config = {**_config(pulsar_endpoint, topic, sql_database), "metadataTopic": meta}
    first = run_sink(config, max_idle_s=1.5)
    assert first.written == 31 and sql_rows(sql_database, "orders") == expected
    # replay everything (as after a crash before the acks): nothing changes
    consumer = client.subscribe(topic, "sink", consumer_type=pulsar.ConsumerType.Failover)
    consumer.seek(pulsar.MessageId.earliest)
    consumer.close()
    second = run_sink(config, max_idle_s=1.5)
    assert second.skipped == 31 and second.written == 0
    assert sql_rows(sql_database, "orders") == expected
    with PulsarMap[str, Any](client, meta, admin_url=pulsar_endpoint.admin_url) as records:
        record = records.get("sink/orders-sink", latest=True).result()
        assert record["version"] == 0 and record["config"]["table"] == "orders"
        assert "key TEXT PRIMARY KEY" in record["schema"]


def test_runner_killed_mid_stream_recovers_effectively_once(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str, tmp_path: Path
) -> None:
    """SIGKILL the runner process while it writes; the restarted one applies the rest once."""
    topic = unique_topic("sink-crash")
    expected, sent = _send(client, topic, n=300)
    config_file = tmp_path / "sink.yaml"
    config_file.write_text(yaml.safe_dump(_config(pulsar_endpoint, topic, sql_database)))
    cli = [sys.executable, "-m", "pulsar_state.cli", "sink", "run", "--config", str(config_file)]
    proc = subprocess.Popen([*cli, "--max-idle-s", "30"], stdout=subprocess.PIPE, text=True)
    try:
        wait_until(
            lambda: sql_rows(sql_database, "orders"), timeout_s=120, message="first rows written"
        )
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    # what the killed runner had committed, read from the database itself
    probe = SqlUpsertSink()
    probe.open({"database": sql_database, "table": "orders"})
    applied = probe.applied_position(topic)
    probe.close()
    assert applied is not None
    committed = sum(1 for p in sent if p <= applied)
    assert 1 <= committed <= len(sent)
    done = subprocess.run(
        [*cli, "--max-idle-s", "3"], capture_output=True, text=True, timeout=300, check=True
    )
    counts = re.search(r"written (\d+), skipped (\d+)", done.stdout)
    assert counts is not None, done.stdout
    written, skipped = int(counts[1]), int(counts[2])
    # every record not yet committed is written exactly once; the rest are skipped
    assert written == len(sent) - committed
    assert skipped <= committed
    assert sql_rows(sql_database, "orders") == expected


def test_sink_inside_the_functions_runtime(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str
) -> None:
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("sqlsink")
    fqn = ("public", "default", name)
    topic = f"persistent://public/default/{name}-in"
    entry = Path(str(resources.files("pulsar_state.functions") / "sink_entry.py"))
    user_config = {"database": sql_database, "table": "kv"}
    admin.create_function(
        fqn=fqn,
        py=entry,
        classname="sink_entry.SinkFunction",
        inputs=[topic],
        extra=["--retain-ordering", "--user-config", json.dumps(user_config)],
    )
    try:
        wait_until(lambda: admin.function_status(fqn)["numRunning"] == 1, timeout_s=120)
        expected, _ = _send(client, topic)
        wait_until(
            lambda: sql_rows(sql_database, "kv") == expected, timeout_s=120, message="rows in SQL"
        )
    finally:
        admin.delete_function(fqn)
