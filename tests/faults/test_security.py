"""Security: a standalone with JWT token authentication and authorization.

Roles: ``admin`` (super-user), ``reader`` (consume only on public/default),
``stranger`` (no permission). A role without produce permission gets a clear
:class:`PermissionDeniedError` and changes nothing; a consume-only role can
read, latest reads included; an unauthenticated client is refused.
"""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pulsar
import pytest
import requests
from harness import pulsar_state_cli, session_data_dir, unique_topic

from pulsar_state import (
    AdminEndpoint,
    PermissionDeniedError,
    PulsarMap,
    StateConfig,
    StateTopicError,
)
from pulsar_state.cluster.admin import topic_path
from pulsar_state.deploy.standalone import StandaloneBroker
from pulsar_state.deploy.token_auth import TokenAuthority
from pulsar_state.functions.metadata_manager import FunctionMetadataManager

NAMESPACE = "public/default"


@dataclass
class SecuredBroker:
    service_url: str
    admin_url: str
    authority: TokenAuthority

    def client(self, role: str | None) -> pulsar.Client:
        auth = pulsar.AuthenticationToken(self.authority.token(role)) if role else None
        return pulsar.Client(
            self.service_url,
            authentication=auth,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )

    def headers(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.authority.token(role)}"}

    def endpoint(self, role: str) -> AdminEndpoint:
        return AdminEndpoint(url=self.admin_url, headers=self.headers(role))


@pytest.fixture(scope="module")
def secured() -> Iterator[SecuredBroker]:
    base = str(session_data_dir())
    authority = TokenAuthority()
    broker = StandaloneBroker(
        data_dir=Path(base + "-auth"),
        functions=False,
        broker_settings=authority.broker_settings(),
        admin_token=authority.superuser_token,
    )
    broker.stop()
    info = broker.start(fresh=True)
    try:
        grant = requests.post(
            f"{info.admin_url}/admin/v2/namespaces/{NAMESPACE}/permissions/reader",
            json=["consume"],
            headers={"Authorization": f"Bearer {authority.superuser_token}"},
            timeout=30,
        )
        assert grant.status_code in (200, 204), grant.text
        yield SecuredBroker(info.service_url, info.admin_url, authority)
    finally:
        broker.stop()


@pytest.fixture
def seeded(secured: SecuredBroker) -> Iterator[str]:
    """A protected state topic holding {"a": 1}, written by the super-user."""
    topic = unique_topic("sec", NAMESPACE)
    client = secured.client("admin")
    try:
        with PulsarMap[str, int](client, topic, admin=secured.endpoint("admin")) as m:
            m.put("a", 1).result(60)
        yield topic
    finally:
        client.close()


def _items(secured: SecuredBroker, topic: str) -> dict[str, int]:
    client = secured.client("admin")
    try:
        with PulsarMap[str, int](client, topic, admin=secured.endpoint("admin")) as m:
            return m.items(latest=True).result(60)
    finally:
        client.close()


def test_a_consume_only_role_reads_but_cannot_write(secured: SecuredBroker, seeded: str) -> None:
    client = secured.client("reader")
    config = StateConfig(ensure_retention=False)  # protecting the topic is an admin's job
    try:
        with PulsarMap[str, int](client, seeded, config=config) as m:
            assert m.get("a", latest=True).result(60) == 1
            with pytest.raises(PermissionDeniedError, match="produce"):
                m.put("a", 2).result(60)
            with pytest.raises(PermissionDeniedError, match="produce"):
                m.update("b", lambda v: 5).result(60)
            assert m.items(latest=True).result(60) == {"a": 1}
    finally:
        client.close()
    assert _items(secured, seeded) == {"a": 1}  # nothing changed


def test_a_role_without_admin_rights_is_told_how_to_open(
    secured: SecuredBroker, seeded: str
) -> None:
    client = secured.client("reader")
    try:
        with pytest.raises(PermissionDeniedError, match="ensure_retention=False"):
            PulsarMap[str, int](client, seeded, admin=secured.endpoint("reader"))
    finally:
        client.close()


def test_a_role_without_permissions_and_an_anonymous_client_are_refused(
    secured: SecuredBroker, seeded: str
) -> None:
    config = StateConfig(ensure_retention=False, operation_timeout_s=10)
    client = secured.client("stranger")
    try:
        with pytest.raises(PermissionDeniedError, match="consume"):
            PulsarMap[str, int](client, seeded, config=config)
    finally:
        client.close()
    # Without a token the C++ client does not report the broker's refusal of the
    # connection; it retries until its operation timeout: still a clear error.
    anonymous = secured.client(None)
    try:
        with pytest.raises(StateTopicError, match="cannot read"):
            PulsarMap[str, int](anonymous, seeded, config=config)
    finally:
        anonymous.close()
    assert _items(secured, seeded) == {"a": 1}


