"""Snapshots: bounded bootstrap for state whose ops compaction cannot shrink.

A keyed, last-value-wins topic (the map) is shrunk by Pulsar's compaction. A
generic state machine's ops (``+5``, ``append x``) are not: every one is kept.
For those, the manager that holds the topic writes a snapshot of its state
every ``every_writes`` applied writes to a companion topic
``<topic>-pss-snapshots`` (one key, compacted, protected like the state topic).
A starting manager reads the latest snapshot, seeks its tail to the snapshot's
position and replays only what came after: bootstrap reads the state once plus
the tail, however long the history is.

A snapshot is only a shortcut: one that is missing, unreadable or too large is
logged, counted and the manager replays the topic from the start instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pulsar

from pulsar_state import forks, metrics
from pulsar_state.position import Position
from pulsar_state.topic_names import snapshot_topic

__all__ = ["Snapshot", "SnapshotPolicy", "Snapshotter", "snapshot_topic"]

log = logging.getLogger(__name__)

S = TypeVar("S")

_KEY = "__pss__/snapshot"
_PROP_POSITION = "pss.snapshot.position"
_PROP_EPOCH = "pss.snapshot.epoch"
_PROP_INCARNATION = "pss.inc"


@dataclass(frozen=True, kw_only=True)
class SnapshotPolicy(Generic[S]):
    """How to snapshot a state: two functions and a cadence."""

    serialize: Callable[[S], bytes]
    deserialize: Callable[[bytes], S]
    every_writes: int = 1000

    def __post_init__(self) -> None:
        if not callable(self.serialize) or not callable(self.deserialize):
            raise TypeError("serialize and deserialize must be callables")
        if not isinstance(self.every_writes, int) or self.every_writes < 1:
            raise ValueError(f"every_writes must be >= 1, got {self.every_writes!r}")


@dataclass(frozen=True)
class Snapshot(Generic[S]):
    state: S
    position: Position
    epoch: int


class Snapshotter(Generic[S]):
    """Reads the latest snapshot at start; writes new ones while holding the topic."""

    def __init__(
        self, client: pulsar.Client, topic: str, policy: SnapshotPolicy[S], max_bytes: int
    ) -> None:
        self._client = client
        self.topic = snapshot_topic(topic)
        self._state_topic = topic
        self._policy = policy
        self._max_bytes = max_bytes
        self._producer: pulsar.Producer | None = None
        self.written = 0
        #: the tailer's applied writes when the last snapshot was taken
        self.taken_at = 0
        self._too_large_warned = False
        #: the state topic's incarnation (PulsarAdmin.incarnation): a snapshot
        #: of another one (the topic deleted and made again) is not loaded
        self.incarnation: str | None = None

    def load(self, timeout_ms: int = 10_000) -> Snapshot[S] | None:
        """The newest readable snapshot, or ``None`` (then replay from the start)."""
        try:
            reader = forks.keep_in_children(
                self._client.create_reader(
                    self.topic,
                    pulsar.MessageId.latest,
                    start_message_id_inclusive=True,
                    is_read_compacted=True,
                )
            )
        except pulsar.PulsarException as exc:
            log.warning("cannot read snapshots of %s (%s); replaying", self._state_topic, exc)
            return None
        try:
            if not reader.has_message_available():
                return None
            msg = reader.read_next(timeout_millis=timeout_ms)
            props = msg.properties()
            theirs = props.get(_PROP_INCARNATION)
            if theirs and self.incarnation and theirs != self.incarnation:
                metrics.INVALID_MESSAGES.labels(self._state_topic, "foreign_snapshot").inc()
                log.warning(
                    "ignoring the snapshot of %s: it was taken of an earlier topic of that "
                    "name (incarnation %s, the topic's is %s); replaying from the start",
                    self._state_topic,
                    theirs,
                    self.incarnation,
                )
                return None
            position = Position.parse(props[_PROP_POSITION])
            epoch = int(props.get(_PROP_EPOCH, "0"))
            state = self._policy.deserialize(msg.data())
        except Exception as exc:  # any bad snapshot: fall back to a full replay
            metrics.INVALID_MESSAGES.labels(self._state_topic, "bad_snapshot").inc()
            log.warning(
                "ignoring the snapshot of %s (%s: %s); replaying from the start",
                self._state_topic,
                type(exc).__name__,
                exc,
            )
            return None
        finally:
            reader.close()
        log.info("loaded the snapshot of %s at %s", self._state_topic, position)
        return Snapshot(state, position, epoch)

    def maybe_take(self, tailer: Any, *, every_writes: int) -> None:
        """The writer thread, after a publish: a snapshot when ``every_writes``
        writes were applied since the last one. The state is encoded under the
        state lock and published without it (publishing may make the producer,
        a blocking client call); a failure only costs a longer replay."""
        if tailer.applied_writes - self.taken_at < every_writes:
            return
        try:
            with tailer.lock:
                self.taken_at = tailer.applied_writes
                data = self.encode(tailer.state)
                position, epoch = tailer.applied, tailer.epoch
            self.publish(data, position, epoch)
        except Exception:  # an optimisation: never fail a write for it
            log.exception("snapshot of %s failed", self._state_topic)

    def encode(self, state: S) -> bytes:
        """The snapshot's bytes (call under the state lock: nothing else happens here)."""
        return self._policy.serialize(state)

    def publish(self, data: bytes, position: Position, epoch: int) -> None:
        """Publish encoded state (asynchronously; a failure only costs a longer
        replay). Makes the producer on first use, a blocking client call: never
        call it holding the state lock."""
        if len(data) > self._max_bytes:
            if not self._too_large_warned:
                log.warning(
                    "the state of %s serializes to %d bytes > max_write_bytes=%d: not "
                    "snapshotting it (bootstrap replays the topic)",
                    self._state_topic,
                    len(data),
                    self._max_bytes,
                )
                self._too_large_warned = True
            return
        try:
            if self._producer is None:
                self._producer = forks.keep_in_children(self._client.create_producer(self.topic))
            self._producer.send_async(
                data,
                self._sent,
                partition_key=_KEY,
                properties={
                    "pss": "1",
                    "pss.k": "snapshot",
                    _PROP_POSITION: str(position),
                    _PROP_EPOCH: str(epoch),
                    **({_PROP_INCARNATION: self.incarnation} if self.incarnation else {}),
                },
            )
        except pulsar.PulsarException as exc:
            log.warning("snapshot of %s not written: %s", self._state_topic, exc)

    def _sent(self, result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
        if result == pulsar.Result.Ok:
            self.written += 1
        else:
            log.warning("snapshot of %s not written: %s", self._state_topic, result)

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._producer.flush()
                self._producer.close()
            except pulsar.PulsarException:
                pass
            self._producer = None


def encode_json_state(state: object) -> bytes:
    """A ready-made serializer for JSON-able states."""
    return json.dumps(state, separators=(",", ":")).encode()
