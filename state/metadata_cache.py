"""MetadataCache: typed values over a metadata store, kept fresh by notifications.

``read_modify_update`` is the compare-and-set loop of Kazoo's counter and of
Pulsar's ``MetadataCache``: read value and version, compute, put with the
expected version, and on ``BadVersionError`` read again and retry (bounded by a
:class:`~pulsar_state.RetryPolicy`).
"""

from __future__ import annotations

import threading
import time
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
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pss-meta-cache")
        store.register_listener(self._invalidate)

    def _invalidate(self, note: Notification) -> None:
        with self._lock:
            self._cache.pop(note.path, None)

    def _load(self, path: str) -> tuple[T, int] | None:
        with self._lock:
            if path in self._cache:
                return self._cache[path]
        found = self.store.get(path).result()
        entry = None if found is None else (self.serde.deserialize(found.value), found.stat.version)
        with self._lock:
            self._cache[path] = entry
        return entry

    def get(self, path: str) -> Future[T | None]:
        """The value at ``path`` (cached until a notification says it changed)."""
        validate_path(path)
        return self._executor.submit(lambda: e[0] if (e := self._load(path)) else None)

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
        stat = self.store.put(path, data, expected).result()
        with self._lock:
            self._cache[path] = (value, stat.version)
        return value

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
