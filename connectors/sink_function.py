"""The SQL sink inside Pulsar's Python functions runtime: :class:`SinkFunction`.

Pulsar's native sink runtime is Java-only, so the sink is deployed as a
function with no output topic (``className: sink_entry.SinkFunction``, see
``deploy/functions/sql-sink.yaml``). Each record is one transaction: the
runtime acknowledges a record when ``process`` returns, so buffering records
would acknowledge them before they are written. The broker's failover
subscription decides which instance consumes which input partition; each
instance records the partitions it took over in the sink's map (key
``sink/<name>/owner/<partition topic>``, :func:`owner_key`). The sink itself,
its positions and its dead letters are in :mod:`pulsar_state.connectors.sink`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from pulsar import Function

from pulsar_state.connectors.dead_letter import POISON_RECORDS, DeadLetters, read_key
from pulsar_state.connectors.sink import (
    SinkRecord,
    SqlUpsertSink,
    TakeoverGapError,
    hold_past_gap,
    record_metadata,
)
from pulsar_state.connectors.topic_incarnation import (
    POSITION_CHECKS,
)
from pulsar_state.errors import (
    PoisonRecordError,
    PulsarStateError,
)
from pulsar_state.map.pulsar_map import PulsarMap
from pulsar_state.position import Position
from pulsar_state.runtime.instance_metrics import label_instance_metrics
from pulsar_state.runtime.tls import function_admin_endpoint
from pulsar_state.scheduling.in_order import (
    ATMOST_ONCE,
    InOrderGate,
    batch_size,
    processing_guarantee,
    redeliver_function,
    require_in_order,
)

__all__ = ["SinkFunction", "owner_key"]


def _instance_id(context: Any) -> int | str:
    """The function instance's id (the Python runtime hands it over as a string)."""
    raw = context.get_instance_id()
    try:
        return int(raw)
    except (TypeError, ValueError):
        return str(raw)


def owner_key(name: str, topic: str) -> str:
    """Where the instance consuming ``topic`` (an input partition) is recorded."""
    return f"sink/{name}/owner/{topic}"


