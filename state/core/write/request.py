"""One write asked of the writer: its generator, its future, its identity.

A request's ``write_id`` travels with the write on the topic, so after a lost
tenure the writer can tell a write that landed after all (a timeout that was a
success) from one that must run again.

Its future is a :class:`~pulsar_state.core.callback_thread.CallbackFuture`: the log
replay completes it, in landing order, when it applies the write; the user's
done-callbacks run on the manager's callback thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pulsar_state import forks
from pulsar_state.core.callback_thread import CallbackFuture
from pulsar_state.position import Position

__all__ = ["WriteRequest", "new_write_id"]

S = TypeVar("S")
Op = TypeVar("Op")


def new_write_id() -> str:
    """Unique per process (random, made anew in a forked child) and per write (a counter)."""
    return forks.unique_id()


@dataclass(eq=False, slots=True)
class WriteRequest(Generic[S, Op]):
    """A generator to run on the caught-up state; ``blind`` if it ignores the
    state. A blind write may carry its ``ops`` instead (``generator=None``)."""

    generator: Callable[[S], Any] | None
    blind: bool
    future: CallbackFuture[Position]
    ops: Sequence[Op] = ()
    write_id: str = field(default_factory=forks.unique_id)  # as new_write_id
    attempts: int = 0
    submitted: float = field(default_factory=time.monotonic)
    #: the writer has taken it up: from then on cancelling the future fails
    started: bool = False

    def start(self) -> bool:
        """Take the request up; ``False``: cancelled while queued (never written).

        Once started the future is running, and ``cancel()`` (also asyncio's,
        for an awaiting task that is cancelled) no longer takes it: the write
        may land, and the future completes as usual.
        """
        if self.started:
            return not self.future.done()
        self.started = True
        return self.future.set_running_or_notify_cancel()
