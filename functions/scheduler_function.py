"""SchedulerFunction: membership and scheduling as a deployable Pulsar Function.

The deployable form of :mod:`pulsar_state.scheduling.scheduler` (Pulsar's SchedulerManager pattern,
PIP-15): members (workers) send heartbeats to the function's input topic; the
function keeps who is alive in the shared state, reads the function records
that :class:`~pulsar_state.functions.metadata_manager.FunctionMetadataManager`
keeps on the metadata topic, assigns each function's instances to the live
members (round-robin with minimal movement,
:mod:`pulsar_state.scheduling.assignment`) and publishes
the assignment to the **assignment topic** (a compacted ``PulsarMap``:
instance id ``tenant/ns/name:i`` -> member id). Members read their own with
:class:`~pulsar_state.functions.scheduler_member.SchedulerMember`, a
``PulsarMap``, a ``TableView`` or Spark.

Heartbeats (JSON, at least every ``memberTtlSeconds`` / 3)::

    {"member": "worker-1", "ts": 1763856000000}                 # "op": "heartbeat" by default
    {"member": "worker-1", "op": "leave", "ts": 1763856001000}  # a clean shutdown

``ts`` (the sender's clock, ms; optional) orders one member's heartbeats: a
redelivered or reordered older one changes nothing, and one sent before a
``leave`` does not bring the member back.

A Python function runs only when a message comes (its runtime has no start or
timer hook), so the members' heartbeats are what drives it: each one renews
its member, expires the members not heard from within the TTL and reschedules.
A dead member's instances therefore move on the next heartbeat after its TTL;
a new or changed function record is scheduled on the next heartbeat.

Deploy with ``retainOrdering: true`` (a failover subscription: one active
instance schedules, the others stand by and take over when it dies). Every
write goes through the state core's exclusive producer and the assignment is
computed on the latest published one. **A deposed instance's late assignment
never lands after its successor's**: an instance may renew a member, read the
records and be paused (a GC, SIGSTOP) while another instance takes over and
publishes; resumed, it would publish what it computed from the older
members. So each assignment is written under a fencing token: the members
map's writer epoch of the heartbeat's write (``SharedStateManager.epoch``,
which grows every time a writer gains the members topic, so a successor's
write has a greater one). The assignment map keeps the greatest token that
published under :data:`~pulsar_state.scheduling.scheduler.LEADER_KEY`
(``"~leader"`` = ``"<epoch>/instance-<id>"``, no instance id) and its atomic
write refuses an older one (:func:`~pulsar_state.scheduling.scheduler.publish_assignment`):
the refused instance logs it and counts ``stale_assignments_refused``; its
heartbeat's renewal stands, and the successor's assignment already includes
it. Userconfig: ``metadataTopic``,
``assignmentTopic``, ``membersTopic`` (defaults ``function-metadata``,
``function-assignments``, ``function-members`` in the function's namespace),
``memberTtlSeconds`` (default 10), ``adminUrl`` (protects the topics).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulsar import Function

from pulsar_state.functions.function_map import open_function_map
from pulsar_state.functions.metadata_manager import validate_fqn
from pulsar_state.map.pulsar_map import MapOp, PulsarMap
from pulsar_state.runtime.instance_metrics import label_instance_metrics
from pulsar_state.scheduling.assignment import instance_ids
from pulsar_state.scheduling.scheduler import NotLeaderError, publish_assignment

__all__ = [
    "Heartbeat",
    "HeartbeatError",
    "SchedulerFunction",
    "parse_heartbeat",
    "wanted_instances",
]

_MAX_MEMBER_ID = 200


class HeartbeatError(ValueError):
    """A heartbeat that cannot be used (skipped, logged and counted)."""


@dataclass(frozen=True)
class Heartbeat:
    member: str
    op: str  # "heartbeat" | "leave"
    #: the sender's clock (ms), when it gives one: orders a member's heartbeats
    ts: int | None = None


def parse_heartbeat(raw: Any) -> Heartbeat:
    """Decode one heartbeat, or :class:`HeartbeatError`."""
    try:
        message = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise HeartbeatError(f"a heartbeat is a JSON object: {exc}") from exc
    if not isinstance(message, dict):
        raise HeartbeatError("a heartbeat is a JSON object")
    member = message.get("member")
    if not isinstance(member, str) or not member.strip() or "/" in member:
        raise HeartbeatError(f"member must be a non-empty name without '/', got {member!r}")
    if len(member) > _MAX_MEMBER_ID:
        raise HeartbeatError(f"member ids are at most {_MAX_MEMBER_ID} characters")
    op = message.get("op", "heartbeat")
    if op not in ("heartbeat", "leave"):
        raise HeartbeatError(f"op must be heartbeat or leave, got {op!r}")
    ts = message.get("ts")
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or ts < 0):
        raise HeartbeatError(f"ts must be a timestamp in ms, got {ts!r}")
    return Heartbeat(member, op, ts)


def wanted_instances(records: dict[str, Any], on_bad: Any = None) -> list[str]:
    """Instance ids of every well-formed function record (others are reported)."""
    wanted: list[str] = []
    for fqn, record in sorted(records.items()):
        try:
            parallelism = record["config"]["parallelism"]
            if not isinstance(parallelism, int) or isinstance(parallelism, bool):
                raise TypeError("parallelism is not an int")
            wanted.extend(instance_ids(validate_fqn(fqn), parallelism))
        except (KeyError, TypeError, ValueError) as exc:
            if on_bad is not None:
                on_bad(fqn, exc)
    return wanted


def _expiry(record: Any) -> int:
    """A member record's expiry (ms); 0 for anything that is not one."""
    if isinstance(record, dict):
        expires = record.get("expires")
        if isinstance(expires, int) and not isinstance(expires, bool):
            return expires
    return 0


