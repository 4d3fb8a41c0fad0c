"""Completing the core's futures, which callers may cancel at any moment.

Every call of the core returns a :class:`concurrent.futures.Future`, and the
caller may cancel it: ``future.cancel()``, or by cancelling an asyncio task
that awaits it (:func:`asyncio.wrap_future` cancels the core's future then).
``set_result`` on a cancelled (or already completed) future raises
``InvalidStateError``; raised on the writer's or the tailer's thread, that
would fail other callers' writes or stop the thread. So the core completes
futures only through these helpers, which skip a future that is done, also
when another thread cancels it between the check and the completion.

The same helpers chain one future into another (:func:`chain`, :func:`then`,
mapping the result or the error on the way) and bound a future by a deadline
(:func:`fail_after`), so no module hand-writes its own done-callbacks. Chaining runs on the thread
that completes the source, also for a manager's
:class:`~pulsar_state.core.callback_thread.CallbackFuture` (whose users' callbacks
run on the manager's callback thread instead): the transforms given here are
the core's own, short and non-blocking.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, InvalidStateError
from typing import Any, TypeVar, cast

from pulsar_state.core.callback_thread import CallbackFuture
from pulsar_state.errors import StateClosedError

__all__ = [
    "chain",
    "fail_after",
    "failed",
    "on_done",
    "run_into",
    "set_exception",
    "set_result",
    "submit",
    "then",
]

T = TypeVar("T")
S = TypeVar("S")


def set_result(future: Future[T], value: T) -> bool:
    """Complete ``future`` with ``value`` unless it is done; whether this call did.

    (No ``done()`` look first: ``set_result`` on a done future raises
    ``InvalidStateError`` under the future's own lock, which is the check.)"""
    try:
        future.set_result(value)
    except InvalidStateError:  # cancelled or completed meanwhile, by another thread
        return False
    return True


def set_exception(future: Future[Any], exc: BaseException) -> bool:
    """Fail ``future`` with ``exc`` unless it is done; whether this call did."""
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


def submit(
    executor: Executor,
    fn: Callable[..., T],
    *args: Any,
    closed: Callable[[], BaseException] = StateClosedError,
) -> Future[T]:
    """``executor.submit(fn, *args)``, except that once the executor is shut
    down (its owner closed) the future fails with ``closed()``: for a call made
    after, and for one the shutdown took off the queue (never cancelled)."""
    out: Future[T] = Future()
    try:
        source = executor.submit(fn, *args)
    except RuntimeError:  # shut down already
        out.set_exception(closed())
        return out

    def settle(done: Future[T]) -> None:  # the executor's thread, or the shutdown's
        if done.cancelled():
            set_exception(out, closed())
        else:
            chain(done, out)

    source.add_done_callback(settle)
    return out


def failed(exc: BaseException) -> Future[Any]:
    """A future already failed with ``exc`` (an error found before any work began)."""
    future: Future[Any] = Future()
    future.set_exception(exc)
    return future


def chain(
    source: Future[S],
    target: Future[T],
    transform: Callable[[S], T] | None = None,
    *,
    recover: Callable[[BaseException], T] | None = None,
) -> None:
    """Complete ``target`` from ``source`` once that is done.

    ``target`` gets ``transform(result)`` (the result itself without a
    transform), or ``source``'s exception; with ``recover``, ``target`` gets
    ``recover(exception)`` instead (it re-raises what it does not map). What
    ``transform`` or ``recover`` raises fails ``target``. A cancelled
    ``source`` cancels ``target``; a ``target`` that is done already
    (cancelled by its caller, or timed out) is left alone, and neither
    function runs then.
    """

    def complete(finished: Future[S]) -> None:
        exc = finished.exception()
        if exc is not None:
            if recover is None:
                set_exception(target, exc)
            else:
                run_into(target, lambda: recover(exc))
        elif transform is None:
            set_result(target, cast("T", finished.result()))
        else:
            run_into(target, lambda: transform(finished.result()))

    on_done(source, target, complete)


def on_done(source: Future[S], target: Future[Any], fn: Callable[[Future[S]], None]) -> None:
    """Call ``fn(source)`` once ``source`` is done, for ``fn`` to complete ``target``.

    Skipped when ``target`` is done already (cancelled by its caller, timed
    out); a cancelled ``source`` cancels ``target``; what ``fn`` raises fails
    ``target``. For the cases :func:`chain` does not cover, e.g. an error
    that hands ``target`` on to another future.
    """

    def done(finished: Future[S]) -> None:
        if target.done():
            return
        if finished.cancelled():
            target.cancel()
            return
        try:
            fn(finished)
        except BaseException as exc:  # the caller gets every error, on every surface
            set_exception(target, exc)

    _inline(source, done)


def _inline(source: Future[S], fn: Callable[[Future[S]], None]) -> None:
    """Run ``fn(source)`` once ``source`` is done, on the completing thread:
    the core's own chaining never waits for a manager's callback thread
    (:class:`~pulsar_state.core.callback_thread.CallbackFuture`)."""
    if isinstance(source, CallbackFuture):
        source.add_inline_callback(fn)
    else:
        source.add_done_callback(fn)


def then(
    source: Future[S],
    transform: Callable[[S], T],
    *,
    recover: Callable[[BaseException], T] | None = None,
) -> Future[T]:
    """A new future of ``transform(source's result)``, completed as :func:`chain` does.

    Cancelling the new future (e.g. its awaiting asyncio task) leaves
    ``source`` alone: a write it stands for is not undone.
    """
    target: Future[T] = source.derived() if isinstance(source, CallbackFuture) else Future()
    chain(source, target, transform, recover=recover)
    return target


def fail_after(
    future: Future[Any], timeout_s: float, error: Callable[[], BaseException]
) -> threading.Timer | None:
    """Fail ``future`` with ``error()`` unless it is done within ``timeout_s``.

    A daemon timer waits (no thread of the caller's); it is cancelled as soon
    as ``future`` completes by other means. Returns the timer, or ``None``
    when ``future`` is done already (nothing to bound).
    """
    if future.done():
        return None
    timer = threading.Timer(timeout_s, lambda: set_exception(future, error()))
    timer.daemon = True
    _inline(future, lambda _: timer.cancel())
    timer.start()
    return timer


async def wrap(future: Future[T]) -> T:
    """Await a core future from asyncio (:func:`asyncio.wrap_future`).

    Cancelling the awaiting task cancels ``future``; the core completes its
    futures through the helpers above, so that never disturbs other work.

    Returns:
        ``future``'s result.

    Raises:
        Exception: what ``future`` failed with, unchanged.
        asyncio.CancelledError: when the awaiting task (or ``future``) is
            cancelled.
    """
    return await asyncio.wrap_future(future)
