"""Sending one entry: a write's messages go out together, the last ack tells.

The writer's producer batches until ``flush()``, so the messages of one write
are stored as one BookKeeper entry, whole or not at all. Only the last message
carries a callback; its acknowledgement reports for the entry. An entry of one
message is sent with the client's blocking ``send``, which waits in C++ without
the GIL and runs no Python code on the client's IO thread (about 40 µs of CPU
less per put than a callback handing the ack over, measured with
``/proc/self/task`` on this machine's standalone).

An entry of one message (a ``put``, an epoch marker) skips the batch: it is
stored as one entry by itself, so batching buys it nothing, and the client's
batch container costs it about a quarter of a synchronous put's rate (the
container's serialization and a flush, on the caller). The C++ client sends a
message that carries a delivery time individually, past the batch container
(``ProducerImpl::canAddToBatch``); a time of 0 (the epoch, long past) is what
marks ours. Delivery is not delayed: readers, exclusive and failover
subscriptions ignore delivery times, and a shared subscription's delay tracker
delivers a message whose time has passed at once. Such a message's id has
batch index -1 (the entry as a whole), which orders like any other.

Messages are built with the client's native ``MessageBuilder`` and handed to
the native producer: the wrapper's ``send_async`` type-checks ten optional
arguments per message, which costs group commit a few percent of its rate,
and our messages, made here, are always bytes with str properties and a str
key.
"""

from __future__ import annotations

import queue
from typing import Any

import _pulsar
import pulsar

from pulsar_state.core.log.format import MESSAGE_OVERHEAD_BYTES, OutgoingMessage
from pulsar_state.position import Position

__all__ = ["Acks", "PublishFailedError", "entry_size", "send_entry"]


class PublishFailedError(Exception):
    """The broker refused the entry, or its acknowledgement did not come in time."""

    def __init__(self, result: object) -> None:
        super().__init__(str(result))
        self.result = result


def entry_size(ops: list[tuple[str | None, bytes]]) -> int:
    """Bytes an entry of these (key, payload)s takes, message overhead included."""
    size = len(ops) * MESSAGE_OVERHEAD_BYTES
    for key, payload in ops:
        size += len(payload) + (len(key) if key else 0)
    return size


class Acks:
    """The acknowledgement of one entry (its last message's), handed over
    without a lock: the client's IO thread only puts it on a queue."""

    def __init__(self) -> None:
        self._answers: queue.SimpleQueue[tuple[pulsar.Result, pulsar.MessageId]] = (
            queue.SimpleQueue()
        )

    def callback(self, result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
        self._answers.put((result, msg_id))

    def wait(self, timeout_s: float) -> Position:
        """The entry's position once acknowledged; :class:`PublishFailedError`
        when refused, or when no answer came within ``timeout_s`` (the entry
        may still land: its outcome is unknown)."""
        try:
            result, msg_id = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            raise PublishFailedError("no acknowledgement in time") from None
        if result != pulsar.Result.Ok:
            raise PublishFailedError(result)
        return Position.from_message_id(msg_id)


def _ignore(*_: object) -> None:
    """Acks of all but an entry's last message, and the entry's flush (the last
    message's ack reports for all)."""


class _NoCallback:
    """The callback for all but an entry's last message.

    ``None``: the C++ client checks for an empty callback (``ProducerImpl::
    sendAsync``), which spares a call into Python (and a GIL hand-off) per
    message; ``_ignore`` once a client build refuses ``None``.
    """

    value: Any = None


#: the delivery time that sends a message past the batch container (see above)
_UNBATCHED_DELIVER_AT_MS = 0


def _native(m: OutgoingMessage, *, alone: bool = False) -> Any:
    """``m`` as the client's native message (what ``Producer.send_async``
    builds); ``alone``: an entry by itself, sent past the batch container."""
    builder = _pulsar.MessageBuilder()
    builder.content(m.payload)
    builder.properties(m.properties)  # one call for all (the C++ map, built once)
    if m.key:
        builder.partition_key(m.key)
    if alone:
        builder.deliver_at(_UNBATCHED_DELIVER_AT_MS)
    return builder.build()


def _send(
    producer: pulsar.Producer, m: OutgoingMessage, callback: Any, *, alone: bool = False
) -> None:
    producer._producer.send_async(_native(m, alone=alone), callback)


def _send_leading(producer: pulsar.Producer, messages: list[OutgoingMessage]) -> None:
    """All but the last of an entry's messages (the last one reports for all),
    with no Python callback (see :class:`_NoCallback`)."""
    send = producer._producer.send_async
    for m in messages[:-1]:
        native = _native(m)
        try:
            send(native, _NoCallback.value)
        except TypeError:  # refused before anything was sent or flushed
            if _NoCallback.value is _ignore:
                raise
            _NoCallback.value = _ignore
            send(native, _ignore)


def send_entry(
    producer: pulsar.Producer, messages: list[OutgoingMessage], acks: Acks, *, timeout_s: float
) -> Position:
    """Send ``messages`` as one entry and wait up to ``timeout_s`` for its ack.

    Raises :class:`PublishFailedError` (refused, no ack in time, or an ack
    that names no position) or ``pulsar.PulsarException`` (the producer is
    closed or fenced).
    """
    if len(messages) == 1:
        # the client's own blocking send: it waits in C++ without the GIL and
        # calls no Python code on its IO thread (the producer's send timeout
        # bounds it, and fails it as pulsar.Timeout)
        landed = Position.from_message_id(producer._producer.send(_native(messages[0], alone=True)))
    else:
        _send_leading(producer, messages)
        _send(producer, messages[-1], acks.callback)
        producer.flush()
        landed = acks.wait(timeout_s)
    if landed.is_start:
        # With deduplication on, the broker answers a message it stored already
        # (the client resent it after losing the connection before the
        # receipt) with the position -1:-1: the entry is stored, but where is
        # unknown, so nothing may be built on it before the log settles it.
        raise PublishFailedError(f"acknowledged as a duplicate, at no position ({landed})")
    return landed
