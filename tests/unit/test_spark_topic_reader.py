"""``TopicReader``: a read that stalls is opened again and goes on, each message once.

A loaded CI run saw a Spark range read get no message for 12 s after a storm of
unloads (the C++ client's reconnection backoff had grown past the budget) and
fail. Here a scripted reader stalls where the real one did; the real thing runs
in tests/integration/test_spark_unload_race.py.
"""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from pulsar_state.connectors.spark_topic_reader import TopicReader
from pulsar_state.position import Position

STALL = "stall"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Message:
    def __init__(self, ledger: int, entry: int, batch: int = -1) -> None:
        self._id = pulsar.MessageId(-1, ledger, entry, batch)

    def message_id(self) -> pulsar.MessageId:
        return self._id


class _Reader:
    """Gives its script's messages; a stall waits out the timeout (on the fake clock)."""

    def __init__(self, script: list[Any], clock: _Clock) -> None:
        self.script, self.clock, self.closed = list(script), clock, False

    def read_next(self, timeout_millis: int) -> _Message:
        item = self.script.pop(0) if self.script else STALL
        if item == STALL:
            self.clock.now += timeout_millis / 1000
            raise pulsar.Timeout("no message")
        return item

    def close(self) -> None:
        self.closed = True


class _Client:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class _Topic:
    """Opens scripted readers, one script per opening; records where each opened."""

    def __init__(self, *scripts: list[Any]) -> None:
        self.scripts = list(scripts)
        self.clock = _Clock()
        self.opened: list[tuple[Position, bool]] = []
        self.clients: list[_Client] = []
        self.readers: list[_Reader] = []

    def open_at(self, at: pulsar.MessageId, inclusive: bool) -> tuple[Any, Any]:
        self.opened.append((Position.from_message_id(at), inclusive))
        client, reader = _Client(), _Reader(self.scripts.pop(0), self.clock)
        self.clients.append(client)
        self.readers.append(reader)
        return client, reader

    def reader(self, first: pulsar.MessageId, *, inclusive: bool) -> TopicReader:
        return TopicReader(
            self.open_at, first, inclusive=inclusive, timeout_ms=1000, clock=self.clock
        )


def _positions(reader: TopicReader, n: int) -> list[Position]:
    return [Position.from_message_id(reader.read_next().message_id()) for _ in range(n)]


def test_a_stall_mid_read_opens_again_at_the_last_entry_and_skips_what_was_read() -> None:
    batch = [_Message(7, 1, i) for i in range(3)]  # one entry of three messages
    topic = _Topic(
        [_Message(7, 0), batch[0], batch[1], STALL],
        [*batch, _Message(7, 2)],  # the whole entry again, then on
    )
    reader = topic.reader(pulsar.MessageId(-1, 7, 0, -1), inclusive=True)
    got = _positions(reader, 5)
    assert got == [
        Position(7, 0),
        Position(7, 1, 0),
        Position(7, 1, 1),
        Position(7, 1, 2),
        Position(7, 2),
    ]
    assert topic.opened == [(Position(7, 0), True), (Position(7, 1, -1), True)]
    assert reader.reopened == 1
    assert topic.readers[0].closed and topic.clients[0].closed == 1, "the stalled reader is closed"
    reader.close()
    reader.close()
    assert [c.closed for c in topic.clients] == [1, 1]


def test_a_stall_before_the_first_message_opens_again_where_it_began() -> None:
    topic = _Topic([STALL], [_Message(3, 5)])
    reader = topic.reader(pulsar.MessageId(-1, 3, 4, -1), inclusive=False)
    assert _positions(reader, 1) == [Position(3, 5)]
    assert topic.opened == [(Position(3, 4), False), (Position(3, 4), False)]


def test_no_new_message_for_the_whole_budget_is_a_timeout() -> None:
    topic = _Topic([_Message(1, 0)], [], [], [])
    reader = topic.reader(pulsar.MessageId.earliest, inclusive=True)
    assert _positions(reader, 1) == [Position(1, 0)]
    began = topic.clock.now
    with pytest.raises(TimeoutError, match="no message within 1000 ms after 1:0:-1"):
        reader.read_next()
    assert topic.clock.now - began == pytest.approx(1.0)
    assert reader.reopened == 3  # a quarter of the budget each, the last one not
    reader.close()
    assert all(c.closed == 1 for c in topic.clients)


def test_the_budget_is_for_each_new_message() -> None:
    """Slow but steady is not a timeout: each new message starts the budget again."""
    topic = _Topic(
        [STALL],
        [STALL],
        [STALL],
        [_Message(1, 0), STALL],
        [STALL],
        [STALL],
        [_Message(1, 0), _Message(1, 1)],
    )
    reader = topic.reader(pulsar.MessageId.earliest, inclusive=True)
    began = topic.clock.now
    assert _positions(reader, 2) == [Position(1, 0), Position(1, 1)]
    assert topic.clock.now - began == pytest.approx(1.5)  # more than one budget in all
    assert reader.reopened == 6
