"""The SQL sink's takeover-gap protection (issue #26, item 4), without a broker.

A failover's new active consumer can get newer records before the ones the
instance that left had received and not written (the broker hands the
partition over from its read position and rewinds later). Seen on the real
broker with today's sink (tests/integration/test_sink_takeover.py): the
instance taking over wrote 59:1342 over 59:1199, and 59:1200-1341 came back
after it and were skipped as redeliveries: 142 records lost. These tests replay
that delivery order through each way the sink runs, and check the parts.
"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from postgres_server import sql_rows

from pulsar_state.connectors.dead_letter import DeadLetters
from pulsar_state.connectors.sink import (
    SinkRecord,
    SqlUpsertSink,
    TakeoverGapError,
    open_backend,
)
from pulsar_state.connectors.sink_function import SinkFunction
from pulsar_state.connectors.sink_health import SinkHealth
from pulsar_state.connectors.sink_runner import _Records
from pulsar_state.errors import MessageHeldBackError
from pulsar_state.position import Position
from pulsar_state.scheduling.in_order import InOrderGate

T = "persistent://public/default/in-partition-0"
LEDGER = 59


def pos(entry: int) -> Position:
    return Position(LEDGER, entry, -1)


def rec(entry: int, *, key: str | None = None, value: bytes | None = None) -> SinkRecord:
    return SinkRecord(
        topic=T,
        key=key if key is not None else f"k{entry}",
        value=value if value is not None else f"v{entry}".encode(),
        position=pos(entry),
    )


def _open(database: str) -> SqlUpsertSink:
    sink = SqlUpsertSink()
    sink.open({"database": database, "table": "kv"})
    return sink


def _expected(entries: range) -> dict[str, str]:
    return {f"k{e}": f"v{e}" for e in entries}


#: the delivery order the broker gave the instance taking over (see the module
#: docstring): the newer records first, then the rewind from the first
#: unacknowledged one
TAKEOVER_ORDER = [*range(30, 36), *range(15, 40)]


def test_a_record_past_another_writers_position_waits_for_the_missing_ones(
    sql_database: str,
) -> None:
    a, b = _open(sql_database), _open(sql_database)
    for e in range(15):  # instance A wrote 0-14, then was killed with 15-29 in hand
        assert a.write(rec(e))
    with pytest.raises(TakeoverGapError) as held:
        b.write(rec(30))
    assert (held.value.stored, held.value.missing) == (pos(14), pos(15))
    assert isinstance(held.value, MessageHeldBackError)
    assert b.applied_position(T) == pos(14) and sql_rows(sql_database, "kv") == _expected(range(15))
    for e in range(15, 40):  # the rewind: in order from the first one not written
        assert b.write(rec(e))
    assert sql_rows(sql_database, "kv") == _expected(range(40))
    a.close()
    b.close()


def test_the_sinks_own_stream_is_not_checked(sql_database: str) -> None:
    """Records after this sink's own last write come from its own consumer, in order:
    a hole there (a marker, an expired record) is no takeover."""
    sink = _open(sql_database)
    assert sink.write(rec(1)) and sink.write(rec(5))
    other = _open(sql_database)  # a restart: the stored position is no longer its own
    with pytest.raises(TakeoverGapError):
        other.write(rec(9))
    assert other.write(rec(9), past_gap=True)  # waited out by the caller: written
    assert other.write(rec(12))  # its own now
    assert sql_rows(sql_database, "kv") == {"k1": "v1", "k5": "v5", "k9": "v9", "k12": "v12"}
    sink.close()
    other.close()


def test_no_check_for_the_next_record_another_ledger_or_a_redelivery(sql_database: str) -> None:
    a, b = _open(sql_database), _open(sql_database)
    assert a.write(rec(3))
    assert b.write(rec(4))  # the next one: nothing is missing
    assert a.write(SinkRecord(T, "n", b"x", Position(LEDGER + 3, 7, -1)))  # unknown: not proved
    assert not b.write(rec(2))  # a redelivery is skipped as before
    a.close()
    b.close()


def test_a_position_of_another_topic_incarnation_holds_nothing(tmp_path: Any) -> None:
    database = str(tmp_path / "sink.db")
    old = _open(database)
    assert old.write(rec(3))
    old.close()
    sink = _open(database)
    sink._guard = SimpleNamespace(  # type: ignore[assignment]  # the admin API says: foreign
        is_of_topic=lambda topic, stored: False, close=lambda: None
    )
    assert sink.write(rec(90))
    assert sink.applied_position(T) == pos(90)
    sink.close()


def test_the_rest_of_a_batch_is_waited_for(sql_database: str) -> None:
    """A took messages 0-2 of a 5-message batch; B gets the next entry first: the
    stored batch size proves 3 and 4 exist."""
    a, b = _open(sql_database), _open(sql_database)

    def batched(entry: int, index: int, size: int | None = 5) -> SinkRecord:
        return SinkRecord(
            T, f"k{entry}.{index}", b"v", Position(LEDGER, entry, index), batch_size=size
        )

    for i in range(3):
        assert a.write(batched(14, i))
    with pytest.raises(TakeoverGapError) as held:
        b.write(batched(15, 0, size=2))
    assert held.value.missing == Position(LEDGER, 14, 3)
    assert held.value.stored_batch_size == 5
    assert b.write(batched(14, 3)) and b.write(batched(14, 4))
    assert b.write(batched(15, 0, 2)) and b.write(batched(15, 1, 2))
    # a batch stored without its size (a runtime whose ids do not say): its rest is
    # not proved, the next entry goes
    c, d = _open(sql_database), _open(sql_database)
    assert c.write(batched(16, 0, size=None)) and c.write(batched(16, 2, size=None))
    assert d.write(batched(17, 0, size=None))
    for sink in (a, b, c, d):
        sink.close()


def test_a_positions_table_of_before_gets_the_batch_size_column(sql_database: str) -> None:
    backend = open_backend(sql_database)
    backend.execute_ddl(
        [
            "CREATE TABLE IF NOT EXISTS _pss_positions "
            f"(topic TEXT PRIMARY KEY, ledger {backend.integer_type}, "
            f"entry {backend.integer_type}, batch {backend.integer_type})",
        ]
    )
    with backend.transaction(T) as cur:
        cur.execute(
            backend._sql(
                "INSERT INTO _pss_positions (topic, ledger, entry, batch) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (topic) DO UPDATE SET ledger = excluded.ledger, "
                "entry = excluded.entry, batch = excluded.batch"
            ),
            (T, LEDGER, 3, -1),
        )
    backend.close()
    sink = _open(sql_database)
    again = _open(sql_database)  # a second sink finds the column there
    assert sink.applied_position(T) == pos(3)
    assert not sink.write(rec(2)) and sink.write(rec(4))
    with sink.backend.transaction(None) as cur:
        assert cur.execute("SELECT batch_size FROM _pss_positions").fetchall() == [(None,)]
    sink.close()
    again.close()


def test_a_poisoned_record_is_done_for_the_instance_taking_over(sql_database: str) -> None:
    """A record that can never be a row is acknowledged once dead-lettered: its
    position is stored, so the next instance does not wait for it."""
    a, b = _open(sql_database), _open(sql_database)
    assert a.write(rec(0))
    assert a.mark_poisoned(rec(1, key="", value=b"\xff"))
    assert not a.mark_poisoned(rec(1))  # again (redelivered): already done
    assert b.write(rec(2))  # no gap: 1 is done
    with pytest.raises(TakeoverGapError):  # a poisoned record goes through the check too
        a.mark_poisoned(rec(6))
    assert sql_rows(sql_database, "kv") == {"k0": "v0", "k2": "v2"}
    a.close()
    b.close()


# -- SinkFunction, as Pulsar's Python runtime calls it ----------------------------------------


class _Consumer:
    def __init__(self) -> None:
        self.redeliveries = 0

    def redeliver_unacknowledged_messages(self) -> None:
        self.redeliveries += 1


def _context(database: str, guarantee: int = 0) -> Any:
    """The calls SinkFunction makes on the runtime's context, for the current message."""
    current: list[SinkRecord] = []
    consumer = _Consumer()
    details = SimpleNamespace(
        retainOrdering=True,
        source=SimpleNamespace(subscriptionType=1),
        processingGuarantees=guarantee,
    )
    return SimpleNamespace(
        current=current,
        consumer=consumer,
        consumers={T.removesuffix("-partition-0"): consumer},
        instance_config=SimpleNamespace(function_details=details),
        get_current_message_topic_name=lambda: current[0].topic,
        get_message_id=lambda: SimpleNamespace(
            ledger_id=lambda: current[0].position.ledger,
            entry_id=lambda: current[0].position.entry,
            batch_index=lambda: current[0].position.batch,
        ),
        get_partition_key=lambda: current[0].key,
        message=None,
        get_message_properties=lambda: {},
        get_user_config_map=lambda: {"database": database, "table": "kv"},
        get_user_config_value=lambda key: None,
        get_secret=lambda name: None,
        get_logger=lambda: logging.getLogger("sink-test"),
        record_metric=lambda name, value: None,
        get_function_tenant=lambda: "public",
        get_function_namespace=lambda: "default",
        get_function_name=lambda: "sink",
        get_instance_id=lambda: 1,
        get_pulsar_client=lambda: None,
    )


