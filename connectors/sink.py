"""A Python sink (the Pulsar IO ``Sink`` contract) that upserts keyed records into SQL.

Contract, as Pulsar IO defines it: ``open(config, context)``, ``write(record)``,
``close()``. ``SqlUpsertSink`` keeps the latest value per message key in a
table (an empty value deletes the row). The config's ``database`` picks the
database (:mod:`.sql_backend`): a file path is SQLite, the embedded default;
a ``postgresql://user:pass@host:port/db`` URL is PostgreSQL (the ``postgres``
extra).

Effectively once: each write stores the record's position (ledger, entry,
batch) for its topic in the same database transaction as the row change, and
a record at or before the stored position is skipped. The runner writes a
batch of records in one transaction (:mod:`.sink_batch_write`): its rows and
each partition's last position; :class:`SinkFunction` one record a
transaction (Pulsar's runtime acknowledges a record when ``process``
returns). The table holds the whole value in one column, or the fields of a
JSON value in columns of their own (:mod:`.sink_columns`), named in the config
or taken from the input topic's schema (``columns: schema``,
:mod:`.sink_schema`). Redelivery after a crash
therefore changes nothing; before skipping, the stored position is checked
against the topic as it is now (:mod:`.topic_incarnation`, one admin call per
redelivery burst, none for records that move forward): a position of another
incarnation of the topic (re-created, or a database restored next to another
cluster) is replaced, with a WARNING, instead of skipping the new records
(``positionMismatch: reset``, the default; ``fail`` stops on it). This
needs records of a topic partition in order
(one active consumer: a failover subscription, ``retainOrdering: true``, or
the exclusive consumers of a runner group, :mod:`.sink_group`).
:class:`SinkFunction` refuses to run without in-order delivery, as the
stateful kit does.

A failed write is never skipped: inside the functions runtime (which nacks the
record and goes on with the next one) the later records of that partition are
held back until the failed one is redelivered and written
(:mod:`pulsar_state.scheduling.in_order`); the runner retries it in place. A
database outage therefore delays records, never drops one. A PostgreSQL
connection lost in an outage is opened again on the next write.

A takeover never skips a record either. When a failover's active consumer goes
away, the broker may give the partition to the next one from its read
position: the records dispatched to the one that left come back only when the
cursor is rewound, after newer ones. A write that moves past a position stored
by another writer (another instance, or this process before a restart) is
checked in its own transaction: when the positions prove a record between
them (:func:`~pulsar_state.scheduling.in_order.first_missing`), nothing is
written and :class:`TakeoverGapError` holds the record back; the in-order gate
asks for the redelivery and passes a gap still open after 60 s with a warning
(:meth:`~pulsar_state.scheduling.in_order.InOrderGate.hold_gap`). Records after
the sink's own last write are not checked: they come from its own consumer.

A record that can never be written (no key, a key or value that is not UTF-8)
is a *poison* record: it goes to ``deadLetterTopic`` when configured, else it
is logged and skipped, counted either way (:mod:`.dead_letter`), and its
position is stored as done; the partition keeps flowing.

Metadata in the core: on ``open`` the sink records its configuration (the
database password redacted) and table schema, versioned, in a ``PulsarMap``
(``metadataTopic``; key ``sink/<name>``): a changed config gets the next
version, an unchanged one keeps its version.

Pulsar's native sink runtime is Java-only, so the sink runs either inside the
functions runtime (:class:`SinkFunction`, a function with no output topic) or
on its own (``pulsar-state sink run --config sink.yaml``). Inside the functions
runtime the broker's failover subscription decides which instance consumes
which input partition; each instance records, in the same map, the partitions
it took over (key ``sink/<name>/owner/<partition topic>`` -> ``{"instance",
"since"}``), so the assignment is readable from the core there too. Runner
groups (:mod:`.sink_group`) decide it themselves, through the scheduler.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.connectors.postgres_backend import PostgresBackend
from pulsar_state.connectors.sink_columns import VALUE_LAYOUT, layout_from_config
from pulsar_state.connectors.sink_schema import prepare_table, schema_layout, uses_schema
from pulsar_state.connectors.sql_backend import (
    SqlBackend,
    database_password,
    plain_identifier,
    redact_database,
)
from pulsar_state.connectors.sqlite_backend import SqliteBackend
from pulsar_state.connectors.topic_incarnation import (
    PositionGuard,
    TopicIncarnationError,
)
from pulsar_state.errors import (
    ConfigurationError,
    MessageHeldBackError,
    PoisonRecordError,
)
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.position import Position
from pulsar_state.runtime.secrets import function_admin_headers
from pulsar_state.runtime.tls import config_admin_endpoint
from pulsar_state.scheduling.in_order import (
    InOrderGate,
    first_missing,
)

__all__ = [
    "SinkRecord",
    "SqlUpsertSink",
    "SqliteUpsertSink",
    "TakeoverGapError",
    "hold_past_gap",
    "open_backend",
    "record_metadata",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def open_backend(database: Any, password: str | None = None) -> SqlBackend:
    """Connect to the database that the sink config's ``database`` names."""
    if not isinstance(database, str) or not database:
        raise ConfigurationError(
            "sink config needs 'database': a SQLite file path or a postgresql:// URL"
        )
    scheme = _SCHEME.match(database)
    if scheme is None:
        return SqliteBackend(database)
    if scheme.group(1).lower() in ("postgresql", "postgres"):
        return PostgresBackend(database, password=password)
    raise ConfigurationError(
        f"sink 'database' {redact_database(database)!r}: unsupported URL scheme "
        f"{scheme.group(1)!r} (a SQLite file path or a postgresql:// URL)"
    )


