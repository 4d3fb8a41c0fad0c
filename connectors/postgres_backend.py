"""The SQL sink on PostgreSQL (``database: postgresql://user:pass@host:5432/db``).

Needs psycopg 3 (``pip install 'pulsar-shared-state[postgres]'``). One
connection per sink in autocommit mode; each record, or each batch of records
(:meth:`~.sql_backend.SqlBackend.apply_batch`), is one explicit transaction.
Writers of the same topic serialize on that topic's row of the positions table:
the row is created if missing (``ON CONFLICT DO NOTHING``) and locked with
``SELECT ... FOR UPDATE`` before the stored position is read, so the check
"already applied?" and the write that advances the position cannot interleave
with another writer's, under PostgreSQL's default isolation.

Errors: a URL psycopg cannot parse is a :class:`ConfigurationError`; a server
that cannot be reached (or refuses the login) raises :class:`SinkDatabaseError`
with ``retriable=True`` at ``open``; a connection lost mid-write raises the
same, after the transaction was rolled back (nothing of the record applied).
A statement that refuses its data (``DataError``, ``IntegrityError``: a value
that does not fit its column) raises it with ``refused_data=True``.
The next transaction connects again (a server restarted, or a database that
refused connections for a while, is used again without reopening the sink);
while it cannot, it raises the same retriable error.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from pulsar_state.connectors.sql_backend import (
    POSITIONS_TABLE,
    Cursor,
    SinkDatabaseError,
    SqlBackend,
    redact_database,
)
from pulsar_state.errors import ConfigurationError

__all__ = ["PostgresBackend"]

#: the advisory lock key sinks take around their CREATE TABLE statements
_DDL_LOCK = 0x7053_5354  # "pSST"

try:
    import psycopg
    from psycopg import conninfo
except ImportError:  # pragma: no cover - depends on the installed extras
    psycopg = None  # type: ignore[assignment]


class PostgresBackend(SqlBackend):
    """A PostgreSQL database named by URL; see the module docstring."""

    kind = "postgresql"
    placeholder = "%s"
    integer_type = "BIGINT"
    multirow_values = True

    def __init__(
        self, url: str, *, password: str | None = None, connect_timeout_s: int = 10
    ) -> None:
        """``password``, when given, overrides one in ``url`` (see ``database_password``)."""
        self.url = redact_database(url)
        if psycopg is None:
            raise ConfigurationError(
                "a postgresql:// database needs psycopg 3: install pulsar-shared-state[postgres]"
            )
        try:
            conninfo.conninfo_to_dict(url)
            parts = urlsplit(url)
            if "," not in parts.netloc:  # (a multi-host URL has a port per host)
                _ = parts.port  # a port that is not a number raises ValueError
        except (psycopg.ProgrammingError, ValueError) as exc:
            raise ConfigurationError(
                f"sink 'database' {self.url!r} is not a valid PostgreSQL URL: {exc}"
            ) from None
        self._dsn = url
        self._password = password
        self._connect_timeout_s = connect_timeout_s
        self._closed = False
        self._db: psycopg.Connection[Any] | None = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            extra: dict[str, Any] = {} if self._password is None else {"password": self._password}
            return psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=self._connect_timeout_s, **extra
            )
        except psycopg.OperationalError as exc:
            raise SinkDatabaseError(
                f"cannot connect to PostgreSQL at {self.url}: {exc}".strip(), retriable=True
            ) from exc

    def _conn(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise SinkDatabaseError(f"PostgreSQL connection to {self.url} is closed")
        if self._db is None or self._db.closed or self._db.broken:
            if self._db is not None:
                self._db.close()
            self._db = None
            self._db = self._connect()  # lost (server restarted, terminated): connect again
        return self._db

    @contextmanager
    def transaction(self, topic: str | None) -> Iterator[Cursor]:
        db = self._conn()
        try:
            with db.transaction(), db.cursor() as cur:
                if topic is not None:
                    self._lock(cur, topic)
                yield cur
        except psycopg.OperationalError as exc:
            raise SinkDatabaseError(
                f"PostgreSQL at {self.url}: {exc}".strip(), retriable=True
            ) from exc
        except psycopg.Error as exc:
            refused = isinstance(exc, psycopg.DataError | psycopg.IntegrityError)
            raise SinkDatabaseError(
                f"PostgreSQL at {self.url}: {exc}".strip(), refused_data=refused
            ) from exc

    def _lock(self, cur: Cursor, topic: str) -> None:
        cur.execute(
            f"INSERT INTO {POSITIONS_TABLE} (topic) VALUES (%s) ON CONFLICT (topic) DO NOTHING",
            (topic,),
        )
        cur.execute(f"SELECT 1 FROM {POSITIONS_TABLE} WHERE topic = %s FOR UPDATE", (topic,))

    def execute_ddl(self, statements: Sequence[str]) -> None:
        with self.transaction(None) as cur:
            # concurrent CREATE TABLE IF NOT EXISTS can collide in the catalog: one at a time
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
            for statement in statements:
                cur.execute(statement)

    def close(self) -> None:
        self._closed = True
        if self._db is not None:
            self._db.close()
            self._db = None
