"""A bounded poll: ask a condition until it holds, fail with a message that says why not.

The launcher's waits (a deployed function running and subscribed, the demo's
workers placing and counting) all poll the same way: an error of the cluster
counts as "not yet", the deadline comes from :func:`time.monotonic`, and the
failure says what was awaited, what was last seen and the last error. Each
caller chooses the error it raises and what to check every round
(:meth:`DeployedFunction.wait_for <pulsar_state.deploy.function_ready.DeployedFunction.wait_for>`,
:meth:`DemoWorkers.wait_for <pulsar_state.deploy.demo_workers.DemoWorkers.wait_for>`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pulsar

from pulsar_state.errors import PulsarStateError

__all__ = ["NOT_YET", "poll_until"]

T = TypeVar("T")

#: what a condition may raise and still be asked again (the last one is reported)
NOT_YET: tuple[type[BaseException], ...] = (
    pulsar.PulsarException,
    PulsarStateError,
    OSError,
    ValueError,
)


def poll_until(
    condition: Callable[[], T | None],
    *,
    what: str,
    timeout_s: float,
    error: Callable[[str], BaseException],
    interval_s: float = 0.5,
    seen: Callable[[], str] | None = None,
    check: Callable[[], None] | None = None,
) -> T:
    """Poll ``condition`` until it returns a truthy value; return it.

    Each round first calls ``check`` (what it raises ends the wait at once),
    then ``condition``; an error of :data:`NOT_YET` raised by ``condition``
    counts as "not yet". After ``timeout_s`` the wait fails with
    ``error(message)``, the message being ``"<what>: not within <timeout_s>s"``
    followed, in parentheses, by what ``seen`` returns and the last error.

    Returns:
        The first truthy value of ``condition``.

    Raises:
        BaseException: ``error(message)`` after ``timeout_s`` (chained to the
            last error of ``condition``), or what ``check`` raises.
    """
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        if check is not None:
            check()
        try:
            value = condition()
            if value:
                return value
        except NOT_YET as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            detail = seen() if seen is not None else ""
            if last_error is not None:
                detail = f"{detail}; last error: {last_error}".lstrip("; ")
            raise error(
                f"{what}: not within {timeout_s:.0f}s" + (f" ({detail})" if detail else "")
            ) from last_error
        time.sleep(interval_s)