@dataclass(frozen=True)
class SinkRecord:
    """What ``write`` gets: Pulsar IO's Record reduced to what the sink uses.

    ``key`` is ``None`` for a record without one, and the raw bytes of a key
    that is not UTF-8 (:func:`~.dead_letter.read_key`); ``properties`` are kept
    for the dead-letter topic; ``batch_size`` is stored with the position
    (:func:`~pulsar_state.scheduling.in_order.batch_size`), so that an instance
    taking over after part of a batch waits for its rest.
    """

    topic: str
    key: str | bytes | None
    value: bytes
    position: Position
    properties: Mapping[str, str] = field(default_factory=dict)
    #: how many messages the record's batch holds (``None``: not a batch, or not known)
    batch_size: int | None = None


class TakeoverGapError(MessageHeldBackError):
    """A record that would be written past records of its partition not written yet.

    Raised by :meth:`SqlUpsertSink.write` (nothing written) when the position was
    stored by another writer and the positions prove that ``missing``, between
    ``stored`` and ``position``, exists: it is still to come (a failover's
    rewind brings it after newer records). The caller holds the record back and
    asks for the redelivery (:meth:`~pulsar_state.scheduling.in_order.InOrderGate.hold_gap`).
    """

    def __init__(
        self,
        topic: str,
        position: Position,
        stored: Position,
        missing: Position,
        stored_batch_size: int | None = None,
    ) -> None:
        self.topic, self.position, self.stored, self.missing = topic, position, stored, missing
        #: how many messages the stored position's batch holds, when known
        self.stored_batch_size = stored_batch_size
        super().__init__(
            f"{topic}: record {position} is held back: the position stored by another "
            f"writer is {stored}, and {missing} was not written yet"
        )


def hold_past_gap(
    gate: InOrderGate,
    gap: TakeoverGapError,
    redeliver: Callable[[], None] | None,
) -> None:
    """Hold the record of ``gap`` in ``gate`` until the missing records are written:
    :meth:`~pulsar_state.scheduling.in_order.InOrderGate.hold_gap` (raises
    MessageHeldBackError; returns once the gap was waited out).

    The gate asks ``redeliver`` at once, then again with its backoff until its
    floor is lifted or it is closed: a request the broker ignores, made while it
    still waits to rewind after the failover ("consumer is waiting for cursor to
    be rewinded"), is followed by the next one (it used to leave the partition
    still for the runtime's 60 s negative-ack delay when nothing else came).
    The gate's ``close`` stops the requests.
    """
    gate.hold_gap(
        gap.topic, gap.position, gap.stored, redeliver, done_batch_size=gap.stored_batch_size
    )


