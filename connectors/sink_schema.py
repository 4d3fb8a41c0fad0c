"""The SQL sink's columns from the input topic's registered schema (``columns: schema``).

Pulsar's JDBC sink takes its columns from the topic's schema; so does this sink
with ``columns: schema`` in its config. On ``open`` it reads the schema of each
input topic from the admin API (``GET /admin/v2/schemas/<tenant>/<namespace>/<topic>/schema``,
the latest version; for a partition, the partitioned topic's), with the sink's
admin authentication and TLS trust, so it needs ``adminUrl``. A ``JSON`` schema's
``data`` is an Avro record definition: each top-level field becomes a column of
its name (:func:`schema_columns`), typed from its Avro type:

==================================  ====================
Avro type (or ``["null", type]``)    column type
==================================  ====================
``string``, ``enum``, ``bytes``      ``TEXT``
``int``                              ``INTEGER``
``long``                             ``BIGINT``
``float``                            ``REAL``
``double``                           ``DOUBLE PRECISION``
``boolean``                          ``BOOLEAN``
record, array, map, other unions     ``TEXT`` (the JSON text)
==================================  ====================

(the same names on SQLite and PostgreSQL; a logical type maps as its
underlying one). ``columnTypes`` may still retype a column (e.g. ``JSONB``).
Values are decoded as with ``columns`` by name: the record's value is the JSON
object the schema describes (:mod:`.sink_columns`).

:func:`schema_layout` refuses, with a
:class:`~pulsar_state.errors.ConfigurationError` before any write: a topic with
no schema registered; a schema it cannot map (``AVRO``: its values are Avro
binary, which the sink does not decode; ``KEY_VALUE``; ``PROTOBUF`` and
``PROTOBUF_NATIVE``; a primitive type such as ``STRING``, which has no fields);
input topics whose schemas give different columns; a field name that is not a
plain SQL identifier (or is ``key``/``position``); no ``adminUrl``.

An existing table is checked against the columns (:func:`table_changes`): a
column whose type cannot hold its field's (``TEXT`` for an ``int`` field,
``INTEGER`` for a ``long`` one ...) and a ``NOT NULL`` column without a default
that the schema has no field for (e.g. ``value`` of a table made without
``columns``) are refused. A column of the table that the schema lacks and that
may be ``NULL`` is left ``NULL`` (a field removed by a newer schema version).

Schema evolution: the columns are those of the latest schema version when the
sink opens. A field the table lacks (a newer version added it) gets its column
then (``ALTER TABLE ... ADD COLUMN``; earlier rows hold ``NULL`` there). While
the sink runs, a record of a newer version is written with the columns it has;
a field of it that none maps is logged once (:attr:`.sink_columns.Layout.source`)
and its value is not stored until the sink is restarted.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.connectors.sink_columns import SCHEMA_COLUMNS, Layout, layout_from_config
from pulsar_state.connectors.sql_backend import SinkDatabaseError, SqlBackend
from pulsar_state.errors import ConfigurationError
from pulsar_state.topic_names import parse_topic, partitioned_base

__all__ = [
    "TopicSchema",
    "prepare_table",
    "read_schema",
    "schema_columns",
    "schema_layout",
    "table_changes",
    "uses_schema",
]

log = logging.getLogger(__name__)

#: Avro primitive (or named) type -> column type
_AVRO_SQL = {
    "string": "TEXT",
    "enum": "TEXT",
    "bytes": "TEXT",
    "fixed": "TEXT",
    "int": "INTEGER",
    "long": "BIGINT",
    "float": "REAL",
    "double": "DOUBLE PRECISION",
    "boolean": "BOOLEAN",
}
#: the column type of a nested value (its JSON text)
JSON_TEXT = "TEXT"
#: Pulsar schema types whose values are not the JSON object the columns map, and why
_REFUSED = {
    "AVRO": "its values are Avro binary, which the sink does not decode; produce with a "
    "JSON schema (the same record definition), or map the fields by name",
    "KEY_VALUE": "the sink maps the fields of a JSON value, not of a key/value pair",
    "PROTOBUF": "its values are protobuf, which the sink does not decode",
    "PROTOBUF_NATIVE": "its values are protobuf, which the sink does not decode",
}
#: type names of a table's column -> the name compared (PostgreSQL's and aliases)
_ALIASES = {
    "INT": "INTEGER",
    "INT4": "INTEGER",
    "INT8": "BIGINT",
    "INT2": "SMALLINT",
    "FLOAT4": "REAL",
    "FLOAT8": "DOUBLE PRECISION",
    "FLOAT": "DOUBLE PRECISION",
    "DOUBLE": "DOUBLE PRECISION",
    "BOOL": "BOOLEAN",
    "DECIMAL": "NUMERIC",
    "VARCHAR": "CHARACTER VARYING",
}
#: a column of the first type holds a field of the second: the wanted type -> the
#: types of a table's column that hold its values (else the same type only)
_HOLDS = {
    "TEXT": {"TEXT", "CHARACTER VARYING"},
    "INTEGER": {"INTEGER", "BIGINT", "NUMERIC", "REAL", "DOUBLE PRECISION"},
    "BIGINT": {"BIGINT", "NUMERIC"},
    "REAL": {"REAL", "DOUBLE PRECISION", "NUMERIC"},
    "DOUBLE PRECISION": {"DOUBLE PRECISION", "NUMERIC"},
    "BOOLEAN": {"BOOLEAN"},
}


def uses_schema(config: Mapping[str, Any]) -> bool:
    """Whether the sink config takes its columns from the input's schema (``columns: schema``)."""
    return config.get("columns") == SCHEMA_COLUMNS


