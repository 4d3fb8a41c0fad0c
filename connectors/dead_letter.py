"""What the SQL sink does with a record it can never write (a *poison* record).

A record with no key, or whose key or value is not UTF-8, cannot become a row
(the table keeps text keys and values): trying again cannot help, and holding
it would stop its partition. The policy, per sink config:

* ``deadLetterTopic`` set (the name follows Pulsar's ``--dead-letter-topic``):
  the record is produced there, with its original payload, key and
  properties, plus ``pss.dead-letter.reason`` (why), ``pss.dead-letter.topic``
  and ``pss.dead-letter.position`` (where it came from; Pulsar's own
  ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` carry the same). A key that is not
  UTF-8 cannot be given back through the Python client: the record goes
  without a key and ``pss.dead-letter.key-base64`` holds the original bytes.
  The send must succeed before the record is acknowledged; a failed send is
  an ordinary failure (the record is retried, nothing after it goes first).
  A record redelivered after a crash between the send and the ack is sent
  again: the dead-letter topic is at-least-once.
* otherwise: the record is logged (a warning) and skipped.

Either way it is counted: ``pulsar_state_sink_poison_records_total{topic,
outcome="dead_letter"|"skipped"}`` in ``prometheus_client``'s default
registry, and the sink's ``poisoned`` attribute.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import pulsar
from prometheus_client import Counter

if TYPE_CHECKING:
    from pulsar_state.connectors.sink import SinkRecord

__all__ = ["POISON_RECORDS", "REASON", "DeadLetters", "read_key"]

log = logging.getLogger(__name__)

POISON_RECORDS = Counter(
    "pulsar_state_sink_poison_records",
    "Records the SQL sink could never write (no key, not UTF-8), by what it did with them",
    ["topic", "outcome"],
)

#: the property that says why a record is on the dead-letter topic
REASON = "pss.dead-letter.reason"


class DeadLetters:
    """The poison-record policy of one sink: a dead-letter topic, or counted skips."""

    def __init__(
        self, client: pulsar.Client | None, topic: str | None, *, send_timeout_ms: int = 30_000
    ) -> None:
        self.topic = topic or None
        self._client = client
        self._send_timeout_ms = send_timeout_ms
        self._producer: pulsar.Producer | None = None

    def handle(self, record: SinkRecord, reason: str) -> str:
        """Dead-letter or skip ``record``; the outcome. Raises when the send fails."""
        if self.topic is None:
            log.warning("skipped a record it cannot write: %s", reason)
            outcome = "skipped"
        else:
            self._send(record, reason)
            log.warning("sent a record it cannot write to %s: %s", self.topic, reason)
            outcome = "dead_letter"
        POISON_RECORDS.labels(record.topic, outcome).inc()
        return outcome

    def _send(self, record: SinkRecord, reason: str) -> None:
        if self._client is None:
            raise RuntimeError("a dead-letter topic needs a Pulsar client")
        if self._producer is None:
            self._producer = self._client.create_producer(
                self.topic, batching_enabled=False, send_timeout_millis=self._send_timeout_ms
            )
        properties = dict(record.properties)
        properties.update(
            {
                REASON: reason,
                "pss.dead-letter.topic": record.topic,
                "pss.dead-letter.position": str(record.position),
                "REAL_TOPIC": record.topic,
                "ORIGIN_MESSAGE_ID": str(record.position),
            }
        )
        key: str | None = None
        if isinstance(record.key, bytes):
            properties["pss.dead-letter.key-base64"] = base64.b64encode(record.key).decode()
        else:
            key = record.key
        self._producer.send(record.value, partition_key=key, properties=properties)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None


def read_key(partition_key: Callable[[], str | None]) -> str | bytes | None:
    """A record's key from ``partition_key`` (a message's or a function context's): text,
    its raw bytes when not UTF-8 (the client decodes keys as UTF-8), or ``None`` (no key)."""
    try:
        key = partition_key()
    except UnicodeDecodeError as exc:
        return bytes(exc.object)
    return key or None