class SinkFunction(Function):  # type: ignore[misc]
    """Runs :class:`SqlUpsertSink` inside the functions runtime (no output topic).

    User config: ``database`` (SQLite path or ``postgresql://`` URL), ``table``
    (default ``kv``), optional ``metadataTopic`` and ``adminUrl`` for the config
    record and the partition owners in the core, optional ``deadLetterTopic``
    for poison records. Needs in-order delivery (``retainOrdering: true``).
    """

    def __init__(self) -> None:
        self._sink: SqlUpsertSink | None = None
        self._records: PulsarMap[str, Any] | None = None
        self._dead_letters: DeadLetters | None = None
        self._gate = InOrderGate()
        self._lock = threading.Lock()
        self.config_version: int | None = None

    def _open(self, context: Any) -> SqlUpsertSink:
        with self._lock:
            if self._sink is None:
                require_in_order(context, "SinkFunction")
                label_instance_metrics(context, extra=[POISON_RECORDS, POSITION_CHECKS])
                config = dict(context.get_user_config_map())
                sink = SqlUpsertSink()
                sink.open(config, context)
                metadata_topic = config.get("metadataTopic")
                records: PulsarMap[str, Any] | None = None
                try:
                    if metadata_topic:
                        records = PulsarMap[str, Any](
                            context.get_pulsar_client(),
                            metadata_topic,
                            admin=function_admin_endpoint(context),
                        )
                        self.config_version = record_metadata(
                            records,
                            context.get_function_name(),
                            sink.metadata_config(config),
                            sink.schema,
                        )
                except BaseException:  # nothing half-open left behind for the next try
                    if records is not None:
                        records.close()
                    sink.close()
                    raise
                self._dead_letters = DeadLetters(
                    context.get_pulsar_client(), config.get("deadLetterTopic")
                )
                self._records, self._sink = records, sink
            return self._sink

    def _note_owner(self, topic: str, context: Any) -> None:
        """Record that this instance consumes ``topic``, when the map says otherwise.

        Checked on local state for every record (no round trip): a partition
        taken over, or taken back after another instance recorded itself, is
        written once. Bookkeeping only: a failure is logged and retried with
        the next record, never holds the data back.
        """
        if self._records is None:
            return
        key, instance = owner_key(context.get_function_name(), topic), _instance_id(context)
        try:
            current = self._records.get(key).result(timeout=60)
            if isinstance(current, dict) and current.get("instance") == instance:
                return
            owner = {"instance": instance, "since": int(time.time() * 1000)}
            self._records.put(key, owner).result(timeout=60)
        except (PulsarStateError, TimeoutError) as exc:
            context.get_logger().warning("could not record the owner of %s: %s", topic, exc)

    def process(self, input: Any, context: Any) -> None:
        self._gate.run(
            context, lambda topic, position: self._process(input, context, topic, position)
        )

    def _process(self, input: Any, context: Any, topic: str, position: Position) -> None:
        sink = self._open(context)
        self._gate.check(topic, position, lambda: sink.trusted_position(topic))
        record = SinkRecord(
            topic=topic,
            key=read_key(context.get_partition_key),
            value=_raw_value(input, context),
            position=position,
            properties=dict(context.get_message_properties() or {}),
            batch_size=batch_size(context.get_message_id()),
        )
        resets = sink.position_checks.get("reset", 0)
        try:
            if not self._past_gap(context, record, sink.write):
                context.get_logger().info("skipped redelivered record %s", record.position)
            if sink.position_checks.get("reset", 0) > resets:
                context.record_metric("pss_sink_position_resets", 1)
        except PoisonRecordError as exc:
            assert self._dead_letters is not None
            self._dead_letters.handle(record, str(exc))
            self._past_gap(context, record, sink.mark_poisoned)
            sink.poisoned += 1
            context.record_metric("pss_sink_poison_records", 1)
        self._gate.done(topic, position)
        self._note_owner(topic, context)

    def _past_gap(self, context: Any, record: SinkRecord, apply: Callable[..., bool]) -> bool:
        """``apply(record)``; a record held by the takeover-gap check waits in the gate.

        The gate holds it (MessageHeldBackError: the runtime nacks it) and asks
        the input's consumer to redeliver, so the missing records come first; a
        gap still open after ``gap_wait_s`` is passed with a warning, and the
        record is applied then. Under ``ATMOST_ONCE`` the runtime acknowledged
        the missing records on receipt: they are not coming back, nothing waits.
        """
        try:
            return apply(record)
        except TakeoverGapError as gap:
            if processing_guarantee(context) == ATMOST_ONCE:
                context.get_logger().warning(
                    "%s: %s goes past %s, which the instance that had the partition "
                    "received and did not write (ATMOST_ONCE: it is not coming back)",
                    gap.topic,
                    gap.position,
                    gap.missing,
                )
            else:
                hold_past_gap(self._gate, gap, redeliver_function(context, gap.topic))
            return apply(record, past_gap=True)

    def close(self) -> None:
        self._gate.close()
        if self._dead_letters is not None:
            self._dead_letters.close()
        if self._sink is not None:
            self._sink.close()
        if self._records is not None:
            self._records.close()


def _raw_value(input: Any, context: Any) -> bytes:
    """The record's payload as sent.

    The Python runtime's default SerDe turns a payload that parses as a number
    into an int or float (``"007"`` becomes ``7``), so the bytes are read from
    the current message (the runtime's context keeps it as ``message``) when
    it is there.
    """
    message = getattr(context, "message", None)
    data = getattr(message, "data", None)
    if callable(data):
        raw = data()
        if isinstance(raw, bytes):
            return raw
    if isinstance(input, bytes | bytearray):
        return bytes(input)
    return str(input).encode()
