"""A future finished from a broker's reply by whichever of our threads waits for it.

A latest read asks the broker for the topic's last position; the answer
arrives on the Pulsar client's IO thread, which must run no code of ours that
takes a lock (docs/state.md, *Threads*). The rest of the read (compare with
what is applied, run the reader under the state lock, complete the future) is
the *finish*, and it runs on one of two threads:

- a caller blocked in :meth:`ReplyFuture.result` when the reply arrives runs
  it itself (the common, synchronous ``get(k, latest=True).result()``): one
  thread hand-over instead of two (IO thread to a reply thread to the caller);
- otherwise the reply thread runs it (a caller that is not waiting yet, an
  asyncio surface, ``concurrent.futures.wait``, a done-callback).

Which one is decided once, under the future's own condition: the IO thread
hands the finish to a waiting caller (and wakes it) or, when none waits, to the
reply thread. The IO thread only takes that condition, as completing any
future does, and never waits for another thread's work while holding it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures._base import PENDING
from typing import TypeVar

from pulsar_state.core.callback_thread import CallbackFuture, CallbackThread

__all__ = ["ReplyFuture"]

T = TypeVar("T")


class ReplyFuture(CallbackFuture[T]):
    """A :class:`CallbackFuture` whose finish a waiting caller may run (module docstring)."""

    def __init__(self, callbacks: CallbackThread, replies: CallbackThread) -> None:
        super().__init__(callbacks)
        self._replies = replies
        #: callers blocked in result() and not yet handed the finish
        self._callers_waiting = 0
        #: the finish, handed to a waiting caller and not yet taken
        self._finish: Callable[[], None] | None = None

    def hand_over(self, finish: Callable[[], None]) -> bool:
        """Have ``finish()`` run by a waiting caller, else by the reply thread;
        ``False`` (run nowhere) when no caller waits and the reply thread is
        closed. Called once, by the thread that got the reply (the IO thread)."""
        with self._condition:
            if self._callers_waiting and self._state == PENDING:
                self._finish = finish
                self._condition.notify_all()
                return True
        return self._replies.offer(finish)

    def result(self, timeout: float | None = None) -> T:
        """``Future.result``, running the finish on this thread when it is handed here."""
        deadline = None if timeout is None else time.monotonic() + timeout
        finish = self._wait_for_finish(deadline)
        if finish is not None:
            finish()
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        return super().result(remaining)

    def _wait_for_finish(self, deadline: float | None) -> Callable[[], None] | None:
        """Wait until done or handed the finish (or the deadline); the finish, if handed."""
        with self._condition:
            self._callers_waiting += 1
            try:
                while self._state == PENDING and self._finish is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    self._condition.wait(remaining)
                finish, self._finish = self._finish, None
                return finish
            finally:
                self._callers_waiting -= 1
