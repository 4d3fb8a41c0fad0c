"""asyncio cancellation: a cancelled awaiting task must not hurt anybody else.

Cancelling a task that awaits a write cancels the core's future (asyncio's
``wrap_future`` does). The write itself may still happen (it cannot be taken
back), but completing that future later must not raise into the writer: not
fail the rest of its group commit, not end the writer thread, not log an
``InvalidStateError`` from a done-callback; and closing the map while such
tasks are cancelled must end cleanly.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pulsar
import pytest
from harness import PulsarEndpoint, unique_topic

from pulsar_state import AsyncPulsarMap, Position, StateClosedError

#: writes queued behind the stall, a third of each kind
WRITES = 150


def _stall(seconds: float) -> Callable[[Any], None]:
    """A generator that holds the writer thread (and writes nothing)."""

    def gen(_state: Any) -> None:
        time.sleep(seconds)

    return gen


def _start_writes(m: AsyncPulsarMap[str, int]) -> list[asyncio.Task[Any]]:
    """Blind writes with nothing to write, puts and updates, interleaved."""
    tasks: list[asyncio.Task[Any]] = []
    for i in range(WRITES):
        if i % 3 == 0:
            coro: Any = m.put_all({})
        elif i % 3 == 1:
            coro = m.put(f"k{i}", i)
        else:
            coro = m.update("n", lambda v: (v or 0) + 1)
        tasks.append(asyncio.create_task(coro))
    return tasks


def _cancel_every_other(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks[::2]:
        task.cancel()


async def _cancel_half_of_the_queued_writes(
    m: AsyncPulsarMap[str, int],
) -> tuple[threading.Thread, Future[Any], list[asyncio.Task[Any]]]:
    """Hold the writer, so that every write started then is queued when cancelled;
    start the writes and cancel every other one. The writer thread, the holding
    write's future and the tasks."""
    manager = m.sync.manager
    writer_thread = manager._writer._thread
    busy = manager.write(_stall(0.4))
    tasks = _start_writes(m)
    await asyncio.sleep(0)  # every task submits its write
    _cancel_every_other(tasks)
    return writer_thread, busy, tasks


def _client(pulsar_endpoint: PulsarEndpoint) -> pulsar.Client:
    return pulsar.Client(
        pulsar_endpoint.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )


class _Problems:
    """Errors logged (any thread) and exceptions that ended a thread."""

    def __init__(self, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
        self.thread_deaths: list[str] = []
        self._caplog = caplog
        caplog.set_level(logging.ERROR)
        monkeypatch.setattr(threading, "excepthook", self._on_thread_death)

    def _on_thread_death(self, args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else "?"
        self.thread_deaths.append(f"{name}: {args.exc_type.__name__}: {args.exc_value}")

    def check(self) -> None:
        logged = [
            f"{r.name}: {r.getMessage()} {r.exc_text or ''}"
            for r in self._caplog.records
            if r.levelno >= logging.ERROR
        ]
        assert not self.thread_deaths, f"threads died: {self.thread_deaths}"
        assert not logged, f"errors logged: {logged}"


@pytest.fixture
def problems(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> _Problems:
    return _Problems(caplog, monkeypatch)


def test_cancelling_some_awaits_in_a_group_commit_leaves_the_others_and_the_writer_alone(
    pulsar_endpoint: PulsarEndpoint, admin_url: str, problems: _Problems
) -> None:
    topic = unique_topic("aio-cancel")

    async def main() -> None:
        client = _client(pulsar_endpoint)
        try:
            async with AsyncPulsarMap[str, int](client, topic, admin_url=admin_url) as m:
                writer_thread, busy, tasks = await _cancel_half_of_the_queued_writes(m)
                results = await asyncio.wait_for(
                    asyncio.gather(*tasks, return_exceptions=True), timeout=60
                )
                assert busy.result(timeout=30) is not None
                for i, result in enumerate(results):
                    if i % 2 == 0:
                        assert isinstance(result, asyncio.CancelledError), (i, result)
                    elif i % 3 == 2:
                        assert isinstance(result, int), (i, result)  # update's new value
                    else:
                        assert isinstance(result, Position), (i, result)
                # cancelled mid-flight: taken up, published, being applied
                for delay_s in (0.001, 0.003, 0.01, 0.03):
                    tasks = _start_writes(m)
                    await asyncio.sleep(delay_s)
                    _cancel_every_other(tasks)
                    results = await asyncio.wait_for(
                        asyncio.gather(*tasks, return_exceptions=True), timeout=60
                    )
                    for i, result in list(enumerate(results))[1::2]:
                        expected = int if i % 3 == 2 else Position
                        assert isinstance(result, expected), (delay_s, i, result)
                # the writer thread lives and later writes work
                assert writer_thread.is_alive()
                await m.put("after", 1)
                assert await m.update("after", lambda v: (v or 0) + 1) == 2
                state = await m.items(latest=True)
                for i in range(1, WRITES, 6):  # the puts that were not cancelled landed
                    assert state[f"k{i}"] == i
                updates = range(2, WRITES, 3)
                not_cancelled = sum(1 for i in updates if i % 2)
                # cancelled ones may land too (once taken up)
                assert 5 * not_cancelled <= state["n"] <= 5 * len(updates)
        finally:
            client.close()

    asyncio.run(main())
    problems.check()


def test_cancelling_awaits_while_closing_ends_cleanly(
    pulsar_endpoint: PulsarEndpoint, admin_url: str, problems: _Problems
) -> None:
    topic = unique_topic("aio-cancel-close")

    async def main() -> None:
        client = _client(pulsar_endpoint)
        try:
            m = await AsyncPulsarMap[str, int].open(client, topic, admin_url=admin_url)
            writer_thread, busy, tasks = await _cancel_half_of_the_queued_writes(m)
            closing = asyncio.create_task(m.close())  # while the writer is held
            results = await asyncio.wait_for(
                asyncio.gather(*tasks, return_exceptions=True), timeout=60
            )
            await asyncio.wait_for(closing, timeout=60)
            for i, result in enumerate(results):
                if i % 2 == 0:
                    assert isinstance(result, asyncio.CancelledError), (i, result)
                else:  # done before the close, or refused by it: never hanging
                    assert isinstance(result, Position | int | StateClosedError), (i, result)
            assert busy.done()
            writer_thread.join(timeout=10)
            assert not writer_thread.is_alive(), "the writer thread did not end"
        finally:
            client.close()

    asyncio.run(main())
    problems.check()
