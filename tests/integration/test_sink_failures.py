"""The SQL sink when a write fails: a database outage, and records it can never write.

A database outage must not lose a record (the sink never records a position
past a record that was not written); a poison record (no key, a key or value
that is not UTF-8) goes to the dead-letter topic, or is counted and skipped,
and the partition keeps flowing.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import _pulsar
import psycopg
import pulsar
import pytest
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from postgres_server import sql_rows

from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.connectors.sql_backend import SinkDatabaseError
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli

REASON = "pss.dead-letter.reason"


@contextlib.contextmanager
def _database_down(database: str, table: str) -> Iterator[None]:
    """The sink's database unusable until the block ends.

    PostgreSQL: the database refuses connections and the sink's is terminated
    (a real outage for that database). SQLite (a file, no server): the table is
    renamed away, so every write fails.
    """
    if database.startswith("postgresql://"):
        base, _, name = database.rpartition("/")
        if name == "postgres":
            pytest.skip("the test database is the server's own: cannot take it down")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            try:
                yield
            finally:
                admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        return
    with contextlib.closing(sqlite3.connect(database, timeout=30)) as db:
        db.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
        db.commit()
        try:
            yield
        finally:
            db.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
            db.commit()


def _user_exceptions(admin: PulsarAdminCli, fqn: tuple[str, str, str]) -> int:
    return int(admin.function_status(fqn)["instances"][0]["status"]["numUserExceptions"])


def _create_sink(
    admin: PulsarAdminCli,
    fqn: tuple[str, str, str],
    topic: str,
    user_config: dict[str, Any],
    *,
    retain_ordering: bool = True,
) -> None:
    entry = Path(str(resources.files("pulsar_state.connectors") / "sink_entry.py"))
    admin.create_function(
        fqn=fqn,
        py=entry,
        classname="sink_entry.SinkFunction",
        inputs=[topic],
        extra=[
            *(["--retain-ordering"] if retain_ordering else []),
            "--user-config",
            json.dumps(user_config),
        ],
    )


def _wait_sink_running(admin: PulsarAdminCli, fqn: tuple[str, str, str]) -> None:
    wait_until(
        lambda: admin.function_status(fqn)["numRunning"] == 1,
        timeout_s=180,
        interval_s=1,
        message="the sink instance running",
    )


def _deploy_sink(
    admin: PulsarAdminCli, fqn: tuple[str, str, str], topic: str, user_config: dict[str, Any]
) -> None:
    """The SinkFunction on ``topic`` with in-order delivery, running."""
    _create_sink(admin, fqn, topic, user_config)
    _wait_sink_running(admin, fqn)


@pytest.mark.timeout(400)
def test_sink_function_loses_nothing_across_a_database_outage(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str
) -> None:
    """Records before, during and after an outage: the ones that failed during it are
    written when the database is back, none skipped as already done; rows exact."""
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("sinkdown")
    fqn = ("public", "default", name)
    topic = f"persistent://public/default/{name}-in"
    _deploy_sink(admin, fqn, topic, {"database": sql_database, "table": "kv"})
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        expected: dict[str, str] = {}

        def send(batch: str, n: int) -> None:
            for i in range(n):
                key = f"{batch}{i % 4}" if i % 2 else f"shared{i % 3}"
                value = f"{batch}-{i}"
                producer.send(value.encode(), partition_key=key)
                expected[key] = value

        send("before", 8)
        wait_until(
            lambda: sql_rows(sql_database, "kv") == expected,
            timeout_s=120,
            message="rows before the outage",
        )
        failures = _user_exceptions(admin, fqn)
        with _database_down(sql_database, "kv"):
            send("during", 8)
            wait_until(
                lambda: _user_exceptions(admin, fqn) > failures,
                timeout_s=90,
                interval_s=1,
                message="the sink failing while the database is down",
            )
            time.sleep(3)  # the sink keeps failing for a while
        send("after", 8)
        try:
            wait_until(
                lambda: sql_rows(sql_database, "kv") == expected,
                timeout_s=100,
                interval_s=1,
                message="every record written once the database is back",
            )
        except AssertionError as exc:
            got = sql_rows(sql_database, "kv")
            missing = {k: v for k, v in expected.items() if got.get(k) != v}
            raise AssertionError(f"{exc}: rows differ at {missing}, got {got}") from None
    finally:
        admin.delete_function(fqn)


def _send_with_poison(
    client: pulsar.Client, topic: str
) -> tuple[dict[str, str], list[tuple[bytes, str | bytes | None]]]:
    """Good records with three poison ones in the middle; the expected rows and the poison
    records' ``(payload, key)``."""
    producer = client.create_producer(topic, batching_enabled=False)
    expected: dict[str, str] = {}
    poison: list[tuple[bytes, str | bytes | None]] = []

    def good(key: str, value: str) -> None:
        producer.send(value.encode(), partition_key=key)
        expected[key] = value

    good("k0", "v0")
    good("k1", "007")  # a value that looks like a number is still the text sent
    producer.send(b"no key", properties={"origin": "test"})
    poison.append((b"no key", None))
    good("k2", "v2")
    producer.send(b"\xffnot utf-8", partition_key="bad-value")
    poison.append((b"\xffnot utf-8", "bad-value"))
    good("k0", "v0-again")
    raw = _pulsar.MessageBuilder()  # the Python API takes str keys: build one of raw bytes
    raw.content(b"its key is not utf-8")
    raw.partition_key(b"k\xfe")
    producer._producer.send(raw.build())
    poison.append((b"its key is not utf-8", b"k\xfe"))
    good("k3", "1e3")
    producer.close()
    return expected, poison


