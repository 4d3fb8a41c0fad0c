"""The rows of a ``pulsar_state`` Spark read: a task's partition
(:class:`ReadPartition`) and the Arrow batches its rows are yielded in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.connectors.spark_ranges import Range, replay_range
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.map.pulsar_map import MapOp

__all__ = ["ReadPartition", "arrow_batches", "changelog_batches"]

_BATCH_ROWS = 50_000


class ReadPartition(InputPartition):
    def __init__(
        self,
        index: int,
        count: int,
        end: str,
        keys: tuple[str, ...] | None,
        span: Range | None = None,
    ) -> None:
        super().__init__(index)
        self.index = index
        self.count = count
        self.end = end
        self.keys = keys
        #: changelog: the log range this partition reads (keys are not split then)
        self.span = span


def _to_arrow(
    opts: SourceOptions, schema: StructType, columns: dict[str, list[Any]]
) -> pa.RecordBatch:
    fields = []
    arrays = []
    for field in schema.fields:
        name = field.name
        if name == "publish_time":
            arr = pa.array(columns[name], type=pa.timestamp("us", tz="UTC"))
        elif name in ("ledger_id", "entry_id"):
            arr = pa.array(columns[name], type=pa.int64())
        elif name == "batch_index":
            arr = pa.array(columns[name], type=pa.int32())
        elif name == "value" and opts.value_format == "binary":
            arr = pa.array(columns[name], type=pa.binary())
        else:
            arr = pa.array(columns[name], type=pa.string())
        fields.append(pa.field(name, arr.type, nullable=True))
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def arrow_batches(
    opts: SourceOptions, schema: StructType, columns: dict[str, list[Any]]
) -> Iterator[pa.RecordBatch]:
    total = len(columns["key"])
    for start in range(0, total, _BATCH_ROWS):
        part = {name: values[start : start + _BATCH_ROWS] for name, values in columns.items()}
        yield _to_arrow(opts, schema, part)


def changelog_batches(
    opts: SourceOptions, schema: StructType, span: Range, wanted: Any = None
) -> Iterator[pa.RecordBatch]:
    """The changelog rows of one range, as Arrow batches."""
    columns: dict[str, list[Any]] = {f.name: [] for f in schema.fields}

    def on_change(change: AppliedWrite[MapOp[str, Any]]) -> None:
        for op in change.ops:
            if wanted is not None and not wanted(op.key):
                continue
            columns["key"].append(op.key)
            columns["value"].append(None if op.is_delete else opts.value_of(op.payload))
            columns["change_type"].append("delete" if op.is_delete else "put")
            columns["position"].append(str(change.position))
            columns["publish_time"].append(change.publish_ms * 1000)
            columns["ledger_id"].append(change.position.ledger)
            columns["entry_id"].append(change.position.entry)
            columns["batch_index"].append(change.position.batch)

    replay_range(opts, span, on_write=on_change)
    yield from arrow_batches(opts, schema, columns)
