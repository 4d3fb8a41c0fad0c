"""Reading a map's checkpoints: find the newest usable manifest, read its chunks.

Used by a starting map (through :class:`~pulsar_state.map.checkpoint.writer.MapCheckpointer`)
and by the Spark source's snapshots. A checkpoint is only a shortcut: one that
cannot be used is reported, and the reader replays the topic instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pulsar

from pulsar_state import forks, metrics
from pulsar_state.errors import (
    CheckpointError,
)
from pulsar_state.map.checkpoint.format import (
    CHUNK_KIND,
    MANIFEST_KIND,
    PROP_COVERS,
    PROP_ID,
    PROP_INDEX,
    PROP_PREVIOUS,
    Manifest,
    decode_chunk,
)
from pulsar_state.position import Position
from pulsar_state.serde import BytesSerde, KeySerde, Serde, StrKeySerde
from pulsar_state.topic_names import checkpoint_topic

__all__ = [
    "LoadedCheckpoint",
    "message_id",
    "report_bad",
    "tables_to_dict",
    "anchor_exists",
    "find_manifest",
    "newest_covered",
    "read_chunks",
    "usable_manifest",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A map read from a checkpoint: the state and what it covers
    (:class:`~pulsar_state.core.accelerator.Loaded`)."""

    state: dict[Any, Any]
    manifest: Manifest

    @property
    def position(self) -> Position:
        return self.manifest.position

    @property
    def epoch(self) -> int:
        return self.manifest.epoch

    @property
    def stale_keys(self) -> dict[str, Position]:
        return self.manifest.stale_keys


def message_id(position: Position) -> pulsar.MessageId:
    return pulsar.MessageId(-1, position.ledger, position.entry, -1)


def report_bad(state_topic: str, what: str) -> None:
    metrics.INVALID_MESSAGES.labels(state_topic, "bad_checkpoint").inc()
    log.warning("not using the checkpoint of %s: %s; replaying the topic", state_topic, what)


def _last_message(client: pulsar.Client, topic: str, timeout_ms: int) -> pulsar.Message | None:
    """The last message of ``topic``, or ``None`` (empty)."""
    reader = forks.keep_in_children(
        client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
    )
    try:
        if not reader.has_message_available():
            return None
        return reader.read_next(timeout_millis=timeout_ms)
    finally:
        reader.close()


def find_manifest(
    client: pulsar.Client, state_topic: str, timeout_ms: int
) -> tuple[Manifest, Position] | None:
    """The newest complete checkpoint's manifest and where it is, or ``None``.

    Raises:
        CheckpointError: if the checkpoint topic's last message is neither
            a manifest nor a chunk naming one.
        pulsar.PulsarException: what the client raises reading the topic.
    """
    topic = checkpoint_topic(state_topic)
    msg = _last_message(client, topic, timeout_ms)
    if msg is None:
        return None
    props = msg.properties()
    if props.get("pss.k") == MANIFEST_KIND:
        return Manifest.from_json(msg.data()), Position.from_message_id(msg.message_id())
    if props.get("pss.k") != CHUNK_KIND:
        raise CheckpointError(f"{topic} ends with a message of kind {props.get('pss.k')!r}")
    previous = props.get(PROP_PREVIOUS)
    if previous is None:  # the first checkpoint was cut short
        return None
    at = Position.parse(previous)
    reader = forks.keep_in_children(
        client.create_reader(topic, message_id(at), start_message_id_inclusive=True)
    )
    try:
        msg = reader.read_next(timeout_millis=timeout_ms)
    finally:
        reader.close()
    landed = Position.from_message_id(msg.message_id())
    if (landed.ledger, landed.entry) != (at.ledger, at.entry) or (
        msg.properties().get("pss.k") != MANIFEST_KIND
    ):
        raise CheckpointError(f"no manifest at {at} on {topic} (found {landed})")
    return Manifest.from_json(msg.data()), landed


