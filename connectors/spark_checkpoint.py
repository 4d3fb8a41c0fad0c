"""A ``pulsar_state`` Spark snapshot read from the map's newest checkpoint.

When the map has a checkpoint (:mod:`pulsar_state.map.checkpoint`), a snapshot is
planned on the driver as

* the **tail**: the raw log after the checkpoint's position through the frozen
  end, replayed on the driver by the core's own replay (short: a holder writes a
  checkpoint every ``every_ops`` ops). Its final value per key becomes one
  partition of rows; its keys (set or deleted) are the *overridden* keys;
* the **chunks**: the checkpoint's Arrow chunks split into consecutive groups,
  one task each. A task reads its chunks straight from their positions and
  yields every row whose key the tail did not override, column at a time (no
  per-row Python for ``binary`` and ``string`` values).

The rows equal a whole-topic replay's at the same end: a checkpoint is the map
exactly as applied through its position, and the tail adds what came after.
``includeMetadata`` (a position and publish time per key) is not in a
checkpoint: such reads replay the topic as before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.connectors.spark_ranges import replay_changes
from pulsar_state.connectors.spark_rows import arrow_batches
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.map.checkpoint.format import Manifest
from pulsar_state.map.checkpoint.read import read_chunks, usable_manifest
from pulsar_state.map.pulsar_map import MapOp

__all__ = ["ChunkPartition", "TailPartition", "plan_from_checkpoint", "read_checkpoint_partition"]

log = logging.getLogger(__name__)


class ChunkPartition(InputPartition):
    """Chunks ``first``..``stop - 1`` of a checkpoint, minus the tail's keys."""

    def __init__(
        self,
        index: int,
        *,
        manifest: bytes,
        first: int,
        stop: int,
        overridden: tuple[str, ...],
        keys: tuple[str, ...] | None,
    ) -> None:
        super().__init__(index)
        self.manifest = manifest
        self.first = first
        self.stop = stop
        self.overridden = overridden
        self.keys = keys


class TailPartition(InputPartition):
    """The tail's final values (key, payload), read on the driver."""

    def __init__(self, index: int, rows: list[tuple[str, bytes]]) -> None:
        super().__init__(index)
        self.rows = rows


def plan_from_checkpoint(
    opts: SourceOptions, keys: tuple[str, ...] | None
) -> list[InputPartition] | None:
    """The snapshot's partitions from the newest usable checkpoint, or ``None``
    (no checkpoint, or one that does not belong to the topic: replay instead)."""
    if opts.include_metadata or not opts.use_checkpoint:
        return None
    client = opts.client()
    try:
        if not opts.has_checkpoints():
            return None
        found = usable_manifest(client, opts.topic, opts.timeout_ms)
        if found is None:
            return None
        manifest, _ = found
    except Exception as exc:  # a checkpoint is only a shortcut: replay the topic
        log.warning(
            "pulsar_state: not using the checkpoint of %s (%s: %s); replaying the topic",
            opts.topic,
            type(exc).__name__,
            exc,
        )
        return None
    finally:
        client.close()
    end = opts.last_position()  # frozen now, after the checkpoint's position
    wanted = set(keys) if keys is not None else None
    tail: dict[str, bytes | None] = {}

    def on_write(change: AppliedWrite[MapOp[str, Any]]) -> None:
        for op in change.ops:
            if wanted is None or op.key in wanted:
                tail[op.key] = None if op.is_delete else op.payload

    replay_changes(
        opts,
        compacted=False,  # raw: a compacted tail hides deletes
        start=manifest.position,
        start_epoch=manifest.epoch,
        end=end,
        on_write=on_write,
    )
    overridden = tuple(tail)
    chunks = len(manifest.chunks)
    groups = min(chunks, opts.num_partitions or max(2, os.cpu_count() or 1))
    bounds = [i * chunks // groups for i in range(groups + 1)] if groups else [0]
    encoded = manifest.to_json()
    partitions: list[InputPartition] = [
        ChunkPartition(
            i,
            manifest=encoded,
            first=bounds[i],
            stop=bounds[i + 1],
            overridden=overridden,
            keys=keys,
        )
        for i in range(groups)
    ]
    rows = [(k, v) for k, v in tail.items() if v is not None]
    partitions.append(TailPartition(len(partitions), rows))
    log.info(
        "pulsar_state: snapshot of %s from checkpoint %s (%d keys in %d chunks) plus a "
        "tail of %d keys",
        opts.topic,
        manifest.id,
        manifest.rows,
        chunks,
        len(tail),
    )
    return partitions


def read_checkpoint_partition(
    opts: SourceOptions, schema: StructType, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    """The rows of a :class:`ChunkPartition` or :class:`TailPartition`."""
    if isinstance(partition, TailPartition):
        columns: dict[str, list[Any]] = {
            "key": [k for k, _ in partition.rows],
            "value": [opts.value_of(v) for _, v in partition.rows],
        }
        yield from arrow_batches(opts, schema, columns)
        return
    assert isinstance(partition, ChunkPartition)
    manifest = Manifest.from_json(partition.manifest)
    drop = pa.array(partition.overridden, type=pa.string()) if partition.overridden else None
    keep_only = pa.array(partition.keys, type=pa.string()) if partition.keys is not None else None
    value_type = pa.binary() if opts.value_format == "binary" else pa.string()
    out_schema = pa.schema([pa.field("key", pa.string()), pa.field("value", value_type)])
    client = opts.client()
    try:
        for chunk in read_chunks(
            client, opts.topic, manifest, opts.timeout_ms, range(partition.first, partition.stop)
        ):
            table = chunk
            if drop is not None:
                table = table.filter(pc.invert(pc.is_in(table.column("key"), value_set=drop)))
            if keep_only is not None:
                table = table.filter(pc.is_in(table.column("key"), value_set=keep_only))
            if table.num_rows == 0:
                continue
            keys, values = _values_as(opts, manifest, table)
            yield from pa.Table.from_arrays([keys, values], schema=out_schema).to_batches()
    finally:
        client.close()


#: the reads whose values the writer's serde already guarantees valid: JSON is
#: UTF-8 text; a string serde wrote UTF-8
_TRUSTED = {
    "binary": ("binary", "json", "string", "custom"),
    "string": ("json", "string"),
    "json": ("json",),
}


def _values_as(opts: SourceOptions, manifest: Manifest, table: pa.Table) -> tuple[Any, Any]:
    """The key and value columns in the read's ``valueFormat``.

    When the writer's serde guarantees the format (``manifest.value_format``), a
    column-at-a-time cast; otherwise each value is decoded as the topic replay
    decodes it, and a row whose value does not decode is dropped and counted in
    the log (the replay skips such a write; a checkpoint keeps only final values).
    """
    keys, values = table.column("key"), table.column("value")
    if manifest.value_format in _TRUSTED[opts.value_format]:
        if opts.value_format != "binary":
            values = values.cast(pa.string())
        return keys, values
    serde = opts.codec().value_serde
    kept_keys: list[str] = []
    kept: list[str] = []
    dropped = 0
    for key, payload in zip(keys.to_pylist(), values.to_pylist(), strict=True):
        try:
            serde.deserialize(payload)
            text = payload.decode()
        except Exception:  # the topic replay counts and skips such a write
            dropped += 1
            continue
        kept_keys.append(key)
        kept.append(text)
    if dropped:
        log.warning(
            "pulsar_state: %d values in checkpoint %s of %s are not %s; their rows are left out",
            dropped,
            manifest.id,
            opts.topic,
            opts.value_format,
        )
    return pa.array(kept_keys, type=pa.string()), pa.array(kept, type=pa.string())
