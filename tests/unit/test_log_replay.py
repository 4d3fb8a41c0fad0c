"""LogReplay on hand-made messages: the one reading of the topic format."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from prometheus_client import REGISTRY

from pulsar_state import JsonSerde, StrKeySerde
from pulsar_state.core.log.format import (
    OutgoingMessage,
    commit_message,
    epoch_message,
    epoch_of,
    op_message,
    write_message,
)
from pulsar_state.core.log.replay import LogReplay, OwnEntry
from pulsar_state.map.op import MapCodec, apply_map_op
from pulsar_state.position import Position


class _Message:
    """The slice of ``pulsar.Message`` the replay reads."""

    def __init__(self, out: OutgoingMessage, ledger: int, entry: int, batch: int = -1) -> None:
        self._out = out
        self._id = pulsar.MessageId(-1, ledger, entry, batch)

    def message_id(self) -> pulsar.MessageId:
        return self._id

    def properties(self) -> dict[str, str]:
        return dict(self._out.properties)

    def partition_key(self) -> str:
        return self._out.key

    def data(self) -> bytes:
        return self._out.payload

    def publish_timestamp(self) -> int:
        return 1


def _replay() -> tuple[LogReplay[dict[str, Any], Any], list[tuple[tuple[str, ...], bool]]]:
    replay: LogReplay[dict[str, Any], Any] = LogReplay(
        topic="t", codec=MapCodec(StrKeySerde(), JsonSerde()), applier=apply_map_op, state={}
    )
    # the writer's register: w1..w20 are sent by "our" writer; an applied one
    # is reported as ((id,), True), a stale one of ours as ((), False)
    outcomes: list[tuple[tuple[str, ...], bool]] = []
    for i in range(1, 21):
        replay.expect([(f"w{i}", lambda _pos, i=i: outcomes.append(((f"w{i}",), True)))])

    def stale() -> None:
        if replay.take_own_stale():
            outcomes.append(((), False))

    replay.on_stale = stale
    return replay, outcomes


def test_a_self_committing_write_applies_alone_and_once() -> None:
    replay, outcomes = _replay()
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    epoch = epoch_of(1, 0)
    replay.feed(_Message(write_message("w1", "a", b"1", epoch), 1, 1))
    assert replay.state == {"a": 1} and replay.applied == Position(1, 1, -1)
    assert outcomes == [(("w1",), True)]
    # the same write landing again (a retried publish) is not applied twice
    replay.feed(_Message(write_message("w1", "a", b"5", epoch), 1, 2))
    assert replay.state == {"a": 1} and replay.applied == Position(1, 2, -1)
    assert replay.applied_writes == 1


def test_a_self_committing_write_between_grouped_entries() -> None:
    replay, outcomes = _replay()
    epoch = epoch_of(1, 0)
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    replay.feed(_Message(op_message("g1", 0, "a", b"1", epoch), 1, 1, 0))
    replay.feed(_Message(op_message("g1", 1, "b", b"2", epoch), 1, 1, 1))
    replay.feed(_Message(commit_message("g1", 2, epoch, keep=False, members=["w1", "w2"]), 1, 1, 2))
    replay.feed(_Message(write_message("w3", "a", b"3", epoch), 1, 2))
    replay.feed(_Message(op_message("g2", 0, "b", b"", epoch), 1, 3, 0))
    replay.feed(_Message(commit_message("g2", 1, epoch, keep=False, members=["w4"]), 1, 3, 1))
    assert replay.state == {"a": 3}
    assert outcomes == [(("w1",), True), (("w2",), True), (("w3",), True), (("w4",), True)]


def test_a_stale_self_committing_write_is_skipped_and_its_key_repaired() -> None:
    replay, outcomes = _replay()
    replay.feed(_Message(epoch_message("old", 1, keep=False), 1, 0))
    replay.feed(_Message(epoch_message("new", 1, keep=False), 1, 1))
    # the old writer's write lands after the new writer's marker
    replay.feed(_Message(write_message("w1", "a", b"1", epoch_of(1, 0)), 1, 2))
    assert replay.state == {} and replay.stale_writes == 1
    assert replay.stale_keys == {"a": Position(1, 2, -1)}
    assert outcomes == [((), False)]


def test_an_undecodable_self_committing_write_is_counted_not_applied() -> None:
    replay, _ = _replay()
    replay.feed(_Message(write_message("w1", "a", b"{not json", 0), 1, 0))
    assert replay.state == {} and replay.invalid_count == 1
    assert replay.applied == Position(1, 0, -1) and "a" in replay.stale_keys


def test_a_tombstone_cannot_be_a_self_committing_write() -> None:
    # it could be compacted away as the topic's last message: a delete keeps its marker
    with pytest.raises(ValueError, match="tombstone"):
        write_message("w1", "a", b"", 1)
    keyless = write_message("w1", None, b"v", 1)
    assert keyless.key == "__pss__/op/w1/0" and keyless.properties["pss.k"] == "write"


def test_a_write_claiming_an_epoch_beyond_its_own_position_is_skipped() -> None:
    # no epoch marker made that epoch: it must not make later writes stale
    replay, outcomes = _replay()
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    epoch = epoch_of(1, 0)
    replay.feed(_Message(write_message("forged", "a", b"6", 1 << 62), 1, 1))
    replay.feed(_Message(op_message("g", 0, "b", b"7", 1 << 62), 1, 2, 0))
    replay.feed(_Message(commit_message("g", 1, 1 << 62, keep=False), 1, 2, 1))
    replay.feed(_Message(write_message("w1", "c", b"3", epoch), 1, 3))
    assert replay.state == {"c": 3} and replay.epoch == epoch
    assert replay.invalid_count == 2 and replay.stale_writes == 0
    assert set(replay.stale_keys) == {"a", "b"}  # the writer re-asserts them
    assert outcomes[-1] == (("w1",), True)


def test_an_epoch_from_a_compacted_away_marker_still_counts() -> None:
    # compaction keeps only the newest marker: older writes name markers a
    # compacted reader never sees, and still order stale writes after them
    replay, outcomes = _replay()
    replay.feed(_Message(write_message("w1", "a", b"1", epoch_of(1, 0)), 1, 1))
    replay.feed(_Message(write_message("w2", "a", b"2", epoch_of(1, 5)), 1, 6))
    replay.feed(_Message(write_message("w3", "b", b"3", epoch_of(1, 0)), 1, 7))  # stale
    replay.feed(_Message(epoch_message("wr", 3, keep=False), 1, 9))
    replay.feed(_Message(write_message("w4", "b", b"4", epoch_of(1, 9)), 1, 10))
    assert replay.state == {"a": 2, "b": 4} and replay.stale_writes == 1
    assert replay.invalid_count == 0 and ((), False) in outcomes


# -- commit on acknowledgement: the writer applies its own entry at the ack ----


def _own(messages: list[OutgoingMessage]) -> list[tuple[str | None, bytes]]:
    return [(m.key, m.payload) for m in messages]


def _apply_own(
    replay: LogReplay[Any, Any],
    ops: list[tuple[str | None, bytes]],
    pos: Position,
    *,
    after: Position,
    write_id: str,
    members: tuple[str, ...],
    epoch: int,
) -> bool:
    own: OwnEntry[Any] = OwnEntry(ops, write_id=write_id, members=members, epoch=epoch)
    return replay.apply_own(own, pos, after=after)


def _duplicates() -> float:
    sample = REGISTRY.get_sample_value(
        "pulsar_state_invalid_messages_total", {"topic": "t", "reason": "duplicate"}
    )
    return sample or 0.0


def test_an_entry_applied_at_its_ack_is_not_applied_again_when_it_comes_by() -> None:
    duplicates = _duplicates()
    replay, outcomes = _replay()
    changes: list[tuple[Position, int]] = []
    replay.add_listener(lambda change: changes.append((change.position, len(change.ops))))
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    epoch = epoch_of(1, 0)
    marker = Position(1, 0, -1)
    ops = [op_message("g1", 0, "a", b"1", epoch), op_message("g1", 1, "b", b"2", epoch)]
    commit = commit_message("g1", 2, epoch, keep=False, members=["w1"])
    at = Position(1, 1, 2)
    assert _apply_own(
        replay, _own(ops), at, after=marker, write_id="g1", members=("w1",), epoch=epoch
    )
    assert replay.state == {"a": 1, "b": 2} and replay.applied == at
    # the topic brings the same entry back: skipped, not applied twice
    replay.feed(_Message(ops[0], 1, 1, 0))
    replay.feed(_Message(ops[1], 1, 1, 1))
    replay.feed(_Message(commit, 1, 1, 2))
    replay.feed(_Message(write_message("w2", "a", b"3", epoch), 1, 2))
    assert replay.state == {"a": 3, "b": 2}
    assert replay.applied_writes == 2
    # w1 completed once, at its ack (through the same register), w2 by the replay
    assert outcomes == [(("w1",), True), (("w2",), True)]
    assert changes == [(at, 2), (Position(1, 2, -1), 1)]
    # recognised as its own entry, not taken for a retried publish
    assert _duplicates() == duplicates


def test_an_entry_whose_first_messages_arrived_before_its_ack_applies_once() -> None:
    replay, _ = _replay()
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    epoch = epoch_of(1, 0)
    ops = [op_message("g1", 0, "n", b"1", epoch), op_message("g1", 1, "m", b"1", epoch)]
    replay.feed(_Message(ops[0], 1, 1, 0))  # buffered: its commit is still on the way
    assert _apply_own(
        replay,
        _own(ops),
        Position(1, 1, 2),
        after=Position(1, 0, -1),
        write_id="g1",
        members=("w1",),
        epoch=epoch,
    )
    replay.feed(_Message(ops[1], 1, 1, 1))
    replay.feed(_Message(commit_message("g1", 2, epoch, keep=False, members=["w1"]), 1, 1, 2))
    replay.flush()
    assert replay.state == {"n": 1, "m": 1} and replay.applied_writes == 1


def test_an_entry_is_not_applied_at_its_ack_out_of_order_or_twice() -> None:
    replay, outcomes = _replay()
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    epoch = epoch_of(1, 0)
    first = write_message("w1", "k", b"1", epoch)
    second = write_message("w2", "k", b"2", epoch)
    # the state is not at the writer's previous entry (1:1): refused, left to the replay
    assert not _apply_own(
        replay,
        _own([second]),
        Position(1, 2, -1),
        after=Position(1, 1, -1),
        write_id="w2",
        members=("w2",),
        epoch=epoch,
    )
    assert replay.state == {}
    replay.feed(_Message(first, 1, 1))
    replay.feed(_Message(second, 1, 2))
    assert replay.state == {"k": 2}
    # already applied by the replay: refused, nothing applied twice
    assert not _apply_own(
        replay,
        _own([second]),
        Position(1, 2, -1),
        after=Position(1, 1, -1),
        write_id="w2",
        members=("w2",),
        epoch=epoch,
    )
    # a retried publish of an applied write, acknowledged at a later position
    replay_copy = _own([first])
    assert not _apply_own(
        replay,
        replay_copy,
        Position(1, 3, -1),
        after=Position(1, 2, -1),
        write_id="w1",
        members=("w1",),
        epoch=epoch,
    )
    assert replay.state == {"k": 2} and replay.applied_writes == 2
    assert outcomes == [(("w1",), True), (("w2",), True)]


def test_a_stale_entry_is_not_applied_at_its_ack() -> None:
    replay, _ = _replay()
    replay.feed(_Message(epoch_message("old", 1, keep=False), 1, 0))
    replay.feed(_Message(epoch_message("new", 1, keep=False), 1, 1))
    old_epoch = epoch_of(1, 0)
    late = write_message("w1", "k", b"1", old_epoch)
    assert not _apply_own(
        replay,
        _own([late]),
        Position(1, 2, -1),
        after=Position(1, 1, -1),
        write_id="w1",
        members=("w1",),
        epoch=old_epoch,
    )
    assert replay.state == {}


def test_an_ack_after_another_writers_marker_is_left_to_the_replay() -> None:
    """Seen with Pulsar 4.0.8 in fencing mode (the kill -9 linearizability run):
    a fenced producer's send acknowledged after its successor's epoch marker.
    The writer has not seen that marker yet; applying its entry at the ack
    would acknowledge a write that every reader skips as stale."""
    replay, outcomes = _replay()
    replay.feed(_Message(epoch_message("a", 1, keep=False), 1, 0))
    a_epoch = epoch_of(1, 0)
    late = write_message("w1", "k", b"1", a_epoch)
    # B's marker is at 1:1, not yet come by; A's write was acknowledged at 1:2
    assert not _apply_own(
        replay,
        _own([late]),
        Position(1, 2, -1),
        after=Position(1, 0, -1),
        write_id="w1",
        members=("w1",),
        epoch=a_epoch,
    )
    assert replay.state == {}
    replay.feed(_Message(epoch_message("b", 1, keep=False), 1, 1))
    replay.feed(_Message(late, 1, 2))
    assert replay.state == {} and replay.stale_writes == 1
    assert outcomes == [((), False)]  # its writer re-runs it


def test_a_redelivered_partial_entry_is_not_buffered_twice() -> None:
    """The consumer reconnects after taking the first op of a batch entry: the
    broker sends the entry again from its start (seen on the broker: a manager
    bootstrapping from the compacted view while its topic was unloaded applied
    45 ops of 30,000 twice). Each op is applied once."""
    replay, outcomes = _replay()
    epoch = epoch_of(1, 0)
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    first = _Message(op_message("g1", 0, "a", b"1", epoch), 1, 1, 0)
    replay.feed(first)
    # the reconnect: the entry again, whole
    replay.feed(first)
    replay.feed(_Message(op_message("g1", 1, "b", b"2", epoch), 1, 1, 1))
    replay.feed(_Message(commit_message("g1", 2, epoch, keep=False, members=["w1"]), 1, 1, 2))
    assert replay.state == {"a": 1, "b": 2}
    assert replay.applied_ops == 2 and replay.redelivered == 1
    assert outcomes == [(("w1",), True)]


def test_messages_redelivered_after_a_reconnect_are_skipped() -> None:
    """An op whose commit marker compaction removed, delivered again after a
    later write of its key: applying it again would bring back the old value."""
    replay, _ = _replay()
    epoch = epoch_of(1, 0)
    replay.feed(_Message(epoch_message("wr", 1, keep=False), 1, 0))
    old = _Message(op_message("g1", 0, "a", b"1", epoch), 1, 1, 0)
    replay.feed(old)
    replay.feed(_Message(write_message("w2", "a", b"2", epoch), 1, 2))
    replay.feed(old)  # redelivered
    replay.flush()
    assert replay.state == {"a": 2}
    assert replay.applied == Position(1, 2, -1) and replay.redelivered == 1