def newest_covered(client: pulsar.Client, state_topic: str, timeout_ms: int) -> Position | None:
    """The state-topic position the newest checkpoint covers, written or being
    written (its chunks name it); ``None``: none, or its chunks do not say.

    Raises:
        pulsar.PulsarException: what the client raises reading the topic.
    """
    msg = _last_message(client, checkpoint_topic(state_topic), timeout_ms)
    if msg is None:
        return None
    props = msg.properties()
    if props.get("pss.k") == MANIFEST_KIND:
        return Manifest.from_json(msg.data()).position
    covers = props.get(PROP_COVERS)
    return Position.parse(covers) if covers else None


def anchor_exists(
    client: pulsar.Client, state_topic: str, position: Position, timeout_ms: int
) -> bool:
    """Whether the state topic has a message at ``position`` (the checkpoint
    belongs to this incarnation of the topic)."""
    if position.is_start:
        return True
    reader = forks.keep_in_children(
        client.create_reader(state_topic, message_id(position), start_message_id_inclusive=True)
    )
    try:
        if not reader.has_message_available():  # e.g. a re-created, still empty topic
            return False
        msg = reader.read_next(timeout_millis=timeout_ms)
    except pulsar.Timeout:
        return False
    finally:
        reader.close()
    landed = Position.from_message_id(msg.message_id())
    return (landed.ledger, landed.entry) == (position.ledger, position.entry)


def usable_manifest(
    client: pulsar.Client, state_topic: str, timeout_ms: int
) -> tuple[Manifest, Position] | None:
    """The newest complete manifest (:func:`find_manifest`) if it belongs to this
    incarnation of the state topic (:func:`anchor_exists`); ``None``: no checkpoint.

    Raises:
        CheckpointError: the newest checkpoint is not at a message of the topic
            (e.g. the topic was deleted and re-created), or as :func:`find_manifest`.
        pulsar.PulsarException: what the client raises reading either topic.
    """
    found = find_manifest(client, state_topic, timeout_ms)
    if found is not None and not anchor_exists(client, state_topic, found[0].position, timeout_ms):
        raise CheckpointError(
            f"the topic has no message at its position {found[0].position} (was the "
            "topic deleted and re-created?)"
        )
    return found


def read_chunks(
    client: pulsar.Client,
    state_topic: str,
    manifest: Manifest,
    timeout_ms: int,
    indices: range | None = None,
) -> Iterator[Any]:
    """The ``pyarrow.Table`` of each chunk in ``indices`` (default: all), in order.

    Raises:
        CheckpointError: a chunk is missing or undecodable.
        pulsar.Timeout: the topic stopped before the chunks.
    """
    wanted = indices if indices is not None else range(len(manifest.chunks))
    if not wanted:
        return
    topic = checkpoint_topic(state_topic)
    last = manifest.chunks[wanted[-1]]
    reader = forks.keep_in_children(
        client.create_reader(
            topic,
            message_id(manifest.chunks[wanted[0]]),
            start_message_id_inclusive=True,
            receiver_queue_size=16,
        )
    )
    try:
        expected = wanted[0]
        while expected <= wanted[-1]:
            msg = reader.read_next(timeout_millis=timeout_ms)
            props = msg.properties()
            landed = Position.from_message_id(msg.message_id())
            if props.get(PROP_ID) == manifest.id and props.get(PROP_INDEX) == str(expected):
                yield decode_chunk(msg.data())
                expected += 1
            elif (landed.ledger, landed.entry) >= (last.ledger, last.entry):
                raise CheckpointError(
                    f"chunk {expected} of checkpoint {manifest.id} is missing on {topic}"
                )
    finally:
        reader.close()


def tables_to_dict(
    tables: Iterator[Any], key_serde: KeySerde[Any], value_serde: Serde[Any]
) -> dict[Any, Any]:
    state: dict[Any, Any] = {}
    plain_keys = type(key_serde) is StrKeySerde
    plain_values = type(value_serde) is BytesSerde
    for table in tables:
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        if plain_keys and plain_values:
            state.update(zip(keys, values, strict=True))
            continue
        from_key = key_serde.from_key
        deserialize = value_serde.deserialize
        for key, value in zip(keys, values, strict=True):
            state[from_key(key)] = deserialize(value)
    return state
