"""What ``pulsar-state sink run`` does with a batch of received records.

:meth:`Records.handle_batch` gives each record of a batch (:mod:`.sink_batches`)
its outcome: ``written``, ``skipped`` (a redelivery), ``poisoned`` (acknowledge
it) or ``held`` (do not: it comes back when the consumer rewinds). The runner
acknowledges the records only after it returns, that is after the commit.

1. **The in-order gate**, record by record as if they came one at a time: a
   record after its partition's floor (an earlier record held back) is held (the
   consumer's rewind brings it again, after the floor); the record at the
   floor lets the batch's later ones of its partition through.
2. **Poison records** (no key, not UTF-8, not the JSON object mapped columns
   need) go to the dead-letter topic or are logged, as before
   (:mod:`.dead_letter`); their positions are stored with the batch.
3. **One transaction** writes the rest (:mod:`.sink_batch_write`): every row
   and each partition's last position. A takeover gap found in a partition
   rolls it back; that partition's records are held in the gate (which asks
   the consumer to rewind, :func:`~.sink.hold_past_gap`), or, the gap waited
   out, written past it, and the transaction is tried again without them. A
   retriable database error (unreachable, connection lost, locked) tries the
   whole batch again in place, 0.5 s doubling to 30 s, until it succeeds or
   the runner stops: nothing was written, nothing is lost or written twice. A
   statement that refuses a record's data (``refused_data``: a value that does
   not fit its column) splits the batch in halves, in order, down to the one
   record refused, which is dead-lettered (or logged) as a poison record: the
   others are written, and one bad record cannot stall its partition. Any
   other database error stops the runner (nothing acknowledged; a restart
   resumes there).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

from pulsar_state.connectors.dead_letter import DeadLetters
from pulsar_state.connectors.sink import (
    SinkRecord,
    SqlUpsertSink,
    TakeoverGapError,
    hold_past_gap,
)
from pulsar_state.connectors.sink_batch_write import record_change, write_batch
from pulsar_state.connectors.sink_health import SinkHealth
from pulsar_state.connectors.sql_backend import Change, SinkDatabaseError
from pulsar_state.errors import MessageHeldBackError, PoisonRecordError
from pulsar_state.scheduling.in_order import InOrderGate, at_floor

__all__ = ["Records", "retrying"]

log = logging.getLogger(__name__)

T = TypeVar("T")

Redeliver = Callable[[], None] | None


def retrying(call: Callable[[], T], what: str, stop: threading.Event, health: SinkHealth) -> T:
    """``call()``, tried again in place while the database fails in a retriable way
    (0.5 s doubling to 30 s), until it succeeds or ``stop`` is set.

    Returns:
        What ``call`` returns.

    Raises:
        SinkDatabaseError: not retriable, or retriable once stopped; and what else
            ``call`` raises.
    """

    def failed(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        health.write_failed(str(exc))
        log.warning("%s not written (attempt %d), retrying: %s", what, state.attempt_number, exc)

    def retriable(exc: BaseException) -> bool:
        return isinstance(exc, SinkDatabaseError) and exc.retriable and not stop.is_set()

    def pause(seconds: float) -> None:
        stop.wait(seconds)  # a stop cuts the backoff short

    for attempt in Retrying(
        retry=retry_if_exception(retriable),
        wait=wait_exponential(multiplier=0.5, max=30),
        sleep=pause,
        before_sleep=failed,
        reraise=True,
    ):
        with attempt:
            result = call()
            health.write_succeeded()
            return result
    raise AssertionError("unreachable: tenacity returns or raises")


@dataclass
class _Item:
    record: SinkRecord
    redeliver: Redeliver
    change: Change | None = None
    outcome: str | None = None


class Records:
    """The runner's handling of received records; see the module docstring."""

    def __init__(
        self,
        sink: SqlUpsertSink,
        dead_letters: DeadLetters,
        *,
        stop: threading.Event,
        health: SinkHealth,
        gate: InOrderGate | None = None,
    ) -> None:
        self.sink = sink
        self.dead_letters = dead_letters
        self.stop = stop
        self.health = health
        self.gate = gate or InOrderGate()

    def handle(self, record: SinkRecord, redeliver: Redeliver) -> str:
        """The outcome of one record (a batch of one, see :meth:`handle_batch`)."""
        return self.handle_batch([(record, redeliver)])[0]

    def handle_batch(self, records: list[tuple[SinkRecord, Redeliver]]) -> list[str]:
        """Each record's outcome, in order: ``written``, ``skipped``, ``poisoned``
        (acknowledge it) or ``held`` (do not). See the module docstring.

        Raises:
            SinkDatabaseError: a database error that is not retriable and refuses no
                single record's data (nothing of the batch written).
        """
        items = [_Item(record, redeliver) for record, redeliver in records]
        held: set[str] = set()
        live = self._gate_pass(items)
        for item in live:
            self._prepare(item)
        if live:
            self._commit(live, held, set())
        outcomes = []
        for item in items:
            if item.record.topic in held or item.outcome is None:
                item.outcome = "held"
            elif item.outcome != "held":
                self.gate.done(item.record.topic, item.record.position)
            outcomes.append(item.outcome)
        return outcomes

    def _gate_pass(self, items: list[_Item]) -> list[_Item]:
        """The items the in-order gate lets through, as if received one at a time: one
        after its partition's floor is held (the rewind brings it again, after the
        floor), one at the floor lets the later ones through."""
        sink, gate = self.sink, self.gate
        lifted: set[str] = set()
        passed = []
        for item in items:
            topic, position = item.record.topic, item.record.position
            floor = gate.floor(topic)
            if floor is not None and topic not in lifted:
                if at_floor(position, floor):
                    lifted.add(topic)  # the floor itself: the ones after it follow
                elif position > floor:
                    try:
                        gate.check(topic, position, partial(sink.trusted_position, topic))
                    except MessageHeldBackError as exc:
                        log.info("%s", exc)
                        item.outcome = "held"
                        continue
            passed.append(item)
        return passed

    def _prepare(self, item: _Item) -> None:
        """The item's change; a poison record dead-lettered (or logged) first."""
        try:
            item.change = record_change(self.sink, item.record)
        except PoisonRecordError as exc:  # never writable: dead letter or skip
            self._poisoned(item, str(exc))

    def _poisoned(self, item: _Item, reason: str) -> None:
        record = item.record
        self.dead_letters.handle(record, reason)
        self.sink.poisoned += 1
        item.change = Change(record.topic, record.position, batch_size=record.batch_size)
        item.outcome = "poisoned"

    def _commit(self, items: list[_Item], held: set[str], past_gap: set[str]) -> None:
        """Write ``items`` in one transaction; see the module docstring."""
        while True:
            live = [item for item in items if item.record.topic not in held]
            if not live:
                return
            changes = [item.change for item in live if item.change is not None]
            first = live[0].record.position
            write = partial(write_batch, self.sink, changes, past_gap=frozenset(past_gap))
            try:
                applied = retrying(
                    write,
                    f"batch of {len(changes)} from {first}",
                    self.stop,
                    self.health,
                )
            except TakeoverGapError as gap:
                redeliver = next(i.redeliver for i in live if i.record.topic == gap.topic)
                try:
                    hold_past_gap(self.gate, gap, redeliver)
                except MessageHeldBackError as exc:
                    log.info("%s", exc)
                    held.add(gap.topic)
                    continue
                past_gap.add(gap.topic)  # waited out: passed with a warning
                continue
            except SinkDatabaseError as exc:
                if not exc.refused_data:
                    raise
                if len(live) > 1:  # find the record refused: halves, in order
                    half = len(live) // 2
                    self._commit(live[:half], held, past_gap)
                    self._commit(live[half:], held, past_gap)
                    return
                log.warning("the database refused record %s: %s", first, exc)
                self._poisoned(live[0], f"the database refused it: {exc}")
                continue
            for item, done in zip(live, applied, strict=True):
                if item.outcome is None:
                    item.outcome = "written" if done else "skipped"
            return

    def close(self) -> None:
        self.gate.close()
