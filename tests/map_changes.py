"""An assignment map as a reader of its watch saw it: the scheduler's handover tests
(``test_scheduler_function_handover.py``, ``test_scheduler_leader_change.py``)
check with these that a deposed scheduler's late write never lands after its
successor's."""

from __future__ import annotations

from typing import Any

from pulsar_state.map.watch import MapChange


def instance_entries(items: dict[str, Any]) -> dict[str, Any]:
    """The instance entries (``tenant/ns/name:i``) of an assignment map's items."""
    return {k: v for k, v in items.items() if ":" in k}


def states_by_write(changes: list[MapChange[str, str]]) -> list[dict[str, str]]:
    """The instance entries after each write, as the watch reported the writes
    (the changes of one write share its position)."""
    state: dict[str, str] = {}
    states: list[dict[str, str]] = []
    position = None
    for change in changes:
        if position is not None and change.position != position:
            states.append(instance_entries(state))
        position = change.position
        if change.deleted:
            state.pop(change.key, None)
        else:
            assert change.value is not None
            state[change.key] = change.value
    if position is not None:
        states.append(instance_entries(state))
    return states


def replayed(changes: list[MapChange[str, str]]) -> dict[str, str]:
    """The map the watch's changes add up to (all its entries)."""
    state: dict[str, str] = {}
    for change in list(changes):
        if change.deleted:
            state.pop(change.key, None)
        else:
            assert change.value is not None
            state[change.key] = change.value
    return state
