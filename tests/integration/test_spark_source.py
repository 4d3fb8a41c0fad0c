"""The pulsar_state Spark data source on the real broker with a local Spark session."""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
import requests
from harness import PulsarEndpoint, compact_topic, unique_topic, wait_until
from pyspark.sql import DataFrame, SparkSession

from pulsar_state import PulsarMap
from pulsar_state.cluster.admin import PulsarAdmin, topic_path
from pulsar_state.connectors.spark_source import (
    PulsarStateDataSource,
    SourceOptions,
    _replay_changes,
)

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


def _read_stream(spark: SparkSession, ep: PulsarEndpoint, topic: str, **options: str) -> DataFrame:
    """The changelog of ``topic`` as a stream."""
    reader = (
        spark.readStream.format("pulsar_state")
        .option("serviceUrl", ep.service_url)
        .option("adminUrl", ep.admin_url)
        .option("topic", topic)
        .option("mode", "changelog")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


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


@pytest.mark.parametrize("partitions", [None, "2"], ids=["driver", "ranges"])
def test_available_now_query_on_a_checkpoint(  # noqa: PLR0917 (fixtures)
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    admin_url: str,
    tmp_path: Any,
    partitions: str | None,
) -> None:
    topic = unique_topic("stream-now")
    options = {"numPartitions": partitions} if partitions else {}

    out = tmp_path / "out"

    def run_once() -> list[tuple[Any, ...]]:
        query = (
            _read_stream(spark, pulsar_endpoint, topic, **options)
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


def _changelog_by_partition(
    spark: SparkSession, ep: PulsarEndpoint, topic: str, partitions: int
) -> list[list[tuple[Any, ...]]]:
    """The changelog reader Spark would build, its planned partitions read one by one
    here (as the executors would): the rows of each partition, in order."""
    source = PulsarStateDataSource(
        {
            "serviceUrl": ep.service_url,
            "adminUrl": ep.admin_url,
            "topic": topic,
            "mode": "changelog",
            "numPartitions": str(partitions),
        }
    )
    reader = source.reader(spark.createDataFrame([], source.schema()).schema)
    out = []
    for partition in reader.partitions():
        rows: list[tuple[Any, ...]] = []
        for batch in reader.read(partition):
            rows.extend(zip(*(col.to_pylist() for col in batch.columns), strict=True))
        out.append(rows)
    return out


def test_parallel_changelog_reads_disjoint_ranges_with_the_single_read_rows(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    admin_url: str,
) -> None:
    """Several ledgers (the topic unloaded between batches), multi-op writes,
    deletes, a stale write, a forged epoch and a duplicate: every range read
    gives the rows of the whole-topic read, split at entry boundaries."""
    topic = unique_topic("spark-ranges")
    client = make_client()
    for batch in range(4):
        with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:  # a new epoch each
            m.put_all({f"k{batch}-{i}": i for i in range(7)}).result()
            for i in range(5):
                m.put(f"k{batch}-{i}", {"round": batch}).result()
            m.delete(f"k{batch}-6").result()
            m.put_all({f"k{batch}-{i}": None for i in range(2)}).result()
        # unloading the topic closes its ledger: the next writes start a new one
        resp = requests.put(f"{admin_url}/admin/v2/{topic_path(topic)}/unload", timeout=30)
        assert resp.status_code in (200, 204), resp.text
    # writes only a broken or fenced writer makes: a stale epoch, a forged one, a duplicate
    raw = pulsar.Client(pulsar_endpoint.service_url)
    try:
        log = raw.create_reader(topic, pulsar.MessageId.earliest)
        writes = []
        while log.has_message_available():
            msg = log.read_next(timeout_millis=10_000)
            if msg.properties().get("pss.k") == "write":
                writes.append(msg)
        log.close()
        first, last = writes[0], writes[-1]
        producer = raw.create_producer(topic)
        producer.send(b'"stale"', properties=first.properties(), partition_key="stale")
        forged = {**last.properties(), "pss.e": str(1 << 62), "pss.w": "forged"}
        producer.send(b'"forged"', properties=forged, partition_key="forged")
        producer.send(last.data(), properties=last.properties(), partition_key=last.partition_key())
        producer.close()
    finally:
        raw.close()

    # the reference: the whole topic through the state core's replay in one pass
    opts = SourceOptions.parse(
        {"serviceUrl": pulsar_endpoint.service_url, "adminUrl": admin_url, "topic": topic}
    )
    reference: list[tuple[Any, ...]] = []

    def on_write(change: Any) -> None:
        p = change.position
        for op in change.ops:
            value = None if op.is_delete else op.payload.decode()
            kind = "delete" if op.is_delete else "put"
            reference.append((op.key, value, kind, str(p), p.ledger, p.entry, p.batch))

    _replay_changes(
        opts,
        compacted=False,
        start=None,
        start_epoch=0,
        end=opts.last_position(),
        on_write=on_write,
    )
    whole = _changelog_by_partition(spark, pulsar_endpoint, topic, 1)
    assert len(whole) == 1
    assert [(*r[:4], *r[5:]) for r in whole[0]] == reference
    reference = whole[0]
    assert len({r[5] for r in reference}) == 4  # a ledger per map (the raw sends: no rows)
    keys = {r[0] for r in reference}
    assert "stale" not in keys and "forged" not in keys
    assert sum(1 for r in reference if r[2] == "delete") == 4
    assert len(reference) == 4 * (7 + 5 + 1 + 2)  # the duplicate is not a row
    for n in (2, 3, 5, 16):
        parts = _changelog_by_partition(spark, pulsar_endpoint, topic, n)
        assert len(parts) > 1
        assert [r for part in parts for r in part] == reference, f"numPartitions={n}"
        # disjoint position ranges: each partition's rows lie after the previous one's
        spans = [(p[0][5:7], p[-1][5:7]) for p in parts if p]
        for (_, prev_last), (next_first, _) in itertools.pairwise(spans):
            assert prev_last < next_first, f"numPartitions={n}: overlapping ranges {spans}"
    # and through Spark: the same rows in the same order
    parallel = _read(spark, pulsar_endpoint, topic, mode="changelog", numPartitions="4")
    single = _read(spark, pulsar_endpoint, topic, mode="changelog", numPartitions="1")
    assert parallel.rdd.getNumPartitions() == 4
    assert [tuple(r) for r in parallel.collect()] == [tuple(r) for r in single.collect()]


def test_partition_option_is_validated(
    spark: SparkSession, pulsar_endpoint: PulsarEndpoint
) -> None:
    for bad in ("0", "-2", "two", "100001"):
        with pytest.raises(Exception, match="numPartitions"):
            _read(spark, pulsar_endpoint, unique_topic("x"), mode="changelog", numPartitions=bad)


def test_parallel_changelog_refuses_a_range_start_only_stale_writes_precede(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    admin_url: str,
) -> None:
    """A range whose warm-up holds only a fenced writer's stale writes cannot know
    the epoch in force: the previous range's task sees that and fails the read
    (never wrong rows); the single-range read has them all skipped."""
    topic = unique_topic("spark-stale")
    client = make_client()
    with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
        m.put("a", 1).result()
    with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:  # a newer epoch
        m.put("b", 2).result()
    raw = pulsar.Client(pulsar_endpoint.service_url)
    try:
        log = raw.create_reader(topic, pulsar.MessageId.earliest)
        old = log.read_next(timeout_millis=10_000)
        while old.properties().get("pss.k") != "write":
            old = log.read_next(timeout_millis=10_000)
        log.close()
        producer = raw.create_producer(topic, batching_enabled=False)
        for i in range(70):  # the old writer's epoch, after the new writer's marker:
            # more entries than a range's warm-up (64), so a range's warm-up holds only these
            producer.send_async(
                f"{i}".encode(), None, properties=old.properties(), partition_key=f"s{i}"
            )
        producer.flush()
        producer.close()
    finally:
        raw.close()
    (single,) = _changelog_by_partition(spark, pulsar_endpoint, topic, 1)
    assert [(r[0], r[1]) for r in single] == [("a", "1"), ("b", "2")]
    with pytest.raises(RuntimeError, match="cannot be made exact"):
        _changelog_by_partition(spark, pulsar_endpoint, topic, 37)  # two entries each
    # fewer ranges: a warm-up reaches the new writer's epoch, and the rows are exact
    assert _changelog_by_partition(spark, pulsar_endpoint, topic, 2)[1] == []
    # a stream batch in ranges: the end offset's epoch, worked out on the driver from
    # the entries before the end (only stale ones), is refused by the last range
    source = PulsarStateDataSource(
        {
            "serviceUrl": pulsar_endpoint.service_url,
            "adminUrl": admin_url,
            "topic": topic,
            "mode": "changelog",
            "numPartitions": "2",
        }
    )
    reader = source.streamReader(spark.createDataFrame([], source.schema()).schema)
    start = reader.initialOffset()
    first, last = reader.partitions(start, reader.latestOffset(start, None))
    assert [tuple(b.column(0).to_pylist()) for b in reader.read(first)] == [("a", "b")]
    with pytest.raises(RuntimeError, match="cannot be made exact"):
        list(reader.read(last))
    # that batch's end offset stays in the query's offset log: re-run by the driver-side
    # reader (the query restarted without numPartitions), it is refused too, since the
    # next batch would start from its wrong epoch
    end = reader.latestOffset(start, None)
    simple = _stream_reader(spark, pulsar_endpoint, topic)
    with pytest.raises(RuntimeError, match="end offset"):
        simple.readBetweenOffsets(start, end)
    assert simple.read(start)[1]["epoch"] != end["epoch"]


def test_parallel_stream_batches_read_ranges_with_the_single_read_rows(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    admin_url: str,
) -> None:
    """numPartitions > 1 on a stream: each micro-batch is read as disjoint ranges;
    the rows over two batches (several ledgers, a stale write) are the one-pass
    changelog's, in order."""
    topic = unique_topic("stream-ranges")
    client = make_client()

    def write_round(name: str) -> None:
        with PulsarMap[str, Any](client, topic, admin_url=admin_url) as m:
            m.put_all({f"{name}-{i}": i for i in range(6)}).result()
            for i in range(4):
                m.put(f"{name}-{i}", {"again": i}).result()
            m.delete(f"{name}-5").result()
        resp = requests.put(f"{admin_url}/admin/v2/{topic_path(topic)}/unload", timeout=30)
        assert resp.status_code in (200, 204), resp.text

    write_round("a")
    write_round("b")
    source = PulsarStateDataSource(
        {
            "serviceUrl": pulsar_endpoint.service_url,
            "adminUrl": admin_url,
            "topic": topic,
            "mode": "changelog",
            "numPartitions": "3",
        }
    )
    reader = source.streamReader(spark.createDataFrame([], source.schema()).schema)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert len(reader.partitions(start, end)) == 3
    name = f"ranges_{topic.rsplit('-', 1)[-1]}"
    stream = (
        spark.readStream.format("pulsar_state")
        .option("serviceUrl", pulsar_endpoint.service_url)
        .option("adminUrl", admin_url)
        .option("topic", topic)
        .option("mode", "changelog")
        .option("numPartitions", "3")
        .load()
    )
    query = stream.writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        write_round("c")
        raw = pulsar.Client(pulsar_endpoint.service_url)
        try:  # a write of the first writer's epoch, after later writers' markers
            log = raw.create_reader(topic, pulsar.MessageId.earliest)
            old = log.read_next(timeout_millis=10_000)
            while old.properties().get("pss.k") != "write":
                old = log.read_next(timeout_millis=10_000)
            log.close()
            producer = raw.create_producer(topic)
            producer.send(b'"stale"', properties=old.properties(), partition_key="stale")
            producer.close()
        finally:
            raw.close()
        query.processAllAvailable()
        got = spark.sql(f"SELECT * FROM {name}").collect()
    finally:
        query.stop()
    single = _read(spark, pulsar_endpoint, topic, mode="changelog", numPartitions="1").collect()
    assert len(single) == 3 * (6 + 4 + 1)
    order = ("ledger_id", "entry_id", "batch_index")
    assert sorted((tuple(r) for r in got), key=lambda r: r[5:8]) == [tuple(r) for r in single]
    assert [r[5:8] for r in got] == sorted(r[5:8] for r in got), f"rows in {order} order"


# -- snapshots from a columnar checkpoint (issue 16, item 2) -------------------


@pytest.fixture
def checkpointed_map(make_client: ClientFactory, admin_url: str) -> tuple[str, dict[str, Any]]:
    """3,000 keys in a checkpoint, then deletes, overwrites and new keys after it,
    and compaction (which drops the deleted keys' history)."""
    from pulsar_state import CheckpointPolicy  # noqa: PLC0415

    topic = unique_topic("spark-ckpt")
    policy = CheckpointPolicy(every_ops=10**9, min_keys=0, chunk_bytes=16 * 1024)
    with PulsarMap[str, Any](make_client(), topic, admin_url=admin_url, checkpoints=policy) as m:
        for at in range(0, 3000, 500):
            m.put_all({f"k{i}": {"i": i} for i in range(at, at + 500)}).result()
        m.checkpoint().result(timeout=60)
        for i in range(0, 90, 3):
            m.delete(f"k{i}").result()
            m.put(f"k{i + 1}", "changed").result()
            m.put(f"new{i}", i).result()
        expected = m.items(latest=True).result()
    compact_topic(admin_url, topic)
    return topic, expected


def test_snapshot_reads_the_checkpoint_chunks_in_parallel_plus_the_tail(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    checkpointed_map: tuple[str, dict[str, Any]],
) -> None:
    from pulsar_state.connectors.spark_checkpoint import (  # noqa: PLC0415
        ChunkPartition,
        TailPartition,
    )
    from pulsar_state.connectors.spark_source import PulsarStateBatchReader  # noqa: PLC0415

    topic, expected = checkpointed_map
    ep = pulsar_endpoint
    options = {"serviceUrl": ep.service_url, "adminUrl": ep.admin_url, "topic": topic}
    opts = SourceOptions.parse({**options, "numPartitions": "3"})
    planned = PulsarStateBatchReader(opts, None).partitions()  # type: ignore[arg-type]
    assert [type(p) for p in planned] == [ChunkPartition] * 3 + [TailPartition]
    assert _as_dict(_read(spark, ep, topic)) == expected
    assert _as_dict(_read(spark, ep, topic, numPartitions="3")) == expected
    assert _as_dict(_read(spark, ep, topic, checkpoint="false")) == expected
    binary = _read(spark, ep, topic, valueFormat="binary").collect()
    assert {r.key: json.loads(r.value) for r in binary} == expected
    strings = _read(spark, ep, topic, valueFormat="string").collect()
    assert {r.key: json.loads(r.value) for r in strings} == expected
    for pushed in ({}, {"pushdown": "true"}):  # deleted after, changed after, untouched
        df = _read(spark, ep, topic, **pushed).where("key IN ('k0', 'k1', 'k2000', 'new3')")
        assert _as_dict(df) == {k: expected[k] for k in ("k1", "k2000", "new3")}
    # with metadata columns the topic is replayed (a checkpoint has no positions)
    with_meta = _read(spark, ep, topic, includeMetadata="true").collect()
    assert {r.key: json.loads(r.value) for r in with_meta} == expected


def test_checkpoint_values_the_read_format_refuses_are_left_out_as_the_topic_read_does(
    spark: SparkSession, pulsar_endpoint: PulsarEndpoint, make_client: ClientFactory
) -> None:
    """A map of raw bytes read as string or json: values that do not decode are left
    out from a checkpoint as from the topic (the checkpoint read returned non-JSON
    rows and failed the job on bad UTF-8 until fixed)."""
    from pulsar_state import BytesSerde, CheckpointPolicy  # noqa: PLC0415

    ep = pulsar_endpoint
    topic = unique_topic("spark-ckpt-bytes")
    policy = CheckpointPolicy(every_ops=10**9, min_keys=0)
    with PulsarMap[str, bytes](
        make_client(), topic, admin_url=ep.admin_url, value_serde=BytesSerde(), checkpoints=policy
    ) as m:
        for key, value in (("bad-utf8", b"\xff"), ("text", b"not json"), ("json", b'"ok"')):
            m.put(key, value).result()
        m.checkpoint().result(timeout=60)
    for value_format, keys in (("string", {"text", "json"}), ("json", {"json"})):
        rows = {
            mode: {
                r.key: r.value
                for r in _read(
                    spark, ep, topic, valueFormat=value_format, checkpoint=mode
                ).collect()
            }
            for mode in ("true", "false")
        }
        assert set(rows["false"]) == keys, value_format
        assert rows["true"] == rows["false"], value_format


def test_a_broken_checkpoint_falls_back_to_the_topic(
    spark: SparkSession,
    pulsar_endpoint: PulsarEndpoint,
    make_client: ClientFactory,
    filled_map: tuple[str, dict[str, Any]],
) -> None:
    from pulsar_state.map.checkpoint.format import chunk_properties, encode_chunks  # noqa: PLC0415
    from pulsar_state.topic_names import checkpoint_topic  # noqa: PLC0415

    topic, expected = filled_map
    producer = make_client().create_producer(checkpoint_topic(topic), batching_enabled=False)
    ((orphan, _),) = encode_chunks([("ghost", b"1")], chunk_bytes=4096, compression=None)
    props = chunk_properties("dead", 0, None)
    props["pss.cp.prev"] = "junk"
    producer.send(orphan, properties=props)
    producer.close()
    assert _as_dict(_read(spark, pulsar_endpoint, topic)) == expected
