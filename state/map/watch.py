"""Watching a map: every change to a key or a key prefix, in log order.

A :class:`MapWatch` (made by :meth:`PulsarMap.watch <pulsar_state.map.pulsar_map.PulsarMap.watch>`)
calls its callback once per changed key with a :class:`MapChange`: the key,
the new value (or a deletion), the value it replaced, and the position of the
write. Changes come in the topic's order, each write's ops in their order,
every one after the start position and none twice:

* ``from_position=None``: from now. The watch registers on the manager's
  applied stream (the listeners of :class:`~pulsar_state.core.log.replay.LogReplay`)
  and snapshots the matching keys under the state lock, in one step, so the
  first change it reports is the first write applied after that.
* ``from_position=P``: the history after ``P`` first. A non-durable Reader
  replays the topic's raw log (not the compacted view, which drops
  intermediate values) from its beginning through the position where the live
  stream was joined, with the state core's own replay (stale and duplicate
  writes dropped as every reader drops them); then the live stream goes on.
  Old values are exact when the log is whole (the map's topic has infinite
  retention; a topic that lost its head gives ``old_value=None`` for keys
  last written there).

The callback runs on the watch's own thread, never on the tailer's: a slow
callback delays only its watch (its queue grows), and one that raises is
logged and counted (:attr:`MapWatch.errors` and the
``pulsar_state_watch_callback_errors`` metric), then the next change comes.
The queue is bounded (``max_pending`` writes, default 100,000): a watch that
falls further behind ends after the write it is delivering, with
:class:`~pulsar_state.errors.WatchOverflowError` as its :attr:`MapWatch.failure`
(logged, counted in ``pulsar_state_watch_overflows``). Nothing is lost: a new
watch with ``from_position=watch.position`` replays every change after it, as
etcd's slow watchers resume from a revision.
Values are fresh objects decoded from the write, not the map's own.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

import pulsar
from prometheus_client import Counter

from pulsar_state import forks
from pulsar_state.core.log.format import check_user_key
from pulsar_state.core.log.replay import AppliedWrite, LogReplay
from pulsar_state.core.manager import SharedStateManager
from pulsar_state.core.op_codec import OpCodec
from pulsar_state.errors import (
    OperationTimeoutError,
    PulsarStateError,
    StateTopicError,
    WatchOverflowError,
)
from pulsar_state.map.op import MapCodec, MapOp
from pulsar_state.position import START, Position
from pulsar_state.serde import KeySerde, Serde

__all__ = ["DEFAULT_MAX_PENDING", "LogFeed", "MapChange", "MapWatch", "MapWatches", "key_matcher"]

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

#: writes a watch may have queued before it is ended as too far behind
DEFAULT_MAX_PENDING = 100_000

WATCH_OVERFLOWS = Counter(
    "pulsar_state_watch_overflows",
    "Map watches ended because their queue reached max_pending (resume from their position)",
    ["topic"],
)
WATCH_CALLBACK_ERRORS = Counter(
    "pulsar_state_watch_callback_errors",
    "Map watch callbacks that raised (logged, then the next change is delivered)",
    ["topic"],
)


@dataclass(frozen=True, slots=True)
class MapChange(Generic[K, V]):
    """One key's change: ``value`` is the new value (``None`` when ``deleted``),
    ``old_value`` the one it replaced (``None``: the key was absent)."""

    key: K
    value: V | None
    old_value: V | None
    deleted: bool
    position: Position


def key_matcher(
    key_serde: KeySerde[Any], key_or_prefix: Any, *, prefix: bool
) -> Callable[[Any], bool]:
    """Which keys a watch reports: every key (``None``), one key, or (``prefix``)
    every key whose string form starts with ``key_or_prefix``."""
    if key_or_prefix is None:
        return lambda _key: True
    if prefix:
        if not isinstance(key_or_prefix, str):
            raise TypeError(f"a key prefix is a str, got {type(key_or_prefix).__name__}")
        return lambda key: key_serde.to_key(key).startswith(key_or_prefix)
    raw = check_user_key(key_serde.to_key(key_or_prefix))  # a key the map cannot hold
    return lambda key: key_serde.to_key(key) == raw


class ChangeTracker(Generic[K, V]):
    """Turns applied writes into :class:`MapChange` s, keeping the matching keys'
    current payloads (to report old values)."""

    def __init__(
        self,
        value_serde: Serde[V],
        match: Callable[[K], bool],
        current: dict[K, bytes] | None = None,
    ) -> None:
        self._serde = value_serde
        self._match = match
        self._current: dict[K, bytes] = dict(current or {})

    def _value(self, payload: bytes | None) -> V | None:
        return None if payload is None else self._serde.deserialize(payload)

    def changes(self, ops: Any, position: Position) -> list[MapChange[K, V]]:
        out: list[MapChange[K, V]] = []
        for op in ops:
            if not self._match(op.key):
                continue
            old = self._current.get(op.key)
            if op.is_delete:
                if old is None:
                    continue  # deleting an absent key changes nothing
                del self._current[op.key]
                out.append(MapChange(op.key, None, self._value(old), True, position))
            else:
                self._current[op.key] = op.payload
                out.append(
                    MapChange(op.key, self._value(op.payload), self._value(old), False, position)
                )
        return out


class LogFeed(Generic[K, V]):
    """The map topic's raw log, replayed from its beginning by a non-durable Reader.

    Read-only: it creates nothing (the caller checks the topic exists first if
    it must not be created). ``on_write`` gets every applied write.
    """

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        codec: OpCodec[Any],
        on_write: Callable[[AppliedWrite[Any]], None],
    ) -> None:
        self.topic = topic
        self._replay: LogReplay[None, Any] = LogReplay(
            topic=topic, codec=codec, applier=lambda _state, _op: None, state=None
        )
        self._replay.add_listener(on_write)
        try:
            self._reader = forks.keep_in_children(
                client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=False)
            )
        except pulsar.PulsarException as exc:
            raise StateTopicError(f"cannot read {topic}: {exc}") from exc

    @property
    def applied(self) -> Position:
        return self._replay.applied

    def poll(self, timeout_s: float) -> bool:
        """Take the next message, waiting at most ``timeout_s``; whether one came."""
        try:
            msg = self._reader.read_next(timeout_millis=max(1, int(timeout_s * 1000)))
        except pulsar.Timeout:
            self._replay.flush()  # nothing follows for now: apply what is complete
            return False
        except pulsar.PulsarException as exc:
            raise StateTopicError(f"cannot read {self.topic}: {exc}") from exc
        self._replay.feed(msg)
        return True

    def more_available(self) -> bool:
        try:
            return bool(self._reader.has_message_available())
        except pulsar.PulsarException as exc:
            raise StateTopicError(f"cannot read {self.topic}: {exc}") from exc

    def read_until(
        self, target: Position, timeout_s: float, stopped: Callable[[], bool] = lambda: False
    ) -> None:
        """Replay through ``target``.

        Raises:
            OperationTimeoutError: not there within ``timeout_s``.
            ValueError: the log ends before ``target`` (a position it never had).
        """
        deadline = time.monotonic() + timeout_s
        while not self._replay.applied.covers(target) and not stopped():
            left = deadline - time.monotonic()
            if left <= 0:
                raise OperationTimeoutError(
                    f"replaying {self.topic} did not reach {target} within {timeout_s:.1f}s "
                    f"(at {self._replay.applied})"
                )
            if not self.poll(min(left, 0.2)) and not self.more_available():
                self._replay.flush()
                if not self._replay.applied.covers(target):
                    raise ValueError(
                        f"{self.topic} ends at {self._replay.applied}, before position {target}"
                    )

    def read_to_end(self, timeout_s: float) -> None:
        """Replay through the last message available now (bounded by ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while self.more_available():
            left = deadline - time.monotonic()
            if left <= 0:
                raise OperationTimeoutError(
                    f"replaying {self.topic} to its end took over {timeout_s:.1f}s"
                )
            self.poll(min(left, 0.2))
        self._replay.flush()

    def close(self) -> None:
        with contextlib.suppress(pulsar.PulsarException):
            self._reader.close()


_STOP: Any = object()


class MapWatch(Generic[K, V]):
    """A running watch: stop it with :meth:`stop` (or ``with``). See the module docstring.

    ``delivered`` counts callbacks that returned, ``errors`` those that raised;
    ``position`` is the position of the last change handed to the callback
    (the start position until then);
    ``failure`` is set if the watch ended on its own (its history could not
    be read; :class:`~pulsar_state.errors.WatchOverflowError` when it fell
    ``max_pending`` writes behind), after which it delivers nothing more.
    """

    def __init__(
        self,
        *,
        topic: str,
        callback: Callable[[MapChange[K, V]], Any],
        tracker: ChangeTracker[K, V],
        after: Position,
        live_after: Position,
        history: Callable[[Callable[[AppliedWrite[Any]], None], Callable[[], bool]], None]
        | None = None,
        on_stop: Callable[[MapWatch[K, V]], None] | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be an int >= 1, got {max_pending!r}")
        self._max_pending = max_pending
        #: set (on the applying thread) when the queue reached max_pending
        self._overflowed = threading.Event()
        self.topic = topic
        self._callback = callback
        self._tracker = tracker
        self._after = after
        self._live_after = live_after
        self._history = history
        self._on_stop = on_stop
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._m_errors = WATCH_CALLBACK_ERRORS.labels(topic)
        self.delivered = 0
        self.errors = 0
        self.position: Position = after
        self.failure: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"pss-watch-{topic.rsplit('/', 1)[-1]}", daemon=True
        )

    # -- feeding (any thread) --------------------------------------------------

    def offer(self, write: AppliedWrite[Any]) -> None:
        """Queue an applied write (called on the applying thread: only enqueues)."""
        if write.position <= self._live_after or self._stopped.is_set():
            return
        if self._overflowed.is_set():
            return
        if self._queue.qsize() >= self._max_pending:
            self._overflow()
            return
        self._queue.put(write)

    def _overflow(self) -> None:
        """Too far behind: end after the write being delivered (see the module docstring)."""
        self._overflowed.set()
        WATCH_OVERFLOWS.labels(self.topic).inc()
        self._queue.put(_STOP)  # behind what is queued; the thread stops before it

    def start(self) -> None:
        """Start delivering on the watch's thread (:meth:`PulsarMap.watch` does).

        Raises:
            RuntimeError: if the watch was started already.
        """
        self._thread.start()

    # -- the watch's thread ----------------------------------------------------

    def _run(self) -> None:
        try:
            if self._history is not None:
                self._history(self._handle, self._ending)
            while not self._ending():
                item = self._queue.get()
                if item is _STOP:
                    break
                self._handle(item)
            if self._overflowed.is_set() and not self._stopped.is_set():
                self.failure = WatchOverflowError(
                    f"the watch on {self.topic} fell {self._max_pending} writes behind "
                    f"(its callback is slower than the writes) and was ended after "
                    f"{self.position}; watch again with from_position=watch.position "
                    "to get every change after it",
                    position=self.position,
                )
                log.error("%s", self.failure)
        except BaseException as exc:  # the watch ends; the application goes on
            self.failure = exc
            log.exception("watch on %s ended", self.topic)
        finally:
            self._stopped.set()
            if self._on_stop is not None:
                self._on_stop(self)

    def _handle(self, write: AppliedWrite[Any]) -> None:
        for change in self._tracker.changes(write.ops, write.position):
            if write.position <= self._after:
                continue  # history before the start: tracked for old values only
            if self._stopped.is_set():
                return
            self.position = change.position
            try:
                self._callback(change)
            except Exception:
                self.errors += 1
                self._m_errors.inc()
                log.exception("watch callback %r failed on %s", self._callback, change.key)
            else:
                self.delivered += 1

    def _ending(self) -> bool:
        """Stopped, or too far behind (then only between writes, never mid-write)."""
        return self._stopped.is_set() or self._overflowed.is_set()

    # -- lifecycle -------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True until :meth:`stop` (or a failure, see :attr:`failure`) ends the watch."""
        return not self._stopped.is_set()

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop delivering; wait at most ``timeout_s`` for a callback in progress.

        Returns:
            Whether the watch's thread ended within ``timeout_s`` (a callback
            still running is not interrupted; nothing is delivered after it).
        """
        self._stopped.set()
        self._queue.put(_STOP)
        if self._thread.ident is not None and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def history_replayer(
    client: pulsar.Client,
    topic: str,
    codec: OpCodec[Any],
    until: Position,
    timeout_s: float,
) -> Callable[[Callable[[AppliedWrite[Any]], None], Callable[[], bool]], None]:
    """A :class:`MapWatch` history step: replay the raw log through ``until``."""

    def replay(handle: Callable[[AppliedWrite[Any]], None], stopped: Callable[[], bool]) -> None:
        if until == START:
            return

        def through_until(write: AppliedWrite[Any]) -> None:
            if until.covers(write.position):  # later writes come from the live stream
                handle(write)

        feed: LogFeed[Any, Any] = LogFeed(client, topic, codec, through_until)
        try:
            feed.read_until(until, timeout_s, stopped)
        except ValueError as exc:  # the live stream joined at a position the log has
            raise PulsarStateError(str(exc)) from exc
        finally:
            feed.close()

    return replay


class MapWatches(Generic[K, V]):
    """A map's running watches: opens them on its manager, stops them all at close."""

    def __init__(
        self,
        client: pulsar.Client,
        manager: SharedStateManager[dict[K, V], MapOp[K, V]],
        codec: MapCodec[K, V],
    ) -> None:
        self._client = client
        self._manager = manager
        self._codec = codec
        self._watches: set[MapWatch[K, V]] = set()
        self._lock = threading.Lock()

    def open(
        self,
        key_or_prefix: K | str | None,
        callback: Callable[[MapChange[K, V]], Any],
        from_position: Position | str | None,
        *,
        prefix: bool,
        timeout_s: float | None,
        max_pending: int,
    ) -> MapWatch[K, V]:
        """Start a watch (see :meth:`PulsarMap.watch
        <pulsar_state.map.pulsar_map.PulsarMap.watch>`, which documents the arguments)."""
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        manager = self._manager
        match = key_matcher(self._codec.key_serde, key_or_prefix, prefix=prefix)
        start = None if from_position is None else Position.parse(from_position)
        bound = timeout_s if timeout_s is not None else 4 * manager.config.operation_timeout_s
        if bound <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        manager.check_process()

        def register(state: dict[K, V]) -> MapWatch[K, V]:
            # a local read runs under the state lock: the snapshot of the matching
            # keys and the registration on the applied stream are one step
            joined = manager.position
            from_now = start is None or start >= joined
            current: dict[K, bytes] = {}
            if from_now:
                serialize = self._codec.value_serde.serialize
                current = {k: serialize(v) for k, v in state.items() if match(k)}
            watch: MapWatch[K, V] = MapWatch(
                topic=manager.topic,
                callback=callback,
                tracker=ChangeTracker(self._codec.value_serde, match, current),
                after=joined if start is None else start,
                live_after=joined,
                history=None
                if from_now
                else history_replayer(self._client, manager.topic, self._codec, joined, bound),
                on_stop=self._remove,
                max_pending=max_pending,
            )
            with self._lock:
                self._watches.add(watch)
            manager.add_listener(watch.offer, inline=True)
            return watch

        watch = manager.read(register).result(bound)
        watch.start()
        return watch

    def _remove(self, watch: MapWatch[K, V]) -> None:
        with contextlib.suppress(ValueError):
            self._manager.remove_listener(watch.offer)
        with self._lock:
            self._watches.discard(watch)

    def stop_all(self, timeout_s: float = 5.0) -> None:
        """Stop every running watch (the map is closing)."""
        with self._lock:
            watches = list(self._watches)
        for watch in watches:
            watch.stop(timeout_s=timeout_s)
