"""The asyncio surface of the metadata store and the coordination recipes.

The same core, awaited, as :mod:`pulsar_state.aio` (which exports these two
as well): each call starts the blocking surface's future and awaits it on the
running loop; the exceptions are the same classes.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from pulsar_state.coordination import CoordinationService, ResourceLock
from pulsar_state.futures import wrap
from pulsar_state.metadata_base import BaseMetadataStore, Listener, SessionListener
from pulsar_state.metadata_state import GetResult, Stat

__all__ = ["AsyncCoordinationService", "AsyncMetadataStore"]

T = TypeVar("T")


class AsyncMetadataStore:
    """``await``-able metadata store (any :class:`BaseMetadataStore`)."""

    def __init__(self, store: BaseMetadataStore) -> None:
        self.sync = store

    async def get(self, path: str, latest: bool = False) -> GetResult | None:
        """The node at ``path`` (:meth:`BaseMetadataStore.get`, awaited).

        Returns:
            The :class:`GetResult`, or ``None`` if there is no node.

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError, OperationTimeoutError, ForkedProcessError: as
                :meth:`BaseMetadataStore.get` and its future fail, raised by the await.
        """
        return await wrap(self.sync.get(path, latest))

    async def get_children(self, path: str, latest: bool = False) -> list[str]:
        """The names of ``path``'s children (:meth:`BaseMetadataStore.get_children`, awaited).

        Returns:
            The child names (sorted; empty for none).

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError, OperationTimeoutError, ForkedProcessError: as
                :meth:`BaseMetadataStore.get_children` and its future fail, raised by the await.
        """
        return await wrap(self.sync.get_children(path, latest))

    async def exists(self, path: str) -> bool:
        """Whether a node is at ``path`` (:meth:`BaseMetadataStore.exists`, awaited).

        Returns:
            ``True`` if the node exists.

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError, OperationTimeoutError, ForkedProcessError: as
                :meth:`BaseMetadataStore.exists` and its future fail, raised by the await.
        """
        return await wrap(self.sync.exists(path))

    async def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        """Create or replace ``path`` (:meth:`BaseMetadataStore.put`, awaited).

        Returns:
            The node's new :class:`Stat`.

        Raises:
            TypeError, ValueError: for a bad path, prefix, value or
                ``expected_version``.
            BadVersionError: when the node's version is not ``expected_version``.
            SessionLostError: for an ephemeral put while the session is lost.
            StateClosedError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, ForkedProcessError: as
                :meth:`BaseMetadataStore.put` and its future fail, raised by the await.
        """
        return await wrap(
            self.sync.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)
        )

    async def delete_recursive(self, path: str) -> list[str]:
        """Delete ``path`` and below (:meth:`BaseMetadataStore.delete_recursive`, awaited).

        Returns:
            The deleted paths, deepest first.

        Raises:
            TypeError, ValueError: for ``/`` or a path that is not a valid metadata path.
            StateClosedError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, ForkedProcessError: as
                :meth:`BaseMetadataStore.delete_recursive` and its future fail, raised by the await.
        """
        return await wrap(self.sync.delete_recursive(path))

    async def delete(
        self,
        path: str,
        expected_version: int | None = None,
        *,
        expected_owner: str | None = None,
        expected_token: int | None = None,
    ) -> None:
        """Delete ``path`` (:meth:`BaseMetadataStore.delete`, awaited).

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            NotFoundError: when there is no node at ``path``.
            BadVersionError: when the node's version, owner or token is not the
                expected one.
            StateClosedError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, ForkedProcessError: as
                :meth:`BaseMetadataStore.delete` and its future fail, raised by the await.
        """
        await wrap(
            self.sync.delete(
                path,
                expected_version,
                expected_owner=expected_owner,
                expected_token=expected_token,
            )
        )

    def fencing_token(self, path: str) -> int | None:
        """Local, no I/O: the same as the sync store's."""
        return self.sync.fencing_token(path)

    def register_listener(self, listener: Listener, prefix: str | None = None) -> None:
        """Listeners run on the store's dispatcher thread; use ``loop.call_soon_threadsafe``."""
        self.sync.register_listener(listener, prefix)

    def unregister_listener(self, listener: Listener) -> None:
        """Remove every registration of ``listener`` (whatever its prefix)."""
        self.sync.unregister_listener(listener)

    def register_session_listener(self, listener: SessionListener) -> None:
        """Run on the store's dispatcher thread, as :meth:`register_listener`."""
        self.sync.register_session_listener(listener)

    def unregister_session_listener(self, listener: SessionListener) -> None:
        """Remove every registration of the session ``listener``."""
        self.sync.unregister_session_listener(listener)

    async def close(self) -> None:
        """Close the store (:meth:`BaseMetadataStore.close`) in a worker thread.

        Raises:
            ForkedProcessError: in a process forked after a
                :class:`~pulsar_state.MetadataStore` was made.
        """
        await asyncio.to_thread(self.sync.close)


