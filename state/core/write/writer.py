"""The writer: the one thread that orders, groups, builds and sends writes.

The write path is one-way (docs/state.md, *The write path*): the call only
queues a :class:`~pulsar_state.core.write.request.WriteRequest` on the inbox;
this thread owns the inbox, the tenure (:mod:`~pulsar_state.core.write.tenure`)
and every write it sent until it is settled. It groups the blind writes queued
together (group commit), runs each generator on the latest state, registers
the writes with the log replay and sends them as one entry, then waits for
its acknowledgement (which the client's IO thread only hands over) before it
builds anything else. The replay completes the futures in landing order.

A publish that fails or is not acknowledged in time leaves its writes *in
doubt*: the tenure goes IN_DOUBT, its producer is closed, and nothing else is
built until a new tenure's epoch marker is applied. Then every write sent
before it has landed (the replay completed it) or never will, and only those
run again, first, in their order, within ``StateConfig.retry``. A write of
ours that lands stale (after another writer's marker) is skipped by every
reader; the replay wakes the writer, which treats it as in doubt.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import pulsar

from pulsar_state import metrics
from pulsar_state.config import StateConfig
from pulsar_state.core import futures
from pulsar_state.core.callback_thread import CallbackFuture, CallbackThread
from pulsar_state.core.log.tailer import Tailer
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.core.snapshot import Snapshotter
from pulsar_state.core.write.entry import encode_write, entry_messages, own_entry
from pulsar_state.core.write.entry_sender import Acks, PublishFailedError, send_entry
from pulsar_state.core.write.repair import repair_request
from pulsar_state.core.write.request import WriteRequest
from pulsar_state.core.write.tenure import Tenure, TenureState
from pulsar_state.errors import (
    FencedError,
    OperationTimeoutError,
    PermissionDeniedError,
    PulsarStateError,
    StateClosedError,
    WriteFailedError,
    WriteInDoubtError,
    fresh,
)
from pulsar_state.position import Position

__all__ = ["Writer"]

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")

#: wakes the writer thread without a request (a stale write was seen)
_WAKE = object()
#: the last item of the inbox: the manager closes
_CLOSE = object()
#: writes remembered as sent, beyond which the settled ones are forgotten
_UNSETTLED_TRIM = 256


class _NotCaughtUpError(Exception):
    """The writer could not catch up before running a generator (nothing sent)."""

    def __init__(self, cause: OperationTimeoutError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _StaleTenureError(Exception):
    """A write of ours landed stale: the tenure is lost (nothing sent)."""


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
        callbacks: CallbackThread,
        compactable: bool = False,
        snapshotter: Snapshotter[S] | None = None,
        snapshot_every: int = 0,
        after_publish: Callable[[], None] | None = None,
        waiting_writers: Callable[..., int] | None = None,
    ) -> None:
        self._topic = topic
        self._tailer = tailer
        self._codec = codec
        self._config = config
        self._callbacks = callbacks
        self._compactable = compactable
        self._snapshotter = snapshotter
        self._snapshot_every = snapshot_every
        if snapshotter is not None:
            snapshotter.taken_at = tailer.applied_writes
        #: after each publish, holding the topic (checkpoints): never holding
        self._after_publish = after_publish  # the state lock across a client call
        self.writer_id = uuid.uuid4().hex[:12]
        self._tenure = Tenure(
            client=client,
            topic=topic,
            tailer=tailer,
            config=config,
            writer_id=self.writer_id,
            compactable=compactable,
            waiting_writers=waiting_writers,
        )
        # -- the inbox: the only way in (any thread) --------------------------
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._submit_lock = threading.Lock()  # orders submits against close
        self._closed = False
        # -- the writer thread's own ------------------------------------------
        #: requests to take before the inbox's: re-runs and unsent group members
        self._front: collections.deque[WriteRequest[S, Op]] = collections.deque()
        #: writes sent (in this tenure or a lost one) and not known to be settled
        self._unsettled: collections.deque[WriteRequest[S, Op]] = collections.deque()
        #: our last acknowledged entry, or the epoch marker (this tenure)
        self._last_sent: Position | None = None
        self._repairing = False
        #: the replay saw a stale write since the writer last looked (or the bootstrap did)
        self._stale_seen = bool(tailer.stale_keys)
        self._m_writes = metrics.WRITES.labels(topic)
        self._m_write_seconds = metrics.WRITE_SECONDS.labels(topic)
        self._m_committed_on_ack = metrics.COMMITTED_ON_ACK.labels(topic)
        self._m_in_doubt = metrics.WRITES_IN_DOUBT.labels(topic)
        self._m_retries = metrics.WRITE_RETRIES.labels(topic)
        tailer.on_stale = self._wake
        tailer.on_stopped = functools.partial(self._inbox.put, _WAKE)  # the writer stops
        self._thread = threading.Thread(
            target=self._run, name=f"pss-writer-{topic.rsplit('/', 1)[-1]}", daemon=True
        )
        self._thread.start()

    @property
    def epoch(self) -> int | None:
        """The fencing epoch while this writer holds the topic, else ``None``."""
        return self._tenure.epoch

    @property
    def tenure(self) -> Tenure:
        """The tenure's state machine (read its ``state`` and ``history``)."""
        return self._tenure

    # -- the call (any thread) --------------------------------------------------

    def submit(
        self, generator: Callable[[S], Any] | None, *, blind: bool = False, ops: Sequence[Op] = ()
    ) -> CallbackFuture[Position]:
        """Queue a write; its future completes once it is applied locally.
        ``generator=None``: a blind write of ``ops``.

        Raises:
            StateClosedError: once :meth:`close` began (nothing is queued).
        """
        request: WriteRequest[S, Op] = WriteRequest(
            generator, blind or generator is None, CallbackFuture(self._callbacks), ops
        )
        with self._submit_lock:
            failure = self._tailer.failure  # the replay stopped: so does the writer
            if self._closed or failure is not None:
                raise StateClosedError() if failure is None else fresh(failure)
            self._inbox.put(request)
        return request.future

    def close(self) -> None:
        """Stop taking writes, fail what is queued, let the topic go (idempotent).

        Every write submitted before completes: applied, or failed with
        StateClosedError (a write in doubt says it may have landed).
        """
        with self._submit_lock:
            if not self._closed:  # (else closed already, or stopped with the replay)
                self._closed = True
                self._inbox.put(_CLOSE)  # nothing can be queued behind it
        if threading.current_thread() is not self._thread:
            self._thread.join(self._config.operation_timeout_s + self._config.send_timeout_s + 5)
            if self._thread.is_alive():
                log.warning("the writer of %s is still busy; it stops on its own", self._topic)

    def _wake(self) -> None:
        """The replay saw a stale write (an applying thread; a flag and a queue put)."""
        self._stale_seen = True
        self._inbox.put(_WAKE)

    # -- the writer thread ------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug: nothing may be left pending
            log.exception("the writer of %s stopped", self._topic)
            error = PulsarStateError(f"the writer stopped: {exc!r}")
            self._end(lambda: fresh(error), lambda _: fresh(error))
        finally:
            with contextlib.suppress(Exception):
                self._tenure.close()
            if self._snapshotter is not None:
                self._snapshotter.close()

    def _loop(self) -> None:
        while True:
            if self._tailer.failure is not None:
                self._stop(self._tailer.failure)
                return
            self._notice_stale()
            if self._tenure.in_doubt and not self._closed:
                self._settle()
                continue
            if self._stale_seen:  # repair at once: compaction would keep the stale value
                self._stale_seen = False
                self._repair()
            request = self._next()
            if request is _CLOSE:
                self._shutdown()
                return
            if request is None:  # idle (or woken)
                self._idle()
                continue
            self._process(self._group(request))

    def _next(self) -> Any:
        """The next request, ``None`` when idle for the release interval or
        woken, or ``_CLOSE``."""
        if self._front:
            return self._front.popleft()
        holding = self._tenure.holding
        if holding:
            self._tenure.keep_if_alone()  # asks the broker on another thread
        idle = self._config.effective_idle_release_s if holding else None
        try:
            item = self._inbox.get(timeout=idle)
        except queue.Empty:
            return None
        return None if item is _WAKE else item

    def _group(self, first: WriteRequest[S, Op]) -> list[WriteRequest[S, Op]]:
        """``first`` and the blind writes queued right behind it (group commit)."""
        group = [first]
        if not first.blind:
            return group
        while len(group) < 1000:
            if self._front:
                if not self._front[0].blind:
                    break
                group.append(self._front.popleft())
                continue
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is _WAKE:
                continue
            if item is _CLOSE or not item.blind:
                self._front.append(item)  # _CLOSE stays last: nothing follows it
                break
            group.append(item)
        return group

    def _idle(self) -> None:
        """Nothing queued for the idle interval: let the topic go (queueing
        modes, so that waiting writers get their turn)."""
        if (
            self._tenure.holding
            and self._config.effective_idle_release_s is not None
            and not self._front
        ):
            self._tenure.release()

    def _notice_stale(self) -> None:
        """A write of ours landed stale: whatever we hold is lost."""
        if not self._tailer.take_own_stale():
            return
        stale = FencedError("a write landed stale: another writer holds the topic")
        if self._tenure.state in (TenureState.HOLDING, TenureState.IDLE):
            self._tenure.doubt(stale)

    # -- holding the topic, settling what is in doubt ---------------------------

    def _acquire(self) -> list[WriteRequest[S, Op]]:
        """Gain the topic (IDLE or IN_DOUBT -> HOLDING); the writes of earlier
        tenures that did not land, to run again first, in their order.

        Once our epoch marker is applied, nothing of an earlier tenure can be
        applied any more, and every earlier write of ours that landed has been
        applied (its future completed by the replay). The others never landed
        or landed stale: they run again, unless their budget is spent.
        """
        if self._closed:
            raise StateClosedError()
        self._last_sent = self._tenure.acquire(
            closed=lambda: self._closed or self._tailer.failure is not None
        )
        unlanded = self._tailer.unlanded([r.write_id for r in self._unsettled])
        rerun = [r for r in self._unsettled if r.write_id in unlanded]
        self._unsettled.clear()
        if rerun:
            self._m_retries.inc(len(rerun))
        self._repair()
        return [r for r in rerun if not self._give_up(r, FencedError("lost the topic each time"))]

    def _settle(self) -> None:
        """IN_DOUBT: a new tenure settles the writes of the lost one."""
        try:
            rerun = self._acquire()
        except PulsarStateError as exc:
            # still unknown whether they landed: past its budget, a write is
            # reported in doubt (never as failed), and forgotten
            spent = [
                r
                for r in self._unsettled
                if isinstance(exc, PermissionDeniedError | StateClosedError)
                or self._config.retry.exhausted(max(r.attempts, 1), r.submitted)
            ]
            self._tailer.unlanded([r.write_id for r in spent])
            for request in spent:
                self._unsettled.remove(request)
                futures.set_exception(
                    request.future, WriteInDoubtError.unsettled(request.attempts, exc)
                )
            return
        self._front.extendleft(reversed(rerun))

    def _give_up(self, request: WriteRequest[S, Op], exc: BaseException) -> bool:
        """Fail ``request`` if retrying cannot help or its budget is spent."""
        if isinstance(exc, PermissionDeniedError | StateClosedError):
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

    def _retry_later(self, requests: list[WriteRequest[S, Op]], exc: BaseException) -> None:
        """Nothing of ``requests`` was sent: to the front again, unless given up."""
        keep = [r for r in requests if not r.future.done() and not self._give_up(r, exc)]
        if keep:
            self._m_retries.inc(len(keep))
            self._front.extendleft(reversed(keep))

    # -- building and sending ---------------------------------------------------

    def _process(self, group: list[WriteRequest[S, Op]]) -> None:
        if self._tailer.failure is not None:  # stopped while we waited: _loop ends
            self._front.extendleft(reversed(group))
            return
        tenure = self._tenure
        tenure.release_if_over()
        if not tenure.holding:
            try:
                rerun = self._acquire()
            except PulsarStateError as exc:
                for request in group:
                    request.attempts += 1
                self._retry_later(group, exc)
                return
            if rerun:  # the writes of the lost tenure go first, in their order
                self._front.extendleft(reversed([*rerun, *group]))
                return
        ops: list[tuple[str | None, bytes]] = []
        members: list[WriteRequest[S, Op]] = []
        size = 0
        for index, request in enumerate(group):
            if not request.start():  # cancelled while queued: not written
                continue
            request.attempts += 1
            try:
                built = self._build(request)
            except _StaleTenureError:
                tenure.doubt(FencedError("a write landed stale: another writer holds the topic"))
                self._unsend([*members, *group[index:]])
                return
            except _NotCaughtUpError as exc:  # nothing was sent: try again later
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
                or len(ops) + len(batch) > self._config.max_ops_per_write
            ):
                if not self._send(members, ops):  # in doubt: the rest was not sent
                    self._unsend(group[index:])
                    return
                ops, members, size = [], [], 0
            ops.extend(batch)
            members.append(request)
            size += batch_size
        if members:
            self._send(members, ops)

    def _unsend(self, requests: list[WriteRequest[S, Op]]) -> None:
        """Built but not sent: to the front again (their generators run again)."""
        self._front.extendleft(reversed([r for r in requests if not r.future.done()]))

    def _build(
        self, request: WriteRequest[S, Op]
    ) -> tuple[list[tuple[str | None, bytes]], int] | None:
        """Run the generator on the latest state; the write's (key, payload)s and
        their size, or None. A write is decided on local state once our own last
        write is applied; a decision *not* to write only after catching up with
        the topic itself (docs/state.md, *Decisions on the latest state*)."""
        if request.blind:  # it promised to ignore the state: no lock, no waiting
            generator = request.generator
            ops = request.ops if generator is None else generator(self._tailer.state)
            return encode_write(self._codec, None if ops is None else list(ops), self._config)
        timeout = self._config.operation_timeout_s
        try:
            if self._last_sent is not None:
                self._tailer.wait_applied(self._last_sent, timeout)
        except OperationTimeoutError as exc:
            raise _NotCaughtUpError(exc) from exc
        if self._tailer.take_own_stale():
            raise _StaleTenureError
        try:
            ops = self._generate(request)
        except Exception:  # decided on possibly stale state: decide again, caught up
            ops = None
        if ops:
            return encode_write(self._codec, ops, self._config)
        try:
            self._tailer.catch_up(timeout)
        except OperationTimeoutError as exc:
            raise _NotCaughtUpError(exc) from exc
        if self._tailer.take_own_stale():
            raise _StaleTenureError
        return encode_write(self._codec, self._generate(request), self._config)

    def _generate(self, request: WriteRequest[S, Op]) -> list[Op] | None:
        generator = request.generator
        assert generator is not None  # a write without one is blind
        with self._tailer.lock:
            ops = generator(self._tailer.state)
        return None if ops is None else list(ops)

    def _send(
        self, members: list[WriteRequest[S, Op]], ops: list[tuple[str | None, bytes]]
    ) -> bool:
        """Send the members' ops as one entry and wait for its acknowledgement;
        ``False``: the entry is in doubt (the tenure is IN_DOUBT, nothing more
        goes out before it is settled)."""
        tenure = self._tenure
        producer, epoch = tenure.producer, tenure.epoch
        if producer is None or epoch is None:  # a bug: the caller checked
            raise AssertionError(f"sending without holding the topic ({tenure.state})")
        messages = entry_messages(
            self.writer_id, [r.write_id for r in members], ops, epoch, self._compactable
        )
        self._tailer.expect([(r.write_id, functools.partial(self._landed, r)) for r in members])
        self._unsettled.extend(members)
        try:
            landed = send_entry(
                producer, messages, Acks(), timeout_s=self._config.send_timeout_s + 5
            )
        except (pulsar.PulsarException, PublishFailedError) as exc:
            # it may still land: settled by the next tenure (see _acquire)
            log.info(
                "%d writes to %s in doubt (%s); settling them from the log",
                len(members),
                self._topic,
                exc,
            )
            self._m_in_doubt.inc(len(members))
            tenure.doubt(exc)
            return False
        previous, self._last_sent = self._last_sent, landed
        tenure.losses = 0
        self._m_writes.inc(len(members))
        if (
            self._config.commit_on_ack
            and previous is not None
            and self._tailer.apply_own(
                own_entry(messages, [r.write_id for r in members], epoch), landed, after=previous
            )
        ):
            self._m_committed_on_ack.inc(len(members))
        self._trim_unsettled()
        self._housekeeping()
        return True

    def _landed(self, request: WriteRequest[S, Op], position: Position) -> None:
        """The replay applied ``request``'s write at ``position`` (in landing order)."""
        if not request.future.done():  # (failed meanwhile, at close) counted before it wakes
            self._m_write_seconds.observe(time.monotonic() - request.submitted)
            futures.set_result(request.future, position)

    def _trim_unsettled(self) -> None:
        """Forget the oldest sent writes that are applied (a cheap look, no lock)."""
        unsettled = self._unsettled
        if len(unsettled) < _UNSETTLED_TRIM:
            return
        expecting = self._tailer.expecting
        while unsettled and not expecting(unsettled[0].write_id):
            unsettled.popleft()

    # -- housekeeping (writer thread, after a publish) ---------------------------

    def _housekeeping(self) -> None:
        """Repairs, snapshots, checkpoints: never holding the state lock across
        a blocking client call."""
        self._repair()
        if self._snapshotter is not None:
            self._snapshotter.maybe_take(self._tailer, every_writes=self._snapshot_every)
        if self._after_publish is not None and self._tenure.holding:
            try:
                self._after_publish()
            except Exception:  # an optimisation (a checkpoint): never fail a write for it
                log.exception("after-publish hook of %s failed", self._topic)

    def _repair(self) -> None:
        """Repair the keys stale writes touched, first thing (see :mod:`.repair`)."""
        if self._repairing or not self._tailer.stale_keys:
            return
        request = repair_request(self._codec, self._tailer, self._callbacks, self._repaired)
        if request is not None:
            self._repairing = True
            self._front.appendleft(request)

    def _repaired(self) -> None:
        self._repairing = False

    # -- the end ------------------------------------------------------------------

    def _shutdown(self) -> None:
        """``close()`` was called: fail what is queued, settle what was sent
        (writes acknowledged are in the log: the replay applies them first)."""
        if self._last_sent is not None and self._unsettled and not self._tenure.in_doubt:
            with contextlib.suppress(PulsarStateError):
                self._tailer.wait_applied(self._last_sent, self._config.send_timeout_s)
        self._end(
            StateClosedError,
            lambda _: StateClosedError(
                "closed before this write was settled: it may have landed (read it back)"
            ),
        )
        self._tenure.close()

    def _stop(self, failure: PulsarStateError) -> None:
        """The replay stopped (``on_invalid_message="fail"``): so does the writer."""
        self._end(lambda: fresh(failure), lambda r: WriteInDoubtError.unread(r.attempts, failure))

    def _end(
        self,
        unsent: Callable[[], BaseException],
        unsettled: Callable[[WriteRequest[S, Op]], BaseException],
    ) -> None:
        """The writer's last act: nothing more is taken; a write never sent
        fails with ``unsent()``, one sent and not applied with ``unsettled(it)``."""
        with self._submit_lock:
            self._closed = True
        unsent_requests = [*self._front, *self._drain_inbox()]  # (_CLOSE may be in front)
        sent, self._unsettled = self._unsettled, collections.deque()
        self._front.clear()
        unlanded = self._tailer.unlanded([r.write_id for r in sent])
        for request in unsent_requests:
            if isinstance(request, WriteRequest):
                futures.set_exception(request.future, unsent())
        for request in sent:
            if request.write_id in unlanded:
                futures.set_exception(request.future, unsettled(request))

    def _drain_inbox(self) -> list[WriteRequest[S, Op]]:
        """The requests left on the inbox (the writer thread, at the end)."""
        left: list[WriteRequest[S, Op]] = []
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return left
            if isinstance(item, WriteRequest):
                left.append(item)
