"""A stateful-function kit: PIP-15's state API on the shared state, effectively once.

On a standalone broker Pulsar's own Python function state is a no-op (no table
service). Subclass :class:`StatefulFunction` and implement :meth:`handle`; the
``state`` it gets has the PIP-15 calls (``incr_counter``, ``get_counter``,
``put_state``, ``get_state``, ``del_state``); what it returns is the message's
output::

    from pulsar_state.functions.stateful import StatefulFunction

    class WordCount(StatefulFunction):
        def handle(self, input, state, context):
            for word in input.split():
                state.incr_counter(word, 1)
            return f"{input}: counted"

Effectively once per input message, the output included: the message's state
changes, its output and a marker "processed up to this message id on this
topic" are one atomic write. A redelivered message (a crash after the write,
before the output was sent or the input acknowledged) finds the marker,
changes nothing and gives the output that was committed again, the same value,
so the runtime sends it again: each input has exactly one state effect and at
least one output, every copy identical. The output message carries the input's
topic and message id as properties (:data:`INPUT_TOPIC_PROPERTY`,
:data:`INPUT_MESSAGE_ID_PROPERTY`: Pulsar's runtime sets exactly these on every
output), so a consumer drops a copy by that pair. Two ways to run it:

* Pulsar's runtime calls :meth:`StatefulFunction.process`, which returns the
  committed output's value; the runtime publishes it with those properties and
  then acknowledges the input.
* Any other runtime (the project's worker) calls
  :meth:`StatefulFunction.process_message` and gets a :class:`CommittedOutput`
  (``value``, ``properties``, ``redelivered``): it publishes ``value`` (when not
  ``None``) with ``properties``, then acknowledges the input.

Outputs are stored only when the function has an output topic
(``context.get_output_topic()``), those of the last ``outputWindow`` messages per
input partition (user config, default 1000, in a ring of map keys overwritten
in place: no extra write). That covers every output a runtime can still have in
flight (Pulsar's runtime sends through a producer with at most 1000 pending
messages); a message redelivered after more later ones (its output's send
failed outright, and the runtime's negative ack brought it back a minute later)
finds no output: it is counted (``outputs_expired``) and logged. An output is
``str``, ``bytes`` or a JSON value (``int``, ``float``, ``bool``, ``list``, ``dict``
with ``str`` keys); anything else fails the message before anything is written.
Calls to ``context.publish`` inside ``handle`` are not covered (at least once).

Message ids must grow per input topic-partition, so deploy with
``retainOrdering: true`` (``--retain-ordering``: a failover subscription, one
active instance per input partition, in order); the kit refuses to start
otherwise. Pulsar refuses ``EFFECTIVELY_ONCE`` for Python functions ("not yet
supported in Python"): on Pulsar's workers deploy ``ATLEAST_ONCE``, which the kit
makes effectively once for the state and the output as above.

The processing guarantee is Pulsar's (``processingGuarantees``, read from the
function's details, :func:`~pulsar_state.scheduling.in_order.processing_guarantee`):

* ``ATLEAST_ONCE``, ``EFFECTIVELY_ONCE`` (and ``MANUAL``): a message whose
  ``handle`` (or state write) raised is never skipped. Pulsar's Python runtime
  nacks it and goes on with the next one, so the kit holds every later message
  of that partition back (raises
  :class:`~pulsar_state.errors.MessageHeldBackError`, the runtime nacks it too)
  until the failed one is redelivered and succeeds. It asks the input's
  consumer for that redelivery itself (``context.consumers``, which Pulsar's
  runtime and ``pulsar-state worker`` both give): at once, then again with a
  backoff while the message is still missing (:attr:`StatefulFunction.redeliveries`;
  :mod:`pulsar_state.scheduling.in_order`), not waiting for the client's 60 s
  negative-ack delay. A
  message that always fails therefore stops its partition (visible as user
  exceptions in ``functions status``) rather than being lost.
* ``ATMOST_ONCE``: Pulsar's runtime acknowledges each message on receipt, so a
  failed message is not coming back and the kit goes on with the next one: it
  is counted (:attr:`StatefulFunction.skipped`) and logged, and the exception
  still reaches the runtime (``numUserExceptions``). Nothing of the failed
  message is written.

The state lives in a ``PulsarMap`` on ``stateTopic`` (user config; default
``persistent://<tenant>/<namespace>/<name>-pss-state``), opened with the
instance's own Pulsar client; ``adminUrl`` (user config) protects the topic.
Keys: ``counter/<k>``, ``state/<k>``, ``processed/<topic>`` (``L:E:B``, and ``/S``
the batch's size for a batch message), ``output/<topic>/<slot>`` and
``outputs/<topic>`` (the ring of kept outputs); Spark, TableView and
``pulsar-state map`` read it as any map.
"""