class AsyncCoordinationService(Generic[T]):
    """``await``-able :class:`CoordinationService`."""

    def __init__(self, service: CoordinationService[T]) -> None:
        self.sync = service

    async def acquire_lock(self, path: str, content: T) -> ResourceLock[T]:
        """Take the lock at ``path`` now (:meth:`CoordinationService.acquire_lock`, awaited).

        Returns:
            The held :class:`ResourceLock`.

        Raises:
            TypeError, ValueError: for a bad path or content the serde cannot
                serialize.
            ResourceBusyError: when another session (or service) holds the lock.
            SessionLostError: while the store's session is lost.
            StateClosedError: once the service or its store is closed.
            WriteFailedError, FencedError, PermissionDeniedError: as the store's
                write fails.
        """
        return await wrap(self.sync.acquire_lock(path, content))

    async def read_lock(self, path: str, *, latest: bool = True) -> T | None:
        """The content of the lock at ``path`` (:meth:`CoordinationService.read_lock`, awaited).

        Returns:
            The holder's content, or ``None`` if the lock is free.

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError: once the store is closed.
        """
        return await wrap(self.sync.read_lock(path, latest=latest))

    async def list_locks(self, path: str, *, latest: bool = True) -> list[str]:
        """The locks held under ``path`` (:meth:`CoordinationService.list_locks`, awaited).

        Returns:
            The child names under ``path``.

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError: once the store is closed.
        """
        return await wrap(self.sync.list_locks(path, latest=latest))

    async def become_leader(self, path: str, content: T) -> ResourceLock[T]:
        """Wait until elected (:meth:`CoordinationService.become_leader`, awaited).

        Returns:
            The leadership :class:`ResourceLock`.

        Raises:
            TypeError, ValueError: for a bad path or content the serde cannot
                serialize.
            StateClosedError: when the service closes before this candidate is
                elected.
            WriteFailedError, FencedError, PermissionDeniedError: as the store's
                write fails.
        """
        return await wrap(self.sync.become_leader(path, content))

    async def get_next_counter_value(self, path: str) -> int:
        """The counter's next value (:meth:`CoordinationService.get_next_counter_value`, awaited).

        Returns:
            The counter's new value (the first call gives 1).

        Raises:
            TypeError, ValueError: for a path that is not a valid metadata path.
            StateClosedError: once the service or its store is closed.
            WriteFailedError: after version conflicts on every allowed attempt (or
                as the store's write fails).
            FencedError, PermissionDeniedError: as the store's write fails.
        """
        return await wrap(self.sync.get_next_counter_value(path))

    async def release(self, lock: ResourceLock[T]) -> None:
        """Release ``lock`` (:meth:`ResourceLock.release`, awaited).

        Raises:
            StateClosedError: once the store is closed (``lock.lost`` completes
                all the same).
            WriteFailedError, FencedError, PermissionDeniedError: as the store's
                write fails.
        """
        await wrap(lock.release())

    async def close(self) -> None:
        """Close the service (:meth:`CoordinationService.close`) in a worker thread.

        Never raises: held locks are kept until the store's session ends.
        """
        await asyncio.to_thread(self.sync.close)
