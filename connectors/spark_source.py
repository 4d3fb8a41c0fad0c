"""``pulsar_state``: a PySpark Python Data Source over the shared state.

Batch reads need PySpark >= 4.0, ``pushdown`` 4.1, streams 4.2
(:mod:`~pulsar_state.connectors.spark_features`).

    spark.dataSource.register(PulsarStateDataSource)
    df = (spark.read.format("pulsar_state")
          .option("serviceUrl", "pulsar://127.0.0.1:6650")
          .option("adminUrl", "http://127.0.0.1:8080")
          .option("topic", "persistent://public/default/config")
          .load())                                   # key, value: the map, now

Modes (option ``mode``):

* ``snapshot`` (default): the latest value per key as of the topic's last
  position, frozen when the query is planned. When the map has a columnar
  checkpoint, its chunks are read by parallel tasks and the raw log after it
  by the driver (:mod:`~pulsar_state.connectors.spark_checkpoint`; option
  ``checkpoint=false`` turns that off); otherwise the compacted view plus the
  raw tail. Tombstones, duplicates and stale (fenced) writes are dropped by
  the state core's own replay (:class:`~pulsar_state.core.log.replay.LogReplay`), so
  the result equals what a ``PulsarMap`` sees at that position.
* ``changelog``: every applied change (``change_type`` ``put``/``delete``) with
  its ``position`` (a token the core's ``read(at_least=...)`` takes), its
  parts ``ledger_id``, ``entry_id``, ``batch_index`` (order by them) and
  ``publish_time``, from the raw log.
* streaming (``spark.readStream.format("pulsar_state")``): micro-batches of
  changes; offsets are JSON ``{"position": "l:e:b", "epoch": n}`` so a batch
  replays deterministically. Read on the driver, or with ``numPartitions`` > 1
  as parallel ranges (:class:`PulsarStateParallelStreamReader`).
  ``trigger(availableNow=True)`` reads what the topic held when the query
  started, then stops.

Other options: ``valueFormat`` (``json``: the value as JSON text, validated;
``string``; ``binary``), ``includeMetadata`` (adds ``position`` and
``publish_time`` to snapshots), ``authToken`` (JWT) or ``authPlugin`` and
``authParams`` (token, basic, tls client certificate), ``tlsTrustCertsFilePath``,
``tlsAllowInsecureConnection`` and ``tlsEnableHostnameVerification`` (spelled as
in Pulsar's ``client.conf``; one :class:`~pulsar_state.cluster.auth.ClusterAuth`
for every client and admin call), ``numPartitions`` (a
snapshot: split keys by hash across tasks, each task reads the topic; a
changelog: that many disjoint ranges of whole entries read in parallel, by
default one per driver core; see
:func:`~pulsar_state.connectors.spark_ranges.replay_range` for why the rows
equal a one-range read's), ``timeoutMs``.
With ``pushdown=true``, filters ``key = x`` and ``key IN (...)`` are pushed down
(needs ``spark.sql.python.filterPushdown.enabled=true``, Spark >= 4.1, which
otherwise refuses such a reader): rows of other keys are never built.

Lifecycle (as PySpark's ``datasource.py`` describes it): the data source and
readers are created on the driver and pickled to executors; they hold only
options. Pulsar clients are opened inside ``partitions()`` (driver) and
``read()`` (executors) and closed there. The driver checks the options, that
the broker answers and that the topic exists before any task runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pulsar_state.connectors.spark_checkpoint import (
    ChunkPartition,
    TailPartition,
    plan_from_checkpoint,
    read_checkpoint_partition,
)
from pulsar_state.connectors.spark_features import (
    PUSHDOWN_SINCE,
    STREAMING_SINCE,
    unsupported,
)
from pulsar_state.connectors.spark_options import SourceOptions, source_schema
from pulsar_state.connectors.spark_ranges import plan_ranges
from pulsar_state.connectors.spark_ranges import replay_changes as _replay_changes
from pulsar_state.connectors.spark_rows import ReadPartition, arrow_batches, changelog_batches
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.map.pulsar_map import MapOp
from pulsar_state.position import Position

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter

    from pulsar_state.connectors.spark_stream import (
        PulsarStateParallelStreamReader,
        PulsarStateStreamReader,
    )

__all__ = ["PulsarStateDataSource", "SourceOptions"]


def _bucket(key: str, count: int) -> int:
    return zlib.crc32(key.encode()) % count


class PulsarStateBatchReader(DataSourceReader):
    """Snapshot or changelog of one state topic. Holds only options (picklable)."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.keys: tuple[str, ...] | None = None
        opts.check_topic()  # on the driver, before any task

    def partitions(self) -> list[InputPartition]:
        if self.opts.mode == "snapshot":
            from_checkpoint = plan_from_checkpoint(self.opts, self.keys)
            if from_checkpoint is not None:
                return from_checkpoint
        end = self.opts.last_position()  # frozen at planning time
        n = self.opts.partitions_for(self.opts.mode)
        if self.opts.mode == "changelog":  # disjoint position ranges, keys not split
            ranges = plan_ranges(self.opts, end, n)
            return [ReadPartition(i, 1, str(end), self.keys, span) for i, span in enumerate(ranges)]
        return [ReadPartition(i, n, str(end), self.keys) for i in range(n)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChunkPartition | TailPartition):
            yield from read_checkpoint_partition(self.opts, self.schema, partition)
            return
        assert isinstance(partition, ReadPartition)
        opts = self.opts
        keys = set(partition.keys) if partition.keys is not None else None

        def wanted(key: str) -> bool:
            if keys is not None and key not in keys:
                return False
            return partition.count == 1 or _bucket(key, partition.count) == partition.index

        names = [f.name for f in self.schema.fields]
        if opts.mode == "changelog":
            assert partition.span is not None
            yield from changelog_batches(opts, self.schema, partition.span, wanted)
            return

        latest: dict[str, tuple[bytes, Position, int] | None] = {}

        def on_write(change: AppliedWrite[MapOp[str, Any]]) -> None:
            for op in change.ops:
                if wanted(op.key):
                    latest[op.key] = (
                        None if op.is_delete else (op.payload, change.position, change.publish_ms)
                    )

        _replay_changes(
            opts,
            compacted=True,
            start=None,
            start_epoch=0,
            end=Position.parse(partition.end),
            on_write=on_write,
        )
        columns: dict[str, list[Any]] = {name: [] for name in names}
        for key, entry in latest.items():
            if entry is None:
                continue  # deleted
            payload, position, publish_ms = entry
            columns["key"].append(key)
            columns["value"].append(opts.value_of(payload))
            if opts.include_metadata:
                columns["position"].append(str(position))
                columns["publish_time"].append(publish_ms * 1000)
        yield from arrow_batches(opts, self.schema, columns)


