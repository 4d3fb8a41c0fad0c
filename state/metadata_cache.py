"""MetadataCache: typed values over a metadata store, kept fresh by notifications.

``read_modify_update`` is the compare-and-set loop of Kazoo's counter and of
Pulsar's ``MetadataCache``: read value and version, compute, put with the
expected version, and on ``BadVersionError`` read again and retry (bounded by a
:class:`~pulsar_state.RetryPolicy`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from pulsar_state.errors import BadVersionError, NotFoundError, WriteFailedError
from pulsar_state.metadata_base import BaseMetadataStore
from pulsar_state.metadata_state import Notification, validate_path
from pulsar_state.retry import RetryPolicy
from pulsar_state.serde import JsonSerde, Serde

__all__ = ["MetadataCache"]

T = TypeVar("T")
R = TypeVar("R")


class MetadataCache(Generic[T]):
    """Typed, cached access to the values under a metadata store."""

    def __init__(
        self,
        store: BaseMetadataStore,
        *,
        serde: Serde[T] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.store = store
        self.serde: Serde[T] = serde or JsonSerde()
        self.retry = retry or RetryPolicy(max_attempts=100, deadline_s=60)
        self._cache: dict[str, tuple[T, int] | None] = {}
        self._children: dict[str, list[str]] = {}
        self._exists: dict[str, bool] = {}
        self._lock = threading.Lock()
        # A read (or put) of the store, then an insert: a notification handled
        # between the two must win, or the cache keeps the older value for good.
        # Per path with a read in flight: how many are in flight, and how many
        # invalidations arrived meanwhile; an insert happens only if none did.
        self._in_flight: Counter[str] = Counter()
        self._invalidations: Counter[str] = Counter()
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pss-meta-cache")
        store.register_listener(self._invalidate)

    def _invalidate(self, note: Notification) -> None:
        with self._lock:
            self._cache.pop(note.path, None)
            self._children.pop(note.path, None)
            self._exists.pop(note.path, None)
            if note.path in self._in_flight:
                self._invalidations[note.path] += 1

    def _fill(
        self,
        path: str,
        read: Callable[[], tuple[R, Any]],
        into: dict[str, Any] | None = None,
    ) -> R:
        """Run ``read`` (a store call giving a result and the cache entry it
        implies); cache that entry (in ``into``, by default the values) unless
        ``path`` was invalidated meanwhile."""
        cache = self._cache if into is None else into
        with self._lock:
            self._in_flight[path] += 1
            seen = self._invalidations[path]
        fresh = False
        try:
            result, entry = read()
            fresh = True
            return result
        finally:
            with self._lock:
                if fresh and self._invalidations[path] == seen:
                    cache[path] = entry
                self._in_flight[path] -= 1
                if self._in_flight[path] <= 0:
                    del self._in_flight[path]
                    self._invalidations.pop(path, None)

    def _load(self, path: str) -> tuple[T, int] | None:
        with self._lock:
            if path in self._cache:
                return self._cache[path]

        def read() -> tuple[tuple[T, int] | None, tuple[T, int] | None]:
            found = self.store.get(path).result()
            entry = (
                None if found is None else (self.serde.deserialize(found.value), found.stat.version)
            )
            return entry, entry

        return self._fill(path, read)

    def get(self, path: str) -> Future[T | None]:
        """The value at ``path`` (cached until a notification says it changed)."""
        validate_path(path)
        return self._executor.submit(lambda: e[0] if (e := self._load(path)) else None)

    def get_children(self, path: str) -> Future[list[str]]:
        """``path``'s children (cached until a notification on ``path``)."""
        validate_path(path)
        return self._executor.submit(self._load_children, path)

    def _load_children(self, path: str) -> list[str]:
        with self._lock:
            if path in self._children:
                return list(self._children[path])

        def read() -> tuple[list[str], list[str]]:
            children = self.store.get_children(path).result()
            return list(children), children

        return self._fill(path, read, self._children)

    def exists(self, path: str) -> Future[bool]:
        """Whether ``path`` exists (cached, from a cached value too)."""
        validate_path(path)
        return self._executor.submit(self._load_exists, path)

    def _load_exists(self, path: str) -> bool:
        with self._lock:
            if path in self._cache:
                return self._cache[path] is not None
            if path in self._exists:
                return self._exists[path]

        def read() -> tuple[bool, bool]:
            found = bool(self.store.exists(path).result())
            return found, found

        return self._fill(path, read, self._exists)

    def create(self, path: str, value: T) -> Future[T]:
        data = self.serde.serialize(value)
        return self._executor.submit(lambda: self._put(path, data, -1, value))

    def delete(self, path: str) -> Future[None]:
        return self.store.delete(path)

    def read_modify_update(self, path: str, fn: Callable[[T], T]) -> Future[T]:
        """Atomically replace the value at ``path`` by ``fn(value)``; ``NotFoundError``."""
        return self._executor.submit(self._rmw, path, fn, False)

    def read_modify_update_or_create(self, path: str, fn: Callable[[T | None], T]) -> Future[T]:
        """Like :meth:`read_modify_update`; ``fn(None)`` creates a missing value."""
        return self._executor.submit(self._rmw, path, fn, True)

    def _put(self, path: str, data: bytes, expected: int, value: T) -> T:
        def put() -> tuple[T, tuple[T, int]]:
            stat = self.store.put(path, data, expected).result()
            return value, (value, stat.version)

        return self._fill(path, put)

    def _rmw(self, path: str, fn: Callable[[Any], T], create: bool) -> T:
        validate_path(path)
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                self._cache.pop(path, None)  # compare against the store, not the cache
            entry = self._load(path)
            if entry is None and not create:
                raise NotFoundError(f"{path} does not exist")
            current, version = entry if entry is not None else (None, -1)
            new = fn(current)
            try:
                return self._put(path, self.serde.serialize(new), version, new)
            except BadVersionError:
                if self.retry.exhausted(attempt, started):
                    raise WriteFailedError(
                        f"{path}: gave up after {attempt} version conflicts", attempts=attempt
                    ) from None
                self.retry.sleep(self.retry.backoff_s(attempt))

    def close(self) -> None:
        self.store.unregister_listener(self._invalidate)
        self._executor.shutdown(wait=False, cancel_futures=True)
