"""The launcher's one bounded poll (``pulsar_state.deploy.polling``), which both
``DeployedFunction.wait_for`` and ``DemoWorkers.wait_for`` run."""

from __future__ import annotations

import functools

import pytest

from pulsar_state.deploy.errors import FunctionNotReadyError
from pulsar_state.deploy.polling import poll_until
from pulsar_state.errors import OperationTimeoutError, PulsarStateError


def test_returns_the_first_truthy_value_and_errors_count_as_not_yet() -> None:
    answers: list[object] = [None, ValueError("garbled"), PulsarStateError("not yet"), {}, {"a": 1}]
    rounds: list[int] = []

    def condition() -> object:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    value = poll_until(
        condition,
        what="x",
        timeout_s=60,
        interval_s=0,
        error=OperationTimeoutError,
        check=lambda: rounds.append(1),
    )
    assert value == {"a": 1}
    assert len(rounds) == 5, "the check runs before every round"


def test_the_timeout_error_says_what_was_seen_and_the_last_error() -> None:
    def condition() -> None:
        raise ValueError("garbled answer")

    with pytest.raises(FunctionNotReadyError) as caught:
        poll_until(
            condition,
            what="waiting for 2 instances",
            timeout_s=0,
            interval_s=0,
            seen=lambda: "1/2 running",
            error=functools.partial(FunctionNotReadyError, function="t/ns/f", log="f.log"),
        )
    assert str(caught.value) == (
        "waiting for 2 instances: not within 0s (1/2 running; last error: garbled answer) "
        "(function t/ns/f; its log: f.log)"
    )
    assert isinstance(caught.value.__cause__, ValueError)


def test_without_seen_or_error_the_message_is_bare() -> None:
    with pytest.raises(OperationTimeoutError) as caught:
        poll_until(lambda: None, what="the counts", timeout_s=0, error=OperationTimeoutError)
    assert str(caught.value) == "the counts: not within 0s"


def test_what_the_check_raises_ends_the_wait_at_once() -> None:
    asked: list[int] = []

    def dead() -> None:
        raise PulsarStateError("worker-1 exited")

    with pytest.raises(PulsarStateError, match="worker-1 exited"):
        poll_until(
            lambda: asked.append(1),
            what="never",
            timeout_s=60,
            error=OperationTimeoutError,
            check=dead,
        )
    assert asked == [], "the condition is not asked once the check fails"


def test_other_errors_of_the_condition_are_not_swallowed() -> None:
    def broken() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        poll_until(broken, what="x", timeout_s=60, error=OperationTimeoutError)
