"""Retry policy: a copyable value with attempts, deadline, backoff and jitter;
and which Pulsar client errors are worth another try.

One retry engine: every retry *loop* in the package runs on tenacity, built
from a policy by :meth:`RetryPolicy.retrying` (its stop and wait are tenacity
strategies, :meth:`RetryPolicy.stop` and :meth:`RetryPolicy.wait`). The write
path is a state machine rather than a loop: its writer asks the same policy
whether a write's budget is spent (:meth:`RetryPolicy.exhausted`) and how long
to back off (:meth:`RetryPolicy.backoff_s`).

Deadlines come from :func:`time.monotonic`; ``sleep`` is injectable for tests.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pulsar
from tenacity import (
    RetryCallState,
    Retrying,
    stop_after_attempt,
    stop_after_delay,
    stop_never,
)
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from pulsar_state.errors import ConfigurationError

__all__ = ["RetryPolicy", "is_transient"]

#: client errors another attempt cannot cure: credentials, names, settings, a
#: closed client or a topic that is gone for good
_PERMANENT = (
    pulsar.AlreadyClosed,
    pulsar.AuthenticationError,
    pulsar.AuthorizationError,
    pulsar.ErrorGettingAuthenticationData,
    pulsar.IncompatibleSchema,
    pulsar.InvalidConfiguration,
    pulsar.InvalidTopicName,
    pulsar.InvalidUrl,
    pulsar.NotAllowedError,
    pulsar.TopicNotFound,
    pulsar.TopicTerminated,
)


def is_transient(exc: BaseException) -> bool:
    """Whether a Pulsar client error may pass if tried again (a timeout, a lookup,
    a topic loading, closing or moving, a lost connection), not a permanent one."""
    return isinstance(exc, pulsar.PulsarException) and not isinstance(exc, _PERMANENT)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """When to try again.

    Attributes:
        max_attempts: attempts in all (the first included); ``None``: no limit.
        deadline_s: give up after this long since the first attempt.
        initial_backoff_s / max_backoff_s: exponential backoff bounds.
        jitter: spread each backoff by up to this fraction (0..1; 1 is "full
            jitter"), so writers fenced together do not retry in lockstep.
    """

    max_attempts: int | None = 200
    deadline_s: float = 120.0
    initial_backoff_s: float = 0.01
    max_backoff_s: float = 0.5
    jitter: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1 or None, got {self.max_attempts}")
        if self.deadline_s <= 0:
            raise ConfigurationError(f"deadline_s must be > 0, got {self.deadline_s}")
        if not 0 <= self.initial_backoff_s <= self.max_backoff_s:
            raise ConfigurationError("need 0 <= initial_backoff_s <= max_backoff_s")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"jitter must be within 0..1, got {self.jitter}")

    def backoff_s(self, attempt: int) -> float:
        """Delay before attempt number ``attempt + 1`` (``attempt`` >= 1)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * (2 ** max(0, attempt - 1)))
        return float(base * (1 - self.jitter * random.random()))

    def exhausted(self, attempt: int, started: float) -> bool:
        """Whether ``attempt`` attempts since ``started`` (monotonic) are enough."""
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return True
        return time.monotonic() - started >= self.deadline_s

    def stop(self) -> stop_base:
        """The policy's stop as a tenacity strategy: ``max_attempts`` or ``deadline_s``."""
        attempts = (
            stop_never if self.max_attempts is None else stop_after_attempt(self.max_attempts)
        )
        return attempts | stop_after_delay(self.deadline_s)

    def wait(self) -> wait_base:
        """The policy's backoff as a tenacity strategy (:meth:`backoff_s`)."""
        return _PolicyWait(self)

    def retrying(
        self,
        *,
        retry: retry_base,
        before_sleep: Callable[[RetryCallState], None] | None = None,
    ) -> Retrying:
        """A tenacity ``Retrying`` on this policy: tries while ``retry`` says so and
        the policy allows, sleeping with :attr:`sleep`; the last error is re-raised."""
        return Retrying(
            stop=self.stop(),
            wait=self.wait(),
            retry=retry,
            sleep=self.sleep,
            before_sleep=before_sleep,
            reraise=True,
        )


class _PolicyWait(wait_base):
    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def __call__(self, retry_state: RetryCallState) -> float:
        return self._policy.backoff_s(retry_state.attempt_number)
