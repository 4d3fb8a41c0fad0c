"""The asyncio twin of :class:`~pulsar_state.coordination.service.CoordinationService`."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from pulsar_state.coordination import CoordinationService, ResourceLock
from pulsar_state.core.futures import wrap
from pulsar_state.errors import OperationTimeoutError

__all__ = ["AsyncCoordinationService"]

T = TypeVar("T")


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

    async def lock(
        self, path: str, content: T, *, timeout_s: float | None = None
    ) -> ResourceLock[T]:
        """Take the lock at ``path``, waiting while another holds it (see
        :meth:`CoordinationService.lock`); cancelling the awaiting task, or the
        timeout, ends the wait and leaves nothing held.

        Returns:
            The held :class:`ResourceLock`.

        Raises:
            OperationTimeoutError: not taken within ``timeout_s``.
        """
        taken = self.sync.wait_for_lock(path, content)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(taken), timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if taken.done() and not taken.cancelled() and taken.exception() is None:
                await asyncio.wrap_future(taken.result().release())  # taken as we gave up
            if isinstance(exc, TimeoutError):
                raise OperationTimeoutError(
                    f"the lock {path} was not taken within {timeout_s}s"
                ) from None
            raise

    async def wait_for_lock(self, path: str, content: T) -> ResourceLock[T]:
        """The lock at ``path`` once taken (:meth:`CoordinationService.wait_for_lock`);
        cancelling the awaiting task ends the wait and leaves nothing held (as
        :meth:`lock` without a timeout).

        Returns:
            The held :class:`ResourceLock`.

        Raises:
            StateClosedError: the service closed first.
        """
        return await self.lock(path, content)

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
        """Release ``lock`` (:meth:`ResourceLock.release`, awaited): ``lock.released``
        from the call on; ``lock.lost`` completes only if the lock had been lost.

        Raises:
            StateClosedError: once the store is closed (its close ended the
                lock: ``lock.lost`` completes when the service hears of it,
                unless the lock was released first).
            WriteFailedError, FencedError, PermissionDeniedError: as the store's
                write fails.
        """
        await wrap(lock.release())

    async def close(self) -> None:
        """Close the service (:meth:`CoordinationService.close`) in a worker thread.

        Never raises: held locks are kept until the store's session ends.
        """
        await asyncio.to_thread(self.sync.close)
