"""TakeoverLimiter: a token bucket of takeovers, on a fake clock."""

from __future__ import annotations

import pytest

from pulsar_state import ConfigurationError, StateConfig
from pulsar_state.core.write.takeover import TakeoverLimiter


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_burst_then_the_rate() -> None:
    clock = _Clock()
    limiter = TakeoverLimiter(rate_per_s=4.0, burst=2, clock=clock, sleep=clock.sleep)
    assert limiter.acquire() and limiter.acquire()  # the burst: no wait
    assert clock.slept == []
    assert limiter.delay_s() == pytest.approx(0.25)
    assert limiter.acquire()
    assert sum(clock.slept) == pytest.approx(0.25)
    # over a long contended stretch the average is the rate
    start = clock.now
    for _ in range(40):
        limiter.acquire()
    assert clock.now - start == pytest.approx(10.0)


def test_quiet_refills_up_to_the_burst_only() -> None:
    clock = _Clock()
    limiter = TakeoverLimiter(rate_per_s=1.0, burst=2, clock=clock, sleep=clock.sleep)
    limiter.acquire()
    limiter.acquire()
    clock.now += 60.0  # a long quiet: a failover is immediate, but only `burst` of them
    limiter.acquire()
    limiter.acquire()
    assert clock.slept == []
    limiter.acquire()
    assert sum(clock.slept) == pytest.approx(1.0)


def test_waiting_stops_when_cancelled() -> None:
    clock = _Clock()
    limiter = TakeoverLimiter(rate_per_s=0.1, burst=1, clock=clock, sleep=clock.sleep)
    limiter.acquire()
    calls = iter([False, False, True])
    assert limiter.acquire(cancelled=lambda: next(calls)) is False
    assert len(clock.slept) == 2 and max(clock.slept) <= 0.05


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_takeovers_per_s": 0}, "max_takeovers_per_s"),
        ({"max_takeovers_per_s": "5"}, "max_takeovers_per_s"),
        ({"takeover_burst": 0}, "takeover_burst"),
    ],
)
def test_bad_takeover_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        StateConfig(**kwargs)  # type: ignore[arg-type]


def test_the_limiter_refuses_a_bad_rate() -> None:
    with pytest.raises(ConfigurationError):
        TakeoverLimiter(rate_per_s=0)