def _deliver(function: SinkFunction, context: Any, entries: list[int]) -> list[int]:
    """Each record through ``process``; the entries held back (the runtime nacks them)."""
    held = []
    for entry in entries:
        record = rec(entry)
        context.current[:] = [record]
        try:
            function.process(record.value, context)
        except MessageHeldBackError:
            held.append(entry)
    return held


def _written_by_another_instance(database: str, entries: range) -> None:
    a = _open(database)
    for e in entries:
        a.write(rec(e))
    a.close()


def test_the_function_taking_over_writes_the_records_redelivered_after_newer_ones(
    tmp_path: Any,
) -> None:
    database = str(tmp_path / "sink.db")
    _written_by_another_instance(database, range(15))
    b = SinkFunction()
    context = _context(database)
    held = _deliver(b, context, TAKEOVER_ORDER)
    assert held == list(range(30, 36)), "the newer records wait for the missing ones"
    assert sql_rows(database, "kv") == _expected(range(40)), "every record written once"
    assert b._gate.floor(T) is None
    b.close()


def test_the_function_asks_for_the_redelivery_of_the_missing_records(tmp_path: Any) -> None:
    database = str(tmp_path / "sink.db")
    _written_by_another_instance(database, range(15))
    b = SinkFunction()
    b._gate = InOrderGate(first_retry_s=0.01)
    context = _context(database)
    asked = threading.Event()
    context.consumer.redeliver_unacknowledged_messages = asked.set
    assert _deliver(b, context, [30]) == [30]
    assert asked.wait(5), "the consumer was asked to rewind"
    b.close()