def _cli(secured: SecuredBroker, role: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``pulsar-state`` as a user runs it, authenticated as ``role`` (env PULSAR_AUTH_TOKEN)."""
    env = {
        "PULSAR_SERVICE_URL": secured.service_url,
        "PULSAR_ADMIN_URL": secured.admin_url,
        "PULSAR_AUTH_TOKEN": secured.authority.token(role),
    }
    return pulsar_state_cli(*args, env=env)


def test_the_cli_reads_as_a_consume_only_role(secured: SecuredBroker, seeded: str) -> None:
    got = _cli(secured, "reader", "map", "--topic", seeded, "get", "a")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == 1
    listed = _cli(secured, "reader", "map", "--topic", seeded, "ls")
    assert (listed.returncode, listed.stdout.split()) == (0, ["a"]), listed.stderr
    dumped = _cli(secured, "reader", "map", "--topic", seeded, "dump")
    assert dumped.returncode == 0, dumped.stderr
    assert [json.loads(line) for line in dumped.stdout.splitlines()] == [{"key": "a", "value": 1}]

    missing = unique_topic("sec-missing", NAMESPACE)
    absent = _cli(secured, "reader", "map", "--topic", missing, "get", "a")
    assert absent.returncode == 3, absent.stderr
    assert f"topic {missing} does not exist" in absent.stderr
    assert "Traceback" not in absent.stderr
    stats = requests.get(
        f"{secured.admin_url}/admin/v2/{topic_path(missing)}/stats",
        headers=secured.headers("admin"),
        timeout=30,
    )
    assert stats.status_code == 404, stats.text  # the read created nothing

    # writing still needs the produce permission: a clear refusal, nothing changed
    put = _cli(secured, "reader", "map", "--topic", seeded, "put", "a", "2")
    assert put.returncode != 0
    assert "not permitted" in put.stderr
    assert "Traceback" not in put.stderr
    assert _items(secured, seeded) == {"a": 1}


def _function_context(
    client: pulsar.Client, user_config: dict[str, Any], secrets: dict[str, str]
) -> Any:
    """What a function instance's runtime context offers the packaged functions, its
    secrets included (in-process: this broker runs no functions worker)."""
    return SimpleNamespace(
        get_user_config_value=user_config.get,
        get_function_tenant=lambda: "public",
        get_function_namespace=lambda: "default",
        get_function_name=lambda: "sec-fn",
        get_instance_id=lambda: 0,
        get_pulsar_client=lambda: client,
        get_secret=secrets.get,
        get_logger=lambda: logging.getLogger("function"),
        record_metric=lambda *_: None,
    )


def _create_request(fqn: str) -> str:
    config = {"className": "x.Y", "inputs": ["persistent://public/default/in"]}
    return json.dumps({"op": "create", "fqn": fqn, "config": config})


def test_a_functions_admin_calls_authenticate_with_its_admin_token_secret(
    secured: SecuredBroker,
) -> None:
    """A packaged function (the metadata manager) on a broker enforcing authentication and
    authorization: its client is the worker's (a super-user role here), its admin calls
    carry the function secret ``adminToken`` and nothing else."""
    client = secured.client("admin")
    try:
        topic = unique_topic("sec-fn", NAMESPACE)
        config = {"adminUrl": secured.admin_url, "metadataTopic": topic}
        manager = FunctionMetadataManager()
        try:
            context = _function_context(
                client, config, {"adminToken": secured.authority.token("admin")}
            )
            answer = json.loads(manager.process(_create_request("public/default/f"), context))
            assert answer["ok"], answer
        finally:
            manager.close()
        retention = requests.get(
            f"{secured.admin_url}/admin/v2/{topic_path(topic)}/retention",
            params={"applied": "false"},
            headers=secured.headers("admin"),
            timeout=30,
        )
        assert retention.json() == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}

        fresh = unique_topic("sec-fn-refused", NAMESPACE)
        # the refusal names the secret to set, and whether it was set
        for secrets, said in (
            ({}, "'adminToken', which is not set"),
            ({"adminToken": secured.authority.token("reader")}, "'adminToken', which is set"),
        ):
            manager = FunctionMetadataManager()
            refused = _function_context(
                client, {"adminUrl": secured.admin_url, "metadataTopic": fresh}, secrets
            )
            try:
                with pytest.raises(PermissionDeniedError, match="not permitted") as raised:
                    manager.process(_create_request("public/default/g"), refused)
                assert said in str(raised.value), raised.value
            finally:
                manager.close()
        stats = requests.get(
            f"{secured.admin_url}/admin/v2/{topic_path(fresh)}/stats",
            headers=secured.headers("admin"),
            timeout=30,
        )
        assert stats.status_code == 404, stats.text  # a refused open created nothing
    finally:
        client.close()
