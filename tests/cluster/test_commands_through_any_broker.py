"""Issue #27: ``pulsar-state sink run``, ``functions querystate`` and ``serve``
through the broker that does not own their topics, with a token.

Each command is given the service URL and the admin URL of the broker that
does not own the topics it reads and protects, and the super-user's token; its
topic-level admin calls (a topic's existence, its policies) are answered with a
307 to the owner and must be followed with the token. The brokers run no
functions worker of Pulsar's (functions run on ``pulsar-state worker``), so
the function lookup of ``querystate`` and ``serve`` is answered 409 and they
read the kit's default state topic.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cluster_access import QUIET, bearer, created_on_one
from harness import pulsar_state_cli, unique_name
from postgres_server import sql_rows
from token_broker import TokenBroker

from pulsar_state import PulsarMap
from pulsar_state.cluster.endpoint import AdminEndpoint
from pulsar_state.functions.queryable_state import default_state_topic
from pulsar_state.testing import EmbeddedCluster

pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True)
class FunctionState:
    """A function's state written to its default state topic, and the broker that does
    not own that topic (its index)."""

    name: str
    elsewhere: int


def _env(cluster: EmbeddedCluster, broker: int) -> dict[str, str]:
    """The CLI's variables naming broker ``broker`` (service and admin URL) and the token."""
    return {
        "PULSAR_SERVICE_URL": cluster.service_urls[broker],
        "PULSAR_ADMIN_URL": cluster.admin_urls[broker],
        "PULSAR_AUTH_TOKEN": cluster.superuser_token or "",
    }


@pytest.fixture(scope="module")
def function_state(local_cluster: EmbeddedCluster) -> FunctionState:
    """A counter and a text in a function's default state topic (as the stateful kit
    keeps them), and the broker that does not own the topic."""
    name = unique_name("qs-cluster")
    topic = default_state_topic("public", "default", name)
    first = TokenBroker.of(local_cluster, 0)
    made = first.admin("PUT", f"/admin/v2/persistent/public/default/{name}-pss-state")
    assert made.status_code in (200, 204), made.text
    owner = first.owner_index(local_cluster, f"persistent/public/default/{name}-pss-state")
    # written through the owner: the setup takes no redirect
    client = local_cluster.client(operation_timeout_seconds=60, logger=QUIET)
    endpoint = AdminEndpoint(url=local_cluster.admin_urls[owner], headers=bearer(local_cluster))
    try:
        with PulsarMap[str, Any](client, topic, admin=endpoint) as state:
            state.put_all({"counter/apples": 5, "state/greeting": {"s": "hello"}}).result(60)
    finally:
        client.close()
    return FunctionState(name=name, elsewhere=1 - owner)


def test_querystate_through_the_non_owner(
    local_cluster: EmbeddedCluster, function_state: FunctionState
) -> None:
    env = _env(local_cluster, function_state.elsewhere)
    fn = ["--tenant", "public", "--namespace", "default", "--name", function_state.name]

    def querystate(key: str) -> subprocess.CompletedProcess[str]:
        return pulsar_state_cli(
            "functions", "querystate", *fn, "--key", key, "--output", "json", env=env
        )

    apples = querystate("apples")
    assert apples.returncode == 0, apples.stderr[-2000:]
    assert json.loads(apples.stdout)["numberValue"] == 5
    greeting = querystate("greeting")
    assert greeting.returncode == 0, greeting.stderr[-2000:]
    assert json.loads(greeting.stdout)["stringValue"] == "hello"
    missing = querystate("nope")
    assert missing.returncode == 3 and "doesn't exist" in missing.stderr, missing.stderr


@pytest.fixture
def server(local_cluster: EmbeddedCluster, function_state: FunctionState) -> Iterator[str]:
    """``pulsar-state serve --port 0`` through the non-owner with the token; its base URL."""
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "pulsar-state"), "serve", "--port", "0"],
        env={**os.environ, **_env(local_cluster, function_state.elsewhere)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()  # "serving ... on http://127.0.0.1:PORT"
        found = re.search(r"http://127\.0\.0\.1:(\d+)", first)
        assert found, (first, proc.stderr.read() if proc.poll() is not None else "")
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()


def test_serve_through_the_non_owner(function_state: FunctionState, server: str) -> None:
    base = f"{server}/admin/v3/functions/public/default/{function_state.name}/state"
    apples = requests.get(f"{base}/apples", timeout=120)
    assert apples.status_code == 200, apples.text
    assert apples.json()["numberValue"] == 5
    missing = requests.get(f"{base}/nope", timeout=120)
    assert missing.status_code == 404
    assert missing.json() == {"reason": "key 'nope' doesn't exist."}


def test_sink_run_through_the_non_owner(local_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    topic, elsewhere = created_on_one(local_cluster, "sink-cluster-in")
    # the sink's config record, on the same owner: protected through the other broker
    for _ in range(20):
        metadata, meta_elsewhere = created_on_one(local_cluster, "sink-cluster-meta")
        if meta_elsewhere == elsewhere:
            break
    assert meta_elsewhere == elsewhere, "no metadata topic on the input's owner in 20 tries"
    broker = local_cluster.admin_urls.index(elsewhere)
    client = local_cluster.client(broker, operation_timeout_seconds=60, logger=QUIET)
    try:
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(json.dumps({"n": i}).encode(), partition_key=f"k{i % 4}")
        producer.close()
    finally:
        client.close()
    database = str(tmp_path / "sink.db")
    config = tmp_path / "sink.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "serviceUrl": local_cluster.service_urls[broker],
                "adminUrl": elsewhere,
                "topic": topic,
                "subscription": "cluster-sink",
                "database": database,
                "table": "orders",
                "name": "cluster-sink",
                "metadataTopic": metadata,
            }
        )
    )
    token = local_cluster.superuser_token or ""
    run = ["sink", "run", "--config", str(config), "--max-idle-s", "3", "--auth-token", token]
    done = pulsar_state_cli(*run, env={}, timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "written 10" in done.stdout, done.stdout
    # the last record of each key
    assert sql_rows(database, "orders") == {f"k{i % 4}": json.dumps({"n": i}) for i in range(6, 10)}
    # the config record landed in the metadata topic, protected through the non-owner
    reader = local_cluster.client(operation_timeout_seconds=60, logger=QUIET)
    try:
        endpoint = AdminEndpoint(url=elsewhere, headers=bearer(local_cluster))
        with PulsarMap[str, Any](reader, metadata, admin=endpoint) as records:
            record = records.get("sink/cluster-sink", latest=True).result(60)
    finally:
        reader.close()
    assert record is not None and record["config"]["table"] == "orders"