@pytest.mark.timeout(300)
def test_sink_function_dead_letters_poison_records(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """A keyless record, a non-UTF-8 value and a non-UTF-8 key among good records: the good
    rows land, the bad records are on the dead-letter topic with a reason."""
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("sinkpoison")
    fqn = ("public", "default", name)
    topic = f"persistent://public/default/{name}-in"
    dead = f"persistent://public/default/{name}-dlq"
    database = str(tmp_path / "poison.db")
    dlq = client.subscribe(dead, "check", initial_position=pulsar.InitialPosition.Earliest)
    _deploy_sink(admin, fqn, topic, {"database": database, "table": "kv", "deadLetterTopic": dead})
    try:
        expected, poison = _send_with_poison(client, topic)
        wait_until(
            lambda: sql_rows(database, "kv") == expected,
            timeout_s=120,
            message="the good rows written past the poison ones",
        )
        got = []
        for _ in poison:
            msg = dlq.receive(timeout_millis=60_000)
            dlq.acknowledge(msg)
            got.append(msg)
        assert [m.data() for m in got] == [p for p, _ in poison]
        assert got[0].partition_key() == "" and got[0].properties()["origin"] == "test"
        assert got[1].partition_key() == "bad-value"
        assert got[2].properties()["pss.dead-letter.key-base64"] == "a/4="  # b"k\xfe"
        reasons = [m.properties()[REASON] for m in got]
        assert "no key" in reasons[0] and "UTF-8" in reasons[1] and "UTF-8" in reasons[2]
        assert all(m.properties()["pss.dead-letter.topic"] == topic for m in got)
        with pytest.raises(pulsar.Timeout):
            dlq.receive(timeout_millis=2000)  # nothing good went there
    finally:
        admin.delete_function(fqn)
        dlq.close()


@pytest.mark.parametrize("dead_letters", [False, True])
def test_runner_skips_or_dead_letters_poison_records(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path, dead_letters: bool
) -> None:
    """The standalone runner: without a dead-letter topic the poison records are counted
    and skipped; with one they go there. The good rows land either way."""
    topic = unique_topic("sink-poison")
    database = str(tmp_path / "poison.db")
    config: dict[str, Any] = {
        "serviceUrl": pulsar_endpoint.service_url,
        "topic": topic,
        "subscription": "sink",
        "database": database,
        "table": "kv",
    }
    dead = unique_topic("sink-dlq")
    if dead_letters:
        config["deadLetterTopic"] = dead
    dlq = client.subscribe(dead, "check", initial_position=pulsar.InitialPosition.Earliest)
    expected, poison = _send_with_poison(client, topic)
    sink = run_sink(config, max_idle_s=2)
    assert sql_rows(database, "kv") == expected
    assert sink.written == 5 and sink.poisoned == len(poison)  # 5 good records, 4 keys
    if dead_letters:
        payloads = []
        for _ in poison:
            msg = dlq.receive(timeout_millis=30_000)
            payloads.append(msg.data())
            assert msg.properties()[REASON]
        assert payloads == [p for p, _ in poison]
    else:
        with pytest.raises(pulsar.Timeout):
            dlq.receive(timeout_millis=1000)
    dlq.close()


@pytest.mark.timeout(300)
def test_runner_loses_nothing_across_a_database_outage(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str
) -> None:
    """The runner on its own: a retriable failure (PostgreSQL refusing connections) is
    retried in place until the database is back; another failure (SQLite's table gone)
    stops the runner with nothing acknowledged past the record, and a restart resumes
    there. Either way the rows end exact."""
    topic = unique_topic("sink-down")
    config = {
        "serviceUrl": pulsar_endpoint.service_url,
        "topic": topic,
        "subscription": "sink",
        "database": sql_database,
        "table": "kv",
    }
    producer = client.create_producer(topic, batching_enabled=False)
    expected: dict[str, str] = {}

    def send(batch: str, n: int) -> None:
        for i in range(n):
            key = f"{batch}{i % 4}" if i % 2 else f"shared{i % 3}"
            producer.send(f"{batch}-{i}".encode(), partition_key=key)
            expected[key] = f"{batch}-{i}"

    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["sink"] = run_sink(config, stop=stop)
        except Exception as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        send("before", 8)
        wait_until(
            lambda: sql_rows(sql_database, "kv") == expected,
            timeout_s=60,
            message="rows before the outage",
        )
        with _database_down(sql_database, "kv"):
            send("during", 8)
            time.sleep(3)  # the runner meets the outage
        send("after", 8)
        if sql_database.startswith("postgresql://"):
            wait_until(
                lambda: sql_rows(sql_database, "kv") == expected,
                timeout_s=90,
                interval_s=0.5,
                message="the runner retried in place and wrote everything",
            )
            assert "error" not in outcome and runner.is_alive()
        else:
            runner.join(timeout=60)
            assert isinstance(outcome.get("error"), SinkDatabaseError), outcome
            assert sql_rows(sql_database, "kv") != expected  # stopped at the failed record
            resumed = run_sink(config, max_idle_s=2)
            assert resumed.written == 16  # "during" and "after": nothing was skipped
            assert sql_rows(sql_database, "kv") == expected
    finally:
        stop.set()
        runner.join(timeout=60)
        producer.close()


def test_sink_function_refuses_to_run_without_in_order_delivery(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """Deployed without --retain-ordering (a shared subscription): every record is refused
    with a ConfigurationError naming the fix, and nothing is written."""
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("sinkshared")
    fqn = ("public", "default", name)
    topic = f"persistent://public/default/{name}-in"
    database = str(tmp_path / "shared.db")
    _create_sink(admin, fqn, topic, {"database": database, "table": "kv"}, retain_ordering=False)
    try:
        _wait_sink_running(admin, fqn)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"v", partition_key="k")
        status = wait_until(
            lambda: (
                (s := admin.function_status(fqn)["instances"][0]["status"])["latestUserExceptions"]
                and s
            ),
            timeout_s=60,
            interval_s=1,
            message="the record refused",
        )
        error = status["latestUserExceptions"][0]["exceptionString"]
        assert "needs in-order delivery" in error and "retainOrdering" in error
        assert status["numSuccessfullyProcessed"] == 0
        assert sql_rows(database, "kv") == {}
    finally:
        admin.delete_function(fqn)
