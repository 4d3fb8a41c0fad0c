"""The SQL sink's table layout: the whole value in one column, or fields mapped to columns.

By default (no ``columns`` in the sink config) the table is
``<table>(key TEXT PRIMARY KEY, value TEXT NOT NULL, position TEXT NOT NULL)``:
the record's value, as UTF-8 text, in ``value``.

With ``columns`` the record's value is a JSON object (its schema, as a JSON
schema'd topic carries it) and each column takes one of its fields:

* ``columns: {column: field path}``: the field at the dotted path
  (``order.total`` is ``value["order"]["total"]``);
* ``columns: [name, ...]``: the top-level fields of the same names.

``columnTypes: {column: SQL type}`` gives a column its type (default
``TEXT``; a type is letters and spaces with an optional ``(n)`` or ``(p, s)``,
e.g. ``BIGINT``, ``DOUBLE PRECISION``, ``NUMERIC(12, 2)``, ``JSONB``). The
table is then ``<table>(key TEXT PRIMARY KEY, <column> <type>..., position
TEXT NOT NULL)``; a missing field is ``NULL``; an object or array is stored as
its JSON text, and so is any non-text field of a ``TEXT`` column. Keys and
deletes are as before: the message key is the primary key, an empty value
deletes the row. A value that is not a JSON object is a poison record
(:mod:`.dead_letter`). A table that exists already must have the columns:
a missing one is a :class:`~pulsar_state.errors.ConfigurationError` at ``open``.

``columns: schema`` takes the columns from the input topic's registered JSON
schema instead (:mod:`.sink_schema`): each top-level field a column of its
name, typed from its Avro type; ``columnTypes`` may still retype a column.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pulsar_state.errors import ConfigurationError, PoisonRecordError

__all__ = ["SCHEMA_COLUMNS", "VALUE_LAYOUT", "Layout", "layout_from_config"]

log = logging.getLogger(__name__)

#: ``columns: schema``: the columns from the input topic's registered schema
SCHEMA_COLUMNS = "schema"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE = re.compile(r"[A-Za-z][A-Za-z ]*[A-Za-z](\(\s*\d+\s*(,\s*\d+\s*)?\))?|[A-Za-z]")
#: names the layout uses itself
_RESERVED = frozenset({"key", "position"})


@dataclass(frozen=True)
class Layout:
    """The data table's columns beside ``key`` and ``position``.

    ``fields`` is ``None`` for the default layout (one ``value TEXT NOT NULL``
    column); else ``(column, path, type)`` for each mapped column.
    """

    fields: tuple[tuple[str, tuple[str, ...], str], ...] | None = None
    #: for a layout from a topic's schema (``columns: schema``): which schema version;
    #: a value's top-level field the layout does not map is then logged, once a field
    source: str | None = None

    @property
    def all_text(self) -> bool:
        """Whether every value column is ``TEXT`` (then every row's values are text)."""
        return self.fields is None or all(t.upper() == "TEXT" for _, _, t in self.fields)

    @property
    def columns(self) -> list[str]:
        """The value columns, in table order."""
        return ["value"] if self.fields is None else [c for c, _, _ in self.fields]

    def definitions(self) -> str:
        """The value columns' definitions, as ``CREATE TABLE`` spells them."""
        if self.fields is None:
            return "value TEXT NOT NULL"
        return ", ".join(f"{column} {sql_type}" for column, _, sql_type in self.fields)

    def row(self, value: bytes) -> tuple[Any, ...]:
        """The value columns of a record's (non-empty) value.

        Raises:
            PoisonRecordError: a value that can never be a row (not UTF-8; with
                mapped columns, not a JSON object).
        """
        try:
            text = value.decode()
        except UnicodeDecodeError as exc:
            raise PoisonRecordError(f"its value is not UTF-8 text ({exc})") from None
        if self.fields is None:
            return (text,)
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise PoisonRecordError(f"its value is not JSON ({exc})") from None
        if not isinstance(document, dict):
            raise PoisonRecordError(
                f"its value is JSON {type(document).__name__}, not an object; "
                "the sink's columns map an object's fields"
            )
        if self.source is not None:
            self._note_unmapped(document)
        return tuple(_cell(_lookup(document, path), t) for _, path, t in self.fields)

    @cached_property
    def _top_fields(self) -> frozenset[str]:
        return frozenset(path[0] for _, path, _ in self.fields or ())

    def _note_unmapped(self, document: Mapping[str, Any]) -> None:
        """Log, once per field, a top-level field the schema read at ``open`` lacks (a
        newer schema version added it: its column comes with the sink's next ``open``)."""
        source = self.source or ""
        for name in document.keys() - self._top_fields:
            if (source, name) not in _UNMAPPED_SEEN:
                _UNMAPPED_SEEN.add((source, name))
                log.warning(
                    "sink: field %r of a record is not in %s, whose columns the sink "
                    "writes: a newer schema version? Its value is not stored until the "
                    "sink is restarted, which adds its column",
                    name,
                    source,
                )


#: ``(layout source, field)`` already logged by :meth:`Layout._note_unmapped`
_UNMAPPED_SEEN: set[tuple[str, str]] = set()


#: the default: the whole value in one ``value`` column
VALUE_LAYOUT = Layout()


def _lookup(document: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    found: Any = document
    for part in path:
        if not isinstance(found, Mapping) or part not in found:
            return None
        found = found[part]
    return found


def _cell(value: Any, sql_type: str) -> Any:
    if value is None:
        return None
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if sql_type.upper() == "TEXT" and not isinstance(value, str):
        return json.dumps(value)
    return value


def layout_from_config(
    config: Mapping[str, Any],
    schema: Sequence[tuple[str, str]] | None = None,
    *,
    source: str | None = None,
) -> Layout:
    """The layout of the sink config's ``columns`` and ``columnTypes`` (see the module
    docstring); the default layout without ``columns``.

    ``schema``: for ``columns: schema``, the ``(field, SQL type)`` of each top-level
    field of the input's schema (:func:`.sink_schema.schema_columns`), ``source``
    naming it (:attr:`Layout.source`).

    Returns:
        The table's value columns.

    Raises:
        ConfigurationError: a column that is no plain identifier (or is ``key`` or
            ``position``), an empty field path, a type that is not a plain SQL type,
            a type for a column that is not mapped; ``columns: schema`` without
            ``schema``.
    """
    columns = config.get("columns")
    types = config.get("columnTypes") or {}
    if not isinstance(types, Mapping):
        raise ConfigurationError(f"sink config 'columnTypes' must be a mapping, got {types!r}")
    if not columns:
        if types:
            raise ConfigurationError("sink config 'columnTypes' needs 'columns'")
        return VALUE_LAYOUT
    pairs: list[tuple[Any, Any]]
    defaults: dict[str, str] = {}
    if columns == SCHEMA_COLUMNS:
        if schema is None:
            raise ConfigurationError(
                "sink config 'columns: schema' takes the columns from the input topic's "
                "schema, which was not read"
            )
        pairs = [(name, name) for name, _ in schema]
        defaults = dict(schema)
    elif isinstance(columns, Mapping):
        pairs = list(columns.items())
    elif isinstance(columns, Sequence) and not isinstance(columns, str):
        pairs = [(c, c) for c in columns]
    else:
        raise ConfigurationError(
            "sink config 'columns' must map columns to field paths, list field names, "
            f"or be {SCHEMA_COLUMNS!r}, got {columns!r}"
        )
    fields = []
    for column, path in pairs:
        hint = " (a field of the schema: map it by name, columns: {column: field})"
        hint = hint if defaults else ""
        if not isinstance(column, str) or not _IDENT.fullmatch(column):
            raise ConfigurationError(f"sink column {column!r} is not a plain SQL identifier{hint}")
        if column.lower() in _RESERVED:
            raise ConfigurationError(f"sink column {column!r} is the layout's own{hint}")
        parts = tuple(path.split(".")) if isinstance(path, str) else ()
        if not parts or not all(parts):
            raise ConfigurationError(f"sink column {column!r}: field path {path!r} is not valid")
        sql_type = types.get(column, defaults.get(column, "TEXT"))
        if not isinstance(sql_type, str) or not _TYPE.fullmatch(sql_type.strip()):
            raise ConfigurationError(f"sink column {column!r}: type {sql_type!r} is not valid")
        fields.append((column, parts, sql_type.strip()))
    if len({c.lower() for c, _, _ in fields}) != len(fields):
        raise ConfigurationError("sink config 'columns' names a column twice")
    unknown = set(types) - {c for c, _, _ in fields}
    if unknown:
        raise ConfigurationError(f"sink config 'columnTypes' names unmapped columns {unknown}")
    return Layout(tuple(fields), source=source if defaults else None)
