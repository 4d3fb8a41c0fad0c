"""A latest read's future (state/core/reply_future.py): who asks the broker, and when.

The read is asked by the first one to look at its future: a caller waiting
in ``result()`` asks on its own thread (blocking); any other look asks with
a callback, answered on another thread. Exactly one of the two runs, once,
and every way of waiting on a future still completes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from pulsar_state.core import futures
from pulsar_state.core.callback_thread import CallbackThread
from pulsar_state.core.reply_future import ReplyFuture


@pytest.fixture
def callbacks() -> Iterator[CallbackThread]:
    thread = CallbackThread("pss-test-callbacks")
    yield thread
    thread.close(timeout_s=30)


@dataclass
class Read:
    """A read whose two ways of asking record where they ran."""

    callbacks: CallbackThread
    #: (how, thread name) per ask
    asked: list[tuple[str, str]] = field(default_factory=list)
    #: the answer of an ask with a callback: released by the test
    answer: threading.Event = field(default_factory=threading.Event)
    future: ReplyFuture[str] = field(init=False)

    def __post_init__(self) -> None:
        self.future = ReplyFuture(self.callbacks, ask=self._ask, ask_here=self._ask_here)

    def _ask(self) -> None:  # answered on another thread, once released
        self.asked.append(("callback", threading.current_thread().name))

        def answered() -> None:
            if self.answer.wait(30):
                futures.set_result(self.future, "elsewhere")

        threading.Thread(target=answered, name="io", daemon=True).start()

    def _ask_here(self) -> None:
        self.asked.append(("here", threading.current_thread().name))
        futures.set_result(self.future, "here")


def test_a_caller_waiting_in_result_asks_and_reads_on_its_own_thread(
    callbacks: CallbackThread,
) -> None:
    read = Read(callbacks)
    assert read.future.result() == "here"
    assert read.asked == [("here", threading.current_thread().name)]
    assert read.future.result() == "here"  # asked once
    assert read.asked == [("here", threading.current_thread().name)]


def test_a_future_no_one_looks_at_is_not_asked(callbacks: CallbackThread) -> None:
    read = Read(callbacks)
    assert read.asked == []


@pytest.mark.parametrize(
    "look",
    [
        pytest.param(lambda f: f.done(), id="done"),
        pytest.param(lambda f: f.running(), id="running"),
        pytest.param(repr, id="repr"),
        pytest.param(lambda f: f.add_done_callback(lambda _f: None), id="done-callback"),
        pytest.param(lambda f: concurrent.futures.wait([f], timeout=0), id="wait"),
        pytest.param(lambda f: f.result(timeout=0.01), id="result-with-a-timeout"),
        pytest.param(lambda f: f.exception(timeout=0.01), id="exception"),
    ],
)
def test_any_other_first_look_asks_with_a_callback(
    callbacks: CallbackThread, look: Callable[[ReplyFuture[str]], object]
) -> None:
    read = Read(callbacks)
    with contextlib.suppress(concurrent.futures.TimeoutError):
        look(read.future)  # the answer is held back: a short wait times out
    assert read.asked == [("callback", threading.current_thread().name)]
    read.answer.set()
    # a caller that waits afterwards gets that answer, and asks nothing more
    assert read.future.result() == "elsewhere"
    assert [how for how, _ in read.asked] == ["callback"]


def test_wait_and_as_completed_complete(callbacks: CallbackThread) -> None:
    reads = [Read(callbacks) for _ in range(3)]
    for read in reads:
        read.answer.set()
    done, _ = concurrent.futures.wait([r.future for r in reads], timeout=30)
    assert len(done) == 3
    more = [Read(callbacks) for _ in range(3)]
    for read in more:
        read.answer.set()
    got = [f.result() for f in concurrent.futures.as_completed([r.future for r in more], 30)]
    assert got == ["elsewhere"] * 3


def test_asyncio_gets_the_answer(callbacks: CallbackThread) -> None:
    async def awaited() -> str:
        read = Read(callbacks)
        read.answer.set()
        return await asyncio.wrap_future(read.future)

    assert asyncio.run(awaited()) == "elsewhere"


def test_done_callbacks_run_on_the_callback_thread(callbacks: CallbackThread) -> None:
    read = Read(callbacks)
    ran_on: list[str] = []
    read.future.add_done_callback(lambda _f: ran_on.append(threading.current_thread().name))
    read.answer.set()
    assert read.future.result() == "elsewhere"
    callbacks.close(timeout_s=30)
    assert ran_on == ["pss-test-callbacks"]


def test_of_callers_waiting_together_exactly_one_asks(callbacks: CallbackThread) -> None:
    for _ in range(20):
        read = Read(callbacks)
        start = threading.Barrier(4)
        got: list[str] = []

        def wait(read: Read = read, start: threading.Barrier = start, got: list[str] = got) -> None:
            start.wait(30)
            got.append(read.future.result())

        callers = [threading.Thread(target=wait) for _ in range(4)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(30)
        assert len(read.asked) == 1 and got == ["here"] * 4


def test_a_cancelled_read_stays_cancelled(callbacks: CallbackThread) -> None:
    read = Read(callbacks)
    assert read.future.cancel()  # a look: asks with a callback, whose answer is dropped
    read.answer.set()
    with pytest.raises(concurrent.futures.CancelledError):
        read.future.result()
    assert [how for how, _ in read.asked] == ["callback"]


@pytest.mark.parametrize("first_look", ["result", "done"])
def test_an_ask_that_raises_fails_the_future(callbacks: CallbackThread, first_look: str) -> None:
    """Nothing is left pending: whatever an ask raises is the future's error."""

    def broken() -> None:
        raise RuntimeError("no ask")

    future: ReplyFuture[str] = ReplyFuture(callbacks, ask=broken, ask_here=broken)
    if first_look == "done":
        assert future.done()
    with pytest.raises(RuntimeError, match="no ask"):
        future.result()
    assert future.done()  # failed, not left pending for the next look
    assert isinstance(future.exception(timeout=0), RuntimeError)
