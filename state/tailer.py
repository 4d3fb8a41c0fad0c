"""The tailer: the one path by which state changes.

It follows the state topic from the start (the compacted view first, then the
raw tail) and applies each write to the in-memory state under the state lock,
exactly once and in log order, a whole write at a time. The writer never
touches the state: its own writes come back through here, so there is no
double apply (a fault of the Java reference).

It reads through an exclusive, uniquely named subscription, because only a
consumer can ask the broker for the topic's last message id (what
``read(latest=True)`` waits for). The subscription is acknowledged as writes
are applied (its backlog *is* the lag) and removed on close; one left behind by
a crashed process is reaped by the next manager that starts on the topic.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

import pulsar

from pulsar_state import metrics
from pulsar_state.config import StateConfig
from pulsar_state.errors import (
    InvalidMessageError,
    OperationTimeoutError,
    PulsarStateError,
    StateClosedError,
)
from pulsar_state.op_codec import OpCodec
from pulsar_state.position import START, Position
from pulsar_state.topic_format import (
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

__all__ = ["AppliedWrite", "Tailer"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")

_RECENT_WRITES = 100_000
_ACK_EVERY_S = 1.0


class AppliedWrite(Generic[Op]):
    """What listeners get after each applied write."""

    __slots__ = ("compacted", "ops", "position", "write_id")

    def __init__(
        self, ops: Sequence[Op], position: Position, write_id: str | None, compacted: bool
    ) -> None:
        self.ops = ops
        self.position = position
        self.write_id = write_id
        self.compacted = compacted


class Tailer(Generic[S, Op]):
    """Follows the topic and applies writes; see the module docstring."""

    def __init__(
        self,
        *,
        client: pulsar.Client,
        topic: str,
        codec: OpCodec[Op],
        applier: Callable[[S, Op], Any],
        state: S,
        config: StateConfig,
        start: Position | None = None,
        start_epoch: int = 0,
    ) -> None:
        self.topic = topic
        self.state = state
        self._start = start
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self._codec = codec
        self._applier = applier
        self._config = config
        self.applied: Position = start or START
        self.epoch: int = start_epoch
        self.invalid_count = 0
        self.received = 0
        self.applied_writes = 0
        self.compacted_out = 0
        self.failure: PulsarStateError | None = None
        self._closed = False
        self._recent: OrderedDict[str, Position] = OrderedDict()
        self._rejected: OrderedDict[str, Position] = OrderedDict()
        #: keys a stale (fenced) write touched, with where: the writer repairs them
        self.stale_keys: dict[str, Position] = {}
        self.stale_writes = 0
        self._waiters: list[tuple[Position, int, Future[Position]]] = []
        self._seq = itertools.count()
        self._listeners: list[Callable[[AppliedWrite[Op]], None]] = []
        #: the writer's hook: (write ids, position, applied?) after each commit
        self.on_outcome: Callable[[tuple[str, ...], Position, bool], None] | None = None
        # the write being assembled from the current entry
        self._buf_ops: list[Op] = []
        self._buf_entry: tuple[int, int] | None = None
        self._buf_write: str | None = None
        self._buf_last: Position | None = None
        self._buf_bad: str | None = None
        self._buf_epoch = 0
        self._buf_keys: list[str] = []
        self._last_msg: pulsar.Message | None = None
        self._last_ack = time.monotonic()
        self._labels = (topic,)
        self.subscription = f"{config.subscription_prefix}{uuid.uuid4().hex[:16]}"
        self._consumer = client.subscribe(
            topic,
            self.subscription,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            is_read_compacted=config.read_compacted,
            receiver_queue_size=1000,
            properties={"pulsar-state-role": "tail"},
        )
        if start is not None:  # resume after a snapshot
            self._consumer.seek(pulsar.MessageId(-1, start.ledger, start.entry, start.batch))
        self._thread = threading.Thread(
            target=self._run, name=f"pss-tail-{topic.rsplit('/', 1)[-1]}", daemon=True
        )

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._fail_waiters(StateClosedError("the state manager is closed"))
        try:
            self._consumer.unsubscribe()
        except pulsar.PulsarException:
            log.debug("unsubscribe of %s failed", self.subscription, exc_info=True)
        with contextlib.suppress(pulsar.PulsarException):
            self._consumer.close()

    def add_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        self._listeners.remove(listener)

    # -- positions ------------------------------------------------------------

    def last_position(self) -> Position:
        """The topic's last message id, asked of the broker (one round trip)."""
        self._check_usable()
        try:
            return Position.from_message_id(self._consumer.get_last_message_id())
        except pulsar.PulsarException as exc:
            raise OperationTimeoutError(f"could not get the last message id: {exc}") from exc

    def write_position(self, write_id: str) -> Position | None:
        """Where a recent write was applied, if it was."""
        with self.lock:
            return self._recent.get(write_id)

    def was_rejected(self, write_id: str) -> bool:
        """Whether a recent write landed stale (after a newer writer's epoch)."""
        with self.lock:
            return write_id in self._rejected

    def repaired(self, keys: dict[str, Position], at: Position) -> None:
        """Forget stale keys that a repair written at ``at`` superseded."""
        with self.lock:
            for key, stale_at in keys.items():
                if self.stale_keys.get(key) == stale_at and stale_at < at:
                    del self.stale_keys[key]

    def wait_applied(self, target: Position, timeout_s: float) -> Position:
        """Block until local state includes ``target``; return the applied position."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self.applied.covers(target):
                self._check_usable()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise OperationTimeoutError(
                        f"state did not reach {target} within {timeout_s:.1f}s "
                        f"(applied {self.applied})"
                    )
                self._cond.wait(remaining)
            return self.applied

    def when_applied(self, target: Position) -> Future[Position]:
        """A future completing once local state includes ``target``."""
        fut: Future[Position] = Future()
        with self._cond:
            if self.applied.covers(target):
                fut.set_result(self.applied)
            elif self.failure is not None or self._closed:
                fut.set_exception(self.failure or StateClosedError("closed"))
            else:
                heapq.heappush(self._waiters, (target, next(self._seq), fut))
        return fut

    def last_position_async(self) -> Future[Position]:
        """:meth:`last_position` without a thread of ours waiting on it."""
        fut: Future[Position] = Future()
        self._check_usable()
        native = getattr(self._consumer, "_consumer", None)
        if native is None or not hasattr(native, "get_last_message_id_async"):
            try:
                fut.set_result(self.last_position())
            except PulsarStateError as exc:
                fut.set_exception(exc)
            return fut

        def done(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                fut.set_result(Position.from_message_id(msg_id))
            else:
                fut.set_exception(
                    OperationTimeoutError(f"could not get the last message id: {result}")
                )

        native.get_last_message_id_async(done)
        return fut

    def catch_up(self, timeout_s: float) -> Position:
        """Wait until every write acknowledged before this call is applied."""
        target = self.last_position()
        if target.ledger == self.applied.ledger:
            metrics.LAG_MESSAGES.labels(*self._labels).set(
                max(0, target.entry - self.applied.entry)
            )
        return self.wait_applied(target, timeout_s)

    def _check_usable(self) -> None:
        if self.failure is not None:
            raise self.failure
        if self._closed:
            raise StateClosedError("the state manager is closed")

    # -- the loop -------------------------------------------------------------

    def _run(self) -> None:
        while not self._closed:
            try:
                msg = self._consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                self._flush_buffer()
                self._maybe_ack(force=True)
                continue
            except pulsar.AlreadyClosed:
                break
            except pulsar.PulsarException:
                log.warning("receive on %s failed; retrying", self.topic, exc_info=True)
                time.sleep(0.1)
                continue
            try:
                self._handle(msg)
            except InvalidMessageError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # a bug: never die silently
                log.exception("tailer of %s stopped", self.topic)
                self._fail(PulsarStateError(f"tailer stopped: {exc!r}"))
                return
            self._last_msg = msg
            self._maybe_ack()

    def _maybe_ack(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._last_msg is None or (not force and now - self._last_ack < _ACK_EVERY_S):
            return
        try:
            self._consumer.acknowledge_cumulative(self._last_msg)
        except pulsar.PulsarException:
            log.debug("cumulative ack failed on %s", self.topic, exc_info=True)
        self._last_msg = None
        self._last_ack = now

    def _handle(self, msg: pulsar.Message) -> None:
        pos = Position.from_message_id(msg.message_id())
        if self._start is not None and not pos > self._start:
            return  # already in the snapshot
        entry = (pos.ledger, pos.entry)
        if self._buf_entry is not None and entry != self._buf_entry:
            self._flush_buffer()
        props = msg.properties()
        if not props and not msg.partition_key() and not msg.data():
            # A slot of a batch that compaction emptied: the C++ client hands
            # these out (the Java client skips messages marked compacted-out).
            self.compacted_out += 1
            self._advance(pos)
            return
        self.received += 1
        if props.get(PROP_FORMAT) != FORMAT_VERSION:
            self._flush_buffer()
            self._invalid("foreign", pos, f"message without {PROP_FORMAT}={FORMAT_VERSION}")
            self._advance(pos)
            return
        kind = props.get(PROP_KIND)
        write_id = props.get(PROP_WRITE)
        if kind == Kind.OP:
            if self._buf_entry is not None and write_id != self._buf_write:
                self._flush_buffer()  # compacted entries may hold several writes' ops
            if self._buf_entry is None:
                self._buf_entry, self._buf_write = entry, write_id
                self._buf_epoch = message_epoch(props)
            self._buf_last = pos
            self._buf_keys.append(msg.partition_key())
            try:
                self._buf_ops.append(self._codec.decode(msg.partition_key(), msg.data()))
            except Exception as exc:
                self._buf_bad = f"undecodable op ({type(exc).__name__}: {exc})"
        elif kind == Kind.COMMIT:
            try:
                commit = parse_commit(msg.data())
            except (ValueError, KeyError, TypeError) as exc:
                self._flush_buffer()
                self._invalid("bad_commit", pos, f"unreadable commit marker: {exc}")
                self._advance(pos)
                return
            if self._buf_entry is not None and commit.write_id != self._buf_write:
                self._flush_buffer()
            if self._buf_entry is None:  # all its ops were compacted away
                self._buf_epoch = commit.epoch
            self._apply_buffer(pos, commit.write_id, compacted=False, members=commit.members)
        elif kind == Kind.EPOCH:
            self._flush_buffer()
            with self._cond:
                self.epoch = max(self.epoch, epoch_of(pos.ledger, pos.entry))
            self._advance(pos)
        else:
            self._flush_buffer()
            self._invalid("unknown_kind", pos, f"unknown message kind {kind!r}")
            self._advance(pos)

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
        ops, bad, epoch, keys = self._buf_ops, self._buf_bad, self._buf_epoch, self._buf_keys
        self._buf_ops, self._buf_entry, self._buf_write = [], None, None
        self._buf_last, self._buf_bad, self._buf_epoch, self._buf_keys = None, None, 0, []
        applied_ops: list[Op] = []
        stale = True
        with self._cond:
            if epoch < self.epoch:
                # written by a writer that had already lost the topic: no reader
                # applies it; its writer sees that and re-runs it
                self.stale_writes += 1
                metrics.INVALID_MESSAGES.labels(self.topic, "stale_epoch").inc()
                log.info(
                    "skipped stale write %s at %s (epoch %s < %s)", write_id, pos, epoch, self.epoch
                )
                for member in members:
                    self._rejected[member] = pos
                    if len(self._rejected) > _RECENT_WRITES:
                        self._rejected.popitem(last=False)
                for key in keys:
                    if not key.startswith(RESERVED_PREFIX):
                        self.stale_keys[key] = pos
                self._advance_locked(pos)
            else:
                stale = False
        if stale:
            self._report(members, pos, applied=False)
            return
        with self._cond:
            if members and all(m in self._recent for m in members):
                # the same write landed twice (a retried publish): apply it once
                metrics.INVALID_MESSAGES.labels(self.topic, "duplicate").inc()
                log.info("skipped duplicate of write %s at %s", write_id, pos)
                self._advance_locked(pos)
                return
            if bad is not None:
                self._invalid("undecodable", pos, f"{bad}; the whole write is skipped")
            else:
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
                metrics.APPLIED_WRITES.labels(*self._labels).inc()
                metrics.APPLIED_OPS.labels(*self._labels).inc(len(applied_ops))
            for member in members:
                self._recent[member] = pos
                self._rejected.pop(member, None)
                if len(self._recent) > _RECENT_WRITES:
                    self._recent.popitem(last=False)
            self._advance_locked(pos)
        self._report(members, pos, applied=True)
        if applied_ops and self._listeners:
            change = AppliedWrite(applied_ops, pos, write_id, compacted)
            for listener in list(self._listeners):
                try:
                    listener(change)
                except Exception:
                    log.exception("state listener %r failed", listener)

    def _report(self, members: tuple[str, ...], pos: Position, *, applied: bool) -> None:
        """Tell the writer what became of its writes (applied, or stale: re-run)."""
        hook = self.on_outcome
        if members and hook is not None:
            try:
                hook(members, pos, applied)
            except Exception:
                log.exception("write outcome hook failed")

    def _advance(self, pos: Position) -> None:
        with self._cond:
            self._advance_locked(pos)

    def _advance_locked(self, pos: Position) -> None:
        self.applied = max(self.applied, pos)
        self._cond.notify_all()
        while self._waiters and self.applied.covers(self._waiters[0][0]):
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(self.applied)

    def _invalid(self, reason: str, pos: Position, detail: str) -> None:
        self.invalid_count += 1
        metrics.INVALID_MESSAGES.labels(self.topic, reason).inc()
        if self._config.on_invalid_message == "fail":
            raise InvalidMessageError(f"{self.topic}: {detail}", position=str(pos))
        log.warning("skipped a message on %s at %s: %s", self.topic, pos, detail)

    def _fail(self, exc: PulsarStateError) -> None:
        with self._cond:
            self.failure = exc
            self._cond.notify_all()
        self._fail_waiters(exc)

    def _fail_waiters(self, exc: PulsarStateError) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
