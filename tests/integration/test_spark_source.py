"""The pulsar_state Spark data source on the real broker with a local Spark session."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic, wait_until
from pyspark.sql import DataFrame, SparkSession

from pulsar_state import PulsarMap
from pulsar_state.admin import PulsarAdmin
from pulsar_state.connectors.spark_source import PulsarStateDataSource

ClientFactory = Callable[[], pulsar.Client]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pulsar-state-tests")
        .config("spark.sql.python.filterPushdown.enabled", "true")  # for pushdown=true
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(PulsarStateDataSource)
    yield session
    session.stop()


def _read(spark: SparkSession, ep: PulsarEndpoint, topic: str, **options: str) -> DataFrame:
    reader = (
        spark.read.format("pulsar_state")
        .option("serviceUrl", ep.service_url)
        .option("adminUrl", ep.admin_url)
        .option("topic", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _read_stream(spark: SparkSession, ep: PulsarEndpoint, topic: str) -> DataFrame:
    """The changelog of ``topic`` as a stream."""
    return (
        spark.readStream.format("pulsar_state")
        .option("serviceUrl", ep.service_url)
        .option("adminUrl", ep.admin_url)
        .option("topic", topic)
        .option("mode", "changelog")
        .load()
    )


def _as_dict(df: DataFrame) -> dict[str, Any]:
    return {row.key: json.loads(row.value) for row in df.collect()}


@pytest.fixture
def filled_map(make_client: ClientFactory, admin_url: str) -> tuple[str, dict[str, Any]]:
    topic = unique_topic("spark")
    with PulsarMap[str, Any](make_client(), topic, admin_url=admin_url) as m:
        m.put_all({f"k{i}": {"i": i} for i in range(50)}).result()
        for i in range(10):
            m.put(f"k{i}", {"i": i, "round": 2}).result()
        m.delete("k7").result()
        m.put("text", "hello").result()
        expected = m.items(latest=True).result()
    return topic, expected


def test_snapshot_agrees_with_the_core(
    spark: SparkSession, pulsar_endpoint: PulsarEndpoint, filled_map: tuple[str, dict[str, Any]]
) -> None:
    topic, expected = filled_map
    df = _read(spark, pulsar_endpoint, topic)
    assert df.columns == ["key", "value"]
    assert _as_dict(df) == expected
    assert _as_dict(_read(spark, pulsar_endpoint, topic, numPartitions="3")) == expected


def test_snapshot_after_compaction_and_more_writes(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    filled_map: tuple[str, dict[str, Any]],
) -> None:
    topic, _ = filled_map
    admin = PulsarAdmin(pulsar_endpoint.admin_url)
    admin.compact(topic)
    wait_until(lambda: admin.compaction_status(topic) == "SUCCESS", timeout_s=60)
    with PulsarMap[str, Any](make_client(), topic, admin_url=pulsar_endpoint.admin_url) as m:
        m.put("after", 1).result()
        m.delete("k1").result()
        expected = m.items(latest=True).result()
    assert _as_dict(_read(spark, pulsar_endpoint, topic)) == expected


def test_metadata_columns_and_formats(
    spark: SparkSession, pulsar_endpoint: PulsarEndpoint, filled_map: tuple[str, dict[str, Any]]
) -> None:
    topic, _ = filled_map
    df = _read(spark, pulsar_endpoint, topic, includeMetadata="true")
    assert df.columns == ["key", "value", "position", "publish_time"]
    row = df.where("key = 'text'").collect()[0]
    assert row.value == '"hello"' and row.position.count(":") == 2 and row.publish_time is not None
    binary = _read(spark, pulsar_endpoint, topic, valueFormat="binary").where("key = 'text'")
    assert binary.collect()[0].value == b'"hello"'


def test_key_filters(
    spark: SparkSession, pulsar_endpoint: PulsarEndpoint, filled_map: tuple[str, dict[str, Any]]
) -> None:
    topic, expected = filled_map
    for options in ({}, {"pushdown": "true"}):
        df = _read(spark, pulsar_endpoint, topic, **options)
        assert _as_dict(df.where("key = 'k3'")) == {"k3": expected["k3"]}
        picked = _as_dict(df.where("key IN ('k1', 'k2', 'k7', 'nope')"))
        assert picked == {"k1": expected["k1"], "k2": expected["k2"]}
    df = _read(spark, pulsar_endpoint, topic)
    picked = _as_dict(df.where("key IN ('k1', 'k2', 'k7', 'nope')"))
    assert picked == {"k1": expected["k1"], "k2": expected["k2"]}


def test_changelog(
    spark: SparkSession, pulsar_endpoint: PulsarEndpoint, filled_map: tuple[str, dict[str, Any]]
) -> None:
    topic, _ = filled_map
    df = _read(spark, pulsar_endpoint, topic, mode="changelog")
    assert df.columns[:5] == ["key", "value", "change_type", "position", "publish_time"]
    counts = {r.change_type: r["count"] for r in df.groupBy("change_type").count().collect()}
    assert counts == {"put": 61, "delete": 1}
    k7 = df.where("key = 'k7'").orderBy("ledger_id", "entry_id", "batch_index").collect()
    assert [r.change_type for r in k7] == ["put", "put", "delete"] and k7[-1].value is None


def test_sql_view(
    spark: SparkSession, pulsar_endpoint: PulsarEndpoint, filled_map: tuple[str, dict[str, Any]]
) -> None:
    topic, expected = filled_map
    spark.sql(
        f"""CREATE OR REPLACE TEMPORARY VIEW state_v USING pulsar_state OPTIONS (
            serviceUrl '{pulsar_endpoint.service_url}', adminUrl '{pulsar_endpoint.admin_url}',
            topic '{topic}')"""
    )
    assert spark.sql("SELECT count(*) AS n FROM state_v").collect()[0].n == len(expected)


def test_streaming_changes(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    admin_url: str,
) -> None:
    topic = unique_topic("stream")
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as m:
        m.put("a", 1).result()
        stream = _read_stream(spark, pulsar_endpoint, topic)
        name = f"changes_{topic.rsplit('-', 1)[-1]}"
        query = stream.writeStream.format("memory").queryName(name).start()
        try:
            query.processAllAvailable()
            m.put("b", 2).result()
            m.delete("a").result()
            query.processAllAvailable()
            rows = spark.sql(
                f"SELECT key, value, change_type FROM {name} "
                "ORDER BY ledger_id, entry_id, batch_index"
            )
            assert [tuple(r) for r in rows.collect()] == [
                ("a", "1", "put"),
                ("b", "2", "put"),
                ("a", None, "delete"),
            ]
        finally:
            query.stop()


def _stream_reader(spark: SparkSession, ep: PulsarEndpoint, topic: str) -> Any:
    """The stream reader Spark would build, driven directly (as Spark's driver does)."""
    source = PulsarStateDataSource(
        {
            "serviceUrl": ep.service_url,
            "adminUrl": ep.admin_url,
            "topic": topic,
            "mode": "changelog",
        }
    )
    return source.simpleStreamReader(spark.createDataFrame([], source.schema()).schema)


def test_stream_batches_replay_deterministically_and_available_now_stops_at_its_target(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    admin_url: str,
) -> None:
    topic = unique_topic("stream-replay")
    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as m:
        m.put("a", 1).result()
        m.put("b", 2).result()
        reader = _stream_reader(spark, pulsar_endpoint, topic)
        reader.prepareForTriggerAvailableNow()  # target: a, b
        m.put("c", 3).result()  # after the target: not in this query
        start = reader.initialOffset()
        rows, end = reader.read(start)
        first = [(r[0], r[1], r[2]) for r in rows]
        assert first == [("a", "1", "put"), ("b", "2", "put")]
        assert reader.read(end)[1] == end  # nothing more for this query
        m.delete("a").result()
        # a batch replayed from its offsets (after a restart) is the same batch
        again = [(r[0], r[1], r[2]) for r in reader.readBetweenOffsets(start, end)]
        assert again == first
        # a new query (no target) goes on from the committed offset
        later = _stream_reader(spark, pulsar_endpoint, topic)
        rest = [(r[0], r[1], r[2]) for r in later.read(end)[0]]
        assert rest == [("c", "3", "put"), ("a", None, "delete")]


def test_available_now_query_on_a_checkpoint(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    admin_url: str,
    tmp_path: Any,
) -> None:
    topic = unique_topic("stream-now")

    out = tmp_path / "out"

    def run_once() -> list[tuple[Any, ...]]:
        query = (
            _read_stream(spark, pulsar_endpoint, topic)
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120), "an availableNow query stops by itself"
        rows = spark.read.parquet(str(out)).orderBy("ledger_id", "entry_id", "batch_index")
        return [(r.key, r.value) for r in rows.collect()]

    with PulsarMap[str, int](make_client(), topic, admin_url=admin_url) as m:
        m.put_all({"a": 1, "b": 2}).result()
        assert sorted(run_once()) == [("a", "1"), ("b", "2")]
        m.put("c", 3).result()
        # the second run resumes from the checkpoint: the new change only, nothing twice
        assert sorted(run_once()) == [("a", "1"), ("b", "2"), ("c", "3")]


def test_clear_errors(spark: SparkSession, pulsar_endpoint: PulsarEndpoint) -> None:
    with pytest.raises(Exception, match="does not exist"):
        _read(spark, pulsar_endpoint, unique_topic("missing")).collect()
    with pytest.raises(Exception, match="mode must be one of"):
        _read(spark, pulsar_endpoint, unique_topic("x"), mode="sideways").collect()
    with pytest.raises(Exception, match="option 'topic' is required"):
        spark.read.format("pulsar_state").option("serviceUrl", "pulsar://127.0.0.1:1").load()
    with pytest.raises(Exception, match="unreachable"):
        (
            spark.read.format("pulsar_state")
            .option("serviceUrl", pulsar_endpoint.service_url)
            .option("adminUrl", "http://127.0.0.1:9")
            .option("topic", "t")
            .load()
            .collect()
        )
