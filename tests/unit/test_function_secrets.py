"""Secrets and instance labels of function instances: pure logic, no broker.

``_Context`` has the methods of the Python runtime's ``ContextImpl`` these
helpers call (``get_secret`` returns ``None`` for an unknown name, as there).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from pulsar_state.connectors.sql_backend import PASSWORD_ENV, database_password
from pulsar_state.deploy.functions_deploy import render_config
from pulsar_state.runtime.instance_metrics import InstanceLabels
from pulsar_state.runtime.secrets import function_admin_headers


class _Context:
    def __init__(self, *, secrets: dict[str, str], user_config: dict[str, Any]) -> None:
        self.secrets = secrets
        self.user_config = user_config

    def get_secret(self, name: str) -> str | None:
        return self.secrets.get(name)

    def get_user_config_value(self, key: str) -> Any:
        return self.user_config.get(key)

    def get_logger(self) -> logging.Logger:
        return logging.getLogger("function")


URL = "postgresql://sink@db:5432/orders"


def test_the_database_password_comes_from_the_function_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = _Context(secrets={"databasePassword": "s3cret"}, user_config={})
    assert database_password({"database": URL}, context) == "s3cret"
    # the secret wins over a deprecated plain one
    assert database_password({"database": URL, "databasePassword": "old"}, context) == "s3cret"
    assert "deprecated" not in caplog.text


def test_a_plain_password_still_works_with_a_deprecation_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = _Context(secrets={}, user_config={})
    with caplog.at_level(logging.WARNING):
        assert database_password({"database": URL, "databasePassword": "old"}, context) == "old"
    assert "deprecated: the sink's databasePassword is in the plain config" in caplog.text
    assert "old" not in caplog.text  # the password itself is never logged
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        in_url = {"database": "postgresql://sink:pw@db:5432/orders"}
        assert database_password(in_url, context) is None  # the URL's own password applies
    assert "database URL holds a password" in caplog.text
    assert ":pw@" not in caplog.text


def test_the_runner_takes_the_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert database_password({"database": URL}) == "from-env"
    monkeypatch.delenv(PASSWORD_ENV)
    assert database_password({"database": URL}) is None


def test_the_admin_token_comes_from_the_function_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context = _Context(secrets={"adminToken": "jwt-1"}, user_config={"adminToken": "jwt-old"})
    assert function_admin_headers(context) == {"Authorization": "Bearer jwt-1"}
    plain = _Context(secrets={}, user_config={"adminToken": "jwt-old"})
    with caplog.at_level(logging.WARNING):
        assert function_admin_headers(plain) == {"Authorization": "Bearer jwt-old"}
    assert "deprecated: userConfig.adminToken" in caplog.text
    assert function_admin_headers(_Context(secrets={}, user_config={})) is None


def test_deploy_puts_the_function_token_in_the_secrets_and_keeps_a_configured_one() -> None:
    shipped = {"name": "f", "userConfig": {"table": "kv"}}
    config, filled = render_config(shipped, admin_url="http://a:8080", admin_token="jwt")
    assert config["secrets"] == {"adminToken": "jwt"}
    assert "userConfig" in config and "adminToken" not in config["userConfig"]
    assert any(f.startswith("secrets.adminToken") for f in filled)
    assert not any("jwt" in f for f in filled)  # what deploy prints holds no token
    own = {**shipped, "secrets": {"adminToken": "mine", "databasePassword": "pw"}}
    config, filled = render_config(own, admin_url="http://a:8080", admin_token="jwt")
    assert config["secrets"] == {"adminToken": "mine", "databasePassword": "pw"}
    config, _ = render_config(shipped, admin_url="http://a:8080")
    assert "secrets" not in config


def test_instance_labels_keep_two_instances_series_apart() -> None:
    registries = []
    for instance in ("0", "1"):
        registry = CollectorRegistry()
        writes = Counter("pss_writes", "writes", ["topic"], registry=None)
        writes.labels("t").inc(3)
        registry.register(InstanceLabels([writes], {"instance_id": instance, "fqfn": "a/b/c"}))
        registries.append(generate_latest(registry).decode())
    assert 'pss_writes_total{fqfn="a/b/c",instance_id="0",topic="t"} 3.0' in registries[0]
    assert 'pss_writes_total{fqfn="a/b/c",instance_id="1",topic="t"} 3.0' in registries[1]