class SchedulerFunction(Function):  # type: ignore[misc]
    """See the module docstring."""

    def __init__(self) -> None:
        self._maps: dict[str, PulsarMap[str, Any]] = {}
        self._lock = threading.Lock()

    def _map(self, context: Any, key: str, default_name: str) -> PulsarMap[str, Any]:
        with self._lock:
            if key not in self._maps:
                label_instance_metrics(context)
                self._maps[key] = open_function_map(context, key, default_name)
            return self._maps[key]

    @staticmethod
    def _ttl_ms(context: Any) -> int:
        raw = context.get_user_config_value("memberTtlSeconds")
        try:
            ttl = float(raw) if raw is not None else 10.0
        except (TypeError, ValueError):
            ttl = 0.0
        if ttl <= 0:
            raise HeartbeatError(f"memberTtlSeconds must be a number > 0, got {raw!r}")
        return int(ttl * 1000)

    def process(self, input: Any, context: Any) -> None:
        log = context.get_logger()
        try:
            heartbeat = parse_heartbeat(input)
            ttl_ms = self._ttl_ms(context)
        except HeartbeatError as exc:
            log.warning("skipped a heartbeat: %s", exc)
            context.record_metric("skipped_heartbeats", 1)
            return None
        members = self._map(context, "membersTopic", "function-members")
        records = self._map(context, "metadataTopic", "function-metadata")
        assignments = self._map(context, "assignmentTopic", "function-assignments")
        alive, epoch = self.beat_fenced(members, heartbeat, ttl_ms)

        def bad_record(fqn: str, exc: Exception) -> None:
            log.warning("not scheduling the record of %s: %s", fqn, exc)

        wanted = wanted_instances(records.items(latest=True).result(timeout=60), bad_record)
        try:
            _, moved = publish_assignment(
                assignments, wanted, alive, fencing_token=epoch, leader=_instance_label(context)
            )
        except NotLeaderError as exc:  # a successor published: its assignment stands
            log.info("not publishing a stale assignment: %s", exc)
            context.record_metric("stale_assignments_refused", 1)
            return None
        if moved:
            log.info(
                "%d members, %d instances: moved or removed %d", len(alive), len(wanted), moved
            )
        return None

    @staticmethod
    def beat(
        members: PulsarMap[str, Any], heartbeat: Heartbeat, ttl_ms: int, now_ms: int | None = None
    ) -> list[str]:
        """Renew (or remove) the member, expire the silent ones; the live members.

        See :meth:`beat_fenced`, which also gives the write's fencing token.
        """
        return SchedulerFunction.beat_fenced(members, heartbeat, ttl_ms, now_ms)[0]

    @staticmethod
    def beat_fenced(
        members: PulsarMap[str, Any], heartbeat: Heartbeat, ttl_ms: int, now_ms: int | None = None
    ) -> tuple[list[str], int | None]:
        """Renew (or remove) the member, expire the silent ones; the live members
        and the members map's writer epoch of that write (the fencing token of an
        assignment computed from them; ``None`` for a map that has none, as
        :class:`~pulsar_state.MemoryPulsarMap`).

        One atomic write, on the latest state; also usable without a worker.
        A member's record is ``{"expires", "seen", "left"}``: ``seen`` is the
        sender's timestamp of its newest heartbeat, so a redelivered or
        reordered older one changes nothing, and a ``leave`` stays recorded
        for a TTL so that an older heartbeat cannot bring the member back.
        Expiry uses this function's clock; a heartbeat older than half a TTL
        by its sender's clock means a backlog is being worked off (after a
        failover), and expires nobody else: their newer heartbeats are queued.
        """
        clock: dict[str, Any] = {}

        def gen(state: Mapping[str, Any]) -> list[MapOp[str, Any]]:
            # the writer's epoch while it holds the topic, in the run that is written
            clock["epoch"] = getattr(members.manager, "epoch", None)
            now = int(time.time() * 1000) if now_ms is None else now_ms
            ts = heartbeat.ts
            backlog = ts is not None and now - ts > ttl_ms // 2
            clock["now"], clock["backlog"] = now, int(backlog)
            ops: list[MapOp[str, Any]] = [
                MapOp.delete(m)
                for m, record in state.items()
                if m != heartbeat.member
                and (not _expiry(record) or (_expiry(record) < now and not backlog))
            ]
            current = state.get(heartbeat.member)
            seen = current.get("seen") if isinstance(current, dict) else None
            if ts is not None and seen is not None and ts <= seen:
                return ops  # older than what is recorded: redelivered or reordered
            left = heartbeat.op == "leave"
            if left and current is None:
                return ops
            record = {"expires": now + ttl_ms, "seen": ts, "left": left}
            return [*ops, MapOp.put(heartbeat.member, record)]

        def alive(state: Mapping[str, Any]) -> list[str]:
            now, backlog = clock.get("now", 0), clock.get("backlog", 0)
            return sorted(
                m
                for m, r in state.items()
                if _expiry(r) and (backlog or _expiry(r) >= now) and not r.get("left")
            )

        result: list[str] = members.transact(gen, reader=alive).result(timeout=60)
        epoch = clock.get("epoch")
        return result, epoch if isinstance(epoch, int) else None


def _instance_label(context: Any) -> str:
    """``instance-<id>``: who published, in the assignment map's fence."""
    try:
        instance = str(context.get_instance_id())
    except Exception:
        instance = "?"
    return f"instance-{instance}".replace("/", "_")
