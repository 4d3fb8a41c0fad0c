"""MetadataCache: typed values over a metadata store, kept fresh by notifications.

``read_modify_update`` is the compare-and-set loop of Kazoo's counter and of
Pulsar's ``MetadataCache``: read value and version, compute, put with the
expected version, and on ``BadVersionError`` read again and retry (bounded by a
:class:`~pulsar_state.RetryPolicy`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from tenacity import retry_if_exception_type

from pulsar_state.errors import BadVersionError, NotFoundError, StateClosedError, WriteFailedError
from pulsar_state.metadata.base import BaseMetadataStore
from pulsar_state.metadata.tree import Notification, validate_path
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

    def _submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        """Run ``fn(*args)`` on the cache's threads; StateClosedError once closed."""
        try:
            return self._executor.submit(fn, *args)
        except RuntimeError as exc:  # shut down: "cannot schedule new futures"
            raise StateClosedError("the metadata cache is closed") from exc

    def get(self, path: str) -> Future[T | None]:
        """The value at ``path`` (cached until a notification says it changed).

        Returns:
            A future of the deserialized value, or ``None`` if there is no node.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            StateClosedError: at the call once the cache is closed; through the
                future once its store is.
            ValueError: through the future, for a stored value the serde
                cannot deserialize.
            OperationTimeoutError, ForkedProcessError: through the future, as
                the store's ``get`` fails.
        """
        validate_path(path)
        return self._submit(lambda: e[0] if (e := self._load(path)) else None)

    def get_children(self, path: str) -> Future[list[str]]:
        """``path``'s children (cached until a notification on ``path``).

        Returns:
            A future of the child names (a new list; empty for none).

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            StateClosedError: at the call once the cache is closed; through the
                future once its store is.
        """
        validate_path(path)
        return self._submit(self._load_children, path)

    def _load_children(self, path: str) -> list[str]:
        with self._lock:
            if path in self._children:
                return list(self._children[path])

        def read() -> tuple[list[str], list[str]]:
            children = self.store.get_children(path).result()
            return list(children), children

        return self._fill(path, read, self._children)

    def exists(self, path: str) -> Future[bool]:
        """Whether ``path`` exists (cached, from a cached value too).

        Returns:
            A future of ``True`` if a node is at ``path``.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            StateClosedError: at the call once the cache is closed; through the
                future once its store is.
        """
        validate_path(path)
        return self._submit(self._load_exists, path)

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
        """Create the node at ``path`` with ``value`` (it must not exist yet).

        Returns:
            A future of ``value`` once it is stored (and cached).

        Raises:
            TypeError: at the call, for a value the serde cannot serialize.
            StateClosedError: at the call once the cache is closed; through the
                future once its store is.
            BadVersionError: through the future, when the node exists already.
            TypeError, ValueError: through the future, for a path that is not
                a valid metadata path.
            WriteFailedError, FencedError, PermissionDeniedError,
                ValueTooLargeError: through the future, as the store's ``put``
                fails.
        """
        data = self.serde.serialize(value)
        return self._submit(lambda: self._put(path, data, -1, value))

    def delete(self, path: str) -> Future[None]:
        """Delete the node at ``path`` (the store's delete; notifications evict it).

        Returns:
            A future of ``None`` once the node is deleted.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            NotFoundError: through the future, when there is no node at ``path``.
            StateClosedError, WriteFailedError, FencedError: through the
                future (or StateClosedError at the call), as the store's
                ``delete`` fails.
        """
        return self.store.delete(path)

    def read_modify_update(self, path: str, fn: Callable[[T], T]) -> Future[T]:
        """Atomically replace the value at ``path`` by ``fn(value)``; ``NotFoundError``.

        ``fn`` may run several times (once per version conflict); it must be
        side-effect free.

        Returns:
            A future of the value written.

        Raises:
            StateClosedError: at the call once the cache is closed; through the
                future once its store is.
            TypeError, ValueError: through the future, for a path that is not
                a valid metadata path, or a value the serde cannot
                (de)serialize.
            Exception: through the future, whatever ``fn`` raises, unchanged
                (nothing is written).
            WriteFailedError: through the future, after version conflicts on
                every attempt the cache's :class:`~pulsar_state.RetryPolicy`
                allows (or as the store's ``put`` fails).
            FencedError, PermissionDeniedError, ValueTooLargeError: through the
                future, as the store's ``put`` fails.
            NotFoundError: through the future, when there is no node at ``path``.
        """
        return self._submit(self._rmw, path, fn, False)

    def read_modify_update_or_create(self, path: str, fn: Callable[[T | None], T]) -> Future[T]:
        """Like :meth:`read_modify_update`; ``fn(None)`` creates a missing value.

        ``fn`` may run several times (once per version conflict); it must be
        side-effect free.

        Returns:
            A future of the value written.

        Raises:
            StateClosedError: at the call once the cache is closed; through the
                future once its store is.
            TypeError, ValueError: through the future, for a path that is not
                a valid metadata path, or a value the serde cannot
                (de)serialize.
            Exception: through the future, whatever ``fn`` raises, unchanged
                (nothing is written).
            WriteFailedError: through the future, after version conflicts on
                every attempt the cache's :class:`~pulsar_state.RetryPolicy`
                allows (or as the store's ``put`` fails).
            FencedError, PermissionDeniedError, ValueTooLargeError: through the
                future, as the store's ``put`` fails.
        """
        return self._submit(self._rmw, path, fn, True)

    def _put(self, path: str, data: bytes, expected: int, value: T) -> T:
        def put() -> tuple[T, tuple[T, int]]:
            stat = self.store.put(path, data, expected).result()
            return value, (value, stat.version)

        return self._fill(path, put)

    def _rmw(self, path: str, fn: Callable[[Any], T], create: bool) -> T:
        validate_path(path)
        attempts = 0

        def attempt() -> T:
            nonlocal attempts
            attempts += 1
            with self._lock:
                self._cache.pop(path, None)  # compare against the store, not the cache
            entry = self._load(path)
            if entry is None and not create:
                raise NotFoundError(f"{path} does not exist")
            current, version = entry if entry is not None else (None, -1)
            new = fn(current)
            return self._put(path, self.serde.serialize(new), version, new)

        try:
            return self.retry.retrying(retry=retry_if_exception_type(BadVersionError))(attempt)
        except BadVersionError:
            raise WriteFailedError(
                f"{path}: gave up after {attempts} version conflicts", attempts=attempts
            ) from None

    def close(self) -> None:
        """Stop listening to the store and refuse later calls (idempotent).

        Calls not started yet are cancelled; the store stays open.
        """
        self.store.unregister_listener(self._invalidate)
        self._executor.shutdown(wait=False, cancel_futures=True)
