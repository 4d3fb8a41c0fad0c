"""Round-robin assignment with minimal movement (pure logic)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pulsar_state.scheduling.assignment import assign, instance_ids


def _balanced(result: dict[str, str], members: list[str]) -> bool:
    loads = Counter(result.values())
    counts = [loads.get(m, 0) for m in members]
    return max(counts) - min(counts) <= 1


def test_everything_is_assigned_and_balanced() -> None:
    instances = instance_ids("t/ns/f", 7) + instance_ids("t/ns/g", 3)
    members = ["w1", "w2", "w3"]
    result = assign(instances, members)
    assert set(result) == set(instances)
    assert set(result.values()) <= set(members)
    assert _balanced(result, members)


def test_stable_when_nothing_changes() -> None:
    instances = instance_ids("t/ns/f", 10)
    first = assign(instances, ["a", "b", "c"])
    assert assign(instances, ["c", "b", "a"], first) == first


def test_a_member_leaving_moves_only_its_instances() -> None:
    instances = instance_ids("t/ns/f", 9)
    before = assign(instances, ["a", "b", "c"])
    after = assign(instances, ["a", "b"], before)
    moved = {i for i in instances if before[i] != after[i]}
    assert moved == {i for i in instances if before[i] == "c"}
    assert _balanced(after, ["a", "b"])


def test_a_member_joining_takes_only_a_fair_share() -> None:
    instances = instance_ids("t/ns/f", 9)
    before = assign(instances, ["a", "b"])
    after = assign(instances, ["a", "b", "c"], before)
    moved = [i for i in instances if before[i] != after[i]]
    assert len(moved) == 3 and all(after[i] == "c" for i in moved)


def test_randomised_minimal_movement() -> None:
    rng = random.Random(7)
    members = [f"m{i}" for i in range(5)]
    instances = [f"t/ns/f:{i}" for i in range(23)]
    current = assign(instances, members)
    for _ in range(50):
        new_members = sorted(rng.sample(members, rng.randint(1, 5)))
        nxt = assign(instances, new_members, current)
        assert _balanced(nxt, new_members)
        # an instance whose member survives moves only if that member was over its share
        base = len(instances) // len(new_members)
        for member in new_members:
            kept = [i for i in instances if current[i] == member and nxt[i] == member]
            had = [i for i in instances if current[i] == member]
            assert len(kept) >= min(len(had), base)
        current = nxt


def test_errors() -> None:
    assert assign([], []) == {}
    with pytest.raises(ValueError):
        assign(["x:0"], [])
    with pytest.raises(ValueError):
        instance_ids("t/ns/f", 0)
