"""Columnar checkpoints of a map: bootstrap from the map, not from its history.

A compacted map topic still costs one message per key to read, decoded one at
a time. The manager that holds a map's topic therefore writes, every
``every_ops`` applied ops, the whole map as Arrow IPC chunks to the companion
topic ``<topic>-pss-checkpoints`` (format: :mod:`pulsar_state.map.checkpoint.format`).
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
:mod:`pulsar_state.core.log.format`) travel in the manifest.

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
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pulsar

from pulsar_state import forks
from pulsar_state.cluster.admin import PulsarAdmin, entries_compacted_after
from pulsar_state.config import StateConfig
from pulsar_state.core import futures
from pulsar_state.errors import (
    CheckpointError,
    ConfigurationError,
    PulsarStateError,
    TopicNotFoundError,
)
from pulsar_state.map.checkpoint.format import (
    Manifest,
    chunk_properties,
    encode_chunks,
    manifest_properties,
)
from pulsar_state.map.checkpoint.policy import CheckpointPolicy, arrow_available
from pulsar_state.map.checkpoint.read import (
    LoadedCheckpoint,
    find_manifest,
    message_id,
    newest_covered,
    read_chunks,
    report_bad,
    tables_to_dict,
    usable_manifest,
)
from pulsar_state.map.op import MapCodec
from pulsar_state.position import Position
from pulsar_state.serde import BytesSerde, JsonSerde, KeySerde, Serde, StrKeySerde, StrSerde
from pulsar_state.topic_names import checkpoint_topic

__all__ = ["KEEPER_SUBSCRIPTION", "MapCheckpointer", "checkpointer_factory"]

log = logging.getLogger(__name__)

KEEPER_SUBSCRIPTION = "pss-checkpoint-keeper"


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
            report_bad(self.state_topic, f"{type(exc).__name__}: {exc}")
            return None
        manifest, at = found
        if manifest.incarnation and self.incarnation and manifest.incarnation != self.incarnation:
            report_bad(
                self.state_topic,
                f"taken of an earlier topic of that name (incarnation {manifest.incarnation}, "
                f"the topic's is {self.incarnation})",
            )
            return None
        if self._compacted_past(manifest):
            return None
        try:
            state = tables_to_dict(
                read_chunks(self._client, self.state_topic, manifest, timeout_ms),
                self._key_serde,
                self._value_serde,
            )
        except Exception as exc:  # incl. what a user's serde raises on a bad value
            report_bad(self.state_topic, f"{type(exc).__name__}: {exc}")
            return None
        if len(state) != manifest.rows:
            report_bad(
                self.state_topic, f"{len(state)} keys read, its manifest says {manifest.rows}"
            )
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
                keeper.seek(message_id(seek_to))
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


def checkpointer_factory(
    client: pulsar.Client,
    config: StateConfig,
    codec: MapCodec[Any, Any],
    policy: CheckpointPolicy,
) -> Callable[[str, PulsarAdmin | None], MapCheckpointer]:
    """A map's ``checkpointer`` for its manager: makes the :class:`MapCheckpointer`
    once the manager knows the topic's full name and its admin client."""

    def make(state_topic: str, admin: PulsarAdmin | None) -> MapCheckpointer:
        return MapCheckpointer(
            client,
            state_topic,
            admin=admin,
            protect=config.ensure_retention,
            key_serde=codec.key_serde,
            value_serde=codec.value_serde,
            policy=policy,
            max_bytes=config.max_write_bytes,
            timeout_s=config.operation_timeout_s,
        )

    return make
