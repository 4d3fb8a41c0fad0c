"""``MemoryPulsarMap`` (issue #28): the real map's methods, validation, copies and
watches over an in-memory state machine, for users' unit tests without a broker."""

from __future__ import annotations

import threading

import pytest

from pulsar_state import MapOp, MemoryPulsarMap, Position
from pulsar_state.config import StateConfig
from pulsar_state.errors import ConfigurationError, StateClosedError, TooManyOpsError
from pulsar_state.map.watch import MapChange


@pytest.fixture
def m() -> MemoryPulsarMap[str, object]:
    return MemoryPulsarMap[str, object]()


def test_reads_and_writes_as_the_map_does(m: MemoryPulsarMap[str, object]) -> None:
    first = m.put("a", 1).result(5)
    assert isinstance(first, Position)
    assert m.put_all({"b": (1, 2), "c": {"x": 1}}).result(5) > first
    assert m.get("b").result(5) == [1, 2]  # as a reader decodes it from the topic
    assert m.get("missing").result(5) is None
    assert m.get_or_default("missing", 7).result(5) == 7
    assert m.contains("a", latest=True).result(5)
    assert m.size().result(5) == 3 and sorted(m.list_keys().result(5)) == ["a", "b", "c"]
    assert m.update("a", lambda v: (v or 0) + 1).result(5) == 2  # type: ignore[operator]
    assert m.put_if_absent("a", 9).result(5) == 2
    assert m.replace("a", 2, 3).result(5) is True and m.replace("a", 2, 4).result(5) is False
    assert m.delete("c").result(5) == {"x": 1}
    assert m.update_multiple(lambda k, v: k == "a", lambda k, v: None).result(5) == 1
    assert m.items().result(5) == {"b": [1, 2]}
    assert m.clear().result(5) == 1 and m.size().result(5) == 0


def test_values_are_copies(m: MemoryPulsarMap[str, object]) -> None:
    value = {"n": [1]}
    m.put("k", value).result(5)
    value["n"].append(2)  # the caller's object is not the map's
    got = m.get("k").result(5)
    assert got == {"n": [1]}
    got["n"].append(3)  # type: ignore[index]
    assert m.get("k").result(5) == {"n": [1]}


def test_transact_is_atomic_and_validated(m: MemoryPulsarMap[str, object]) -> None:
    m.put("from", 10).result(5)
    total = m.transact(
        lambda s: [MapOp.put("from", 0), MapOp.put("to", s["from"])],
        reader=lambda s: s["from"] + s["to"],  # type: ignore[operator]
    ).result(5)
    assert total == 10
    with pytest.raises(TypeError):
        m.transact(lambda s: ["not an op"]).result(5)  # type: ignore[list-item]
    assert m.items().result(5) == {"from": 0, "to": 10}  # nothing of the failed one


def test_bad_input_fails_as_on_a_broker() -> None:
    m = MemoryPulsarMap[str, object](config=StateConfig(max_ops_per_write=2))
    with pytest.raises(TypeError):
        m.put(1, "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reserved"):
        m.put("__pss__/x", 1)
    with pytest.raises(TooManyOpsError):
        m.put_all({"a": 1, "b": 2, "c": 3}).result(5)
    with pytest.raises(RuntimeError, match="boom"):
        m.update("a", lambda v: (_ for _ in ()).throw(RuntimeError("boom"))).result(5)
    assert m.size().result(5) == 0


def test_watches_and_callbacks_run_on_the_callback_thread(
    m: MemoryPulsarMap[str, object],
) -> None:
    changes: list[MapChange[str, object]] = []
    threads: set[str] = set()
    done = threading.Event()

    def seen(change: MapChange[str, object]) -> None:
        threads.add(threading.current_thread().name)
        changes.append(change)
        if len(changes) == 3:
            done.set()

    watch = m.watch("k", seen, prefix=True)
    m.put("k1", 1).result(5)
    m.put("other", 1).result(5)
    m.put("k1", 2).result(5)
    m.delete("k1").result(5)
    assert done.wait(5)
    assert [(c.key, c.value, c.deleted) for c in changes] == [
        ("k1", 1, False),
        ("k1", 2, False),
        ("k1", None, True),
    ]
    called: list[str] = []
    ran = threading.Event()
    m.put("x", 1).add_done_callback(
        lambda _: (called.append(threading.current_thread().name), ran.set())
    )
    assert ran.wait(5)
    assert threading.current_thread().name not in threads | set(called)
    watch.stop()
    with pytest.raises(ConfigurationError, match="no history"):
        m.watch(None, seen, from_position=Position(0, 0, -1))


def test_closed_and_no_checkpoints(m: MemoryPulsarMap[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        m.checkpoint()
    m.close()
    with pytest.raises(StateClosedError):
        m.put("a", 1)
