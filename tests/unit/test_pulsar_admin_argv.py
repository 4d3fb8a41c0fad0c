"""What ``PulsarAdminCli`` runs: secrets in a private client config, never in argv.

The JVM is not started here (see ``tests/integration/test_pulsar_admin_secrets.py``
for the real ``pulsar-admin``); these check the command, environment and file.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.deploy.distribution import PulsarDistribution
from pulsar_state.deploy.pulsar_admin import PulsarAdminCli, client_conf_line

TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2lnbmF0dXJl"


@pytest.fixture
def distribution(tmp_path: Path) -> PulsarDistribution:
    """A distribution directory with the files ``PulsarAdminCli`` looks at."""
    dist = PulsarDistribution(cache_dir=tmp_path / "cache")
    (dist.root / "bin").mkdir(parents=True)
    (dist.root / "conf").mkdir()
    dist.pulsar_bin.write_text("#!/bin/sh\n")
    (dist.root / ".pulsar-state-verified").write_text("")
    (dist.root / "conf" / "client.conf").write_text(
        "webServiceUrl=http://localhost:8080/\nauthPlugin=\nauthParams=\n"
    )
    return dist


def _cli(distribution: PulsarDistribution, auth: ClusterAuth | None) -> PulsarAdminCli:
    return PulsarAdminCli(admin_url="https://admin:8443", distribution=distribution, auth=auth)


def test_a_token_goes_to_a_private_file_not_the_command_line(
    distribution: PulsarDistribution, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PULSAR_CLIENT_CONF", raising=False)
    trust = tmp_path / "ca.pem"
    trust.write_text("")
    auth = ClusterAuth(auth_token=TOKEN, tls_trust_cert_path=str(trust))
    with _cli(distribution, auth).invocation("tenants", "list") as (argv, env):
        assert not any(TOKEN in arg for arg in argv)
        assert "--auth-params" not in argv and "--auth-plugin" not in argv
        assert argv[-4:] == ["--tls-trust-cert-path", str(trust), "tenants", "list"]
        conf = Path(env["PULSAR_CLIENT_CONF"])
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600
        assert stat.S_IMODE(conf.parent.stat().st_mode) == 0o700
        lines = conf.read_text().splitlines()
        # the distribution's config first, then ours, which win (a later key overrides)
        assert lines[0] == "webServiceUrl=http://localhost:8080/"
        assert lines[-2:] == [
            "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
            f"authParams=token:{TOKEN}",
        ]
        assert not any(TOKEN in value for key, value in env.items() if key != "PULSAR_CLIENT_CONF")
    assert not conf.exists() and not conf.parent.exists()


def test_the_users_client_config_is_kept(
    distribution: PulsarDistribution, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "mine.conf"
    own.write_text("tlsAllowInsecureConnection=true")  # no final newline
    monkeypatch.setenv("PULSAR_CLIENT_CONF", str(own))
    auth = ClusterAuth(
        auth_plugin="basic", auth_params=json.dumps({"userId": "u", "password": "p"})
    )
    with _cli(distribution, auth).invocation("tenants", "list") as (argv, env):
        text = Path(env["PULSAR_CLIENT_CONF"]).read_text()
        assert text.startswith("tlsAllowInsecureConnection=true\nauthPlugin=")
        assert '"password": "p"' in text and not any('"p"' in arg for arg in argv)
    assert own.read_text() == "tlsAllowInsecureConnection=true"


def test_without_auth_nothing_is_written(
    distribution: PulsarDistribution, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PULSAR_CLIENT_CONF", raising=False)
    with _cli(distribution, None).invocation("tenants", "list") as (argv, env):
        assert "PULSAR_CLIENT_CONF" not in env
        assert argv[1:] == ["--admin-url", "https://admin:8443", "tenants", "list"]


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("token:abc.def", "k=token:abc.def"),
        ('{"password": "a\\b"}', '{"password": "a\\\\b"}'),
        (" lead", "\\ lead"),
        ("two\nlines", "two\\nlines"),
        ("é", "\\u00e9"),
        ("\U0001f511", "\\ud83d\\udd11"),
    ],
)
def test_client_conf_values_are_escaped_as_java_properties(value: str, line: str) -> None:
    expected = line if line.startswith("k=") else f"k={line}"
    assert client_conf_line("k", value) == expected
