"""The asyncio twin of :class:`~pulsar_state.core.manager.SharedStateManager`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, Self, TypeVar

from pulsar_state.core.accelerator import Checkpoint
from pulsar_state.core.futures import wrap
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.core.manager import SharedStateManager
from pulsar_state.position import Position

__all__ = ["AsyncSharedStateManager"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")
Op = TypeVar("Op")
R = TypeVar("R")


class AsyncSharedStateManager(Generic[S, Op]):
    """``await``-able :class:`SharedStateManager`."""

    def __init__(self, manager: SharedStateManager[S, Op]) -> None:
        self.sync = manager

    async def read(
        self,
        reader: Callable[[S], R],
        latest: bool = False,
        *,
        at_least: Position | str | None = None,
        timeout_s: float | None = None,
    ) -> R:
        """Run ``reader(state)`` (:meth:`SharedStateManager.read`, awaited).

        Returns:
            What ``reader`` returned.

        Raises:
            ForkedProcessError, ValueError, TypeError, StateClosedError,
                OperationTimeoutError: as :meth:`SharedStateManager.read` and its
                future fail (a bad ``at_least``; ``latest``/``at_least`` not reached
                within ``timeout_s``), raised by the await.
            Exception: whatever ``reader`` raises, unchanged.
        """
        return await wrap(self.sync.read(reader, latest, at_least=at_least, timeout_s=timeout_s))

    async def write(
        self,
        generator: Callable[[S], Iterable[Op] | None],
        reader: Callable[[S], R] | None = None,
        *,
        blind: bool = False,
    ) -> Any:
        """Publish ``generator``'s ops atomically (:meth:`SharedStateManager.write`, awaited).

        Returns:
            The write's :class:`Position`, or ``reader(state)`` right after the
            write when a reader is given.

        Raises:
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`SharedStateManager.write` and its future fail, raised by the
                await.
            Exception: whatever ``generator`` or ``reader`` raises, unchanged.
        """
        return await wrap(self.sync.write(generator, reader, blind=blind))

    async def write_ops(self, ops: Sequence[Op]) -> Position:
        """Publish ``ops`` as one atomic write (:meth:`SharedStateManager.write_ops`, awaited).

        Returns:
            The write's :class:`Position`.

        Raises:
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`SharedStateManager.write_ops` and its future fail, raised
                by the await.
        """
        return await wrap(self.sync.write_ops(ops))

    async def checkpoint(self) -> Checkpoint:
        """Write a checkpoint of the state now (:meth:`SharedStateManager.checkpoint`, awaited).

        Returns:
            The checkpoint's record (a map's: its manifest).

        Raises:
            ConfigurationError: if this manager keeps no checkpoints.
            PulsarStateError: when it could not be published.
        """
        return await wrap(self.sync.checkpoint())

    def add_listener(
        self, listener: Callable[[AppliedWrite[Op]], None], *, inline: bool = False
    ) -> None:
        """Listeners run on the manager's callback thread (``inline``: see
        :meth:`SharedStateManager.add_listener`); use ``loop.call_soon_threadsafe``."""
        self.sync.add_listener(listener, inline=inline)

    def remove_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        """Stop calling ``listener`` (:meth:`SharedStateManager.remove_listener`).

        Raises:
            ValueError: if ``listener`` is not registered.
        """
        self.sync.remove_listener(listener)

    def check_process(self) -> None:
        """Raise if this process was forked after the manager was made.

        Raises:
            ForkedProcessError: in such a child (as :meth:`SharedStateManager.check_process`).
        """
        self.sync.check_process()

    async def close(self) -> None:
        """Close the manager (:meth:`SharedStateManager.close`) in a worker thread.

        Raises:
            ForkedProcessError: in a process forked after the manager was made.
        """
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