@dataclass(frozen=True)
class TopicSchema:
    """A topic's latest registered schema, as the sink maps it."""

    #: the topic whose schema it is (a partitioned topic's, not a partition's)
    topic: str
    version: int
    #: Pulsar's schema type (``JSON``, ``AVRO``, ``STRING`` ...)
    type: str
    #: the schema's definition (for ``JSON`` and ``AVRO``: an Avro record, as JSON text)
    data: str

    def __str__(self) -> str:
        return f"schema version {self.version} of {self.topic}"


def _schema_path(topic: str) -> str:
    name = parse_topic(partitioned_base(topic), what="the sink's input topic")
    parts = (name.tenant, name.namespace, name.local_name)
    return "/admin/v2/schemas/" + "/".join(quote(p, safe="") for p in parts) + "/schema"


def read_schema(admin: AdminEndpoint, topic: str) -> TopicSchema:
    """The latest schema registered for ``topic`` (for a partition: its partitioned topic).

    Returns:
        The schema's version, type and definition.

    Raises:
        ConfigurationError: no schema is registered, or the admin API refused the read.
        AdminUnreachableError: the admin API did not answer.
    """
    base = partitioned_base(topic)
    client = admin.admin()
    try:
        resp = client.request("GET", _schema_path(topic))
    finally:
        client.close()
    if resp.status_code == 404:
        raise ConfigurationError(
            f"sink config 'columns: schema': topic {base} has no schema registered "
            "(produce to it with a JSON schema first, or map the fields by name: "
            "columns: {column: field})"
        )
    if resp.status_code != 200:
        raise ConfigurationError(
            f"sink config 'columns: schema': the admin API refused to read the schema of "
            f"{base} ({resp.status_code}: {resp.text[:300]}); reading it needs the "
            "consume permission on the topic"
        )
    answer = resp.json()
    return TopicSchema(
        topic=base,
        version=int(answer.get("version", 0)),
        type=str(answer.get("type", "")),
        data=str(answer.get("data") or ""),
    )