def test_the_redelivery_is_asked_again_until_the_missing_records_come(tmp_path: Any) -> None:
    """A request the broker ignores (made while it waits to rewind after the
    failover) must not leave the partition waiting for the runtime's 60 s
    negative-ack delay: it is asked again, with the gate's backoff, until the
    missing record is written; then no more."""
    database = str(tmp_path / "sink.db")
    _written_by_another_instance(database, range(15))
    b = SinkFunction()
    b._gate = InOrderGate(first_retry_s=0.01, max_retry_s=0.02)
    context = _context(database)
    assert _deliver(b, context, [30]) == [30]
    deadline = time.monotonic() + 5
    while context.consumer.redeliveries < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert context.consumer.redeliveries >= 3, "asked again while nothing came"
    assert _deliver(b, context, list(range(15, 31))) == []
    time.sleep(0.1)  # a round already under way may still ask once
    asked = context.consumer.redeliveries
    time.sleep(0.2)
    assert context.consumer.redeliveries == asked, "no more once the partition flows"
    assert sql_rows(database, "kv") == _expected(range(31))
    b.close()


def test_under_atmost_once_the_function_does_not_wait(tmp_path: Any) -> None:
    """Pulsar's runtime acknowledged what the instance that left received: it is not
    coming back, so a takeover's gap is passed at once."""
    database = str(tmp_path / "sink.db")
    _written_by_another_instance(database, range(15))
    b = SinkFunction()
    context = _context(database, guarantee=1)
    assert _deliver(b, context, [30, 31]) == []
    assert set(sql_rows(database, "kv")) == {f"k{e}" for e in [*range(15), 30, 31]}
    b.close()


# -- the runner (pulsar-state sink run) --------------------------------------------------------


def test_the_runner_taking_over_holds_the_newer_records_unacknowledged(tmp_path: Any) -> None:
    database = str(tmp_path / "sink.db")
    _written_by_another_instance(database, range(15))
    sink = _open(database)
    consumer = _Consumer()
    handler = _Records(sink, DeadLetters(None, None), stop=threading.Event(), health=SinkHealth())
    outcomes = {
        e: handler.handle(rec(e), consumer.redeliver_unacknowledged_messages) for e in [30, 31]
    }
    assert outcomes == {30: "held", 31: "held"}  # not acknowledged: they come back
    for e in range(15, 40):
        assert handler.handle(rec(e), consumer.redeliver_unacknowledged_messages) == "written"
    assert sql_rows(database, "kv") == _expected(range(40))
    handler.close()
    sink.close()


