"""The stateful kit (issue #26, items 2 and 3), no broker: the output committed with
the state and given again on a redelivery; each processing guarantee; a takeover
in the middle of a batch. The map is ``MemoryPulsarMap`` (the real map's code)."""

from __future__ import annotations

import base64
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from pulsar_state import MemoryPulsarMap
from pulsar_state.errors import ConfigurationError, MessageHeldBackError
from pulsar_state.functions.stateful import (
    INPUT_MESSAGE_ID_PROPERTY,
    INPUT_TOPIC_PROPERTY,
    CommittedOutput,
    FunctionState,
    StatefulFunction,
    _Outputs,
)
from pulsar_state.position import Position
from pulsar_state.scheduling.in_order import (
    InOrderGate,
    batch_size,
    first_missing,
    marker_value,
    parse_marker,
    processing_guarantee,
)

T = "persistent://public/default/in-partition-0"
_GUARANTEE = {"ATLEAST_ONCE": 0, "ATMOST_ONCE": 1, "EFFECTIVELY_ONCE": 2}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


class _Id:
    """A message id as the client gives it: parts, and the serialized
    ``MessageIdData`` (ledger 1, entry 2, partition 3, batch index 4, batch size 6)."""

    def __init__(self, position: Position, size: int | None = None) -> None:
        self.position = position
        self.size = size

    def ledger_id(self) -> int:
        return self.position.ledger

    def entry_id(self) -> int:
        return self.position.entry

    def batch_index(self) -> int:
        return self.position.batch

    def serialize(self) -> bytes:
        data = b"\x08" + _varint(self.position.ledger) + b"\x10" + _varint(self.position.entry)
        if self.position.batch >= 0:
            data += b"\x20" + _varint(self.position.batch)
        if self.size:
            data += b"\x30" + _varint(self.size)
        return data


class _Runtime:
    """What a runtime gives the kit: a context whose current message it sets."""

    def __init__(
        self,
        *,
        guarantee: str = "ATLEAST_ONCE",
        output: str | None = "persistent://public/default/out",
        user_config: dict[str, Any] | None = None,
    ) -> None:
        self.current = _Id(Position(7, 0, -1))
        self.redeliveries = 0
        details = SimpleNamespace(
            retainOrdering=True,
            processingGuarantees=_GUARANTEE[guarantee],
            source=SimpleNamespace(subscriptionType=1),
        )
        config = dict(user_config or {})
        consumer = SimpleNamespace(redeliver_unacknowledged_messages=self._redeliver)
        self.context = SimpleNamespace(
            instance_config=SimpleNamespace(function_details=details),
            consumers={T: consumer},
            get_current_message_topic_name=lambda: T,
            get_message_id=lambda: self.current,
            get_logger=lambda: logging.getLogger("test"),
            get_function_name=lambda: "count",
            get_user_config_value=config.get,
            get_output_topic=lambda: output,
        )

    def _redeliver(self) -> None:
        self.redeliveries += 1

    def at(self, position: Position, size: int | None = None) -> Any:
        self.current = _Id(position, size)
        return self.context


class Count(StatefulFunction):
    """Counts each input word and the messages; its output names the running total
    (a value a second run of ``handle`` would not give again)."""

    def __init__(self, state_map: Any, fail_on: str | None = None) -> None:
        super().__init__()
        self._map = state_map  # the kit opens its map once; this is it
        self.fail_on = fail_on
        self.calls = 0

    def handle(self, input: Any, state: FunctionState, context: Any) -> Any:
        self.calls += 1
        if input == self.fail_on:
            raise RuntimeError(f"cannot handle {input}")
        state.incr_counter(input, 1)
        state.incr_counter("total", 1)
        return f"{input}#{state.get_counter('total')}"


def pos(entry: int, batch: int = -1) -> Position:
    return Position(7, entry, batch)


def _message_id_property(position: Position, size: int | None = None) -> str:
    return base64.urlsafe_b64encode(_Id(position, size).serialize()).decode()


