"""pulsar_state.futures: completing futures that may be cancelled or done already."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future

import pytest

from pulsar_state import futures


def test_completing_a_cancelled_or_done_future_is_skipped_without_raising() -> None:
    cancelled: Future[int] = Future()
    assert cancelled.cancel()
    assert futures.set_result(cancelled, 1) is False
    assert futures.set_exception(cancelled, ValueError("x")) is False
    assert cancelled.cancelled()

    done: Future[int] = Future()
    assert futures.set_result(done, 1) is True
    assert futures.set_result(done, 2) is False
    assert futures.set_exception(done, ValueError("x")) is False
    assert done.result() == 1

    failed: Future[int] = Future()
    assert futures.set_exception(failed, KeyError("k")) is True
    assert futures.set_result(failed, 3) is False
    with pytest.raises(KeyError):
        failed.result()


def test_a_cancel_racing_the_completion_never_raises() -> None:
    errors: list[BaseException] = []
    for _ in range(2000):
        fut: Future[int] = Future()
        start = threading.Barrier(2)

        def complete(f: Future[int] = fut, b: threading.Barrier = start) -> None:
            b.wait()
            try:
                futures.set_result(f, 1)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=complete)
        t.start()
        start.wait()
        fut.cancel()
        t.join(10)
        assert fut.done()
    assert not errors


def test_run_into_completes_with_the_value_or_the_error_and_skips_a_cancelled_future() -> None:
    ok: Future[int] = Future()
    assert futures.run_into(ok, lambda: 7)
    assert ok.result() == 7

    def boom() -> int:
        raise ZeroDivisionError

    bad: Future[int] = Future()
    assert futures.run_into(bad, boom)
    with pytest.raises(ZeroDivisionError):
        bad.result()

    ran: list[bool] = []
    cancelled: Future[int] = Future()
    cancelled.cancel()
    assert futures.run_into(cancelled, lambda: ran.append(True) or 1) is False
    assert not ran


def test_chain_passes_results_errors_and_cancellation_on() -> None:
    source: Future[int] = Future()
    plain: Future[int] = Future()
    doubled: Future[int] = Future()
    futures.chain(source, plain)
    futures.chain(source, doubled, lambda v: v * 2)
    source.set_result(21)
    assert plain.result(0) == 21
    assert doubled.result(0) == 42

    failing: Future[int] = Future()
    target: Future[int] = Future()
    futures.chain(failing, target)
    failing.set_exception(LookupError("gone"))
    with pytest.raises(LookupError):
        target.result(0)

    bad_transform: Future[int] = Future()
    futures.chain(source, bad_transform, lambda v: v // 0)
    with pytest.raises(ZeroDivisionError):
        bad_transform.result(0)

    cancelled_source: Future[int] = Future()
    follower: Future[int] = Future()
    futures.chain(cancelled_source, follower)
    cancelled_source.cancel()
    with pytest.raises(CancelledError):
        follower.result(0)


def test_chain_leaves_a_cancelled_target_alone(caplog: pytest.LogCaptureFixture) -> None:
    source: Future[int] = Future()
    target: Future[int] = Future()
    futures.chain(source, target, lambda v: v + 1)
    target.cancel()  # the caller gave up (e.g. its asyncio task was cancelled)
    source.set_result(1)  # no InvalidStateError logged by a done-callback
    assert target.cancelled()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