def test_the_runner_dead_letters_a_poison_record_and_marks_it_done(tmp_path: Any) -> None:
    database = str(tmp_path / "sink.db")
    sink = _open(database)
    handler = _Records(sink, DeadLetters(None, None), stop=threading.Event(), health=SinkHealth())
    assert handler.handle(rec(0), None) == "written"
    assert handler.handle(rec(1, value=b"\xff"), None) == "poisoned"
    assert sink.applied_position(T) == pos(1)
    handler.close()
    sink.close()


# -- the runner's batches (issue #28, item 8) --------------------------------------------------


def _in_batches(handler: _Records, entries: list[int], size: int, consumer: _Consumer) -> list[str]:
    """``entries`` delivered in batches of ``size``; the outcomes, in order."""
    outcomes: list[str] = []
    for at in range(0, len(entries), size):
        chunk = [
            (rec(e), consumer.redeliver_unacknowledged_messages) for e in entries[at : at + size]
        ]
        outcomes += handler.handle_batch(chunk)
    return outcomes


@pytest.mark.parametrize("size", [4, 7, 50])
def test_the_runner_taking_over_in_batches_holds_them_until_the_missing_records_come(
    sql_database: str, size: int
) -> None:
    """The takeover's delivery order in batches: the batch of newer records is held
    whole, nothing of it written; the rewind's batches write every record once."""
    _written_by_another_instance(sql_database, range(15))
    sink = _open(sql_database)
    consumer = _Consumer()
    handler = _Records(sink, DeadLetters(None, None), stop=threading.Event(), health=SinkHealth())
    newer, rewind = TAKEOVER_ORDER[:6], TAKEOVER_ORDER[6:]
    assert _in_batches(handler, newer, size, consumer) == ["held"] * 6
    assert sink.applied_position(T) == pos(14), "nothing of the held batches written"
    assert set(_in_batches(handler, rewind, size, consumer)) == {"written"}
    assert sql_rows(sql_database, "kv") == _expected(range(40))
    assert handler.gate.floor(T) is None
    handler.close()
    sink.close()


def test_a_batch_mixing_the_rewind_with_records_held_before_it(tmp_path: Any) -> None:
    """Records received before the rewind and the rewind itself in one batch: the
    ones past the missing record are held (they come again), the rest written."""
    database = str(tmp_path / "sink.db")
    _written_by_another_instance(database, range(15))
    sink = _open(database)
    consumer = _Consumer()
    handler = _Records(sink, DeadLetters(None, None), stop=threading.Event(), health=SinkHealth())
    assert _in_batches(handler, [30, 31], 2, consumer) == ["held", "held"]
    outcomes = _in_batches(handler, [32, 33, *range(15, 40)], 100, consumer)
    assert outcomes == ["held", "held", *["written"] * 25]
    assert sql_rows(database, "kv") == _expected(range(40))
    handler.close()
    sink.close()


def test_a_gap_in_one_partition_holds_only_its_records(tmp_path: Any) -> None:
    database = str(tmp_path / "sink.db")
    _written_by_another_instance(database, range(15))
    sink = _open(database)
    other = "persistent://public/default/in-partition-1"
    handler = _Records(sink, DeadLetters(None, None), stop=threading.Event(), health=SinkHealth())
    batch = [(rec(30), None), (SinkRecord(other, "u", b"1", pos(3)), None), (rec(31), None)]
    assert handler.handle_batch(batch) == ["held", "written", "held"]
    assert sql_rows(database, "kv") == _expected(range(15)) | {"u": "1"}
    assert sink.applied_position(T) == pos(14)
    handler.close()
    sink.close()


def test_a_batch_of_the_next_entry_after_a_batch_message_gap(tmp_path: Any) -> None:
    """The missing record is the first message of a batch entry (L:16 when L:15:0 was
    written by another instance and L:18 comes first): the rewind's L:16:0 lifts it."""
    database = str(tmp_path / "sink.db")
    a = _open(database)
    assert a.write(SinkRecord(T, "a", b"1", Position(LEDGER, 15, 0), batch_size=1))
    a.close()
    sink = _open(database)
    handler = _Records(sink, DeadLetters(None, None), stop=threading.Event(), health=SinkHealth())
    late = SinkRecord(T, "c", b"3", Position(LEDGER, 18, -1))
    assert handler.handle_batch([(late, None)]) == ["held"]
    rewind = [SinkRecord(T, f"b{i}", b"2", Position(LEDGER, 16, i), batch_size=3) for i in range(3)]
    assert handler.handle_batch([(r, None) for r in [*rewind, late]]) == ["written"] * 4
    assert set(sql_rows(database, "kv")) == {"a", "b0", "b1", "b2", "c"}
    handler.close()
    sink.close()
