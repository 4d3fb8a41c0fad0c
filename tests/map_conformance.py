"""One suite for every map: ``PulsarMap`` on a real broker and ``MemoryPulsarMap``.

What the API names, both must mean the same (issue #26): ``replace(k, None, v)``
is PIP-137's put-if-absent, and ``clear()`` of more than one write holds is
refused with a clear error before anything is written. Modules that import
these tests provide a ``maps`` fixture (:class:`MapFactory`): a new, empty map
of its own, with an optional ``StateConfig``.
"""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from pulsar_state import PulsarMap
from pulsar_state.config import StateConfig
from pulsar_state.core.log.format import MESSAGE_OVERHEAD_BYTES
from pulsar_state.errors import TooManyOpsError, ValueTooLargeError

T = 30  # seconds per blocking call


class MapFactory(Protocol):
    def __call__(self, config: StateConfig | None = None) -> PulsarMap[str, Any]:
        """A new, empty map (closed at the end of the test)."""
        ...


# -- replace and put_if_absent: None is "absent" (PIP-137) ---------------------------


def test_replace_with_expected_none_sets_only_an_absent_key(maps: MapFactory) -> None:
    m = maps()
    assert m.replace("k", None, 1).result(T) is True  # absent: set, as put_if_absent
    assert m.get("k", latest=True).result(T) == 1
    assert m.replace("k", None, 2).result(T) is False  # present: left alone
    assert m.get("k", latest=True).result(T) == 1
    assert m.replace("k", 1, 3).result(T) is True  # an equal value: replaced
    assert m.replace("k", 1, 4).result(T) is False  # a different one: not
    assert m.replace("gone", 1, 5).result(T) is False  # an absent key equals no value
    assert m.items(latest=True).result(T) == {"k": 3}


def test_replace_none_and_put_if_absent_agree_on_a_stored_none(maps: MapFactory) -> None:
    """A value ``None`` (JSON null, which ``put`` stores) reads as absent in
    ``get``; ``replace(k, None, v)`` and ``put_if_absent`` take it as absent too,
    so that ``replace(k, get(k), v)`` can always succeed on an unchanged key."""
    m = maps()
    m.put_all({"a": None, "b": None}).result(T)
    assert m.contains("a").result(T) and m.get("a").result(T) is None
    assert m.replace("a", m.get("a", latest=True).result(T), 1).result(T) is True
    assert m.put_if_absent("b", 2).result(T) is None  # None: this call set it
    assert m.items(latest=True).result(T) == {"a": 1, "b": 2}
    assert m.put_if_absent("b", 3).result(T) == 2  # present: its value, nothing written


# -- clear(): one atomic write, or a clear refusal before anything is written --------


def _tombstone_bytes(keys: list[str]) -> int:
    """What deleting ``keys`` costs of one write, as the core counts it."""
    return sum(len(k) + MESSAGE_OVERHEAD_BYTES for k in keys)


def test_clear_of_what_fits_one_write_deletes_it_all(maps: MapFactory) -> None:
    config = StateConfig(max_write_bytes=2048)
    m = maps(config)
    keys = [f"key-{i:03d}" for i in range(2048 // (7 + MESSAGE_OVERHEAD_BYTES))]
    assert _tombstone_bytes(keys) <= 2048 < _tombstone_bytes([*keys, "key-999"])
    m.put_all(dict.fromkeys(keys, 1)).result(T)
    assert m.clear().result(T) == len(keys)
    assert m.size(latest=True).result(T) == 0


def test_clear_over_max_write_bytes_is_refused_and_deletes_nothing(maps: MapFactory) -> None:
    config = StateConfig(max_write_bytes=2048)
    m = maps(config)
    keys = [f"key-{i:03d}" for i in range(2048 // (7 + MESSAGE_OVERHEAD_BYTES) + 1)]
    assert _tombstone_bytes(keys) > 2048
    m.put_all(dict.fromkeys(keys[:10], 1)).result(T)
    m.put_all(dict.fromkeys(keys[10:], 1)).result(T)
    with pytest.raises(ValueTooLargeError) as refused:
        m.clear().result(T)
    assert not isinstance(refused.value, TooManyOpsError)
    message = str(refused.value)
    assert f"clear() of {len(keys)} keys" in message, message
    assert "max_write_bytes=2048" in message and "nothing was deleted" in message, message
    assert (refused.value.size, refused.value.limit) == (_tombstone_bytes(keys), 2048)
    assert m.size(latest=True).result(T) == len(keys)  # not one key deleted
    m.delete(keys[0]).result(T)
    assert m.clear().result(T) == len(keys) - 1  # one less fits


def test_clear_over_max_ops_per_write_is_refused_and_deletes_nothing(maps: MapFactory) -> None:
    m = maps(StateConfig(max_ops_per_write=5))
    for i in range(6):
        m.put(f"k{i}", i).result(T)
    with pytest.raises(TooManyOpsError) as refused:
        m.clear().result(T)
    message = str(refused.value)
    assert "clear() of 6 keys" in message and "max_ops_per_write=5" in message, message
    assert (refused.value.count, refused.value.limit) == (6, 5)
    assert m.size(latest=True).result(T) == 6
    m.delete("k0").result(T)
    assert m.clear().result(T) == 5
