"""Holding the state topic: an explicit state machine around the exclusive producer.

States and their named transitions (:class:`TenureState`; any other move is a
bug and raises)::

    IDLE ----acquire----> ACQUIRING --gained--> HOLDING --release--> RELEASING --> IDLE
     ^                       |  ^                  |     (IDLE --doubt--> IN_DOUBT too:
     +------failed-----------+  |                  |      a write of the last tenure
                                |                  |      landed stale)
                                |                  doubt (ack failed or timed out,
                                |                  |      send refused, fenced, or
    IN_DOUBT ---acquire---------+                  |      an own write landed stale)
       ^   (failed: IN_DOUBT again)                v
       +-------------------------------------- IN_DOUBT
    any --close--> CLOSED

IN_DOUBT means: writes were sent in a tenure that ended without an answer
for each, so whether they landed is unknown. The only way out is a new
tenure: its epoch marker, once applied, fences everything of the lost one,
so that every write sent before it has landed (and is applied) or never will
(and may run again). The writer settles them then, before it builds anything
new (:meth:`~pulsar_state.core.write.writer.Writer`).

PIP-68 access modes decide how a writer gains the topic (see
:class:`~pulsar_state.config.StateConfig`). Gaining it means: create the
exclusive producer, append an epoch marker, wait until the tailer has applied
the marker. From then on nothing of an earlier writer can land, so the local
state is the latest, and the marker's position is this writer's fencing epoch.

``"adaptive"`` (the default) queues with ``WaitForExclusive``; a holder that
keeps the topic for a whole operation timeout is frozen, cut off or an orphaned
producer, and only then is it fenced (``ExclusiveWithFencing``), at most
``max_takeovers_per_s`` times a second (:mod:`pulsar_state.core.write.takeover`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import pulsar

from pulsar_state import forks, metrics
from pulsar_state.config import StateConfig
from pulsar_state.core.log.format import epoch_message, epoch_of
from pulsar_state.core.log.tailer import Tailer
from pulsar_state.core.write.entry_sender import Acks, PublishFailedError, send_entry
from pulsar_state.core.write.takeover import TakeoverLimiter
from pulsar_state.core.write.waiting_probe import WaitingProbe
from pulsar_state.errors import (
    FencedError,
    OperationTimeoutError,
    PermissionDeniedError,
    StateClosedError,
)
from pulsar_state.position import Position

__all__ = ["Tenure", "TenureState", "TenureTransitionError"]

log = logging.getLogger(__name__)

_ACCESS = {
    "fencing": pulsar.ProducerAccessMode.ExclusiveWithFencing,
    "wait": pulsar.ProducerAccessMode.WaitForExclusive,
    "exclusive": pulsar.ProducerAccessMode.Exclusive,
}

#: queueing modes: from this part of ``max_tenure_s`` on, a holder asks whether
#: another writer waits for the topic, and holds on for a new tenure if none does
_ASK_FROM = 0.75
#: ... at most once per this part of ``max_tenure_s``
_ASK_EVERY = 0.2
#: each answer awaited a quarter of the tenure, at most this many seconds
_ASK_TIMEOUT_S = 1.0

#: adaptive mode: writers that timed out behind one holder wait a random part of
#: this before deciding to fence it. It only follows a whole operation timeout
#: (30 s by default), so a second more of failover buys far fewer double takeovers.
_TAKEOVER_SPREAD_S = 1.0


class TenureState(enum.Enum):
    """Where the writer stands with the topic (see the module docstring)."""

    IDLE = "idle"
    ACQUIRING = "acquiring"
    HOLDING = "holding"
    IN_DOUBT = "in doubt"
    RELEASING = "releasing"
    CLOSED = "closed"


#: the allowed moves: (from, to)
_MOVES = frozenset(
    {
        (TenureState.IDLE, TenureState.ACQUIRING),
        (TenureState.IN_DOUBT, TenureState.ACQUIRING),
        (TenureState.ACQUIRING, TenureState.HOLDING),
        (TenureState.ACQUIRING, TenureState.IDLE),
        (TenureState.ACQUIRING, TenureState.IN_DOUBT),
        (TenureState.HOLDING, TenureState.IN_DOUBT),
        (TenureState.IDLE, TenureState.IN_DOUBT),  # a write of the last tenure landed stale
        (TenureState.HOLDING, TenureState.RELEASING),
        (TenureState.RELEASING, TenureState.IDLE),
        *((state, TenureState.CLOSED) for state in TenureState if state is not TenureState.CLOSED),
    }
)


class TenureTransitionError(AssertionError):
    """A move the tenure's state machine does not allow: a bug of the writer."""


