"""The SQL sink's columns from a topic's schema (``columns: schema``, :mod:`.sink_schema`),
without a broker: the column types of Avro field types, ``columnTypes`` over them, and
a field of a newer schema version logged once."""

from __future__ import annotations

import json
import logging

import pytest

from pulsar_state.connectors.sink_columns import layout_from_config
from pulsar_state.connectors.sink_schema import TopicSchema, schema_columns
from pulsar_state.errors import ConfigurationError


def _schema(fields: list[dict[str, object]], kind: str = "JSON") -> TopicSchema:
    record = {"type": "record", "name": "R", "fields": fields}
    return TopicSchema("persistent://public/default/t", 3, kind, json.dumps(record))


def test_avro_field_types_to_column_types() -> None:
    fields = [
        {"name": "s", "type": "string"},
        {"name": "i", "type": ["null", "int"]},
        {"name": "l", "type": ["long", "null"]},
        {"name": "f", "type": "float"},
        {"name": "d", "type": ["null", "double"], "default": None},
        {"name": "b", "type": "boolean"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "r", "type": ["null", {"type": "record", "name": "N", "fields": []}]},
        {"name": "a", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "u", "type": ["null", "int", "string"]},
    ]
    assert schema_columns(_schema(fields)) == [
        ("s", "TEXT"),
        ("i", "INTEGER"),
        ("l", "BIGINT"),
        ("f", "REAL"),
        ("d", "DOUBLE PRECISION"),
        ("b", "BOOLEAN"),
        ("e", "TEXT"),
        ("ts", "BIGINT"),
        ("r", "TEXT"),
        ("a", "TEXT"),
        ("m", "TEXT"),
        ("u", "TEXT"),
    ]


def test_schemas_without_fields_to_map_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="no Avro record with fields"):
        schema_columns(_schema([]))
    with pytest.raises(ConfigurationError, match="protobuf"):
        schema_columns(_schema([{"name": "a", "type": "int"}], kind="PROTOBUF_NATIVE"))
    with pytest.raises(ConfigurationError, match="INT64 schema, which has no fields"):
        schema_columns(TopicSchema("t", 0, "INT64", ""))


def test_column_types_retype_a_field_and_bad_names_are_named() -> None:
    schema = [("total", "DOUBLE PRECISION"), ("items", "TEXT")]
    layout = layout_from_config(
        {"columns": "schema", "columnTypes": {"items": "JSONB"}}, schema, source="v1"
    )
    assert layout.definitions() == "total DOUBLE PRECISION, items JSONB"
    with pytest.raises(ConfigurationError, match="names unmapped columns"):
        layout_from_config({"columns": "schema", "columnTypes": {"other": "TEXT"}}, schema)
    with pytest.raises(ConfigurationError, match="a field of the schema: map it by name"):
        layout_from_config({"columns": "schema"}, [("order-id", "TEXT")])
    with pytest.raises(ConfigurationError, match="the layout's own"):
        layout_from_config({"columns": "schema"}, [("position", "TEXT")])
    with pytest.raises(ConfigurationError, match="was not read"):
        layout_from_config({"columns": "schema"})


def test_a_field_the_schema_lacks_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    layout = layout_from_config(
        {"columns": "schema"}, [("name", "TEXT")], source="schema version 0 of t-once"
    )
    with caplog.at_level(logging.WARNING):
        assert layout.row(b'{"name": "a", "qty": 1}') == ("a",)
        assert layout.row(b'{"name": "b", "qty": 2}') == ("b",)
    logged = [r.getMessage() for r in caplog.records if "'qty'" in r.getMessage()]
    assert len(logged) == 1 and "schema version 0 of t-once" in logged[0]
    assert "restarted" in logged[0]
