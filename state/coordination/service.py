"""CoordinationService: locks, leader election and counters on a metadata store."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Generic, TypeVar

from pulsar_state.coordination.lock import LockEvent, ResourceLock
from pulsar_state.core import futures
from pulsar_state.errors import (
    BadVersionError,
    OperationTimeoutError,
    ResourceBusyError,
    SessionLostError,
    StateClosedError,
)
from pulsar_state.metadata.base import BaseMetadataStore
from pulsar_state.metadata.cache import MetadataCache
from pulsar_state.metadata.tree import (
    Notification,
    NotificationType,
    SessionEvent,
    Stat,
    validate_path,
)
from pulsar_state.serde import JsonSerde, Serde

__all__ = ["CoordinationService"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_READ_TIMEOUT_S = 30.0  # a local read of the node, when checking a lock is still ours


class CoordinationService(Generic[T]):
    """Locks, leader election and counters on one metadata store."""

    def __init__(self, store: BaseMetadataStore, *, serde: Serde[T] | None = None) -> None:
        self.store = store
        self.serde: Serde[T] = serde or JsonSerde()
        self._held: dict[str, ResourceLock[T]] = {}
        self._waiters: dict[str, list[threading.Event]] = {}
        self._lock = threading.Lock()
        self._counters: MetadataCache[int] = MetadataCache(store)
        # revalidations after a session returns, one at a time, off the dispatcher
        self._revalidator = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pss-revalidate")
        self._closed = False
        store.register_listener(self._on_change)
        store.register_session_listener(self._on_session)

    # -- locks ------------------------------------------------------------------------

    def acquire_lock(self, path: str, content: T) -> Future[ResourceLock[T]]:
        """Take the lock at ``path`` now, or fail with :class:`ResourceBusyError`.

        The node of this service's own lock suspended by a session loss (not
        yet revalidated) is taken over with a new token, as Pulsar's
        LockManager re-takes a lock of its own session; the old lock object is
        then done (``lost``).

        Returns:
            A future of the held :class:`ResourceLock` (its ``fencing_token``
            is the write's token).

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path, or content the serde cannot serialize.
            StateClosedError: at the call once this service is closed; through
                the future once its store is.
            ResourceBusyError: through the future, when another session (or
                another service) holds the lock.
            SessionLostError: through the future, while the store's session is
                lost (no ephemeral node can be made).
            WriteFailedError, FencedError, PermissionDeniedError: through the
                future, as the store's write fails (a
                :class:`~pulsar_state.MetadataStore`: retries exhausted, fenced
                on every attempt, role refused).
        """
        self._check_open()
        validate_path(path)
        data = self.serde.serialize(content)
        result: Future[ResourceLock[T]] = Future()

        def settle(written: Future[Stat]) -> None:
            exc = written.exception()
            if isinstance(exc, BadVersionError):
                # the node exists: our own suspended lock's is taken over, off this thread
                try:
                    taken = self._revalidator.submit(self._take_own_node, path, data, content)
                except RuntimeError:  # closed
                    raise ResourceBusyError(path) from exc
                futures.chain(taken, result)
            elif exc is not None:
                raise exc
            else:
                futures.set_result(result, self._register(path, content, written.result()))

        futures.on_done(self.store.put(path, data, -1, ephemeral=True), result, settle)
        return result

    def _register(self, path: str, content: T, stat: Stat) -> ResourceLock[T]:
        """The lock of a node just written (the token of this very write)."""
        owner = stat.owner if stat.owner is not None else self.store.session_id
        lock = ResourceLock(
            self, path, content, version=stat.version, token=stat.token, owner=owner
        )
        with self._lock:
            replaced = self._held.get(path)
            self._held[path] = lock
        if replaced is not None:  # we made a new node: the old one is gone
            self._lose(replaced)
        # a change that landed before the lock was registered found no
        # lock to check: check once now (later ones see it registered)
        self._check(lock)
        return lock

    def _take_own_node(self, path: str, data: bytes, content: T) -> ResourceLock[T]:
        """Take over the node at ``path`` if it is our own suspended lock's.

        Raises ResourceBusyError for any other node (another service's, or one
        a put made), and when the node changes meanwhile.
        """
        with self._lock:
            mine = self._held.get(path)
        node = self.store.get(path, latest=True).result(timeout=_READ_TIMEOUT_S)
        # only the node of our own suspended lock (its session lost, not
        # yet revalidated); never one another service or a put made
        if mine is None or mine.active or mine.lost.done() or node is None:
            raise ResourceBusyError(path)
        if node.stat.owner != self.store.session_id:
            raise ResourceBusyError(path)
        try:
            stat = self.store.put(path, data, node.stat.version, ephemeral=True).result(
                timeout=_READ_TIMEOUT_S
            )
        except BadVersionError as exc:
            raise ResourceBusyError(path) from exc
        log.info("took over the lock %s left by this session", path)
        return self._register(path, content, stat)

    def read_lock(self, path: str, *, latest: bool = True) -> Future[T | None]:
        """The content of the lock at ``path``, ``None`` if free.

        Linearizable by default (``latest=True``, as etcd's reads are): it
        reflects every acquisition and release acknowledged before the call,
        by any process (one round trip to the broker). ``latest=False`` answers
        from this process's view, which may lag.

        Returns:
            A future of the holder's content (deserialized), or ``None``.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            StateClosedError: at the call or through the future, once the store
                is closed.
            ValueError: through the future, for content the serde cannot
                deserialize.
        """
        return futures.then(
            self.store.get(path, latest=latest),
            lambda got: None if got is None else self.serde.deserialize(got.value),
        )

    def list_locks(self, path: str, *, latest: bool = True) -> Future[list[str]]:
        """The locks held under ``path`` (its children).

        Linearizable by default, like :meth:`read_lock`; ``latest=False``
        answers from this process's view.

        Returns:
            A future of the child names under ``path`` (sorted; empty: none).

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            StateClosedError: at the call or through the future, once the store
                is closed.
        """
        return self.store.get_children(path, latest=latest)

    def _forget(self, lock: ResourceLock[T]) -> None:
        """No longer watch ``lock`` (released or lost)."""
        with self._lock:
            if self._held.get(lock.path) is lock:
                del self._held[lock.path]

    def _lose(self, lock: ResourceLock[T]) -> None:
        """``lock`` is lost: forget it, complete ``lost`` and tell its listeners
        (once). Never for a release of the lock's own node (ResourceLock.lost)."""
        self._forget(lock)
        if futures.set_result(lock.lost, None):
            lock._emit(LockEvent.LOST)

    # -- leader election ----------------------------------------------------------------

    def become_leader(self, path: str, content: T) -> Future[ResourceLock[T]]:
        """Completes (with the leadership lock) once this candidate is elected:
        also with the lock this service already holds at ``path`` (a leader
        that lost its session and had its lock re-asserted is still elected).

        The campaign waits for the holder's node to go (a notification, or a
        re-check every few seconds), on a daemon thread of its own (any number
        of campaigns at once; a process that exits without closing the service
        is not held up by one). Cancelling the future ends the campaign; a
        lock it took meanwhile is released.

        Returns:
            A future of the leadership :class:`ResourceLock`.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            StateClosedError: at the call once this service is closed; through
                the future when it closes before this candidate is elected.
            TypeError: through the future, for content the serde cannot
                serialize.
            WriteFailedError, FencedError, PermissionDeniedError: through the
                future, as the store's write fails (a
                :class:`~pulsar_state.MetadataStore`: retries exhausted, fenced
                on every attempt, role refused).
        """
        self._check_open()
        validate_path(path)
        elected: Future[ResourceLock[T]] = Future()

        def campaign() -> None:
            try:
                lock = self._campaign(path, content, elected)
            except BaseException as exc:
                futures.set_exception(elected, exc)
                return
            if not futures.set_result(elected, lock):  # cancelled meanwhile
                lock.release()

        threading.Thread(target=campaign, name=f"pss-campaign-{path}", daemon=True).start()
        return elected

    def wait_for_lock(self, path: str, content: T) -> Future[ResourceLock[T]]:
        """A future of the lock at ``path``, taken once free (see :meth:`lock`).

        The wait runs on a daemon thread of its own; cancelling the future ends
        it (a lock taken as it was cancelled is released).

        Returns:
            A future of the held :class:`ResourceLock`.

        Raises:
            TypeError, ValueError: at the call, for a path that is not a valid
                metadata path.
            StateClosedError: at the call once this service is closed; through
                the future when it closes first.
        """
        self._check_open()
        validate_path(path)
        taken: Future[ResourceLock[T]] = Future()

        def wait_turn() -> None:
            try:
                lock = self._campaign(path, content, taken, reenter=False)
            except BaseException as exc:
                futures.set_exception(taken, exc)
                return
            if not futures.set_result(taken, lock):  # given up meanwhile
                lock.release()

        threading.Thread(target=wait_turn, name=f"pss-lock-{path}", daemon=True).start()
        return taken

    #: how long a ``with`` block's release waits for the store's delete
    store_timeout_s = _READ_TIMEOUT_S

    def lock(self, path: str, content: T, *, timeout_s: float | None = None) -> ResourceLock[T]:
        """Take the lock at ``path``, waiting while another holds it (blocking).

        A lock, not an election: a lock this service already holds at ``path``
        (taken by another thread) is waited for too, never handed out twice.
        Use it in a ``with`` block to release it at the end::

            with service.lock("/locks/report", "worker-1", timeout_s=30) as lock:
                write_report(fencing_token=lock.fencing_token)

        Args:
            timeout_s: how long to wait (``None``: until taken, or the service
                closes).

        Returns:
            The held :class:`ResourceLock` (a context manager that releases it).

        Raises:
            TypeError, ValueError: a path that is not a valid metadata path.
            OperationTimeoutError: not taken within ``timeout_s`` (nothing is
                left held: a lock taken as the wait ended is released).
            StateClosedError: the service closed first.
            WriteFailedError, FencedError, PermissionDeniedError: as the store's
                write fails.
        """
        taken = self.wait_for_lock(path, content)
        try:
            return taken.result(timeout=timeout_s)
        except FutureTimeoutError:
            if taken.cancel():
                raise OperationTimeoutError(
                    f"the lock {path} was not taken within {timeout_s}s"
                ) from None
            return taken.result()  # taken just as the wait ended

    def _campaign(
        self,
        path: str,
        content: T,
        elected: Future[ResourceLock[T]],
        *,
        reenter: bool = True,
    ) -> ResourceLock[T]:
        while not self._closed and not elected.cancelled():
            freed = threading.Event()
            with self._lock:
                self._waiters.setdefault(path, []).append(freed)
            try:
                return self.acquire_lock(path, content).result()
            except ResourceBusyError:
                with self._lock:
                    mine = self._held.get(path)
                if reenter and mine is not None and mine.active:  # we lead already
                    return mine
                freed.wait(timeout=5.0)  # a deletion wakes us; re-check now and then anyway
            except SessionLostError:  # no candidate while our session is lost
                freed.wait(timeout=1.0)
            finally:
                with self._lock:
                    waiting = self._waiters.get(path, [])
                    if freed in waiting:
                        waiting.remove(freed)
        if elected.cancelled():
            raise StateClosedError("the campaign was cancelled")
        raise StateClosedError("the coordination service is closed")

    # -- counters ------------------------------------------------------------------------

    def get_next_counter_value(self, path: str) -> Future[int]:
        """A unique, increasing value (1, 2, ...) from the counter at ``path``.

        Returns:
            A future of the counter's new value (the first call gives 1).

        Raises:
            StateClosedError: at the call once this service is closed; through
                the future once its store is.
            TypeError, ValueError: through the future, for a path that is not a
                valid metadata path.
            WriteFailedError: through the future, after version conflicts on
                every attempt the counter's retry policy allows (or as the
                store's write fails).
            FencedError, PermissionDeniedError: through the future, as the
                store's write fails.
        """
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
        owner and token: a delete then a re-create by anyone is a loss). A node
        gone while the session is unhealthy (its expiry, most likely) waits for
        the revalidation when the session is back."""
        with lock._mutex:  # a release waits: what this reads is not its own delete
            if lock.lost.done() or lock._released or lock._revalidate:
                return
            try:
                current = self.store.get(lock.path).result(timeout=_READ_TIMEOUT_S)
            except Exception:  # the store itself is gone (or stuck): so is the lock
                log.warning(
                    "could not read %s: treating the lock as lost", lock.path, exc_info=True
                )
                current = None
            if lock.owns(current):
                return
            # gone while the session is down, or before this dispatcher has heard
            # it come back (the lock still suspended): its expiry, most likely
            if current is None and (not self.store.session_healthy or lock._suspended):
                log.warning("lock %s gone while the session is down: revalidating later", lock.path)
                lock._revalidate = True
                if not lock._suspended:  # the node is gone: do not act as the holder
                    lock._suspended = True
                    lock._emit(LockEvent.SESSION_LOST)
                return
            log.warning("lost the lock %s", lock.path)
            self._lose(lock)

    # -- sessions -------------------------------------------------------------------------

    def _on_session(self, event: SessionEvent) -> None:
        with self._lock:
            locks = list(self._held.values())
        if event is SessionEvent.SESSION_LOST:
            for lock in locks:
                with lock._mutex:
                    if lock._suspended or lock.lost.done() or lock._released:
                        continue
                    if lock._losses >= self.store.session_losses:
                        continue  # made after this loss (and its return)
                    lock._suspended = True
                lock._emit(LockEvent.SESSION_LOST)
        elif event.healthy and not self._closed:
            # marked now, on the dispatcher: a deletion notified after this
            # event is left to the revalidation, not taken as a loss
            for lock in locks:
                lock._revalidate = True
            for lock in locks:
                try:
                    self._revalidator.submit(self._revalidate_lock, lock)
                except RuntimeError:  # closed meanwhile
                    return

    def _revalidate_lock(self, lock: ResourceLock[T]) -> None:
        """Keep, re-create or give up ``lock`` by the latest tree (LockManager's revalidation)."""
        with lock._mutex:  # a release waits: it deletes the node as this leaves it
            if lock.lost.done() or lock._released or not lock._revalidate:
                return
            if not self.store.session_healthy:  # lost again: the next return revalidates
                return
            # the losses this revalidation speaks for: one counted while its read
            # (or write) is out may have let another session take the lock after
            # the answer was made (a process paused in between), so it is not cleared
            losses = self.store.session_losses
            try:
                current = self.store.get(lock.path, latest=True).result(timeout=_READ_TIMEOUT_S)
                if current is None:  # expired with our session: ours again if still free
                    stat = self.store.put(
                        lock.path, self.serde.serialize(lock.content), -1, ephemeral=True
                    ).result(timeout=_READ_TIMEOUT_S)
                    lock.version, lock.fencing_token = stat.version, stat.token
                    lock.owner = stat.owner if stat.owner is not None else self.store.session_id
                    log.info("re-asserted the lock %s (token %d)", lock.path, stat.token)
                    reasserted = True
                else:
                    reasserted = lock.owns(current)
            except BadVersionError:  # taken between the read and the put
                reasserted = False
            except SessionLostError:  # lost again meanwhile: the next return revalidates
                return
            except Exception:
                log.warning("could not revalidate the lock %s", lock.path, exc_info=True)
                reasserted = False
            if reasserted and self.store.session_losses != losses:
                # lost again meanwhile: what it saw may be stale; the lock stays
                # suspended (held is False) until the session's return revalidates it
                log.info("lock %s: the session was lost during its revalidation", lock.path)
                return
            if reasserted:
                lock._losses = losses
            lock._revalidate = False
            was_suspended, lock._suspended = lock._suspended, False
            if not reasserted:
                log.warning("lost the lock %s to another session", lock.path)
                self._lose(lock)
            elif was_suspended or current is None:
                lock._emit(LockEvent.REASSERTED)

    def _check_open(self) -> None:
        if self._closed:
            raise StateClosedError("the coordination service is closed")

    def close(self) -> None:
        """Stop watching the store and end campaigns (idempotent); the store stays open.

        Held locks are not released (their ephemeral nodes go with the
        store's session); later :meth:`acquire_lock`, :meth:`become_leader`
        and counter calls raise StateClosedError.
        """
        self._closed = True
        self.store.unregister_listener(self._on_change)
        self.store.unregister_session_listener(self._on_session)
        self._revalidator.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for events in self._waiters.values():
                for event in events:
                    event.set()
        self._counters.close()