class Tenure:
    """The writer's exclusive producer on one topic, and the tenure it stands for.

    Used by the writer thread only (not thread-safe); :attr:`state` may be
    read from any thread.
    """

    def __init__(
        self,
        *,
        client: pulsar.Client,
        topic: str,
        tailer: Tailer[Any, Any],
        config: StateConfig,
        writer_id: str,
        compactable: bool,
        waiting_writers: Callable[..., int] | None = None,
    ) -> None:
        """``waiting_writers(timeout_s=...)``: how many producers wait for the
        topic (the broker's count of ``WaitForExclusive`` producers), asked near
        a tenure's end within the given bound (see :meth:`keep_if_alone`);
        ``None``: every tenure ends."""
        self._client = client
        self._probe = WaitingProbe(topic, waiting_writers) if waiting_writers else None
        self._next_ask = 0.0  # monotonic time from which to ask waiting_writers again
        self._topic = topic
        self._tailer = tailer
        self._config = config
        self._compactable = compactable
        self.writer_id = writer_id
        self._labels = (topic,)
        self._takeovers = (
            TakeoverLimiter(rate_per_s=config.max_takeovers_per_s, burst=config.takeover_burst)
            if config.access_mode in ("fencing", "adaptive")
            and config.max_takeovers_per_s is not None
            else None
        )
        #: the exclusive producer while we hold the topic
        self.producer: pulsar.Producer | None = None
        #: the fencing epoch (the epoch marker's position) while we hold the topic
        self.epoch: int | None = None
        #: consecutive losses of the topic: contention backoff (0 after a publish)
        self.losses = 0
        self._acquisitions = 0
        self._held_since = 0.0  # monotonic time the current tenure began
        #: adaptive mode: the holder did not let go within a wait, fence it next
        self._fence_next = False
        self._wait_epoch = 0  # the tailer's epoch when the current wait began
        self.state = TenureState.IDLE
        #: the moves made, oldest first (the last 64): what a test or a log shows
        self.history: list[tuple[TenureState, TenureState]] = []

    def _move(self, to: TenureState) -> None:
        """Make one move of the state machine (see the module docstring)."""
        move = (self.state, to)
        if move not in _MOVES:
            raise TenureTransitionError(f"tenure of {self._topic}: {move[0].value} -> {to.value}")
        self.state = to
        self.history.append(move)
        del self.history[:-64]

    @property
    def holding(self) -> bool:
        """Whether we hold the topic (and may send on :attr:`producer`)."""
        return self.state is TenureState.HOLDING

    @property
    def in_doubt(self) -> bool:
        """Whether writes of a lost tenure wait to be settled by a new one."""
        return self.state is TenureState.IN_DOUBT

    def tenure_over(self, *, busy: bool) -> bool:
        """Queueing modes: we held the topic for ``max_tenure_s`` and are not
        ``busy`` (nothing in flight), so it is the next waiting writer's turn."""
        limit = self._config.max_tenure_s
        return (
            self._config.queueing
            and limit is not None
            and self.producer is not None
            and not busy
            and time.monotonic() - self._held_since >= limit
        )

    def keep_if_alone(self) -> None:
        """Queueing modes, near the end of a tenure: if no other writer waits
        for the topic, begin a new tenure now.

        Letting go only to gain the topic again costs a lone writer a new
        producer and an epoch marker every ``max_tenure_s`` (about 10 ms of
        stalled writes on a local broker, twice a second by default). The
        broker counts the producers queued behind ours; while it counts none,
        we keep the topic. From ``_ASK_FROM`` of the tenure on, at most every
        ``_ASK_EVERY`` of it, the question goes to a :class:`WaitingProbe`,
        which asks on its own thread; a later call takes the answer if it has
        come. The writer never waits for the broker's answer. Unknown (no
        answer yet or in time, an error), or an answer about an earlier
        tenure: the tenure ends as before; no permission to read the topic's
        stats: it ends every time from then on.
        """
        limit = self._config.max_tenure_s
        probe = self._probe
        if probe is None or limit is None or not self._config.queueing or self.producer is None:
            return
        if probe.answer(tag=self.epoch) == 0 and self.producer is not None:
            self._held_since = time.monotonic()
            metrics.TENURES_KEPT.labels(*self._labels).inc()
            return
        now = time.monotonic()
        if now < self._next_ask or now - self._held_since < limit * _ASK_FROM:
            return
        self._next_ask = now + limit * _ASK_EVERY
        probe.ask(timeout_s=min(_ASK_TIMEOUT_S, limit / 4), tag=self.epoch)

    def _access_mode(self) -> Any:
        if self._config.access_mode == "adaptive":
            if self._fence_next:
                return pulsar.ProducerAccessMode.ExclusiveWithFencing
            return pulsar.ProducerAccessMode.WaitForExclusive
        return _ACCESS[self._config.access_mode]

    def acquire(self, *, closed: Callable[[], bool]) -> Position:
        """Gain the topic; the applied epoch marker's position.

        Raises :class:`FencedError` (not gained, or lost while gaining: retry),
        :class:`PermissionDeniedError` (no produce permission: retrying cannot
        help), :class:`StateClosedError` (``closed()`` became true meanwhile).
        """
        came_from = self.state
        self._move(TenureState.ACQUIRING)
        try:
            return self._gain(closed)
        except BaseException:
            if self.state is TenureState.ACQUIRING:
                self._drop_producer()
                self._move(came_from)
            raise

    def _gain(self, closed: Callable[[], bool]) -> Position:
        if self.losses:  # let the writer that just won make progress
            retry = self._config.retry
            retry.sleep(retry.backoff_s(self.losses))
        if self._fence_next:
            # writers that timed out together: spread them, then fence only if
            # nobody gained the topic since our wait began (else queue again).
            # Two whose turns fall within one takeover's latency (create the
            # fencing producer, persist its epoch marker: milliseconds) both
            # fence; the spread makes that rare and a third rarer still.
            time.sleep(random.uniform(0, _TAKEOVER_SPREAD_S))
            with contextlib.suppress(OperationTimeoutError):
                self._tailer.catch_up(self._config.operation_timeout_s)
            if self._tailer.epoch != self._wait_epoch:
                self._fence_next = False
        if not self._fence_next:
            self._wait_epoch = self._tailer.epoch
        producer = self._create_producer(closed)
        self.producer = producer
        self._held_since = time.monotonic()
        self._fence_next = False
        try:
            self._acquisitions += 1
            marker = epoch_message(self.writer_id, self._acquisitions, keep=not self._compactable)
            position = send_entry(
                producer, [marker], Acks(), timeout_s=self._config.send_timeout_s + 5
            )
            self._tailer.wait_applied(position, self._config.operation_timeout_s)
        except (pulsar.PulsarException, PublishFailedError, OperationTimeoutError) as exc:
            self._count_loss(exc)
            raise FencedError(f"lost the topic while gaining it: {exc}") from exc
        self.epoch = epoch_of(position.ledger, position.entry)
        self._move(TenureState.HOLDING)
        log.debug("writer %s holds %s with epoch %s", self.writer_id, self._topic, self.epoch)
        return position

    def _create_producer(self, closed: Callable[[], bool]) -> pulsar.Producer:
        mode = self._access_mode()
        fencing = mode == pulsar.ProducerAccessMode.ExclusiveWithFencing
        adaptive = self._config.access_mode == "adaptive"
        if (
            fencing
            and self._takeovers is not None
            and not self._takeovers.acquire(cancelled=closed)
        ):
            raise FencedError("closed while waiting for a turn to take the topic over")
        if fencing and adaptive:
            log.info(
                "writer %s: the holder of %s did not let go within the wait; taking it over",
                self.writer_id,
                self._topic,
            )
        config = self._config
        try:
            producer = forks.keep_in_children(
                self._client.create_producer(
                    self._topic,
                    access_mode=mode,
                    send_timeout_millis=int(config.send_timeout_s * 1000),
                    batching_enabled=True,
                    batching_max_messages=config.max_ops_per_write * 2 + 2000,
                    batching_max_allowed_size_in_bytes=config.max_write_bytes * 2,
                    batching_max_publish_delay_ms=3_600_000,  # entries end at flush()
                    max_pending_messages=1_000_000,
                    block_if_queue_full=True,
                    properties={"pulsar-state-writer": self.writer_id},
                )
            )
        except (pulsar.AuthorizationError, pulsar.AuthenticationError) as exc:
            raise PermissionDeniedError(
                f"not permitted to produce on {self._topic} ({exc}): grant the client's role "
                "the produce permission"
            ) from exc
        except pulsar.PulsarException as exc:
            self.losses += 1
            if isinstance(exc, pulsar.Timeout) and adaptive:
                # the holder kept the topic for a whole operation timeout: it
                # is frozen, cut off or an orphaned producer; fence it next time
                self._fence_next = True
            raise FencedError(f"could not gain the topic: {exc}") from exc
        if closed():  # close() returned while we waited for the topic
            with contextlib.suppress(pulsar.PulsarException):
                producer.close()
            raise StateClosedError("the state manager is closed")
        if fencing and adaptive:
            metrics.TAKEOVERS.labels(*self._labels).inc()
        return producer

    def _count_loss(self, exc: BaseException) -> None:
        fenced = isinstance(exc, pulsar.ProducerFenced | FencedError) or "Fenced" in str(exc)
        self.losses += 1
        if fenced:
            metrics.FENCES.labels(*self._labels).inc()
        log.debug("writer %s lost %s (%s)", self.writer_id, self._topic, exc)

    def doubt(self, exc: BaseException) -> None:
        """HOLDING (or IDLE) -> IN_DOUBT: a send or its ack failed (fenced,
        broker gone, timed out), or one of our writes landed stale
        (:class:`FencedError`: another writer took the topic without our
        producer hearing of it). Nothing more goes out on this producer: it is
        closed."""
        self._count_loss(exc)
        self._move(TenureState.IN_DOUBT)
        self._drop_producer()

    def release_if_over(self) -> None:
        """HOLDING past ``max_tenure_s`` with nothing in flight: begin a new
        tenure if no other writer waits (the writer slept through the window),
        else let the topic go (writers queued behind us go first)."""
        if self.holding and self.tenure_over(busy=False):
            self.keep_if_alone()
            if self.tenure_over(busy=False):
                self.release()

    def release(self) -> None:
        """HOLDING -> RELEASING -> IDLE: let the topic go, every write answered."""
        self._move(TenureState.RELEASING)
        self._drop_producer()
        self._move(TenureState.IDLE)

    def close(self) -> None:
        """Any state -> CLOSED: let the producer go, for good (idempotent)."""
        if self.state is not TenureState.CLOSED:
            self._move(TenureState.CLOSED)
        self._drop_producer()

    def _drop_producer(self) -> None:
        """Close the producer, if it is still connected (a fenced one is closed
        by the broker already)."""
        producer, self.producer, self.epoch = self.producer, None, None
        if producer is not None and producer.is_connected():
            with contextlib.suppress(pulsar.PulsarException):
                producer.close()
