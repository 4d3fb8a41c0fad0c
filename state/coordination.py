"""CoordinationService: locks, leader election and counters on a metadata store (PIP-45).

A lock is an ephemeral node: whoever creates it (expected version ``-1``) holds
it until releasing it or until its session dies (see
:mod:`pulsar_state.metadata_store` for the bound). Leadership is a lock that
candidates wait for. Counters are compare-and-set increments. Every lock comes
with a fencing token that grows with each acquisition: pass it along with side
effects and reject older ones.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from pulsar_state import futures
from pulsar_state.errors import BadVersionError, NotFoundError, ResourceBusyError, StateClosedError
from pulsar_state.metadata_base import BaseMetadataStore
from pulsar_state.metadata_cache import MetadataCache
from pulsar_state.metadata_state import GetResult, Notification, NotificationType, validate_path
from pulsar_state.serde import JsonSerde, Serde

__all__ = ["CoordinationService", "ResourceLock"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_READ_TIMEOUT_S = 30.0  # a local read of the node, when checking a lock is still ours


class ResourceLock(Generic[T]):
    """A held lock. ``lost`` completes when it is no longer held (released or taken).

    Its identity is ``(path, owner, fencing_token)``: the session that made the
    node and the token of that write. Release and loss detection compare both
    with the node, never the version alone (a node deleted and made again by
    another session starts at version 0 again).
    """

    def __init__(
        self,
        service: CoordinationService[T],
        path: str,
        content: T,
        *,
        version: int,
        token: int,
        owner: str,
    ) -> None:
        self._service = service
        self.path = path
        self.content = content
        self.version = version
        self.fencing_token = token
        self.owner = owner
        self.lost: Future[None] = Future()

    @property
    def held(self) -> bool:
        return not self.lost.done()

    def owns(self, node: GetResult | None) -> bool:
        """Whether ``node`` is this lock's node (same owner session and token)."""
        return (
            node is not None
            and node.stat.owner == self.owner
            and node.stat.token == self.fencing_token
        )

    def release(self) -> Future[None]:
        """Delete the lock node if it is still ours; completes ``lost``.

        The delete is conditional on the node's owner and token, checked
        atomically by the store: a holder that lost its node never deletes the
        node of the next holder."""
        fut: Future[None] = Future()

        def done(f: Future[None]) -> None:
            exc = f.exception()
            self._service._forget(self)
            if exc is not None and not isinstance(exc, NotFoundError | BadVersionError):
                futures.set_exception(fut, exc)
            else:
                futures.set_result(fut, None)

        self._service.store.delete(
            self.path, expected_owner=self.owner, expected_token=self.fencing_token
        ).add_done_callback(done)
        return fut


class CoordinationService(Generic[T]):
    """Locks, leader election and counters on one metadata store."""

    def __init__(self, store: BaseMetadataStore, *, serde: Serde[T] | None = None) -> None:
        self.store = store
        self.serde: Serde[T] = serde or JsonSerde()
        self._held: dict[str, ResourceLock[T]] = {}
        self._waiters: dict[str, list[threading.Event]] = {}
        self._lock = threading.Lock()
        self._counters: MetadataCache[int] = MetadataCache(store)
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pss-coord")
        self._closed = False
        store.register_listener(self._on_change)

    # -- locks ------------------------------------------------------------------------

    def acquire_lock(self, path: str, content: T) -> Future[ResourceLock[T]]:
        """Take the lock at ``path`` now, or fail with :class:`ResourceBusyError`."""
        validate_path(path)
        data = self.serde.serialize(content)
        result: Future[ResourceLock[T]] = Future()

        def done(f: Future[Any]) -> None:
            exc = f.exception()
            if isinstance(exc, BadVersionError):
                result.set_exception(ResourceBusyError(path))
            elif exc is not None:
                result.set_exception(exc)
            else:
                stat = f.result()  # the token of this very write, not of a later node
                owner = stat.owner if stat.owner is not None else self.store.session_id
                lock = ResourceLock(
                    self, path, content, version=stat.version, token=stat.token, owner=owner
                )
                with self._lock:
                    replaced = self._held.get(path)
                    self._held[path] = lock
                if replaced is not None:  # we made a new node: the old one is gone
                    self._forget(replaced)
                # a change that landed before the lock was registered found no
                # lock to check: check once now (later ones see it registered)
                self._check(lock)
                result.set_result(lock)

        self.store.put(path, data, -1, ephemeral=True).add_done_callback(done)
        return result

    def read_lock(self, path: str) -> Future[T | None]:
        """The content of the lock at ``path``, ``None`` if free."""
        return self._get_content(path)

    def _get_content(self, path: str) -> Future[T | None]:
        result: Future[T | None] = Future()

        def done(f: Future[Any]) -> None:
            exc = f.exception()
            if exc is not None:
                result.set_exception(exc)
            else:
                got = f.result()
                result.set_result(None if got is None else self.serde.deserialize(got.value))

        self.store.get(path).add_done_callback(done)
        return result

    def list_locks(self, path: str) -> Future[list[str]]:
        """The locks held under ``path`` (its children)."""
        return self.store.get_children(path)

    def _forget(self, lock: ResourceLock[T]) -> None:
        with self._lock:
            if self._held.get(lock.path) is lock:
                del self._held[lock.path]
        futures.set_result(lock.lost, None)

    # -- leader election ----------------------------------------------------------------

    def become_leader(self, path: str, content: T) -> Future[ResourceLock[T]]:
        """Completes (with the leadership lock) once this candidate is elected."""
        validate_path(path)
        return self._executor.submit(self._campaign, path, content)

    def _campaign(self, path: str, content: T) -> ResourceLock[T]:
        while not self._closed:
            freed = threading.Event()
            with self._lock:
                self._waiters.setdefault(path, []).append(freed)
            try:
                return self.acquire_lock(path, content).result()
            except ResourceBusyError:
                freed.wait(timeout=5.0)  # a deletion wakes us; re-check now and then anyway
            finally:
                with self._lock:
                    waiting = self._waiters.get(path, [])
                    if freed in waiting:
                        waiting.remove(freed)
        raise StateClosedError("the coordination service is closed")

    # -- counters ------------------------------------------------------------------------

    def get_next_counter_value(self, path: str) -> Future[int]:
        """A unique, increasing value (1, 2, ...) from the counter at ``path``."""
        return self._counters.read_modify_update_or_create(path, lambda v: (v or 0) + 1)

    # -- notifications ---------------------------------------------------------------------

    def _on_change(self, note: Notification) -> None:
        if note.type not in (NotificationType.DELETED, NotificationType.MODIFIED):
            return
        with self._lock:
            lock = self._held.get(note.path)
            waiters = list(self._waiters.get(note.path, []))
        if note.type is NotificationType.DELETED:
            for event in waiters:
                event.set()
        if lock is not None:
            self._check(lock)

    def _check(self, lock: ResourceLock[T]) -> None:
        """Forget ``lock`` unless the node at its path is still its own (same
        owner and token: a delete then a re-create by anyone is a loss)."""
        if lock.lost.done():
            return
        try:
            current = self.store.get(lock.path).result(timeout=_READ_TIMEOUT_S)
        except Exception:  # the store itself is gone (or stuck): so is the lock
            log.warning("could not read %s: treating the lock as lost", lock.path, exc_info=True)
            current = None
        if not lock.owns(current):
            log.warning("lost the lock %s", lock.path)
            self._forget(lock)

    def close(self) -> None:
        self._closed = True
        self.store.unregister_listener(self._on_change)
        with self._lock:
            for events in self._waiters.values():
                for event in events:
                    event.set()
        self._counters.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
