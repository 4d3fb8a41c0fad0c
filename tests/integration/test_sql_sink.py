"""The SQL sink on the real broker, on SQLite and on a real PostgreSQL server.

On its own (``run_sink`` and the ``pulsar-state sink run`` process, SIGKILLed
mid-stream), as a group of runner processes sharing a partitioned input through
the scheduler (joined, SIGKILLed), and inside the functions runtime (deployed
with ``pulsar-admin``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import pytest
import yaml
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from postgres_server import sql_rows

from pulsar_state import PulsarMap
from pulsar_state.connectors.sink import SqlUpsertSink
from pulsar_state.connectors.sink_function import owner_key
from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.deploy.function_ready import DeployedFunction
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.position import Position
from pulsar_state.scheduling.scheduler import LEADER_KEY


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
    """Deployed with pulsar-admin, parallelism 2, on a 2-partition input: the rows
    land, the config record and each partition's consuming instance are in the core."""
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("sqlsink")
    fqn = ("public", "default", name)
    topic = f"persistent://public/default/{name}-in"
    meta = f"persistent://public/default/{name}-meta"
    pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=2
    ).raise_for_status()
    entry = Path(str(resources.files("pulsar_state.connectors") / "sink_entry.py"))
    user_config = {
        "database": sql_database,
        "table": "kv",
        "metadataTopic": meta,
        "adminUrl": pulsar_endpoint.admin_url,
    }
    admin.create_function(
        fqn=fqn,
        py=entry,
        classname="sink_entry.SinkFunction",
        inputs=[topic],
        extra=[
            "--retain-ordering",
            "--parallelism",
            "2",
            "--user-config",
            json.dumps(user_config),
        ],
    )
    try:
        # as `pulsar-state deploy` waits: running, subscribed, a stuck instance restarted
        with DeployedFunction(admin_url=pulsar_endpoint.admin_url, fqn=fqn) as deployed:
            deployed.wait_ready(inputs=[topic], instances=2, timeout_s=180)
        expected, _ = _send(client, topic)
        wait_until(
            lambda: sql_rows(sql_database, "kv") == expected, timeout_s=120, message="rows in SQL"
        )
        with PulsarMap[str, Any](client, meta, admin_url=pulsar_endpoint.admin_url) as records:
            state = records.items(latest=True).result(60)
        assert state[f"sink/{name}"]["version"] == 0
        owners = {k: v["instance"] for k, v in state.items() if "/owner/" in k}
        partitions = {owner_key(name, f"{topic}-partition-{i}") for i in range(2)}
        assert set(owners) == partitions, owners
        assert set(owners.values()) <= {0, 1}
    finally:
        admin.delete_function(fqn)


# -- a group of runner processes sharing a partitioned input --------------------------------

_GROUP_SESSION_TIMEOUT_S = 2.0
_GROUP_CHECK_INTERVAL_S = 0.5
_SINK_FUNCTION = "public/default/sink-orders-sink"  # the function of name "orders-sink"


class _Runners:
    """``pulsar-state sink run`` processes of one group, by member id."""

    def __init__(self, config: dict[str, Any], tmp_path: Path) -> None:
        self.config = config
        self.tmp_path = tmp_path
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, member: str) -> None:
        config_file = self.tmp_path / f"{member}.yaml"
        config_file.write_text(yaml.safe_dump({**self.config, "memberId": member}))
        log = (self.tmp_path / f"{member}.log").open("w")
        cli = [sys.executable, "-m", "pulsar_state.cli", "-v", "sink", "run"]
        self.procs[member] = subprocess.Popen(
            [*cli, "--config", str(config_file)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()

    def kill(self, member: str) -> None:
        proc = self.procs.pop(member)
        proc.kill()
        proc.wait(timeout=60)

    def stop(self, member: str) -> tuple[int, int]:
        """SIGTERM: a clean stop; ``(written, skipped)`` as the runner reports them."""
        proc = self.procs.pop(member)
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
        counts = re.search(r"written (\d+), skipped (\d+)", out)
        assert proc.returncode == 0 and counts is not None, (proc.returncode, out)
        return int(counts[1]), int(counts[2])

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.stem}\n{p.read_text()[-3000:]}" for p in sorted(self.tmp_path.glob("*.log"))
        )

    def close(self) -> None:
        for member in list(self.procs):
            self.kill(member)


def _sql_state(database: str) -> tuple[dict[str, tuple[str, str]], dict[str, Position]]:
    """``key -> (value, position)`` of the table, and the stored positions per topic."""
    probe = SqlUpsertSink()
    probe.open({"database": database, "table": "orders"})
    try:
        with probe.backend.transaction(None) as cur:
            cur.execute("SELECT key, value, position FROM orders")
            rows = {str(k): (str(v), str(p)) for k, v, p in cur.fetchall()}
            cur.execute("SELECT topic, ledger, entry, batch FROM _pss_positions")
            positions = {str(t): Position(int(a), int(b), int(c)) for t, a, b, c in cur.fetchall()}
    finally:
        probe.close()
    return rows, positions


def _consumer_names(endpoint: PulsarEndpoint, topic: str) -> dict[int, list[str]]:
    """The names of the consumers of subscription ``sink`` on each partition."""
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}"
    stats = endpoint.admin("GET", f"{path}/partitioned-stats?perPartition=true")
    stats.raise_for_status()
    return {
        int(p.rsplit("-partition-", 1)[1]): sorted(
            c.get("consumerName", "")
            for c in s["subscriptions"].get("sink", {}).get("consumers", [])
        )
        for p, s in stats.json()["partitions"].items()
    }


