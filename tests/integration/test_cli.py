"""``pulsar-state map`` and ``meta`` as a user runs them: a process each, on the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness import PulsarEndpoint, unique_topic


def _cli(ep: PulsarEndpoint, *args: str) -> subprocess.CompletedProcess[str]:
    # the URLs come from the environment, as the README documents
    env = {**os.environ, "PULSAR_SERVICE_URL": ep.service_url, "PULSAR_ADMIN_URL": ep.admin_url}
    return subprocess.run(
        [sys.executable, "-m", "pulsar_state.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_map_commands(pulsar_endpoint: PulsarEndpoint, tmp_path: Path) -> None:
    topic = unique_topic("cli-map")
    put = _cli(pulsar_endpoint, "map", "--topic", topic, "put", "feature-x", '{"enabled": true}')
    assert put.returncode == 0, put.stderr
    assert ":" in put.stdout  # the write's position
    assert _cli(pulsar_endpoint, "map", "--topic", topic, "put", "n", "41").returncode == 0

    got = _cli(pulsar_endpoint, "map", "--topic", topic, "get", "feature-x")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"enabled": True}

    listed = _cli(pulsar_endpoint, "map", "--topic", topic, "ls")
    assert listed.stdout.split() == ["feature-x", "n"]

    out = tmp_path / "dump.jsonl"
    dumped = _cli(pulsar_endpoint, "map", "--topic", topic, "dump", "-o", str(out))
    assert dumped.returncode == 0, dumped.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [
        {"key": "feature-x", "value": {"enabled": True}},
        {"key": "n", "value": 41},
    ]

    deleted = _cli(pulsar_endpoint, "map", "--topic", topic, "delete", "n")
    assert json.loads(deleted.stdout) == 41
    missing = _cli(pulsar_endpoint, "map", "--topic", topic, "get", "n")
    assert missing.returncode == 3  # not found, as a missing topic or function
    assert "not found" in missing.stderr


def test_map_cli_refuses_bad_input_without_writing(pulsar_endpoint: PulsarEndpoint) -> None:
    topic = unique_topic("cli-bad")
    bad = _cli(pulsar_endpoint, "map", "--topic", topic, "put", "k", "not json")
    assert bad.returncode == 2
    assert "not JSON" in bad.stderr
    assert "Traceback" not in bad.stderr
    reserved = _cli(pulsar_endpoint, "map", "--topic", topic, "put", "__pss__/commit", "1")
    assert reserved.returncode != 0
    assert "Traceback" not in reserved.stderr
    assert _cli(pulsar_endpoint, "map", "--topic", topic, "ls").stdout == ""


def test_cli_unreachable_broker_is_a_clear_error(pulsar_endpoint: PulsarEndpoint) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pulsar_state.cli",
            "map",
            "--topic",
            unique_topic("cli-nowhere"),
            "--admin-url",
            "http://127.0.0.1:1",
            "--timeout",
            "5",
            "ls",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "Error" in done.stderr
    assert "Traceback" not in done.stderr


def test_meta_commands(pulsar_endpoint: PulsarEndpoint) -> None:
    topic = unique_topic("cli-meta")
    put = _cli(pulsar_endpoint, "meta", "--topic", topic, "put", "/a/b", "hello", "--version", "-1")
    assert put.returncode == 0, put.stderr
    stale = _cli(pulsar_endpoint, "meta", "--topic", topic, "put", "/a/b", "x", "--version", "7")
    assert stale.returncode != 0
    assert "version" in stale.stderr.lower()
    assert "Traceback" not in stale.stderr
    got = _cli(pulsar_endpoint, "meta", "--topic", topic, "get", "/a/b")
    assert got.returncode == 0, got.stderr
    assert "hello" in got.stdout
    children = _cli(pulsar_endpoint, "meta", "--topic", topic, "ls", "/a")
    assert children.stdout.split() == ["b"]
