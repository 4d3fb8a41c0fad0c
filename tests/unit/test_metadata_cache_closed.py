"""A closed MetadataCache refuses calls with StateClosedError (the one error root).

It used to raise the executor's bare ``RuntimeError("cannot schedule new
futures after shutdown")``.
"""

from __future__ import annotations

import pytest

from pulsar_state import MemoryMetadataStore, MetadataCache, StateClosedError


def test_every_call_on_a_closed_cache_raises_state_closed_error() -> None:
    store = MemoryMetadataStore()
    try:
        cache: MetadataCache[int] = MetadataCache(store)
        assert cache.create("/n", 1).result(timeout=5) == 1
        cache.close()
        cache.close()  # idempotent
        calls = {
            "get": lambda: cache.get("/n"),
            "get_children": lambda: cache.get_children("/"),
            "exists": lambda: cache.exists("/n"),
            "create": lambda: cache.create("/m", 2),
            "read_modify_update": lambda: cache.read_modify_update("/n", lambda v: v + 1),
            "read_modify_update_or_create": lambda: cache.read_modify_update_or_create(
                "/n", lambda v: (v or 0) + 1
            ),
        }
        for call in calls.values():
            with pytest.raises(StateClosedError, match="closed"):
                call()
        # the store itself is still open: the value is unchanged
        got = store.get("/n").result(timeout=5)
        assert got is not None and got.value == b"1"
    finally:
        store.close()
