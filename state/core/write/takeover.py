"""How often one writer may take the topic over from another (fencing mode).

``ExclusiveWithFencing`` (PIP-161) closes the current holder's producer at once.
Under steady contention every writer would fence the others for each of its
writes, hundreds of takeovers a second, and Apache Pulsar 4.0.8 can deadlock
under that (``docs/findings/pulsar-4.0.8-fencing-deadlock.md``). So each writer
spends a token per takeover from a bucket that refills at
``max_takeovers_per_s``: a failover (one takeover after quiet) is immediate, a
burst of ``burst`` is allowed, and a writer that keeps losing the topic waits
for its next token instead of fencing back at once. ``n`` contending writers
then make at most ``n * max_takeovers_per_s`` takeovers a second, and the holder
writes everything it has queued in the meantime (one tenure, many writes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pulsar_state.errors import ConfigurationError

__all__ = ["TakeoverLimiter"]


class TakeoverLimiter:
    """A token bucket of takeovers; thread-safe; clock and sleep injectable."""

    def __init__(
        self,
        *,
        rate_per_s: float,
        burst: int = 2,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate_per_s > 0:
            raise ConfigurationError(f"the takeover rate must be > 0, got {rate_per_s!r}")
        if burst < 1:
            raise ConfigurationError(f"the takeover burst must be >= 1, got {burst!r}")
        self.rate_per_s = float(rate_per_s)
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()
        #: seconds spent waiting for a token, in all (a metric of contention)
        self.waited_s = 0.0

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now

    def delay_s(self) -> float:
        """How long until a token is available (0 if one is)."""
        with self._lock:
            self._refill(self._clock())
            return max(0.0, (1.0 - self._tokens) / self.rate_per_s)

    def acquire(self, *, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Wait for a token and take it; ``False`` if ``cancelled()`` became true
        while waiting (checked at least every 50 ms)."""
        while True:
            with self._lock:
                now = self._clock()
                self._refill(now)
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return True
                wait = (1.0 - self._tokens) / self.rate_per_s
            if cancelled():
                return False
            step = min(wait, 0.05)
            self.waited_s += step
            self._sleep(step)
