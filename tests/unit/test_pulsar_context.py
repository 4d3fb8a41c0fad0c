"""Pulsar's Context state calls on the kit's state (issue #17, item 2), and the
FunctionState JSON that querystate answers (item 1): pure logic, no broker."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest

from pulsar_state.errors import ConfigurationError, NotFoundError
from pulsar_state.functions.pulsar_context import (
    PulsarStateContext,
    SharedStateFunction,
    shared_state,
)
from pulsar_state.functions.queryable_state import function_state
from pulsar_state.functions.stateful import FunctionState
from pulsar_state.map.pulsar_map import MapOp

STORED: dict[str, Any] = {
    "counter/apples": 5,
    "state/greeting": {"s": "hello"},
    "state/raw": {"b": base64.b64encode(b"\xff\x00").decode()},
}


def _context(**user_config: Any) -> SimpleNamespace:
    return SimpleNamespace(
        get_function_name=lambda: "wc",
        get_user_config_value=user_config.get,
    )


def _proxy() -> tuple[PulsarStateContext, FunctionState]:
    state = FunctionState(STORED.get)
    return PulsarStateContext(_context(), state), state


def _ops(state: FunctionState, latest: dict[str, Any]) -> dict[str, Any]:
    return {op.key: ("DELETE" if op.is_delete else op.value) for op in state.ops(latest)}


def test_counters_follow_pulsars_context() -> None:
    ctx, state = _proxy()
    assert ctx.get_counter("pears") is None  # Pulsar: no such key -> None
    assert ctx.get_counter("apples") == 5
    ctx.incr_counter("apples", 2)
    ctx.incr_counter("pears", 1)
    assert ctx.get_counter("apples") == 7
    assert ctx.get_counter("pears") == 1
    # applied against the latest state at commit time, not the state read earlier
    assert _ops(state, {"counter/apples": 10}) == {"counter/apples": 12, "counter/pears": 1}
    with pytest.raises(TypeError, match="int"):
        ctx.incr_counter("apples", 1.5)


def test_values_are_bytes_or_str_and_read_back_as_bytes() -> None:
    ctx, state = _proxy()
    assert ctx.get_state("greeting") == b"hello"
    assert ctx.get_state("raw") == b"\xff\x00"
    assert ctx.get_state("nothing") is None
    ctx.put_state("greeting", "bonjour")
    ctx.put_state("blob", b"\x01\x02")
    assert ctx.get_state("greeting") == b"bonjour"
    assert ctx.get_state("blob") == b"\x01\x02"
    ops = _ops(state, dict(STORED))
    assert ops["state/greeting"] == {"s": "bonjour"}
    assert ops["state/blob"] == {"b": base64.b64encode(b"\x01\x02").decode()}
    with pytest.raises(TypeError, match="bytes or str"):
        ctx.put_state("n", 3)


def test_a_key_holds_one_thing_and_del_counter_removes_it() -> None:
    ctx, state = _proxy()
    ctx.del_counter("apples")
    assert ctx.get_counter("apples") is None
    ctx.put_state("apples", "now a value")  # replaces nothing left
    ctx.incr_counter("greeting", 3)  # a counter replaces the value
    assert ctx.get_state("greeting") is None
    assert ctx.get_counter("greeting") == 3
    ctx.put_state("pears", "v")
    ctx.del_counter("pears")  # deletes a value too (Pulsar's delete_key)
    assert ctx.get_state("pears") is None
    assert _ops(state, dict(STORED)) == {
        "counter/apples": "DELETE",
        "state/apples": {"s": "now a value"},
        "counter/greeting": 3,
        "state/greeting": "DELETE",
    }
    # a delete of what is absent in the latest state writes nothing
    assert "counter/apples" not in _ops(state, {})


def test_a_counter_deleted_then_incremented_starts_again() -> None:
    ctx, state = _proxy()
    ctx.incr_counter("apples", 1)
    ctx.del_counter("apples")
    ctx.incr_counter("apples", 4)
    assert ctx.get_counter("apples") == 4
    assert _ops(state, dict(STORED)) == {"counter/apples": 4}


def test_everything_else_is_the_runtimes_context() -> None:
    ctx, _ = _proxy()
    assert ctx.get_function_name() == "wc"
    with pytest.raises(AttributeError):
        ctx.no_such_call()  # type: ignore[attr-defined]


class _Counting:
    def process(self, input: str, context: Any) -> str:
        words = input.split()
        for word in words:
            context.incr_counter(word, 1)
        return f"{input}: {context.get_counter(words[0])}"


def test_the_entry_runs_the_users_class_named_in_user_config() -> None:
    entry = SharedStateFunction()
    state = FunctionState(STORED.get)
    context = _context(userClass=f"{__name__}._Counting")
    assert entry.handle("apples pears", state, context) == "apples pears: 6"
    assert _ops(state, {}) == {"counter/apples": 1, "counter/pears": 1}


def test_the_entry_says_what_is_missing_in_user_config() -> None:
    with pytest.raises(ConfigurationError, match="userClass"):
        SharedStateFunction().handle("x", FunctionState(STORED.get), _context())
    with pytest.raises(ConfigurationError, match="cannot import"):
        SharedStateFunction().handle(
            "x", FunctionState(STORED.get), _context(userClass="no_such_module.Nope")
        )


def test_the_decorator_keeps_the_class_name_and_its_process() -> None:
    wrapped = shared_state(_Counting)
    assert wrapped.__name__ == "_Counting" and wrapped.__module__ == __name__
    state = FunctionState(STORED.get)
    assert wrapped().handle("pears", state, _context()) == "pears: 1"


def test_function_state_json_is_pulsars_shape() -> None:
    assert function_state("apples", STORED, version=7) == {
        "key": "apples",
        "numberValue": 5,
        "version": 7,
    }
    assert function_state("greeting", STORED, version=8) == {
        "key": "greeting",
        "stringValue": "hello",
        "version": 8,
    }
    # bytes that are not UTF-8: byteValue, base64 as Jackson writes a byte[]
    assert function_state("raw", STORED, version=9) == {
        "key": "raw",
        "byteValue": base64.b64encode(b"\xff\x00").decode(),
        "version": 9,
    }
    # UTF-8 bytes read as a string, as Pulsar does
    utf8 = {"state/u": {"b": base64.b64encode("héllo".encode()).decode()}}
    assert function_state("u", utf8, version=1)["stringValue"] == "héllo"
    with pytest.raises(NotFoundError, match="key 'nope' doesn't exist"):
        function_state("nope", STORED, version=0)


def test_map_ops_are_plain_values() -> None:
    # FunctionState.ops gives MapOp(key, value) the kit serializes itself
    _, state = _proxy()
    state.incr_counter("apples", 1)
    (op,) = state.ops({})
    assert isinstance(op, MapOp) and op.value == 1
