"""MetadataCache never keeps a value older than a change it was told about."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from cache_model import check_caches_converge

from pulsar_state import GetResult, MemoryMetadataStore, MetadataCache, Notification

T = 10


class GatedStore(MemoryMetadataStore):
    """Reads now, but hands the result back only when ``gate`` opens: the window
    between the cache's read and its insert, held open on purpose."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.reading = threading.Event()

    def get(self, path: str) -> Future[GetResult | None]:
        fut = super().get(path)
        if not self.gate.is_set():
            self.reading.set()
            assert self.gate.wait(T), "the test opened the gate"
        return fut


class JitteryStore(MemoryMetadataStore):
    """Reads now, returns after a short random pause (widens the race window)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rng = random.Random(7)

    def get(self, path: str) -> Future[GetResult | None]:
        fut = super().get(path)
        time.sleep(self._rng.random() * 0.001)
        return fut


def test_an_invalidation_during_a_read_is_not_lost() -> None:
    store = GatedStore()
    writer = store.sibling()
    cache: MetadataCache[int] = MetadataCache(store)
    invalidated = threading.Event()

    def after_cache(note: Notification) -> None:  # registered after the cache's listener
        if note.path == "/k":
            invalidated.set()

    store.register_listener(after_cache)
    try:
        writer.put("/k", b"1").result(T)
        assert invalidated.wait(T)
        invalidated.clear()
        store.gate.clear()
        pending = cache.get("/k")  # reads 1, then waits at the gate
        assert store.reading.wait(T)
        writer.put("/k", b"2").result(T)
        assert invalidated.wait(T), "the cache was told of the change"
        store.gate.set()
        assert pending.result(T) == 1  # what it read, fine for this call...
        assert cache.get("/k").result(T) == 2, "the cache kept a value older than a notification"
    finally:
        cache.close()
        writer.close()
        store.close()


@pytest.fixture
def jittery() -> Iterator[list[MemoryMetadataStore]]:
    root = JitteryStore()
    stores: list[MemoryMetadataStore] = [root, JitteryStore(shared=root._shared)]
    stores.append(MemoryMetadataStore(shared=root._shared))
    yield stores
    for s in stores:
        s.close()


@pytest.mark.parametrize("seed", range(5))
def test_caches_converge_under_concurrent_writes(
    jittery: list[MemoryMetadataStore], seed: int
) -> None:
    root = jittery[0]

    def stored(path: str) -> Any:
        got = root.get(path).result(T)
        return None if got is None else json.loads(got.value)

    reads = check_caches_converge(
        stores=list(jittery),
        stored_value=stored,
        paths=[f"/cfg/{i}" for i in range(3)],
        writers=4,
        ops_per_writer=150,
        readers=3,
        seed=seed,
        settle_s=3.0,
    )
    assert reads > 0
