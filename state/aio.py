"""The asyncio surface: the same core, awaited.

Each call starts the same future-returning operation as the blocking surface
and awaits it on the running loop (:func:`asyncio.wrap_future` completes the
asyncio future from the core's threads through ``call_soon_threadsafe``). The
exceptions are the same classes.

    async with AsyncPulsarMap(client, topic, admin_url=...) as m:
        await m.put("k", 1)
        assert await m.get("k", latest=True) == 1

Opening (bootstrap) blocks while it catches up, so ``open()`` runs it in a
worker thread.

Methods the blocking surface has without a future (listeners, ``close``,
``check_process``, ``fencing_token``) are plain or ``async`` twins of the same
name; a unit test (``tests/unit/test_aio_parity.py``) fails when a public sync
method has no twin with the same parameters here.

Cancelling a task that awaits a write cancels the core's future: a write still
queued is then never written; one the writer has taken up goes on and may
land (it cannot be taken back). Either way no other write is disturbed: the
core completes futures through :mod:`pulsar_state.futures`, which skips
cancelled ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Generic, Self, TypeVar

from pulsar_state.coordination import CoordinationService, ResourceLock
from pulsar_state.manager import SharedStateManager
from pulsar_state.map_watch import MapChange, MapWatch
from pulsar_state.metadata_base import BaseMetadataStore, Listener, SessionListener
from pulsar_state.metadata_state import GetResult, Stat
from pulsar_state.position import Position
from pulsar_state.pulsar_map import MapOp, PulsarMap
from pulsar_state.replay import AppliedWrite

__all__ = [
    "AsyncCoordinationService",
    "AsyncMapWatch",
    "AsyncMetadataStore",
    "AsyncPulsarMap",
    "AsyncSharedStateManager",
    "wrap",
]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")
Op = TypeVar("Op")
R = TypeVar("R")


async def wrap(future: Future[T]) -> T:
    """Await a core future from asyncio."""
    return await asyncio.wrap_future(future)


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
        """See :meth:`SharedStateManager.read`; raises what its future raises."""
        return await wrap(self.sync.read(reader, latest, at_least=at_least, timeout_s=timeout_s))

    async def write(
        self,
        generator: Callable[[S], Iterable[Op] | None],
        reader: Callable[[S], R] | None = None,
        *,
        blind: bool = False,
    ) -> Any:
        """See :meth:`SharedStateManager.write`; raises what its future raises."""
        return await wrap(self.sync.write(generator, reader, blind=blind))

    def add_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        """Listeners run on the tailer's thread; use ``loop.call_soon_threadsafe``."""
        self.sync.add_listener(listener)

    def remove_listener(self, listener: Callable[[AppliedWrite[Op]], None]) -> None:
        self.sync.remove_listener(listener)

    def check_process(self) -> None:
        self.sync.check_process()

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncPulsarMap(Generic[K, V]):
    """``await``-able :class:`PulsarMap`; construct with :meth:`open` or ``async with``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs
        self._map: PulsarMap[K, V] | None = None

    @classmethod
    async def open(cls, *args: Any, **kwargs: Any) -> AsyncPulsarMap[K, V]:
        self = cls(*args, **kwargs)
        self._map = await asyncio.to_thread(PulsarMap, *args, **kwargs)
        return self

    @property
    def sync(self) -> PulsarMap[K, V]:
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
        if self._map is not None:
            await asyncio.to_thread(self._map.close)

    async def get(self, key: K, latest: bool = False) -> V | None:
        return await wrap(self.sync.get(key, latest))

    async def contains(self, key: K, latest: bool = False) -> bool:
        return await wrap(self.sync.contains(key, latest))

    async def size(self, latest: bool = False) -> int:
        return await wrap(self.sync.size(latest))

    async def get_or_default(self, key: K, default: V, latest: bool = False) -> V:
        return await wrap(self.sync.get_or_default(key, default, latest))

    async def list_keys(self, latest: bool = False) -> list[K]:
        return await wrap(self.sync.list_keys(latest))

    async def items(self, latest: bool = False) -> dict[K, V]:
        return await wrap(self.sync.items(latest))

    async def scan(
        self, filter: Callable[[K, V], bool], processor: Callable[[K, V], Any], latest: bool = False
    ) -> int:
        return await wrap(self.sync.scan(filter, processor, latest))

    async def put(self, key: K, value: V) -> Position:
        return await wrap(self.sync.put(key, value))

    async def put_all(self, entries: dict[K, V]) -> Position:
        return await wrap(self.sync.put_all(entries))

    async def put_if_absent(self, key: K, value: V) -> V | None:
        return await wrap(self.sync.put_if_absent(key, value))

    async def delete(self, key: K) -> V | None:
        return await wrap(self.sync.delete(key))

    async def replace(self, key: K, expected: V, value: V) -> bool:
        return await wrap(self.sync.replace(key, expected, value))

    async def update(self, key: K, fn: Callable[[V | None], V | None]) -> V | None:
        return await wrap(self.sync.update(key, fn))

    async def update_multiple(
        self, filter: Callable[[K, V], bool], fn: Callable[[K, V], V | None]
    ) -> int:
        return await wrap(self.sync.update_multiple(filter, fn))

    async def clear(self) -> int:
        return await wrap(self.sync.clear())

    async def transact(
        self,
        fn: Callable[[Mapping[K, V]], Iterable[MapOp[K, V]] | None],
        *,
        reader: Callable[[Mapping[K, V]], Any] | None = None,
    ) -> Any:
        """See :meth:`PulsarMap.transact`: the position, or ``reader``'s result."""
        if reader is None:
            return await wrap(self.sync.transact(fn))
        return await wrap(self.sync.transact(fn, reader=reader))

    async def watch(
        self,
        key_or_prefix: K | str | None,
        callback: Callable[[MapChange[K, V]], Awaitable[Any] | Any],
        from_position: Position | str | None = None,
        *,
        prefix: bool = False,
        timeout_s: float | None = None,
    ) -> AsyncMapWatch[K, V]:
        """See :meth:`PulsarMap.watch`. A coroutine function as ``callback`` is
        awaited on this loop, one change at a time, in order (what it raises is
        logged and counted); a plain function runs on the watch's thread."""
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
            )
            holder.append(watch)
        else:
            watch = self.sync.watch(
                key_or_prefix, callback, from_position, prefix=prefix, timeout_s=timeout_s
            )
        return AsyncMapWatch(watch)


