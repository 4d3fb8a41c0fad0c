"""MetadataCache.get_children and exists never keep an answer older than a
notification they were told about (the race of a read with an invalidation)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from pulsar_state import MemoryMetadataStore, MetadataCache, Notification

T = 10


class GatedStore(MemoryMetadataStore):
    """Answers get_children and exists now, but hands the answer back only when
    ``gate`` opens: the window between the cache's read and its insert."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.reading = threading.Event()

    def _hold(self, fut: Future[Any]) -> Future[Any]:
        if not self.gate.is_set():
            self.reading.set()
            assert self.gate.wait(T), "the test opened the gate"
        return fut

    def get_children(self, path: str, latest: bool = False) -> Future[list[str]]:
        return self._hold(super().get_children(path))

    def exists(self, path: str, latest: bool = False) -> Future[bool]:
        return self._hold(super().exists(path))


@pytest.mark.parametrize(
    ("read", "before", "after"),
    [
        (lambda c: c.get_children("/dir"), ["a"], ["a", "b"]),
        (lambda c: c.exists("/dir/b"), False, True),
    ],
    ids=["get_children", "exists"],
)
def test_an_invalidation_during_a_listing_read_is_not_lost(
    read: Callable[[MetadataCache[Any]], Future[Any]], before: Any, after: Any
) -> None:
    store = GatedStore()
    writer = store.sibling()
    cache: MetadataCache[Any] = MetadataCache(store)
    told = threading.Event()

    def after_cache(note: Notification) -> None:  # registered after the cache's listener
        if note.path in ("/dir", "/dir/b"):
            told.set()

    store.register_listener(after_cache)
    try:
        writer.put("/dir/a", b"1").result(T)
        assert told.wait(T)
        told.clear()
        store.gate.clear()
        pending = read(cache)  # reads the old answer, then waits at the gate
        assert store.reading.wait(T)
        writer.put("/dir/b", b"2").result(T)
        assert told.wait(T), "the cache was told of the change"
        store.gate.set()
        assert pending.result(T) == before  # what it read, fine for this call...
        assert read(cache).result(T) == after, "the cache kept an answer older than a notification"
    finally:
        cache.close()
        writer.close()
        store.close()
