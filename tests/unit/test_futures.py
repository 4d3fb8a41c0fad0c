"""pulsar_state.core.futures: completing futures that may be cancelled or done already."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future

import pytest

from pulsar_state.core import futures


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


def test_then_maps_the_result_and_recover_maps_only_the_errors_it_knows() -> None:
    source: Future[int] = Future()
    mapped = futures.then(source, lambda v: v + 1)

    def known(exc: BaseException) -> int:
        if isinstance(exc, KeyError):
            return -1
        raise exc

    recovered = futures.then(source, lambda v: v + 1, recover=known)
    source.set_result(1)
    assert mapped.result(timeout=1) == 2
    assert recovered.result(timeout=1) == 2

    missing: Future[int] = Future()
    gone = futures.then(missing, lambda v: v, recover=known)
    missing.set_exception(KeyError("k"))
    assert gone.result(timeout=1) == -1

    broken: Future[int] = Future()
    other = futures.then(broken, lambda v: v, recover=known)
    broken.set_exception(ZeroDivisionError())
    with pytest.raises(ZeroDivisionError):
        other.result(timeout=1)

    # cancelling the new future leaves its source alone (a write is not undone)
    kept: Future[int] = Future()
    dropped = futures.then(kept, lambda v: v)
    assert dropped.cancel()
    kept.set_result(5)
    assert kept.result(timeout=1) == 5
    assert dropped.cancelled()


def test_on_done_hands_the_finished_source_to_fn_and_fails_the_target_on_its_error() -> None:
    seen: list[int] = []
    source: Future[int] = Future()
    target: Future[int] = Future()
    futures.on_done(source, target, lambda f: seen.append(f.result()))
    source.set_result(3)
    assert seen == [3]
    assert not target.done()  # fn decides when target completes

    def boom(_: Future[int]) -> None:
        raise ValueError("bad")

    failing: Future[int] = Future()
    futures.on_done(source, failing, boom)  # source is done: runs at once
    with pytest.raises(ValueError, match="bad"):
        failing.result(timeout=1)

    skipped: Future[int] = Future()
    skipped.cancel()
    futures.on_done(source, skipped, lambda f: seen.append(-1))
    assert seen == [3]

    cancelled: Future[int] = Future()
    follower: Future[int] = Future()
    futures.on_done(cancelled, follower, lambda f: seen.append(-2))
    cancelled.cancel()
    assert follower.cancelled()
    assert seen == [3]


def test_fail_after_fails_a_late_future_and_stops_its_timer_when_it_completes() -> None:
    late: Future[int] = Future()
    timer = futures.fail_after(late, 0.05, lambda: TimeoutError("waited 0.05 s for late"))
    assert timer is not None
    with pytest.raises(TimeoutError, match="late"):
        late.result(timeout=5)

    prompt: Future[int] = Future()
    timer = futures.fail_after(prompt, 30.0, lambda: TimeoutError("prompt"))
    assert timer is not None and timer.is_alive()
    prompt.set_result(1)
    timer.join(timeout=5)  # cancelled on completion: ends well before 30 s
    assert not timer.is_alive()
    assert prompt.result() == 1

    done: Future[int] = Future()
    done.set_result(2)
    assert futures.fail_after(done, 0.01, lambda: TimeoutError("done")) is None
    assert done.result() == 2


def test_failed_is_a_future_already_failed() -> None:
    fut = futures.failed(KeyError("k"))
    assert fut.done()
    with pytest.raises(KeyError):
        fut.result()
