"""Replaying the state topic: the one decoder of the topic format.

:class:`LogReplay` turns the topic's messages, in order, into applied writes:
it groups an entry's ops with their commit marker, skips stale writes (older
epoch than the newest seen), duplicates, compacted-out batch slots, foreign and
undecodable messages, and applies the rest to a state through the applier. The
tailer (live state) and the Spark source (snapshots and changelogs) both use
it, so there is exactly one reading of the format.

Commit on acknowledgement: the live replay also takes the writer's own entries
straight from the writer, at the broker's ack (:meth:`LogReplay.apply_own`),
when its state stands exactly at the writer's previous entry (under PIP-68 no
other writer can append in between). Those entries are remembered and skipped
when the topic brings them back, so each write is applied once, in log order.

Completing writes: the writer registers each write it sends
(:meth:`LogReplay.expect`); whichever thread applies it (the tail, or the
writer at the ack) takes it off the register under the state lock and queues
its completion behind every earlier one, and the queue is run in order, outside
the state lock, by one thread at a time: futures complete and listeners hear
of writes in the order the writes landed. A write of the register that lands
stale is reported (:meth:`LogReplay.take_own_stale`). After the writer's new
epoch marker is applied, the writes still registered never landed
(:meth:`LogReplay.unlanded`).

Listeners: an *inline* listener runs under the state lock right after its
write is applied, on the applying thread (it must only hand the write over,
e.g. to a queue); the others run from the completion queue.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Literal, TypeVar

import pulsar

from pulsar_state import metrics
from pulsar_state.core.log.format import (
    FORMAT_VERSION,
    PROP_FORMAT,
    PROP_KIND,
    PROP_WRITE,
    RESERVED_PREFIX,
    Kind,
    epoch_of,
    message_epoch,
    parse_commit,
)
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.errors import InvalidMessageError, PulsarStateError
from pulsar_state.position import START, Position

__all__ = ["AppliedWrite", "LogReplay", "OwnEntry"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")

_RECENT_WRITES = 100_000


class AppliedWrite(Generic[Op]):
    """What listeners get after each applied write."""

    __slots__ = ("compacted", "ops", "position", "publish_ms", "write_id")

    def __init__(
        self,
        ops: Sequence[Op],
        position: Position,
        write_id: str | None,
        compacted: bool,
        publish_ms: int = 0,
    ) -> None:
        self.ops = ops
        self.position = position
        self.write_id = write_id
        self.compacted = compacted
        self.publish_ms = publish_ms


class OwnEntry(Generic[Op]):
    """The writer's own entry as :meth:`LogReplay.apply_own` takes it: the ops
    as every reader decodes them (by their message keys), the write's ids and
    epoch.

    Decoding is done once, by whichever thread asks first (two racing both
    compute the same pure result). ``None``: an op does not decode (the
    replay counts it when the entry arrives).
    """

    __slots__ = ("_decoded", "epoch", "members", "ops", "write_id")

    def __init__(
        self,
        ops: Sequence[tuple[str | None, bytes]],
        *,
        write_id: str,
        members: tuple[str, ...],
        epoch: int,
    ) -> None:
        self.ops = ops
        self.write_id = write_id
        self.members = members
        self.epoch = epoch
        self._decoded: list[Op] | Literal[False] | None = False

    def decode(self, codec: OpCodec[Op]) -> list[Op] | None:
        """The decoded ops, or ``None`` when one does not decode (computed once;
        two threads racing both compute the same pure result)."""
        decoded = self._decoded
        if decoded is False:
            try:
                decoded = [codec.decode(key or "", payload) for key, payload in self.ops]
            except Exception:
                decoded = None
            self._decoded = decoded
        return decoded


class LogReplay(Generic[S, Op]):
    """Applies the topic's messages to ``state``; feed them in order, then ``flush``."""

    def __init__(
        self,
        *,
        topic: str,
        codec: OpCodec[Op],
        applier: Callable[[S, Op], Any],
        state: S,
        on_invalid: Literal["skip", "fail"] = "skip",
        start: Position | None = None,
        start_epoch: int = 0,
    ) -> None:
        self.topic = topic
        self.state = state
        self.on_invalid = on_invalid
        self._start = start
        self._codec = codec
        self._applier = applier
        #: the state lock (reentrant): plain sections take it directly; ``_cond``
        #: (on the same lock) is for the sections that wait or notify
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self.applied: Position = start or START
        self.epoch: int = start_epoch
        self.invalid_count = 0
        self.received = 0
        self.applied_writes = 0
        #: ops applied since start (a checkpoint is due every so many)
        self.applied_ops = 0
        self.compacted_out = 0
        #: messages skipped because they came again (at or before the last one)
        self.redelivered = 0
        #: the position of the last message taken: the topic's order is strict
        self._last_received: Position | None = None
        #: write id -> (ledger, entry, batch) of recent writes. Plain tuples of
        #: ints, which the garbage collector stops tracking: 100k tracked
        #: Position objects made every full collection (and so every write
        #: under load) markedly slower
        self._recent: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        #: keys a stale (fenced) write touched, with where: the writer repairs them
        self.stale_keys: dict[str, Position] = {}
        self.stale_writes = 0
        self._listeners: list[Callable[[AppliedWrite[Op]], None]] = []
        self._inline_listeners: list[Callable[[AppliedWrite[Op]], None]] = []
        #: the writer's register: write id -> what to call once it is applied
        self._expected: dict[str, Callable[[Position], None]] = {}
        #: a registered write landed stale since the writer last asked
        self._own_stale = False
        #: called (outside the lock, any applying thread) when a write lands
        #: stale or a key is touched by an invalid message: the writer wakes
        self.on_stale: Callable[[], None] | None = None
        #: what stopped the replay (``on_invalid_message="fail"``, a bug), and the
        #: hook then called (on the stopping thread): the writer stops too
        self.failure: PulsarStateError | None = None
        self.on_stopped: Callable[[], None] | None = None
        # the write being assembled from the current entry
        #: the payloads of the entry's ops (decoded only when applied: an entry
        #: the writer applied at its ack is never decoded here)
        self._buf_payloads: list[bytes] = []
        self._buf_entry: tuple[int, int] | None = None
        self._buf_write: str | None = None
        self._buf_last: Position | None = None
        self._buf_epoch = 0
        self._buf_keys: list[str] = []
        self._buf_last_msg: pulsar.Message | None = None
        #: entries (ledger, entry) applied at their ack (apply_own), oldest first:
        #: skipped when the topic brings them back, forgotten once passed
        self._own_entries: set[tuple[int, int]] = set()
        self._own_order: deque[tuple[int, int]] = deque()
        #: completions and listener deliveries in log order, whichever thread
        #: applied the write: (on_landed, position) or (None, AppliedWrite)
        self._deliveries: deque[tuple[Any, Any]] = deque()
        self._delivering = threading.Lock()
        self._m_applied_writes = metrics.APPLIED_WRITES.labels(topic)
        self._m_applied_ops = metrics.APPLIED_OPS.labels(topic)

    def add_listener(
        self, listener: Callable[[AppliedWrite[Op]], None], *, inline: bool = False
    ) -> None:
        """Call ``listener`` after each applied write, in log order; ``inline``:
        under the state lock, on the applying thread (see the module docstring)."""
        (self._inline_listeners if inline else self._listeners).append(listener)

    def remove_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        """Raises ValueError when ``listener`` was not added."""
        if listener in self._inline_listeners:
            self._inline_listeners.remove(listener)
        else:
            self._listeners.remove(listener)

    # -- the writer's register ---------------------------------------------------

    def expect(self, writes: Iterable[tuple[str, Callable[[Position], None]]]) -> None:
        """Register the writes of an entry about to be sent, as ``(write_id,
        on_landed)``: ``on_landed(position)`` runs once the write is applied, in
        landing order, outside the state lock."""
        with self.lock:
            self._expected.update(writes)

    def expecting(self, write_id: str) -> bool:
        """Whether ``write_id`` is registered and not applied (a racy look, no lock)."""
        return write_id in self._expected

    def unlanded(self, write_ids: Iterable[str]) -> set[str]:
        """Of ``write_ids``, those still registered, now taken off the register:
        called once the writer's new epoch marker is applied, they never landed
        (or landed stale) and may run again."""
        with self.lock:
            out = {w for w in write_ids if w in self._expected}
            for write_id in out:
                del self._expected[write_id]
        return out

    def take_own_stale(self) -> bool:
        """Whether a registered write landed stale since the last call."""
        with self.lock:
            stale, self._own_stale = self._own_stale, False
        return stale

    def _call_hook(self, hook: Callable[[], None] | None, what: str) -> None:
        """Tell the writer (``on_stale``, ``on_stopped``); its error never stops the replay."""
        if hook is not None:
            try:
                hook()
            except Exception:
                log.exception("%s hook of %s failed", what, self.topic)

    def feed(self, msg: pulsar.Message) -> Position:
        """Take the next message of the topic; its position."""
        return self._handle(msg)

    def flush(self) -> None:
        """No message follows for now: apply what compaction left without a marker."""
        self._flush_buffer()

    def _advanced(self) -> None:
        """Hook, under the lock, after ``applied`` moved."""

    def _advance_locked(self, pos: Position) -> None:
        self.applied = max(self.applied, pos)
        self._advanced()

    def _handle(self, msg: pulsar.Message) -> Position:
        pos = Position.from_message_id(msg.message_id())
        if self._start is not None and not pos > self._start:
            return pos  # already in the snapshot
        last = self._last_received
        if last is not None and not pos > last:
            # delivered again: a consumer that reconnects gets the topic again
            # from its last acknowledgement (the compacted ledger included, and
            # a batch entry from its first message): applying it again would
            # double an op or bring back an older value
            self.redelivered += 1
            return pos
        self._last_received = pos
        entry = (pos.ledger, pos.entry)
        if self._own_order and self._passed_own(entry, pos):
            return pos
        if self._buf_entry is not None and entry != self._buf_entry:
            self._flush_buffer()
        props = msg.properties()
        if not props and not msg.partition_key() and not msg.data():
            # A slot of a batch that compaction emptied: the C++ client hands
            # these out (the Java client skips messages marked compacted-out).
            self.compacted_out += 1
            self._advance(pos)
            return pos
        self.received += 1
        if props.get(PROP_FORMAT) != FORMAT_VERSION:
            self._flush_buffer()
            self._invalid("foreign", pos, f"message without {PROP_FORMAT}={FORMAT_VERSION}")
            self._touched_by_invalid([msg.partition_key()], pos)
            self._advance(pos)
            self._call_hook(self.on_stale, "stale")
            return pos
        kind = props.get(PROP_KIND)
        write_id = props.get(PROP_WRITE)
        if kind == Kind.OP:
            if self._buf_entry is not None and write_id != self._buf_write:
                self._flush_buffer()  # compacted entries may hold several writes' ops
            self._buffer_op(msg, pos, entry, write_id, props)
        elif kind == Kind.WRITE:  # a whole single-op write
            self._flush_buffer()
            self._buffer_op(msg, pos, entry, write_id, props)
            members = (write_id,) if write_id else ()
            self._apply_buffer(pos, write_id, compacted=False, members=members)
        elif kind == Kind.COMMIT:
            try:
                commit = parse_commit(msg.data())
            except (ValueError, KeyError, TypeError) as exc:
                self._flush_buffer()
                self._invalid("bad_commit", pos, f"unreadable commit marker: {exc}")
                self._advance(pos)
                return pos
            if self._buf_entry is not None and commit.write_id != self._buf_write:
                self._flush_buffer()
            if self._buf_entry is None:  # all its ops were compacted away
                self._buf_epoch = commit.epoch
            self._buf_last_msg = msg
            self._apply_buffer(pos, commit.write_id, compacted=False, members=commit.members)
        elif kind == Kind.EPOCH:
            self._flush_buffer()
            with self.lock:
                self.epoch = max(self.epoch, epoch_of(pos.ledger, pos.entry))
            self._advance(pos)
        else:
            self._flush_buffer()
            self._invalid("unknown_kind", pos, f"unknown message kind {kind!r}")
            self._advance(pos)
        return pos

    def _buffer_op(
        self,
        msg: pulsar.Message,
        pos: Position,
        entry: tuple[int, int],
        write_id: str | None,
        props: dict[str, str],
    ) -> None:
        if self._buf_entry is None:
            self._buf_entry, self._buf_write = entry, write_id
            self._buf_epoch = message_epoch(props)
        self._buf_last = pos
        self._buf_last_msg = msg  # its publish time, if compaction took the marker
        key = msg.partition_key()
        self._buf_keys.append(key)
        self._buf_payloads.append(msg.data())

    def _flush_buffer(self) -> None:
        """Apply ops whose commit marker compaction removed (or a foreign batch's)."""
        if self._buf_entry is None or self._buf_last is None:
            return
        self._apply_buffer(self._buf_last, self._buf_write, compacted=True)

    def _apply_buffer(
        self,
        pos: Position,
        write_id: str | None,
        *,
        compacted: bool,
        members: tuple[str, ...] = (),
    ) -> None:
        payloads, epoch, keys = self._buf_payloads, self._buf_epoch, self._buf_keys
        last_msg, self._buf_last_msg = self._buf_last_msg, None
        publish_ms = last_msg.publish_timestamp() if last_msg is not None else 0
        self._buf_payloads, self._buf_entry, self._buf_write = [], None, None
        self._buf_last, self._buf_epoch, self._buf_keys = None, 0, []
        applied_ops: list[Op] = []
        if epoch >= epoch_of(pos.ledger, pos.entry):
            # no epoch marker can have made this epoch: a marker precedes every
            # write of its writer, so a legitimate write's epoch is below its own
            # position. Taking it would make every later legitimate write stale.
            self._invalid(
                "forged_epoch",
                pos,
                f"write {write_id} claims epoch {epoch}, beyond its own position; skipped",
            )
            self._touched_by_invalid(keys, pos)
            with self.lock:
                self._note_stale_locked(members)
                self._advance_locked(pos)
            self._call_hook(self.on_stale, "stale")
            return
        stale = True
        with self.lock:
            if (pos.ledger, pos.entry) in self._own_entries:
                return  # applied at its ack while its messages were on the way
            if epoch < self.epoch:
                # written by a writer that had already lost the topic: no reader
                # applies it; its writer sees that and re-runs it
                self.stale_writes += 1
                metrics.INVALID_MESSAGES.labels(self.topic, "stale_epoch").inc()
                log.info(
                    "skipped stale write %s at %s (epoch %s < %s)", write_id, pos, epoch, self.epoch
                )
                for key in keys:
                    if not key.startswith(RESERVED_PREFIX):
                        self.stale_keys[key] = pos
                self._note_stale_locked(members)
                self._advance_locked(pos)
            else:
                stale = False
        if stale:
            self._call_hook(self.on_stale, "stale")
            return
        ops, bad = self._decode(keys, payloads)
        with self.lock:
            if (pos.ledger, pos.entry) in self._own_entries:
                return  # applied at its ack meanwhile
            if members and all(m in self._recent for m in members):
                # the same write landed twice (a retried publish): apply it once
                metrics.INVALID_MESSAGES.labels(self.topic, "duplicate").inc()
                log.info("skipped duplicate of write %s at %s", write_id, pos)
                self._advance_locked(pos)
                return
            if bad is not None:
                self._invalid("undecodable", pos, f"{bad}; the whole write is skipped")
                self._touched_by_invalid(keys, pos)
            else:
                applied_ops = self._apply_locked(ops, pos, write_id, epoch)
                if self.stale_keys:  # a later write of a key supersedes its stale one
                    for key in keys:
                        stale_at = self.stale_keys.get(key)
                        if stale_at is not None and stale_at < pos:
                            del self.stale_keys[key]
            self._record_locked(members, pos)
            if applied_ops:
                self._announce_locked(
                    AppliedWrite(applied_ops, pos, write_id, compacted, publish_ms)
                )
        if bad is not None:
            self._call_hook(self.on_stale, "stale")
        self._deliver()

    def _decode(self, keys: list[str], payloads: list[bytes]) -> tuple[list[Op], str | None]:
        """An entry's ops, and why they do not decode (``None``: they do)."""
        codec = self._codec
        ops: list[Op] = []
        for key, payload in zip(keys, payloads, strict=True):
            try:
                ops.append(codec.decode(key, payload))
            except Exception as exc:
                return [], f"undecodable op ({type(exc).__name__}: {exc})"
        return ops, None

    def _apply_locked(
        self, ops: Sequence[Op], pos: Position, write_id: str | None, epoch: int
    ) -> list[Op]:
        """Apply one write's ops (under the lock); the ops that applied."""
        applied_ops: list[Op] = []
        self.epoch = max(self.epoch, epoch)
        try:
            for op in ops:
                self._applier(self.state, op)
                applied_ops.append(op)
        except Exception as exc:
            log.exception("applying write %s at %s failed", write_id, pos)
            self._invalid(
                "apply_failed",
                pos,
                f"the applier raised {type(exc).__name__}: {exc} after "
                f"{len(applied_ops)} of {len(ops)} ops",
            )
        self.applied_writes += 1
        self.applied_ops += len(applied_ops)
        self._m_applied_writes.inc()
        self._m_applied_ops.inc(len(applied_ops))
        return applied_ops

    def _record_locked(self, members: tuple[str, ...], pos: Position) -> None:
        expected = self._expected
        for member in members:
            self._recent[member] = (pos.ledger, pos.entry, pos.batch)
            if len(self._recent) > _RECENT_WRITES:
                self._recent.popitem(last=False)
            on_landed = expected.pop(member, None)
            if on_landed is not None:
                self._deliveries.append((on_landed, pos))
        self._advance_locked(pos)

    def _note_stale_locked(self, members: tuple[str, ...]) -> None:
        """Under the lock: a write that landed stale; the writer's, if registered."""
        if any(member in self._expected for member in members):
            self._own_stale = True

    def _announce_locked(self, change: AppliedWrite[Op]) -> None:
        """Under the lock: tell the inline listeners now, queue the others."""
        for listener in self._inline_listeners:
            try:
                listener(change)
            except Exception:
                log.exception("inline state listener %r failed", listener)
        if self._listeners:
            self._deliveries.append((None, change))

    def _deliver(self) -> None:
        """Run queued completions and listener deliveries, one at a time, in log
        order (outside the state lock; whichever applying thread comes)."""
        while self._deliveries:
            with self._delivering:
                try:
                    on_landed, item = self._deliveries.popleft()
                except IndexError:
                    return
                if on_landed is not None:
                    try:
                        on_landed(item)
                    except Exception:
                        log.exception("completing a write of %s failed", self.topic)
                    continue
                for listener in list(self._listeners):
                    try:
                        listener(item)
                    except Exception:
                        log.exception("state listener %r failed", listener)

    # -- commit on acknowledgement ---------------------------------------------

    def apply_own(self, own: OwnEntry[Op], pos: Position, *, after: Position) -> bool:
        """Apply the writer's own entry, acknowledged at ``pos``, before it comes by.

        Only when ``pos`` is the entry right after ``after`` (the writer's
        previous entry or its epoch marker, same ledger) and the state stands
        exactly at ``after``: then nothing else lies in between, whatever the
        broker did. ``False`` (nothing done; the replay applies or skips the
        entry when it arrives, as for any write) when another entry may lie in
        between, the state is elsewhere, the write was applied already (a
        retried publish), its epoch is stale, or an op does not decode.
        """
        entry = (pos.ledger, pos.entry)
        if (after.ledger, after.entry + 1) != entry:
            # another entry lies in between (another writer's epoch marker: in
            # fencing mode Pulsar 4.0.8 was seen acknowledging a fenced
            # producer's send after its successor's marker), or the ledger
            # rolled over: only the replay can tell
            return False
        decoded = own.decode(self._codec)
        if decoded is None:  # the replay counts it when the entry arrives
            return False
        write_id, members, epoch = own.write_id, own.members, own.epoch
        with self.lock:
            applied = self.applied
            if (
                not applied.covers(after)
                or (applied.ledger, applied.entry) >= entry
                or epoch < self.epoch
                or (members and all(m in self._recent for m in members))
            ):
                return False
            self._own_entries.add(entry)
            self._own_order.append(entry)
            applied_ops = self._apply_locked(decoded, pos, write_id, epoch)
            self._record_locked(members, pos)
            if applied_ops:
                self._announce_locked(AppliedWrite(applied_ops, pos, write_id, False))
        self._deliver()
        return True

    def _passed_own(self, entry: tuple[int, int], pos: Position) -> bool:
        """Whether ``pos`` is in an entry applied at its ack (then it is skipped);
        forgets the own entries the replay has gone past."""
        with self.lock:
            order = self._own_order
            while order and order[0] < entry:
                self._own_entries.discard(order.popleft())
            if entry not in self._own_entries:
                return False
            if self._buf_entry == entry:  # its first messages came before the ack
                self._buf_payloads, self._buf_entry, self._buf_write = [], None, None
                self._buf_last, self._buf_epoch, self._buf_keys = None, 0, []
                self._buf_last_msg = None
            self.received += 1
            return True

    def _advance(self, pos: Position) -> None:
        with self.lock:
            self._advance_locked(pos)

    def _touched_by_invalid(self, keys: Iterable[str | None], pos: Position) -> None:
        """A skipped message under a user key would be the key's last value after
        compaction: mark the key so that the writer re-asserts its real value."""
        with self.lock:
            for key in keys:
                if key and not key.startswith(RESERVED_PREFIX):
                    self.stale_keys[key] = pos

    def _invalid(self, reason: str, pos: Position, detail: str) -> None:
        self.invalid_count += 1
        metrics.INVALID_MESSAGES.labels(self.topic, reason).inc()
        if self.on_invalid == "fail":
            raise InvalidMessageError(f"{self.topic}: {detail}", position=str(pos))
        log.warning("skipped a message on %s at %s: %s", self.topic, pos, detail)
