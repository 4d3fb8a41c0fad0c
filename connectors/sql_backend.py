"""What the SQL sink needs from a database, and how one is chosen by its ``database`` string.

A :class:`SqlBackend` applies one record effectively once: in **one database
transaction** it locks the topic's stored position, skips the record when it is
at or before that position, upserts (or deletes) the row and stores the new
position. Before a record moves the position forward, the caller may look at
the stored position in that transaction and refuse (the sink's takeover-gap
check, :mod:`.sink`): nothing is changed then. The algorithm lives here; a
backend only says how to connect, how to open a transaction that serializes
writers of the same topic, and how its SQL is spelled (placeholders, column
types).

``database`` selects the backend (:func:`pulsar_state.connectors.sink.open_backend`):

* ``postgresql://user:pass@host:port/db`` (or ``postgres://``): PostgreSQL,
  through psycopg 3 (the ``postgres`` extra), see :mod:`.postgres_backend`;
* anything else without a URL scheme: a SQLite file path (the embedded
  default), see :mod:`.sqlite_backend`.
"""

from __future__ import annotations

import json
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from pulsar_state.connectors.sink_columns import VALUE_LAYOUT, Layout
from pulsar_state.errors import ConfigurationError, PulsarStateError
from pulsar_state.position import Position

log = logging.getLogger(__name__)

__all__ = [
    "POSITIONS_TABLE",
    "Change",
    "Cursor",
    "SinkDatabaseError",
    "SqlBackend",
    "plain_identifier",
    "database_password",
    "redact_database",
]

POSITIONS_TABLE = "_pss_positions"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SinkDatabaseError(PulsarStateError):
    """The sink's database failed: unreachable, refused the login, or a statement failed.

    ``retriable`` is true when trying again later can succeed (the server was
    unreachable or the connection dropped); the record was then not applied.
    ``refused_data`` is true when a statement refused the data it was given (a
    value that does not fit its column's type, a constraint): a record of it can
    never be written, while the others can.
    """

    def __init__(
        self, message: str, *, retriable: bool = False, refused_data: bool = False
    ) -> None:
        self.retriable = retriable
        self.refused_data = refused_data
        super().__init__(message)


def plain_identifier(name: Any, what: str) -> str:
    """``name`` if a plain SQL identifier (letters, digits, ``_``), else ConfigurationError."""
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ConfigurationError(f"{what} must be a plain SQL identifier, got {name!r}")
    return name


#: where ``pulsar-state sink run`` (no function secrets) takes the password from
PASSWORD_ENV = "PULSAR_STATE_DATABASE_PASSWORD"
#: the function secret (``secrets:`` of the function config) holding the password
PASSWORD_SECRET = "databasePassword"


def database_password(config: Mapping[str, Any], context: Any = None) -> str | None:
    """The database password, kept out of the plain sink config.

    In a function: the secret ``databasePassword`` (``context.get_secret``;
    with Pulsar's default secrets provider the ``secrets:`` map of the function
    config). Outside (``context`` is ``None``): the ``PULSAR_STATE_DATABASE_PASSWORD``
    environment variable. Still accepted, with a deprecation warning in the
    log: ``databasePassword`` in the plain config, or a password inside the
    ``database`` URL (which applies when nothing else gives one).
    """
    logger = context.get_logger() if context is not None else log
    secret = None
    if context is not None and callable(getattr(context, "get_secret", None)):
        secret = context.get_secret(PASSWORD_SECRET)
    elif context is None:
        secret = os.environ.get(PASSWORD_ENV)
    if secret:
        return str(secret)
    plain = config.get(PASSWORD_SECRET)
    where = "the function secret databasePassword" if context is not None else PASSWORD_ENV
    if plain:
        logger.warning(
            "deprecated: the sink's databasePassword is in the plain config; use %s", where
        )
        return str(plain)
    database = config.get("database")
    if isinstance(database, str) and redact_database(database) != database:
        logger.warning(
            "deprecated: the sink's database URL holds a password in the plain config; use %s",
            where,
        )
    return None


def redact_database(database: str) -> str:
    """The ``database`` string without a password, for logs and the metadata record."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/@]*):[^@/]*@", r"\1:***@", database)


class Cursor(Protocol):
    """The part of a DB-API cursor the backends use."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, params: Sequence[Sequence[Any]], /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    @property
    def description(self) -> Any: ...