class PulsarStatePushdownReader(PulsarStateBatchReader):
    """The batch reader with key filters pushed down (option ``pushdown=true``).

    Spark refuses a reader that implements ``pushFilters`` unless
    ``spark.sql.python.filterPushdown.enabled=true``, hence a reader of its own.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        try:  # the filter classes came with PySpark 4.1
            from pyspark.sql.datasource import EqualTo, In  # noqa: PLC0415, F401
        except ImportError as exc:
            raise unsupported("pushdown=true", PUSHDOWN_SINCE, exc) from exc
        super().__init__(opts, schema)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        from pyspark.sql.datasource import EqualTo, In  # noqa: PLC0415 (PySpark >= 4.1)

        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("key",):
                self.keys = (
                    (str(f.value),)
                    if self.keys is None
                    else tuple(k for k in self.keys if k == str(f.value))
                )
            elif isinstance(f, In) and f.attribute == ("key",):
                wanted = tuple(str(v) for v in f.value)
                self.keys = (
                    wanted if self.keys is None else tuple(k for k in self.keys if k in wanted)
                )
            else:
                yield f


class PulsarStateDataSource(DataSource):
    """Register with ``spark.dataSource.register(PulsarStateDataSource)``."""

    @classmethod
    def name(cls) -> str:
        return "pulsar_state"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.opts = SourceOptions.parse(dict(options))

    def schema(self) -> str:
        return source_schema(self.opts)

    def reader(self, schema: StructType) -> PulsarStateBatchReader:
        if self.opts.pushdown:
            return PulsarStatePushdownReader(self.opts, schema)
        return PulsarStateBatchReader(self.opts, schema)

    def streamReader(self, schema: StructType) -> PulsarStateParallelStreamReader:  # noqa: N802
        """Ranges read in parallel when ``numPartitions`` > 1 is set; else Spark
        falls back to :meth:`simpleStreamReader` (the stream read on the driver)."""
        if self.opts.num_partitions is None or self.opts.num_partitions == 1:
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        self._check_stream_mode()
        try:  # SupportsTriggerAvailableNow came with PySpark 4.2
            from pulsar_state.connectors.spark_stream import (  # noqa: PLC0415
                PulsarStateParallelStreamReader,
            )
        except ImportError as exc:
            raise unsupported("a streaming read", STREAMING_SINCE, exc) from exc
        return PulsarStateParallelStreamReader(self.opts, schema)

    def _check_stream_mode(self) -> None:
        if self.opts.mode != "changelog":
            raise ValueError(
                "pulsar_state: a stream reads changes: set option mode=changelog "
                "(the stream's schema is the changelog's)"
            )

    def simpleStreamReader(self, schema: StructType) -> PulsarStateStreamReader:  # noqa: N802
        self._check_stream_mode()
        try:  # SupportsTriggerAvailableNow came with PySpark 4.2
            from pulsar_state.connectors.spark_stream import (  # noqa: PLC0415
                PulsarStateStreamReader,
            )
        except ImportError as exc:
            raise unsupported("a streaming read", STREAMING_SINCE, exc) from exc
        return PulsarStateStreamReader(self.opts, schema)
