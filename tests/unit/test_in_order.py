"""The in-order gate (never past a failed message) and the kits' in-order requirement."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from pulsar_state.connectors.sink import SinkRecord, SqlUpsertSink
from pulsar_state.connectors.sink_function import SinkFunction
from pulsar_state.errors import ConfigurationError, MessageHeldBackError, PoisonRecordError
from pulsar_state.functions.stateful import StatefulFunction
from pulsar_state.position import Position
from pulsar_state.scheduling.in_order import InOrderGate, redeliver_function

T = "persistent://public/default/in-partition-0"


def pos(entry: int) -> Position:
    return Position(7, entry, -1)


def test_later_messages_are_held_until_the_failed_one_succeeds() -> None:
    gate = InOrderGate(first_retry_s=60)
    gate.check(T, pos(1), lambda: None)  # nothing failed: passes
    gate.failed(T, pos(2), None)
    gate.check(T, pos(2), lambda: pos(1))  # the failed one itself may go again
    gate.check(T, pos(1), lambda: pos(1))  # an earlier one too
    with pytest.raises(MessageHeldBackError, match="held back until 7:2:-1"):
        gate.check(T, pos(3), lambda: pos(1))
    gate.check(T.replace("-0", "-1"), pos(3), lambda: None)  # another partition flows
    gate.failed(T, pos(2), None)  # failed again: still held
    with pytest.raises(MessageHeldBackError):
        gate.check(T, pos(5), lambda: pos(1))
    assert gate.held_back == 2
    gate.done(T, pos(2))
    gate.check(T, pos(3), lambda: pos(2))
    assert gate.floor(T) is None


def test_a_floor_done_elsewhere_is_lifted() -> None:
    """After a failover another instance did the failed message: its record lifts the floor."""
    gate = InOrderGate(first_retry_s=60)
    gate.failed(T, pos(2), None)
    gate.check(T, pos(9), lambda: pos(8))  # recorded through 8: 2 was done, 9 passes
    assert gate.floor(T) is None


def test_the_earliest_failure_is_the_floor() -> None:
    gate = InOrderGate(first_retry_s=60)
    gate.failed(T, pos(5), None)
    gate.failed(T, pos(3), None)
    assert gate.floor(T) == pos(3)


def test_redelivery_is_asked_at_once_then_again_while_the_message_is_missing() -> None:
    """The first request at once; while the floor stands, again with the backoff
    (nothing else needs to fail or be held); none after the floor is lifted."""
    asked = threading.Semaphore(0)
    gate = InOrderGate(first_retry_s=0.01, max_retry_s=0.02)
    calls = [0]

    def ask() -> None:
        calls[0] += 1
        if calls[0] == 4:
            gate.done(T, pos(2))  # the message came back and was done
        asked.release()

    assert gate.failed(T, pos(2), ask) == 0.0, "asked at once"
    assert gate.failed(T, pos(2), ask) is None  # a copy failing while one is pending
    for _ in range(4):
        assert asked.acquire(timeout=5), "asked again while the message was missing"
    assert gate.redeliveries == 4
    assert gate.floor(T) is None
    assert not gate._timers, "no more requests once the floor is lifted"
    gate.close()


def test_the_backoff_doubles_to_its_cap_and_a_closed_gate_asks_no_more() -> None:
    gate = InOrderGate(first_retry_s=0.5, max_retry_s=30)
    delays = []
    for _ in range(9):
        with gate._lock:
            gate._timers.clear()  # as if the last request had been made
            scheduled = gate._schedule(T, lambda: None)
        assert scheduled is not None
        delays.append(scheduled[1])
    assert delays == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    gate.close()
    assert gate.failed(T.replace("-0", "-1"), pos(2), lambda: None) is None, "closed"


def test_the_consumer_of_the_partition_is_found() -> None:
    calls: list[str] = []
    consumer = SimpleNamespace(redeliver_unacknowledged_messages=lambda: calls.append("in"))
    other = SimpleNamespace(redeliver_unacknowledged_messages=lambda: calls.append("other"))
    context = SimpleNamespace(consumers={"persistent://public/default/in": consumer, "x": other})
    redeliver = redeliver_function(context, T)
    assert redeliver is not None
    redeliver()
    assert calls == ["in"]
    assert redeliver_function(SimpleNamespace(), T) is None


def _context(*, retain_ordering: bool, subscription_type: int) -> Any:
    details = SimpleNamespace(
        retainOrdering=retain_ordering,
        source=SimpleNamespace(subscriptionType=subscription_type),
    )
    message_id = SimpleNamespace(ledger_id=lambda: 7, entry_id=lambda: 1, batch_index=lambda: -1)
    return SimpleNamespace(
        instance_config=SimpleNamespace(function_details=details),
        get_current_message_topic_name=lambda: T,
        get_message_id=lambda: message_id,
        get_user_config_map=lambda: {"database": ":memory:"},
    )


def test_run_floors_the_current_message_when_processing_fails() -> None:
    """The kits' process(): the runtime's current message, held behind when it fails."""
    gate = InOrderGate(first_retry_s=60)
    context = _context(retain_ordering=True, subscription_type=0)
    assert gate.run(context, lambda topic, position: (topic, position)) == (T, pos(1))
    assert gate.floor(T) is None

    def held(_topic: str, _position: Position) -> None:
        raise MessageHeldBackError("held")

    with pytest.raises(MessageHeldBackError):
        gate.run(context, held)
    assert gate.floor(T) is None, "a held-back message is not a failure of its own"

    def fails(_topic: str, _position: Position) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        gate.run(context, fails)
    assert gate.floor(T) == pos(1)
    gate.close()


@pytest.mark.parametrize("kit", [SinkFunction, StatefulFunction])
def test_kits_refuse_a_deployment_without_in_order_delivery(kit: type) -> None:
    function = kit()
    with pytest.raises(ConfigurationError, match="needs in-order delivery"):
        function.process(b"x", _context(retain_ordering=False, subscription_type=0))
    function.close()


def test_poison_records_are_recognized_before_the_database() -> None:
    def record(key: str | bytes | None, value: bytes) -> SinkRecord:
        return SinkRecord(topic=T, key=key, value=value, position=pos(1))

    with pytest.raises(PoisonRecordError, match="no key"):
        SqlUpsertSink.validate(record(None, b"v"))
    with pytest.raises(PoisonRecordError, match="key is not UTF-8"):
        SqlUpsertSink.validate(record(b"k\xfe", b"v"))
    with pytest.raises(PoisonRecordError, match="value is not UTF-8"):
        SqlUpsertSink.validate(record("k", b"\xff"))
    SqlUpsertSink.validate(record("k", b""))  # a delete
    assert issubclass(PoisonRecordError, ValueError)


# -- a takeover must not record past messages still to come (failover reorder) --


def test_first_missing_is_proved_within_a_ledger_only() -> None:
    from pulsar_state.scheduling.in_order import first_missing  # noqa: PLC0415

    assert first_missing(pos(14), pos(15)) is None  # the next entry
    assert first_missing(pos(14), pos(27)) == pos(15)
    assert first_missing(pos(14), Position(7, 15, 0)) is None  # a batch, from its start
    assert first_missing(pos(14), Position(7, 15, 2)) == Position(7, 15, 0)
    assert first_missing(Position(7, 15, 0), Position(7, 15, 1)) is None
    assert first_missing(Position(7, 15, 0), Position(7, 15, 3)) == Position(7, 15, 1)
    assert first_missing(pos(14), Position(8, 0, -1)) is None  # another ledger: unknown
    assert first_missing(pos(14), pos(14)) is None
    assert first_missing(pos(14), pos(3)) is None


def test_the_first_message_of_a_batched_missing_entry_passes_its_floor() -> None:
    """A gap's floor names the missing entry as a whole (batch -1); when that entry
    is a batch its first message comes as batch 0, which compares after -1. It was
    held behind its own floor until the gap was waited out (60 s by default)."""
    gate = InOrderGate(first_retry_s=60)
    with pytest.raises(MessageHeldBackError):
        gate.hold_gap(T, pos(27), pos(14), None)
    assert gate.floor(T) == pos(15)
    with pytest.raises(MessageHeldBackError):  # a later message of that batch: still held
        gate.check(T, Position(7, 15, 1), lambda: pos(14))
    gate.check(T, Position(7, 15, 0), lambda: pos(14))  # the missing entry's first message
    gate.hold_gap(T, Position(7, 15, 0), pos(14), None)
    gate.done(T, Position(7, 15, 0))
    assert gate.floor(T) is None
    gate.check(T, Position(7, 15, 1), lambda: Position(7, 15, 0))  # the batch's rest flows
    gate.close()


def test_a_gap_is_held_until_delivered_then_waited_out() -> None:
    asked = threading.Event()
    gate = InOrderGate(first_retry_s=0.05, gap_wait_s=0.3)
    with pytest.raises(MessageHeldBackError, match="held back until 7:15:-1"):
        gate.hold_gap(T, pos(27), pos(14), asked.set)
    assert asked.wait(5), "the redelivery was asked"
    with pytest.raises(MessageHeldBackError):  # the next ones: held behind the floor
        gate.check(T, pos(28), lambda: pos(14))
    gate.hold_gap(T, pos(15), pos(14), asked.set)  # the missing one itself passes
    gate.done(T, pos(15))
    assert gate.floor(T) is None
    # a message the subscription never delivers: passed after gap_wait_s, counted
    with pytest.raises(MessageHeldBackError):
        gate.hold_gap(T, pos(40), pos(30), None)
    time.sleep(0.35)
    gate.hold_gap(T, pos(40), pos(30), None)
    assert gate.gaps_passed == 1
    gate.close()


class _Map:
    """The stateful kit's map calls on a dict (one process, no broker)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, latest: bool = False) -> Any:
        from concurrent.futures import Future  # noqa: PLC0415

        fut: Future[Any] = Future()
        fut.set_result(self.data.get(key))
        return fut

    def transact(self, commit: Any, *, reader: Any = None) -> Any:
        from concurrent.futures import Future  # noqa: PLC0415

        from pulsar_state.map.pulsar_map import MapOp  # noqa: PLC0415

        for op in commit(dict(self.data)):
            if op.value is MapOp.DELETE:
                self.data.pop(op.key, None)
            else:
                self.data[op.key] = op.value
        fut: Future[Any] = Future()
        fut.set_result(None if reader is None else reader(dict(self.data)))
        return fut

    def close(self) -> None:
        pass


