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

**A deposed leader's late assignment never lands after its successor's.** A
leader may read the members, then be paused (a GC, SIGSTOP, a cut-off
network) while its session ends and another member is elected and publishes;
resumed, it would publish what it computed from the old members. The
election and the assignment live on two topics, so no single write can check
the leadership node; instead the assignment map carries a **fence**: the key
:data:`LEADER_KEY` (``"~leader"``, never an instance id) holds
``"<fencing token>/<leader>"``, the leadership lock's fencing token of the
last leader that published. Each assignment write is one atomic write of the
map whose generator runs on the map's latest state: it is refused
(:class:`NotLeaderError`, nothing written) when the fence holds a greater
token than the writer's, and it raises the fence to the writer's token in
the same write otherwise. Fencing tokens grow with every acquisition of the
lock (:mod:`pulsar_state.coordination`), so a successor's token is greater
than its predecessor's, and its first publication (made when it is elected)
raises the fence: from then on every write under an older token is refused
by the map's own atomic write, not by a check made before it. The leader
takes its token before it reads the members, so a view read under an earlier
leadership is never published under a later one. A deposed leader's write
may still land *before* its successor's first one; the successor's
publication, computed on the latest state, then replaces it.

An assignment topic belongs to one scheduling group (one metadata store and
root): fencing tokens of different stores are not comparable.
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

__all__ = ["LEADER_KEY", "NotLeaderError", "Scheduler", "publish_assignment"]

log = logging.getLogger(__name__)

#: the assignment map's fence: ``"<fencing token>/<leader>"`` of the last leader
#: that published (no instance id is without a ``/``, no member id has one)
LEADER_KEY = "~leader"


class NotLeaderError(PulsarStateError):
    """The assignment was not written: the writer does not lead, or a leader
    with a greater fencing token has published (this one was deposed).

    ``fencing_token``: the writer's (``None``: an unfenced write);
    ``leader_token`` and ``leader``: the fence's, when one is recorded.
    """

    retriable = False

    def __init__(
        self,
        message: str,
        *,
        fencing_token: int | None = None,
        leader_token: int | None = None,
        leader: str | None = None,
    ) -> None:
        super().__init__(message)
        self.fencing_token = fencing_token
        self.leader_token = leader_token
        self.leader = leader


def _fence(value: Any) -> tuple[int, str] | None:
    """The (token, leader) of a fence value; ``None`` for anything that is not one."""
    if not isinstance(value, str):
        return None
    token, sep, leader = value.partition("/")
    if not sep or not token.isdigit():
        return None
    return int(token), leader


def publish_assignment(
    assignments: PulsarMap[str, str],
    wanted: list[str],
    members: list[str],
    *,
    timeout_s: float = 60,
    fencing_token: int | None = None,
    leader: str | None = None,
) -> tuple[dict[str, str], int]:
    """Assign ``wanted`` instances to ``members``; return (assignment, instances moved).

    One atomic write, computed on the latest published assignment. Instances
    not in ``wanted`` are removed (tombstones), so an assignment topic belongs
    to one scheduler.

    With ``fencing_token`` (the leadership lock's, taken before ``wanted`` and
    ``members`` were read), the write is conditioned on the map's fence
    (:data:`LEADER_KEY`) in the same atomic write: refused when the fence holds
    a greater token (a successor has published), and raising the fence to
    ``fencing_token`` (naming ``leader``) otherwise. Without one, the write is
    refused on a map that has a fence (it belongs to an elected scheduler).

    Raises:
        NotLeaderError: nothing was written: a leader with a greater token
            published, or an unfenced write met a fence.
        ValueError: ``leader`` holds a ``/`` (fence values are split on it).
        PulsarStateError: as :meth:`PulsarMap.transact` fails.
    """
    if leader is not None and "/" in leader:
        raise ValueError(f"a leader is a member id without '/', got {leader!r}")
    outcome: dict[str, Any] = {}

    def gen(state: Mapping[str, str]) -> list[MapOp[str, str]]:
        recorded = _fence(state.get(LEADER_KEY))
        if recorded is not None and (fencing_token is None or recorded[0] > fencing_token):
            raise NotLeaderError(
                f"not publishing: {recorded[1] or 'a leader'} published under fencing token "
                f"{recorded[0]}, "
                + (
                    "and this write has none"
                    if fencing_token is None
                    else f"greater than this writer's {fencing_token} (it was deposed)"
                ),
                fencing_token=fencing_token,
                leader_token=recorded[0],
                leader=recorded[1] or None,
            )
        current = {i: m for i, m in state.items() if i != LEADER_KEY}
        target = assign(wanted, members, current) if members else {}
        changed = {i: m for i, m in target.items() if current.get(i) != m}
        removed = [i for i in current if i not in target]
        # the run that is written is the last one: its outcome is the one kept
        outcome["target"], outcome["moved"] = target, len(changed) + len(removed)
        ops = [MapOp.put(i, m) for i, m in changed.items()]
        ops += [MapOp.delete(i) for i in removed]
        if fencing_token is not None and (recorded is None or recorded[0] < fencing_token):
            ops.append(MapOp.put(LEADER_KEY, f"{fencing_token}/{leader or ''}"))  # same write
        return ops

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
                except NotLeaderError as exc:
                    # deposed (or its lock re-asserted under a new token): the
                    # loop ends once the lock is lost; held, it tries again
                    log.warning("scheduler %s did not publish: %s", self.member_id, exc)
                    self._changed.set()
                    self._stop.wait(0.5)
                except PulsarStateError:
                    log.warning("rescheduling failed; retrying", exc_info=True)
                    self._changed.set()
                    self._stop.wait(0.5)
            if not self._stop.is_set():
                log.warning("scheduler %s lost the leadership; campaigning again", self.member_id)

    def reschedule(self) -> dict[str, str]:
        """Compute and publish the assignment (the leader calls this on changes).

        The write is made under this leader's fencing token, taken before the
        members and records are read (see the module docstring).

        Raises:
            NotLeaderError: this member does not lead, or was deposed before
                its write (a leader with a greater token published): nothing
                was written.
            PulsarStateError: a read or the write failed.
        """
        leadership = self._leadership
        if leadership is None or not leadership.held:
            raise NotLeaderError(f"scheduler {self.member_id} does not lead")
        token = leadership.fencing_token  # before anything is read
        members = self.members()
        wanted: list[str] = []
        for node in self.store.get_children(f"{self.root}/functions").result(timeout=60):
            got = self.store.get(f"{self.root}/functions/{node}").result(timeout=60)
            if got is None:
                continue
            record: dict[str, Any] = json.loads(got.value)
            wanted.extend(instance_ids(node.replace("~", "/"), int(record["parallelism"])))
        target, moved = publish_assignment(
            self.assignments, wanted, members, fencing_token=token, leader=self.member_id
        )
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
