"""The core's future (state/core/callback_thread.py): a ``concurrent.futures.Future``
in every use, with a lighter condition.

``CallbackFuture.__init__`` sets ``Future.__init__``'s fields itself, with a
condition that does not store five bound methods per instance; these check
the fields still match this Python's ``Future``, that every way of waiting on
a future works (``result`` with and without a timeout, ``wait``,
``as_completed``, asyncio), that the condition is re-entrant as
``threading.Condition()`` is, and how many objects a future holds that the
garbage collector tracks (a plain ``Future`` holds 11).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from pulsar_state.core.callback_thread import CallbackFuture, CallbackThread


@pytest.fixture
def callbacks() -> CallbackThread:
    thread = CallbackThread("pss-test-future")
    yield thread
    thread.close(timeout_s=30)


def test_the_fields_are_those_of_this_pythons_future(callbacks: CallbackThread) -> None:
    plain, ours = Future(), CallbackFuture(callbacks)
    fields = set(vars(ours)) - {"callbacks"}
    assert fields == set(vars(plain))
    for name in fields - {"_condition"}:
        assert getattr(ours, name) == getattr(plain, name), name
    assert isinstance(ours._condition, threading.Condition)


def test_result_waits_across_threads_and_times_out(callbacks: CallbackThread) -> None:
    future: CallbackFuture[int] = CallbackFuture(callbacks)
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.01)
    threading.Timer(0.05, future.set_result, (7,)).start()
    assert future.result(timeout=30) == 7
    failed: CallbackFuture[int] = CallbackFuture(callbacks)
    threading.Timer(0.05, failed.set_exception, (ValueError("no"),)).start()
    with pytest.raises(ValueError, match="no"):
        failed.result(timeout=30)


def test_wait_as_completed_and_cancel(callbacks: CallbackThread) -> None:
    futures = [CallbackFuture[int](callbacks) for _ in range(3)]
    assert futures[2].cancel()
    assert futures[2].set_running_or_notify_cancel() is False  # as an executor does
    done, pending = concurrent.futures.wait(futures, timeout=30, return_when="FIRST_COMPLETED")
    assert done == {futures[2]}
    threading.Timer(0.05, futures[0].set_result, (1,)).start()
    done, pending = concurrent.futures.wait(futures[:2], timeout=30, return_when="FIRST_COMPLETED")
    assert done == {futures[0]} and pending == {futures[1]}
    futures[1].set_result(2)
    completed = list(concurrent.futures.as_completed(futures, timeout=30))
    assert sorted(map(id, completed)) == sorted(map(id, futures))


def test_asyncio_awaits_it(callbacks: CallbackThread) -> None:
    future: CallbackFuture[str] = CallbackFuture(callbacks)

    async def main() -> str:
        asyncio.get_running_loop().call_later(0.05, future.set_result, "landed")
        return await asyncio.wrap_future(future)

    assert asyncio.run(main()) == "landed"


def test_a_done_callback_runs_on_the_callback_thread(callbacks: CallbackThread) -> None:
    future: CallbackFuture[int] = CallbackFuture(callbacks)
    ran = threading.Event()
    names: list[str] = []
    future.add_done_callback(lambda f: (names.append(threading.current_thread().name), ran.set()))
    future.set_result(1)
    assert ran.wait(30)
    assert names == ["pss-test-future"]


def test_the_condition_is_re_entrant_as_threading_conditions_are(
    callbacks: CallbackThread,
) -> None:
    future: CallbackFuture[int] = CallbackFuture(callbacks)
    with future._condition, future._condition:
        future._condition.notify_all()  # owned twice by this thread: allowed
    with pytest.raises(RuntimeError):
        future._condition.notify_all()  # not owned: refused, as threading's is


def test_a_future_holds_six_tracked_objects_a_plain_one_eleven(
    callbacks: CallbackThread,
) -> None:
    def tracked(make: Callable[[], object]) -> int:
        gc.collect()
        before = len(gc.get_objects())
        held = [make() for _ in range(1000)]
        count = (len(gc.get_objects()) - before - 1) / len(held)  # - 1: the list
        del held
        # rounded: another thread of the session (a client's, a timer) may
        # allocate a few objects meanwhile; a future's own are whole numbers
        return round(count)

    plain, ours = tracked(Future), tracked(lambda: CallbackFuture(callbacks))
    assert ours <= 6 < plain, (ours, plain)  # 6 and 11 on CPython 3.11
