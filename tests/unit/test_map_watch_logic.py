"""Pure logic of map watches: which keys match, and changes with old values."""

from __future__ import annotations

from typing import Any

import pytest

from pulsar_state.map.pulsar_map import MapOp
from pulsar_state.map.watch import ChangeTracker, key_matcher
from pulsar_state.position import Position
from pulsar_state.serde import JsonSerde, StrKeySerde


def _put(key: str, value: Any) -> MapOp[str, Any]:
    return MapOp(key, value, JsonSerde().serialize(value))


def test_key_matcher() -> None:
    keys = StrKeySerde()
    every, one, under = (
        key_matcher(keys, None, prefix=False),
        key_matcher(keys, "a/1", prefix=False),
        key_matcher(keys, "a/", prefix=True),
    )
    assert every("x") and every("a/1")
    assert one("a/1") and not one("a/10") and not one("a")
    assert under("a/1") and under("a/") and not under("b/a/1")
    with pytest.raises(TypeError, match="prefix"):
        key_matcher(keys, 3, prefix=True)
    with pytest.raises(ValueError, match="reserved"):
        key_matcher(keys, "__pss__/x", prefix=False)


def test_tracker_reports_old_values_and_skips_deletes_of_absent_keys() -> None:
    tracker: ChangeTracker[str, Any] = ChangeTracker(
        JsonSerde(), lambda k: k.startswith("a"), {"a1": b"1"}
    )
    p1, p2 = Position(1, 1), Position(1, 2)
    changes = tracker.changes(
        [_put("a1", 2), _put("b", 9), MapOp.delete("a2"), _put("a2", {"x": [1]})], p1
    )
    assert [(c.key, c.value, c.old_value, c.deleted, c.position) for c in changes] == [
        ("a1", 2, 1, False, p1),
        ("a2", {"x": [1]}, None, False, p1),
    ]
    changes[1].value["x"].append(2)  # a fresh object: the tracker's copy is unchanged
    deleted = tracker.changes([MapOp.delete("a2"), MapOp.delete("a2")], p2)
    assert [(c.key, c.value, c.old_value, c.deleted) for c in deleted] == [
        ("a2", None, {"x": [1]}, True)
    ]
