"""A Python sink (the Pulsar IO ``Sink`` contract) that upserts keyed records into SQL.

Contract, as Pulsar IO defines it: ``open(config, context)``, ``write(record)``,
``close()``. ``SqliteUpsertSink`` keeps the latest value per message key in a
table (an empty value deletes the row) — SQLite is the embedded default.

Effectively once: each write stores the record's position (ledger, entry,
batch) for its topic in the same database transaction as the row change, and
a record at or before the stored position is skipped. Redelivery after a crash
therefore changes nothing; this needs records of a topic partition in order
(one active consumer: a failover subscription, ``retainOrdering: true``).

Metadata in the core: on ``open`` the sink records its configuration and table
schema, versioned, in a ``PulsarMap`` (``metadataTopic``; key
``sink/<name>``): a changed config gets the next version, an unchanged one
keeps its version.

Pulsar's native sink runtime is Java-only, so the sink runs either inside the
functions runtime (:class:`SinkFunction`, a function with no output topic) or
on its own (``pulsar-state sink run --config sink.yaml``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any

from pulsar import Function

from pulsar_state.errors import ConfigurationError
from pulsar_state.position import Position
from pulsar_state.pulsar_map import PulsarMap

__all__ = ["SinkFunction", "SinkRecord", "SqliteUpsertSink"]

_IDENT_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _ident(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name or not set(name) <= _IDENT_OK or name[0].isdigit():
        raise ConfigurationError(f"{what} must be a plain SQL identifier, got {name!r}")
    return name


@dataclass(frozen=True)
class SinkRecord:
    """What ``write`` gets: Pulsar IO's Record reduced to what the sink uses."""

    topic: str
    key: str | None
    value: bytes
    position: Position


class SqliteUpsertSink:
    """Latest value per key in a SQLite table, effectively once. See the module docstring."""

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.table = "kv"
        self.written = 0
        self.skipped = 0

    def open(self, config: dict[str, Any], context: Any = None) -> None:
        database = config.get("database")
        if not isinstance(database, str) or not database:
            raise ConfigurationError("sink config needs 'database' (a SQLite file path)")
        self.table = _ident(config.get("table", "kv"), "table")
        self._db = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            f"CREATE TABLE IF NOT EXISTS {self.table} "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, position TEXT NOT NULL)"
        )
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS _pss_positions "
            "(topic TEXT PRIMARY KEY, ledger INTEGER, entry INTEGER, batch INTEGER)"
        )

    def write(self, record: SinkRecord) -> bool:
        """Apply one record; ``False`` when it was already applied (a redelivery)."""
        db = self._db
        if db is None:
            raise ConfigurationError("the sink is not open")
        if record.key is None:
            raise ValueError(f"record at {record.position} on {record.topic} has no key")
        pos = record.position
        with self._lock:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT ledger, entry, batch FROM _pss_positions WHERE topic = ?",
                    (record.topic,),
                ).fetchone()
                if row is not None and not pos > Position(*row):
                    db.execute("ROLLBACK")
                    self.skipped += 1
                    return False
                if record.value:
                    db.execute(
                        f"INSERT INTO {self.table} (key, value, position) VALUES (?, ?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
                        "position = excluded.position",
                        (record.key, record.value.decode(), str(pos)),
                    )
                else:
                    db.execute(f"DELETE FROM {self.table} WHERE key = ?", (record.key,))
                db.execute(
                    "INSERT INTO _pss_positions (topic, ledger, entry, batch) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(topic) DO UPDATE SET ledger = excluded.ledger, "
                    "entry = excluded.entry, batch = excluded.batch",
                    (record.topic, pos.ledger, pos.entry, pos.batch),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        self.written += 1
        return True

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def record_metadata(
    records: PulsarMap[str, Any], name: str, config: dict[str, Any], schema: str
) -> int:
    """Store the sink's config and schema in the core; return its config version."""
    key = f"sink/{name}"
    wanted = {"config": config, "schema": schema}
    result: dict[str, int] = {}

    def gen(state: dict[str, Any]) -> list[Any]:
        current = state.get(key)
        if current is not None and {k: current[k] for k in wanted} == wanted:
            result["version"] = current["version"]
            return []
        version = 0 if current is None else current["version"] + 1
        result["version"] = version
        record = {**wanted, "version": version, "updateTime": int(time.time() * 1000)}
        return [records._op(key, record)]

    records.manager.write(gen).result(timeout=60)
    return result["version"]


class SinkFunction(Function):  # type: ignore[misc]
    """Runs :class:`SqliteUpsertSink` inside the functions runtime (no output topic).

    User config: ``database``, ``table`` (default ``kv``), optional
    ``metadataTopic`` and ``adminUrl`` for the config record in the core.
    """

    def __init__(self) -> None:
        self._sink: SqliteUpsertSink | None = None
        self._lock = threading.Lock()
        self.config_version: int | None = None

    def _open(self, context: Any) -> SqliteUpsertSink:
        with self._lock:
            if self._sink is None:
                config = dict(context.get_user_config_map())
                sink = SqliteUpsertSink()
                sink.open(config, context)
                metadata_topic = config.get("metadataTopic")
                if metadata_topic:
                    with PulsarMap[str, Any](
                        context.get_pulsar_client(),
                        metadata_topic,
                        admin_url=config.get("adminUrl"),
                    ) as records:
                        schema = f"{sink.table}(key TEXT PRIMARY KEY, value TEXT, position TEXT)"
                        self.config_version = record_metadata(
                            records, context.get_function_name(), config, schema
                        )
                self._sink = sink
            return self._sink

    def process(self, input: Any, context: Any) -> None:
        sink = self._open(context)
        value = input if isinstance(input, bytes) else str(input).encode()
        record = SinkRecord(
            topic=context.get_current_message_topic_name(),
            key=context.get_partition_key(),
            value=value,
            position=Position.from_message_id(context.get_message_id()),
        )
        if not sink.write(record):
            context.get_logger().info("skipped redelivered record %s", record.position)

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
