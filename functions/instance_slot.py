"""An instance a worker runs, and when to start it again: :class:`InstanceSlot`.

Every instance a worker runs sits in a slot: the ones the leader assigns to
it and the group's own functions (the metadata manager and the scheduler),
through one mechanism. An instance that ended by itself (its code did not
load, a topic was refused, its thread failed) is started again after a
backoff: :func:`restart_backoff_s` (1 s, doubling with each restart of the
slot, at most :data:`MAX_BACKOFF_S`), counted from when the worker first sees
it ended. The slot counts its restarts (``numRestarts`` in ``pulsar-state
functions status``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pulsar_state.functions.function_instance import FunctionInstance

__all__ = ["MAX_BACKOFF_S", "InstanceSlot", "restart_backoff_s"]

log = logging.getLogger(__name__)

#: the longest wait before an instance that ended is started again
MAX_BACKOFF_S = 30.0


def restart_backoff_s(restarts: int) -> float:
    """How long to wait before the next start of an instance restarted ``restarts`` times.

    Returns:
        1 s, doubling with each restart, at most :data:`MAX_BACKOFF_S`.
    """
    return min(2.0 ** min(restarts, 16), MAX_BACKOFF_S)


@dataclass
class InstanceSlot:
    """See the module docstring."""

    runner: FunctionInstance
    restarts: int = 0
    #: when (the worker's monotonic clock) to start it again; ``None``: not scheduled
    retry_at: float | None = None

    def restart_due(self, now: float) -> bool:
        """Whether to start the instance again now: it ended by itself and its
        backoff is over. The first call that finds it ended starts the backoff.

        Returns:
            ``False`` while it runs or its backoff lasts.
        """
        if self.runner.alive:
            return False
        if self.retry_at is None:
            delay = restart_backoff_s(self.restarts)
            self.retry_at = now + delay
            log.warning(
                "instance %s ended (%s); starting it again in %.0f s",
                self.runner.name,
                self.runner.error,
                delay,
            )
        return now >= self.retry_at

    def restarted(self, runner: FunctionInstance) -> InstanceSlot:
        """The slot of ``runner``, started again in this one's place.

        Returns:
            a slot with one more restart.
        """
        return InstanceSlot(runner, self.restarts + 1)
