"""The SQL sink's columns from the input topic's registered schema (``columns: schema``),
on the real broker: records produced with a JSON schema land in typed columns (SQLite
and PostgreSQL), a newer schema version adds its column, and the schemas it cannot map,
a missing schema, differing schemas and a table that does not match are refused before
anything is written."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pulsar
import pytest
import requests
from harness import PulsarEndpoint, unique_topic
from pulsar.schema import Array, Boolean, Double, Float, Integer, JsonSchema, Long, Record, String

from pulsar_state.connectors.sink import SqlUpsertSink
from pulsar_state.connectors.sink_runner import run_sink
from pulsar_state.errors import ConfigurationError

TABLE = "orders"


class Customer(Record):
    name = String()
    city = String()


class Order(Record):
    item = String()
    qty = Integer()
    serial = Long()
    price = Double()
    weight = Float()
    paid = Boolean()
    tags = Array(String())
    customer = Customer()


#: the fields of ``Order`` of scalar types (their columns hold the values themselves)
SCALARS = ("item", "qty", "serial", "price", "weight", "paid")


class Item(Record):
    name = String()


class ItemV2(Record):
    """``Item`` with a field added, compatible with it (the added field has a default)."""

    name = String()
    qty = Integer(required_default=True)


ItemV2.__name__ = "Item"  # the same record as far as the schema registry is concerned


def _query(database: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if database.startswith("postgresql://"):
        with psycopg.connect(database) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("?", "%s"), params).fetchall()]
    with contextlib.closing(sqlite3.connect(database)) as db:
        found = db.execute(sql, params).fetchall()
        db.commit()
        return found


def _column_types(database: str, table: str) -> dict[str, str]:
    if database.startswith("postgresql://"):
        found = _query(
            database,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        )
        return {str(n): str(t).upper() for n, t in found}
    return {str(r[1]): str(r[2]).upper() for r in _query(database, f"PRAGMA table_info({table})")}


def _config(endpoint: PulsarEndpoint, topic: str | list[str], database: str) -> dict[str, Any]:
    return {
        "serviceUrl": endpoint.service_url,
        "adminUrl": endpoint.admin_url,
        "topic": topic,
        "subscription": "sink",
        "database": database,
        "table": TABLE,
        "columns": "schema",
        "batchMaxDelayMs": 20,
    }


def _register(endpoint: PulsarEndpoint, topic: str, kind: str, definition: str) -> None:
    """Register a schema through the admin API (as ``pulsar-admin schemas upload`` does)."""
    local = topic.removeprefix("persistent://")
    resp = requests.post(
        f"{endpoint.admin_url}/admin/v2/schemas/{local}/schema",
        json={"type": kind, "schema": definition, "properties": {}},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text


def test_fields_of_a_json_schema_land_in_typed_columns(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, sql_database: str
) -> None:
    """A partitioned input produced with a JSON schema: its fields become columns of
    the types of the schema, and each row holds its record's values."""
    topic = unique_topic("sink-schema")
    resp = requests.put(
        f"{pulsar_endpoint.admin_url}/admin/v2/persistent/"
        f"{topic.removeprefix('persistent://')}/partitions",
        json=2,
        timeout=30,
    )
    assert resp.status_code in (200, 204), resp.text
    producer = client.create_producer(topic, schema=JsonSchema(Order), batching_enabled=False)
    orders = {
        "o1": Order(
            item="tea",
            qty=3,
            serial=2**40 + 1,
            price=4.25,
            weight=0.5,
            paid=True,
            tags=["hot", "green"],
            customer=Customer(name="Ann", city="Oslo"),
        ),
        "o2": Order(item="jam", qty=1, serial=7, price=2.0, weight=1.25, paid=False, tags=[]),
        "o3": Order(item="gone", qty=9),
    }
    for key, order in orders.items():
        producer.send(order, partition_key=key)
    producer.send(None, partition_key="o3")  # no value: deletes the row
    producer.close()

    sink = run_sink(_config(pulsar_endpoint, topic, sql_database), max_idle_s=2.0)

    assert sink.written == 4
    types = _column_types(sql_database, TABLE)
    assert types == {
        "key": "TEXT",
        "item": "TEXT",
        "qty": "INTEGER",
        "serial": "BIGINT",
        "price": "DOUBLE PRECISION",
        "weight": "REAL",
        "paid": "BOOLEAN",
        "tags": "TEXT",
        "customer": "TEXT",
        "position": "TEXT",
    }
    rows = _query(
        sql_database,
        f"SELECT key, item, qty, serial, price, weight, paid, tags, customer FROM {TABLE} "
        "ORDER BY key",
    )
    written = [(k, *values[:5], bool(values[5]), *values[6:]) for k, *values in rows]
    expected = []
    for key in ("o1", "o2"):  # each record as its schema encodes it
        sent = json.loads(JsonSchema(Order).encode(orders[key]))
        nested = [json.dumps(sent[f], separators=(",", ":")) for f in ("tags", "customer")]
        expected.append((key, *(sent[f] for f in SCALARS), *nested))
    assert written == expected
    assert written[0][1:] == (
        "tea", 3, 2**40 + 1, 4.25, 0.5, True, '["hot","green"]', '{"name":"Ann","city":"Oslo"}'
    )  # fmt: skip


