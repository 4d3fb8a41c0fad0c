"""``pulsar-state meta``: the Stat's fencing token, sequential puts and
recursive deletes, as a user runs them (a process each, on the real broker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness import PulsarEndpoint, unique_topic


def _cli(ep: PulsarEndpoint, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}
    return subprocess.run(
        [sys.executable, "-m", "pulsar_state.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_stat_shows_the_fencing_token(pulsar_endpoint: PulsarEndpoint) -> None:
    topic = unique_topic("cli-meta-stat")
    _ok(_cli(pulsar_endpoint, "meta", "--topic", topic, "put", "/s", "one"))
    _ok(_cli(pulsar_endpoint, "meta", "--topic", topic, "put", "/s", "two"))
    lines = _ok(_cli(pulsar_endpoint, "meta", "--topic", topic, "get", "/s", "--stat")).splitlines()
    assert lines[0] == "two"
    stat = json.loads(lines[1])
    assert stat["version"] == 1 and stat["ephemeral"] is False and stat["owner"] is None
    assert isinstance(stat["token"], int) and stat["token"] > 0


def test_sequential_put_and_recursive_delete(pulsar_endpoint: PulsarEndpoint) -> None:
    topic = unique_topic("cli-meta-seq")
    made = [
        _ok(
            _cli(
                pulsar_endpoint, "meta", "--topic", topic, "put", "/q/job-", f"{i}", "--sequential"
            )
        ).strip()
        for i in range(2)
    ]
    assert made == ["/q/job-0000000001", "/q/job-0000000002"]
    _ok(_cli(pulsar_endpoint, "meta", "--topic", topic, "put", "/q/deep/x", "y"))
    listed = _ok(_cli(pulsar_endpoint, "meta", "--topic", topic, "ls", "/q")).split()
    assert listed == ["deep", "job-0000000001", "job-0000000002"]
    plain = _cli(pulsar_endpoint, "meta", "--topic", topic, "rm", "/q")
    assert plain.returncode == 3 and "does not exist" in plain.stderr  # /q itself is no node
    deleted = _ok(_cli(pulsar_endpoint, "meta", "--topic", topic, "delete", "--recursive", "/q"))
    assert deleted.splitlines() == ["/q/deep/x", "/q/job-0000000001", "/q/job-0000000002"]
    assert _ok(_cli(pulsar_endpoint, "meta", "--topic", topic, "ls", "/q")).split() == []


def test_bad_input_is_a_usage_error(pulsar_endpoint: PulsarEndpoint) -> None:
    topic = unique_topic("cli-meta-bad")
    for args in (
        ("put", "/q/", "x", "--sequential"),  # a sequential prefix ending in '/'
        ("put", "/q/a-", "x", "--sequential", "--version", "0"),
        ("rm", "--recursive", "/"),
    ):
        bad = _cli(pulsar_endpoint, "meta", "--topic", topic, *args)
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        assert "Traceback" not in bad.stderr and "No such option" not in bad.stderr
