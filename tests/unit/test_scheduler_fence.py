"""The assignment map's fence (issue #26, item 5): a write under an older leader's
fencing token is refused by the map's own atomic write.

The two-process reproduction on a real broker (SIGSTOP across a leader change)
is tests/integration/test_scheduler_leader_change.py; these check the rule.
"""

from __future__ import annotations

import pytest
from harness import wait_until

from pulsar_state import MemoryMetadataStore, MemoryPulsarMap
from pulsar_state.scheduling.scheduler import (
    LEADER_KEY,
    NotLeaderError,
    Scheduler,
    publish_assignment,
)
from pulsar_state.serde import StrSerde

F = [f"t/ns/f:{i}" for i in range(4)]


def test_a_write_under_an_older_token_is_refused_and_writes_nothing() -> None:
    m = MemoryPulsarMap[str, str]()
    target, moved = publish_assignment(m, F, ["a", "b"], fencing_token=5, leader="a")
    assert moved == 4 and sorted(target.values()) == ["a", "a", "b", "b"]
    assert m.get(LEADER_KEY).result(5) == "5/a"
    # the successor (token 7) publishes: it raises the fence in the same write,
    # even when no instance moves
    _, moved = publish_assignment(m, F, ["a", "b"], fencing_token=7, leader="b")
    assert moved == 0 and m.get(LEADER_KEY).result(5) == "7/b"
    before = m.items().result(5)
    with pytest.raises(NotLeaderError) as refused:
        publish_assignment(m, F, ["a"], fencing_token=5, leader="a")
    assert (refused.value.fencing_token, refused.value.leader_token) == (5, 7)
    assert refused.value.leader == "b" and not refused.value.retriable
    assert m.items().result(5) == before  # nothing of it landed
    # the same leader again: accepted, the fence stays
    _, moved = publish_assignment(m, F, ["b"], fencing_token=7, leader="b")
    assert moved == 2 and m.get(LEADER_KEY).result(5) == "7/b"
    # an unfenced write on a fenced map is refused too
    with pytest.raises(NotLeaderError, match="has none"):
        publish_assignment(m, F, ["a"])
    with pytest.raises(ValueError, match="/"):
        publish_assignment(m, F, ["a"], fencing_token=9, leader="a/b")


def test_the_fence_is_no_instance() -> None:
    m = MemoryPulsarMap[str, str](value_serde=StrSerde())  # a str-only map holds it too
    publish_assignment(m, F, ["a"], fencing_token=3, leader="a")
    # nothing wanted: every instance goes, the fence stays and is not counted
    target, moved = publish_assignment(m, [], ["a"], fencing_token=3, leader="a")
    assert (target, moved) == ({}, 4)
    assert m.items().result(5) == {LEADER_KEY: "3/a"}
    _, moved = publish_assignment(m, F, [], fencing_token=3, leader="a")
    assert moved == 0 and m.items().result(5) == {LEADER_KEY: "3/a"}


def test_an_unfenced_map_takes_unfenced_writes() -> None:
    m = MemoryPulsarMap[str, str]()
    _, moved = publish_assignment(m, F, ["a", "b"])
    assert moved == 4 and LEADER_KEY not in m.items().result(5)


def test_a_deposed_schedulers_write_is_refused_after_its_successor_published() -> None:
    shared = MemoryMetadataStore()
    assignments = MemoryPulsarMap[str, str]()
    a = Scheduler(shared, assignments, member_id="a", root="/g").start()
    b: Scheduler | None = None
    try:
        wait_until(lambda: a.is_leader, timeout_s=10, message="a leads")
        b = Scheduler(shared.sibling(), assignments, member_id="b", root="/g").start()
        a.set_function("t/ns/f", 4)
        wait_until(lambda: len(a.my_assignments()) == 2, timeout_s=10, message="2 on a")
        assert a._leadership is not None
        old_token = a._leadership.fencing_token
        shared.delete("/g/leader").result(5)  # deposed
        wait_until(lambda: b.is_leader, timeout_s=10, message="b leads")
        wait_until(
            lambda: assignments.get(LEADER_KEY).result(5).endswith("/b"),
            timeout_s=10,
            message="b published",
        )
        assert b._leadership is not None and b._leadership.fencing_token > old_token
        before = assignments.items().result(5)
        # a's late write, computed before it was deposed
        with pytest.raises(NotLeaderError):
            publish_assignment(assignments, F, ["a", "b"], fencing_token=old_token, leader="a")
        assert assignments.items().result(5) == before
        assert sorted(a.my_assignments() + b.my_assignments()) == F  # the fence is nobody's
        if not a.is_leader:
            with pytest.raises(NotLeaderError, match="does not lead"):
                a.reschedule()
    finally:
        for s in (a, b):
            if s is not None:
                s.close()
