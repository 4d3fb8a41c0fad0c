"""The writer: the only publisher to the state topic, through an exclusive producer.

One thread takes write requests in order. For each it makes sure it holds the
topic (PIP-68), runs the request's generator against the caught-up state,
publishes the resulting ops as one entry, and hands the request's future to the
tailer, which completes it once the write is applied locally (read-your-writes).

Gaining the topic (:mod:`~pulsar_state.topic_holder`): create the exclusive
producer, append an epoch marker, wait until the tailer has applied it. From
then on nothing of an earlier writer can land, so the local state is the
latest, and the marker's position is this writer's fencing epoch. A write's
messages go out as one entry (:mod:`~pulsar_state.entry_sender`).

Losing the topic: a publish that fails (fenced by a newer writer, broker gone,
timed out) closes the producer; the affected requests are re-queued in order.
After the topic is gained again and the state caught up, a request whose write
did land after all (a timeout that was a success) is recognised by its write id
and completed without running again; the others re-run their generators on the
new state, as PIP-137 promises ("may be executed multiple times, until the
operation succeeds").

Blind writes (their generator ignores the state: ``put``, ``delete``) that are
queued together go out in one entry: group commit.

The direct path: a blind write submitted while the writer has nothing else to
do (nothing queued or to retry, the topic held, not fenced) is published by
the submitting thread itself, without waiting (``send_async`` and
``flush_async``), and completed by the acknowledgement's callback, which
applies it as :meth:`Writer._commit_on_ack` does. That spares the two thread
hand-offs of the queue (to the writer thread and back), which made up about a
third of a synchronous put's latency. Who may act as the writer is decided by
one lock, the *turn*: the writer thread holds it while it works, a direct
write from before its send until its acknowledgement has been handled. So the
direct path changes no ordering: a write queued earlier (by any thread) is
published before a later direct one, and while a direct write is in flight the
next writes queue up for the thread and share an entry. Any failure is left to
the writer thread, which recovers as for its own sends.

The acknowledgement's callback holds the GIL on the client's IO thread while
the caller waits for it, so everything it does is latency: the entry is
flushed with no Python callback (the entry's own ack reports), and the caller,
once the entry is handed over, decodes it for the callback and asks whether
housekeeping is due while the entry travels.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pulsar

from pulsar_state import forks, futures, metrics
from pulsar_state.config import StateConfig
from pulsar_state.entry_sender import (
    Acks,
    PublishFailedError,
    entry_size,
    send_entry,
    send_entry_async,
)
from pulsar_state.errors import (
    FencedError,
    OperationTimeoutError,
    PermissionDeniedError,
    PulsarStateError,
    StateClosedError,
    TooManyOpsError,
    ValueTooLargeError,
    WriteFailedError,
)
from pulsar_state.op_codec import OpCodec
from pulsar_state.position import Position
from pulsar_state.replay import OwnEntry
from pulsar_state.snapshot import Snapshotter
from pulsar_state.tailer import Tailer
from pulsar_state.topic_format import (
    PROP_WRITE,
    OutgoingMessage,
    check_op_key,
    commit_message,
    op_messages,
    write_message,
)
from pulsar_state.topic_holder import TopicHolder
from pulsar_state.write_request import WriteRequest

__all__ = ["Writer"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")

#: wakes the writer thread without a request (e.g. a stale write was seen)
_WAKE = object()

#: direct writes between two housekeeping rounds of the writer thread
#: (snapshots, checkpoints, repairs: never run on the client's IO thread)
_HOUSEKEEPING_EVERY = 256


def _stale() -> FencedError:
    return FencedError("a write landed stale: another writer holds the topic")


class _CatchUpFailedError(Exception):
    """The writer could not catch up before running a generator (e.g. a restart)."""

    def __init__(self, cause: OperationTimeoutError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True)
class _DirectWrite(Generic[S, Op]):
    """A direct write in flight: what its acknowledgement needs to apply it."""

    request: WriteRequest[S, Op]
    #: the entry as the ack's callback applies it
    own: OwnEntry[Op]
    #: the writer's entry before it (applied when it was sent)
    previous: Position


class Writer(Generic[S, Op]):
    """See the module docstring."""

    def __init__(
        self,
        *,
        client: pulsar.Client,
        topic: str,
        tailer: Tailer[S, Op],
        codec: OpCodec[Op],
        config: StateConfig,
        compactable: bool = False,
        snapshotter: Snapshotter[S] | None = None,
        snapshot_every: int = 0,
        after_publish: Callable[[], None] | None = None,
        after_publish_due: Callable[[], bool] | None = None,
        waiting_writers: Callable[..., int] | None = None,
    ) -> None:
        self._snapshotter = snapshotter
        #: called on the writer thread after publishing, while holding the
        #: topic (checkpoints)
        self._after_publish = after_publish
        #: whether ``after_publish`` has work now (cheap, called on any thread)
        self._after_publish_due = after_publish_due
        self._snapshot_every = snapshot_every
        self._snapshot_at = tailer.applied_writes
        self._compactable = compactable
        self._topic = topic
        self._tailer = tailer
        self._codec = codec
        self._config = config
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._retry: collections.deque[WriteRequest[S, Op]] = collections.deque()
        #: published, not yet applied: the tailer completes them (see _on_outcome)
        self._pending: dict[str, WriteRequest[S, Op]] = {}
        #: published groups, oldest first, until all their writes are done
        self._inflight: collections.deque[list[WriteRequest[S, Op]]] = collections.deque()
        #: set by the tailer when one of our writes landed stale
        self._fenced = threading.Event()
        self._resubmit: list[WriteRequest[S, Op]] = []
        tailer.on_outcome = self._on_outcome
        self._last_sent: Position | None = None
        self._closed = False
        self.writer_id = uuid.uuid4().hex[:12]
        self._holder = TopicHolder(
            client=client,
            topic=topic,
            tailer=tailer,
            config=config,
            writer_id=self.writer_id,
            compactable=compactable,
            waiting_writers=waiting_writers,
        )
        self._labels = (topic,)
        self._m_writes = metrics.WRITES.labels(topic)
        self._m_write_seconds = metrics.WRITE_SECONDS.labels(topic)
        self._m_committed_on_ack = metrics.COMMITTED_ON_ACK.labels(topic)
        self._m_direct = metrics.DIRECT_WRITES.labels(topic)
        #: who acts as the writer: the writer thread, or a direct write in flight
        self._turn = threading.Lock()
        #: requests put on the queue that the writer thread has not taken up yet
        self._queued = 0
        self._queued_lock = threading.Lock()
        #: a direct write's publish failed: the writer thread lets the producer go
        self._send_failed: BaseException | None = None
        self._direct_since_housekeeping = 0
        self._completions: concurrent.futures.ThreadPoolExecutor | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"pss-writer-{topic.rsplit('/', 1)[-1]}", daemon=True
        )
        self._thread.start()

    @property
    def epoch(self) -> int | None:
        """The fencing epoch while this writer holds the topic, else ``None``."""
        return self._holder.epoch

    def submit(self, generator: Callable[[S], Any], *, blind: bool = False) -> Future[Position]:
        if self._closed:
            raise StateClosedError("the state manager is closed")
        request: WriteRequest[S, Op] = WriteRequest(generator, blind)
        config = self._config
        if (
            blind
            and config.commit_on_ack
            and config.direct_writes
            and self._turn.acquire(blocking=False)
        ):
            try:
                direct = self._send_direct(request)
            except BaseException:
                self._turn.release()
                raise
            if direct:
                return request.future
            self._turn.release()
        with self._queued_lock:
            self._queued += 1
        self._queue.put(request)
        return request.future

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=self._config.operation_timeout_s)
        # a direct write in flight holds the turn until its ack is handled
        turn = self._turn.acquire(timeout=self._config.send_timeout_s + 5)
        self._holder.release()
        if turn:
            self._turn.release()
        if self._completions is not None:  # completes what it was given, then ends
            self._completions.shutdown(wait=False)
        if self._snapshotter is not None:
            self._snapshotter.close()
        while True:  # anything still queued fails
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                break
            if request is not None and request is not _WAKE:
                futures.set_exception(
                    request.future, StateClosedError("the state manager is closed")
                )
        leftovers = [*self._retry, *self._pending.values(), *self._resubmit]
        for request in leftovers:
            futures.set_exception(request.future, StateClosedError("the state manager is closed"))

    # -- the loop -------------------------------------------------------------

    def _next(self, timeout_s: float | None) -> WriteRequest[S, Op] | None:
        """The next request (the turn is taken on return, released while waiting)."""
        if self._retry:
            return self._retry.popleft()
        self._turn.release()
        try:
            # may ask the broker (a bounded call): direct writes go on meanwhile
            self._holder.keep_if_alone()
            item = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            item = None
        finally:
            self._turn.acquire()
        if item is _WAKE:
            return self._next(0) if not self._fenced.is_set() else None
        if item is not None:
            self._took_queued()
        return item  # type: ignore[no-any-return]

    def _took_queued(self) -> None:
        """The writer thread took a request off the queue (holding the turn)."""
        with self._queued_lock:
            self._queued -= 1

    def _drain_blind(self, first: WriteRequest[S, Op]) -> list[WriteRequest[S, Op]]:
        group = [first]
        if not first.blind:
            return group
        while len(group) < 1000:
            if self._retry:
                if not self._retry[0].blind:
                    break
                group.append(self._retry.popleft())
                continue
            try:
                nxt = self._queue.get_nowait()
            except queue.Empty:
                break
            if nxt is _WAKE:
                continue
            if nxt is None:
                self._queue.put(None)
                break
            self._took_queued()
            if not nxt.blind:
                self._retry.appendleft(nxt)
                break
            group.append(nxt)
        return group

    def _run(self) -> None:
        with self._turn:  # released only while waiting for the queue
            self._loop()

    def _loop(self) -> None:
        while True:
            self._direct_failed()
            if self._recover():
                continue
            idle = self._config.effective_idle_release_s
            request = self._next(idle if self._holder.producer is not None else None)
            if request is None:
                if self._closed:
                    self._holder.release()  # this thread may have gained it after close()
                    return
                self._direct_failed()
                if self._fenced.is_set() and self._holder.producer is not None:
                    self._holder.lost(_stale())
                elif self._direct_since_housekeeping:
                    self._housekeeping()
                elif self._holder.producer is not None and idle is not None and not self._pending:
                    self._holder.release()
                continue
            if self._closed:
                futures.set_exception(
                    request.future, StateClosedError("the state manager is closed")
                )
                continue
            group = self._drain_blind(request)
            try:
                self._process(group)
            except Exception as exc:  # a bug: fail the requests, keep the thread
                log.exception("writer of %s failed a group", self._topic)
                for r in group:
                    futures.set_exception(r.future, PulsarStateError(f"writer failed: {exc!r}"))

    def _process(self, group: list[WriteRequest[S, Op]]) -> None:
        if self._fenced.is_set() and self._holder.producer is not None:
            self._holder.lost(_stale())
        elif self._holder.tenure_over(busy=bool(self._pending)):
            self._holder.keep_if_alone()  # (the writer thread slept through the window)
            if self._holder.tenure_over(busy=bool(self._pending)):
                self._holder.release()  # writers queued behind us go first; we queue again
        try:
            self._acquire()
        except PulsarStateError as exc:
            for request in group:
                request.attempts += 1
            self._retry_later(group, exc)
            return
        if self._resubmit:  # writes of the lost tenure go first, in their order
            self._retry.extendleft(reversed([*self._resubmit, *group]))
            self._resubmit = []
            return
        messages: list[tuple[str | None, bytes]] = []
        members: list[WriteRequest[S, Op]] = []
        size = 0
        for index, request in enumerate(group):
            if self._fenced.is_set():  # stop sending what would land stale
                self._retry.extendleft(reversed([*members, *group[index:]]))
                return
            if not request.start():  # cancelled while queued: not written
                continue
            request.attempts += 1
            landed = self._tailer.write_position(request.write_id) if request.attempts > 1 else None
            if landed is not None:
                # an earlier attempt succeeded after all (e.g. a timeout that was not)
                self._complete(request, landed)
                continue
            try:
                built = self._build(request)
            except _CatchUpFailedError as exc:  # nothing was sent: try again later
                self._retry_later([request], exc.cause)
                continue
            except BaseException as exc:
                futures.set_exception(request.future, exc)
                continue
            if built is None:  # nothing to write
                futures.set_result(request.future, self._tailer.applied)
                continue
            batch, batch_size = built
            if members and (
                size + batch_size > self._config.max_write_bytes
                or len(messages) + len(batch) > self._config.max_ops_per_write
            ):
                self._publish(members, messages)
                messages, members, size = [], [], 0
            messages.extend(batch)
            members.append(request)
            size += batch_size
        if members:
            self._publish(members, messages)

    def _build(
        self, request: WriteRequest[S, Op]
    ) -> tuple[list[tuple[str | None, bytes]], int] | None:
        """Run the generator on the latest state; the write's (key, payload)s and
        their size, or None.

        A generator that writes runs on local state once our own last write is
        applied: while we hold the topic nobody else can append, and if another
        writer took it over silently, our write lands after its epoch marker and
        is skipped as stale by every reader, then re-run (log-level fencing), so
        a write is never decided on stale state. A decision *not* to write (a
        failed compare-and-set, ``put_if_absent`` on a present key, an error)
        has no such safety net: it is only taken after catching up with the
        topic itself, one ``get_last_message_id`` round trip.
        """
        if request.blind:  # it promised to ignore the state: no lock, no waiting
            return self._encode(self._generate(request, locked=False))
        try:
            if self._last_sent is not None:
                self._tailer.wait_applied(self._last_sent, self._config.operation_timeout_s)
        except OperationTimeoutError as exc:
            raise _CatchUpFailedError(exc) from exc
        try:
            ops = self._generate(request)
        except Exception:  # decided on possibly stale state: decide again, caught up
            ops = None
        if ops:
            return self._encode(ops)
        try:
            self._tailer.catch_up(self._config.operation_timeout_s)
        except OperationTimeoutError as exc:
            raise _CatchUpFailedError(exc) from exc
        return self._encode(self._generate(request))

    def _generate(self, request: WriteRequest[S, Op], *, locked: bool = True) -> list[Op] | None:
        with self._tailer.lock if locked else contextlib.nullcontext():
            ops = request.generator(self._tailer.state)
        return None if ops is None else list(ops)

    def _encode(self, ops: list[Op] | None) -> tuple[list[tuple[str | None, bytes]], int] | None:
        if not ops:
            return None
        if len(ops) > self._config.max_ops_per_write:
            raise TooManyOpsError(len(ops), self._config.max_ops_per_write)
        out = [self._codec.encode(op) for op in ops]
        for key, payload in out:  # here, not at publish: a bad key fails its write only
            if key is not None:
                check_op_key(key, payload)
        size = entry_size(out)
        if size > self._config.max_write_bytes:
            raise ValueTooLargeError(size, self._config.max_write_bytes)
        return out, size

    def _publish(
        self, members: list[WriteRequest[S, Op]], ops: list[tuple[str | None, bytes]]
    ) -> None:
        """Publish the members' ops and one commit marker naming them, as one entry
        (a lone single-op write: one self-committing message)."""
        producer, epoch = self._holder.producer, self._holder.epoch
        assert producer is not None and epoch is not None
        messages = self._entry(members, ops, epoch)
        acks = Acks(1)  # an entry is stored whole or not at all: its last ack tells
        try:
            last = send_entry(producer, messages, acks, timeout_s=self._config.send_timeout_s + 5)
        except (pulsar.PulsarException, PublishFailedError) as exc:
            # it may still have landed (a timeout): after regaining the topic,
            # whatever is not applied by then is re-run (_requeue_unresolved)
            self._holder.lost(exc)
            return
        previous, self._last_sent = self._last_sent, last
        if (
            self._config.commit_on_ack
            and previous is not None
            and self._commit_on_ack(
                members, self._own_entry(members, messages, epoch), landed=last, previous=previous
            )
        ):
            for request in members:
                self._complete(request, last)
        self._holder.losses = 0
        self._m_writes.inc(len(members))
        self._housekeeping()

    def _entry(
        self, members: list[WriteRequest[S, Op]], ops: list[tuple[str | None, bytes]], epoch: int
    ) -> list[OutgoingMessage]:
        """The messages of one entry, its writes registered as published (the
        tailer completes them when it applies the entry, maybe before the ack)."""
        if len(members) == 1 and len(ops) == 1 and ops[0][1]:
            # the commonest write (a put): one self-committing message
            key, payload = ops[0]
            messages = [write_message(members[0].write_id, key, payload, epoch)]
        else:
            group_id = f"{self.writer_id}-g{forks.next_seq()}"
            messages = op_messages(group_id, ops, epoch)
            messages.append(
                commit_message(
                    group_id,
                    len(ops),
                    epoch,
                    keep=not self._compactable,
                    members=[r.write_id for r in members],
                )
            )
        for request in members:
            self._pending[request.write_id] = request
        self._inflight.append(members)
        return messages

    def _housekeeping(self) -> None:
        """After publishing (writer thread): repairs, snapshots, checkpoints."""
        self._direct_since_housekeeping = 0
        self._repair()
        self._maybe_snapshot()
        # only while holding the topic: a process that let it go leaves the
        # next checkpoint to the holder (who may have written one meanwhile)
        if self._after_publish is not None and self._holder.producer is not None:
            try:
                self._after_publish()
            except Exception:  # an optimisation (a checkpoint): never fail a write for it
                log.exception("after-publish hook of %s failed", self._topic)

    def _housekeeping_due(self) -> bool:
        """Whether housekeeping has work now (cheap: the direct path asks at
        each write, once it is sent, so that a snapshot or checkpoint comes when
        due, not up to ``_HOUSEKEEPING_EVERY`` writes later)."""
        if self._tailer.stale_keys:
            return True
        if (
            self._snapshotter is not None
            and self._tailer.applied_writes - self._snapshot_at >= self._snapshot_every
        ):
            return True
        return self._after_publish_due is not None and self._after_publish_due()

    # -- the direct path (see the module docstring) ---------------------------

    def _send_direct(self, request: WriteRequest[S, Op]) -> bool:
        """Submitting thread, holding the turn: publish a blind ``request``
        without waiting, if the writer has nothing else to do. ``True``: it is
        taken care of, and the turn passes to its acknowledgement's callback
        (or was released); ``False``: queue it (the caller releases the turn)."""
        holder = self._holder
        producer, epoch, previous = holder.producer, holder.epoch, self._last_sent
        if (
            producer is None
            or epoch is None
            or previous is None
            or self._closed
            or self._queued
            or self._retry
            or self._resubmit
            or self._send_failed is not None
            or self._fenced.is_set()
            or holder.tenure_over(busy=bool(self._pending))
        ):
            return False
        if not request.start():  # cannot be cancelled yet; for completeness
            self._turn.release()
            return True
        request.attempts += 1
        try:
            built = self._encode(self._generate(request, locked=False))
        except BaseException as exc:
            self._turn.release()
            futures.set_exception(request.future, exc)
            return True
        if built is None:  # nothing to write
            self._turn.release()
            futures.set_result(request.future, self._tailer.applied)
            return True
        messages = self._entry([request], built[0], epoch)
        direct = _DirectWrite(request, self._own_entry([request], messages, epoch), previous)

        def on_ack(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            self._on_direct_ack(direct, result, msg_id)

        try:
            send_entry_async(producer, messages, on_ack)
        except Exception as exc:  # closed or fenced (PulsarException): nothing more goes out
            # what was handed over may still land: the writer thread regains the
            # topic and re-runs whatever is not applied by then
            self._send_failed = exc
            self._turn.release()
            self._queue.put(_WAKE)
            return True
        # while the entry travels, off the ack's way to the waiting caller: decode
        # it for the callback (which does it itself if the ack comes first), and
        # ask whether housekeeping has work (the writer thread does it once this
        # write's ack is handled). The write is sent and the turn may be the
        # callback's already: nothing here may fail the call nor release the turn
        try:
            direct.own.decode(self._codec)
            if self._housekeeping_due():
                self._queue.put(_WAKE)
        except Exception:
            log.exception("after sending a write to %s", self._topic)
        return True

    def _on_direct_ack(
        self, direct: _DirectWrite[S, Op], result: pulsar.Result, msg_id: pulsar.MessageId
    ) -> None:
        """The client's IO thread: a direct write's acknowledgement. Applies and
        completes it as the writer thread does, but leaves everything that may
        block (letting the producer go, housekeeping) to the writer thread."""
        try:
            landed = self._direct_landed(direct, result, msg_id)
            if landed is not None and self._inflight and self._inflight[-1][0] is direct.request:
                self._inflight.pop()  # completed below: nothing left to re-run
        except BaseException:  # an exception here would end the process (the client's rule)
            log.exception("handling the acknowledgement of a write to %s failed", self._topic)
            landed = None
            self._send_failed = self._send_failed or PublishFailedError("ack handling failed")
            self._queue.put(_WAKE)
        finally:
            self._turn.release()
        if landed is None:
            return
        if direct.request.future.has_callbacks:  # they may wait on this very thread
            self._completer().submit(self._complete, direct.request, landed)
        else:
            self._complete(direct.request, landed)

    def _completer(self) -> concurrent.futures.ThreadPoolExecutor:
        """One thread, made on first use, that completes direct writes whose
        futures have callbacks, in order (see :class:`WriteFuture`)."""
        with self._queued_lock:
            if self._completions is None:
                self._completions = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1,
                    thread_name_prefix=f"pss-complete-{self._topic.rsplit('/', 1)[-1]}",
                )
            return self._completions

    def _direct_landed(
        self, direct: _DirectWrite[S, Op], result: pulsar.Result, msg_id: pulsar.MessageId
    ) -> Position | None:
        """The direct write's position if it is applied now (complete it), else ``None``."""
        if result != pulsar.Result.Ok:
            self._send_failed = PublishFailedError(result)
            self._queue.put(_WAKE)
            return None
        landed = Position.from_message_id(msg_id)
        self._last_sent = landed
        self._holder.losses = 0
        self._m_writes.inc()
        self._m_direct.inc()
        self._direct_since_housekeeping += 1
        if self._direct_since_housekeeping >= _HOUSEKEEPING_EVERY:
            self._queue.put(_WAKE)
        if self._commit_on_ack(
            [direct.request], direct.own, landed=landed, previous=direct.previous
        ):
            return landed
        return None

    def _direct_failed(self) -> None:
        """Writer thread: a direct write's publish failed; let the producer go."""
        exc, self._send_failed = self._send_failed, None
        if exc is not None and self._holder.producer is not None:
            self._holder.lost(exc)

    def _own_entry(
        self, members: list[WriteRequest[S, Op]], messages: list[OutgoingMessage], epoch: int
    ) -> OwnEntry[Op]:
        """The entry of ``messages`` as :meth:`_commit_on_ack` applies it: the ops
        as every reader decodes them (by their message keys)."""
        op_msgs = messages if len(messages) == 1 else messages[:-1]
        return OwnEntry(
            [(m.key, m.payload) for m in op_msgs],
            write_id=messages[-1].properties.get(PROP_WRITE, ""),
            members=tuple(r.write_id for r in members),
            epoch=epoch,
        )

    def _commit_on_ack(
        self,
        members: list[WriteRequest[S, Op]],
        own: OwnEntry[Op],
        *,
        landed: Position,
        previous: Position,
    ) -> bool:
        """The broker acknowledged our entry at ``landed``: under PIP-68 only the
        producer holding the topic's current epoch can append, and we caught up
        when we gained it, so the entry follows ``previous`` (our last entry or
        epoch marker) with nothing in between. Apply it now; whether it was
        (then the caller completes its writes at ``landed``, instead of waiting
        for the tail to bring it back). If the state is not at ``previous`` (an
        earlier entry of ours was left to the tail), the tail completes them as
        before."""
        if not self._tailer.apply_own(own, landed, after=previous):
            return False
        self._m_committed_on_ack.inc(len(members))
        for request in members:
            self._pending.pop(request.write_id, None)
        return True

    def _on_outcome(self, write_ids: tuple[str, ...], position: Position, applied: bool) -> None:
        """Tailer thread: our writes were applied (done) or skipped as stale (re-run)."""
        if applied:
            now = time.monotonic()
            for write_id in write_ids:
                request = self._pending.pop(write_id, None)
                if request is not None and futures.set_result(request.future, position):
                    self._m_write_seconds.observe(now - request.submitted)
        elif any(write_id in self._pending for write_id in write_ids):
            self._fenced.set()
            self._queue.put(_WAKE)

    def _recover(self) -> bool:
        """Regain the topic at once when published writes wait on a lost tenure."""
        self._trim_inflight()
        if self._closed:
            return False
        if self._fenced.is_set() and self._holder.producer is not None:
            self._holder.lost(_stale())
        if self._holder.producer is not None or not (self._inflight or self._resubmit):
            return False
        try:
            self._acquire()
        except PulsarStateError as exc:
            self._fail_exhausted_inflight(exc)
            return True
        if self._resubmit:
            self._retry.extendleft(reversed(self._resubmit))
            self._resubmit = []
        return True

    def _fail_exhausted_inflight(self, exc: BaseException) -> None:
        for group in self._inflight:
            for request in group:
                if not request.future.done() and self._give_up(request, exc):
                    self._pending.pop(request.write_id, None)

    def _give_up(self, request: WriteRequest[S, Op], exc: BaseException) -> bool:
        """Fail ``request`` if its retries are exhausted (FencedError when fenced)."""
        if isinstance(exc, PermissionDeniedError):  # retrying cannot help
            futures.set_exception(request.future, exc)
            return True
        if not self._config.retry.exhausted(max(request.attempts, 1), request.submitted):
            return False
        message = f"gave up after {request.attempts} attempts: {exc}"
        if isinstance(exc, FencedError):
            futures.set_exception(request.future, FencedError(message))
        else:
            futures.set_exception(
                request.future, WriteFailedError(message, attempts=request.attempts)
            )
        return True

    def _trim_inflight(self) -> None:
        # a group's writes complete together (one entry): its last one is the
        # cheap test before the full one
        while (
            self._inflight
            and self._inflight[0][-1].future.done()
            and all(r.future.done() for r in self._inflight[0])
        ):
            self._inflight.popleft()

    def _requeue_unresolved(self) -> None:
        """After regaining the topic: re-run what the lost tenure did not get applied.

        Our new epoch marker is applied, so every entry we published before it
        has been applied (its futures are done) or skipped as stale, or never
        landed; the rest go back to the front of the queue in publication order.
        """
        unresolved = [r for group in self._inflight for r in group if not r.future.done()]
        self._inflight.clear()
        for request in unresolved:
            self._pending.pop(request.write_id, None)
        if unresolved:
            metrics.WRITE_RETRIES.labels(*self._labels).inc(len(unresolved))
        keep = []
        for request in unresolved:
            if not self._give_up(request, FencedError("fenced each time")):
                keep.append(request)
        self._resubmit = keep + self._resubmit

    def _maybe_snapshot(self) -> None:
        snapshotter = self._snapshotter
        if snapshotter is None:
            return
        if self._tailer.applied_writes - self._snapshot_at < self._snapshot_every:
            return
        with self._tailer.lock:
            self._snapshot_at = self._tailer.applied_writes
            try:
                snapshotter.write(self._tailer.state, self._tailer.applied, self._tailer.epoch)
            except Exception:  # a snapshot is an optimisation: never fail a write for it
                log.exception("snapshot of %s failed", self._topic)

    def _complete(self, request: WriteRequest[S, Op], landed: Position) -> None:
        if futures.set_result(request.future, landed):
            self._m_write_seconds.observe(time.monotonic() - request.submitted)

    def _repair(self) -> None:
        """Re-assert the current value of keys a stale write touched (see topic_format)."""
        repair = getattr(self._codec, "repair", None)
        if repair is None or not self._tailer.stale_keys or self._holder.producer is None:
            return
        with self._tailer.lock:
            keys = dict(self._tailer.stale_keys)
        request: WriteRequest[S, Op] = WriteRequest(lambda state: repair(state, set(keys)), False)
        log.info("repairing %d keys a stale write touched on %s", len(keys), self._topic)
        self._retry.appendleft(request)

        def forget(done: Future[Position]) -> None:
            if done.exception() is None:
                self._tailer.repaired(keys, done.result())

        request.future.add_done_callback(forget)

    # -- holding the topic (see topic_holder) ---------------------------------

    def _acquire(self) -> None:
        """Gain the topic if we do not hold it, then re-run what the lost tenure left."""
        if self._holder.producer is not None:
            return
        self._last_sent = self._holder.acquire(closed=lambda: self._closed)
        self._fenced.clear()
        self._requeue_unresolved()
        self._repair()

    def _retry_later(self, group: list[WriteRequest[S, Op]], exc: BaseException) -> None:
        keep = []
        for request in group:
            if request.future.done():
                continue
            if self._closed:
                futures.set_exception(
                    request.future, StateClosedError("the state manager is closed")
                )
            elif not self._give_up(request, exc):
                keep.append(request)
        if keep:
            metrics.WRITE_RETRIES.labels(*self._labels).inc(len(keep))
            self._retry.extendleft(reversed(keep))
