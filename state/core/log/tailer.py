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
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import pulsar
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from pulsar_state import forks, metrics
from pulsar_state.config import StateConfig
from pulsar_state.core import futures
from pulsar_state.core.log.replay import AppliedWrite, LogReplay
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.errors import (
    InvalidMessageError,
    OperationTimeoutError,
    PermissionDeniedError,
    PulsarStateError,
    StateClosedError,
    fresh,
)
from pulsar_state.position import Position
from pulsar_state.retry import RetryPolicy, is_transient

__all__ = ["AppliedWrite", "Tailer"]  # AppliedWrite: re-exported from replay

log = logging.getLogger(__name__)

S = TypeVar("S")
Op = TypeVar("Op")

_ACK_EVERY_S = 1.0
#: nothing received this long while someone waits for a position: the consumer
#: is taken for stalled and subscribed again (see Tailer._stalled)
_STALL_S = 10.0


#: backoff between attempts to ask for the last message id (e.g. while the
#: broker restarts); bounded by the caller's timeout, not by attempts
_LAST_ID_RETRY = RetryPolicy(max_attempts=None, initial_backoff_s=0.02, max_backoff_s=1.0)
_PERMANENT_RESULTS = frozenset(
    {
        pulsar.Result.AlreadyClosed,
        pulsar.Result.AuthorizationError,
        pulsar.Result.AuthenticationError,
        pulsar.Result.TopicNotFound,
    }
)