class AsyncMapWatch(Generic[K, V]):
    """``await``-able :class:`MapWatch` handle: ``await w.stop()`` or ``async with``."""

    def __init__(self, watch: MapWatch[K, V]) -> None:
        self.sync = watch

    @property
    def running(self) -> bool:
        return self.sync.running

    @property
    def delivered(self) -> int:
        return self.sync.delivered

    @property
    def errors(self) -> int:
        return self.sync.errors

    @property
    def failure(self) -> BaseException | None:
        return self.sync.failure

    async def stop(self, timeout_s: float = 10.0) -> bool:
        """See :meth:`MapWatch.stop` (waits in a worker thread, not on the loop)."""
        return await asyncio.to_thread(self.sync.stop, timeout_s)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class AsyncMetadataStore:
    """``await``-able metadata store (any :class:`BaseMetadataStore`)."""

    def __init__(self, store: BaseMetadataStore) -> None:
        self.sync = store

    async def get(self, path: str, latest: bool = False) -> GetResult | None:
        return await wrap(self.sync.get(path, latest))

    async def get_children(self, path: str) -> list[str]:
        return await wrap(self.sync.get_children(path))

    async def exists(self, path: str) -> bool:
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
        return await wrap(
            self.sync.put(path, value, expected_version, ephemeral=ephemeral, sequential=sequential)
        )

    async def delete_recursive(self, path: str) -> list[str]:
        return await wrap(self.sync.delete_recursive(path))

    async def delete(
        self,
        path: str,
        expected_version: int | None = None,
        *,
        expected_owner: str | None = None,
        expected_token: int | None = None,
    ) -> None:
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
        self.sync.unregister_listener(listener)

    def register_session_listener(self, listener: SessionListener) -> None:
        """Run on the store's dispatcher thread, as :meth:`register_listener`."""
        self.sync.register_session_listener(listener)

    def unregister_session_listener(self, listener: SessionListener) -> None:
        self.sync.unregister_session_listener(listener)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)


class AsyncCoordinationService(Generic[T]):
    """``await``-able :class:`CoordinationService`."""

    def __init__(self, service: CoordinationService[T]) -> None:
        self.sync = service

    async def acquire_lock(self, path: str, content: T) -> ResourceLock[T]:
        return await wrap(self.sync.acquire_lock(path, content))

    async def read_lock(self, path: str) -> T | None:
        return await wrap(self.sync.read_lock(path))

    async def list_locks(self, path: str) -> list[str]:
        return await wrap(self.sync.list_locks(path))

    async def become_leader(self, path: str, content: T) -> ResourceLock[T]:
        return await wrap(self.sync.become_leader(path, content))

    async def get_next_counter_value(self, path: str) -> int:
        return await wrap(self.sync.get_next_counter_value(path))

    async def release(self, lock: ResourceLock[T]) -> None:
        await wrap(lock.release())

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)