class SqlUpsertSink:
    """Latest value per key in a SQL table, effectively once. See the module docstring.

    Config: ``database`` (a SQLite path or a ``postgresql://`` URL), ``table``
    (a plain identifier, default ``kv``), ``adminUrl`` (to check a stored
    position before skipping, :mod:`.topic_incarnation`), ``positionMismatch``
    (``reset``, the default, or ``fail``). Opens its connection in ``open``
    (where it runs); not picklable once open.
    """

    #: tries of a record whose stored position changes while it is replaced
    REPLACE_TRIES = 3

    def __init__(self) -> None:
        self._backend: SqlBackend | None = None
        self._guard: PositionGuard | None = None
        self._checks: dict[str, int] = {}
        self._lock = threading.Lock()
        #: per topic, the position of the last record this sink applied
        self._own: dict[str, Position] = {}
        self.table = "kv"
        self.layout = VALUE_LAYOUT
        self.written = 0
        self.skipped = 0
        #: records it could never write (dead-lettered or skipped, see :mod:`.dead_letter`)
        self.poisoned = 0

    @property
    def backend(self) -> SqlBackend:
        if self._backend is None:
            raise ConfigurationError("the sink is not open")
        return self._backend

    @property
    def schema(self) -> str:
        return self.backend.schema(self.table, self.layout)

    def open(
        self,
        config: dict[str, Any],
        context: Any = None,
        *,
        admin: AdminEndpoint | None = None,
        topics: list[str] | None = None,
    ) -> None:
        """Connect and create the tables.

        ``admin``: the admin API of the position check, with its credentials and TLS
        trust (the runner's, config and command line merged); without it, the
        config's ``adminUrl`` with its ``tlsTrustCertsFilePath`` /
        ``tlsAllowInsecureConnection`` and, in a function, the ``adminToken`` secret
        (:func:`~pulsar_state.runtime.tls.config_admin_endpoint`). ``topics``: the
        input topics, whose schema ``columns: schema`` reads (:mod:`.sink_schema`;
        default: the function's inputs, else the config's ``topic``).

        Raises:
            ConfigurationError: a bad setting (or, with ``columns: schema``, a schema
                it cannot map or a table that does not match it), before any write.
        """
        table = plain_identifier(config.get("table", "kv"), "table")
        if admin is None:
            admin = config_admin_endpoint(
                config.get,
                headers=function_admin_headers(context) if context is not None else None,
            )
        if uses_schema(config):
            if topics is None and context is not None:
                topics = list(context.get_input_topics())
            layout = schema_layout(config, topics or config.get("topic"), admin)
        else:
            layout = layout_from_config(config)
        guard = PositionGuard(
            admin=admin,
            mode=str(config.get("positionMismatch", "reset")),
            logger=context.get_logger() if context is not None else None,
        )
        backend = open_backend(config.get("database"), database_password(config, context))
        try:
            if layout.source is not None:  # from the schema: check the table, add fields
                prepare_table(backend, table, layout)
            backend.create_tables(table, layout)
        except BaseException:
            backend.close()
            guard.close()
            raise
        self.table, self.layout = table, layout
        self._backend, self._guard, self._checks = backend, guard, guard.counts

    @staticmethod
    def validate(record: SinkRecord) -> None:
        """PoisonRecordError for a record that can never become a row."""
        where = f"record at {record.position} on {record.topic}"
        if record.key is None:
            raise PoisonRecordError(f"{where} has no key")
        if isinstance(record.key, bytes):
            raise PoisonRecordError(f"{where}: its key is not UTF-8 text")
        try:
            record.value.decode()
        except UnicodeDecodeError as exc:
            raise PoisonRecordError(f"{where}: its value is not UTF-8 text ({exc})") from None

    def row(self, record: SinkRecord) -> tuple[Any, ...]:
        """The value columns of ``record`` (:mod:`.sink_columns`); ``()`` for a delete.

        Raises:
            PoisonRecordError: a record that can never become a row.
        """
        if not isinstance(record.key, str):
            self.validate(record)  # raises: no key, or not UTF-8
        try:
            return self.layout.row(record.value) if record.value else ()
        except PoisonRecordError as exc:  # named here, not for every record
            where = f"record at {record.position} on {record.topic}"
            raise PoisonRecordError(f"{where}: {exc}") from None

    def write(self, record: SinkRecord, *, past_gap: bool = False) -> bool:
        """Apply one record; ``False`` when it was already applied (a redelivery).

        Raises PoisonRecordError, before touching the database, for a record
        that can never be written; SinkDatabaseError when the database fails;
        TakeoverGapError, changing nothing, for a record that would be written
        past records not written yet (see :meth:`gap_check`), unless ``past_gap``
        (the caller waited for them long enough).
        """
        backend = self.backend
        row = self.row(record)
        assert isinstance(record.key, str)
        key, value = record.key, record.value
        with self._lock:
            applied = self._apply(
                record,
                lambda replacing, before: backend.apply(
                    self.table,
                    record.topic,
                    key,
                    value,
                    record.position,
                    batch_size=record.batch_size,
                    replacing=replacing,
                    before=before,
                    layout=self.layout,
                    row=row or None,
                ),
                past_gap=past_gap,
            )
        if applied:
            self.written += 1
        else:
            self.skipped += 1
        return applied

    def mark_poisoned(self, record: SinkRecord, *, past_gap: bool = False) -> bool:
        """Store the position of a record that can never be a row, once it went to the
        dead-letter topic (or was logged): it is done, like a written one, so an
        instance taking over after it does not wait for it (:meth:`gap_check`).
        ``False`` when the position was already stored; raises as :meth:`write`."""
        backend = self.backend
        with self._lock:
            return self._apply(
                record,
                lambda replacing, before: backend.advance(
                    record.topic,
                    record.position,
                    batch_size=record.batch_size,
                    replacing=replacing,
                    before=before,
                ),
                past_gap=past_gap,
            )

    def gap_check(self, record: SinkRecord) -> Callable[[Position, int | None], None]:
        """The takeover-gap check of ``record``, run in its write transaction with the
        stored position (which the record moves past) and its batch's size.

        A position stored by this sink's own last write of the topic is followed
        by the next record this sink received: nothing to check. One stored by
        another writer (another instance had the partition, or this process
        restarted) may be followed by a record delivered *before* the ones that
        instance had received and not written: on a failover the broker gives
        the partition to the next consumer from its read position and sends
        those again only when it rewinds, after newer ones. TakeoverGapError
        when the positions prove a record between the stored one and this one
        (:func:`~pulsar_state.scheduling.in_order.first_missing`: within a ledger
        entry ids are contiguous, and a batch stored with its size holds the
        messages after the stored one); writing this record would make that one
        a "redelivery" skipped for good.
        """
        own = self._own.get(record.topic)

        def check(stored: Position, stored_batch_size: int | None) -> None:
            if stored == own:
                return
            missing = first_missing(stored, record.position, stored_batch_size)
            if missing is not None:
                raise TakeoverGapError(
                    record.topic, record.position, stored, missing, stored_batch_size
                )

        return check

    def _apply(
        self,
        record: SinkRecord,
        apply: Callable[[Position | None, Callable[[Position, int | None], None] | None], bool],
        *,
        past_gap: bool,
    ) -> bool:
        """Apply, or skip a redelivery; a foreign stored position is replaced, not obeyed.

        ``apply(replacing, before)`` is the backend's transaction.
        """
        replacing: Position | None = None
        before = None if past_gap else self.gap_check(record)
        for _ in range(self.REPLACE_TRIES):
            try:
                done = apply(replacing, before)
            except TakeoverGapError as gap:
                assert self._guard is not None
                try:
                    foreign = self._guard.is_of_topic(record.topic, gap.stored) is False
                except TopicIncarnationError:  # the admin API did not answer: hold
                    foreign = False
                if not foreign:
                    raise
                before = None  # another incarnation's position proves nothing: go on
                continue
            if done:
                self._own[record.topic] = record.position
                return True
            stored = self.applied_position(record.topic)
            if stored is None or record.position > stored:
                replacing = None  # changed meanwhile: apply as a record moving forward
                continue
            assert self._guard is not None
            if self._guard.is_redelivery(record.topic, record.position, stored):
                return False
            replacing = stored
        raise TopicIncarnationError(
            f"{record.topic}: the stored position kept changing while the record at "
            f"{record.position} was applied ({self.REPLACE_TRIES} tries); another writer?",
            retriable=True,
        )

    def trusted_position(self, topic: str) -> Position | None:
        """The stored position of ``topic``, ``None`` when it is of another incarnation.

        For the in-order gate, which lifts a failed record's hold once the
        stored position reaches it: a foreign position must not lift it.
        """
        stored = self.applied_position(topic)
        if stored is None or self._guard is None:
            return stored
        return None if self._guard.is_of_topic(topic, stored) is False else stored

    @property
    def position_checks(self) -> dict[str, int]:
        """How often a stored position was checked, by outcome (see :mod:`.topic_incarnation`)."""
        return dict(self._checks)

    def applied_position(self, topic: str) -> Position | None:
        """The position of the last record of ``topic`` applied (committed), if any."""
        with self.backend.transaction(None) as cur:
            return self.backend.applied_position(cur, topic)

    def rows(self) -> dict[str, str]:
        """The table's contents, ``key -> value``."""
        return self.backend.rows(self.table, self.layout)

    def metadata_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` as recorded in the core: the database password redacted."""
        recorded = dict(config)
        if isinstance(recorded.get("database"), str):
            recorded["database"] = redact_database(recorded["database"])
        if recorded.get("databasePassword"):
            recorded["databasePassword"] = "***"
        return recorded

    def close(self) -> None:
        if self._guard is not None:
            self._guard.close()
            self._guard = None
        if self._backend is not None:
            self._backend.close()
            self._backend = None


#: the name before PostgreSQL support; the same sink
SqliteUpsertSink = SqlUpsertSink


def record_metadata(
    records: PulsarMap[str, Any], name: str, config: dict[str, Any], schema: str
) -> int:
    """Store the sink's config and schema in the core; return its config version."""
    key = f"sink/{name}"
    wanted = {"config": config, "schema": schema}
    result: dict[str, int] = {}

    def gen(state: Mapping[str, Any]) -> list[MapOp[str, Any]]:
        current = state.get(key)
        if current is not None and {k: current[k] for k in wanted} == wanted:
            result["version"] = current["version"]
            return []
        version = 0 if current is None else current["version"] + 1
        result["version"] = version
        record = {**wanted, "version": version, "updateTime": int(time.time() * 1000)}
        return [MapOp.put(key, record)]

    records.transact(gen).result(timeout=60)
    return result["version"]
