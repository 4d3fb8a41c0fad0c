"""The demo's worker processes: credentials in their environment, a dead one reported at once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.demo_workers import DemoWorkers, _auth_env
from pulsar_state.errors import OperationTimeoutError, PulsarStateError


def _workers(tmp_path: Path, auth: ClusterAuth | None = None) -> DemoWorkers:
    return DemoWorkers(
        group="demo-g",
        service_url="pulsar://127.0.0.1:1",
        admin_url="http://127.0.0.1:1",
        auth=auth or ClusterAuth(),
        logs_dir=tmp_path,
        worker_ids=("w1",),
    )


def test_the_token_goes_in_the_environment_not_on_the_command_line(tmp_path: Path) -> None:
    auth = ClusterAuth(auth_token="secret-jwt", tls_allow_insecure=True)
    command = _workers(tmp_path, auth).command("w1")
    assert "secret-jwt" not in " ".join(command)
    assert command[command.index("--group") + 1] == "demo-g"
    assert command[command.index("--worker-id") + 1] == "w1"
    assert _auth_env(auth) == {
        "PULSAR_AUTH_TOKEN": "secret-jwt",
        "PULSAR_TLS_ALLOW_INSECURE": "true",
    }
    assert _auth_env(ClusterAuth()) == {}


class _Exits(DemoWorkers):
    def command(self, worker_id: str) -> list[str]:
        return [sys.executable, "-c", "import sys; print('cannot reach the broker'); sys.exit(3)"]


def test_a_worker_that_exits_fails_the_wait_at_once_with_its_log(tmp_path: Path) -> None:
    workers = _Exits(
        group="demo-g",
        service_url="pulsar://127.0.0.1:1",
        admin_url="http://127.0.0.1:1",
        auth=ClusterAuth(),
        logs_dir=tmp_path,
        worker_ids=("w1",),
    )
    workers.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(PulsarStateError) as caught:
            workers.wait_for(lambda: None, what="never", timeout_s=60, interval_s=0.1)
        assert time.monotonic() - t0 < 30
    finally:
        workers.stop()
    message = str(caught.value)
    assert "w1" in message and "code 3" in message
    assert str(tmp_path / "demo-g-w1.log") in message
    assert "cannot reach the broker" in message


def test_a_wait_that_times_out_names_the_workers_logs(tmp_path: Path) -> None:
    workers = _workers(tmp_path)  # not started: nothing to exit
    with pytest.raises(OperationTimeoutError) as caught:
        workers.wait_for(
            lambda: None, what="the counts", timeout_s=0.2, interval_s=0.05, seen=lambda: "0"
        )
    message = str(caught.value)
    assert message.startswith("the counts: not within 0s (0)")
    assert str(tmp_path / "demo-g-w1.log") in message
