"""Counting the entries compaction absorbed after a position, from internalStats."""

from __future__ import annotations

from typing import Any

from pulsar_state.cluster.admin import entries_compacted_after
from pulsar_state.position import Position


def _stats(horizon: str | None, *, current: int = 350) -> dict[str, Any]:
    """Three ledgers: 10 (100 entries), 11 (50), 12 (current, ``current`` entries)."""
    stats: dict[str, Any] = {
        "lastConfirmedEntry": f"12:{current - 1}",
        "currentLedgerEntries": current,
        "ledgers": [
            {"ledgerId": 10, "entries": 100},
            {"ledgerId": 11, "entries": 50},
            {"ledgerId": 12, "entries": 0},  # the current ledger: counted apart
        ],
        "cursors": {"tail": {"markDeletePosition": "12:3"}},
    }
    if horizon is not None:
        stats["cursors"]["__compaction"] = {"markDeletePosition": horizon}
    return stats


def test_within_one_ledger() -> None:
    assert entries_compacted_after(_stats("12:299"), Position(12, 99, 5)) == 200


def test_across_closed_and_current_ledgers() -> None:
    # ledger 10 after entry 89 (10), all of 11 (50), 12 through entry 19 (20)
    assert entries_compacted_after(_stats("12:19"), Position(10, 89, -1)) == 80


def test_nothing_without_a_horizon_past_the_position() -> None:
    assert entries_compacted_after(_stats(None), Position(10, 0)) == 0
    assert entries_compacted_after(_stats("11:10"), Position(12, 5)) == 0
    assert entries_compacted_after(_stats("11:10"), Position(11, 10)) == 0


def test_trimmed_ledgers_and_odd_stats() -> None:
    stats = _stats("12:9")
    stats["ledgers"] = stats["ledgers"][1:]  # ledger 10 trimmed
    assert entries_compacted_after(stats, Position(10, 50)) == 60
    stats["cursors"]["__compaction"]["markDeletePosition"] = "not-a-position"
    assert entries_compacted_after(stats, Position(10, 50)) == 0
