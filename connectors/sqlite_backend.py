"""The SQL sink's embedded default: a SQLite file (``database: /path/to/file.db``).

One connection in autocommit mode with explicit ``BEGIN IMMEDIATE``
transactions: the write lock is taken up front, so two writers of the same file
serialize instead of failing on upgrade. WAL journal mode lets readers (tools,
tests) look while the sink writes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pulsar_state.connectors.sql_backend import Cursor, SinkDatabaseError, SqlBackend

__all__ = ["SqliteBackend"]


class SqliteBackend(SqlBackend):
    """A SQLite file; see the module docstring."""

    kind = "sqlite"
    placeholder = "?"
    integer_type = "INTEGER"

    def __init__(self, path: str, *, timeout_s: float = 30.0) -> None:
        self.path = path
        try:
            self._db: sqlite3.Connection | None = sqlite3.connect(
                path, timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise SinkDatabaseError(f"cannot open SQLite database {path!r}: {exc}") from exc

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise SinkDatabaseError(f"SQLite database {self.path!r} is closed")
        return self._db

    @contextmanager
    def transaction(self, topic: str | None) -> Iterator[Cursor]:
        db = self._conn()
        try:
            db.execute("BEGIN IMMEDIATE")  # the write lock serializes every writer
        except sqlite3.Error as exc:
            raise SinkDatabaseError(f"SQLite {self.path!r}: {exc}", retriable=True) from exc
        try:
            yield db.cursor()
        except sqlite3.Error as exc:
            db.execute("ROLLBACK")
            refused = isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError)
            raise SinkDatabaseError(f"SQLite {self.path!r}: {exc}", refused_data=refused) from exc
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def execute_ddl(self, statements: Sequence[str]) -> None:
        with self.transaction(None) as cur:
            for statement in statements:
                cur.execute(statement)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
