"""``pulsar-state meta lock`` and ``meta elect`` (etcdctl's, issue #28), as a user
runs them: a process each, on the real broker, against a holder in this process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pulsar
from harness import PulsarEndpoint, unique_topic, wait_until

from pulsar_state import CoordinationService, MetadataStore

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _env(ep: PulsarEndpoint) -> dict[str, str]:
    return {**os.environ, "PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}


def _cli(ep: PulsarEndpoint, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_state.cli", *args],
        env=_env(ep),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_lock_runs_a_command_holding_it_and_waits_for_a_holder(
    pulsar_endpoint: PulsarEndpoint,
) -> None:
    topic = unique_topic("meta-lock")
    shown = _cli(
        pulsar_endpoint,
        "meta", "--topic", topic, "lock", "/locks/job", "--",
        sys.executable, "-c",
        "import os; print(os.environ['PULSAR_STATE_LOCK_PATH'], "
        "os.environ['PULSAR_STATE_LOCK_TOKEN']); raise SystemExit(3)",
    )  # fmt: skip
    assert shown.returncode == 3, shown.stderr  # the command's exit code
    path, token = shown.stdout.split()
    assert path == "/locks/job" and int(token) > 0

    client = pulsar.Client(pulsar_endpoint.service_url, logger=QUIET)
    try:
        with MetadataStore(client, topic, admin_url=pulsar_endpoint.admin_url) as store:
            service = CoordinationService[str](store)
            held = service.acquire_lock("/locks/job", "test").result(60)  # released by the CLI
            busy = _cli(
                pulsar_endpoint, "meta", "--topic", topic, "lock", "/locks/job", "--wait", "1",
                "--", "true",
            )  # fmt: skip
            assert busy.returncode == 1
            assert "not taken within 1.0s" in busy.stderr
            held.release().result(60)
            service.close()
    finally:
        client.close()
    again = _cli(pulsar_endpoint, "meta", "--topic", topic, "lock", "/locks/job", "--", "true")
    assert again.returncode == 0, again.stderr


def test_elect_leads_until_stopped_then_resigns(pulsar_endpoint: PulsarEndpoint) -> None:
    topic = unique_topic("meta-elect")
    candidate = subprocess.Popen(
        [sys.executable, "-m", "pulsar_state.cli", "meta", "--topic", topic, "elect", "/e", "one"],
        env=_env(pulsar_endpoint),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = pulsar.Client(pulsar_endpoint.service_url, logger=QUIET)
    try:
        assert candidate.stdout is not None
        assert candidate.stdout.readline().strip() == "one"  # printed once elected
        with MetadataStore(client, topic, admin_url=pulsar_endpoint.admin_url) as store:
            service = CoordinationService[str](store)
            assert service.read_lock("/e").result(60) == "one"
            pending = service.become_leader("/e", "two")
            candidate.send_signal(signal.SIGTERM)
            assert candidate.wait(60) == 0
            assert pending.result(60).content == "two"  # the CLI resigned on SIGTERM
            wait_until(lambda: service.read_lock("/e").result(60) == "two", timeout_s=60)
            service.close()
    finally:
        if candidate.poll() is None:
            candidate.kill()
        client.close()
