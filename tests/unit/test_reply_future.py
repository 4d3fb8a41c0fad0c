"""A latest read's future (state/core/reply_future.py): who runs the finish.

The thread that gets the broker's reply (the client's IO thread) runs none of
our code that takes a lock; it hands the rest of the read, the *finish*, to
a caller blocked in ``result()`` when there is one (that caller runs it), and
otherwise to the reply thread. Each finish runs exactly once, on one of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator

import pytest

from pulsar_state.core import futures
from pulsar_state.core.callback_thread import CallbackThread
from pulsar_state.core.reply_future import ReplyFuture


@pytest.fixture
def threads() -> Iterator[tuple[CallbackThread, CallbackThread]]:
    callbacks, replies = CallbackThread("pss-test-callbacks"), CallbackThread("pss-test-reply")
    yield callbacks, replies
    callbacks.close(timeout_s=30)
    replies.close(timeout_s=30)


def _finish(future: ReplyFuture[str], ran_on: list[str]) -> None:
    ran_on.append(threading.current_thread().name)
    futures.set_result(future, "read")


def _waiting(future: ReplyFuture[str]) -> bool:
    with future._condition:
        return future._callers_waiting > 0


def _hand_over_once_waited(future: ReplyFuture[str], ran_on: list[str]) -> threading.Thread:
    def reply() -> None:  # the IO thread: hands over once the caller waits
        while not _waiting(future):
            time.sleep(0.001)
        assert future.hand_over(lambda: _finish(future, ran_on))

    thread = threading.Thread(target=reply, name="io")
    thread.start()
    return thread


def test_a_caller_waiting_in_result_runs_the_finish_itself(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    future: ReplyFuture[str] = ReplyFuture(*threads)
    ran_on: list[str] = []
    io = _hand_over_once_waited(future, ran_on)
    assert future.result(timeout=30) == "read"
    io.join(30)
    assert ran_on == [threading.current_thread().name]


def test_with_no_caller_waiting_the_reply_thread_runs_it(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    future: ReplyFuture[str] = ReplyFuture(*threads)
    ran_on: list[str] = []
    assert future.hand_over(lambda: _finish(future, ran_on))
    assert future.result(timeout=30) == "read"
    assert ran_on == ["pss-test-reply"]


def test_of_several_waiting_callers_one_runs_it_and_all_get_the_result(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    future: ReplyFuture[str] = ReplyFuture(*threads)
    ran_on: list[str] = []
    got: list[str] = []
    callers = [
        threading.Thread(target=lambda: got.append(future.result(timeout=30)), name=f"caller-{i}")
        for i in range(4)
    ]
    for caller in callers:
        caller.start()
    while True:
        with future._condition:
            if future._callers_waiting == len(callers):
                break
        time.sleep(0.001)
    assert future.hand_over(lambda: _finish(future, ran_on))
    for caller in callers:
        caller.join(30)
    assert got == ["read"] * 4
    assert len(ran_on) == 1 and ran_on[0].startswith("caller-")


def test_a_caller_that_timed_out_leaves_the_finish_to_the_reply_thread(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    future: ReplyFuture[str] = ReplyFuture(*threads)
    ran_on: list[str] = []
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.05)
    assert future.hand_over(lambda: _finish(future, ran_on))
    assert future.result(timeout=30) == "read"
    assert ran_on == ["pss-test-reply"]


def test_a_finish_that_only_chains_leaves_the_caller_waiting_for_the_completion(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    """A lagging read: the finish registers a completion another thread makes later."""
    future: ReplyFuture[str] = ReplyFuture(*threads)

    def finish() -> None:
        threading.Timer(0.1, lambda: futures.set_result(future, "applied")).start()

    def reply() -> None:
        while not _waiting(future):
            time.sleep(0.001)
        future.hand_over(finish)

    threading.Thread(target=reply).start()
    assert future.result(timeout=30) == "applied"


def test_once_the_reply_thread_is_closed_a_reply_with_no_caller_is_run_nowhere(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    callbacks, replies = threads
    future: ReplyFuture[str] = ReplyFuture(callbacks, replies)
    replies.close(timeout_s=30)
    ran_on: list[str] = []
    assert not future.hand_over(lambda: _finish(future, ran_on))
    assert ran_on == [] and not future.done()


def test_a_cancelled_future_is_not_handed_to_a_caller(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    future: ReplyFuture[str] = ReplyFuture(*threads)
    assert future.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=1)
    ran_on: list[str] = []
    assert future.hand_over(lambda: _finish(future, ran_on))  # to the reply thread
    threads[1].close(timeout_s=30)
    assert ran_on == ["pss-test-reply"] and future.cancelled()


def test_every_other_way_of_waiting_works(
    threads: tuple[CallbackThread, CallbackThread],
) -> None:
    """``wait``, ``as_completed``, asyncio and done-callbacks get it through the reply thread."""
    made = [ReplyFuture[str](*threads) for _ in range(3)]
    called: list[str] = []
    made[0].add_done_callback(lambda f: called.append(threading.current_thread().name))
    for future in made:
        future.hand_over(lambda future=future: futures.set_result(future, "read"))
    done, _ = concurrent.futures.wait(made, timeout=30)
    assert done == set(made)
    assert [f.result() for f in concurrent.futures.as_completed(made, timeout=30)] == ["read"] * 3

    async def awaited() -> str:
        future: ReplyFuture[str] = ReplyFuture(*threads)
        wrapped = asyncio.wrap_future(future)
        future.hand_over(lambda: futures.set_result(future, "async"))
        return await wrapped

    assert asyncio.run(awaited()) == "async"
    threads[0].close(timeout_s=30)
    assert called == ["pss-test-callbacks"]