# -- item 2: the output is committed with the state, and given again --


def test_a_redelivered_message_gives_its_committed_output_again() -> None:
    state_map = MemoryPulsarMap[str, Any]()
    runtime = _Runtime()
    fn = Count(state_map)
    first = fn.process_message("a", runtime.at(pos(1)))
    assert first == CommittedOutput("a#1", T, pos(1), _message_id_property(pos(1)))
    assert first.properties == {
        INPUT_TOPIC_PROPERTY: T,
        INPUT_MESSAGE_ID_PROPERTY: _message_id_property(pos(1)),
    }
    assert fn.process("b", runtime.at(pos(2))) == "b#2"  # Pulsar's runtime's entry
    # an instance that committed and died before sending: a new one gets them again
    again = Count(state_map)
    copy = again.process_message("a", runtime.at(pos(1)))
    assert copy.value == "a#1" and copy.redelivered
    assert copy.properties == first.properties
    assert again.process("b", runtime.at(pos(2))) == "b#2"
    assert again.calls == 0, "handle is not run again"
    assert state_map.get("counter/total").result() == 2, "one state effect each"
    assert again.duplicates == 2


def test_outputs_without_an_output_topic_are_not_kept() -> None:
    state_map = MemoryPulsarMap[str, Any]()
    runtime = _Runtime(output=None)
    fn = Count(state_map)
    assert fn.process("a", runtime.at(pos(1))) == "a#1"  # still returned
    assert not [k for k in state_map.items().result() if k.startswith("output")]
    assert Count(state_map).process("a", runtime.at(pos(1))) is None  # nothing to send


def test_the_outputs_of_the_last_window_messages_are_kept() -> None:
    state_map = MemoryPulsarMap[str, Any]()
    runtime = _Runtime(user_config={"outputWindow": 3})
    fn = Count(state_map)
    for entry in range(1, 6):
        fn.process_message(f"w{entry}", runtime.at(pos(entry)))
    slots = sorted(k for k in state_map.items().result() if k.startswith("output/"))
    assert len(slots) == 3, "a ring: older outputs overwritten, no key left behind"
    later = Count(state_map)
    assert later.process("w5", runtime.at(pos(5))) == "w5#5"
    assert later.process("w3", runtime.at(pos(3))) == "w3#3"
    assert later.outputs_expired == 0
    assert later.process("w2", runtime.at(pos(2))) is None  # left the ring: counted
    assert later.outputs_expired == 1


def test_a_message_without_output_between_others_gives_none_again() -> None:
    class Sometimes(Count):
        def handle(self, input: Any, state: FunctionState, context: Any) -> Any:
            output = super().handle(input, state, context)
            return None if input == "quiet" else output

    state_map = MemoryPulsarMap[str, Any]()
    runtime = _Runtime(user_config={"outputWindow": 2})
    fn = Sometimes(state_map)
    for entry, word in enumerate(["a", "quiet", "b", "c"], start=1):
        fn.process_message(word, runtime.at(pos(entry)))
    later = Sometimes(state_map)
    assert later.process("quiet", runtime.at(pos(2))) is None
    assert later.outputs_expired == 0, "an older output is kept: this one had none"


def test_an_output_that_cannot_be_kept_fails_before_anything_is_written() -> None:
    class Tuple(Count):
        def handle(self, input: Any, state: FunctionState, context: Any) -> Any:
            super().handle(input, state, context)
            return ("not", "json")

    state_map = MemoryPulsarMap[str, Any]()
    fn = Tuple(state_map)
    with pytest.raises(TypeError, match="str, bytes or a JSON value"):
        fn.process("a", _Runtime().at(pos(1)))
    assert state_map.items().result() == {}
    fn.close()