def test_an_instance_taking_over_counts_the_messages_redelivered_after_newer_ones() -> None:
    """The clean-clone run's failover: instance A recorded 7:14 and was killed with
    7:15-26 dispatched to it; instance B got 7:27 first, and 7:15-26 only when the
    cursor was rewound. B must not record 7:27 before 7:15-26 are counted."""
    import logging  # noqa: PLC0415

    class Count(StatefulFunction):
        def handle(self, input: Any, state: Any, context: Any) -> Any:
            state.incr_counter("n", 1)

    shared = _Map()
    shared.data["processed/" + T] = str(pos(14))
    shared.data["counter/n"] = 15
    b = Count()
    b._map = shared  # type: ignore[assignment]  # the kit opens its map once; this is it
    current = [pos(0)]
    context = _context(retain_ordering=True, subscription_type=0)
    context.get_message_id = lambda: SimpleNamespace(
        ledger_id=lambda: current[0].ledger,
        entry_id=lambda: current[0].entry,
        batch_index=lambda: current[0].batch,
    )
    context.get_logger = lambda: logging.getLogger("test")
    context.get_function_name = lambda: "count"
    delivered = [27, 28, 15, *range(16, 40)]  # 27, 28 before the rewind; then in order
    for entry in delivered:
        current[0] = pos(entry)
        try:
            b.process(b"x", context)
        except MessageHeldBackError:
            continue
    assert shared.data["processed/" + T] == str(pos(39))
    assert shared.data["counter/n"] == 40, "every message of 0-39 counted once"
    b.close()
