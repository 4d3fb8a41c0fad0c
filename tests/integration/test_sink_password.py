"""The SQL sink's database password, checked by a server that enforces it.

The test PostgreSQL trusts loopback connections, so a password handed over
wrongly (or not at all) would go unnoticed there. Here one role on one database
must authenticate with SCRAM (a ``pg_hba.conf`` line ahead of the trust ones),
and the sink gets the password the ways users give it: the function secret
``databasePassword`` of a deployed ``SinkFunction``, and
``PULSAR_STATE_DATABASE_PASSWORD`` for ``pulsar-state sink run``. A wrong
password fails clearly and loses nothing: the records wait for the right one.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import psycopg
import pulsar
import pytest
import yaml
from harness import PulsarEndpoint, unique_name, unique_topic, wait_until
from postgres_server import PostgresServer, sql_rows

from pulsar_state.deploy.functions_deploy import _config_dir
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli


@dataclass
class GuardedDatabase:
    url: str  # no password in it
    password: str

    @property
    def url_with_password(self) -> str:
        scheme, rest = self.url.split("://", 1)
        user, host = rest.split("@", 1)
        return f"{scheme}://{user}:{self.password}@{host}"


@pytest.fixture
def guarded(postgres_server: PostgresServer) -> Iterator[GuardedDatabase]:
    """A database whose owner must give its password (SCRAM) over TCP."""
    if postgres_server.data_dir is None:
        pytest.skip("needs the tests' own PostgreSQL (to require a password in pg_hba.conf)")
    suffix = uuid.uuid4().hex[:10]
    role, name, password = f"sink_{suffix}", f"pw_{suffix}", secrets.token_urlsafe(16)
    hba = postgres_server.data_dir / "data" / "pg_hba.conf"
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute("SET password_encryption = 'scram-sha-256'")
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        admin.execute(f"CREATE DATABASE {name} OWNER {role}")
        # first matching line wins: this one comes before initdb's trust lines
        hba.write_text(f"host {name} {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        admin.execute("SELECT pg_reload_conf()")
    base = postgres_server.url.rsplit("@", 1)[1].rsplit("/", 1)[0]
    yield GuardedDatabase(url=f"postgresql://{role}@{base}/{name}", password=password)


def test_the_server_really_asks_for_the_password(guarded: GuardedDatabase) -> None:
    wait_until(  # pg_reload_conf() is asynchronous
        lambda: _refused(guarded.url),
        timeout_s=30,
        message="the server refusing the role without a password",
    )
    with psycopg.connect(guarded.url_with_password) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def _refused(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        return "password" in str(exc)
    return False


@pytest.mark.timeout(400)
def test_a_deployed_sink_takes_the_password_from_its_secrets(
    pulsar_endpoint: PulsarEndpoint, client: pulsar.Client, guarded: GuardedDatabase
) -> None:
    wait_until(lambda: _refused(guarded.url), timeout_s=30, message="password required")
    admin = PulsarAdminCli(admin_url=pulsar_endpoint.admin_url)
    name = unique_name("sinkpw")
    fqn = ("public", "default", name)
    topic = f"persistent://public/default/{name}-in"
    entry = Path(str(resources.files("pulsar_state.connectors") / "sink_entry.py"))
    # deployed as users do: the shipped config (whose subscriptionPosition:
    # Earliest keeps the records sent below, before the instance subscribed),
    # its name, input and user config overridden on the command line
    admin.create_function(
        fqn=fqn,
        config_file=_config_dir() / "sql-sink.yaml",
        py=entry,
        inputs=[topic],
        extra=[
            "--user-config",
            json.dumps({"database": guarded.url, "table": "kv"}),
            # Pulsar's default secrets provider hands the value itself to get_secret
            "--secrets",
            json.dumps({"databasePassword": guarded.password}),
        ],
    )
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"v1", partition_key="k1")
        producer.send(b"v2", partition_key="k2")
        producer.close()
        wait_until(
            lambda: sql_rows(guarded.url_with_password, "kv") == {"k1": "v1", "k2": "v2"},
            timeout_s=180,
            interval_s=1,
            message="rows written with the password from the function's secrets",
        )
        # and the password is nowhere in the recorded function config
        tenant, namespace, fn = fqn
        recorded = admin.run_json(
            "functions", "get", "--tenant", tenant, "--namespace", namespace, "--name", fn
        )
        assert guarded.password not in json.dumps(recorded.get("userConfig"))
        # the command line's input replaced the shipped one; its position stayed
        assert set(recorded["inputSpecs"]) == {topic}, recorded["inputSpecs"]
        assert recorded["subscriptionPosition"] == "Earliest", recorded
    finally:
        admin.delete_function(fqn)


def _sink_run(
    config: Path, password: str, *, timeout_s: float, idle_s: float | None = None
) -> subprocess.CompletedProcess[str]:
    args = ["--max-idle-s", str(idle_s)] if idle_s is not None else []
    return subprocess.run(
        [sys.executable, "-m", "pulsar_state.cli", "sink", "run", "--config", str(config), *args],
        env={**os.environ, "PULSAR_STATE_DATABASE_PASSWORD": password},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.timeout(300)
def test_sink_run_with_a_wrong_password_fails_clearly_and_loses_nothing(
    pulsar_endpoint: PulsarEndpoint,
    client: pulsar.Client,
    guarded: GuardedDatabase,
    tmp_path: Path,
) -> None:
    wait_until(lambda: _refused(guarded.url), timeout_s=30, message="password required")
    topic = unique_topic("sinkpw-run")
    config = tmp_path / "sink.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "serviceUrl": pulsar_endpoint.service_url,
                "adminUrl": pulsar_endpoint.admin_url,
                "topic": topic,
                "subscription": "pw",
                "database": guarded.url,
                "table": "kv",
            }
        )
    )
    consumer = client.subscribe(topic, "pw")  # the sink's subscription exists before the sends
    consumer.close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(f"v{i}".encode(), partition_key=f"k{i}")
    producer.close()

    wrong = _sink_run(config, "not-the-password", timeout_s=120, idle_s=5)
    assert wrong.returncode == 1, (wrong.stdout, wrong.stderr[-2000:])
    assert "password authentication failed" in wrong.stderr, wrong.stderr[-2000:]
    assert "Traceback" not in wrong.stderr
    assert "not-the-password" not in wrong.stderr + wrong.stdout

    right = _sink_run(config, guarded.password, timeout_s=180, idle_s=5)
    assert right.returncode == 0, right.stderr[-2000:]
    assert sql_rows(guarded.url_with_password, "kv") == {"k0": "v0", "k1": "v1", "k2": "v2"}
