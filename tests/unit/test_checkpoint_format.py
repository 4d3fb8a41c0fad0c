"""The checkpoint wire format (pure): chunks, manifests, the policy's checks."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pulsar_state import CheckpointError, CheckpointPolicy, ConfigurationError
from pulsar_state.map.checkpoint.format import Manifest, decode_chunk, encode_chunks
from pulsar_state.position import Position


def _rows(n: int, size: int = 10) -> list[tuple[str, bytes]]:
    return [(f"key-{i}", bytes([i % 256]) * size) for i in range(n)]


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_chunks_round_trip_in_order(compression: str | None) -> None:
    rows = _rows(5000)
    chunks = list(encode_chunks(iter(rows), chunk_bytes=8 * 1024, compression=compression))
    assert len(chunks) > 5
    assert sum(n for _, n in chunks) == len(rows)
    decoded: list[tuple[str, bytes]] = []
    for payload, n in chunks:
        table = decode_chunk(payload)
        assert table.num_rows == n
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        decoded += zip(keys, values, strict=True)
    assert decoded == rows


def test_a_chunk_holds_at_most_chunk_bytes_unless_one_row_is_larger() -> None:
    rows = [("small", b"x" * 100)] * 30 + [("big", b"y" * 10_000)] + [("small2", b"z" * 100)]
    chunks = list(encode_chunks(iter(rows), chunk_bytes=1024, compression=None))
    sizes = []
    for payload, _ in chunks:
        table = decode_chunk(payload)
        sizes.append(
            sum(
                len(k) + len(v) + 8
                for k, v in zip(
                    table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
                )
            )
        )
        keys = table.column("key").to_pylist()
        if "big" in keys:
            assert keys == ["big"]  # alone
    assert all(size <= 1024 for size in sizes if size < 10_000)
    assert sum(n for _, n in chunks) == len(rows)


def test_no_rows_no_chunks() -> None:
    assert list(encode_chunks(iter([]), chunk_bytes=1024, compression=None)) == []


def test_undecodable_chunks_are_checkpoint_errors() -> None:
    with pytest.raises(CheckpointError, match="not a checkpoint chunk"):
        decode_chunk(b"garbage")
    other = pa.schema([("a", pa.int64())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, other) as writer:
        writer.write_batch(pa.record_batch([pa.array([1])], schema=other))
    with pytest.raises(CheckpointError, match="schema"):
        decode_chunk(bytes(sink.getvalue()))


def test_manifest_round_trip() -> None:
    manifest = Manifest(
        id="abc",
        position=Position(7, 8, 2),
        epoch=42,
        rows=3,
        chunks=(Position(9, 0), Position(9, 1)),
        stale_keys={"k": Position(7, 1, 0)},
        taken_ms=123,
    )
    assert Manifest.from_json(manifest.to_json()) == manifest


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "not a checkpoint manifest"),
        (json.dumps({"format": 2}).encode(), "format 2"),
        (
            json.dumps(
                {"format": 1, "id": "x", "position": "1:2:3", "epoch": 0, "rows": 5, "chunks": []}
            ).encode(),
            "5 rows in 0 chunks",
        ),
        (
            json.dumps(
                {"format": 1, "id": "x", "position": "nope", "epoch": 0, "rows": 0, "chunks": []}
            ).encode(),
            "not a position token",
        ),
    ],
)
def test_bad_manifests_are_checkpoint_errors(raw: bytes, why: str) -> None:
    with pytest.raises(CheckpointError, match=why):
        Manifest.from_json(raw)


def test_policy_checks() -> None:
    with pytest.raises(ConfigurationError, match="every_ops"):
        CheckpointPolicy(every_ops=0)
    with pytest.raises(ConfigurationError, match="chunk_bytes"):
        CheckpointPolicy(chunk_bytes=10)
    with pytest.raises(ConfigurationError, match="compression"):
        CheckpointPolicy(compression="snappy")
    with pytest.raises(ConfigurationError, match="min_keys"):
        CheckpointPolicy(min_keys=-1)
    assert CheckpointPolicy().compression == "lz4"


def test_chunks_are_sized_in_bytes_not_characters() -> None:
    """Keys of 3-byte characters: sized by characters, a chunk came out ~2x over."""
    rows = [("字" * 100 + str(i), b"v") for i in range(200)]
    for payload, _ in encode_chunks(iter(rows), chunk_bytes=4096, compression=None):
        table = decode_chunk(payload)
        size = sum(
            len(k.encode()) + len(v) + 8
            for k, v in zip(
                table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
            )
        )
        assert size <= 4096


def test_a_chunk_whose_values_are_not_binary_is_refused() -> None:
    schema = pa.schema([("key", pa.string()), ("value", pa.string())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.record_batch([pa.array(["k"]), pa.array(["v"])], schema=schema))
    with pytest.raises(CheckpointError, match="schema"):
        decode_chunk(bytes(sink.getvalue()))
