"""Completing the core's futures, which callers may cancel at any moment.

Every call of the core returns a :class:`concurrent.futures.Future`, and the
caller may cancel it: ``future.cancel()``, or by cancelling an asyncio task
that awaits it (:func:`asyncio.wrap_future` cancels the core's future then).
``set_result`` on a cancelled (or already completed) future raises
``InvalidStateError``; raised on the writer's or the tailer's thread, that
would fail other callers' writes or stop the thread. So the core completes
futures only through these helpers, which skip a future that is done, also
when another thread cancels it between the check and the completion.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar, cast

__all__ = ["chain", "run_into", "set_exception", "set_result"]

T = TypeVar("T")
S = TypeVar("S")


def set_result(future: Future[T], value: T) -> bool:
    """Complete ``future`` with ``value`` unless it is done; whether this call did."""
    if future.done():
        return False
    try:
        future.set_result(value)
    except InvalidStateError:  # cancelled or completed meanwhile, by another thread
        return False
    return True


def set_exception(future: Future[Any], exc: BaseException) -> bool:
    """Fail ``future`` with ``exc`` unless it is done; whether this call did."""
    if future.done():
        return False
    try:
        future.set_exception(exc)
    except InvalidStateError:  # cancelled or completed meanwhile, by another thread
        return False
    return True


def run_into(future: Future[T], fn: Callable[[], T]) -> bool:
    """Complete ``future`` with ``fn()``, or with what ``fn`` raised (unless done)."""
    if future.done():  # cancelled: do not even run fn
        return False
    try:
        value = fn()
    except BaseException as exc:  # the caller gets every error, on every surface
        return set_exception(future, exc)
    return set_result(future, value)


def chain(source: Future[S], target: Future[T], transform: Callable[[S], T] | None = None) -> None:
    """Complete ``target`` from ``source`` once that is done.

    ``target`` gets ``source``'s exception, or ``transform(result)`` (the result
    itself without a transform; what ``transform`` raises fails ``target``). A
    cancelled ``source`` cancels ``target``; a ``target`` that is done already
    (cancelled by its caller, or timed out) is left alone.
    """

    def done(finished: Future[S]) -> None:
        if target.done():
            return
        if finished.cancelled():
            target.cancel()
            return
        exc = finished.exception()
        if exc is not None:
            set_exception(target, exc)
        elif transform is None:
            set_result(target, cast("T", finished.result()))
        else:
            run_into(target, lambda: transform(finished.result()))

    source.add_done_callback(done)
