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

Cancelling a task that awaits a write cancels the core's future: a write still
queued is then never written; one the writer has taken up goes on and may
land (it cannot be taken back). Either way no other write is disturbed: the
core completes futures through :mod:`pulsar_state.futures`, which skips
cancelled ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, Generic, Self, TypeVar

from pulsar_state.coordination import CoordinationService, ResourceLock
from pulsar_state.manager import SharedStateManager
from pulsar_state.metadata_base import BaseMetadataStore
from pulsar_state.metadata_state import GetResult, Notification, Stat
from pulsar_state.position import Position
from pulsar_state.pulsar_map import PulsarMap

__all__ = [
    "AsyncCoordinationService",
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
    ) -> R:
        return await wrap(self.sync.read(reader, latest, at_least=at_least))

    async def write(
        self,
        generator: Callable[[S], Iterable[Op] | None],
        reader: Callable[[S], R] | None = None,
    ) -> Any:
        return await wrap(self.sync.write(generator, reader))

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


class AsyncMetadataStore:
    """``await``-able metadata store (any :class:`BaseMetadataStore`)."""

    def __init__(self, store: BaseMetadataStore) -> None:
        self.sync = store

    async def get(self, path: str) -> GetResult | None:
        return await wrap(self.sync.get(path))

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
    ) -> Stat:
        return await wrap(self.sync.put(path, value, expected_version, ephemeral=ephemeral))

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        await wrap(self.sync.delete(path, expected_version))

    def register_listener(self, listener: Callable[[Notification], None]) -> None:
        """Listeners run on the store's dispatcher thread; use ``loop.call_soon_threadsafe``."""
        self.sync.register_listener(listener)

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
