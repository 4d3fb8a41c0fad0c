"""The SQLite upsert sink's effectively-once logic (no broker needed)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pulsar_state.connectors.sink import SinkRecord, SqliteUpsertSink
from pulsar_state.errors import ConfigurationError
from pulsar_state.position import Position


def _rows(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT key, value FROM t").fetchall())


def test_upserts_deletes_and_skips_redeliveries(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    sink = SqliteUpsertSink()
    sink.open({"database": str(db), "table": "t"})
    records = [
        SinkRecord("in", "a", b"1", Position(1, 0, -1)),
        SinkRecord("in", "b", b"2", Position(1, 1, -1)),
        SinkRecord("in", "a", b"3", Position(1, 2, -1)),
        SinkRecord("in", "b", b"", Position(1, 3, -1)),  # empty value deletes
    ]
    assert [sink.write(r) for r in records] == [True] * 4
    assert [sink.write(r) for r in records[1:]] == [False] * 3  # redelivered: no change
    assert _rows(db) == {"a": "3"}
    sink.close()
    again = SqliteUpsertSink()  # a restart keeps the positions
    again.open({"database": str(db), "table": "t"})
    assert again.write(records[2]) is False
    assert again.write(SinkRecord("in", "c", b"4", Position(1, 4, -1))) is True
    assert _rows(db) == {"a": "3", "c": "4"}
    again.close()


def test_bad_config_and_records(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        SqliteUpsertSink().open({})
    with pytest.raises(ConfigurationError):
        SqliteUpsertSink().open({"database": str(tmp_path / "x.db"), "table": "t; DROP"})
    sink = SqliteUpsertSink()
    sink.open({"database": str(tmp_path / "y.db")})
    with pytest.raises(ValueError, match="no key"):
        sink.write(SinkRecord("in", None, b"1", Position(1, 0, -1)))
    sink.close()
