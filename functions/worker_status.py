"""What each worker of a group runs, readable from any process: :class:`WorkerStatusPublisher`.

Pulsar's ``functions status`` asks the worker that runs an instance for its
counters. Here the workers publish them into the group's shared state
instead: a ``PulsarMap`` on the group's ``status`` topic
(:class:`~pulsar_state.functions.worker_config.WorkerTopics`), one key per
worker::

    "worker-1": {"ts": 1763856000000, "instances": {
        "public/default/wordcount:0": {"version": 2, "running": true, "error": null,
                                       "numRestarts": 0, "numReceived": 10, ...}}}

Each worker writes only its own key: from its runtime manager's thread, at
most every ``interval_s`` and only when something changed or ``refresh_s``
passed, without waiting for the write (a write still in flight skips the
next round). A worker that stops removes its key; the key of one that died
stays until another worker's write finds it older than ``expire_s`` and
removes it. ``pulsar-state functions status``
(:meth:`~pulsar_state.functions.function_admin.FunctionAdmin.status`) reads
the map with the assignment and the members: an instance's counters are
those its assigned worker published last.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import pulsar

from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.config import StateConfig
from pulsar_state.map.pulsar_map import MapOp, PulsarMap

__all__ = ["WorkerStatusPublisher"]

log = logging.getLogger(__name__)


class WorkerStatusPublisher:
    """See the module docstring."""

    def __init__(
        self,
        client: pulsar.Client,
        topic: str,
        worker_id: str,
        *,
        admin: AdminEndpoint | None = None,
        interval_s: float = 1.0,
        refresh_s: float = 10.0,
        expire_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.worker_id = worker_id
        self.interval_s = interval_s
        self.refresh_s = refresh_s
        self.expire_s = expire_s
        self._clock = clock
        # protected (infinite retention) when the worker has the admin API, as the
        # group's other maps are by its functions
        self._map: PulsarMap[str, Any] = PulsarMap(
            client, topic, admin=admin, config=StateConfig(ensure_retention=admin is not None)
        )
        self._published: dict[str, Any] | None = None
        self._at = float("-inf")
        self._pending: Future[Any] | None = None
        #: writes of this worker's status done
        self.published = 0

    def publish(self, instances: dict[str, dict[str, Any]]) -> bool:
        """Write this worker's instances when it is time (see the module docstring).

        Returns:
            whether a write was sent (it completes in the background).
        """
        now = self._clock()
        if self._pending is not None and not self._pending.done():
            return False
        changed = instances != self._published
        if now - self._at < (self.interval_s if changed else self.refresh_s):
            return False
        wall_ms = int(time.time() * 1000)
        expire_ms = int(self.expire_s * 1000)
        value = {"ts": wall_ms, "instances": instances}

        def gen(state: Mapping[str, Any]) -> list[MapOp[str, Any]]:
            stale: list[MapOp[str, Any]] = [
                MapOp.delete(worker)
                for worker, status in state.items()
                if worker != self.worker_id and _ts(status) < wall_ms - expire_ms
            ]
            return [*stale, MapOp.put(self.worker_id, value)]

        self._pending = self._map.transact(gen)
        self._pending.add_done_callback(self._done)
        self._published, self._at = instances, now
        return True

    def _done(self, future: Future[Any]) -> None:
        failure = "cancelled" if future.cancelled() else future.exception()
        if failure is not None:
            log.warning("worker %s could not publish its status: %s", self.worker_id, failure)
            self._published = None  # again at the next round
        else:
            self.published += 1

    def close(self, remove: bool = True) -> None:
        """Remove this worker's key (``remove``: it stops; not when it is to look dead), close."""
        try:
            if self._pending is not None:
                self._pending.result(timeout=30)
            if remove:
                self._map.delete(self.worker_id).result(timeout=30)
        except Exception as exc:  # the status is advisory: never block the worker's stop
            log.warning("worker %s could not remove its status: %s", self.worker_id, exc)
        finally:
            self._map.close()


def _ts(status: Any) -> int:
    ts = status.get("ts") if isinstance(status, dict) else None
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else 0