@pytest.mark.parametrize(
    "value", ["text", b"\x00\xff", 42, 1.5, True, {"k": [1, "x", None]}], ids=repr
)
def test_outputs_come_back_the_same_value(value: Any) -> None:
    class Constant(Count):
        def handle(self, input: Any, state: FunctionState, context: Any) -> Any:
            super().handle(input, state, context)
            return value

    state_map = MemoryPulsarMap[str, Any]()
    runtime = _Runtime()
    assert Constant(state_map).process("a", runtime.at(pos(1))) == value
    copy = Constant(state_map).process("a", runtime.at(pos(1)))
    assert copy == value and type(copy) is type(value)


def test_a_window_changed_between_runs_still_finds_what_is_kept() -> None:
    state_map = MemoryPulsarMap[str, Any]()

    def keep(outputs: _Outputs, entry: int, value: str | None = "o") -> None:
        if value is not None:
            state_map.transact(lambda latest: outputs.ops(latest, pos(entry), f"{value}{entry}"))
        state_map.put(f"processed/{T}", str(pos(entry))).result()

    small = _Outputs(T, 2)
    for entry in range(1, 5):  # outputs of 1-4 in a ring of 2: 3 and 4 kept
        keep(small, entry)
    bigger = _Outputs(T, 5)  # a redeployment with a larger window
    keep(bigger, 5, None)  # 5 has no output
    keep(bigger, 6)  # output 4 goes to slot 4 of 5

    def find(outputs: _Outputs, entry: int) -> tuple[bool, Any]:
        return outputs.find(lambda k: state_map.get(k).result(), pos(entry))

    assert find(bigger, 6) == (True, "o6")
    assert find(bigger, 5) == (True, None), "between 4 and 6: it had none"
    assert find(bigger, 4) == (True, "o4")  # in the old ring's slot
    assert find(bigger, 3) == (True, "o3")
    assert find(bigger, 1) == (False, None), "overwritten: not mistaken for another"
    assert find(small, 6) == (True, "o6")  # and back to the smaller window


def test_the_output_window_is_a_positive_int() -> None:
    with pytest.raises(ConfigurationError, match="outputWindow"):
        Count(MemoryPulsarMap[str, Any]()).process(
            "a", _Runtime(user_config={"outputWindow": 0}).at(pos(1))
        )


# -- item 3: each processing guarantee as Pulsar defines it --


def test_the_guarantee_is_read_as_pulsars_runtime_has_it() -> None:
    def ctx(value: Any) -> Any:
        details = SimpleNamespace(processingGuarantees=value)
        return SimpleNamespace(instance_config=SimpleNamespace(function_details=details))

    assert processing_guarantee(ctx(0)) == "ATLEAST_ONCE"
    assert processing_guarantee(ctx(1)) == "ATMOST_ONCE"
    assert processing_guarantee(ctx(2)) == "EFFECTIVELY_ONCE"
    assert processing_guarantee(ctx(3)) == "MANUAL"
    assert processing_guarantee(ctx("atmost_once")) == "ATMOST_ONCE"
    assert processing_guarantee(SimpleNamespace()) == "ATLEAST_ONCE"  # Pulsar's default
    with pytest.raises(ConfigurationError, match="processing guarantee"):
        processing_guarantee(ctx(9))


@pytest.mark.parametrize("guarantee", ["ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE"])
def test_a_failed_message_in_the_middle_of_30(guarantee: str) -> None:
    """``handle`` raises on the 15th message, once. ATMOST_ONCE goes on without it
    (counted, nothing of it written); the others hold the rest until it comes
    back and succeeds."""
    state_map = MemoryPulsarMap[str, Any]()
    runtime = _Runtime(guarantee=guarantee)
    fn = Count(state_map, fail_on="m14")
    fn._gate = InOrderGate(first_retry_s=3600)  # the redelivery is this test's to make
    held = 0
    for i in range(30):
        try:
            fn.process_message(f"m{i}", runtime.at(pos(i)))
        except RuntimeError:
            assert i == 14
            fn.fail_on = None  # it would succeed next time
        except MessageHeldBackError:
            held += 1
    if guarantee == "ATMOST_ONCE":
        assert fn.skipped == 1 and held == 0
        assert state_map.get("counter/m14").result() is None
        assert state_map.get("counter/total").result() == 29
        return
    assert fn.skipped == 0 and held == 15, "every later message held back"
    for i in range(14, 30):  # the redelivery, in order from the failed one
        fn.process_message(f"m{i}", runtime.at(pos(i)))
    assert state_map.get("counter/total").result() == 30
    assert all(state_map.get(f"counter/m{i}").result() == 1 for i in range(30))


