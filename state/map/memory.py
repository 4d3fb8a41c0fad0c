"""``MemoryPulsarMap``: a :class:`~pulsar_state.map.pulsar_map.PulsarMap` without a
broker, for the unit tests of code that uses a map.

It is the real ``PulsarMap`` (every method, its validation, its copies, its
watches) over an in-memory stand-in for the replicated state machine
(:class:`MemoryStateManager`): one process, one map, no topic. What stays the
same as on a broker:

- every key and value is validated and serialized as for the topic (bad ones
  fail at the call, a write over ``max_ops_per_write`` or ``max_write_bytes``
  through its future), and the state holds what a reader would decode, so a
  tuple put comes back a list, as from the topic;
- writes are atomic and serial (``update``, ``transact``, ``replace`` decide
  on the latest state under one lock); each returns a :class:`Position`;
- futures complete before the call returns; their done-callbacks and the
  watches' callbacks run on the map's callback thread, in write order, as on
  a broker;
- ``watch`` from now (``from_position`` at or after the current position).

What it does not do: share state between processes or map objects, survive
``close()``, replay history (``watch(from_position=...)`` in the past and
``checkpoint()`` raise ``ConfigurationError``), or fail the way a broker does
(fencing, timeouts, in-doubt writes): test those against a real broker
(``pulsar_state.testing``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar, cast

from pulsar_state.config import StateConfig
from pulsar_state.core import futures
from pulsar_state.core.callback_thread import CallbackFuture, CallbackThread
from pulsar_state.core.log.replay import AppliedWrite
from pulsar_state.core.write.entry import encode_write
from pulsar_state.errors import ConfigurationError, StateClosedError
from pulsar_state.map.op import MapCodec, MapOp, apply_map_op
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.map.watch import MapWatches
from pulsar_state.position import Position
from pulsar_state.serde import JsonSerde, KeySerde, Serde, StrKeySerde

__all__ = ["MemoryPulsarMap", "MemoryStateManager"]

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")

_names = itertools.count(1)


class MemoryStateManager(Generic[K, V]):
    """The part of :class:`~pulsar_state.core.manager.SharedStateManager` a map uses,
    in memory: a dict, one lock, a position per write."""

    def __init__(self, codec: MapCodec[K, V], config: StateConfig, topic: str) -> None:
        self.topic = topic
        self.config = config
        self.state: dict[K, V] = {}
        self._codec = codec
        self._lock = threading.RLock()
        self._writes = 0
        self._inline: list[Callable[[AppliedWrite[MapOp[K, V]]], None]] = []
        self._listeners: list[Callable[[AppliedWrite[MapOp[K, V]]], None]] = []
        self._callbacks = CallbackThread(f"pss-callback-{topic.rsplit('/', 1)[-1]}")
        self._closed = False

    @property
    def position(self) -> Position:
        """The position of the last write (before any: the start)."""
        return Position(0, self._writes - 1, -1)

    def check_process(self) -> None:
        """(One process: nothing to check.)"""

    def _future(self) -> CallbackFuture[Any]:
        if self._closed:
            raise StateClosedError(f"the map {self.topic} is closed")
        return CallbackFuture(self._callbacks)

    def read(self, reader: Callable[[dict[K, V]], R], latest: bool = False) -> Future[R]:
        """``reader(state)`` under the lock (``latest`` changes nothing: one copy)."""
        result: CallbackFuture[R] = self._future()
        with self._lock:
            futures.run_into(result, lambda: reader(self.state))
        return result

    def write(
        self,
        generator: Callable[[dict[K, V]], Iterable[MapOp[K, V]] | None],
        reader: Callable[[dict[K, V]], R] | None = None,
        *,
        blind: bool = False,
    ) -> Future[Any]:
        """Run ``generator`` on the state, apply its ops as one write (each op as a
        reader of the topic decodes it), complete with the position or ``reader(state)``."""
        del blind  # every write here runs on the latest state
        result: CallbackFuture[Any] = self._future()
        with self._lock:
            try:
                ops = generator(self.state)
                encoded = encode_write(self._codec, list(ops or ()), self.config)
            except BaseException as exc:
                futures.set_exception(result, exc)
                return result
            if encoded is not None:
                decoded = [self._codec.decode(key or "", payload) for key, payload in encoded[0]]
                for op in decoded:
                    apply_map_op(self.state, op)
                self._writes += 1
                change = AppliedWrite(decoded, self.position, f"memory-{self._writes}", False)
                for listener in self._inline:
                    listener(change)
                for listener in self._listeners:
                    self._callbacks.submit(listener, change)
            position = self.position
            if reader is None:
                futures.set_result(result, position)
            else:
                futures.run_into(result, lambda: reader(self.state))
        return result

    def write_ops(self, ops: Sequence[MapOp[K, V]]) -> Future[Position]:
        """Apply ``ops`` as one write (:meth:`write` with a generator returning them)."""
        return self.write(lambda _state: ops, blind=True)

    def add_listener(
        self, listener: Callable[[AppliedWrite[MapOp[K, V]]], None], *, inline: bool = False
    ) -> None:
        with self._lock:
            (self._inline if inline else self._listeners).append(listener)

    def remove_listener(self, listener: Callable[[AppliedWrite[MapOp[K, V]]], None]) -> None:
        with self._lock:
            for registered in (self._inline, self._listeners):
                if listener in registered:
                    registered.remove(listener)
                    return
        raise ValueError("listener not registered")

    def checkpoint(self) -> Future[Any]:
        raise ConfigurationError("an in-memory map keeps no checkpoints")

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._callbacks.close()


class MemoryPulsarMap(PulsarMap[K, V]):
    """A ``PulsarMap`` in memory (see the module docstring)::

    flags = MemoryPulsarMap[str, bool]()
    flags.put("dark-mode", True).result()
    assert my_feature(flags) == ...
    """

    def __init__(
        self,
        topic: str | None = None,
        *,
        key_serde: KeySerde[K] | None = None,
        value_serde: Serde[V] | None = None,
        config: StateConfig | None = None,
    ) -> None:
        """``topic``: a name for messages and ``map.topic`` (default ``memory://map-N``).

        (``PulsarMap.__init__`` is not called: it needs a client; the map's
        parts are made here.)"""
        self._client = None
        self._codec = MapCodec(
            key_serde or StrKeySerde(),  # type: ignore[arg-type]
            value_serde or JsonSerde(),
        )
        manager = MemoryStateManager(
            self._codec, config or StateConfig(), topic or f"memory://map-{next(_names)}"
        )
        # the in-memory manager has the surface the map and its watches use
        self.manager = cast("Any", manager)
        self._watches = MapWatches(cast("Any", None), self.manager, self._codec)

    def watch(
        self,
        key_or_prefix: K | str | None,
        callback: Callable[[Any], Any],
        from_position: Position | str | None = None,
        **options: Any,
    ) -> Any:
        """As :meth:`PulsarMap.watch`, from now only (no history is kept).

        Returns:
            The running :class:`~pulsar_state.map.watch.MapWatch`.

        Raises:
            ConfigurationError: a ``from_position`` before the current position.
            TypeError, ValueError: as :meth:`PulsarMap.watch`.
        """
        if from_position is not None and Position.parse(from_position) < self.manager.position:
            raise ConfigurationError(
                "an in-memory map keeps no history: watch from now (from_position=None)"
            )
        return super().watch(key_or_prefix, callback, from_position, **options)
