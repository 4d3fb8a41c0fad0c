"""Position ranges of a state topic for the ``pulsar_state`` Spark data source.

A read covers the log between two positions. This module replays such a span
(:func:`replay_changes`), plans a read as disjoint ranges of whole entries from
the admin API's internal stats (:class:`Range`, :func:`plan_ranges`), replays one
range after its warm-up (:func:`replay_range`) and checks the fencing epochs
that make a range's rows equal a one-pass read's (:func:`stream_end_epoch`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pulsar

from pulsar_state.connectors.spark_options import SourceOptions
from pulsar_state.connectors.spark_topic_reader import TopicReader
from pulsar_state.core.log.replay import AppliedWrite, LogReplay
from pulsar_state.map.pulsar_map import MapOp
from pulsar_state.position import START, Position

__all__ = ["Range", "plan_ranges", "replay_changes", "replay_range", "stream_end_epoch"]

log = logging.getLogger(__name__)

#: a changelog range's warm-up: the entries before its start that its task
#: replays (no rows) so that its replay state (fencing epoch, recent write ids)
#: matches a whole-topic read's; at most this many entries and ~bytes
_WARMUP_ENTRIES = 64
_WARMUP_BYTES = 256 << 10


def replay_changes(
    opts: SourceOptions,
    *,
    compacted: bool,
    start: Position | None,
    start_epoch: int,
    end: Position,
    on_write: Any,
) -> LogReplay[dict[str, Any], MapOp[str, Any]]:
    """Feed the topic from ``start`` (exclusive) through ``end`` into a LogReplay."""
    replay: LogReplay[dict[str, Any], MapOp[str, Any]] = LogReplay(
        topic=opts.topic,
        codec=opts.codec(),
        applier=lambda state, op: None,
        state={},
        start=start,
        start_epoch=start_epoch,
    )
    replay.add_listener(on_write)
    if end.is_start or (start is not None and start.covers(end)):
        return replay
    first = (
        pulsar.MessageId(-1, start.ledger, start.entry, start.batch)
        if start is not None and not start.is_start
        else pulsar.MessageId.earliest
    )
    reader = TopicReader.of(
        opts, first, f"from {start}", inclusive=False, is_read_compacted=compacted
    )
    try:
        while True:
            if replay.feed(reader.read_next()).covers(end):
                break
        replay.flush()
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}, before reaching {end}") from None
    finally:
        reader.close()
    return replay


Entry = tuple[int, int]  # (ledger, entry)


@dataclass(frozen=True)
class Range:
    """A task's share of the log: whole entries ``first``..``last``.

    ``begin`` (<= ``first``) is where its replay starts, with fencing epoch
    ``seed``: the entries before ``first`` are its warm-up, replayed without rows.
    ``shadow``/``shadow_seed``: the next range's ``begin`` and ``seed``, so that
    this task can check the next one's warm-up (see :func:`replay_range`);
    ``expect_epoch``: the last range checks the epoch a stream's end offset carries.
    """

    first: Entry
    last: Entry
    begin: Entry
    shadow: Entry | None
    end: str  # the read's last position (the last range stops there)
    is_last: bool
    seed: int = 0
    shadow_seed: int = 0
    expect_epoch: int | None = None


def _segments(
    opts: SourceOptions, start: Position, end: Position
) -> list[tuple[int, int, int, float]]:
    """The entries after ``start``'s entry through ``end``'s, per ledger:
    (ledger id, first entry, entries, bytes per entry), from admin internal stats."""
    segments: list[tuple[int, int, int, float]] = []
    if end.is_start:
        return segments
    stats = opts.internal_stats()
    last_ledger, _, _ = str(stats.get("lastConfirmedEntry", "-1:-1")).partition(":")
    for ledger in stats.get("ledgers", []):
        lid, entries = int(ledger["ledgerId"]), int(ledger.get("entries", 0))
        size = float(ledger.get("size", 0))
        if str(lid) == last_ledger:  # the open ledger: its counts are on the topic
            entries = int(stats.get("currentLedgerEntries", entries))
            size = float(stats.get("currentLedgerSize", size))
        per_entry = size / entries if size > 0 and entries > 0 else 1.0
        if lid > end.ledger or (not start.is_start and lid < start.ledger):
            continue
        if lid == end.ledger:
            entries = end.entry + 1  # the frozen end is in this ledger
        first = start.entry + 1 if not start.is_start and lid == start.ledger else 0
        if entries - first > 0:
            segments.append((lid, first, entries - first, per_entry))
    return segments


def plan_ranges(
    opts: SourceOptions,
    end: Position,
    count: int,
    *,
    start: Position = START,
    start_epoch: int = 0,
    end_epoch: int | None = None,
) -> list[Range]:
    """Split the log after ``start`` (whose entry was read whole) through ``end``
    into at most ``count`` ranges of whole entries. ``end_epoch``: a stream's end
    offset's epoch, which the last range checks."""
    segments = _segments(opts, start, end)
    if not segments or segments[-1][0] != end.ledger:
        # nothing new, or stats that do not show the end: one range from the start
        first = (start.ledger, start.entry + 1) if not start.is_start else (-1, -1)
        last = (end.ledger, end.entry)
        return [Range(first, last, first, None, str(end), True, start_epoch, 0, end_epoch)]
    total = sum(entries for _, _, entries, _ in segments)
    count = max(1, min(count, total))

    def at(index: int) -> tuple[Entry, float]:
        for lid, first_entry, entries, per_entry in segments:
            if index < entries:
                return (lid, first_entry + index), per_entry
            index -= entries
        raise IndexError(index)

    starts = [i * total // count for i in range(count)]
    begins: list[int] = []
    for i, first_index in enumerate(starts):
        begin = first_index
        if i > 0:  # a warm-up: the entries just before (never before the last one's)
            spent = 0.0
            while (
                begin > begins[-1]
                and first_index - begin < _WARMUP_ENTRIES
                and (spent < _WARMUP_BYTES or begin == first_index)
            ):
                begin -= 1
                spent += at(begin)[1]
        begins.append(begin)
    # a replay from the first new entry starts with the start's epoch (exact)
    seeds = [start_epoch if begin == 0 else 0 for begin in begins]
    ranges = []
    for i, first_index in enumerate(starts):
        last_index = starts[i + 1] - 1 if i + 1 < count else total - 1
        is_last = i + 1 == count
        ranges.append(
            Range(
                first=at(first_index)[0],
                last=at(last_index)[0],
                begin=at(begins[i])[0],
                shadow=None if is_last else at(begins[i + 1])[0],
                end=str(end),
                is_last=is_last,
                seed=seeds[i],
                shadow_seed=0 if is_last else seeds[i + 1],
                expect_epoch=end_epoch if is_last else None,
            )
        )
    return ranges


def _new_replay(
    opts: SourceOptions, start_epoch: int
) -> LogReplay[dict[str, Any], MapOp[str, Any]]:
    return LogReplay(
        topic=opts.topic,
        codec=opts.codec(),
        applier=lambda state, op: None,
        state={},
        start_epoch=start_epoch,
    )


def replay_range(opts: SourceOptions, rng: Range, *, on_write: Any) -> int:
    """Replay ``rng`` (its warm-up first, without rows) and hand its writes to ``on_write``.

    Exactness: the rows of a range are the writes the whole-topic replay applies
    there, provided this replay's state at ``first`` equals that replay's. Both
    replays see the same messages from ``begin`` on; what the warm-up cannot see
    is older history, which matters through (1) the fencing epoch, and (2) the
    recent write ids that make a re-landed write a duplicate. (1) is checked:
    the previous range's task, which replays through this range's start, runs a
    shadow of this warm-up and fails the read if their epochs differ. (2) is
    covered for a duplicate landing within the warm-up's entries of its original.
    """
    replay = _new_replay(opts, rng.seed)
    first = rng.first

    def in_range(change: AppliedWrite[MapOp[str, Any]]) -> None:
        if (change.position.ledger, change.position.entry) >= first:
            on_write(change)

    replay.add_listener(in_range)
    shadow = _new_replay(opts, rng.shadow_seed) if rng.shadow is not None else None
    end = Position.parse(rng.end)
    if end.is_start or (rng.first > rng.last):
        return replay.epoch
    begin = (
        pulsar.MessageId(-1, rng.begin[0], rng.begin[1], -1)
        if rng.begin[0] >= 0
        else pulsar.MessageId.earliest
    )
    fed = 0
    reader = TopicReader.of(opts, begin, f"at {rng.begin}", inclusive=True)
    try:
        while True:
            msg = reader.read_next()
            pos = Position.from_message_id(msg.message_id())
            entry = (pos.ledger, pos.entry)
            if entry > rng.last:
                break  # the next range's first message
            replay.feed(msg)
            fed += 1
            if shadow is not None and rng.shadow is not None and entry >= rng.shadow:
                shadow.feed(msg)
            if rng.is_last and pos.covers(end):
                break
        replay.flush()
    except TimeoutError as exc:
        where = f"before reaching {rng.last} ({fed} read from {rng.begin})"
        raise TimeoutError(f"{exc}, {where}") from None
    finally:
        reader.close()
    if shadow is not None:
        shadow.flush()
        if shadow.epoch != replay.epoch:
            raise RuntimeError(
                f"pulsar_state: a parallel changelog read cannot be made exact here: the "
                f"fencing epoch at {rng.last[0]}:{rng.last[1]} ({replay.epoch}) is older "
                f"than the next range's warm-up shows ({shadow.epoch}) (stale writes of a "
                f"fenced writer fill it); read this topic with numPartitions=1"
            )
    if rng.expect_epoch is not None and rng.expect_epoch != replay.epoch:
        raise RuntimeError(
            f"pulsar_state: a parallel stream batch cannot be made exact here: the fencing "
            f"epoch at {rng.end} ({replay.epoch}) is not the one its end offset carries "
            f"({rng.expect_epoch}) (stale writes of a fenced writer fill the entries before "
            f"it); read this stream with numPartitions=1"
        )
    return replay.epoch


def stream_end_epoch(opts: SourceOptions, start: Position, start_epoch: int, end: Position) -> int:
    """The fencing epoch at ``end`` of a stream batch from ``start``, from a warm-up
    of the entries before ``end`` (seeded with ``start_epoch`` if it reaches back to
    the batch's first entry); the batch's last task checks it against its replay."""
    segments = _segments(opts, start, end)
    if not segments or segments[-1][0] != end.ledger:  # replay the batch (exact)
        replay = replay_changes(
            opts,
            compacted=False,
            start=None if start.is_start else start,
            start_epoch=start_epoch,
            end=end,
            on_write=lambda change: None,
        )
        return replay.epoch
    total = sum(entries for _, _, entries, _ in segments)
    taken, spent = 0, 0.0
    begin: Entry = (end.ledger, end.entry)
    for lid, first_entry, entries, per_entry in reversed(segments):
        for entry in range(first_entry + entries - 1, first_entry - 1, -1):
            if taken >= _WARMUP_ENTRIES or (spent >= _WARMUP_BYTES and taken > 0):
                break
            begin, taken, spent = (lid, entry), taken + 1, spent + per_entry
    seed = start_epoch if taken == total else 0
    last: Entry = (end.ledger, end.entry)
    warmup = Range(begin, last, begin, None, str(end), True, seed)
    return replay_range(opts, warmup, on_write=lambda change: None)
