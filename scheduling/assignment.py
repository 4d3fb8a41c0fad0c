"""Assigning function instances to workers: round-robin with minimal movement.

Pure logic, like Pulsar's ``RoundRobinScheduler`` but stable: an instance stays
on its member while that member lives and is not over its fair share; only
instances of departed members and the excess of overloaded members move, to the
least-loaded members. The result is deterministic for the same inputs (members
and instances are processed in sorted order), so any leader computes the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["assign", "instance_ids"]


def instance_ids(fqn: str, parallelism: int) -> list[str]:
    """``tenant/ns/name:0`` ... ``:parallelism-1``."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    return [f"{fqn}:{i}" for i in range(parallelism)]


def assign(
    instances: Iterable[str], members: Iterable[str], previous: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Map every instance to a member; keep ``previous`` placements where fair.

    Each member gets ``floor(n/m)`` or ``ceil(n/m)`` instances. Raises
    ``ValueError`` when there are instances but no members.
    """
    wanted = sorted(set(instances))
    alive = sorted(set(members))
    if not wanted:
        return {}
    if not alive:
        raise ValueError("no live members to assign instances to")
    previous = previous or {}
    base, extra = divmod(len(wanted), len(alive))
    # members that already hold more get the "+1" slots first: fewer moves
    held = {m: sum(1 for i in wanted if previous.get(i) == m) for m in alive}
    by_load = sorted(alive, key=lambda m: (-held[m], m))
    capacity = {m: base + (1 if rank < extra else 0) for rank, m in enumerate(by_load)}
    result: dict[str, str] = {}
    load = dict.fromkeys(alive, 0)
    for instance in wanted:  # keep what may stay
        member = previous.get(instance)
        if member in load and load[member] < capacity[member]:
            result[instance] = member
            load[member] += 1
    for instance in wanted:  # place the rest on the least-loaded members
        if instance in result:
            continue
        member = min(alive, key=lambda m: (load[m] - capacity[m], load[m], m))
        result[instance] = member
        load[member] += 1
    return result
