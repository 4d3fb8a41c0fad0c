"""The SQL sink runner's batches on the real broker and a real PostgreSQL (issue #28, item 8).

The runner (``pulsar-state sink run``, in a child process started by
``multiprocessing`` with ``spawn`` and with ``fork``) writes batches of up to
200 records a transaction while it is killed (``kill -9``) three times and
started again. A trigger on the table appends each committed row change to an
``audit`` table and sleeps 2 ms, so that a batch's transaction lasts about half
a second and each kill lands inside one. Every record must end as its row, and
its row must have been written exactly once (one audit row a key): a batch
acknowledged before its commit loses records at the kill, a position stored
apart from its rows writes them twice.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import psycopg
import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic, wait_until
from postgres_server import PostgresServer
from sink_instances import runner_instance

RECORDS = 3000
#: the audit rows (committed row changes) at which the runner is killed
KILL_AT = (400, 1200, 2100)


def _audited_table(database: str) -> None:
    """The sink's table made beforehand, with the audit trigger."""
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(
            "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, position TEXT NOT NULL)"
        )
        db.execute("CREATE TABLE audit (key TEXT NOT NULL)")
        db.execute(
            "CREATE FUNCTION audit_kv() RETURNS trigger AS $$ BEGIN "
            "INSERT INTO audit VALUES (NEW.key); PERFORM pg_sleep(0.002); RETURN NEW; "
            "END $$ LANGUAGE plpgsql"
        )
        db.execute(
            "CREATE TRIGGER kv_audit AFTER INSERT OR UPDATE ON kv "
            "FOR EACH ROW EXECUTE FUNCTION audit_kv()"
        )


def _audit(database: str) -> dict[str, int]:
    with psycopg.connect(database) as db:
        return dict(db.execute("SELECT key, COUNT(*) FROM audit GROUP BY key").fetchall())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_every_record_is_one_row_written_once_across_kills_in_the_middle_of_batches(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    postgres_server: PostgresServer,
    tmp_path: Path,
    start_method: str,
) -> None:
    database = postgres_server.create_database()
    if database == postgres_server.url:
        pytest.skip("needs a database of its own on the server")
    _audited_table(database)
    topic = unique_topic("sink-batches")
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=50, block_if_queue_full=True
    )
    sent = {f"k{i:05d}": f"v{i}" for i in range(RECORDS)}
    results: list[pulsar.Result] = []
    for key, value in sent.items():
        producer.send_async(value.encode(), lambda res, _: results.append(res), partition_key=key)
    producer.flush()
    producer.close()
    assert results == [pulsar.Result.Ok] * RECORDS
    config = {
        "serviceUrl": pulsar_endpoint.service_url,
        "adminUrl": pulsar_endpoint.admin_url,
        "topic": topic,
        "subscription": "sink",
        "database": database,
        "table": "kv",
        "batchMaxRecords": 200,
        "batchMaxDelayMs": 50,
    }
    ctx = multiprocessing.get_context(start_method)
    logs: list[Path] = []

    def start() -> multiprocessing.process.BaseProcess:
        logs.append(tmp_path / f"runner-{len(logs)}.log")
        proc = ctx.Process(target=runner_instance, args=(config, str(logs[-1])), daemon=True)
        proc.start()
        return proc

    proc = start()
    killed_at = []
    try:
        for threshold in KILL_AT:
            wait_until(
                lambda t=threshold: sum(_audit(database).values()) >= t,  # type: ignore[misc]
                timeout_s=180,
                interval_s=0.05,
                message=f"{threshold} rows written",
            )
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=30)
            killed_at.append(sum(_audit(database).values()))
            proc = start()
        wait_until(
            lambda: len(_audit(database)) == RECORDS,
            timeout_s=240,
            interval_s=0.5,
            message="every record written",
        )
        with psycopg.connect(database) as db:
            rows = dict(db.execute("SELECT key, value FROM kv").fetchall())
        audit = _audit(database)
        twice = {k: n for k, n in audit.items() if n != 1}
        assert rows == sent, f"{len(set(sent) - set(rows))} records lost"
        assert not twice, f"rows written more than once: {sorted(twice.items())[:10]}"
        assert all(n < RECORDS for n in killed_at), killed_at  # killed mid-stream
        print(f"{start_method}: killed after {killed_at} committed rows; each record once")
    except BaseException:
        for log in logs:
            if log.exists():
                print(f"--- {log.name}\n{log.read_text()[-4000:]}")
        raise
    finally:
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
