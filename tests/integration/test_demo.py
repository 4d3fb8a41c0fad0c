"""The steps of ``pulsar-state demo`` (``make run``) wait on conditions, never on luck."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from harness import PulsarEndpoint, unique_name

from pulsar_state.deploy.demo import smoke_demo
from pulsar_state.deploy.errors import FunctionNotReadyError
from pulsar_state.deploy.function_ready import DeployedFunction


# one function deployed and deleted with pulsar-admin (a JVM per call) on a busy host
@pytest.mark.timeout(600)
def test_smoke_step_sees_every_message_sent_right_after_the_deploy(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    """The demo sends as soon as its step says the function is ready: nothing is lost.

    Before the fix the messages went out right after ``functions create``,
    before the instance subscribed at the latest position, and the step hung
    for 120 s and failed with a raw ``_pulsar.Timeout``.
    """
    suffix = unique_name("demo")
    t0 = time.monotonic()
    answers = smoke_demo(pulsar_endpoint.service_url, pulsar_endpoint.admin_url, suffix, 5)
    assert answers == [f"hello {i}!" for i in range(5)]
    assert time.monotonic() - t0 < 300


def test_a_function_that_never_runs_fails_with_its_name_and_log(
    pulsar_endpoint: PulsarEndpoint, tmp_path: Path
) -> None:
    """A bounded wait, then one error naming the function, what was seen and its log."""
    fqn = ("public", "default", unique_name("never"))
    topic = f"persistent://public/default/{fqn[2]}-in"
    with DeployedFunction(
        admin_url=pulsar_endpoint.admin_url, fqn=fqn, logs_dir=tmp_path / "logs"
    ) as function:
        t0 = time.monotonic()
        with pytest.raises(FunctionNotReadyError) as caught:
            function.wait_ready(inputs=[topic], instances=1, timeout_s=3)
    assert 3 <= time.monotonic() - t0 < 60
    message = str(caught.value)
    assert "/".join(fqn) in message
    assert "the worker does not list it" in message
    log = tmp_path / "logs" / "functions" / "public" / "default" / fqn[2]
    assert caught.value.log == str(log)
    assert str(log) in message
    assert caught.value.function == "/".join(fqn)
