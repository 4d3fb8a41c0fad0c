"""Never past a failed message: in-order processing for functions that record positions.

Pulsar 4.0's Python runtime (``python_instance.py``) catches an exception from
``process``, negatively acknowledges that message and goes on with the next
one. The client redelivers a negative ack only after its redelivery delay (60 s
by default; the runtime does not set it), that is after later messages. A kit
that records "processed up to position P" per input partition (the stateful
kit, the SQL sink) would record a later message's position first and then skip
the failed message as already done: a lost update.

:class:`InOrderGate` keeps, per input partition, the position of the first
message that failed (its *floor*). Every later message of that partition is
refused (:class:`~pulsar_state.errors.MessageHeldBackError`, so the runtime
nacks it too) until the failed one comes back and succeeds. The gate also asks
the input's consumer to redeliver, after a backoff (0.5 s doubling to 30 s):
on a failover subscription (``retainOrdering``) the client then rewinds to the
first unacknowledged message, so the partition comes back in order without
waiting for the nack delay. A floor is dropped once the recorded position
reaches it (the message was done, by this instance or by another one that had
the partition meanwhile).

A takeover is the other way past a message. When a failover subscription's
active consumer goes away (a killed instance), the broker hands the partition
to the next consumer at once, from its read position: the messages already
dispatched to the one that left come back only when the cursor is rewound, a
second later (``activeConsumerFailoverDelayTimeMillis``), after newer ones.
Seen in a clean-clone run: the instance taking over recorded 421:27 over
421:14, then skipped 421:15-26 as done (six words lost of the word count).
:meth:`InOrderGate.hold_gap` refuses a message the positions prove is not the
next one after the recorded position (:func:`first_missing`: entry ids of one
ledger are contiguous) and asks for the redelivery, for up to ``gap_wait_s``;
a gap still open then (a message the subscription will not deliver: expired,
skipped, a marker) is passed with a warning, counted in ``gaps_passed``.

:func:`require_in_order` is the deploy-time check: one active consumer per
partition (``retainOrdering: true`` or a failover subscription), or positions
cannot mean "everything before is done".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pulsar_state.errors import ConfigurationError, MessageHeldBackError
from pulsar_state.position import Position
from pulsar_state.topic_names import partitioned_base

__all__ = ["InOrderGate", "first_missing", "redeliver_function", "require_in_order"]

log = logging.getLogger(__name__)

R = TypeVar("R")

_FAILOVER = 1  # proto.SubscriptionType.FAILOVER


def require_in_order(context: Any, what: str) -> None:
    """ConfigurationError unless the function gets each input partition in order."""
    details = context.instance_config.function_details
    in_order = bool(details.retainOrdering) or (int(details.source.subscriptionType) == _FAILOVER)
    if not in_order:
        raise ConfigurationError(
            f"a {what} needs in-order delivery: deploy it with "
            "retainOrdering: true (--retain-ordering; a failover subscription)"
        )


def redeliver_function(context: Any, topic: str) -> Callable[[], None] | None:
    """The call that rewinds the consumer of ``topic`` (an input or one of its partitions).

    The Python runtime's context keeps its consumers by input topic
    (``context.consumers``); ``None`` when it is not found (then the client's
    negative-ack delay brings the message back).
    """
    consumers = getattr(context, "consumers", None)
    if not isinstance(consumers, dict) or not consumers:
        return None
    consumer = consumers.get(topic) or consumers.get(partitioned_base(topic))
    if consumer is None and len(consumers) == 1:
        consumer = next(iter(consumers.values()))
    redeliver = getattr(consumer, "redeliver_unacknowledged_messages", None)
    return redeliver if callable(redeliver) else None


def first_missing(done: Position, position: Position) -> Position | None:
    """The first message between ``done`` and ``position`` (one input partition)
    that the positions prove exists, or ``None``. Only within one ledger, whose
    entry ids are contiguous: across ledgers nothing is proved."""
    if position.ledger != done.ledger or not position > done:
        return None
    if position.entry == done.entry:  # within one batch
        if done.batch >= 0 and position.batch > done.batch + 1:
            return Position(done.ledger, done.entry, done.batch + 1)
        return None
    if position.entry == done.entry + 1:  # the next entry, from its first message
        return Position(done.ledger, position.entry, 0) if position.batch > 0 else None
    return Position(done.ledger, done.entry + 1, -1)


class InOrderGate:
    """Per input partition: the first failed message, and the messages held behind it."""

    def __init__(
        self, *, first_retry_s: float = 0.5, max_retry_s: float = 30.0, gap_wait_s: float = 60.0
    ) -> None:
        self.first_retry_s = first_retry_s
        self.max_retry_s = max_retry_s
        self.gap_wait_s = gap_wait_s
        self._lock = threading.Lock()
        self._floors: dict[str, Position] = {}
        self._failures: dict[str, int] = {}
        self._timers: dict[str, threading.Timer] = {}
        #: per partition: the missing message a takeover waits for, since when
        self._gaps: dict[str, tuple[Position, float]] = {}
        #: messages refused because an earlier one of their partition had failed
        self.held_back = 0
        #: gaps waited out for ``gap_wait_s`` and passed
        self.gaps_passed = 0

    def floor(self, topic: str) -> Position | None:
        """The first failed, not yet done, message of ``topic``."""
        with self._lock:
            return self._floors.get(topic)

    def check(
        self, topic: str, position: Position, recorded: Callable[[], Position | None]
    ) -> None:
        """Raise MessageHeldBackError when an earlier message of ``topic`` failed and is not done.

        ``recorded`` reads the position recorded for ``topic`` (called only when
        this message would be held): a floor it reaches was done meanwhile.
        """
        floor = self.floor(topic)
        if floor is None or not position > floor:
            return
        self.done(topic, recorded())
        floor = self.floor(topic)
        if floor is not None and position > floor:
            with self._lock:
                self.held_back += 1
            raise MessageHeldBackError(
                f"{topic}: message {position} is held back until {floor}, which failed, "
                "is redelivered and succeeds"
            )

    def hold_gap(
        self,
        topic: str,
        position: Position,
        done: Position,
        redeliver: Callable[[], None] | None,
    ) -> None:
        """Raise MessageHeldBackError when a message between the recorded ``done``
        and ``position`` was not delivered yet (see the module docstring); call it
        when ``done`` was recorded by another instance (a takeover)."""
        missing = first_missing(done, position)
        if missing is None:
            return
        now = time.monotonic()
        with self._lock:
            waited, since = self._gaps.get(topic, (missing, now))
            if waited != missing:
                since = now
            self._gaps[topic] = (missing, since)
            passed = now - since >= self.gap_wait_s
            if passed:
                del self._gaps[topic]
                self.gaps_passed += 1
            else:
                self.held_back += 1
        if passed:
            log.warning(
                "%s: %s was not delivered within %.0f s of %s; going on without it",
                topic,
                missing,
                self.gap_wait_s,
                position,
            )
            return
        self.failed(topic, missing, redeliver)
        raise MessageHeldBackError(
            f"{topic}: message {position} is held back until {missing}, recorded as not "
            f"done yet (after {done}), is delivered"
        )

    def run(self, context: Any, process: Callable[[str, Position], R]) -> R:
        """``process(topic, position)`` for the runtime's current message.

        If it fails (other than by being held back), nothing later of that
        partition goes first: the message becomes the partition's floor and a
        redelivery is asked (:meth:`failed`); the exception is re-raised.
        """
        topic = context.get_current_message_topic_name()
        position = Position.from_message_id(context.get_message_id())
        try:
            return process(topic, position)
        except MessageHeldBackError:
            raise
        except Exception:  # whatever failed, nothing later of this partition goes first
            self.failed(topic, position, redeliver_function(context, topic))
            raise

    def done(self, topic: str, position: Position | None) -> None:
        """``topic`` is done through ``position``: a floor at or before it is lifted."""
        if position is None:
            return
        with self._lock:
            floor = self._floors.get(topic)
            if floor is not None and not floor > position:
                del self._floors[topic]
                self._failures.pop(topic, None)
                timer = self._timers.pop(topic, None)
                if timer is not None:
                    timer.cancel()
                log.info("%s: %s done, the messages after it flow again", topic, floor)

    def failed(
        self, topic: str, position: Position, redeliver: Callable[[], None] | None
    ) -> float | None:
        """``position`` of ``topic`` failed: hold later messages, ask for a redelivery.

        Returns the delay of the redelivery it scheduled; ``None`` when one is
        already pending (copies of the message failing again before it fires do
        not lengthen the backoff) or there is no consumer to ask.
        """
        with self._lock:
            floor = self._floors.get(topic)
            if floor is None or position < floor:
                self._floors[topic] = position
            if redeliver is None or topic in self._timers:
                return None
            attempt = self._failures.get(topic, 0)
            self._failures[topic] = attempt + 1
            delay: float = min(self.first_retry_s * 2.0**attempt, self.max_retry_s)
            timer = threading.Timer(delay, self._redeliver, (topic, redeliver))
            timer.daemon = True
            self._timers[topic] = timer
        log.warning(
            "%s: message %s failed (round %d); later messages held, redelivery in %.1f s",
            topic,
            position,
            attempt + 1,
            delay,
        )
        timer.start()
        return delay

    def _redeliver(self, topic: str, redeliver: Callable[[], None]) -> None:
        with self._lock:
            self._timers.pop(topic, None)
        try:
            redeliver()
        except Exception as exc:  # the negative-ack delay still brings it back
            log.warning("%s: could not ask for a redelivery: %s", topic, exc)

    def close(self) -> None:
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
