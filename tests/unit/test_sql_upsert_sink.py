"""The SQL upsert sink's effectively-once logic on SQLite and a real PostgreSQL (no broker)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from postgres_server import PostgresServer, free_port, sql_rows

from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink, open_backend
from pulsar_state.connectors.sink_group import GroupSettings, sink_function
from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.connectors.sql_backend import SinkDatabaseError, redact_database
from pulsar_state.errors import ConfigurationError, PulsarStateError
from pulsar_state.position import Position


def _open(database: str, table: str = "t") -> SqlUpsertSink:
    sink = SqlUpsertSink()
    sink.open({"database": database, "table": table})
    return sink


def test_upserts_deletes_and_skips_redeliveries(sql_database: str) -> None:
    sink = _open(sql_database)
    records = [
        SinkRecord("in", "a", b"1", Position(1, 0, -1)),
        SinkRecord("in", "b", b"2", Position(1, 1, -1)),
        SinkRecord("in", "a", b"3", Position(1, 2, -1)),
        SinkRecord("in", "b", b"", Position(1, 3, -1)),  # empty value deletes
    ]
    assert [sink.write(r) for r in records] == [True] * 4
    assert [sink.write(r) for r in records[1:]] == [False] * 3  # redelivered: no change
    assert sql_rows(sql_database, "t") == {"a": "3"}
    assert (sink.written, sink.skipped) == (4, 3)
    sink.close()
    again = _open(sql_database)  # a restart keeps the positions
    assert again.write(records[2]) is False
    assert again.write(SinkRecord("in", "c", b"4", Position(1, 4, -1))) is True
    # positions are per topic: another topic's older position still applies
    assert again.write(SinkRecord("other", "d", b"5", Position(0, 0, -1))) is True
    assert sql_rows(sql_database, "t") == {"a": "3", "c": "4", "d": "5"}
    assert again.rows() == {"a": "3", "c": "4", "d": "5"}
    again.close()


def test_concurrent_writers_apply_each_record_once(sql_database: str) -> None:
    """Two sinks racing over the same records (a redelivery to a second instance)."""
    records = [
        SinkRecord("in", f"k{i % 5}", str(i).encode(), Position(2, i, -1)) for i in range(40)
    ]
    sinks = [_open(sql_database, "race") for _ in range(2)]
    applied: list[bool] = []
    lock = threading.Lock()

    def run(sink: SqlUpsertSink) -> None:
        for record in records:
            ok = sink.write(record)
            with lock:
                applied.append(ok)

    threads = [threading.Thread(target=run, args=(s,)) for s in sinks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(applied) == 80
    # each record is applied at most once; the newest is always applied last
    assert sum(applied) <= 40 and sum(s.written for s in sinks) == sum(applied)
    assert sql_rows(sql_database, "race") == {f"k{i}": str(35 + i) for i in range(5)}
    for s in sinks:
        s.close()


def test_bad_config_and_records(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SqlUpsertSink().open({})
    with pytest.raises(ConfigurationError):
        SqlUpsertSink().open({"database": str(tmp_path / "x.db"), "table": "t; DROP"})
    with pytest.raises(ConfigurationError, match="unsupported URL scheme 'mysql'"):
        SqlUpsertSink().open({"database": "mysql://u:secret@h/db"})
    sink = _open(str(tmp_path / "y.db"))
    with pytest.raises(ValueError, match="no key"):
        sink.write(SinkRecord("in", None, b"1", Position(1, 0, -1)))
    sink.close()
    with pytest.raises(ConfigurationError, match="not open"):
        sink.write(SinkRecord("in", "a", b"1", Position(1, 0, -1)))


def test_postgres_url_errors() -> None:
    with pytest.raises(ConfigurationError, match="not a valid PostgreSQL URL"):
        open_backend("postgresql://u@h:notaport/db")
    port = free_port()  # nothing listens there
    with pytest.raises(SinkDatabaseError) as info:
        open_backend(f"postgresql://u:secret@127.0.0.1:{port}/db?connect_timeout=5")
    assert isinstance(info.value, PulsarStateError) and info.value.retriable
    assert "secret" not in str(info.value) and f"{port}" in str(info.value)


def test_password_is_redacted(postgres_server: PostgresServer) -> None:
    assert redact_database("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_database("/var/lib/x.db") == "/var/lib/x.db"
    sink = _open(postgres_server.create_database())
    config = sink.metadata_config({"database": "postgresql://u:pw@h/db", "table": "t"})
    assert config == {"database": "postgresql://u:***@h/db", "table": "t"}
    assert sink.backend.kind == "postgresql" and "BIGINT" not in sink.schema
    sink.close()


_RUNNER = {
    "serviceUrl": "pulsar://127.0.0.1:1",  # never reached: configs fail before connecting
    "adminUrl": "http://127.0.0.1:1",
    "topic": "persistent://acme/orders/in",
    "subscription": "orders-sink",
    "database": "/nonexistent/x.db",
}


def test_group_settings() -> None:
    assert GroupSettings.from_config(_RUNNER) is None  # no assignmentTopic: one failover runner
    settings = GroupSettings.from_config(
        {**_RUNNER, "assignmentTopic": "sink-assign", "sessionTimeoutS": 2}
    )
    assert settings is not None
    assert settings.name == "orders-sink"  # the subscription when there is no name
    assert settings.assignment_topic == "persistent://public/default/sink-assign"
    assert settings.membership_topic == "persistent://public/default/sink-assign-members"
    assert settings.member_id and "/" not in settings.member_id  # <hostname>-<pid>
    assert (settings.session_timeout_s, settings.session_check_interval_s) == (2.0, 1.0)
    assert sink_function("persistent://acme/orders/in", "s") == "acme/orders/sink-s"
    assert sink_function("in", "s") == "public/default/sink-s"


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"memberId": "w1"}, "needs 'assignmentTopic'"),
        ({"assignmentTopic": ""}, "'assignmentTopic' must be a non-empty string"),
        ({"assignmentTopic": "a", "membershipTopic": "a"}, "must differ"),
        ({"assignmentTopic": "a", "metadataTopic": "a-members"}, "must differ"),
        ({"assignmentTopic": "a", "adminUrl": None}, "needs 'adminUrl'"),
        ({"assignmentTopic": "a", "memberId": "a/b"}, "'memberId' must be"),
        ({"assignmentTopic": "a", "name": "x~y"}, "'name' must be"),
        ({"assignmentTopic": "a", "sessionTimeoutS": 0}, "'sessionTimeoutS' must be a number"),
        ({"assignmentTopic": "a", "sessionCheckIntervalS": True}, "must be a number"),
        ({"assignmentTopic": "a", "topic": "in-partition-1"}, "'topic' must be"),
        ({"assignmentTopic": "nonpersistent://x"}, "'assignmentTopic'"),
    ],
)
def test_group_settings_refuse_bad_values(extra: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        GroupSettings.from_config({**_RUNNER, **extra})
    with pytest.raises(ConfigurationError, match=match):  # the runner checks before connecting
        run_sink({**_RUNNER, **extra})
