"""A linearizability checker for histories of one register (WGL search).

No maintained Python checker exists (Knossos is Clojure, Porcupine is Go), so
this is a compact implementation of the Wing-Gong algorithm with Lowe's
memoisation (the same search Porcupine runs): operations are linearized one at
a time in an order consistent with real time; a configuration (set of
linearized operations, model state) already explored is never explored again.

An operation whose outcome is unknown (its process was killed, its call timed
out) returns "at infinity": it may take effect at any point after its call, or
not at all. The search only tries it taking effect; once every remaining
operation is unknown the history is accepted (they did not take effect), so an
unknown no-op is never placed in every possible slot. Unknown reads constrain
nothing and are dropped.

The model here is the one the fault tests drive: an integer register with
``read``, ``write``, ``cas`` (compare-and-set) and ``incr`` (read-modify-write
that returns the new value).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INFINITY",
    "CheckResult",
    "InconclusiveError",
    "Op",
    "check_register",
    "register_steps",
]

INFINITY = math.inf


class InconclusiveError(RuntimeError):
    """The search exceeded its budget without deciding."""


@dataclass(frozen=True)
class Op:
    """One operation of a history.

    Attributes:
        process: who ran it (one process runs one operation at a time).
        kind: ``read``, ``write``, ``cas`` or ``incr``.
        value: the input (``write``: the value; ``cas``: ``(expected, new)``).
        output: what it returned (``read``: the value; ``cas``: ``True``/``False``;
            ``incr``: the new value); ignored when ``known`` is false.
        call: when it was invoked.
        ret: when it returned (:data:`INFINITY` when unknown).
        known: whether the outcome is known.
    """

    process: int
    kind: str
    value: Any
    output: Any
    call: float
    ret: float
    known: bool = True


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    operations: int
    explored: int
    #: the longest prefix linearized when the history is not linearizable
    longest_prefix: tuple[int, ...] = ()


def register_steps(state: int, op: Op) -> list[int]:
    """The states ``op`` may lead to from ``state`` (empty: impossible here).

    For an unknown outcome only its taking effect is listed: not taking effect
    is the search leaving it out (see :func:`check_register`).
    """
    if op.kind == "read":
        return [state] if not op.known or op.output == state else []
    if op.kind == "write":
        return [op.value]
    if op.kind == "cas":
        expected, new = op.value
        if not op.known or op.output:
            return [new] if expected == state else []
        return [state] if expected != state else []
    if op.kind == "incr":
        return [state + 1] if not op.known or op.output == state + 1 else []
    raise ValueError(f"unknown operation kind {op.kind!r}")


def check_register(
    ops: Sequence[Op], *, initial: int = 0, max_explored: int = 5_000_000
) -> CheckResult:
    """Whether ``ops`` is linearizable for an integer register starting at ``initial``."""
    for op in ops:
        if op.ret < op.call:
            raise ValueError(f"operation returns before it is called: {op}")
        if not op.known and op.ret != INFINITY:
            raise ValueError(f"an unknown outcome must return at INFINITY: {op}")
    ops = [op for op in ops if op.known or op.kind != "read"]
    # Without blind writes the register is a counter: every change adds one, so
    # each value is produced at most once in any linearization. An unknown
    # operation is then only tried where it produces a value that no known
    # operation produced and that some known operation observed (at most the
    # largest value seen); anything else could not explain a known result.
    # This pruning can only reject more histories, never accept a wrong one,
    # and it keeps the search linear instead of trying each unknown everywhere.
    counter = all(op.kind != "write" for op in ops)
    produced: set[int] = set()
    seen_max = initial
    for op in ops:
        if not op.known:
            continue
        if op.kind in {"incr", "read"}:
            seen_max = max(seen_max, op.output)
        if op.kind == "incr":
            produced.add(op.output)
        elif op.kind == "cas" and op.output:
            produced.add(op.value[1])
            seen_max = max(seen_max, op.value[1])

    def useful(value: int) -> bool:
        return value not in produced and value <= seen_max

    n = len(ops)
    if n == 0:
        return CheckResult(ok=True, operations=0, explored=0)
    # events: (time, is-return, op index); calls before returns at equal times
    events = sorted(
        [(op.call, 0, i) for i, op in enumerate(ops)]
        + [(op.ret, 1, i) for i, op in enumerate(ops)],
    )
    # a doubly linked list over the events; node 0 is the head
    size = len(events) + 1
    nxt = list(range(1, size + 1))
    nxt[-1] = -1
    prv = list(range(-1, size - 1))
    op_of = [-1] + [e[2] for e in events]
    is_ret = [False] + [bool(e[1]) for e in events]
    match = [0] * size  # call node -> its return node
    call_node = {}
    for node in range(1, size):
        if not is_ret[node]:
            call_node[op_of[node]] = node
        else:
            match[call_node[op_of[node]]] = node

    def unlink(node: int) -> None:
        nxt[prv[node]] = nxt[node]
        if nxt[node] != -1:
            prv[nxt[node]] = prv[node]

    def relink(node: int) -> None:
        nxt[prv[node]] = node
        if nxt[node] != -1:
            prv[nxt[node]] = node

    def lift(call: int) -> None:
        unlink(call)
        unlink(match[call])

    def unlift(call: int) -> None:
        relink(match[call])
        relink(call)

    seen: set[tuple[int, int]] = set()
    # stack frames: (call node, state before, the alternatives still to try)
    stack: list[tuple[int, int, list[int]]] = []
    state = initial
    linearized = 0
    explored = 0
    longest: tuple[int, ...] = ()
    node = nxt[0]
    alternatives: list[int] | None = None
    while nxt[0] != -1:
        if not is_ret[node]:
            i = op_of[node]
            if alternatives is not None:
                options = alternatives
            else:
                options = register_steps(state, ops[i])
                if counter and not ops[i].known:
                    options = [v for v in options if useful(v)]
            alternatives = None
            advanced = False
            while options:
                new_state = options.pop(0)
                key = (linearized | (1 << i), new_state)
                if key in seen:
                    continue
                seen.add(key)
                explored += 1
                if explored > max_explored:
                    raise InconclusiveError(f"gave up after exploring {explored} configurations")
                stack.append((node, state, options))
                state = new_state
                linearized |= 1 << i
                lift(node)
                node = nxt[0]
                advanced = True
                break
            if not advanced:
                node = nxt[node]
        elif ops[op_of[node]].ret == INFINITY:
            # only unknown operations remain: they need not take effect
            break
        else:
            if len(stack) > len(longest):
                longest = tuple(ops_index for ops_index in _stack_ops(stack, op_of))
            if not stack:
                return CheckResult(
                    ok=False, operations=n, explored=explored, longest_prefix=longest
                )
            node, state, options = stack.pop()
            linearized &= ~(1 << op_of[node])
            unlift(node)
            if options:
                alternatives = options  # try the op's other outcomes first
            else:
                node = nxt[node]
    return CheckResult(ok=True, operations=n, explored=explored)


def _stack_ops(stack: Iterable[tuple[int, int, list[int]]], op_of: list[int]) -> list[int]:
    return [op_of[frame[0]] for frame in stack]
