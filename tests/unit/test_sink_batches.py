"""The SQL sink runner's batches (issue #28, item 8), without a broker: how records are
grouped, and a batch written in one transaction on SQLite and a real PostgreSQL,
effectively once, with poison records, a record the database refuses and a
database that fails in the middle of a batch."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from postgres_server import sql_rows

from pulsar_state.connectors.dead_letter import DeadLetters
from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink
from pulsar_state.connectors.sink_batches import BatchLimits, collect
from pulsar_state.connectors.sink_health import SinkHealth
from pulsar_state.connectors.sink_records import Records
from pulsar_state.connectors.sql_backend import SinkDatabaseError
from pulsar_state.errors import ConfigurationError
from pulsar_state.position import Position

T = "persistent://public/default/in-partition-0"
U = "persistent://public/default/in-partition-1"


# -- grouping -----------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _receiver(items: list[bytes | None], clock: _Clock, step_s: float = 0.0) -> Any:
    """``receive(timeout_ms)`` over ``items`` (``None``: a timeout), each taking ``step_s``."""
    calls: list[int] = []

    def receive(timeout_ms: int) -> bytes | None:
        calls.append(timeout_ms)
        if step_s * 1000 > timeout_ms:  # the next one comes after the timeout
            clock.now += timeout_ms / 1000
            return None
        clock.now += step_s
        return items.pop(0) if items else None

    receive.calls = calls  # type: ignore[attr-defined]
    return receive


def test_a_batch_closes_at_its_record_count() -> None:
    clock = _Clock()
    receive = _receiver([b"x"] * 12, clock)
    limits = BatchLimits(max_records=5, max_bytes=1 << 20, max_delay_ms=100)
    assert collect(receive, len, limits, clock=clock) == [b"x"] * 5
    assert collect(receive, len, limits, clock=clock) == [b"x"] * 5
    assert collect(receive, len, limits, clock=clock) == [b"x"] * 2  # then nothing came


def test_a_batch_closes_at_its_bytes_and_a_large_record_goes_alone() -> None:
    clock = _Clock()
    limits = BatchLimits(max_records=100, max_bytes=10, max_delay_ms=100)
    receive = _receiver([b"1234", b"1234", b"1234", b"x" * 50, b"1"], clock)
    assert collect(receive, len, limits, clock=clock) == [b"1234"] * 3  # 12 >= 10
    assert collect(receive, len, limits, clock=clock) == [b"x" * 50]
    assert collect(receive, len, limits, clock=clock) == [b"1"]


def test_a_batch_closes_its_delay_after_its_first_record() -> None:
    clock = _Clock()
    limits = BatchLimits(max_records=100, max_bytes=1 << 20, max_delay_ms=100)
    receive = _receiver([b"a"] * 10, clock, step_s=0.03)  # one record every 30 ms
    batch = collect(receive, len, limits, clock=clock)
    assert len(batch) == 4  # received at 30, 60, 90, 120 ms: the deadline was 130 ms
    assert receive.calls[0] == 500  # the first one waited for as long as the runner polls
    assert all(0 < t <= 100 for t in receive.calls[1:])  # the rest within the delay


def test_no_record_no_batch_and_a_stop_closes_it() -> None:
    clock = _Clock()
    limits = BatchLimits()
    assert collect(_receiver([], clock), len, limits, clock=clock) == []
    stop = threading.Event()
    stop.set()
    assert collect(_receiver([b"a", b"b"], clock), len, limits, stop=stop, clock=clock) == [b"a"]


def test_the_limits_from_the_config() -> None:
    assert BatchLimits.from_config({}) == BatchLimits(500, 1 << 20, 100)
    assert BatchLimits.from_config(
        {"batchMaxRecords": 1, "batchMaxBytes": 4096, "batchMaxDelayMs": 5}
    ) == BatchLimits(1, 4096, 5)
    for bad in (0, -1, "10", 1.5, True, None):
        with pytest.raises(ConfigurationError, match="batchMaxRecords"):
            BatchLimits.from_config({"batchMaxRecords": bad})
    with pytest.raises(ConfigurationError, match="batchMaxDelayMs"):
        BatchLimits.from_config({"batchMaxDelayMs": 0})


# -- a batch in one transaction -------------------------------------------------------------------


def rec(entry: int, *, topic: str = T, key: str | None = None, value: bytes | None = None) -> Any:
    return SinkRecord(
        topic=topic,
        key=key if key is not None else f"k{entry}",
        value=value if value is not None else f"v{entry}".encode(),
        position=Position(7, entry, -1),
    )


class _DeadLetters(DeadLetters):
    def __init__(self) -> None:
        super().__init__(None, None)
        self.sent: list[tuple[Position, str]] = []

    def handle(self, record: SinkRecord, reason: str) -> str:
        self.sent.append((record.position, reason))
        return "dead_letter"


def _handler(database: str, **config: Any) -> Records:
    sink = SqlUpsertSink()
    sink.open({"database": database, "table": "kv", **config})
    return Records(sink, _DeadLetters(), stop=threading.Event(), health=SinkHealth())


def _batch(handler: Records, records: list[SinkRecord]) -> list[str]:
    return handler.handle_batch([(r, None) for r in records])


def _close(handler: Records) -> None:
    handler.close()
    handler.sink.close()


def test_a_batch_is_one_transaction_and_its_redelivery_changes_nothing(sql_database: str) -> None:
    handler = _handler(sql_database)
    records = [rec(i) for i in range(10)] + [rec(10, key="k3", value=b"")]  # ends with a delete
    records += [rec(11, topic=U, key="k1", value=b"from U")]
    statements: list[str] = []
    backend = handler.sink.backend
    transaction = backend.transaction

    def counting(topic: str | None) -> Any:
        statements.append("transaction")
        return transaction(topic)

    backend.transaction = counting  # type: ignore[method-assign]
    assert _batch(handler, records) == ["written"] * 12
    assert statements == ["transaction"], "one transaction for the batch"
    expected = {f"k{i}": f"v{i}" for i in range(10) if i != 3} | {"k1": "from U"}
    assert sql_rows(sql_database, "kv") == expected
    assert handler.sink.applied_position(T) == Position(7, 10, -1)
    assert handler.sink.applied_position(U) == Position(7, 11, -1)
    # redelivered (a crash before the acks), with a new record: only that one is written
    outcomes = _batch(handler, [*records[5:], rec(12)])
    assert outcomes == ["skipped"] * 7 + ["written"]
    assert sql_rows(sql_database, "kv") == expected | {"k12": "v12"}
    assert (handler.sink.written, handler.sink.skipped) == (13, 7)
    _close(handler)


def test_a_poison_record_in_a_batch_is_dead_lettered_and_the_others_written(
    sql_database: str,
) -> None:
    handler = _handler(sql_database)
    records = [rec(0), rec(1, value=b"\xff"), rec(2), SinkRecord(T, None, b"x", Position(7, 3, -1))]
    assert _batch(handler, [*records, rec(4)]) == [
        "written",
        "poisoned",
        "written",
        "poisoned",
        "written",
    ]
    dead = handler.dead_letters
    assert isinstance(dead, _DeadLetters)
    assert [p.entry for p, _ in dead.sent] == [1, 3]
    assert sql_rows(sql_database, "kv") == {"k0": "v0", "k2": "v2", "k4": "v4"}
    assert handler.sink.applied_position(T) == Position(7, 4, -1)
    _close(handler)


def test_a_record_the_database_refuses_is_found_and_the_others_written(sql_database: str) -> None:
    """A value that does not fit its column (refused by PostgreSQL; SQLite through a
    CHECK constraint): the batch is split down to it, the rest of the batch is written,
    and it is dead-lettered, its position stored."""
    handler = _handler(sql_database, columns={"n": "n"}, columnTypes={"n": "INTEGER"})
    if handler.sink.backend.kind == "sqlite":  # SQLite stores any value: a constraint
        handler.sink.close()
        import sqlite3  # noqa: PLC0415

        with sqlite3.connect(sql_database) as db:
            db.execute("DROP TABLE kv")
            db.execute(
                "CREATE TABLE kv (key TEXT PRIMARY KEY, n INTEGER CHECK (typeof(n) = 'integer'),"
                " position TEXT NOT NULL)"
            )
        handler = _handler(sql_database, columns={"n": "n"}, columnTypes={"n": "INTEGER"})
    records = [rec(i, value=f'{{"n": {i}}}'.encode()) for i in range(20)]
    records[13] = rec(13, value=b'{"n": "thirteen"}')
    outcomes = _batch(handler, records)
    assert outcomes == ["written"] * 13 + ["poisoned"] + ["written"] * 6
    dead = handler.dead_letters
    assert isinstance(dead, _DeadLetters)
    assert [(p.entry, "refused" in reason) for p, reason in dead.sent] == [(13, True)]
    with handler.sink.backend.transaction(None) as cur:
        cur.execute("SELECT key, n FROM kv")
        assert dict(cur.fetchall()) == {f"k{i}": i for i in range(20) if i != 13}
    assert handler.sink.applied_position(T) == Position(7, 19, -1)
    _close(handler)


def test_a_database_failing_in_the_middle_of_a_batch_loses_and_repeats_nothing(
    sql_database: str,
) -> None:
    """The connection fails after half the rows went in: the transaction is rolled
    back and the whole batch tried again; each row is written by one committed
    statement (an audit table counts them), every position stored once."""
    handler = _handler(sql_database)
    backend = handler.sink.backend
    _audit(handler)
    write_rows = backend._write_rows
    failures = [2]

    def flaky(cur: Any, table: str, layout: Any, upserts: Any, deletes: Any) -> None:
        write_rows(cur, table, layout, upserts[: len(upserts) // 2], [])
        if failures[0]:
            failures[0] -= 1
            raise SinkDatabaseError("connection lost", retriable=True)
        write_rows(cur, table, layout, upserts[len(upserts) // 2 :], deletes)

    backend._write_rows = flaky  # type: ignore[method-assign]
    handler.stop.wait = lambda timeout=None: False  # type: ignore[method-assign]  # no backoff
    assert _batch(handler, [rec(i) for i in range(30)]) == ["written"] * 30
    assert failures == [0]
    assert sql_rows(sql_database, "kv") == {f"k{i}": f"v{i}" for i in range(30)}
    assert handler.sink.written == 30
    with backend.transaction(None) as cur:
        cur.execute("SELECT key, COUNT(*) FROM audit GROUP BY key")
        assert dict(cur.fetchall()) == {f"k{i}": 1 for i in range(30)}, "each row written once"
    _close(handler)


def _audit(handler: Records) -> None:
    """Table ``audit``: a row for each row change of ``kv`` that was committed."""
    backend = handler.sink.backend
    if backend.kind == "sqlite":
        backend.execute_ddl(
            [
                "CREATE TABLE audit (key TEXT)",
                "CREATE TRIGGER kv_insert AFTER INSERT ON kv "
                "BEGIN INSERT INTO audit VALUES (new.key); END",
                "CREATE TRIGGER kv_update AFTER UPDATE ON kv "
                "BEGIN INSERT INTO audit VALUES (new.key); END",
            ]
        )
        return
    backend.execute_ddl(
        [
            "CREATE TABLE audit (key TEXT)",
            "CREATE FUNCTION audit_kv() RETURNS trigger AS $$ BEGIN "
            "INSERT INTO audit VALUES (NEW.key); RETURN NEW; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER kv_audit AFTER INSERT OR UPDATE ON kv "
            "FOR EACH ROW EXECUTE FUNCTION audit_kv()",
        ]
    )


def test_another_database_error_stops_the_batch_with_nothing_written(sql_database: str) -> None:
    handler = _handler(sql_database)
    with handler.sink.backend.transaction(None) as cur:
        cur.execute("DROP TABLE kv")
    with pytest.raises(SinkDatabaseError):
        _batch(handler, [rec(0), rec(1)])
    assert handler.sink.applied_position(T) is None
    _close(handler)


# -- columns from the record's fields --------------------------------------------------------------


def test_fields_mapped_to_columns(sql_database: str) -> None:
    handler = _handler(
        sql_database,
        columns={"customer": "customer.name", "total": "total", "items": "items"},
        columnTypes={"total": "NUMERIC(12, 2)"},
    )
    records = [
        rec(0, key="o1", value=b'{"customer": {"name": "Ann"}, "total": 12.5, "items": [1, 2]}'),
        rec(1, key="o2", value=b'{"total": 3}'),  # missing fields: NULL
        rec(2, key="o3", value=b"[1, 2]"),  # not an object: poison
        rec(3, key="o4", value=b'{"customer": {"name": "Bo"}}'),
        rec(4, key="o4", value=b""),  # a delete
    ]
    assert _batch(handler, records) == ["written", "written", "poisoned", "written", "written"]
    with handler.sink.backend.transaction(None) as cur:
        cur.execute("SELECT key, customer, total, items FROM kv ORDER BY key")
        rows = [(k, c, float(t) if t is not None else None, i) for k, c, t, i in cur.fetchall()]
    assert rows == [("o1", "Ann", 12.5, "[1,2]"), ("o2", None, 3.0, None)]
    assert "customer TEXT, total NUMERIC(12, 2), items TEXT" in handler.sink.schema
    single = handler.sink.write(rec(5, key="o5", value=b'{"customer": {"name": "Cy"}}'))
    assert single and "Cy" in handler.sink.rows()["o5"]
    _close(handler)


def test_top_level_fields_by_name_and_the_mapping_validated(tmp_path: Any) -> None:
    database = str(tmp_path / "sink.db")
    handler = _handler(database, columns=["a", "b"])
    assert _batch(handler, [rec(0, value=b'{"a": "x", "b": 2, "c": 3}')]) == ["written"]
    assert handler.sink.rows() == {"k0": '{"a": "x", "b": "2"}'}
    _close(handler)
    for bad in (
        {"columns": {"key": "a"}},
        {"columns": {"a b": "a"}},
        {"columns": {"a": ""}},
        {"columns": "a"},
        {"columns": ["a"], "columnTypes": {"a": "TEXT; DROP TABLE kv"}},
        {"columns": ["a"], "columnTypes": {"b": "TEXT"}},
        {"columnTypes": {"a": "TEXT"}},
    ):
        with pytest.raises(ConfigurationError):
            _handler(str(tmp_path / "other.db"), **bad)
    with pytest.raises(ConfigurationError, match="without the columns"):
        _handler(database, columns=["z"])  # the table exists with columns a and b
