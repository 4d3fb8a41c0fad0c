"""The SQL sink when its database outlives the topic (issue #15's leftover).

The sink stores, per topic name, the last applied position and skips records at
or before it. A topic deleted and re-created with the same name (or a database
restored next to another cluster) starts its positions anew: the stored position
must not make the sink skip the new topic's records.
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from pathlib import Path
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from postgres_server import sql_rows

from pulsar_state.cluster.admin import PulsarAdmin
from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink, open_backend
from pulsar_state.connectors.sql_backend import POSITIONS_TABLE
from pulsar_state.connectors.topic_incarnation import TopicIncarnationError
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli
from pulsar_state.errors import ConfigurationError
from pulsar_state.position import Position


def _send(client: pulsar.Client, topic: str, keys: list[str], tag: str) -> list[Position]:
    producer = client.create_producer(topic, batching_enabled=False)
    try:
        return [
            Position.from_message_id(
                producer.send(json.dumps({"tag": tag, "key": k}).encode(), partition_key=k)
            )
            for k in keys
        ]
    finally:
        producer.close()


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


def _drain(sink: SqlUpsertSink, client: pulsar.Client, topic: str, expect: int) -> None:
    """Consume ``expect`` records of ``topic`` (subscription ``sink``) into ``sink``, acking each.

    Each receive waits at most 10 s (a missing record fails the test clearly).
    """
    consumer = client.subscribe(
        topic,
        "sink",
        consumer_type=pulsar.ConsumerType.Failover,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    try:
        for n in range(expect):
            try:
                msg = consumer.receive(timeout_millis=10_000)
            except pulsar.Timeout:
                pytest.fail(f"record {n + 1} of {expect} on {topic} not received within 10 s")
            sink.write(
                SinkRecord(
                    topic=msg.topic_name(),
                    key=msg.partition_key(),
                    value=msg.data(),
                    position=Position.from_message_id(msg.message_id()),
                )
            )
            consumer.acknowledge(msg)
    finally:
        consumer.close()


def _open(endpoint: PulsarEndpoint, topic: str, database: str) -> SqlUpsertSink:
    sink = SqlUpsertSink()
    sink.open(_config(endpoint, topic, database))
    return sink


def test_topic_recreated_with_the_same_name_loses_nothing(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str
) -> None:
    topic = unique_topic("sink-reborn")
    first = _send(client, topic, [f"a{i}" for i in range(5)], "old")
    done = _open(pulsar_endpoint, topic, sql_database)
    try:
        _drain(done, client, topic, 5)
    finally:
        done.close()
    assert done.written == 5
    admin = PulsarAdmin(pulsar_endpoint.admin_url)
    try:
        admin.delete_topic(topic, force=True)
        admin.ensure_topic(topic)
    finally:
        admin.close()
    second = _send(client, topic, [f"b{i}" for i in range(4)], "new")
    again = _open(pulsar_endpoint, topic, sql_database)
    try:
        _drain(again, client, topic, 4)
    finally:
        again.close()
    rows = sql_rows(sql_database, "orders")
    assert {k for k in rows if k.startswith("b")} == {f"b{i}" for i in range(4)}, (
        f"records of the re-created topic were skipped: first incarnation at {first}, "
        f"second at {second}, written {again.written}, skipped {again.skipped}"
    )
    assert again.written == 4 and again.skipped == 0


def _restore_from_another_cluster(database: str, topic: str, shift: int = 1_000_000) -> Position:
    """Make the stored position of ``topic`` one of another cluster: the state a database
    restored from a backup taken next to a cluster with higher ledger ids is in.

    Returns the stored position (a ledger this broker has not reached).
    """
    backend = open_backend(database)
    try:
        with backend.transaction(topic) as cur:
            cur.execute(
                backend._sql(f"UPDATE {POSITIONS_TABLE} SET ledger = ledger + ? WHERE topic = ?"),
                (shift, topic),
            )
            stored = backend.applied_position(cur, topic)
    finally:
        backend.close()
    assert stored is not None
    return stored


def _first_run(endpoint: PulsarEndpoint, client: pulsar.Client, database: str) -> str:
    topic = unique_topic("sink-restored")
    _send(client, topic, [f"a{i}" for i in range(5)], "old")
    sink = _open(endpoint, topic, database)
    try:
        _drain(sink, client, topic, 5)
    finally:
        sink.close()
    assert sink.written == 5
    return topic


def test_database_restored_from_another_cluster_loses_nothing(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    sql_database: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = _first_run(pulsar_endpoint, client, sql_database)
    stored = _restore_from_another_cluster(sql_database, topic)
    new = _send(client, topic, [f"b{i}" for i in range(4)], "new")
    sink = _open(pulsar_endpoint, topic, sql_database)
    try:
        with caplog.at_level(logging.WARNING):
            _drain(sink, client, topic, 4)
        after = sink.applied_position(topic)
    finally:
        sink.close()
    rows = sql_rows(sql_database, "orders")
    assert {k for k in rows if k.startswith("b")} == {f"b{i}" for i in range(4)}, (
        f"records below the restored position {stored} were skipped: sent at {new}, "
        f"written {sink.written}, skipped {sink.skipped}"
    )
    assert sink.written == 4 and sink.skipped == 0
    assert after == new[-1]  # the foreign position was replaced by the topic's own
    assert sink.position_checks == {"reset": 1}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(stored) in w and str(new[0]) in w for w in warnings), warnings


def test_a_redelivery_is_still_skipped_after_one_check(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    database = str(tmp_path / "sink.db")
    topic = _first_run(pulsar_endpoint, client, database)
    consumer = client.subscribe(topic, "sink", consumer_type=pulsar.ConsumerType.Failover)
    consumer.seek(pulsar.MessageId.earliest)  # as after a crash before the acks
    consumer.close()
    sink = _open(pulsar_endpoint, topic, database)
    try:
        _drain(sink, client, topic, 5)
    finally:
        sink.close()
    assert sink.written == 0 and sink.skipped == 5
    assert sink.position_checks == {"redelivery": 5}


def test_position_mismatch_fail_refuses_the_record(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    database = str(tmp_path / "sink.db")
    topic = _first_run(pulsar_endpoint, client, database)
    stored = _restore_from_another_cluster(database, topic)
    new = _send(client, topic, ["b0"], "new")
    sink = SqlUpsertSink()
    sink.open({**_config(pulsar_endpoint, topic, database), "positionMismatch": "fail"})
    try:
        with pytest.raises(TopicIncarnationError, match="positionMismatch: fail") as refused:
            _drain(sink, client, topic, 1)
        assert not refused.value.retriable
        assert sink.applied_position(topic) == stored  # nothing applied
        assert "b0" not in sink.rows()
    finally:
        sink.close()
    assert sink.position_checks == {"refused": 1}
    assert new


def test_without_admin_url_a_skip_is_logged_and_counted(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    database = str(tmp_path / "sink.db")
    topic = _first_run(pulsar_endpoint, client, database)
    stored = _restore_from_another_cluster(database, topic)
    _send(client, topic, ["b0", "b1"], "new")
    sink = SqlUpsertSink()
    sink.open(
        {k: v for k, v in _config(pulsar_endpoint, topic, database).items() if k != "adminUrl"}
    )
    try:
        with caplog.at_level(logging.WARNING):
            _drain(sink, client, topic, 2)
    finally:
        sink.close()
    assert sink.skipped == 2 and sink.position_checks == {"unverified": 2}
    warnings = [r.getMessage() for r in caplog.records if "without checking" in r.getMessage()]
    assert len(warnings) == 1 and str(stored) in warnings[0] and "no adminUrl" in warnings[0]


def test_position_mismatch_setting_is_validated(tmp_path: Path) -> None:
    sink = SqlUpsertSink()
    with pytest.raises(ConfigurationError, match="positionMismatch"):
        sink.open({"database": str(tmp_path / "x.db"), "positionMismatch": "ignore"})


def test_a_partition_of_a_restored_topic_is_checked_too(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    database = str(tmp_path / "sink.db")
    base = unique_topic("sink-parts")
    admin = PulsarAdmin(pulsar_endpoint.admin_url)
    try:
        path = base.replace("://", "/")
        resp = admin.request("PUT", f"/admin/v2/{path}/partitions", json=2)
        assert resp.status_code in (200, 204), resp.text
    finally:
        admin.close()
    topic = f"{base}-partition-1"  # the record's topic, as the consumer names it
    _send(client, topic, ["a0", "a1"], "old")
    sink = _open(pulsar_endpoint, topic, database)
    try:
        _drain(sink, client, topic, 2)
    finally:
        sink.close()
    stored = _restore_from_another_cluster(database, topic)
    new = _send(client, topic, ["b0"], "new")
    sink = _open(pulsar_endpoint, topic, database)
    try:
        _drain(sink, client, topic, 1)
        assert sink.applied_position(topic) == new[0] != stored
    finally:
        sink.close()
    assert sink.written == 1 and sink.position_checks == {"reset": 1}


@pytest.mark.timeout(400)
def test_sink_function_replaces_a_position_of_another_cluster(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """The same in the functions runtime (the deployed path): a database whose stored
    position for the input topic is another cluster's, the sink deployed, records sent."""
    name = unique_name("sink-foreign")
    topic = f"persistent://public/default/{name}-in"
    database = str(tmp_path / "sink.db")
    foreign = Position(1_000_000_000, 7)  # a ledger this broker has not reached
    restored = SqlUpsertSink()
    restored.open({"database": database, "table": "kv"})
    try:
        restored.write(SinkRecord(topic=topic, key="old", value=b"before", position=foreign))
    finally:
        restored.close()
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    fqn = ("public", "default", name)
    entry = Path(str(resources.files("pulsar_state.connectors") / "sink_entry.py"))
    user_config = {"database": database, "table": "kv", "adminUrl": pulsar_endpoint.admin_url}
    admin.create_function(
        fqn=fqn,
        py=entry,
        classname="sink_entry.SinkFunction",
        inputs=[topic],
        extra=["--retain-ordering", "--user-config", json.dumps(user_config)],
    )
    try:
        wait_until(
            lambda: admin.function_status(fqn)["numRunning"] == 1,
            timeout_s=180,
            interval_s=1,
            message="the sink instance running",
        )
        sent = _send(client, topic, [f"b{i}" for i in range(4)], "new")
        wanted = {f"b{i}" for i in range(4)}
        wait_until(
            lambda: wanted <= set(sql_rows(database, "kv")),
            timeout_s=120,
            interval_s=1,
            message=f"the 4 records below the stored position {foreign} written",
        )
    finally:
        admin.delete_function(fqn)
    check = SqlUpsertSink()
    check.open({"database": database, "table": "kv"})
    try:
        assert check.applied_position(topic) == sent[-1]
        assert check.rows()["old"] == "before"  # rows of the restored table are kept
    finally:
        check.close()
