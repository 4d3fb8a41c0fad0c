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
nacks it too) until the failed one comes back and succeeds. A floor is dropped
once the recorded position reaches it (the message was done, by this instance
or by another one that had the partition meanwhile).

Nothing else brings the held messages back soon: the client redelivers a
negative ack after its delay (60 s in both runtimes the kits support), and an
ack timeout is off unless the function sets one. So the gate asks the input's
consumer to redeliver (``redeliver_unacknowledged_messages``, found in the
context's ``consumers``, :func:`redeliver_function`): at once when it learns a
message is missing, then again after 0.5 s, doubling to 30 s, for as long as the
floor stands (:attr:`InOrderGate.redeliveries` counts the requests). On a
failover subscription (``retainOrdering``) the broker then rewinds to the first
unacknowledged message and the partition comes back in order. Asking again
matters: a request the broker ignores (made while it still waits to rewind
after a failover, "consumer is waiting for cursor to be rewinded") used to be
the only one, the held messages already delivered and nacked, and nothing else
coming: the partition stood still for the negative-ack delay.

A takeover is the other way past a message. When a failover subscription's
active consumer goes away (a killed instance), the broker hands the partition
to the next consumer at once, from its read position: the messages already
dispatched to the one that left come back only when the cursor is rewound, a
second later (``activeConsumerFailoverDelayTimeMillis``), after newer ones.
Seen in a clean-clone run: the instance taking over recorded 421:27 over
421:14, then skipped 421:15-26 as done (six words lost of the word count).
:meth:`InOrderGate.hold_gap` refuses a message the positions prove is not the
next one after the recorded position (:func:`first_missing`: entry ids of one
ledger are contiguous) and asks for the redelivery (as above), for up to ``gap_wait_s``;
a gap still open then (a message the subscription will not deliver: expired,
skipped, a marker) is passed with a warning, counted in ``gaps_passed``.

A batch hides the rest of its entry. A message id names its batch index, not
how many messages the batch holds: a record of ``L:E:2`` does not prove whether
``L:E:3`` exists, and an instance taking over that gets ``L:E+1:0`` first would
record it and skip ``L:E:3`` and ``L:E:4`` when the cursor is rewound. The
serialized message id carries the batch size (:func:`batch_size`); a kit records
it beside the position (:func:`marker_value`, ``L:E:B/S``) and passes it to
:meth:`InOrderGate.hold_gap`, which then holds everything after a batch whose
rest is still to come. A record without a size (written before, or a runtime
whose ids do not carry it) proves what it did before.

Each processing guarantee as Pulsar defines it (:func:`processing_guarantee`,
read from the function's details as the kits read ``retainOrdering``):
``ATLEAST_ONCE``, ``EFFECTIVELY_ONCE`` (and ``MANUAL``) never skip a failed
message, as above. Under ``ATMOST_ONCE`` Pulsar's runtime acknowledges each
message when it receives it: a failed message never comes back, and holding
the later ones (already acknowledged too) behind it would stall the partition
and lose them. :meth:`InOrderGate.run` therefore lets a failed message go under
``ATMOST_ONCE``: no floor, no redelivery; it is counted (``skipped``) and
logged, and the exception goes on to the runtime (``numUserExceptions``). A kit
does not wait for a takeover's gap under ``ATMOST_ONCE`` either: what the
instance that left had received was acknowledged and is not coming back.

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

__all__ = [
    "ATLEAST_ONCE",
    "ATMOST_ONCE",
    "EFFECTIVELY_ONCE",
    "MANUAL",
    "InOrderGate",
    "at_floor",
    "batch_size",
    "first_missing",
    "marker_value",
    "parse_marker",
    "processing_guarantee",
    "redeliver_function",
    "require_in_order",
]

log = logging.getLogger(__name__)

R = TypeVar("R")

_FAILOVER = 1  # proto.SubscriptionType.FAILOVER

#: Pulsar's processing guarantees (``proto.ProcessingGuarantees``), by name
ATLEAST_ONCE = "ATLEAST_ONCE"
ATMOST_ONCE = "ATMOST_ONCE"
EFFECTIVELY_ONCE = "EFFECTIVELY_ONCE"
MANUAL = "MANUAL"
_GUARANTEES = (ATLEAST_ONCE, ATMOST_ONCE, EFFECTIVELY_ONCE, MANUAL)  # by enum number


def processing_guarantee(context: Any) -> str:
    """The function's processing guarantee, by name (``ATLEAST_ONCE``, ``ATMOST_ONCE``,
    ``EFFECTIVELY_ONCE``, ``MANUAL``).

    Read from ``context.instance_config.function_details.processingGuarantees``,
    the protobuf enum's number as Pulsar's runtime has it (a name is taken too);
    ``ATLEAST_ONCE`` (Pulsar's default) when the context has no such field.

    Raises:
        ConfigurationError: a value that is no processing guarantee.
    """
    details = getattr(getattr(context, "instance_config", None), "function_details", None)
    value = getattr(details, "processingGuarantees", None)
    if value is None:
        return ATLEAST_ONCE
    if isinstance(value, str) and value.upper() in _GUARANTEES:
        return value.upper()
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = -1
    if not 0 <= number < len(_GUARANTEES):
        raise ConfigurationError(f"unknown processing guarantee {value!r}")
    return _GUARANTEES[number]


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


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


#: ``MessageIdData.batch_size`` (PulsarApi.proto)
_BATCH_SIZE_FIELD = 6


def batch_size(message_id: Any) -> int | None:
    """How many messages the batch of ``message_id`` holds; ``None`` when the id
    is not of a batch or does not say.

    The Python client has no call for it: it is read from the serialized id
    (``MessageIdData``, field ``batch_size``), which a received message's id carries.
    """
    serialize = getattr(message_id, "serialize", None)
    if not callable(serialize):
        return None
    try:
        data = bytes(serialize())
        at = 0
        while at < len(data):
            tag, at = _varint(data, at)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                value, at = _varint(data, at)
                if field == _BATCH_SIZE_FIELD:
                    return value if value > 0 else None
            elif wire == 2:
                length, at = _varint(data, at)
                at += length
            elif wire == 1:
                at += 8
            elif wire == 5:
                at += 4
            else:
                return None
    except (IndexError, ValueError, TypeError):
        return None
    return None


def marker_value(position: Position, size: int | None) -> str:
    """What a kit records as "processed through ``position``": ``L:E:B``, with
    ``/S`` after a batch message whose batch holds ``S`` messages."""
    if position.batch >= 0 and size is not None and size > 0:
        return f"{position}/{size}"
    return str(position)


def parse_marker(value: Any) -> tuple[Position, int | None]:
    """The position and batch size (``None``: not known) :func:`marker_value` wrote.

    Raises:
        TypeError, ValueError: a value that is no such record.
    """
    if not isinstance(value, str):
        raise TypeError(f"a processed marker is a str, got {type(value).__name__}")
    token, _, size = value.partition("/")
    return Position.parse(token), (int(size) if size else None)


def first_missing(
    done: Position, position: Position, done_batch_size: int | None = None
) -> Position | None:
    """The first message between ``done`` and ``position`` (one input partition)
    that the positions prove exists, or ``None``. Only within one ledger, whose
    entry ids are contiguous: across ledgers nothing is proved. The rest of
    ``done``'s batch is proved only when ``done_batch_size`` says how many
    messages it holds."""
    if position.ledger != done.ledger or not position > done:
        return None
    if position.entry == done.entry:  # within one batch
        if done.batch >= 0 and position.batch > done.batch + 1:
            return Position(done.ledger, done.entry, done.batch + 1)
        return None
    if done.batch >= 0 and done_batch_size is not None and done.batch + 1 < done_batch_size:
        return Position(done.ledger, done.entry, done.batch + 1)  # the rest of its batch
    if position.entry == done.entry + 1:  # the next entry, from its first message
        return Position(done.ledger, position.entry, 0) if position.batch > 0 else None
    return Position(done.ledger, done.entry + 1, -1)


def at_floor(position: Position, floor: Position) -> bool:
    """Whether ``position`` is the held message ``floor`` names: that one, or the
    first message of its entry when the floor names the entry as a whole (a
    gap's first missing entry, :func:`first_missing`: batch ``-1``). A batched
    entry's first message comes as batch ``0``, which compares after ``-1``:
    read as beyond the floor, it was held behind itself."""
    if position == floor:
        return True
    same_entry = (position.ledger, position.entry) == (floor.ledger, floor.entry)
    return same_entry and floor.batch < 0 and position.batch == 0


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
        self._closed = False
        #: per partition: the missing message a takeover waits for, since when
        self._gaps: dict[str, tuple[Position, float]] = {}
        #: messages refused because an earlier one of their partition had failed
        self.held_back = 0
        #: gaps waited out for ``gap_wait_s`` and passed
        self.gaps_passed = 0
        #: failed messages let go under ``ATMOST_ONCE``
        self.skipped = 0
        #: redeliveries asked of a consumer (at once, then with the backoff)
        self.redeliveries = 0

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
        if floor is None or not position > floor or at_floor(position, floor):
            return
        self.done(topic, recorded())
        floor = self.floor(topic)
        if floor is not None and position > floor and not at_floor(position, floor):
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
        *,
        done_batch_size: int | None = None,
    ) -> None:
        """Raise MessageHeldBackError when a message between the recorded ``done``
        and ``position`` was not delivered yet (see the module docstring); call it
        when ``done`` was recorded by another instance (a takeover).
        ``done_batch_size``: how many messages ``done``'s batch holds, when known."""
        missing = first_missing(done, position, done_batch_size)
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
        redelivery is asked (:meth:`failed`); the exception is re-raised. Under
        ``ATMOST_ONCE`` (:func:`processing_guarantee`) the failed message is let
        go instead: counted in ``skipped``, logged, the exception re-raised.
        """
        topic = context.get_current_message_topic_name()
        position = Position.from_message_id(context.get_message_id())
        try:
            return process(topic, position)
        except MessageHeldBackError:
            raise
        except Exception as exc:
            if processing_guarantee(context) == ATMOST_ONCE:
                with self._lock:
                    self.skipped += 1
                log.warning(
                    "%s: message %s failed (%s: %s); skipped, as ATMOST_ONCE allows: "
                    "it was acknowledged on receipt and does not come back",
                    topic,
                    position,
                    type(exc).__name__,
                    exc,
                )
                raise
            # whatever failed, nothing later of this partition goes first
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
        """``position`` of ``topic`` failed (or is missing): hold later messages and
        ask ``redeliver`` for it, at once, then again with the backoff while the
        floor stands (see the module docstring).

        Returns the delay of the request it scheduled (``0.0``: at once); ``None``
        when one is already pending (copies of the message failing again before
        it is made do not lengthen the backoff), the gate is closed or there is
        no consumer to ask.
        """
        with self._lock:
            floor = self._floors.get(topic)
            if floor is None or position < floor:
                self._floors[topic] = position
            scheduled = None if redeliver is None else self._schedule(topic, redeliver)
        if scheduled is None:
            return None
        timer, delay, attempt = scheduled
        log.warning(
            "%s: message %s failed or is missing (round %d); later messages held, "
            "redelivery asked in %.1f s",
            topic,
            position,
            attempt + 1,
            delay,
        )
        timer.start()
        return delay

    def _schedule(
        self, topic: str, redeliver: Callable[[], None]
    ) -> tuple[threading.Timer, float, int] | None:
        """The next request for ``topic`` (with ``self._lock`` held): at once the
        first time, then ``first_retry_s`` doubling to ``max_retry_s``.

        Returns the timer (not started), its delay and the round; ``None`` when a
        request is pending or the gate is closed.
        """
        if self._closed or topic in self._timers:
            return None
        attempt = self._failures.get(topic, 0)
        self._failures[topic] = attempt + 1
        delay = 0.0 if attempt == 0 else self.first_retry_s * 2.0 ** (attempt - 1)
        delay = min(delay, self.max_retry_s)
        timer = threading.Timer(delay, self._redeliver, (topic, redeliver))
        timer.daemon = True
        self._timers[topic] = timer
        return timer, delay, attempt

    def _redeliver(self, topic: str, redeliver: Callable[[], None]) -> None:
        """Ask for the redelivery; while the floor stands, schedule the next request."""
        with self._lock:
            self._timers.pop(topic, None)
            if self._closed or topic not in self._floors:
                return
            self.redeliveries += 1
        try:
            redeliver()
        except Exception as exc:  # the next request (or the negative-ack delay) brings it back
            log.warning("%s: could not ask for a redelivery: %s", topic, exc)
        with self._lock:
            scheduled = self._schedule(topic, redeliver) if topic in self._floors else None
        if scheduled is not None:
            timer, delay, _ = scheduled
            log.info("%s: still held; redelivery asked again in %.1f s", topic, delay)
            timer.start()

    def close(self) -> None:
        """Cancel the pending requests; no more are made."""
        with self._lock:
            self._closed = True
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