from __future__ import annotations

import base64
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulsar import Function

from pulsar_state.errors import ConfigurationError
from pulsar_state.functions.function_map import open_function_map
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.position import Position
from pulsar_state.runtime.instance_metrics import label_instance_metrics
from pulsar_state.scheduling.in_order import (
    ATMOST_ONCE,
    InOrderGate,
    batch_size,
    marker_value,
    parse_marker,
    processing_guarantee,
    redeliver_function,
    require_in_order,
)
from pulsar_state.topic_names import function_state_name

__all__ = [
    "INPUT_MESSAGE_ID_PROPERTY",
    "INPUT_TOPIC_PROPERTY",
    "OUTPUT_WINDOW",
    "CommittedOutput",
    "FunctionState",
    "StatefulFunction",
    "input_message_id",
]

log = logging.getLogger(__name__)

#: the output message's property naming its input's topic (Pulsar's runtime's name)
INPUT_TOPIC_PROPERTY = "__pfn_input_topic__"
#: the output message's property naming its input message: the base64 of the
#: serialized message id, as Pulsar's runtime writes it
INPUT_MESSAGE_ID_PROPERTY = "__pfn_input_msg_id__"
#: the user-config key: how many outputs are kept per input partition
OUTPUT_WINDOW = "outputWindow"
DEFAULT_OUTPUT_WINDOW = 1000


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


