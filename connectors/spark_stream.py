"""Streaming reads of the ``pulsar_state`` Spark data source: micro-batches of
changes, read on the driver (:class:`PulsarStateStreamReader`) or as parallel
ranges (:class:`PulsarStateParallelStreamReader`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.connectors.spark_ranges import plan_ranges, replay_changes, stream_end_epoch
from pulsar_state.connectors.spark_rows import ReadPartition, changelog_batches
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.map.pulsar_map import MapOp
from pulsar_state.position import START, Position

__all__ = ["PulsarStateParallelStreamReader", "PulsarStateStreamReader"]


class PulsarStateStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of changes. Runs on the driver (a state topic is small).

    With ``Trigger.AvailableNow`` the topic's last position when the query
    starts is the target: no batch reads past it, so writes made while the
    query runs wait for the next query.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: Position | None = None
        opts.check_topic()

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return {"position": str(START), "epoch": 0}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        self._target = self.opts.last_position()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        end = self.opts.last_position()
        if self._target is not None:
            end = min(end, self._target)
        rows, epoch = self._changes(start, end)
        return iter(rows), {
            "position": str(max(end, Position.parse(start["position"]))),
            "epoch": epoch,
        }

    def readBetweenOffsets(  # noqa: N802 (Spark's name)
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[tuple[Any, ...]]:
        rows, epoch = self._changes(start, Position.parse(end["position"]))
        if "epoch" in end and int(end["epoch"]) != epoch:
            # only a parallel batch's end offset can carry an epoch other than the
            # replay's (inferred on the driver, refused by its last task): going on
            # from it would start the next batch from a wrong epoch
            raise RuntimeError(
                f"pulsar_state: the stream's end offset {end} carries fencing epoch "
                f"{end['epoch']}, but the log has {epoch} there (inferred by a parallel "
                f"batch from a fenced writer's stale writes); run the query on a new "
                f"checkpoint without numPartitions"
            )
        return iter(rows)

    def _changes(self, start: dict[str, Any], end: Position) -> tuple[list[tuple[Any, ...]], int]:
        opts = self.opts
        rows: list[tuple[Any, ...]] = []

        def on_change(change: AppliedWrite[MapOp[str, Any]]) -> None:
            for op in change.ops:
                rows.append(
                    (
                        op.key,
                        None if op.is_delete else opts.value_of(op.payload),
                        "delete" if op.is_delete else "put",
                        str(change.position),
                        _utc(change.publish_ms),
                        change.position.ledger,
                        change.position.entry,
                        change.position.batch,
                    )
                )

        begin = Position.parse(start["position"])
        replay = replay_changes(
            opts,
            compacted=False,
            start=None if begin.is_start else begin,
            start_epoch=int(start.get("epoch", 0)),
            end=end,
            on_write=on_change,
        )
        return rows, replay.epoch

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: readers are opened and closed per batch."""


class PulsarStateParallelStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of changes read as disjoint ranges by ``numPartitions`` tasks.

    Used when ``numPartitions`` > 1 is set on a stream; otherwise the stream is
    read on the driver (:class:`PulsarStateStreamReader`). An end offset carries
    the fencing epoch at its position, worked out on the driver from the entries
    just before it and checked by the batch's last task against its replay.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: Position | None = None
        self._last: dict[str, Any] | None = None
        opts.check_topic()

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return {"position": str(START), "epoch": 0}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's name)
        self._target = self.opts.last_position()

    def latestOffset(  # noqa: N802 (Spark's name)
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        start = start or self._last or self.initialOffset()
        begin = Position.parse(start["position"])
        end = self.opts.last_position()
        if self._target is not None:
            end = min(end, self._target)
        if not end > begin or begin.covers(end):
            return start
        epoch = stream_end_epoch(self.opts, begin, int(start.get("epoch", 0)), end)
        self._last = {"position": str(end), "epoch": epoch}
        return self._last

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, stop = Position.parse(start["position"]), Position.parse(end["position"])
        if not stop > begin or begin.covers(stop):
            return []
        ranges = plan_ranges(
            self.opts,
            stop,
            self.opts.partitions_for("changelog"),
            start=begin,
            start_epoch=int(start.get("epoch", 0)),
            end_epoch=int(end["epoch"]),
        )
        return [ReadPartition(i, 1, str(stop), None, span) for i, span in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadPartition) and partition.span is not None
        yield from changelog_batches(self.opts, self.schema, partition.span)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: readers are opened and closed per task."""


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
