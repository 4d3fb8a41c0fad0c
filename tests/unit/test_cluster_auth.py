"""ClusterAuth: the options as pulsar-admin spells them, turned into client and admin settings."""

from __future__ import annotations

import base64
from pathlib import Path

import pulsar
import pytest

from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.errors import ConfigurationError

TOKEN_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def test_a_token_by_any_spelling_gives_the_same_header(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("jwt-1\n")
    spellings = [
        ClusterAuth(auth_token="jwt-1"),
        ClusterAuth(auth_plugin="token", auth_params="token:jwt-1"),
        ClusterAuth(auth_plugin=TOKEN_CLASS, auth_params=f"file://{token_file}"),
        ClusterAuth(auth_plugin=TOKEN_CLASS.upper(), auth_params="jwt-1"),
    ]
    for auth in spellings:
        assert auth.admin_headers() == {"Authorization": "Bearer jwt-1"}, auth
        assert isinstance(auth.client_kwargs()["authentication"], pulsar.AuthenticationToken)
        assert auth.pulsar_admin_args() == [
            "--auth-plugin",
            TOKEN_CLASS,
            "--auth-params",
            "token:jwt-1",
        ]


def test_basic_auth_and_tls_trust() -> None:
    auth = ClusterAuth(
        auth_plugin="basic",
        auth_params='{"userId": "u", "password": "p"}',
        tls_allow_insecure=True,
        tls_hostname_verification=True,
    )
    assert auth.admin_headers() == {"Authorization": "Basic " + base64.b64encode(b"u:p").decode()}
    kwargs = auth.client_kwargs()
    assert kwargs["tls_allow_insecure_connection"] and kwargs["tls_validate_hostname"]
    assert auth.requests_verify() is False
    assert auth.pulsar_admin_args()[-2:] == [
        "--tls-allow-insecure",
        "--tls-enable-hostname-verification",
    ]
    assert ClusterAuth().admin_headers() is None
    assert ClusterAuth().client_kwargs() == {"authentication": None}
    assert ClusterAuth().requests_verify() is True


def test_tls_client_certificates_go_to_the_admin_api_too(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    auth = ClusterAuth(
        auth_plugin="tls",
        auth_params="tlsCertFile:/c.pem,tlsKeyFile:/k.pem",
        tls_trust_cert_path=str(ca),
    )
    assert auth.admin_headers() is None
    assert auth.admin_client_cert() == ("/c.pem", "/k.pem")
    assert auth.requests_verify() == str(ca)
    assert auth.client_kwargs()["tls_trust_certs_file_path"] == str(ca)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"auth_token": "a", "auth_plugin": "token", "auth_params": "b"}, "not both"),
        ({"auth_plugin": "kerberos", "auth_params": "x"}, "unsupported auth plugin"),
        ({"auth_plugin": "token"}, "needs auth params"),
        ({"tls_trust_cert_path": "/no/such/ca.pem"}, "is not a file"),
    ],
)
def test_bad_settings_are_clear_errors(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ClusterAuth(**kwargs)  # type: ignore[arg-type]


def test_oauth2_params_missing_a_setting_are_a_clear_error() -> None:
    auth = ClusterAuth(auth_plugin="oauth2", auth_params='{"issuer_url": "https://i"}')
    with pytest.raises(ConfigurationError, match="client_id, client_secret"):
        auth.admin_endpoint("http://127.0.0.1:8080")
