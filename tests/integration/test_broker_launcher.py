"""The embedded standalone launcher: start, reuse, stop, clear errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from harness import PulsarEndpoint

from pulsar_state.deploy.errors import PortInUseError
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.deploy.standalone_config import StandalonePorts


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    members.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return members


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_state.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_running_session_broker_is_reused(pulsar_endpoint: PulsarEndpoint) -> None:
    if pulsar_endpoint.broker is None:
        pytest.skip(f"the session broker is a {pulsar_endpoint.kind}, not the embedded one")
    before = pulsar_endpoint.broker.require_running()
    again = pulsar_endpoint.broker.start()
    assert again.pid == before.pid
    assert again.service_url == pulsar_endpoint.service_url
    clusters = requests.get(f"{pulsar_endpoint.admin_url}/admin/v2/clusters", timeout=10)
    assert clusters.json() == ["standalone"]


def test_cli_start_status_stop_leaves_no_process(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    started = _cli("broker", "start", "--no-functions", "--data-dir", str(data_dir))
    assert started.returncode == 0, started.stderr
    lines = dict(line.split("=", 1) for line in started.stdout.strip().splitlines())
    assert lines["service_url"].startswith("pulsar://127.0.0.1:")
    assert lines["admin_url"].startswith("http://127.0.0.1:")
    pid = StandaloneBroker(data_dir=data_dir).require_running().pid
    try:
        status = _cli("broker", "status", "--data-dir", str(data_dir))
        assert status.returncode == 0, status.stdout
        assert f"pid={pid}" in status.stdout and "ready=true" in status.stdout
        # loopback only
        for url in (lines["service_url"], lines["admin_url"]):
            assert "127.0.0.1" in url
    finally:
        stopped = _cli("broker", "stop", "--data-dir", str(data_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert _group_members(pid) == []
    assert _cli("broker", "status", "--data-dir", str(data_dir)).returncode == 1
    assert "no standalone" in _cli("broker", "stop", "--data-dir", str(data_dir)).stdout


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        free = StandalonePorts.pick()
        ports = StandalonePorts(broker=taken, web=free.web, worker=free.worker)
        (tmp_path / "ports.json").write_text(ports.to_json())
        broker = StandaloneBroker(data_dir=tmp_path, functions=False)
        with pytest.raises(PortInUseError) as info:
            broker.start()
    assert info.value.port == taken
    assert "broker service" in str(info.value)
    assert broker.status() is None
