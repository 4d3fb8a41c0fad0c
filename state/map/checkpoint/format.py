"""The wire format of a map's columnar checkpoints (version 1).

A checkpoint is the whole map at one position of its state topic, written to
the companion topic ``<topic>-pss-checkpoints`` as consecutive messages::

    checkpoint := chunk* manifest
    chunk    : payload = one Arrow IPC stream (columns ``key`` utf8, ``value``
               binary: the topic's message key and payload of each entry),
               properties {"pss": "1", "pss.k": "checkpoint-chunk",
               "pss.cp": <checkpoint id>, "pss.cp.i": <index>,
               "pss.cp.prev": <position of the previous manifest>,
               "pss.cp.at": <the state-topic position it covers>}
    manifest : payload = JSON (:class:`Manifest`), properties {"pss": "1",
               "pss.k": "checkpoint", "pss.cp": <checkpoint id>}

A checkpoint is complete once its manifest is written; the manifest names the
state-topic position it covers and where each chunk landed, so readers seek
straight to them (the Spark source reads chunks in parallel tasks). A chunk is
self-contained: any task can decode it alone. A writer that dies between its
chunks and its manifest leaves chunks that name the manifest before them
(``pss.cp.prev``), which is where a reader goes back to.

This module is pure (bytes in, bytes out); :mod:`pulsar_state.map.checkpoint.writer`
writes and reads checkpoints on Pulsar.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pulsar_state.errors import CheckpointError
from pulsar_state.position import Position

__all__ = [
    "CHUNK_KIND",
    "MANIFEST_KIND",
    "PROP_COVERS",
    "Manifest",
    "chunk_properties",
    "decode_chunk",
    "encode_chunks",
    "manifest_properties",
]

FORMAT = 1
CHUNK_KIND = "checkpoint-chunk"
MANIFEST_KIND = "checkpoint"
PROP_ID = "pss.cp"
PROP_INDEX = "pss.cp.i"
PROP_PREVIOUS = "pss.cp.prev"
#: on a chunk: the state-topic position its checkpoint covers (so a holder that
#: comes due sees a newer checkpoint being written, not only a written one)
PROP_COVERS = "pss.cp.at"

#: per-row overhead of the Arrow columns (two offsets), for sizing chunks
_ROW_OVERHEAD = 8


def _arrow() -> Any:
    try:
        import pyarrow as pa  # noqa: PLC0415 - optional: checkpoints need the extra
        import pyarrow.ipc  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - depends on the install
        from pulsar_state.errors import ConfigurationError  # noqa: PLC0415

        raise ConfigurationError(
            "checkpoints need pyarrow: pip install 'pulsar-shared-state[checkpoints]'"
        ) from exc
    return pa


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a complete checkpoint covers and where its chunks are."""

    #: unique per checkpoint; every chunk carries it
    id: str
    #: the state topic's position the map is taken at (the tail starts after it)
    position: Position
    #: the newest writer epoch seen at ``position``
    epoch: int
    #: number of entries (keys) in the map
    rows: int
    #: where each chunk landed on the checkpoint topic, in order
    chunks: tuple[Position, ...]
    #: keys a stale (fenced) write touched and where, not yet repaired
    stale_keys: dict[str, Position] = field(default_factory=dict)
    #: wall-clock milliseconds when the map was taken
    taken_ms: int = 0
    #: how the writer serialized values: ``json``, ``string``, ``binary`` (its
    #: serde guarantees valid JSON, UTF-8, any bytes) or ``custom``
    value_format: str = "custom"
    #: the state topic's incarnation it was taken of (``""``: not known)
    incarnation: str = ""

    def to_json(self) -> bytes:
        """The manifest's payload.

        Returns:
            Compact JSON bytes (:meth:`from_json` reads them back).
        """
        return json.dumps(
            {
                "format": FORMAT,
                "id": self.id,
                "position": str(self.position),
                "epoch": self.epoch,
                "rows": self.rows,
                "chunks": [str(c) for c in self.chunks],
                "stale_keys": {k: str(v) for k, v in self.stale_keys.items()},
                "taken_ms": self.taken_ms,
                "value_format": self.value_format,
                **({"incarnation": self.incarnation} if self.incarnation else {}),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Parse a manifest.

        Returns:
            The manifest.

        Raises:
            CheckpointError: for anything that is not a version-1 manifest
                (a ``ValueError`` found parsing it is wrapped in one).
        """
        try:
            raw = json.loads(data)
            if raw.get("format") != FORMAT:
                raise ValueError(f"format {raw.get('format')!r}, this library reads {FORMAT}")
            rows = int(raw["rows"])
            chunks = tuple(Position.parse(c) for c in raw["chunks"])
            if rows < 0 or (rows > 0 and not chunks):
                raise ValueError(f"{rows} rows in {len(chunks)} chunks")
            return cls(
                id=str(raw["id"]),
                position=Position.parse(raw["position"]),
                epoch=int(raw["epoch"]),
                rows=rows,
                chunks=chunks,
                stale_keys={
                    str(k): Position.parse(v) for k, v in dict(raw.get("stale_keys", {})).items()
                },
                taken_ms=int(raw.get("taken_ms", 0)),
                value_format=str(raw.get("value_format", "custom")),
                incarnation=str(raw.get("incarnation", "")),
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # -> CheckpointError
            raise CheckpointError(f"not a checkpoint manifest: {exc}") from exc


def manifest_properties(checkpoint_id: str) -> dict[str, str]:
    return {"pss": "1", "pss.k": MANIFEST_KIND, PROP_ID: checkpoint_id}


def chunk_properties(
    checkpoint_id: str, index: int, previous: Position | None, covers: Position | None = None
) -> dict[str, str]:
    props = {"pss": "1", "pss.k": CHUNK_KIND, PROP_ID: checkpoint_id, PROP_INDEX: str(index)}
    if previous is not None:
        props[PROP_PREVIOUS] = str(previous)
    if covers is not None:
        props[PROP_COVERS] = str(covers)
    return props


def encode_chunks(
    rows: Iterable[tuple[str, bytes]], *, chunk_bytes: int, compression: str | None
) -> Iterator[tuple[bytes, int]]:
    """Arrow IPC streams of at most ~``chunk_bytes`` of keys and values each
    (a single larger row gets a chunk of its own); yields (payload, rows)."""
    pa = _arrow()
    schema = pa.schema([("key", pa.string()), ("value", pa.binary())])
    options = pa.ipc.IpcWriteOptions(compression=compression)
    keys: list[str] = []
    values: list[bytes] = []
    size = 0

    def encode() -> bytes:
        batch = pa.record_batch(
            [pa.array(keys, type=pa.string()), pa.array(values, type=pa.binary())], schema=schema
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema, options=options) as writer:
            writer.write_batch(batch)
        return bytes(sink.getvalue())

    for key, value in rows:
        row = len(key.encode()) + len(value) + _ROW_OVERHEAD  # bytes, not characters
        if keys and size + row > chunk_bytes:
            yield encode(), len(keys)
            keys, values, size = [], [], 0
        keys.append(key)
        values.append(value)
        size += row
    if keys:
        yield encode(), len(keys)


def decode_chunk(payload: bytes) -> Any:
    """The ``pyarrow.Table`` (``key``, ``value``) of one chunk.

    Raises:
        CheckpointError: for a payload that is not such an Arrow stream.
    """
    pa = _arrow()
    try:
        table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    except pa.ArrowException as exc:
        raise CheckpointError(f"not a checkpoint chunk: {exc}") from exc
    if (
        table.schema.names != ["key", "value"]
        or not pa.types.is_string(table.schema.field("key").type)
        or not pa.types.is_binary(table.schema.field("value").type)
    ):
        raise CheckpointError(f"a checkpoint chunk with schema {table.schema}")
    return table
