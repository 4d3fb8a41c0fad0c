"""Membership and scheduling of function instances (Pulsar's Function Metadata Topic pattern).

* **Members** (workers, or function instances acting as workers) register an
  ephemeral node ``<root>/members/<id>`` in a :class:`MetadataStore`; it goes
  away when their session dies (see :mod:`pulsar_state.metadata.store`).
* **Functions** are records ``<root>/functions/<tenant~ns~name>`` =
  ``{"parallelism": n}``.
* **The leader** (``CoordinationService.become_leader`` on ``<root>/leader``)
  recomputes the assignment whenever members or functions change —
  round-robin with minimal movement (:mod:`.assignment`) — and publishes it to
  the **assignment topic**: a compacted ``PulsarMap`` keyed by instance id
  (``tenant/ns/name:i``) whose value is the member id, one atomic write per
  change. Only the latest assignment of each instance remains after
  compaction; a deleted instance is a tombstone.
* **Members read their own** assignments from that map.

Only the leader writes assignments, and the state core's fencing makes sure a
deposed leader's late write never lands after its successor's.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pulsar_state.coordination import CoordinationService, ResourceLock
from pulsar_state.errors import PulsarStateError
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.metadata.base import BaseMetadataStore
from pulsar_state.metadata.tree import Notification
from pulsar_state.scheduling.assignment import assign, instance_ids

__all__ = ["Scheduler", "publish_assignment"]

log = logging.getLogger(__name__)


def publish_assignment(
    assignments: PulsarMap[str, str],
    wanted: list[str],
    members: list[str],
    *,
    timeout_s: float = 60,
) -> tuple[dict[str, str], int]:
    """Assign ``wanted`` instances to ``members``; return (assignment, instances moved).

    One atomic write, computed on the latest published assignment: a leader
    that was deposed meanwhile re-runs on its successor's result (the state
    core's fencing) instead of overwriting it with a stale view. Instances not
    in ``wanted`` are removed (tombstones), so an assignment topic belongs to
    one scheduler.
    """
    outcome: dict[str, Any] = {}

    def gen(state: Mapping[str, str]) -> list[MapOp[str, str]]:
        target = assign(wanted, members, state) if members else {}
        changed = {i: m for i, m in target.items() if state.get(i) != m}
        removed = [i for i in state if i not in target]
        # the run that is written is the last one: its outcome is the one kept
        outcome["target"], outcome["moved"] = target, len(changed) + len(removed)
        ops = [MapOp.put(i, m) for i, m in changed.items()]
        return ops + [MapOp.delete(i) for i in removed]

    assignments.transact(gen).result(timeout=timeout_s)
    return outcome["target"], outcome["moved"]


def _node(fqn: str) -> str:
    parts = fqn.split("/")
    if len(parts) != 3 or not all(parts) or any("~" in p for p in parts):
        raise ValueError(f"a function is tenant/namespace/name, got {fqn!r}")
    return "~".join(parts)


class Scheduler:
    """One member of the scheduling group (and leader when elected)."""

    def __init__(
        self,
        store: BaseMetadataStore,
        assignments: PulsarMap[str, str],
        *,
        member_id: str,
        root: str = "/pss-functions",
    ) -> None:
        if not member_id or "/" in member_id:
            raise ValueError(f"member_id must be a non-empty name without '/', got {member_id!r}")
        self.store = store
        self.assignments = assignments
        self.member_id = member_id
        self.root = root.rstrip("/")
        self._coordination: CoordinationService[str] = CoordinationService(store)
        self._leadership: ResourceLock[str] | None = None
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reschedules = 0

    # -- membership -------------------------------------------------------------------

    def start(self) -> Scheduler:
        self.store.put(f"{self.root}/members/{self.member_id}", b"{}", ephemeral=True).result(
            timeout=60
        )
        self.store.register_listener(self._on_change)
        self._thread = threading.Thread(
            target=self._lead, name=f"pss-scheduler-{self.member_id}", daemon=True
        )
        self._thread.start()
        return self

    @property
    def is_leader(self) -> bool:
        return self._leadership is not None and self._leadership.held

    def members(self) -> list[str]:
        return self.store.get_children(f"{self.root}/members").result(timeout=60)

    def rejoin(self) -> bool:
        """Register the member node again if it is gone (its session was expired).

        Returns ``True`` when it had to. Call it now and then from a long-lived
        member: a session cut off for longer than its timeout loses its node.
        """
        path = f"{self.root}/members/{self.member_id}"
        if self.store.exists(path).result(timeout=60):
            return False
        self.store.put(path, b"{}", ephemeral=True).result(timeout=60)
        return True

    # -- functions ----------------------------------------------------------------------

    def set_function(self, fqn: str, parallelism: int) -> None:
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"parallelism must be an int >= 1, got {parallelism!r}")
        record = json.dumps({"parallelism": parallelism}).encode()
        self.store.put(f"{self.root}/functions/{_node(fqn)}", record).result(timeout=60)

    def parallelism(self, fqn: str) -> int | None:
        """The recorded parallelism of ``fqn``, ``None`` when it is not registered."""
        got = self.store.get(f"{self.root}/functions/{_node(fqn)}").result(timeout=60)
        if got is None:
            return None
        value = json.loads(got.value).get("parallelism")
        return value if isinstance(value, int) else None

    def remove_function(self, fqn: str) -> None:
        self.store.delete(f"{self.root}/functions/{_node(fqn)}").result(timeout=60)

    def my_assignments(self, latest: bool = True) -> list[str]:
        """The instance ids assigned to this member, sorted."""
        everything = self.assignments.items(latest=latest).result(timeout=60)
        return sorted(i for i, m in everything.items() if m == self.member_id)

    # -- the leader ----------------------------------------------------------------------

    def _on_change(self, note: Notification) -> None:
        if note.path.startswith((f"{self.root}/members", f"{self.root}/functions")):
            self._changed.set()

    def _lead(self) -> None:
        """Campaign; lead while elected; campaign again after losing it (until closed)."""
        while not self._stop.is_set():
            try:
                self._leadership = self._coordination.become_leader(
                    f"{self.root}/leader", self.member_id
                ).result()
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("scheduler %s could not campaign; retrying", self.member_id)
                self._stop.wait(1.0)
                continue
            log.info("scheduler %s is the leader", self.member_id)
            self._changed.set()
            while not self._stop.is_set() and self._leadership.held:
                if not self._changed.wait(timeout=1.0):
                    continue
                self._changed.clear()
                try:
                    self.reschedule()
                except PulsarStateError:
                    log.warning("rescheduling failed; retrying", exc_info=True)
                    self._changed.set()
                    self._stop.wait(0.5)
            if not self._stop.is_set():
                log.warning("scheduler %s lost the leadership; campaigning again", self.member_id)

    def reschedule(self) -> dict[str, str]:
        """Compute and publish the assignment (the leader calls this on changes)."""
        members = self.members()
        wanted: list[str] = []
        for node in self.store.get_children(f"{self.root}/functions").result(timeout=60):
            got = self.store.get(f"{self.root}/functions/{node}").result(timeout=60)
            if got is None:
                continue
            record: dict[str, Any] = json.loads(got.value)
            wanted.extend(instance_ids(node.replace("~", "/"), int(record["parallelism"])))
        target, moved = publish_assignment(self.assignments, wanted, members)
        if moved:
            self.reschedules += 1
            log.info("scheduler %s moved or removed %d instances", self.member_id, moved)
        return target

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._changed.set()
        self.store.unregister_listener(self._on_change)
        if self._leadership is not None and self._leadership.held:
            try:
                self._leadership.release().result(timeout=30)
            except PulsarStateError:
                log.debug("leadership release failed", exc_info=True)
        self._coordination.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
