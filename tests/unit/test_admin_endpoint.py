"""AdminEndpoint: the one value describing how to reach the admin API, and how the
constructors' ``admin_url=`` / ``admin=`` / deprecated keywords resolve into it."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from pulsar_state import AdminEndpoint, ConfigurationError
from pulsar_state.cluster.auth import ClusterAuth
from pulsar_state.cluster.endpoint import resolve_admin


def _files(tmp_path: Path) -> tuple[str, str, str]:
    paths = []
    for name in ("ca.pem", "client.pem", "client.key"):
        path = tmp_path / name
        path.write_text("-----BEGIN X-----\n")
        paths.append(str(path))
    return paths[0], paths[1], paths[2]


def test_a_tls_cluster_auth_makes_an_endpoint_with_the_client_certificate(
    tmp_path: Path,
) -> None:
    ca, cert, key = _files(tmp_path)
    auth = ClusterAuth(
        auth_plugin="org.apache.pulsar.client.impl.auth.AuthenticationTls",
        auth_params=f"tlsCertFile:{cert},tlsKeyFile:{key}",
        tls_trust_cert_path=ca,
    )
    endpoint = auth.admin_endpoint("https://pulsar:8443")
    assert endpoint == AdminEndpoint(
        url="https://pulsar:8443", tls_trust_cert_path=ca, client_cert=(cert, key)
    )
    assert endpoint.verify() == ca
    assert endpoint.with_url("https://other:8443").client_cert == (cert, key)
    token = ClusterAuth(auth_token="jwt-1").admin_endpoint("http://pulsar:8080")
    assert token.headers == {"Authorization": "Bearer jwt-1"} and token.client_cert is None
    assert "jwt-1" not in repr(token)  # credentials stay out of logs


def test_bad_endpoints_are_refused_at_construction(tmp_path: Path) -> None:
    ca, cert, _ = _files(tmp_path)
    with pytest.raises(ConfigurationError, match="http"):
        AdminEndpoint(url="pulsar://x:6650")
    with pytest.raises(ConfigurationError, match="not a file"):
        AdminEndpoint(url="https://x", tls_trust_cert_path=str(tmp_path / "nope.pem"))
    with pytest.raises(ConfigurationError, match="not a file"):
        AdminEndpoint(url="https://x", client_cert=(cert, str(tmp_path / "nope.key")))
    with pytest.raises(ConfigurationError, match="certificate file, key file"):
        AdminEndpoint(url="https://x", client_cert=cert)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="bool"):
        AdminEndpoint(url="https://x", tls_allow_insecure="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="tlsKeyFile"):
        ClusterAuth(auth_plugin="tls", auth_params=f"tlsCertFile:{cert}").admin_endpoint(
            "https://x"
        )
    assert AdminEndpoint(url="https://x", tls_trust_cert_path=ca).tls_trust_cert_path == ca


def test_admin_url_is_the_shorthand_and_admin_the_whole_value() -> None:
    assert resolve_admin(None, None) is None
    assert resolve_admin("http://x:8080", None) == AdminEndpoint(url="http://x:8080")
    endpoint = AdminEndpoint(url="http://x:8080", headers={"Authorization": "Bearer t"})
    assert resolve_admin(None, endpoint) is endpoint
    with pytest.raises(ConfigurationError, match="not both"):
        resolve_admin("http://x:8080", endpoint)
    with pytest.raises(ConfigurationError, match="AdminEndpoint"):
        resolve_admin(None, "http://x:8080")  # type: ignore[arg-type]


def test_the_old_separate_keywords_still_work_with_a_deprecation_warning(tmp_path: Path) -> None:
    ca, _, _ = _files(tmp_path)
    legacy = {
        "admin_headers": {"Authorization": "Bearer t"},
        "admin_tls_trust_cert_path": ca,
        "admin_tls_allow_insecure": False,
    }
    with pytest.warns(DeprecationWarning, match="admin_headers, admin_tls_trust_cert_path"):
        got = resolve_admin("https://x", None, legacy=legacy)
    assert got == AdminEndpoint(
        url="https://x", headers={"Authorization": "Bearer t"}, tls_trust_cert_path=ca
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unset ones warn about nothing
        assert resolve_admin("https://x", None, legacy=dict.fromkeys(legacy)) == AdminEndpoint(
            url="https://x"
        )
    with pytest.raises(ConfigurationError, match="set these on the AdminEndpoint"):
        resolve_admin(None, AdminEndpoint(url="https://x"), legacy=legacy)
