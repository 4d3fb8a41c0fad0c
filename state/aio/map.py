"""The asyncio twins of :class:`~pulsar_state.map.pulsar_map.PulsarMap` and its watches."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, Self, TypeVar

from pulsar_state.core.futures import wrap
from pulsar_state.map.checkpoint.format import Manifest as CheckpointManifest
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.map.watch import DEFAULT_MAX_PENDING, MapChange, MapWatch
from pulsar_state.position import Position

__all__ = ["AsyncMapWatch", "AsyncPulsarMap"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")
Op = TypeVar("Op")
R = TypeVar("R")


class AsyncPulsarMap(Generic[K, V]):
    """``await``-able :class:`PulsarMap`; construct with :meth:`open` or ``async with``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs
        self._map: PulsarMap[K, V] | None = None

    @classmethod
    async def open(cls, *args: Any, **kwargs: Any) -> AsyncPulsarMap[K, V]:
        """Open the map (:class:`PulsarMap`'s arguments); the bootstrap runs in a worker thread.

        Returns:
            The open :class:`AsyncPulsarMap`, caught up with the topic.

        Raises:
            ConfigurationError, TypeError: for bad arguments (no ``admin_url``
                while ``ensure_retention`` is on, a client that is no
                ``pulsar.Client``).
            StateTopicError: if the topic cannot be read or protected
                (TopicNotFoundError, PermissionDeniedError, AdminUnreachableError,
                InvalidTopicNameError say why).
            OperationTimeoutError: if the first catch-up takes longer than four
                operation timeouts.
        """
        self = cls(*args, **kwargs)
        self._map = await asyncio.to_thread(PulsarMap, *args, **kwargs)
        return self

    @property
    def sync(self) -> PulsarMap[K, V]:
        """The blocking :class:`PulsarMap` this one awaits.

        Raises:
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        if self._map is None:
            raise RuntimeError("use `await AsyncPulsarMap.open(...)` or `async with`")
        return self._map

    async def __aenter__(self) -> Self:
        if self._map is None:
            self._map = await asyncio.to_thread(PulsarMap, *self._args, **self._kwargs)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the map (:meth:`PulsarMap.close`) in a worker thread; nothing if never opened.

        Raises:
            ForkedProcessError: in a process forked after the map was made.
        """
        if self._map is not None:
            await asyncio.to_thread(self._map.close)

    async def get(self, key: K, latest: bool = False) -> V | None:
        """The value of ``key`` (:meth:`PulsarMap.get`, awaited).

        Returns:
            A copy of the value, or ``None`` if ``key`` is absent.

        Raises:
            ForkedProcessError, StateClosedError, OperationTimeoutError: as
                :meth:`PulsarMap.get` and its future fail (``latest=True`` not caught
                up within the operation timeout), raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.get(key, latest))

    async def contains(self, key: K, latest: bool = False) -> bool:
        """Whether ``key`` is in the map (:meth:`PulsarMap.contains`, awaited).

        Returns:
            ``True`` if ``key`` is present.

        Raises:
            ForkedProcessError, StateClosedError, OperationTimeoutError: as
                :meth:`PulsarMap.contains` and its future fail (``latest=True`` not caught
                up within the operation timeout), raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.contains(key, latest))

    async def size(self, latest: bool = False) -> int:
        """The number of keys (:meth:`PulsarMap.size`, awaited).

        Returns:
            The key count.

        Raises:
            ForkedProcessError, StateClosedError, OperationTimeoutError: as
                :meth:`PulsarMap.size` and its future fail (``latest=True`` not caught
                up within the operation timeout), raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.size(latest))

    async def get_or_default(self, key: K, default: V, latest: bool = False) -> V:
        """The value of ``key`` or ``default`` (:meth:`PulsarMap.get_or_default`, awaited).

        Returns:
            A copy of the value, or ``default``.

        Raises:
            ForkedProcessError, StateClosedError, OperationTimeoutError: as
                :meth:`PulsarMap.get_or_default` and its future fail (``latest=True`` not caught
                up within the operation timeout), raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.get_or_default(key, default, latest))

    async def list_keys(self, latest: bool = False) -> list[K]:
        """The keys of the map (:meth:`PulsarMap.list_keys`, awaited).

        Returns:
            A new list of the keys.

        Raises:
            ForkedProcessError, StateClosedError, OperationTimeoutError: as
                :meth:`PulsarMap.list_keys` and its future fail (``latest=True`` not caught
                up within the operation timeout), raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.list_keys(latest))

    async def items(self, latest: bool = False) -> dict[K, V]:
        """A copy of the whole map (:meth:`PulsarMap.items`, awaited).

        Returns:
            A new dict holding copies of every value.

        Raises:
            ForkedProcessError, StateClosedError, OperationTimeoutError: as
                :meth:`PulsarMap.items` and its future fail (``latest=True`` not caught
                up within the operation timeout), raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.items(latest))

    async def scan(
        self, filter: Callable[[K, V], bool], processor: Callable[[K, V], Any], latest: bool = False
    ) -> int:
        """Call ``processor`` on each accepted entry (:meth:`PulsarMap.scan`, awaited).

        Returns:
            How many entries ``filter`` accepted.

        Raises:
            ForkedProcessError, StateClosedError, OperationTimeoutError: as
                :meth:`PulsarMap.scan` and its future fail (``latest=True`` not caught
                up within the operation timeout), raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
            Exception: whatever ``filter`` or ``processor`` raises, unchanged.
        """
        return await wrap(self.sync.scan(filter, processor, latest))

    async def put(self, key: K, value: V) -> Position:
        """Set ``key`` (:meth:`PulsarMap.put`, awaited).

        Returns:
            The write's :class:`Position`.

        Raises:
            TypeError, ValueError: for a key or value the map refuses.
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.put` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.put(key, value))

    async def put_all(self, entries: dict[K, V]) -> Position:
        """Set many keys in one atomic write (:meth:`PulsarMap.put_all`, awaited).

        Returns:
            The write's :class:`Position`.

        Raises:
            TypeError, ValueError: for a key or value the map refuses.
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.put_all` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.put_all(entries))

    async def put_if_absent(self, key: K, value: V) -> V | None:
        """Set ``key`` unless present (:meth:`PulsarMap.put_if_absent`, awaited).

        Returns:
            The value already there, or ``None`` when this call set it.

        Raises:
            TypeError, ValueError: for a key or value the map refuses.
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.put_if_absent` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.put_if_absent(key, value))

    async def delete(self, key: K) -> V | None:
        """Remove ``key`` (:meth:`PulsarMap.delete`, awaited).

        Returns:
            The value ``key`` had, or ``None``.

        Raises:
            TypeError, ValueError: for a key or value the map refuses.
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.delete` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.delete(key))

    async def replace(self, key: K, expected: V | None, value: V) -> bool:
        """Set ``key`` only if its value is ``expected`` (:meth:`PulsarMap.replace`,
        awaited): ``expected=None`` means only if absent (PIP-137's put-if-absent).

        Returns:
            ``True`` if it was set.

        Raises:
            TypeError, ValueError: for a key or value the map refuses.
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.replace` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.replace(key, expected, value))

    async def update(self, key: K, fn: Callable[[V | None], V | None]) -> V | None:
        """Set ``key`` to ``fn(current)`` atomically (:meth:`PulsarMap.update`, awaited).

        Returns:
            The new value, or ``None`` if ``fn`` deleted the key.

        Raises:
            TypeError, ValueError: for a key or value the map refuses.
            Exception: whatever ``fn`` raises, unchanged (nothing is written).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.update` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.update(key, fn))

    async def update_multiple(
        self, filter: Callable[[K, V], bool], fn: Callable[[K, V], V | None]
    ) -> int:
        """Replace each accepted entry atomically (:meth:`PulsarMap.update_multiple`, awaited).

        Returns:
            How many entries were changed or deleted.

        Raises:
            TypeError, ValueError: for a key or value the map refuses.
            Exception: whatever ``filter`` or ``fn`` raises, unchanged (nothing is written).
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.update_multiple` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.update_multiple(filter, fn))

    async def clear(self) -> int:
        """Delete every key in one atomic write (:meth:`PulsarMap.clear`, awaited).

        Returns:
            How many keys were deleted.

        Raises:
            TooManyOpsError, ValueTooLargeError: for a map one write cannot
                clear (nothing is deleted), as :meth:`PulsarMap.clear`.
            WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.clear` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        return await wrap(self.sync.clear())

    async def transact(
        self,
        fn: Callable[[Mapping[K, V]], Iterable[MapOp[K, V]] | None],
        *,
        reader: Callable[[Mapping[K, V]], Any] | None = None,
    ) -> Any:
        """Write the ops of ``fn(latest)`` atomically (:meth:`PulsarMap.transact`, awaited).

        Returns:
            The write's :class:`Position`, or ``reader``'s result.

        Raises:
            TypeError, ValueError: for a ``fn`` that is not callable, an op that is
                no :class:`MapOp`, a key or value the map refuses.
            Exception: whatever ``fn`` or ``reader`` raises, unchanged.
            TooManyOpsError, ValueTooLargeError, WriteFailedError, FencedError,
                PermissionDeniedError, StateClosedError, ForkedProcessError: as
                :meth:`PulsarMap.transact` and its future fail, raised by the await.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
        """
        if reader is None:
            return await wrap(self.sync.transact(fn))
        return await wrap(self.sync.transact(fn, reader=reader))

    async def checkpoint(self) -> CheckpointManifest:
        """Write a columnar checkpoint of the whole map now (:meth:`PulsarMap.checkpoint`, awaited).

        Returns:
            The checkpoint's manifest (its position, keys, chunks).

        Raises:
            ConfigurationError: if the map keeps no checkpoints.
            PulsarStateError: when it could not be published (the map is unaffected).
        """
        return await wrap(self.sync.checkpoint())

    async def watch(
        self,
        key_or_prefix: K | str | None,
        callback: Callable[[MapChange[K, V]], Awaitable[Any] | Any],
        from_position: Position | str | None = None,
        *,
        prefix: bool = False,
        timeout_s: float | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> AsyncMapWatch[K, V]:
        """Call ``callback(change)`` for every change of a key (:meth:`PulsarMap.watch`).

        A coroutine function as ``callback`` is awaited on this loop, one change at
        a time, in order (what it raises is logged and counted); a plain function
        runs on the watch's thread.

        Returns:
            The running :class:`AsyncMapWatch`.

        Raises:
            TypeError, ValueError: for a bad key, prefix, position, ``timeout_s``
                or callback.
            ForkedProcessError, StateClosedError: in a forked process, or once the
                map is closed.
            RuntimeError: if the map was never opened (use :meth:`open` or ``async with``).
            Later errors stop the watch and show in :attr:`AsyncMapWatch.failure`
            (OperationTimeoutError, StateTopicError while reading history;
            WatchOverflowError when it fell ``max_pending`` writes behind).
        """
        if inspect.iscoroutinefunction(callback):
            loop = asyncio.get_running_loop()
            holder: list[MapWatch[K, V]] = []

            def on_change(change: MapChange[K, V]) -> None:
                done = asyncio.run_coroutine_threadsafe(callback(change), loop)
                while True:  # bounded slices: a stopped watch or a closed loop ends the wait
                    try:
                        done.result(timeout=0.5)
                        return
                    except concurrent.futures.TimeoutError:
                        if done.done():
                            raise
                        if (holder and not holder[0].running) or loop.is_closed():
                            done.cancel()
                            return

            watch = self.sync.watch(
                key_or_prefix,
                on_change,
                from_position,
                prefix=prefix,
                timeout_s=timeout_s,
                max_pending=max_pending,
            )
            holder.append(watch)
        else:
            watch = self.sync.watch(
                key_or_prefix,
                callback,
                from_position,
                prefix=prefix,
                timeout_s=timeout_s,
                max_pending=max_pending,
            )
        return AsyncMapWatch(watch)


class AsyncMapWatch(Generic[K, V]):
    """``await``-able :class:`MapWatch` handle: ``await w.stop()`` or ``async with``."""

    def __init__(self, watch: MapWatch[K, V]) -> None:
        self.sync = watch

    @property
    def running(self) -> bool:
        """True until the watch stops (:attr:`MapWatch.running`)."""
        return self.sync.running

    @property
    def delivered(self) -> int:
        """How many changes the callback has been given (:attr:`MapWatch.delivered`)."""
        return self.sync.delivered

    @property
    def errors(self) -> int:
        """How many callback calls raised (logged, counted; :attr:`MapWatch.errors`)."""
        return self.sync.errors

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the watch, or ``None`` (:attr:`MapWatch.failure`)."""
        return self.sync.failure

    async def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop the watch (:meth:`MapWatch.stop`; waits in a worker thread, not on the loop).

        Returns:
            Whether the watch's thread ended within ``timeout_s``.

        Never raises: a callback still running is not interrupted (nothing is
        delivered after it).
        """
        return await asyncio.to_thread(self.sync.stop, timeout_s)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