def test_a_newer_schema_version_adds_its_column(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    topic = unique_topic("sink-schema-evolves")
    database = str(tmp_path / "sink.db")
    config = _config(pulsar_endpoint, topic, database)
    producer = client.create_producer(topic, schema=JsonSchema(Item))
    producer.send(Item(name="first"), partition_key="a")
    producer.close()
    assert run_sink(config, max_idle_s=1.5).written == 1
    assert set(_column_types(database, TABLE)) == {"key", "name", "position"}

    producer = client.create_producer(topic, schema=JsonSchema(ItemV2))
    producer.send(ItemV2(name="second", qty=5), partition_key="b")
    producer.close()
    assert run_sink(config, max_idle_s=1.5).written == 1

    assert _column_types(database, TABLE)["qty"] == "INTEGER"
    rows = _query(database, f"SELECT key, name, qty FROM {TABLE} ORDER BY key")
    assert rows == [("a", "first", None), ("b", "second", 5)]


def _refused(config: dict[str, Any], match: str) -> None:
    sink = SqlUpsertSink()
    with pytest.raises(ConfigurationError, match=match):
        sink.open(config)
    sink.close()


def test_schemas_it_cannot_map_are_refused_before_the_database_is_touched(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    database = tmp_path / "sink.db"
    plain = unique_topic("sink-no-schema")
    client.create_producer(plain).close()  # a topic with no schema registered
    cases = {plain: "has no schema registered"}
    record = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}
    for kind, definition, match in (
        ("AVRO", json.dumps(record), "Avro binary, which the sink does not decode"),
        ("KEY_VALUE", json.dumps({"key": "", "value": ""}), "not of a key/value pair"),
        ("STRING", "", "has no fields"),
    ):
        topic = unique_topic(f"sink-{kind.lower()}")
        _register(pulsar_endpoint, topic, kind, definition)
        cases[topic] = match
    for topic, match in cases.items():
        _refused(_config(pulsar_endpoint, topic, str(database)), match)

    one, other = unique_topic("sink-one"), unique_topic("sink-other")
    client.create_producer(one, schema=JsonSchema(Item)).close()
    client.create_producer(other, schema=JsonSchema(Customer)).close()
    _refused(_config(pulsar_endpoint, [one, other], str(database)), "schemas differ")
    _refused({**_config(pulsar_endpoint, one, str(database)), "adminUrl": ""}, "set 'adminUrl'")
    assert not database.exists()  # nothing was written, not even the database file


def test_a_table_that_does_not_match_the_schema_is_refused(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    topic = unique_topic("sink-schema-table")
    client.create_producer(topic, schema=JsonSchema(ItemV2)).close()
    config = _config(pulsar_endpoint, topic, str(tmp_path / "sink.db"))
    for table, match in (
        # the layout without columns: its value column is NOT NULL
        ("(key TEXT PRIMARY KEY, value TEXT NOT NULL, position TEXT NOT NULL)", "value is NOT"),
        # qty is an int field: a text column does not hold it
        ("(key TEXT PRIMARY KEY, name TEXT, qty TEXT, position TEXT NOT NULL)", "qty is TEXT"),
    ):
        database = str(tmp_path / f"{len(match)}.db")
        _query(database, f"CREATE TABLE {TABLE} {table}")
        before = _column_types(database, TABLE)
        _refused({**config, "database": database}, f"does not match schema version 0 .*{match}")
        assert _column_types(database, TABLE) == before  # no column added
        assert _query(database, f"SELECT * FROM {TABLE}") == []


class _Context:
    """The parts of a function's context ``SqlUpsertSink.open`` reads."""

    def __init__(self, inputs: list[str], config: dict[str, Any]) -> None:
        self._inputs, self._config = inputs, config

    def get_input_topics(self) -> list[str]:
        return self._inputs

    def get_user_config_value(self, key: str) -> Any:
        return self._config.get(key)

    def get_secret(self, key: str) -> None:
        return None

    def get_logger(self) -> logging.Logger:
        return logging.getLogger("sink-function")


def test_in_a_function_the_schema_of_its_input_topics(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    """``SinkFunction``'s config names no topic: the schema is its inputs' (a partition's
    is its partitioned topic's)."""
    topic = unique_topic("sink-schema-function")
    client.create_producer(topic, schema=JsonSchema(ItemV2)).close()
    config = {k: v for k, v in _config(pulsar_endpoint, topic, "").items() if k != "topic"}
    config["database"] = str(tmp_path / "sink.db")
    sink = SqlUpsertSink()
    sink.open(config, _Context([f"{topic}-partition-0"], config))
    try:
        assert "name TEXT, qty INTEGER" in sink.schema
    finally:
        sink.close()