@pytest.mark.timeout(300)
def test_runner_group_shares_partitions(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str, tmp_path: Path
) -> None:
    """4 partitions, runners r0 and r1 (2 each), r2 joins (2/1/1, one partition moves), the
    runner holding 2 SIGKILLed mid-stream (its partitions move to the survivors within the
    session timeout); every record lands exactly once, consumed only by its owner."""
    name = unique_name("sink-group")
    topic = f"persistent://public/default/{name}-in"
    created = pulsar_endpoint.admin(
        "PUT", f"/admin/v2/persistent/public/default/{name}-in/partitions", json=4
    )
    assert created.status_code in (200, 204), created.text
    producer = client.create_producer(topic, batching_enabled=False)
    assign_topic = f"persistent://public/default/{name}-assignments"
    config = {
        **_config(pulsar_endpoint, topic, sql_database),
        "assignmentTopic": assign_topic,
        "sessionTimeoutS": _GROUP_SESSION_TIMEOUT_S,
        "sessionCheckIntervalS": _GROUP_CHECK_INTERVAL_S,
    }
    # key -> (value, position) as the table must end; the last position of each partition
    expected: dict[str, tuple[str, str]] = {}
    last: dict[str, Position] = {}

    def send(n: int) -> None:
        for _ in range(n):
            key, value = f"r{len(expected)}", json.dumps({"n": len(expected)})
            msg_id = producer.send(value.encode(), partition_key=key)
            position = Position.from_message_id(msg_id)
            expected[key] = (value, str(position))
            last[f"{topic}-partition-{msg_id.partition()}"] = position

    def exact() -> bool:
        return _sql_state(sql_database) == (expected, last)

    runners = _Runners(config, tmp_path)
    assignments = PulsarMap[str, str](client, assign_topic, admin_url=pulsar_endpoint.admin_url)

    def owners() -> dict[int, str]:
        return {
            int(i.rsplit(":", 1)[1]): m
            for i, m in assignments.items(latest=True).result(timeout=30).items()
            if i != LEADER_KEY
        }

    def consuming_as_assigned() -> bool:
        now = owners()
        return len(now) == 4 and _consumer_names(pulsar_endpoint, topic) == {
            p: [m] for p, m in now.items()
        }

    try:
        runners.start("r0")
        runners.start("r1")
        wait_until(
            lambda: Counter(owners().values()) == {"r0": 2, "r1": 2},
            timeout_s=60,
            message="2 + 2 partitions",
        )
        assert set(assignments.list_keys().result()) - {LEADER_KEY} == {
            f"{_SINK_FUNCTION}:{i}" for i in range(4)
        }
        wait_until(consuming_as_assigned, timeout_s=30, message="each consumes its own")
        send(300)
        wait_until(exact, timeout_s=60, message="first records exactly once")

        # a third runner joins while records flow: one partition moves, to it
        before = owners()
        send(300)
        runners.start("r2")
        wait_until(
            lambda: (
                sorted(Counter(owners().values()).values()) == [1, 1, 2]
                and "r2" in owners().values()
            ),
            timeout_s=60,
            message="2/1/1",
        )
        after = owners()
        moved = {p for p in before if before[p] != after[p]}
        assert len(moved) == 1 and after[moved.pop()] == "r2"
        wait_until(consuming_as_assigned, timeout_s=30, message="each consumes its own")
        wait_until(exact, timeout_s=60, message="records exactly once through the join")

        # the runner with two partitions is SIGKILLed mid-stream
        before = owners()
        victim = Counter(before.values()).most_common(1)[0][0]
        rows_before = len(expected)
        send(600)
        wait_until(
            lambda: len(_sql_state(sql_database)[0]) > rows_before,
            timeout_s=60,
            message="third batch being written",
        )
        killed_at = time.monotonic()
        runners.kill(victim)
        wait_until(
            lambda: victim not in owners().values(), timeout_s=60, message="victim's partitions"
        )
        took_s = time.monotonic() - killed_at
        after = owners()
        assert {p for p in before if before[p] != after[p]} == {
            p for p, m in before.items() if m == victim
        }  # only the victim's partitions moved
        assert sorted(Counter(after.values()).values()) == [2, 2]
        # the documented bound: session timeout + check interval (+ writes, re-election)
        assert took_s < _GROUP_SESSION_TIMEOUT_S + _GROUP_CHECK_INTERVAL_S + 8, took_s
        wait_until(consuming_as_assigned, timeout_s=30, message="survivors consume all")
        wait_until(exact, timeout_s=60, message="records exactly once through the kill")
        survivors = sorted(runners.procs)
        counts = [runners.stop(m) for m in survivors]
        assert sum(written for written, _ in counts) <= len(expected)
        assert exact()
        # the single runner (failover on the partitioned topic) keys positions the same:
        # replaying everything through it changes nothing
        consumer = client.subscribe(topic, "sink", consumer_type=pulsar.ConsumerType.Failover)
        consumer.seek(pulsar.MessageId.earliest)
        consumer.close()
        single = _config(pulsar_endpoint, topic, sql_database)
        replay = run_sink(single, max_idle_s=1.5)
        assert (replay.written, replay.skipped) == (0, len(expected))
        assert exact()
        print(f"partitions of {victim} moved {took_s:.1f}s after SIGKILL; survivors {counts}")
    except BaseException:
        print(runners.logs())
        raise
    finally:
        runners.close()
        assignments.close()
        producer.close()