class Tailer(LogReplay[S, Op]):
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
        read_compacted: bool | None = None,
    ) -> None:
        super().__init__(
            topic=topic,
            codec=codec,
            applier=applier,
            state=state,
            on_invalid=config.on_invalid_message,
            start=start,
            start_epoch=start_epoch,
        )
        self._config = config
        self._closed = False
        self._waiters: list[tuple[Position, int, Future[Position]]] = []
        #: threads in wait_applied (notified when ``applied`` moves; none: no notify)
        self._sleepers = 0
        self._seq = itertools.count()
        self._last_msg: Any = None  # the last received message (native), to acknowledge
        self._last_ack = time.monotonic()
        self._m_lag = metrics.LAG_MESSAGES.labels(topic)
        self._client = client
        self._read_compacted = read_compacted
        self._start = start
        # a wait for a position not applied yet, and since when nothing came
        self._wanted: Position | None = None
        self._quiet_since = time.monotonic()
        self.resubscribed = 0
        self._consumer = self._subscribe(client, topic, config, read_compacted)
        #: whether the client asks for the last message id with a callback
        #: (pulsar-client 3.6 on); else :meth:`ask_last_position` may not be used
        self.asks_async = hasattr(
            getattr(self._consumer, "_consumer", None), "get_last_message_id_async"
        )
        if start is not None:  # resume after a snapshot
            self._consumer.seek(pulsar.MessageId(-1, start.ledger, start.entry, start.batch))
        self._thread = threading.Thread(
            target=self._run, name=f"pss-tail-{topic.rsplit('/', 1)[-1]}", daemon=True
        )

    def _subscribe(
        self,
        client: pulsar.Client,
        topic: str,
        config: StateConfig,
        read_compacted: bool | None,
    ) -> pulsar.Consumer:
        """The tail subscription, tried again (under a new name) after a transient
        failure, for up to twice ``operation_timeout_s``: a subscribe that meets
        the topic closing (an unload, a bundle move) can stall in the C++ client
        until its operation timeout, since the client skips its own retry while
        the connection it subscribed on is still set. A subscription such an
        attempt left on the broker has no consumer and is reaped by the next
        manager that starts (``reap_subscriptions``)."""
        # each attempt may wait out the client's operation timeout: bounded by time
        retry = RetryPolicy(
            max_attempts=None,
            deadline_s=2 * config.operation_timeout_s,
            initial_backoff_s=0.05,
            max_backoff_s=1.0,
        )

        def subscribe() -> pulsar.Consumer:
            self.subscription = f"{config.subscription_prefix}{uuid.uuid4().hex[:16]}"
            try:
                return forks.keep_in_children(
                    client.subscribe(
                        topic,
                        self.subscription,
                        consumer_type=pulsar.ConsumerType.Exclusive,
                        initial_position=pulsar.InitialPosition.Earliest,
                        is_read_compacted=(
                            config.read_compacted if read_compacted is None else read_compacted
                        ),
                        receiver_queue_size=1000,
                        properties={"pulsar-state-role": "tail"},
                    )
                )
            except (pulsar.AuthorizationError, pulsar.AuthenticationError) as exc:
                raise PermissionDeniedError(
                    f"not permitted to consume {topic} ({exc}): grant the client's role the "
                    "consume permission"
                ) from exc

        def warn(state: RetryCallState) -> None:
            log.warning(
                "subscribing to %s failed (%s), attempt %d; trying again",
                topic,
                state.outcome.exception() if state.outcome else None,
                state.attempt_number,
            )

        consumer: pulsar.Consumer = retry.retrying(
            retry=retry_if_exception(is_transient), before_sleep=warn
        )(subscribe)
        return consumer

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
        with self._cond:  # the consumer a resubscribe installed before _closed (see there)
            consumer = self._consumer
        try:
            consumer.unsubscribe()
        except pulsar.PulsarException:
            log.debug("unsubscribe of %s failed", self.subscription, exc_info=True)
        with contextlib.suppress(pulsar.PulsarException):
            consumer.close()

    # -- positions ------------------------------------------------------------

    def last_position(self, timeout_s: float | None = None) -> Position:
        """The topic's last message id, asked of the broker (one round trip).

        A transient failure (the broker restarting, a lookup in flight) is
        retried with backoff for up to ``timeout_s`` (default: the operation
        timeout); a permanent one (closed, not authorized) is raised at once.
        The answer sets the lag gauge (:meth:`note_lag`).
        """
        self.check_usable()
        bound = self._config.operation_timeout_s if timeout_s is None else timeout_s

        def ask() -> Position:
            self.check_usable()
            position = Position.from_message_id(self._consumer.get_last_message_id())
            self.note_lag(position)
            return position

        started = time.monotonic()
        try:
            return ask()  # the common case: one round trip, no retry machinery
        except pulsar.PulsarException as exc:
            if not is_transient(exc):
                raise OperationTimeoutError(f"could not get the last message id: {exc}") from exc
        time.sleep(min(_LAST_ID_RETRY.backoff_s(1), bound))
        retrying = Retrying(
            stop=stop_after_delay(max(0.0, bound - (time.monotonic() - started))),
            wait=_LAST_ID_RETRY.wait(),
            retry=retry_if_exception(is_transient),
            reraise=True,
        )
        try:
            position: Position = retrying(ask)
        except pulsar.PulsarException as exc:
            raise OperationTimeoutError(f"could not get the last message id: {exc}") from exc
        return position

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
            self._want(target)
            while not self.applied.covers(target):
                self.check_usable()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise OperationTimeoutError(
                        f"state did not reach {target} within {timeout_s:.1f}s "
                        f"(applied {self.applied})"
                    )
                self._sleepers += 1
                try:
                    self._cond.wait(remaining)
                finally:
                    self._sleepers -= 1
            return self.applied

    def when_applied(self, target: Position) -> Future[Position]:
        """A future completing once local state includes ``target``."""
        fut: Future[Position] = Future()
        with self._cond:
            if self.applied.covers(target):
                futures.set_result(fut, self.applied)
            elif self.failure is not None or self._closed:
                futures.set_exception(fut, self.failure or StateClosedError("closed"))
            else:
                self._want(target)
                heapq.heappush(self._waiters, (target, next(self._seq), fut))
        return fut

    def _want(self, target: Position) -> None:
        """Under the lock: someone waits for ``target`` (see :meth:`_stalled`)."""
        if self._wanted is None or self.applied.covers(self._wanted):
            self._quiet_since = time.monotonic()  # the clock starts with the wait
        if self._wanted is None or not self._wanted.covers(target):
            self._wanted = target

    def ask_last_position(
        self,
        on_result: Callable[[Position | None, PulsarStateError | None], None],
        timeout_s: float | None = None,
    ) -> None:
        """:meth:`last_position` without a thread of ours waiting on it (only
        when :attr:`asks_async`: an older client has only the blocking call,
        which a caller must then make on a thread of its own).

        ``on_result(position, None)`` or ``on_result(None, error)`` runs on the
        client's thread. Transient failures are retried on a timer within
        ``timeout_s``.
        """
        self.check_usable()
        native = self._consumer._consumer
        deadline = time.monotonic() + (
            self._config.operation_timeout_s if timeout_s is None else timeout_s
        )
        attempts = itertools.count(1)

        def ask() -> None:
            if self._closed:
                on_result(None, StateClosedError("the state manager is closed"))
                return
            native.get_last_message_id_async(done)

        def done(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            if result == pulsar.Result.Ok:
                position = Position.from_message_id(msg_id)
                self.note_lag(position)
                on_result(position, None)
                return
            backoff = _LAST_ID_RETRY.backoff_s(next(attempts))
            if result in _PERMANENT_RESULTS or time.monotonic() + backoff > deadline:
                error = OperationTimeoutError(f"could not get the last message id: {result}")
                on_result(None, error)
                return
            timer = threading.Timer(backoff, ask)
            timer.daemon = True
            timer.start()

        ask()

    def note_lag(self, target: Position) -> None:
        """Set the lag gauge: entries from the applied position to ``target``."""
        applied = self.applied
        if applied.covers(target):
            self._m_lag.set(0)
        elif target.ledger == applied.ledger:
            self._m_lag.set(target.entry - applied.entry)

    def catch_up(self, timeout_s: float) -> Position:
        """Wait until every write acknowledged before this call is applied."""
        deadline = time.monotonic() + timeout_s
        target = self.last_position(timeout_s)
        return self.wait_applied(target, max(0.0, deadline - time.monotonic()))

    def check_usable(self) -> None:
        """Raise what stopped the tailer, or StateClosedError once closed."""
        if self.failure is not None:
            raise fresh(self.failure)
        if self._closed:
            raise StateClosedError("the state manager is closed")

    # -- the loop -------------------------------------------------------------

    def _run(self) -> None:
        # the client's native receive: the wrapper's adds a type check and a
        # wrapping object per message (every message of the topic, the
        # writer's own included, comes by here); the replay reads both alike
        native = getattr(self._consumer, "_consumer", None)
        receive = native.receive if native is not None else self._consumer.receive
        while not self._closed:
            try:
                msg = receive(50)
            except pulsar.Timeout:
                self.flush()
                self._maybe_ack(force=True)
                if self._stalled():
                    receive = self._resubscribe(receive)
                continue
            except pulsar.AlreadyClosed:
                break
            except pulsar.PulsarException:
                log.warning("receive on %s failed; retrying", self.topic, exc_info=True)
                time.sleep(0.1)
                continue
            try:
                self.feed(msg)
            except InvalidMessageError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # a bug: never die silently
                log.exception("tailer of %s stopped", self.topic)
                self._fail(PulsarStateError(f"tailer stopped: {exc!r}"))
                return
            self._last_msg = msg
            self._quiet_since = time.monotonic()
            self._maybe_ack()

    def _stalled(self) -> bool:
        """Whether a wait for a position the broker has is getting nowhere: nothing
        received for ``_STALL_S`` while someone waits. A subscribe that lands while
        the broker closes the topic for an unload can leave a consumer the broker
        acknowledged on the closing topic and then never feeds nor disconnects
        (seen with unloads 20 times a second: a map opening waited out its whole
        catch-up with nothing applied)."""
        wanted = self._wanted
        return (
            wanted is not None
            and not self.applied.covers(wanted)
            and time.monotonic() - self._quiet_since > _STALL_S
        )

    def _resubscribe(self, receive: Callable[[int], Any]) -> Callable[[int], Any]:
        """A new tail subscription from the last message received (or the start),
        in place of a stalled one; the replay skips what comes again. Returns the
        receive call to use (the old one if subscribing failed)."""
        self._quiet_since = time.monotonic()
        resume = self._last_received if self._last_received is not None else self._start
        log.warning(
            "the tail of %s received nothing for %.0f s while waited for (applied %s, "
            "wanted %s); subscribing again from %s",
            self.topic,
            _STALL_S,
            self.applied,
            self._wanted,
            resume or "the start",
        )
        old, old_name = self._consumer, self.subscription
        try:
            new = self._subscribe(self._client, self.topic, self._config, self._read_compacted)
            if resume is not None and not resume.is_start:
                new.seek(pulsar.MessageId(-1, resume.ledger, resume.entry, resume.batch))
        except (pulsar.PulsarException, PulsarStateError) as exc:
            log.warning("subscribing to %s again failed (%s); waiting on", self.topic, exc)
            self.subscription = old_name
            return receive
        with self._cond:  # against close(), which ends whichever consumer it finds
            closing = self._closed
            if not closing:
                self._consumer, self._last_msg = new, None
        if closing:  # close() ended the old one (it gave up waiting for us)
            old = new
        else:
            self.resubscribed += 1
        for end in (old.unsubscribe, old.close):  # a leftover is reaped at the next start
            with contextlib.suppress(pulsar.PulsarException):
                end()
        native = getattr(new, "_consumer", None)
        fresh: Callable[[int], Any] = native.receive if native is not None else new.receive
        return fresh

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

    def _advanced(self) -> None:
        """Under the lock, after ``applied`` moved: wake waiters."""
        if self._sleepers:
            self._cond.notify_all()
        while self._waiters and self.applied.covers(self._waiters[0][0]):
            _, _, fut = heapq.heappop(self._waiters)
            futures.set_result(fut, self.applied)

    def _fail(self, exc: PulsarStateError) -> None:
        with self._cond:
            self.failure = exc
            self._cond.notify_all()
        self._fail_waiters(exc)
        self._call_hook(self.on_stopped, "stop")

    def _fail_waiters(self, exc: PulsarStateError) -> None:
        with self._cond:
            waiters, self._waiters = self._waiters, []
        for _, _, fut in waiters:
            futures.set_exception(fut, exc)