def _plain_json(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    return False


def _encode_output(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, bytes | bytearray):
        return {"b": base64.b64encode(value).decode()}
    if _plain_json(value):
        return {"j": value}
    raise TypeError(
        f"the output of a StatefulFunction is kept with its state, so that a redelivery "
        f"sends it again: return str, bytes or a JSON value, got {type(value).__name__}"
    )


def _decode_output(stored: Mapping[str, Any]) -> Any:
    if "s" in stored:
        return str(stored["s"])
    if "b" in stored:
        return base64.b64decode(stored["b"])
    return stored.get("j")


def input_message_id(message_id: Any) -> str:
    """The value of :data:`INPUT_MESSAGE_ID_PROPERTY` for an input message id:
    URL-safe base64 of its serialized form, as Pulsar's runtime writes it
    (``""`` for an id that cannot be serialized)."""
    serialize = getattr(message_id, "serialize", None)
    if not callable(serialize):
        return ""
    return base64.urlsafe_b64encode(bytes(serialize())).decode("ascii")


@dataclass(frozen=True)
class CommittedOutput:
    """One input message's output, as committed with its state change.

    What :meth:`StatefulFunction.process_message` returns to a runtime: publish
    ``value`` (unless ``None``: the message has no output, or the function no
    output topic) with ``properties``, then acknowledge the input. A
    redelivered message gives the same ``value`` again (``redelivered`` is then
    ``True``): consumers deduplicate by the input named in ``properties``.
    """

    #: the output; ``None`` when there is none to send
    value: Any
    #: the input topic (or partition) of the message
    topic: str
    #: the input message's position in it
    position: Position
    #: :func:`input_message_id` of the input message
    message_id: str = ""
    #: a copy of an output committed before (the message came again)
    redelivered: bool = False
    #: the output's message properties: the input topic and message id
    properties: dict[str, str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "properties",
            {INPUT_TOPIC_PROPERTY: self.topic, INPUT_MESSAGE_ID_PROPERTY: self.message_id},
        )


def _output_window(context: Any) -> int:
    get = getattr(context, "get_user_config_value", None)
    value = get(OUTPUT_WINDOW) if callable(get) else None
    if value is None:
        return DEFAULT_OUTPUT_WINDOW
    try:
        window = int(value)
    except (TypeError, ValueError):
        window = 0
    if window < 1 or isinstance(value, bool) or (isinstance(value, float) and value != window):
        raise ConfigurationError(
            f"userConfig.{OUTPUT_WINDOW} is how many outputs are kept per input partition "
            f"for redeliveries: a positive int, got {value!r}"
        )
    return window


def _keeps_outputs(context: Any) -> bool:
    """Whether the function has an output topic (a runtime that cannot say: kept)."""
    get_output_topic = getattr(context, "get_output_topic", None)
    if not callable(get_output_topic):
        return True
    return bool(get_output_topic())


class _Outputs:
    """The ring of kept outputs of one input partition, in the state map.

    Output ``i`` of the partition is ``output/<topic>/<i mod window>`` =
    ``{"n": i, "m": its message, "p": the message of output i-1, "o": the output}``;
    ``outputs/<topic>`` = ``{"n": outputs so far, "m": the newest one's message,
    "w": the window it was written with}``.
    The newest ``window`` outputs are there; an older one is overwritten in place
    by the write that adds a new one. Each entry proves, by itself, that no
    message between ``p`` and ``m`` had an output (whatever window wrote it).
    """

    def __init__(self, topic: str, window: int) -> None:
        self.topic = topic
        self.window = window
        self.count_key = f"outputs/{topic}"

    def slot_key(self, i: int) -> str:
        return f"output/{self.topic}/{i % self.window}"

    def ops(
        self, latest: Mapping[str, Any], position: Position, value: Any
    ) -> list[MapOp[str, Any]]:
        """The ops that keep ``value`` as the output of ``position``."""
        count = latest.get(self.count_key)
        n, newest = (count["n"], count["m"]) if isinstance(count, Mapping) else (0, None)
        entry = {"n": n, "m": str(position), "p": newest, "o": _encode_output(value)}
        return [
            MapOp(self.slot_key(n), entry),
            MapOp(self.count_key, {"n": n + 1, "m": str(position), "w": self.window}),
        ]

    def find(self, lookup: Callable[[str], Any], position: Position) -> tuple[bool, Any]:
        """``(True, output)`` for a committed message ``position``: the output kept
        for it, ``None`` when it had none; ``(False, None)`` when that is no longer
        known (it left the ring)."""
        count = lookup(self.count_key)
        if not isinstance(count, Mapping) or Position.parse(count["m"]) < position:
            return True, None  # no output since it
        n = int(count["n"])
        # the window of the newest write too (another deployment's outputWindow)
        windows = {self.window, int(count.get("w") or self.window)}
        for i in range(n - 1, max(n - max(windows), 0) - 1, -1):  # the newest first
            for window in windows:
                entry = lookup(f"output/{self.topic}/{i % window}")
                if not isinstance(entry, Mapping):
                    continue
                kept = Position.parse(entry["m"])
                if kept == position:
                    return True, _decode_output(entry["o"])
                previous = entry.get("p")
                if position < kept and (previous is None or Position.parse(previous) < position):
                    return True, None  # between two outputs: it had none
        return False, None


class StatefulFunction(Function):  # type: ignore[misc]
    """Base class: implement ``handle(input, state, context)``; its return is the output."""

    def __init__(self) -> None:
        self._map: PulsarMap[str, Any] | None = None
        self._lock = threading.Lock()
        self._gate = InOrderGate()
        #: per input partition, the last message this instance recorded
        self._own: dict[str, Position] = {}
        #: redelivered messages (their committed output given again)
        self.duplicates = 0
        #: redelivered messages whose output had left the ring (``outputWindow``)
        self.outputs_expired = 0

    @property
    def skipped(self) -> int:
        """Failed messages let go under ``ATMOST_ONCE`` (none under the others)."""
        return self._gate.skipped

    @property
    def redeliveries(self) -> int:
        """Redeliveries the kit asked of the input's consumer for failed or missing
        messages (:class:`~pulsar_state.scheduling.in_order.InOrderGate`)."""
        return self._gate.redeliveries

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
        """Pulsar's runtime's entry: the value of :meth:`process_message`'s output
        (the runtime sends it with the input's topic and message id as properties)."""
        return self.process_message(input, context).value

    def process_message(self, input: Any, context: Any) -> CommittedOutput:
        """Process the runtime's current message (``context``) effectively once.

        Returns:
            The message's :class:`CommittedOutput`: for a new message, what
            ``handle`` returned, committed with its state change; for a
            redelivered one (already committed), the same output again.

        Raises:
            MessageHeldBackError: an earlier message of the partition failed or
                is still to come; the runtime negatively acknowledges this one.
            Exception: whatever ``handle`` or the state write raised; nothing of
                the message was written. Under ``ATMOST_ONCE`` the message is
                skipped (counted in :attr:`skipped`, logged); under the other
                guarantees nothing later of its partition goes first.
        """
        return self._gate.run(
            context, lambda topic, position: self._process(input, context, topic, position)
        )

    def _process(self, input: Any, context: Any, topic: str, position: Position) -> CommittedOutput:
        state_map = self._state_map(context)
        gated = processing_guarantee(context) != ATMOST_ONCE
        message_id = context.get_message_id()
        marker = f"processed/{topic}"
        stored = state_map.get(marker, latest=True).result(timeout=60)  # catches up once
        done, done_size = (None, None) if stored is None else parse_marker(stored)
        self._gate.done(topic, done)
        outputs = _Outputs(topic, _output_window(context))
        if done is not None and not position > done:
            return self._again(context, state_map, outputs, position, message_id)
        if gated and done is not None and self._own.get(topic) != done:  # another's record
            self._gate.hold_gap(
                topic,
                position,
                done,
                redeliver_function(context, topic),
                done_batch_size=done_size,
            )
        self._gate.check(topic, position, lambda: done)
        output = self._apply(
            input,
            context,
            state_map,
            marker=marker,
            outputs=outputs,
            position=position,
            message_id=message_id,
        )
        self._own[topic] = position
        self._gate.done(topic, position)
        return output

    def _again(
        self,
        context: Any,
        state_map: PulsarMap[str, Any],
        outputs: _Outputs,
        position: Position,
        message_id: Any,
    ) -> CommittedOutput:
        """A redelivered message: nothing changes; its committed output again."""
        self.duplicates += 1
        found, value = outputs.find(lambda key: state_map.get(key).result(timeout=60), position)
        if not found:
            self.outputs_expired += 1
            context.get_logger().error(
                "redelivered message %s of %s: its output is no longer kept (more than "
                "%s=%d later outputs of the partition since); none is sent again",
                position,
                outputs.topic,
                OUTPUT_WINDOW,
                outputs.window,
            )
        else:
            context.get_logger().info(
                "redelivered message %s: already committed, its output sent again", position
            )
        return CommittedOutput(
            value, outputs.topic, position, input_message_id(message_id), redelivered=True
        )

    def _apply(
        self,
        input: Any,
        context: Any,
        state_map: PulsarMap[str, Any],
        *,
        marker: str,
        outputs: _Outputs,
        position: Position,
        message_id: Any,
    ) -> CommittedOutput:
        """``handle`` the message; write its state changes, its output and its position as one."""
        state = FunctionState(lambda key: state_map.get(key).result(timeout=60))
        value = self.handle(input, state, context)
        keep = value is not None and _keeps_outputs(context)
        if keep:
            _encode_output(value)  # TypeError before anything is written
        recorded = marker_value(position, batch_size(message_id))

        raced = [False]  # the last run of commit is the one written

        def commit(latest: Mapping[str, Any]) -> list[MapOp[str, Any]]:
            already = latest.get(marker)
            raced[0] = already is not None and not position > parse_marker(already)[0]
            if raced[0]:
                return []  # another attempt of this message got here first
            kept = outputs.ops(latest, position, value) if keep else []
            return [*state.ops(latest), *kept, MapOp(marker, recorded)]

        def committed(after: Mapping[str, Any]) -> tuple[bool, Any]:
            """Ours, or the output the other attempt committed."""
            if not raced[0]:
                return False, value
            return True, outputs.find(after.get, position)[1]

        again, value = state_map.transact(commit, reader=committed).result(timeout=120)
        return CommittedOutput(
            value, outputs.topic, position, input_message_id(message_id), redelivered=again
        )

    def close(self) -> None:
        self._gate.close()
        if self._map is not None:
            self._map.close()