def test_at_most_once_does_not_wait_for_a_takeovers_gap() -> None:
    """The instance that left acknowledged what it had received: not coming back."""
    state_map = MemoryPulsarMap[str, Any]()
    state_map.put(f"processed/{T}", str(pos(14))).result()
    runtime = _Runtime(guarantee="ATMOST_ONCE")
    fn = Count(state_map)
    assert fn.process("x", runtime.at(pos(27))) == "x#1"
    with pytest.raises(MessageHeldBackError):  # under the others it waits
        Count(state_map).process("y", _Runtime().at(pos(40)))


# -- a takeover in the middle of a batch --


def test_the_batch_size_is_read_from_the_serialized_id() -> None:
    assert batch_size(_Id(pos(3, 2), 5)) == 5
    assert batch_size(_Id(pos(3))) is None
    assert batch_size(SimpleNamespace()) is None
    assert batch_size(SimpleNamespace(serialize=lambda: b"\x08\xff")) is None  # cut short
    assert marker_value(pos(3, 2), 5) == "7:3:2/5"
    assert marker_value(pos(3), None) == "7:3:-1"
    assert parse_marker("7:3:2/5") == (pos(3, 2), 5)
    assert parse_marker("7:3:2") == (pos(3, 2), None)  # written before the size


def test_the_rest_of_a_batch_is_missing_when_its_size_says_so() -> None:
    assert first_missing(pos(14, 2), pos(15, 0), 5) == pos(14, 3)
    assert first_missing(pos(14, 2), pos(20), 5) == pos(14, 3)
    assert first_missing(pos(14, 4), pos(15, 0), 5) is None  # the batch's last
    assert first_missing(pos(14, 2), pos(15, 0)) is None  # size unknown: not proved
    assert first_missing(pos(14, 2), pos(14, 3), 5) is None  # the next one


def test_an_instance_taking_over_in_the_middle_of_a_batch_skips_none_of_it() -> None:
    """Instance A recorded 7:14:2 of a 5-message batch and was killed; B got the
    next entry's batch first (the broker's read position), entry 14 only when the
    cursor was rewound. Before the batch size was recorded, B recorded 7:15:0 and
    then skipped 7:14:3 and 7:14:4 as done."""
    state_map = MemoryPulsarMap[str, Any]()
    runtime = _Runtime()
    a = Count(state_map)
    for b in range(3):
        a.process_message(f"14.{b}", runtime.at(pos(14, b), 5))
    assert state_map.get(f"processed/{T}").result() == "7:14:2/5"
    b_instance = Count(state_map)
    b_instance._gate = InOrderGate(first_retry_s=3600)
    delivered = [*[(15, i) for i in range(5)], *[(14, i) for i in range(5)]]
    delivered += [(15, i) for i in range(5)]  # after the rewind: in order
    for entry, index in delivered:
        try:
            b_instance.process_message(f"{entry}.{index}", runtime.at(pos(entry, index), 5))
        except MessageHeldBackError:
            continue
    counted = {f"14.{i}" for i in range(5)} | {f"15.{i}" for i in range(5)}
    assert {k: state_map.get(f"counter/{k}").result() for k in counted} == dict.fromkeys(
        counted, 1
    ), "every message of both batches counted once"
    assert state_map.get("counter/total").result() == 10
