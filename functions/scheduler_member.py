"""SchedulerMember: a worker's side of :class:`~.scheduler_function.SchedulerFunction`.

It sends a heartbeat to the scheduler's input topic every ``interval_s`` (from
a daemon thread) and reads the instances assigned to it from the assignment
topic. ``close()`` sends a ``leave`` so that its work moves at once;
``close(leave=False)`` behaves like a crash (its work moves after the TTL).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pulsar

from pulsar_state.config import StateConfig
from pulsar_state.map.pulsar_map import PulsarMap

__all__ = ["SchedulerMember"]

log = logging.getLogger(__name__)


class SchedulerMember:
    """See the module docstring."""

    def __init__(
        self,
        client: pulsar.Client,
        *,
        member_id: str,
        heartbeat_topic: str,
        assignment_topic: str,
        interval_s: float = 2.0,
    ) -> None:
        if not isinstance(member_id, str) or not member_id or "/" in member_id:
            raise ValueError(f"member_id must be a non-empty name without '/', got {member_id!r}")
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.member_id = member_id
        self.interval_s = interval_s
        self.heartbeats_sent = 0
        self._producer = client.create_producer(heartbeat_topic)
        # a reader: protecting the topic (retention) is the scheduler's job
        self._assignments: PulsarMap[str, str] = PulsarMap(
            client, assignment_topic, config=StateConfig(ensure_retention=False)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"pss-member-{member_id}", daemon=True
        )
        self._thread.start()

    def _send(self, op: str) -> None:
        heartbeat = {"member": self.member_id, "op": op, "ts": int(time.time() * 1000)}
        self._producer.send(json.dumps(heartbeat).encode())

    def _beat(self) -> None:
        while not self._stop.is_set():
            try:
                self._send("heartbeat")
                self.heartbeats_sent += 1
            except pulsar.PulsarException:
                log.warning("heartbeat of %s failed; retrying", self.member_id, exc_info=True)
            self._stop.wait(self.interval_s)

    def assignments(self, latest: bool = True) -> list[str]:
        """The instance ids assigned to this member, sorted."""
        everything: dict[str, Any] = self._assignments.items(latest=latest).result(timeout=60)
        return sorted(i for i, m in everything.items() if m == self.member_id)

    def close(self, leave: bool = True) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            if leave:
                self._send("leave")
        finally:
            self._producer.close()
            self._assignments.close()

    def __enter__(self) -> SchedulerMember:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
