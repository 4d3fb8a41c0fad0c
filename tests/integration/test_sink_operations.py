"""``pulsar-state sink run --metrics-port``: Prometheus metrics and a health endpoint.

The runner is the installed command, as operators run it, on the real broker;
its database is SQLite, made to refuse writes for a while by a second
connection that holds the database's write lock (the sink retries in place).
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pulsar
import requests
import yaml
from harness import PulsarEndpoint, unique_topic, wait_until
from postgres_server import sql_rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _health(port: int) -> tuple[int, str] | None:
    try:
        resp = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    except requests.ConnectionError:
        return None
    return resp.status_code, resp.text


def _wait_health(proc: subprocess.Popen[str], port: int, code: int, timeout_s: float) -> None:
    """Until ``/healthz`` answers ``code``; a runner that exited fails at once, with its stderr."""

    def answered() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the runner exited ({proc.returncode}): {proc.stderr.read()}")
        return (_health(port) or (0, ""))[0] == code

    try:
        wait_until(answered, timeout_s=timeout_s, message=f"/healthz answering {code}")
    except AssertionError as exc:
        if isinstance(exc.__cause__, RuntimeError):
            raise exc.__cause__ from None
        raise


def test_sink_run_serves_metrics_and_health_that_follows_the_database(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, tmp_path: Path
) -> None:
    topic = unique_topic("sink-ops")
    database = str(tmp_path / "sink.db")
    config = tmp_path / "sink.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "serviceUrl": pulsar_endpoint.service_url,
                "adminUrl": pulsar_endpoint.admin_url,
                "topic": topic,
                "subscription": "ops",
                "database": database,
                "table": "orders",
            }
        )
    )
    port = _free_port()
    producer = client.create_producer(topic, batching_enabled=False)
    command = [sys.executable, "-m", "pulsar_state.cli", "sink", "run", "--config", str(config)]
    proc = subprocess.Popen(
        [*command, "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # healthy once subscribed and consuming
        _wait_health(proc, port, 200, timeout_s=120)
        assert _health(port) == (200, "consuming\n")
        producer.send(json.dumps({"n": 1}).encode(), partition_key="a")
        wait_until(
            lambda: sql_rows(database, "orders") == {"a": '{"n": 1}'},
            timeout_s=60,
            message="the first record written",
        )
        metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'pulsar_state_sink_records_total{outcome="written"} 1.0' in metrics
        assert "pulsar_state_sink_healthy 1.0" in metrics

        # the database refuses writes (locked by another connection): unhealthy
        blocker = sqlite3.connect(database, timeout=0.1, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            producer.send(json.dumps({"n": 2}).encode(), partition_key="b")
            _wait_health(proc, port, 503, timeout_s=90)  # while writes fail
            status = _health(port)
            assert status is not None and "writes are failing" in status[1], status
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        # the retried write lands, and the runner is healthy again
        wait_until(
            lambda: sql_rows(database, "orders").get("b") == '{"n": 2}',
            timeout_s=90,
            message="the held-back record written after the lock was released",
        )
        _wait_health(proc, port, 200, timeout_s=30)
    finally:
        producer.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "written 2" in out
    # stopped: nothing answers any more
    assert _health(port) is None
