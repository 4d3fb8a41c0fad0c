"""``client.conf`` (``PULSAR_CLIENT_CONF``) gives the CLI's connection defaults, as
for ``pulsar-admin``; a flag or its environment variable wins (issue #28)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from pulsar_state.cli.options import admin_endpoint, cluster_auth, cluster_options

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@click.group()
@cluster_options
@click.pass_context
def probe(ctx: click.Context, **opts: Any) -> None:
    """Options on the group, as ``pulsar-state map`` has them."""
    ctx.obj = opts


@probe.command()
@click.pass_obj
def show(opts: dict[str, Any]) -> None:
    auth = cluster_auth(opts)
    endpoint = admin_endpoint(opts, auth)
    click.echo(
        json.dumps(
            {
                "service_url": opts["service_url"],
                "admin_url": endpoint.url,
                "authorization": (endpoint.headers or {}).get("Authorization"),
                "insecure": opts["tls_allow_insecure"],
            }
        )
    )


def _run(*args: str, env: dict[str, str]) -> tuple[int, dict[str, Any] | str]:
    base = {
        name: None
        for name in (
            "PULSAR_SERVICE_URL",
            "PULSAR_ADMIN_URL",
            "PULSAR_AUTH_TOKEN",
            "PULSAR_AUTH_PLUGIN",
            "PULSAR_AUTH_PARAMS",
            "PULSAR_CLIENT_CONF",
        )
    }
    result = CliRunner().invoke(probe, [*args, "show"], env={**base, **env})
    if result.exit_code != 0:
        return result.exit_code, result.output
    return 0, json.loads(result.output)


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    path = tmp_path / "client.conf"
    path.write_text(
        "# as pulsar-admin's conf/client.conf\n"
        "webServiceUrl=http://admin.example:8080/\n"
        "brokerServiceUrl=pulsar://broker.example:6650/\n"
        f"authPlugin={TOKEN_PLUGIN}\n"
        "authParams=token:from-conf\n"
        "tlsAllowInsecureConnection=true\n",
        encoding="utf-8",
    )
    return path


def test_without_a_client_conf_the_built_in_defaults() -> None:
    code, out = _run(env={})
    assert code == 0 and isinstance(out, dict)
    assert out["admin_url"].startswith("http://127.0.0.1:8080")
    assert out["service_url"] == "pulsar://127.0.0.1:6650"
    assert out["authorization"] is None and out["insecure"] is False


def test_client_conf_gives_the_defaults(conf: Path) -> None:
    code, out = _run(env={"PULSAR_CLIENT_CONF": str(conf)})
    assert code == 0 and isinstance(out, dict)
    assert out["admin_url"].startswith("http://admin.example:8080")
    assert out["service_url"] == "pulsar://broker.example:6650/"
    assert out["authorization"] == "Bearer from-conf"
    assert out["insecure"] is True


def test_environment_and_flags_win_over_client_conf(conf: Path) -> None:
    env = {"PULSAR_CLIENT_CONF": str(conf), "PULSAR_ADMIN_URL": "http://env.example:8080"}
    code, out = _run(env=env)
    assert code == 0 and isinstance(out, dict)
    assert out["admin_url"].startswith("http://env.example:8080")
    code, out = _run("--admin-url", "http://flag.example:8080", env=env)
    assert code == 0 and isinstance(out, dict)
    assert out["admin_url"].startswith("http://flag.example:8080")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_token_given_replaces_the_conf_authentication(conf: Path, how: str) -> None:
    env = {"PULSAR_CLIENT_CONF": str(conf)}
    args: tuple[str, ...] = ()
    if how == "flag":
        args = ("--auth-token", "given")
    else:
        env["PULSAR_AUTH_TOKEN"] = "given"
    code, out = _run(*args, env=env)
    assert code == 0 and isinstance(out, dict), out
    assert out["authorization"] == "Bearer given"


def test_use_tls_prefers_the_tls_urls(tmp_path: Path) -> None:
    path = tmp_path / "client.conf"
    path.write_text(
        "useTls=true\n"
        "webServiceUrl=http://h:8080\nwebServiceUrlTls=https://h:8443\n"
        "brokerServiceUrl=pulsar://h:6650\nbrokerServiceUrlTls=pulsar+ssl://h:6651\n",
        encoding="utf-8",
    )
    code, out = _run(env={"PULSAR_CLIENT_CONF": str(path)})
    assert code == 0 and isinstance(out, dict)
    assert out["admin_url"].startswith("https://h:8443")
    assert out["service_url"] == "pulsar+ssl://h:6651"


def test_a_client_conf_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    code, out = _run(env={"PULSAR_CLIENT_CONF": str(tmp_path / "missing.conf")})
    assert code == 2
    assert "PULSAR_CLIENT_CONF" in str(out) and "missing.conf" in str(out)
