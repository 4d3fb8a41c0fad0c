"""Every entry point speaks auth: ``sink run``, ``map`` and the demo's steps on a JWT broker.

This module starts its own standalone with token authentication and
authorization (as ``tests/faults/test_security.py`` does, on another data
directory and free ports; no functions worker), so the shared broker is never
restarted. The commands run as installed, with the options spelled as
``pulsar-admin`` spells them and with the environment variables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest
import yaml
from harness import session_data_dir, unique_name, unique_topic
from postgres_server import sql_rows

from pulsar_state import PulsarMap
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.demo import _shared_state_demo
from pulsar_state.deploy.demo_workers import workers_demo
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.deploy.token_auth import TokenAuthority

CLI = [sys.executable, "-m", "pulsar_state.cli"]


@dataclass
class Secured:
    service_url: str
    admin_url: str
    authority: TokenAuthority

    @property
    def token(self) -> str:
        return self.authority.superuser_token


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    base = str(session_data_dir())
    authority = TokenAuthority()
    broker = StandaloneBroker(
        data_dir=Path(base + "-auth-entry"),
        functions=False,
        broker_settings=authority.broker_settings(),
        admin_token=authority.superuser_token,
    )
    broker.stop()
    info = broker.start(fresh=True)
    try:
        yield Secured(info.service_url, info.admin_url, authority)
    finally:
        broker.stop()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULSAR_AUTH", "PULSAR_TLS"))}
    return {**env, **extra}


def _run(
    args: list[str], env: dict[str, str], timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def test_sink_run_authenticates_to_the_broker_and_the_admin_api(
    secured: Secured, tmp_path: Path
) -> None:
    topic = unique_topic("auth-sink")
    database = str(tmp_path / "sink.db")
    config = tmp_path / "sink.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "serviceUrl": secured.service_url,
                "adminUrl": secured.admin_url,
                "topic": topic,
                "subscription": "auth",
                "database": database,
                "table": "orders",
                # the config record: a state topic the runner protects through the admin API
                "metadataTopic": unique_topic("auth-sink-meta"),
            }
        )
    )
    client = pulsar.Client(
        secured.service_url, authentication=pulsar.AuthenticationToken(secured.token)
    )
    try:
        client.create_producer(topic).send(json.dumps({"n": 1}).encode(), partition_key="a")
    finally:
        client.close()
    run = ["sink", "run", "--config", str(config), "--max-idle-s", "3"]

    refused = _run(run, _env(), timeout_s=120)  # no credentials: a clear refusal
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert not Path(database).exists() or sql_rows(database, "orders") == {}

    done = _run([*run, "--auth-token", secured.token], _env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "written 1" in done.stdout
    assert sql_rows(database, "orders") == {"a": '{"n": 1}'}


def test_map_takes_the_auth_plugin_and_params_as_pulsar_admin_spells_them(
    secured: Secured, tmp_path: Path
) -> None:
    topic = unique_topic("auth-map")
    client = pulsar.Client(
        secured.service_url, authentication=pulsar.AuthenticationToken(secured.token)
    )
    try:
        with PulsarMap[str, int](
            client,
            topic,
            admin=ClusterAuth(auth_token=secured.token).admin_endpoint(secured.admin_url),
        ) as m:
            m.put("k", 7).result(60)
    finally:
        client.close()
    token_file = tmp_path / "token"
    token_file.write_text(secured.token + "\n")
    urls = ["--service-url", secured.service_url, "--admin-url", secured.admin_url]
    by_options = _run(
        [
            "map", "--topic", topic, *urls,
            "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "--auth-params", f"file://{token_file}",
            "get", "k",
        ],
        _env(),
    )  # fmt: skip
    assert by_options.returncode == 0, by_options.stderr[-2000:]
    assert json.loads(by_options.stdout) == 7
    by_env = _run(
        ["map", "--topic", topic, *urls, "get", "k"],
        _env(PULSAR_AUTH_PLUGIN="token", PULSAR_AUTH_PARAMS=f"token:{secured.token}"),
    )
    assert by_env.returncode == 0, by_env.stderr[-2000:]
    assert json.loads(by_env.stdout) == 7
    unauthenticated = _run(["map", "--topic", topic, *urls, "get", "k"], _env())
    assert unauthenticated.returncode != 0
    assert "Traceback" not in unauthenticated.stderr, unauthenticated.stderr[-2000:]


def test_the_demo_shared_state_step_runs_with_auth(secured: Secured) -> None:
    _shared_state_demo(
        secured.service_url,
        secured.admin_url,
        "auth",
        ClusterAuth(auth_token=secured.token),
    )


# three worker processes, a kill and a move, on a 2-core host
@pytest.mark.timeout(600)
def test_the_demo_workers_step_runs_with_auth(
    secured: Secured, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ``pulsar-state worker`` processes get the demo's token in their environment
    (not on their command line); the word count's state topic is protected by the demo."""
    workers_demo(
        secured.service_url,
        secured.admin_url,
        unique_name("auth")[-12:],
        auth=ClusterAuth(auth_token=secured.token),
    )
    out = capsys.readouterr().out
    assert out.count("exact=True") == 2, out
    assert out.count(" exit 0") == 2, out  # both survivors stopped cleanly on SIGTERM
