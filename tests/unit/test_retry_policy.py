"""RetryPolicy: a validated value whose loops run on tenacity."""

from __future__ import annotations

import pulsar
import pytest
from tenacity import retry_if_exception_type

from pulsar_state import ConfigurationError, RetryPolicy
from pulsar_state.retry import is_transient


def _flaky(failures: int, exc: BaseException) -> tuple[list[int], object]:
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise exc
        return "done"

    return calls, fn


def test_retrying_tries_until_it_passes_sleeping_the_policys_backoff() -> None:
    slept: list[float] = []
    policy = RetryPolicy(
        max_attempts=10, initial_backoff_s=0.1, max_backoff_s=0.3, jitter=0.0, sleep=slept.append
    )
    calls, fn = _flaky(4, TimeoutError("slow"))
    assert policy.retrying(retry=retry_if_exception_type(TimeoutError))(fn) == "done"
    assert len(calls) == 5
    # exponential, capped, no jitter: the same numbers backoff_s gives
    assert slept == [0.1, 0.2, 0.3, 0.3]
    assert slept == [policy.backoff_s(n) for n in range(1, 5)]


def test_retrying_stops_at_max_attempts_and_raises_the_last_error() -> None:
    policy = RetryPolicy(max_attempts=3, sleep=lambda _s: None)
    calls, fn = _flaky(10, TimeoutError("still slow"))
    with pytest.raises(TimeoutError, match="still slow"):
        policy.retrying(retry=retry_if_exception_type(TimeoutError))(fn)
    assert len(calls) == 3


def test_retrying_stops_at_the_deadline() -> None:
    policy = RetryPolicy(max_attempts=None, deadline_s=0.2, initial_backoff_s=0.05, jitter=0.0)
    calls, fn = _flaky(10**6, TimeoutError("slow"))
    with pytest.raises(TimeoutError):
        policy.retrying(retry=retry_if_exception_type(TimeoutError))(fn)
    # 0.05 + 0.1 then past 0.2: a handful, never the million
    assert 2 <= len(calls) <= 6


def test_an_error_the_retry_does_not_cover_is_raised_at_once() -> None:
    policy = RetryPolicy(sleep=lambda _s: None)
    calls, fn = _flaky(1, ValueError("bad input"))
    with pytest.raises(ValueError, match="bad input"):
        policy.retrying(retry=retry_if_exception_type(TimeoutError))(fn)
    assert len(calls) == 1


def test_jitter_stays_within_its_fraction() -> None:
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=0.1, jitter=0.5)
    for _ in range(200):
        assert 0.05 <= policy.backoff_s(3) <= 0.1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"deadline_s": 0},
        {"initial_backoff_s": 2.0, "max_backoff_s": 1.0},
        {"jitter": 1.5},
    ],
)
def test_a_bad_policy_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_client_errors_are_sorted_into_transient_and_permanent() -> None:
    assert is_transient(pulsar.Timeout("t"))
    assert is_transient(pulsar.ConnectError("c"))
    assert not is_transient(pulsar.AuthorizationError("a"))
    assert not is_transient(pulsar.TopicNotFound("n"))
    assert not is_transient(ValueError("not a client error"))
