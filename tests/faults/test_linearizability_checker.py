"""The linearizability checker itself: known-good and known-bad histories."""

from __future__ import annotations

import random

import pytest
from linearizability import INFINITY, InconclusiveError, Op, check_register


def op(  # noqa: PLR0917 - a history row
    process: int, kind: str, value: object, output: object, call: float, ret: float
) -> Op:
    return Op(process, kind, value, output, call, ret, known=ret != INFINITY)


def test_empty_and_sequential_histories() -> None:
    assert check_register([]).ok
    history = [
        op(0, "write", 1, None, 0, 1),
        op(0, "read", None, 1, 2, 3),
        op(0, "cas", (1, 2), True, 4, 5),
        op(0, "cas", (1, 3), False, 6, 7),
        op(0, "incr", None, 3, 8, 9),
        op(0, "read", None, 3, 10, 11),
    ]
    assert check_register(history).ok


def test_a_stale_read_after_a_completed_write_is_caught() -> None:
    history = [op(0, "write", 1, None, 0, 1), op(1, "read", None, 0, 2, 3)]
    assert not check_register(history).ok


def test_concurrent_operations_may_take_effect_in_either_order() -> None:
    history = [
        op(0, "write", 1, None, 0, 10),
        op(1, "read", None, 0, 1, 2),
        op(2, "read", None, 1, 3, 4),
    ]
    assert check_register(history).ok
    # ...but once a read saw the new value a later read cannot see the old one
    history.append(op(3, "read", None, 0, 5, 6))
    assert not check_register(history).ok


def test_a_lost_increment_is_caught() -> None:
    # two increments that both returned 1: one of them was lost
    history = [op(0, "incr", None, 1, 0, 5), op(1, "incr", None, 1, 1, 6)]
    assert not check_register(history).ok


def test_a_double_applied_increment_is_caught() -> None:
    history = [op(0, "incr", None, 1, 0, 1), op(0, "read", None, 2, 2, 3)]
    assert not check_register(history).ok


def test_two_successful_cas_from_the_same_value_are_caught() -> None:
    history = [op(0, "cas", (0, 1), True, 0, 5), op(1, "cas", (0, 1), True, 1, 6)]
    assert not check_register(history).ok


def test_unknown_outcomes_may_or_may_not_take_effect() -> None:
    took_effect = [op(0, "incr", None, None, 0, INFINITY), op(1, "read", None, 1, 5, 6)]
    assert check_register(took_effect).ok
    did_not = [op(0, "incr", None, None, 0, INFINITY), op(1, "read", None, 0, 5, 6)]
    assert check_register(did_not).ok
    # but it cannot take effect before it was called
    too_early = [op(1, "read", None, 1, 0, 1), op(0, "incr", None, None, 2, INFINITY)]
    assert not check_register(too_early).ok
    # nor twice
    twice = [op(0, "incr", None, None, 0, INFINITY), op(1, "read", None, 2, 5, 6)]
    assert not check_register(twice).ok


def test_an_unknown_cas_takes_effect_only_on_its_expected_value() -> None:
    history = [
        op(0, "cas", (5, 6), None, 0, INFINITY),
        op(1, "read", None, 6, 1, 2),
    ]
    assert not check_register(history).ok


def _random_linearizable_history(rng: random.Random, processes: int, length: int) -> list[Op]:
    """Run ops against a real register at random instants inside random intervals."""
    ops: list[Op] = []
    value = 0
    now = 0.0
    busy_until = [0.0] * processes
    for _ in range(length):
        p = rng.randrange(processes)
        call = max(now, busy_until[p]) + rng.random()
        effect = call + rng.random() * 3
        ret = effect + rng.random() * 3
        kind = rng.choice(["read", "write", "cas", "incr"])
        now = effect  # effects happen in this order: the register's linearization
        if kind == "read":
            ops.append(op(p, "read", None, value, call, ret))
        elif kind == "write":
            value = rng.randrange(4)
            ops.append(op(p, "write", value, None, call, ret))
        elif kind == "cas":
            expected, new = rng.randrange(4), rng.randrange(4)
            ok = expected == value
            value = new if ok else value
            ops.append(op(p, "cas", (expected, new), ok, call, ret))
        else:
            value += 1
            ops.append(op(p, "incr", None, value, call, ret))
        busy_until[p] = ret
    return ops


@pytest.mark.parametrize("seed", range(20))
def test_random_histories_of_a_real_register_are_linearizable(seed: int) -> None:
    rng = random.Random(seed)
    history = _random_linearizable_history(rng, processes=4, length=60)
    assert check_register(history).ok


@pytest.mark.parametrize("seed", range(20))
def test_a_corrupted_read_in_a_random_history_is_caught(seed: int) -> None:
    rng = random.Random(1000 + seed)
    history = _random_linearizable_history(rng, processes=3, length=40)
    # a read that returns a value nobody ever wrote cannot be linearized
    index = rng.randrange(len(history))
    h = history[index]
    history[index] = Op(h.process, "read", None, 10_000, h.call, h.ret)
    assert not check_register(history).ok


def test_the_search_budget_is_enforced() -> None:
    rng = random.Random(7)
    history = _random_linearizable_history(rng, processes=6, length=80)
    with pytest.raises(InconclusiveError):
        check_register(history, max_explored=10)
