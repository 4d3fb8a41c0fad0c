"""A latest read's future: the broker is asked by the first one to look at it.

A latest read needs one answer from the broker, the topic's last position.
Asked with a callback, the answer arrives on the Pulsar client's IO thread,
which must run no code of ours that takes a lock (docs/state.md, *Threads*):
it is handed to the reply thread, which finishes the read. That costs a
Python callback on the IO thread and a thread hand-over on top of the round
trip, about a third more than the client's own blocking call.

So the read is not asked at the call. It is asked by the first one to look
at its future:

- a caller that waits in :meth:`ReplyFuture.result` (the common, synchronous
  ``get(k, latest=True).result()``) asks the broker itself, with the client's
  blocking call (which waits without the GIL), and finishes the read on its
  own thread: no IO-thread callback and no hand-over;
- anything else that looks (``done()``, a done-callback, ``asyncio``,
  ``concurrent.futures.wait``, a ``result`` with a timeout, which a blocking
  call could overrun) asks with a callback, as before. Every method of a
  ``Future``, and ``wait`` and ``as_completed`` too, take the future's
  condition first; :class:`_AskingCondition` asks when it is first taken.

Linearizable either way: the broker is asked after the call began and before
its result is returned, so the read reflects every write acknowledged before
the call (and perhaps some after it, which overlap the read). A future no one
ever looks at is never asked: nothing can tell.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pulsar_state.core import futures
from pulsar_state.core.callback_thread import CallbackFuture, CallbackThread, _FutureCondition

__all__ = ["ReplyFuture"]

T = TypeVar("T")


class _AskingCondition(_FutureCondition):
    """A future's condition that calls ``on_first_use()`` before each taking
    (it asks once; see the module docstring)."""

    def __init__(self, on_first_use: Callable[[], None]) -> None:
        super().__init__()
        self._on_first_use = on_first_use

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self._on_first_use()
        return super().acquire(blocking, timeout)

    def __enter__(self) -> Any:
        self._on_first_use()
        return super().__enter__()


class ReplyFuture(CallbackFuture[T]):
    """A :class:`CallbackFuture` whose work starts when it is first looked at.

    ``ask()`` starts the work without waiting (its answer completes the future
    on another thread); ``ask_here()`` does the whole work on the calling
    thread. Exactly one of them runs, once.
    """

    def __init__(
        self, callbacks: CallbackThread, *, ask: Callable[[], None], ask_here: Callable[[], None]
    ) -> None:
        super().__init__(callbacks)
        self._condition = _AskingCondition(self._ask_elsewhere)
        self._ask = ask
        self._ask_here = ask_here
        self._claim = threading.Lock()
        self._asked = False

    def _take(self) -> bool:
        """Whether this call is the one that asks (once per future)."""
        with self._claim:
            if self._asked:
                return False
            self._asked = True
            return True

    def _ask_elsewhere(self) -> None:
        if not self._asked and self._take():
            self._run(self._ask)

    def result(self, timeout: float | None = None) -> T:
        """``Future.result``; a first look without a timeout asks here, blocking."""
        if timeout is None and not self._asked and self._take():
            self._run(self._ask_here)
        return super().result(timeout)

    def _run(self, ask: Callable[[], None]) -> None:
        """Run ``ask``; what it raises fails the future (nothing is left pending)."""
        try:
            ask()
        except BaseException as exc:
            futures.set_exception(self, exc)
