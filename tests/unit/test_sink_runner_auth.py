"""The sink runner's authentication and TLS: its config's client.conf keys fill in
what the command line leaves unset; the command line wins where it sets a value."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_state import ConfigurationError
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.connectors.sink_runner import runner_auth


def _pem(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return str(path)


def test_the_configs_settings_apply_when_the_command_line_has_none(tmp_path: Path) -> None:
    ca, cert, key = (_pem(tmp_path, n) for n in ("ca.pem", "c.pem", "c.key"))
    config = {
        "tlsTrustCertsFilePath": ca,
        "tlsAllowInsecureConnection": "false",
        "authPlugin": "tls",
        "authParams": f"tlsCertFile:{cert},tlsKeyFile:{key}",
    }
    auth = runner_auth(config, None)
    assert auth == ClusterAuth(
        auth_plugin="tls", auth_params=config["authParams"], tls_trust_cert_path=ca
    )
    endpoint = auth.admin_endpoint("https://pulsar:8443")
    assert (endpoint.tls_trust_cert_path, endpoint.client_cert) == (ca, (cert, key))
    assert runner_auth({"tlsAllowInsecureConnection": True}).tls_allow_insecure is True
    assert runner_auth({}) == ClusterAuth()


def test_the_command_line_wins_where_it_sets_a_value(tmp_path: Path) -> None:
    ours, theirs = _pem(tmp_path, "ours.pem"), _pem(tmp_path, "theirs.pem")
    config = {"tlsTrustCertsFilePath": theirs, "authPlugin": "token", "authParams": "token:yaml"}
    flags = ClusterAuth(auth_token="flag", tls_trust_cert_path=ours)
    assert runner_auth(config, flags) == flags
    # a flag left unset is filled from the config, field by field
    assert runner_auth(config, ClusterAuth(auth_token="flag")) == ClusterAuth(
        auth_token="flag", tls_trust_cert_path=theirs
    )
    merged = runner_auth(config, ClusterAuth(tls_trust_cert_path=ours))
    assert (merged.token(), merged.tls_trust_cert_path) == ("yaml", ours)


def test_bad_config_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="tlsTrustCertsFilePath"):
        runner_auth({"tlsTrustCertsFilePath": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigurationError, match="tlsAllowInsecureConnection"):
        runner_auth({"tlsAllowInsecureConnection": "yes"})
    with pytest.raises(ConfigurationError, match="authParams"):
        runner_auth({"authPlugin": "tls", "authParams": 7})
    with pytest.raises(ConfigurationError, match="unsupported auth plugin"):
        runner_auth({"authPlugin": "kerberos", "authParams": "x"})
    with pytest.raises(ConfigurationError, match="needs auth params"):
        runner_auth({"authPlugin": "token"})
