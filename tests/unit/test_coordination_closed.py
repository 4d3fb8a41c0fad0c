"""A closed CoordinationService takes no locks and starts no campaigns.

Before: ``become_leader`` raised the executor's bare ``RuntimeError`` and
``acquire_lock`` still took the lock (a lock no service watches any more).
"""

from __future__ import annotations

import pytest

from pulsar_state import CoordinationService, MemoryMetadataStore, StateClosedError


def test_a_closed_service_refuses_locks_campaigns_and_counters() -> None:
    store = MemoryMetadataStore()
    try:
        service: CoordinationService[str] = CoordinationService(store)
        assert service.get_next_counter_value("/c").result(timeout=5) == 1
        service.close()
        with pytest.raises(StateClosedError, match="closed"):
            service.acquire_lock("/locks/a", "me")
        with pytest.raises(StateClosedError, match="closed"):
            service.become_leader("/leader", "me")
        with pytest.raises(StateClosedError, match="closed"):
            service.get_next_counter_value("/c")
        # nothing was taken behind the caller's back
        assert store.get("/locks/a").result(timeout=5) is None
        assert store.get("/leader").result(timeout=5) is None
    finally:
        store.close()