@dataclass(frozen=True)
class Change:
    """One record for :meth:`SqlBackend.apply_batch`: its topic and position, and what it
    does to its key's row (``row`` ``None``: nothing, only the position is stored, as
    for a record that can never be a row; ``()``: delete; else the value columns)."""

    topic: str
    position: Position
    key: str | None = None
    row: tuple[Any, ...] | None = None
    #: how many messages the record's batch holds (stored with the position)
    batch_size: int | None = None


#: the topic check of :meth:`SqlBackend.apply_batch`: ``(topic, its positions in the
#: batch, the stored marker or None)`` -> the position at or before which its records
#: are redeliveries (``None``: none is); raising leaves everything as it was
TopicCheck = Callable[[str, list[Position], tuple[Position, int | None] | None], Position | None]


class SqlBackend(ABC):
    """One database connection of a sink; not shared between sinks."""

    #: ``sqlite`` or ``postgresql``
    kind: str
    #: the parameter placeholder of the driver
    placeholder: str
    #: the column type of ledger/entry/batch numbers
    integer_type: str
    #: whether a batch's rows go in one ``INSERT ... VALUES (...), (...)`` (when all
    #: value columns are text, so that every row's parameters have one type)
    multirow_values = False
    #: rows a multi-row statement takes at most
    MULTIROW_MAX = 1000

    # -- what a backend provides ---------------------------------------------------------

    @abstractmethod
    def transaction(self, topic: str | None) -> AbstractContextManager[Cursor]:
        """A transaction, committed on success, rolled back on an exception.

        With a ``topic``, no other writer of that topic's position runs
        concurrently (the stored position cannot change under the caller).
        Database failures raise :class:`SinkDatabaseError`.
        """

    @abstractmethod
    def execute_ddl(self, statements: Sequence[str]) -> None:
        """Run ``CREATE ... IF NOT EXISTS`` statements (committed)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection (idempotent)."""

    # -- shared -----------------------------------------------------------------------------

    def _sql(self, text: str) -> str:
        return text.replace("?", self.placeholder)

    def _lock(self, cur: Cursor, topic: str) -> None:  # noqa: B027 (a hook, optional)
        """Inside a transaction: serialize with the other writers of ``topic``'s position
        (a backend whose transactions already exclude each other does nothing)."""

    def schema(self, table: str, layout: Layout = VALUE_LAYOUT) -> str:
        """The data table's definition, as recorded in the sink's metadata."""
        return f"{table}(key TEXT PRIMARY KEY, {layout.definitions()}, position TEXT NOT NULL)"

    def create_tables(self, table: str, layout: Layout = VALUE_LAYOUT) -> None:
        """Create the data and positions tables when missing.

        Raises:
            ConfigurationError: the data table exists without a column of ``layout``.
        """
        n = self.integer_type
        self.execute_ddl(
            [
                f"CREATE TABLE IF NOT EXISTS {self.schema(table, layout)}",
                f"CREATE TABLE IF NOT EXISTS {POSITIONS_TABLE} "
                f"(topic TEXT PRIMARY KEY, ledger {n}, entry {n}, batch {n}, batch_size {n})",
            ]
        )
        with self.transaction(None) as cur:
            cur.execute(f"SELECT * FROM {table} WHERE 1 = 0")
            have = {str(d[0]).lower() for d in cur.description}
        missing = [c for c in ["key", *layout.columns, "position"] if c.lower() not in have]
        if missing:
            raise ConfigurationError(
                f"sink table {table} exists without the columns {missing} of the sink's "
                "config: drop it, or map the fields to its columns"
            )
        self._add_batch_size_column()

    def _positions_columns(self) -> set[str]:
        with self.transaction(None) as cur:
            cur.execute(f"SELECT * FROM {POSITIONS_TABLE} WHERE 1 = 0")
            return {str(d[0]).lower() for d in cur.description}

    def _add_batch_size_column(self) -> None:
        """A positions table made before batch sizes were stored gets the column
        (``NULL``: the size is not known)."""
        if "batch_size" in self._positions_columns():
            return
        exists = " IF NOT EXISTS" if self.kind == "postgresql" else ""
        try:
            self.execute_ddl(
                [f"ALTER TABLE {POSITIONS_TABLE} ADD COLUMN{exists} batch_size {self.integer_type}"]
            )
        except SinkDatabaseError:
            if "batch_size" not in self._positions_columns():  # not another sink's add
                raise

    def applied_position(self, cur: Cursor, topic: str) -> Position | None:
        """The position stored for ``topic`` (read inside :meth:`transaction`)."""
        marker = self.applied_marker(cur, topic)
        return None if marker is None else marker[0]

    def applied_marker(self, cur: Cursor, topic: str) -> tuple[Position, int | None] | None:
        """The position stored for ``topic`` and the size of its batch (``None``: not
        a batch message, or not known), read inside :meth:`transaction`."""
        row = cur.execute(
            self._sql(
                f"SELECT ledger, entry, batch, batch_size FROM {POSITIONS_TABLE} WHERE topic = ?"
            ),
            (topic,),
        ).fetchone()
        if row is None or row[0] is None:
            return None
        size = int(row[3]) if row[3] is not None else None
        return Position(int(row[0]), int(row[1]), int(row[2])), size

    def apply(
        self,
        table: str,
        topic: str,
        key: str,
        value: bytes,
        position: Position,
        *,
        batch_size: int | None = None,
        replacing: Position | None = None,
        before: Callable[[Position, int | None], None] | None = None,
        layout: Layout = VALUE_LAYOUT,
        row: tuple[Any, ...] | None = None,
    ) -> bool:
        """Upsert (or, for an empty value, delete) ``key`` unless ``position`` was applied.

        Returns ``False`` for a record at or before the stored position (a
        redelivery: nothing changes). Row change and position are one transaction.
        ``replacing``: a stored position found to be of another incarnation of
        the topic (:mod:`.topic_incarnation`); while it is still the stored one,
        the record is applied and its position replaces it.
        ``batch_size``: how many messages the record's batch holds (stored with
        the position). ``before``: called in the transaction with the stored
        position (of this incarnation) and its batch size when the record moves
        past it; what it raises leaves everything as it was. ``layout`` and ``row``:
        the table's value columns and the record's values for them
        (:mod:`.sink_columns`; default: the value as text in ``value``).
        """
        with self.transaction(topic) as cur:
            if not self._moves_forward(cur, topic, position, replacing, before):
                return False
            if not value:
                self._write_rows(cur, table, layout, [], [key])
            else:
                values = row if row is not None else (value.decode(),)
                self._write_rows(cur, table, layout, [(key, values, position)], [])
            self._store_position(cur, topic, position, batch_size)
        return True

    def _write_rows(
        self,
        cur: Cursor,
        table: str,
        layout: Layout,
        upserts: Sequence[tuple[str, tuple[Any, ...], Position]],
        deletes: Sequence[str],
    ) -> None:
        """Upsert ``(key, value columns, position)`` rows and delete ``deletes`` (distinct keys)."""
        if upserts:
            columns = layout.columns
            names = ", ".join(["key", *columns, "position"])
            marks = "(" + ", ".join("?" * (len(columns) + 2)) + ")"
            updates = ", ".join(f"{c} = excluded.{c}" for c in [*columns, "position"])
            rows = [(key, *values, str(position)) for key, values, position in upserts]
            if self.multirow_values and layout.all_text and len(rows) > 1:
                for at in range(0, len(rows), self.MULTIROW_MAX):
                    chunk = rows[at : at + self.MULTIROW_MAX]
                    cur.execute(
                        self._sql(
                            f"INSERT INTO {table} ({names}) VALUES "
                            f"{', '.join([marks] * len(chunk))} "
                            f"ON CONFLICT (key) DO UPDATE SET {updates}"
                        ),
                        [p for row in chunk for p in row],
                    )
            else:
                self._execute_many(
                    cur,
                    self._sql(
                        f"INSERT INTO {table} ({names}) VALUES {marks} "
                        f"ON CONFLICT (key) DO UPDATE SET {updates}"
                    ),
                    rows,
                )
        if deletes:
            self._execute_many(
                cur, self._sql(f"DELETE FROM {table} WHERE key = ?"), [(k,) for k in deletes]
            )

    @staticmethod
    def _execute_many(cur: Cursor, sql: str, params: list[tuple[Any, ...]]) -> None:
        if len(params) == 1:
            cur.execute(sql, params[0])
        else:
            cur.executemany(sql, params)

    def apply_batch(
        self,
        table: str,
        changes: Sequence[Change],
        check: TopicCheck,
        *,
        layout: Layout = VALUE_LAYOUT,
    ) -> list[bool]:
        """Apply ``changes`` (records in the order received, of one or more topics) in
        **one** transaction; for each, whether it was applied.

        Each topic's stored position is locked and read first, and ``check`` (the
        sink's redelivery and takeover-gap checks, :mod:`.sink_batch_write`) says
        at or before which position its records are redeliveries: those change
        nothing. Of the rest, the last change of each key is written (rows
        upserted or deleted with one ``executemany`` each) and each topic's last
        position stored, with its batch size. What ``check`` raises, and any
        database error, leaves everything as it was.
        """
        topics: dict[str, list[Position]] = {}
        for change in changes:
            topics.setdefault(change.topic, []).append(change.position)
        with self.transaction(None) as cur:
            skip_through: dict[str, Position | None] = {}
            for topic in sorted(topics):  # one lock order for every writer
                self._lock(cur, topic)
                skip_through[topic] = check(topic, topics[topic], self.applied_marker(cur, topic))
            applied: list[bool] = []
            latest: dict[str, Change] = {}
            rows: dict[str, Change] = {}
            for change in changes:
                done = skip_through[change.topic]
                forward = done is None or done < change.position
                applied.append(forward)
                if forward:
                    latest[change.topic] = change
                    if change.key is not None and change.row is not None:
                        rows.pop(change.key, None)
                        rows[change.key] = change
            self._write_rows(
                cur,
                table,
                layout,
                [(k, c.row, c.position) for k, c in rows.items() if c.row],
                [k for k, c in rows.items() if not c.row],
            )
            for topic, change in latest.items():
                self._store_position(cur, topic, change.position, change.batch_size)
        return applied

    def advance(
        self,
        topic: str,
        position: Position,
        *,
        batch_size: int | None = None,
        replacing: Position | None = None,
        before: Callable[[Position, int | None], None] | None = None,
    ) -> bool:
        """Store ``position`` as applied without a row change (a record that can never
        be a row, handled elsewhere); as :meth:`apply` otherwise."""
        with self.transaction(topic) as cur:
            if not self._moves_forward(cur, topic, position, replacing, before):
                return False
            self._store_position(cur, topic, position, batch_size)
        return True

    def _moves_forward(
        self,
        cur: Cursor,
        topic: str,
        position: Position,
        replacing: Position | None,
        before: Callable[[Position, int | None], None] | None,
    ) -> bool:
        marker = self.applied_marker(cur, topic)
        if marker is None or marker[0] == replacing:
            return True
        applied, size = marker
        if not position > applied:
            return False
        if before is not None:
            before(applied, size)
        return True

    def _store_position(
        self, cur: Cursor, topic: str, position: Position, batch_size: int | None
    ) -> None:
        size = batch_size if position.batch >= 0 and batch_size else None
        cur.execute(
            self._sql(
                f"INSERT INTO {POSITIONS_TABLE} (topic, ledger, entry, batch, batch_size) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (topic) DO UPDATE SET "
                "ledger = excluded.ledger, entry = excluded.entry, batch = excluded.batch, "
                "batch_size = excluded.batch_size"
            ),
            (topic, position.ledger, position.entry, position.batch, size),
        )

    def rows(self, table: str, layout: Layout = VALUE_LAYOUT) -> dict[str, str]:
        """Every ``key -> value`` of the data table (for tools and tests); with mapped
        columns the value is the JSON object of the row's columns."""
        columns = layout.columns
        with self.transaction(None) as cur:
            cur.execute(f"SELECT key, {', '.join(columns)} FROM {table}")
            found = cur.fetchall()
        if layout.fields is None:
            return {str(key): str(value) for key, value in found}
        return {
            str(key): json.dumps(dict(zip(columns, values, strict=True)), default=str)
            for key, *values in found
        }