def _sql_type(avro: Any) -> str:
    """The column type of an Avro field type (see the module docstring)."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        return _sql_type(branches[0]) if len(branches) == 1 else JSON_TEXT
    if isinstance(avro, dict):
        kind = avro.get("type")
        if kind in ("record", "array", "map") or isinstance(kind, list | dict):
            return JSON_TEXT
        return _sql_type(kind)
    return _AVRO_SQL.get(avro, JSON_TEXT) if isinstance(avro, str) else JSON_TEXT


def schema_columns(schema: TopicSchema) -> list[tuple[str, str]]:
    """``(field, column type)`` of each top-level field of a JSON schema, in order.

    Returns:
        The fields and their column types.

    Raises:
        ConfigurationError: a schema type the sink cannot map, or a JSON schema that
            is no Avro record with fields.
    """
    where = f"sink config 'columns: schema': topic {schema.topic} has a {schema.type} schema"
    if schema.type in _REFUSED:
        raise ConfigurationError(f"{where}: {_REFUSED[schema.type]}")
    if schema.type != "JSON":
        raise ConfigurationError(
            f"{where}, which has no fields to map to columns: leave 'columns' out to keep "
            "the value in one column"
        )
    try:
        record = json.loads(schema.data)
    except ValueError:
        record = None
    fields = record.get("fields") if isinstance(record, dict) else None
    if not isinstance(record, dict) or record.get("type") != "record" or not fields:
        raise ConfigurationError(
            f"{where} that is no Avro record with fields (version {schema.version}): "
            "map the fields by name, columns: {column: field}"
        )
    return [(str(f.get("name")), _sql_type(f.get("type"))) for f in fields]


def _table_columns(backend: SqlBackend, table: str) -> dict[str, tuple[str, bool]]:
    """The table's columns, ``name (lower case) -> (type, NOT NULL without a default)``;
    empty when the table does not exist."""
    with backend.transaction(None) as cur:
        if backend.kind == "postgresql":
            cur.execute(
                "SELECT column_name, data_type, is_nullable, column_default "
                "FROM information_schema.columns "
                f"WHERE table_schema = current_schema() AND table_name = {backend.placeholder}",
                (table.lower(),),
            )
            return {
                str(n).lower(): (str(t), nullable == "NO" and default is None)
                for n, t, nullable, default in cur.fetchall()
            }
        cur.execute(f"PRAGMA table_info({table})")
        return {
            str(row[1]).lower(): (str(row[2]), bool(row[3]) and row[4] is None and not row[5])
            for row in cur.fetchall()
        }


def _base_type(sql_type: str) -> str:
    name = " ".join(re.sub(r"\(.*\)", "", sql_type).upper().split())
    return _ALIASES.get(name, name)


def table_changes(backend: SqlBackend, table: str, layout: Layout) -> list[tuple[str, str]]:
    """The columns of ``layout`` an existing ``table`` lacks (to add), after checking the
    ones it has (see the module docstring); none when the table does not exist.

    Returns:
        ``(column, type)`` to add.

    Raises:
        ConfigurationError: a column whose type cannot hold its field's, or a ``NOT
            NULL`` column that no field fills.
    """
    have = _table_columns(backend, table)
    if not have:
        return []
    assert layout.fields is not None
    wanted = {c.lower(): (c, t) for c, _, t in layout.fields}
    clashes = []
    for name, (column, sql_type) in wanted.items():
        if name in have:
            table_type, want = _base_type(have[name][0]), _base_type(sql_type)
            if table_type not in _HOLDS.get(want, {want}):
                clashes.append(f"{column} is {have[name][0]}, the schema's field {sql_type}")
    own = {"key", "position"}
    unfilled = [n for n, (_, required) in have.items() if required and n not in {*wanted, *own}]
    if clashes or unfilled:
        details = [*clashes, *(f"{n} is NOT NULL and no field fills it" for n in unfilled)]
        raise ConfigurationError(
            f"sink table {table} does not match {layout.source}: {'; '.join(details)}; "
            "drop it, or give the sink another table"
        )
    return [(column, sql_type) for name, (column, sql_type) in wanted.items() if name not in have]


def _add_columns(backend: SqlBackend, table: str, columns: Sequence[tuple[str, str]]) -> None:
    exists = " IF NOT EXISTS" if backend.kind == "postgresql" else ""
    for column, sql_type in columns:
        try:
            backend.execute_ddl([f"ALTER TABLE {table} ADD COLUMN{exists} {column} {sql_type}"])
        except SinkDatabaseError:
            if column.lower() not in _table_columns(backend, table):  # not another sink's add
                raise
        log.warning("sink table %s: added column %s %s (a newer schema)", table, column, sql_type)


def _topic_list(topics: Iterable[str] | str | None) -> list[str]:
    if isinstance(topics, str):
        topics = [topics]
    found = sorted({partitioned_base(t) for t in topics or [] if isinstance(t, str) and t})
    if not found:
        raise ConfigurationError("sink config 'columns: schema' needs the input topic")
    return found


def schema_layout(
    config: Mapping[str, Any], topics: Iterable[str] | str | None, admin: AdminEndpoint | None
) -> Layout:
    """The layout of ``columns: schema``: the columns of the input topics' schema.

    Returns:
        The table's value columns, one a top-level field of the schema.

    Raises:
        ConfigurationError: see the module docstring (before the database is touched).
        AdminUnreachableError: the admin API did not answer.
    """
    if admin is None:
        raise ConfigurationError(
            "sink config 'columns: schema' reads the input topic's schema from the admin "
            "API: set 'adminUrl'"
        )
    found: list[tuple[TopicSchema, list[tuple[str, str]]]] = []
    for topic in _topic_list(topics):
        schema = read_schema(admin, topic)
        columns = schema_columns(schema)
        if found and columns != found[0][1]:
            raise ConfigurationError(
                f"sink config 'columns: schema': the input topics' schemas differ "
                f"({found[0][0]}: {found[0][1]}; {schema}: {columns}); one table needs one "
                "schema: map the fields by name, or run a sink a topic"
            )
        found.append((schema, columns))
    first = found[0][0]
    source = str(first) if len(found) == 1 else f"{first} (and {len(found) - 1} more topics)"
    return layout_from_config(config, found[0][1], source=source)


def prepare_table(backend: SqlBackend, table: str, layout: Layout) -> None:
    """Check an existing table against a layout from a schema and add the columns of
    fields it lacks (:func:`table_changes`); nothing for a table still to be made.

    Raises:
        ConfigurationError: the table does not match the schema.
        SinkDatabaseError: the database failed.
    """
    _add_columns(backend, table, table_changes(backend, table, layout))
