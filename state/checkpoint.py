"""Columnar checkpoints of a map: bootstrap from the map, not from its history.

A compacted map topic still costs one message per key to read, decoded one at
a time. The manager that holds a map's topic therefore writes, every
``every_ops`` applied ops, the whole map as Arrow IPC chunks to the companion
topic ``<topic>-pss-checkpoints`` (format: :mod:`pulsar_state.checkpoint_format`).
A starting map reads the newest complete checkpoint, then the state topic's raw
tail after the checkpoint's position: that is the state. The map topic itself is
unchanged (compaction, ``TableView`` and the Spark source read it as before).

Correctness. A checkpoint is the map exactly as applied through its position
(taken under the state lock), so "checkpoint + every write after it" equals a
replay of the whole topic. The tail is read *raw*, never from the compacted view:
compaction drops a deleted key's history entirely, so a compacted tail could not
show a delete that happened after the checkpoint. Before trusting a checkpoint
the reader checks that the state topic still has a message at its position (a
deleted and re-created topic has not). Unrepaired stale keys (see
:mod:`pulsar_state.topic_format`) travel in the manifest.

A checkpoint is only a shortcut: one that is missing, incomplete, unreadable or
does not match the topic is logged, counted (``pulsar_state_invalid_messages``,
reason ``bad_checkpoint``) and the map replays the topic instead.

Retention. The checkpoint topic keeps a durable subscription,
``pss-checkpoint-keeper``, positioned at the newest complete checkpoint: with
the topic's own retention at zero (set when the map protects its topics), Pulsar
trims older checkpoints a ledger at a time, and keeps the newest.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pulsar

from pulsar_state import forks, futures, metrics
from pulsar_state.admin import PulsarAdmin, entries_compacted_after
from pulsar_state.checkpoint_format import (
    CHUNK_KIND,
    MANIFEST_KIND,
    PROP_COVERS,
    PROP_ID,
    PROP_INDEX,
    PROP_PREVIOUS,
    Manifest,
    chunk_properties,
    decode_chunk,
    encode_chunks,
    manifest_properties,
)
from pulsar_state.errors import (
    CheckpointError,
    ConfigurationError,
    PulsarStateError,
    TopicNotFoundError,
)
from pulsar_state.position import Position
from pulsar_state.serde import BytesSerde, JsonSerde, KeySerde, Serde, StrKeySerde, StrSerde
from pulsar_state.topic_names import checkpoint_topic

__all__ = [
    "KEEPER_SUBSCRIPTION",
    "CheckpointPolicy",
    "LoadedCheckpoint",
    "MapCheckpointer",
    "anchor_exists",
    "arrow_available",
    "find_manifest",
    "read_chunks",
    "usable_manifest",
]

log = logging.getLogger(__name__)

KEEPER_SUBSCRIPTION = "pss-checkpoint-keeper"
_COMPRESSIONS = (None, "lz4", "zstd")


def arrow_available() -> bool:
    """Whether pyarrow is installed here (checkpoints need it).

    Found, not imported: importing it costs about half a second and tens of
    MB, which a process pays only once it reads or writes a checkpoint. A
    broken install then makes a bad checkpoint (replayed, counted) or a failed
    one (logged), never a failed write.
    """
    return importlib.util.find_spec("pyarrow") is not None


@dataclass(frozen=True, kw_only=True)
class CheckpointPolicy:
    """When and how a map's holder writes checkpoints.

    Attributes:
        every_ops: write one once this many ops were applied since the last
            (the longest tail a bootstrap then replays).
        chunk_bytes: keys and values per chunk (one message each); at most
            the map's ``max_write_bytes``.
        compression: Arrow IPC buffer compression: ``"lz4"``, ``"zstd"`` or
            ``None``.
        min_keys: maps smaller than this are not checkpointed (their topic
            is read fast anyway).
        min_interval_s: at least this long between two automatic checkpoints
            (or after a failed one), whatever the ops: a checkpoint costs
            serializing the whole map.
    """

    every_ops: int = 100_000
    chunk_bytes: int = 2 * 1024 * 1024
    compression: str | None = "lz4"
    min_keys: int = 1000
    min_interval_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.every_ops, int) or self.every_ops < 1:
            raise ConfigurationError(f"every_ops must be an int >= 1, got {self.every_ops!r}")
        if not isinstance(self.chunk_bytes, int) or self.chunk_bytes < 1024:
            raise ConfigurationError(
                f"chunk_bytes must be an int >= 1024, got {self.chunk_bytes!r}"
            )
        if self.compression not in _COMPRESSIONS:
            raise ConfigurationError(
                f"compression must be one of {_COMPRESSIONS}, got {self.compression!r}"
            )
        if not isinstance(self.min_keys, int) or self.min_keys < 0:
            raise ConfigurationError(f"min_keys must be an int >= 0, got {self.min_keys!r}")
        if not isinstance(self.min_interval_s, int | float) or self.min_interval_s < 0:
            raise ConfigurationError(
                f"min_interval_s must be a number >= 0, got {self.min_interval_s!r}"
            )


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


def _message_id(position: Position) -> pulsar.MessageId:
    return pulsar.MessageId(-1, position.ledger, position.entry, -1)


def _bad(state_topic: str, what: str) -> None:
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
        client.create_reader(topic, _message_id(at), start_message_id_inclusive=True)
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
        client.create_reader(state_topic, _message_id(position), start_message_id_inclusive=True)
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
            _message_id(manifest.chunks[wanted[0]]),
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


def _tables_to_dict(
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


class MapCheckpointer:
    """Writes and reads one map's checkpoints; see the module docstring."""

    def __init__(
        self,
        client: pulsar.Client,
        state_topic: str,
        *,
        key_serde: KeySerde[Any],
        value_serde: Serde[Any],
        policy: CheckpointPolicy,
        max_bytes: int,
        timeout_s: float,
        admin: PulsarAdmin | None = None,
        protect: bool = False,
    ) -> None:
        if policy.chunk_bytes > max_bytes:
            raise ConfigurationError(
                f"chunk_bytes={policy.chunk_bytes} is over max_write_bytes={max_bytes}"
            )
        if not arrow_available():
            raise ConfigurationError(
                "checkpoints need pyarrow: pip install 'pulsar-shared-state[checkpoints]' "
                "(or open the map with checkpoints=False)"
            )
        self._client = client
        #: with an admin client, a map with no checkpoint topic skips reading it
        #: (a reader would create it), and ``protect`` sets its zero retention
        self._admin = admin
        self._protect = protect
        self.state_topic = state_topic
        self.topic = checkpoint_topic(state_topic)
        self.policy = policy
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._timeout_s = timeout_s
        #: the state topic's incarnation (PulsarAdmin.incarnation): a checkpoint
        #: of another one (the topic deleted and made again) is not loaded
        self.incarnation: str | None = None
        self._lock = threading.Lock()
        self._producer: pulsar.Producer | None = None
        self._running: Future[Manifest | None] | None = None
        self._closed = False
        #: where the newest complete manifest known here is (chunks point back to it)
        self._previous: Position | None = None
        #: the applied-ops count at the last checkpoint written (or found) here
        self.taken_at_ops = 0
        #: the state position that count runs from: where this process
        #: bootstrapped, or the newest checkpoint it wrote or found since
        self._counted_from: Position | None = None
        #: automatic checkpoints not written: another holder's was newer
        self.skipped = 0
        #: checkpoints not loaded: the compacted topic was closer (_compacted_past)
        self.passed_over = 0
        #: ``every_ops`` plus up to a tenth more, drawn once per process: holders
        #: that count the same ops from the same start (started together) would
        #: otherwise come due at the same op, and each write one
        self._due_every = policy.every_ops + random.randrange(policy.every_ops // 10 + 1)
        #: when the last automatic attempt started (monotonic), ok or not
        self._attempted_at = -float("inf")
        self.written = 0
        self.last: Manifest | None = None

    # -- reading --------------------------------------------------------------

    def load(self) -> LoadedCheckpoint | None:
        """The map from the newest usable checkpoint, or ``None`` (replay instead)."""
        timeout_ms = int(self._timeout_s * 1000)
        if self._admin is not None:
            try:
                self._admin.require_topic(self.topic)
            except TopicNotFoundError:
                return None  # no checkpoint yet
            except PulsarStateError as exc:
                log.debug("could not look up %s (%s); reading it", self.topic, exc)
        try:
            found = usable_manifest(self._client, self.state_topic, timeout_ms)
            if found is None:
                return None
        except pulsar.TopicNotFound:  # no checkpoint yet (and no topic auto-creation)
            return None
        except (pulsar.AuthorizationError, pulsar.AuthenticationError) as exc:
            log.info("not permitted to read the checkpoints of %s (%s)", self.state_topic, exc)
            return None
        except Exception as exc:  # a checkpoint is only a shortcut: replay instead
            _bad(self.state_topic, f"{type(exc).__name__}: {exc}")
            return None
        manifest, at = found
        if manifest.incarnation and self.incarnation and manifest.incarnation != self.incarnation:
            _bad(
                self.state_topic,
                f"taken of an earlier topic of that name (incarnation {manifest.incarnation}, "
                f"the topic's is {self.incarnation})",
            )
            return None
        if self._compacted_past(manifest):
            return None
        try:
            state = _tables_to_dict(
                read_chunks(self._client, self.state_topic, manifest, timeout_ms),
                self._key_serde,
                self._value_serde,
            )
        except Exception as exc:  # incl. what a user's serde raises on a bad value
            _bad(self.state_topic, f"{type(exc).__name__}: {exc}")
            return None
        if len(state) != manifest.rows:
            _bad(self.state_topic, f"{len(state)} keys read, its manifest says {manifest.rows}")
            return None
        self._previous = at
        self.last = manifest
        log.info(
            "loaded checkpoint %s of %s: %d keys at %s",
            manifest.id,
            self.state_topic,
            manifest.rows,
            manifest.position,
        )
        return LoadedCheckpoint(state, manifest)

    def _compacted_past(self, manifest: Manifest) -> bool:
        """Whether replaying the compacted topic reads less than ``manifest``
        plus its raw tail: compaction has absorbed more entries since the
        checkpoint than the map has keys (a checkpoint nobody refreshes: its
        holders run without pyarrow or with ``checkpoints=False``). The raw
        tail costs a message each, the compacted view about one per key, the
        checkpoint a tenth of that. Needs the admin API; without it, or if it
        refuses, the checkpoint is used."""
        if self._admin is None:
            return False
        try:
            stats = self._admin.internal_stats(self.state_topic)
            absorbed = entries_compacted_after(stats, manifest.position)
        except Exception as exc:  # refused, unreachable, unexpected: use the checkpoint
            log.debug("no internal stats of %s (%s): using its checkpoint", self.state_topic, exc)
            return False
        if absorbed <= max(manifest.rows, self.policy.min_keys):
            return False
        log.info(
            "checkpoint %s of %s passed over: compaction absorbed %d entries after it, "
            "more than its %d keys; replaying the compacted topic",
            manifest.id,
            self.state_topic,
            absorbed,
            manifest.rows,
        )
        self.passed_over += 1
        return True

    # -- writing --------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.running is not None

    def due(self, applied_ops: int, state: dict[Any, Any]) -> bool:
        """Whether the holder should take a checkpoint now (cheap: no lock needed)."""
        return (
            not self._closed
            and not self.busy
            and len(state) >= self.policy.min_keys
            and applied_ops - self.taken_at_ops >= self._due_every
            and time.monotonic() - self._attempted_at >= self.policy.min_interval_s
        )

    def take(
        self,
        state: dict[Any, Any],
        position: Position,
        epoch: int,
        stale_keys: dict[str, Position],
        applied_ops: int,
        *,
        automatic: bool = False,
    ) -> Future[Manifest | None]:
        """Checkpoint ``state`` as applied through ``position``; call under the state lock.

        Only a shallow copy is made here (values are never changed in place);
        serializing and publishing run on a thread of their own. At most one
        checkpoint runs at a time: the caller checks :attr:`busy` first (a
        busy checkpointer raises). An ``automatic`` one completes with ``None``,
        not written, when another holder wrote or is writing a newer one.
        """
        with self._lock:
            if self._running is not None and not self._running.done():
                raise CheckpointError("a checkpoint is already being written")
            result: Future[Manifest | None] = Future()
            if self._closed:
                futures.set_exception(result, CheckpointError("the checkpointer is closed"))
                return result
            self._running = result
            self._attempted_at = time.monotonic()

        def written(done: Future[Manifest | None]) -> None:
            if done.exception() is None:
                self.taken_at_ops = max(self.taken_at_ops, applied_ops)

        result.add_done_callback(written)
        result.add_done_callback(self._log_failure)
        items = dict(state)
        stale = dict(stale_keys)
        taken_ms = int(time.time() * 1000)
        thread = threading.Thread(
            target=futures.run_into,
            args=(
                result,
                lambda: self._write(items, position, epoch, stale, taken_ms, automatic=automatic),
            ),
            name=f"pss-checkpoint-{self.state_topic.rsplit('/', 1)[-1]}",
            daemon=True,
        )
        thread.start()
        return result

    def _log_failure(self, done: Future[Manifest | None]) -> None:
        exc = done.exception()
        if exc is not None:  # a shortcut: never fatal, the next one may succeed
            log.warning("checkpoint of %s failed: %s", self.state_topic, exc)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def running(self) -> Future[Manifest | None] | None:
        """The checkpoint being written, if any."""
        running = self._running
        return running if running is not None and not running.done() else None

    def _value_format(self) -> str:
        kind = type(self._value_serde)
        return {JsonSerde: "json", StrSerde: "string", BytesSerde: "binary"}.get(kind, "custom")

    def _ensure_producer(self) -> pulsar.Producer:
        if self._closed:
            raise CheckpointError("the map closed during its checkpoint")
        if self._producer is None:
            if self._admin is not None and self._protect:
                # zero retention: only the keeper subscription's backlog is kept
                self._admin.ensure_topic(self.topic)
                self._admin.protect(self.topic, backlog_only=True)
            # the keeper subscription exists before the first chunk: with zero
            # retention, only a subscription's backlog keeps the checkpoint
            self._keeper(seek_to=None)
            producer = forks.keep_in_children(
                self._client.create_producer(
                    self.topic,
                    batching_enabled=False,
                    send_timeout_millis=int(self._timeout_s * 1000),
                    block_if_queue_full=True,
                    max_pending_messages=8,  # at most ~8 chunks' bytes in flight
                )
            )
            with self._lock:
                if self.closed:  # closed meanwhile: close() did not see this one
                    with contextlib.suppress(pulsar.PulsarException):
                        producer.close()
                    raise CheckpointError("the map closed during its checkpoint")
                self._producer = producer
        return self._producer

    def _write(
        self,
        items: dict[Any, Any],
        position: Position,
        epoch: int,
        stale: dict[str, Position],
        taken_ms: int,
        *,
        automatic: bool,
    ) -> Manifest | None:
        started = time.monotonic()
        if automatic and self._newer_elsewhere():
            return None
        checkpoint_id = uuid.uuid4().hex
        producer = self._ensure_producer()
        self._refresh_previous()
        to_key = self._key_serde.to_key
        serialize = self._value_serde.serialize
        rows: Iterator[tuple[str, bytes]] = (
            iter(items.items())
            if type(self._key_serde) is StrKeySerde and type(self._value_serde) is BytesSerde
            else ((to_key(k), serialize(v)) for k, v in items.items())
        )
        acks: list[Future[Position]] = []
        count = 0
        for index, (payload, n) in enumerate(
            encode_chunks(
                rows, chunk_bytes=self.policy.chunk_bytes, compression=self.policy.compression
            )
        ):
            if self._closed:
                raise CheckpointError("the map closed during its checkpoint")
            acks.append(
                self._send(
                    producer,
                    payload,
                    chunk_properties(checkpoint_id, index, self._previous, position),
                )
            )
            count += n
        deadline = time.monotonic() + self._timeout_s * 2
        chunks = tuple(ack.result(max(0.1, deadline - time.monotonic())) for ack in acks)
        manifest = Manifest(
            id=checkpoint_id,
            position=position,
            epoch=epoch,
            rows=count,
            chunks=chunks,
            stale_keys=stale,
            taken_ms=taken_ms,
            value_format=self._value_format(),
            incarnation=self.incarnation or "",
        )
        if self._closed:
            raise CheckpointError("the map closed during its checkpoint")
        landed = self._publish_manifest(producer, manifest)
        self._previous = landed
        self.counting_from(position)
        self.keep_newest(chunks[0] if chunks else landed)
        self.written += 1
        self.last = manifest
        log.info(
            "checkpoint %s of %s: %d keys at %s in %d chunks, %.2fs",
            checkpoint_id,
            self.state_topic,
            count,
            position,
            len(chunks),
            time.monotonic() - started,
        )
        return manifest

    def _newer_elsewhere(self) -> bool:
        """Whether another holder wrote, or is writing, a checkpoint newer than
        where this process's count of applied ops began (then that one serves).

        Processes that take turns as the holder all apply every op, so all
        come due. The count then runs from the one found: the next is due
        ``every_ops`` from now, at most twice the cadence after it.
        """
        counted_from = self._counted_from
        if counted_from is None:
            return False
        try:
            covered = newest_covered(self._client, self.state_topic, int(self._timeout_s * 1000))
        except Exception as exc:  # then write one: a checkpoint too many is harmless
            log.debug("could not read the newest checkpoint of %s: %s", self.state_topic, exc)
            return False
        if covered is None or not covered > counted_from:
            return False
        self._counted_from = covered
        self.skipped += 1
        log.info(
            "checkpoint of %s not written: another holder's covers %s, newer than this "
            "process's count",
            self.state_topic,
            covered,
        )
        return True

    def counting_from(self, position: Position) -> None:
        """The applied-ops count runs from ``position`` (bootstrap's end, or a
        checkpoint of it): a newer checkpoint found when due serves instead."""
        if self._counted_from is None or position > self._counted_from:
            self._counted_from = position

    def _refresh_previous(self) -> None:
        """Point this checkpoint's chunks at the newest complete manifest, whoever
        wrote it (another holder may have since this process last looked)."""
        try:
            found = find_manifest(self._client, self.state_topic, int(self._timeout_s * 1000))
        except Exception as exc:  # keep what this process knows
            log.debug("could not read the newest manifest of %s: %s", self.state_topic, exc)
            return
        if found is not None:
            self._previous = found[1]

    def _publish_manifest(self, producer: pulsar.Producer, manifest: Manifest) -> Position:
        """Send the manifest: the checkpoint is complete once it has landed."""
        return Position.from_message_id(
            producer.send(manifest.to_json(), properties=manifest_properties(manifest.id))
        )

    @staticmethod
    def _send(
        producer: pulsar.Producer, payload: bytes, properties: dict[str, str]
    ) -> Future[Position]:
        ack: Future[Position] = Future()

        def sent(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                futures.set_result(ack, Position.from_message_id(msg_id))
            else:
                futures.set_exception(
                    ack, CheckpointError(f"checkpoint chunk not written: {result}")
                )

        producer.send_async(payload, sent, properties=properties)
        return ack

    def _keeper(self, *, seek_to: Position | None) -> None:
        """Make the keeper subscription (from the earliest message) if it is not
        there; with ``seek_to``, move it there: what lies before may be trimmed."""
        keeper = forks.keep_in_children(
            self._client.subscribe(
                self.topic,
                KEEPER_SUBSCRIPTION,
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=1,
            )
        )
        try:
            if seek_to is not None:
                keeper.seek(_message_id(seek_to))
        finally:
            keeper.close()

    def keep_newest(self, own_first: Position) -> None:
        """Move the keeper subscription to the first chunk of the newest complete
        checkpoint, which readers use: it may be another holder's, written
        meanwhile, whose chunks lie before this process's (``own_first``, used
        when the topic cannot be read). A failure only keeps older ones longer."""
        first = own_first
        try:
            found = find_manifest(self._client, self.state_topic, int(self._timeout_s * 1000))
        except Exception as exc:
            log.debug("could not read the newest manifest of %s: %s", self.state_topic, exc)
            found = None
        if found is not None:
            manifest, landed = found
            first = min(manifest.chunks) if manifest.chunks else landed
        try:
            self._keeper(seek_to=first)
        except pulsar.PulsarException as exc:
            log.warning("could not move the checkpoint keeper of %s: %s", self.state_topic, exc)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop: a checkpoint being written is abandoned (its chunks stay unused)."""
        with self._lock:
            self._closed = True
            running = self._running
        if running is not None:
            with contextlib.suppress(Exception):
                running.result(timeout_s)
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(pulsar.PulsarException):
                producer.close()
