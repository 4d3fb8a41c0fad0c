"""The range check of ``connectors/topic_incarnation.py``: which stored positions a topic holds.

The stats are in the shape the broker's ``internalStats`` answers (the open
ledger listed with ``entries: 0``); the integration tests run it on the broker.
"""

from __future__ import annotations

import pytest

from pulsar_state.connectors.topic_incarnation import PositionGuard, TopicRange
from pulsar_state.errors import ConfigurationError
from pulsar_state.position import Position

STATS = {
    "lastConfirmedEntry": "5240:3",
    "ledgers": [
        {"ledgerId": 5231, "entries": 10, "size": 900},
        {"ledgerId": 5235, "entries": 4, "size": 300},
        {"ledgerId": 5240, "entries": 0, "size": 0},  # the open ledger
    ],
}


@pytest.mark.parametrize(
    ("stored", "held"),
    [
        (Position(5231, 9), True),
        (Position(5235, 0, 3), True),
        (Position(5240, 3), True),  # the last entry itself
        (Position(5240, 4), False),  # past the last entry
        (Position(5241, 0), False),  # a ledger after the topic's end
        (Position(5233, 0), False),  # a ledger the topic never had
        (Position(1_005_235, 2), False),  # another cluster's ledger ids
        (Position(17, 2), False),  # before the first ledger: trimmed or foreign
    ],
)
def test_a_topic_holds_only_positions_in_its_ledgers_up_to_its_last_entry(
    stored: Position, held: bool
) -> None:
    assert TopicRange.from_internal_stats(STATS).holds(stored) is held


def test_an_empty_topic_holds_nothing() -> None:
    empty = TopicRange.from_internal_stats({"lastConfirmedEntry": "5250:-1", "ledgers": []})
    assert not empty.holds(Position(5250, 0))
    assert str(empty) == "ledgers None..5250 (0), last entry 5250:-1"


def test_without_an_admin_url_a_skip_is_counted_as_unverified() -> None:
    guard = PositionGuard(admin=None)
    assert guard.is_redelivery("persistent://t/n/x", Position(1, 1), Position(2, 2))
    assert guard.is_redelivery("persistent://t/n/x", Position(1, 2), Position(2, 2))
    assert guard.counts == {"unverified": 2}
    assert guard.is_of_topic("persistent://t/n/x", Position(2, 2)) is None


def test_an_unknown_mismatch_mode_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="positionMismatch"):
        PositionGuard(admin=None, mode="skip")
