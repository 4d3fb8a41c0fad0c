"""A Spark task's reader of the state topic, which lives through unloads.

Opening: :meth:`SourceOptions.connect` (each attempt a share of ``timeoutMs``,
on a new client), so a subscribe that stalls on a closing topic costs a part
of the budget.

Reading: a reader whose topic is unloaded again and again (a bundle move, a
broker restart, load shedding) reconnects with the C++ client's backoff, which
doubles with each failed attempt (up to a minute by default). After a storm of
unloads it can sit idle while the topic is back, for longer than the task's
budget: a loaded CI run saw a range read get no message for 12 s after an
8 s storm. So when no message comes within a quarter of ``timeoutMs``, the
reader is opened again, on a new client (a fresh backoff), at the entry of the
last message read; the messages read already are skipped by their position.
The caller gets each message once, in the topic's order, and a
``TimeoutError`` only when no new message came for ``timeoutMs`` in all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pulsar

from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.position import Position
from pulsar_state.retry import is_transient

__all__ = ["TopicReader", "open_reader"]

log = logging.getLogger(__name__)

#: how many waits without a message make a reader be opened again
_SHARES = 4

#: opens a reader at a message id (inclusive or not): (its client, the reader)
Opener = Callable[[pulsar.MessageId, bool], tuple[pulsar.Client, pulsar.Reader]]


def open_reader(
    opts: SourceOptions, first: pulsar.MessageId, where: str, **kwargs: Any
) -> tuple[pulsar.Client, pulsar.Reader]:
    """A client and a reader of the topic from ``first``, opened as
    :meth:`SourceOptions.connect` does (an unload in the way costs a part of
    ``timeoutMs``). Nothing is read yet, so opening again is exact.

    Raises:
        TimeoutError: no attempt opened it within ``timeoutMs``.
        pulsar.PulsarException: a permanent refusal (not authorized, no such
            topic), as the client says it.
    """
    try:
        return opts.connect(
            lambda client: client.create_reader(opts.topic, first, **kwargs),
            what=f"opening a reader {where}",
        )
    except pulsar.PulsarException as exc:
        if not is_transient(exc):
            raise  # not authorized, no such topic: as the client says
        raise TimeoutError(
            f"pulsar_state: could not open a reader of {opts.topic} {where} within "
            f"timeoutMs={opts.timeout_ms} ({type(exc).__name__}: {exc})"
        ) from None


def close_reader(reader: pulsar.Reader) -> None:
    """Close a reader whose rows are read: a failure here (the topic unloading as
    it closes) is no failure of the read; closing the client releases the rest."""
    try:
        reader.close()
    except pulsar.PulsarException as exc:
        log.debug("pulsar_state: closing a reader failed (%s); the client is closed next", exc)


class TopicReader:
    """The topic's messages from ``first`` on, each once, in order (module docstring).

    Args:
        open_at: opens a reader at a message id, inclusive or not (see
            :meth:`of`, which opens them with :func:`open_reader`).
        first: where the reading starts; ``inclusive``: with that message.
        timeout_ms: how long without a new message makes :meth:`read_next`
            raise ``TimeoutError``.
        clock: seconds, monotonic (for tests).
    """

    def __init__(
        self,
        open_at: Opener,
        first: pulsar.MessageId,
        *,
        inclusive: bool,
        timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_at = open_at
        self._first, self._inclusive = first, inclusive
        self._timeout_ms = timeout_ms
        self._clock = clock
        self._last: Position | None = None
        self.reopened = 0
        self._closed = False
        self._client, self._reader = open_at(first, inclusive)

    @classmethod
    def of(
        cls,
        opts: SourceOptions,
        first: pulsar.MessageId,
        where: str,
        *,
        inclusive: bool,
        **kwargs: Any,
    ) -> TopicReader:
        """A reader of ``opts.topic`` opened with :func:`open_reader` (``kwargs``:
        the client's reader options, e.g. ``is_read_compacted``)."""

        def open_at(at: pulsar.MessageId, incl: bool) -> tuple[pulsar.Client, pulsar.Reader]:
            return open_reader(opts, at, where, start_message_id_inclusive=incl, **kwargs)

        return cls(open_at, first, inclusive=inclusive, timeout_ms=opts.timeout_ms)

    def read_next(self) -> pulsar.Message:
        """The next message.

        Raises:
            TimeoutError: no new message within ``timeout_ms`` (the reader was
                opened again meanwhile, each quarter of it).
        """
        share_ms = max(1, self._timeout_ms // _SHARES)
        deadline = self._clock() + self._timeout_ms / 1000
        while True:
            left_ms = int((deadline - self._clock()) * 1000)
            if left_ms <= 0:
                raise TimeoutError(
                    f"pulsar_state: no message within {self._timeout_ms} ms after "
                    f"{self._last or 'the start'} (the reader opened again {self.reopened} times)"
                )
            try:
                msg = self._reader.read_next(timeout_millis=min(share_ms, left_ms))
            except pulsar.Timeout:
                if int((deadline - self._clock()) * 1000) > 0:
                    self._reopen()
                continue
            position = Position.from_message_id(msg.message_id())
            if self._last is not None and position <= self._last:
                continue  # read before the reader was opened again
            self._last = position
            return msg

    def _reopen(self) -> None:
        """A new client and reader at the last message's entry (or the start)."""
        self.close()
        last = self._last
        self.reopened += 1
        log.warning(
            "pulsar_state: no message for a while after %s; opening the reader again",
            last or "the start",
        )
        if last is None:
            opened = self._open_at(self._first, self._inclusive)
        else:  # the whole entry again (a batch's earlier messages are skipped above)
            opened = self._open_at(pulsar.MessageId(-1, last.ledger, last.entry, -1), True)
        self._client, self._reader = opened
        self._closed = False

    def close(self) -> None:
        """Close the reader and its client (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            close_reader(self._reader)
        finally:
            self._client.close()
