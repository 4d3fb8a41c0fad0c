"""A stateful-function kit: PIP-15's state API on the shared state, effectively once.

On a standalone broker Pulsar's own Python function state is a no-op (no table
service). Subclass :class:`StatefulFunction` and implement :meth:`handle`; the
``state`` it gets has the PIP-15 calls (``incr_counter``, ``get_counter``,
``put_state``, ``get_state``, ``del_state``)::

    from pulsar_state.functions.stateful import StatefulFunction

    class WordCount(StatefulFunction):
        def handle(self, input, state, context):
            for word in input.split():
                state.incr_counter(word, 1)

Effectively once per input message: the message's state changes and a marker
"processed up to this message id on this topic" are one atomic write; a
redelivered message (a crash after the write, before the ack) finds the marker
and changes nothing. Message ids must grow per input topic-partition, so deploy
with ``retainOrdering: true`` (``--retain-ordering``: a failover subscription,
one active instance per input partition, in order; Pulsar's own
``EFFECTIVELY_ONCE`` is not available to Python functions); the kit refuses to
start otherwise.

A message whose ``handle`` (or state write) raised is never skipped: Pulsar's
Python runtime nacks it and goes on with the next one, so the kit holds every
later message of that partition back (raises
:class:`~pulsar_state.errors.MessageHeldBackError`, the runtime nacks it too)
until the failed one is redelivered and succeeds, and asks for that redelivery
with a backoff (:mod:`pulsar_state.scheduling.in_order`). A message that always
fails therefore stops its partition (visible as user exceptions in
``functions status``) rather than being lost.

The state lives in a ``PulsarMap`` on ``stateTopic`` (user config; default
``persistent://<tenant>/<namespace>/<name>-pss-state``), opened with the
instance's own Pulsar client; ``adminUrl`` (user config) protects the topic.
Keys: ``counter/<k>``, ``state/<k>``, ``processed/<topic>``; Spark, TableView and
``pulsar-state map`` read it as any map.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pulsar import Function

from pulsar_state.functions.function_map import open_function_map
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.position import Position
from pulsar_state.runtime.instance_metrics import label_instance_metrics
from pulsar_state.scheduling.in_order import InOrderGate, redeliver_function, require_in_order
from pulsar_state.topic_names import function_state_name

__all__ = ["FunctionState", "StatefulFunction"]


def _encode(value: bytes | str) -> dict[str, str]:
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, bytes | bytearray):
        return {"b": base64.b64encode(value).decode()}
    raise TypeError(f"state values are bytes or str, got {type(value).__name__}")


def _decode(stored: Any) -> bytes | None:
    if stored is None:
        return None
    if "s" in stored:
        return str(stored["s"]).encode()
    return base64.b64decode(stored["b"])


class FunctionState:
    """PIP-15's state calls for one input message; they take effect together or not at all."""

    def __init__(self, lookup: Callable[[str], Any]) -> None:
        self._lookup = lookup
        self._counters: dict[str, int] = {}
        #: counters deleted by this message (they start again from 0)
        self._reset: set[str] = set()
        self._values: dict[str, dict[str, str] | None] = {}

    def incr_counter(self, key: str, amount: int = 1) -> None:
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError(f"counter increments are int, got {type(amount).__name__}")
        self._counters[key] = self._counters.get(key, 0) + amount

    def find_counter(self, key: str) -> int | None:
        """The counter's value, ``None`` when it was never set (or was deleted)."""
        stored = None if key in self._reset else self._lookup(f"counter/{key}")
        if stored is None and key not in self._counters:
            return None
        return int(stored or 0) + self._counters.get(key, 0)

    def get_counter(self, key: str) -> int:
        return self.find_counter(key) or 0

    def del_counter(self, key: str) -> None:
        self._counters.pop(key, None)
        self._reset.add(key)

    def put_state(self, key: str, value: bytes | str) -> None:
        self._values[key] = _encode(value)

    def get_state(self, key: str) -> bytes | None:
        if key in self._values:
            return _decode(self._values[key])
        return _decode(self._lookup(f"state/{key}"))

    def del_state(self, key: str) -> None:
        self._values[key] = None

    def ops(self, latest: Mapping[str, Any]) -> list[MapOp[str, Any]]:
        """This message's changes as map ops against the latest state."""
        ops: list[MapOp[str, Any]] = []
        for key in sorted(self._reset - self._counters.keys()):
            if f"counter/{key}" in latest:
                ops.append(MapOp(f"counter/{key}", MapOp.DELETE))
        for key, delta in self._counters.items():
            base = 0 if key in self._reset else int(latest.get(f"counter/{key}", 0))
            ops.append(MapOp(f"counter/{key}", base + delta))
        for key, stored in self._values.items():
            if stored is not None:
                ops.append(MapOp(f"state/{key}", stored))
            elif f"state/{key}" in latest:
                ops.append(MapOp(f"state/{key}", MapOp.DELETE))
        return ops


class StatefulFunction(Function):  # type: ignore[misc]
    """Base class: implement ``handle(input, state, context)``; its return is the output."""

    def __init__(self) -> None:
        self._map: PulsarMap[str, Any] | None = None
        self._lock = threading.Lock()
        self._gate = InOrderGate()
        #: per input partition, the last message this instance recorded
        self._own: dict[str, Position] = {}
        self.duplicates = 0

    def handle(self, input: Any, state: FunctionState, context: Any) -> Any:
        raise NotImplementedError

    def _state_map(self, context: Any) -> PulsarMap[str, Any]:
        with self._lock:
            if self._map is None:
                require_in_order(context, "StatefulFunction")
                label_instance_metrics(context)
                self._map = open_function_map(
                    context, "stateTopic", function_state_name(context.get_function_name())
                )
            return self._map

    def process(self, input: Any, context: Any) -> Any:
        return self._gate.run(
            context, lambda topic, position: self._process(input, context, topic, position)
        )

    def _process(self, input: Any, context: Any, topic: str, position: Position) -> Any:
        state_map = self._state_map(context)
        marker = f"processed/{topic}"
        stored = state_map.get(marker, latest=True).result(timeout=60)  # catches up once
        done = None if stored is None else Position.parse(stored)
        self._gate.done(topic, done)
        if done is not None and not position > done:
            self.duplicates += 1
            context.get_logger().info("skipping redelivered message %s", position)
            return None
        if done is not None and self._own.get(topic) != done:  # another instance's record
            self._gate.hold_gap(topic, position, done, redeliver_function(context, topic))
        self._gate.check(topic, position, lambda: done)
        output = self._apply(input, context, state_map, marker, position)
        self._own[topic] = position
        self._gate.done(topic, position)
        return output

    def _apply(
        self,
        input: Any,
        context: Any,
        state_map: PulsarMap[str, Any],
        marker: str,
        position: Position,
    ) -> Any:
        """``handle`` the message; write its state changes and its position as one."""
        state = FunctionState(lambda key: state_map.get(key).result(timeout=60))
        output = self.handle(input, state, context)

        def commit(latest: Mapping[str, Any]) -> list[MapOp[str, Any]]:
            already = latest.get(marker)
            if already is not None and not position > Position.parse(already):
                return []  # another attempt of this message got here first
            return [*state.ops(latest), MapOp(marker, str(position))]

        state_map.transact(commit).result(timeout=120)
        return output

    def close(self) -> None:
        self._gate.close()
        if self._map is not None:
            self._map.close()
